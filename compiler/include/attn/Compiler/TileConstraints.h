//===- TileConstraints.h - sm_90a tile legality (MLIR-free) -----*- C++ -*-===//
//
// The rules a tile plan must satisfy on Hopper (sm_90a) for the
// warp-specialized forward attention kernel, the default heuristic, and the
// parser for tile overrides. Plain C++ so the autotuner and the CLI can use
// them without MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_COMPILER_TILECONSTRAINTS_H
#define ATTN_COMPILER_TILECONSTRAINTS_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attn {

/// sm_90a limits.
inline constexpr int64_t kMaxSharedMemoryPerBlock = 232448; // 227 KB opt-in
inline constexpr int64_t kRegistersPerBlock = 65536;
inline constexpr int kThreadsPerWarpgroup = 128;
inline constexpr int kWgmmaM = 64;        // rows of one WGMMA per warpgroup
/// The backward's query rows a step when dQ is computed transposed
/// (attn_abi::bwdTransposesDq): the widest step whose Sᵀ, dPᵀ, dK and dV fit
/// two consumers' 240 registers at head dim 128.
inline constexpr int kBackwardTransposedDqRows = 80;
inline constexpr int64_t kSmemBaseAlignSlack = 1024; // see SmemPlanAttr

/// Every decision of a tile plan (mirrors #attn.tile).
struct TileConfig {
  int blockM = 128;
  int blockN = 128;
  int stages = 2;
  int consumerWarpgroups = 2;
  int producerWarpgroups = 1;
  int consumerRegisters = 240;
  int producerRegisters = 24;
  /// Schedule: independent partial results per row in the softmax's max and
  /// sum reductions (1, 2 or 4; more hide latency, hold more registers).
  int softmaxChains = 1;
  /// Grid: 0 launches one block per work tile (the hardware balances uneven
  /// tiles), k > 0 a persistent grid of k blocks per SM walking the tiles.
  int persistentBlocksPerSm = 0;

  int threadsPerBlock() const {
    return kThreadsPerWarpgroup * (consumerWarpgroups + producerWarpgroups);
  }
  bool operator==(const TileConfig &o) const {
    return blockM == o.blockM && blockN == o.blockN && stages == o.stages &&
           consumerWarpgroups == o.consumerWarpgroups &&
           producerWarpgroups == o.producerWarpgroups &&
           consumerRegisters == o.consumerRegisters &&
           producerRegisters == o.producerRegisters &&
           softmaxChains == o.softmaxChains &&
           persistentBlocksPerSm == o.persistentBlocksPerSm;
  }
  bool operator!=(const TileConfig &o) const { return !(*this == o); }
};

/// The most windows of staged score_mod values per consumer warpgroup.
constexpr int kMaxScoreDiagonalWindows = 2;

/// The compile-time part of the problem the tile depends on.
struct TileProblem {
  int headDim;
  int elementBytes; // 2 for bf16/f16
  /// Every work tile costs the same (no mask, no mask_mod): the default grid
  /// is persistent.
  bool evenTiles = false;
  /// Values of score_mod the kernel stages per key tile in shared memory
  /// (capture reads that depend on q and kv only through q - kv), at most
  /// kMaxScoreDiagonals.
  int scoreDiagonals = 0;
  /// A staged value computes a transcendental or a division by a value
  /// that is not a constant (T5's log-spaced buckets), not only index
  /// arithmetic and table reads.
  bool transcendentalScoreDiagonals = false;
  /// Windows per consumer warpgroup for the staged values, a ring the
  /// producer fills: attn-plan-smem takes kMaxScoreDiagonalWindows where
  /// they fit (the fill then runs a key tile further ahead), else fewer.
  int scoreDiagonalWindows = kMaxScoreDiagonalWindows;
  /// The kernel modifies scores (a score_mod region or function).
  bool hasScoreMod = false;
  /// The kernel masks with a mask_mod (a region or function).
  bool hasMaskMod = false;
  /// The backward adds a learnable capture's gradient by diagonal (q - kv),
  /// an `attn.per_diagonal` addition: its plan sums the diagonals of a key
  /// tile in shared memory where they fit (attn_abi::bwdDiagonalSumBytes).
  bool diagonalGradient = false;
  /// The kernel has a mask_mod attn-classify-blocks cannot prove (it reads
  /// buffers, or is a function): its tiles come from a run-time coverage,
  /// and a partial tile's stored key bits arrive with its K tile, in a
  /// shared-memory buffer per stage (keyBitsStageBytes).
  bool storedKeyBits = false;
  /// The only mask is the built-in causal one (no mask_mod).
  bool causalOnly = false;
  /// The built-in mask is the causal one, with or without a mask_mod.
  bool causalMask = false;
  /// The mask_mod, as attn-classify-blocks proves it, keeps every pair the
  /// causal mask keeps (prefix-LM), and no sliding window narrows it: its
  /// work tiles are mostly full, as the causal mask's are.
  bool maskModKeepsCausal = false;
  /// The only mask is a built-in sliding window (no mask_mod). With
  /// causalOnly: the kernel's persistent schedule knows how its tiles'
  /// work varies.
  bool slidingWindowOnly = false;
  /// The softmax runs on a fixed base, with no running row maximum: P is
  /// bf16 and every score_mod result is -inf or within [-B, B] where B
  /// times log2(e) (after score_output_scale) is at most
  /// kMaxFixedSoftmaxRangeLog2 (a bounded score_mod such as soft-capping).
  bool fixedSoftmaxBase = false;
  /// The key sequence length the kernel is planned for (attn-tile's
  /// tuning-shape), 0 when unknown. Only the heuristic reads it; every plan
  /// runs at any length.
  int64_t keyLength = 0;
};

/// The widest score range (base 2) over which the kernel's softmax runs on a
/// fixed base (templates/fwd/tile_scheduler.cuh, kFixedSoftmaxBase, which the
/// compiler emits from this constant).
constexpr int kMaxFixedSoftmaxRangeLog2 = 80;

/// The most score_mod values staged per key tile.
constexpr int kMaxScoreDiagonals = 2;

/// Shared memory of one window of staged score_mod values: block_n + 64
/// words per value (the diagonals a consumer's 64 rows meet in a key tile,
/// and one spare).
int64_t scoreDiagonalWindowBytes(const TileProblem &problem, const TileConfig &config);

/// Shared memory of the staged score_mod values: per consumer warpgroup,
/// problem.scoreDiagonalWindows windows. The kernel takes the window count
/// from the buffer's size (attn_plan::kScoreDiagonalWindows).
int64_t scoreDiagonalBytes(const TileProblem &problem, const TileConfig &config);

/// A partial TileConfig: set fields replace the heuristic's.
struct TileOverride {
  std::optional<int> blockM, blockN, stages, consumerWarpgroups,
      producerWarpgroups, consumerRegisters, producerRegisters, softmaxChains,
      persistentBlocksPerSm;
  bool empty() const {
    return !blockM && !blockN && !stages && !consumerWarpgroups &&
           !producerWarpgroups && !consumerRegisters && !producerRegisters &&
           !softmaxChains && !persistentBlocksPerSm;
  }
};

/// Consumer register count for a number of consumer warpgroups: 240 for one
/// or two, 160 for three (so 128 * (24 + 3 * 160) fits 65536).
int defaultConsumerRegisters(int consumerWarpgroups);

/// The registers a launch of `config`'s warpgroups allocates to a block,
/// within which setmaxnreg moves them between producers and consumers.
int64_t launchRegistersPerBlock(const TileConfig &config);

/// Sets the forward's register split for `config`'s warpgroups: the
/// consumers' default count and 24 for the producers, except where the
/// producer warps fill staged score_mod diagonals (problem.scoreDiagonals):
/// there two consumers take 232 where their estimate fits, and the
/// producers what the launch leaves, up to 40.
void fitForwardRegisters(const TileProblem &problem, TileConfig &config);

/// The default plan for sm_90a (one 64-row WGMMA slice of Q per consumer
/// warpgroup, one TMA producer warpgroup, 2 stages):
///   head_dim  64: 192 x 128, 3 consumer warpgroups;
///   head_dim 128: 128 x 128, 2 consumer warpgroups;
///   head_dim 256: 128 x  80, 2 consumer warpgroups;
/// four softmax reduction chains at head dim 128 (one otherwise) and a
/// persistent grid of one block per SM when the work tiles are even, or
/// masked by a built-in mask alone with keyLength below
/// kMaskedPersistentMaxKeys (or unknown). At head dim 128 without a mask or
/// a score_mod, with keyLength known and at least kWideKeyTileMinKeys,
/// 128 x 160 tiles with one softmax chain; so with the causal mask alone
/// (with or without a score_mod) from kWideCausalMinKeys, with two chains
/// where a score_mod stages diagonals, and 128 x 144 with four where those
/// compute a transcendental. At head dim 64
/// with the causal mask alone and no score_mod: at most kMediumCausalMaxKeys
/// keys, 128 x 128 tiles with three stages (and two chains up to
/// kShortCausalMaxKeys). At head dim 256 a score_mod takes four chains and a
/// sliding window the hardware's dispatch. A mask_mod takes the persistent
/// grid when the compiler classifies it under the causal mask (below
/// kMaskedPersistentMaxKeys), or up to kShortMaskModMaxKeys keys; one that
/// keeps the causal half-plane (maskModKeepsCausal) is planned as the
/// causal mask from kWideCausalMinKeys at head dim 128 without a score_mod:
/// 128 x 160, two chains, persistent below kMaskedPersistentMaxKeys.
/// At head dim 128 with fixedSoftmaxBase, at any length and over every
/// other rule: 192 x 64, three consumers, four stages and two chains (one
/// chain on the hardware's dispatch with a sliding window).
TileConfig defaultTileConfig(const TileProblem &problem);

/// The shortest key length for which the heuristic takes 160-key tiles at
/// head dim 128 (no mask, no score_mod): the shortest measured
/// (docs/benchmarks.md); at 512 and 1024 keys a 160-key tiling pads the
/// last tile by 25 % and 9 %, and was not measured.
constexpr int64_t kWideKeyTileMinKeys = 2048;

/// The longest key length for which the heuristic gives causal head-dim-64
/// kernels two softmax chains (the plan set's 512-key point, H200).
constexpr int64_t kShortCausalMaxKeys = 512;

/// The longest key length for which the heuristic gives every mask_mod
/// kernel a persistent grid (measured faster at 1024 keys on the document
/// mask, slower at 8192).
constexpr int64_t kShortMaskModMaxKeys = 1024;

/// The key length from which kernels masked by a built-in mask alone keep
/// one block per work tile: below it the persistent grid (dealing tiles out
/// in a snake, templates/fwd/tile_scheduler.cuh) was measured 4 to 30 % faster
/// on causal kernels of head dims 64, 128 and 256 up to 4096 keys, 0.5 to
/// 5 % at 8192, and 1 to 9 % on the causal score_mods and the sliding
/// window at 8192; at 16384 it was mixed, -2 to +3 % (docs/benchmarks.md,
/// 2026-11-26).
constexpr int64_t kMaskedPersistentMaxKeys = 16384;

/// The longest key length for which the heuristic gives causal head-dim-64
/// kernels (past kShortCausalMaxKeys) 128 x 128 tiles with three stages:
/// measured faster at 1024 keys; at 2048 attn-tune kept 192 x 128.
constexpr int64_t kMediumCausalMaxKeys = 1024;

/// The shortest key length for which the heuristic gives causal head-dim-128
/// kernels 128 x 160 tiles with one softmax chain: measured faster at 8192
/// and 16384 keys, within noise at 4096 and slower at 2048.
constexpr int64_t kWideCausalMinKeys = 8192;

/// Applies `override` on top of `base`. When block_m is given without
/// consumer_warpgroups the latter becomes block_m / 64, and vice versa; the
/// register split follows the plan (fitForwardRegisters) unless a count
/// is given; with one given, the other is the plan's where the launch holds
/// both, else what the launch leaves it.
TileConfig applyTileOverride(const TileProblem &problem, const TileConfig &base,
                             const TileOverride &override);

/// Parses "key=value,key=value" with keys block_m, block_n, stages,
/// consumer_warpgroups, producer_warpgroups, consumer_registers,
/// producer_registers, softmax_chains, persistent_blocks_per_sm (the last
/// may be 0, the others are positive). Returns an error message on
/// malformed input.
std::optional<std::string> parseTileOverride(const std::string &text,
                                             TileOverride &result);

/// The override that sets every field of `config` (parseTileOverride reads
/// it back to `config`).
std::string formatTileOverride(const TileConfig &config);

/// Registers one consumer thread needs: O accumulator (head_dim/2 fp32),
/// S accumulator (block_n/2 fp32), P in 16 bits (block_n/4), 32 for
/// addresses, row statistics and loop state, and (head_dim - 128)/8 more
/// above head dim 128 (calibrated against ptxas by the candidate test).
int64_t estimateConsumerRegisters(const TileProblem &problem,
                                  const TileConfig &config);

/// The forward kernel's mbarriers: Q full and empty, K and V full and empty
/// per stage, and with staged score_mod values a full and an empty per
/// consumer warpgroup and window.
int64_t forwardBarrierCount(const TileProblem &problem, const TileConfig &config);

/// The stored key bits of one key tile, 0 unless problem.storedKeyBits: a
/// word per row and lane quad, 32-bit up to 128 keys a tile, else 64-bit
/// (templates/attn_params.h, tileKeyBitsPerTile).
int64_t keyBitsStageBytes(const TileProblem &problem, const TileConfig &config);

/// Dynamic shared memory of the kernel: Q tile + stages x (K tile + V tile
/// + key bits) + mbarriers (8 bytes each, forwardBarrierCount) + 1024 bytes
/// of slack to align the dynamic window's base.
int64_t estimateSharedMemoryBytes(const TileProblem &problem,
                                  const TileConfig &config);

/// Returns the first violated constraint, prefixed by its name ("WGMMA
/// shape: ...", "pipeline: ...", "warpgroups: ...", "register budget: ...",
/// "shared-memory capacity: ...", "schedule: ..."), or nullopt if the plan
/// is legal.
std::optional<std::string> checkTileLegality(const TileProblem &problem,
                                             const TileConfig &config);

/// Value columns of the state one consumer warpgroup of the linear kernel
/// owns (its value slice): ATTN_LINEAR_SLICE, which TileConstraints.cpp
/// checks.
inline constexpr int kLinearSlice = 64;

/// Multiprocessors of the GPU the default plans are measured on (H100 SXM).
inline constexpr int64_t kReferenceMultiprocessors = 132;

/// The chunkwise linear attention / retention kernel's plan: chunks of 64
/// tokens (block_m); 64 value columns a block (block_n), or every value
/// column of a head (block_n = head_dim) when the shape is known
/// (`batchHeads` = batch x query heads > 0) and the 64-column blocks would
/// leave SMs idle (so the runtime splits the sequence); one consumer
/// warpgroup per 64 columns beside the TMA producer warp; 2 stages.
TileConfig linearTileConfig(int headDim, int64_t batchHeads = 0);

/// An override of the linear plan, key by key. block_n and
/// consumer_warpgroups determine each other (one consumer per 64 value
/// columns), as block_m and consumer_warpgroups do for softmax plans.
TileConfig applyLinearTileOverride(const TileConfig &base, const TileOverride &override);

/// The linear kernel's constraints: block_m = 64, block_n 64 or 128 and at
/// most head_dim, one consumer warpgroup per 64 columns of block_n, one
/// producer, 1 to 4 stages, no persistent grid, the buffers within shared
/// memory. Returns the first violation or nullopt.
std::optional<std::string> checkLinearTileLegality(const TileProblem &problem,
                                                   const TileConfig &config);

/// The backward softmax kernel's plan (templates/attn_bwd_sm90.cuh):
/// block_n keys a block, one 64-key slice per consumer warpgroup, block_m
/// query rows a step, a ring of `stages` (Q, dO) slots:
///   head_dim  64: block_m 128, block_n 128, 2 consumers (240), 2 stages;
///   head_dim 128: block_m  64, block_n 128, 2 consumers (240), 2 stages;
///   head_dim 256: block_m  64, block_n  64, 2 consumers (240) sharing
///                 the keys, each with half of dK's and dV's columns
///                 (attn_abi::bwdSplitsColumns), 1 stage;
/// 24 registers a producer thread; one block per (key tile, kv head,
/// batch). A one-consumer plan of head dim 256 walks the query blocks twice,
/// 128 columns of dK and dV a pass (attn_abi::bwdPasses).
TileConfig backwardTileConfig(const TileProblem &problem);

/// Sets the backward's register split for config's consumer warpgroups:
/// 240 a consumer thread and 24 a producer thread, or 256 and 40 for one
/// consumer past head dim 128 (its passes).
void fitBackwardRegisters(const TileProblem &problem, TileConfig &config);

/// The backward's constraints: block_n = 64 x consumer warpgroups (or 64
/// shared by two past head dim 128, with block_m 64), block_m
/// 64 (dQ split by columns) or 64 x consumer warpgroups (by rows), head dim
/// 64, 128 or 256, 1 to 4 stages, the register budget (dK and dV
/// accumulators of a pass, Sᵀ and dPᵀ, dQ's piece) and the buffers within
/// shared memory. Returns
/// the first violation, prefixed like checkTileLegality's, or nullopt.
std::optional<std::string> checkBackwardTileLegality(const TileProblem &problem,
                                                     const TileConfig &config);

/// Registers one backward consumer thread needs: dK and dV (a pass's
/// columns / 2 fp32 each), then the larger of Sᵀ and dPᵀ (block_m / 2 each) and their
/// packed forms (block_m / 4 each) beside dQ's piece, and 24 for addresses
/// and loop state.
int64_t estimateBackwardConsumerRegisters(const TileProblem &problem, const TileConfig &config);

/// Every value of each tunable field the generator tries; together with
/// checkTileLegality they define the tuning space.
struct TileSearchSpace {
  std::vector<int> consumerWarpgroups{1, 2, 3};
  std::vector<int> blockN{32,  48,  64,  80,  96,  112, 128, 144,
                          160, 176, 192, 208, 224, 240, 256};
  std::vector<int> stages{1, 2, 3, 4};
  std::vector<int> softmaxChains{1, 2, 4};
  std::vector<int> persistentBlocksPerSm{0, 1};
};

/// Every legal configuration of the search space for `problem`, ordered by
/// (consumer warpgroups, block_n, stages, chains, grid). block_m follows the
/// consumer warpgroups, registers their default budget, one producer
/// warpgroup at 24 registers. The candidates that differ only in the grid
/// policy share one compiled binary (it is a launch setting).
std::vector<TileConfig> enumerateTileCandidates(
    const TileProblem &problem, const TileSearchSpace &space = {});

/// The plans first-use tuning compiles and times (Compiler::compileFor),
/// at most `count`: defaultTileConfig(problem) first, then the candidates
/// of enumerateTileCandidates nearest it (block_n and the consumer count
/// weigh most; ties in override order).
std::vector<TileConfig> firstUseCandidates(const TileProblem &problem, size_t count);

/// Every legal backward plan for `problem` (checkBackwardTileLegality), in
/// the order (consumer warpgroups, block_m, stages, consumer registers):
/// 1 or 2 consumer warpgroups with block_n = 64 x consumers, block_m 64 or
/// 64 x consumers, 1 to 4 stages, 240 consumer registers (and 256 with one
/// consumer, where a block has registers to spare), one producer
/// warpgroup at 24, one softmax chain, a block per key tile. Holds
/// backwardTileConfig(problem) wherever the backward has a plan; empty for
/// head dims without one (256).
std::vector<TileConfig> enumerateBackwardTileCandidates(const TileProblem &problem);

} // namespace attn

#endif // ATTN_COMPILER_TILECONSTRAINTS_H
