//===- BackwardLaunch.h - Backward attention kernel launch ------*- C++ -*-===//
//
// Host side of the backward softmax kernels (a module compiled with
// `attnc --backward`, attn::Compiler::compileBackward): argument
// validation, the workspace's size, the parameter block and the three
// launches (preprocess, main kernel, dQ's conversion).
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_RUNTIME_BACKWARDLAUNCH_H
#define ATTN_RUNTIME_BACKWARDLAUNCH_H

#include "attn/runtime/AttentionLaunch.h"

namespace attn {

/// Device tensors of one backward call. q, k, v, o and lse are the forward
/// call's (same shapes, layouts and packed sequences; lse [B, Hq, Sq] fp32,
/// or [Hq, total_q] packed); dO is O's gradient, shaped as o; dq, dk, dv
/// receive the gradients, shaped as q, k, v (dk and dv of a kv head sum
/// over its query heads). Every 16-bit tensor takes the forward's TMA
/// layout rules (head_dim contiguous, 16-byte aligned base and strides).
///
/// The workspace (device memory of backwardWorkspaceBytes, 256-byte
/// aligned) holds per-row values and dQ's fp32 accumulator: O(B x Hq x Sq x
/// D), never O(Sq x Sk). Launches that share it must not run concurrently.
///
/// deterministic: dQ's additions from the key tiles run in a fixed order,
/// so dq, dk and dv are bitwise identical from run to run (dk and dv are
/// in either mode); it costs time where many key tiles meet one query
/// block (docs/benchmarks.md).
struct AttnBackwardArgs {
  TensorView q, k, v, o, dO;
  const float *lse = nullptr;
  TensorView dq, dk, dv;
  PackedSequences packed;
  void *workspace = nullptr;
  uint64_t workspaceBytes = 0;
  bool deterministic = false;
  /// The spec's captured buffers, as the forward takes them.
  std::vector<CaptureView> captures;
  /// One per capture declared with `grad`, in declaration order: overwritten
  /// with the gradient of the loss with respect to the capture.
  std::vector<CaptureGradView> captureGrads;
  /// How the capture gradients are summed. Exact (the default): each
  /// element as an exact fixed-point sum in the workspace (64 fraction bits,
  /// templates/exact_sum.h), the same bits on every run, NaN where a value
  /// was not finite or reached 2^63. Atomic: float atomics into the
  /// gradients, whose last bits vary from run to run (`deterministic`
  /// refuses it).
  enum class CaptureGradSum { Exact, Atomic };
  CaptureGradSum captureGradSum = CaptureGradSum::Exact;
  /// Optional: the forward kernel's tile coverage of the masks for the same
  /// shapes and captures (Kernel::buildTileCoverage), and that kernel's tile
  /// (its launch config's blockM and blockN). A spec whose mask_mod the
  /// compiler cannot prove (it reads a buffer) then skips the steps the
  /// coverage marks empty, outside the deterministic mode.
  const unsigned char *tileCoverage = nullptr;
  int coverageBlockM = 0, coverageBlockN = 0;
};

/// Bytes of workspace a call needs: log-sum-exp in base 2 and delta (fp32
/// per padded query row), dQ's accumulator (head_dim fp32 per padded row)
/// and one int32 counter per query block, for every (batch, query head);
/// rows padded to whole blocks of the plan's blockM; with exact capture
/// gradients, 128 bytes per gradient element; 256-byte aligned parts.
/// Validates the shapes first.
uint64_t backwardWorkspaceBytes(const AttnLaunchConfig &config, const AttnBackwardArgs &args);

/// Checks the arguments against a backward config without the driver;
/// throws attn::Error whose message starts with the argument ("q: ...",
/// "dO: ...", "dk: ...", "lse: ...", "workspace: ...", "config: ...").
void validateBackwardArgs(const AttnLaunchConfig &config, const AttnBackwardArgs &args);

/// Builds the parameter block (encodes the tensor maps, so it needs the
/// driver). Validates first.
attn_abi::AttnBwdParams makeBackwardParams(const AttnLaunchConfig &config,
                                           const AttnBackwardArgs &args);

/// The kernels of a backward module, looked up once, with the main
/// kernel's dynamic shared memory allowed once.
struct BackwardFunctions {
  KernelFunction preprocess, main, convert, captureSum;
  /// Loaded where the config walks a step list (AttnLaunchConfig::stepList).
  KernelFunction stepList;
};
BackwardFunctions loadBackwardFunctions(const Module &module, const AttnLaunchConfig &config);

/// Validates (also the device pointers), builds the parameters and launches
/// the preprocess (a block per query block, query head and batch), the step
/// list where the config has one and the main kernel (a block per key tile,
/// kv head and batch each) and the conversion on
/// `stream`. Launches nothing when a check fails; writes zeros to dk and dv
/// for an empty query sequence, and nothing for an empty batch.
void launchBackward(BackwardFunctions &functions, const AttnLaunchConfig &config,
                    const AttnBackwardArgs &args, CUstream stream);
/// The same with the kernels of `module` looked up for this call.
void launchBackward(const Module &module, const AttnLaunchConfig &config,
                    const AttnBackwardArgs &args, CUstream stream);

} // namespace attn

#endif // ATTN_RUNTIME_BACKWARDLAUNCH_H
