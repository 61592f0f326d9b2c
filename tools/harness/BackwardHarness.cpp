//===- BackwardHarness.cpp - Run a backward kernel against the reference ---===//

#include "BackwardHarness.h"

#include "attn/runtime/Error.h"

#include <fmt/format.h>

#include <algorithm>

#include <cmath>
#include <sstream>

namespace attn::harness {

BackwardProblem::BackwardProblem(const AttnLaunchConfig &config, const ForwardProblem &forward,
                                 uint64_t seed, const PackedSequences &packedSequences)
    : packed(packedSequences) {
  std::mt19937_64 random(seed);
  const Shape &shape = forward.shape();
  dO = makeTensor(config.dtype, shape.batch, shape.seqlenQ, config.qHeads, config.headDim,
                  shape.headMajor, &random);
  dq = makeTensor(config.dtype, shape.batch, shape.seqlenQ, config.qHeads, config.headDim,
                  shape.headMajor, nullptr);
  dk = makeTensor(config.dtype, shape.batch, shape.seqlenK, config.kvHeads, config.headDim,
                  shape.headMajor, nullptr);
  dv = makeTensor(config.dtype, shape.batch, shape.seqlenK, config.kvHeads, config.headDim,
                  shape.headMajor, nullptr);
  for (size_t index = 0; index < config.captures.size(); ++index) {
    if (!config.captures[index].requiresGrad)
      continue;
    if (index >= forward.captures.size())
      throw Error(fmt::format("capture '{}': add it to the forward problem before the backward "
                              "problem, which allocates its gradient",
                              config.captures[index].name));
    const std::vector<int64_t> &shape = forward.captures[index].view.shape;
    int64_t elements = 1;
    for (int64_t extent : shape)
      elements *= extent;
    captureGrads.emplace_back(std::max<size_t>(size_t(elements) * sizeof(float), 4));
    captureGradShapes.push_back(shape);
  }
  const AttnBackwardArgs sizing = args(forward);
  workspace = DeviceBuffer(std::max<uint64_t>(backwardWorkspaceBytes(config, sizing), 256));
}

AttnBackwardArgs BackwardProblem::args(const ForwardProblem &forward, bool deterministic) const {
  AttnBackwardArgs args;
  args.q = forward.q.view;
  args.k = forward.k.view;
  args.v = forward.v.view;
  args.o = forward.o.view;
  args.lse = static_cast<const float *>(forward.lse.data());
  args.dO = dO.view;
  args.dq = dq.view;
  args.dk = dk.view;
  args.dv = dv.view;
  args.workspace = workspace.data();
  args.workspaceBytes = workspace.size();
  args.deterministic = deterministic;
  args.packed = packed;
  for (const HostDeviceCapture &capture : forward.captures)
    args.captures.push_back(capture.view);
  for (size_t index = 0; index < captureGrads.size(); ++index)
    args.captureGrads.push_back(
        CaptureGradView{static_cast<float *>(captureGrads[index].data()), captureGradShapes[index]});
  return args;
}

CaptureGradientError compareCaptureGradient(const std::vector<float> &reference,
                                            const std::vector<float> &device) {
  CaptureGradientError error;
  double difference = 0, norm = 0, largest = 0, largestError = 0;
  for (size_t i = 0; i < reference.size() && i < device.size(); ++i) {
    if (!std::isfinite(device[i])) {
      ++error.nonFinite;
      continue;
    }
    const double delta = double(device[i]) - double(reference[i]);
    difference += delta * delta;
    norm += double(reference[i]) * double(reference[i]);
    largest = std::max(largest, std::fabs(double(reference[i])));
    largestError = std::max(largestError, std::fabs(delta));
  }
  if (reference.size() != device.size())
    error.nonFinite += int64_t(std::max(reference.size(), device.size()) -
                               std::min(reference.size(), device.size()));
  error.relativeL2 = norm > 0 ? std::sqrt(difference / norm) : std::sqrt(difference);
  error.maxErrorOverMax = largest > 0 ? largestError / largest : largestError;
  return error;
}

void BackwardProblem::poisonGradients() {
  for (HostDeviceTensor *tensor : {&dq, &dk, &dv})
    tensor->buffer.fill(0xFF); // NaN in bf16 and f16
  workspace.fill32(0x7FC00000u);
}

ReferenceGradients computeReferenceGradients(const reference::Problem &problem,
                                             const ForwardProblem &forward,
                                             const BackwardProblem &backward) {
  const int64_t b = problem.batch, sq = problem.seqlenQ, sk = problem.seqlenK;
  const int64_t hq = problem.qHeads, hk = problem.kvHeads, d = problem.headDim;
  auto packed = [](const std::vector<float> &data, int64_t s, int64_t h, int64_t dim) {
    return reference::HostTensor{data.data(), {s * h * dim, h * dim, dim, 1}};
  };
  ReferenceGradients gradients;
  gradients.dq.assign(b * sq * hq * d, 0.f);
  gradients.dk.assign(b * sk * hk * d, 0.f);
  gradients.dv.assign(b * sk * hk * d, 0.f);
  // Delta from the forward kernel's stored O, as the backward computes it.
  const std::vector<float> o = downloadBSHD(forward.o);
  reference::backward(problem, packed(forward.q.host, sq, hq, d), packed(forward.k.host, sk, hk, d),
                      packed(forward.v.host, sk, hk, d), packed(o, sq, hq, d),
                      packed(backward.dO.host, sq, hq, d), gradients.dq.data(),
                      gradients.dk.data(), gradients.dv.data());
  return gradients;
}

namespace {
// Gradient tolerance. The kernel rounds P and dS to the element type
// before the products that make dV, dK and dQ (relative 2^-8 for bf16,
// 2^-11 for f16, per term), and its delta reads the forward's rounded O;
// the terms' errors are independent, so a sum of n of them errs by about
// 2^-8 sqrt(n) times a term, a small fraction of the sum's RMS: measured
// on an H200 (2026-11-27) at relative L2 2.7e-3 (bf16) and 3.4e-4 (f16),
// the largest element error 0.077 (bf16) and 0.008 (f16) of the RMS. Hence
// an element may err by 0.1 of the tensor's RMS plus 2^-6 of its own value
// (bf16), or 0.015 and 2^-9 (f16), and by an absolute 1e-4 (2e-5): a
// gradient that is zero in exact arithmetic (a row that sees one key)
// comes out as rounding noise. Gradients are rounded once more on output
// (2^-9 / 2^-12 relative), well inside that. A wrong index or a missing
// term errs by about the RMS itself.
struct GradientTolerance {
  double ofRms, relative, absolute;
};
GradientTolerance gradientToleranceFor(DType dtype) {
  if (dtype == DType::BF16)
    return {0.1, 1.0 / 64, 1e-4};
  return {0.015, 1.0 / 512, 2e-5};
}

/// `masked` flags the rows (BSHD order) no pair reaches, which must come
/// out exactly zero.
GradientError compareGradient(const std::vector<float> &reference, const HostDeviceTensor &device,
                              const std::vector<char> &masked, DType dtype, const char *name) {
  GradientError error;
  const std::vector<float> gpu = downloadBSHD(device);
  double sumSquares = 0, errorSquares = 0;
  for (float value : reference)
    sumSquares += double(value) * value;
  const double rms = reference.empty() ? 0 : std::sqrt(sumSquares / reference.size());
  const GradientTolerance tolerance = gradientToleranceFor(dtype);
  const int64_t rowLength = device.view.shape[3];
  for (size_t row = 0; row * rowLength < gpu.size(); ++row) {
    bool gpuZero = true;
    for (int64_t column = 0; column < rowLength; ++column) {
      const size_t i = row * rowLength + column;
      const double expected = reference[i], got = gpu[i];
      gpuZero &= got == 0;
      if (!std::isfinite(got)) {
        ++error.nonFinite;
        continue;
      }
      const double difference = std::fabs(got - expected);
      errorSquares += difference * difference;
      if (rms > 0)
        error.maxErrorOverRms = std::max(error.maxErrorOverRms, difference / rms);
      if (difference >
          tolerance.absolute + tolerance.ofRms * rms + tolerance.relative * std::fabs(expected)) {
        if (error.toleranceViolations++ == 0) {
          std::ostringstream os;
          os << name << "[" << i << "] (row " << row << ", column " << column << "): got " << got
             << ", reference " << expected << ", RMS " << rms;
          error.firstViolation = os.str();
        }
      }
    }
    if (masked[row] && !gpuZero)
      ++error.zeroRowMismatches;
  }
  error.relativeL2 = sumSquares > 0 ? std::sqrt(errorSquares / sumSquares) : std::sqrt(errorSquares);
  return error;
}
} // namespace

MaskedRows maskedRowsOf(const reference::Problem &problem) {
  const int64_t group = problem.qHeads / problem.kvHeads;
  MaskedRows masked;
  masked.queries.assign(problem.batch * problem.seqlenQ * problem.qHeads, 1);
  masked.keys.assign(problem.batch * problem.seqlenK * problem.kvHeads, 1);
  for (int64_t b = 0; b < problem.batch; ++b)
    for (int64_t h = 0; h < problem.qHeads; ++h)
      for (int64_t q = 0; q < problem.seqlenQ; ++q)
        for (int64_t k = 0; k < problem.seqlenK; ++k)
          if (reference::maskAllows(problem.mask, q, k, problem.seqlenQ, problem.seqlenK) &&
              (!problem.maskMod || problem.maskMod(b, h, q, k))) {
            masked.queries[(b * problem.seqlenQ + q) * problem.qHeads + h] = 0;
            masked.keys[(b * problem.seqlenK + k) * problem.kvHeads + h / group] = 0;
          }
  return masked;
}

GradientComparison compareGradients(const MaskedRows &masked, const ReferenceGradients &reference,
                                    const BackwardProblem &backward, DType dtype) {
  GradientComparison comparison;
  comparison.dq = compareGradient(reference.dq, backward.dq, masked.queries, dtype, "dq");
  comparison.dk = compareGradient(reference.dk, backward.dk, masked.keys, dtype, "dk");
  comparison.dv = compareGradient(reference.dv, backward.dv, masked.keys, dtype, "dv");
  return comparison;
}

GradientComparison compareGradients(const reference::Problem &problem,
                                    const ReferenceGradients &reference,
                                    const BackwardProblem &backward, DType dtype) {
  return compareGradients(maskedRowsOf(problem), reference, backward, dtype);
}

double backwardFlops(const AttnLaunchConfig &config, const Shape &shape, bool causal) {
  return 2.5 * forwardFlops(config, shape, causal);
}

} // namespace attn::harness
