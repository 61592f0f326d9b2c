// Backward softmax attention for sm_90a: dQ, dK and dV from dO, the
// forward's inputs and its log-sum-exp.
//
// Three kernels in one unit, and two where they apply. The preprocess
// (bwd/row_kernels.cuh) turns the forward's log-sum-exp into base 2,
// computes delta = rowsum(dO * O) and clears dQ's fp32 accumulator; with a
// mask_mod in one pass, the step list (bwd/step_list.cuh) lists the steps
// the mask keeps; the main kernel below walks, for one key tile of BLOCK_N
// keys and one kv head, the query blocks of BLOCK_M rows that may see the
// tile (or those the list holds), for every query head of the kv head's
// group; the conversion scales the accumulator into dQ; with learnable
// captures summed exactly, the capture-sum kernel reads their records.
//
// Main kernel: warpgroup 0 is the producer, one thread of which loads the K
// and V tiles once and streams a ring of (Q, dO, log-sum-exp, delta) stages
// with TMA and bulk copies, completing on mbarriers. Warpgroups 1..C are
// consumers, each owning 64 keys of the tile: per query block it computes
// Sᵀ = K Qᵀ and dPᵀ = V dOᵀ on WGMMA from shared memory, Pᵀ and
// dSᵀ = Pᵀ (dPᵀ - delta) in registers, then accumulates dV += Pᵀ dO and
// dK += dSᵀ Q in registers (A from the packed fragments), and stores dSᵀ to
// shared memory, where all consumers' slices form dS for dQ = dS K: each
// consumer computes one piece of the query block's dQ (64 rows when the
// block has a slice per consumer, else head_dim / C columns), issued ahead
// of dK's product where that does not spill (kDqBeforeDk), and stages it in
// shared memory, from where warp 1 of warpgroup 0 adds it to the fp32
// accumulator in global memory with one bulk reduction
// (cp.reduce.async.bulk add.f32).
//
// Past head dim 128 (kSplitsColumns) two consumers share one 64-key tile
// instead: each computes Sᵀ and dPᵀ for half of the step's query columns,
// stores Pᵀ and dSᵀ to shared memory, and accumulates half of dK's and
// dV's columns with both operands from shared memory (issueSharedProduct).
// A plan of one consumer walks the query blocks once per 128 columns of dK
// and dV (a pass), recomputing Sᵀ and dPᵀ.
//
// With p.deterministic (and always where consumers split the columns:
// orderedAdditions) each query block takes the key tiles' additions in
// one order (additionTurn; a counter per query block and pass, waited on by
// the writer warp, and for a step list's empty steps by warp 2, not the
// consumers), so dQ is bitwise reproducible; dK and
// dV always are: one block owns a key tile of a kv head for all its query
// heads. The epilogue scales dK by the softmax scale and stores dK and dV.
//
// Everything the compiler decided arrives through namespace attn_plan,
// emitted ahead of this file: element type, head dim, tile sizes, stages,
// register split, mask policy and the shared-memory offsets of every buffer.
#pragma once

#include "bwd/plan.cuh"
#include "bwd/key_block.cuh"
#include "bwd/producer.cuh"
#include "bwd/score_gradients.cuh"
#include "bwd/dq_writer.cuh"
#include "bwd/epilogue.cuh"

namespace attn_bwd {

__device__ void consume(const attn_abi::AttnBwdParams &p, u32 smemBase, const Barriers &barriers,
                        const KeyBlock &block, int consumer) {
  const int thread = threadIdx.x % kWarpgroupThreads;
  const int warp = thread / 32, lane = thread % 32;
  const Sequence &sequence = block.sequence;
  const u32 kTile = smemBase + attn_plan::kSmemK, vTile = smemBase + attn_plan::kSmemV;
  // The consumer's 64 keys (all the tile's when it splits columns) and
  // first query column of each step.
  const int keySlice = kSplitsColumns ? 0 : consumer;
  const int firstQueryColumn = kSplitsColumns ? consumer * kQueryColumns : 0;
  const u32 kSlice = kTile + keySlice * 64 * kRowBytes, vSlice = vTile + keySlice * 64 * kRowBytes;
  const int sliceFirst = block.keyTile * kBlockN + keySlice * 64;
  const int sliceLast = sliceFirst + 63;
  // This thread's keys: rows key0 and key0 + 8 of the fragments.
  const int key0 = sliceFirst + warp * 16 + lane / 4;

  float dK[kGradRegs], dV[kGradRegs];
#pragma unroll
  for (int i = 0; i < kGradRegs; ++i)
    dK[i] = dV[i] = 0.f;
  typename Mods::Gradients captureGradients;
  captureGradients.init(p);

  mbarrierWait(barriers.kvFull(), 0);
  const StepWalk walk = stepWalkOf(p, block);
  // The key tile's diagonal sums of `step`, at position `at`
  // (kBlockDiagonalSums), `next` the step after it or -1: the next step
  // meets its upper diagonals when it is the next query block of the same
  // head. Later passes recompute pairs whose gradients are in.
  const auto sumStepDiagonals = [&](int at, int step, int next) {
    if (block.passOf(step) != 0)
      return;
    const int head = block.headOf(step), queryBlock = block.queryBlockOf(step);
    const bool continues = next >= 0 && block.headOf(next) == head && block.passOf(next) == 0 &&
                           block.queryBlockOf(next) == queryBlock + 1;
    sumBlockDiagonals(p, captureGradients, smemBase, at, block.batch, head, queryBlock * kBlockM,
                      block.keyTile * kBlockN + kBlockN - 1, continues,
                      consumer * kWarpgroupThreads + thread);
  };
  for (int position = 0; position < walk.positions; ++position) {
    const u32 entry = walk.entryAt(position);
    const int step = StepWalk::stepOf(entry);
    const RingSlot slot = ringSlot<kStages>(position);
    const int queryBlock = block.queryBlockOf(step);
    // A constant 0 without passes (computed, it cost the head-dim-64
    // consumers an 8-byte spill).
    int pass = 0;
    if constexpr (kPasses > 1) {
      pass = block.passOf(step);
      // Later passes recompute the pairs: their capture gradients are in.
      captureGradients.enable(pass == 0);
    }
    const int query0 = queryBlock * kBlockM;
    // The consumer's query columns of the step: its rows of Q and dO (B of
    // Sᵀ's and dPᵀ's products), their statistics and positions.
    const int queryFirst = query0 + firstQueryColumn;
    const u32 qTile = stageQ(smemBase, slot.stage), doTile = stageDo(smemBase, slot.stage);
    // Computed where used: held across the products, they cost the
    // head-dim-64 consumers a spill.
    const auto lse = [&] { return stageLse(smemBase, slot.stage) + 4 * firstQueryColumn; };
    const auto delta = [&] { return stageDelta(smemBase, slot.stage) + 4 * firstQueryColumn; };
    // The consumer's columns of Q and dO in this pass, the B operands of dK's
    // and dV's products.
    const u32 gradOffset =
        (pass * kPassColumns + (kSplitsColumns ? consumer * kGradColumns : 0)) / kColumnBlock *
        kBlockM * kRowBytes;
    mbarrierWait(barriers.full(slot.stage), slot.phase);

    float scores[kScoreRegs], gradients[kScoreRegs];
    issueKeyRowProduct(scores, kSlice, qTile + firstQueryColumn * kRowBytes);
    issueKeyRowProduct(gradients, vSlice, doTile + firstQueryColumn * kRowBytes);
    // score_mod's diagonal values, read while the products run.
    WarpDiagonals warpDiagonals = {};
    if constexpr (Mods::kScoreDiagonals > 0)
      warpDiagonals = warpDiagonalsOf(p, block.batch, block.headOf(step), key0 - lane / 4,
                                      queryFirst, lane);
    // The step before's diagonal sums, while the products run: off the
    // path from one step's products to the next (this step's rows go to
    // the other buffer, and the next step's only after its barrier).
    if constexpr (kBlockDiagonalSums && kSumsBesideProducts)
      if (position > 0)
        sumStepDiagonals(position - 1, StepWalk::stepOf(walk.entryAt(position - 1)), step);
    // A mask_mod the coverage shows keeping the whole tile needs no per-pair
    // test.
    bool maskPartial = false;
    if constexpr (kWalksStepList)
      maskPartial = !(entry & kStepFull);
    else if constexpr (Mods::kHasMaskMod)
      maskPartial = block.maskCoverageOf(p, step) != Coverage::Full;
    const bool partial = maskPartial || sliceLast >= sequence.seqlenK ||
                         !Mask::coversTile(queryFirst, queryFirst + kQueryColumns - 1, sliceFirst,
                                           sliceLast, sequence.shift);
    u32 probabilities[kPackedRegs], scoreGradients[kPackedRegs];
    // With Mods::kDiagonalGradient, the warp's capture gradient by diagonal:
    // stored for the tile's sums (kBlockDiagonalSums), or spread over the
    // lanes and added to memory once Pᵀ and dSᵀ are packed (fewer registers
    // live).
    SpreadDiagonalSums spreadSums;
    if constexpr (kHasRegions) {
      wgmmaWaitGroup<0>();
      fenceRegisters(scores);
      fenceRegisters(gradients);
      DiagonalSums diagonalSums;
      regionGradientsOf(p, captureGradients, scores, gradients, diagonalSums, warpDiagonals,
                        lse(), delta(), partial, maskPartial, sequence, block.batch,
                        block.headOf(step), key0, queryFirst, lane);
      // Stored before the dSᵀ barrier below, which makes every warp's row
      // visible to the owners.
      if constexpr (kBlockDiagonalSums) {
        if (pass == 0)
          storeDiagonalRow(diagonalSums,
                           diagonalRow(smemBase, position, consumer * kWarpsPerWarpgroup + warp),
                           lane);
      } else if constexpr (Mods::kDiagonalGradient) {
        spreadDiagonalSums(diagonalSums, spreadSums, lane);
      }
      // Additions whose element is the same for every pair of the step
      // summed without it: one call notes it. The next step may read
      // another query head, so the sums go to memory now.
      captureGradients.findElements(true);
      Mods::scoreVjp(p, captureGradients, 0.f, 0.f, block.batch, block.headOf(step), queryFirst,
                     key0);
      captureGradients.findElements(false);
      captureGradients.flush();
    } else {
      // Sᵀ and dPᵀ as two groups: Pᵀ's exponentials run in place while dPᵀ
      // is on the tensor cores, and where kDvBesideScoreGradients, dV's
      // product (from registers) while dSᵀ is computed.
      wgmmaWaitGroup<1>();
      fenceRegisters(scores);
      probabilitiesOf(scores, lse(), p.scale_log2, partial, sequence, key0, queryFirst, lane);
      if constexpr (kDvBesideScoreGradients && !kSplitsColumns) {
        packFragments(scores, probabilities);
        issueRegisterProduct<kGradColumns, kQueryColumns, Element>(dV, probabilities,
                                                               doTile + gradOffset);
        wgmmaWaitGroup<1>();
      } else {
        wgmmaWaitGroup<0>();
      }
      fenceRegisters(gradients);
      scoreGradientsOf(gradients, scores, delta(), lane);
    }
    if constexpr (!kSplitsColumns && !kDvBesideScoreGradients) {
      // dSᵀ packed first: its fp32 copy then dies before dV's product holds
      // Pᵀ's packed registers.
      packFragments(gradients, scoreGradients);
      packFragments(scores, probabilities);
      issueRegisterProduct<kGradColumns, kQueryColumns, Element>(dV, probabilities,
                                                             doTile + gradOffset);
    }

    // dSᵀ (and with split columns Pᵀ) of every consumer, for dQ (and dV and
    // dK): two buffers, so that a consumer may write the next step's while
    // another still reads this one (the barrier below is passed only once
    // every consumer finished the step before).
    const u32 dsTile = smemBase + attn_plan::kSmemDs + (position & 1) * kDsTileBytes;
    // Stages the step's dQ piece for the writer warp, consumer 0 noting the
    // piece's turn where the additions are ordered.
    const auto stageDq = [&](const float (&dq)[kDqRegs]) {
      const int turn =
          orderedAdditions(p) && consumer == 0 && thread == 0 ? additionTurn(block, queryBlock) : 0;
      stageDqPiece(smemBase, barriers, dq, position, consumer, thread, turn);
    };
    if constexpr (kSplitsColumns) {
      const u32 pTile = smemBase + attn_plan::kSmemP + (position & 1) * kDsTileBytes;
      storeFragmentSwizzled<Element, kQueryColumns>(scores, pTile, kBlockN, warp, lane,
                                                    firstQueryColumn);
      storeFragmentSwizzled<Element, kQueryColumns>(gradients, dsTile, kBlockN, warp, lane,
                                                    firstQueryColumn);
      fenceSharedForAsyncProxy();
      namedBarrierSync(kDsWrittenBarrier, kConsumers * kWarpgroupThreads);
      // dV's, dQ's and dK's products in one go; dQ's piece is staged while
      // dK's runs.
      issueSharedProduct<kGradColumns, kBlockM, Element>(dV, pTile, doTile + gradOffset);
      float dq[kDqRegs];
      issueDqProduct(dq, dsTile, kTile, consumer, pass);
      issueSharedProduct<kGradColumns, kBlockM, Element>(dK, dsTile, qTile + gradOffset);
      wgmmaWaitGroup<1>();
      fenceRegisters(dq);
      stageDq(dq);
      wgmmaWaitGroup<0>();
      fenceRegisters(dV);
      fenceRegisters(dK);
      mbarrierArriveForWarp(barriers.empty(slot.stage), lane);
    } else {
      if constexpr (kDvBesideScoreGradients)
        packFragments(gradients, scoreGradients);
      // dSᵀ is stored before dK's product takes its registers as A: a
      // WGMMA's A registers may not be read until its group completes.
      // Transposed dQ reads dS K-major: a row per query.
      if constexpr (kDqTransposed)
        storePackedFragmentSwizzled<kQueryColumns, true>(scoreGradients, dsTile, kBlockM, warp,
                                                         lane, consumer * 64);
      else
        storePackedFragmentSwizzled<kQueryColumns>(scoreGradients, dsTile, kBlockN,
                                                   consumer * kWarpsPerWarpgroup + warp, lane);
      if constexpr (!kDqBeforeDk)
        issueRegisterProduct<kGradColumns, kQueryColumns, Element>(dK, scoreGradients,
                                                               qTile + gradOffset);
      fenceSharedForAsyncProxy();
      namedBarrierSync(kDsWrittenBarrier, kConsumers * kWarpgroupThreads);
      // With 80 query rows a step, dV's product completes before dQ's is
      // issued: Pᵀ's packed registers beside dK's, dV's and dQ's
      // accumulators left too few (ptxas serialized the step's WGMMAs,
      // C7512). Waited for after the barrier, not before it: 2-4 % (H200).
      if constexpr (kDqTransposed) {
        wgmmaWaitGroup<0>();
        fenceRegisters(probabilities);
      }
      float dq[kDqRegs];
      issueDqProduct(dq, dsTile, kTile, consumer, pass);
      const auto releaseStage = [&] {
        fenceRegisters(dV);
        fenceRegisters(dK);
        if constexpr (!kDqTransposed) // fenced above, before dQ's product
          fenceRegisters(probabilities);
        fenceRegisters(scoreGradients);
        mbarrierArriveForWarp(barriers.empty(slot.stage), lane);
      };
      if constexpr (kDqBeforeDk) {
        issueRegisterProduct<kGradColumns, kQueryColumns, Element>(dK, scoreGradients,
                                                               qTile + gradOffset);
        wgmmaWaitGroup<1>();
        fenceRegisters(dq);
        stageDq(dq);
        wgmmaWaitGroup<0>();
        releaseStage();
      } else {
        wgmmaWaitGroup<0>();
        fenceRegisters(dq);
        releaseStage();
        stageDq(dq);
      }
    }
    if constexpr (kBlockDiagonalSums && !kSumsBesideProducts) {
      // The same at the end of the step, written out: through the lambda
      // the head-dim-64 consumers spilled 136 bytes instead of 96 (ptxas).
      if (pass == 0) {
        bool continues = false;
        if (position + 1 < walk.positions) {
          const int next = StepWalk::stepOf(walk.entryAt(position + 1));
          continues = block.headOf(next) == block.headOf(step) && block.passOf(next) == 0 &&
                      block.queryBlockOf(next) == queryBlock + 1;
        }
        sumBlockDiagonals(p, captureGradients, smemBase, position, block.batch,
                          block.headOf(step), query0, block.keyTile * kBlockN + kBlockN - 1,
                          continues, consumer * kWarpgroupThreads + thread);
      }
    }
    if constexpr (!kBlockDiagonalSums && Mods::kDiagonalGradient)
      addDiagonalSums(p, captureGradients, spreadSums, block.batch, block.headOf(step),
                      key0 - lane / 4, queryFirst, lane);
    // With passes every step is walked: the position is the step.
    if (kPasses > 1 && step + 1 < walk.positions && block.passOf(step + 1) != pass)
      storePassGradients(p, dK, dV, block, key0, lane, consumer, pass);
  }
  if constexpr (kBlockDiagonalSums && kSumsBesideProducts)
    if (walk.positions > 0)
      sumStepDiagonals(walk.positions - 1, StepWalk::stepOf(walk.entryAt(walk.positions - 1)),
                       -1);
  // A key tile no query sees walks no step: every pass's gradients are 0.
  if constexpr (kPasses > 1)
    if (walk.positions == 0)
      for (int pass = 0; pass + 1 < kPasses; ++pass)
        storePassGradients(p, dK, dV, block, key0, lane, consumer, pass);
  storePassGradients(p, dK, dV, block, key0, lane, consumer, kPasses - 1);
}

} // namespace attn_bwd

extern "C" __global__ void __launch_bounds__(attn_bwd::kThreads, 1)
    attn_bwd_kernel(const __grid_constant__ attn_abi::AttnBwdParams p) {
  using namespace attn_bwd;
  const u32 smemBase = alignedDynamicShared();
  const Barriers barriers{smemBase + attn_plan::kSmemBarriers};
  const KeyBlock block = keyBlockOf(p);
  // A key tile past its sequence's keys has no gradient to write.
  if (block.empty())
    return;

  if (threadIdx.x == 0) {
    mbarrierInit(barriers.kvFull(), 1);
    for (int stage = 0; stage < kStages; ++stage) {
      mbarrierInit(barriers.full(stage), 1);
      mbarrierInit(barriers.empty(stage), kReleaseArrivals);
    }
    for (int consumer = 0; consumer < kConsumers; ++consumer)
      for (int buffer = 0; buffer < kDqBuffers; ++buffer) {
        mbarrierInit(barriers.dqFull(consumer, buffer), kWarpsPerWarpgroup);
        mbarrierInit(barriers.dqEmpty(consumer, buffer), 1);
      }
    fenceBarrierInit();
  }
  __syncthreads();

  // Consumers owning a key slice each build their K and V descriptors from
  // the index: uniform, the descriptors stay in uniform registers (the
  // head-dim-128 step lost 220 of its 580 instructions). Consumers that
  // split the columns share the slice; there the uniform index made the
  // mask_mod kernels spill (ptxas, Longformer at head dim 256).
  const int warpgroup =
      kSplitsColumns ? static_cast<int>(threadIdx.x) / kWarpgroupThreads : warpgroupIndex();
  if (warpgroup == 0) {
    releaseRegisters<attn_plan::kProducerRegisters>();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (warp == kLoadWarp && lane == 0)
      produce(p, smemBase, barriers, block);
    else if (warp == kDqWriterWarp && lane == 0)
      writeDq(p, smemBase, barriers, block);
    else if (kWalksStepList && warp == kTurnWarp && lane == 0 && orderedAdditions(p))
      takeEmptyTurns(p, block);
  } else {
    claimRegisters<attn_plan::kConsumerRegisters>();
    consume(p, smemBase, barriers, block, warpgroup - 1);
  }
}

#include "bwd/row_kernels.cuh"
#include "bwd/step_list.cuh"
