//===- LinearAttention.h - CPU oracle for linear attention ------*- C++ -*-===//
//
// Linear attention (a feature map in place of the softmax) and retention
// (decayed linear attention), evaluated two independent ways: the parallel
// form, a quadratic sum over every pair of positions, and the recurrent form,
// a state of Dk x Dv updated token by token. The tests check the two against
// each other and the GPU kernels against both. fp32 inputs, fp64 arithmetic.
//
// With s the scale, phi the feature map (identity for retention), g_t the
// log-decay of token t (0 for linear attention; ln(gamma_h) for retention
// with a fixed decay; read from a tensor for gated retention) and
// decay(i, j) = exp(g_{j+1} + ... + g_i) (1 when i = j):
//
//   recurrent:  S_t = exp(g_t) S_{t-1} + phi(k_t) v_t^T,   S_{-1} = S0
//               z_t = z_{t-1} + phi(k_t),                  z_{-1} = z0
//               num_t = s phi(q_t)^T S_t,   den_t = s phi(q_t) . z_t
//   parallel:   num_i = s sum_{j <= i} decay(i, j) (phi(q_i) . phi(k_j)) v_j
//                     + s exp(g_0 + ... + g_i) phi(q_i)^T S0
//               den_i = s sum_{j <= i} phi(q_i) . phi(k_j) + s phi(q_i) . z0
//   output:     o_i = num_i, or with `normalize` num_i / den_i (0 where
//               den_i = 0).
//   non-causal (linear attention only): every j, not j <= i, and the state
//               after the last token: num_i = s phi(q_i)^T S_{T-1}.
//   final state: S_{T-1} and z_{T-1}.
//
// Query head h reads kv head h / (Hq / Hkv); the state is per query head.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_REFERENCE_LINEARATTENTION_H
#define ATTN_REFERENCE_LINEARATTENTION_H

#include "attn/Reference/ReferenceAttention.h"

#include <cstdint>
#include <vector>

namespace attn::reference {

enum class FeatureMap { Identity, Relu, EluPlusOne };

/// phi(x) of one element.
double applyFeatureMap(FeatureMap map, double x);

/// RetNet's multi-scale decay of query head h: 1 - 2^(-5 - h).
double multiScaleGamma(int64_t head);

struct LinearProblem {
  int64_t batch = 0, seqlen = 0, qHeads = 0, kvHeads = 0, headDim = 0;
  double scale = 1.0;
  FeatureMap featureMap = FeatureMap::Identity;
  /// Divide by the running key sum (linear attention only).
  bool normalize = false;
  bool causal = true;
  /// Per-head fixed decay gamma_h in (0, 1]; empty for none. Retention.
  std::vector<double> gamma;
  /// Optional per-token log-decay g [B, S, Hq] (contiguous fp32, <= 0);
  /// replaces `gamma`. Gated retention.
  const float *logDecay = nullptr;
};

/// The state carried between calls: S [B, Hq, Dk, Dv] and, for normalized
/// linear attention, z [B, Hq, Dk]; contiguous fp32 (double for the
/// reference's own use). Empty vectors stand for zero.
struct LinearState {
  std::vector<double> kv;
  std::vector<double> keySum;
};

/// The parallel (quadratic) form. q, k, v: [B, S, H, D] strided; writes o
/// [B, S, Hq, D] contiguous fp32. `initial` may be empty (zero state);
/// `final`, when non-null, receives the state after the last token.
/// Throws std::invalid_argument for an inconsistent problem (non-causal
/// retention, normalize with a decay, a state of the wrong size, ...).
void linearForwardParallel(const LinearProblem &problem, const HostTensor &q,
                           const HostTensor &k, const HostTensor &v, float *o,
                           const LinearState &initial, LinearState *final);

/// The recurrent form, token by token; same contract as the parallel form.
void linearForwardRecurrent(const LinearProblem &problem, const HostTensor &q,
                            const HostTensor &k, const HostTensor &v, float *o,
                            const LinearState &initial, LinearState *final);

/// d phi(x) / dx of one element (the derivative of relu at 0 is taken as 0).
double featureMapDerivative(FeatureMap map, double x);

/// The gradients linearBackwardParallel returns, in double: dq [B, S, Hq, D],
/// dk and dv [B, S, Hkv, D] (summed over each kv head's query heads),
/// contiguous; dLogDecay [B, S, Hq] for gated retention (else empty);
/// dInitial, the gradient of the initial state (kv always, keySum with
/// `normalize`), laid out as LinearState.
struct LinearGradients {
  std::vector<double> dq, dk, dv, dLogDecay;
  LinearState dInitial;
};

/// The backward of the parallel form, derived from its quadratic sum by the
/// chain rule (not from the chunkwise or recurrent forms): the gradients of
/// L = sum(dO . o) + <dFinal.kv, S_{T-1}> + <dFinal.keySum, z_{T-1}> with
/// respect to q, k, v, the log-decays and the initial state. dO is
/// [B, S, Hq, D] strided; `dFinal` may be empty (no gradient into the final
/// state). Throws std::invalid_argument as the forward does.
void linearBackwardParallel(const LinearProblem &problem, const HostTensor &q,
                            const HostTensor &k, const HostTensor &v,
                            const HostTensor &dO, const LinearState &initial,
                            const LinearState &dFinal, LinearGradients *grads);

} // namespace attn::reference

#endif // ATTN_REFERENCE_LINEARATTENTION_H
