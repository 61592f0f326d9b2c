// The short-query path of a softmax module: decode steps, speculative
// verification and every call over a paged KV cache (AttnSplitKvParams).
//
// Few query rows leave a 128-row WGMMA tile nearly empty and the grid
// nearly idle, and the kernel is bound by reading K and V once. So each kv
// head's query heads are packed as the rows of one tile (GQA packing), and
// the keys of a (batch, kv head) are cut into `splits` pieces, a block
// each (flash-decoding), whose partial results the combine kernel merges
// through their log-sum-exps. A block of four warps streams its keys
// through a ring of cp.async stages (any row address: pages in any order),
// and its warps split each stage's keys (few rows) or its rows (many):
// S = Q Kᵀ and O += P V on warp-level mma.sync, the online softmax in
// registers. The warps' partial rows meet in shared memory at the end.
//
// The pieces: splitkv/plan.cuh (constants), work.cuh (a block's rows and
// keys), loads.cuh (the cp.async stages, paged or not), mainloop.cuh (a
// warp's products and online softmax), epilogue.cuh (merging and storing).
#pragma once

// quadMax and quadSum come from device/online_softmax.cuh, which the forward
// unit holds.
#include "splitkv/epilogue.cuh"

// grid (splits, row blocks * kv_heads, batch), kSplitKvThreads threads,
// splitKvSharedBytes(head_dim) of dynamic shared memory.
extern "C" __global__ void __launch_bounds__(attn_abi::kSplitKvThreads, 2)
    attn_split_kv_kernel(const __grid_constant__ attn_abi::AttnSplitKvParams p) {
  using namespace attn_split_kv;
  extern __shared__ __align__(16) unsigned char splitKvShared[];
  const u32 smemBase = sharedAddress(splitKvShared);
  const Work work = workOf(p);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  // Few rows: the warps split each stage's keys; many: its rows.
  const int blockRows = min(kRows, work.packedRows - work.rowBegin);
  const int rowWarps = blockRows <= 16 ? 1 : (blockRows <= 32 ? 2 : 4);
  const int keyWarps = min(kWarps / rowWarps, kBlockN / 16);
  const int rowWarp = warp % rowWarps, keyWarp = warp / rowWarps;
  const bool computes = keyWarp < keyWarps;
  const int warpKeys = kBlockN / keyWarps;

  const RowContext rows = rowContext(p, work, 16 * rowWarp, lane);
  WarpState state;
  initState(state);
  QueryFragments fragments;

  const int tiles = (work.keyEnd - work.keyBegin + kBlockN - 1) / kBlockN;
  loadQuery(p, smemBase, work);
#pragma unroll
  for (int stage = 0; stage < kStages - 1; ++stage) {
    if (stage < tiles)
      loadKeyTile(p, smemBase, work, stage, stage, lookupStagePages(p, work, stage));
    commitAsyncCopies();
  }
  StagePages nextPages = lookupStagePages(p, work, kStages - 1);
  for (int tile = 0; tile < tiles; ++tile) {
    waitAsyncCopies<kStages - 2>();
    __syncthreads();
    // The stage the previous tile used is free now that every warp passed
    // the barrier: refill it kStages - 1 tiles ahead.
    const int ahead = tile + kStages - 1;
    if (ahead < tiles) {
      loadKeyTile(p, smemBase, work, ahead, ahead % kStages, nextPages);
      nextPages = lookupStagePages(p, work, ahead + 1);
    }
    commitAsyncCopies();
    if (computes) {
      if (tile == 0) // Q arrived with the first stage
        loadQueryFragments(smemBase, 16 * rowWarp, lane, fragments);
      const int stage = tile % kStages;
      const int tileKey = work.keyBegin + tile * kBlockN;
      const int keyRow0 = keyWarp * warpKeys;
      if (warpKeys % 64 == 0)
        consumeStage<64>(p, work, rows, fragments, smemBase, stage, tileKey, 16 * rowWarp,
                         keyRow0, warpKeys, lane, state);
      else if (warpKeys % 32 == 0)
        consumeStage<32>(p, work, rows, fragments, smemBase, stage, tileKey, 16 * rowWarp,
                         keyRow0, warpKeys, lane, state);
      else
        consumeStage<16>(p, work, rows, fragments, smemBase, stage, tileKey, 16 * rowWarp,
                         keyRow0, warpKeys, lane, state);
    }
  }
  // The combine kernel's blocks may start once every block has streamed
  // its keys (they wait for the results), so its launch hides behind the
  // blocks' stores. Allowed at the kernel's start, they landed on the few
  // multiprocessors with room then, and a combine of 256 pieces a row ran
  // slower (H200, docs/benchmarks.md).
  allowDependentLaunch();
  waitAsyncCopies<0>();
  __syncthreads();
  const u32 scratch = keyStage(smemBase, 0);
  if (computes) {
#pragma unroll
    for (int half = 0; half < 2; ++half)
      state.rowSum[half] = quadSum(state.rowSum[half]);
    storePartialRows(scratch, warp, lane, state);
  }
  __syncthreads();
  storeBlockRows(p, scratch, work, rowWarps, keyWarps);
}

// Merges the splits' pieces of one output row's 32 columns a block (a
// dependent launch behind the split kernel): the
// threads take the splits' log-sum-exps in turn, then each takes a 4-column
// chunk of every (ATTN_SPLIT_KV_COMBINE_THREADS / 8)-th split, so that many
// pieces' loads are in flight together and a decode step's few rows still
// spread over the multiprocessors; the chunks' groups meet in shared memory.
extern "C" __global__ void __launch_bounds__(ATTN_SPLIT_KV_COMBINE_THREADS)
    attn_split_kv_combine_kernel(const __grid_constant__ attn_abi::AttnSplitKvParams p) {
  using namespace attn_split_kv;
  constexpr int kThreadsPerRow = ATTN_SPLIT_KV_COMBINE_THREADS;
  constexpr int kChunks = ATTN_SPLIT_KV_COMBINE_COLUMNS / 4;
  constexpr int kGroups = kThreadsPerRow / kChunks;
  static_assert(kThreadsPerRow % kChunks == 0 && kHeadDim % ATTN_SPLIT_KV_COMBINE_COLUMNS == 0,
                "whole chunk groups");
  __shared__ float weights[attn_abi::kMaxKeySplits];
  __shared__ float reduction[kThreadsPerRow / 32];
  __shared__ float4 groupSums[kGroups][kChunks];

  const i64 outputRow = blockIdx.x;
  const i64 rowsTotal = static_cast<i64>(p.batch) * p.q_heads * p.seqlen_q;
  const int position = static_cast<int>(outputRow % p.seqlen_q);
  const int head = static_cast<int>((outputRow / p.seqlen_q) % p.q_heads);
  const int batch = static_cast<int>(outputRow / (static_cast<i64>(p.seqlen_q) * p.q_heads));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int splits = min(p.splits, attn_abi::kMaxKeySplits);
  // Launched while the split kernel may still run (launchDependent): its
  // pieces are read only after it completes.
  waitForPrerequisiteGrids();

  // The block's maximum and the splits' weights against it.
  float maximum = negativeInfinity();
  for (int split = threadIdx.x; split < splits; split += kThreadsPerRow) {
    weights[split] = p.partial_lse[split * rowsTotal + outputRow];
    maximum = fmaxf(maximum, weights[split]);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    maximum = fmaxf(maximum, __shfl_xor_sync(0xffffffffu, maximum, offset));
  if (lane == 0)
    reduction[warp] = maximum;
  __syncthreads();
  maximum = reduction[0];
#pragma unroll
  for (int other = 1; other < kThreadsPerRow / 32; ++other)
    maximum = fmaxf(maximum, reduction[other]);
  const float reference = maximum == negativeInfinity() ? 0.f : maximum;
  float sum = 0.f;
  for (int split = threadIdx.x; split < splits; split += kThreadsPerRow) {
    weights[split] = fastExp2(weights[split] - reference);
    sum += weights[split];
  }
  sum = quadSum(sum);
#pragma unroll
  for (int offset = 4; offset < 32; offset *= 2)
    sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  __syncthreads();
  if (lane == 0)
    reduction[warp] = sum;
  __syncthreads();
  sum = 0.f;
#pragma unroll
  for (int other = 0; other < kThreadsPerRow / 32; ++other)
    sum += reduction[other];

  const int chunk = threadIdx.x % kChunks, group = threadIdx.x / kChunks;
  const int column = blockIdx.y * ATTN_SPLIT_KV_COMBINE_COLUMNS;
  float4 total = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
  for (int split = group; split < splits; split += kGroups) {
    const float weight = weights[split];
    const float4 piece = reinterpret_cast<const float4 *>(
        p.partial_o + (split * rowsTotal + outputRow) * kHeadDim + column)[chunk];
    // An empty split's piece holds zeros; weight 0 keeps a stray NaN out.
    if (weight > 0.f) {
      total.x += piece.x * weight;
      total.y += piece.y * weight;
      total.z += piece.z * weight;
      total.w += piece.w * weight;
    }
  }
  groupSums[group][chunk] = total;
  __syncthreads();
  if (threadIdx.x >= kChunks)
    return;
#pragma unroll
  for (int other = 1; other < kGroups; ++other) {
    const float4 part = groupSums[other][chunk];
    total.x += part.x;
    total.y += part.y;
    total.z += part.z;
    total.w += part.w;
  }
  const float logSumExp2 = sum > 0.f ? reference + __log2f(sum) : negativeInfinity();
  const RowResult result =
      finishRow(p, batch, head, position, sequenceKeys(p, batch), logSumExp2);
  const float factor = sum > 0.f ? result.outputFactor / sum : 0.f;
  float values[4] = {total.x * factor, total.y * factor, total.z * factor, total.w * factor};
  storeOutput(p, batch, position, head, column + 4 * chunk, values);
  if (threadIdx.x == 0 && blockIdx.y == 0)
    p.lse[outputRow] = result.logSumExp;
}
