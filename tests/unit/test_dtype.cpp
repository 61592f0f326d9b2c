// Bit-exact checks of the host 16-bit conversions against hand-computed
// encodings.

#include "attn/runtime/DType.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

using namespace attn;

namespace {
float fromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

uint32_t toBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}
} // namespace

TEST_CASE("dtype sizes and names", "[dtype]") {
  CHECK(dtypeSize(DType::BF16) == 2);
  CHECK(dtypeSize(DType::F16) == 2);
  CHECK(dtypeSize(DType::F32) == 4);
  CHECK(dtypeSize(DType::I32) == 4);
  CHECK(std::string(dtypeName(DType::BF16)) == "bf16");
  CHECK(std::string(dtypeName(DType::F16)) == "f16");
  CHECK(std::string(dtypeName(DType::F32)) == "f32");
  CHECK(std::string(dtypeName(DType::I32)) == "i32");
}

TEST_CASE("bf16 encodes exact values", "[dtype][bf16]") {
  CHECK(floatToBf16(1.0f) == 0x3F80);
  CHECK(floatToBf16(-2.0f) == 0xC000);
  CHECK(floatToBf16(0.0f) == 0x0000);
  CHECK(floatToBf16(-0.0f) == 0x8000);
  CHECK(floatToBf16(0.5f) == 0x3F00);
  // 3.140625 = 0x40490000 exactly.
  CHECK(floatToBf16(3.140625f) == 0x4049);
  CHECK(floatToBf16(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(floatToBf16(-std::numeric_limits<float>::infinity()) == 0xFF80);
}

TEST_CASE("bf16 rounds to nearest even", "[dtype][bf16]") {
  // 1 + 2^-8 is halfway between 1 (0x3F80, even) and 1 + 2^-7 (0x3F81).
  CHECK(floatToBf16(fromBits(0x3F808000)) == 0x3F80);
  // 1 + 3*2^-8 is halfway between 0x3F81 (odd) and 0x3F82 (even).
  CHECK(floatToBf16(fromBits(0x3F818000)) == 0x3F82);
  // Just above and below the halfway point.
  CHECK(floatToBf16(fromBits(0x3F808001)) == 0x3F81);
  CHECK(floatToBf16(fromBits(0x3F807FFF)) == 0x3F80);
  // Rounding carries into the exponent: 0x3FFFC000 -> 0x4000 (2.0).
  CHECK(floatToBf16(fromBits(0x3FFFC000)) == 0x4000);
  // The largest float rounds up to infinity.
  CHECK(floatToBf16(std::numeric_limits<float>::max()) == 0x7F80);
  // Float subnormals: 0x00008000 is a tie down to even zero, 0x00018000 a
  // tie from odd 0x0001 up to 0x0002.
  CHECK(floatToBf16(fromBits(0x00008000)) == 0x0000);
  CHECK(floatToBf16(fromBits(0x00018000)) == 0x0002);
}

TEST_CASE("bf16 keeps NaNs", "[dtype][bf16]") {
  // A signalling NaN whose payload is only in the low half must not
  // truncate to infinity (0x7F80).
  uint16_t fromSignalling = floatToBf16(fromBits(0x7F800001));
  CHECK((fromSignalling & 0x7F80) == 0x7F80);
  CHECK((fromSignalling & 0x007F) != 0);
  CHECK(floatToBf16(fromBits(0x7FC00000)) == 0x7FC0);
  CHECK(floatToBf16(fromBits(0xFFC00000)) == 0xFFC0);
  CHECK(std::isnan(bf16ToFloat(0x7FC0)));
  CHECK(std::isnan(bf16ToFloat(0x7F81)));
}

TEST_CASE("bf16 widens exactly", "[dtype][bf16]") {
  CHECK(toBits(bf16ToFloat(0x3F80)) == 0x3F800000u);
  CHECK(bf16ToFloat(0xC040) == -3.0f);
  CHECK(bf16ToFloat(0x0001) == fromBits(0x00010000));
  CHECK(std::isinf(bf16ToFloat(0xFF80)));
  // Every non-NaN pattern round-trips.
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    float wide = bf16ToFloat(static_cast<uint16_t>(bits));
    if (!std::isnan(wide))
      REQUIRE(floatToBf16(wide) == bits);
  }
}

TEST_CASE("f16 encodes exact values", "[dtype][f16]") {
  CHECK(floatToF16(1.0f) == 0x3C00);
  CHECK(floatToF16(-2.0f) == 0xC000);
  CHECK(floatToF16(0.5f) == 0x3800);
  CHECK(floatToF16(0.0f) == 0x0000);
  CHECK(floatToF16(-0.0f) == 0x8000);
  CHECK(floatToF16(65504.0f) == 0x7BFF); // Largest finite half.
  CHECK(floatToF16(std::ldexp(1.0f, -14)) == 0x0400); // Smallest normal.
  CHECK(floatToF16(std::ldexp(1.0f, -24)) == 0x0001); // Smallest subnormal.
  CHECK(floatToF16(std::ldexp(1023.0f, -24)) == 0x03FF); // Largest subnormal.
  CHECK(floatToF16(std::numeric_limits<float>::infinity()) == 0x7C00);
  CHECK(floatToF16(-std::numeric_limits<float>::infinity()) == 0xFC00);
}

TEST_CASE("f16 rounds to nearest even", "[dtype][f16]") {
  // 1 + 2^-11: halfway between 0x3C00 (even) and 0x3C01.
  CHECK(floatToF16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);
  // 1 + 3*2^-11: halfway between 0x3C01 (odd) and 0x3C02.
  CHECK(floatToF16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);
  CHECK(floatToF16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) ==
        0x3C01);
  // Overflow: 65519 rounds down to 65504; 65520 is the tie between 65504
  // (0x7BFF, odd) and 65536 (not representable) and rounds to infinity.
  CHECK(floatToF16(65519.0f) == 0x7BFF);
  CHECK(floatToF16(65520.0f) == 0x7C00);
  CHECK(floatToF16(1.0e6f) == 0x7C00);
  CHECK(floatToF16(-1.0e6f) == 0xFC00);
}

TEST_CASE("f16 subnormals and underflow", "[dtype][f16]") {
  // 2^-25 is a tie between 0 (even) and 2^-24: zero.
  CHECK(floatToF16(std::ldexp(1.0f, -25)) == 0x0000);
  CHECK(floatToF16(-std::ldexp(1.0f, -25)) == 0x8000);
  // Slightly above the tie rounds up.
  CHECK(floatToF16(std::ldexp(1.0f, -25) * 1.0001f) == 0x0001);
  // 1.5 * 2^-24 is a tie between 1 (odd) and 2 (even) ulps.
  CHECK(floatToF16(std::ldexp(3.0f, -25)) == 0x0002);
  // 2.5 * 2^-24: tie between 2 (even) and 3.
  CHECK(floatToF16(std::ldexp(5.0f, -25)) == 0x0002);
  // Rounding up out of the subnormal range gives the smallest normal.
  CHECK(floatToF16(std::ldexp(1023.5f, -24)) == 0x0400);
  // Far below: zero, and float subnormals too.
  CHECK(floatToF16(1.0e-10f) == 0x0000);
  CHECK(floatToF16(fromBits(0x00000001)) == 0x0000);
  CHECK(floatToF16(-fromBits(0x00000001)) == 0x8000);
}

TEST_CASE("f16 keeps NaNs", "[dtype][f16]") {
  uint16_t quiet = floatToF16(std::numeric_limits<float>::quiet_NaN());
  CHECK((quiet & 0x7C00) == 0x7C00);
  CHECK((quiet & 0x03FF) != 0);
  // A payload only in the low bits must still give a NaN, not infinity.
  uint16_t low = floatToF16(fromBits(0x7F800001));
  CHECK((low & 0x7C00) == 0x7C00);
  CHECK((low & 0x03FF) != 0);
  CHECK(std::isnan(f16ToFloat(0x7E00)));
  CHECK(std::isnan(f16ToFloat(0xFC01)));
}

TEST_CASE("f16 widens exactly", "[dtype][f16]") {
  CHECK(f16ToFloat(0x3C00) == 1.0f);
  CHECK(f16ToFloat(0x7BFF) == 65504.0f);
  CHECK(f16ToFloat(0x0001) == std::ldexp(1.0f, -24));
  CHECK(f16ToFloat(0x03FF) == std::ldexp(1023.0f, -24));
  CHECK(f16ToFloat(0x0400) == std::ldexp(1.0f, -14));
  CHECK(toBits(f16ToFloat(0x8000)) == 0x80000000u);
  CHECK(f16ToFloat(0xC200) == -3.0f);
  CHECK(f16ToFloat(0x7C00) == std::numeric_limits<float>::infinity());
  // Every non-NaN pattern round-trips.
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    float wide = f16ToFloat(static_cast<uint16_t>(bits));
    if (!std::isnan(wide))
      REQUIRE(floatToF16(wide) == bits);
  }
}

TEST_CASE("f16 narrowing agrees with double-precision rounding",
          "[dtype][f16]") {
  // Independent check over the normal range: the nearest half computed by
  // scanning neighbours in double, ties to the even encoding.
  for (uint32_t bits = 0x0400; bits < 0x7BFF; bits += 37) {
    double lo = f16ToFloat(static_cast<uint16_t>(bits));
    double hi = f16ToFloat(static_cast<uint16_t>(bits + 1));
    for (double t : {0.25, 0.5, 0.75}) {
      float x = static_cast<float>(lo + (hi - lo) * t);
      uint32_t expected = t < 0.5 ? bits : t > 0.5 ? bits + 1
                                  : ((bits & 1) ? bits + 1 : bits);
      REQUIRE(floatToF16(x) == expected);
    }
  }
}

TEST_CASE("roundTo", "[dtype]") {
  CHECK(roundTo(DType::F32, 1.0f + std::ldexp(1.0f, -20)) ==
        1.0f + std::ldexp(1.0f, -20));
  CHECK(roundTo(DType::BF16, 1.0f + std::ldexp(1.0f, -20)) == 1.0f);
  CHECK(roundTo(DType::F16, 1.0f + std::ldexp(1.0f, -20)) == 1.0f);
  CHECK(roundTo(DType::F16, 70000.0f) ==
        std::numeric_limits<float>::infinity());
  CHECK(roundTo(DType::I32, 2.5f) == 2.0f);
  CHECK(roundTo(DType::I32, 3.5f) == 4.0f);
  CHECK(roundTo(DType::I32, -1.75f) == -2.0f);
  CHECK(roundTo(DType::I32, 7.0f) == 7.0f);
}
