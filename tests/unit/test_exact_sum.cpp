//===- test_exact_sum.cpp - Order-independent sums (exact_sum.h) ----------===//
//
// The arithmetic the backward's exact capture gradients run on the GPU,
// compiled for the host: a value's parts are exact, sums of them do not
// depend on the order, and the float read back is the sum of the values.

#include "exact_sum.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace attn_exact;

namespace {

struct Record {
  long long words[kExactSumWords] = {0, 0, 0, 0};

  void add(float value) {
    const ExactPart part = exactPartOf(value);
    // The GPU adds with a 64-bit atomic, which wraps: add the same way.
    words[part.word] = static_cast<long long>(static_cast<unsigned long long>(words[part.word]) +
                                              static_cast<unsigned long long>(part.amount));
  }
  float value() const { return exactSumValue(words); }
};

float sumOf(const std::vector<float> &values) {
  Record record;
  for (float value : values)
    record.add(value);
  return record.value();
}

uint32_t bitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

/// A value's part as the number it adds, in long double (64-bit mantissa).
long double partValue(float value) {
  const ExactPart part = exactPartOf(value);
  return std::ldexp(static_cast<long double>(part.amount),
                    kExactWindowBits * part.word - kExactFractionBits);
}

} // namespace

TEST_CASE("exact sums: hand-computed cases", "[exact_sum]") {
  CHECK(sumOf({}) == 0.f);
  CHECK(sumOf({0.5f, 0.25f, -0.75f}) == 0.f);
  CHECK(sumOf({3.f, 0x1p-60f}) == 3.f); // below a float's precision of 3
  CHECK(sumOf({0x1p-60f, 0x1p-60f}) == 0x1p-59f);
  CHECK(sumOf({1e18f, 1.f, -1e18f}) == 1.f); // no cancellation loss
  CHECK(sumOf({-2.5f, -0.125f}) == -2.625f);
  CHECK(sumOf({0x1p62f, -0x1p62f, 7.f}) == 7.f);
  // Below 2^-64 a value is dropped, toward zero.
  CHECK(sumOf({0x1p-65f}) == 0.f);
  CHECK(sumOf({0x1.8p-64f}) == 0x1p-64f);
  CHECK(sumOf({std::numeric_limits<float>::denorm_min()}) == 0.f);
}

TEST_CASE("exact sums: a value's part is the value", "[exact_sum]") {
  for (float value : {1.f, -1.f, 0.1f, -0.1f, 1.5e-10f, 123456.789f, -0x1.fffffep62f,
                      0x1p-64f, 3.3e-3f, -7.25e9f}) {
    INFO("value " << value);
    CHECK(partValue(value) == static_cast<long double>(value));
    // One integer below 2^31 into a word that holds values, not the count.
    const ExactPart part = exactPartOf(value);
    CHECK(part.word >= 0);
    CHECK(part.word < kExactPoisonWord);
    CHECK(std::llabs(part.amount) < (1ll << 31));
    CHECK(sumOf({value}) == value);
  }
}

TEST_CASE("exact sums: what cannot be added makes the sum NaN", "[exact_sum]") {
  CHECK(std::isnan(sumOf({1.f, std::numeric_limits<float>::quiet_NaN()})));
  CHECK(std::isnan(sumOf({std::numeric_limits<float>::infinity(), 1.f})));
  CHECK(std::isnan(sumOf({0x1p63f})));
  CHECK_FALSE(std::isnan(sumOf({0x1.fffffep62f})));
}

TEST_CASE("exact sums: the same bits in every order, and the true sum", "[exact_sum]") {
  std::mt19937 random(20261127);
  std::uniform_real_distribution<float> mantissa(-1.f, 1.f);
  std::uniform_int_distribution<int> exponent(-40, 20);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> values(2000);
    for (float &value : values)
      value = std::ldexp(mantissa(random), exponent(random));
    long double exact = 0;
    for (float value : values)
      exact += static_cast<long double>(value); // error far below the float's
    const float first = sumOf(values);
    INFO("trial " << trial);
    // Rounded once from the exact sum: within half a float ulp (plus the
    // long double reference's own error).
    const long double ulp = std::ldexp(1.0L, std::ilogb(static_cast<float>(exact)) - 23);
    CHECK(std::fabs(static_cast<long double>(first) - exact) <= 0.5001L * ulp);
    for (int order = 0; order < 5; ++order) {
      std::shuffle(values.begin(), values.end(), random);
      CHECK(bitsOf(sumOf(values)) == bitsOf(first));
    }
  }
}

TEST_CASE("exact sums: float addition depends on the order, the record does not",
          "[exact_sum]") {
  // The reason for the records: the same three values summed in float give
  // different bits in two orders.
  const std::vector<float> values = {1e8f, 1.f, -1e8f};
  float leftToRight = (values[0] + values[1]) + values[2];
  float otherOrder = (values[0] + values[2]) + values[1];
  CHECK(leftToRight != otherOrder);
  CHECK(sumOf(values) == 1.f);
  CHECK(sumOf({values[2], values[1], values[0]}) == 1.f);
}
