// Dense BSHD tensors, random inputs and problems for the tests of the CPU
// reference attention (test_reference.cpp for the forward,
// test_reference_backward.cpp for the backward), shared so that both build
// their inputs the same way.
#ifndef ATTN_TESTS_UNIT_REFERENCETESTTENSORS_H
#define ATTN_TESTS_UNIT_REFERENCETESTTENSORS_H

#include "attn/Reference/ReferenceAttention.h"

#include <cstddef>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace attn::reference::test {

/// A dense BSHD fp32 tensor owned by the test.
struct Tensor {
  int64_t shape[4];
  std::vector<float> data;

  Tensor(int64_t b, int64_t s, int64_t h, int64_t d)
      : shape{b, s, h, d}, data(static_cast<size_t>(b * s * h * d), 0.0f) {}

  size_t index(int64_t b, int64_t s, int64_t h, int64_t d) const {
    return static_cast<size_t>(((b * shape[1] + s) * shape[2] + h) * shape[3] +
                               d);
  }
  float &at(int64_t b, int64_t s, int64_t h, int64_t d) {
    return data[index(b, s, h, d)];
  }
  float at(int64_t b, int64_t s, int64_t h, int64_t d) const {
    return data[index(b, s, h, d)];
  }
  HostTensor host() const {
    return {data.data(),
            {shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3], 1}};
  }
};

/// A tensor of values uniform in [-1, 1), the same for the same seed.
inline Tensor randomTensor(int64_t b, int64_t s, int64_t h, int64_t d,
                           unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Tensor t(b, s, h, d);
  for (float &x : t.data)
    x = dist(rng);
  return t;
}

inline Problem makeProblem(int64_t b, int64_t sq, int64_t sk, int64_t hq,
                           int64_t hkv, int64_t d, double scale = 1.0,
                           MaskSpec mask = {}) {
  Problem p;
  p.batch = b;
  p.seqlenQ = sq;
  p.seqlenK = sk;
  p.qHeads = hq;
  p.kvHeads = hkv;
  p.headDim = d;
  p.scale = scale;
  p.mask = mask;
  return p;
}


/// Random inputs of forward(): q [B, Sq, Hq, D] from `seed`, k and v
/// [B, Sk, Hkv, D] from seed + 1 and seed + 2.
struct ForwardInputs {
  Tensor q, k, v;
};

inline ForwardInputs randomForwardInputs(const Problem &p, unsigned seed) {
  return {randomTensor(p.batch, p.seqlenQ, p.qHeads, p.headDim, seed),
          randomTensor(p.batch, p.seqlenK, p.kvHeads, p.headDim, seed + 1),
          randomTensor(p.batch, p.seqlenK, p.kvHeads, p.headDim, seed + 2)};
}

/// Random inputs of backward(): those of forward() and dO (like q) from
/// seed + 3.
struct BackwardInputs {
  Tensor q, k, v, dO;
};

inline BackwardInputs randomBackwardInputs(const Problem &p, unsigned seed) {
  ForwardInputs in = randomForwardInputs(p, seed);
  return {std::move(in.q), std::move(in.k), std::move(in.v),
          randomTensor(p.batch, p.seqlenQ, p.qHeads, p.headDim, seed + 3)};
}

/// `kv` [B, S, Hkv, D] with each kv head repeated for the query heads that
/// read it: head h of the result [B, S, qHeads, D] is head h / (qHeads / Hkv)
/// of `kv`, so a GQA problem becomes an MHA one.
inline Tensor repeatKvHeads(const Tensor &kv, int64_t qHeads) {
  const int64_t B = kv.shape[0], S = kv.shape[1], D = kv.shape[3];
  const int64_t group = qHeads / kv.shape[2];
  Tensor full(B, S, qHeads, D);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < qHeads; ++h)
        for (int64_t d = 0; d < D; ++d)
          full.at(b, s, h, d) = kv.at(b, s, h / group, d);
  return full;
}

/// `t` stored in `storage` as [b][h][s][d + 3 pad] (the padding -99) and
/// described through BSHD strides: the same tensor in another layout.
inline HostTensor paddedBhsd(const Tensor &t, std::vector<float> &storage) {
  const int64_t B = t.shape[0], S = t.shape[1], H = t.shape[2],
                D = t.shape[3], row = D + 3;
  storage.assign(size_t(B * H * S * row), -99.0f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t d = 0; d < D; ++d)
          storage[size_t(((b * H + h) * S + s) * row + d)] = t.at(b, s, h, d);
  return HostTensor{storage.data(), {H * S * row, row, S * row, 1}};
}

/// `t` stored in `storage` with every element followed by a junk one (1e9):
/// stride 2 along head_dim.
inline HostTensor spreadHeadDim(const Tensor &t, std::vector<float> &storage) {
  storage.assign(t.data.size() * 2, 1.0e9f);
  for (size_t i = 0; i < t.data.size(); ++i)
    storage[2 * i] = t.data[i];
  const int64_t S = t.shape[1], H = t.shape[2], D = t.shape[3];
  return HostTensor{storage.data(), {2 * S * H * D, 2 * H * D, 2 * D, 2}};
}

} // namespace attn::reference::test

#endif // ATTN_TESTS_UNIT_REFERENCETESTTENSORS_H
