//===- Expr.h - Mask and score expressions for SpecBuilder ------*- C++ -*-===//
//
// Expression trees a host program builds with operator overloading and hands
// to SpecBuilder::maskMod / scoreMod; attn::Compiler lowers them into the
// kernel's `mask_mod` / `score_mod` regions (arith, math, memref.load), so a
// built variant is the same op as one written as spec text.
//
//   using attn::Expr;
//   attn::Capture slopes("slopes", attn::DType::F32, {attn::CaptureExtent::qHeads()});
//   attn::Spec alibi = attn::SpecBuilder("alibi").heads(16).headDim(128).causal()
//       .capture(slopes)
//       .scoreMod(Expr::score() - slopes(Expr::head()) * (Expr::qIdx() - Expr::kvIdx()));
//
// Every value has one of three types: index (the positions, integer
// constants, reads of i32 captures), bool (comparisons) and f32 (the score,
// float constants, reads of f32 captures). Arithmetic mixing index and f32
// converts the index operand to f32; anything else that mixes types throws
// attn::Error when the expression is built, naming the operator. On index
// values `/` is the floor quotient (arith.floordivsi; 0 for a zero divisor
// on the GPU and in the CPU reference) and `%` the remainder with the
// dividend's sign (arith.remsi; undefined for a zero divisor, as in C).
//
// An Expr is an immutable handle to a shared node: subexpressions used twice
// are built once and lowered once.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_COMPILER_EXPR_H
#define ATTN_COMPILER_EXPR_H

#include "attn/runtime/DType.h"

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace attn {

enum class ExprType { Index, Bool, F32 };

/// The name of a type in messages ("index", "bool", "f32").
const char *exprTypeName(ExprType type);

class Expr {
public:
  enum class Op {
    // Leaves.
    Batch, Head, QIdx, KvIdx, Score, IndexConst, BoolConst, F32Const, Load,
    // Index or f32.
    Add, Sub, Mul, Div, Rem, Min, Max, Neg, Abs,
    // Comparisons (index or f32) giving bool.
    Eq, Ne, Lt, Le, Gt, Ge,
    // Bool.
    And, Or, Not,
    // select(bool, a, b).
    Select,
    // f32 only.
    Exp, Log, Sqrt, Tanh,
    // index -> f32 (inserted by the promotion of mixed operands).
    ToF32,
  };

  /// An index constant.
  Expr(int value);
  Expr(long value);
  /// An f32 constant.
  Expr(double value);
  Expr(float value);

  static Expr batch();
  static Expr head();
  static Expr qIdx();
  static Expr kvIdx();
  /// The scaled score `scale * q.k` (score_mod only).
  static Expr score();
  static Expr boolean(bool value);

  ExprType type() const;
  Op op() const;
  const std::vector<Expr> &operands() const;
  int64_t indexValue() const;
  double f32Value() const;
  bool boolValue() const;
  /// For Load: the capture's name, element type and rank.
  const std::string &captureName() const;
  DType captureDType() const;
  /// Identity of the node: equal for handles of one node.
  const void *id() const;

  /// Builds a node, checking and promoting operand types. Throws attn::Error
  /// naming the operator for operands of the wrong type.
  static Expr make(Op op, std::vector<Expr> operands);

  // Operators and functions are hidden friends: found only for Expr
  // operands, so they never capture calls such as log(double) nearby.
  friend Expr operator+(const Expr &a, const Expr &b) { return make(Op::Add, {a, b}); }
  friend Expr operator-(const Expr &a, const Expr &b) { return make(Op::Sub, {a, b}); }
  friend Expr operator*(const Expr &a, const Expr &b) { return make(Op::Mul, {a, b}); }
  friend Expr operator/(const Expr &a, const Expr &b) { return make(Op::Div, {a, b}); }
  friend Expr operator%(const Expr &a, const Expr &b) { return make(Op::Rem, {a, b}); }
  friend Expr operator-(const Expr &a) { return make(Op::Neg, {a}); }
  friend Expr operator==(const Expr &a, const Expr &b) { return make(Op::Eq, {a, b}); }
  friend Expr operator!=(const Expr &a, const Expr &b) { return make(Op::Ne, {a, b}); }
  friend Expr operator<(const Expr &a, const Expr &b) { return make(Op::Lt, {a, b}); }
  friend Expr operator<=(const Expr &a, const Expr &b) { return make(Op::Le, {a, b}); }
  friend Expr operator>(const Expr &a, const Expr &b) { return make(Op::Gt, {a, b}); }
  friend Expr operator>=(const Expr &a, const Expr &b) { return make(Op::Ge, {a, b}); }
  friend Expr operator&&(const Expr &a, const Expr &b) { return make(Op::And, {a, b}); }
  friend Expr operator||(const Expr &a, const Expr &b) { return make(Op::Or, {a, b}); }
  friend Expr operator!(const Expr &a) { return make(Op::Not, {a}); }
  friend Expr select(const Expr &condition, const Expr &ifTrue, const Expr &ifFalse) {
    return make(Op::Select, {condition, ifTrue, ifFalse});
  }
  friend Expr min(const Expr &a, const Expr &b) { return make(Op::Min, {a, b}); }
  friend Expr max(const Expr &a, const Expr &b) { return make(Op::Max, {a, b}); }
  friend Expr abs(const Expr &a) { return make(Op::Abs, {a}); }
  friend Expr exp(const Expr &a) { return make(Op::Exp, {a}); }
  friend Expr log(const Expr &a) { return make(Op::Log, {a}); }
  friend Expr sqrt(const Expr &a) { return make(Op::Sqrt, {a}); }
  friend Expr tanh(const Expr &a) { return make(Op::Tanh, {a}); }

  struct Node;

private:
  explicit Expr(std::shared_ptr<const Node> node) : node(std::move(node)) {}
  friend class Capture;
  std::shared_ptr<const Node> node;
};


/// One extent of a captured buffer (see #attn.capture).
class CaptureExtent {
public:
  enum class Kind { Fixed, Any, Batch, QHeads, KvHeads, SeqlenQ, SeqlenK };

  static CaptureExtent fixed(int64_t size) { return CaptureExtent(Kind::Fixed, size); }
  /// Any length, taken from the buffer at launch.
  static CaptureExtent any() { return CaptureExtent(Kind::Any, 0); }
  static CaptureExtent batch() { return CaptureExtent(Kind::Batch, 0); }
  static CaptureExtent qHeads() { return CaptureExtent(Kind::QHeads, 0); }
  static CaptureExtent kvHeads() { return CaptureExtent(Kind::KvHeads, 0); }
  static CaptureExtent seqlenQ() { return CaptureExtent(Kind::SeqlenQ, 0); }
  static CaptureExtent seqlenK() { return CaptureExtent(Kind::SeqlenK, 0); }

  Kind kind() const { return extentKind; }
  int64_t size() const { return fixedSize; }

private:
  CaptureExtent(Kind kind, int64_t size) : extentKind(kind), fixedSize(size) {}
  Kind extentKind;
  int64_t fixedSize;
};

/// A device buffer the regions read, passed at launch in declaration order
/// (SpecBuilder::capture). Calling it with one index per extent reads an
/// element: f32 buffers give f32, i32 buffers give index (sign-extended).
/// A read outside the extents gives 0.
class Capture {
public:
  Capture(std::string name, DType dtype, std::vector<CaptureExtent> extents);

  const std::string &name() const { return captureName; }
  DType dtype() const { return elementType; }
  const std::vector<CaptureExtent> &extents() const { return captureExtents; }
  /// Whether the backward computes this capture's gradient (f32 only: the
  /// spec's verifier refuses it on an i32 buffer).
  bool requiresGrad() const { return gradient; }
  Capture &setRequiresGrad(bool on = true) {
    gradient = on;
    return *this;
  }

  /// Throws attn::Error unless there is one index operand per extent.
  Expr operator()(std::vector<Expr> indices) const;
  Expr operator()(const Expr &i0) const { return (*this)(std::vector<Expr>{i0}); }
  Expr operator()(const Expr &i0, const Expr &i1) const {
    return (*this)(std::vector<Expr>{i0, i1});
  }
  Expr operator()(const Expr &i0, const Expr &i1, const Expr &i2) const {
    return (*this)(std::vector<Expr>{i0, i1, i2});
  }

private:
  std::string captureName;
  DType elementType;
  std::vector<CaptureExtent> captureExtents;
  bool gradient = false;
};

/// Whether some node of `root` has operation `op`.
bool exprContains(const Expr &root, Expr::Op op);

/// Every node of `root` once, operands before their users, as deterministic
/// text: two expressions with the same text lower to the same region.
std::string exprFingerprint(const Expr &root);

} // namespace attn

#endif // ATTN_COMPILER_EXPR_H
