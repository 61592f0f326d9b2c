// The consumers' products and per-pair pieces: Sᵀ and dPᵀ, dQ's piece, Pᵀ
// and dSᵀ from them (with the user's regions where there are some), and the
// packed fragments that feed dV's and dK's products.
#pragma once

#include "bwd/producer.cuh"
#include "bwd/diagonal_sums.cuh"
#include "bwd/score_diagonals.cuh"

namespace attn_bwd {

// D[64 keys x its query columns] = A[64 x head_dim] Bᵀ, issued as one WGMMA
// group: A is this consumer's slice of the K or V tile, B the consumer's
// rows of the stage's Q or dO, both K-major.
__device__ __forceinline__ void issueKeyRowProduct(float (&d)[kScoreRegs], u32 slice, u32 tile) {
  static_assert(kRowBytes == 128, "issueKMajorProduct's rows");
  issueKMajorProduct<kQueryColumns, kHeadDim, kBlockN, kBlockM, Element, true>(d, slice, tile);
}

// This consumer's dQ piece of pass `pass` = dS K over all BLOCK_N keys: A is
// dSᵀ in shared memory read MN-major (the piece's 64 query columns), B the
// K tile read MN-major (the piece's columns); each k-step of 16 keys
// advances 16 rows. Transposed (kDqTransposed), the piece is dQᵀ = Kᵀ dSᵀ
// for the consumer's 64 columns: A is the K tile's column block read
// MN-major, B dS stored K-major (a row per query).
// (The wrapper named through Conditional: the emitter generates only the
// plan's form.)
using DqProduct = typename Conditional<kDqTransposed, WgmmaSSAMN<kBlockM, Element>,
                                       WgmmaSSMN<kDqColumns, Element>>::type;
__device__ __forceinline__ void issueDqProduct(float (&dq)[kDqRegs], u32 dsTile, u32 kTile,
                                               int consumer, int pass) {
  const int dsBlock = kDqSplitsRows ? consumer : 0;
  const int kBlock = (pass * kPassColumns + (kDqSplitsRows ? 0 : consumer * kDqColumns)) /
                     kColumnBlock;
  const u64 dsFirst = swizzled128Descriptor(dsTile + dsBlock * kBlockN * kRowBytes,
                                            kDqTransposed ? 16 : kBlockN * kRowBytes, kAtomBytes);
  const u64 kFirst =
      swizzled128Descriptor(kTile + kBlock * kBlockN * kRowBytes, kBlockN * kRowBytes, kAtomBytes);
  wgmmaFence();
#pragma unroll
  for (int step = 0; step < kBlockN / 16; ++step) {
    if constexpr (kDqTransposed)
      DqProduct::mma(dq, advanceDescriptor(kFirst, step * 16 * kRowBytes),
                     advanceDescriptor(dsFirst, step / 4 * kBlockM * kRowBytes + step % 4 * 32),
                     step > 0);
    else
      DqProduct::mma(dq, advanceDescriptor(dsFirst, step * 16 * kRowBytes),
                     advanceDescriptor(kFirst, step * 16 * kRowBytes), step > 0);
  }
  wgmmaCommitGroup();
}

// Two adjacent fp32 words of shared memory.
__device__ __forceinline__ void loadSharedPair(u32 address, float &first, float &second) {
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(first), "=f"(second) : "r"(address));
}

// The query columns key0 + 8 half (one of a thread's two keys) keeps in a
// partial tile, as ThreadKeys bits over its columns: bit 2 g + e stands for
// column query0 + 2 (lane % 4) + 8 g + e (the accumulator's order), so that
// a pair's test is one bit.
typedef ThreadKeys<kQueryColumns> ThreadColumns;
__device__ __forceinline__ typename ThreadColumns::Bits keptColumnsOf(const Sequence &sequence,
                                                                     int key, int query0,
                                                                     int lane) {
  if constexpr (Mask::kEveryQueryVisitsEveryKey) {
    // Only the key length cuts the tile.
    return key < sequence.seqlenK ? ThreadColumns::all() : ThreadColumns::none();
  } else {
    const ThreadColumns columns{query0 + 2 * (lane & 3)};
    const KeyRange queries = key < sequence.seqlenK
                                 ? keyQueryRange<Mask>(key, sequence.shift, sequence.seqlenQ)
                                 : KeyRange{0, 0};
    return columns.below(queries.end) & ~columns.below(queries.begin);
  }
}

// The order of a thread's pairs in probabilitiesOf: one key at a time (one
// word of kept columns live), or one column group at a time (both keys'
// words first, a group's statistics loaded once). At 128 query columns a
// step (head dim 64) ptxas keeps the consumers within their registers with
// the first for the masks of at most one bound (none, causal: the mask
// whose work grows with the query) and with the second for a window's two
// bounds; unit.codegen pins both.
constexpr bool kOneKeyAtATime = Mask::kEveryQueryVisitsEveryKey || Mask::kWorkGrowsWithQuery;

// Turns Sᵀ into Pᵀ = exp2(scale_log2 Sᵀ - lse_log2), per query column,
// with P = 0 for the pairs the mask or the key length excludes (`partial`:
// the slice's tile is not kept whole). A row without keys has lse_log2 =
// +inf, so its P is 0.
__device__ __forceinline__ void probabilitiesOf(float (&scores)[kScoreRegs], u32 lse,
                                                float scaleLog2, bool partial,
                                                const Sequence &sequence, int key0, int query0,
                                                int lane) {
  const auto keptOf = [&](int half) {
    return partial ? keptColumnsOf(sequence, key0 + 8 * half, query0, lane)
                   : ThreadColumns::all();
  };
  const auto probability = [&](int group, int half, int e, float rowLse,
                               typename ThreadColumns::Bits kept) {
    const int i = group * 4 + half * 2 + e;
    const float value = fastExp2(scores[i] * scaleLog2 - rowLse);
    scores[i] = (kept >> (2 * group + e)) & 1 ? value : 0.f;
  };
  if constexpr (kOneKeyAtATime) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const typename ThreadColumns::Bits kept = keptOf(half);
#pragma unroll
      for (int group = 0; group < kQueryColumns / 8; ++group) {
        float rowLse[2];
        loadSharedPair(lse + (group * 8 + 2 * (lane & 3)) * 4, rowLse[0], rowLse[1]);
#pragma unroll
        for (int e = 0; e < 2; ++e)
          probability(group, half, e, rowLse[e], kept);
      }
    }
  } else {
    const typename ThreadColumns::Bits kept[2] = {keptOf(0), keptOf(1)};
#pragma unroll
    for (int group = 0; group < kQueryColumns / 8; ++group) {
      float rowLse[2];
      loadSharedPair(lse + (group * 8 + 2 * (lane & 3)) * 4, rowLse[0], rowLse[1]);
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          probability(group, half, e, rowLse[e], kept[half]);
    }
  }
}

// Turns dPᵀ into dSᵀ = Pᵀ (dPᵀ - delta), per query column.
__device__ __forceinline__ void scoreGradientsOf(float (&gradients)[kScoreRegs],
                                                 const float (&probabilities)[kScoreRegs],
                                                 u32 delta, int lane) {
#pragma unroll
  for (int group = 0; group < kQueryColumns / 8; ++group) {
    float rowDelta[2];
    loadSharedPair(delta + (group * 8 + 2 * (lane & 3)) * 4, rowDelta[0], rowDelta[1]);
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int i = group * 4 + half * 2 + e;
        gradients[i] = probabilities[i] * (gradients[i] - rowDelta[e]);
      }
  }
}

// With mask_mod or score_mod: Pᵀ and dSᵀ together, a pair at a time, from
// the raw Sᵀ and dPᵀ. The forward's softmax (and log-sum-exp) ran over
// score_mod(scale s); P (dP - delta) is the gradient of that modified
// score, which score_mod's vector-Jacobian product carries back to the
// score, adding into the learnable captures' gradients on the way. A pair
// whose gradient is 0 skips the product: a masked pair's region need not
// even be finite there.
__device__ __forceinline__ void regionPairGradient(
    const attn_abi::AttnBwdParams &p, typename Mods::Gradients &captureGradients, float &score,
    float &gradient, float rowLse, float rowDelta, bool partial, bool maskKeeps,
    const Sequence &sequence, int batch, int head, int key, int query,
    const unsigned (&diagonals)[Mods::kScoreDiagonalSlots]) {
  bool keep = !partial || (key < sequence.seqlenK && Mask::allows(query, key, sequence.shift));
  if constexpr (Mods::kHasMaskMod)
    keep = keep && maskKeeps;
  const float scaled = score * p.scale;
  // Evaluated for every pair (a masked one's result is dropped): out of the
  // branch, its evaluation dominates the vector-Jacobian product's, which
  // the compiler then reuses instead of evaluating the region again.
  const float modified = Mods::score(p, scaled, batch, head, query, key, diagonals);
  const float probability = keep ? fastExp2(modified * kLog2e - rowLse) : 0.f;
  const float modGradient = probability * (gradient - rowDelta);
  score = probability;
  gradient = modGradient != 0.f ? Mods::scoreVjp(p, captureGradients, modGradient, scaled, batch,
                                                 head, query, key)
                                : 0.f;
}

// One bit per fragment register of a thread's Sᵀ: pair i is bit i.
using PairBits = typename attn_dev::Conditional<kScoreRegs <= 32, u32, u64>::type;
static_assert(kScoreRegs <= 64, "a thread's pairs fit a 64-bit word");
// The fragment order tests the mask of 16 pairs (4 groups of 8 query
// columns) at a time: all of them at once made BigBird's consumers spill,
// 4 or 8 at a time the document mask's at head dim 64 (ptxas).
constexpr int kMaskGroups = 4;
static_assert(!Mods::kHasMaskMod || (kQueryColumns / 8) % kMaskGroups == 0,
              "whole chunks of the mask's groups");

// The mask_mod's verdict on the thread's pairs of `Groups` groups of 8
// query columns from `firstGroup` (of their columns e in [firstE, firstE +
// Es)), in a step it does not keep whole: bit i for pair i. Every pair is
// evaluated, in range or not (a capture read outside its extents gives 0,
// and the caller drops pairs outside the sequence), so that the region's
// loads are in flight together instead of each pair's waiting behind the
// last one's branch (that made a partial step of the document mask about
// 2.7 times a dense step).
template <int Groups, int Es = 2>
__device__ __forceinline__ PairBits maskModBitsOf(const attn_abi::AttnBwdParams &p, int batch,
                                                  int head, int key0, int query0, int lane,
                                                  int firstGroup, int firstE = 0) {
  PairBits bits = 0;
#pragma unroll
  for (int group = firstGroup; group < firstGroup + Groups; ++group)
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int e = firstE; e < firstE + Es; ++e) {
        const int i = group * 4 + half * 2 + e;
        const int query = query0 + group * 8 + 2 * (lane & 3) + e;
        if (Mods::keeps(p, batch, head, query, key0 + 8 * half))
          bits |= PairBits(1) << i;
      }
  return bits;
}

// Every pair of the thread's fragments. With learnable captures the pairs
// go diagonal by diagonal (q - kv ascending): a thread's pairs (key0,
// column c) and (key0 + 8, column c + 8) lie on one diagonal and come one
// after the other, so a capture indexed by q - kv (a relative-position or
// bucketed bias) sums both in a register before one addition to memory
// where the per-pair element test remains (several learnable captures);
// with Mods::kDiagonalGradient into the diagonal's slot, and
// `diagonalSums` then holds the warp's sums (sumDiagonalsOverRows).
// score_mod's diagonal values (`warpDiagonals`) come one shuffle per slot.
// A score_mod that reads captures takes that order too, and the others the
// fragment order (a row pair's statistics loaded once): so each example's
// consumers stay within their registers (ptxas; unit.codegen pins them).
__device__ __forceinline__ void regionGradientsOf(const attn_abi::AttnBwdParams &p,
                                                  typename Mods::Gradients &captureGradients,
                                                  float (&scores)[kScoreRegs],
                                                  float (&gradients)[kScoreRegs],
                                                  DiagonalSums &diagonalSums,
                                                  const WarpDiagonals &warpDiagonals, u32 lse,
                                                  u32 delta, bool partial, bool maskPartial,
                                                  const Sequence &sequence, int batch, int head,
                                                  int key0, int query0, int lane) {
  static_assert(Mods::kScoreDiagonals == 0 || Mods::kHasCaptures,
                "diagonal values read captures: the diagonal order below");
  PairBits maskBits = ~PairBits(0);
  const auto maskKeeps = [&](int i) { return ((maskBits >> i) & 1) != 0; };
  if constexpr (kDiagonalOrder) {
#pragma unroll
    for (int e = 0; e < 2; ++e)
#pragma unroll
      for (int slot = 0; slot < kDiagonalSlots; ++slot)
        diagonalSums[e][slot] = 0.f;
    const int rowKey = key0 - (lane >> 2); // the warp's first key
    unsigned values[Mods::kScoreDiagonalSlots] = {};
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      if constexpr (Mods::kScoreDiagonals > 0)
        pairDiagonalsOf(p, warpDiagonals, 1, e, batch, head, rowKey, query0, lane, values);
#pragma unroll
      for (int group = 0; group < kQueryColumns / 8; ++group) {
        // The mask of the chunk's column e (8 pairs): all of a thread's
        // pairs at once spilled at head dim 64 (document mask, learned
        // slopes).
        if constexpr (Mods::kHasMaskMod)
          if (group % kMaskGroups == 0 && maskPartial)
            maskBits = maskModBitsOf<kMaskGroups, 1>(p, batch, head, key0, query0, lane, group, e);
        const int column = group * 8 + 2 * (lane & 3) + e;
        const float rowLse = __uint_as_float(loadShared<u32>(lse + column * 4));
        const float rowDelta = __uint_as_float(loadShared<u32>(delta + column * 4));
#pragma unroll
        for (int half = 1; half >= 0; --half) {
          const int i = group * 4 + half * 2 + e;
          // Slot group - half + 2: the second key's pair shares the slot of
          // the first key's pair just before it.
          if constexpr (Mods::kScoreDiagonals > 0)
            if (half == 0)
              pairDiagonalsOf(p, warpDiagonals, group + 2, e, batch, head, rowKey, query0, lane,
                              values);
          regionPairGradient(p, captureGradients, scores[i], gradients[i], rowLse, rowDelta,
                             partial, maskKeeps(i), sequence, batch, head, key0 + 8 * half,
                             query0 + column, values);
          if constexpr (Mods::kDiagonalGradient)
            diagonalSums[e][group - half + 2] += captureGradients.takeDiagonalSum();
        }
      }
    }
    if constexpr (Mods::kDiagonalGradient)
      sumDiagonalsOverRows(diagonalSums, lane);
  } else {
    const unsigned values[Mods::kScoreDiagonalSlots] = {};
#pragma unroll
    for (int group = 0; group < kQueryColumns / 8; ++group) {
      if constexpr (Mods::kHasMaskMod)
        if (group % kMaskGroups == 0 && maskPartial)
          maskBits = maskModBitsOf<kMaskGroups>(p, batch, head, key0, query0, lane, group);
      const int column = group * 8 + 2 * (lane & 3);
      float rowLse[2], rowDelta[2];
      loadSharedPair(lse + column * 4, rowLse[0], rowLse[1]);
      loadSharedPair(delta + column * 4, rowDelta[0], rowDelta[1]);
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int i = group * 4 + half * 2 + e;
          regionPairGradient(p, captureGradients, scores[i], gradients[i], rowLse[e],
                             rowDelta[e], partial, maskKeeps(i), sequence, batch, head,
                             key0 + 8 * half, query0 + column + e, values);
        }
    }
  }
}

__device__ __forceinline__ void packFragments(const float (&values)[kScoreRegs],
                                              u32 (&packed)[kPackedRegs]) {
#pragma unroll
  for (int i = 0; i < kPackedRegs; ++i)
    packed[i] = packPair<Element>(values[2 * i], values[2 * i + 1]);
}

} // namespace attn_bwd
