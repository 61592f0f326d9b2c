//===- Parallel.h - Run one piece of work on several threads ----*- C++ -*-===//
#ifndef ATTN_COMPILER_PARALLEL_H
#define ATTN_COMPILER_PARALLEL_H

#include <cstddef>
#include <functional>
#include <thread>
#include <vector>

namespace attn {

/// Runs `work` on `threads` threads, this one among them, and returns when
/// every one has finished. `work` takes its items from a shared counter.
inline void runOnThreads(size_t threads, const std::function<void()> &work) {
  std::vector<std::thread> pool;
  for (size_t i = 1; i < threads; ++i)
    pool.emplace_back(work);
  work();
  for (std::thread &thread : pool)
    thread.join();
}

} // namespace attn

#endif // ATTN_COMPILER_PARALLEL_H
