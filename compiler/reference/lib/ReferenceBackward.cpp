//===- ReferenceBackward.cpp - CPU oracle for the attention backward ------===//
//
// Two phases, each split into fixed work items that threads take from an
// atomic counter:
//
//  1. Query rows, per (batch, query head, block of rows): the softmax of the
//     row (maximum and sum of exponentials), dP, Delta and dq. The maximum,
//     the sum and Delta of every row are kept for phase 2.
//  2. Keys, per (batch, kv head, block of keys): P and dS of every kept
//     pair are recomputed from the kept row statistics with the same
//     expressions as phase 1, so they match phase 1's, and dk and dv are
//     accumulated over the group's query heads and rows.
//
// Each output element is written by exactly one item, and its sums run in an
// order fixed by the problem alone (keys ascending for dq; query heads, then
// rows ascending for dk and dv), so the result does not depend on the thread
// count. Phase 2 recomputes the scores rather than keeping P and dS, which
// would take B * Hq * Sq * Sk doubles each.
//
// A score_mod adds a third phase on the calling thread alone: the captures'
// gradients are sums over pairs into buffers the score_mod's VJP shares, so
// one thread visiting the pairs in a fixed order is what keeps them
// independent of the thread count. Phases 1 and 2 ask the VJP only for dS.
//
//===----------------------------------------------------------------------===//

#include "attn/Reference/ReferenceAttention.h"

#include "ReferenceRows.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace attn::reference {

namespace {

constexpr const char *kWho = "reference attention backward";

[[noreturn]] void invalid(const std::string &what) {
  detail::throwInvalid(kWho, what);
}

void validate(const Problem &p, const HostTensor &q, const HostTensor &k,
              const HostTensor &v, const HostTensor &dO, const float *dq,
              const float *dk, const float *dv) {
  detail::validateProblem(p, kWho);
  // Ignoring any of these would give gradients of another function than the
  // one the caller described.
  if (p.scoreMod && !p.scoreModVjp)
    invalid("a score_mod needs its scoreModVjp (the backward goes through "
            "the mod's derivative)");
  if (p.scoreModVjp && !p.scoreMod)
    invalid("scoreModVjp is set without the scoreMod it differentiates");
  if (p.rows)
    invalid("a row filter is not supported (dk and dv depend on every row)");

  const bool hasQueries = p.batch > 0 && p.seqlenQ > 0;
  const bool hasKeys = p.batch > 0 && p.seqlenK > 0;
  if (hasQueries && !q.data)
    invalid("q is null");
  if (hasKeys && !k.data)
    invalid("k is null");
  if (hasKeys && !v.data)
    invalid("v is null");
  if (hasQueries && !dO.data)
    invalid("dO is null");
  if (hasQueries && !dq)
    invalid("dq is null");
  if (hasKeys && !dk)
    invalid("dk is null");
  if (hasKeys && !dv)
    invalid("dv is null");
}

using detail::dot;
using detail::rowPointer;

/// accum[i] += c * x[i * stride] for i < n.
void addScaled(double *accum, double c, const float *x, int64_t stride,
               int64_t n) {
  if (stride == 1) {
    for (int64_t i = 0; i < n; ++i)
      accum[i] += c * double(x[i]);
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    accum[i] += c * double(x[i * stride]);
}

bool pairAllowed(const Problem &p, int64_t b, int64_t h, int64_t row,
                 int64_t key) {
  return maskAllows(p.mask, row, key, p.seqlenQ, p.seqlenK) &&
         (!p.maskMod || p.maskMod(b, h, row, key));
}

/// The scaled score s = scale * q.k of a pair the masks keep, and s', the
/// score the softmax sees: scoreMod(s), or s without a score_mod. s' = -inf
/// masks the pair, as in forward(). Every phase goes through here, so they
/// agree to the last bit.
struct PairScore {
  double scaled, modified;
};

constexpr double kMasked = -std::numeric_limits<double>::infinity();

PairScore pairScore(const Problem &p, const HostTensor &q, const HostTensor &k,
                    const float *qRow, const float *kRow, int64_t b, int64_t h,
                    int64_t row, int64_t key) {
  const double s =
      p.scale * dot(qRow, q.strides[3], kRow, k.strides[3], p.headDim);
  return {s, p.scoreMod ? p.scoreMod(s, b, h, row, key) : s};
}

/// dS of a kept pair from dS' = P (dP - Delta), the gradient with respect to
/// the modified score: through the score_mod's VJP, without its captures.
/// A pair of weight 0 (an underflowed exponential) has dS' = 0 and is not
/// passed to the VJP, where 0 times an infinite derivative would make NaN.
double scoreGradient(const Problem &p, double prob, double dSModified,
                     const PairScore &score, int64_t b, int64_t h, int64_t row,
                     int64_t key) {
  if (!p.scoreMod)
    return dSModified;
  if (prob == 0)
    return 0;
  return p.scoreModVjp(dSModified, score.scaled, b, h, row, key,
                       /*accumulateCaptures=*/false);
}

/// What phase 2 needs of a query row. sum == 0 marks a row with no kept
/// pair (otherwise sum >= 1: the maximum's exponential is exactly 1).
struct RowStats {
  double max = 0, sum = 0, delta = 0;
};

/// The operands of one problem, shared by the phases.
struct Operands {
  const Problem &p;
  const HostTensor &q, &k, &v, &dO;
  const HostTensor *o; // the stored output, or null
  float *dq, *dk, *dv;
  std::vector<RowStats> &stats; // [B, Hq, Sq]

  int64_t group() const { return p.qHeads / p.kvHeads; }
  RowStats &statsAt(int64_t b, int64_t h, int64_t row) const {
    return stats[size_t((b * p.qHeads + h) * p.seqlenQ + row)];
  }
};

/// The softmax weight of a pair from its score and its row's statistics.
/// Both phases go through here, so they agree to the last bit.
double probability(double score, const RowStats &row) {
  return std::exp(score - row.max) / row.sum;
}

/// Per-thread scratch of phase 1: one row of scores (before and after the
/// score_mod), of dP and of dq.
struct RowScratch {
  std::vector<PairScore> scores;
  std::vector<double> dP, dqAccum;
};

/// Phase 1 for one query row: its statistics and dq.
void computeRow(const Operands &x, int64_t b, int64_t h, int64_t row,
                RowScratch &scratch) {
  const Problem &p = x.p;
  const int64_t d = p.headDim;
  const int64_t kvHead = h / x.group();
  const float *qRow = rowPointer(x.q, b, row, h);
  const float *dORow = rowPointer(x.dO, b, row, h);
  float *dqRow = x.dq + ((b * p.seqlenQ + row) * p.qHeads + h) * d;
  RowStats &stats = x.statsAt(b, h, row);

  // Pass 1: scores of kept pairs and their maximum.
  bool anyKept = false;
  for (int64_t key = 0; key < p.seqlenK; ++key) {
    PairScore &score = scratch.scores[key];
    score = {kMasked, kMasked};
    if (!pairAllowed(p, b, h, row, key))
      continue;
    score = pairScore(p, x.q, x.k, qRow, rowPointer(x.k, b, key, kvHead), b, h,
                      row, key);
    if (score.modified == kMasked)
      continue;
    stats.max = anyKept ? std::max(stats.max, score.modified) : score.modified;
    anyKept = true;
  }
  if (!anyKept) {
    // No key, no output, no gradient: o is the constant 0 here.
    stats = RowStats{};
    std::fill(dqRow, dqRow + d, 0.0f);
    return;
  }

  // Pass 2: the normaliser, dP = dO.v and Delta = sum_j P_j dP_j.
  stats.sum = 0;
  for (int64_t key = 0; key < p.seqlenK; ++key)
    if (scratch.scores[key].modified != kMasked)
      stats.sum += std::exp(scratch.scores[key].modified - stats.max);
  double delta = 0;
  for (int64_t key = 0; key < p.seqlenK; ++key) {
    if (scratch.scores[key].modified == kMasked)
      continue;
    scratch.dP[key] = dot(dORow, x.dO.strides[3],
                          rowPointer(x.v, b, key, kvHead), x.v.strides[3], d);
    delta += probability(scratch.scores[key].modified, stats) * scratch.dP[key];
  }
  // Delta from the stored output, as the kernels compute it.
  if (x.o)
    delta = dot(dORow, x.dO.strides[3], rowPointer(*x.o, b, row, h), x.o->strides[3], d);
  stats.delta = delta;

  // Pass 3: dS (through the score_mod) and dq = scale * sum_j dS_j k_j.
  std::fill(scratch.dqAccum.begin(), scratch.dqAccum.end(), 0.0);
  for (int64_t key = 0; key < p.seqlenK; ++key) {
    const PairScore &score = scratch.scores[key];
    if (score.modified == kMasked)
      continue;
    const double prob = probability(score.modified, stats);
    const double dS = scoreGradient(p, prob, prob * (scratch.dP[key] - delta),
                                    score, b, h, row, key);
    addScaled(scratch.dqAccum.data(), dS, rowPointer(x.k, b, key, kvHead),
              x.k.strides[3], d);
  }
  for (int64_t i = 0; i < d; ++i)
    dqRow[i] = static_cast<float>(p.scale * scratch.dqAccum[i]);
}

/// Per-thread scratch of phase 2: dk and dv accumulators of a key block.
struct KeyScratch {
  std::vector<double> dkAccum, dvAccum;
};

/// Phase 2 for keys [keyBegin, keyEnd) of one kv head: dk and dv.
void computeKeys(const Operands &x, int64_t b, int64_t kvHead,
                 int64_t keyBegin, int64_t keyEnd, KeyScratch &scratch) {
  const Problem &p = x.p;
  const int64_t d = p.headDim;
  std::fill(scratch.dkAccum.begin(), scratch.dkAccum.end(), 0.0);
  std::fill(scratch.dvAccum.begin(), scratch.dvAccum.end(), 0.0);

  // Rows outermost so that q_i and dO_i are read once per block; for a
  // given key the sum still runs over (head, row) in ascending order.
  for (int64_t h = kvHead * x.group(); h < (kvHead + 1) * x.group(); ++h) {
    for (int64_t row = 0; row < p.seqlenQ; ++row) {
      const RowStats &stats = x.statsAt(b, h, row);
      if (stats.sum == 0)
        continue;
      const float *qRow = rowPointer(x.q, b, row, h);
      const float *dORow = rowPointer(x.dO, b, row, h);
      for (int64_t key = keyBegin; key < keyEnd; ++key) {
        if (!pairAllowed(p, b, h, row, key))
          continue;
        // The same expressions as computeRow(), so the same P and dS.
        const PairScore score = pairScore(
            p, x.q, x.k, qRow, rowPointer(x.k, b, key, kvHead), b, h, row, key);
        if (score.modified == kMasked)
          continue;
        const double prob = probability(score.modified, stats);
        const double dP =
            dot(dORow, x.dO.strides[3], rowPointer(x.v, b, key, kvHead),
                x.v.strides[3], d);
        const double dS = scoreGradient(p, prob, prob * (dP - stats.delta),
                                        score, b, h, row, key);
        const size_t at = size_t((key - keyBegin) * d);
        addScaled(&scratch.dvAccum[at], prob, dORow, x.dO.strides[3], d);
        addScaled(&scratch.dkAccum[at], dS, qRow, x.q.strides[3], d);
      }
    }
  }

  for (int64_t key = keyBegin; key < keyEnd; ++key) {
    const size_t at = size_t((key - keyBegin) * d);
    float *dkRow = x.dk + ((b * p.seqlenK + key) * p.kvHeads + kvHead) * d;
    float *dvRow = x.dv + ((b * p.seqlenK + key) * p.kvHeads + kvHead) * d;
    for (int64_t i = 0; i < d; ++i) {
      dkRow[i] = static_cast<float>(p.scale * scratch.dkAccum[at + i]);
      dvRow[i] = static_cast<float>(scratch.dvAccum[at + i]);
    }
  }
}

/// Phase 3, with a score_mod: the VJP adds the captures' gradients at every
/// kept pair of nonzero weight, in (batch, head, row, key) order. P and dS'
/// are recomputed with the expressions of the other phases.
void accumulateCaptureGradients(const Operands &x) {
  const Problem &p = x.p;
  const int64_t d = p.headDim;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.qHeads; ++h) {
      const int64_t kvHead = h / x.group();
      for (int64_t row = 0; row < p.seqlenQ; ++row) {
        const RowStats &stats = x.statsAt(b, h, row);
        if (stats.sum == 0)
          continue;
        const float *qRow = rowPointer(x.q, b, row, h);
        const float *dORow = rowPointer(x.dO, b, row, h);
        for (int64_t key = 0; key < p.seqlenK; ++key) {
          if (!pairAllowed(p, b, h, row, key))
            continue;
          const PairScore score =
              pairScore(p, x.q, x.k, qRow, rowPointer(x.k, b, key, kvHead), b,
                        h, row, key);
          if (score.modified == kMasked)
            continue;
          const double prob = probability(score.modified, stats);
          if (prob == 0)
            continue;
          const double dP =
              dot(dORow, x.dO.strides[3], rowPointer(x.v, b, key, kvHead),
                  x.v.strides[3], d);
          p.scoreModVjp(prob * (dP - stats.delta), score.scaled, b, h, row, key,
                        /*accumulateCaptures=*/true);
        }
      }
    }
  }
}

} // namespace

namespace {
void backwardFrom(const Problem &problem, const HostTensor &q, const HostTensor &k,
                  const HostTensor &v, const HostTensor &dO, const HostTensor *o, float *dq,
                  float *dk, float *dv);
} // namespace

void backward(const Problem &problem, const HostTensor &q, const HostTensor &k,
              const HostTensor &v, const HostTensor &dO, float *dq, float *dk,
              float *dv) {
  backwardFrom(problem, q, k, v, dO, nullptr, dq, dk, dv);
}

void backward(const Problem &problem, const HostTensor &q, const HostTensor &k,
              const HostTensor &v, const HostTensor &o, const HostTensor &dO, float *dq,
              float *dk, float *dv) {
  if (problem.batch > 0 && problem.seqlenQ > 0 && !o.data)
    invalid("o is null");
  backwardFrom(problem, q, k, v, dO, &o, dq, dk, dv);
}

namespace {
void backwardFrom(const Problem &problem, const HostTensor &q, const HostTensor &k,
                  const HostTensor &v, const HostTensor &dO, const HostTensor *o, float *dq,
                  float *dk, float *dv) {
  validate(problem, q, k, v, dO, dq, dk, dv);
  if (problem.batch == 0)
    return;

  std::vector<RowStats> stats(
      size_t(problem.batch * problem.qHeads * problem.seqlenQ));
  const Operands x{problem, q, k, v, dO, o, dq, dk, dv, stats};

  // Counted as the forward's multiply-adds (the backward does about four
  // times as many), so both take threads from the same problem size on.
  const double work = double(problem.batch) * problem.qHeads *
                      std::max<int64_t>(problem.seqlenQ, 1) *
                      std::max<int64_t>(problem.seqlenK, 1) * problem.headDim;
  const unsigned maxThreads = detail::maxThreadsFor(work);

  // Phase 1: blocks of query rows of one (batch, query head) pair.
  constexpr int64_t kRowsPerItem = 16;
  detail::parallelForBlocks(
      problem.batch, problem.qHeads, problem.seqlenQ, kRowsPerItem, maxThreads,
      [&]() {
        RowScratch scratch;
        scratch.scores.resize(size_t(problem.seqlenK));
        scratch.dP.resize(size_t(problem.seqlenK));
        scratch.dqAccum.resize(size_t(problem.headDim));
        return scratch;
      },
      [&](int64_t batch, int64_t head, int64_t rowBegin, int64_t rowEnd,
          RowScratch &scratch) {
        for (int64_t row = rowBegin; row < rowEnd; ++row)
          computeRow(x, batch, head, row, scratch);
      });

  // Phase 2: blocks of keys of one (batch, kv head) pair. Small blocks keep
  // their K, V and accumulators in cache while every row streams past.
  constexpr int64_t kKeysPerItem = 16;
  detail::parallelForBlocks(
      problem.batch, problem.kvHeads, problem.seqlenK, kKeysPerItem, maxThreads,
      [&]() {
        KeyScratch scratch;
        scratch.dkAccum.resize(size_t(kKeysPerItem * problem.headDim));
        scratch.dvAccum.resize(size_t(kKeysPerItem * problem.headDim));
        return scratch;
      },
      [&](int64_t batch, int64_t kvHead, int64_t keyBegin, int64_t keyEnd,
          KeyScratch &scratch) {
        computeKeys(x, batch, kvHead, keyBegin, keyEnd, scratch);
      });

  if (problem.scoreMod)
    accumulateCaptureGradients(x);
}

} // namespace

} // namespace attn::reference
