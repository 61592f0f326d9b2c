//===- DecodeBench.h - attn-bench's serving measurements --------*- C++ -*-===//
#ifndef ATTN_TOOLS_ATTNBENCH_DECODEBENCH_H
#define ATTN_TOOLS_ATTNBENCH_DECODEBENCH_H

#include <cstdint>
#include <string>
#include <vector>

namespace attn::bench {

/// One short-query shape: Hq = 32 over `kvHeads` kv heads, bf16, causal
/// aligned bottom-right.
struct DecodePoint {
  int64_t seqlenQ, batch, kvHeads, headDim, seqlenK;
};

/// `attn-bench --decode-grid`: decode (one query row; Hq = 32 over 8 or 1
/// kv heads, head dims 128 and 256; batch 1, 8, 64; 4096 to 131072 keys) and
/// speculative verification (4 to 64 rows) on the short-query path,
/// contiguous and paged (pages of 64 and 16 rows, shuffled, and of 64 rows
/// in order), beside the forward
/// kernel: milliseconds and bytes of K and V read once per second. `quick`
/// keeps batch 1 and 8 and up to 32768 keys. With a tuning database, the
/// kernels carry the split counts attn-tune recorded there for the grid's
/// specs (the `splits` column then shows them where a bucket has one).
/// Calls rotate over copies of K and V that exceed 256 MiB together (one
/// copy where it alone does); a point whose copies exceed 60 GB is skipped.
/// `points` (each "SqxBATCHxHKVxDxSK", e.g. 1x8x1x256x32768), when not
/// empty, replaces the grid's points.
int runDecodeGrid(int warmup, int repeats, bool quick, const std::string &tuningDatabase,
                  const std::vector<DecodePoint> &points = {});

/// Parses --decode-grid-points' entries; throws attn::Error naming a bad one.
std::vector<DecodePoint> parseDecodePoints(const std::vector<std::string> &entries);

} // namespace attn::bench

#endif // ATTN_TOOLS_ATTNBENCH_DECODEBENCH_H
