// Tests of the CPU reference for linear attention and retention. Each check
// compares against something computed another way: numbers worked out by
// hand, the other form (parallel against recurrent), the same problem laid
// out differently in memory, or the same sequence run in two pieces.

#include "attn/Reference/LinearAttention.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using namespace attn::reference;

namespace {

enum class Form { Parallel, Recurrent };
const Form kForms[] = {Form::Parallel, Form::Recurrent};

const char *formName(Form form) {
  return form == Form::Parallel ? "parallel" : "recurrent";
}

auto forwardOf(Form form) {
  return form == Form::Parallel ? linearForwardParallel
                                : linearForwardRecurrent;
}

/// A [B, S, H, D] fp32 tensor in a buffer of its own. Strided: stored as
/// [B, H, S, 2D] with every other element of D a NaN, so that reading the
/// wrong element shows.
struct Tensor {
  int64_t shape[4];
  std::vector<float> storage;
  HostTensor view;
};

Tensor makeTensor(int64_t b, int64_t s, int64_t h, int64_t d,
                  const std::vector<float> &values, bool strided = false) {
  Tensor t{{b, s, h, d}, {}, {}};
  if (!strided) {
    t.storage = values;
    t.view = {t.storage.data(), {s * h * d, h * d, d, 1}};
    return t;
  }
  t.storage.assign(values.size() * 2, std::numeric_limits<float>::quiet_NaN());
  const int64_t strides[4] = {h * s * 2 * d, 2 * d, s * 2 * d, 2};
  size_t next = 0;
  for (int64_t ib = 0; ib < b; ++ib)
    for (int64_t is = 0; is < s; ++is)
      for (int64_t ih = 0; ih < h; ++ih)
        for (int64_t id = 0; id < d; ++id)
          t.storage[ib * strides[0] + is * strides[1] + ih * strides[2] +
                    id * strides[3]] = values[next++];
  t.view = {t.storage.data(), {strides[0], strides[1], strides[2], strides[3]}};
  return t;
}

std::vector<float> randomValues(size_t n, std::mt19937 &rng, float lo = -1.0f,
                                float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> values(n);
  for (float &x : values)
    x = dist(rng);
  return values;
}

std::vector<double> randomDoubles(size_t n, std::mt19937 &rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> values(n);
  for (double &x : values)
    x = dist(rng);
  return values;
}

LinearProblem makeProblem(int64_t b, int64_t s, int64_t hq, int64_t hkv,
                          int64_t d) {
  LinearProblem p;
  p.batch = b;
  p.seqlen = s;
  p.qHeads = hq;
  p.kvHeads = hkv;
  p.headDim = d;
  return p;
}

struct Result {
  std::vector<float> o;
  LinearState final;
};

Result run(Form form, const LinearProblem &p, const HostTensor &q,
           const HostTensor &k, const HostTensor &v,
           const LinearState &initial = {}) {
  Result r;
  // Poisoned so that unwritten elements show up.
  r.o.assign(static_cast<size_t>(p.batch * p.seqlen * p.qHeads * p.headDim),
             std::numeric_limits<float>::quiet_NaN());
  forwardOf(form)(p, q, k, v, r.o.data(), initial, &r.final);
  return r;
}

Result run(Form form, const LinearProblem &p, const Tensor &q, const Tensor &k,
           const Tensor &v, const LinearState &initial = {}) {
  return run(form, p, q.view, k.view, v.view, initial);
}

/// Where `a` and `b` differ by more than `rel` relative (plus a margin for
/// values that cancel to about zero), a message naming the first such
/// element; empty when they agree. Sizes must match.
template <typename T>
std::string firstDifference(const std::vector<T> &a, const std::vector<T> &b,
                            double rel) {
  if (a.size() != b.size())
    return "sizes " + std::to_string(a.size()) + " and " +
           std::to_string(b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i], y = b[i];
    if (!(std::fabs(x - y) <=
          rel * std::max(std::fabs(x), std::fabs(y)) + 1e-12)) {
      std::ostringstream os;
      os.precision(17);
      os << "element " << i << ": " << x << " vs " << y;
      return os.str();
    }
  }
  return {};
}

// The two forms agree to about 1e-15 in double; the outputs are fp32, where
// that is at most a rounding step apart. The states are double.
constexpr double kOutputRel = 1.2e-7;
constexpr double kStateRel = 1e-9;

void checkSame(const Result &a, const Result &b) {
  CHECK(firstDifference(a.o, b.o, kOutputRel) == "");
  CHECK(firstDifference(a.final.kv, b.final.kv, kStateRel) == "");
  CHECK(firstDifference(a.final.keySum, b.final.keySum, kStateRel) == "");
}

template <typename T>
void checkValues(const std::vector<T> &actual,
                 const std::vector<double> &expected) {
  REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    INFO("element " << i);
    CHECK(actual[i] == Approx(expected[i]).margin(1e-6));
  }
}

/// The outputs and final state of a hand-computed case.
struct Expected {
  std::vector<double> o, kv, keySum;
};

/// Runs `p` in both forms and checks each against `expected`.
void checkBoth(const LinearProblem &p, const Tensor &q, const Tensor &k,
               const Tensor &v, const LinearState &initial,
               const Expected &expected) {
  for (Form form : kForms) {
    INFO(formName(form));
    Result r = run(form, p, q, k, v, initial);
    checkValues(r.o, expected.o);
    checkValues(r.final.kv, expected.kv);
    checkValues(r.final.keySum, expected.keySum);
  }
}

/// checkBoth over the sequence q = (1, 2, -1), k = (1, -1, 2), v = (2, 3, 1)
/// (S = 3, D = 1, one head), repeated in every batch.
void checkTiny(const LinearProblem &p, const LinearState &initial,
               const Expected &expected) {
  std::vector<float> q, k, v;
  for (int64_t b = 0; b < p.batch; ++b) {
    q.insert(q.end(), {1, 2, -1});
    k.insert(k.end(), {1, -1, 2});
    v.insert(v.end(), {2, 3, 1});
  }
  checkBoth(p, makeTensor(p.batch, 3, 1, 1, q), makeTensor(p.batch, 3, 1, 1, k),
            makeTensor(p.batch, 3, 1, 1, v), initial, expected);
}

} // namespace

TEST_CASE("feature maps", "[linear]") {
  CHECK(applyFeatureMap(FeatureMap::Identity, -2.5) == -2.5);
  CHECK(applyFeatureMap(FeatureMap::Identity, 3.0) == 3.0);
  CHECK(applyFeatureMap(FeatureMap::Relu, -2.5) == 0.0);
  CHECK(applyFeatureMap(FeatureMap::Relu, 0.0) == 0.0);
  CHECK(applyFeatureMap(FeatureMap::Relu, 3.0) == 3.0);
  CHECK(applyFeatureMap(FeatureMap::EluPlusOne, 3.0) == 4.0);
  CHECK(applyFeatureMap(FeatureMap::EluPlusOne, 0.0) == 1.0);
  CHECK(applyFeatureMap(FeatureMap::EluPlusOne, -std::log(2.0)) ==
        Approx(0.5).epsilon(1e-15));
  CHECK(applyFeatureMap(FeatureMap::EluPlusOne, -1.0) ==
        Approx(0.36787944117144233).epsilon(1e-15));
}

TEST_CASE("multi-scale gamma", "[linear]") {
  CHECK(multiScaleGamma(0) == 1.0 - 1.0 / 32);
  CHECK(multiScaleGamma(1) == 1.0 - 1.0 / 64);
  CHECK(multiScaleGamma(3) == 1.0 - 1.0 / 256);
  CHECK(multiScaleGamma(7) == 1.0 - 1.0 / 4096);
  CHECK(multiScaleGamma(int64_t(1) << 40) == 1.0);
}

TEST_CASE("linear attention by hand", "[linear]") {
  // num_i = q_i * sum_{j <= i} k_j v_j: sums 2, -1, 1.
  LinearProblem p = makeProblem(1, 3, 1, 1, 1);
  p.scale = 0.5;
  checkTiny(p, {}, {{1, -1, -0.5}, {1}, {}});

  // o_0 = (q0.k0) v0 = 1 (1, 2); o_1 = 3 (1, 2) + 2 (3, -1);
  // S = k0 v0^T + k1 v1^T = [[1, 2], [1, 2]] + [[0, 0], [3, -1]].
  p = makeProblem(1, 2, 1, 1, 2);
  Tensor q = makeTensor(1, 2, 1, 2, {1, 0, 1, 2});
  Tensor k = makeTensor(1, 2, 1, 2, {1, 1, 0, 1});
  Tensor v = makeTensor(1, 2, 1, 2, {1, 2, 3, -1});
  checkBoth(p, q, k, v, {}, {{1, 2, 9, 4}, {1, 2, 4, 1}, {}});
  // S0[0][1] = 1 adds (0, q_i[0]); its transpose would add (q_i[1], 0).
  checkBoth(p, q, k, v, {{0, 1, 0, 0}, {}}, {{1, 3, 9, 5}, {1, 3, 4, 1}, {}});
}

TEST_CASE("normalized linear attention by hand", "[linear]") {
  LinearProblem p = makeProblem(1, 3, 1, 1, 1);
  p.scale = 0.5;
  p.normalize = true;
  // o_i = sum k_j v_j / sum k_j: 2/1, (2-3)/(1-1) -> 0, 1/2.
  checkTiny(p, {}, {{2, 0, 0.5}, {1}, {2}});
  // With S0 = z0 = 1: 3/2, 0/1, 2/3.
  checkTiny(p, {{1}, {1}}, {{1.5, 0, 2.0 / 3}, {2}, {3}});
}

TEST_CASE("non-causal linear attention by hand", "[linear]") {
  LinearProblem p = makeProblem(1, 3, 1, 1, 1);
  p.scale = 0.5;
  p.causal = false;
  // Every row sees the whole sum k.v = 1.
  checkTiny(p, {}, {{0.5, 1, -0.5}, {1}, {}});
  // Normalized, with S0 = z0 = 1: (1 + 1) / (2 + 1) in every row.
  p.normalize = true;
  checkTiny(p, {{1}, {1}}, {{2.0 / 3, 2.0 / 3, 2.0 / 3}, {2}, {3}});
}

TEST_CASE("retention with a fixed decay by hand", "[linear][retention]") {
  LinearProblem p = makeProblem(1, 3, 1, 1, 1);
  p.gamma = {0.5};
  // S_t = S_{t-1} / 2 + k_t v_t: 2, -2, 1.
  checkTiny(p, {}, {{2, -4, -1}, {1}, {}});
  // From S0 = 4: 4, -1, 1.5.
  checkTiny(p, {{4}, {}}, {{4, -2, -1.5}, {1.5}, {}});
  // gamma = 1 is plain linear attention.
  p.gamma = {1.0};
  checkTiny(p, {}, {{2, -2, -1}, {1}, {}});
}

TEST_CASE("gated retention by hand", "[linear][retention]") {
  LinearProblem p = makeProblem(2, 3, 1, 1, 1);
  const std::vector<float> logDecay = {
      std::log(0.5f), std::log(0.25f), std::log(0.5f), 0, 0, 0};
  p.logDecay = logDecay.data();
  // Batch 0 from S0 = 4: S = 4/2 + 2 = 4, 4/4 - 3 = -2, -2/2 + 2 = 1.
  // Batch 1, no decay, from zero: S = 2, -1, 1.
  checkTiny(p, {{4, 0}, {}}, {{4, -4, -1, 2, -2, -1}, {1, 1}, {}});
}

TEST_CASE("query heads share kv heads by h / (Hq / Hkv)", "[linear][gqa]") {
  // Query heads 0 and 1 read kv head 0 (v = 1), 2 and 3 kv head 1 (v = 10).
  checkBoth(makeProblem(1, 1, 4, 2, 1), makeTensor(1, 1, 4, 1, {1, 1, 1, 1}),
            makeTensor(1, 1, 2, 1, {1, 1}), makeTensor(1, 1, 2, 1, {1, 10}), {},
            {{1, 1, 10, 10}, {1, 1, 10, 10}, {}});
}

TEST_CASE("feature maps apply to q and k, not v", "[linear]") {
  LinearProblem p = makeProblem(1, 1, 1, 1, 2);
  const Tensor v = makeTensor(1, 1, 1, 2, {1, -1});
  // phi(q) = (1, 1/e), phi(k) = (2, 3).
  p.featureMap = FeatureMap::EluPlusOne;
  const double w = 2 + 3 / std::exp(1.0);
  checkBoth(p, makeTensor(1, 1, 1, 2, {0, -1}), makeTensor(1, 1, 1, 2, {1, 2}),
            v, {}, {{w, -w}, {2, -2, 3, -3}, {}});
  // phi(q) = (2, 0), phi(k) = (1, 0).
  p.featureMap = FeatureMap::Relu;
  checkBoth(p, makeTensor(1, 1, 1, 2, {2, -1}), makeTensor(1, 1, 1, 2, {1, -3}),
            v, {}, {{2, -2}, {1, -1, 0, 0}, {}});
}

TEST_CASE("parallel and recurrent forms agree", "[linear][retention]") {
  enum class Decay { None, MultiScale, Gated };
  const int64_t b = 2, hq = 4, hkv = 2;
  unsigned seed = 1;
  for (int64_t s : {1, 63, 65, 130})
    for (int64_t d : {8, 16})
      for (FeatureMap map :
           {FeatureMap::Identity, FeatureMap::Relu, FeatureMap::EluPlusOne})
        for (Decay decay : {Decay::None, Decay::MultiScale, Decay::Gated})
          for (bool normalize : {false, true})
            for (bool causal : {true, false}) {
              if (decay != Decay::None && (normalize || !causal))
                continue;
              INFO("S=" << s << " D=" << d << " map=" << int(map)
                        << " decay=" << int(decay) << " normalize=" << normalize
                        << " causal=" << causal);
              std::mt19937 rng(seed++);
              LinearProblem p = makeProblem(b, s, hq, hkv, d);
              p.scale = 1.0 / std::sqrt(double(d));
              p.featureMap = map;
              p.normalize = normalize;
              p.causal = causal;
              std::vector<float> logDecay;
              if (decay == Decay::MultiScale)
                for (int64_t h = 0; h < hq; ++h)
                  p.gamma.push_back(multiScaleGamma(h));
              if (decay == Decay::Gated) {
                logDecay = randomValues(size_t(b * s * hq), rng, -0.5f, 0.0f);
                p.logDecay = logDecay.data();
              }
              const auto qValues = randomValues(size_t(b * s * hq * d), rng),
                         kValues = randomValues(size_t(b * s * hkv * d), rng),
                         vValues = randomValues(size_t(b * s * hkv * d), rng);
              LinearState initial;
              initial.kv = randomDoubles(size_t(b * hq * d * d), rng);
              if (normalize)
                initial.keySum = randomDoubles(size_t(b * hq * d), rng);

              Result byForm[2], strided[2];
              for (bool isStrided : {false, true}) {
                Tensor q = makeTensor(b, s, hq, d, qValues, isStrided),
                       k = makeTensor(b, s, hkv, d, kValues, isStrided),
                       v = makeTensor(b, s, hkv, d, vValues, isStrided);
                for (int f = 0; f < 2; ++f)
                  (isStrided ? strided : byForm)[f] =
                      run(kForms[f], p, q, k, v, initial);
              }
              checkSame(byForm[0], byForm[1]);
              // The same arithmetic on another layout: equal to the bit.
              for (int f = 0; f < 2; ++f) {
                CHECK(firstDifference(strided[f].o, byForm[f].o, 0.0) == "");
                CHECK(firstDifference(strided[f].final.kv, byForm[f].final.kv,
                                      0.0) == "");
              }
            }
}

TEST_CASE("two halves chained through the state equal one run",
          "[linear][retention]") {
  const int64_t b = 2, s = 37, s1 = 16, s2 = s - s1, hq = 4, hkv = 2, d = 8;
  std::mt19937 rng(99);
  const auto qValues = randomValues(size_t(b * s * hq * d), rng),
             kValues = randomValues(size_t(b * s * hkv * d), rng),
             vValues = randomValues(size_t(b * s * hkv * d), rng);
  std::vector<float> logDecay = randomValues(size_t(b * s * hq), rng, -0.5f, 0);
  // logDecay is contiguous [B, S, Hq]: the halves are copies.
  std::vector<float> logDecay1, logDecay2;
  for (int64_t ib = 0; ib < b; ++ib)
    for (int64_t t = 0; t < s; ++t)
      for (int64_t h = 0; h < hq; ++h)
        (t < s1 ? logDecay1 : logDecay2)
            .push_back(logDecay[size_t((ib * s + t) * hq + h)]);

  enum class Kind { Linear, Normalized, MultiScale, Gated };
  for (Kind kind :
       {Kind::Linear, Kind::Normalized, Kind::MultiScale, Kind::Gated})
    for (Form form : kForms) {
      INFO(formName(form) << " kind=" << int(kind));
      Tensor q = makeTensor(b, s, hq, d, qValues, true),
             k = makeTensor(b, s, hkv, d, kValues, true),
             v = makeTensor(b, s, hkv, d, vValues, true);
      LinearProblem whole = makeProblem(b, s, hq, hkv, d);
      whole.featureMap = FeatureMap::EluPlusOne;
      whole.normalize = kind == Kind::Normalized;
      if (kind == Kind::MultiScale)
        for (int64_t h = 0; h < hq; ++h)
          whole.gamma.push_back(multiScaleGamma(h));
      LinearProblem first = whole, second = whole;
      first.seqlen = s1;
      second.seqlen = s2;
      if (kind == Kind::Gated) {
        whole.logDecay = logDecay.data();
        first.logDecay = logDecay1.data();
        second.logDecay = logDecay2.data();
      }
      LinearState initial;
      initial.kv = randomDoubles(size_t(b * hq * d * d), rng);
      if (whole.normalize)
        initial.keySum = randomDoubles(size_t(b * hq * d), rng);

      Result all = run(form, whole, q, k, v, initial);
      Result part1 = run(form, first, q, k, v, initial);
      // The second half starts s1 tokens in; the strides are unchanged.
      auto from = [&](const Tensor &t) {
        HostTensor view = t.view;
        view.data += s1 * view.strides[1];
        return view;
      };
      Result part2 = run(form, second, from(q), from(k), from(v), part1.final);
      Result joined;
      for (int64_t ib = 0; ib < b; ++ib)
        for (const Result *part : {&part1, &part2}) {
          const int64_t len = part == &part1 ? s1 : s2;
          auto begin = part->o.begin() + ib * len * hq * d;
          joined.o.insert(joined.o.end(), begin, begin + len * hq * d);
        }
      joined.final = part2.final;
      checkSame(joined, all);
    }
}

TEST_CASE("an empty sequence returns the initial state", "[linear]") {
  for (Form form : kForms) {
    INFO(formName(form));
    LinearProblem p = makeProblem(1, 0, 2, 1, 2);
    p.normalize = true;
    LinearState initial;
    initial.kv = {1, 2, 3, 4, 5, 6, 7, 8};
    initial.keySum = {-1, -2, -3, -4};
    Result r = run(form, p, HostTensor{nullptr, {}}, HostTensor{nullptr, {}},
                   HostTensor{nullptr, {}}, initial);
    CHECK(r.o.empty());
    CHECK(r.final.kv == initial.kv);
    CHECK(r.final.keySum == initial.keySum);
    // No initial state reads as zero.
    r = run(form, p, HostTensor{nullptr, {}}, HostTensor{nullptr, {}},
            HostTensor{nullptr, {}});
    CHECK(r.final.kv == std::vector<double>(8, 0.0));
    CHECK(r.final.keySum == std::vector<double>(4, 0.0));
  }
}

TEST_CASE("the final state may be the initial state", "[linear]") {
  for (Form form : kForms) {
    INFO(formName(form));
    LinearProblem p = makeProblem(1, 3, 1, 1, 1);
    p.gamma = {0.5};
    Tensor q = makeTensor(1, 3, 1, 1, {1, 2, -1}),
           k = makeTensor(1, 3, 1, 1, {1, -1, 2}),
           v = makeTensor(1, 3, 1, 1, {2, 3, 1});
    // The retention case by hand from S0 = 4.
    LinearState state;
    state.kv = {4};
    std::vector<float> o(3);
    auto fn = forwardOf(form);
    fn(p, q.view, k.view, v.view, o.data(), state, &state);
    checkValues(o, {4, -2, -1.5});
    checkValues(state.kv, {1.5});
  }
}

TEST_CASE("inconsistent problems throw", "[linear]") {
  const int64_t b = 1, s = 2, hq = 2, hkv = 1, d = 2;
  const std::vector<float> values(size_t(b * s * hq * d), 0.5f);
  const HostTensor t{values.data(), {s * hq * d, hq * d, d, 1}};
  const std::vector<float> logDecay(size_t(b * s * hq), -0.1f);
  std::vector<float> o(values.size());
  const LinearProblem good = makeProblem(b, s, hq, hkv, d);

  for (Form form : kForms) {
    INFO(formName(form));
    auto fn = forwardOf(form);
    auto throws = [&](const LinearProblem &p, const LinearState &initial = {}) {
      LinearState final;
      try {
        fn(p, t, t, t, o.data(), initial, &final);
      } catch (const std::invalid_argument &) {
        return true;
      }
      return false;
    };
    CHECK_FALSE(throws(good));
    LinearProblem p = good;

    p = good, p.batch = -1;
    CHECK(throws(p));
    p = good, p.seqlen = -1;
    CHECK(throws(p));
    p = good, p.qHeads = 0;
    CHECK(throws(p));
    p = good, p.kvHeads = 0;
    CHECK(throws(p));
    p = good, p.qHeads = 3, p.kvHeads = 2;
    CHECK(throws(p));
    p = good, p.headDim = 0;
    CHECK(throws(p));
    p = good, p.scale = std::numeric_limits<double>::infinity();
    CHECK(throws(p));
    p = good, p.featureMap = static_cast<FeatureMap>(7);
    CHECK(throws(p));

    p = good, p.gamma = {0.5};
    CHECK(throws(p)); // one value, two heads
    p = good, p.gamma = {0.5, 0.0};
    CHECK(throws(p));
    p = good, p.gamma = {0.5, 1.5};
    CHECK(throws(p));
    p = good, p.gamma = {0.5, std::nan("")};
    CHECK(throws(p));
    p = good, p.gamma = {0.5, 1.0};
    CHECK_FALSE(throws(p));
    p.logDecay = logDecay.data();
    CHECK(throws(p)); // gamma and logDecay
    p.causal = false, p.gamma.clear();
    CHECK(throws(p)); // non-causal with logDecay
    p = good, p.gamma = {0.5, 0.5}, p.causal = false;
    CHECK(throws(p));
    p = good, p.gamma = {0.5, 0.5}, p.normalize = true;
    CHECK(throws(p));
    p = good, p.logDecay = logDecay.data(), p.normalize = true;
    CHECK(throws(p));
    for (float bad : {0.25f, std::numeric_limits<float>::quiet_NaN(),
                      -std::numeric_limits<float>::infinity()}) {
      std::vector<float> badDecay = logDecay;
      badDecay.back() = bad;
      p = good, p.logDecay = badDecay.data();
      CHECK(throws(p));
    }

    LinearState state;
    state.kv.assign(size_t(b * hq * d * d), 0.0);
    CHECK_FALSE(throws(good, state));
    state.kv.pop_back();
    CHECK(throws(good, state));
    state.kv.clear();
    state.keySum.assign(size_t(b * hq * d), 0.0);
    CHECK(throws(good, state)); // keySum without normalize
    p = good, p.normalize = true;
    CHECK_FALSE(throws(p, state));
    state.keySum.push_back(0.0);
    CHECK(throws(p, state));

    LinearState final;
    CHECK_THROWS_AS(
        fn(good, HostTensor{nullptr, {}}, t, t, o.data(), {}, &final),
        std::invalid_argument);
    CHECK_THROWS_AS(
        fn(good, t, HostTensor{nullptr, {}}, t, o.data(), {}, &final),
        std::invalid_argument);
    CHECK_THROWS_AS(
        fn(good, t, t, HostTensor{nullptr, {}}, o.data(), {}, &final),
        std::invalid_argument);
    CHECK_THROWS_AS(fn(good, t, t, t, nullptr, {}, &final),
                    std::invalid_argument);
  }
  CHECK_THROWS_AS(applyFeatureMap(static_cast<FeatureMap>(7), 1.0),
                  std::invalid_argument);
  CHECK_THROWS_AS(multiScaleGamma(-1), std::invalid_argument);
}

// ---------------------------------------------------------------------------
// The backward of the parallel form against central finite differences of
// the forward, through L = sum(dO . o) + <dS, S_final> + <dz, z_final>.

namespace {

/// Inputs of one finite-difference check, all perturbable.
struct BackwardCase {
  LinearProblem p;
  std::vector<float> q, k, v, dO, logDecay;
  LinearState initial, dFinal;
};

double lossOf(const BackwardCase &c) {
  LinearProblem p = c.p;
  p.logDecay = c.logDecay.empty() ? nullptr : c.logDecay.data();
  const int64_t b = p.batch, s = p.seqlen, d = p.headDim;
  Result r = run(Form::Parallel, p, makeTensor(b, s, p.qHeads, d, c.q),
                 makeTensor(b, s, p.kvHeads, d, c.k),
                 makeTensor(b, s, p.kvHeads, d, c.v), c.initial);
  double loss = 0;
  for (size_t i = 0; i < r.o.size(); ++i)
    loss += double(c.dO[i]) * double(r.o[i]);
  for (size_t i = 0; i < c.dFinal.kv.size(); ++i)
    loss += c.dFinal.kv[i] * r.final.kv[i];
  for (size_t i = 0; i < c.dFinal.keySum.size(); ++i)
    loss += c.dFinal.keySum[i] * r.final.keySum[i];
  return loss;
}

/// Checks `grad` against central differences of lossOf in each element of
/// `values` (a member of `c`), stepping by `h` (the step actually taken
/// after rounding to T).
template <typename T>
void checkAgainstDifferences(BackwardCase &c, std::vector<T> &values,
                             const std::vector<double> &grad, double h,
                             const char *name) {
  REQUIRE(grad.size() == values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const T saved = values[i];
    const T up = static_cast<T>(double(saved) + h),
            down = static_cast<T>(double(saved) - h);
    values[i] = up;
    const double lossUp = lossOf(c);
    values[i] = down;
    const double lossDown = lossOf(c);
    values[i] = saved;
    const double numeric = (lossUp - lossDown) / (double(up) - double(down));
    INFO(name << "[" << i << "]: analytic " << grad[i] << ", numeric "
              << numeric);
    CHECK(std::fabs(grad[i] - numeric) <= 2e-3 + 2e-3 * std::fabs(numeric));
  }
}

/// Values uniform in [-1, 1) kept 0.05 away from relu's kink, so that no
/// step of the differences crosses it.
std::vector<float> awayFromZero(size_t n, std::mt19937 &rng) {
  std::vector<float> values = randomValues(n, rng);
  for (float &x : values)
    if (std::fabs(x) < 0.05f)
      x = x < 0 ? x - 0.05f : x + 0.05f;
  return values;
}

} // namespace

TEST_CASE("linear backward matches finite differences of the forward",
          "[linear][backward]") {
  enum class Decay { None, MultiScale, Gated };
  const int64_t b = 2, s = 6, hq = 4, hkv = 2, d = 3;
  unsigned seed = 100;
  for (FeatureMap map :
       {FeatureMap::Identity, FeatureMap::Relu, FeatureMap::EluPlusOne})
    for (Decay decay : {Decay::None, Decay::MultiScale, Decay::Gated})
      for (bool normalize : {false, true})
        for (bool causal : {true, false}) {
          if (decay != Decay::None && (normalize || !causal))
            continue;
          // Normalized by a key sum of mixed signs, den comes near 0.
          if (normalize && map != FeatureMap::EluPlusOne)
            continue;
          INFO("map=" << int(map) << " decay=" << int(decay)
                      << " normalize=" << normalize << " causal=" << causal);
          std::mt19937 rng(seed++);
          BackwardCase c;
          c.p = makeProblem(b, s, hq, hkv, d);
          c.p.scale = 0.7;
          c.p.featureMap = map;
          c.p.normalize = normalize;
          c.p.causal = causal;
          if (decay == Decay::MultiScale)
            for (int64_t h = 0; h < hq; ++h)
              c.p.gamma.push_back(0.9 - 0.1 * double(h));
          if (decay == Decay::Gated)
            c.logDecay = randomValues(size_t(b * s * hq), rng, -0.6f, -0.05f);
          c.q = awayFromZero(size_t(b * s * hq * d), rng);
          c.k = awayFromZero(size_t(b * s * hkv * d), rng);
          c.v = randomValues(size_t(b * s * hkv * d), rng);
          c.dO = randomValues(size_t(b * s * hq * d), rng);
          c.initial.kv = randomDoubles(size_t(b * hq * d * d), rng);
          c.dFinal.kv = randomDoubles(size_t(b * hq * d * d), rng);
          if (normalize) {
            // Positive, as a sum of elu+1 features is.
            c.initial.keySum = randomDoubles(size_t(b * hq * d), rng);
            for (double &z : c.initial.keySum)
              z = 1.5 + z;
            c.dFinal.keySum = randomDoubles(size_t(b * hq * d), rng);
          }

          LinearProblem p = c.p;
          p.logDecay = c.logDecay.empty() ? nullptr : c.logDecay.data();
          LinearGradients g;
          linearBackwardParallel(
              p, makeTensor(b, s, hq, d, c.q).view,
              makeTensor(b, s, hkv, d, c.k).view,
              makeTensor(b, s, hkv, d, c.v).view,
              makeTensor(b, s, hq, d, c.dO).view, c.initial, c.dFinal, &g);
          CHECK(g.dLogDecay.size() == c.logDecay.size());
          checkAgainstDifferences(c, c.q, g.dq, 2e-3, "dq");
          checkAgainstDifferences(c, c.k, g.dk, 2e-3, "dk");
          checkAgainstDifferences(c, c.v, g.dv, 2e-3, "dv");
          checkAgainstDifferences(c, c.logDecay, g.dLogDecay, 2e-3, "dg");
          checkAgainstDifferences(c, c.initial.kv, g.dInitial.kv, 1e-3,
                                  "dS0");
          checkAgainstDifferences(c, c.initial.keySum, g.dInitial.keySum,
                                  1e-3, "dz0");
        }
}

TEST_CASE("linear backward by hand", "[linear][backward]") {
  // S = 2, D = 1, one head, scale 1, identity map, no decay, causal:
  // o_0 = q0 k0 v0, o_1 = q1 (k0 v0 + k1 v1). With q = (2, 3), k = (1, -1),
  // v = (4, 5) and dO = (1, 2): dq_0 = 4, dq_1 = 2 (4 - 5) = -2,
  // dk_0 = 2 * 4 + 2 * 3 * 4 = 32, dk_1 = 2 * 3 * 5 = 30,
  // dv_0 = 2 * 1 + 2 * 3 * 1 = 8, dv_1 = 2 * 3 * -1 = -6.
  LinearProblem p = makeProblem(1, 2, 1, 1, 1);
  LinearGradients g;
  linearBackwardParallel(p, makeTensor(1, 2, 1, 1, {2, 3}).view,
                         makeTensor(1, 2, 1, 1, {1, -1}).view,
                         makeTensor(1, 2, 1, 1, {4, 5}).view,
                         makeTensor(1, 2, 1, 1, {1, 2}).view, {}, {}, &g);
  checkValues(g.dq, {4, -2});
  checkValues(g.dk, {32, 30});
  checkValues(g.dv, {8, -6});
  // dS0 = sum_i q_i dO_i = 2 + 6.
  checkValues(g.dInitial.kv, {8});
}

TEST_CASE("linear backward rejects inconsistent gradients",
          "[linear][backward]") {
  LinearProblem p = makeProblem(1, 2, 1, 1, 1);
  Tensor t = makeTensor(1, 2, 1, 1, {1, 2});
  LinearGradients g;
  LinearState dFinal;
  dFinal.kv = {1, 2};
  CHECK_THROWS_WITH(
      linearBackwardParallel(p, t.view, t.view, t.view, t.view, {}, dFinal, &g),
      Catch::Contains("dFinal.kv"));
  dFinal.kv.clear();
  dFinal.keySum = {1};
  CHECK_THROWS_WITH(
      linearBackwardParallel(p, t.view, t.view, t.view, t.view, {}, dFinal, &g),
      Catch::Contains("only for normalized"));
  CHECK_THROWS_WITH(linearBackwardParallel(p, t.view, t.view, t.view,
                                           HostTensor{nullptr, {2, 1, 1, 1}},
                                           {}, {}, &g),
                    Catch::Contains("dO is null"));
}
