// A learnable capture added to by diagonal (Mods::kDiagonalGradient: a
// relative-position or bucketed bias, whose element depends on the pair only
// through d = q - kv): the consumers' sums of its gradient by diagonal, and
// their additions to memory.
//
// Each warp first sums its pairs by diagonal in registers (DiagonalSums,
// sumDiagonalsOverRows). Then, where the plan has room for them
// (attn_plan::kBlockDiagonalSums), the whole key tile sums its diagonals in
// shared memory over its warps and over consecutive steps before adding to
// memory (storeDiagonalRow, sumBlockDiagonals); otherwise each warp adds its
// own sums (spreadDiagonalSums, addDiagonalSums).
#pragma once

#include "bwd/plan.cuh"

namespace attn_bwd {

// With Mods::kDiagonalGradient, a thread's sums of its pairs' capture
// gradient by diagonal: slot (e, j + 2) holds its pairs at query column
// 8 j + 2 (lane % 4) + e of key row key0 (and column 8 j + 8 + ... of row
// key0 + 8: j = group - half), the diagonal q - kv = query0 - key0 + 8 j +
// 2 (lane % 4) + e. Slot 0 (j = -2) takes what the sum over rows carries.
constexpr int kDiagonalSlots = kQueryColumns / 8 + 2;
typedef float DiagonalSums[2][kDiagonalSlots];

// Sums the diagonals over the warp's eight key rows r = lane / 4, in the
// same order on every run: for s = 1, 2, 4 row r takes row r + s's sums at
// column X + s into its own at X (a column past 7 is the next slot's). Then
// lanes 0-3 (row 0) hold each diagonal's sum over the warp's 16 keys, the
// diagonal query0 - rowKey + 8 j + 2 lane + e of the warp's first key
// rowKey; the other lanes hold partial sums.
__device__ __forceinline__ void sumDiagonalsOverRows(DiagonalSums &sums, int lane) {
  const int c = lane & 3;
#pragma unroll
  for (int s = 1; s < 8; s *= 2) {
    // The register e of the sender that a receiver's register e takes, and
    // the sender: row r + s, the lane of column 2 c + e + s.
    int sender[2];
    bool carried[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      sender[e] = (lane + 4 * s + (((2 * c + e + s) >> 1) & 3) - c) & 31;
      // As a sender of register (e + s) % 2, this lane's receiver wants the
      // next slot where its column came past 7.
      carried[e] = 2 * c + ((e + s) & 1) < s;
    }
    // Ascending slots: slot k reads slots k and k + 1 and then writes slot
    // k, so every read sees the values before this round.
#pragma unroll
    for (int slot = 0; slot < kDiagonalSlots; ++slot) {
      float received[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int from = (e + s) & 1;
        const float next = slot + 1 < kDiagonalSlots ? sums[from][slot + 1] : 0.f;
        received[e] = __shfl_sync(0xffffffffu, carried[e] ? next : sums[from][slot], sender[e]);
      }
#pragma unroll
      for (int e = 0; e < 2; ++e)
        sums[e][slot] += received[e];
    }
  }
}

// The warp's diagonal sums (sumDiagonalsOverRows: lanes 0-3) spread over
// its lanes, so that every lane finds elements and adds: lane 4 m + c takes
// lane c's sum k = 2 slot + e into round k / 8 where k % 8 == m.
constexpr int kDiagonalRounds = (2 * kDiagonalSlots + 7) / 8;
typedef float SpreadDiagonalSums[kDiagonalRounds];
__device__ __forceinline__ void spreadDiagonalSums(const DiagonalSums &sums,
                                                   SpreadDiagonalSums &spread, int lane) {
  const int m = lane >> 2, c = lane & 3;
#pragma unroll
  for (int round = 0; round < kDiagonalRounds; ++round)
    spread[round] = 0.f;
#pragma unroll
  for (int slot = 0; slot < kDiagonalSlots; ++slot)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int k = 2 * slot + e;
      const float sum = __shfl_sync(0xffffffffu, sums[e][slot], c);
      if (k % 8 == m)
        spread[k / 8] = sum;
    }
}

// Adds the spread sums to the capture's gradient, each at the element that
// score_mod's vector-Jacobian product names for a pair of its diagonal
// (`rowKey`: the warp's first key, `query0` the step's first query column).
// A round whose sums all go to one element (the far buckets of a bucketed
// bias) sums in the warp and adds once (attn_dev::flushWarpSums).
__device__ __forceinline__ void addDiagonalSums(const attn_abi::AttnBwdParams &p,
                                                typename Mods::Gradients &captureGradients,
                                                const SpreadDiagonalSums &spread, int batch,
                                                int head, int rowKey, int query0, int lane) {
  const int m = lane >> 2, c = lane & 3;
#pragma unroll
  for (int round = 0; round < kDiagonalRounds; ++round) {
    const int k = 8 * round + m;
    if (k < 2 * kDiagonalSlots && spread[round] != 0.f) {
      const int column = 8 * (k / 2 - 2) + 2 * c + (k & 1);
      captureGradients.findElements(true);
      Mods::scoreVjp(p, captureGradients, 0.f, 0.f, batch, head, query0 + column, rowKey);
      captureGradients.findElements(false);
    }
    captureGradients.flushDiagonalSum(spread[round]);
  }
}

// ---- The key tile's sums in shared memory
//
// A step's pairs lie on kBlockDiagonals diagonals, a consumer warp's on
// kQueryColumns + 15 of them: about four warps add to each diagonal, and the
// next step (the next query block of the same head) meets most of the step's
// diagonals again. Each warp stores its sums as a row of shared memory before
// the step's dSᵀ barrier; after it, the thread that owns a diagonal adds the
// rows in warp order: while the next step's products run where that leaves
// the consumers their registers (kSumsBesideProducts), else at the end of
// the step, where the owners' loads and additions delay the next step's
// products (at head dim 128: 0.33 ms of a 4.3 ms backward, H200). Diagonal
// d's owner is consumer thread d mod kOwnerThreads at every step, so a
// diagonal the next step meets again keeps its sum (in the owner's slot),
// and goes to memory once no later step meets it: per step about kBlockM
// additions, instead of one per warp and diagonal (2.5 times as many at
// head dim 128), in an order that does not change from run to run.
constexpr bool kBlockDiagonalSums = Mods::kDiagonalGradient && attn_plan::kBlockDiagonalSums;
constexpr int kDiagonalRowFloats = attn_abi::bwdDiagonalRowFloats(kQueryColumns);
constexpr int kDiagonalRows = kConsumers * kWarpsPerWarpgroup;
constexpr int kBlockDiagonals = kBlockM + kBlockN - 1;
constexpr int kOwnerThreads = kConsumers * kWarpgroupThreads;
static_assert(!kBlockDiagonalSums ||
                  attn_abi::bwdBlockDiagonalSumsFit(kHeadDim, kBlockM, kBlockN, kConsumers),
              "one pass of key slices, and an owner per diagonal of the step, by a power of two");
static_assert(!kBlockDiagonalSums || (!kSplitsColumns && kPasses == 1),
              "bwdBlockDiagonalSumsFit: head dim <= 128");
static_assert(8 * kDiagonalSlots == kDiagonalRowFloats,
              "a row holds the warp's slots: entry 8 slot + 2 (lane % 4) + e");

// The sum owner `owner` carries to the next step: in shared memory rather
// than a register held across the steps (that spilled).
__device__ __forceinline__ u32 diagonalCarry(u32 smemBase, int owner) {
  return smemBase + attn_plan::kSmemDiagonalSums +
         static_cast<u32>((2 * kDiagonalRows * kDiagonalRowFloats + owner) * 4);
}

// ptxas: at 128 query columns a step (head dim 64) the owner's step beside
// the products made a learned table's consumers spill 160 bytes, 96 at the
// end of the step.
constexpr bool kSumsBesideProducts = kQueryColumns <= 64;

// Row `row` (consumer * 4 + warp) of the step at `position`: two steps' rows,
// so that a warp may store the next step's while an owner still reads
// these (an owner reads before it reaches the next step's barrier).
__device__ __forceinline__ u32 diagonalRow(u32 smemBase, int position, int row) {
  return smemBase + attn_plan::kSmemDiagonalSums +
         static_cast<u32>(((position & 1) * kDiagonalRows + row) * kDiagonalRowFloats * 4);
}

// Lanes 0-3 hold the warp's sums over its keys (sumDiagonalsOverRows). Entry
// x of the row is the diagonal queryFirst - rowKey - 16 + x (the warp's first
// key and query column), entry 0 the empty slot 0 of column 0.
__device__ __forceinline__ void storeDiagonalRow(const DiagonalSums &sums, u32 row, int lane) {
  if (lane < 4)
#pragma unroll
    for (int slot = 0; slot < kDiagonalSlots; ++slot)
      asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(row + (8 * slot + 2 * lane) * 4),
                   "f"(sums[0][slot]), "f"(sums[1][slot]));
}

// The owner's step: diagonal x of the step (d = query0 - lastKey + x, lastKey
// the tile's last key) is owner (d mod kOwnerThreads)'s. It adds the rows
// to what it carries, in warp order, and carries the sum (diagonalCarry)
// where the next step meets the diagonal (`continues`: the next step is the
// next query block of the head, whose diagonal x - kBlockM this is), else
// adds it to the capture's gradient. The walk's first step (`position` 0)
// finds nothing carried. Every consumer thread calls it.
__device__ __forceinline__ void sumBlockDiagonals(const attn_abi::AttnBwdParams &p,
                                                  typename Mods::Gradients &captureGradients,
                                                  u32 smemBase, int position, int batch, int head,
                                                  int query0, int lastKey, bool continues,
                                                  int owner) {
  const u32 rows = diagonalRow(smemBase, position, 0), carry = diagonalCarry(smemBase, owner);
  const int lowest = query0 - lastKey;
  const int x = (owner - lowest) & (kOwnerThreads - 1);
  const bool owns = x < kBlockDiagonals;
  float sum = position > 0 ? __uint_as_float(loadShared<u32>(carry)) : 0.f;
#pragma unroll 4
  for (int row = 0; row < kDiagonalRows; ++row) {
    // The row's warp: its first key within the tile (consumers own 64-key
    // slices; every warp starts at the step's first query column).
    const int consumer = row / kWarpsPerWarpgroup, warp = row % kWarpsPerWarpgroup;
    const int keyOffset = 64 * consumer + 16 * warp;
    const int entry = x + keyOffset - (kBlockN - 1) + 16;
    if (owns && entry >= 0 && entry < kDiagonalRowFloats)
      sum += __uint_as_float(
          loadShared<u32>(rows + static_cast<u32>((row * kDiagonalRowFloats + entry) * 4)));
  }
  const int d = lowest + x;
  const bool carried = owns && continues && x >= kBlockM;
  asm volatile("st.shared.f32 [%0], %1;" ::"r"(carry), "f"(carried ? sum : 0.f));
  const bool adds = owns && !carried && sum != 0.f;
  if (adds) {
    captureGradients.findElements(true);
    Mods::scoreVjp(p, captureGradients, 0.f, 0.f, batch, head, d + lastKey, lastKey);
    captureGradients.findElements(false);
  }
  captureGradients.flushDiagonalSum(adds ? sum : 0.f);
}

} // namespace attn_bwd
