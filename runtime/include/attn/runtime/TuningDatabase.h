//===- TuningDatabase.h - Measured best tile plans --------------*- C++ -*-===//
//
// attn-tune records the fastest tile plan it measured for a spec, a target
// and a shape bucket; attn-tile (through attnc and the JIT) looks it up and
// falls back to its heuristic when there is no record.
//
// The database is one text file (by default `tuning.tsv` beside the kernel
// cache), a header line and one tab-separated record per line:
//
//   spec_hash arch bucket config milliseconds tflops device unix_seconds
//
// `config` is a complete tile override (block_m=...,persistent_blocks_per_sm=...).
// A backward plan (attn-tune --backward) is a record like any other, keyed
// by backwardTuningHash(spec_hash); a split count of the short-query path
// (attn-tune at a query length up to kShortQueryMaxRows) is one keyed by
// shortQueryTuningHash(spec_hash), its config `key_splits=N`.
// A writer holds an advisory lock on `PATH.lock`, re-reads the file, merges
// its record and replaces the file atomically (temporary file, fsync,
// rename): two tuners writing at once both keep their records, and a reader
// never sees half a file. Of two records for one key the faster stays.
// Malformed lines are skipped by readers and dropped by the next writer.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_RUNTIME_TUNINGDATABASE_H
#define ATTN_RUNTIME_TUNINGDATABASE_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attn {

/// The runtime sizes of a forward problem, as the tuner and lookups see them.
struct TuningShape {
  int64_t batch = 1, seqlenQ = 0, seqlenK = 0;
};

/// Shapes whose batch x query heads, query length and key length round up to
/// the same powers of two share tuned plans. Printed "bh32_q8192_k8192".
struct ShapeBucket {
  int64_t batchHeads = 1, seqlenQ = 1, seqlenK = 1;

  static ShapeBucket of(const TuningShape &shape, int64_t qHeads);
  /// Parses the printed form; nullopt if malformed.
  static std::optional<ShapeBucket> parse(const std::string &text);
  std::string str() const;
  /// Sum over the three sizes of |log2(a / b)|: 0 for the same bucket.
  double distance(const ShapeBucket &other) const;
  bool operator==(const ShapeBucket &o) const {
    return batchHeads == o.batchHeads && seqlenQ == o.seqlenQ && seqlenK == o.seqlenK;
  }
};

/// Parses "B,S" or "B,Sq,Sk" (positive integers). Returns an error message
/// on malformed input.
std::optional<std::string> parseTuningShape(const std::string &text, TuningShape &shape);
/// "B,Sq,Sk", which parseTuningShape reads back.
std::string formatTuningShape(const TuningShape &shape);

/// The key of a spec's backward records: SHA-256 of a "backward" tag and
/// the spec's tuning hash (`specHash`, attn-tile's, the forward records'
/// key). attn-tune --backward records under it and the backward's plan
/// lookup asks for it, so a forward lookup never meets a backward plan and
/// a backward lookup never meets a forward one; the file format is the
/// same, and programs that predate backward records keep them untouched.
std::string backwardTuningHash(const std::string &specHash);

/// The key of a spec's short-query records: SHA-256 of a "short-query" tag
/// and the spec's tuning hash. Their buckets index the split counts that
/// attn-tile copies into the kernel's `tuned_key_splits`; the forward's
/// plan lookup never meets them.
std::string shortQueryTuningHash(const std::string &specHash);

/// A short-query record's config: "key_splits=N" (N = 0: the forward
/// kernel).
std::string formatKeySplitsConfig(int keySplits);
/// N of "key_splits=N" with 0 <= N <= kMaxKeySplits; nullopt otherwise.
std::optional<int> parseKeySplitsConfig(const std::string &config);

struct TuningRecord {
  /// 64 hex digits: attn-tile's tuning hash of the spec for a forward plan,
  /// backwardTuningHash of it for a backward plan, shortQueryTuningHash of
  /// it for a split count.
  std::string specHash;
  std::string arch;     // "sm_90a"
  ShapeBucket bucket;
  std::string config;   // a complete tile override
  double milliseconds = 0;
  double tflops = 0;
  std::string device;   // the GPU's name
  int64_t unixSeconds = 0;
};

class TuningDatabase {
public:
  explicit TuningDatabase(std::string path);

  /// ATTNC_TUNING_DB when set, else `tuning.tsv` in the kernel cache's
  /// directory (DiskCacheOptions::fromEnvironment), else empty (none).
  static std::string defaultPath();

  const std::string &path() const { return filePath; }

  /// Every well-formed record; `skipped` counts the malformed lines. A
  /// missing file has no records.
  std::vector<TuningRecord> records(size_t *skipped = nullptr) const;

  /// How record() merges with a record of the same key.
  enum class Merge {
    /// The faster of the two stays (times of one method compare).
    KeepFaster,
    /// The new record replaces the old: attn-tune's split counts, timed
    /// from memory, over first-use tuning's, timed on a caller's cache
    /// that may sit in L2.
    Replace,
  };

  /// Adds `record` (creating the file and its directory). Throws attn::Error
  /// naming the path when it cannot be written or the record is malformed.
  void record(const TuningRecord &record, Merge merge = Merge::KeepFaster);

  /// Every record of (specHash, arch). Never throws: an unreadable file has
  /// no records and, with `error`, says why there.
  std::vector<TuningRecord> recordsOf(const std::string &specHash, const std::string &arch,
                                      std::string *error = nullptr) const;

  /// The record of (specHash, arch) whose bucket is nearest `bucket`, or
  /// with no bucket the one of the largest bucket (long sequences are where
  /// the time goes). nullopt when the spec was never tuned for `arch`.
  /// Never throws: an unreadable file has no records and, with `error`, says
  /// why there.
  std::optional<TuningRecord> lookup(const std::string &specHash, const std::string &arch,
                                     const std::optional<ShapeBucket> &bucket,
                                     std::string *error = nullptr) const;

private:
  std::string filePath;
};

} // namespace attn

#endif // ATTN_RUNTIME_TUNINGDATABASE_H
