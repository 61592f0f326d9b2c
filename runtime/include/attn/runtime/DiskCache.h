//===- DiskCache.h - Content-addressed cache of compiled kernels -*- C++ -*-===//
//
// One file per key in a directory (ATTNC_CACHE_DIR, else
// $XDG_CACHE_HOME/attnc, else ~/.cache/attnc), holding named sections (the
// compiler stores "info", "launch", "ptx" and "cubin"). The cache knows
// nothing about what the key hashes; the compiler computes it.
//
// * Writes go to a unique temporary file in the same directory, are fsynced
//   and renamed over the entry, so a reader sees a whole entry or none, and
//   two processes storing one key leave one valid entry.
// * Every entry ends with an XXH64 checksum of everything before it; a
//   truncated or corrupted entry reads as a miss and is removed, so the
//   caller rebuilds it.
// * A hit sets the entry's modification time to now; when a store takes the
//   directory over its size limit, the least recently used entries go first.
// * A directory that cannot be created or written turns the cache off (every
//   load misses, every store is dropped) after one warning.
// * loadOrBuild holds an advisory lock per key (flock) while it builds, so
//   processes that want the same missing entry at once build it once.
//
// Entry layout (text header, raw payloads, checksum line):
//
//   attnc-cache-entry 1
//   key <key>
//   section <name> <bytes>        (one line per section)
//   end
//   <payload of each section, in order>
//   xxh64 <16 hex digits>
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_RUNTIME_DISKCACHE_H
#define ATTN_RUNTIME_DISKCACHE_H

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace attn {

/// Named byte strings, in order.
struct CacheEntry {
  std::vector<std::pair<std::string, std::string>> sections;

  /// The section named `name`, or null.
  const std::string *find(std::string_view name) const;
  /// Replaces the section named `name`, or appends it.
  void set(std::string_view name, std::string value);
  /// Bytes of all payloads.
  uint64_t payloadBytes() const;
};

struct DiskCacheOptions {
  /// The cache directory, created on first use. Empty: no disk cache.
  std::string directory;
  /// Size limit of all entries together.
  uint64_t maxBytes = kDefaultMaxBytes;
  /// How long loadOrBuild waits for another process building the same key
  /// before building it too.
  double lockTimeoutSeconds = 300;
  /// Receives the one warning about an unusable directory (default: a line
  /// on stderr).
  std::function<void(const std::string &)> warn;

  static constexpr uint64_t kDefaultMaxBytes = uint64_t(1) << 30;

  /// The directory from ATTNC_CACHE_DIR, else $XDG_CACHE_HOME/attnc (when
  /// absolute), else $HOME/.cache/attnc, else none; the limit from
  /// ATTNC_CACHE_MAX_BYTES (bytes, or with a K, M or G suffix). Throws
  /// attn::Error naming the variable for a malformed limit.
  static DiskCacheOptions fromEnvironment();
};

/// Parses "1048576", "512K", "64M" or "2G" (powers of 1024). Throws
/// attn::Error naming `what`.
uint64_t parseByteSize(std::string_view text, std::string_view what);

struct CacheEntryInfo {
  std::string key;
  uint64_t bytes = 0;
  /// Last store or hit, nanoseconds since the epoch.
  int64_t lastUseNs = 0;
  /// The entry's "info" section when it is readable cheaply, else empty.
  std::string info;
};

struct DiskCacheStats {
  std::string directory;
  bool usable = false;
  uint64_t entries = 0;
  uint64_t bytes = 0;
  uint64_t maxBytes = 0;
};

class DiskCache {
public:
  explicit DiskCache(DiskCacheOptions options);

  DiskCache(const DiskCache &) = delete;
  DiskCache &operator=(const DiskCache &) = delete;

  const std::string &directory() const { return opts.directory; }
  uint64_t maxBytes() const { return opts.maxBytes; }

  /// False when there is no directory or it proved unusable (after the
  /// warning). Creates the directory on the first call.
  bool usable();

  /// The entry, or nothing when absent, unreadable or corrupt (a corrupt
  /// entry is removed). A hit marks the entry as just used.
  std::optional<CacheEntry> load(std::string_view key);

  /// Writes the entry atomically, then evicts least recently used entries
  /// beyond the size limit (never this one). Returns false if the cache is
  /// not usable or the write failed (the first failure warns and turns the
  /// cache off).
  bool store(std::string_view key, const CacheEntry &entry);

  /// load(key), else build() and store the result. While building it holds
  /// a lock on the key shared with other processes and threads, and loads
  /// again once it has the lock, so concurrent callers build once. Sets
  /// `built` to whether this call ran build(). Exceptions from build()
  /// propagate (nothing is stored).
  CacheEntry loadOrBuild(std::string_view key,
                         const std::function<CacheEntry()> &build,
                         bool *built = nullptr);

  /// Removes one entry; true if it existed.
  bool remove(std::string_view key);

  /// Every entry, most recently used first.
  std::vector<CacheEntryInfo> list();
  DiskCacheStats stats();
  /// Removes every entry and lock file, and the temporary files of writers
  /// that died (an hour old); returns the number of entries removed.
  uint64_t clear();

  /// Names an entry file: "<key>.attnc" in the directory.
  std::string entryPath(std::string_view key) const;

private:
  void initialize();
  void disable(const std::string &why);
  void evict(std::string_view keep);

  DiskCacheOptions opts;
  std::once_flag initialized;
  std::atomic<bool> enabled{false};
  std::atomic<bool> warned{false};
};

/// Checks that `key` can name a file: 1 to 128 characters from [0-9a-z_-].
/// Throws attn::Error("key: ...").
void validateCacheKey(std::string_view key);

} // namespace attn

#endif // ATTN_RUNTIME_DISKCACHE_H
