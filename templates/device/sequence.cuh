// Where the sequence of one batch index lies in the tensors, for every
// kernel that takes packed (variable-length) sequences through cu_seqlens
// offsets: forward and backward read the same fields of their parameters.
#pragma once

namespace attn_dev {

__device__ __forceinline__ int clampInt(int value, int low, int high) {
  return min(max(value, low), high);
}

// The first rows of the batch index's queries and keys, the tensor maps'
// batch coordinate, its lengths and the built-in mask's shift (Sk - Sq when
// aligned bottom-right, else 0).
struct Sequence {
  int rowQ;
  int rowK;
  int mapBatch;
  int seqlenQ;
  int seqlenK;
  long long shift;
};

// Packed sequences are located by their offsets, clamped so that malformed
// offsets can reach neither past the tensors nor past the grid's blocks,
// which seqlen_q and seqlen_k bound (the runtime checks the offsets it
// uploads itself).
template <class Params>
__device__ __forceinline__ Sequence sequenceOf(const Params &p, int batch, bool bottomRight) {
  Sequence sequence;
  if (p.cu_seqlens_q) {
    sequence.rowQ = clampInt(__ldg(p.cu_seqlens_q + batch), 0, p.total_q);
    sequence.rowK = clampInt(__ldg(p.cu_seqlens_k + batch), 0, p.total_k);
    sequence.mapBatch = 0;
    sequence.seqlenQ = clampInt(__ldg(p.cu_seqlens_q + batch + 1) - sequence.rowQ, 0,
                                min(p.seqlen_q, p.total_q - sequence.rowQ));
    sequence.seqlenK = clampInt(__ldg(p.cu_seqlens_k + batch + 1) - sequence.rowK, 0,
                                min(p.seqlen_k, p.total_k - sequence.rowK));
  } else {
    sequence.rowQ = 0;
    sequence.rowK = 0;
    sequence.mapBatch = batch;
    sequence.seqlenQ = p.seqlen_q;
    sequence.seqlenK = p.seqlen_k;
  }
  sequence.shift = bottomRight ? static_cast<long long>(sequence.seqlenK) - sequence.seqlenQ : 0;
  return sequence;
}

// A key's slot in its sequence's row of a block table, by the multiply and
// shift the launch derived from the page size (attn_abi::PageDivider: n / d
// = (umulhi(m, n) + n) >> l for every n below 2^31), and its row in that
// page: for the parameters of every kernel that reads paged caches.
// Branch-free: a division, or a branch between it and a shift, kept each
// row's address behind the one before it and the copies late.
template <class Params> __device__ __forceinline__ int pageOf(const Params &p, int key) {
  const unsigned n = static_cast<unsigned>(key);
  return static_cast<int>((__umulhi(p.page_magic, n) + n) >> p.page_shift);
}
template <class Params>
__device__ __forceinline__ int rowInPage(const Params &p, int key, int page) {
  return key - page * p.page_size;
}

} // namespace attn_dev
