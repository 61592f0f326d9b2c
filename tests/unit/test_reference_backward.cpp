// Tests of the CPU reference attention backward. Each check compares against
// something computed another way: central differences of a loss evaluated
// through forward(), numbers worked out by hand, a naive evaluation with the
// whole P matrix, or the same problem rearranged (MHA with repeated K/V,
// slices of a problem, another memory layout).

#include "ReferenceTestTensors.h"
#include "attn/Reference/ReferenceAttention.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

using namespace attn::reference;
using namespace attn::reference::test;

namespace {

/// The three gradients, laid out as backward() writes them (contiguous
/// BSHD), wrapped as Tensors for indexing.
struct Grads {
  Tensor dq, dk, dv;
};

Grads runBackward(const Problem &p, const HostTensor &q, const HostTensor &k,
                  const HostTensor &v, const HostTensor &dO) {
  Grads g{Tensor(p.batch, p.seqlenQ, p.qHeads, p.headDim),
          Tensor(p.batch, p.seqlenK, p.kvHeads, p.headDim),
          Tensor(p.batch, p.seqlenK, p.kvHeads, p.headDim)};
  // Poisoned so that unwritten elements show up.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (Tensor *t : {&g.dq, &g.dk, &g.dv})
    std::fill(t->data.begin(), t->data.end(), nan);
  backward(p, q, k, v, dO, g.dq.data.data(), g.dk.data.data(),
           g.dv.data.data());
  return g;
}

Grads runBackward(const Problem &p, const Tensor &q, const Tensor &k,
                  const Tensor &v, const Tensor &dO) {
  return runBackward(p, q.host(), k.host(), v.host(), dO.host());
}

void requireSameTensor(const Tensor &a, const Tensor &b, double eps) {
  REQUIRE(a.data.size() == b.data.size());
  for (size_t i = 0; i < a.data.size(); ++i) {
    CAPTURE(i);
    if (eps == 0.0)
      REQUIRE(a.data[i] == b.data[i]); // Bit-identical (no NaN expected).
    else
      REQUIRE(a.data[i] == Approx(b.data[i]).epsilon(eps).margin(eps));
  }
}

void requireSame(const Grads &a, const Grads &b, double eps) {
  requireSameTensor(a.dq, b.dq, eps);
  requireSameTensor(a.dk, b.dk, eps);
  requireSameTensor(a.dv, b.dv, eps);
}

bool allFinite(const Grads &g) {
  for (const Tensor *t : {&g.dq, &g.dk, &g.dv})
    for (float x : t->data)
      if (!std::isfinite(x))
        return false;
  return true;
}

/// L = sum(dO * O) with O from forward(): dL/dO = dO, so the gradients of L
/// with respect to q, k and v are exactly what backward() computes.
double loss(const Problem &p, const Tensor &q, const Tensor &k,
            const Tensor &v, const Tensor &dO) {
  std::vector<float> o(dO.data.size()),
      lse(size_t(p.batch * p.qHeads * p.seqlenQ));
  forward(p, q.host(), k.host(), v.host(), o.data(), lse.data());
  double sum = 0;
  for (size_t i = 0; i < o.size(); ++i)
    sum += double(dO.data[i]) * double(o[i]);
  return sum;
}

/// Checks every element of `analytic`, the gradient of loss() with respect
/// to `x` (one of q, k, v), against a central difference.
///
/// forward() rounds O to float, so L carries an absolute error of about
/// 1e-7 here; a step of 1e-2 turns that into ~1e-5 in the quotient, and the
/// truncation error (step^2 / 6 times a third derivative of order one) is
/// of the same size. The tolerance, 2e-4 plus 1e-3 relative, is still far
/// below the effect of a wrong factor (scale is 1.3 in these tests), a
/// wrong sign or a transposition, which change gradients of order 0.1 by
/// amounts of the same order.
void checkAgainstFiniteDifferences(const char *name, const Problem &p,
                                   Tensor &x, const Tensor &analytic,
                                   const Tensor &q, const Tensor &k,
                                   const Tensor &v, const Tensor &dO) {
  constexpr double kStep = 1e-2, kMargin = 2e-4, kRelative = 1e-3;
  REQUIRE(x.data.size() == analytic.data.size());
  double worst = 0, largest = 0;
  for (size_t i = 0; i < x.data.size(); ++i) {
    const float saved = x.data[i];
    const float plus = static_cast<float>(saved + kStep);
    const float minus = static_cast<float>(saved - kStep);
    x.data[i] = plus;
    const double lossPlus = loss(p, q, k, v, dO);
    x.data[i] = minus;
    const double lossMinus = loss(p, q, k, v, dO);
    x.data[i] = saved;
    // The actual (float) step, not the nominal one.
    const double numeric = (lossPlus - lossMinus) / (double(plus) - minus);
    const double error = std::abs(analytic.data[i] - numeric);
    worst = std::max(worst, error);
    largest = std::max(largest, std::abs(numeric));
    INFO(name << " element " << i << ": analytic " << analytic.data[i]
              << ", numeric " << numeric);
    CHECK(error <= kMargin + kRelative * std::abs(numeric));
  }
  // Guards the test itself: gradients that are all near zero would let
  // almost any implementation pass.
  INFO(name << ": largest |gradient| " << largest << ", worst error "
            << worst);
  CHECK(largest > 0.05);
}

/// Runs backward() and checks dq, dk and dv against central differences of
/// loss().
void checkGradients(const Problem &p, BackwardInputs &in) {
  Grads g = runBackward(p, in.q, in.k, in.v, in.dO);
  REQUIRE(allFinite(g));
  checkAgainstFiniteDifferences("dq", p, in.q, g.dq, in.q, in.k, in.v, in.dO);
  checkAgainstFiniteDifferences("dk", p, in.k, g.dk, in.q, in.k, in.v, in.dO);
  checkAgainstFiniteDifferences("dv", p, in.v, g.dv, in.q, in.k, in.v, in.dO);
}

/// Soft-capping, cap * tanh(s / cap), whose derivative is 1 - tanh^2(s / cap).
void setSoftCap(Problem &p, double cap) {
  p.scoreMod = [cap](double s, int64_t, int64_t, int64_t, int64_t) {
    return cap * std::tanh(s / cap);
  };
  p.scoreModVjp = [cap](double dy, double s, int64_t, int64_t, int64_t, int64_t,
                        bool) {
    const double t = std::tanh(s / cap);
    return dy * (1 - t * t);
  };
}

/// ALiBi with learnable slopes, s - slopes[h] * (q - k): the derivative is 1
/// in s and -(q - k) in slopes[h], added to slopeGrads[h] when asked.
void setAlibi(Problem &p, const std::vector<float> &slopes,
              std::vector<float> &slopeGrads) {
  p.scoreMod = [&slopes](double s, int64_t, int64_t h, int64_t q, int64_t k) {
    return s - slopes[size_t(h)] * double(q - k);
  };
  p.scoreModVjp = [&slopeGrads](double dy, double, int64_t, int64_t h,
                                int64_t q, int64_t k, bool accumulate) {
    if (accumulate)
      slopeGrads[size_t(h)] += static_cast<float>(-dy * double(q - k));
    return dy;
  };
}

/// Soft-capped ALiBi with learnable slopes that also reads the batch, so
/// that the slopes' gradient depends on the score and a wrong b or h shows:
/// cap * tanh(u / cap) with u = s - slopes[h] * (q - k) + b / 4, for a
/// problem whose batch 0 and head 0 are `batch0` and `head0` of the problem
/// `slopes` describe.
void setCappedAlibi(Problem &p, const std::vector<float> &slopes,
                    std::vector<float> &slopeGrads, double cap,
                    int64_t batch0 = 0, int64_t head0 = 0) {
  auto tanhOfCapped = [&slopes, cap, batch0, head0](double s, int64_t b,
                                                    int64_t h, int64_t q,
                                                    int64_t k) {
    return std::tanh((s - slopes[size_t(h + head0)] * double(q - k) +
                      0.25 * double(b + batch0)) /
                     cap);
  };
  p.scoreMod = [tanhOfCapped, cap](double s, int64_t b, int64_t h, int64_t q,
                                   int64_t k) {
    return cap * tanhOfCapped(s, b, h, q, k);
  };
  p.scoreModVjp = [tanhOfCapped, &slopeGrads,
                   head0](double dy, double s, int64_t b, int64_t h, int64_t q,
                          int64_t k, bool accumulate) {
    const double t = tanhOfCapped(s, b, h, q, k);
    const double ds = dy * (1 - t * t);
    if (accumulate)
      slopeGrads[size_t(h + head0)] += static_cast<float>(-ds * double(q - k));
    return ds;
  };
}

/// A score_mod that keeps the score where `keep` holds and masks the pair
/// (-inf) elsewhere. The VJP passes dy through and records the pairs it is
/// asked to accumulate captures at.
struct RecordingMask {
  std::vector<std::vector<int64_t>> accumulated;

  void install(Problem &p, MaskModFn keep) {
    p.scoreMod = [keep](double s, int64_t b, int64_t h, int64_t q, int64_t k) {
      return keep(b, h, q, k) ? s : -std::numeric_limits<double>::infinity();
    };
    p.scoreModVjp = [this](double dy, double, int64_t b, int64_t h, int64_t q,
                           int64_t k, bool accumulate) {
      if (accumulate)
        accumulated.push_back({b, h, q, k});
      return dy;
    };
  }
};

} // namespace

TEST_CASE("backward matches finite differences of forward",
          "[reference][backward]") {
  struct Case {
    const char *name;
    int64_t batch, sq, sk, hq, hkv, d;
    MaskSpec mask;
    MaskModFn maskMod;
  };
  // Depends on the batch and query head too, so that a wrong b or h passed
  // to maskMod shows up.
  MaskModFn checkerboard = [](int64_t b, int64_t h, int64_t q, int64_t k) {
    return (b + h + q + 2 * k) % 3 != 0;
  };
  const Case cases[] = {
      {"no mask", 2, 5, 7, 2, 1, 4, {}, nullptr},
      {"causal top-left", 2, 5, 7, 2, 1, 4,
       {MaskKind::Causal, MaskAlignment::TopLeft}, nullptr},
      {"causal bottom-right", 2, 5, 7, 2, 1, 4,
       {MaskKind::Causal, MaskAlignment::BottomRight}, nullptr},
      // Sq > Sk: rows 0 and 1 see no key.
      {"causal bottom-right, Sq > Sk", 1, 7, 5, 2, 1, 4,
       {MaskKind::Causal, MaskAlignment::BottomRight}, nullptr},
      {"sliding window top-left", 2, 5, 7, 2, 1, 4,
       {MaskKind::SlidingWindow, MaskAlignment::TopLeft, 1, 1}, nullptr},
      {"sliding window bottom-right", 1, 5, 7, 4, 2, 4,
       {MaskKind::SlidingWindow, MaskAlignment::BottomRight, 2, 0}, nullptr},
      {"mask_mod", 2, 5, 7, 2, 1, 4, {}, checkerboard},
  };
  unsigned seed = 100;
  for (const Case &c : cases) {
    INFO(c.name);
    Problem p = makeProblem(c.batch, c.sq, c.sk, c.hq, c.hkv, c.d, 1.3,
                            c.mask);
    p.maskMod = c.maskMod;
    BackwardInputs in = randomBackwardInputs(p, seed);
    seed += 4;
    checkGradients(p, in);
  }
}

TEST_CASE("backward through a soft-capping score_mod matches finite "
          "differences",
          "[reference][backward][score_mod]") {
  struct Case {
    const char *name;
    int64_t batch, sq, sk, hq, hkv, d;
    double cap;
  };
  // A realistic cap of 20 is nearly the identity at these scores (|s| of
  // about 1), so a cap of 2 checks the derivative itself.
  const Case cases[] = {
      {"cap 20", 2, 5, 7, 2, 2, 4, 20.0},
      {"cap 2, GQA, Sq > Sk", 1, 7, 5, 2, 1, 8, 2.0},
      {"cap 2, Sq < Sk", 2, 6, 9, 2, 2, 4, 2.0},
  };
  unsigned seed = 1000;
  for (const Case &c : cases) {
    INFO(c.name);
    Problem p = makeProblem(c.batch, c.sq, c.sk, c.hq, c.hkv, c.d, 1.3,
                            {MaskKind::Causal, MaskAlignment::BottomRight});
    setSoftCap(p, c.cap);
    BackwardInputs in = randomBackwardInputs(p, seed);
    seed += 4;
    checkGradients(p, in);
  }
}

TEST_CASE("backward through ALiBi with learnable slopes matches finite "
          "differences, slopes included",
          "[reference][backward][score_mod]") {
  struct Case {
    const char *name;
    int64_t batch, sq, sk, hq, hkv, d;
    bool capped;
  };
  const Case cases[] = {
      {"GQA, Sq < Sk", 2, 5, 7, 2, 1, 4, false},
      {"Sq > Sk", 1, 8, 6, 2, 2, 8, false},
      // The slopes' gradient through tanh depends on the score.
      {"soft-capped", 2, 6, 5, 2, 1, 4, true},
  };
  unsigned seed = 1100;
  for (const Case &c : cases) {
    INFO(c.name);
    Problem p = makeProblem(c.batch, c.sq, c.sk, c.hq, c.hkv, c.d, 1.3,
                            {MaskKind::Causal, MaskAlignment::BottomRight});
    // A Tensor [1, 1, 1, H] so that the finite differences can perturb it.
    Tensor slopes(1, 1, 1, c.hq), slopeGrads(1, 1, 1, c.hq);
    slopes.data = {0.25f, 0.125f};
    if (c.capped)
      setCappedAlibi(p, slopes.data, slopeGrads.data, 3.0);
    else
      setAlibi(p, slopes.data, slopeGrads.data);
    BackwardInputs in = randomBackwardInputs(p, seed);
    seed += 4;
    checkGradients(p, in);
    // checkGradients() ran backward() once: the slope gradients of one run.
    checkAgainstFiniteDifferences("slopes", p, slopes, slopeGrads, in.q, in.k,
                                  in.v, in.dO);
  }
}

TEST_CASE("backward: a score_mod returning -inf masks like a mask_mod",
          "[reference][backward][score_mod]") {
  // Row 3 is masked whole by the mod; causal bottom-right masks more.
  MaskModFn keep = [](int64_t b, int64_t h, int64_t q, int64_t k) {
    return q != 3 && (b + h + q + 2 * k) % 3 != 0;
  };
  const MaskSpec causal{MaskKind::Causal, MaskAlignment::BottomRight};
  Problem masked = makeProblem(2, 6, 7, 2, 1, 8, 0.7, causal);
  masked.maskMod = keep;
  Problem modded = makeProblem(2, 6, 7, 2, 1, 8, 0.7, causal);
  RecordingMask recorder;
  recorder.install(modded, keep);
  auto [q, k, v, dO] = randomBackwardInputs(masked, 1200);

  Grads expected = runBackward(masked, q, k, v, dO);
  Grads actual = runBackward(modded, q, k, v, dO);
  REQUIRE(allFinite(actual));
  // The identity on kept pairs with a VJP passing dy: the same arithmetic.
  requireSame(actual, expected, 0.0);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t t = 0; t < 8; ++t)
        CHECK(actual.dq.at(b, 3, h, t) == 0.0f);

  // Captures are accumulated once per kept pair, in (b, h, q, k) order.
  std::vector<std::vector<int64_t>> kept;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t qi = 0; qi < 6; ++qi)
        for (int64_t ki = 0; ki < 7; ++ki)
          if (maskAllows(causal, qi, ki, 6, 7) && keep(b, h, qi, ki))
            kept.push_back({b, h, qi, ki});
  CHECK(recorder.accumulated == kept);
}

TEST_CASE("backward: pairs whose weight underflows to 0 skip the VJP",
          "[reference][backward][score_mod]") {
  // Key 0 gets a finite score so low that its exponential is exactly 0; the
  // VJP answers NaN there (as 0 times an infinite derivative would), so any
  // call for key 0 would show in the gradients.
  Problem p = makeProblem(1, 5, 6, 2, 2, 4, 0.9);
  p.scoreMod = [](double s, int64_t, int64_t, int64_t, int64_t k) {
    return k == 0 ? -2000.0 : s;
  };
  int64_t accumulated = 0;
  p.scoreModVjp = [&accumulated](double dy, double, int64_t, int64_t, int64_t,
                                 int64_t k, bool accumulate) {
    accumulated += accumulate;
    return k == 0 ? std::numeric_limits<double>::quiet_NaN() : dy;
  };
  Problem withoutKey0 = makeProblem(1, 5, 6, 2, 2, 4, 0.9);
  withoutKey0.maskMod = [](int64_t, int64_t, int64_t, int64_t k) {
    return k != 0;
  };
  auto [q, k, v, dO] = randomBackwardInputs(p, 1300);
  Grads g = runBackward(p, q, k, v, dO);
  REQUIRE(allFinite(g));
  requireSame(g, runBackward(withoutKey0, q, k, v, dO), 0.0);
  // Every pair but those of key 0, which has weight 0: 2 heads x 5 rows x 5
  // keys.
  CHECK(accumulated == 50);
}

TEST_CASE("backward: hand-computed case", "[reference][backward]") {
  // One query, two keys, D = 1: q = 2, k = (-1, 1), v = (2, 6), dO = 2,
  // scale = ln(3) / 4.
  //   scores s = scale * q * k = (-ln3 / 2, ln3 / 2), so
  //   exp(s) is proportional to (1, 3) and P = (1/4, 3/4); o = 1/2 + 9/2 = 5.
  //   dv_j = P_j dO = (1/2, 3/2).
  //   dP_j = dO v_j = (4, 12); Delta = 1/4 * 4 + 3/4 * 12 = 10 (= dO o).
  //   dS_j = P_j (dP_j - Delta) = (1/4 * -6, 3/4 * 2) = (-3/2, 3/2).
  //   dq = scale * sum_j dS_j k_j = ln3 / 4 * (3/2 + 3/2) = 3/4 ln3.
  //   dk_j = scale * dS_j q = ln3 / 4 * 2 * (-3/2, 3/2) = (-3/4, 3/4) ln3.
  Tensor q(1, 1, 1, 1), k(1, 2, 1, 1), v(1, 2, 1, 1), dO(1, 1, 1, 1);
  q.data = {2.0f};
  k.data = {-1.0f, 1.0f};
  v.data = {2.0f, 6.0f};
  dO.data = {2.0f};
  const double ln3 = std::log(3.0);
  Problem p = makeProblem(1, 1, 2, 1, 1, 1, ln3 / 4);
  Grads g = runBackward(p, q, k, v, dO);
  CHECK(g.dq.data[0] == Approx(0.75 * ln3));
  CHECK(g.dk.data[0] == Approx(-0.75 * ln3));
  CHECK(g.dk.data[1] == Approx(0.75 * ln3));
  CHECK(g.dv.data[0] == Approx(0.5));
  CHECK(g.dv.data[1] == Approx(1.5));

  SECTION("a row that sees one key has P = 1: no dq or dk, dv = dO") {
    // Causal top-left: the only query sees only k0.
    p.mask = {MaskKind::Causal, MaskAlignment::TopLeft};
    Grads one = runBackward(p, q, k, v, dO);
    CHECK(one.dq.data[0] == 0.0f);
    CHECK(one.dk.data[0] == 0.0f);
    CHECK(one.dv.data[0] == 2.0f);
    // k1 and v1 are masked out entirely.
    CHECK(one.dk.data[1] == 0.0f);
    CHECK(one.dv.data[1] == 0.0f);
  }
}

TEST_CASE("backward from a stored output takes Delta = dO . o", "[reference][backward]") {
  // The hand-computed case: o = 5, Delta = dO o = 10. A stored o of 4.5
  // (an output with an error of 0.5) gives Delta = 9, so dS_j = P_j (dP_j -
  // 9) = (-5/4, 9/4), and dq = scale * (5/4 + 9/4) = 7/8 ln3; dv does not
  // depend on Delta.
  Tensor q(1, 1, 1, 1), k(1, 2, 1, 1), v(1, 2, 1, 1), dO(1, 1, 1, 1), o(1, 1, 1, 1);
  q.data = {2.0f};
  k.data = {-1.0f, 1.0f};
  v.data = {2.0f, 6.0f};
  dO.data = {2.0f};
  const double ln3 = std::log(3.0);
  Problem p = makeProblem(1, 1, 2, 1, 1, 1, ln3 / 4);
  Grads g{Tensor(1, 1, 1, 1), Tensor(1, 2, 1, 1), Tensor(1, 2, 1, 1)};
  auto run = [&](float stored) {
    o.data = {stored};
    backward(p, q.host(), k.host(), v.host(), o.host(), dO.host(), g.dq.data.data(),
             g.dk.data.data(), g.dv.data.data());
  };
  run(5.0f);
  const Grads exact = runBackward(p, q, k, v, dO);
  requireSame(g, exact, 1e-6);
  run(4.5f);
  CHECK(g.dq.data[0] == Approx(7.0 / 8.0 * ln3));
  CHECK(g.dk.data[0] == Approx(-5.0 / 8.0 * ln3));
  CHECK(g.dk.data[1] == Approx(9.0 / 8.0 * ln3));
  CHECK(g.dv.data[0] == Approx(0.5));
  CHECK(g.dv.data[1] == Approx(1.5));
}

TEST_CASE("backward matches a naive evaluation with the whole P matrix",
          "[reference][backward]") {
  // Large enough for several threads, with GQA, a sliding window and rows
  // that see no key (bottom-right with Sq > Sk). The oracle materialises P,
  // dP and dS per (batch, query head) and applies the textbook formulas,
  // without the max shift (safe: |scores| < 10).
  const int64_t b = 2, sq = 110, sk = 90, hq = 4, hkv = 2, d = 24;
  const int64_t group = hq / hkv;
  const double scale = 1.0 / std::sqrt(double(d));
  MaskSpec mask{MaskKind::SlidingWindow, MaskAlignment::BottomRight, 30, 5};
  Problem p = makeProblem(b, sq, sk, hq, hkv, d, scale, mask);
  auto [q, k, v, dO] = randomBackwardInputs(p, 200);
  Grads g = runBackward(p, q, k, v, dO);

  std::vector<double> dq(g.dq.data.size(), 0.0), dk(g.dk.data.size(), 0.0),
      dv(g.dv.data.size(), 0.0);
  std::vector<double> P(size_t(sq * sk)), dS(size_t(sq * sk));
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t kh = h / group;
      for (int64_t i = 0; i < sq; ++i) {
        double denominator = 0;
        for (int64_t j = 0; j < sk; ++j) {
          // The window written out directly: shift sk - sq.
          const int64_t qa = i + (sk - sq);
          double e = 0;
          if (j >= qa - 30 && j <= qa + 5) {
            double s = 0;
            for (int64_t t = 0; t < d; ++t)
              s += double(q.at(bi, i, h, t)) * k.at(bi, j, kh, t);
            e = std::exp(scale * s);
          }
          P[size_t(i * sk + j)] = e;
          denominator += e;
        }
        double delta = 0;
        std::vector<double> dP(static_cast<size_t>(sk), 0.0);
        for (int64_t j = 0; j < sk; ++j) {
          double &pij = P[size_t(i * sk + j)];
          pij = denominator > 0 ? pij / denominator : 0.0;
          for (int64_t t = 0; t < d; ++t)
            dP[size_t(j)] += double(dO.at(bi, i, h, t)) * v.at(bi, j, kh, t);
          delta += pij * dP[size_t(j)];
        }
        for (int64_t j = 0; j < sk; ++j)
          dS[size_t(i * sk + j)] =
              P[size_t(i * sk + j)] * (dP[size_t(j)] - delta);
      }
      for (int64_t i = 0; i < sq; ++i)
        for (int64_t j = 0; j < sk; ++j)
          for (int64_t t = 0; t < d; ++t) {
            const double pij = P[size_t(i * sk + j)],
                         dsij = dS[size_t(i * sk + j)];
            dq[g.dq.index(bi, i, h, t)] += scale * dsij * k.at(bi, j, kh, t);
            dk[g.dk.index(bi, j, kh, t)] += scale * dsij * q.at(bi, i, h, t);
            dv[g.dv.index(bi, j, kh, t)] += pij * dO.at(bi, i, h, t);
          }
    }

  auto compare = [](const Tensor &got, const std::vector<double> &want) {
    for (size_t i = 0; i < want.size(); ++i) {
      CAPTURE(i);
      REQUIRE(got.data[i] == Approx(want[i]).epsilon(1e-5).margin(1e-6));
    }
  };
  compare(g.dq, dq);
  compare(g.dk, dk);
  compare(g.dv, dv);
  // The problem has rows without keys (the first sq - sk - 5 rows).
  for (int64_t t = 0; t < d; ++t)
    CHECK(g.dq.at(0, 0, 0, t) == 0.0f);
}

TEST_CASE("backward: fully masked rows get zero gradients",
          "[reference][backward][mask]") {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor q = randomTensor(1, 4, 2, 8, 300);
  Tensor k = randomTensor(1, 2, 2, 8, 301);
  Tensor v = randomTensor(1, 2, 2, 8, 302);
  Tensor dO = randomTensor(1, 4, 2, 8, 303);

  SECTION("causal bottom-right with Sq > Sk") {
    // Shift -2: rows 0 and 1 see no key, row 2 sees k0, row 3 sees both.
    Problem p = makeProblem(1, 4, 2, 2, 2, 8, 0.5,
                            {MaskKind::Causal, MaskAlignment::BottomRight});
    Grads g = runBackward(p, q, k, v, dO);
    REQUIRE(allFinite(g));
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t t = 0; t < 8; ++t) {
        CHECK(g.dq.at(0, 0, h, t) == 0.0f);
        CHECK(g.dq.at(0, 1, h, t) == 0.0f);
        // Row 2's P is exactly 1 on k0, so its dS is exactly 0.
        CHECK(g.dq.at(0, 2, h, t) == 0.0f);
      }
    // dk and dv equal those of rows 2 and 3 alone: a square causal problem
    // over a view that starts at row 2 (rows with no key add nothing).
    Problem tail = makeProblem(1, 2, 2, 2, 2, 8, 0.5,
                               {MaskKind::Causal, MaskAlignment::TopLeft});
    HostTensor qTail = q.host(), dOTail = dO.host();
    qTail.data = &q.at(0, 2, 0, 0);
    dOTail.data = &dO.at(0, 2, 0, 0);
    Grads ref = runBackward(tail, qTail, k.host(), v.host(), dOTail);
    requireSameTensor(g.dk, ref.dk, 0.0);
    requireSameTensor(g.dv, ref.dv, 0.0);
  }
  SECTION("sliding window top-left leaves the last rows empty") {
    // The diagonal window with Sq = 4 > Sk = 2: rows 2 and 3 see nothing,
    // rows 0 and 1 see only their own key.
    Problem p = makeProblem(1, 4, 2, 2, 2, 8, 0.5,
                            {MaskKind::SlidingWindow, MaskAlignment::TopLeft,
                             0, 0});
    Grads g = runBackward(p, q, k, v, dO);
    REQUIRE(allFinite(g));
    for (float x : g.dq.data)
      CHECK(x == 0.0f);
    CHECK(g.dk.data == std::vector<float>(g.dk.data.size(), 0.0f));
    // dv of key j is dO of row j.
    for (int64_t s = 0; s < 2; ++s)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t t = 0; t < 8; ++t)
          CHECK(g.dv.at(0, s, h, t) == dO.at(0, s, h, t));
  }
  SECTION("mask_mod rejecting everything") {
    Problem p = makeProblem(1, 4, 2, 2, 2, 8, 0.5);
    p.maskMod = [](int64_t, int64_t, int64_t, int64_t) { return false; };
    Grads g = runBackward(p, q, k, v, dO);
    for (const Tensor *t : {&g.dq, &g.dk, &g.dv})
      CHECK(t->data == std::vector<float>(t->data.size(), 0.0f));
  }
  SECTION("no keys at all") {
    Problem p = makeProblem(1, 4, 0, 2, 2, 8);
    std::vector<float> dq(q.data.size(), inf);
    backward(p, q.host(), HostTensor{nullptr, {0, 0, 0, 1}},
             HostTensor{nullptr, {0, 0, 0, 1}}, dO.host(), dq.data(), nullptr,
             nullptr);
    CHECK(dq == std::vector<float>(dq.size(), 0.0f));
  }
  SECTION("no queries at all: dk and dv are still overwritten") {
    Problem p = makeProblem(1, 0, 2, 2, 2, 8);
    std::vector<float> dk(k.data.size(), inf), dv(v.data.size(), inf);
    backward(p, HostTensor{nullptr, {0, 0, 0, 1}}, k.host(), v.host(),
             HostTensor{nullptr, {0, 0, 0, 1}}, nullptr, dk.data(), dv.data());
    CHECK(dk == std::vector<float>(dk.size(), 0.0f));
    CHECK(dv == std::vector<float>(dv.size(), 0.0f));
  }
}

TEST_CASE("backward: GQA sums the query heads of a kv head",
          "[reference][backward][gqa]") {
  const int64_t b = 2, sq = 9, sk = 13, hq = 6, hkv = 2, d = 8;
  const int64_t group = hq / hkv;
  MaskSpec mask{MaskKind::Causal, MaskAlignment::BottomRight};
  Problem pGqa = makeProblem(b, sq, sk, hq, hkv, d, 0.35, mask);
  Problem pMha = makeProblem(b, sq, sk, hq, hq, d, 0.35, mask);
  auto [q, k, v, dO] = randomBackwardInputs(pGqa, 400);
  // Query head h reads kv head h / group: heads 0-2 -> 0, 3-5 -> 1.
  Tensor kFull = repeatKvHeads(k, hq), vFull = repeatKvHeads(v, hq);
  // maskMod sees the query head in both problems.
  MaskModFn maskMod = [](int64_t, int64_t h, int64_t qi, int64_t ki) {
    return (qi + ki + h) % 4 != 0;
  };
  pGqa.maskMod = pMha.maskMod = maskMod;
  Grads gqa = runBackward(pGqa, q, k, v, dO);
  Grads mha = runBackward(pMha, q, kFull, vFull, dO);

  // dq: the same arithmetic, so bit-identical.
  requireSameTensor(gqa.dq, mha.dq, 0.0);
  // dk, dv: the sum over the group of the per-head gradients (which are
  // rounded to float before this sum, hence the tolerance).
  Tensor dkSum(b, sk, hkv, d), dvSum(b, sk, hkv, d), dkWrong(b, sk, hkv, d);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t s = 0; s < sk; ++s)
      for (int64_t h = 0; h < hq; ++h)
        for (int64_t t = 0; t < d; ++t) {
          dkSum.at(bi, s, h / group, t) += mha.dk.at(bi, s, h, t);
          dvSum.at(bi, s, h / group, t) += mha.dv.at(bi, s, h, t);
          dkWrong.at(bi, s, h % hkv, t) += mha.dk.at(bi, s, h, t);
        }
  requireSameTensor(gqa.dk, dkSum, 1e-5);
  requireSameTensor(gqa.dv, dvSum, 1e-5);
  // A wrong grouping gives other sums: the comparison above can fail.
  double difference = 0;
  for (size_t i = 0; i < dkSum.data.size(); ++i)
    difference = std::max<double>(
        difference, std::abs(dkSum.data[i] - dkWrong.data[i]));
  CHECK(difference > 1e-2);
}

TEST_CASE("backward does not depend on the thread count",
          "[reference][backward]") {
  // About 1e7 multiply-adds per phase: several threads where the machine
  // has several cores. Each (batch, kv head) slice alone is below the
  // threading threshold, so it runs on one thread; whatever the threads,
  // every element must come out bit-identical.
  const int64_t b = 2, sq = 190, sk = 210, hq = 4, hkv = 2, d = 32;
  const int64_t group = hq / hkv;
  MaskSpec mask{MaskKind::Causal, MaskAlignment::BottomRight};
  const double scale = 1.0 / std::sqrt(double(d));
  Problem p = makeProblem(b, sq, sk, hq, hkv, d, scale, mask);
  auto [q, k, v, dO] = randomBackwardInputs(p, 500);
  Grads first = runBackward(p, q, k, v, dO);
  REQUIRE(allFinite(first));
  Grads second = runBackward(p, q, k, v, dO);
  requireSame(first, second, 0.0);

  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t kh = 0; kh < hkv; ++kh) {
      // Views into the whole tensors: the strides stay those of the whole.
      HostTensor qs = q.host(), ks = k.host(), vs = v.host(), dOs = dO.host();
      qs.data = &q.at(bi, 0, kh * group, 0);
      dOs.data = &dO.at(bi, 0, kh * group, 0);
      ks.data = &k.at(bi, 0, kh, 0);
      vs.data = &v.at(bi, 0, kh, 0);
      Grads slice = runBackward(makeProblem(1, sq, sk, group, 1, d, scale,
                                            mask),
                                qs, ks, vs, dOs);
      for (int64_t t = 0; t < d; ++t) {
        for (int64_t s = 0; s < sq; ++s)
          for (int64_t g = 0; g < group; ++g)
            REQUIRE(slice.dq.at(0, s, g, t) ==
                    first.dq.at(bi, s, kh * group + g, t));
        for (int64_t s = 0; s < sk; ++s) {
          REQUIRE(slice.dk.at(0, s, 0, t) == first.dk.at(bi, s, kh, t));
          REQUIRE(slice.dv.at(0, s, 0, t) == first.dv.at(bi, s, kh, t));
        }
      }
    }
}

TEST_CASE("backward through a score_mod does not depend on the thread count",
          "[reference][backward][score_mod]") {
  // The problem of the test above, through soft-capped ALiBi.
  const int64_t b = 2, sq = 190, sk = 210, hq = 4, hkv = 2, d = 32;
  const int64_t group = hq / hkv;
  const MaskSpec mask{MaskKind::Causal, MaskAlignment::BottomRight};
  const double scale = 1.0 / std::sqrt(double(d));
  const std::vector<float> slopes = {0.5f, 0.25f, 0.125f, 0.0625f};
  constexpr double kCap = 10.0;
  Problem p = makeProblem(b, sq, sk, hq, hkv, d, scale, mask);
  std::vector<float> firstSlopeGrads(hq, 0.0f), secondSlopeGrads(hq, 0.0f),
      sliceSlopeGrads(hq, 0.0f);
  setCappedAlibi(p, slopes, firstSlopeGrads, kCap);
  auto [q, k, v, dO] = randomBackwardInputs(p, 1400);
  Grads first = runBackward(p, q, k, v, dO);
  REQUIRE(allFinite(first));
  setCappedAlibi(p, slopes, secondSlopeGrads, kCap);
  Grads second = runBackward(p, q, k, v, dO);
  requireSame(first, second, 0.0);
  CHECK(firstSlopeGrads == secondSlopeGrads);

  // Each slice runs on one thread. Slices in (batch, kv head) order add to
  // each slope's gradient in the whole problem's order, so bit for bit.
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t kh = 0; kh < hkv; ++kh) {
      HostTensor qs = q.host(), ks = k.host(), vs = v.host(), dOs = dO.host();
      qs.data = &q.at(bi, 0, kh * group, 0);
      dOs.data = &dO.at(bi, 0, kh * group, 0);
      ks.data = &k.at(bi, 0, kh, 0);
      vs.data = &v.at(bi, 0, kh, 0);
      Problem sliceProblem = makeProblem(1, sq, sk, group, 1, d, scale, mask);
      setCappedAlibi(sliceProblem, slopes, sliceSlopeGrads, kCap, bi,
                     kh * group);
      Grads slice = runBackward(sliceProblem, qs, ks, vs, dOs);
      for (int64_t t = 0; t < d; ++t) {
        for (int64_t s = 0; s < sq; ++s)
          for (int64_t g = 0; g < group; ++g)
            REQUIRE(slice.dq.at(0, s, g, t) ==
                    first.dq.at(bi, s, kh * group + g, t));
        for (int64_t s = 0; s < sk; ++s) {
          REQUIRE(slice.dk.at(0, s, 0, t) == first.dk.at(bi, s, kh, t));
          REQUIRE(slice.dv.at(0, s, 0, t) == first.dv.at(bi, s, kh, t));
        }
      }
    }
  CHECK(sliceSlopeGrads == firstSlopeGrads);
  for (float grad : firstSlopeGrads)
    CHECK(std::abs(grad) > 1e-3f);
}

TEST_CASE("backward: strided inputs equal contiguous inputs",
          "[reference][backward]") {
  const int64_t b = 2, sq = 6, sk = 10, h = 3, d = 12;
  Problem p = makeProblem(b, sq, sk, h, h, d, 0.25,
                          {MaskKind::SlidingWindow, MaskAlignment::TopLeft, 4,
                           2});
  auto [q, k, v, dO] = randomBackwardInputs(p, 600);
  Grads contiguous = runBackward(p, q, k, v, dO);

  SECTION("BHSD physical layout with padding") {
    // Stored as [b][h][s][d + 3 pad], described through BSHD strides.
    std::vector<float> qs, ks, vs, dOs;
    Grads strided = runBackward(p, paddedBhsd(q, qs), paddedBhsd(k, ks),
                                paddedBhsd(v, vs), paddedBhsd(dO, dOs));
    requireSame(contiguous, strided, 0.0);
  }
  SECTION("non-unit head_dim stride") {
    // Every element followed by a junk element: stride 2 along head_dim.
    std::vector<float> qs, ks, vs, dOs;
    Grads strided = runBackward(p, spreadHeadDim(q, qs), spreadHeadDim(k, ks),
                                spreadHeadDim(v, vs), spreadHeadDim(dO, dOs));
    // The strided dot product sums in another order: tiny differences.
    requireSame(contiguous, strided, 1e-6);
  }
}

TEST_CASE("backward: unsupported or inconsistent problems are rejected",
          "[reference][backward]") {
  Tensor q = randomTensor(1, 2, 4, 8, 700);
  Tensor kv = randomTensor(1, 3, 2, 8, 701);
  Tensor dO = randomTensor(1, 2, 4, 8, 702);
  std::vector<float> dq(q.data.size()), dk(kv.data.size()),
      dv(kv.data.size());
  Problem p = makeProblem(1, 2, 3, 4, 2, 8);
  auto call = [&](const Problem &problem) {
    backward(problem, q.host(), kv.host(), kv.host(), dO.host(), dq.data(),
             dk.data(), dv.data());
  };
  CHECK_NOTHROW(call(p));

  SECTION("score_mod without its VJP, or a VJP without a score_mod") {
    Problem withScoreMod = p;
    withScoreMod.scoreMod = [](double s, int64_t, int64_t, int64_t,
                               int64_t) { return s; };
    CHECK_THROWS_AS(call(withScoreMod), std::invalid_argument);
    CHECK_THROWS_WITH(call(withScoreMod),
                      Catch::Contains("reference attention backward") &&
                          Catch::Contains("scoreModVjp"));
    Problem withVjp = p;
    withVjp.scoreModVjp = [](double dy, double, int64_t, int64_t, int64_t,
                             int64_t, bool) { return dy; };
    CHECK_THROWS_WITH(call(withVjp), Catch::Contains("scoreModVjp") &&
                                         Catch::Contains("without"));
  }
  SECTION("a row filter") {
    Problem withRows = p;
    withRows.rows = [](int64_t, int64_t, int64_t) { return true; };
    CHECK_THROWS_AS(call(withRows), std::invalid_argument);
  }
  SECTION("null pointers of non-empty tensors, named") {
    const HostTensor none{nullptr, {0, 0, 0, 1}};
    auto message = [&](const HostTensor &qh, const HostTensor &kh,
                       const HostTensor &vh, const HostTensor &dOh, float *dqp,
                       float *dkp, float *dvp) -> std::string {
      try {
        backward(p, qh, kh, vh, dOh, dqp, dkp, dvp);
      } catch (const std::invalid_argument &e) {
        return e.what();
      }
      return "no exception";
    };
    const HostTensor qh = q.host(), kh = kv.host(), dOh = dO.host();
    CHECK_THAT(message(none, kh, kh, dOh, dq.data(), dk.data(), dv.data()),
               Catch::Contains("q is null"));
    CHECK_THAT(message(qh, none, kh, dOh, dq.data(), dk.data(), dv.data()),
               Catch::Contains("k is null"));
    CHECK_THAT(message(qh, kh, none, dOh, dq.data(), dk.data(), dv.data()),
               Catch::Contains("v is null"));
    CHECK_THAT(message(qh, kh, kh, none, dq.data(), dk.data(), dv.data()),
               Catch::Contains("dO is null"));
    CHECK_THAT(message(qh, kh, kh, dOh, nullptr, dk.data(), dv.data()),
               Catch::Contains("dq is null"));
    CHECK_THAT(message(qh, kh, kh, dOh, dq.data(), nullptr, dv.data()),
               Catch::Contains("dk is null"));
    CHECK_THAT(message(qh, kh, kh, dOh, dq.data(), dk.data(), nullptr),
               Catch::Contains("dv is null"));
  }
  SECTION("inconsistent shapes") {
    CHECK_THROWS_AS(call(makeProblem(1, 2, 3, 4, 3, 8)),
                    std::invalid_argument);
    CHECK_THROWS_AS(call(makeProblem(1, -1, 3, 4, 4, 8)),
                    std::invalid_argument);
    CHECK_THROWS_AS(call(makeProblem(1, 2, 3, 0, 1, 8)),
                    std::invalid_argument);
    CHECK_THROWS_AS(call(makeProblem(1, 2, 3, 4, 2, 0)),
                    std::invalid_argument);
    CHECK_THROWS_AS(call(makeProblem(1, 2, 3, 4, 2, 8, std::nan(""))),
                    std::invalid_argument);
  }
  SECTION("empty batches are fine and write nothing") {
    CHECK_NOTHROW(backward(makeProblem(0, 2, 3, 4, 2, 8), q.host(),
                           kv.host(), kv.host(), dO.host(), nullptr, nullptr,
                           nullptr));
  }
}

TEST_CASE("backward: an exception of mask_mod propagates",
          "[reference][backward]") {
  // Big enough for several threads; the throwing pair is met in phase 1.
  const int64_t b = 1, s = 256, h = 4, d = 32;
  Tensor q = randomTensor(b, s, h, d, 800);
  Tensor k = randomTensor(b, s, h, d, 801);
  Tensor dO = randomTensor(b, s, h, d, 802);
  Problem p = makeProblem(b, s, s, h, h, d, 0.2);
  p.maskMod = [](int64_t, int64_t head, int64_t row, int64_t key) -> bool {
    if (head == 2 && row == 100 && key == 7)
      throw std::runtime_error("mask_mod failed");
    return true;
  };
  std::vector<float> dq(q.data.size()), dk(k.data.size()), dv(k.data.size());
  CHECK_THROWS_AS(backward(p, q.host(), k.host(), k.host(), dO.host(),
                           dq.data(), dk.data(), dv.data()),
                  std::runtime_error);
}
