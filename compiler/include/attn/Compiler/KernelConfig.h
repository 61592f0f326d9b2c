//===- KernelConfig.h - From a planned attn.kernel to emitter input -*- C++ -*-===//
#ifndef ATTN_COMPILER_KERNELCONFIG_H
#define ATTN_COMPILER_KERNELCONFIG_H

#include "attn/CodeGen/CudaEmitter.h"
#include "attn/IR/AttnOps.h"
#include "mlir/Support/LogicalResult.h"

namespace mlir::attn {

/// Collects the problem, mask and plan of a kernel whose `tile` and `smem`
/// attributes are set into the emitter's configuration. Emits an error on the
/// op and fails for what the templates cannot express yet (user regions, a
/// normalizer other than softmax, a plan without a required buffer).
FailureOr<::attn::codegen::ForwardKernelConfig> buildForwardKernelConfig(KernelOp op);

/// The backward's emitter configuration for a kernel whose `backward_tile`
/// and `backward_smem` plans are set (attn-tile with backward=true, then
/// attn-plan-smem). Emits an error on the op and fails without them.
FailureOr<::attn::codegen::BackwardKernelConfig> buildBackwardKernelConfig(KernelOp op);

/// The linear family's emitter configuration (linear attention or
/// retention) for a kernel whose `tile` and `smem` plans are set. Its
/// backward module is emitted from the same configuration.
FailureOr<::attn::codegen::LinearKernelConfig> buildLinearKernelConfig(KernelOp op);

/// The discardable attribute that attn-emit-cuda sets on each kernel.
inline constexpr llvm::StringLiteral kCudaSourceAttrName = "attn.cuda_source";

/// The discardable unit attribute that asks for a softmax forward kernel
/// that also reads paged KV caches (CompileOptions::pagedKv): its producer
/// then holds the page walk, which cost contiguous calls 1 to 2 % and made
/// two head-dim-256 plans spill when every kernel held it.
inline constexpr llvm::StringLiteral kPagedKvAttrName = "attn.paged_kv";

} // namespace mlir::attn

#endif // ATTN_COMPILER_KERNELCONFIG_H
