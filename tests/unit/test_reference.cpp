// Tests of the CPU reference attention. Each check compares against
// something computed another way: numbers worked out by hand, closed forms
// (means, logs), or a structurally different evaluation of the same maths.

#include "ReferenceTestTensors.h"
#include "attn/Reference/ReferenceAttention.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

using namespace attn::reference;
using namespace attn::reference::test;

namespace {

struct Output {
  std::vector<float> o, lse;
};

Output run(const Problem &p, const HostTensor &q, const HostTensor &k,
           const HostTensor &v) {
  Output out;
  // Poisoned so that unwritten elements show up.
  out.o.assign(static_cast<size_t>(p.batch * p.seqlenQ * p.qHeads * p.headDim),
               std::numeric_limits<float>::quiet_NaN());
  out.lse.assign(static_cast<size_t>(p.batch * p.qHeads * p.seqlenQ),
                 std::numeric_limits<float>::quiet_NaN());
  forward(p, q, k, v, out.o.data(), out.lse.data());
  return out;
}

Output run(const Problem &p, const Tensor &q, const Tensor &k,
           const Tensor &v) {
  return run(p, q.host(), k.host(), v.host());
}

float oAt(const Problem &p, const Output &out, int64_t b, int64_t s, int64_t h,
          int64_t d) {
  return out.o[static_cast<size_t>(((b * p.seqlenQ + s) * p.qHeads + h) *
                                       p.headDim +
                                   d)];
}

float lseAt(const Problem &p, const Output &out, int64_t b, int64_t h,
            int64_t s) {
  return out.lse[static_cast<size_t>((b * p.qHeads + h) * p.seqlenQ + s)];
}

std::vector<int64_t> allowedKeys(const MaskSpec &mask, int64_t q,
                                 int64_t seqlenQ, int64_t seqlenK) {
  std::vector<int64_t> keys;
  for (int64_t k = -2; k < seqlenK + 2; ++k) // Out-of-range keys included.
    if (maskAllows(mask, q, k, seqlenQ, seqlenK))
      keys.push_back(k);
  return keys;
}

using Keys = std::vector<int64_t>;

void requireSame(const Output &a, const Output &b, double eps = 1e-6) {
  REQUIRE(a.o.size() == b.o.size());
  REQUIRE(a.lse.size() == b.lse.size());
  for (size_t i = 0; i < a.o.size(); ++i)
    REQUIRE(a.o[i] == Approx(b.o[i]).epsilon(eps).margin(eps));
  for (size_t i = 0; i < a.lse.size(); ++i)
    REQUIRE(a.lse[i] == Approx(b.lse[i]).epsilon(eps).margin(eps));
}

/// The tiny 1-head problem that is worked out by hand below.
/// scale = ln 2; keys k0 = (0,0), k1 = (1,0), k2 = (0,1); values
/// v0 = (7,0), v1 = (0,7), v2 = (7,14); queries q0 = (1,2), q1 = (0,0).
struct TinyCase {
  Tensor q{1, 2, 1, 2}, k{1, 3, 1, 2}, v{1, 3, 1, 2};
  TinyCase() {
    q.data = {1, 2, 0, 0};
    k.data = {0, 0, 1, 0, 0, 1};
    v.data = {7, 0, 0, 7, 7, 14};
  }
  Problem problem(MaskSpec mask = {}) const {
    return makeProblem(1, 2, 3, 1, 1, 2, std::log(2.0), mask);
  }
};

} // namespace

TEST_CASE("hand-computed tiny case", "[reference]") {
  TinyCase tiny;
  Problem p = tiny.problem();
  Output out = run(p, tiny.q, tiny.k, tiny.v);
  // q0: scores (0, 1, 2) * ln2 -> exp = 1, 2, 4; sum 7.
  //   o = (1*7 + 2*0 + 4*7, 1*0 + 2*7 + 4*14) / 7 = (5, 10); lse = ln 7.
  CHECK(oAt(p, out, 0, 0, 0, 0) == Approx(5.0));
  CHECK(oAt(p, out, 0, 0, 0, 1) == Approx(10.0));
  CHECK(lseAt(p, out, 0, 0, 0) == Approx(std::log(7.0)));
  // q1: all scores 0 -> the mean of V = (14/3, 21/3); lse = ln 3.
  CHECK(oAt(p, out, 0, 1, 0, 0) == Approx(14.0 / 3.0));
  CHECK(oAt(p, out, 0, 1, 0, 1) == Approx(7.0));
  CHECK(lseAt(p, out, 0, 0, 1) == Approx(std::log(3.0)));
}

TEST_CASE("hand-computed tiny case with causal masks", "[reference][mask]") {
  TinyCase tiny;
  SECTION("top-left: q0 sees {k0}, q1 sees {k0, k1}") {
    MaskSpec mask{MaskKind::Causal, MaskAlignment::TopLeft};
    Problem p = tiny.problem(mask);
    Output out = run(p, tiny.q, tiny.k, tiny.v);
    // q0: only k0 (score 0): o = v0 = (7, 0), lse = 0.
    CHECK(oAt(p, out, 0, 0, 0, 0) == Approx(7.0));
    CHECK(oAt(p, out, 0, 0, 0, 1) == Approx(0.0).margin(1e-6));
    CHECK(lseAt(p, out, 0, 0, 0) == Approx(0.0).margin(1e-6));
    // q1: k0, k1 with scores 0, 0: o = (3.5, 3.5), lse = ln 2.
    CHECK(oAt(p, out, 0, 1, 0, 0) == Approx(3.5));
    CHECK(oAt(p, out, 0, 1, 0, 1) == Approx(3.5));
    CHECK(lseAt(p, out, 0, 0, 1) == Approx(std::log(2.0)));
  }
  SECTION("bottom-right: q0 sees {k0, k1}, q1 sees all") {
    MaskSpec mask{MaskKind::Causal, MaskAlignment::BottomRight};
    Problem p = tiny.problem(mask);
    Output out = run(p, tiny.q, tiny.k, tiny.v);
    // q0: scores 0, ln2 -> weights 1/3, 2/3: o = (7/3, 14/3), lse = ln 3.
    CHECK(oAt(p, out, 0, 0, 0, 0) == Approx(7.0 / 3.0));
    CHECK(oAt(p, out, 0, 0, 0, 1) == Approx(14.0 / 3.0));
    CHECK(lseAt(p, out, 0, 0, 0) == Approx(std::log(3.0)));
    // q1: unmasked result.
    CHECK(oAt(p, out, 0, 1, 0, 0) == Approx(14.0 / 3.0));
    CHECK(oAt(p, out, 0, 1, 0, 1) == Approx(7.0));
    CHECK(lseAt(p, out, 0, 0, 1) == Approx(std::log(3.0)));
  }
}

TEST_CASE("uniform scores give the mean of V", "[reference]") {
  // q = 0 makes every score 0, so every row is the plain mean of V.
  const int64_t sk = 37, d = 24;
  Tensor q(2, 5, 3, d);
  Tensor k = randomTensor(2, sk, 3, d, 1);
  Tensor v = randomTensor(2, sk, 3, d, 2);
  Problem p = makeProblem(2, 5, sk, 3, 3, d, 0.125);
  Output out = run(p, q, k, v);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t s = 0; s < 5; ++s) {
        REQUIRE(lseAt(p, out, b, h, s) == Approx(std::log(double(sk))));
        for (int64_t i = 0; i < d; ++i) {
          double mean = 0;
          for (int64_t key = 0; key < sk; ++key)
            mean += v.at(b, key, h, i);
          mean /= sk;
          REQUIRE(oAt(p, out, b, s, h, i) == Approx(mean).margin(1e-6));
        }
      }
}

TEST_CASE("causal mask alignment", "[reference][mask]") {
  MaskSpec topLeft{MaskKind::Causal, MaskAlignment::TopLeft};
  MaskSpec bottomRight{MaskKind::Causal, MaskAlignment::BottomRight};

  // Fewer queries than keys (Sq = 2, Sk = 4): bottom-right shifts by 2.
  CHECK(allowedKeys(topLeft, 0, 2, 4) == Keys{0});
  CHECK(allowedKeys(topLeft, 1, 2, 4) == Keys{0, 1});
  CHECK(allowedKeys(bottomRight, 0, 2, 4) == Keys{0, 1, 2});
  CHECK(allowedKeys(bottomRight, 1, 2, 4) == Keys{0, 1, 2, 3});

  // More queries than keys (Sq = 4, Sk = 2): bottom-right shifts by -2, so
  // the first two rows see nothing.
  CHECK(allowedKeys(topLeft, 0, 4, 2) == Keys{0});
  CHECK(allowedKeys(topLeft, 1, 4, 2) == Keys{0, 1});
  CHECK(allowedKeys(topLeft, 3, 4, 2) == Keys{0, 1});
  CHECK(allowedKeys(bottomRight, 0, 4, 2).empty());
  CHECK(allowedKeys(bottomRight, 1, 4, 2).empty());
  CHECK(allowedKeys(bottomRight, 2, 4, 2) == Keys{0});
  CHECK(allowedKeys(bottomRight, 3, 4, 2) == Keys{0, 1});

  // Square: both alignments agree.
  for (int64_t q = 0; q < 5; ++q)
    CHECK(allowedKeys(topLeft, q, 5, 5) == allowedKeys(bottomRight, q, 5, 5));

  MaskSpec none;
  CHECK(allowedKeys(none, 1, 2, 3) == Keys{0, 1, 2});
}

TEST_CASE("sliding window mask", "[reference][mask]") {
  MaskSpec window{MaskKind::SlidingWindow, MaskAlignment::TopLeft, 2, 1};
  CHECK(allowedKeys(window, 0, 6, 6) == Keys{0, 1});
  CHECK(allowedKeys(window, 3, 6, 6) == Keys{1, 2, 3, 4});
  CHECK(allowedKeys(window, 5, 6, 6) == Keys{3, 4, 5});

  // Bottom-right with Sq = 3, Sk = 6: shift 3, so q0 is centred on k3.
  window.alignment = MaskAlignment::BottomRight;
  CHECK(allowedKeys(window, 0, 3, 6) == Keys{1, 2, 3, 4});
  CHECK(allowedKeys(window, 2, 3, 6) == Keys{3, 4, 5});

  // A zero-width window is the diagonal.
  MaskSpec diagonal{MaskKind::SlidingWindow, MaskAlignment::TopLeft, 0, 0};
  CHECK(allowedKeys(diagonal, 2, 4, 4) == Keys{2});
  CHECK(allowedKeys(diagonal, 3, 4, 2).empty());

  // Huge windows must not overflow.
  MaskSpec unbounded{MaskKind::SlidingWindow, MaskAlignment::TopLeft,
                     std::numeric_limits<int64_t>::max(),
                     std::numeric_limits<int64_t>::max()};
  CHECK(allowedKeys(unbounded, 1, 3, 3) == Keys{0, 1, 2});
  // Left-unbounded, right 0: causal.
  MaskSpec causalLike{MaskKind::SlidingWindow, MaskAlignment::TopLeft,
                      std::numeric_limits<int64_t>::max(), 0};
  MaskSpec causal{MaskKind::Causal, MaskAlignment::TopLeft};
  for (int64_t q = 0; q < 4; ++q)
    CHECK(allowedKeys(causalLike, q, 4, 7) == allowedKeys(causal, q, 4, 7));
}

TEST_CASE("fully masked rows give zero and -inf", "[reference][mask]") {
  // Causal bottom-right with Sq = 4 > Sk = 2: rows 0 and 1 see no key.
  MaskSpec mask{MaskKind::Causal, MaskAlignment::BottomRight};
  Tensor q = randomTensor(1, 4, 2, 8, 3);
  Tensor k = randomTensor(1, 2, 2, 8, 4);
  Tensor v = randomTensor(1, 2, 2, 8, 5);
  Problem p = makeProblem(1, 4, 2, 2, 2, 8, 0.5, mask);
  Output out = run(p, q, k, v);
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t s = 0; s < 2; ++s) {
      CHECK(lseAt(p, out, 0, h, s) == -std::numeric_limits<float>::infinity());
      for (int64_t i = 0; i < 8; ++i)
        CHECK(oAt(p, out, 0, s, h, i) == 0.0f);
    }
    // Row 2 sees only k0, so it copies v0 with lse = score.
    double score = 0;
    for (int64_t i = 0; i < 8; ++i)
      score += double(q.at(0, 2, h, i)) * k.at(0, 0, h, i);
    CHECK(lseAt(p, out, 0, h, 2) == Approx(0.5 * score).margin(1e-6));
    for (int64_t i = 0; i < 8; ++i)
      CHECK(oAt(p, out, 0, 2, h, i) == Approx(v.at(0, 0, h, i)));
    CHECK(std::isfinite(lseAt(p, out, 0, h, 3)));
  }

  SECTION("no keys at all") {
    Problem empty = makeProblem(1, 3, 0, 2, 2, 8);
    Output none = run(empty, q.host(), HostTensor{nullptr, {0, 0, 0, 1}},
                      HostTensor{nullptr, {0, 0, 0, 1}});
    for (float x : none.o)
      CHECK(x == 0.0f);
    for (float x : none.lse)
      CHECK(x == -std::numeric_limits<float>::infinity());
  }
}

TEST_CASE("masked rows equal unmasked attention over the allowed keys",
          "[reference][mask]") {
  // Every mask used here allows a contiguous key range, so each row must
  // match an unmasked problem over just that slice of K and V.
  const int64_t sq = 7, sk = 11, d = 16;
  Tensor q = randomTensor(1, sq, 1, d, 10);
  Tensor k = randomTensor(1, sk, 1, d, 11);
  Tensor v = randomTensor(1, sk, 1, d, 12);
  const MaskSpec masks[] = {
      {MaskKind::Causal, MaskAlignment::TopLeft, 0, 0},
      {MaskKind::Causal, MaskAlignment::BottomRight, 0, 0},
      {MaskKind::SlidingWindow, MaskAlignment::TopLeft, 3, 2},
      {MaskKind::SlidingWindow, MaskAlignment::BottomRight, 1, 0},
  };
  for (const MaskSpec &mask : masks) {
    Problem p = makeProblem(1, sq, sk, 1, 1, d, 0.3, mask);
    Output out = run(p, q, k, v);
    for (int64_t row = 0; row < sq; ++row) {
      Keys keys = allowedKeys(mask, row, sq, sk);
      REQUIRE(!keys.empty());
      const int64_t first = keys.front(), count = int64_t(keys.size());
      REQUIRE(keys.back() == first + count - 1); // Contiguous.
      // One query, `count` keys starting at `first`: point into the slice.
      Problem slice = makeProblem(1, 1, count, 1, 1, d, 0.3);
      HostTensor qs{&q.at(0, row, 0, 0), {sq * d, d, d, 1}};
      HostTensor ks{&k.at(0, first, 0, 0), {sk * d, d, d, 1}};
      HostTensor vs{&v.at(0, first, 0, 0), {sk * d, d, d, 1}};
      Output ref = run(slice, qs, ks, vs);
      for (int64_t i = 0; i < d; ++i)
        REQUIRE(oAt(p, out, 0, row, 0, i) == Approx(ref.o[size_t(i)]));
      REQUIRE(lseAt(p, out, 0, 0, row) == Approx(ref.lse[0]));
    }
  }
}

TEST_CASE("GQA equals MHA with duplicated K/V heads", "[reference][gqa]") {
  const int64_t b = 2, sq = 9, sk = 13, hq = 6, hkv = 2, d = 8;
  MaskSpec mask{MaskKind::Causal, MaskAlignment::BottomRight};
  Problem pGqa = makeProblem(b, sq, sk, hq, hkv, d, 0.35, mask);
  Problem pMha = makeProblem(b, sq, sk, hq, hq, d, 0.35, mask);
  auto [q, k, v] = randomForwardInputs(pGqa, 20);
  // Query head h reads kv head h / 3: heads 0-2 -> 0, 3-5 -> 1.
  Tensor kFull = repeatKvHeads(k, hq), vFull = repeatKvHeads(v, hq);
  Output gqa = run(pGqa, q, k, v);
  Output mha = run(pMha, q, kFull, vFull);
  requireSame(gqa, mha, 0.0); // Same arithmetic: bit-identical.

  // Wrong grouping (kv head h % hkv) must differ: the test can fail.
  Tensor kWrong(b, sk, hq, d);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t s = 0; s < sk; ++s)
      for (int64_t h = 0; h < hq; ++h)
        for (int64_t i = 0; i < d; ++i)
          kWrong.at(bi, s, h, i) = k.at(bi, s, h % hkv, i);
  Output wrong = run(pMha, q, kWrong, vFull);
  CHECK(wrong.lse != gqa.lse);
}

TEST_CASE("strided inputs equal contiguous inputs", "[reference]") {
  const int64_t b = 2, sq = 6, sk = 10, h = 3, d = 12;
  Problem p = makeProblem(b, sq, sk, h, h, d, 0.25,
                          {MaskKind::SlidingWindow, MaskAlignment::TopLeft, 4,
                           2});
  auto [q, k, v] = randomForwardInputs(p, 30);
  Output contiguous = run(p, q, k, v);

  SECTION("BHSD physical layout with padding") {
    // Stored as [b][h][s][d + 3 pad], described through BSHD strides.
    std::vector<float> qs, ks, vs;
    Output strided =
        run(p, paddedBhsd(q, qs), paddedBhsd(k, ks), paddedBhsd(v, vs));
    requireSame(contiguous, strided, 0.0);
  }
  SECTION("non-unit head_dim stride") {
    // Every element followed by a junk element: stride 2 along head_dim.
    std::vector<float> qs, ks, vs;
    Output strided = run(p, spreadHeadDim(q, qs), spreadHeadDim(k, ks),
                         spreadHeadDim(v, vs));
    // The strided dot product sums in another order: tiny differences.
    requireSame(contiguous, strided, 1e-6);
  }
}

TEST_CASE("softmax is invariant to a per-row score shift", "[reference]") {
  // Adding the same vector u to every key adds q.u to every score of a row:
  // o must not change, lse must grow by scale * q.u.
  const int64_t sq = 5, sk = 9, d = 6;
  const double scale = 0.7;
  Tensor q = randomTensor(1, sq, 1, d, 40);
  Tensor k = randomTensor(1, sk, 1, d, 41);
  Tensor v = randomTensor(1, sk, 1, d, 42);
  const float u[d] = {3.0f, -2.0f, 5.0f, 0.5f, 8.0f, -4.0f};
  Tensor kShifted = k;
  for (int64_t s = 0; s < sk; ++s)
    for (int64_t i = 0; i < d; ++i)
      kShifted.at(0, s, 0, i) += u[i];
  Problem p = makeProblem(1, sq, sk, 1, 1, d, scale);
  Output base = run(p, q, k, v);
  Output shifted = run(p, q, kShifted, v);
  for (int64_t s = 0; s < sq; ++s) {
    double qu = 0;
    for (int64_t i = 0; i < d; ++i)
      qu += double(q.at(0, s, 0, i)) * u[i];
    CHECK(lseAt(p, shifted, 0, 0, s) ==
          Approx(lseAt(p, base, 0, 0, s) + scale * qu).epsilon(1e-5));
    for (int64_t i = 0; i < d; ++i)
      CHECK(oAt(p, shifted, 0, s, 0, i) ==
            Approx(oAt(p, base, 0, s, 0, i)).epsilon(1e-4).margin(1e-5));
  }
}

TEST_CASE("large scores do not overflow", "[reference]") {
  // Scores around 1e4 overflow exp() unless the row maximum is subtracted.
  Tensor q(1, 1, 1, 1), k(1, 2, 1, 1), v(1, 2, 1, 1);
  q.data = {100.0f};
  k.data = {100.0f, 99.99f}; // Scores 10000 and 9999 (scale 1).
  v.data = {1.0f, 0.0f};
  Problem p = makeProblem(1, 1, 2, 1, 1, 1);
  Output out = run(p, q, k, v);
  // Exact scores in double: s0 = 10000, s1 = 100 * float(99.99).
  const double s0 = 10000.0, s1 = 100.0 * double(99.99f);
  const double w0 = 1.0 / (1.0 + std::exp(s1 - s0));
  CHECK(out.o[0] == Approx(w0));
  CHECK(out.lse[0] == Approx(s0 + std::log1p(std::exp(s1 - s0))));
}

TEST_CASE("scale multiplies the scores", "[reference]") {
  Tensor q = randomTensor(1, 4, 2, 8, 50);
  Tensor k = randomTensor(1, 6, 2, 8, 51);
  Tensor v = randomTensor(1, 6, 2, 8, 52);
  Tensor q2 = q;
  for (float &x : q2.data)
    x *= 2.0f; // Exact in binary floating point.
  Output scaled = run(makeProblem(1, 4, 6, 2, 2, 8, 0.6), q, k, v);
  Output doubledQ = run(makeProblem(1, 4, 6, 2, 2, 8, 0.3), q2, k, v);
  requireSame(scaled, doubledQ, 1e-6);
}

TEST_CASE("multi-threaded run matches a naive oracle", "[reference]") {
  // Large enough to use several threads; the oracle below is the textbook
  // formula without the max shift (safe here: |scores| < 10).
  const int64_t b = 1, sq = 257, sk = 300, hq = 4, hkv = 2, d = 32;
  const double scale = 1.0 / std::sqrt(double(d));
  MaskSpec mask{MaskKind::Causal, MaskAlignment::BottomRight};
  Problem p = makeProblem(b, sq, sk, hq, hkv, d, scale, mask);
  auto [q, k, v] = randomForwardInputs(p, 60);
  Output out = run(p, q, k, v);
  for (int64_t h = 0; h < hq; ++h)
    for (int64_t s = 0; s < sq; s += 8) {
      double denominator = 0;
      std::vector<double> numerator(size_t(d), 0.0);
      for (int64_t key = 0; key < sk; ++key) {
        if (key > s + (sk - sq))
          continue; // Bottom-right causal written out directly.
        double score = 0;
        for (int64_t i = 0; i < d; ++i)
          score += double(q.at(0, s, h, i)) * k.at(0, key, h / 2, i);
        double e = std::exp(scale * score);
        denominator += e;
        for (int64_t i = 0; i < d; ++i)
          numerator[size_t(i)] += e * v.at(0, key, h / 2, i);
      }
      REQUIRE(lseAt(p, out, 0, h, s) == Approx(std::log(denominator)));
      for (int64_t i = 0; i < d; ++i)
        REQUIRE(oAt(p, out, 0, s, h, i) ==
                Approx(numerator[size_t(i)] / denominator).margin(1e-6));
    }
}

TEST_CASE("inconsistent problems are rejected", "[reference]") {
  Tensor q = randomTensor(1, 2, 4, 8, 70);
  Tensor kv = randomTensor(1, 3, 3, 8, 71);
  std::vector<float> o(64), lse(8);
  auto call = [&](const Problem &p) {
    forward(p, q.host(), kv.host(), kv.host(), o.data(), lse.data());
  };
  CHECK_THROWS_AS(call(makeProblem(1, 2, 3, 4, 3, 8)), std::invalid_argument);
  CHECK_THROWS_AS(call(makeProblem(1, -1, 3, 4, 4, 8)), std::invalid_argument);
  CHECK_THROWS_AS(call(makeProblem(1, 2, 3, 0, 1, 8)), std::invalid_argument);
  CHECK_THROWS_AS(call(makeProblem(1, 2, 3, 4, 0, 8)), std::invalid_argument);
  CHECK_THROWS_AS(call(makeProblem(1, 2, 3, 4, 4, 0)), std::invalid_argument);
  CHECK_THROWS_AS(call(makeProblem(1, 2, 3, 4, 4, 8, std::nan(""))),
                  std::invalid_argument);
  CHECK_THROWS_AS(forward(makeProblem(1, 2, 3, 4, 4, 8), q.host(), kv.host(),
                          kv.host(), nullptr, lse.data()),
                  std::invalid_argument);
  CHECK_THROWS_AS(forward(makeProblem(1, 2, 3, 4, 4, 8),
                          HostTensor{nullptr, {0, 0, 0, 1}}, kv.host(),
                          kv.host(), o.data(), lse.data()),
                  std::invalid_argument);
  // Empty batches are fine and write nothing.
  CHECK_NOTHROW(forward(makeProblem(0, 2, 3, 4, 4, 8), q.host(), kv.host(),
                        kv.host(), nullptr, nullptr));
}
