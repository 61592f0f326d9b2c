// The consumers' pieces: the scores and state products, the state in
// registers and in memory, the key sum, and the stage tiles' preparation
// (feature maps).
#pragma once

#include "linear/decays.cuh"

namespace attn_linear {

// ---------------------------------------------------------------------------
// Consumer pieces. Thread t of the warpgroup holds, in every m64 fragment,
// rows warp * 16 + lane / 4 and that + 8 (wgmma.cuh). The state is held
// transposed, Sᵀ (64 value columns x head_dim key dims): its update then
// takes the decayed values from registers and K as TMA wrote it, and its
// bf16 copy is a K-major operand of Q S, laid out like a K tile.

constexpr int kStateRegs = kHeadDim / 2; // the m64 x head_dim fp32 fragment of Sᵀ
constexpr int kValueRegs = kChunk / 4;   // (decayed V)ᵀ as A fragments
static_assert(kSlice == kChunk, "the state tile has the rows of a K tile");

// A = Q Kᵀ and O = Q S as one WGMMA group, every operand K-major: Q and K
// as loaded, S as its transposed bf16 copy. Each k-step of 16 key dims
// advances 32 bytes in a row.
__device__ __forceinline__ void issueScoresAndStateProduct(float (&scores)[kAccumulatorRegs],
                                                           float (&output)[kAccumulatorRegs],
                                                           u32 q, u32 k, u32 stateTile,
                                                           bool withScores) {
  const u64 qFirst = swizzled128Descriptor(q, 16, kAtomBytes);
  const u64 kFirst = swizzled128Descriptor(k, 16, kAtomBytes);
  const u64 stateFirst = swizzled128Descriptor(stateTile, 16, kAtomBytes);
  wgmmaFence();
#pragma unroll
  for (int step = 0; step < kHeadDim / 16; ++step) {
    u32 offset = (step / 4) * kChunk * kRowBytes + (step % 4) * 32;
    u64 a = advanceDescriptor(qFirst, offset);
    if (withScores)
      WgmmaSS<64, Element>::mma(scores, a, advanceDescriptor(kFirst, offset), step > 0);
    WgmmaSS<kSlice, Element>::mma(output, a, advanceDescriptor(stateFirst, offset), step > 0);
  }
  wgmmaCommitGroup();
}

// (diag(w) V)ᵀ as the A fragments of the state update: the chunk's V slice
// (tokens x 64 value columns, as TMA wrote it) read transposed with
// ldmatrix, each token scaled by its weight w to the chunk's end (decayed
// forms). Register 4 s + j holds value rows warp * 16 + lane / 4 (+ 8 for
// odd j) and tokens 16 s + 2 (lane % 4) + {0, 1} (+ 8 for j >= 2).
__device__ __forceinline__ void loadValuesTransposed(u32 (&values)[kValueRegs], u32 v,
                                                     const float *weight, int warp, int lane) {
  const int matrix = lane / 8;
#pragma unroll
  for (int step = 0; step < kChunk / 16; ++step) {
    int token = step * 16 + (matrix / 2) * 8 + lane % 8;
    int column = warp * 16 + (matrix % 2) * 8;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(values[4 * step]), "=r"(values[4 * step + 1]), "=r"(values[4 * step + 2]),
                   "=r"(values[4 * step + 3])
                 : "r"(swizzledAddress(v, kChunk, token, column)));
  }
  if constexpr (kHasDecay) {
#pragma unroll
    for (int i = 0; i < kValueRegs; ++i) {
      int token = (i / 4) * 16 + ((i % 4) / 2) * 8 + 2 * (lane % 4);
      float2 pair = *reinterpret_cast<const float2 *>(weight + token);
      values[i] = packPair<Element>(lowHalfToFloat<Element>(values[i]) * pair.x,
                                    highHalfToFloat<Element>(values[i]) * pair.y);
    }
  }
}

// Element (keyDim, this block's valueColumn) of a [head_dim, head_dim]
// state, and the offset of (batch, head[, segment]) state blocks.
__device__ __forceinline__ i64 stateElement(const Work &work, int keyDim, int valueColumn) {
  return static_cast<i64>(keyDim) * kHeadDim + work.slice * kSlice + valueColumn;
}
__device__ __forceinline__ i64 headIndex(const attn_abi::AttnLinearParams &p, const Work &work) {
  return static_cast<i64>(work.batch) * p.q_heads + work.head;
}
// The scratch index of piece `piece` of the block's head.
__device__ __forceinline__ i64 pieceIndex(const attn_abi::AttnLinearParams &p, const Work &work,
                                          int piece) {
  return headIndex(p, work) * p.state_segments + piece;
}

// Calls visit(element, index) for each element of this thread's fragment of
// Sᵀ (float[kStateRegs], const or not) with `index`, its offset in a
// [head_dim, head_dim] state (keys x values) in memory.
template <class State, class Visit>
__device__ __forceinline__ void forEachStateElement(State &state, const Work &work, int warp,
                                                    int lane, Visit visit) {
#pragma unroll
  for (int i = 0; i < kStateRegs; ++i) {
    int valueColumn = warp * 16 + lane / 4 + 8 * fragmentRowHalf(i);
    visit(state[i], stateElement(work, fragmentColumn(i, lane), valueColumn));
  }
}

// Adds a state in global memory to this thread's fragment of it.
__device__ __forceinline__ void addGlobalState(float (&state)[kStateRegs],
                                               const float *source, const Work &work, int warp,
                                               int lane) {
  forEachStateElement(state, work, warp, lane,
                      [&](float &element, i64 index) { element += source[index]; });
}

__device__ __forceinline__ void storeGlobalState(const float (&state)[kStateRegs],
                                                 float *destination, const Work &work, int warp,
                                                 int lane) {
  forEachStateElement(state, work, warp, lane,
                      [&](float element, i64 index) { destination[index] = element; });
}

__device__ __forceinline__ void scaleState(float (&state)[kStateRegs], float factor) {
#pragma unroll
  for (int i = 0; i < kStateRegs; ++i)
    state[i] *= factor;
}

// The state (and key sum) the block's first chunk starts from: zero in the
// segment kernel; otherwise the initial state, or, past the first segment
// of a split, the fold kernel's fold through the last piece before this
// segment (through every piece, non-causal).
__device__ __forceinline__ void loadEntryState(const attn_abi::AttnLinearParams &p, const Work &work,
                                               float (&state)[kStateRegs],
                                               float *keySum, int thread, int warp, int lane) {
  constexpr i64 kStateElements = static_cast<i64>(kHeadDim) * kHeadDim;
#pragma unroll
  for (int i = 0; i < kStateRegs; ++i)
    state[i] = 0.f;
  if (kNormalize && thread < kHeadDim)
    keySum[thread] = 0.f;
  if (work.segmentKernel)
    return;
  const float *entryState = p.state_in ? p.state_in + headIndex(p, work) * kStateElements : nullptr;
  const float *entryKeySum = p.key_sum_in ? p.key_sum_in + headIndex(p, work) * kHeadDim : nullptr;
  const int lastPiece = p.segments == 1 ? -1
                        : kCausal       ? work.segment * (p.segment_chunks / p.state_chunks) - 1
                                        : p.state_segments - 1;
  if (lastPiece >= 0) {
    const i64 index = pieceIndex(p, work, lastPiece);
    entryState = p.segment_state + index * kStateElements;
    entryKeySum = p.segment_key_sum + index * kHeadDim;
  }
  if (entryState)
    addGlobalState(state, entryState, work, warp, lane);
  if (kNormalize && thread < kHeadDim && entryKeySum)
    keySum[thread] = entryKeySum[thread];
}

// The block's state when its chunks are done: the piece's contribution
// into the scratch (segment kernel), or the final state from the block of
// the last segment.
__device__ __forceinline__ void storeExitState(const attn_abi::AttnLinearParams &p, const Work &work,
                                               const float (&state)[kStateRegs],
                                               const float *keySum, float segmentLog2Decay,
                                               int thread, int warp, int lane) {
  constexpr i64 kStateElements = static_cast<i64>(kHeadDim) * kHeadDim;
  const bool ownsSharedParts = work.slice == 0; // the key sum and decay, once per head
  if (work.segmentKernel) {
    const i64 index = pieceIndex(p, work, work.segment);
    storeGlobalState(state, p.segment_state + index * kStateElements, work, warp, lane);
    if (kNormalize && ownsSharedParts && thread < kHeadDim)
      p.segment_key_sum[index * kHeadDim + thread] = keySum[thread];
    if (kHasDecay && ownsSharedParts && thread == 0)
      p.segment_log2_decay[index] = segmentLog2Decay;
    return;
  }
  if (work.segment != p.segments - 1)
    return;
  if (p.state_out)
    storeGlobalState(state, p.state_out + headIndex(p, work) * kStateElements, work, warp, lane);
  if (kNormalize && ownsSharedParts && p.key_sum_out && thread < kHeadDim)
    p.key_sum_out[headIndex(p, work) * kHeadDim + thread] = keySum[thread];
}

// Sum over a quad (the four threads sharing a row).
__device__ __forceinline__ float quadSum(float value) {
  value += __shfl_xor_sync(0xffffffff, value, 1);
  value += __shfl_xor_sync(0xffffffff, value, 2);
  return value;
}

// φ(q_row)·z for the two rows of this thread: the quad splits the key dims.
__device__ __forceinline__ void queryDotKeySum(u32 q, const float *keySum, int rowInChunk,
                                               int lane, float (&dot)[2]) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    int row = rowInChunk + 8 * half;
    float sum = 0.f;
    // The quad's lanes take 16-byte units of the row in turn; not unrolled,
    // as the products in flight hold their accumulators.
#pragma unroll 1
    for (int d = (lane & 3) * 8; d < kHeadDim; d += 32) {
      const uint4 words = loadShared<uint4>(swizzledAddress(q, kChunk, row, d));
      const u32 pairs[4] = {words.x, words.y, words.z, words.w};
#pragma unroll
      for (int pair = 0; pair < 4; ++pair) {
        const float2 z = *reinterpret_cast<const float2 *>(keySum + d + 2 * pair);
        sum += lowHalfToFloat<Element>(pairs[pair]) * z.x +
               highHalfToFloat<Element>(pairs[pair]) * z.y;
      }
    }
    dot[half] = quadSum(sum);
  }
}

// z += Σ over the chunk's tokens inside the sequence of φ(k). Thread t sums
// one 16-byte unit of a row (8 key dims) over every kKeySumRowGroups-th row;
// the row groups, adjacent lanes, then add up by shuffles (rather than one
// thread a key dim adding 64 rows one after the other).
constexpr int kKeySumRowGroups = kWarpgroupThreads / (kHeadDim / 8);
static_assert(attn_plan::kSmemKeySum % 16 == 0, "the key sums are read as float pairs");
static_assert(kKeySumRowGroups <= 32 && kChunk % kKeySumRowGroups == 0,
              "a unit's row groups lie in one warp and share the chunk's rows");
__device__ __forceinline__ void accumulateKeySum(u32 k, float *keySum, int validRows, int thread) {
  const int column = thread / kKeySumRowGroups * 8, firstRow = thread % kKeySumRowGroups;
  float sum[8] = {};
  // Not unrolled: the state and the output are live here.
#pragma unroll 1
  for (int row = firstRow; row < kChunk; row += kKeySumRowGroups) {
    if (row < validRows) {
      const uint4 words = loadShared<uint4>(swizzledAddress(k, kChunk, row, column));
      const u32 pairs[4] = {words.x, words.y, words.z, words.w};
#pragma unroll
      for (int pair = 0; pair < 4; ++pair) {
        float low, high;
        unpackPair<Element>(pairs[pair], low, high);
        sum[2 * pair] += low;
        sum[2 * pair + 1] += high;
      }
    }
  }
#pragma unroll
  for (int offset = 1; offset < kKeySumRowGroups; offset *= 2)
#pragma unroll
    for (int e = 0; e < 8; ++e)
      sum[e] += __shfl_xor_sync(0xffffffffu, sum[e], offset);
  if (firstRow == 0)
#pragma unroll
    for (int e = 0; e < 8; ++e)
      keySum[column + e] += sum[e];
}

// Lane 0 arrives for its warp, after every lane's reads of the stage (the
// decays included: the producer rewrites them).
__device__ __forceinline__ void releaseStage(const Barriers &barriers, int stage, int lane) {
  __syncwarp();
  if (lane == 0)
    mbarrierArrive(barriers.empty(stage));
}

// Makes this warpgroup's shared-memory writes (the state, the staging)
// visible to its other threads and to WGMMA.
__device__ __forceinline__ void publishShared(int consumer) {
  fenceSharedForAsyncProxy();
  warpgroupBarrier(1 + consumer);
}

// The same for writes to the tiles every slice reads (Q and K mapped in
// place), across the consumer warpgroups.
__device__ __forceinline__ void publishSharedToConsumers() {
  fenceSharedForAsyncProxy();
  namedBarrierSync(kConsumersBarrier, kConsumerThreads);
}

// One tile of `blocks` column blocks with the feature map applied in place
// when `map`; whether it wrote the tile. Every consumer thread takes part.
__device__ __forceinline__ bool prepareTile(u32 tile, int blocks, bool map) {
  map = map && kFeatureMap != FeatureMap::Identity;
  if (map)
    mapTileInPlace<kFeatureMap, Element>(tile, blocks * kChunk * kRowBytes, threadIdx.x,
                                         kConsumerThreads);
  return map;
}

// The stage's tiles as the walk reads them: the feature map on the
// operands p.feature_map_operands names (the V tiles of every slice at
// once). Whether any tile was written.
__device__ __forceinline__ bool prepareStageTiles(const attn_abi::AttnLinearParams &p,
                                                  const Pass &kind, u32 q, u32 k, u32 v) {
  const int operands = mappedOperands(p);
  bool written = false;
  if (loadsQ(kind))
    written |= prepareTile(q, kKeyBlocks, operands & ATTN_LINEAR_MAP_Q);
  if (loadsKv(kind)) {
    written |= prepareTile(k, kKeyBlocks, operands & ATTN_LINEAR_MAP_K);
    written |= prepareTile(v, kSlicesPerBlock, operands & ATTN_LINEAR_MAP_V);
  }
  return written;
}

} // namespace attn_linear
