// Producer of the backward main kernel: one thread loads the K and V tiles
// once and streams the ring of (Q, dO, log-sum-exp, delta) stages.
#pragma once

#include "bwd/key_block.cuh"

namespace attn_bwd {

static_assert(kRowBytes == 128 && kColumnBlock == 64, "tmaLoadColumnBlocks' layout");

__device__ __forceinline__ u32 stageQ(u32 smemBase, int stage) {
  return smemBase + attn_plan::kSmemQ + stage * kQTileBytes;
}
__device__ __forceinline__ u32 stageDo(u32 smemBase, int stage) {
  return smemBase + attn_plan::kSmemDo + stage * kQTileBytes;
}
__device__ __forceinline__ u32 stageLse(u32 smemBase, int stage) {
  return smemBase + attn_plan::kSmemLse + stage * kRowStatBytes;
}
__device__ __forceinline__ u32 stageDelta(u32 smemBase, int stage) {
  return smemBase + attn_plan::kSmemDelta + stage * kRowStatBytes;
}

__device__ void produce(const attn_abi::AttnBwdParams &p, u32 smemBase, const Barriers &barriers,
                        const KeyBlock &block) {
  prefetchTensorMap(&p.q_map);
  prefetchTensorMap(&p.k_map);
  prefetchTensorMap(&p.v_map);
  prefetchTensorMap(&p.do_map);
  const Sequence &sequence = block.sequence;
  const int keyRow = sequence.rowK + block.keyTile * kBlockN;
  mbarrierArriveExpectTx(barriers.kvFull(), 2 * kKvTileBytes);
  tmaLoadColumnBlocks<kColumnBlocks>(smemBase + attn_plan::kSmemK, kBlockN, &p.k_map,
                                     barriers.kvFull(), keyRow, block.kvHead, sequence.mapBatch);
  tmaLoadColumnBlocks<kColumnBlocks>(smemBase + attn_plan::kSmemV, kBlockN, &p.v_map,
                                     barriers.kvFull(), keyRow, block.kvHead, sequence.mapBatch);

  const StepWalk walk = stepWalkOf(p, block);
  for (int position = 0; position < walk.positions; ++position) {
    const int step = StepWalk::stepOf(walk.entryAt(position));
    const RingSlot slot = ringSlot<kStages>(position);
    if (position >= kStages)
      mbarrierWait(barriers.empty(slot.stage), slot.phase ^ 1);
    const int head = block.headOf(step), queryBlock = block.queryBlockOf(step);
    const int queryRow = sequence.rowQ + queryBlock * kBlockM;
    const u32 full = barriers.full(slot.stage);
    mbarrierArriveExpectTx(full, 2 * kQTileBytes + 2 * kRowStatBytes);
    tmaLoadColumnBlocks<kColumnBlocks>(stageQ(smemBase, slot.stage), kBlockM, &p.q_map, full,
                                       queryRow, head, sequence.mapBatch);
    tmaLoadColumnBlocks<kColumnBlocks>(stageDo(smemBase, slot.stage), kBlockM, &p.do_map, full,
                                       queryRow, head, sequence.mapBatch);
    const i64 stats = rowStatsBase(p, block.batch, head) + static_cast<i64>(queryBlock) * kBlockM;
    bulkLoad(stageLse(smemBase, slot.stage), p.lse_log2 + stats, kRowStatBytes, full);
    bulkLoad(stageDelta(smemBase, slot.stage), p.delta + stats, kRowStatBytes, full);
  }
}

} // namespace attn_bwd
