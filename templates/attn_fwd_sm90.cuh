// Forward softmax attention for sm_90a.
//
// A persistent grid of at most one block per SM walks the work tiles (BLOCK_M
// query rows of one (batch, head)) in a static round-robin. Warpgroup 0 is
// the producer: one thread streams each tile's Q and a ring of K/V stages
// into shared memory with TMA, completing on mbarriers; the ring runs on
// across tiles, so the next tile's loads overlap this tile's epilogue. Warpgroups 1..C are
// consumers, each owning 64 query rows: S = Q Kᵀ on WGMMA from shared memory,
// masking and the online softmax in registers, then O += P V on WGMMA with P
// taken from registers. Each consumer overlaps the softmax of one key tile
// with the PV product of the previous one, and the consumers take turns on
// the tensor cores (ping-pong). The epilogue normalizes O, stores it through
// shared memory with TMA, and writes the per-row log-sum-exp.
//
// Everything the compiler decided arrives through namespace attn_plan, emitted
// ahead of this file: element type, head dim, tile sizes, stage count, register
// split, mask policy and the shared-memory offsets of every buffer, and
// through attn_plan::UserMods the spec's mask_mod / score_mod regions and the
// per-tile coverage test derived from the mask_mod.
#pragma once

#include "device/sequence.cuh"
#include "fwd/tile_scheduler.cuh"
#include "fwd/producer.cuh"
#include "fwd/consumer_gemm.cuh"
#include "fwd/mask_hooks.cuh"
#include "fwd/score_mod.cuh"
#include "fwd/epilogue.cuh"
#include "fwd/mainloop.cuh"

extern "C" __global__ void __launch_bounds__(attn_kernel::kThreads, 1)
    attn_fwd_kernel(const __grid_constant__ attn_abi::AttnFwdParams p) {
  using namespace attn_kernel;
  const u32 smemBase = alignedDynamicShared();
  const Barriers barriers{smemBase + attn_plan::kSmemBarriers};
  const TileSchedule schedule(p);

  const int warpgroup = threadIdx.x / kWarpgroupThreads;
  if (threadIdx.x == 0) {
    for (int consumer = 0; consumer < (kDiagonals > 0 ? kConsumers : 0); ++consumer)
      for (int window = 0; window < kDiagonalWindows; ++window) {
        mbarrierInit(barriers.diagonalFull(consumer, window), 32);
        mbarrierInit(barriers.diagonalEmpty(consumer, window), kWarpsPerWarpgroup);
      }
    mbarrierInit(barriers.qFull(), 1);
    mbarrierInit(barriers.qEmpty(), kReleaseArrivals);
    for (int stage = 0; stage < kStages; ++stage) {
      mbarrierInit(barriers.kFull(stage), 1);
      mbarrierInit(barriers.vFull(stage), 1);
      mbarrierInit(barriers.kEmpty(stage), kReleaseArrivals);
      mbarrierInit(barriers.vEmpty(stage), kReleaseArrivals);
    }
    fenceBarrierInit();
  }
  __syncthreads();

  if (warpgroup == 0) {
    releaseRegisters<attn_plan::kProducerRegisters>();
    const int warp = threadIdx.x / 32;
    if (threadIdx.x == 0)
      produce(p, smemBase, barriers, schedule);
    else if constexpr (kDiagonals > 0)
      if (warp >= 1 && warp <= kConsumers)
        stageDiagonals(p, smemBase, barriers, schedule, warp - 1, threadIdx.x % 32);
  } else {
    claimRegisters<attn_plan::kConsumerRegisters>();
    consume(p, smemBase, barriers, warpgroup - 1, schedule);
  }
}

#include "attn_fwd_prepass_sm90.cuh"

#include "attn_split_kv_sm90.cuh"
