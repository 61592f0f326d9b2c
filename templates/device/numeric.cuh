// Element types and conversions for the kernel templates. NVRTC compiles these
// without the toolkit's cuda_bf16.h / cuda_fp16.h, so conversions are written
// with the PTX instructions directly.
#pragma once

namespace attn_dev {

typedef unsigned int u32;
typedef unsigned long long u64;

// std::conditional (NVRTC compiles without the standard headers).
template <bool Condition, typename IfTrue, typename IfFalse> struct Conditional {
  using type = IfTrue;
};
template <typename IfTrue, typename IfFalse> struct Conditional<false, IfTrue, IfFalse> {
  using type = IfFalse;
};

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

// The two 16-bit values of a packed pair as fp32, `lo` from the low half.
template <class Element> __device__ __forceinline__ void unpackPair(u32 packed, float &lo, float &hi);

template <> __device__ __forceinline__ void unpackPair<Bf16>(u32 packed, float &lo, float &hi) {
  lo = __uint_as_float(packed << 16);
  hi = __uint_as_float(packed & 0xffff0000u);
}

template <> __device__ __forceinline__ void unpackPair<F16>(u32 packed, float &lo, float &hi) {
  asm("{\n.reg .f16 l, h;\nmov.b32 {l, h}, %2;\ncvt.f32.f16 %0, l;\ncvt.f32.f16 %1, h;\n}"
      : "=f"(lo), "=f"(hi)
      : "r"(packed));
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

// The dynamic shared memory's base address rounded up to 1024 bytes:
// swizzled tiles need that alignment, and every launch reserves the slack.
__device__ __forceinline__ u32 alignedDynamicShared() {
  extern __shared__ __align__(1024) unsigned char sharedMemory[];
  return (sharedAddress(sharedMemory) + 1023) & ~1023u;
}

// A 32-, 64- or 128-bit word of shared memory, read where it is written
// (after the barrier wait that makes it visible).
template <typename Word> __device__ __forceinline__ Word loadShared(u32 address) {
  static_assert(sizeof(Word) == 4 || sizeof(Word) == 8 || sizeof(Word) == 16,
                "a 32-, 64- or 128-bit word");
  if constexpr (sizeof(Word) == 4) {
    u32 word;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(word) : "r"(address));
    return static_cast<Word>(word);
  } else if constexpr (sizeof(Word) == 16) {
    uint4 word;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(word.x), "=r"(word.y), "=r"(word.z), "=r"(word.w)
                 : "r"(address));
    return word;
  } else {
    u64 word;
    asm volatile("ld.shared.b64 %0, [%1];" : "=l"(word) : "r"(address));
    return static_cast<Word>(word);
  }
}

} // namespace attn_dev
