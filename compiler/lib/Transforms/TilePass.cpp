//===- TilePass.cpp - choose the sm_90a tile plan -------------------------===//
//
// attn-tile: records `tile = #attn.tile<...>` on each attn.kernel, from the
// head-dimension heuristic, an existing plan, or a tile override, after
// checking it against the sm_90a constraints.
//
//===----------------------------------------------------------------------===//

#include "attn/Compiler/TileConstraints.h"
#include "attn/Transforms/Passes.h"

namespace mlir {
namespace attn {
#define GEN_PASS_DEF_ATTNTILE
#include "attn/Transforms/Passes.h.inc"
} // namespace attn
} // namespace mlir

using namespace mlir;
using namespace mlir::attn;

namespace {
struct AttnTilePass : public mlir::attn::impl::AttnTileBase<AttnTilePass> {
  using Base::Base;

  void runOnOperation() override {
    ::attn::TileOverride override;
    std::optional<std::string> overrideError =
        ::attn::parseTileOverride(tileOverride, override);
    bool hasOverride = !override.empty();

    bool failed = false;
    getOperation()->walk([&](KernelOp kernel) {
      if (overrideError) {
        kernel.emitOpError() << "invalid tile-override '" << tileOverride
                             << "': " << *overrideError;
        failed = true;
        return;
      }
      ::attn::TileProblem problem = getTileProblem(kernel.getProblem());
      ::attn::TileConfig config;
      TilePlanAttr existing = kernel.getTileAttr();
      if (existing && !hasOverride)
        config = getTileConfig(existing);
      else
        config = ::attn::applyTileOverride(::attn::defaultTileConfig(problem),
                                           override);

      if (std::optional<std::string> violation =
              ::attn::checkTileLegality(problem, config)) {
        kernel.emitOpError() << "illegal tile plan for sm_90a: "
                             << *violation;
        failed = true;
        return;
      }
      kernel.setTileAttr(getTilePlanAttr(kernel.getContext(), config));
    });
    if (failed)
      signalPassFailure();
  }
};
} // namespace
