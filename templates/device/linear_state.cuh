// Pieces of the chunkwise linear attention / retention kernel that know
// nothing of its schedule: feature maps, the per-chunk decay, and the state
// as WGMMA fragments.
#pragma once

namespace attn_dev {

enum class FeatureMap { Identity, Relu, EluPlusOne };

template <FeatureMap Map> __device__ __forceinline__ float featureMap(float x) {
  if constexpr (Map == FeatureMap::Relu)
    return fmaxf(x, 0.f);
  else if constexpr (Map == FeatureMap::EluPlusOne)
    return x > 0.f ? x + 1.f : fastExp2(x * kLog2e);
  else
    return x;
}

template <class Element> __device__ __forceinline__ float lowHalfToFloat(u32 packed);
template <> __device__ __forceinline__ float lowHalfToFloat<Bf16>(u32 packed) {
  return __uint_as_float(packed << 16);
}
template <> __device__ __forceinline__ float lowHalfToFloat<F16>(u32 packed) {
  float value;
  asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\ncvt.f32.f16 %0, lo;\n}" : "=f"(value) : "r"(packed));
  return value;
}
template <class Element> __device__ __forceinline__ float highHalfToFloat(u32 packed) {
  return lowHalfToFloat<Element>(packed >> 16);
}

// Applies the feature map to every element of a tile in place; the layout
// does not matter to an element-wise map. `threads` threads take part.
template <FeatureMap Map, class Element>
__device__ __forceinline__ void mapTileInPlace(u32 tile, u32 bytes, int thread, int threads) {
  if constexpr (Map != FeatureMap::Identity) {
    for (u32 offset = thread * 16; offset < bytes; offset += threads * 16) {
      u32 words[4];
      asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(words[0]), "=r"(words[1]), "=r"(words[2]), "=r"(words[3])
                   : "r"(tile + offset));
#pragma unroll
      for (int w = 0; w < 4; ++w)
        words[w] = packPair<Element>(featureMap<Map>(lowHalfToFloat<Element>(words[w])),
                                     featureMap<Map>(highHalfToFloat<Element>(words[w])));
      asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(tile + offset), "r"(words[0]),
                   "r"(words[1]), "r"(words[2]), "r"(words[3])
                   : "memory");
    }
  }
}

// Multiplies row r of a tile (any column layout, `rows` rows of 128 bytes
// per 64-column block) by its decay to the chunk's end, 2^(last - G[r]) with
// G the cumulative log2-decays, in place. All loads are issued before the
// first store so that their latencies overlap.
template <class Element, u32 kBytes, int kThreads>
__device__ __forceinline__ void scaleRowsByDecayInPlace(u32 tile, int rows, const float *cumulative,
                                                        float last, int thread) {
  static_assert(kBytes % (kThreads * 16) == 0, "whole 16-byte pieces per thread");
  constexpr int kPieces = kBytes / (kThreads * 16);
  u32 words[kPieces][4];
  float factor[kPieces];
#pragma unroll
  for (int piece = 0; piece < kPieces; ++piece) {
    u32 offset = (thread + piece * kThreads) * 16;
    factor[piece] = fastExp2(last - cumulative[(offset / 128) % rows]);
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(words[piece][0]), "=r"(words[piece][1]), "=r"(words[piece][2]),
                   "=r"(words[piece][3])
                 : "r"(tile + offset));
  }
#pragma unroll
  for (int piece = 0; piece < kPieces; ++piece)
#pragma unroll
    for (int w = 0; w < 4; ++w)
      words[piece][w] = packPair<Element>(lowHalfToFloat<Element>(words[piece][w]) * factor[piece],
                                          highHalfToFloat<Element>(words[piece][w]) * factor[piece]);
#pragma unroll
  for (int piece = 0; piece < kPieces; ++piece)
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(tile + (thread + piece * kThreads) * 16),
                 "r"(words[piece][0]), "r"(words[piece][1]), "r"(words[piece][2]),
                 "r"(words[piece][3])
                 : "memory");
}

// Inclusive prefix sums of 64 values held two per lane (lane and lane + 32)
// by one warp.
__device__ __forceinline__ void warpInclusiveScan64(float &low, float &high, int lane) {
#pragma unroll
  for (int offset = 1; offset < 32; offset *= 2) {
    float fromLow = __shfl_up_sync(0xffffffff, low, offset);
    float fromHigh = __shfl_up_sync(0xffffffff, high, offset);
    if (lane >= offset) {
      low += fromLow;
      high += fromHigh;
    }
  }
  high += __shfl_sync(0xffffffff, low, 31);
}

} // namespace attn_dev
