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

/// Adds the planning pipeline (attn-tile with `tileOptions`, then
/// attn-plan-smem) to `pm`, whose operation holds the attn.kernel ops
/// (typically the module); see the attn-tile pass for the options.
void buildPlanPipeline(OpPassManager &pm, const AttnTileOptions &tileOptions = {});

/// The key of a kernel in the tuning database: SHA-256 (hex) of the kernel
/// as written (problem, mask, normalizer, captures and regions, printed in
/// generic form, without its name, locations or any plan attributes) and of
/// the kernel templates' fingerprint, so a template change retires old
/// records.
std::string tuningSpecHash(KernelOp kernel);

/// Adds what turns planned kernels into CUDA: attn-classify-blocks,
/// attn-lower-mods, then attn-emit-cuda. `pm` must run on a module.
void buildEmitPipeline(OpPassManager &pm);

/// Adds what plans the backward kernel and prepares its user regions:
/// attn-classify-blocks, attn-differentiate-mods, the plan pipeline (whose
/// shared-memory plan reads how the derived additions index their
/// captures), then attn-lower-mods. `pm` must run on a module.
void buildBackwardPipeline(OpPassManager &pm, const AttnTileOptions &tileOptions);

/// Registers the passes (attn-tile, attn-plan-smem, attn-classify-blocks,
/// attn-lower-mods, attn-emit-cuda) and the `attn-plan`
/// pipeline (option `tile-override`) with the global registry, for
/// attn-opt style tools.
void registerAttnPasses();

/// The C++ type of a captured buffer of `rank` extents in the mod functions
/// attn-lower-mods emits (attn_dev::Capture in templates/device/captures.cuh).
std::string getCaptureCppType(Type elementType, int64_t rank);

/// Erases the ops of a user region's `block` whose results are unused and
/// that only compute (a capture load reads a buffer the kernel never writes).
void eraseDeadModOps(Block &block);

/// The unit attribute attn-differentiate-mods puts on a memref.atomic_rmw
/// into a gradient buffer whose element is the same for every pair of a
/// (batch, head) and which is the buffer's only addition; attn-lower-mods
/// then calls attn_dev::accumulateStepGradient, which sums without testing
/// the element.
inline constexpr llvm::StringLiteral kStepInvariantAttr = "attn.step_invariant";
/// The same for an element that depends on the pair only through q - kv (a
/// relative-position or bucketed bias): attn_dev::accumulateDiagonalGradient,
/// whose sums the backward adds up diagonal by diagonal.
inline constexpr llvm::StringLiteral kPerDiagonalAttr = "attn.per_diagonal";

/// The C++ type of a learnable capture's gradient of `rank` extents in the
/// backward's vector-Jacobian product: the kernel's per-thread accumulator
/// (attn_dev::CaptureGradient in templates/device/captures.cuh), by reference.
std::string getGradientCppType(int64_t rank);

/// Whether `callee` is the addition attn-lower-mods emits for an
/// `attn.per_diagonal` one.
bool isDiagonalGradientCallee(llvm::StringRef callee);

/// Whether attn-lower-mods emits calls of `callee` (attn-emit-cuda accepts
/// no other callee in a mod function).
bool isModFunctionCallee(llvm::StringRef callee);

/// Whether an op that `test` accepts computes `value`, directly or through
/// its operands' definitions.
bool definedThrough(Value value, llvm::function_ref<bool(Operation *)> test);

/// The values of a score_mod body (arguments score, b, h, q, kv, captures)
/// worth staging per key tile: each reads a capture, is f32 or i32, depends
/// on kv but on q and kv only through q - kv (their index arithmetic is
/// linear with opposite coefficients), and feeds what depends on the score
/// or the pair otherwise. In the body's order.
SmallVector<Value> findScoreDiagonals(Block &scoreBody);

/// A bound B such that a score_mod result `value` is -inf or within [-B, B]
/// for every input, if the ops that define it give one: tanh (1), finite
/// constants, constant multiples of bounded values, and selections between
/// bounded values and -inf (a masked pair). The kernel then needs no running
/// row maximum.
std::optional<double> getScoreBound(Value value);

/// The tile formula attn-classify-blocks derives for the kernel's mask_mod
/// region (null when it has none, or one the analysis cannot express). A
/// mask_mod without one reads buffers or is otherwise opaque: the kernel
/// then takes its tiles from a run-time coverage, with stored key bits.
TileFormulaAttr classifyMaskMod(KernelOp op);

/// The backward kernel's plan for `kernel`: the tuning database's backward
/// record (the one under backwardTuningHash(tuningSpecHash) nearest
/// `tuningShape`'s bucket, or the largest without a shape; an unusable one
/// warns) else backwardTileConfig, under `tileOverride`, checked against
/// the backward's constraints. Errors (a kernel with no backward, a
/// malformed override or shape, an illegal plan) are emitted on the op.
FailureOr<::attn::TileConfig> backwardTilePlan(KernelOp kernel, StringRef tileOverride,
                                               StringRef tuningDatabase, StringRef tuningShape,
                                               StringRef arch);

/// Conversions between the plan attributes and the MLIR-free structs of
/// attn/Compiler/TileConstraints.h.
::attn::TileProblem getTileProblem(KernelOp kernel);
::attn::TileConfig getTileConfig(TilePlanAttr tile);
TilePlanAttr getTilePlanAttr(MLIRContext *context,
                             const ::attn::TileConfig &config);

#define GEN_PASS_REGISTRATION
#include "attn/Transforms/Passes.h.inc"

} // namespace attn
} // namespace mlir

#endif // ATTN_TRANSFORMS_PASSES_H
