// The backward main kernel's epilogue: each consumer's rows and columns of
// dK (scaled by the softmax scale) and dV, stored once a pass ends.
#pragma once

#include "bwd/key_block.cuh"

namespace attn_bwd {

// Stores this thread's rows of a dK or dV slice (scaled by `factor`), those
// inside the sequence's keys: pairs of adjacent columns, 4 bytes a store.
__device__ __forceinline__ void storeKeyGradients(void *tensor, const long long (&strides)[3],
                                                  const float (&values)[kGradRegs], float factor,
                                                  const KeyBlock &block, int key0, int lane,
                                                  int firstColumn) {
  unsigned char *base = static_cast<unsigned char *>(tensor);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int key = key0 + 8 * half;
    if (key >= block.sequence.seqlenK)
      continue;
    const i64 row = static_cast<i64>(block.sequence.rowK) + key;
    const i64 rowElement = block.sequence.mapBatch * strides[0] + row * strides[1] +
                           static_cast<i64>(block.kvHead) * strides[2] + firstColumn;
#pragma unroll
    for (int group = 0; group < kGradColumns / 8; ++group) {
      const int i = group * 4 + half * 2;
      const i64 element = rowElement + group * 8 + 2 * (lane & 3);
      const u32 packed = packPair<Element>(values[i] * factor, values[i + 1] * factor);
      asm volatile("st.global.b32 [%0], %1;" ::"l"(base + element * kElementBytes), "r"(packed)
                   : "memory");
    }
  }
}

// Stores this consumer's columns of a pass of dK (scaled) and dV and
// clears the accumulators for the next pass.
__device__ __forceinline__ void storePassGradients(const attn_abi::AttnBwdParams &p,
                                                   float (&dK)[kGradRegs], float (&dV)[kGradRegs],
                                                   const KeyBlock &block, int key0, int lane,
                                                   int consumer, int pass) {
  const int firstColumn = pass * kPassColumns + (kSplitsColumns ? consumer * kGradColumns : 0);
  storeKeyGradients(p.dk, p.dk_strides, dK, p.scale, block, key0, lane, firstColumn);
  storeKeyGradients(p.dv, p.dv_strides, dV, 1.f, block, key0, lane, firstColumn);
#pragma unroll
  for (int i = 0; i < kGradRegs; ++i)
    dK[i] = dV[i] = 0.f;
}

} // namespace attn_bwd
