//===- ReferenceRows.h - Shared pieces of the CPU oracles -------*- C++ -*-===//
//
// The row access, dot product, problem checks and thread pool that the
// forward (ReferenceAttention.cpp) and the backward (ReferenceBackward.cpp)
// share. They live in one place because the backward recomputes the
// forward's scores and must get them to the last bit: one dot, one summation
// order. Internal to the library; not installed.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_REFERENCE_LIB_REFERENCEROWS_H
#define ATTN_REFERENCE_LIB_REFERENCEROWS_H

#include "attn/Reference/ReferenceAttention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace attn::reference::detail {

/// Throws std::invalid_argument with the message "<who>: <what>".
[[noreturn]] inline void throwInvalid(const char *who,
                                      const std::string &what) {
  throw std::invalid_argument(std::string(who) + ": " + what);
}

/// The checks of a problem's sizes, scale and mask that forward() and
/// backward() both make; `who` prefixes the message of the exception.
inline void validateProblem(const Problem &p, const char *who) {
  if (p.batch < 0 || p.seqlenQ < 0 || p.seqlenK < 0)
    throwInvalid(who, "batch and sequence lengths must be non-negative");
  if (p.qHeads <= 0 || p.kvHeads <= 0)
    throwInvalid(who, "head counts must be positive");
  if (p.headDim <= 0)
    throwInvalid(who, "headDim must be positive");
  if (p.qHeads % p.kvHeads != 0)
    throwInvalid(who, "kvHeads (" + std::to_string(p.kvHeads) +
                          ") must divide qHeads (" +
                          std::to_string(p.qHeads) + ")");
  if (!std::isfinite(p.scale))
    throwInvalid(who, "scale must be finite");
  if (p.mask.kind != MaskKind::None && p.mask.kind != MaskKind::Causal &&
      p.mask.kind != MaskKind::SlidingWindow)
    throwInvalid(who, "unknown mask kind");
}

/// Dot product in double. The contiguous case keeps four partial sums so the
/// loop is not one long dependency chain.
inline double dot(const float *a, int64_t strideA, const float *b,
                  int64_t strideB, int64_t n) {
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

/// The first element of row (b, s, h) of a BSHD tensor.
inline const float *rowPointer(const HostTensor &t, int64_t b, int64_t s,
                               int64_t h) {
  return t.data + b * t.strides[0] + s * t.strides[1] + h * t.strides[2];
}

/// Runs body(item, scratch) for every item in [0, numItems) on up to
/// `maxThreads` threads, each with its own Scratch made by makeScratch().
/// The first exception is rethrown once every thread has stopped (escaping
/// a helper thread would terminate).
template <typename MakeScratch, typename Body>
void parallelFor(int64_t numItems, unsigned maxThreads,
                 MakeScratch makeScratch, Body body) {
  std::atomic<int64_t> nextItem{0};
  std::mutex failureMutex;
  std::exception_ptr failure;
  auto worker = [&]() {
    try {
      auto scratch = makeScratch();
      for (int64_t item = nextItem++; item < numItems; item = nextItem++)
        body(item, scratch);
    } catch (...) {
      nextItem = numItems;
      std::lock_guard<std::mutex> lock(failureMutex);
      if (!failure)
        failure = std::current_exception();
    }
  };

  const unsigned numThreads =
      static_cast<unsigned>(std::min<int64_t>(maxThreads, numItems));
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

/// How many threads a problem of `work` multiply-adds may use: threads only
/// pay off from a few million.
inline unsigned maxThreadsFor(double work) {
  if (work < 4e6)
    return 1;
  return std::max(1u, std::thread::hardware_concurrency());
}

/// Runs body(batch, head, begin, end, scratch) through parallelFor() for
/// every block [begin, end) of `perBlock` positions (the last one shorter)
/// of `length` positions of every (batch, head) pair of `batches` x `heads`.
template <typename MakeScratch, typename Body>
void parallelForBlocks(int64_t batches, int64_t heads, int64_t length,
                       int64_t perBlock, unsigned maxThreads,
                       MakeScratch makeScratch, Body body) {
  const int64_t blocks = (length + perBlock - 1) / perBlock;
  parallelFor(batches * heads * blocks, maxThreads, makeScratch,
              [&](int64_t item, auto &scratch) {
                const int64_t block = item % blocks;
                const int64_t head = (item / blocks) % heads;
                const int64_t batch = item / (blocks * heads);
                const int64_t end = std::min(length, (block + 1) * perBlock);
                body(batch, head, block * perBlock, end, scratch);
              });
}

} // namespace attn::reference::detail

#endif // ATTN_REFERENCE_LIB_REFERENCEROWS_H
