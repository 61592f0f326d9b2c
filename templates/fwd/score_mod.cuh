// score_mod on a consumer's scores: the diagonals producer warps stage in
// shared memory (stageDiagonals, DiagonalStage) and applyScoreMod; then
// packProbabilities, the scores' last step before the PV product.
#pragma once

#include "fwd/tile_scheduler.cuh"
#include "fwd/producer.cuh"
#include "fwd/consumer_gemm.cuh"

namespace attn_kernel {

// score_mod values that depend on q and kv only through d = q - kv (a
// relative-position table; attn-lower-mods outlines them): instead of a
// capture read per pair, each consumer warpgroup reads the kBlockN + 63
// diagonals its 64 rows meet in a key tile from a window of its own in shared
// memory; each pair then reads its word at a constant offset from the lane's
// base. Producer warp 1 + c fills consumer c's windows (stageDiagonals), a
// key tile ahead of its softmax, so no consumer thread waits on the table's
// global loads: the windows form a ring with a full and an empty mbarrier
// each, like the K/V stages. The consumer waits for a window's fill at the
// tile's score_mod, and each of its warps gives it back once its lanes have
// read their words.
constexpr int kDiagonalsPerTile = kBlockN + 63;
constexpr u32 kDiagonalWindowBytes = (kBlockN + 64) * 4;
static_assert(kDiagonals == 0 || kConsumers < kWarpsPerWarpgroup,
              "a producer warp beside the TMA warp fills each consumer's windows");
static_assert(kDiagonals == 0 || kConsumers * kDiagonalWindows * kDiagonals *
                                         kDiagonalWindowBytes <=
                                     attn_plan::kSmemScoreDiagonalBytes,
              "the score_diagonals buffer (attn::scoreDiagonalBytes) holds every window");
constexpr int kColumnGroups = kBlockN / 8;

// Consumer `consumer`'s windows: [window][diagonal value][kBlockN + 64] words.
__device__ __forceinline__ u32 diagonalWindow(u32 smemBase, int consumer, int window) {
  return smemBase + attn_plan::kSmemScoreDiagonals +
         (consumer * kDiagonalWindows + window) * kDiagonals * kDiagonalWindowBytes;
}

// body(n, w) for the words lane + 32 w of each value n a fill warp's lane
// loads and stores.
constexpr int kDiagonalLaneWords = (kDiagonalsPerTile + 31) / 32;
template <class Body>
__device__ __forceinline__ void forEachLaneWord(int lane, Body &&body) {
#pragma unroll
  for (int n = 0; n < kDiagonals; ++n)
#pragma unroll
    for (int w = 0; w < kDiagonalLaneWords; ++w)
      if (lane + 32 * w < kDiagonalsPerTile)
        body(n, w);
}

// The producer warp of consumer `consumer`: for every key tile the block
// visits, in the consumers' order, it loads the values of the slice's rows
// (word x of a window holds d = sliceRow0 - (keyTile kBlockN + kBlockN - 1) +
// x), then waits for the window to be free, stores them and signals them
// full, one arrival per lane.
__device__ void stageDiagonals(const attn_abi::AttnFwdParams &p, u32 smemBase,
                               const Barriers &barriers, const TileSchedule &schedule,
                               int consumer, int lane) {
  int fills = 0;
  auto fill = [&](const WorkTile &tileWork, int tile) {
    const WorkTile work = consumerWork(p, tileWork, consumer);
    const int sliceRow0 = sliceBegin(p, work, consumer);
    const long long first = static_cast<long long>(sliceRow0) - tile * kBlockN - (kBlockN - 1);
    u32 words[Mods::kScoreDiagonalSlots][kDiagonalLaneWords];
    forEachLaneWord(lane, [&](int n, int w) {
      words[n][w] = Mods::scoreDiagonal(p, n, work.batch, work.head, first + lane + 32 * w);
    });
    // As the K/V ring: the window's previous fill must have been given back.
    const RingSlot slot = ringSlot<kDiagonalWindows>(fills);
    if (fills >= kDiagonalWindows)
      mbarrierWait(barriers.diagonalEmpty(consumer, slot.stage), slot.phase ^ 1);
    const u32 address = diagonalWindow(smemBase, consumer, slot.stage);
    forEachLaneWord(lane, [&](int n, int w) {
      asm volatile("st.shared.b32 [%0], %1;" ::"r"(address + n * kDiagonalWindowBytes +
                                                   4 * (lane + 32 * w)),
                   "r"(words[n][w])
                   : "memory");
    });
    mbarrierArrive(barriers.diagonalFull(consumer, slot.stage));
    ++fills;
  };
  forEachVisitedTile(p, schedule, [](const WorkTile &) {}, fill);
}

// A consumer's side of its windows: the fills come in the order of the key
// tiles it visits, so the window of the key tile at ring position
// `position` (the K/V ring's count, over all work tiles) is that position's
// slot of the window ring. Its wait and arrival sit inside the softmax, as
// asm statements that hide their loop and branch from the compiler.
struct DiagonalStage {
  u32 smemBase;
  int consumer;

  // The window of the key tile at `position`, once filled.
  __device__ __forceinline__ u32 acquire(const Barriers &barriers, int position) const {
    const RingSlot slot = ringSlot<kDiagonalWindows>(position);
    mbarrierWaitInAsm(barriers.diagonalFull(consumer, slot.stage), slot.phase);
    return diagonalWindow(smemBase, consumer, slot.stage);
  }
  // Gives it back once this warp's lanes have read it.
  __device__ __forceinline__ void release(const Barriers &barriers, int position, int lane) const {
    mbarrierArriveForWarp(
        barriers.diagonalEmpty(consumer, ringSlot<kDiagonalWindows>(position).stage), lane);
  }
};

// The words of a published window this thread's pairs read. Element i
// (row 16 warp + lane / 4 + 8 h of the slice, column 8 g + 2 (lane % 4) + e)
// meets diagonal word 16 warp + lane / 4 - 2 (lane % 4) + kBlockN - 1 -
// 8 (g - h) - e: row half 1 at group g meets what half 0 meets at g - 1, so
// 2 (kBlockN / 8 + 1) reads serve the kBlockN / 2 elements.
// words[n][g - h + 1][e].
__device__ __forceinline__ void readDiagonals(u32 window, int warp, int lane,
                                              u32 (&words)[Mods::kScoreDiagonalSlots]
                                                          [kColumnGroups + 1][2]) {
  const u32 laneWord = window + 4 * (16 * warp + lane / 4 - 2 * (lane % 4) + kBlockN - 1);
#pragma unroll
  for (int n = 0; n < kDiagonals; ++n)
#pragma unroll
    for (int group = -1; group < kColumnGroups; ++group)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        words[n][group + 1][e] =
            loadShared<u32>(laneWord + n * kDiagonalWindowBytes - 4 * (8 * group + e));
}

// Replaces each raw score s by score_mod(scale * s, batch, head, q, k)
// (with Mods::kScoreKeyRelative, k as f32 is measured from keyOrigin).
__device__ __forceinline__ void applyScoreMod(const attn_abi::AttnFwdParams &p,
                                              float (&scores)[kScoreRegs], const WorkTile &work,
                                              const typename Mods::ScoreRow (&scoreRows)[2],
                                              int row0, int keyBase, float scale, int lane,
                                              const DiagonalStage &diagonals,
                                              const Barriers &barriers, int position,
                                              int keyOrigin) {
  u32 words[Mods::kScoreDiagonalSlots][kColumnGroups + 1][2];
  if constexpr (kDiagonals > 0) {
    readDiagonals(diagonals.acquire(barriers, position), (threadIdx.x % kWarpgroupThreads) / 32,
                  lane, words);
    diagonals.release(barriers, position, lane);
  }
  forEachScoreElement<Mods::kScoreUsesKeyFloat>(
      row0, keyBase, lane, [&](int i, int half, int row, int key, float keyFloat) {
        unsigned pairWords[Mods::kScoreDiagonalSlots] = {};
#pragma unroll
        for (int n = 0; n < kDiagonals; ++n)
          pairWords[n] = words[n][(i >> 2) - half + 1][i & 1];
        scores[i] = Mods::score(p, scoreRows[half], scores[i] * scale, work.batch, work.head, row,
                                key, keyFloat, pairWords);
      },
      Mods::kScoreKeyRelative ? keyOrigin : 0);
}

__device__ __forceinline__ void packProbabilities(const float (&scores)[kScoreRegs],
                                                  u32 (&probabilities)[kPRegs]) {
#pragma unroll
  for (int i = 0; i < kPRegs; ++i)
    probabilities[i] = packPair<Element>(scores[2 * i], scores[2 * i + 1]);
}

} // namespace attn_kernel
