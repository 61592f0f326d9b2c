//===- Passes.cpp - attn pass registration and pipelines ------------------===//

#include "attn/Transforms/Passes.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/IR/SymbolTable.h"
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
                                   const AttnTileOptions &tileOptions) {
  pm.addPass(createAttnTile(tileOptions));
  pm.addPass(createAttnPlanSmem());
}

void mlir::attn::buildEmitPipeline(OpPassManager &pm) {
  pm.addPass(createAttnClassifyBlocks());
  pm.addPass(createAttnLowerMods());
  pm.addPass(createAttnEmitCuda());
}

void mlir::attn::buildBackwardPipeline(OpPassManager &pm, const AttnTileOptions &tileOptions) {
  pm.addPass(createAttnClassifyBlocks());
  pm.addPass(createAttnDifferentiateMods());
  buildPlanPipeline(pm, tileOptions);
  pm.addPass(createAttnLowerMods());
}

/// Whether the backward's score_mod derivative (attn-differentiate-mods'
/// function, lowered or not) adds to a capture's gradient by diagonal.
static bool addsGradientByDiagonal(KernelOp kernel) {
  FlatSymbolRefAttr vjp = kernel.getBackwardScoreModVjpFnAttr();
  Operation *function = vjp ? SymbolTable::lookupNearestSymbolFrom(kernel, vjp) : nullptr;
  if (!function)
    return false;
  WalkResult found = function->walk([](Operation *op) {
    auto call = dyn_cast<emitc::CallOpaqueOp>(op);
    return op->hasAttr(kPerDiagonalAttr) || (call && isDiagonalGradientCallee(call.getCallee()))
               ? WalkResult::interrupt()
               : WalkResult::advance();
  });
  return found.wasInterrupted();
}

void mlir::attn::registerAttnPasses() {
  registerAttnTransformsPasses();
  PassPipelineRegistration<PlanPipelineOptions>(
      "attn-plan", "Plan attn.kernel ops: attn-tile, then attn-plan-smem",
      [](OpPassManager &pm, const PlanPipelineOptions &options) {
        AttnTileOptions tileOptions;
        tileOptions.tileOverride = options.tileOverride;
        buildPlanPipeline(pm, tileOptions);
      });
}

::attn::TileProblem mlir::attn::getTileProblem(KernelOp kernel) {
  ProblemAttr problem = kernel.getProblem();
  ::attn::TileProblem result;
  result.headDim = static_cast<int>(problem.getHeadDim());
  result.elementBytes = static_cast<int>(problem.getElementBytes());
  result.evenTiles = isa<NoMaskAttr>(kernel.getMask()) &&
                     !kernel.getMaskModFnAttr() && kernel.getMaskMod().empty();
  result.hasScoreMod = !kernel.getScoreMod().empty() || kernel.getScoreModFnAttr();
  result.diagonalGradient = addsGradientByDiagonal(kernel);
  const bool noMaskMod = !kernel.getMaskModFnAttr() && kernel.getMaskMod().empty();
  result.hasMaskMod = !noMaskMod;
  result.causalOnly = isa<CausalAttr>(kernel.getMask()) && noMaskMod;
  result.slidingWindowOnly = isa<SlidingWindowAttr>(kernel.getMask()) && noMaskMod;
  // What attn-classify-blocks will record (the plan runs before it, on the
  // region), or, once the region is lowered, what it recorded.
  const bool classified = kernel.getMaskMod().empty() ? bool(kernel.getMaskTileFormulaAttr())
                                                      : bool(classifyMaskMod(kernel));
  result.storedKeyBits = !noMaskMod && !classified;
  const bool softmax = isa<SoftmaxAttr>(kernel.getNormalizer());
  if (softmax && !kernel.getScoreMod().empty())
    result.scoreDiagonals = std::min<int>(::attn::kMaxScoreDiagonals,
                                          findScoreDiagonals(kernel.getScoreMod().front()).size());
  // The score range the kernel will see: the region's bound (its output
  // scale still inside), which attn-lower-mods records as score_bound times
  // score_output_scale; once lowered, those two. A score_bound written on
  // an unlowered region the analysis cannot bound plans as unbounded. The
  // range is computed in double, the kernel's in float: a cap within a
  // rounding of 80 / log2(e) may plan otherwise than it runs (the plan
  // only).
  std::optional<double> bound;
  if (!kernel.getScoreMod().empty())
    bound = getScoreBound(kernel.getScoreMod().front().getTerminator()->getOperand(0));
  else if (FloatAttr recorded = kernel.getScoreBoundAttr())
    bound = recorded.getValueAsDouble() *
            (kernel.getScoreOutputScaleAttr() ? kernel.getScoreOutputScaleAttr().getValueAsDouble()
                                              : 1.0);
  const double rangeLog2 = bound ? *bound * M_LOG2E : 0.0;
  result.fixedSoftmaxBase = softmax && problem.getElementType().isBF16() && rangeLog2 > 0.0 &&
                            rangeLog2 <= ::attn::kMaxFixedSoftmaxRangeLog2;
  return result;
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
  config.softmaxChains = tile.getSoftmaxChains();
  config.persistentBlocksPerSm = tile.getPersistentBlocksPerSm();
  return config;
}

TilePlanAttr mlir::attn::getTilePlanAttr(MLIRContext *context,
                                         const ::attn::TileConfig &config) {
  return TilePlanAttr::get(context, config.blockM, config.blockN,
                           config.stages, config.consumerWarpgroups,
                           config.producerWarpgroups, config.consumerRegisters,
                           config.producerRegisters, config.softmaxChains,
                           config.persistentBlocksPerSm);
}
