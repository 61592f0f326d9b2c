// Consumer pieces around the tensor cores: S = Q Kᵀ on WGMMA, the release
// of a ring slot, the consumer warpgroups' ping-pong turns (GemmTurns), and
// the walk over a thread's elements of S that the mask and score_mod use.
#pragma once

#include "fwd/tile_scheduler.cuh"

namespace attn_kernel {

// S = Q_slice Kᵀ, issued asynchronously as one WGMMA group: A is this
// warpgroup's 64 rows of Q, B the K tile, both K-major.
__device__ __forceinline__ void issueScores(float (&scores)[kScoreRegs], u32 qSlice, u32 kTile) {
  static_assert(kRowBytes == 128, "issueKMajorProduct's rows");
  issueKMajorProduct<kBlockN, kHeadDim, kBlockM, kBlockN, Element>(scores, qSlice, kTile);
}

// Lane 0 of each warp gives a ring slot (or the Q tile) back to the
// producer, once the warp's WGMMA groups that read it have completed.
__device__ __forceinline__ void releaseSlot(u32 emptyBarrier, int lane) {
  if (lane == 0)
    mbarrierArrive(emptyBarrier);
}

// Ping-pong between consumer warpgroups: each issues its WGMMAs only on its
// turn and then hands the turn to the next, so the tensor cores run one
// warpgroup's GEMMs while the others do their softmax. Turns are named
// barriers of two warpgroups (the waiter syncs, the previous one arrives).
// All consumers take the same number of turns (one per GEMM issue of the same
// work tiles), so the turns go round in order across work tiles.
struct GemmTurns {
  static constexpr int kFirstBarrier = 1 + kConsumers; // after the epilogue barriers
  static constexpr bool kEnabled = kConsumers > 1;
  int consumer;

  // The last consumer opens the first turn of consumer 0.
  __device__ __forceinline__ void open() const {
    if (kEnabled && consumer == kConsumers - 1)
      namedBarrierArrive(kFirstBarrier, 2 * kWarpgroupThreads);
  }
  __device__ __forceinline__ void wait() const {
    if (kEnabled)
      namedBarrierSync(kFirstBarrier + consumer, 2 * kWarpgroupThreads);
  }
  __device__ __forceinline__ void pass() const {
    if (kEnabled)
      namedBarrierArrive(kFirstBarrier + (consumer + 1) % kConsumers, 2 * kWarpgroupThreads);
  }
  // The last consumer's final pass opened a turn of consumer 0; consumer 0
  // takes it so that no barrier is left half arrived at exit.
  __device__ __forceinline__ void close() const {
    if (kEnabled && consumer == 0)
      wait();
  }
};

// Calls body(i, half, row, key, keyFloat) for each score fragment element
// of this thread in the tile of keys from keyBase. With NeedsKeyFloat,
// keyFloat is key - keyOrigin as f32 for the user regions (the origin is 0
// unless the score_mod reads kv relative to one): within 2^24 the sum of
// the lane's first key, converted once per tile, and the element's column
// offset is exact, so each element costs one add; beyond it each element
// converts its own key.
template <bool NeedsKeyFloat, class Body>
__device__ __forceinline__ void forEachScoreElement(int row0, int keyBase, int lane, Body &&body,
                                                    int keyOrigin = 0) {
  const int laneKey = keyBase + fragmentColumn(0, lane);
  const int relativeBase = keyBase - keyOrigin;
  if (NeedsKeyFloat && relativeBase > -(1 << 24) && relativeBase + kBlockN <= (1 << 24)) {
    const float laneKeyFloat = exactIntToFloat(laneKey - keyOrigin);
#pragma unroll
    for (int i = 0; i < kScoreRegs; ++i)
      body(i, fragmentRowHalf(i), row0 + 8 * fragmentRowHalf(i), laneKey + fragmentColumn(i, 0),
           laneKeyFloat + static_cast<float>(fragmentColumn(i, 0)));
    return;
  }
#pragma unroll
  for (int i = 0; i < kScoreRegs; ++i) {
    const int key = laneKey + fragmentColumn(i, 0);
    body(i, fragmentRowHalf(i), row0 + 8 * fragmentRowHalf(i), key,
         NeedsKeyFloat ? exactIntToFloat(key - keyOrigin) : 0.f);
  }
}

} // namespace attn_kernel
