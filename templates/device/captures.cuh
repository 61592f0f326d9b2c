// Support for the user regions (mask_mod, score_mod) that attn-lower-mods
// turns into device functions: the C types MLIR's C++ emitter names, the
// captured buffers, and the functions its math lowering calls.
#pragma once

// The fixed-width and size types of the emitted code. NVRTC compiles without
// system headers; repeating a typedef of the same type is allowed.
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef decltype(sizeof(0)) size_t;
typedef decltype((char *)0 - (char *)0) ptrdiff_t;
typedef ptrdiff_t ssize_t;

// Special float constants as the C++ emitter spells them (math.h's macros).
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif

#include "exact_sum.h"

namespace attn_dev {

// A captured buffer: contiguous, row-major, Rank extents.
template <typename T, int Rank> struct Capture {
  const T *data;
  long long extent[Rank];
};

template <typename T, int Rank>
__device__ __forceinline__ Capture<T, Rank> captureOf(const attn_abi::CaptureArg &arg) {
  Capture<T, Rank> capture;
  capture.data = static_cast<const T *>(arg.data);
#pragma unroll
  for (int i = 0; i < Rank; ++i)
    capture.extent[i] = arg.extents[i];
  return capture;
}

// `*address` if `inside`, else 0, as one predicated load instead of a branch
// per element. The buffers are read-only for the kernel's lifetime, so the
// load is an ordinary (not volatile) asm on the non-coherent path: the
// compiler may merge equal loads and keep a value loaded once per tile.
// Captures hold 32-bit values (f32 or i32).
__device__ __forceinline__ float fromBits(unsigned bits, float) { return __uint_as_float(bits); }
__device__ __forceinline__ int fromBits(unsigned bits, int) { return static_cast<int>(bits); }
// A 32-bit value as the word the kernel stages it in (fromBits' inverse).
__device__ __forceinline__ unsigned toBits(float value) { return __float_as_uint(value); }
__device__ __forceinline__ unsigned toBits(int value) { return static_cast<unsigned>(value); }
template <typename T>
__device__ __forceinline__ T loadIfInside(const T *address, bool inside) {
  unsigned bits = 0;
  asm("{\n.reg .pred p;\nsetp.ne.b32 p, %2, 0;\n@p ld.global.nc.b32 %0, [%1];\n}"
      : "+r"(bits)
      : "l"(address), "r"(static_cast<int>(inside)));
  return fromBits(bits, T());
}

// Reads outside the extents give 0. Indices are size_t (MLIR's index), so a
// negative index wraps to a huge one and fails the same test; the address
// of a read outside is formed but never dereferenced.
template <typename T>
__device__ __forceinline__ T loadCapture(const Capture<T, 1> &c, size_t i) {
  return loadIfInside(c.data + i, i < static_cast<size_t>(c.extent[0]));
}
template <typename T>
__device__ __forceinline__ T loadCapture(const Capture<T, 2> &c, size_t i, size_t j) {
  bool inside = i < static_cast<size_t>(c.extent[0]) && j < static_cast<size_t>(c.extent[1]);
  return loadIfInside(c.data + i * static_cast<size_t>(c.extent[1]) + j, inside);
}
template <typename T>
__device__ __forceinline__ T loadCapture(const Capture<T, 3> &c, size_t i, size_t j, size_t k) {
  bool inside = i < static_cast<size_t>(c.extent[0]) && j < static_cast<size_t>(c.extent[1]) &&
                k < static_cast<size_t>(c.extent[2]);
  return loadIfInside(c.data + (i * c.extent[1] + j) * c.extent[2] + k, inside);
}

// A learnable capture's gradient as a consumer thread accumulates into it
// (memref.atomic_rmw addf of score_mod's vector-Jacobian product): where
// the sums go (cleared by the runtime) and the one element whose additions
// the thread is summing in a register. A thread's pairs of a step mostly
// add to one element (a per-head slope: every pair; a relative-position
// table: each diagonal twice in a row), so the sum goes to memory only when
// the element changes and at flushGradient, which the backward calls at the
// end of every step. An index outside the extents
// adds nothing, as a read there gives 0.
// Two ways to memory: `exact` adds each sum to the element's record of
// integer words (exact_sum.h), whose total does not depend on the order the
// threads arrive in, so the gradient is the same bits on every run; without
// it, a float atomic adds to the gradient itself, in an order (and so with
// last bits) that vary from run to run.
// `enabled` off ignores the additions: a walk that recomputes pairs it has
// already added (the backward's later passes) turns it off.
// `findingElement` on makes a call of the vector-Jacobian product only note
// the element of the additions that do not test each pair's element
// (accumulateStepGradient, accumulateDiagonalGradient), adding nothing: the
// backward asks so once a step, or once a diagonal, instead of keeping the
// element in a register over the pairs.
template <int Rank> struct CaptureGradient {
  Capture<float, Rank> buffer; // data: the floats, or the records if exact
  long long elements;          // the product of the extents
  long long pending;           // the element being summed, or -1
  float sum;
  bool enabled;
  bool exact;
  bool findingElement;
};

template <int Rank>
__device__ __forceinline__ CaptureGradient<Rank> gradientOf(const attn_abi::CaptureArg &arg,
                                                            int exact) {
  return CaptureGradient<Rank>{captureOf<float, Rank>(arg), attn_abi::captureElements(arg, Rank), -1,
                              0.f, true, exact != 0, false};
}

// The element's index in the row-major buffer, or -1 outside the extents.
__device__ __forceinline__ long long gradientIndex(const Capture<float, 1> &g, size_t i) {
  return i < static_cast<size_t>(g.extent[0]) ? static_cast<long long>(i) : -1;
}
__device__ __forceinline__ long long gradientIndex(const Capture<float, 2> &g, size_t i,
                                                   size_t j) {
  bool inside = i < static_cast<size_t>(g.extent[0]) && j < static_cast<size_t>(g.extent[1]);
  return inside ? static_cast<long long>(i * static_cast<size_t>(g.extent[1]) + j) : -1;
}
__device__ __forceinline__ long long gradientIndex(const Capture<float, 3> &g, size_t i,
                                                   size_t j, size_t k) {
  bool inside = i < static_cast<size_t>(g.extent[0]) && j < static_cast<size_t>(g.extent[1]) &&
                k < static_cast<size_t>(g.extent[2]);
  return inside ? static_cast<long long>((i * g.extent[1] + j) * g.extent[2] + k) : -1;
}

// One sum into element `index`'s record: one integer atomic add. The
// records are word-major (attn_exact::exactWordOffset): a warp's sums into
// neighbouring elements in one window share cache lines.
__device__ __forceinline__ void addExact(unsigned long long *records, long long elements,
                                         long long index, float value) {
  const attn_exact::ExactPart part = attn_exact::exactPartOf(value);
  if (part.amount != 0)
    atomicAdd(records + attn_exact::exactWordOffset(part.word, index, elements),
              static_cast<unsigned long long>(part.amount));
}

template <int Rank>
__device__ __forceinline__ void addGradient(const CaptureGradient<Rank> &gradient,
                                            long long index, float value) {
  float *data = const_cast<float *>(gradient.buffer.data);
  if (gradient.exact)
    addExact(reinterpret_cast<unsigned long long *>(data), gradient.elements, index, value);
  else
    atomicAdd(data + index, value);
}

template <int Rank, typename... Indices>
__device__ __forceinline__ void accumulateGradient(CaptureGradient<Rank> &gradient, float value,
                                                   Indices... indices) {
  if (!gradient.enabled || gradient.findingElement)
    return;
  const long long index = gradientIndex(gradient.buffer, static_cast<size_t>(indices)...);
  if (index != gradient.pending) {
    if (gradient.pending >= 0)
      addGradient(gradient, gradient.pending, gradient.sum);
    gradient.pending = index;
    gradient.sum = 0.f;
  }
  gradient.sum += value;
}

// The same for an addition whose element is the same for every pair of a
// step, one (batch, head) (attn.step_invariant, attn-differentiate-mods):
// the sum needs no test of each pair's element, and so no branch between
// pairs; the backward finds the element once a step (findingElement) and
// then flushes.
template <int Rank, typename... Indices>
__device__ __forceinline__ void accumulateStepGradient(CaptureGradient<Rank> &gradient,
                                                       float value, Indices... indices) {
  if (gradient.findingElement)
    gradient.pending = gradientIndex(gradient.buffer, static_cast<size_t>(indices)...);
  else if (gradient.enabled)
    gradient.sum += value;
}

// The same for an addition whose element depends on the pair only through
// q - kv (attn.per_diagonal): the backward drains the sum after each pair
// into its diagonal's slot (takeDiagonalSum in regionGradientsOf,
// bwd/score_gradients.cuh) and finds each diagonal's element with one pair
// of it.
template <int Rank, typename... Indices>
__device__ __forceinline__ void accumulateDiagonalGradient(CaptureGradient<Rank> &gradient,
                                                           float value, Indices... indices) {
  accumulateStepGradient(gradient, value, indices...);
}

// Adds the pending sums to memory; every lane of the warp calls it. Where
// all lanes hold the same element, the warp adds first (in a fixed order)
// and one lane stores.
template <int Rank> __device__ __forceinline__ void flushGradient(CaptureGradient<Rank> &gradient) {
  int same = 0;
  __match_all_sync(0xffffffffu, static_cast<unsigned long long>(gradient.pending), &same);
  float sum = gradient.sum;
  if (same) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
      sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  }
  // A sum of 0 adds nothing (a walk whose pairs all had dS = 0).
  if (gradient.pending >= 0 && sum != 0.f && (!same || (threadIdx.x & 31) == 0))
    addGradient(gradient, gradient.pending, sum);
  gradient.pending = -1;
  gradient.sum = 0.f;
}

// flushGradient of a warp's sums where a lane without a sum (0, and no
// element noted) takes another lane's element first: a round whose sums all
// go to one element (a bucketed bias's far buckets) is then summed in the
// warp and added once. A lane whose element lies outside the extents keeps
// -1 and its sum is dropped, as everywhere.
template <int Rank>
__device__ __forceinline__ void flushWarpSums(CaptureGradient<Rank> &gradient, float sum) {
  gradient.sum = sum;
  const unsigned holders = __ballot_sync(0xffffffffu, gradient.pending >= 0);
  if (holders != 0) {
    const long long element = __shfl_sync(0xffffffffu, gradient.pending, __ffs(holders) - 1);
    if (gradient.pending < 0 && sum == 0.f)
      gradient.pending = element;
  }
  flushGradient(gradient);
}

// tanh on the special function unit: one instruction, relative error about
// 2^-11, below the precision of bf16/f16 outputs.
__device__ __forceinline__ float fastTanh(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// arith.sitofp from i32, correctly rounded like the conversion instruction
// but on the FMA and integer pipes: the conversion instruction runs on the
// same narrow pipe as the softmax's ex2, which a per-score conversion (a
// position bias) would then saturate. The halves of x convert exactly by
// placing them in a float's mantissa; one FMA rounds their sum once.
__device__ __forceinline__ float exactIntToFloat(int32_t x) {
  int32_t high = x >> 16;                 // in [-2^15, 2^15)
  uint32_t low = static_cast<uint32_t>(x) & 0xffffu;
  float highF = __int_as_float(0x4B400000 + high) - 12582912.0f; // 1.5 * 2^23
  float lowF = __int_as_float(0x4B000000 | low) - 8388608.0f;    // 2^23
  return fmaf(highF, 65536.0f, lowF);
}

// arith.floordivsi / ceildivsi: the quotient rounded down / up. A zero
// divisor gives 0 and the minimum divided by -1 wraps, as the CPU
// reference's interpreter defines these cases MLIR leaves open.
template <bool RoundUp, typename T>
__device__ __forceinline__ T roundedDiv(T a, T b) {
  if (b == 0)
    return T(0);
  if (b == -1)
    return static_cast<T>(T(0) - static_cast<unsigned long long>(a));
  T q = a / b;
  bool inexact = a % b != 0;
  bool positive = (a < 0) == (b < 0);
  if (inexact && positive == RoundUp)
    return RoundUp ? q + 1 : q - 1;
  return q;
}
// arith.divsi / remsi (C's truncating / and %) and divui / remui, with the
// interpreter's rules where C leaves the result undefined: a zero divisor
// gives 0, the minimum by -1 wraps (and leaves remainder 0).
template <typename T>
__device__ __forceinline__ T truncDiv(T a, T b) {
  if (b == 0)
    return T(0);
  if (b == -1)
    return static_cast<T>(T(0) - static_cast<unsigned long long>(a));
  return a / b;
}
template <typename T>
__device__ __forceinline__ T truncRem(T a, T b) {
  return (b == 0 || b == -1) ? T(0) : a % b;
}
template <typename T>
__device__ __forceinline__ T divideUnsigned(T a, T b) { return b == 0 ? T(0) : a / b; }
template <typename T>
__device__ __forceinline__ T remainderUnsigned(T a, T b) { return b == 0 ? T(0) : a % b; }
template <typename T>
__device__ __forceinline__ T floorDiv(T a, T b) { return roundedDiv<false>(a, b); }
template <typename T>
__device__ __forceinline__ T ceilDiv(T a, T b) { return roundedDiv<true>(a, b); }

// math.absi: the minimum stays the minimum (wraps), as in the interpreter.
template <typename T>
__device__ __forceinline__ T absInt(T a) {
  return a < 0 ? static_cast<T>(T(0) - static_cast<unsigned long long>(a)) : a;
}

// arith.maximumf / minimumf: NaN if either operand is NaN.
__device__ __forceinline__ float maximumf(float a, float b) {
  return (a != a || b != b) ? __int_as_float(0x7fffffff) : fmaxf(a, b);
}
__device__ __forceinline__ float minimumf(float a, float b) {
  return (a != a || b != b) ? __int_as_float(0x7fffffff) : fminf(a, b);
}

} // namespace attn_dev
