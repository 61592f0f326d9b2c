// The forward's prepass kernels, which the runtime launches ahead of
// attn_fwd_kernel: a mask_mod's tile coverage at run time, the partial
// tiles' slots and stored key bits, and the work cost and work order.
#pragma once

#include "fwd/tile_scheduler.cuh"

namespace attn_kernel {
// One stored word of a tile at run time: row q's keys keyBase + 8 j + e
// (j < kBlockN / 8, e < 2) as ThreadKeys bits, those inside the sequences and
// those the built-in mask and the mask_mod keep among them.
struct TileKeyWord {
  KeyBits inside;
  KeyBits kept;
};

__device__ __forceinline__ TileKeyWord evaluateTileKeyWord(const attn_abi::AttnFwdParams &p,
                                                           const Sequence &sequence, int batch,
                                                           int head, int q, int keyBase) {
  TileKeyWord word{0, 0};
  if (q >= sequence.seqlenQ)
    return word;
  for (int bit = 0; bit < kBlockN / 4; ++bit) {
    const int k = keyBase + 8 * (bit >> 1) + (bit & 1);
    if (k >= sequence.seqlenK)
      break;
    word.inside |= KeyBits(1) << bit;
    if (Mask::allows(q, k, sequence.shift) && Mods::keeps(p, batch, head, q, k))
      word.kept |= KeyBits(1) << bit;
  }
  return word;
}

__device__ __forceinline__ int countKeyBits(unsigned bits) { return __popc(bits); }
__device__ __forceinline__ int countKeyBits(unsigned long long bits) { return __popcll(bits); }

// Word `word` of tile (queryBlock, keyTile): row word / 4 of the block, lane
// quad word % 4.
__device__ __forceinline__ TileKeyWord evaluateTileKeyWord(const attn_abi::AttnFwdParams &p,
                                                           const Sequence &sequence, int batch,
                                                           int head, int queryBlock, int keyTile,
                                                           int word) {
  return evaluateTileKeyWord(p, sequence, batch, head, queryBlock * kBlockM + word / 4,
                             keyTile * kBlockN + 2 * (word % 4));
}
} // namespace attn_kernel

// Tile coverage of the masks at run time, for a mask_mod the compiler could
// not classify (it reads a buffer, ...): block (key tile, query block,
// batch * head) tests every pair of its tile inside the sequences against the
// built-in mask and the mask_mod and writes Empty, Partial or Full (Empty
// past a packed sequence's end; Full only where every key of the tile lies
// inside the key length). The
// forward kernel then skips the empty tiles and the per-pair test of the full
// ones. Built once per shape and captures, reused by every launch.
extern "C" __global__ void __launch_bounds__(ATTN_TILE_COVERAGE_THREADS)
    attn_tile_coverage_kernel(const __grid_constant__ attn_abi::AttnFwdParams p) {
  using namespace attn_kernel;
  const int keyTile = blockIdx.x, queryBlock = blockIdx.y;
  const int batch = blockIdx.z / p.q_heads, head = blockIdx.z % p.q_heads;
  const Sequence sequence = sequenceOf(p, batch);
  __shared__ int counts[2]; // pairs inside the sequences, pairs kept
  if (threadIdx.x == 0)
    counts[0] = counts[1] = 0;
  __syncthreads();
  int inside = 0, kept = 0;
  for (int word = threadIdx.x; word < kBlockM * 4; word += blockDim.x) {
    const TileKeyWord bits =
        evaluateTileKeyWord(p, sequence, batch, head, queryBlock, keyTile, word);
    inside += countKeyBits(bits.inside);
    kept += countKeyBits(bits.kept);
  }
  atomicAdd(&counts[0], inside);
  atomicAdd(&counts[1], kept);
  __syncthreads();
  if (threadIdx.x == 0) {
    // A tile past the key length is partial for the forward kernel anyway
    // (sliceCoverage): so it gets stored key bits, and a full tile keeps
    // every key.
    const bool keysInside = (keyTile + 1) * kBlockN <= sequence.seqlenK;
    Coverage coverage = counts[1] == 0 ? Coverage::Empty
                        : (counts[1] == counts[0] && keysInside ? Coverage::Full
                                                                : Coverage::Partial);
    p.tile_coverage[tileCoverageIndex(p, batch, head, queryBlock, keyTile)] =
        static_cast<unsigned char>(coverage);
  }
}

// Numbers the partial tiles of a tile coverage in coverage order: slots[i]
// is tile i's slot (-1 unless partial), *partialTiles their count; either
// may be null. One block, 32 tiles a warp per step.
extern "C" __global__ void __launch_bounds__(ATTN_TILE_SLOT_THREADS)
    attn_tile_slot_kernel(const unsigned char *coverage, long long tiles, int *slots,
                          int *partialTiles) {
  constexpr int kWarps = ATTN_TILE_SLOT_THREADS / 32;
  __shared__ int warpPartials[kWarps];
  __shared__ int before;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (threadIdx.x == 0)
    before = 0;
  for (long long first = 0; first < tiles; first += ATTN_TILE_SLOT_THREADS) {
    const long long tile = first + threadIdx.x;
    const bool partial =
        tile < tiles && coverage[tile] == static_cast<unsigned char>(attn_kernel::Coverage::Partial);
    const unsigned partialLanes = __ballot_sync(0xffffffffu, partial);
    if (lane == 0)
      warpPartials[warp] = __popc(partialLanes);
    __syncthreads();
    int slot = before + __popc(partialLanes & ((1u << lane) - 1));
    for (int w = 0; w < warp; ++w)
      slot += warpPartials[w];
    if (slots && tile < tiles)
      slots[tile] = partial ? slot : -1;
    __syncthreads();
    if (threadIdx.x == ATTN_TILE_SLOT_THREADS - 1)
      before = slot + partial;
    __syncthreads();
  }
  if (threadIdx.x == 0 && partialTiles)
    *partialTiles = before;
}

// The stored key bits of every partial tile (AttnFwdParams::tile_key_bits),
// whose slots the slot kernel wrote: block (key tile, query block, batch *
// head) as the coverage kernel's, for the forward kernel's per-pair test of
// a mask_mod the compiler could not classify.
extern "C" __global__ void __launch_bounds__(ATTN_TILE_COVERAGE_THREADS)
    attn_tile_key_bits_kernel(const __grid_constant__ attn_abi::AttnFwdParams p) {
  using namespace attn_kernel;
  const int keyTile = blockIdx.x, queryBlock = blockIdx.y;
  const int batch = blockIdx.z / p.q_heads, head = blockIdx.z % p.q_heads;
  const int slot = tileKeySlots(p)[tileCoverageIndex(p, batch, head, queryBlock, keyTile)];
  if (slot < 0)
    return;
  const Sequence sequence = sequenceOf(p, batch);
  KeyBits *words = tileKeyWords(p, slot);
  for (int word = threadIdx.x; word < kBlockM * 4; word += blockDim.x)
    words[word] = evaluateTileKeyWord(p, sequence, batch, head, queryBlock, keyTile, word).kept;
}

// The cost of each work tile, in default order, for the work order kernel
// below: the key tiles its block visits (those the forward kernel would
// load, with p.tile_coverage when given), 0 for an empty tile past a packed
// sequence's end. One warp per work tile.
extern "C" __global__ void __launch_bounds__(ATTN_WORK_COST_THREADS)
    attn_work_cost_kernel(const __grid_constant__ attn_abi::AttnFwdParams p, int *costs) {
  using namespace attn_kernel;
  const TileSchedule schedule(p);
  const int index = blockIdx.x * (ATTN_WORK_COST_THREADS / 32) + threadIdx.x / 32;
  if (index >= schedule.count)
    return;
  const WorkTile work = schedule.atDefault(p, index);
  const int cost = work.empty() ? 0 : countVisitedTilesInWarp(p, work, threadIdx.x % 32);
  if (threadIdx.x % 32 == 0)
    costs[index] = cost;
}

// A work order from the work cost kernel's costs, on the GPU, so that
// building one needs no synchronization: a stable counting sort of the work
// tiles by key, largest key first, ties in default order. The key is the
// cost (ATTN_WORK_ORDER_LONGEST_FIRST), or, with
// ATTN_WORK_ORDER_OUTLIERS_FIRST, the cost of a tile that costs more than
// twice the mean and 0 for the others: the outliers start first, longest
// first, and the other tiles keep the default order with its L2 sharing.
// Keys stop at ATTN_WORK_ORDER_MAX_KEY. One block.
constexpr int kWorkOrderKeys = ATTN_WORK_ORDER_MAX_KEY + 1;
static_assert(kWorkOrderKeys % 32 == 0 && ATTN_WORK_ORDER_THREADS % 32 == 0,
              "the scan takes 32 keys a step; the block is whole warps");

extern "C" __global__ void __launch_bounds__(ATTN_WORK_ORDER_THREADS)
    attn_work_order_kernel(const int *costs, int count, int policy, int *order) {
  // cursor[key]: the histogram, then where the next tile of that key goes.
  __shared__ int cursor[kWorkOrderKeys];
  __shared__ unsigned long long totalCost;
  for (int key = threadIdx.x; key < kWorkOrderKeys; key += blockDim.x)
    cursor[key] = 0;
  if (threadIdx.x == 0)
    totalCost = 0;
  __syncthreads();
  const unsigned lane = threadIdx.x % 32;
  if (policy == ATTN_WORK_ORDER_OUTLIERS_FIRST) {
    unsigned long long sum = 0;
    for (int i = threadIdx.x; i < count; i += blockDim.x)
      sum += static_cast<unsigned long long>(max(costs[i], 0));
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
      sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == 0)
      atomicAdd(&totalCost, sum);
    __syncthreads();
  }
  const unsigned long long outlierBound = 2 * totalCost;
  auto keyOf = [&](int i) {
    const int cost = max(costs[i], 0);
    if (policy == ATTN_WORK_ORDER_OUTLIERS_FIRST &&
        static_cast<unsigned long long>(cost) * static_cast<unsigned>(count) <= outlierBound)
      return 0;
    return min(cost, ATTN_WORK_ORDER_MAX_KEY);
  };
  for (int i = threadIdx.x; i < count; i += blockDim.x)
    atomicAdd(&cursor[keyOf(i)], 1);
  __syncthreads();
  if (threadIdx.x >= 32)
    return;
  // Exclusive scan from the largest key down: a key's first position is the
  // number of tiles with larger keys.
  int before = 0;
  for (int top = kWorkOrderKeys - 1; top >= 0; top -= 32) {
    const int key = top - static_cast<int>(lane);
    const int tiles = cursor[key];
    int inclusive = tiles;
#pragma unroll
    for (int offset = 1; offset < 32; offset *= 2) {
      const int below = __shfl_up_sync(0xffffffffu, inclusive, offset);
      if (lane >= static_cast<unsigned>(offset))
        inclusive += below;
    }
    cursor[key] = before + inclusive - tiles;
    before += __shfl_sync(0xffffffffu, inclusive, 31);
  }
  __syncwarp();
  // Scatter in default order, 32 tiles at a time: lanes with equal keys take
  // consecutive positions in lane order, claimed by the lowest of them.
  for (int first = 0; first < count; first += 32) {
    const int i = first + static_cast<int>(lane);
    const unsigned live = __ballot_sync(0xffffffffu, i < count);
    if (i < count) {
      const int key = keyOf(i);
      const unsigned peers = __match_any_sync(live, key);
      const int leader = __ffs(peers) - 1;
      int position = 0;
      if (static_cast<int>(lane) == leader) {
        position = cursor[key];
        cursor[key] = position + __popc(peers);
      }
      position = __shfl_sync(peers, position, leader);
      order[position + __popc(peers & ((1u << lane) - 1))] = i;
    }
    __syncwarp();
  }
}
