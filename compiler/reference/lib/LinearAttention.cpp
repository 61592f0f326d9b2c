//===- LinearAttention.cpp - CPU oracle for linear attention --------------===//
//
// Both forms work on one (batch, query head) pair at a time, from the same
// double copies of phi(q), phi(k), v and the log-decays; beyond that they
// share nothing. The parallel form evaluates the quadratic sum literally,
// with decay(i, j) from prefix sums of the log-decay, and builds the final
// state from its closed form; the recurrent form updates the state token by
// token. Pairs are spread over threads and computed independently, so the
// result does not depend on the thread count.
//
//===----------------------------------------------------------------------===//

#include "attn/Reference/LinearAttention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

namespace attn::reference {

double applyFeatureMap(FeatureMap map, double x) {
  switch (map) {
  case FeatureMap::Identity:
    return x;
  case FeatureMap::Relu:
    return x > 0 ? x : 0.0;
  case FeatureMap::EluPlusOne:
    return x > 0 ? x + 1.0 : std::exp(x);
  }
  throw std::invalid_argument(
      "linear attention reference: unknown feature map");
}

double featureMapDerivative(FeatureMap map, double x) {
  switch (map) {
  case FeatureMap::Identity:
    return 1.0;
  case FeatureMap::Relu:
    return x > 0 ? 1.0 : 0.0;
  case FeatureMap::EluPlusOne:
    return x > 0 ? 1.0 : std::exp(x);
  }
  throw std::invalid_argument(
      "linear attention reference: unknown feature map");
}

double multiScaleGamma(int64_t head) {
  if (head < 0)
    throw std::invalid_argument(
        "linear attention reference: head must be non-negative");
  // Clamped so that the exponent fits an int; 2^-2005 is 0 in double.
  return 1.0 -
         std::ldexp(1.0, -5 - static_cast<int>(std::min<int64_t>(head, 2000)));
}

namespace {

[[noreturn]] void invalid(const std::string &what) {
  throw std::invalid_argument("linear attention reference: " + what);
}

bool hasDecay(const LinearProblem &p) { return !p.gamma.empty() || p.logDecay; }

void validate(const LinearProblem &p, const HostTensor &q, const HostTensor &k,
              const HostTensor &v, const float *o, const LinearState &initial) {
  if (p.batch < 0 || p.seqlen < 0)
    invalid("batch and seqlen must be non-negative");
  if (p.qHeads <= 0 || p.kvHeads <= 0)
    invalid("head counts must be positive");
  if (p.headDim <= 0)
    invalid("headDim must be positive");
  if (p.qHeads % p.kvHeads != 0)
    invalid("kvHeads (" + std::to_string(p.kvHeads) + ") must divide qHeads (" +
            std::to_string(p.qHeads) + ")");
  if (!std::isfinite(p.scale))
    invalid("scale must be finite");
  if (p.featureMap != FeatureMap::Identity &&
      p.featureMap != FeatureMap::Relu &&
      p.featureMap != FeatureMap::EluPlusOne)
    invalid("unknown feature map");

  if (!p.gamma.empty()) {
    if (static_cast<int64_t>(p.gamma.size()) != p.qHeads)
      invalid("gamma must have one value per query head");
    for (double g : p.gamma)
      if (!(g > 0 && g <= 1))
        invalid("gamma must lie in (0, 1]");
  }
  if (!p.gamma.empty() && p.logDecay)
    invalid("gamma and logDecay are alternatives");
  if (p.normalize && hasDecay(p))
    invalid("normalize is for linear attention only, not with a decay");
  if (!p.causal && hasDecay(p))
    invalid("non-causal is for linear attention only, not with a decay");

  const bool hasTokens = p.batch > 0 && p.seqlen > 0;
  if (hasTokens && (!q.data || !k.data || !v.data))
    invalid("q, k or v is null");
  if (hasTokens && !o)
    invalid("o is null");
  if (p.logDecay) {
    // -inf is excluded too: prefix sums of it cannot be subtracted.
    const int64_t n = p.batch * p.seqlen * p.qHeads;
    for (int64_t i = 0; i < n; ++i)
      if (!(std::isfinite(p.logDecay[i]) && p.logDecay[i] <= 0))
        invalid("logDecay must be finite and <= 0");
  }

  const int64_t states = p.batch * p.qHeads;
  if (!initial.kv.empty() &&
      static_cast<int64_t>(initial.kv.size()) != states * p.headDim * p.headDim)
    invalid("initial.kv must be empty or of size B*Hq*D*D");
  if (!initial.keySum.empty()) {
    if (!p.normalize)
      invalid("initial.keySum is only for normalized linear attention");
    if (static_cast<int64_t>(initial.keySum.size()) != states * p.headDim)
      invalid("initial.keySum must be empty or of size B*Hq*D");
  }
}

/// One (batch, query head) pair's inputs in double, token-major: phi(q),
/// phi(k), v and the log-decay g, and its slices of the state and output.
struct Head {
  int64_t seqlen = 0, dim = 0;
  std::vector<double> q, k, v, g;
  const double *kv0 = nullptr, *keySum0 = nullptr;   // null: zero
  double *kvFinal = nullptr, *keySumFinal = nullptr; // null: not wanted
  float *o = nullptr;
  int64_t oTokenStride = 0;

  const double *qAt(int64_t t) const { return q.data() + t * dim; }
  const double *kAt(int64_t t) const { return k.data() + t * dim; }
  const double *vAt(int64_t t) const { return v.data() + t * dim; }
};

void load(const HostTensor &t, int64_t b, int64_t h, int64_t seqlen,
          int64_t dim, FeatureMap map, std::vector<double> &out) {
  out.resize(static_cast<size_t>(seqlen * dim));
  for (int64_t s = 0; s < seqlen; ++s) {
    const float *row =
        t.data + b * t.strides[0] + s * t.strides[1] + h * t.strides[2];
    for (int64_t d = 0; d < dim; ++d)
      out[s * dim + d] = applyFeatureMap(map, double(row[d * t.strides[3]]));
  }
}

void loadHead(const LinearProblem &p, const HostTensor &q, const HostTensor &k,
              const HostTensor &v, const LinearState &initial, float *o,
              LinearState *final, int64_t b, int64_t h, Head &head) {
  const int64_t s = p.seqlen, d = p.headDim;
  const int64_t kvHead = h / (p.qHeads / p.kvHeads);
  const int64_t state = b * p.qHeads + h;
  head.seqlen = s;
  head.dim = d;
  load(q, b, h, s, d, p.featureMap, head.q);
  load(k, b, kvHead, s, d, p.featureMap, head.k);
  load(v, b, kvHead, s, d, FeatureMap::Identity, head.v);
  head.g.assign(static_cast<size_t>(s), 0.0);
  for (int64_t t = 0; t < s; ++t) {
    if (p.logDecay)
      head.g[t] = double(p.logDecay[(b * s + t) * p.qHeads + h]);
    else if (!p.gamma.empty())
      head.g[t] = std::log(p.gamma[h]);
  }
  head.kv0 = initial.kv.empty() ? nullptr : &initial.kv[state * d * d];
  head.keySum0 = initial.keySum.empty() ? nullptr : &initial.keySum[state * d];
  head.kvFinal = final ? &final->kv[state * d * d] : nullptr;
  head.keySumFinal = final && p.normalize ? &final->keySum[state * d] : nullptr;
  head.o = o ? o + (b * s * p.qHeads + h) * d : nullptr;
  head.oTokenStride = p.qHeads * d;
}

double dot(const double *a, const double *b, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i)
    sum += a[i] * b[i];
  return sum;
}

/// o_t = s num, or s num / (s den) with `normalize` (0 where that is 0).
void writeOutput(const LinearProblem &p, const Head &head, int64_t t,
                 const std::vector<double> &num, double den) {
  float *row = head.o + t * head.oTokenStride;
  const double sden = p.scale * den;
  for (int64_t c = 0; c < head.dim; ++c) {
    double value = p.scale * num[c];
    if (p.normalize)
      value = sden == 0 ? 0.0 : value / sden;
    row[c] = static_cast<float>(value);
  }
}

void parallelHead(const LinearProblem &p, const Head &head) {
  const int64_t n = head.seqlen, d = head.dim;
  // prefix[t] = g_0 + ... + g_{t-1}, so decay(i, j) is
  // exp(prefix[i + 1] - prefix[j + 1]).
  std::vector<double> prefix(static_cast<size_t>(n + 1), 0.0);
  for (int64_t t = 0; t < n; ++t)
    prefix[t + 1] = prefix[t] + head.g[t];

  std::vector<double> num(static_cast<size_t>(d));
  for (int64_t i = 0; i < n; ++i) {
    const double *qi = head.qAt(i);
    std::fill(num.begin(), num.end(), 0.0);
    double den = 0;
    const int64_t last = p.causal ? i : n - 1;
    for (int64_t j = 0; j <= last; ++j) {
      const double w = dot(qi, head.kAt(j), d);
      den += w;
      const double weight = std::exp(prefix[i + 1] - prefix[j + 1]) * w;
      const double *vj = head.vAt(j);
      for (int64_t c = 0; c < d; ++c)
        num[c] += weight * vj[c];
    }
    if (head.kv0) {
      const double decay0 = std::exp(prefix[i + 1]);
      for (int64_t a = 0; a < d; ++a)
        for (int64_t c = 0; c < d; ++c)
          num[c] += decay0 * qi[a] * head.kv0[a * d + c];
    }
    if (head.keySum0)
      den += dot(qi, head.keySum0, d);
    writeOutput(p, head, i, num, den);
  }

  if (head.kvFinal) {
    const double decay0 = std::exp(prefix[n]);
    for (int64_t e = 0; e < d * d; ++e)
      head.kvFinal[e] = head.kv0 ? decay0 * head.kv0[e] : 0.0;
    for (int64_t j = 0; j < n; ++j) {
      const double decay = std::exp(prefix[n] - prefix[j + 1]);
      const double *kj = head.kAt(j), *vj = head.vAt(j);
      for (int64_t a = 0; a < d; ++a)
        for (int64_t c = 0; c < d; ++c)
          head.kvFinal[a * d + c] += decay * kj[a] * vj[c];
    }
  }
  if (head.keySumFinal) {
    for (int64_t a = 0; a < d; ++a) {
      double z = head.keySum0 ? head.keySum0[a] : 0.0;
      for (int64_t j = 0; j < n; ++j)
        z += head.kAt(j)[a];
      head.keySumFinal[a] = z;
    }
  }
}

void recurrentHead(const LinearProblem &p, const Head &head) {
  const int64_t n = head.seqlen, d = head.dim;
  std::vector<double> kv(static_cast<size_t>(d * d), 0.0);
  std::vector<double> keySum(static_cast<size_t>(d), 0.0);
  if (head.kv0)
    std::copy(head.kv0, head.kv0 + d * d, kv.begin());
  if (head.keySum0)
    std::copy(head.keySum0, head.keySum0 + d, keySum.begin());

  std::vector<double> num(static_cast<size_t>(d));
  auto emit = [&](int64_t t) {
    const double *qt = head.qAt(t);
    std::fill(num.begin(), num.end(), 0.0);
    for (int64_t a = 0; a < d; ++a)
      for (int64_t c = 0; c < d; ++c)
        num[c] += qt[a] * kv[a * d + c];
    writeOutput(p, head, t, num, dot(qt, keySum.data(), d));
  };
  for (int64_t t = 0; t < n; ++t) {
    const double decay = std::exp(head.g[t]);
    const double *kt = head.kAt(t), *vt = head.vAt(t);
    for (int64_t a = 0; a < d; ++a) {
      for (int64_t c = 0; c < d; ++c)
        kv[a * d + c] = decay * kv[a * d + c] + kt[a] * vt[c];
      keySum[a] += kt[a];
    }
    if (p.causal)
      emit(t);
  }
  if (!p.causal)
    for (int64_t t = 0; t < n; ++t)
      emit(t);

  if (head.kvFinal)
    std::copy(kv.begin(), kv.end(), head.kvFinal);
  if (head.keySumFinal)
    std::copy(keySum.begin(), keySum.end(), head.keySumFinal);
}

/// Calls fn(item) for every item in [0, numItems), on several threads when
/// `work` (multiply-adds) is large enough to pay for them. The first
/// exception is rethrown once every thread has stopped.
template <typename Fn>
void forEachItem(int64_t numItems, double work, const Fn &fn) {
  std::atomic<int64_t> next{0};
  std::mutex failureMutex;
  std::exception_ptr failure;
  auto worker = [&]() {
    try {
      for (int64_t item = next++; item < numItems; item = next++)
        fn(item);
    } catch (...) {
      next = numItems;
      std::lock_guard<std::mutex> lock(failureMutex);
      if (!failure)
        failure = std::current_exception();
    }
  };
  unsigned numThreads = std::max(1u, std::thread::hardware_concurrency());
  if (work < 4e6)
    numThreads = 1;
  numThreads = static_cast<unsigned>(std::min<int64_t>(numThreads, numItems));
  std::vector<std::thread> helpers;
  for (unsigned i = 1; i < numThreads; ++i) {
    try {
      helpers.emplace_back(worker);
    } catch (const std::system_error &) {
      break; // the counter shares the items among the threads there are
    }
  }
  worker();
  for (std::thread &t : helpers)
    t.join();
  if (failure)
    std::rethrow_exception(failure);
}

using HeadFn = void (*)(const LinearProblem &, const Head &);

void run(const LinearProblem &p, const HostTensor &q, const HostTensor &k,
         const HostTensor &v, float *o, const LinearState &initial,
         LinearState *final, HeadFn headFn, double workPerHead) {
  validate(p, q, k, v, o, initial);
  // Built aside so that `final` may be `&initial`.
  LinearState result;
  if (final) {
    result.kv.assign(
        static_cast<size_t>(p.batch * p.qHeads * p.headDim * p.headDim), 0.0);
    if (p.normalize)
      result.keySum.assign(static_cast<size_t>(p.batch * p.qHeads * p.headDim),
                           0.0);
  }
  const int64_t numItems = p.batch * p.qHeads;
  forEachItem(numItems, double(numItems) * workPerHead, [&](int64_t item) {
    Head head;
    loadHead(p, q, k, v, initial, o, final ? &result : nullptr, item / p.qHeads,
             item % p.qHeads, head);
    headFn(p, head);
  });
  if (final)
    *final = std::move(result);
}

} // namespace

void linearForwardParallel(const LinearProblem &problem, const HostTensor &q,
                           const HostTensor &k, const HostTensor &v, float *o,
                           const LinearState &initial, LinearState *final) {
  const double s = double(problem.seqlen), d = double(problem.headDim);
  run(problem, q, k, v, o, initial, final, parallelHead, 2 * s * s * d);
}

void linearForwardRecurrent(const LinearProblem &problem, const HostTensor &q,
                            const HostTensor &k, const HostTensor &v, float *o,
                            const LinearState &initial, LinearState *final) {
  const double s = double(problem.seqlen), d = double(problem.headDim);
  run(problem, q, k, v, o, initial, final, recurrentHead, 2 * s * d * d);
}

namespace {

/// One (batch, query head) pair's gradients, before the query heads of a kv
/// head are summed.
struct HeadGradients {
  std::vector<double> dq, dk, dv, dg, dKv0, dKeySum0;
};

/// The backward of parallelHead for one pair. `dO` is token-major; dKvFinal
/// and dKeySumFinal may be null (zero).
void parallelHeadBackward(const LinearProblem &p, const Head &head,
                          const std::vector<double> &rawQ,
                          const std::vector<double> &rawK,
                          const std::vector<double> &dO,
                          const double *dKvFinal, const double *dKeySumFinal,
                          HeadGradients &out) {
  const int64_t n = head.seqlen, d = head.dim;
  const double s = p.scale;
  std::vector<double> prefix(static_cast<size_t>(n + 1), 0.0);
  for (int64_t t = 0; t < n; ++t)
    prefix[t + 1] = prefix[t] + head.g[t];
  auto lastKey = [&](int64_t i) { return p.causal ? i : n - 1; };
  auto decay = [&](int64_t i, int64_t j) {
    return std::exp(prefix[i + 1] - prefix[j + 1]);
  };

  // dnum_i and dden_i: dO itself without `normalize`; else through
  // o = num / den, both scaled by s, with 0 where den is 0.
  std::vector<double> dNum(dO);
  std::vector<double> dDen(static_cast<size_t>(n), 0.0);
  if (p.normalize) {
    std::vector<double> num(static_cast<size_t>(d));
    for (int64_t i = 0; i < n; ++i) {
      const double *qi = head.qAt(i);
      std::fill(num.begin(), num.end(), 0.0);
      double den = head.keySum0 ? dot(qi, head.keySum0, d) : 0.0;
      for (int64_t j = 0; j <= lastKey(i); ++j) {
        const double w = dot(qi, head.kAt(j), d);
        den += w;
        for (int64_t c = 0; c < d; ++c)
          num[c] += w * head.vAt(j)[c];
      }
      if (head.kv0)
        for (int64_t a = 0; a < d; ++a)
          for (int64_t c = 0; c < d; ++c)
            num[c] += qi[a] * head.kv0[a * d + c];
      double *dn = &dNum[i * d];
      if (den == 0) {
        std::fill(dn, dn + d, 0.0);
        continue;
      }
      // o = num / den (the scales cancel): do/dnum = 1/den,
      // do/dden = -num/den^2; in terms of s num and s den, as the
      // quadratic sums below are written.
      const double sden = s * den;
      double dOdotO = 0;
      for (int64_t c = 0; c < d; ++c)
        dOdotO += dO[i * d + c] * (num[c] / den);
      for (int64_t c = 0; c < d; ++c)
        dn[c] = dO[i * d + c] / sden;
      dDen[i] = -dOdotO / sden;
    }
  }

  out.dq.assign(static_cast<size_t>(n * d), 0.0);
  out.dk.assign(static_cast<size_t>(n * d), 0.0);
  out.dv.assign(static_cast<size_t>(n * d), 0.0);
  out.dg.assign(static_cast<size_t>(n), 0.0);
  out.dKv0.assign(static_cast<size_t>(d * d), 0.0);
  out.dKeySum0.assign(static_cast<size_t>(d), 0.0);
  // dP[m]: the gradient of prefix[m]; dg_u = sum over m > u of dP[m].
  std::vector<double> dP(static_cast<size_t>(n + 1), 0.0);
  std::vector<double> dPhiQ(static_cast<size_t>(n * d), 0.0);
  std::vector<double> dPhiK(static_cast<size_t>(n * d), 0.0);

  for (int64_t i = 0; i < n; ++i) {
    const double *qi = head.qAt(i), *dni = &dNum[i * d];
    for (int64_t j = 0; j <= lastKey(i); ++j) {
      const double *kj = head.kAt(j), *vj = head.vAt(j);
      const double w = dot(qi, kj, d), dnv = dot(dni, vj, d);
      const double e = decay(i, j);
      // num_i += s e w v_j; den_i += s w.
      const double dw = s * e * dnv + s * dDen[i];
      for (int64_t a = 0; a < d; ++a) {
        dPhiQ[i * d + a] += dw * kj[a];
        dPhiK[j * d + a] += dw * qi[a];
      }
      for (int64_t c = 0; c < d; ++c)
        out.dv[j * d + c] += s * e * w * dni[c];
      dP[i + 1] += s * e * w * dnv;
      dP[j + 1] -= s * e * w * dnv;
    }
    if (head.kv0) {
      // num_i += s exp(prefix[i + 1]) phi(q_i)^T S0.
      const double e0 = std::exp(prefix[i + 1]);
      double term = 0;
      for (int64_t a = 0; a < d; ++a)
        for (int64_t c = 0; c < d; ++c) {
          dPhiQ[i * d + a] += s * e0 * head.kv0[a * d + c] * dni[c];
          term += qi[a] * head.kv0[a * d + c] * dni[c];
        }
      dP[i + 1] += s * e0 * term;
    }
    for (int64_t a = 0; a < d; ++a)
      for (int64_t c = 0; c < d; ++c)
        out.dKv0[a * d + c] += s * std::exp(prefix[i + 1]) * qi[a] * dni[c];
    if (p.normalize) {
      // den_i += s phi(q_i) . z0.
      for (int64_t a = 0; a < d; ++a) {
        if (head.keySum0)
          dPhiQ[i * d + a] += s * dDen[i] * head.keySum0[a];
        out.dKeySum0[a] += s * dDen[i] * qi[a];
      }
    }
  }

  // The final state: S = exp(prefix[n]) S0 + sum_j exp(prefix[n] -
  // prefix[j + 1]) phi(k_j) v_j^T, z = z0 + sum_j phi(k_j).
  if (dKvFinal) {
    for (int64_t e = 0; e < d * d; ++e) {
      out.dKv0[e] += std::exp(prefix[n]) * dKvFinal[e];
      if (head.kv0)
        dP[n] += std::exp(prefix[n]) * dKvFinal[e] * head.kv0[e];
    }
    for (int64_t j = 0; j < n; ++j) {
      const double e = std::exp(prefix[n] - prefix[j + 1]);
      const double *kj = head.kAt(j), *vj = head.vAt(j);
      double inner = 0;
      for (int64_t a = 0; a < d; ++a)
        for (int64_t c = 0; c < d; ++c) {
          dPhiK[j * d + a] += e * dKvFinal[a * d + c] * vj[c];
          out.dv[j * d + c] += e * dKvFinal[a * d + c] * kj[a];
          inner += dKvFinal[a * d + c] * kj[a] * vj[c];
        }
      dP[n] += e * inner;
      dP[j + 1] -= e * inner;
    }
  }
  if (dKeySumFinal) {
    for (int64_t a = 0; a < d; ++a) {
      out.dKeySum0[a] += dKeySumFinal[a];
      for (int64_t j = 0; j < n; ++j)
        dPhiK[j * d + a] += dKeySumFinal[a];
    }
  }

  for (int64_t t = 0; t < n * d; ++t) {
    out.dq[t] = dPhiQ[t] * featureMapDerivative(p.featureMap, rawQ[t]);
    out.dk[t] = dPhiK[t] * featureMapDerivative(p.featureMap, rawK[t]);
  }
  double suffix = 0;
  for (int64_t u = n - 1; u >= 0; --u) {
    suffix += dP[u + 1];
    out.dg[u] = suffix;
  }
}

} // namespace

void linearBackwardParallel(const LinearProblem &problem, const HostTensor &q,
                            const HostTensor &k, const HostTensor &v,
                            const HostTensor &dO, const LinearState &initial,
                            const LinearState &dFinal, LinearGradients *grads) {
  const LinearProblem &p = problem;
  if (!grads)
    invalid("grads is null");
  if (p.batch > 0 && p.seqlen > 0 && !dO.data)
    invalid("dO is null");
  // The forward's checks, with dO standing in for o.
  validate(p, q, k, v, dO.data, initial);
  const int64_t d = p.headDim, states = p.batch * p.qHeads;
  if (!dFinal.kv.empty() &&
      static_cast<int64_t>(dFinal.kv.size()) != states * d * d)
    invalid("dFinal.kv must be empty or of size B*Hq*D*D");
  if (!dFinal.keySum.empty()) {
    if (!p.normalize)
      invalid("dFinal.keySum is only for normalized linear attention");
    if (static_cast<int64_t>(dFinal.keySum.size()) != states * d)
      invalid("dFinal.keySum must be empty or of size B*Hq*D");
  }

  const int64_t n = p.seqlen, group = p.qHeads / p.kvHeads;
  std::vector<HeadGradients> perHead(static_cast<size_t>(states));
  forEachItem(states, double(states) * 6 * double(n) * double(n) * double(d),
              [&](int64_t item) {
                const int64_t b = item / p.qHeads, h = item % p.qHeads;
                Head head;
                loadHead(p, q, k, v, initial, nullptr, nullptr, b, h, head);
                std::vector<double> rawQ, rawK, gradOut;
                load(q, b, h, n, d, FeatureMap::Identity, rawQ);
                load(k, b, h / group, n, d, FeatureMap::Identity, rawK);
                load(dO, b, h, n, d, FeatureMap::Identity, gradOut);
                parallelHeadBackward(
                    p, head, rawQ, rawK, gradOut,
                    dFinal.kv.empty() ? nullptr : &dFinal.kv[item * d * d],
                    dFinal.keySum.empty() ? nullptr
                                          : &dFinal.keySum[item * d],
                    perHead[item]);
              });

  // Sums over each kv head's query heads in head order, so that the result
  // does not depend on the threads.
  LinearGradients result;
  result.dq.assign(static_cast<size_t>(p.batch * n * p.qHeads * d), 0.0);
  result.dk.assign(static_cast<size_t>(p.batch * n * p.kvHeads * d), 0.0);
  result.dv.assign(result.dk.size(), 0.0);
  if (p.logDecay)
    result.dLogDecay.assign(static_cast<size_t>(p.batch * n * p.qHeads), 0.0);
  result.dInitial.kv.assign(static_cast<size_t>(states * d * d), 0.0);
  if (p.normalize)
    result.dInitial.keySum.assign(static_cast<size_t>(states * d), 0.0);
  for (int64_t item = 0; item < states; ++item) {
    const int64_t b = item / p.qHeads, h = item % p.qHeads, kvh = h / group;
    const HeadGradients &g = perHead[item];
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t c = 0; c < d; ++c) {
        result.dq[((b * n + t) * p.qHeads + h) * d + c] = g.dq[t * d + c];
        result.dk[((b * n + t) * p.kvHeads + kvh) * d + c] += g.dk[t * d + c];
        result.dv[((b * n + t) * p.kvHeads + kvh) * d + c] += g.dv[t * d + c];
      }
      if (p.logDecay)
        result.dLogDecay[(b * n + t) * p.qHeads + h] = g.dg[t];
    }
    std::copy(g.dKv0.begin(), g.dKv0.end(), &result.dInitial.kv[item * d * d]);
    if (p.normalize)
      std::copy(g.dKeySum0.begin(), g.dKeySum0.end(),
                &result.dInitial.keySum[item * d]);
  }
  *grads = std::move(result);
}

} // namespace attn::reference
