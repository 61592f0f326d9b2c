// The chunkwise kernel's constants, all from namespace attn_plan (the
// compiler's plan): chunk, stages, feature map, decay and the backward's
// run-time options; the block's warps and registers; the barriers.
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
// A walk from the sequence's end (the backward's dV and dK passes) runs
// its own entry points, attn_linear_reversed_kernel and
// attn_linear_reversed_segment_kernel: the functions below that depend on
// the direction take it as `Reversed`. (Read from the parameters at run
// time, it made the forward walk's dQ pass 18 % slower; docs/benchmarks.md.)
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

} // namespace attn_linear
