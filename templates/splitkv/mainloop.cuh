// A short-query warp's rows against a stage's keys: the regions' row values,
// S = Q Kᵀ, the online softmax and O += P V on warp-level mma.sync.
#pragma once

#include "splitkv/loads.cuh"

namespace attn_split_kv {

// ---- one warp's rows: the query position, head and regions' row values of
// the two rows (lane / 4 and lane / 4 + 8 of its 16) a lane holds.

struct RowContext {
  int position[2];
  int head[2];
  int keyOrigin[2];
  // The keys the built-in mask keeps for the row (a range for each of
  // them), cut to the split's keys.
  int keyLow[2], keyHigh[2];
  typename Mods::MaskRow maskRow[2];
  typename Mods::ScoreRow scoreRow[2];
};

__device__ __forceinline__ RowContext rowContext(const attn_abi::AttnSplitKvParams &p,
                                                 const Work &work, int firstRow, int lane) {
  RowContext rows;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    // Padding rows past the packed rows compute on zero queries, unstored.
    const int packed = min(work.rowBegin + firstRow + lane / 4 + 8 * half, work.packedRows - 1);
    rows.position[half] = packed / work.group;
    rows.head[half] = work.kvHead * work.group + packed % work.group;
    // A score_mod measuring keys from an origin: the row's diagonal.
    rows.keyOrigin[half] = diagonalKey(rows.position[half], work.shift, work.seqlenK);
    const KeyRange kept = rowKeyRange<Mask>(rows.position[half], work.shift, work.seqlenK);
    rows.keyLow[half] = static_cast<int>(kept.begin);
    rows.keyHigh[half] = static_cast<int>(minI64(kept.end, work.keyEnd));
    rows.maskRow[half] = Mods::maskRow(p, work.batch, rows.head[half], rows.position[half]);
    rows.scoreRow[half] = Mods::scoreRow(p, work.batch, rows.head[half], rows.position[half]);
  }
  return rows;
}

// The exponent (base 2) of the raw score of the pair (row half, key), -inf
// for a pair the masks drop or a key outside the split.
__device__ __forceinline__ float scoreLog2(const attn_abi::AttnSplitKvParams &p,
                                           const Work &work, const RowContext &rows, int half,
                                           int key, float raw) {
  const int q = rows.position[half], h = rows.head[half];
  bool kept = key >= rows.keyLow[half] && key < rows.keyHigh[half];
  if constexpr (Mods::kHasMaskMod)
    kept = kept && Mods::keeps(p, rows.maskRow[half], work.batch, h, q, key,
                               exactIntToFloat(key));
  if (!kept)
    return negativeInfinity();
  if constexpr (!Mods::kHasScoreMod) {
    return raw * p.scale_log2;
  } else {
    unsigned diagonals[Mods::kScoreDiagonalSlots] = {};
#pragma unroll
    for (int n = 0; n < Mods::kScoreDiagonals; ++n)
      diagonals[n] = Mods::scoreDiagonal(p, n, work.batch, h, static_cast<i64>(q) - key);
    const float keyFloat =
        exactIntToFloat(Mods::kScoreKeyRelative ? key - rows.keyOrigin[half] : key);
    const float score = Mods::score(p, rows.scoreRow[half], raw * p.scale * Mods::kScoreInputScale,
                                    work.batch, h, q, key, keyFloat, diagonals);
    return score * (kLog2e * Mods::kScoreOutputScale);
  }
}

// ---- the online softmax of a warp's 16 rows over its keys.

struct WarpState {
  float output[kDimTiles][4];
  float rowMax[2];  // base 2, over the keys seen
  float rowSum[2];  // this lane's share of the row's sum of exponentials
};

__device__ __forceinline__ void initState(WarpState &state) {
#pragma unroll
  for (int tile = 0; tile < kDimTiles; ++tile)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      state.output[tile][e] = 0.f;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    state.rowMax[half] = negativeInfinity();
    state.rowSum[half] = 0.f;
  }
}

// The warp's A operands of Q, a 16-column k-step each: held in registers
// through the whole split where they fit beside O (head dim up to 128),
// else read from shared memory at every step.
constexpr bool kQueryInRegisters = kHeadDim <= 128;
struct QueryFragments {
  u32 a[kQueryInRegisters ? kKeySteps : 1][4];
};

__device__ __forceinline__ void loadQueryFragment(u32 query, int firstRow, int step, int lane,
                                                  u32 (&a)[4]) {
  const int matrix = lane / 8;
  const int queryRow = firstRow + (matrix % 2) * 8 + lane % 8;
  loadMatrixX4(query + swizzledChunk<kRowChunks>(queryRow, 2 * step + matrix / 2), a);
}

__device__ __forceinline__ void loadQueryFragments(u32 query, int firstRow, int lane,
                                                   QueryFragments &fragments) {
  if constexpr (kQueryInRegisters)
#pragma unroll
    for (int step = 0; step < kKeySteps; ++step)
      loadQueryFragment(query, firstRow, step, lane, fragments.a[step]);
}

// S of the warp's rows against StepKeys keys from `keyRow0` of a stage:
// element [n][e] is row lane / 4 + 8 (e / 2), key keyRow0 + 8 n +
// 2 (lane % 4) + e % 2.
template <int StepKeys>
__device__ __forceinline__ void queryKeyProduct(u32 query, const QueryFragments &fragments,
                                                u32 keys, int firstRow, int keyRow0, int lane,
                                                float (&scores)[StepKeys / 8][4]) {
#pragma unroll
  for (int n = 0; n < StepKeys / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      scores[n][e] = 0.f;
  const int matrix = lane / 8, matrixRow = lane % 8;
#pragma unroll
  for (int step = 0; step < kKeySteps; ++step) {
    u32 a[4];
    if constexpr (kQueryInRegisters) {
#pragma unroll
      for (int i = 0; i < 4; ++i)
        a[i] = fragments.a[step][i];
    } else {
      loadQueryFragment(query, firstRow, step, lane, a);
    }
#pragma unroll
    for (int pair = 0; pair < StepKeys / 16; ++pair) {
      u32 b[4];
      const int keyRow = keyRow0 + 16 * pair + (matrix / 2) * 8 + matrixRow;
      loadMatrixX4(keys + swizzledChunk<kRowChunks>(keyRow, 2 * step + matrix % 2), b);
      mma16816<Element>(scores[2 * pair], a, b[0], b[1]);
      mma16816<Element>(scores[2 * pair + 1], a, b[2], b[3]);
    }
  }
}

// Turns the exponents into probabilities against the updated row maxima,
// rescaling O where a maximum grew, and packs them as the A operands of
// the PV product (16 rows x 16 keys each).
template <int StepKeys>
__device__ __forceinline__ void softmaxStep(WarpState &state, float (&scores)[StepKeys / 8][4],
                                            u32 (&probabilities)[StepKeys / 16][4]) {
  float scale[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float tileMax = negativeInfinity();
#pragma unroll
    for (int n = 0; n < StepKeys / 8; ++n)
      tileMax = fmaxf(tileMax, fmaxf(scores[n][2 * half], scores[n][2 * half + 1]));
    const float rowMax = fmaxf(state.rowMax[half], quadMax(tileMax));
    // A row that has seen no key yet keeps 0 as its reference (no NaN).
    const float reference = rowMax == negativeInfinity() ? 0.f : rowMax;
    scale[half] = fastExp2(state.rowMax[half] - reference);
    state.rowMax[half] = rowMax;
    float sum = 0.f;
#pragma unroll
    for (int n = 0; n < StepKeys / 8; ++n)
#pragma unroll
      for (int e = 2 * half; e < 2 * half + 2; ++e) {
        scores[n][e] = fastExp2(scores[n][e] - reference);
        sum += scores[n][e];
      }
    state.rowSum[half] = state.rowSum[half] * scale[half] + sum;
  }
  // Most steps leave every maximum where it was: skip the rescale then.
  if (__any_sync(0xffffffffu, scale[0] != 1.f || scale[1] != 1.f)) {
#pragma unroll
    for (int tile = 0; tile < kDimTiles; ++tile)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        state.output[tile][e] *= scale[e / 2];
  }
#pragma unroll
  for (int k = 0; k < StepKeys / 16; ++k) {
    probabilities[k][0] = packPair<Element>(scores[2 * k][0], scores[2 * k][1]);
    probabilities[k][1] = packPair<Element>(scores[2 * k][2], scores[2 * k][3]);
    probabilities[k][2] = packPair<Element>(scores[2 * k + 1][0], scores[2 * k + 1][1]);
    probabilities[k][3] = packPair<Element>(scores[2 * k + 1][2], scores[2 * k + 1][3]);
  }
}

// O += P V over StepKeys keys from `keyRow0` of a stage.
template <int StepKeys>
__device__ __forceinline__ void probabilityValueProduct(u32 values, int keyRow0, int lane,
                                                        const u32 (&probabilities)[StepKeys / 16][4],
                                                        WarpState &state) {
  const int matrix = lane / 8;
#pragma unroll
  for (int k = 0; k < StepKeys / 16; ++k) {
    const int keyRow = keyRow0 + 16 * k + (matrix % 2) * 8 + lane % 8;
#pragma unroll
    for (int pair = 0; pair < kDimTiles / 2; ++pair) {
      u32 b[4];
      loadMatrixX4Transposed(values + swizzledChunk<kRowChunks>(keyRow, 2 * pair + matrix / 2),
                             b);
      mma16816<Element>(state.output[2 * pair], probabilities[k], b[0], b[1]);
      mma16816<Element>(state.output[2 * pair + 1], probabilities[k], b[2], b[3]);
    }
  }
}

// A warp's share of one stage: its warpKeys keys from keyRow0, StepKeys at
// a time (StepKeys divides warpKeys).
template <int StepKeys>
__device__ __forceinline__ void consumeStage(const attn_abi::AttnSplitKvParams &p,
                                             const Work &work, const RowContext &rows,
                                             const QueryFragments &fragments, u32 smemBase,
                                             int stage, int tileKey, int firstRow, int keyRow0,
                                             int warpKeys, int lane, WarpState &state) {
  for (int offset = 0; offset < warpKeys; offset += StepKeys) {
    float scores[StepKeys / 8][4];
    queryKeyProduct<StepKeys>(smemBase, fragments, keyStage(smemBase, stage), firstRow,
                              keyRow0 + offset, lane, scores);
#pragma unroll
    for (int n = 0; n < StepKeys / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        scores[n][e] = scoreLog2(p, work, rows, e / 2,
                                 tileKey + keyRow0 + offset + 8 * n + 2 * (lane % 4) + e % 2,
                                 scores[n][e]);
    u32 probabilities[StepKeys / 16][4];
    softmaxStep<StepKeys>(state, scores, probabilities);
    probabilityValueProduct<StepKeys>(valueStage(smemBase, stage), keyRow0 + offset, lane,
                                      probabilities, state);
  }
}

} // namespace attn_split_kv
