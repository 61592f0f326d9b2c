//===- ReferenceAttention.h - CPU oracle for attention ----------*- C++ -*-===//
//
// A deliberately simple, independent implementation of softmax attention
// used to check the GPU kernels: forward() and its gradients, backward().
// fp32 inputs, fp64 arithmetic, an exact two-pass softmax per row.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_REFERENCE_REFERENCEATTENTION_H
#define ATTN_REFERENCE_REFERENCEATTENTION_H

#include <cstdint>
#include <functional>

namespace attn::reference {

enum class MaskKind { None, Causal, SlidingWindow };
enum class MaskAlignment { TopLeft, BottomRight };

struct MaskSpec {
  MaskKind kind = MaskKind::None;
  MaskAlignment alignment = MaskAlignment::TopLeft;
  int64_t windowLeft = 0, windowRight = 0;
};

/// Whether query row `q` may attend to key `k` (0 <= k < seqlenK required).
/// With shift = seqlenK - seqlenQ for BottomRight alignment (0 for TopLeft)
/// and qa = q + shift: Causal allows k <= qa; SlidingWindow allows
/// qa - windowLeft <= k <= qa + windowRight; None allows every k.
bool maskAllows(const MaskSpec &mask, int64_t q, int64_t k, int64_t seqlenQ,
                int64_t seqlenK);

/// Further restricts `mask`: the pair (query row q, key k) of batch b and
/// query head h is kept only if this returns true. q and k are positions in
/// the sequences, not shifted by the mask's alignment.
using MaskModFn =
    std::function<bool(int64_t b, int64_t h, int64_t q, int64_t k)>;

/// Replaces the scaled score `scale * q.k` of a kept pair before the softmax;
/// -inf masks the pair.
using ScoreModFn = std::function<double(double score, int64_t b, int64_t h,
                                        int64_t q, int64_t k)>;

/// The vector-Jacobian product of a ScoreModFn at a kept pair, for
/// backward(): returns dy * d scoreMod / d score at (score, b, h, q, k), where
/// `score` is the scaled score before the mod. When `accumulateCaptures` is
/// true it also adds dy * d scoreMod / d c to the gradient of every captured
/// value c the mod read (the caller owns those buffers).
using ScoreModVjpFn =
    std::function<double(double dy, double score, int64_t b, int64_t h,
                         int64_t q, int64_t k, bool accumulateCaptures)>;

/// Selects the query rows (batch b, query head h, row q) to compute.
using RowFilter = std::function<bool(int64_t b, int64_t h, int64_t q)>;

struct Problem {
  int64_t batch = 0, seqlenQ = 0, seqlenK = 0, qHeads = 0, kvHeads = 0,
          headDim = 0;
  double scale = 1.0;
  MaskSpec mask;
  /// Optional; called only for pairs `mask` keeps, from several threads at
  /// once, so they must not modify shared state.
  MaskModFn maskMod;
  /// Optional; called only for pairs `mask` and `maskMod` keep, from
  /// several threads at once.
  ScoreModFn scoreMod;
  /// Required by backward() when scoreMod is set, and ignored by forward().
  /// backward() calls it with accumulateCaptures == false from several
  /// threads at once, so then it must not modify shared state; with
  /// accumulateCaptures == true only from the calling thread, once per kept
  /// pair of nonzero weight, in a fixed order.
  ScoreModVjpFn scoreModVjp;
  /// Optional; when set, only the rows it selects are computed and the other
  /// rows of o and lse are left as they were (a sample of a problem too big
  /// to evaluate whole).
  RowFilter rows;
};

/// A read-only BSHD tensor: element (b, s, h, d) is at
/// data[b*strides[0] + s*strides[1] + h*strides[2] + d*strides[3]].
struct HostTensor {
  const float *data;
  int64_t strides[4];
};

/// Forward attention. q: [B, Sq, Hq, D], k and v: [B, Sk, Hkv, D].
/// Writes o [B, Sq, Hq, D] and lse [B, Hq, Sq] (natural log), both contiguous
/// fp32. Rows with no allowed key get o = 0 and lse = -inf. Query head h
/// reads kv head h / (Hq / Hkv). Throws std::invalid_argument for an
/// inconsistent problem (negative sizes, kvHeads not dividing qHeads, null
/// pointers for non-empty tensors); an exception of maskMod or scoreMod
/// propagates (o and lse are then partly written).
void forward(const Problem &problem, const HostTensor &q, const HostTensor &k,
             const HostTensor &v, float *o, float *lse);

/// Gradients of forward(). Given dO [B, Sq, Hq, D], writes dq [B, Sq, Hq, D]
/// and dk, dv [B, Sk, Hkv, D], all contiguous fp32 and fully overwritten.
/// With s_ij = scale * q_i.k_j, s'_ij = scoreMod(s_ij) (s_ij without a
/// scoreMod) and P the softmax of row i over its kept pairs (those the masks
/// allow and s' does not set to -inf): dP_ij = dO_i.v_j,
/// Delta_i = sum_j P_ij dP_ij (= dO_i.o_i), dS'_ij = P_ij (dP_ij - Delta_i),
/// dS_ij = scoreModVjp(dS'_ij, s_ij) (dS'_ij without a scoreMod, 0 where
/// P_ij is 0), dq_i = scale sum_j dS_ij k_j, dk_j = scale sum_i dS_ij q_i,
/// dv_j = sum_i P_ij dO_i. With a scoreMod, a last serial pass calls
/// scoreModVjp with accumulateCaptures for every kept pair with P_ij != 0,
/// in (b, h, q, k) order, so that it adds the gradients of the captures.
/// The softmax is recomputed here in double (no o or lse is taken), so the
/// result depends on no kernel. Under GQA the dk and dv of a kv head sum
/// over the query heads that read it. Masked pairs, and rows with no kept
/// pair, contribute nothing. The result, capture gradients included, does
/// not depend on the thread count.
/// Throws std::invalid_argument for what forward() rejects, for null dO, dq,
/// dk or dv of a non-empty tensor, when problem.scoreMod is set without
/// problem.scoreModVjp or the other way round, and when problem.rows is set
/// (dk and dv depend on every row, so there is nothing to sample). An
/// exception of maskMod, scoreMod or scoreModVjp propagates (the outputs and
/// capture gradients are then partly written).
void backward(const Problem &problem, const HostTensor &q, const HostTensor &k,
              const HostTensor &v, const HostTensor &dO, float *dq, float *dk,
              float *dv);

/// backward() as the kernels define it: given the forward's stored output o
/// [B, Sq, Hq, D] (rounded to its element type, computed with P rounded),
/// Delta_i = dO_i . o_i rather than sum_j P_ij dP_ij. The two differ by o's
/// error, which every dS of row i carries: a gradient that sums dS over a
/// row's keys with a weight that is nearly constant along the row (a
/// learnable per-head bias on rows that attend to one key) is dominated by
/// it, so comparing a kernel's gradients there needs the kernel's Delta.
void backward(const Problem &problem, const HostTensor &q, const HostTensor &k,
              const HostTensor &v, const HostTensor &o, const HostTensor &dO, float *dq,
              float *dk, float *dv);

} // namespace attn::reference

#endif // ATTN_REFERENCE_REFERENCEATTENTION_H
