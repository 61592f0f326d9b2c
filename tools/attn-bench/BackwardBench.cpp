//===- BackwardBench.cpp - attn-bench's backward measurements -------------===//

#include "BackwardBench.h"

#include <algorithm>

#include "AttnHarness.h"
#include "BackwardHarness.h"
#include "attn/Compiler/Compiler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <sstream>

namespace attn::bench {

namespace {

/// A spec's forward and backward modules, loaded.
struct LoadedPair {
  CompiledKernel forward, backward;
  Module forwardModule, backwardModule;
  KernelFunction forwardFunction;
  BackwardFunctions backwardFunctions;
};

LoadedPair loadPair(const std::string &spec, const std::string &name, int64_t batch,
                    int64_t seqlen, int64_t seqlenK, const std::string &backwardTile = "") {
  CompileOptions options;
  options.tuningShape = fmt::format("{},{},{}", batch, seqlen, seqlenK);
  LoadedPair pair;
  pair.forward = compileSpec(spec, name, options);
  CompileOptions backwardOptions;
  backwardOptions.tileOverride = backwardTile;
  pair.backward = compileBackwardSpec(spec, name, backwardOptions);
  pair.forwardModule = Module::loadPtx(
      std::string_view(pair.forward.binary.data(), pair.forward.binary.size()));
  pair.backwardModule = Module::loadPtx(
      std::string_view(pair.backward.binary.data(), pair.backward.binary.size()));
  pair.forwardFunction = pair.forwardModule.function(pair.forward.launch.kernelName);
  pair.backwardFunctions = loadBackwardFunctions(pair.backwardModule, pair.backward.launch);
  return pair;
}

/// Median times of the forward, the backward and the deterministic backward
/// (capture gradients summed exactly), and of the backward with the capture
/// gradients summed by float atomics (0 without capture gradients).
struct PairTimes {
  double forwardMs, backwardMs, deterministicMs, atomicMs;
};

PairTimes timePair(LoadedPair &pair, harness::ForwardProblem &data,
                   harness::BackwardProblem &gradients, int warmup, int repeats,
                   const unsigned char *coverage = nullptr) {
  AttnForwardArgs forwardArgs = data.args();
  forwardArgs.tileCoverage = coverage;
  DeviceBuffer workspace = harness::attachForwardWorkspace({&pair.forward.launch}, forwardArgs);
  PairTimes times;
  times.forwardMs = harness::medianLaunchMs(pair.forwardFunction, pair.forward.launch,
                                            forwardArgs, warmup, repeats);
  times.deterministicMs = times.atomicMs = 0;
  enum Mode { Default, Deterministic, Atomic };
  for (Mode mode : {Default, Deterministic, Atomic}) {
    if (mode == Atomic && gradients.captureGrads.empty())
      continue;
    AttnBackwardArgs args = gradients.args(data, mode == Deterministic);
    if (mode == Atomic)
      args.captureGradSum = AttnBackwardArgs::CaptureGradSum::Atomic;
    if (coverage) {
      args.tileCoverage = coverage;
      args.coverageBlockM = pair.forward.launch.blockM;
      args.coverageBlockN = pair.forward.launch.blockN;
    }
    const double ms = harness::medianMs(
        [&] { launchBackward(pair.backwardFunctions, pair.backward.launch, args, nullptr); },
        warmup, repeats);
    (mode == Default ? times.backwardMs
                     : mode == Deterministic ? times.deterministicMs : times.atomicMs) = ms;
  }
  return times;
}

} // namespace

int runBackwardGrid(int warmup, int repeats, const std::vector<int> &headDims,
                    const std::vector<int64_t> &seqlens) {
  const auto selected = [](const auto &list, auto value) {
    return list.empty() || std::find(list.begin(), list.end(), value) != list.end();
  };
  std::printf("| head dim | seqlen | causal | attnc bwd TFLOP/s | bwd ms | deterministic TFLOP/s "
              "| determinism cost | fwd ms | fwd+bwd ms |\n"
              "|---|---|---|---|---|---|---|---|---|\n");
  for (int headDim : {64, 128, 256}) {
    if (!selected(headDims, headDim))
      continue;
    for (bool causal : {false, true}) {
      const std::string spec = harness::gridSpecText(headDim, causal);
      for (int64_t s : {1024, 2048, 4096, 8192, 16384}) {
        if (!selected(seqlens, s))
          continue;
        const harness::Shape shape{16384 / s, s, s, false};
        LoadedPair pair = loadPair(spec, "grid.mlir", shape.batch, s, s);
        harness::ForwardProblem data(pair.forward.launch, shape, 11);
        AttnForwardArgs forwardArgs = data.args();
        launchForward(pair.forwardFunction, pair.forward.launch, forwardArgs, nullptr);
        harness::BackwardProblem gradients(pair.backward.launch, data, 12);
        const PairTimes times = timePair(pair, data, gradients, warmup, repeats);
        const double flops = harness::backwardFlops(pair.backward.launch, shape, causal);
        std::printf("| %d | %lld | %s | %.1f | %.3f | %.1f | %+.1f %% | %.3f | %.3f |\n", headDim,
                    (long long)s, causal ? "yes" : "no", flops / times.backwardMs / 1e9,
                    times.backwardMs, flops / times.deterministicMs / 1e9,
                    100 * (times.deterministicMs / times.backwardMs - 1), times.forwardMs,
                    times.forwardMs + times.backwardMs);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

int runBackwardSpec(const std::string &spec, const std::string &name, int64_t batch,
                    int64_t seqlen, int64_t seqlenK, const std::vector<std::string> &captures,
                    bool tileCoverage, bool check, int warmup, int repeats,
                    const std::string &backwardTile) {
  LoadedPair pair = loadPair(spec, name, batch, seqlen, seqlenK, backwardTile);
  const harness::Shape shape{batch, seqlen, seqlenK, false};
  harness::ForwardProblem data(pair.forward.launch, shape, 2026);
  harness::addGeneratedCaptures(data, pair.forward.launch, shape, captures);
  DeviceBuffer coverage;
  if (tileCoverage) {
    coverage = buildTileCoverage(pair.forwardModule, pair.forward.launch, data.args(), nullptr);
    ATTN_CU_CHECK(cuCtxSynchronize);
  }
  const unsigned char *coverageData =
      tileCoverage ? static_cast<const unsigned char *>(coverage.data()) : nullptr;
  AttnForwardArgs forwardArgs = data.args();
  launchForward(pair.forwardFunction, pair.forward.launch, forwardArgs, nullptr);
  harness::BackwardProblem gradients(pair.backward.launch, data, 2027);
  const AttnLaunchConfig &launch = pair.backward.launch;
  std::printf("backward of @%s: B=%lld Sq=%lld Sk=%lld Hq=%d Hkv=%d D=%d %s, %d query rows a "
              "step, %d keys a block, %d threads, %d bytes smem\n",
              pair.backward.name.c_str(), (long long)batch, (long long)seqlen,
              (long long)seqlenK, launch.qHeads, launch.kvHeads, launch.headDim,
              dtypeName(launch.dtype), launch.blockM, launch.blockN, launch.threadsPerBlock,
              launch.sharedMemoryBytes);
  bool passed = true;
  if (check) {
    gradients.poisonGradients();
    launchBackward(pair.backwardFunctions, launch, gradients.args(data), nullptr);
    ATTN_CU_CHECK(cuCtxSynchronize);
    std::vector<HostCapture> host;
    for (const harness::HostDeviceCapture &capture : data.captures)
      host.push_back(HostCapture{capture.hostData(), capture.view.dtype, capture.view.shape});
    std::shared_ptr<CaptureGradients> expectedCaptures;
    reference::Problem problem =
        referenceProblemFromSpec(spec, batch, seqlen, seqlenK, host, &expectedCaptures);
    const harness::GradientComparison result = harness::compareGradients(
        problem, harness::computeReferenceGradients(problem, data, gradients), gradients,
        launch.dtype);
    passed = result.passed();
    std::printf("check against the CPU reference: rel-L2 dq %.3g, dk %.3g, dv %.3g",
                result.dq.relativeL2, result.dk.relativeL2, result.dv.relativeL2);
    for (size_t index = 0; index < gradients.captureGrads.size(); ++index) {
      const harness::CaptureGradientError error = harness::compareCaptureGradient(
          (*expectedCaptures)[index], gradients.captureGrads[index].download<float>());
      std::printf(", capture gradient %zu %.3g", index, error.relativeL2);
      passed = passed && error.passed(2e-2);
    }
    std::printf(": %s\n", passed ? "PASS" : "FAIL");
  }
  const PairTimes times = timePair(pair, data, gradients, warmup, repeats, coverageData);
  const double flops =
      harness::backwardFlops(launch, shape, harness::specHasCausalMask(spec));
  std::printf("backward %.3f ms (median of %d), %.1f TFLOP/s; deterministic %.3f ms; forward "
              "%.3f ms\n",
              times.backwardMs, repeats, flops / times.backwardMs / 1e9, times.deterministicMs,
              times.forwardMs);
  if (!gradients.captureGrads.empty())
    std::printf("capture gradients: exact sums %.3f ms, float atomics %.3f ms (exact %+.1f %%)\n",
                times.backwardMs, times.atomicMs,
                100 * (times.backwardMs / times.atomicMs - 1));
  return passed ? 0 : 1;
}

} // namespace attn::bench
