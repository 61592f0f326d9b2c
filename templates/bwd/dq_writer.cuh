// dQ's path to global memory: the accumulator's layout, the consumers'
// staging of their pieces and the writer warp's bulk reductions (in the
// deterministic order where it applies).
#pragma once

#include "bwd/key_block.cuh"

namespace attn_bwd {

// The dQ accumulator of a query block: pieces of kDqPieceFloats, pass by
// pass and consumer by consumer, each in fragment order, [kDqRegs / 4][128
// threads][4], so that both the staging stores and the bulk reduction move
// whole contiguous lines.
__device__ __forceinline__ float *dqAccumBlock(const attn_abi::AttnBwdParams &p, int batch,
                                               int head, int queryBlock) {
  return p.dq_accum +
         (rowStatsBase(p, batch, head) + static_cast<i64>(queryBlock) * kBlockM) * kHeadDim;
}

__device__ __forceinline__ u32 dqStaging(u32 smemBase, int consumer, int buffer) {
  return smemBase + attn_plan::kSmemDqStaging + (consumer * kDqBuffers + buffer) * kDqPieceFloats * 4;
}

// The deterministic mode's turn (additionTurn) of the piece in dQ buffer
// `buffer`, an int32 word consumer 0 writes beside its piece.
__device__ __forceinline__ u32 dqTurn(u32 smemBase, int buffer) {
  return smemBase + attn_plan::kSmemDqTurns + buffer * 4;
}

// Stages a consumer's dQ piece for the writer warp, once the writer has
// read the buffer's previous piece: whole 16-byte lines, then a fence for
// the copy engine and one arrival per warp.
__device__ __forceinline__ void stageDqPiece(u32 smemBase, const Barriers &barriers,
                                             const float (&dq)[kDqRegs], int step, int consumer,
                                             int thread, int turn) {
  const RingSlot slot = ringSlot<kDqBuffers>(step);
  if (step >= kDqBuffers)
    mbarrierWait(barriers.dqEmpty(consumer, slot.stage), slot.phase ^ 1);
  const u32 staging = dqStaging(smemBase, consumer, slot.stage);
#pragma unroll
  for (int j = 0; j < kDqRegs / 4; ++j)
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(staging +
                                                                  (j * kWarpgroupThreads + thread) * 16),
                 "f"(dq[4 * j]), "f"(dq[4 * j + 1]), "f"(dq[4 * j + 2]), "f"(dq[4 * j + 3])
                 : "memory");
  if (consumer == 0 && thread == 0)
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(dqTurn(smemBase, slot.stage)), "r"(turn)
                 : "memory");
  fenceSharedForAsyncProxy();
  mbarrierArriveForWarp(barriers.dqFull(consumer, slot.stage), thread % 32);
}

// The deterministic mode's counter of a step's query block (and pass), of
// `queryBlocks` a (batch, query head).
__device__ __forceinline__ int *dqCounterOf(const attn_abi::AttnBwdParams &p,
                                            const KeyBlock &block, i64 queryBlocks, int head,
                                            int queryBlock, int step) {
  i64 counterIndex = (static_cast<i64>(block.batch) * p.q_heads + head) * queryBlocks + queryBlock;
  // Spelled out only where there are passes: the 24-register writer warp
  // spilled for the folded form too.
  if constexpr (kPasses > 1)
    counterIndex = counterIndex * kPasses + block.passOf(step);
  return p.dq_semaphores + counterIndex;
}

// The deterministic mode's counter of a query block: waits until the
// additions before the block's turn have counted themselves, and counts an
// addition (after it has completed).
__device__ __forceinline__ void waitForTurn(const int *counter, int turn) {
  int seen;
  do {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
  } while (seen < turn);
}
__device__ __forceinline__ void countTurn(int *counter) {
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(counter) : "memory");
}

// The turn warp's lane 0, where dQ's additions are ordered: takes the turns
// of the step list's empty steps, which add nothing, as they come (the
// other roles pass over them; the writer warp's 24 registers spilled
// doing both).
__device__ void takeEmptyTurns(const attn_abi::AttnBwdParams &p, const KeyBlock &block) {
  if constexpr (kWalksStepList) {
    const i64 queryBlocks = attn_abi::bwdPaddedQueries(p.seqlen_q, kBlockM) / kBlockM;
    const StepList list = stepListOf(p);
    const int empty = static_cast<int>(__ldg(list.words + 1));
    for (int k = 0; k < empty; ++k) {
      const int step = static_cast<int>(__ldg(list.empty() - 1 - k));
      const int queryBlock = block.queryBlockOf(step);
      int *counter = dqCounterOf(p, block, queryBlocks, block.headOf(step), queryBlock, step);
      waitForTurn(counter, additionTurn(block, queryBlock));
      countTurn(counter);
    }
  }
}

// The writer warp's lane 0: adds each step's staged dQ pieces to the
// accumulator in global memory, one bulk reduction a piece, and gives the
// buffers back once the copy engine has read them. Deterministic: a step's
// additions wait for those of the key tiles before it in the query block's
// order (additionTurn, which consumer 0 stages beside its piece; a counter
// per query block) and complete before they count themselves.
__device__ void writeDq(const attn_abi::AttnBwdParams &p, u32 smemBase, const Barriers &barriers,
                        const KeyBlock &block) {
  const i64 queryBlocks = attn_abi::bwdPaddedQueries(p.seqlen_q, kBlockM) / kBlockM;
  const StepWalk walk = stepWalkOf(p, block);
  for (int position = 0; position < walk.positions; ++position) {
    const int step = StepWalk::stepOf(walk.entryAt(position));
    const int head = block.headOf(step), queryBlock = block.queryBlockOf(step);
    const RingSlot slot = ringSlot<kDqBuffers>(position);
    for (int consumer = 0; consumer < kConsumers; ++consumer)
      mbarrierWait(barriers.dqFull(consumer, slot.stage), slot.phase);
    int *counter = nullptr;
    if (orderedAdditions(p)) {
      counter = dqCounterOf(p, block, queryBlocks, head, queryBlock, step);
      waitForTurn(counter, loadShared<int>(dqTurn(smemBase, slot.stage)));
    }
    float *accumulator = dqAccumBlock(p, block.batch, head, queryBlock);
    if constexpr (kPasses > 1)
      accumulator += block.passOf(step) * kConsumers * kDqPieceFloats;
    for (int consumer = 0; consumer < kConsumers; ++consumer)
      bulkReduceAddF32(accumulator + consumer * kDqPieceFloats,
                       dqStaging(smemBase, consumer, slot.stage), kDqPieceFloats * 4);
    tmaStoreCommit();
    if (counter) {
      bulkWaitComplete();
      asm volatile("fence.acq_rel.gpu;" ::: "memory");
      countTurn(counter);
    } else {
      tmaStoreWaitRead();
    }
    for (int consumer = 0; consumer < kConsumers; ++consumer)
      mbarrierArrive(barriers.dqEmpty(consumer, slot.stage));
  }
  bulkWaitComplete();
}

} // namespace attn_bwd
