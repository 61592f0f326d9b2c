// The consumer's main loop: consumeTile runs one work tile's key tiles,
// QKᵀ, masks, score_mod and softmax overlapped with the previous tile's PV,
// and consume walks the block's work tiles.
#pragma once

#include "fwd/tile_scheduler.cuh"
#include "fwd/consumer_gemm.cuh"
#include "fwd/mask_hooks.cuh"
#include "fwd/score_mod.cuh"
#include "fwd/epilogue.cuh"
#include "fwd/paged_kv.cuh"

namespace attn_kernel {

// One work tile of a consumer, software-pipelined inside the warpgroup:
// iteration j issues S_j = Q K_jᵀ and O += P_{j-1} V_{j-1} back to back, then
// runs the softmax of S_j while the PV product is still on the tensor cores.
// Only the rescaling of O waits for that product. `tileCount` is the number
// of key tiles the work tile visits, `ring` the key tiles this block consumed
// before it; `qPhase` is this tile's Q load. StoredBits as for applyMask:
// the form without the mask_mod's per-pair code needs fewer registers (the
// BigBird kernel's main loop reloaded 10 spilled values an iteration).
template <bool StoredBits>
__device__ void consumeTile(const attn_abi::AttnFwdParams &p, u32 smemBase,
                            const Barriers &barriers, int consumer, const TileSchedule &schedule,
                            const WorkTile &work, int tileCount, int ring, u32 qPhase,
                            const GemmTurns &turns) {
  const int thread = threadIdx.x % kWarpgroupThreads;
  const int warp = thread / 32, lane = thread % 32;
  const int sliceQueryBegin = sliceBegin(p, work, consumer);
  const int row0 = sliceQueryBegin + warp * 16 + lane / 4;
  const int sliceLast = min(sliceQueryBegin + 63, work.sequence.seqlenQ - 1);
  const u32 qSlice = smemBase + attn_plan::kSmemQ + consumer * 64 * kRowBytes;
  auto kTile = [&](int stage) { return smemBase + attn_plan::kSmemK + stage * kKvTileBytes; };
  auto vTile = [&](int stage) { return smemBase + attn_plan::kSmemV + stage * kKvTileBytes; };
  // Q is free once the last QKᵀ has read it, unless O's staging shares it.
  auto releaseQAfterScores = [&]() {
    if constexpr (!kStagingSharesQ)
      releaseSlot(barriers.qEmpty(), lane);
  };

  float output[kOutputRegs];
#pragma unroll
  for (int i = 0; i < kOutputRegs; ++i)
    output[i] = 0.f;
  RowStatistics stats;
  stats.reset();
  if constexpr (kFixedSoftmaxBase)
    stats.max[0] = stats.max[1] = kFixedSoftmaxBaseLog2;

  // What the user regions compute once per query row of this thread. Row
  // values that do not read q are the second row's too: then the two rows
  // share every per-key product with them (ALiBi's slope times kv).
  typename Mods::MaskRow maskRows[2];
  typename Mods::ScoreRow scoreRows[2];
  maskRows[0] = Mods::maskRow(p, work.batch, work.head, row0);
  scoreRows[0] = Mods::scoreRow(p, work.batch, work.head, row0);
  maskRows[1] = Mods::kMaskRowUsesQuery ? Mods::maskRow(p, work.batch, work.head, row0 + 8)
                                        : maskRows[0];
  scoreRows[1] = Mods::kScoreRowUsesQuery ? Mods::scoreRow(p, work.batch, work.head, row0 + 8)
                                          : scoreRows[0];

  // A score_mod sees scaled scores, so the softmax then scales by log2(e)
  // alone; without one the scale folds into the exponent. The constant
  // factors attn-lower-mods took out of score_mod join these two scales.
  const float kLn2 = 0.6931471805599453f;
  const float softmaxScaleLog2 =
      Mods::kHasScoreMod ? kLog2e * Mods::kScoreOutputScale : p.scale_log2;
  const float scoreModInputScale = p.scale_log2 * kLn2 * Mods::kScoreInputScale;
  // Where a score_mod that reads kv relative to an origin measures it from:
  // the slice's first diagonal key, so that the keys near the diagonal
  // (those a distance bias favours) give small values.
  const int keyOrigin = static_cast<int>(
      min(max(static_cast<i64>(sliceQueryBegin) + work.sequence.shift, i64(0)),
          static_cast<i64>(work.sequence.seqlenK)));

  // Its first next() tests the window at keys.begin.
  VisitedTileWalk walk{work.keys.begin - 32, 0u, 0u, 0u, -1};
  // This thread's rows' stored key bits of a tile, where the launch has
  // them, once the tile's K (and words) arrived in stage `stage`.
  const int rowInBlock = row0 - work.queryBegin;
  auto storedRowsOf = [&](int keyTile, int stage) {
    return StoredBits ? readStoredKeyRows(walk.slotOf(keyTile), keyWordsTile(smemBase, stage),
                                          rowInBlock, lane)
                      : StoredKeyRows{-1, {0, 0}};
  };
  // Hands a K stage (and its key words) back to the producer once the scores
  // have read K; with stored bits, after every lane's reads of the words.
  auto releaseKeySlot = [&](int stage) {
    if constexpr (StoredBits)
      __syncwarp();
    releaseSlot(barriers.kEmpty(stage), lane);
  };
  const DiagonalStage diagonals{smemBase, consumer};
  // Scores of key tile `keyTile` (at ring position `position`) ->
  // probabilities, with the O rescale factor.
  auto softmaxOfTile = [&](float (&scores)[kScoreRegs], int keyTile, int position,
                           const StoredKeyRows &stored, float (&rescale)[2]) {
    int keyBase = keyTile * kBlockN;
    Coverage coverage = Mods::kHasMaskMod
                            ? walk.coverage(keyTile)
                            : sliceCoverage(p, work, keyTile, sliceQueryBegin, sliceLast);
    // A tile visited for the other consumers' rows only: the softmax gives
    // P = 0 and keeps the statistics, with nothing evaluated per element.
    // Except a paged cache's tile that holds the sequence's end: its keys
    // past the end came from the last page as they are (NaN included), and
    // only the mask's -inf replaces their scores.
    const bool sliceEmpty =
        kMaskModProved && coverage == Coverage::Empty &&
        !(attn_plan::kPagedKv && readsPages(p) && keyBase + kBlockN > work.sequence.seqlenK);
    if constexpr (Mods::kHasScoreMod) {
      if (!sliceEmpty) {
        applyScoreMod(p, scores, work, scoreRows, row0, keyBase, scoreModInputScale, lane,
                      diagonals, barriers, position, keyOrigin);
      } else if constexpr (kDiagonals > 0) {
        // The fill still comes: take it and give it back unread.
        diagonals.acquire(barriers, position);
        diagonals.release(barriers, position, lane);
      }
    }
    // Tiles the masks fully cover skip the per-element test.
    if (coverage != Coverage::Full && !sliceEmpty)
      applyMask<StoredBits>(p, scores, work, maskRows, row0, keyBase, lane, stored);
    if constexpr (kFixedSoftmaxBase)
      fixedBaseProbabilities<attn_plan::kSoftmaxReductionChains>(
          scores, softmaxScaleLog2, kFixedSoftmaxBaseLog2, sliceEmpty, stats);
    else
      softmaxProbabilities<attn_plan::kSoftmaxReductionChains>(scores, softmaxScaleLog2,
                                                               sliceEmpty, stats, rescale);
  };

  mbarrierWait(barriers.qFull(), qPhase);
  if (tileCount == 0) {
    releaseQAfterScores();
  } else {
    float scores[kScoreRegs];
    u32 probabilities[kPRegs];
    float rescale[2];

    // Prologue: S_0 alone.
    int keyTile = walk.next(p, work, work.keys.begin, sliceQueryBegin, sliceLast, lane);
    RingSlot slot = ringSlot<kStages>(ring);
    mbarrierWait(barriers.kFull(slot.stage), slot.phase);
    StoredKeyRows stored = storedRowsOf(keyTile, slot.stage);
    turns.wait();
    issueScores(scores, qSlice, kTile(slot.stage));
    turns.pass();
    wgmmaWaitGroup<0>();
    fenceRegisters(scores);
    releaseKeySlot(slot.stage);
    if (tileCount == 1)
      releaseQAfterScores();
    softmaxOfTile(scores, keyTile, ring, stored, rescale);
    packProbabilities(scores, probabilities);

    for (int iteration = 1; iteration < tileCount; ++iteration) {
      keyTile = walk.next(p, work, keyTile + 1, sliceQueryBegin, sliceLast, lane);
      RingSlot previous = slot;
      slot = ringSlot<kStages>(ring + iteration);
      mbarrierWait(barriers.kFull(slot.stage), slot.phase);
      stored = storedRowsOf(keyTile, slot.stage);
      mbarrierWait(barriers.vFull(previous.stage), previous.phase);
      turns.wait();
      issueScores(scores, qSlice, kTile(slot.stage));
      issueRegisterProduct<kHeadDim, kBlockN, Element>(output, probabilities,
                                                        vTile(previous.stage));
      turns.pass();

      wgmmaWaitGroup<1>(); // S_j done, PV_{j-1} may still run
      fenceRegisters(scores);
      releaseKeySlot(slot.stage);
      if (iteration == tileCount - 1)
        releaseQAfterScores();
      softmaxOfTile(scores, keyTile, ring + iteration, stored, rescale);

      wgmmaWaitGroup<0>();
      fenceRegisters(output);
      fenceRegisters(probabilities);
      releaseSlot(barriers.vEmpty(previous.stage), lane);
      if constexpr (!kFixedSoftmaxBase)
        rescaleOutput(output, rescale);
      packProbabilities(scores, probabilities);
    }

    // Epilogue: the last PV alone. The last tile holds the sequence's end,
    // if any tile does.
    mbarrierWait(barriers.vFull(slot.stage), slot.phase);
    if constexpr (attn_plan::kPagedKv)
      if (readsPages(p))
        clearValuesPastSequence(p, work, keyTile, vTile(slot.stage), consumer);
    turns.wait();
    issueRegisterProduct<kHeadDim, kBlockN, Element>(output, probabilities, vTile(slot.stage));
    turns.pass();
    wgmmaWaitGroup<0>();
    fenceRegisters(output);
    releaseSlot(barriers.vEmpty(slot.stage), lane);
  }

  float logSumExp[2];
  finalizeSoftmax(output, stats, logSumExp);
  if constexpr (Mods::kHasScoreRowOffset)
    applyScoreRowOffset(p, work, row0, keyOrigin, output, logSumExp);
  if (kSplitsTail && work.tailTile >= 0) {
    combineTailPieces(p, schedule, work, output, logSumExp, consumer, sliceQueryBegin);
    // Q is free: the piece stages nothing in it.
    if constexpr (kStagingSharesQ)
      if (thread == 0)
        mbarrierArrive(barriers.qEmpty(), kWarpsPerWarpgroup);
    return;
  }
  u32 staging = smemBase + attn_plan::kSmemOStaging + consumer * 64 * kRowBytes;
  storeOutput(p, output, logSumExp, staging, consumer, sliceQueryBegin, work);
  if constexpr (kStagingSharesQ) {
    // The slice is this warpgroup's rows of Q: the next Q may land once the
    // store has read them. One thread arrives for the warpgroup's warps.
    if (thread == 0) {
      tmaStoreWaitRead();
      mbarrierArrive(barriers.qEmpty(), kWarpsPerWarpgroup);
    }
  }
}

__device__ void consume(const attn_abi::AttnFwdParams &p, u32 smemBase, const Barriers &barriers,
                        int consumer, const TileSchedule &schedule) {
  const GemmTurns turns{consumer};
  turns.open();
  int ring = 0;
  u32 qPhase = 0;
  for (int index = schedule.firstPosition(); index < schedule.end;
       index = schedule.nextPosition(index)) {
    const WorkTile work = consumerWork(p, schedule.at(p, index), consumer);
    if (work.empty())
      continue;
    const int tileCount = countVisitedTilesInWarp(p, work, threadIdx.x % 32);
    if (kStoredKeyBits && p.tile_key_bits)
      consumeTile<kStoredKeyBits>(p, smemBase, barriers, consumer, schedule, work, tileCount,
                                  ring, qPhase, turns);
    else
      consumeTile<false>(p, smemBase, barriers, consumer, schedule, work, tileCount, ring, qPhase,
                         turns);
    ring += tileCount;
    qPhase ^= 1;
  }
  turns.close();
  // Shared memory must outlive the copy engine's reads of the last store.
  if (threadIdx.x % kWarpgroupThreads == 0)
    tmaStoreWaitRead();
}

} // namespace attn_kernel
