// Order-independent sums of float values, shared by the backward's kernels
// (capture gradients) and the host tests. NVRTC compiles it without any
// system header, so it uses builtin types only.
//
// A sum is a fixed-point number with kExactFractionBits fraction bits, held
// in a record of kExactSumWords int64 words: word 0 adds the fraction's low
// 32 bits, word 1 its high 32 bits, word 2 the integer part, and word 3
// counts the values that could not be added (NaN, infinity, |v| >= 2^63).
// Each value is cut exactly into those parts and each part added with an
// integer addition, which is associative: the record, and so the float read
// from it, is the same bits whatever order the values arrive in. Words 0
// and 1 take parts below 2^32, so 2^31 additions cannot overflow them.
// Parts of a value below 2^-64 are dropped (rounded toward zero).
#ifndef ATTN_TEMPLATES_EXACT_SUM_H
#define ATTN_TEMPLATES_EXACT_SUM_H

#if defined(__CUDACC__)
#define ATTN_EXACT_FN __host__ __device__ __forceinline__
#else
#define ATTN_EXACT_FN inline
#endif

namespace attn_exact {

constexpr int kExactFractionBits = 64;
constexpr int kExactSumWords = 4;

// The additions one value makes to a record's words (each may be 0).
struct ExactParts {
  long long words[kExactSumWords];
};

ATTN_EXACT_FN float quietNan() {
#if defined(__CUDACC__)
  return __int_as_float(0x7fffffff);
#else
  return __builtin_nanf("");
#endif
}

// The parts are cut with float operations that are all exact: the integer
// part by truncation (|value| < 2^63 fits int64), the fraction as value -
// integer, scaled by 2^64 (a power of two) and truncated to an integer,
// which drops only the bits below 2^-64.
ATTN_EXACT_FN ExactParts exactPartsOf(float value) {
  ExactParts parts = {{0, 0, 0, 0}};
  const float magnitude = value < 0.f ? -value : value;
  if (!(magnitude < 0x1p63f)) { // also NaN
    parts.words[3] = 1;
    return parts;
  }
  const float whole = static_cast<float>(static_cast<long long>(magnitude));
  const unsigned long long fraction =
      static_cast<unsigned long long>((magnitude - whole) * 0x1p64f);
  long long low = static_cast<long long>(fraction & 0xffffffffu);
  long long high = static_cast<long long>(fraction >> 32);
  long long integer = static_cast<long long>(whole);
  if (value < 0.f) {
    low = -low;
    high = -high;
    integer = -integer;
  }
  parts.words[0] = low;
  parts.words[1] = high;
  parts.words[2] = integer;
  return parts;
}

// The record's sum as a float: the words' carries are propagated exactly,
// then the value is rounded once through double (53 bits, far more than
// the float keeps). NaN if a value could not be added.
ATTN_EXACT_FN float exactSumValue(const long long (&words)[kExactSumWords]) {
  if (words[3] != 0)
    return quietNan();
  const long long low = words[0] & 0xffffffffll;
  const long long carryLow = words[0] >> 32; // arithmetic: floor division
  const long long middleSum = words[1] + carryLow;
  const long long middle = middleSum & 0xffffffffll;
  const long long whole = words[2] + (middleSum >> 32);
  const double fraction = (static_cast<double>(middle) + static_cast<double>(low) * 0x1p-32) *
                          0x1p-32;
  return static_cast<float>(static_cast<double>(whole) + fraction);
}

} // namespace attn_exact

#endif // ATTN_TEMPLATES_EXACT_SUM_H
