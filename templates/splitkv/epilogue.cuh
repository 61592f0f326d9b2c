// The end of a short-query block: its warps' partial rows merged in shared
// memory, each row's score_mod offset, and its stores (O and the
// log-sum-exp, or the split's piece).
#pragma once

#include "splitkv/mainloop.cuh"

namespace attn_split_kv {

// The score_mod terms attn-lower-mods moved out of the scores because they
// move a whole row alike (as the forward's epilogue applies them): the
// factor of O and the natural log-sum-exp of a row whose base-2 one is
// `logSumExp2` (-inf: no key reached it).
struct RowResult {
  float outputFactor;
  float logSumExp;
};

template <class Params>
__device__ __forceinline__ RowResult finishRow(const Params &p, int batch, int head, int position,
                                               int seqlenK, float logSumExp2) {
  const float kLn2 = 0.6931471805599453f;
  RowResult result{1.f, logSumExp2 * kLn2};
  if (logSumExp2 == negativeInfinity())
    return RowResult{0.f, negativeInfinity()};
  if constexpr (Mods::kHasScoreRowOffset) {
    const float offset =
        Mods::kScoreOutputScale *
        Mods::scoreRowOffset(p, batch, head, position,
                             diagonalKey(position, maskShift(p, seqlenK), seqlenK));
    if (offset == negativeInfinity())
      result = RowResult{0.f, negativeInfinity()};
    else if (!isfinite(offset))
      result = RowResult{__int_as_float(0x7fffffff), __int_as_float(0x7fffffff)};
    else
      result.logSumExp += offset;
  }
  return result;
}

// Count consecutive O values of a row from column `column`, in the output's
// element type.
template <int Count>
__device__ __forceinline__ void storeOutput(const attn_abi::AttnSplitKvParams &p, int batch,
                                            int position, int head, int column,
                                            const float (&values)[Count]) {
  static_assert(Count % 4 == 0, "whole 8-byte stores");
  unsigned short *row = static_cast<unsigned short *>(p.o) + batch * p.o_strides[0] +
                        position * p.o_strides[1] + head * p.o_strides[2] + column;
#pragma unroll
  for (int i = 0; i < Count; i += 4) {
    uint2 packed = make_uint2(packPair<Element>(values[i], values[i + 1]),
                              packPair<Element>(values[i + 2], values[i + 3]));
    *reinterpret_cast<uint2 *>(row + i) = packed;
  }
}

__device__ __forceinline__ i64 outputRowIndex(const attn_abi::AttnSplitKvParams &p, int batch,
                                              int head, int position) {
  return (static_cast<i64>(batch) * p.q_heads + head) * p.seqlen_q + position;
}

// The warps' partial rows in shared memory (over the K/V stages, once the
// last one is consumed): per warp [16 rows][kHeadDim + 8] floats of O (the
// padding spreads a quad's rows over the banks), then per warp 16 row
// maxima and 16 sums.
constexpr int kPartialStride = kHeadDim + 8;
constexpr u32 kPartialOutputBytes = kWarps * 16 * kPartialStride * 4;
static_assert(kPartialOutputBytes + kWarps * 16 * 8 <= 2 * kStages * kTileBytes,
              "the partial rows fit over the stages");

__device__ __forceinline__ void storePartialRows(u32 scratch, int warp, int lane,
                                                 const WarpState &state) {
#pragma unroll
  for (int tile = 0; tile < kDimTiles; ++tile)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = lane / 4 + 8 * half, column = 8 * tile + 2 * (lane % 4);
      asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(
                       scratch + ((warp * 16 + row) * kPartialStride + column) * 4),
                   "f"(state.output[tile][2 * half]), "f"(state.output[tile][2 * half + 1])
                   : "memory");
    }
  if (lane % 4 == 0)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const u32 rowStats = scratch + kPartialOutputBytes + (warp * 16 + lane / 4 + 8 * half) * 8;
      asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(rowStats),
                   "f"(state.rowMax[half]), "f"(state.rowSum[half])
                   : "memory");
    }
}

// Merges the key warps' pieces of the block's rows and stores each row: O
// and the log-sum-exp themselves with one split, else the split's piece.
__device__ void storeBlockRows(const attn_abi::AttnSplitKvParams &p, u32 scratch,
                               const Work &work, int rowWarps, int keyWarps) {
  constexpr int kChunk = 8;
  const int rows = min(kRows, work.packedRows - work.rowBegin);
  for (int item = threadIdx.x; item < rows * (kHeadDim / kChunk); item += kThreads) {
    const int row = item / (kHeadDim / kChunk), column = (item % (kHeadDim / kChunk)) * kChunk;
    const int rowWarp = row / 16, rowInWarp = row % 16;
    float maximum = negativeInfinity();
    float2 stats[kWarps];
#pragma unroll
    for (int keyWarp = 0; keyWarp < kWarps; ++keyWarp)
      if (keyWarp < keyWarps) {
        const int warp = rowWarp + keyWarp * rowWarps;
        asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];"
                     : "=f"(stats[keyWarp].x), "=f"(stats[keyWarp].y)
                     : "r"(scratch + kPartialOutputBytes + (warp * 16 + rowInWarp) * 8));
        maximum = fmaxf(maximum, stats[keyWarp].x);
      }
    const float reference = maximum == negativeInfinity() ? 0.f : maximum;
    float sum = 0.f, values[kChunk] = {};
#pragma unroll
    for (int keyWarp = 0; keyWarp < kWarps; ++keyWarp)
      if (keyWarp < keyWarps) {
        const int warp = rowWarp + keyWarp * rowWarps;
        const float weight = fastExp2(stats[keyWarp].x - reference);
        sum += stats[keyWarp].y * weight;
        const u32 source = scratch + ((warp * 16 + rowInWarp) * kPartialStride + column) * 4;
#pragma unroll
        for (int i = 0; i < kChunk; i += 4) {
          float4 piece;
          asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                       : "=f"(piece.x), "=f"(piece.y), "=f"(piece.z), "=f"(piece.w)
                       : "r"(source + 4 * i));
          values[i] += piece.x * weight;
          values[i + 1] += piece.y * weight;
          values[i + 2] += piece.z * weight;
          values[i + 3] += piece.w * weight;
        }
      }
    const float inverse = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
    for (int i = 0; i < kChunk; ++i)
      values[i] *= inverse;
    const float logSumExp2 = sum > 0.f ? reference + __log2f(sum) : negativeInfinity();
    const int packed = work.rowBegin + row;
    const int position = packed / work.group;
    const int head = work.kvHead * work.group + packed % work.group;
    const i64 outputRow = outputRowIndex(p, work.batch, head, position);
    if (p.splits == 1) {
      const RowResult result =
          finishRow(p, work.batch, head, position, work.seqlenK, logSumExp2);
#pragma unroll
      for (int i = 0; i < kChunk; ++i)
        values[i] *= result.outputFactor;
      storeOutput(p, work.batch, position, head, column, values);
      if (column == 0)
        p.lse[outputRow] = result.logSumExp;
    } else {
      const i64 piece = static_cast<i64>(work.split) * p.batch * p.q_heads * p.seqlen_q + outputRow;
      float4 *destination = reinterpret_cast<float4 *>(p.partial_o + piece * kHeadDim + column);
#pragma unroll
      for (int i = 0; i < kChunk; i += 4)
        destination[i / 4] = make_float4(values[i], values[i + 1], values[i + 2], values[i + 3]);
      if (column == 0)
        p.partial_lse[piece] = logSumExp2;
    }
  }
}

} // namespace attn_split_kv
