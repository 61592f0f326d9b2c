// What a chunkwise block walks: its chunks of one segment (Work), the
// passes over them, the order of the walk (forward or reversed) and the
// stage tiles' addresses.
#pragma once

#include "linear/plan.cuh"

namespace attn_linear {

// What the block works on: chunks [firstChunk, endChunk) of one segment.
struct Work {
  int slice; // the block's first value slice; a consumer's own, in consume
  int head;
  int kvHead;
  int qLoadHead;  // the head of q's tensor the block reads
  int kvLoadHead; // the head of k's and v's
  int batch;
  int segment;
  int firstChunk;
  int endChunk;
  bool segmentKernel; // the state pass only, into the segment scratch
};

__device__ __forceinline__ Work workOfBlock(const attn_abi::AttnLinearParams &p, bool segmentKernel) {
  Work work;
  work.slice = blockIdx.x * kSlicesPerBlock;
  work.head = blockIdx.y;
  work.kvHead = work.head / (p.q_heads / p.kv_heads);
  work.qLoadHead = headsSwapped(p) ? work.kvHead : work.head;
  work.kvLoadHead = headsSwapped(p) ? work.head : work.kvHead;
  // The segment kernel's blocks own the pieces of state_chunks chunks, the
  // main kernel's the segments.
  const int segments = segmentKernel ? p.state_segments : p.segments;
  const int segmentChunks = segmentKernel ? p.state_chunks : p.segment_chunks;
  work.batch = blockIdx.z / segments;
  work.segment = blockIdx.z % segments;
  const int chunks = (p.seqlen + kChunk - 1) / kChunk;
  work.firstChunk = work.segment * segmentChunks;
  work.endChunk = min(chunks, work.firstChunk + segmentChunks);
  work.segmentKernel = segmentKernel;
  return work;
}

// One walk over the block's chunks: what it computes (and so loads).
struct Pass {
  bool output; // O of the chunk: loads Q (and, causal, K and V)
  bool state;  // the state update: loads K and V
};

// The block's passes: the segment kernel updates the state only; the causal
// form does both per chunk; the non-causal form first builds the state over
// every chunk, unless the segments' contributions folded it already.
__device__ __forceinline__ int passCountOf(const attn_abi::AttnLinearParams &p, const Work &work) {
  return work.segmentKernel || kCausal || p.segments > 1 ? 1 : 2;
}

__device__ __forceinline__ Pass passOf(const attn_abi::AttnLinearParams &p, const Work &work,
                                       int pass) {
  if (work.segmentKernel)
    return Pass{false, true};
  if (kCausal)
    return Pass{true, true};
  if (passCountOf(p, work) == 1)
    return Pass{true, false};
  return pass == 0 ? Pass{false, true} : Pass{true, false};
}

// The chunk a block's walk visits at `step`. A piece's state contribution
// does not depend on the order of its chunks, so the segment kernel walks
// backwards: the chunks it reads last, the first of each piece, are those
// the main kernel reads first, and are still in L2 when it starts.
__device__ __forceinline__ int chunkAt(const Work &work, int step) {
  return work.segmentKernel ? work.endChunk - 1 - step : work.firstChunk + step;
}

// A reversed walk runs over the sequence padded to whole chunks at its end,
// L = 64 ceil(seqlen / 64) positions: token t sits at position L - 1 - t,
// so that each chunk's rows are 64 whole rows of the tensor (TMA stores do
// not take a negative row) and the padding comes first in the walk.
__device__ __forceinline__ int reversedWalkLength(const attn_abi::AttnLinearParams &p) {
  return (p.seqlen + kChunk - 1) / kChunk * kChunk;
}

// The first sequence row of a chunk's rows, as loaded and stored.
template <bool Reversed>
__device__ __forceinline__ int chunkFirstRow(const attn_abi::AttnLinearParams &p, int chunk) {
  return Reversed ? reversedWalkLength(p) - (chunk + 1) * kChunk : chunk * kChunk;
}

// A chunk's rows stay in sequence order in shared memory and registers;
// row r is the walk's position walkRow(r) within the chunk, the mirror
// image in a reversed walk. The producer writes the chunk's decays at the
// rows, so that only the causal test and the walk's first and last
// positions read walkRow.
template <bool Reversed> __device__ __forceinline__ int walkRow(int row) {
  return Reversed ? kChunk - 1 - row : row;
}
// Whether the score of (row, column) is one the walk's causal mask keeps.
template <bool Reversed> __device__ __forceinline__ bool walkSees(int row, int column) {
  return Reversed ? column >= row : column <= row;
}

// Whether position `position` of the walk decays, and by the log-decay of
// which token. Forward: a token of the sequence, its own. Reversed: the
// step from token t + 1 to token t decays by token t + 1's log-decay, so
// position u (token L - 1 - u) takes token L - u's, and the padding and the
// sequence's last token none: the decay between two positions spans the
// same tokens as between their tokens in sequence order.
template <bool Reversed>
__device__ __forceinline__ bool positionDecays(const attn_abi::AttnLinearParams &p, int position) {
  if (!Reversed)
    return position < p.seqlen;
  const int length = reversedWalkLength(p);
  return position > length - p.seqlen && position < length;
}
template <bool Reversed>
__device__ __forceinline__ int decayTokenOf(const attn_abi::AttnLinearParams &p, int position) {
  return Reversed ? reversedWalkLength(p) - position : position;
}

__device__ __forceinline__ bool loadsQ(const Pass &pass) { return pass.output; }
__device__ __forceinline__ bool loadsKv(const Pass &pass) { return pass.state || (pass.output && kCausal); }

__device__ __forceinline__ u32 qTile(u32 smem, int stage) { return smem + attn_plan::kSmemQ + stage * kQkTileBytes; }
__device__ __forceinline__ u32 kTile(u32 smem, int stage) { return smem + attn_plan::kSmemK + stage * kQkTileBytes; }
// Each stage's V slot holds the block's slices side by side; so do the
// state and the staging.
__device__ __forceinline__ u32 vTile(u32 smem, int stage, int slice) {
  return smem + attn_plan::kSmemV + (stage * kSlicesPerBlock + slice) * kVTileBytes;
}

} // namespace attn_linear
