//===- SmemAllocator.h - shared-memory allocation (MLIR-free) ---*- C++ -*-===//
//
// A small first-fit allocator over buffers with lifetimes: buffers whose
// lifetimes do not overlap may share bytes. attn-plan-smem feeds it the
// kernel's buffers; the autotuner can call it directly.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_TRANSFORMS_SMEMALLOCATOR_H
#define ATTN_TRANSFORMS_SMEMALLOCATOR_H

#include "attn/Compiler/TileConstraints.h"

#include <cstdint>
#include <string>
#include <vector>

namespace attn {

/// One buffer to place. It is live over the phases [liveBegin, liveEnd).
struct SmemRequest {
  std::string name;
  int64_t size = 0;  // bytes, all slots together
  int64_t align = 1; // power of two; also the slot alignment
  int64_t swizzle = 0;
  int64_t slots = 1;
  int64_t liveBegin = 0;
  int64_t liveEnd = 1;
};

/// A placed buffer. `aliases` names the first earlier buffer whose bytes it
/// overlaps (their lifetimes are disjoint), or is empty.
struct SmemPlacement {
  std::string name;
  int64_t offset = 0;
  int64_t size = 0;
  int64_t align = 1;
  int64_t swizzle = 0;
  int64_t slots = 1;
  std::string aliases;
};

struct SmemLayout {
  int64_t total = 0; // end of the last byte used
  std::vector<SmemPlacement> buffers;
};

/// Places the requests in order, each at the lowest offset that honors its
/// alignment and does not overlap a placed buffer with an overlapping
/// lifetime.
SmemLayout allocateSharedMemory(const std::vector<SmemRequest> &requests);

/// Program phases of the forward kernel used as lifetimes.
enum SmemPhase : int64_t {
  kPhaseSetup = 0,    // barrier initialization
  kPhaseMainLoop = 1, // Q loaded, K/V ring streaming, QK^T and PV
  kPhaseEpilogue = 2, // O staged for the store
  kPhaseEnd = 3,
};

/// The forward kernel's buffers, in allocation order:
///  - "q": block_m x head_dim, main loop only (its last use is the last
///    QK^T);
///  - "k", "v": rings of `stages` slots of block_n x head_dim, each slot
///    1024-aligned;
///  - "o_staging": block_m x head_dim; live with Q (a persistent block
///    stores one tile's O while the next tile's Q arrives) when both fit in
///    shared memory, else epilogue only, reusing Q's bytes;
///  - "barriers": 8-byte mbarriers, whole kernel, in the order q_full,
///    q_empty, k_full[stages], v_full[stages], k_empty[stages],
///    v_empty[stages].
/// Tiles are 1024-aligned with 128-byte swizzle (TMA swizzle atoms of 8 rows
/// x 128 bytes; WGMMA descriptors need 1024-byte aligned atoms).
std::vector<SmemRequest> forwardKernelSmemRequests(const TileProblem &problem,
                                                   const TileConfig &config);

/// The linear attention / retention kernel's buffers, all live for the
/// whole kernel: "q", "k" (stages x chunk x head_dim), "v" (stages x chunk
/// x block_n value columns), "state" (head_dim x block_n, 16-bit, the Q S
/// operand), "o_staging" (chunk x block_n), "decay" (2 x chunk fp32 per
/// stage: the chunk's cumulative log2-decays and token weights),
/// "decay_ring" (chunk fp32 per slot, ATTN_LINEAR_DECAY_RING_SLOTS slots:
/// gated log-decays copied ahead of their scan), "key_sum"
/// (head_dim fp32 per 64-column value slice), "barriers" (full and empty per
/// stage). Each value-column buffer holds one 64-column tile per slice.
std::vector<SmemRequest> linearKernelSmemRequests(const TileProblem &problem,
                                                  const TileConfig &config);

/// The backward kernel's buffers, all live for the whole kernel, in
/// allocation order: "k", "v" (block_n x head_dim), "q", "do" (rings of
/// `stages` slots of block_m x head_dim), "lse", "delta" (stages x block_m
/// fp32), "ds" (two block_n x block_m tiles of dSᵀ), with consumers sharing
/// a key tile (attn_abi::bwdSplitsColumns) "p" (two of Pᵀ), "dq_staging"
/// (`dqStagingBuffers` x block_m x head_dim fp32, a piece per consumer
/// warpgroup and buffer), "dq_turns" (an int32 per staging buffer: the
/// deterministic mode's order of the piece's addition), with `diagonalSums`
/// "diagonal_sums" (attn_abi::bwdDiagonalSumBytes: the consumer warps' rows
/// of a step's capture gradient by diagonal, two steps'), "barriers"
/// (backwardBarrierCount).
std::vector<SmemRequest> backwardKernelSmemRequests(const TileProblem &problem,
                                                    const TileConfig &config, int dqStagingBuffers,
                                                    bool diagonalSums = false);

/// The backward's optional buffers: how many dQ staging buffers each
/// consumer gets, and whether the key tile sums the capture gradient's
/// diagonals in shared memory.
struct BackwardSmemChoice {
  int dqStagingBuffers = 1;
  bool diagonalSums = false;
};

/// The first that fits in shared memory of: diagonal sums (for a
/// problem.diagonalGradient plan whose consumers can own every diagonal of
/// a step) with two dQ staging buffers, with one, then two buffers without
/// them, then one. The sums go first: without them each warp adds its own to
/// memory, 2.5 times the additions at head dim 128, where a second buffer
/// only lets a consumer stage a piece while the last one's reduction is in
/// flight.
BackwardSmemChoice backwardSmemChoice(const TileProblem &problem, const TileConfig &config);

/// The backward kernel's mbarriers: kv_full, full and empty per stage, a
/// dq_full and a dq_empty per consumer and staging buffer.
int64_t backwardBarrierCount(const TileConfig &config, int dqStagingBuffers);

} // namespace attn

#endif // ATTN_TRANSFORMS_SMEMALLOCATOR_H
