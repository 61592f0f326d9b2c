//===- ReferenceAttention.cpp - CPU oracle for attention ------------------===//
//
// Straightforward on purpose: for every (batch, query head, query row) the
// scores against all allowed keys are computed in double, then the softmax is
// evaluated in two passes (max, then exponentials with the weighted sum of V).
// Rows are spread over threads; each row is computed independently, so the
// result does not depend on the thread count.
//
//===----------------------------------------------------------------------===//

#include "attn/Reference/ReferenceAttention.h"

#include "ReferenceRows.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace attn::reference {

bool maskAllows(const MaskSpec &mask, int64_t q, int64_t k, int64_t seqlenQ,
                int64_t seqlenK) {
  if (k < 0 || k >= seqlenK || q < 0 || q >= seqlenQ)
    return false;
  int64_t shift =
      mask.alignment == MaskAlignment::BottomRight ? seqlenK - seqlenQ : 0;
  int64_t qa = q + shift;
  switch (mask.kind) {
  case MaskKind::None:
    return true;
  case MaskKind::Causal:
    return k <= qa;
  case MaskKind::SlidingWindow:
    // Written as differences so that huge ("unbounded") windows cannot
    // overflow.
    return qa - k <= mask.windowLeft && k - qa <= mask.windowRight;
  }
  return false;
}

namespace {

constexpr const char *kWho = "reference attention";

void validate(const Problem &p, const HostTensor &q, const HostTensor &k,
              const HostTensor &v, const float *o, const float *lse) {
  detail::validateProblem(p, kWho);
  const bool hasQueries = p.batch > 0 && p.seqlenQ > 0;
  const bool hasKeys = p.batch > 0 && p.seqlenK > 0;
  if (hasQueries && !q.data)
    detail::throwInvalid(kWho, "q is null");
  if (hasKeys && (!k.data || !v.data))
    detail::throwInvalid(kWho, "k or v is null");
  if (hasQueries && (!o || !lse))
    detail::throwInvalid(kWho, "o or lse is null");
}

using detail::dot;
using detail::rowPointer;

/// Per-thread scratch: one row of scores and one row of output accumulators.
struct Scratch {
  std::vector<double> scores;
  std::vector<double> accum;
};

void computeRow(const Problem &p, const HostTensor &q, const HostTensor &k,
                const HostTensor &v, int64_t b, int64_t h, int64_t row,
                Scratch &scratch, float *o, float *lse) {
  const int64_t d = p.headDim;
  const int64_t kvHead = h / (p.qHeads / p.kvHeads);
  float *outRow = o + ((b * p.seqlenQ + row) * p.qHeads + h) * d;
  float &outLse = lse[(b * p.qHeads + h) * p.seqlenQ + row];
  const float *qRow = rowPointer(q, b, row, h);

  // Pass 1: scaled (and modified) scores of allowed keys and their maximum.
  constexpr double kMasked = -std::numeric_limits<double>::infinity();
  double maxScore = kMasked;
  bool anyAllowed = false;
  for (int64_t key = 0; key < p.seqlenK; ++key) {
    scratch.scores[key] = kMasked;
    if (!maskAllows(p.mask, row, key, p.seqlenQ, p.seqlenK) ||
        (p.maskMod && !p.maskMod(b, h, row, key)))
      continue;
    double s = p.scale * dot(qRow, q.strides[3], rowPointer(k, b, key, kvHead),
                             k.strides[3], d);
    if (p.scoreMod) {
      s = p.scoreMod(s, b, h, row, key);
      if (s == kMasked)
        continue;
    }
    scratch.scores[key] = s;
    maxScore = anyAllowed ? std::max(maxScore, s) : s;
    anyAllowed = true;
  }
  if (!anyAllowed) {
    std::fill(outRow, outRow + d, 0.0f);
    outLse = -std::numeric_limits<float>::infinity();
    return;
  }

  // Pass 2: exponentials relative to the maximum (each <= 1, the maximum's
  // is exactly 1, so the sum is >= 1), their sum, and the weighted V sum.
  std::fill(scratch.accum.begin(), scratch.accum.end(), 0.0);
  double sum = 0;
  for (int64_t key = 0; key < p.seqlenK; ++key) {
    if (scratch.scores[key] == kMasked)
      continue;
    double weight = std::exp(scratch.scores[key] - maxScore);
    sum += weight;
    const float *vRow = rowPointer(v, b, key, kvHead);
    const int64_t vStride = v.strides[3];
    for (int64_t i = 0; i < d; ++i)
      scratch.accum[i] += weight * double(vRow[i * vStride]);
  }
  for (int64_t i = 0; i < d; ++i)
    outRow[i] = static_cast<float>(scratch.accum[i] / sum);
  outLse = static_cast<float>(maxScore + std::log(sum));
}

} // namespace

void forward(const Problem &problem, const HostTensor &q, const HostTensor &k,
             const HostTensor &v, float *o, float *lse) {
  validate(problem, q, k, v, o, lse);
  if (problem.batch == 0 || problem.seqlenQ == 0)
    return;

  const double work = double(problem.batch) * problem.qHeads *
                      problem.seqlenQ * std::max<int64_t>(problem.seqlenK, 1) *
                      problem.headDim;
  // Work items are blocks of rows of one (batch, head) pair. The first
  // exception of a maskMod or scoreMod is rethrown once every thread has
  // stopped.
  constexpr int64_t kRowsPerItem = 16;
  detail::parallelForBlocks(
      problem.batch, problem.qHeads, problem.seqlenQ, kRowsPerItem,
      detail::maxThreadsFor(work),
      [&]() {
        Scratch scratch;
        scratch.scores.resize(static_cast<size_t>(problem.seqlenK));
        scratch.accum.resize(static_cast<size_t>(problem.headDim));
        return scratch;
      },
      [&](int64_t batch, int64_t head, int64_t rowBegin, int64_t rowEnd,
          Scratch &scratch) {
        for (int64_t row = rowBegin; row < rowEnd; ++row)
          if (!problem.rows || problem.rows(batch, head, row))
            computeRow(problem, q, k, v, batch, head, row, scratch, o, lse);
      });
}

} // namespace attn::reference
