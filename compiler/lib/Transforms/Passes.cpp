//===- Passes.cpp - attn pass registration and pipelines ------------------===//

#include "attn/Transforms/Passes.h"

#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;
using namespace mlir::attn;

namespace {
struct PlanPipelineOptions
    : public PassPipelineOptions<PlanPipelineOptions> {
  Option<std::string> tileOverride{
      *this, "tile-override",
      llvm::cl::desc("Comma-separated key=value tile settings passed to "
                     "attn-tile"),
      llvm::cl::init("")};
};
} // namespace

void mlir::attn::buildPlanPipeline(OpPassManager &pm,
                                   llvm::StringRef tileOverride) {
  AttnTileOptions tileOptions;
  tileOptions.tileOverride = tileOverride.str();
  pm.addPass(createAttnTile(tileOptions));
  pm.addPass(createAttnPlanSmem());
}

void mlir::attn::buildEmitPipeline(OpPassManager &pm) {
  pm.addPass(createAttnClassifyBlocks());
  pm.addPass(createAttnLowerMods());
  pm.addPass(createAttnEmitCuda());
}

void mlir::attn::registerAttnPasses() {
  registerAttnTransformsPasses();
  PassPipelineRegistration<PlanPipelineOptions>(
      "attn-plan", "Plan attn.kernel ops: attn-tile, then attn-plan-smem",
      [](OpPassManager &pm, const PlanPipelineOptions &options) {
        buildPlanPipeline(pm, options.tileOverride);
      });
}

::attn::TileProblem mlir::attn::getTileProblem(ProblemAttr problem) {
  return {static_cast<int>(problem.getHeadDim()),
          static_cast<int>(problem.getElementBytes())};
}

::attn::TileConfig mlir::attn::getTileConfig(TilePlanAttr tile) {
  ::attn::TileConfig config;
  config.blockM = tile.getBlockM();
  config.blockN = tile.getBlockN();
  config.stages = tile.getStages();
  config.consumerWarpgroups = tile.getConsumerWarpgroups();
  config.producerWarpgroups = tile.getProducerWarpgroups();
  config.consumerRegisters = tile.getConsumerRegisters();
  config.producerRegisters = tile.getProducerRegisters();
  return config;
}

TilePlanAttr mlir::attn::getTilePlanAttr(MLIRContext *context,
                                         const ::attn::TileConfig &config) {
  return TilePlanAttr::get(context, config.blockM, config.blockN,
                           config.stages, config.consumerWarpgroups,
                           config.producerWarpgroups, config.consumerRegisters,
                           config.producerRegisters);
}
