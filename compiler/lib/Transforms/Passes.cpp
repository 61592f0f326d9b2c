//===- Passes.cpp - attn pass registration and pipelines ------------------===//

#include "attn/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Matchers.h"
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

namespace {
/// Whether `formula` keeps every pair with kv <= q (prefix-LM's kv <= q or
/// kv < 2048): the causal half-plane q - kv + c >= 0 with c >= 0, an any_of
/// with a term that keeps it, or an all_of whose terms all do. (A none_of
/// is not looked into: its terms would have to exclude the half-plane.)
bool keepsCausalHalfPlane(Attribute term) {
  if (auto ge = dyn_cast<AffineGeAttr>(term))
    return ge.getBatch() == 0 && ge.getHead() == 0 && ge.getQ() > 0 && ge.getKv() == -ge.getQ() &&
           ge.getC() >= 0;
  auto formula = dyn_cast<TileFormulaAttr>(term);
  if (!formula)
    return false;
  ArrayRef<Attribute> terms = formula.getTerms().getValue();
  if (formula.getKind() == TileFormulaKind::any_of)
    return llvm::any_of(terms, keepsCausalHalfPlane);
  return formula.getKind() == TileFormulaKind::all_of && !terms.empty() &&
         llvm::all_of(terms, keepsCausalHalfPlane);
}

/// Whether computing `value` takes a transcendental function or a division
/// by a value that is not a constant (T5's log-spaced buckets), not only
/// index arithmetic, table reads and multiplies (a division by a constant
/// is lowered to one).
bool computesTranscendental(Value value) {
  return definedThrough(value, [](Operation *op) {
    if (auto divide = dyn_cast<arith::DivFOp>(op))
      return !matchPattern(divide.getRhs(), m_Constant());
    return isa<math::LogOp, math::Log2Op, math::Log10Op, math::Log1pOp, math::ExpOp, math::Exp2Op,
               math::ExpM1Op, math::PowFOp, math::FPowIOp, math::SqrtOp, math::RsqrtOp,
               math::CbrtOp, math::TanhOp, math::TanOp, math::SinOp, math::CosOp, math::SinhOp,
               math::CoshOp, math::AsinOp, math::AcosOp, math::AtanOp, math::Atan2Op, math::AsinhOp,
               math::AcoshOp, math::AtanhOp, math::ErfOp, math::ErfcOp>(op);
  });
}
} // namespace

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
  result.causalMask = isa<CausalAttr>(kernel.getMask());
  result.causalOnly = result.causalMask && noMaskMod;
  const bool slidingWindow = isa<SlidingWindowAttr>(kernel.getMask());
  result.slidingWindowOnly = slidingWindow && noMaskMod;
  // What attn-classify-blocks will record (the plan runs before it, on the
  // region), or, once the region is lowered, what it recorded.
  const TileFormulaAttr formula =
      kernel.getMaskMod().empty() ? kernel.getMaskTileFormulaAttr() : classifyMaskMod(kernel);
  result.storedKeyBits = !noMaskMod && !formula;
  result.maskModKeepsCausal =
      !noMaskMod && formula && !slidingWindow && keepsCausalHalfPlane(formula);
  const bool softmax = isa<SoftmaxAttr>(kernel.getNormalizer());
  if (softmax && !kernel.getScoreMod().empty()) {
    SmallVector<Value> diagonals = findScoreDiagonals(kernel.getScoreMod().front());
    diagonals.truncate(std::min<size_t>(diagonals.size(), ::attn::kMaxScoreDiagonals));
    result.scoreDiagonals = static_cast<int>(diagonals.size());
    result.transcendentalScoreDiagonals = llvm::any_of(diagonals, computesTranscendental);
  }
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
