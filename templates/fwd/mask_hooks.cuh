// The masks on a consumer's scores: a key tile's coverage of the slice's
// rows (sliceCoverage, and VisitedTileWalk::next, which caches it), stored
// key bits, and applyMask's test of the built-in mask and the mask_mod.
#pragma once

#include "fwd/tile_scheduler.cuh"
#include "fwd/consumer_gemm.cuh"

namespace attn_kernel {

// How much of key tile `keyTile` the masks keep for the query rows
// [sliceBegin, sliceLast] of one consumer: Full tiles skip the per-element
// test, and tiles the mask_mod's formula proves Empty for the slice (a work
// tile visits them for other rows) skip the score_mod and give P = 0. The
// run-time coverage is per work tile: it never proves a slice empty.
__device__ __forceinline__ Coverage sliceCoverage(const attn_abi::AttnFwdParams &p,
                                                  const WorkTile &work, int keyTile,
                                                  int sliceBegin, int sliceLast) {
  const int keyFirst = keyTile * kBlockN, keyLast = keyFirst + kBlockN - 1;
  Coverage coverage = keyLast >= work.sequence.seqlenK ||
                              !Mask::coversTile(sliceBegin, sliceLast, keyFirst, keyLast,
                                                work.sequence.shift)
                          ? Coverage::Partial
                          : Coverage::Full;
  if constexpr (kRuntimeCoverage) {
    if (!p.tile_coverage || runtimeCoverage(p, work, keyTile) != Coverage::Full)
      coverage = Coverage::Partial;
  } else if constexpr (Mods::kHasMaskMod) {
    coverage = coverageAnd(coverage, Mods::maskCoverage(work.batch, work.head, sliceBegin,
                                                        sliceLast, keyFirst, keyLast));
  }
  return coverage;
}

__device__ __forceinline__ int VisitedTileWalk::next(const attn_abi::AttnFwdParams &p,
                                                     const WorkTile &work, int tile,
                                                     int sliceBegin, int sliceLast, int lane) {
  if constexpr (!Mods::kHasMaskMod)
    return tile;
  for (;;) {
    const unsigned offset = static_cast<unsigned>(tile - base);
    if (offset < 32) {
      const unsigned ahead = bits & (0xffffffffu << offset);
      if (ahead)
        return base + __ffs(ahead) - 1;
      tile = base + 32;
    }
    if (tile >= work.keys.end)
      return work.keys.end;
    base = tile;
    bits = visitedTilesInWindow(p, work, base, lane);
    const int candidate = base + lane;
    const Coverage mine = (bits >> lane) & 1u
                              ? sliceCoverage(p, work, candidate, sliceBegin, sliceLast)
                              : Coverage::Empty;
    full = __ballot_sync(0xffffffffu, mine == Coverage::Full);
    empty = __ballot_sync(0xffffffffu, mine == Coverage::Empty);
    if constexpr (kStoredKeyBits)
      slot = (bits >> lane) & 1u ? storedKeySlot(p, work, candidate) : -1;
  }
}

// This thread's two rows of a tile's stored key bits; slot -1 where the
// coverage has the tile full (the masks keep all its keys). The producer
// copies a partial tile's words into the stage beside its K tile, so that
// they are read from shared memory once the K tile is there. (Read from
// global memory when the walk reached the tile, with an L1 prefetch, their
// latency stood after every partial tile's scores: BigBird 0.675 -> 0.633 ms
// without the loads, H100, docs/benchmarks.md.)
struct StoredKeyRows {
  int slot;
  KeyBits rows[2];
};

__device__ __forceinline__ StoredKeyRows readStoredKeyRows(int slot, u32 words, int rowInBlock,
                                                           int lane) {
  StoredKeyRows stored{slot, {0, 0}};
  if (slot >= 0) {
    const u32 first = words + (rowInBlock * 4 + (lane & 3)) * sizeof(KeyBits);
    stored.rows[0] = loadShared<KeyBits>(first);
    stored.rows[1] = loadShared<KeyBits>(first + 8 * 4 * sizeof(KeyBits));
  }
  return stored;
}

// Sets the scores of the keys `kept` (ThreadKeys bits, one word a row)
// leaves out to -inf.
__device__ __forceinline__ void applyKeptKeys(float (&scores)[kScoreRegs],
                                              const KeyBits (&kept)[2]) {
#pragma unroll
  for (int i = 0; i < kScoreRegs; ++i) {
    const int bit = 2 * (i >> 2) + (i & 1);
    scores[i] = (kept[fragmentRowHalf(i)] >> bit) & 1 ? scores[i] : negativeInfinity();
  }
}

// Sets the scores the mask, the mask_mod or the key length excludes to -inf.
// A mask_mod the compiler proves as affine inequalities (kMaskKeyBits)
// never runs per pair: each row's kept keys become bits (ThreadKeys), a few
// instructions per row, and a pair tests its bit (Longformer 0.35 -> 0.31
// ms at head dim 128, 0.32 -> 0.25 at 64, H100, docs/benchmarks.md).
// (Deciding 16 x 8 fragment groups first and testing pairs only in partial
// groups measured slower for every variant: the group tests cost more than
// the per-pair tests they save.)
// A mask_mod kernel at head dim 128 evaluates every term of a pair's test
// and selects, without a branch: the short-circuit form made each pair a
// branch with a convergence barrier (document mask with its coverage 0.58 ->
// 0.40 ms, Longformer -5 %, H100, docs/benchmarks.md). It collects the
// tests as key bits, both rows of a key in one step, in a loop of
// kMaskTestUnroll keys a step (keptKeysByTest): over the whole unrolled
// fragment the batched capture reads spilled up to 116 bytes (BigBird);
// a step of both rows shares each key's reads. The built-in masks alone
// keep the short-circuit form (the select spills at head dim 64), and so
// do head dims 64 and 256, where it spills more in some kernels
// (Longformer at 64: 16 -> 132 bytes) and was not measured.
constexpr bool kBranchlessMaskTest = Mods::kHasMaskMod && kHeadDim == 128;
constexpr int kMaskTestUnroll = 4;

// The keys of this thread's two rows (row0 and row0 + 8) that the key
// length, the built-in mask and the mask_mod keep, as ThreadKeys bits: bit
// b is key keyBase + fragmentColumn(0, lane) + 8 (b / 2) + b % 2.
__device__ __forceinline__ void keptKeysByTest(const attn_abi::AttnFwdParams &p,
                                               const WorkTile &work,
                                               const typename Mods::MaskRow (&maskRows)[2],
                                               int row0, int keyBase, int lane,
                                               KeyBits (&kept)[2]) {
  const int laneKey = keyBase + fragmentColumn(0, lane);
  kept[0] = kept[1] = 0;
#pragma unroll kMaskTestUnroll
  for (int b = 0; b < kScoreRegs / 2; ++b) {
    const int key = laneKey + 8 * (b >> 1) + (b & 1);
    const float keyFloat = Mods::kMaskUsesKeyFloat ? exactIntToFloat(key) : 0.f;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + 8 * half;
      // A region's capture reads are bounds-checked, so evaluating it past
      // seqlen_k is safe.
      bool keep = (key < work.sequence.seqlenK) & Mask::allows(row, key, work.sequence.shift);
      keep &= Mods::keeps(p, maskRows[half], work.batch, work.head, row, key, keyFloat);
      kept[half] |= KeyBits(keep) << b;
    }
  }
}

// StoredBits: the launch has stored key bits (p.tile_key_bits), so that a
// partial tile's pairs test them instead of the mask_mod.
template <bool StoredBits>
__device__ __forceinline__ void applyMask(const attn_abi::AttnFwdParams &p,
                                          float (&scores)[kScoreRegs], const WorkTile &work,
                                          const typename Mods::MaskRow (&maskRows)[2], int row0,
                                          int keyBase, int lane, const StoredKeyRows &stored) {
  if constexpr (Mods::kMaskKeyBits) {
    // Each row's kept keys as bits (ThreadKeys), then one bit test a pair.
    const ThreadKeys<kBlockN> keys{keyBase + fragmentColumn(0, lane)};
    KeyBits kept[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + 8 * half;
      kept[half] = Mods::maskKeyBits(work.batch, work.head, row, keys) &
                   Mask::keptKeys(row, work.sequence.shift, keys) &
                   keys.below(work.sequence.seqlenK);
    }
    applyKeptKeys(scores, kept);
    return;
  }
  if constexpr (StoredBits) {
    KeyBits kept[2];
#pragma unroll
    for (int half = 0; half < 2; ++half)
      kept[half] = stored.slot >= 0 ? stored.rows[half] : ThreadKeys<kBlockN>::all();
    applyKeptKeys(scores, kept);
    return;
  }
  if constexpr (kBranchlessMaskTest) {
    KeyBits kept[2];
    keptKeysByTest(p, work, maskRows, row0, keyBase, lane, kept);
    applyKeptKeys(scores, kept);
    return;
  }
  forEachScoreElement<Mods::kMaskUsesKeyFloat>(
      row0, keyBase, lane, [&](int i, int half, int row, int key, float keyFloat) {
        bool keep = key < work.sequence.seqlenK && Mask::allows(row, key, work.sequence.shift);
        if constexpr (Mods::kHasMaskMod)
          keep = keep && Mods::keeps(p, maskRows[half], work.batch, work.head, row, key, keyFloat);
        if (!keep)
          scores[i] = negativeInfinity();
      });
}

} // namespace attn_kernel
