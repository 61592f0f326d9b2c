// Producer: one thread issues every TMA load: each work tile's Q, and the
// ring of K/V stages (with a partial tile's stored key bits) in the order
// the consumers take the key tiles (forEachVisitedTile).
#pragma once

#include "fwd/tile_scheduler.cuh"

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

__device__ void produce(const attn_abi::AttnFwdParams &p, u32 smemBase, const Barriers &barriers,
                        const TileSchedule &schedule) {
  prefetchTensorMap(&p.q_map);
  prefetchTensorMap(&p.k_map);
  prefetchTensorMap(&p.v_map);
  prefetchTensorMap(&p.o_map);

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
    int keyRow = work.sequence.rowK + tile * kBlockN;
    // A partial tile's stored key bits come with its K tile.
    const int keySlot = kStoredKeyBits ? storedKeySlot(p, work, tile) : -1;
    if (reused)
      mbarrierWait(barriers.kEmpty(slot.stage), slot.phase ^ 1);
    mbarrierArriveExpectTx(barriers.kFull(slot.stage),
                           kKvTileBytes + (keySlot >= 0 ? kTileKeyWordsBytes : 0));
    loadTile(smemBase + attn_plan::kSmemK + slot.stage * kKvTileBytes, kBlockN, &p.k_map,
             barriers.kFull(slot.stage), keyRow, work.kvHead, work.sequence.mapBatch);
    if (keySlot >= 0)
      bulkLoad(keyWordsTile(smemBase, slot.stage), tileKeyWords(p, keySlot), kTileKeyWordsBytes,
               barriers.kFull(slot.stage));
    if (reused)
      mbarrierWait(barriers.vEmpty(slot.stage), slot.phase ^ 1);
    mbarrierArriveExpectTx(barriers.vFull(slot.stage), kKvTileBytes);
    loadTile(smemBase + attn_plan::kSmemV + slot.stage * kKvTileBytes, kBlockN, &p.v_map,
             barriers.vFull(slot.stage), keyRow, work.kvHead, work.sequence.mapBatch);
    ++ring;
  };
  forEachVisitedTile(p, schedule, loadQ, loadKeyTile);
}

} // namespace attn_kernel
