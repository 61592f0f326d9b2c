// Mask policies the compiler picks from the kernel's mask attribute. Each one
// answers, for query rows shifted by `shift` (Sk - Sq when the mask is aligned
// bottom-right, 0 when top-left):
//   keyBegin/keyEnd: the half-open key range any row in [qFirst, qLast] may see,
//                    so tiles outside it are never loaded;
//   coversTile:      whether every (q, k) pair of a tile is allowed, so the
//                    tile skips per-element masking;
//   allows:          the per-element predicate for the partial tiles.
// and, for the backward's walk over the query blocks of a key tile:
//   queryBegin/queryEnd: the half-open query range whose rows may see any key
//                    in [kFirst, kLast].
#pragma once

namespace attn_dev {

typedef long long i64;

__device__ __forceinline__ i64 maxI64(i64 a, i64 b) { return a > b ? a : b; }
__device__ __forceinline__ i64 minI64(i64 a, i64 b) { return a < b ? a : b; }

// How much of a tile a mask keeps. The order matters: the and of two
// coverages is their minimum, the or their maximum.
enum class Coverage { Empty = 0, Partial = 1, Full = 2 };

__device__ __forceinline__ Coverage coverageAnd(Coverage a, Coverage b) { return a < b ? a : b; }
__device__ __forceinline__ Coverage coverageOr(Coverage a, Coverage b) { return a > b ? a : b; }
__device__ __forceinline__ Coverage coverageNot(Coverage a) {
  return static_cast<Coverage>(2 - static_cast<int>(a));
}

// Bounds of a sum of parts over a tile (interval arithmetic).
struct Range {
  i64 low, high;
};
__device__ __forceinline__ Range operator+(Range a, Range b) {
  return Range{a.low + b.low, a.high + b.high};
}

// Range of base + q * qi + kv * ki over qi in [q0, q1], ki in [k0, k1]: an
// affine function is extreme at the corners.
__device__ __forceinline__ Range affineRange(i64 base, i64 q, i64 kv, i64 q0, i64 q1, i64 k0,
                                             i64 k1) {
  return Range{base + minI64(q * q0, q * q1) + minI64(kv * k0, kv * k1),
               base + maxI64(q * q0, q * q1) + maxI64(kv * k0, kv * k1)};
}

// floor(a / d) for d > 0.
template <typename T> __device__ __forceinline__ T floorByPositive(T a, T d) {
  return a >= 0 ? a / d : -((-a + d - 1) / d);
}

// Range of coef * floor((base + q * qi + kv * ki) / divisor) over the same
// box: floor is monotone, so the dividend's extremes give the term's.
__device__ __forceinline__ Range divTermRange(i64 coef, i64 base, i64 q, i64 kv, i64 divisor,
                                              i64 q0, i64 q1, i64 k0, i64 k1) {
  Range dividend = affineRange(base, q, kv, q0, q1, k0, k1);
  i64 low = floorByPositive(dividend.low, divisor), high = floorByPositive(dividend.high, divisor);
  return coef >= 0 ? Range{coef * low, coef * high} : Range{coef * high, coef * low};
}

// Coverage of `range >= 0`.
__device__ __forceinline__ Coverage rangeCoverage(Range range) {
  return range.low >= 0 ? Coverage::Full : (range.high < 0 ? Coverage::Empty : Coverage::Partial);
}

// Coverage of `base + q * qi + kv * ki >= 0` over the box.
__device__ __forceinline__ Coverage affineCoverage(i64 base, i64 q, i64 kv, i64 q0, i64 q1, i64 k0,
                                                   i64 k1) {
  return rangeCoverage(affineRange(base, q, kv, q0, q1, k0, k1));
}

// A thread's keys of a score tile, for one of its rows: two per 8-column
// group, key base + 8 j + e at bit 2 j + e (the WGMMA accumulator's column
// order; base is the tile's first key plus 2 (lane % 4)). A mask that keeps
// the keys on one side of a bound per row (the built-in masks, mask_mod
// formulas of affine inequalities) gives its per-pair tests of a partial
// tile as these bits, a few instructions per row: each pair then tests one
// bit instead of evaluating the mask.
template <bool Narrow> struct KeyBitsWord {
  typedef unsigned long long Type;
};
template <> struct KeyBitsWord<true> {
  typedef unsigned Type;
};
template <int BlockN> struct ThreadKeys {
  typedef typename KeyBitsWord<BlockN <= 128>::Type Bits;
  static constexpr int kBits = 8 * sizeof(Bits);
  int base;

  __device__ static Bits all() { return ~Bits(0); }
  __device__ static Bits none() { return Bits(0); }
  // The keys below base + offset: 2 per whole group of 8 before it, and up
  // to 2 of its own group.
  __device__ static Bits belowOffset(int offset) {
    offset = min(max(offset, 0), BlockN);
    const int count = 2 * (offset >> 3) + min(offset & 7, 2);
    return count >= kBits ? all() : (Bits(1) << count) - 1;
  }
  __device__ Bits below(i64 end) const {
    return belowOffset(static_cast<int>(minI64(maxI64(end - base, 0), BlockN)));
  }
  // For an `end` whose distance from any base fits in an int.
  __device__ Bits below(int end) const { return belowOffset(end - base); }
  // The keys with r + Kv * key >= 0, computed in Int: long long, or int
  // where the compiler proved r, the bound and its distance from any base
  // fit (affineBoundFits32).
  template <typename Int, Int Kv> __device__ Bits affine(Int r) const {
    if constexpr (Kv == 0)
      return r >= 0 ? all() : none();
    else if constexpr (Kv > 0)
      return ~below(-floorByPositive<Int>(r, Kv)); // key >= ceil(-r / Kv)
    else
      return below(floorByPositive<Int>(r, -Kv) + 1); // key <= floor(r / -Kv)
  }
};

// kWorkGrowsWithQuery: a later query block visits at least as many key
// tiles (the persistent schedule deals such tiles out longest first).
// kEveryQueryVisitsEveryKey: every work tile costs the same.
struct NoMask {
  static constexpr bool kWorkGrowsWithQuery = false;
  static constexpr bool kEveryQueryVisitsEveryKey = true;
  static __device__ __forceinline__ i64 keyBegin(i64, i64) { return 0; }
  static __device__ __forceinline__ i64 keyEnd(i64, i64, i64 seqlenK) { return seqlenK; }
  static __device__ __forceinline__ i64 queryBegin(i64, i64) { return 0; }
  static __device__ __forceinline__ i64 queryEnd(i64, i64, i64 seqlenQ) { return seqlenQ; }
  static __device__ __forceinline__ bool coversTile(i64, i64, i64, i64, i64) { return true; }
  static __device__ __forceinline__ bool allows(i64, i64, i64) { return true; }
  template <class Keys>
  static __device__ __forceinline__ typename Keys::Bits keptKeys(i64, i64, const Keys &keys) {
    return keys.all();
  }
};

// Keeps k <= q + shift.
struct CausalMask {
  static constexpr bool kWorkGrowsWithQuery = true;
  static constexpr bool kEveryQueryVisitsEveryKey = false;
  static __device__ __forceinline__ i64 keyBegin(i64, i64) { return 0; }
  static __device__ __forceinline__ i64 keyEnd(i64 qLast, i64 shift, i64 seqlenK) {
    return minI64(seqlenK, qLast + shift + 1);
  }
  static __device__ __forceinline__ i64 queryBegin(i64 kFirst, i64 shift) {
    return maxI64(0, kFirst - shift);
  }
  static __device__ __forceinline__ i64 queryEnd(i64, i64, i64 seqlenQ) { return seqlenQ; }
  static __device__ __forceinline__ bool coversTile(i64 qFirst, i64, i64, i64 kLast, i64 shift) {
    return kLast <= qFirst + shift;
  }
  static __device__ __forceinline__ bool allows(i64 q, i64 k, i64 shift) { return k <= q + shift; }
  template <class Keys>
  static __device__ __forceinline__ typename Keys::Bits keptKeys(i64 q, i64 shift,
                                                                 const Keys &keys) {
    return keys.below(q + shift + 1);
  }
};

// Keeps q + shift - Left <= k <= q + shift + Right.
template <i64 Left, i64 Right> struct SlidingWindowMask {
  static constexpr bool kWorkGrowsWithQuery = false;
  static constexpr bool kEveryQueryVisitsEveryKey = false;
  static __device__ __forceinline__ i64 keyBegin(i64 qFirst, i64 shift) {
    return maxI64(0, qFirst + shift - Left);
  }
  static __device__ __forceinline__ i64 keyEnd(i64 qLast, i64 shift, i64 seqlenK) {
    return minI64(seqlenK, qLast + shift + Right + 1);
  }
  static __device__ __forceinline__ i64 queryBegin(i64 kFirst, i64 shift) {
    return maxI64(0, kFirst - shift - Right);
  }
  static __device__ __forceinline__ i64 queryEnd(i64 kLast, i64 shift, i64 seqlenQ) {
    return minI64(seqlenQ, kLast - shift + Left + 1);
  }
  static __device__ __forceinline__ bool coversTile(i64 qFirst, i64 qLast, i64 kFirst, i64 kLast,
                                                    i64 shift) {
    return kFirst >= qLast + shift - Left && kLast <= qFirst + shift + Right;
  }
  static __device__ __forceinline__ bool allows(i64 q, i64 k, i64 shift) {
    return k >= q + shift - Left && k <= q + shift + Right;
  }
  template <class Keys>
  static __device__ __forceinline__ typename Keys::Bits keptKeys(i64 q, i64 shift,
                                                                 const Keys &keys) {
    return keys.below(q + shift + Right + 1) & ~keys.below(q + shift - Left);
  }
};

// The keys [begin, end) mask `Mask` keeps for row q, within [0, seqlenK]:
// each built-in mask keeps one run of keys a row, so this range and
// allows() agree on every key of the sequence.
struct KeyRange {
  i64 begin, end;
};
template <class Mask>
__device__ __forceinline__ KeyRange rowKeyRange(i64 q, i64 shift, i64 seqlenK) {
  const i64 begin = minI64(maxI64(Mask::keyBegin(q, shift), 0), seqlenK);
  return KeyRange{begin, maxI64(minI64(Mask::keyEnd(q, shift, seqlenK), seqlenK), begin)};
}

// The queries [begin, end) mask `Mask` keeps for key k, within [0, seqlenQ]:
// the transpose of rowKeyRange (each built-in mask keeps one run of queries
// a key), for the backward's fragments, whose rows are keys.
template <class Mask>
__device__ __forceinline__ KeyRange keyQueryRange(i64 k, i64 shift, i64 seqlenQ) {
  const i64 begin = minI64(maxI64(Mask::queryBegin(k, shift), 0), seqlenQ);
  return KeyRange{begin, maxI64(minI64(Mask::queryEnd(k, shift, seqlenQ), seqlenQ), begin)};
}

} // namespace attn_dev
