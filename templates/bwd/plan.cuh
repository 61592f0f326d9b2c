// The backward main kernel's constants, all derived from namespace
// attn_plan (the compiler's plan): tile shapes, the consumers' split of keys
// or columns, passes, register counts of the fragments, the order of the
// step's products, the barriers' layout.
#pragma once

#include "device/sequence.cuh"

namespace attn_bwd {

using namespace attn_dev;
using Element = attn_plan::Element;
using Mask = attn_plan::Mask;
using Mods = attn_plan::BackwardMods;
// mask_mod or score_mod: P and dS come from the regions a pair at a time
// (regionGradientsOf).
constexpr bool kHasRegions = Mods::kHasMaskMod || Mods::kHasScoreMod;
// Regions whose pairs go diagonal by diagonal: a score_mod that reads
// captures, or learnable captures (regionGradientsOf).
constexpr bool kDiagonalOrder =
    Mods::kLearnsCaptures || (Mods::kHasScoreMod && Mods::kHasCaptures);

constexpr int kHeadDim = attn_plan::kHeadDim;
constexpr int kBlockM = attn_plan::kBlockM; // query rows a step
constexpr int kBlockN = attn_plan::kBlockN; // keys a block
constexpr int kStages = attn_plan::kStages;
constexpr int kConsumers = attn_plan::kConsumerWarpgroups;
constexpr int kThreads = (kConsumers + 1) * kWarpgroupThreads;
constexpr int kWarpsPerWarpgroup = kWarpgroupThreads / 32;

constexpr int kElementBytes = 2;
// TMA boxes and swizzle atoms are 64 elements (128 bytes) wide: a tile of
// head_dim columns is head_dim / 64 column blocks of its rows.
constexpr int kColumnBlock = 64;
constexpr int kColumnBlocks = kHeadDim / kColumnBlock;
constexpr u32 kRowBytes = kColumnBlock * kElementBytes;
constexpr u32 kAtomBytes = 8 * kRowBytes;
constexpr u32 kQTileBytes = kBlockM * kHeadDim * kElementBytes;
constexpr u32 kKvTileBytes = kBlockN * kHeadDim * kElementBytes;
constexpr u32 kRowStatBytes = kBlockM * 4;
constexpr u32 kDsTileBytes = kBlockN * kBlockM * kElementBytes;

// Past head dim 128, two consumers of one 64-key tile split dK's and dV's
// columns (attn_abi::bwdSplitsColumns): consumer c holds columns
// [c D / C, (c + 1) D / C) of dK and dV and computes Sᵀ and dPᵀ for the
// step's query columns [c BLOCK_M / C, ...); Pᵀ and dSᵀ meet in shared
// memory, the A operands of dV's and dK's products.
// (A function, not a constant: a constant struct would sit in the PTX as data.)
constexpr attn_abi::BwdWidths planWidths() {
  return attn_abi::bwdWidths(kHeadDim, kBlockM, kBlockN, kConsumers);
}
constexpr bool kSplitsColumns = planWidths().splitsColumns;
static_assert(kBlockN == (kSplitsColumns ? 64 : 64 * kConsumers),
              "one 64-key WGMMA slice per consumer warpgroup, or one shared by all");
static_assert(kHeadDim % kColumnBlock == 0, "head dim must be a multiple of 64");
static_assert(kBlockM % 16 == 0 && kBlockM <= 256, "BLOCK_M is the N of Sᵀ's WGMMA");
static_assert(!kSplitsColumns || kBlockM == 64, "split columns: 64 query rows a step");

// With one consumer, past head dim 128 the block walks its query blocks
// once per 128 columns of dK and dV (attn_abi::bwdPasses): pass k
// accumulates columns [128 k, 128 k + 128) of dK and dV and adds the same
// columns of dQ.
constexpr int kPasses = attn_abi::bwdPasses(kHeadDim, kSplitsColumns);
constexpr int kPassColumns = planWidths().passColumns;
// The columns of dK and dV a consumer accumulates, and the query columns of
// Sᵀ and dPᵀ it computes.
constexpr int kGradColumns = planWidths().gradColumns;
constexpr int kQueryColumns = planWidths().queryColumns;
static_assert(kPassColumns % kColumnBlock == 0 && kGradColumns % kColumnBlock == 0 &&
                  kGradColumns <= 128,
              "a consumer's columns are whole 64-column blocks, at most 128");

// A pass's dQ of a query block splits into one piece per consumer: its rows
// when the block has 64 per consumer, else its columns; transposed (dQᵀ,
// each consumer 64 columns for all the rows) when the block's rows are not
// a multiple of 64.
constexpr bool kDqSplitsRows = planWidths().dqSplitsRows;
constexpr bool kDqTransposed = planWidths().dqTransposed;
static_assert(kDqSplitsRows || kBlockM == 64 || kDqTransposed,
              "dQ pieces are 64 rows, all 64 rows, or transposed");
static_assert(!kDqTransposed || (!kSplitsColumns && kPasses == 1 && kConsumers == 2 &&
                                 kHeadDim == 64 * kConsumers && !kHasRegions),
              "a transposed dQ piece is a consumer's 64 columns of one pass, without regions");
constexpr int kDqColumns = planWidths().dqColumns;
static_assert(kDqColumns % kColumnBlock == 0, "a dQ piece spans whole 64-column blocks");
// N of a dQ piece's accumulator: its columns, or transposed the step's rows.
constexpr int kDqFragmentColumns = planWidths().dqFragmentColumns;
constexpr int kDqPieceFloats = 64 * kDqFragmentColumns;

constexpr int kScoreRegs = kQueryColumns / 2;  // Sᵀ, dPᵀ: 64 keys x its query columns fp32
constexpr int kPackedRegs = kQueryColumns / 4; // Pᵀ, dSᵀ packed 16-bit
constexpr int kGradRegs = kGradColumns / 2;    // dK, dV: 64 keys x its columns fp32
constexpr int kDqRegs = kDqFragmentColumns / 2; // a dQ piece, fp32
// Without regions Sᵀ's exponentials overlap dPᵀ's product. With 64 query
// rows a step dV's product (Pᵀ packed) also overlaps dSᵀ's computation;
// with 128, Sᵀ, dPᵀ and P's packed copy together would not fit the
// registers beside dK and dV, so dV's product follows dSᵀ. The regions
// need both products before either result.
constexpr bool kDvBesideScoreGradients = kBlockM <= 64 && !kHasRegions;
static_assert(kDqRegs % 4 == 0, "dQ staging stores four floats at a time");
// dQ's product ahead of dK's, its piece staged while dK's runs (head dim
// 128: 5-11 % dense, 1-2 % with a score_mod; head dim 64, with the
// exponentials beside dPᵀ: 2-6 %; docs/benchmarks.md). With a mask_mod or
// passes, dK's goes first (before the dSᵀ barrier) and dQ's piece waits
// for both: the other order spills there.
constexpr bool kDqBeforeDk =
    kPasses == 1 && !Mods::kHasMaskMod && !kSplitsColumns;

// dQ pieces are staged in a ring of kDqBuffers per consumer (two where
// shared memory holds them), so that a consumer goes on while the writer
// warp's reduction of its last piece is in flight.
constexpr int kDqBuffers = attn_plan::kDqStagingBuffers;

// Whether dQ's additions follow the deterministic mode's orders
// (additionTurn): on request, and always where consumers split the columns,
// whose default-mode additions were the slower (H100, head dim 256: 2.85
// against 2.35 ms at S = 2048 without a mask, 1.55 against 1.44 causal;
// docs/benchmarks.md).
__device__ __forceinline__ bool orderedAdditions(const attn_abi::AttnBwdParams &p) {
  return kSplitsColumns || p.deterministic;
}

// Shared-memory barriers: [kv_full, full[S], empty[S], dq_full[C][B],
// dq_empty[C][B]]. A stage holds one query block's Q, dO, log-sum-exp and
// delta; a dQ buffer one consumer's piece.
struct Barriers {
  u32 base;
  __device__ u32 kvFull() const { return base; }
  __device__ u32 full(int stage) const { return base + 8 * (1 + stage); }
  __device__ u32 empty(int stage) const { return base + 8 * (1 + kStages + stage); }
  __device__ u32 dqFull(int consumer, int buffer) const {
    return base + 8 * (1 + 2 * kStages + consumer * kDqBuffers + buffer);
  }
  __device__ u32 dqEmpty(int consumer, int buffer) const {
    return dqFull(consumer, buffer) + 8 * kConsumers * kDqBuffers;
  }
};
static_assert(attn_plan::kBarrierCount == 1 + 2 * kStages + 2 * kConsumers * kDqBuffers,
              "the plan's barriers buffer holds every barrier");

// Each consumer warp releases a stage once (lane 0, after its WGMMAs that
// read the stage have completed), and marks its rows of a dQ piece staged.
constexpr int kReleaseArrivals = kConsumers * kWarpsPerWarpgroup;

// The named barrier (0 is __syncthreads) at which all consumers' dS slices
// are written.
constexpr int kDsWrittenBarrier = 1;

} // namespace attn_bwd
