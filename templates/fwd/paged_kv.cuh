// A paged KV cache in the forward kernel (p.block_table): the producer's
// boxes over the page pools, and the value rows past a sequence's end that
// its last page holds as anything (NaN included), cleared before P V reads
// them.
#pragma once

#include "fwd/tile_scheduler.cuh"

namespace attn_kernel {

__device__ __forceinline__ bool readsPages(const attn_abi::AttnFwdParams &p) {
  return p.block_table != nullptr;
}

__device__ __forceinline__ const int *tableRow(const attn_abi::AttnFwdParams &p, int batch) {
  return p.block_table + static_cast<i64>(batch) * p.block_table_stride;
}

// Brings the block-table entries of key rows [keyBase, keyBase + kBlockN)
// into L1 before the producer waits for their ring slot, so that the
// lookups after the wait hit (the entries' first read would otherwise
// stand between a slot's release and its refill).
__device__ __forceinline__ void prefetchPageEntries(const attn_abi::AttnFwdParams &p,
                                                    const WorkTile &work, int keyBase) {
  const int last = min(keyBase + kBlockN, work.sequence.seqlenK) - 1;
  if (last < keyBase)
    return;
  const int *table = tableRow(p, work.batch);
  asm volatile("prefetch.global.L1 [%0];" ::"l"(table + pageOf(p, keyBase)));
  asm volatile("prefetch.global.L1 [%0];" ::"l"(table + pageOf(p, last)));
}

// Loads key rows [keyBase, keyBase + kBlockN) of `work`'s sequence from
// the page pool behind `map` (k_map or v_map) into the tile at
// `destination`, as loadTile lays a contiguous tile out: a box of
// page_box_rows rows a column block, each inside one page (the box rows
// divide the page size and BLOCK_N). Boxes from the sequence's end on, and
// boxes before the first key any row of the work tile sees (a sliding
// window's: a cache may have given those pages back), read page -1, which
// the copy engine fills with zeros.
__device__ __forceinline__ void loadPagedTile(const attn_abi::AttnFwdParams &p, u32 destination,
                                              const TensorMapBlob *map, u32 barrier,
                                              const WorkTile &work, int keyBase) {
  const int *table = tableRow(p, work.batch);
  const i64 firstKey = Mask::keyBegin(work.queryBegin, work.sequence.shift);
  for (int row = 0; row < kBlockN; row += p.page_box_rows) {
    const int key = keyBase + row;
    int page = -1, pageRow = 0;
    if (key < work.sequence.seqlenK && key + p.page_box_rows > firstKey) {
      const int slot = pageOf(p, key);
      page = __ldg(table + slot);
      pageRow = rowInPage(p, key, slot);
    }
    // Rolled: the producer thread has 24 registers.
#pragma unroll 1
    for (int block = 0; block < kColumnBlocks; ++block)
      tmaLoad4d(destination + (block * kBlockN + row) * kRowBytes, map, barrier,
                block * kColumnBlock, pageRow, work.kvHead, page);
  }
}

// Named barrier of the consumer warpgroups around a cleared value tile:
// after the epilogue barriers (1..kConsumers) and the GEMM turns.
constexpr int kClearedValuesBarrier = 1 + 2 * kConsumers;
static_assert(kClearedValuesBarrier < 16, "a block has 16 named barriers");

// Over a paged cache: where key tile `keyTile` holds the sequence's end
// inside a box, the box's rows past the end came from the last page as
// they are. Every consumer thread zeroes its share of them in the value
// tile (the masked P is 0 there, but 0 times NaN is NaN), makes the writes
// visible to the tensor cores' reads, and waits for the other consumers.
// Every consumer calls it for the same tiles: they visit the same key
// tiles of a work tile.
__device__ __forceinline__ void clearValuesPastSequence(const attn_abi::AttnFwdParams &p,
                                                        const WorkTile &work, int keyTile,
                                                        u32 valueTile, int consumer) {
  const int end = work.sequence.seqlenK - keyTile * kBlockN;
  if (end <= 0 || end >= kBlockN || end % p.page_box_rows == 0)
    return;
  const int boxEnd = min(kBlockN, (end / p.page_box_rows + 1) * p.page_box_rows);
  constexpr int kChunksPerRow = kRowBytes / 16;
  const int chunks = (boxEnd - end) * kColumnBlocks * kChunksPerRow;
#pragma unroll 1
  for (int chunk = consumer * kWarpgroupThreads + static_cast<int>(threadIdx.x) %
                                                      kWarpgroupThreads;
       chunk < chunks; chunk += kConsumers * kWarpgroupThreads) {
    const int row = end + chunk / (kColumnBlocks * kChunksPerRow);
    const int block = chunk / kChunksPerRow % kColumnBlocks;
    const u32 address =
        valueTile + (block * kBlockN + row) * kRowBytes + (chunk % kChunksPerRow) * 16;
    asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};" ::"r"(address), "r"(0) : "memory");
  }
  fenceSharedForAsyncProxy();
  namedBarrierSync(kClearedValuesBarrier, kConsumers * kWarpgroupThreads);
}

} // namespace attn_kernel
