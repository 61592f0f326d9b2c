//===- SpecIR.h - attn.kernel ops from C++ specs ----------------*- C++ -*-===//
#ifndef ATTN_COMPILER_SPECIR_H
#define ATTN_COMPILER_SPECIR_H

#include "attn/Compiler/Spec.h"
#include "attn/IR/AttnOps.h"

#include "mlir/IR/Builders.h"

namespace attn {

/// Creates the `attn.kernel` op of `spec` at the builder's insertion point
/// with the dialect's attribute getters, lowering maskMod / scoreMod into the
/// `mask_mod` / `score_mod` regions. Invalid values (a head dim of 96, kv
/// heads not dividing q heads, a read of an undeclared capture, ...) are
/// reported as error diagnostics at `loc`, and null is returned. The regions
/// are checked by the op's verifier, which the caller runs.
mlir::attn::KernelOp buildKernelOp(mlir::OpBuilder &builder, mlir::Location loc, const Spec &spec);

} // namespace attn

#endif // ATTN_COMPILER_SPECIR_H
