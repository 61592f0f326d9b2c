//===- DType.h - Element types and host conversions -------------*- C++ -*-===//
//
// The element types the runtime understands, and bit-exact host conversions
// for the 16-bit ones (used to prepare inputs and read back outputs). I32 is
// only an element type of captured buffers (per-token ids, for example).
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_RUNTIME_DTYPE_H
#define ATTN_RUNTIME_DTYPE_H

#include <cstddef>
#include <cstdint>

namespace attn {

enum class DType { BF16, F16, F32, I32 };

/// Size of one element in bytes.
size_t dtypeSize(DType dtype);

/// Lower-case name ("bf16", "f16", "f32", "i32").
const char *dtypeName(DType dtype);

/// Widens a bfloat16 bit pattern to float (exact).
float bf16ToFloat(uint16_t bits);

/// Narrows to bfloat16 with round-to-nearest-even; NaNs stay NaNs (quiet) and
/// keep their sign.
uint16_t floatToBf16(float value);

/// Widens an IEEE binary16 bit pattern to float (exact, including
/// subnormals, infinities and NaNs).
float f16ToFloat(uint16_t bits);

/// Narrows to IEEE binary16 with round-to-nearest-even; overflow gives
/// infinity, tiny values give subnormals or zero, NaNs stay NaNs (quiet).
uint16_t floatToF16(float value);

/// Narrows/widens through the given 16-bit type (`value` rounded to it);
/// F32 returns `value` unchanged, I32 rounds it to the nearest integer (ties
/// to even, in the default rounding mode) without clamping to the int32
/// range.
float roundTo(DType dtype, float value);

} // namespace attn

#endif // ATTN_RUNTIME_DTYPE_H
