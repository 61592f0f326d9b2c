// The short-query block's copies: Q once, then K and V a stage at a time
// through cp.async, from a contiguous or a paged cache.
#pragma once

#include "device/sequence.cuh"
#include "splitkv/work.cuh"

namespace attn_split_kv {

// Element offset of key `key`'s row for kv head `kvHead` in a cache of
// `strides` (a paged one's page looked up in the block table).
__device__ __forceinline__ i64 keyRowOffset(const attn_abi::AttnSplitKvParams &p,
                                            const long long (&strides)[3], const Work &work,
                                            i64 page, int row) {
  return page * strides[0] + static_cast<i64>(row) * strides[1] +
         static_cast<i64>(work.kvHead) * strides[2];
}

__device__ __forceinline__ void loadQuery(const attn_abi::AttnSplitKvParams &p, u32 smemBase,
                                          const Work &work) {
  for (int index = threadIdx.x; index < kRows * kRowChunks; index += kThreads) {
    const int row = index / kRowChunks, chunk = index % kRowChunks;
    const int packed = work.rowBegin + row;
    const bool valid = packed < work.packedRows;
    const unsigned short *source = static_cast<const unsigned short *>(p.q);
    if (valid) {
      const int position = packed / work.group;
      const int head = work.kvHead * work.group + packed % work.group;
      source += work.batch * p.q_strides[0] + position * p.q_strides[1] +
                head * p.q_strides[2] + chunk * 8;
    }
    copyAsync16(smemBase + swizzledChunk<kRowChunks>(row, chunk), source, valid);
  }
}

__device__ __forceinline__ u32 keyStage(u32 smemBase, int stage) {
  return smemBase + kQBytes + stage * 2 * kTileBytes;
}
__device__ __forceinline__ u32 valueStage(u32 smemBase, int stage) {
  return keyStage(smemBase, stage) + kTileBytes;
}

// Each thread copies one 16-byte column chunk of kRowsPerThread rows of a
// stage, for K and for V.
static_assert(kThreads % kRowChunks == 0, "a thread keeps one column chunk");
constexpr int kRowStep = kThreads / kRowChunks;
constexpr int kRowsPerThread = kBlockN / kRowStep;
static_assert(kBlockN % kRowStep == 0, "whole rows per thread");

// The pages of a stage's rows this thread copies (a paged cache's block
// table entries: one a row, or with KeyRows::PagedStages the stage's in
// entry[0]; unused for a contiguous cache). The kernel looks them up a
// stage before the copies that use them, so that the table's loads hide
// behind a stage's products instead of delaying the copies.
struct StagePages {
  int entry[kRowsPerThread];
};

__device__ __forceinline__ int stageKey(const Work &work, int tile, int i) {
  const int key = work.keyBegin + tile * kBlockN + threadIdx.x / kRowChunks + i * kRowStep;
  return min(key, work.keyEnd - 1);
}

// A block table entry, loaded where the call stands: a volatile load is
// not sunk next to its use, so its latency overlaps the products between.
__device__ __forceinline__ int loadTableEntry(const int *address) {
  int value;
  asm volatile("ld.global.nc.b32 %0, [%1];" : "=r"(value) : "l"(address));
  return value;
}

__device__ __forceinline__ StagePages lookupStagePages(const attn_abi::AttnSplitKvParams &p,
                                                       const Work &work, int tile) {
  StagePages pages;
  if (work.keyRows == KeyRows::PagedRows) {
    const int *row = p.block_table + work.batch * p.block_table_stride;
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i)
      pages.entry[i] = loadTableEntry(row + pageOf(p, max(stageKey(work, tile, i), 0)));
  } else if (work.keyRows == KeyRows::PagedStages) {
    const int *row = p.block_table + work.batch * p.block_table_stride;
    const int firstKey = min(work.keyBegin + tile * kBlockN, work.keyEnd - 1);
    pages.entry[0] = loadTableEntry(row + pageOf(p, max(firstKey, 0)));
  }
  return pages;
}

// A stage's copies from one layout: a row loop each, so that no row's
// address waits on a branch between them.
template <KeyRows Layout>
__device__ __forceinline__ void loadKeyTileOf(const attn_abi::AttnSplitKvParams &p, u32 smemBase,
                                              const Work &work, int tile, int stage,
                                              const StagePages &pages) {
  const int firstKey = work.keyBegin + tile * kBlockN;
  const int chunk = threadIdx.x % kRowChunks, firstRow = threadIdx.x / kRowChunks;
  const unsigned short *k = static_cast<const unsigned short *>(p.k) + chunk * 8;
  const unsigned short *v = static_cast<const unsigned short *>(p.v) + chunk * 8;
  // The stage's page and its first key (PagedStages): every row of the
  // stage lies in it.
  i64 stagePage = work.batch;
  int pageFirstKey = 0;
  if constexpr (Layout == KeyRows::PagedStages) {
    stagePage = min(max(pages.entry[0], 0), p.num_pages - 1);
    pageFirstKey = firstKey - rowInPage(p, firstKey, pageOf(p, firstKey));
  }
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int row = firstRow + i * kRowStep;
    const int key = stageKey(work, tile, i);
    const bool valid = firstKey + row < work.keyEnd;
    i64 page = stagePage;
    int pageRow = key - pageFirstKey;
    if constexpr (Layout == KeyRows::PagedRows) {
      page = min(max(pages.entry[i], 0), p.num_pages - 1);
      pageRow = rowInPage(p, key, pageOf(p, key));
    }
    const u32 offset = swizzledChunk<kRowChunks>(row, chunk);
    copyAsync16(keyStage(smemBase, stage) + offset,
                k + keyRowOffset(p, p.k_strides, work, page, pageRow), valid);
    copyAsync16(valueStage(smemBase, stage) + offset,
                v + keyRowOffset(p, p.v_strides, work, page, pageRow), valid);
  }
}

// Keys keyBegin + tile kBlockN ... of the split into stage `stage` (zeros
// past its end), from the pages `pages` looked up for them.
__device__ __forceinline__ void loadKeyTile(const attn_abi::AttnSplitKvParams &p, u32 smemBase,
                                            const Work &work, int tile, int stage,
                                            const StagePages &pages) {
  switch (work.keyRows) {
  case KeyRows::Contiguous:
    loadKeyTileOf<KeyRows::Contiguous>(p, smemBase, work, tile, stage, pages);
    break;
  case KeyRows::PagedRows:
    loadKeyTileOf<KeyRows::PagedRows>(p, smemBase, work, tile, stage, pages);
    break;
  case KeyRows::PagedStages:
    loadKeyTileOf<KeyRows::PagedStages>(p, smemBase, work, tile, stage, pages);
    break;
  }
}

} // namespace attn_split_kv
