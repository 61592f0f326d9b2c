//===- Spec.h - Attention kernel specs built from C++ ------------*- C++ -*-===//
//
// A host program describes a kernel with SpecBuilder instead of writing MLIR:
//
//   attn::Spec spec = attn::SpecBuilder("causal_hd128")
//                         .heads(16, 4).headDim(128).dtype(attn::DType::BF16)
//                         .causal(attn::CausalAlign::BottomRight);
//
// A Spec is plain data (no MLIR in this header); attn::Compiler turns it into
// an `attn.kernel` op with the dialect's builders (buildKernelOp in
// SpecIR.h), so the dialect's verifier checks it like a parsed spec.
//
// Variants beyond the built-in masks are expression trees (Expr.h) over the
// index variables (batch, head, q_idx, kv_idx), the score and captured
// buffers, given to maskMod / scoreMod; buildKernelOp lowers them into the
// op's `mask_mod` / `score_mod` regions (docs/variants.md):
//
//   using attn::Expr;
//   attn::Spec chunked = attn::SpecBuilder("chunked_local").heads(16).headDim(128)
//       .maskMod(Expr::qIdx() / 1024 == Expr::kvIdx() / 1024);
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_COMPILER_SPEC_H
#define ATTN_COMPILER_SPEC_H

#include "attn/Compiler/Expr.h"
#include "attn/runtime/DType.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attn {

/// Where the diagonal of a causal or windowed mask is anchored when
/// seqlen_q != seqlen_k (see #attn.causal).
enum class CausalAlign { TopLeft, BottomRight };

/// Which (query, key) pairs a kernel keeps.
class Mask {
public:
  enum class Kind { None, Causal, SlidingWindow };

  /// Every query sees every key.
  static Mask none() { return Mask(Kind::None, CausalAlign::BottomRight, 0, 0); }
  /// Query q sees key k iff k <= q + shift (shift = Sk - Sq for BottomRight).
  static Mask causal(CausalAlign align = CausalAlign::BottomRight) {
    return Mask(Kind::Causal, align, 0, 0);
  }
  /// Query q sees key k iff q + shift - left <= k <= q + shift + right.
  static Mask slidingWindow(int64_t left, int64_t right,
                            CausalAlign align = CausalAlign::BottomRight) {
    return Mask(Kind::SlidingWindow, align, left, right);
  }

  Kind kind() const { return maskKind; }
  CausalAlign alignment() const { return align; }
  int64_t windowLeft() const { return left; }
  int64_t windowRight() const { return right; }

private:
  Mask(Kind kind, CausalAlign align, int64_t left, int64_t right)
      : maskKind(kind), align(align), left(left), right(right) {}

  Kind maskKind;
  CausalAlign align;
  int64_t left, right;
};

/// The feature map of linear attention (#attn.linear).
enum class FeatureMap { Identity, Relu, EluPlusOne };

/// How scores become weights: softmax, or the linear family that carries a
/// state (#attn.linear, #attn.retention; docs/guide/normalizers.md and the page of each).
class Normalizer {
public:
  enum class Kind { Softmax, Linear, Retention };

  static Normalizer softmax() { return Normalizer(Kind::Softmax); }
  /// Linear attention with feature map `map`, divided by the running key
  /// sum when `normalize`.
  static Normalizer linear(FeatureMap map = FeatureMap::Identity, bool normalize = false) {
    Normalizer n(Kind::Linear);
    n.map = map;
    n.normalizeBySum = normalize;
    return n;
  }
  /// Retention with one decay per query head (each in (0, 1]); empty: the
  /// multi-scale default 1 - 2^(-5-h).
  static Normalizer retention(std::vector<double> decays = {}) {
    Normalizer n(Kind::Retention);
    n.decayList = std::move(decays);
    return n;
  }
  /// Retention with a per-token log-decay passed at launch.
  static Normalizer gatedRetention() {
    Normalizer n(Kind::Retention);
    n.isGated = true;
    return n;
  }

  Kind kind() const { return normalizerKind; }
  FeatureMap featureMap() const { return map; }
  bool normalize() const { return normalizeBySum; }
  const std::vector<double> &decays() const { return decayList; }
  bool gated() const { return isGated; }

private:
  explicit Normalizer(Kind kind) : normalizerKind(kind) {}
  Kind normalizerKind;
  FeatureMap map = FeatureMap::Identity;
  bool normalizeBySum = false;
  std::vector<double> decayList;
  bool isGated = false;
};

/// One attention kernel, as data. Batch and sequence lengths are launch-time
/// values and not part of it.
struct Spec {
  /// The kernel's symbol (a valid MLIR symbol name).
  std::string name;
  int64_t qHeads = 0;
  int64_t kvHeads = 0;
  int64_t headDim = 0;
  DType dtype = DType::BF16;
  /// Multiplies QKᵀ; unset means 1/sqrt(headDim).
  std::optional<double> scale;
  Mask mask = Mask::none();
  Normalizer normalizer = Normalizer::softmax();
  /// Buffers the regions read, in launch order.
  std::vector<Capture> captures;
  /// A bool expression further restricting `mask` (the `mask_mod` region).
  std::optional<Expr> maskMod;
  /// An f32 expression replacing the scaled score (the `score_mod` region).
  std::optional<Expr> scoreMod;

  /// Throws attn::Error unless the name is an identifier. The values are
  /// checked by the dialect's verifier when the spec is compiled.
  void validate() const;

  /// Every field as text, deterministically: two specs with the same
  /// fingerprint build the same op. The in-memory cache's key.
  std::string fingerprint() const;
};

/// Fluent construction of a Spec. Required: heads and headDim; the rest
/// defaults to bf16, no mask, softmax and 1/sqrt(headDim).
class SpecBuilder {
public:
  explicit SpecBuilder(std::string name);

  /// Query and key/value heads (GQA when kvHeads < qHeads, MQA when 1).
  SpecBuilder &heads(int64_t qHeads, int64_t kvHeads);
  /// Multi-head attention: as many key/value heads as query heads.
  SpecBuilder &heads(int64_t count) { return heads(count, count); }
  SpecBuilder &headDim(int64_t headDim);
  SpecBuilder &dtype(DType dtype);
  SpecBuilder &scale(double scale);
  SpecBuilder &mask(Mask mask);
  SpecBuilder &causal(CausalAlign align = CausalAlign::BottomRight) {
    return mask(Mask::causal(align));
  }
  SpecBuilder &slidingWindow(int64_t left, int64_t right,
                             CausalAlign align = CausalAlign::BottomRight) {
    return mask(Mask::slidingWindow(left, right, align));
  }
  SpecBuilder &normalizer(Normalizer normalizer);
  /// Declares a captured buffer; launches pass buffers in declaration order.
  SpecBuilder &capture(Capture capture);
  /// Keeps a pair only if `keep` (a bool expression without the score)
  /// holds. Throws attn::Error for another type or a use of the score.
  SpecBuilder &maskMod(Expr keep);
  /// Replaces the scaled score by `score` (an f32 expression, or an index
  /// one, converted). Throws attn::Error for a bool expression.
  SpecBuilder &scoreMod(Expr score);

  /// Throws attn::Error naming the builder method whose value is missing, or
  /// for a name that is not an identifier. Value checks (head dim 64/128/256,
  /// kvHeads dividing qHeads, captures the expressions read but the spec does
  /// not declare, ...) are the dialect verifier's, when the spec is compiled.
  Spec build() const;
  operator Spec() const { return build(); }

private:
  Spec spec;
  bool headsSet = false, headDimSet = false;
};

} // namespace attn

#endif // ATTN_COMPILER_SPEC_H
