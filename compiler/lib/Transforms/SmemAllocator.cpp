//===- SmemAllocator.cpp - shared-memory allocation (MLIR-free) -----------===//

#include "attn/Transforms/SmemAllocator.h"

#include "attn_params.h"

#include <algorithm>

namespace attn {

static int64_t alignTo(int64_t value, int64_t align) {
  return (value + align - 1) / align * align;
}

SmemLayout allocateSharedMemory(const std::vector<SmemRequest> &requests) {
  SmemLayout layout;
  struct Placed {
    const SmemRequest *request;
    int64_t offset;
  };
  std::vector<Placed> placed;
  for (const SmemRequest &request : requests) {
    // Placed buffers live at the same time as this one, by offset.
    std::vector<Placed> conflicts;
    for (const Placed &p : placed)
      if (p.request->liveBegin < request.liveEnd &&
          request.liveBegin < p.request->liveEnd)
        conflicts.push_back(p);
    std::sort(conflicts.begin(), conflicts.end(),
              [](const Placed &a, const Placed &b) {
                return a.offset < b.offset;
              });
    // First fit: the lowest aligned offset in a gap large enough.
    int64_t offset = 0;
    for (const Placed &c : conflicts) {
      if (offset + request.size <= c.offset)
        break;
      offset = std::max(offset,
                        alignTo(c.offset + c.request->size, request.align));
    }
    placed.push_back({&request, offset});

    SmemPlacement out;
    out.name = request.name;
    out.offset = offset;
    out.size = request.size;
    out.align = request.align;
    out.swizzle = request.swizzle;
    out.slots = request.slots;
    // Record the first earlier buffer whose bytes this one reuses.
    for (const Placed &p : placed) {
      if (p.request == &request)
        break;
      if (p.offset < offset + request.size &&
          offset < p.offset + p.request->size && request.size > 0 &&
          p.request->size > 0) {
        out.aliases = p.request->name;
        break;
      }
    }
    layout.total = std::max(layout.total, offset + request.size);
    layout.buffers.push_back(std::move(out));
  }
  return layout;
}

std::vector<SmemRequest> forwardKernelSmemRequests(const TileProblem &problem,
                                                   const TileConfig &config) {
  constexpr int64_t kTileAlign = 1024;
  constexpr int64_t kSwizzle = 128;
  int64_t row = int64_t(problem.headDim) * problem.elementBytes;
  int64_t qBytes = alignTo(int64_t(config.blockM) * row, kTileAlign);
  int64_t kvSlot = alignTo(int64_t(config.blockN) * row, kTileAlign);
  int64_t numBarriers = forwardBarrierCount(problem, config);
  // A persistent block loads the next tile's Q while it stores this tile's O;
  // that needs a staging buffer of its own. Where it does not fit, and in a
  // block that runs one work tile, staging reuses Q's bytes (the next Q load
  // waits for the store).
  bool stagingOfItsOwn =
      config.persistentBlocksPerSm > 0 &&
      estimateSharedMemoryBytes(problem, config) + qBytes <= kMaxSharedMemoryPerBlock;

  std::vector<SmemRequest> requests;
  requests.push_back({"q", qBytes, kTileAlign, kSwizzle, 1, kPhaseMainLoop,
                      kPhaseEpilogue});
  requests.push_back({"k", config.stages * kvSlot, kTileAlign, kSwizzle,
                      config.stages, kPhaseMainLoop, kPhaseEpilogue});
  requests.push_back({"v", config.stages * kvSlot, kTileAlign, kSwizzle,
                      config.stages, kPhaseMainLoop, kPhaseEpilogue});
  requests.push_back({"o_staging", qBytes, kTileAlign, kSwizzle, 1,
                      stagingOfItsOwn ? kPhaseMainLoop : kPhaseEpilogue,
                      kPhaseEnd});
  // Consumers in their epilogue overlap others still in the main loop, and
  // a persistent block's next main loop overlaps this store: the windows
  // share no bytes with anything.
  if (problem.scoreDiagonals > 0)
    requests.push_back({"score_diagonals", scoreDiagonalBytes(problem, config), 16, 0,
                        problem.scoreDiagonals, kPhaseSetup, kPhaseEnd});
  // A partial key tile's stored key bits, copied in beside its K tile.
  if (problem.storedKeyBits)
    requests.push_back({"key_bits", config.stages * keyBitsStageBytes(problem, config), 16, 0,
                        config.stages, kPhaseMainLoop, kPhaseEpilogue});
  requests.push_back({"barriers", 8 * numBarriers, 8, 0, numBarriers,
                      kPhaseSetup, kPhaseEnd});
  return requests;
}

std::vector<SmemRequest> backwardKernelSmemRequests(const TileProblem &problem,
                                                    const TileConfig &config, int dqStagingBuffers,
                                                    bool diagonalSums) {
  constexpr int64_t kTileAlign = 1024;
  constexpr int64_t kSwizzle = 128;
  const int64_t row = int64_t(problem.headDim) * problem.elementBytes;
  const int64_t kvBytes = alignTo(int64_t(config.blockN) * row, kTileAlign);
  const int64_t querySlot = alignTo(int64_t(config.blockM) * row, kTileAlign);
  const int64_t stages = config.stages;
  const int64_t statBytes = int64_t(config.blockM) * 4;
  const int64_t dsTile =
      alignTo(int64_t(config.blockN) * config.blockM * problem.elementBytes, kTileAlign);
  const int64_t stagingSlots = int64_t(config.consumerWarpgroups) * dqStagingBuffers;
  const int64_t barriers = backwardBarrierCount(config, dqStagingBuffers);
  std::vector<SmemRequest> requests;
  requests.push_back({"k", kvBytes, kTileAlign, kSwizzle, 1, kPhaseSetup, kPhaseEnd});
  requests.push_back({"v", kvBytes, kTileAlign, kSwizzle, 1, kPhaseSetup, kPhaseEnd});
  requests.push_back({"q", stages * querySlot, kTileAlign, kSwizzle, stages, kPhaseSetup, kPhaseEnd});
  requests.push_back({"do", stages * querySlot, kTileAlign, kSwizzle, stages, kPhaseSetup, kPhaseEnd});
  requests.push_back({"lse", stages * statBytes, 16, 0, stages, kPhaseSetup, kPhaseEnd});
  requests.push_back({"delta", stages * statBytes, 16, 0, stages, kPhaseSetup, kPhaseEnd});
  requests.push_back({"ds", 2 * dsTile, kTileAlign, kSwizzle, 2, kPhaseSetup, kPhaseEnd});
  const bool splitsColumns =
      attn_abi::bwdSplitsColumns(problem.headDim, config.blockN, config.consumerWarpgroups);
  // Consumers sharing a key tile meet Pᵀ there too.
  if (splitsColumns)
    requests.push_back({"p", 2 * dsTile, kTileAlign, kSwizzle, 2, kPhaseSetup, kPhaseEnd});
  // A pass's columns of dQ (attn_abi::bwdPasses), a piece per consumer.
  const int64_t passColumns = attn_abi::bwdPassColumns(problem.headDim, splitsColumns);
  requests.push_back({"dq_staging", int64_t(dqStagingBuffers) * config.blockM * passColumns * 4,
                      16, 0, stagingSlots, kPhaseSetup, kPhaseEnd});
  requests.push_back({"dq_turns", 4 * int64_t(dqStagingBuffers), 4, 0, dqStagingBuffers,
                      kPhaseSetup, kPhaseEnd});
  if (diagonalSums)
    requests.push_back({"diagonal_sums",
                        attn_abi::bwdDiagonalSumBytes(problem.headDim, config.blockM, config.blockN,
                                                      config.consumerWarpgroups),
                        16, 0, 1, kPhaseSetup, kPhaseEnd});
  requests.push_back({"barriers", 8 * barriers, 8, 0, barriers, kPhaseSetup, kPhaseEnd});
  return requests;
}

BackwardSmemChoice backwardSmemChoice(const TileProblem &problem, const TileConfig &config) {
  const bool sums =
      problem.diagonalGradient &&
      attn_abi::bwdBlockDiagonalSumsFit(problem.headDim, config.blockM, config.blockN,
                                        config.consumerWarpgroups);
  const BackwardSmemChoice choices[] = {{2, sums}, {1, sums}, {2, false}};
  for (const BackwardSmemChoice &choice : choices) {
    const int64_t bytes =
        allocateSharedMemory(backwardKernelSmemRequests(problem, config, choice.dqStagingBuffers,
                                                        choice.diagonalSums))
            .total +
        kSmemBaseAlignSlack;
    if (bytes <= kMaxSharedMemoryPerBlock)
      return choice;
  }
  return {1, false};
}

int64_t backwardBarrierCount(const TileConfig &config, int dqStagingBuffers) {
  return 1 + 2 * int64_t(config.stages) + 2 * int64_t(config.consumerWarpgroups) * dqStagingBuffers;
}

std::vector<SmemRequest> linearKernelSmemRequests(const TileProblem &problem,
                                                  const TileConfig &config) {
  constexpr int64_t kTileAlign = 1024;
  constexpr int64_t kSwizzle = 128;
  int64_t row = int64_t(problem.headDim) * problem.elementBytes;
  int64_t qkSlot = alignTo(int64_t(config.blockM) * row, kTileAlign);
  // The block's value columns: a 64-column tile per consumer warpgroup,
  // side by side in each V slot, the state and the staging.
  int64_t sliceRow = int64_t(config.blockN) * problem.elementBytes;
  int64_t vSlot = alignTo(int64_t(config.blockM) * sliceRow, kTileAlign);
  int64_t slices = config.blockN / kLinearSlice;
  int64_t stages = config.stages;
  std::vector<SmemRequest> requests;
  requests.push_back({"q", stages * qkSlot, kTileAlign, kSwizzle, stages, kPhaseSetup, kPhaseEnd});
  requests.push_back({"k", stages * qkSlot, kTileAlign, kSwizzle, stages, kPhaseSetup, kPhaseEnd});
  requests.push_back({"v", stages * vSlot, kTileAlign, kSwizzle, stages, kPhaseSetup, kPhaseEnd});
  requests.push_back({"state", alignTo(int64_t(problem.headDim) * sliceRow, kTileAlign), kTileAlign,
                      kSwizzle, 1, kPhaseSetup, kPhaseEnd});
  requests.push_back({"o_staging", vSlot, kTileAlign, kSwizzle, 1, kPhaseSetup, kPhaseEnd});
  // Per stage, the chunk's cumulative decays and each token's weight; the
  // ring the producer copies gated log-decays into ahead of them.
  requests.push_back({"decay", stages * 2 * int64_t(config.blockM) * 4, 16, 0, stages, kPhaseSetup,
                      kPhaseEnd});
  constexpr int64_t kDecayRingSlots = ATTN_LINEAR_DECAY_RING_SLOTS;
  requests.push_back({"decay_ring", kDecayRingSlots * int64_t(config.blockM) * 4, 16, 0,
                      kDecayRingSlots, kPhaseSetup, kPhaseEnd});
  requests.push_back({"key_sum", slices * int64_t(problem.headDim) * 4, 16, 0, 1, kPhaseSetup,
                      kPhaseEnd});
  requests.push_back({"barriers", 16 * stages, 8, 0, 2 * stages, kPhaseSetup, kPhaseEnd});
  return requests;
}

} // namespace attn
