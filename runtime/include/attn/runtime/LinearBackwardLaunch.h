//===- LinearBackwardLaunch.h - Linear-family backward launch ---*- C++ -*-===//
//
// Host side of the linear family's backward module (`attnc --backward` on a
// linear attention or retention spec): argument validation, the
// workspace's size and layout, and the launches. The module's chunkwise
// kernel runs three times (a dQ pass in sequence order, a dV and a dK pass
// walking the sequence from its end) between helper kernels that transpose
// states and finish the gradients (templates/attn_linear_bwd_sm90.cuh says
// how the gradients decompose).
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_RUNTIME_LINEARBACKWARDLAUNCH_H
#define ATTN_RUNTIME_LINEARBACKWARDLAUNCH_H

#include "attn/runtime/AttentionLaunch.h"

namespace attn {

/// The arguments of a linear-family backward. q, k, v are the forward's
/// inputs, dO the gradient of its output; dq, dk, dv receive the gradients
/// (shapes and dtype as q, k, v; head_dim contiguous, TMA-aligned strides).
/// fp32 side buffers, contiguous:
///   logDecay [batch, seqlen, q_heads]: gated retention's log-decays, as the
///     forward took them; dLogDecay of the same shape receives their
///     gradient (null: not computed). Other kernels take neither.
///   initialState [batch, q_heads, D, D]: the forward's initial state (null:
///     zero); dFinalState: the gradient arriving at the forward's final
///     state (null: zero); dInitialState: receives the initial state's
///     gradient (null: not computed).
/// Normalized linear attention only (the others take none of these):
///   o: the forward's output (shape, dtype and layout rules as q), which
///     its denominator's gradient reads;
///   initialKeySum [batch, q_heads, D]: the forward's initial key sum
///     (null: zero); dFinalKeySum: the gradient arriving at its final key
///     sum (null: zero); dInitialKeySum: receives the initial key sum's
///     gradient (null: not computed).
/// workspace: linearBackwardWorkspaceBytes(config, args) bytes of device
/// memory, 256-byte aligned.
struct AttnLinearBackwardArgs {
  TensorView q, k, v, dO;
  TensorView dq, dk, dv;
  const float *logDecay = nullptr;
  float *dLogDecay = nullptr;
  const float *initialState = nullptr;
  const float *dFinalState = nullptr;
  float *dInitialState = nullptr;
  TensorView o;
  const float *initialKeySum = nullptr;
  const float *dFinalKeySum = nullptr;
  float *dInitialKeySum = nullptr;
  void *workspace = nullptr;
  uint64_t workspaceBytes = 0;
};

/// The backward module's kernels, looked up once.
struct LinearBackwardFunctions {
  LinearFunctions chunkwise;
  KernelFunction states, query, key, gate, initialState;
  // Normalized linear attention's (templates/linear/key_sum_bwd.cuh).
  KernelFunction keyPieces, keyScan, denominator, queryScan, keySumGradient;
};
LinearBackwardFunctions loadLinearBackwardFunctions(const Module &module,
                                                    const AttnLaunchConfig &config);

/// Checks every argument against the backward module's config; throws
/// attn::Error naming the argument.
void validateLinearBackwardArgs(const AttnLaunchConfig &config, const AttnLinearBackwardArgs &args);

/// The workspace a call with these arguments needs: with GQA the reversed
/// passes' outputs per query head (O(batch x seqlen x q_heads x head_dim)),
/// the pass states (transposed and scaled copies of the initial state and
/// the final state's gradient) and the chunkwise kernel's split scratch;
/// normalized, also the passes' rescaled dO (as large as dO) and the key
/// sums' per-piece scratch; often 0 otherwise. Validates the arguments
/// first.
uint64_t linearBackwardWorkspaceBytes(const AttnLaunchConfig &config,
                                      const AttnLinearBackwardArgs &args);

/// Validates (also the device pointers) and launches the backward on
/// `stream`. Nothing is launched after a failed check. An empty sequence
/// writes only dInitialState (= dFinalState) and dInitialKeySum
/// (= dFinalKeySum).
void launchLinearBackward(LinearBackwardFunctions &functions, const AttnLaunchConfig &config,
                          const AttnLinearBackwardArgs &args, CUstream stream);

} // namespace attn

#endif // ATTN_RUNTIME_LINEARBACKWARDLAUNCH_H
