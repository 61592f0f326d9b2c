// Online softmax over WGMMA accumulator fragments (layout: fragmentRowHalf
// and fragmentColumn in wgmma.cuh).
#pragma once

namespace attn_dev {

__device__ __forceinline__ float quadMax(float value) {
  value = fmaxf(value, __shfl_xor_sync(0xffffffff, value, 1));
  return fmaxf(value, __shfl_xor_sync(0xffffffff, value, 2));
}

__device__ __forceinline__ float quadSum(float value) {
  value += __shfl_xor_sync(0xffffffff, value, 1);
  return value + __shfl_xor_sync(0xffffffff, value, 2);
}

// Running statistics of this thread's two rows, in base-2 units of the scaled
// scores. `sum` holds only this thread's columns until finalize() reduces it.
struct RowStatistics {
  float max[2];
  float sum[2];

  __device__ __forceinline__ void reset() {
    max[0] = max[1] = negativeInfinity();
    sum[0] = sum[1] = 0.f;
  }
};

// scores[i] = exp2(scores[i] * scaleLog2 + negatedBase[row half]), and adds
// them to the rows' running sums over `Chains` independent partial sums.
template <int Chains, int ScoreRegs>
__device__ __forceinline__ void exponentiateAndSum(float (&scores)[ScoreRegs], float scaleLog2,
                                                   const float (&negatedBase)[2],
                                                   RowStatistics &stats) {
  float partialSum[2][Chains] = {};
#pragma unroll
  for (int i = 0; i < ScoreRegs; ++i) {
    int half = fragmentRowHalf(i);
    scores[i] = fastExp2(fmaf(scores[i], scaleLog2, negatedBase[half]));
    partialSum[half][(i >> 2) % Chains] += scores[i];
  }
#pragma unroll
  for (int half = 0; half < 2; ++half)
#pragma unroll
    for (int chain = 0; chain < Chains; ++chain)
      stats.sum[half] += partialSum[half][chain];
}

// Turns raw scores (masked entries at -inf) into unnormalized probabilities
// in place, exp2(score * scaleLog2 - runningMax) with one FFMA per element,
// and updates the running statistics (kept in base-2 units of the scaled
// scores; scaleLog2 > 0, so the maximum of the raw scores gives theirs).
// Returns in `rescale` the factor the output accumulator must be multiplied by
// for the change of the running maximum; the caller applies it with
// rescaleOutput() once no WGMMA is writing the accumulator any more.
// Row maxima and sums are reduced over `Chains` independent partial results
// per row: one serial chain of ScoreRegs / 2 dependent instructions leaves the
// warp waiting on each result's latency, more chains hold more registers. The
// plan picks the count (attn_plan::kSoftmaxReductionChains).
// With `masked`, every score counts as masked whatever its value: the tile
// gives P = 0 and leaves the statistics as they were.
template <int Chains, int ScoreRegs>
__device__ __forceinline__ void softmaxProbabilities(float (&scores)[ScoreRegs], float scaleLog2,
                                                     bool masked, RowStatistics &stats,
                                                     float (&rescale)[2]) {
  float partialMax[2][Chains];
#pragma unroll
  for (int chain = 0; chain < Chains; ++chain)
    partialMax[0][chain] = partialMax[1][chain] = negativeInfinity();
#pragma unroll
  for (int i = 0; i < ScoreRegs; ++i) {
    float &partial = partialMax[fragmentRowHalf(i)][(i >> 2) % Chains];
    partial = fmaxf(partial, scores[i]);
  }
  float tileMax[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    tileMax[half] = partialMax[half][0];
#pragma unroll
    for (int chain = 1; chain < Chains; ++chain)
      tileMax[half] = fmaxf(tileMax[half], partialMax[half][chain]);
    if (masked)
      tileMax[half] = negativeInfinity();
  }

  float negatedBase[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float newMax = fmaxf(stats.max[half], quadMax(tileMax[half]) * scaleLog2);
    // A row with nothing unmasked yet keeps max = -inf; exponentiate against 0
    // so that -inf - -inf never produces NaN.
    float base = newMax == negativeInfinity() ? 0.f : newMax;
    // exp2(s * scaleLog2 - inf) = 0 for every finite score s.
    negatedBase[half] = masked ? negativeInfinity() : -base;
    rescale[half] = fastExp2(stats.max[half] - base);
    stats.max[half] = newMax;
    stats.sum[half] *= rescale[half];
  }
  exponentiateAndSum<Chains>(scores, scaleLog2, negatedBase, stats);
}

// The same for scores known to lie within [-bound, bound] (or be -inf), where
// |bound * scaleLog2| leaves room for every exp2 against a fixed base: no
// running maximum, no rescale of the output. stats.max holds the base from
// reset on (finalize's log-sum-exp is base + log2(sum)).
template <int Chains, int ScoreRegs>
__device__ __forceinline__ void fixedBaseProbabilities(float (&scores)[ScoreRegs],
                                                       float scaleLog2, float base, bool masked,
                                                       RowStatistics &stats) {
  const float negated = masked ? negativeInfinity() : -base;
  const float negatedBase[2] = {negated, negated};
  exponentiateAndSum<Chains>(scores, scaleLog2, negatedBase, stats);
}

template <int OutputRegs>
__device__ __forceinline__ void rescaleOutput(float (&output)[OutputRegs],
                                              const float (&rescale)[2]) {
#pragma unroll
  for (int i = 0; i < OutputRegs; ++i)
    output[i] *= rescale[fragmentRowHalf(i)];
}

// Divides the output by the row sums and returns each row's log-sum-exp in
// natural-log units (-inf for a row that saw no unmasked key; its output is 0).
template <int OutputRegs>
__device__ __forceinline__ void finalizeSoftmax(float (&output)[OutputRegs], RowStatistics &stats,
                                                float (&logSumExp)[2]) {
  const float kLn2 = 0.6931471805599453f;
  float inverse[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float sum = quadSum(stats.sum[half]);
    bool empty = sum == 0.f || stats.max[half] == negativeInfinity();
    inverse[half] = empty ? 0.f : 1.f / sum;
    logSumExp[half] = empty ? negativeInfinity() : (stats.max[half] + __log2f(sum)) * kLn2;
  }
#pragma unroll
  for (int i = 0; i < OutputRegs; ++i)
    output[i] *= inverse[fragmentRowHalf(i)];
}

} // namespace attn_dev
