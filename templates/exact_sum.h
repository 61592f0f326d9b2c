// Order-independent sums of float values, shared by the backward's kernels
// (capture gradients) and the host tests. NVRTC compiles it without any
// system header, so it uses builtin types only.
//
// A sum is a fixed-point number with kExactFractionBits fraction bits, held
// in a record of kExactSumWords int64 words. A float's 24 significant bits
// start at some bit s of the fixed-point number; word k adds values whose s
// lies in [8k, 8k + 8), shifted by s - 8k, so every value is one integer
// below 2^31 added to one word: exact, and integer addition does not depend
// on the order, so the record, and the float read from it, is the same
// bits whatever order the values arrive in. A word takes 2^31 additions
// without overflow. The last word counts the values that could not be added
// (NaN, infinity, |v| >= 2^63). Bits of a value below 2^-64 are dropped
// (rounded toward zero).
#ifndef ATTN_TEMPLATES_EXACT_SUM_H
#define ATTN_TEMPLATES_EXACT_SUM_H

#if defined(__CUDACC__)
#define ATTN_EXACT_FN __host__ __device__ __forceinline__
#else
#define ATTN_EXACT_FN inline
#endif

namespace attn_exact {

constexpr int kExactFractionBits = 64;
constexpr int kExactWindowBits = 8;
constexpr int kExactSumWords = 16;
constexpr int kExactPoisonWord = kExactSumWords - 1;

// Where word `word` of element `element` lies among the records of
// `elements` elements: word-major, so that additions of one window into
// neighbouring elements (a relative-position table's diagonals, summed by
// one warp instruction) fall on one cache line instead of one line each.
ATTN_EXACT_FN long long exactWordOffset(int word, long long element, long long elements) {
  return static_cast<long long>(word) * elements + element;
}

// One value's addition: `amount` into word `word` (amount 0: nothing).
struct ExactPart {
  int word;
  long long amount;
};

ATTN_EXACT_FN unsigned floatBits(float value) {
#if defined(__CUDACC__)
  return __float_as_uint(value);
#else
  return __builtin_bit_cast(unsigned, value);
#endif
}

ATTN_EXACT_FN ExactPart exactPartOf(float value) {
  const unsigned bits = floatBits(value);
  const int biased = static_cast<int>((bits >> 23) & 0xffu);
  // 0x5f000000 is 2^63: larger magnitudes, infinity and NaN.
  if ((bits & 0x7fffffffu) >= 0x5f000000u)
    return ExactPart{kExactPoisonWord, 1};
  // |value| = significand * 2^(start - kExactFractionBits): start is the
  // bit of the fixed-point number where the significand's lowest bit lies.
  long long significand = bits & 0x7fffffu;
  int start = 1 - 150 + kExactFractionBits; // subnormal: the least exponent
  if (biased != 0) {
    significand |= 0x800000;
    start = biased - 150 + kExactFractionBits;
  }
  if (start < 0) {
    significand = start > -24 ? significand >> -start : 0;
    start = 0;
  }
  const long long amount = significand << (start % kExactWindowBits);
  return ExactPart{start / kExactWindowBits, (bits >> 31) ? -amount : amount};
}

ATTN_EXACT_FN float quietNan() {
#if defined(__CUDACC__)
  return __int_as_float(0x7fffffff);
#else
  return __builtin_nanf("");
#endif
}

// The record's sum as a float. The words are first carried into 8-bit
// digits (exactly, in integers), then read top down in double, whose 53
// bits hold far more than the float keeps; the result is rounded to float
// once more. NaN if a value could not be added.
ATTN_EXACT_FN float exactSumValue(const long long (&words)[kExactSumWords]) {
  if (words[kExactPoisonWord] != 0)
    return quietNan();
  unsigned digits[kExactPoisonWord];
  long long carry = 0;
  for (int word = 0; word < kExactPoisonWord; ++word) {
    const long long total = words[word] + carry;
    digits[word] = static_cast<unsigned>(total & 0xff);
    carry = total >> kExactWindowBits; // arithmetic: floor division
  }
  double value = static_cast<double>(carry);
  for (int word = kExactPoisonWord - 1; word >= 0; --word)
    value = value * 256.0 + static_cast<double>(digits[word]);
  return static_cast<float>(value * 0x1p-64);
}

} // namespace attn_exact

#endif // ATTN_TEMPLATES_EXACT_SUM_H
