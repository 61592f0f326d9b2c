//===- Passes.h - attn planning passes --------------------------*- C++ -*-===//

#ifndef ATTN_TRANSFORMS_PASSES_H
#define ATTN_TRANSFORMS_PASSES_H

#include "attn/Compiler/TileConstraints.h"
#include "attn/IR/AttnOps.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include <memory>
#include <string>

namespace mlir {
namespace attn {

#define GEN_PASS_DECL
#include "attn/Transforms/Passes.h.inc"

/// Adds the planning pipeline (attn-tile, then attn-plan-smem) to `pm`, whose
/// operation holds the attn.kernel ops (typically the module). An empty
/// `tileOverride` keeps the heuristic; see the attn-tile pass.
void buildPlanPipeline(OpPassManager &pm, llvm::StringRef tileOverride = "");

/// Adds what turns planned kernels into CUDA: attn-classify-blocks,
/// attn-lower-mods, then attn-emit-cuda. `pm` must run on a module.
void buildEmitPipeline(OpPassManager &pm);

/// Registers the passes (attn-tile, attn-plan-smem, attn-classify-blocks,
/// attn-lower-mods, attn-emit-cuda) and the `attn-plan`
/// pipeline (option `tile-override`) with the global registry, for
/// attn-opt style tools.
void registerAttnPasses();

/// The C++ type of a captured buffer of `rank` extents in the mod functions
/// attn-lower-mods emits (attn_dev::Capture in templates/device/captures.cuh).
std::string getCaptureCppType(Type elementType, int64_t rank);

/// Whether attn-lower-mods emits calls of `callee` (attn-emit-cuda accepts
/// no other callee in a mod function).
bool isModFunctionCallee(llvm::StringRef callee);

/// Conversions between the plan attributes and the MLIR-free structs of
/// attn/Compiler/TileConstraints.h.
::attn::TileProblem getTileProblem(ProblemAttr problem);
::attn::TileConfig getTileConfig(TilePlanAttr tile);
TilePlanAttr getTilePlanAttr(MLIRContext *context,
                             const ::attn::TileConfig &config);

#define GEN_PASS_REGISTRATION
#include "attn/Transforms/Passes.h.inc"

} // namespace attn
} // namespace mlir

#endif // ATTN_TRANSFORMS_PASSES_H
