//===- BackwardHarness.h - Run a backward kernel against the reference -*- C++ -*-===//
//
// Shared by the GPU tests and attn-bench: dO and the gradients on the
// device beside a forward problem, the workspace, the CPU reference's
// gradients and their comparison. Needs no MLIR.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_HARNESS_BACKWARDHARNESS_H
#define ATTN_HARNESS_BACKWARDHARNESS_H

#include "AttnHarness.h"

namespace attn::harness {

/// dO (random), dq, dk and dv of one backward call over `forward`'s q, k,
/// v, o and lse, in the same layout, and the workspace `config` (a
/// backward config) needs; with `packed`, for those packed sequences.
class BackwardProblem {
public:
  BackwardProblem(const AttnLaunchConfig &config, const ForwardProblem &forward, uint64_t seed,
                  const PackedSequences &packed = {});

  /// The call's arguments: `forward`'s tensors (its o and lse as the
  /// forward kernel wrote them) and this problem's.
  AttnBackwardArgs args(const ForwardProblem &forward, bool deterministic = false) const;
  /// Fills dq, dk and dv with NaN, so that an element the kernels skipped
  /// is caught.
  void poisonGradients();

  HostDeviceTensor dO, dq, dk, dv;
  DeviceBuffer workspace;
  PackedSequences packed;
  /// The gradient of each capture `config` declares with `grad`, shaped as
  /// `forward`'s buffer of it (added before this problem was made).
  std::vector<DeviceBuffer> captureGrads;
  std::vector<std::vector<int64_t>> captureGradShapes;
};

/// A capture gradient against the reference's: relative L2 error and the
/// largest element error relative to the reference's largest magnitude,
/// within `tolerance` each.
struct CaptureGradientError {
  double relativeL2 = 0, maxErrorOverMax = 0;
  int64_t nonFinite = 0;
  bool passed(double tolerance) const {
    return nonFinite == 0 && relativeL2 <= tolerance && maxErrorOverMax <= tolerance;
  }
};
CaptureGradientError compareCaptureGradient(const std::vector<float> &reference,
                                            const std::vector<float> &device);

/// The reference's dq [B, Sq, Hq, D], dk and dv [B, Sk, Hkv, D], contiguous.
struct ReferenceGradients {
  std::vector<float> dq, dk, dv;
};
ReferenceGradients computeReferenceGradients(const reference::Problem &problem,
                                             const ForwardProblem &forward,
                                             const BackwardProblem &backward);

/// One gradient against the reference: relative L2 error, the largest
/// element error relative to the reference's RMS, elements past the
/// tolerance, non-finite elements, and rows no pair reaches (masked) that
/// the kernel did not leave exactly zero.
struct GradientError {
  double relativeL2 = 0, maxErrorOverRms = 0;
  int64_t toleranceViolations = 0, nonFinite = 0, zeroRowMismatches = 0;
  std::string firstViolation;
  bool passed() const {
    return toleranceViolations == 0 && nonFinite == 0 && zeroRowMismatches == 0;
  }
};
struct GradientComparison {
  GradientError dq, dk, dv;
  bool passed() const { return dq.passed() && dk.passed() && dv.passed(); }
};

/// The rows no pair reaches under `problem`'s masks, flagged in BSHD row
/// order: queries without a key, keys no query of their kv head's group
/// sees. Their gradients must be exactly zero.
struct MaskedRows {
  std::vector<char> queries, keys;
};
MaskedRows maskedRowsOf(const reference::Problem &problem);

/// Compares the device gradients with `reference` under the element type's
/// gradient tolerance (see the derivation in the .cpp); `masked` says which
/// rows must be exactly zero.
GradientComparison compareGradients(const MaskedRows &masked, const ReferenceGradients &reference,
                                    const BackwardProblem &backward, DType dtype);
/// The same with the masked rows of `problem`.
GradientComparison compareGradients(const reference::Problem &problem,
                                    const ReferenceGradients &reference,
                                    const BackwardProblem &backward, DType dtype);

/// The backward's floating-point operations: 2.5 times the forward's.
double backwardFlops(const AttnLaunchConfig &config, const Shape &shape, bool causal);

} // namespace attn::harness

#endif // ATTN_HARNESS_BACKWARDHARNESS_H
