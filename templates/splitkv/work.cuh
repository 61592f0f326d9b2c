// Which rows and keys a short-query block takes (its tile scheduler).
#pragma once

#include "splitkv/plan.cuh"

namespace attn_split_kv {

// How a block finds its keys' rows: in a contiguous cache; in pages, one
// block-table lookup per row; or in pages that each hold whole stages (the
// page size a multiple of kBlockN; the block's stages then start on stage
// boundaries), one lookup a stage, after which a row's address is the
// contiguous cache's arithmetic from the page's base.
enum class KeyRows { Contiguous, PagedRows, PagedStages };

// Where one block's work lies: its (batch, kv head), its packed rows and
// its split's keys.
struct Work {
  int batch, kvHead, split;
  int group;             // query heads per kv head
  int packedRows;        // group * seqlen_q
  int rowBegin;          // the block's first packed row
  int seqlenK;           // the sequence's keys
  i64 shift;             // the built-in mask's (Sk - Sq when aligned bottom-right)
  int keyBegin, keyEnd;  // the split's keys
  KeyRows keyRows;
};

// The keys sequence `batch` holds: seqlen_k, or with a paged cache its own
// length, clamped so that no key lies past the pages of its table row.
__device__ __forceinline__ int sequenceKeys(const attn_abi::AttnSplitKvParams &p, int batch) {
  if (p.page_size == 0)
    return p.seqlen_k;
  const i64 capacity = static_cast<i64>(p.max_pages) * p.page_size;
  return static_cast<int>(minI64(maxI64(__ldg(p.seqlens_k + batch), 0), minI64(capacity, p.seqlen_k)));
}

__device__ __forceinline__ i64 maskShift(const attn_abi::AttnSplitKvParams &p, int seqlenK) {
  return attn_plan::kMaskBottomRight ? static_cast<i64>(seqlenK) - p.seqlen_q : 0;
}

// The key on row `position`'s diagonal, within [0, seqlenK]: where a
// score_mod that measures keys from an origin measures them from.
__device__ __forceinline__ int diagonalKey(int position, i64 shift, int seqlenK) {
  return static_cast<int>(minI64(maxI64(position + shift, 0), seqlenK));
}

__device__ Work workOf(const attn_abi::AttnSplitKvParams &p) {
  Work work;
  work.split = blockIdx.x;
  work.kvHead = blockIdx.y % p.kv_heads;
  work.rowBegin = (blockIdx.y / p.kv_heads) * kRows;
  work.batch = blockIdx.z;
  work.group = p.q_heads / p.kv_heads;
  work.packedRows = work.group * p.seqlen_q;
  work.seqlenK = sequenceKeys(p, work.batch);
  work.shift = maskShift(p, work.seqlenK);
  // The keys any of the block's query positions may see, in equal runs of
  // whole stages per split.
  const int rowEnd = min(work.rowBegin + kRows, work.packedRows);
  const i64 first = Mask::keyBegin(work.rowBegin / work.group, work.shift);
  const i64 last = Mask::keyEnd((rowEnd - 1) / work.group, work.shift, work.seqlenK);
  work.keyRows = p.page_size == 0               ? KeyRows::Contiguous
                 : p.page_size % kBlockN == 0 ? KeyRows::PagedStages
                                              : KeyRows::PagedRows;
  int begin = static_cast<int>(minI64(maxI64(first, 0), work.seqlenK));
  // Over pages of whole stages the stages start on multiples of kBlockN, so
  // that each lies in one page: a window's first keys fall in a stage that
  // starts earlier in the same page (each row's key range masks the extra
  // keys). Smaller pages start at the first key: a page wholly before it
  // may have been given back, and its values (0 x NaN) would reach O.
  if (work.keyRows == KeyRows::PagedStages)
    begin -= begin % kBlockN;
  const int end = static_cast<int>(maxI64(minI64(last, work.seqlenK), begin));
  const int tiles = (end - begin + kBlockN - 1) / kBlockN;
  const int tilesPerSplit = (tiles + p.splits - 1) / p.splits;
  work.keyBegin = min(end, begin + work.split * tilesPerSplit * kBlockN);
  work.keyEnd = min(end, work.keyBegin + tilesPerSplit * kBlockN);
  return work;
}

} // namespace attn_split_kv
