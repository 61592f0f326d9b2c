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
// This file holds the consumer warpgroup's walk and the entry points; their
// pieces live in templates/linear/: plan.cuh (constants, barriers),
// work.cuh (the block's chunks and walk), decays.cuh, producer.cuh and
// state.cuh (the products, the state, the key sum, the stage tiles).
#pragma once

#include "linear/plan.cuh"
#include "linear/work.cuh"
#include "linear/decays.cuh"
#include "linear/producer.cuh"
#include "linear/state.cuh"

namespace attn_linear {

// ---------------------------------------------------------------------------
// The consumer warpgroup.

// Consumer warpgroup `consumer` of the block owns value slice work.slice.
template <bool Reversed>
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
      // G of the walk's last position in the chunk (at the row walkRow maps
      // it to), read where it is used rather than held.
      const int lastRow = walkRow<Reversed>(kChunk - 1);
      const bool factoredDecay = kHasDecay && kCausal &&
                                 decay[walkRow<Reversed>(0)] - decay[lastRow] <= kFactoredDecayRange;
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
            factor = factoredDecay ? fastExp2(decay[lastRow])
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
              scores[i] = walkSees<Reversed>(row, column) ? scores[i] * decay[kChunk + column] : 0.f;
            }
          } else {
#pragma unroll
            for (int i = 0; i < kAccumulatorRegs; ++i) {
              int row = rowInChunk + 8 * fragmentRowHalf(i), column = fragmentColumn(i, lane);
              float factor = scale;
              if constexpr (kHasDecay)
                factor *= fastExp2(decay[row] - decay[column]);
              scores[i] = walkSees<Reversed>(row, column) ? scores[i] * factor : 0.f;
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
          float last = decay[lastRow];
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
          rowFactor[half] = scale * fastExp2(decay[rowInChunk + 8 * half] - decay[lastRow]);
#pragma unroll
        for (int i = 0; i < kAccumulatorRegs; ++i)
          output[i] *= rowFactor[fragmentRowHalf(i)];
      }
      releaseStage(barriers, slot.stage, lane);

      if (computesOutput) {
        if constexpr (kNormalize) {
          // One reciprocal a row: 32 divisions each kept a call to their
          // slow path, whose registers serialized the kernel's WGMMAs.
          float inverse[2];
#pragma unroll
          for (int half = 0; half < 2; ++half)
            inverse[half] = denominator[half] != 0.f ? 1.f / denominator[half] : 0.f;
#pragma unroll
          for (int i = 0; i < kAccumulatorRegs; ++i)
            output[i] *= inverse[fragmentRowHalf(i)];
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
        publishShared(consumer);
        if (thread == 0) {
          tmaStore4d(&p.o_map, staging, work.slice * kSlice, chunkFirstRow<Reversed>(p, chunk), work.head,
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
// The body of the chunkwise entry points: barriers, then the producer warp
// and the consumer warpgroup.
template <bool Reversed>
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
    produce<Reversed>(p, smem, smemPointer, barriers, work, threadIdx.x % 32);
  } else {
    const int consumer = threadIdx.x / kWarpgroupThreads;
    Work slice = work;
    slice.slice += consumer;
    consume<Reversed>(p, smem, smemPointer, barriers, slice, consumer);
  }
}
} // namespace attn_linear

// Grid (head_dim / block_n, query heads, batch x segments).
extern "C" __global__ void __launch_bounds__(attn_linear::kThreads, attn_linear::kBlocksPerSm)
    attn_linear_kernel(const __grid_constant__ attn_abi::AttnLinearParams p) {
  attn_linear::runBlock<false>(p, /*segmentKernel=*/false);
}

// Grid (head_dim / block_n, query heads, batch x state pieces): each
// piece's own state contribution.
extern "C" __global__ void __launch_bounds__(attn_linear::kThreads, attn_linear::kBlocksPerSm)
    attn_linear_segment_kernel(const __grid_constant__ attn_abi::AttnLinearParams p) {
  attn_linear::runBlock<false>(p, /*segmentKernel=*/true);
}

#if ATTN_PLAN_LINEAR_REVERSED_WALKS
// The same two walking the sequence from its end (the backward's dV and dK
// passes of a causal kernel).
extern "C" __global__ void __launch_bounds__(attn_linear::kThreads, attn_linear::kBlocksPerSm)
    attn_linear_reversed_kernel(const __grid_constant__ attn_abi::AttnLinearParams p) {
  attn_linear::runBlock<true>(p, /*segmentKernel=*/false);
}
extern "C" __global__ void __launch_bounds__(attn_linear::kThreads, attn_linear::kBlocksPerSm)
    attn_linear_reversed_segment_kernel(const __grid_constant__ attn_abi::AttnLinearParams p) {
  attn_linear::runBlock<true>(p, /*segmentKernel=*/true);
}
#endif

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
