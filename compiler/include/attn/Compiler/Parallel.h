//===- Parallel.h - Run one piece of work on several threads ----*- C++ -*-===//
#ifndef ATTN_COMPILER_PARALLEL_H
#define ATTN_COMPILER_PARALLEL_H

#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace attn {

/// Runs `work` on `threads` threads, this one among them, and returns when
/// every one has finished. `work` takes its items from a shared counter.
/// The first exception any of them throws is rethrown here, after all have
/// finished.
inline void runOnThreads(size_t threads, const std::function<void()> &work) {
  std::exception_ptr first;
  std::mutex firstMutex;
  auto guarded = [&] {
    try {
      work();
    } catch (...) {
      std::lock_guard<std::mutex> lock(firstMutex);
      if (!first)
        first = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (size_t i = 1; i < threads; ++i)
    pool.emplace_back(guarded);
  guarded();
  for (std::thread &thread : pool)
    thread.join();
  if (first)
    std::rethrow_exception(first);
}

} // namespace attn

#endif // ATTN_COMPILER_PARALLEL_H
