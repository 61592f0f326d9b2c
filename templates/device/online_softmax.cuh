// Online softmax over WGMMA accumulator fragments. In an m64nN fp32
// accumulator, thread `lane` of warp `w` holds rows w*16 + lane/4 (half 0) and
// that + 8 (half 1); element i belongs to half (i / 2) % 2 and to column
// (i / 4) * 8 + 2 * (lane % 4) + i % 2. The four threads of a quad share rows.
#pragma once

namespace attn_dev {

__device__ __forceinline__ int fragmentRowHalf(int i) { return (i >> 1) & 1; }
__device__ __forceinline__ int fragmentColumn(int i, int lane) {
  return (i >> 2) * 8 + 2 * (lane & 3) + (i & 1);
}

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

// Turns scores (already scaled to base 2, masked entries at -inf) into
// unnormalized probabilities in place, and rescales the output accumulator by
// the change of the running maximum.
template <int ScoreRegs, int OutputRegs>
__device__ __forceinline__ void onlineSoftmaxUpdate(float (&scores)[ScoreRegs],
                                                    float (&output)[OutputRegs],
                                                    RowStatistics &stats) {
  float tileMax[2] = {negativeInfinity(), negativeInfinity()};
#pragma unroll
  for (int i = 0; i < ScoreRegs; ++i)
    tileMax[fragmentRowHalf(i)] = fmaxf(tileMax[fragmentRowHalf(i)], scores[i]);

  float rescale[2];
  float base[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float newMax = fmaxf(stats.max[half], quadMax(tileMax[half]));
    // A row with nothing unmasked yet keeps max = -inf; exponentiate against 0
    // so that -inf - -inf never produces NaN.
    base[half] = newMax == negativeInfinity() ? 0.f : newMax;
    rescale[half] = fastExp2(stats.max[half] - base[half]);
    stats.max[half] = newMax;
    stats.sum[half] *= rescale[half];
  }

#pragma unroll
  for (int i = 0; i < ScoreRegs; ++i) {
    int half = fragmentRowHalf(i);
    scores[i] = fastExp2(scores[i] - base[half]);
    stats.sum[half] += scores[i];
  }

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
