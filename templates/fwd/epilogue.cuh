// The end of a consumer's work tile: O and the log-sum-exp stored through
// shared-memory staging (storeOutput), the score_mod's row offset, and the
// combine of a split tail tile's pieces (combineTailPieces).
#pragma once

#include "fwd/tile_scheduler.cuh"

namespace attn_kernel {

// Writes the normalized O slice (64 rows) and the log-sum-exp per row. The
// fragments go to a staging slice laid out as the O tensor map's 128-byte
// swizzled boxes (swizzledAddress: 64-column blocks of kBlockM 128-byte rows,
// which also keeps the fragment stores free of bank conflicts); one thread
// then stores the slice with TMA, which clips rows past seqlen_q. The slice
// never touches another warpgroup's rows. The store is left in flight: the
// next use of the slice waits for it to have been read. A packed sequence's
// partial slice is copied by the warps instead (storeWarpRows).
static_assert(kRowBytes == 128, "staging rows of 64 16-bit elements");

// Copies the rows this warp staged (16 of the slice, from `firstRow`) that
// lie before `rowEnd` to O rows sliceRow0 + row of `head`, 16 bytes per lane
// and step. TMA clips only at the tensor's end, and past a packed sequence's
// end lie the next sequence's rows.
__device__ __forceinline__ void storeWarpRows(const attn_abi::AttnFwdParams &p, u32 staging,
                                              int firstRow, int rowEnd, i64 sliceRow0, int head,
                                              int lane) {
  constexpr int kChunksPerRow = kHeadDim / 8;
  unsigned char *o = static_cast<unsigned char *>(p.o);
  const int rows = clampInt(rowEnd - firstRow, 0, 16);
#pragma unroll 1
  for (int index = lane; index < rows * kChunksPerRow; index += 32) {
    int row = firstRow + index / kChunksPerRow, chunk = index % kChunksPerRow;
    u32 word0, word1, word2, word3;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(word0), "=r"(word1), "=r"(word2), "=r"(word3)
                 : "r"(swizzledAddress(staging, kBlockM, row, chunk * 8)));
    i64 element = (sliceRow0 + row) * p.o_row_stride + head * p.o_head_stride + chunk * 8;
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(o + element * kElementBytes),
                 "r"(word0), "r"(word1), "r"(word2), "r"(word3)
                 : "memory");
  }
}

// The score_mod terms that move a whole row alike were left out of the
// scores (attn-lower-mods): a finite offset belongs to the row's
// log-sum-exp only. A row that saw no key keeps O = 0 and -inf; otherwise
// an offset of -inf masks the row, and +inf or NaN gives NaN, as such
// scores would have. With kScoreKeyRelative the offset also adds the
// score's key terms at keyOrigin.
__device__ __forceinline__ void applyScoreRowOffset(const attn_abi::AttnFwdParams &p,
                                                    const WorkTile &work, int row0, int keyOrigin,
                                                    float (&output)[kOutputRegs],
                                                    float (&logSumExp)[2]) {
  float outputFactor[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float offset = Mods::kScoreOutputScale *
                   Mods::scoreRowOffset(p, work.batch, work.head, row0 + 8 * half, keyOrigin);
    outputFactor[half] = 1.f;
    if (logSumExp[half] == negativeInfinity()) {
      // No key reached the row: it stays masked whatever the offset.
    } else if (offset == negativeInfinity()) {
      outputFactor[half] = 0.f;
      logSumExp[half] = negativeInfinity();
    } else if (!isfinite(offset)) {
      outputFactor[half] = __int_as_float(0x7fffffff);
      logSumExp[half] = outputFactor[half];
    } else {
      logSumExp[half] += offset;
    }
  }
#pragma unroll
  for (int i = 0; i < kOutputRegs; ++i)
    output[i] *= outputFactor[fragmentRowHalf(i)];
}

__device__ void storeOutput(const attn_abi::AttnFwdParams &p, const float (&output)[kOutputRegs],
                            const float (&logSumExp)[2], u32 staging, int consumer,
                            int sliceQueryBegin, const WorkTile &work) {
  const int thread = threadIdx.x % kWarpgroupThreads;
  const int warp = thread / 32, lane = thread % 32;
  const int head = work.head;

  if constexpr (!kStagingSharesQ) {
    // The previous work tile's store must have read the slice.
    if (thread == 0)
      tmaStoreWaitRead();
    warpgroupBarrier(1 + consumer);
  }
  storeFragmentSwizzled<Element, kHeadDim>(output, staging, kBlockM, warp, lane);
  // Located again, once O is staged, rather than kept in registers through
  // the main loop.
  const Sequence sequence = sequenceOf(p, work.batch);
  const bool packed = p.cu_seqlens_q != nullptr;
  // A packed sequence's partial slice: each warp copies the rows it staged,
  // before the barrier below, so that the slice is free after it just as
  // after a TMA store has read it.
  const bool storedByWarps = packed && sliceQueryBegin + 64 > sequence.seqlenQ;
  if (storedByWarps) {
    __syncwarp();
    storeWarpRows(p, staging, warp * 16, sequence.seqlenQ - sliceQueryBegin,
                  static_cast<i64>(sequence.rowQ) + sliceQueryBegin, head, lane);
  }
  fenceSharedForAsyncProxy();
  warpgroupBarrier(1 + consumer);

  if (thread == 0 && !storedByWarps) {
#pragma unroll
    for (int block = 0; block < kColumnBlocks; ++block)
      tmaStore4d(&p.o_map, staging + block * kBlockM * kRowBytes, block * kColumnBlock,
                 sequence.rowQ + sliceQueryBegin, head, sequence.mapBatch);
    tmaStoreCommit();
  }

  if ((lane & 3) == 0) {
    // [batch, q_heads, seqlen_q], or [q_heads, total_q] for packed sequences.
    const i64 rowBase = packed ? static_cast<i64>(head) * p.total_q + sequence.rowQ
                               : (static_cast<i64>(work.batch) * p.q_heads + head) * p.seqlen_q;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      int query = sliceQueryBegin + warp * 16 + lane / 4 + 8 * half;
      if (query < sequence.seqlenQ)
        p.lse[rowBase + query] = logSumExp[half];
    }
  }
}

// A piece of a split tail tile, per warp (16 rows, independent of the other
// warps): writes its normalized O and log-sum-exp to its slot, then counts
// itself; the warp that completes the tile's count takes the others' pieces
// in, O = sum_j e^(lse_j - lse) O_j with lse = log sum_j e^(lse_j), and
// stores the rows and their log-sum-exp itself.
__device__ void combineTailPieces(const attn_abi::AttnFwdParams &p, const TileSchedule &schedule,
                                  const WorkTile &work, float (&output)[kOutputRegs],
                                  float (&logSumExp)[2], int consumer, int sliceQueryBegin) {
  constexpr long long kWarpFloats = attn_abi::tailPieceWarpFloats(kHeadDim);
  static_assert(kWarpFloats == (kOutputRegs + 2) * 32, "a thread's O fragment and two LSEs");
  constexpr int kSlotWarps = kConsumers * kWarpsPerWarpgroup;
  const int thread = threadIdx.x % kWarpgroupThreads;
  const int warp = thread / 32, lane = thread % 32;
  const int slotWarp = consumer * kWarpsPerWarpgroup + warp;
  auto warpPiece = [&](int slot) {
    return p.tail_partials + (static_cast<i64>(slot) * kSlotWarps + slotWarp) * kWarpFloats;
  };
  const int block = static_cast<int>(blockIdx.x);
  float *mine = warpPiece(schedule.pieceSlot(block, work.tailTile));
#pragma unroll
  for (int i = 0; i < kOutputRegs; ++i)
    mine[i * 32 + lane] = output[i];
  mine[kOutputRegs * 32 + lane] = logSumExp[0];
  mine[(kOutputRegs + 1) * 32 + lane] = logSumExp[1];
  // Release the piece, then count it.
  __threadfence();
  __syncwarp();
  int *counter = p.tail_counters + static_cast<i64>(work.tailTile) * kSlotWarps + slotWarp;
  int arrived = 0;
  if (lane == 0)
    arrived = atomicAdd(counter, 1);
  arrived = __shfl_sync(0xffffffff, arrived, 0);
  if (arrived != work.pieces - 1)
    return;
  // The last piece: acquire the others, and leave the count at 0.
  __threadfence();
  if (lane == 0)
    *counter = 0;
  for (int piece = 0; piece < work.pieces; ++piece) {
    const int other = work.firstPieceBlock + piece;
    if (other == block)
      continue;
    const float *theirs = warpPiece(schedule.pieceSlot(other, work.tailTile));
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float their = __ldcg(theirs + (kOutputRegs + half) * 32 + lane);
      const float high = fmaxf(logSumExp[half], their);
      // Rows no key reached in either keep O = 0 and -inf.
      const bool none = high == negativeInfinity();
      const float ours = none ? 0.f : fastExp2((logSumExp[half] - high) * kLog2e);
      const float them = none ? 0.f : fastExp2((their - high) * kLog2e);
      const float sum = ours + them;
      logSumExp[half] = none ? high : high + __logf(sum);
      const float inverse = none ? 0.f : 1.f / sum;
#pragma unroll
      for (int i = 0; i < kOutputRegs; ++i)
        if (fragmentRowHalf(i) == half)
          output[i] = (output[i] * ours + __ldcg(theirs + i * 32 + lane) * them) * inverse;
    }
  }
  // The rows, from registers: two adjacent columns a store.
  const Sequence &sequence = work.sequence;
  unsigned char *o = static_cast<unsigned char *>(p.o);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int query = sliceQueryBegin + warp * 16 + lane / 4 + 8 * half;
    if (query >= sequence.seqlenQ)
      continue;
    const i64 rowElement = static_cast<i64>(work.batch) * p.o_batch_stride +
                           static_cast<i64>(query) * p.o_row_stride +
                           static_cast<i64>(work.head) * p.o_head_stride;
#pragma unroll
    for (int i = 0; i < kOutputRegs; i += 2)
      if (fragmentRowHalf(i) == half) {
        const u32 pair = packPair<Element>(output[i], output[i + 1]);
        asm volatile("st.global.b32 [%0], %1;" ::"l"(o + (rowElement + fragmentColumn(i, lane)) *
                                                             kElementBytes),
                     "r"(pair)
                     : "memory");
      }
    if ((lane & 3) == 0)
      p.lse[(static_cast<i64>(work.batch) * p.q_heads + work.head) * p.seqlen_q + query] =
          logSumExp[half];
  }
}

} // namespace attn_kernel
