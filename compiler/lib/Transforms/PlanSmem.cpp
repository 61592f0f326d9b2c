//===- PlanSmem.cpp - lay out shared memory -------------------------------===//
//
// attn-plan-smem: turns the tile plan into the kernel's shared-memory buffers
// and places them with the lifetime-aware first-fit allocator.
//
//===----------------------------------------------------------------------===//

#include "attn/Compiler/TileConstraints.h"
#include "attn/Transforms/Passes.h"
#include "attn/Transforms/SmemAllocator.h"

#include "mlir/IR/Builders.h"

namespace mlir {
namespace attn {
#define GEN_PASS_DEF_ATTNPLANSMEM
#include "attn/Transforms/Passes.h.inc"
} // namespace attn
} // namespace mlir

using namespace mlir;
using namespace mlir::attn;

namespace {
SmemPlanAttr smemPlanAttrOf(MLIRContext *ctx, const ::attn::SmemLayout &layout) {
  SmallVector<Attribute> buffers;
  for (const ::attn::SmemPlacement &buffer : layout.buffers)
    buffers.push_back(SmemBufferAttr::get(ctx, buffer.name, buffer.offset, buffer.size,
                                          buffer.align, buffer.swizzle, buffer.slots,
                                          buffer.aliases));
  return SmemPlanAttr::get(ctx, layout.total, ArrayAttr::get(ctx, buffers));
}

/// The backward's layout, for a kernel with a `backward_tile` plan: its
/// optional buffers as backwardSmemChoice picks them. A plan written
/// in the spec rather than by attn-tile is checked first.
LogicalResult planBackwardSmem(KernelOp kernel) {
  const ::attn::TileProblem problem = getTileProblem(kernel);
  const ::attn::TileConfig config = getTileConfig(kernel.getBackwardTileAttr());
  if (std::optional<std::string> violation = ::attn::checkBackwardTileLegality(problem, config))
    return kernel.emitOpError("backward plan is illegal: ") << *violation;
  const ::attn::BackwardSmemChoice choice = ::attn::backwardSmemChoice(problem, config);
  const ::attn::SmemLayout layout = ::attn::allocateSharedMemory(::attn::backwardKernelSmemRequests(
      problem, config, choice.dqStagingBuffers, choice.diagonalSums));
  const int64_t launchBytes = layout.total + SmemPlanAttr::kBaseAlignSlack;
  if (launchBytes > ::attn::kMaxSharedMemoryPerBlock)
    return kernel.emitOpError() << "shared-memory capacity: the backward plan needs "
                                << launchBytes << " bytes, limit "
                                << ::attn::kMaxSharedMemoryPerBlock;
  kernel.setBackwardSmemAttr(smemPlanAttrOf(kernel.getContext(), layout));
  return success();
}

struct AttnPlanSmemPass : public mlir::attn::impl::AttnPlanSmemBase<AttnPlanSmemPass> {
  using Base::Base;

  void runOnOperation() override {
    bool failed = false;
    getOperation()->walk([&](KernelOp kernel) {
      if (kernel.getBackwardTileAttr() && mlir::failed(planBackwardSmem(kernel))) {
        failed = true;
        return;
      }
      TilePlanAttr tile = kernel.getTileAttr();
      if (!tile) {
        kernel.emitOpError()
            << "has no 'tile' plan; run attn-tile first";
        failed = true;
        return;
      }
      ::attn::TileProblem problem = getTileProblem(kernel);
      ::attn::TileConfig config = getTileConfig(tile);
      auto allocate = [&] {
        return ::attn::allocateSharedMemory(
            kernel.getNormalizer().isLinearFamily()
                ? ::attn::linearKernelSmemRequests(problem, config)
                : ::attn::forwardKernelSmemRequests(problem, config));
      };
      ::attn::SmemLayout layout = allocate();
      int64_t launchBytes = layout.total + SmemPlanAttr::kBaseAlignSlack;
      // Staged score_mod values are an optimization: without room for two
      // windows per consumer they take one, and without room for one the
      // kernel reads the capture per pair.
      while (launchBytes > ::attn::kMaxSharedMemoryPerBlock && problem.scoreDiagonals > 0) {
        if (problem.scoreDiagonalWindows > 1)
          --problem.scoreDiagonalWindows;
        else
          problem.scoreDiagonals = 0;
        layout = allocate();
        launchBytes = layout.total + SmemPlanAttr::kBaseAlignSlack;
      }
      if (launchBytes > ::attn::kMaxSharedMemoryPerBlock) {
        kernel.emitOpError()
            << "shared-memory capacity: the plan needs " << launchBytes
            << " bytes (layout " << layout.total << " + "
            << SmemPlanAttr::kBaseAlignSlack
            << " base-alignment slack), limit "
            << ::attn::kMaxSharedMemoryPerBlock;
        failed = true;
        return;
      }

      kernel.setSmemAttr(smemPlanAttrOf(kernel.getContext(), layout));
    });
    if (failed)
      signalPassFailure();
  }
};
} // namespace
