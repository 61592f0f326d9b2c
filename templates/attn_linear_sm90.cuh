// Linear attention and retention for sm_90a, in chunkwise-parallel form.
//
// Block (value columns, query head, batch x segment) owns block_n value
// columns of one head's state S and walks its chunks of the sequence. Each
// consumer warpgroup owns a value slice of 64 columns, held transposed (Sᵀ:
// 64 values x head_dim keys, fp32 in registers). A producer warp streams
// each chunk's Q, K and the block's V columns into a ring of stages with
// TMA (the slices share the Q and K tiles) and writes the chunk's decays
// into the stage; each consumer warpgroup computes, for chunk c with state
// S (the state before its first token):
//
//   A   = Q Kᵀ                       (WGMMA, both from shared memory)
//   O   = scale (D ⊙ A) V + scale diag(e^G) Q S
//                                    (P = D ⊙ A from registers; Sᵀ as bf16
//                                     in shared memory, K-major)
//   Sᵀ <- e^{G_last} Sᵀ + (diag(e^{G_last - G}) V)ᵀ K
//                                    (WGMMA, the weighted Vᵀ from registers)
//
// where G is the chunk's inclusive prefix sum of log-decays (0 for linear
// attention) and D the decayed causal mask, D_ij = e^{G_i - G_j} for j <= i.
// A feature map is applied to Q and K in shared memory before use; the
// normalized form divides by scale φ(q)·z, with z the running key sum.
// Non-causal linear attention makes two passes: the state of every chunk
// first, then O = scale φ(Q) S.
//
// Sequence parallelism: with p.segments > 1 each block owns one segment of
// chunks. attn_linear_segment_kernel first computes, for finer pieces of the
// sequence, each piece's own state contribution L_j (the state pass from a
// zero state, walking the piece backwards) with its total decay G_j;
// attn_linear_fold_kernel replaces each L_j by the running fold
//   F_j = e^{G_j} (... (e^{G_0} S_in + L_0) ...) + L_j,
// and attn_linear_kernel enters its segment with the F of the last piece
// before it (of every piece, non-causal) and runs its chunks.
//
// The plan arrives through namespace attn_plan, emitted ahead of this file.
#pragma once

namespace attn_linear {

using namespace attn_dev;
using Element = attn_plan::Element;

constexpr int kHeadDim = attn_plan::kHeadDim;
constexpr int kChunk = attn_plan::kChunk;
constexpr int kStages = attn_plan::kStages;
constexpr FeatureMap kFeatureMap = attn_plan::kFeatureMap;
constexpr bool kNormalize = attn_plan::kNormalize;
constexpr bool kCausal = attn_plan::kCausal;
constexpr bool kGated = attn_plan::kGated;
constexpr bool kHasDecay = attn_plan::kFixedDecay || kGated;
// The backward module's build reads AttnLinearParams' reverse,
// heads_swapped and feature_map_operands; the forward's is built without
// them (its walk, heads and feature map fixed at compile time).
constexpr bool kBackwardPasses = attn_plan::kBackwardPasses;
// A reversed walk pads its start, which the key sum's row count (forward
// order) does not know: the backward takes no normalized kernel.
static_assert(!(kBackwardPasses && kNormalize), "no backward of normalized linear attention");
__device__ __forceinline__ bool reversedWalk(const attn_abi::AttnLinearParams &p) {
  return kBackwardPasses && p.reverse;
}
__device__ __forceinline__ bool headsSwapped(const attn_abi::AttnLinearParams &p) {
  return kBackwardPasses && p.heads_swapped;
}
__device__ __forceinline__ int mappedOperands(const attn_abi::AttnLinearParams &p) {
  return kBackwardPasses ? p.feature_map_operands : ATTN_LINEAR_MAP_Q | ATTN_LINEAR_MAP_K;
}


constexpr int kSlice = ATTN_LINEAR_SLICE;        // value columns per consumer warpgroup
constexpr int kSlicesPerBlock = attn_plan::kBlockColumns / kSlice;
constexpr int kKeyBlocks = kHeadDim / 64;
// The largest decay within a chunk (base 2) taken in factored form: token
// weights stay above 2^-100, far from the bf16 and fp32 normal range's end.
constexpr float kFactoredDecayRange = 100.f;        // 64-row blocks of the state
constexpr u32 kRowBytes = 128;
constexpr u32 kAtomBytes = 8 * kRowBytes;
constexpr u32 kQkTileBytes = kChunk * kHeadDim * 2;
constexpr u32 kVTileBytes = kChunk * kSlice * 2;
constexpr int kConsumerThreads = kSlicesPerBlock * kWarpgroupThreads;
// The consumer warpgroups and one producer warp. Two consumer warpgroups
// share an SM, whether as two blocks of one slice or one block of two, so
// that one's loads, barriers and WGMMA waits overlap the other's work.
constexpr int kProducerThreads = 32;
constexpr int kThreads = kConsumerThreads + kProducerThreads;
constexpr int kBlocksPerSm = ATTN_LINEAR_BLOCKS_PER_SM(kSlicesPerBlock);
static_assert(kThreads == ATTN_LINEAR_THREADS(kSlicesPerBlock),
              "the runtime launches ATTN_LINEAR_THREADS");
static_assert(kSlicesPerBlock >= 1 && kSlicesPerBlock * kSlice <= kHeadDim,
              "whole value slices of the head");
// Either way 9 or 10 warps put 3 on some SM sub-partition (16384 registers
// each): at most 168 registers a thread, which ptxas derives from the
// launch bounds. (A cap of 200 fits the SM's 65536 but not a sub-partition,
// leaving a single consumer warpgroup per SM: measured 5-25 % slower.)
constexpr int kAccumulatorRegs = kSlice / 2;     // a 64 x 64 fp32 fragment
constexpr int kPRegs = kChunk / 4;

static_assert(kChunk == 64, "a chunk is the M of one warpgroup's WGMMA");
static_assert(kHeadDim % 64 == 0 && kHeadDim <= 128, "head dim 64 or 128");
static_assert(!(kNormalize && kHasDecay), "normalization is for undecayed linear attention");
static_assert(kCausal || !kHasDecay, "retention is causal");

// Barriers: full[stage] (the producer's loads landed), empty[stage] (each
// consumer warp of every slice is done with the stage). Named barrier 0 is
// __syncthreads; each consumer warpgroup syncs on its own, and all of them
// on kConsumersBarrier.
struct Barriers {
  u32 base;
  __device__ u32 full(int stage) const { return base + 8 * stage; }
  __device__ u32 empty(int stage) const { return base + 8 * (kStages + stage); }
};

constexpr int kConsumersBarrier = 1 + kSlicesPerBlock;

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
__device__ __forceinline__ int chunkFirstRow(const attn_abi::AttnLinearParams &p, int chunk) {
  return reversedWalk(p) ? reversedWalkLength(p) - (chunk + 1) * kChunk : chunk * kChunk;
}

// Whether position `position` of the walk decays, and by the log-decay of
// which token. Forward: a token of the sequence, its own. Reversed: the
// step from token t + 1 to token t decays by token t + 1's log-decay, so
// position u (token L - 1 - u) takes token L - u's, and the padding and the
// sequence's last token none: the decay between two positions spans the
// same tokens as between their tokens in sequence order.
__device__ __forceinline__ bool positionDecays(const attn_abi::AttnLinearParams &p, int position) {
  if (!reversedWalk(p))
    return position < p.seqlen;
  const int length = reversedWalkLength(p);
  return position > length - p.seqlen && position < length;
}
__device__ __forceinline__ int decayTokenOf(const attn_abi::AttnLinearParams &p, int position) {
  return reversedWalk(p) ? reversedWalkLength(p) - position : position;
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

// The chunk's decays in stage `stage`: G[0..63], the inclusive prefix sums
// of the tokens' log2-decays (tokens past the sequence decay by nothing, so
// G of the last row is that of the last token), then each token's weight
// for the state update, 2^(G[63] - G[t] + walkedLog2Decay): to the chunk's
// end, and in the segment kernel, which walks its piece backwards, on
// through the chunks walked before (their decays' sum, walkedLog2Decay).
__device__ __forceinline__ float *chunkDecay(unsigned char *smemPointer, int stage) {
  return reinterpret_cast<float *>(smemPointer + attn_plan::kSmemDecay) + stage * 2 * kChunk;
}

// The log2-decays of a chunk's tokens, one token per lane and half.
struct TokenDecays {
  float low, high; // tokens lane and lane + 32
};

// Gated decays sit a head count apart in memory, one word per token: the
// producer's lanes copy them (cp.async) kDecayLookahead chunks ahead of
// their scan, into a ring of kDecayLookahead + 1 chunk slots, so that the
// copies' latency hides behind the walk instead of holding up each stage.
constexpr int kDecayLookahead = ATTN_LINEAR_DECAY_LOOKAHEAD;
constexpr int kDecayRingSlots = ATTN_LINEAR_DECAY_RING_SLOTS;
static_assert(kDecayRingSlots == kDecayLookahead + 1, "the slots in flight and the one read");

__device__ __forceinline__ u32 decayRingSlot(u32 smem, int step) {
  return smem + attn_plan::kSmemDecayRing + (step % kDecayRingSlots) * kChunk * 4;
}

// Copies the log-decays of the chunk the walk visits at `step` (lane and
// lane + 32 each; zero past the sequence) as one group of copies, an empty
// group past the walk, so that every step commits one.
__device__ __forceinline__ void copyTokenDecays(const attn_abi::AttnLinearParams &p, const Work &work,
                                                u32 smem, int step, int lane) {
  if (step < work.endChunk - work.firstChunk) {
    const int chunk = chunkAt(work, step);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = lane + 32 * half, position = chunk * kChunk + row;
      const bool inSequence = positionDecays(p, position);
      const i64 index = inSequence ? (static_cast<i64>(work.batch) * p.seqlen +
                                      decayTokenOf(p, position)) * p.q_heads + work.head
                                   : 0;
      copyWordAsync(decayRingSlot(smem, step) + 4 * row, p.log_decay + index, inSequence);
    }
  }
  commitCopyGroup();
}

// The log2-decays of the chunk the walk visits at `step`: gated, once the
// warp's copies of them landed (copyTokenDecays); fixed, the head's.
__device__ __forceinline__ TokenDecays readTokenDecays(const attn_abi::AttnLinearParams &p,
                                                       const Work &work, const float *decayRing,
                                                       int step, int lane) {
  if constexpr (kGated) {
    waitCopyGroups<kDecayLookahead>();
    __syncwarp();
    const float *slot = decayRing + (step % kDecayRingSlots) * kChunk;
    return {slot[lane] * kLog2e, slot[lane + 32] * kLog2e};
  }
  const int position = chunkAt(work, step) * kChunk + lane;
  const float perToken = attn_plan::logDecayOfHead(work.head) * kLog2e;
  return {positionDecays(p, position) ? perToken : 0.f,
          positionDecays(p, position + 32) ? perToken : 0.f};
}

// The producer warp writes the chunk's decays and returns the chunk's
// total, G[63].
__device__ __forceinline__ float writeChunkDecay(TokenDecays tokens, float walkedLog2Decay,
                                                 float *decay, int lane) {
  float low = tokens.low, high = tokens.high;
  warpInclusiveScan64(low, high, lane);
  float last = __shfl_sync(0xffffffff, high, 31);
  decay[lane] = low;
  decay[lane + 32] = high;
  decay[kChunk + lane] = fastExp2(last - low + walkedLog2Decay);
  decay[kChunk + lane + 32] = fastExp2(last - high + walkedLog2Decay);
  return last;
}

// ---------------------------------------------------------------------------
// Producer warp: lane 0 issues the loads, every lane computes the decays.
// The causal form loads Q, K and V of each chunk; the non-causal form loads
// K and V of every chunk, then Q.

__device__ __forceinline__ void loadRows(u32 destination, const TensorMapBlob *map, u32 barrier,
                                         int row, int head, int batch) {
  static_assert(kRowBytes == 128, "tmaLoadColumnBlocks' layout");
  tmaLoadColumnBlocks<kKeyBlocks>(destination, kChunk, map, barrier, row, head, batch);
}

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
        const int row = chunkFirstRow(p, chunk);
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
            copyTokenDecays(p, work, smem, ahead, lane);
        copyTokenDecays(p, work, smem, step + kDecayLookahead, lane);
      }
      if constexpr (kHasDecay) {
        const TokenDecays decays = readTokenDecays(
            p, work, reinterpret_cast<const float *>(smemPointer + attn_plan::kSmemDecayRing), step,
            lane);
        float last = writeChunkDecay(decays, work.segmentKernel ? walkedLog2Decay : 0.f,
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
    for (int d = (lane & 3) * 2; d < kHeadDim; d += 8) {
      const u32 pair = loadShared<u32>(swizzledAddress(q, kChunk, row, d));
      sum += lowHalfToFloat<Element>(pair) * keySum[d] + highHalfToFloat<Element>(pair) * keySum[d + 1];
    }
    dot[half] = quadSum(sum);
  }
}

// z += Σ over the chunk's tokens inside the sequence of φ(k); thread t owns
// key dim t.
__device__ __forceinline__ void accumulateKeySum(u32 k, float *keySum, int validRows, int thread) {
  if (thread < kHeadDim) {
    float sum = 0.f;
    for (int row = 0; row < validRows; ++row) {
      unsigned short bits;
      asm volatile("ld.shared.u16 %0, [%1];" : "=h"(bits) : "r"(swizzledAddress(k, kChunk, row, thread)));
      sum += lowHalfToFloat<Element>(bits);
    }
    keySum[thread] += sum;
  }
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

// Reverses the row order of `blocks` 64-row column blocks of 128-byte rows
// (8 KB each, 128-byte swizzled) in place, applying the feature map on the
// way when `Map`. With the swizzle, 16-byte unit u of row r sits at unit
// u ^ (r % 8), and (63 - r) % 8 = (r % 8) ^ 7: row r's physical unit p
// goes to row 63 - r's physical unit p ^ 7, so pairs of units swap.
template <bool Map>
__device__ __forceinline__ void transformRowsInPlace(u32 tile, int blocks, int thread, int threads) {
  constexpr int kPairsPerBlock = kChunk / 2 * (kRowBytes / 16);
#pragma unroll 1
  for (int pair = thread; pair < blocks * kPairsPerBlock; pair += threads) {
    const int block = pair / kPairsPerBlock, row = pair % kPairsPerBlock / 8, unit = pair % 8;
    const u32 base = tile + block * kChunk * kRowBytes;
    const u32 upper = base + row * kRowBytes + unit * 16;
    const u32 lower = base + (kChunk - 1 - row) * kRowBytes + (unit ^ 7) * 16;
    u32 a[4], b[4];
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(upper));
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                 : "r"(lower));
    if constexpr (Map) {
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        a[w] = packPair<Element>(featureMap<kFeatureMap>(lowHalfToFloat<Element>(a[w])),
                                 featureMap<kFeatureMap>(highHalfToFloat<Element>(a[w])));
        b[w] = packPair<Element>(featureMap<kFeatureMap>(lowHalfToFloat<Element>(b[w])),
                                 featureMap<kFeatureMap>(highHalfToFloat<Element>(b[w])));
      }
    }
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(upper), "r"(b[0]), "r"(b[1]),
                 "r"(b[2]), "r"(b[3])
                 : "memory");
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(lower), "r"(a[0]), "r"(a[1]),
                 "r"(a[2]), "r"(a[3])
                 : "memory");
  }
}

// One tile of `blocks` column blocks in the walk's order, with the feature
// map when `map`; whether it wrote the tile. Every consumer thread takes
// part.
__device__ __forceinline__ bool prepareTile(const attn_abi::AttnLinearParams &p, u32 tile,
                                            int blocks, bool map) {
  map = map && kFeatureMap != FeatureMap::Identity;
  if (reversedWalk(p)) {
    if (map)
      transformRowsInPlace<true>(tile, blocks, threadIdx.x, kConsumerThreads);
    else
      transformRowsInPlace<false>(tile, blocks, threadIdx.x, kConsumerThreads);
    return true;
  }
  if (map)
    mapTileInPlace<kFeatureMap, Element>(tile, blocks * kChunk * kRowBytes, threadIdx.x,
                                         kConsumerThreads);
  return map;
}

// The stage's tiles as the walk reads them: reversed rows for a reversed
// walk, and the feature map on the operands p.feature_map_operands names
// (the V tiles of every slice at once). Whether any tile was written.
__device__ __forceinline__ bool prepareStageTiles(const attn_abi::AttnLinearParams &p,
                                                  const Pass &kind, u32 q, u32 k, u32 v) {
  const int operands = mappedOperands(p);
  bool written = false;
  if (loadsQ(kind))
    written |= prepareTile(p, q, kKeyBlocks, operands & ATTN_LINEAR_MAP_Q);
  if (loadsKv(kind)) {
    written |= prepareTile(p, k, kKeyBlocks, operands & ATTN_LINEAR_MAP_K);
    written |= prepareTile(p, v, kSlicesPerBlock, operands & ATTN_LINEAR_MAP_V);
  }
  return written;
}

// ---------------------------------------------------------------------------
// The consumer warpgroup.

// Consumer warpgroup `consumer` of the block owns value slice work.slice.
__device__ void consume(const attn_abi::AttnLinearParams &p, u32 smem, unsigned char *smemPointer,
                        const Barriers &barriers, const Work &work, int consumer) {
  const int thread = threadIdx.x % kWarpgroupThreads, warp = thread / 32, lane = thread % 32;
  const int rowInChunk = warp * 16 + lane / 4;
  const u32 stateTile = smem + attn_plan::kSmemState + consumer * kHeadDim * kSlice * 2;
  const u32 staging = smem + attn_plan::kSmemOStaging + consumer * kVTileBytes;
  float *keySum = reinterpret_cast<float *>(smemPointer + attn_plan::kSmemKeySum) + consumer * kHeadDim;
  const float scale = p.scale;

  float state[kStateRegs];
  loadEntryState(p, work, state, keySum, thread, warp, lane);
  storeFragmentSwizzled<Element, kHeadDim>(state, stateTile, kChunk, warp, lane);
  publishShared(consumer);
  float segmentLog2Decay = 0.f; // the decay over the block's chunks

  int load = 0;
  const int passCount = passCountOf(p, work);
  for (int pass = 0; pass < passCount; ++pass) {
    const Pass kind = passOf(p, work, pass);
    const bool computesOutput = kind.output, updatesState = kind.state;
    for (int step = 0; step < work.endChunk - work.firstChunk; ++step, ++load) {
      const int chunk = chunkAt(work, step);
      const RingSlot slot = ringSlot<kStages>(load);
      const u32 q = qTile(smem, slot.stage), k = kTile(smem, slot.stage);
      const u32 v = vTile(smem, slot.stage, consumer);
      const float *decay = chunkDecay(smemPointer, slot.stage);
      const int validRows = min(kChunk, p.seqlen - chunk * kChunk);
      // The loads and the producer's decays.
      mbarrierWait(barriers.full(slot.stage), slot.phase);
      // The slices prepare the shared tiles together.
      if (prepareStageTiles(p, kind, q, k, vTile(smem, slot.stage, 0)))
        publishSharedToConsumers();

      float output[kAccumulatorRegs];
      u32 weights[kPRegs];
      float denominator[2] = {0.f, 0.f};
      // Decays within the chunk factor into a row and a token part,
      // 2^(G_i - G_j) = 2^(G_i - G_last) * w_j, while every token weight w_j
      // = 2^(G_last - G_j) is far from underflow. Then P = A ⊙ w (no
      // exponential per score) and the row factors apply once after P V.
      const bool factoredDecay =
          kHasDecay && kCausal && decay[0] - decay[kChunk - 1] <= kFactoredDecayRange;
      if (computesOutput) {
        float scores[kAccumulatorRegs];
        issueScoresAndStateProduct(scores, output, q, k, stateTile, kCausal);
        if constexpr (kNormalize)
          queryDotKeySum(q, keySum, rowInChunk, lane, denominator);
        wgmmaWaitGroup<0>();
        fenceRegisters(output);
        fenceRegisters(scores);

        // Inter-chunk part: rows decay from the chunk's start. Factored, Q S
        // is weighed against P V here and both take their row factors after
        // the product.
#pragma unroll
        for (int i = 0; i < kAccumulatorRegs; ++i) {
          float factor = scale;
          if constexpr (kHasDecay)
            factor = factoredDecay ? fastExp2(decay[kChunk - 1])
                                   : scale * fastExp2(decay[rowInChunk + 8 * fragmentRowHalf(i)]);
          output[i] *= factor;
        }
        if constexpr (kCausal) {
          // Intra-chunk part: the decayed causal weights P = D ⊙ A. The
          // select keeps an overflowing decay above the diagonal out of P.
          float rowSum[2] = {0.f, 0.f};
          if (factoredDecay) {
#pragma unroll
            for (int i = 0; i < kAccumulatorRegs; ++i) {
              int row = rowInChunk + 8 * fragmentRowHalf(i), column = fragmentColumn(i, lane);
              scores[i] = column <= row ? scores[i] * decay[kChunk + column] : 0.f;
            }
          } else {
#pragma unroll
            for (int i = 0; i < kAccumulatorRegs; ++i) {
              int row = rowInChunk + 8 * fragmentRowHalf(i), column = fragmentColumn(i, lane);
              float factor = scale;
              if constexpr (kHasDecay)
                factor *= fastExp2(decay[row] - decay[column]);
              scores[i] = column <= row ? scores[i] * factor : 0.f;
              rowSum[fragmentRowHalf(i)] += scores[i];
            }
          }
#pragma unroll
          for (int i = 0; i < kPRegs; ++i)
            weights[i] = packPair<Element>(scores[2 * i], scores[2 * i + 1]);
          if constexpr (kNormalize)
            for (int half = 0; half < 2; ++half)
              denominator[half] = denominator[half] * scale + quadSum(rowSum[half]);
        } else if constexpr (kNormalize) {
          for (int half = 0; half < 2; ++half)
            denominator[half] *= scale;
        }
      }

      u32 values[kValueRegs];
      if (updatesState) {
        if constexpr (kHasDecay) {
          // The segment kernel's token weights carry the decay of the chunks
          // after this one (it walks backwards); a forward walk decays the
          // state instead.
          float last = decay[kChunk - 1];
          if (!work.segmentKernel)
            scaleState(state, fastExp2(last));
          segmentLog2Decay += last;
        }
        if constexpr (kNormalize) {
          // After every thread has read the old key sum for its denominators.
          warpgroupBarrier(1 + consumer);
          accumulateKeySum(k, keySum, validRows, thread);
        }
        // Loaded last, so that they are not held through the key sum.
        loadValuesTransposed(values, v, decay + kChunk, warp, lane);
      }
      // P V and S <- S + Kᵀ (diag(w) V) as one group, with one wait.
      const bool productOfWeights = computesOutput && kCausal;
      if (productOfWeights)
        issueRegisterProduct<kSlice, kChunk, Element>(output, weights, v);
      if (updatesState)
        issueRegisterProduct<kHeadDim, kChunk, Element>(state, values, k);
      if (productOfWeights || updatesState) {
        wgmmaWaitGroup<0>();
        fenceRegisters(output);
        fenceRegisters(weights);
        fenceRegisters(state);
        fenceRegisters(values);
      }
      if (computesOutput && factoredDecay) {
        float rowFactor[2];
        for (int half = 0; half < 2; ++half)
          rowFactor[half] = scale * fastExp2(decay[rowInChunk + 8 * half] - decay[kChunk - 1]);
#pragma unroll
        for (int i = 0; i < kAccumulatorRegs; ++i)
          output[i] *= rowFactor[fragmentRowHalf(i)];
      }
      releaseStage(barriers, slot.stage, lane);

      if (computesOutput) {
        if constexpr (kNormalize)
#pragma unroll
          for (int i = 0; i < kAccumulatorRegs; ++i) {
            float den = denominator[fragmentRowHalf(i)];
            output[i] = den != 0.f ? output[i] / den : 0.f;
          }
        // One barrier pair publishes the output tile and the next chunk's
        // state. Before it, every warp's Q S product (the state tile) has
        // completed and the last TMA store has read the staging tile.
        if (thread == 0)
          tmaStoreWaitRead();
        warpgroupBarrier(1 + consumer);
        storeFragmentSwizzled<Element, kSlice>(output, staging, kChunk, warp, lane);
        if (updatesState)
          storeFragmentSwizzled<Element, kHeadDim>(state, stateTile, kChunk, warp, lane);
        if (reversedWalk(p)) {
          // Back into sequence order for the store.
          warpgroupBarrier(1 + consumer);
          transformRowsInPlace<false>(staging, 1, thread, kWarpgroupThreads);
        }
        publishShared(consumer);
        if (thread == 0) {
          tmaStore4d(&p.o_map, staging, work.slice * kSlice, chunkFirstRow(p, chunk), work.head,
                     work.batch);
          tmaStoreCommit();
        }
      }
    }
    // A state-only pass hands its state to the output pass after it once.
    if (!computesOutput && pass + 1 < passCount) {
      storeFragmentSwizzled<Element, kHeadDim>(state, stateTile, kChunk, warp, lane);
      publishShared(consumer);
    }
  }

  storeExitState(p, work, state, keySum, segmentLog2Decay, thread, warp, lane);
  // Shared memory must outlive the copy engine's reads of the last store.
  if (thread == 0)
    tmaStoreWaitRead();
}

} // namespace attn_linear

namespace attn_linear {
// The body of both chunkwise entry points: barriers, then the producer warp
// and the consumer warpgroup.
__device__ __forceinline__ void runBlock(const attn_abi::AttnLinearParams &p, bool segmentKernel) {
  extern __shared__ __align__(1024) unsigned char sharedMemory[];
  const u32 smem = (sharedAddress(sharedMemory) + 1023) & ~1023u;
  const Barriers barriers{smem + attn_plan::kSmemBarriers};
  const Work work = workOfBlock(p, segmentKernel);
  if (threadIdx.x == 0) {
    for (int stage = 0; stage < kStages; ++stage) {
      mbarrierInit(barriers.full(stage), 1);
      mbarrierInit(barriers.empty(stage), kConsumerThreads / 32);
    }
    fenceBarrierInit();
  }
  __syncthreads();
  unsigned char *smemPointer = sharedMemory + (smem - sharedAddress(sharedMemory));
  if (threadIdx.x >= kConsumerThreads) {
    produce(p, smem, smemPointer, barriers, work, threadIdx.x % 32);
  } else {
    const int consumer = threadIdx.x / kWarpgroupThreads;
    Work slice = work;
    slice.slice += consumer;
    consume(p, smem, smemPointer, barriers, slice, consumer);
  }
}
} // namespace attn_linear

// Grid (head_dim / block_n, query heads, batch x segments).
extern "C" __global__ void __launch_bounds__(attn_linear::kThreads, attn_linear::kBlocksPerSm)
    attn_linear_kernel(const __grid_constant__ attn_abi::AttnLinearParams p) {
  attn_linear::runBlock(p, /*segmentKernel=*/false);
}

// Grid (head_dim / block_n, query heads, batch x state pieces): each
// piece's own state contribution.
extern "C" __global__ void __launch_bounds__(attn_linear::kThreads, attn_linear::kBlocksPerSm)
    attn_linear_segment_kernel(const __grid_constant__ attn_abi::AttnLinearParams p) {
  attn_linear::runBlock(p, /*segmentKernel=*/true);
}

// The running fold of the segment kernel's pieces, in place: piece j's
// state becomes F_j = e^{G_j} F_{j-1} + L_j (F_{-1} = the initial state, or
// zero) and its key sum likewise, undecayed. Thread t owns element t of one
// head's [head_dim, head_dim] state in every piece (the threads past the
// state's elements own the key sum's dims), so the fold runs in a register;
// the loads of a batch of pieces are issued before its arithmetic. One
// kernel for the whole grid instead of a fold in each main block: there the
// pieces' loads ran one round trip after another, up to 12 us at B = 1,
// S = 16384 (docs/benchmarks.md).
namespace attn_linear {
constexpr int kFoldBatch = 8;

template <bool kDecayed>
__device__ __forceinline__ void foldPieces(float *pieces, i64 pieceStride, const float *initial,
                                           const float *log2Decay, int count) {
  float fold = initial ? *initial : 0.f;
  for (int first = 0; first < count; first += kFoldBatch) {
    float piece[kFoldBatch], factor[kFoldBatch];
#pragma unroll
    for (int j = 0; j < kFoldBatch; ++j)
      if (first + j < count) {
        piece[j] = pieces[(first + j) * pieceStride];
        factor[j] = kDecayed ? fastExp2(log2Decay[first + j]) : 1.f;
      }
#pragma unroll
    for (int j = 0; j < kFoldBatch; ++j)
      if (first + j < count) {
        fold = kDecayed ? fold * factor[j] + piece[j] : fold + piece[j];
        pieces[(first + j) * pieceStride] = fold;
      }
  }
}
} // namespace attn_linear

extern "C" __global__ void __launch_bounds__(ATTN_LINEAR_FOLD_THREADS)
    attn_linear_fold_kernel(const __grid_constant__ attn_abi::AttnLinearParams p) {
  using namespace attn_linear;
  constexpr int kStateElements = kHeadDim * kHeadDim;
  const int element = blockIdx.x * ATTN_LINEAR_FOLD_THREADS + threadIdx.x;
  const i64 head = static_cast<i64>(blockIdx.z) * p.q_heads + blockIdx.y;
  const i64 firstPiece = head * p.state_segments;
  if (element < kStateElements) {
    foldPieces<kHasDecay>(p.segment_state + firstPiece * kStateElements + element, kStateElements,
                          p.state_in ? p.state_in + head * kStateElements + element : nullptr,
                          p.segment_log2_decay + firstPiece, p.state_segments);
  } else if (kNormalize && element - kStateElements < kHeadDim) {
    const int keyDim = element - kStateElements;
    foldPieces<false>(p.segment_key_sum + firstPiece * kHeadDim + keyDim, kHeadDim,
                      p.key_sum_in ? p.key_sum_in + head * kHeadDim + keyDim : nullptr, nullptr,
                      p.state_segments);
  }
}

// One token against the state (the recurrent form): block (query head,
// batch), thread t owns value column t of the state.
//   S' = e^g S + φ(k) vᵀ,   o = scale φ(q)ᵀ S'   [/ scale φ(q)·(z + φ(k))]
extern "C" __global__ void __launch_bounds__(ATTN_DECODE_THREADS)
    attn_linear_decode_kernel(const __grid_constant__ attn_abi::AttnDecodeParams p) {
  using namespace attn_linear;
  const int head = blockIdx.x, batch = blockIdx.y, column = threadIdx.x;
  const int kvHead = head / (p.q_heads / p.kv_heads);
  __shared__ float query[kHeadDim], key[kHeadDim], keySum[kHeadDim];
  __shared__ float denominator;
  auto element = [](const void *base, const long long (&strides)[2], int b, int h, int d) {
    const unsigned short *data = static_cast<const unsigned short *>(base);
    return lowHalfToFloat<Element>(data[b * strides[0] + h * strides[1] + d]);
  };
  const i64 headIndex = static_cast<i64>(batch) * p.q_heads + head;
  if (column < kHeadDim) {
    query[column] = featureMap<kFeatureMap>(element(p.q, p.q_strides, batch, head, column));
    key[column] = featureMap<kFeatureMap>(element(p.k, p.k_strides, batch, kvHead, column));
    if constexpr (kNormalize)
      keySum[column] = (p.key_sum_in ? p.key_sum_in[headIndex * kHeadDim + column] : 0.f) + key[column];
  }
  __syncthreads();
  if constexpr (kNormalize) {
    if (column == 0) {
      float dot = 0.f;
      for (int d = 0; d < kHeadDim; ++d)
        dot += query[d] * keySum[d];
      denominator = p.scale * dot;
    }
    __syncthreads();
  }
  if (column >= kHeadDim)
    return;
  float decay = 1.f;
  if constexpr (kGated)
    decay = __expf(p.log_decay[headIndex]);
  else if constexpr (attn_plan::kFixedDecay)
    decay = __expf(attn_plan::logDecayOfHead(head));
  const float value = element(p.v, p.v_strides, batch, kvHead, column);
  float sum = 0.f;
  for (int d = 0; d < kHeadDim; ++d) {
    i64 index = (headIndex * kHeadDim + d) * kHeadDim + column;
    float updated = (p.state_in ? decay * p.state_in[index] : 0.f) + key[d] * value;
    if (p.state_out)
      p.state_out[index] = updated;
    sum += query[d] * updated;
  }
  float out = p.scale * sum;
  if constexpr (kNormalize)
    out = denominator != 0.f ? out / denominator : 0.f;
  unsigned short *o = static_cast<unsigned short *>(p.o);
  o[batch * p.o_strides[0] + head * p.o_strides[1] + column] =
      static_cast<unsigned short>(packPair<Element>(out, 0.f) & 0xffff);
  if constexpr (kNormalize)
    if (p.key_sum_out)
      p.key_sum_out[headIndex * kHeadDim + column] = keySum[column];
}
