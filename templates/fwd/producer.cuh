// Producer: one thread issues every TMA load: each work tile's Q, and the
// ring of K/V stages (with a partial tile's stored key bits; from the page
// pools over a paged cache) in the order the consumers take the key tiles
// (forEachVisitedTile).
#pragma once

#include "fwd/tile_scheduler.cuh"
#include "fwd/paged_kv.cuh"

namespace attn_kernel {

__device__ __forceinline__ void loadTile(u32 destination, u32 rows, const TensorMapBlob *map,
                                         u32 barrier, int row, int head, int batch) {
  static_assert(kRowBytes == 128 && kColumnBlock == 64, "tmaLoadColumnBlocks' layout");
  tmaLoadColumnBlocks<kColumnBlocks>(destination, rows, map, barrier, row, head, batch);
}

// The block's work tiles and the key tiles each visits, in the order the
// consumers take them: onWork(work) once per work tile, then
// onKeyTile(work, tile) per visited key tile. For the producer's threads.
template <class OnWork, class OnKeyTile>
__device__ __forceinline__ void forEachVisitedTile(const attn_abi::AttnFwdParams &p,
                                                   const TileSchedule &schedule, OnWork &&onWork,
                                                   OnKeyTile &&onKeyTile) {
  for (int index = schedule.firstPosition(); index < schedule.end;
       index = schedule.nextPosition(index)) {
    const WorkTile work = schedule.at(p, index);
    if (work.empty())
      continue;
    onWork(work);
    for (int tile = nextVisitedTile(p, work, work.keys.begin); tile < work.keys.end;
         tile = nextVisitedTile(p, work, tile + 1))
      onKeyTile(work, tile);
  }
}

// The producer's loop for one layout of K and V: contiguous, or page pools
// (Paged). A kernel compiled for paged caches (attn_plan::kPagedKv) holds
// both loops and chooses once, outside them: a test at each load made the
// contiguous kernels 1.8 % slower (H200, causal head dim 128 and unmasked
// head dim 64), and a second loop, even with no test in it, made head dim
// 256 plans spill (ptxas: 4 to 80 bytes), so other kernels hold only the
// contiguous one.
template <bool Paged>
__device__ void produceTiles(const attn_abi::AttnFwdParams &p, u32 smemBase,
                             const Barriers &barriers, const TileSchedule &schedule) {
  int ring = 0; // key tiles loaded so far, over all work tiles
  int qLoads = 0;
  auto loadQ = [&](const WorkTile &work) {
    // Every work tile loads Q, even one with no key tile to visit, so that
    // the consumers' Q phases never depend on the mask. The previous Q must
    // have been released (and, where staging shares its bytes, stored).
    if (qLoads > 0)
      mbarrierWait(barriers.qEmpty(), (qLoads - 1) & 1);
    mbarrierArriveExpectTx(barriers.qFull(), kQTileBytes);
    loadTile(smemBase + attn_plan::kSmemQ, kBlockM, &p.q_map, barriers.qFull(),
             work.sequence.rowQ + work.queryBegin, work.head, work.sequence.mapBatch);
    ++qLoads;
  };
  auto loadKeyTile = [&](const WorkTile &work, int tile) {
    RingSlot slot = ringSlot<kStages>(ring);
    // The slot's previous tile (ring - kStages) must have been released;
    // its release completed the phase before this slot's current one.
    bool reused = ring >= kStages;
    // Key tile `tile`'s rows of K or V.
    auto loadKeys = [&](u32 destination, const TensorMapBlob *map, u32 barrier) {
      if constexpr (Paged)
        loadPagedTile(p, destination, map, barrier, work, tile * kBlockN);
      else
        loadTile(destination, kBlockN, map, barrier, work.sequence.rowK + tile * kBlockN,
                 work.kvHead, work.sequence.mapBatch);
    };
    // A partial tile's stored key bits come with its K tile.
    const int keySlot = kStoredKeyBits ? storedKeySlot(p, work, tile) : -1;
    if constexpr (Paged)
      prefetchPageEntries(p, work, tile * kBlockN);
    if (reused)
      mbarrierWait(barriers.kEmpty(slot.stage), slot.phase ^ 1);
    mbarrierArriveExpectTx(barriers.kFull(slot.stage),
                           kKvTileBytes + (keySlot >= 0 ? kTileKeyWordsBytes : 0));
    loadKeys(smemBase + attn_plan::kSmemK + slot.stage * kKvTileBytes, &p.k_map,
             barriers.kFull(slot.stage));
    if (keySlot >= 0)
      bulkLoad(keyWordsTile(smemBase, slot.stage), tileKeyWords(p, keySlot), kTileKeyWordsBytes,
               barriers.kFull(slot.stage));
    if (reused)
      mbarrierWait(barriers.vEmpty(slot.stage), slot.phase ^ 1);
    mbarrierArriveExpectTx(barriers.vFull(slot.stage), kKvTileBytes);
    loadKeys(smemBase + attn_plan::kSmemV + slot.stage * kKvTileBytes, &p.v_map,
             barriers.vFull(slot.stage));
    ++ring;
  };
  forEachVisitedTile(p, schedule, loadQ, loadKeyTile);
}

__device__ void produce(const attn_abi::AttnFwdParams &p, u32 smemBase, const Barriers &barriers,
                        const TileSchedule &schedule) {
  prefetchTensorMap(&p.q_map);
  prefetchTensorMap(&p.k_map);
  prefetchTensorMap(&p.v_map);
  prefetchTensorMap(&p.o_map);
  if constexpr (attn_plan::kPagedKv) {
    if (readsPages(p)) {
      produceTiles<true>(p, smemBase, barriers, schedule);
      return;
    }
  }
  produceTiles<false>(p, smemBase, barriers, schedule);
}

} // namespace attn_kernel
