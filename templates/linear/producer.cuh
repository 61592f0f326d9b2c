// The chunkwise kernel's producer warp.
#pragma once

#include "linear/decays.cuh"

namespace attn_linear {

// ---------------------------------------------------------------------------
// Producer warp: lane 0 issues the loads, every lane computes the decays.
// The causal form loads Q, K and V of each chunk; the non-causal form loads
// K and V of every chunk, then Q.

__device__ __forceinline__ void loadRows(u32 destination, const TensorMapBlob *map, u32 barrier,
                                         int row, int head, int batch) {
  static_assert(kRowBytes == 128, "tmaLoadColumnBlocks' layout");
  tmaLoadColumnBlocks<kKeyBlocks>(destination, kChunk, map, barrier, row, head, batch);
}

template <bool Reversed>
__device__ void produce(const attn_abi::AttnLinearParams &p, u32 smem, unsigned char *smemPointer,
                        const Barriers &barriers, const Work &work, int lane) {
  if (lane == 0) {
    prefetchTensorMap(&p.q_map);
    prefetchTensorMap(&p.k_map);
    prefetchTensorMap(&p.v_map);
    prefetchTensorMap(&p.o_map);
  }
  const int passCount = passCountOf(p, work);
  int load = 0;
  for (int pass = 0; pass < passCount; ++pass) {
    const Pass kind = passOf(p, work, pass);
    const bool withQ = loadsQ(kind), withKv = loadsKv(kind);
    float walkedLog2Decay = 0.f;
    for (int step = 0; step < work.endChunk - work.firstChunk; ++step, ++load) {
      const int chunk = chunkAt(work, step);
      RingSlot slot = ringSlot<kStages>(load);
      if (load >= kStages)
        mbarrierWait(barriers.empty(slot.stage), slot.phase ^ 1);
      const u32 full = barriers.full(slot.stage);
      if (lane == 0) {
        // The loads first; the barrier's one arrival comes after the decays.
        mbarrierExpectTx(full, (withQ ? kQkTileBytes : 0) +
                                   (withKv ? kQkTileBytes + kSlicesPerBlock * kVTileBytes : 0));
        const int row = chunkFirstRow<Reversed>(p, chunk);
        if (withQ)
          loadRows(qTile(smem, slot.stage), &p.q_map, full, row, work.qLoadHead, work.batch);
        if (withKv) {
          loadRows(kTile(smem, slot.stage), &p.k_map, full, row, work.kvLoadHead, work.batch);
#pragma unroll
          for (int slice = 0; slice < kSlicesPerBlock; ++slice)
            tmaLoad4d(vTile(smem, slot.stage, slice), &p.v_map, full, (work.slice + slice) * kSlice,
                      row, work.kvLoadHead, work.batch);
        }
      }
      if constexpr (kGated) {
        // After the stage's loads: the first step starts the lookahead, each
        // step copies into the slot the previous one read (the warp synced
        // after it).
        if (step == 0)
          for (int ahead = 0; ahead < kDecayLookahead; ++ahead)
            copyTokenDecays<Reversed>(p, work, smem, ahead, lane);
        copyTokenDecays<Reversed>(p, work, smem, step + kDecayLookahead, lane);
      }
      if constexpr (kHasDecay) {
        const TokenDecays decays = readTokenDecays<Reversed>(
            p, work, reinterpret_cast<const float *>(smemPointer + attn_plan::kSmemDecayRing), step,
            lane);
        float last = writeChunkDecay<Reversed>(decays, work.segmentKernel ? walkedLog2Decay : 0.f,
                                     chunkDecay(smemPointer, slot.stage), lane);
        walkedLog2Decay += last;
        __syncwarp();
      }
      // Releases the decays to the consumers, which acquire them with the
      // loads' completion.
      if (lane == 0)
        mbarrierArrive(full);
    }
  }
}

} // namespace attn_linear
