//===- DType.cpp - Element types and host conversions ---------------------===//

#include "attn/runtime/DType.h"

#include <cmath>
#include <cstring>

namespace attn {

namespace {
uint32_t floatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float bitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

/// Shifts `value` right by `shift` bits, rounding to nearest with ties to
/// even. Requires 0 < shift < 32.
uint32_t shiftRightRne(uint32_t value, unsigned shift) {
  uint32_t kept = value >> shift;
  uint32_t rest = value & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (kept & 1)))
    ++kept;
  return kept;
}
} // namespace

size_t dtypeSize(DType dtype) {
  switch (dtype) {
  case DType::BF16:
  case DType::F16:
    return 2;
  case DType::F32:
  case DType::I32:
    return 4;
  }
  return 0;
}

const char *dtypeName(DType dtype) {
  switch (dtype) {
  case DType::BF16:
    return "bf16";
  case DType::F16:
    return "f16";
  case DType::F32:
    return "f32";
  case DType::I32:
    return "i32";
  }
  return "<invalid dtype>";
}

float bf16ToFloat(uint16_t bits) {
  return bitsToFloat(static_cast<uint32_t>(bits) << 16);
}

uint16_t floatToBf16(float value) {
  uint32_t bits = floatBits(value);
  // Truncating a NaN with a payload only in the low half would give infinity;
  // set the quiet bit instead so it stays a NaN.
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  // Adding 0x7fff plus the lowest kept bit rounds to nearest, ties to even;
  // a carry out of the mantissa correctly bumps the exponent (up to inf).
  uint32_t bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + bias) >> 16);
}

float f16ToFloat(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exactly representable in float.
    float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) // Inf, or NaN with its payload kept.
    return bitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  return bitsToFloat(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

uint16_t floatToF16(float value) {
  uint32_t bits = floatBits(value);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t magnitude = bits & 0x7fffffffu;

  if (magnitude > 0x7f800000u) // NaN: keep the top payload bits, force quiet.
    return sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu);
  if (magnitude == 0x7f800000u)
    return sign | 0x7c00u;

  int exponent = static_cast<int>(magnitude >> 23) - 127;
  uint32_t mantissa = magnitude & 0x7fffffu;
  if (exponent > 15) // At least 2^16: beyond even the rounding range.
    return sign | 0x7c00u;

  if (exponent >= -14) {
    // Normal range. Rounding may carry into the exponent, and from the
    // largest finite value into 0x7c00 (infinity), which is what RNE wants.
    uint32_t combined =
        (static_cast<uint32_t>(exponent + 15) << 23) | mantissa; // 28 bits
    return sign | static_cast<uint16_t>(shiftRightRne(combined, 13));
  }

  // Subnormal or zero: the result is round(value * 2^24) as an integer.
  // value = (2^23 + mantissa) * 2^(exponent - 23), so shift right by
  // -(exponent + 1). Shifts beyond 24 (float subnormals included) leave less
  // than half of 2^-24: zero.
  unsigned shift = static_cast<unsigned>(-(exponent + 1));
  if (shift > 24)
    return sign;
  uint32_t significand = 0x800000u | mantissa;
  return sign | static_cast<uint16_t>(shiftRightRne(significand, shift));
}

float roundTo(DType dtype, float value) {
  switch (dtype) {
  case DType::BF16:
    return bf16ToFloat(floatToBf16(value));
  case DType::F16:
    return f16ToFloat(floatToF16(value));
  case DType::F32:
    return value;
  case DType::I32:
    return std::nearbyint(value);
  }
  return value;
}

} // namespace attn
