// The chunk's decays: the producer's copies of gated log-decays, their
// prefix sums and the tokens' weights written into the stage.
#pragma once

#include "linear/work.cuh"

namespace attn_linear {

// The chunk's decays in stage `stage`: G[0..63], the inclusive prefix sums
// over the walk of the tokens' log2-decays (tokens past the sequence decay
// by nothing, so G of the walk's last position is that of the last token),
// then each token's weight for the state update, 2^(G_last - G[t] +
// walkedLog2Decay): to the chunk's end, and in the segment kernel, which
// walks its piece backwards, on through the chunks walked before (their
// decays' sum, walkedLog2Decay). Both are stored at the rows (walkRow):
// the walk's position u at row walkRow(u).
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
template <bool Reversed>
__device__ __forceinline__ void copyTokenDecays(const attn_abi::AttnLinearParams &p, const Work &work,
                                                u32 smem, int step, int lane) {
  if (step < work.endChunk - work.firstChunk) {
    const int chunk = chunkAt(work, step);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = lane + 32 * half, position = chunk * kChunk + row;
      const bool inSequence = positionDecays<Reversed>(p, position);
      const i64 index = inSequence ? (static_cast<i64>(work.batch) * p.seqlen +
                                      decayTokenOf<Reversed>(p, position)) * p.q_heads + work.head
                                   : 0;
      copyWordAsync(decayRingSlot(smem, step) + 4 * row, p.log_decay + index, inSequence);
    }
  }
  commitCopyGroup();
}

// The log2-decays of the chunk the walk visits at `step`: gated, once the
// warp's copies of them landed (copyTokenDecays); fixed, the head's.
template <bool Reversed>
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
  return {positionDecays<Reversed>(p, position) ? perToken : 0.f,
          positionDecays<Reversed>(p, position + 32) ? perToken : 0.f};
}

// The producer warp writes the chunk's decays and returns the chunk's
// total, G_last.
template <bool Reversed>
__device__ __forceinline__ float writeChunkDecay(TokenDecays tokens, float walkedLog2Decay,
                                                 float *decay, int lane) {
  float low = tokens.low, high = tokens.high;
  warpInclusiveScan64(low, high, lane);
  float last = __shfl_sync(0xffffffff, high, 31);
  const int lowRow = walkRow<Reversed>(lane), highRow = walkRow<Reversed>(lane + 32);
  decay[lowRow] = low;
  decay[highRow] = high;
  decay[kChunk + lowRow] = fastExp2(last - low + walkedLog2Decay);
  decay[kChunk + highRow] = fastExp2(last - high + walkedLog2Decay);
  return last;
}

} // namespace attn_linear
