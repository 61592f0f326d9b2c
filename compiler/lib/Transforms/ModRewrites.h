//===- ModRewrites.h - rewrites of outlined user regions ----------*- C++ -*-===//
//
// The steps attn-lower-mods (LowerMods.cpp) applies to an outlined mask_mod
// or score_mod function before lowering it to EmitC; ModRewrites.cpp has
// each one's reasons. Internal to the pass.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_TRANSFORMS_MODREWRITES_H
#define ATTN_TRANSFORMS_MODREWRITES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/SymbolTable.h"

#include <string>
#include <utility>

namespace mlir::attn::mods {

/// A free symbol name `<base>_<n>` in `table`, counting from `n`.
std::string freeName(SymbolTable &table, StringRef base, int n);

/// Rewrites the index arithmetic of an outlined mask_mod in 32 bits wherever
/// integer range analysis proves it exact.
LogicalResult narrowMaskArithmetic(func::FuncOp mask);

/// Rewrites each division by a finite, nonzero f32 constant as a
/// multiplication by its reciprocal.
void divisionsByConstantsToProducts(func::FuncOp func);

/// Takes the constant scalings the kernel applies for free out of an
/// outlined score_mod: the input's and the output's factors (1 for none).
std::pair<float, float> peelScoreScales(func::FuncOp func);

/// Moves the first `count` staged values of an outlined score_mod into
/// diagonal functions; returns them in argument order.
SmallVector<func::FuncOp> splitScoreDiagonals(func::FuncOp func, int count,
                                              SymbolTable &symbols);

/// What peelRowOffset took out of a score_mod.
struct RowOffset {
  func::FuncOp function; // null: nothing
  bool keyRelative = false;
};

/// Takes out of an outlined score_mod the terms of its result that depend on
/// neither the key nor the score, as a function `name(b, h, q, captures...)`.
RowOffset peelRowOffset(func::FuncOp func, StringRef name);

/// Splits off the values that depend on neither the key nor the score as
/// row functions; returns them in argument order.
SmallVector<func::FuncOp> splitRowInvariants(func::FuncOp func, unsigned firstIndex,
                                             SymbolTable &symbols);

} // namespace mlir::attn::mods

#endif // ATTN_TRANSFORMS_MODREWRITES_H
