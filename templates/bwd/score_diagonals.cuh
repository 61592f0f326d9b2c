// score_mod's diagonal values in the backward: the values of the region
// that read a capture and depend on q and kv only through d = q - kv (a
// relative-position table, T5's buckets; attn-lower-mods splits them into
// Mods::scoreDiagonal). A warp's pairs of a step lie on kWarpDiagonals
// diagonals; each lane evaluates at most kLaneDiagonals of them, before the
// step's products complete, and the pairs take their values through one
// shuffle per diagonal of a thread, instead of reading the capture per pair.
#pragma once

#include "bwd/plan.cuh"

namespace attn_bwd {

// The warp's 16 keys rowKey .. rowKey + 15 against the step's query columns
// query0 .. query0 + kQueryColumns - 1: diagonal x holds
// d = query0 - rowKey - 15 + x. Lane l holds x = l + 32 w, w <
// kLaneDiagonals; a pair past them evaluates its own. How many words, by
// the consumers' registers (ptxas, relative-position tables):
// - 32 query columns a step (head dim 256): every diagonal;
// - 64 (head dim 128): all but the last 15, which only the step's last two
//   slots read (a third word made the learned table's consumers spill);
// - 128 (head dim 64): none, each thread evaluates its slots (words made a
//   table read twice spill where it did not).
constexpr int kWarpDiagonals = kQueryColumns + 15;
constexpr int kLaneDiagonals = kQueryColumns <= 32   ? (kWarpDiagonals + 31) / 32
                               : kQueryColumns <= 64 ? kQueryColumns / 32
                                                     : 0;
constexpr int kWordDiagonals = 32 * kLaneDiagonals;

struct WarpDiagonals {
  unsigned words[kLaneDiagonals > 0 ? kLaneDiagonals : 1][Mods::kScoreDiagonalSlots];
};

// Diagonal x's values.
__device__ __forceinline__ void evaluateDiagonal(const attn_abi::AttnBwdParams &p, int batch,
                                                 int head, int rowKey, int query0, int x,
                                                 unsigned (&values)[Mods::kScoreDiagonalSlots]) {
  const long long d = static_cast<long long>(query0) - rowKey - 15 + x;
#pragma unroll
  for (int n = 0; n < Mods::kScoreDiagonalSlots; ++n)
    values[n] = n < Mods::kScoreDiagonals ? Mods::scoreDiagonal(p, n, batch, head, d) : 0u;
}

// Every value's loads are issued together, so that they are in flight
// while the step's products run. A diagonal outside the step's pairs reads
// the capture like any region evaluation (out of its extents: 0).
__device__ __forceinline__ WarpDiagonals warpDiagonalsOf(const attn_abi::AttnBwdParams &p,
                                                         int batch, int head, int rowKey,
                                                         int query0, int lane) {
  WarpDiagonals diagonals;
#pragma unroll
  for (int w = 0; w < kLaneDiagonals; ++w)
    evaluateDiagonal(p, batch, head, rowKey, query0, lane + 32 * w, diagonals.words[w]);
  return diagonals;
}

// The values of a thread's pairs at column 8 j + 2 (lane % 4) + e of its
// first key (row lane / 4) and 8 columns on of its second key: slot j of
// DiagonalSums (bwd/diagonal_sums.cuh), the diagonal
// x = 8 j + 2 (lane % 4) + e - lane / 4 - 1. Every lane calls it with the
// same (slot, e). The lanes' x span 14 values from lo = 8 j + e - 8, so
// each sender lane s is read for at most one of them: lo + ((s - lo) mod
// 32), in its word lo / 32, or the next one where s < lo mod 32.
__device__ __forceinline__ void pairDiagonalsOf(const attn_abi::AttnBwdParams &p,
                                                const WarpDiagonals &diagonals, int slot, int e,
                                                int batch, int head, int rowKey, int query0,
                                                int lane,
                                                unsigned (&values)[Mods::kScoreDiagonalSlots]) {
  const int lo = 8 * slot + e - 8;
  const int x = 8 * slot + e - 1 + 2 * (lane & 3) - (lane >> 2);
  if (lo < kWordDiagonals) {
    constexpr int kLast = kLaneDiagonals > 0 ? kLaneDiagonals - 1 : 0;
    const int word = lo / 32 < kLast ? lo / 32 : kLast;
    const int next = word < kLast ? word + 1 : word;
#pragma unroll
    for (int n = 0; n < Mods::kScoreDiagonalSlots; ++n) {
      const unsigned sent = lane >= lo % 32 ? diagonals.words[word][n] : diagonals.words[next][n];
      // A lane index's low five bits name the sender: x mod 32.
      values[n] = __shfl_sync(0xffffffffu, sent, x);
    }
  }
  if (lo + 13 >= kWordDiagonals) {
    unsigned own[Mods::kScoreDiagonalSlots];
    evaluateDiagonal(p, batch, head, rowKey, query0, x, own);
#pragma unroll
    for (int n = 0; n < Mods::kScoreDiagonalSlots; ++n)
      values[n] = x >= kWordDiagonals ? own[n] : values[n];
  }
}

} // namespace attn_bwd
