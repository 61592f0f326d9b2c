//===- SingleFlightCache.h - Thread-safe compute-once map -------*- C++ -*-===//
//
// The in-process kernel cache: a map from key to value in which concurrent
// requests for a missing key wait for one computation instead of starting
// their own. A computation that throws is forgotten (every waiter sees the
// exception; the next request computes again).
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_RUNTIME_SINGLEFLIGHTCACHE_H
#define ATTN_RUNTIME_SINGLEFLIGHTCACHE_H

#include <chrono>
#include <cstdint>
#include <future>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace attn {

template <typename Key, typename Value, typename Hash = std::hash<Key>>
class SingleFlightCache {
public:
  /// The value of `key`, computed by `create()` if no other call has
  /// computed or is computing it. `created` is set to whether this call ran
  /// `create`. Values are returned by copy, so keep them cheap to copy
  /// (handles, shared pointers).
  template <typename Create>
  Value getOrCreate(const Key &key, Create &&create, bool *created = nullptr) {
    std::optional<std::promise<Value>> promise; // Only when computing here.
    std::shared_future<Value> future;
    uint64_t generation = 0;
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto it = entries.find(key);
      if (it != entries.end()) {
        future = it->second.future;
      } else {
        promise.emplace();
        future = promise->get_future().share();
        generation = ++generations;
        entries.emplace(key, Slot{future, generation});
      }
    }
    if (created)
      *created = promise.has_value();
    if (!promise)
      return future.get(); // Waits for, or rethrows, the computation.

    try {
      promise->set_value(create());
    } catch (...) {
      promise->set_exception(std::current_exception());
      std::lock_guard<std::mutex> lock(mutex);
      auto it = entries.find(key);
      // Only our own failed slot: clear() and a new computation may have
      // replaced it meanwhile.
      if (it != entries.end() && it->second.generation == generation)
        entries.erase(it);
    }
    return future.get();
  }

  /// The value of `key` if it is computed (not failed, not in progress).
  std::optional<Value> find(const Key &key) const {
    std::shared_future<Value> future;
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto it = entries.find(key);
      if (it == entries.end())
        return std::nullopt;
      future = it->second.future;
    }
    if (future.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
      return std::nullopt;
    try {
      return future.get();
    } catch (...) {
      return std::nullopt;
    }
  }

  /// Keys present (including computations in progress).
  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex);
    return entries.size();
  }

  /// Forgets every value; computations in progress still finish for their
  /// waiters.
  void clear() {
    std::lock_guard<std::mutex> lock(mutex);
    entries.clear();
  }

private:
  struct Slot {
    std::shared_future<Value> future;
    uint64_t generation;
  };

  mutable std::mutex mutex;
  std::unordered_map<Key, Slot, Hash> entries;
  uint64_t generations = 0;
};

} // namespace attn

#endif // ATTN_RUNTIME_SINGLEFLIGHTCACHE_H
