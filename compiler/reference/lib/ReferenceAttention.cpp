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

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
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

[[noreturn]] void invalid(const std::string &what) {
  throw std::invalid_argument("reference attention: " + what);
}

void validate(const Problem &p, const HostTensor &q, const HostTensor &k,
              const HostTensor &v, const float *o, const float *lse) {
  if (p.batch < 0 || p.seqlenQ < 0 || p.seqlenK < 0)
    invalid("batch and sequence lengths must be non-negative");
  if (p.qHeads <= 0 || p.kvHeads <= 0)
    invalid("head counts must be positive");
  if (p.headDim <= 0)
    invalid("headDim must be positive");
  if (p.qHeads % p.kvHeads != 0)
    invalid("kvHeads (" + std::to_string(p.kvHeads) +
            ") must divide qHeads (" + std::to_string(p.qHeads) + ")");
  if (!std::isfinite(p.scale))
    invalid("scale must be finite");
  if (p.mask.kind != MaskKind::None && p.mask.kind != MaskKind::Causal &&
      p.mask.kind != MaskKind::SlidingWindow)
    invalid("unknown mask kind");

  const bool hasQueries = p.batch > 0 && p.seqlenQ > 0;
  const bool hasKeys = p.batch > 0 && p.seqlenK > 0;
  if (hasQueries && !q.data)
    invalid("q is null");
  if (hasKeys && (!k.data || !v.data))
    invalid("k or v is null");
  if (hasQueries && (!o || !lse))
    invalid("o or lse is null");
}

/// Dot product in double. The contiguous case keeps four partial sums so the
/// loop is not one long dependency chain.
double dot(const float *a, int64_t strideA, const float *b, int64_t strideB,
           int64_t n) {
  if (strideA == 1 && strideB == 1) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      s0 += double(a[i]) * double(b[i]);
      s1 += double(a[i + 1]) * double(b[i + 1]);
      s2 += double(a[i + 2]) * double(b[i + 2]);
      s3 += double(a[i + 3]) * double(b[i + 3]);
    }
    for (; i < n; ++i)
      s0 += double(a[i]) * double(b[i]);
    return (s0 + s1) + (s2 + s3);
  }
  double sum = 0;
  for (int64_t i = 0; i < n; ++i)
    sum += double(a[i * strideA]) * double(b[i * strideB]);
  return sum;
}

const float *rowPointer(const HostTensor &t, int64_t b, int64_t s,
                        int64_t h) {
  return t.data + b * t.strides[0] + s * t.strides[1] + h * t.strides[2];
}

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

  // Work items are blocks of rows of one (batch, head) pair.
  constexpr int64_t kRowsPerItem = 16;
  const int64_t blocksPerHead =
      (problem.seqlenQ + kRowsPerItem - 1) / kRowsPerItem;
  const int64_t numItems = problem.batch * problem.qHeads * blocksPerHead;

  std::atomic<int64_t> nextItem{0};
  // The first exception of a maskMod or scoreMod, rethrown once every
  // thread has stopped (escaping a helper thread would terminate).
  std::mutex failureMutex;
  std::exception_ptr failure;
  auto worker = [&]() {
    try {
      Scratch scratch;
      scratch.scores.resize(static_cast<size_t>(problem.seqlenK));
      scratch.accum.resize(static_cast<size_t>(problem.headDim));
      for (int64_t item = nextItem++; item < numItems; item = nextItem++) {
        int64_t block = item % blocksPerHead;
        int64_t head = (item / blocksPerHead) % problem.qHeads;
        int64_t batch = item / (blocksPerHead * problem.qHeads);
        int64_t rowEnd =
            std::min(problem.seqlenQ, (block + 1) * kRowsPerItem);
        for (int64_t row = block * kRowsPerItem; row < rowEnd; ++row)
          if (!problem.rows || problem.rows(batch, head, row))
            computeRow(problem, q, k, v, batch, head, row, scratch, o, lse);
      }
    } catch (...) {
      nextItem = numItems;
      std::lock_guard<std::mutex> lock(failureMutex);
      if (!failure)
        failure = std::current_exception();
    }
  };

  // Threads only pay off for problems of a few million multiply-adds.
  const double work = double(problem.batch) * problem.qHeads *
                      problem.seqlenQ * std::max<int64_t>(problem.seqlenK, 1) *
                      problem.headDim;
  unsigned numThreads = std::max(1u, std::thread::hardware_concurrency());
  if (work < 4e6)
    numThreads = 1;
  numThreads = static_cast<unsigned>(
      std::min<int64_t>(numThreads, numItems));

  std::vector<std::thread> helpers;
  for (unsigned i = 1; i < numThreads; ++i) {
    // Fewer helpers is fine: the atomic counter shares out whatever is left.
    try {
      helpers.emplace_back(worker);
    } catch (const std::system_error &) {
      break;
    }
  }
  worker();
  for (std::thread &t : helpers)
    t.join();
  if (failure)
    std::rethrow_exception(failure);
}

} // namespace attn::reference
