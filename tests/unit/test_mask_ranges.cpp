// The built-in masks' per-row key ranges (rowKeyRange, which the
// short-query kernel tests keys against) keep exactly the keys allows()
// keeps, for every row, key and shift of small sequences. The device
// header compiles as host C++ here.
#include <algorithm>
#include <catch2/catch.hpp>

#define __device__
#define __forceinline__ inline
using std::max;
using std::min;
#include "device/masks.cuh"

namespace {

template <class Mask> void checkRanges() {
  using attn_dev::i64;
  for (i64 seqlenK : {0, 1, 7, 20})
    for (i64 shift = -8; shift <= 8; ++shift)
      for (i64 q = 0; q < 12; ++q) {
        const attn_dev::KeyRange range = attn_dev::rowKeyRange<Mask>(q, shift, seqlenK);
        REQUIRE(range.begin >= 0);
        REQUIRE(range.begin <= range.end);
        REQUIRE(range.end <= seqlenK);
        for (i64 k = 0; k < seqlenK; ++k) {
          INFO("q=" << q << " k=" << k << " shift=" << shift << " Sk=" << seqlenK);
          CHECK((k >= range.begin && k < range.end) == Mask::allows(q, k, shift));
        }
      }
}

} // namespace

TEST_CASE("each built-in mask keeps one run of keys a row", "[masks]") {
  checkRanges<attn_dev::NoMask>();
  checkRanges<attn_dev::CausalMask>();
  checkRanges<attn_dev::SlidingWindowMask<3, 2>>();
  checkRanges<attn_dev::SlidingWindowMask<0, 5>>();
  checkRanges<attn_dev::SlidingWindowMask<100, 0>>();
}
