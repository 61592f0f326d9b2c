// Element types and conversions for the kernel templates. NVRTC compiles these
// without the toolkit's cuda_bf16.h / cuda_fp16.h, so conversions are written
// with the PTX instructions directly.
#pragma once

namespace attn_dev {

typedef unsigned int u32;
typedef unsigned long long u64;

// log2(e): exponentials run as exp2 on the SFU.
constexpr float kLog2e = 1.4426950408889634f;

// Tags naming the 16-bit element type of Q, K, V and O (and of P in the PV
// product), with the width of its exponent field.
struct Bf16 {
  static constexpr const char *kPtxName = "bf16";
  static constexpr int kExponentBits = 8;
};
struct F16 {
  static constexpr const char *kPtxName = "f16";
  static constexpr int kExponentBits = 5;
};

// Packs two fp32 values into one register of two 16-bit values, `lo` in the
// low half (the lower column index of a WGMMA fragment pair).
template <class Element> __device__ __forceinline__ u32 packPair(float lo, float hi);

template <> __device__ __forceinline__ u32 packPair<Bf16>(float lo, float hi) {
  u32 packed;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(hi), "f"(lo));
  return packed;
}

template <> __device__ __forceinline__ u32 packPair<F16>(float lo, float hi) {
  u32 packed;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(hi), "f"(lo));
  return packed;
}

__device__ __forceinline__ float fastExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float negativeInfinity() { return __int_as_float(0xff800000); }

__device__ __forceinline__ u32 sharedAddress(const void *pointer) {
  return static_cast<u32>(__cvta_generic_to_shared(pointer));
}

// A 32- or 64-bit word of shared memory, read where it is written (after
// the barrier wait that makes it visible).
template <typename Word> __device__ __forceinline__ Word loadShared(u32 address) {
  static_assert(sizeof(Word) == 4 || sizeof(Word) == 8, "a 32- or 64-bit word");
  if constexpr (sizeof(Word) == 4) {
    u32 word;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(word) : "r"(address));
    return static_cast<Word>(word);
  } else {
    u64 word;
    asm volatile("ld.shared.b64 %0, [%1];" : "=l"(word) : "r"(address));
    return static_cast<Word>(word);
  }
}

} // namespace attn_dev
