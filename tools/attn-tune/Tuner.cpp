//===- Tuner.cpp - Measure every legal tile plan of a spec ----------------===//

#include "Tuner.h"

#include "AttnHarness.h"
#include "BackwardHarness.h"
#include "attn/Compiler/Compiler.h"
#include "attn/Compiler/Parallel.h"
#include "attn/runtime/Error.h"
#include "attn/runtime/Runtime.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

namespace attn::tune {

namespace {
using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// Candidates that differ only in how many persistent blocks an SM runs
/// share one binary; persistent and one-tile-per-block plans differ in
/// shared memory (a persistent plan gives O's staging bytes of its own).
TileConfig binaryConfig(TileConfig config) {
  config.persistentBlocksPerSm = std::min(config.persistentBlocksPerSm, 1);
  return config;
}
std::string binaryKey(const TileConfig &config) { return formatTileOverride(binaryConfig(config)); }

/// One compiled binary (a forward or a backward module) and the candidates
/// (indices into results) using it.
struct Binary {
  TileConfig config;
  bool backward = false;
  std::vector<size_t> members;
  CompiledKernel compiled;
  std::string error;
  Module module;
  /// The forward's kernel, or the backward's main kernel.
  KernelFunction function;
  /// The backward's three kernels.
  BackwardFunctions backwardFunctions;
};

/// Compiles every binary on `threads` threads; `progress` after each.
void compileAll(const std::vector<Binary *> &binaries, const TuneOptions &options) {
  std::atomic<size_t> next{0}, done{0};
  std::mutex progressMutex;
  auto worker = [&] {
    for (size_t i = next++; i < binaries.size(); i = next++) {
      Binary &binary = *binaries[i];
      CompileOptions compile;
      compile.arch = options.arch;
      compile.tileOverride = formatTileOverride(binary.config);
      try {
        binary.compiled = (binary.backward ? compileBackwardSpec : compileSpec)(
            options.specText, options.specName, compile, BinaryKind::Cubin);
      } catch (const Error &error) {
        binary.error = error.what();
      }
      size_t finished = ++done;
      if (options.progress) {
        std::lock_guard<std::mutex> lock(progressMutex);
        options.progress("compile", finished, binaries.size());
      }
    }
  };
  unsigned threads = options.compileThreads ? options.compileThreads
                                            : std::max(1u, std::thread::hardware_concurrency());
  runOnThreads(std::min<size_t>(threads, binaries.size()), worker);
}

/// Loads a compiled binary's module and kernels; a failure becomes its error.
void load(Binary &binary) {
  if (!binary.error.empty())
    return;
  try {
    binary.module =
        Module::loadCubin(binary.compiled.binary.data(), binary.compiled.binary.size());
    if (binary.backward) {
      binary.backwardFunctions = loadBackwardFunctions(binary.module, binary.compiled.launch);
      binary.function = binary.backwardFunctions.main;
    } else {
      binary.function = binary.module.function(binary.compiled.launch.kernelName);
    }
  } catch (const Error &error) {
    binary.error = std::string("loading the cubin: ") + error.what();
  }
}

/// A deterministic spread of rows plus the first and last two of every
/// (batch, head): the edges are where tile boundaries and masks bite.
reference::RowFilter sampleRows(const TuningShape &shape, int64_t qHeads, int64_t sampled) {
  int64_t total = shape.batch * qHeads * shape.seqlenQ;
  uint64_t stride = uint64_t(std::max<int64_t>(1, total / std::max<int64_t>(1, sampled)));
  int64_t seqlenQ = shape.seqlenQ;
  return [=](int64_t b, int64_t h, int64_t q) {
    if (q < 2 || q >= seqlenQ - 2)
      return true;
    uint64_t x = uint64_t(b) * 0x9E3779B97F4A7C15ull ^ uint64_t(h) * 0xC2B2AE3D27D4EB4Full ^
                 uint64_t(q) * 0x165667B19E3779F9ull;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return x % stride == 0;
  };
}

std::string describe(const TileConfig &c, bool backward) {
  std::ostringstream os;
  os << c.blockM << "x" << c.blockN << " s" << c.stages;
  if (backward)
    os << " r" << c.consumerRegisters;
  else
    os << " c" << c.softmaxChains << " p" << c.persistentBlocksPerSm;
  return os.str();
}
} // namespace

const char *statusName(CandidateStatus status) {
  switch (status) {
  case CandidateStatus::Measured:
    return "measured";
  case CandidateStatus::CompileFailed:
    return "compile failed";
  case CandidateStatus::WrongResult:
    return "wrong result";
  case CandidateStatus::LaunchFailed:
    return "launch failed";
  }
  return "?";
}

const CandidateResult *TuneReport::best() const {
  if (results.empty() || results.front().status != CandidateStatus::Measured)
    return nullptr;
  // Within the noise floor the heuristic stays: a record then changes
  // nothing rather than swapping plans on a measurement's whim.
  const CandidateResult *heuristic = heuristicResult();
  if (heuristic && heuristic->finalist &&
      heuristic->milliseconds <= results.front().milliseconds * (1 + kNoiseFloor))
    return heuristic;
  return &results.front();
}

const CandidateResult *TuneReport::heuristicResult() const {
  for (const CandidateResult &result : results)
    if (result.heuristic)
      return &result;
  return nullptr;
}

TuningRecord TuneReport::bestRecord() const {
  const CandidateResult *winner = best();
  if (!winner)
    throw Error("attn-tune: no candidate of @" + specName + " was measured");
  TuningRecord record;
  record.specHash = specHash;
  record.arch = arch;
  record.bucket = bucket;
  record.config = formatTileOverride(winner->config);
  record.milliseconds = winner->milliseconds;
  record.tflops = winner->tflops;
  record.device = device;
  record.unixSeconds = int64_t(std::time(nullptr));
  return record;
}

namespace {
/// A candidate's timed call: the median milliseconds of `repeats` calls
/// after `warmup` untimed ones.
using Timer = std::function<double(int warmup, int repeats)>;

/// Fails the candidates of every binary that failed to compile or load;
/// returns the first binary that loaded, or null.
const Binary *failUnloaded(const std::vector<Binary> &binaries,
                           std::vector<CandidateResult> &results) {
  const Binary *first = nullptr;
  for (const Binary &binary : binaries) {
    if (binary.error.empty()) {
      first = first ? first : &binary;
      continue;
    }
    for (size_t member : binary.members) {
      results[member].status = CandidateStatus::CompileFailed;
      results[member].message = binary.error;
    }
  }
  return first;
}

/// Runs `measure(binary, member)` (check, then screen) for every candidate
/// of a loaded binary, after reading its registers; an attn::Error it
/// throws is a launch failure.
void measureEach(const TuneOptions &options, std::vector<Binary> &binaries,
                 std::vector<CandidateResult> &results,
                 const std::function<void(size_t binary, size_t member)> &measure) {
  size_t done = 0;
  for (size_t b = 0; b < binaries.size(); ++b) {
    for (size_t member : binaries[b].members) {
      CandidateResult &result = results[member];
      if (binaries[b].error.empty()) {
        KernelFunction &function = binaries[b].function;
        result.registers = function.attribute(CU_FUNC_ATTRIBUTE_NUM_REGS);
        result.localBytes = function.attribute(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
        try {
          measure(b, member);
        } catch (const Error &error) {
          result.status = CandidateStatus::LaunchFailed;
          result.message = error.what();
        }
      }
      if (options.progress)
        options.progress("measure", ++done, results.size());
    }
  }
}

/// Screens a candidate that passed its check (the checked call warmed it
/// up): one timed call already rules out the far-off plans (most of the
/// space); the rest get the screen's median.
void screen(const TuneOptions &options, CandidateResult &result, const Timer &time,
            double &fastestScreen) {
  const double first = time(0, 1);
  result.milliseconds = first > fastestScreen * (1 + 2.5 * options.finalistMargin)
                            ? first
                            : time(0, options.screenRepeats);
  result.screenMilliseconds = result.milliseconds;
  fastestScreen = std::min(fastestScreen, result.milliseconds);
}

/// Finalists: the screen's few launches rank the field; the close ones
/// (and always the heuristic, the baseline) are timed again in rounds that
/// visit every finalist once, so clock and temperature drift over the run
/// reaches all of them alike. A finalist's time is its median round.
/// `timerOf(binary, member)` prepares a finalist's call once for all rounds.
/// Then every measured candidate's TFLOP/s for `flops` a call.
void timeFinalists(const TuneOptions &options, const std::vector<Binary> &binaries,
                   std::vector<CandidateResult> &results, double fastestScreen,
                   const std::function<Timer(size_t binary, size_t member)> &timerOf,
                   double flops) {
  std::vector<std::pair<size_t, size_t>> finalists; // (binary, result)
  for (size_t b = 0; b < binaries.size(); ++b)
    for (size_t member : binaries[b].members) {
      const CandidateResult &result = results[member];
      if (result.status == CandidateStatus::Measured &&
          (result.heuristic ||
           result.milliseconds <= fastestScreen * (1 + options.finalistMargin)))
        finalists.emplace_back(b, member);
    }
  std::sort(finalists.begin(), finalists.end(), [&](auto a, auto b) {
    return results[a.second].milliseconds < results[b.second].milliseconds;
  });
  if (finalists.size() > options.maxFinalists) {
    auto heuristic = std::find_if(finalists.begin(), finalists.end(),
                                  [&](auto f) { return results[f.second].heuristic; });
    if (heuristic != finalists.end() && heuristic - finalists.begin() >= long(options.maxFinalists))
      std::iter_swap(finalists.begin() + (options.maxFinalists - 1), heuristic);
    finalists.resize(options.maxFinalists);
  }
  std::vector<Timer> timers;
  for (auto [b, member] : finalists)
    timers.push_back(timerOf(b, member));
  std::vector<std::vector<double>> rounds(finalists.size());
  // Odd rounds run in reverse: under a power cap the clock sags during a
  // round, and a fixed order would hand the late slots the slow clock.
  for (int round = 0; round < options.rounds; ++round)
    for (size_t i = 0; i < finalists.size(); ++i) {
      size_t f = round % 2 ? finalists.size() - 1 - i : i;
      rounds[f].push_back(timers[f](options.warmup, options.repeats));
    }
  for (size_t f = 0; f < finalists.size(); ++f) {
    std::vector<double> &times = rounds[f];
    std::sort(times.begin(), times.end());
    CandidateResult &result = results[finalists[f].second];
    result.milliseconds = times[times.size() / 2];
    result.finalist = true;
  }
  for (CandidateResult &result : results)
    if (result.status == CandidateStatus::Measured)
      result.tflops = flops / result.milliseconds / 1e9;
}

/// The host copies of a problem's captures, for the reference.
std::vector<HostCapture> hostCapturesOf(const harness::ForwardProblem &data) {
  std::vector<HostCapture> captures;
  for (const harness::HostDeviceCapture &capture : data.captures)
    captures.push_back({capture.hostData(), capture.view.dtype, capture.view.shape});
  return captures;
}

/// Checks and times every forward candidate at one shape.
void measureForwardShape(const TuneOptions &options, const SpecTuningKey &key,
                         std::vector<Binary> &binaries, const TuningShape &tuningShape,
                         std::vector<CandidateResult> &results) {
  const Binary *first = failUnloaded(binaries, results);
  if (!first)
    return;
  harness::Shape shape{tuningShape.batch, tuningShape.seqlenQ, tuningShape.seqlenK, false};
  // Inputs depend on heads, head dim and dtype only, shared by all plans.
  const AttnLaunchConfig &firstLaunch = first->compiled.launch;
  harness::ForwardProblem data(firstLaunch, shape, 2026);
  harness::addGeneratedCaptures(data, firstLaunch, shape, options.captures);
  reference::Problem problem = referenceProblemFromSpec(
      options.specText, shape.batch, shape.seqlenQ, shape.seqlenK, hostCapturesOf(data));
  problem.rows = sampleRows(tuningShape, key.qHeads, options.sampledRows);
  harness::ReferenceOutputs expected = harness::computeReference(problem, data);
  bool causal = harness::specHasCausalMask(options.specText);

  // A candidate's launch (its binary's, with its grid policy) and arguments,
  // with the forward workspace its calls need: it runs as a caller with a
  // workspace runs it (the split of its persistent grid's last round).
  // A kernel with a mask_mod runs in the order attn::Kernel::run gives it
  // (the automatic work order of its plan's work tiles), built once per
  // binary for the screen and the finalists.
  std::vector<AutomaticWorkOrders> workOrders(binaries.size());
  struct CandidateRun {
    AttnLaunchConfig launch;
    AttnForwardArgs args;
    DeviceBuffer workspace;
  };
  auto candidateRun = [&](size_t b, size_t member) {
    auto run = std::make_shared<CandidateRun>(
        CandidateRun{binaries[b].compiled.launch, data.args(), DeviceBuffer()});
    run->launch.persistentBlocksPerSm = results[member].config.persistentBlocksPerSm;
    run->workspace = harness::attachForwardWorkspace({&run->launch}, run->args);
    run->args.workOrder =
        workOrders[b].orderFor(binaries[b].module, run->launch, run->args, nullptr);
    return run;
  };
  auto timerWith = [&](size_t b, std::shared_ptr<CandidateRun> run) -> Timer {
    KernelFunction *function = &binaries[b].function;
    return [run, function](int warmup, int repeats) {
      return harness::medianLaunchMs(*function, run->launch, run->args, warmup, repeats);
    };
  };
  auto timerOf = [&](size_t b, size_t member) { return timerWith(b, candidateRun(b, member)); };

  double fastestScreen = std::numeric_limits<double>::infinity();
  measureEach(options, binaries, results, [&](size_t b, size_t member) {
    CandidateResult &result = results[member];
    const std::shared_ptr<CandidateRun> run = candidateRun(b, member);
    data.poisonOutputs();
    launchForward(binaries[b].function, run->launch, run->args, nullptr);
    ATTN_CU_CHECK(cuCtxSynchronize);
    harness::Comparison check =
        harness::compareOutputs(problem, expected, data, run->launch.dtype);
    result.maxAbsError = check.maxAbsError;
    if (!check.passed()) {
      result.status = CandidateStatus::WrongResult;
      result.message = check.firstViolation;
      return;
    }
    screen(options, result, timerWith(b, run), fastestScreen);
  });
  timeFinalists(options, binaries, results, fastestScreen, timerOf,
                harness::forwardFlops(firstLaunch, shape, causal));
}

/// One backward problem on the device: the inputs, the forward's o and lse
/// (its kernel run once), dO, the gradients, and a workspace that every
/// candidate's plan fits (its size depends on block_m).
struct BackwardData {
  BackwardData(const TuneOptions &options, Binary &forward,
               const std::vector<Binary> &binaries, const TuningShape &tuningShape,
               const AttnLaunchConfig &backwardLaunch, uint64_t seed)
      : shape{tuningShape.batch, tuningShape.seqlenQ, tuningShape.seqlenK, false},
        data(forward.compiled.launch, shape, seed), gradients(backwardLaunch, data, seed + 1) {
    const AttnLaunchConfig &forwardLaunch = forward.compiled.launch;
    harness::addGeneratedCaptures(data, forwardLaunch, shape, options.captures);
    AttnForwardArgs forwardArgs = data.args();
    DeviceBuffer workspace = harness::attachForwardWorkspace({&forwardLaunch}, forwardArgs);
    launchForward(forward.function, forwardLaunch, forwardArgs, nullptr);
    ATTN_CU_CHECK(cuCtxSynchronize);
    uint64_t bytes = gradients.workspace.size();
    for (const Binary &binary : binaries)
      if (binary.error.empty())
        bytes = std::max(bytes, backwardWorkspaceBytes(binary.compiled.launch, args()));
    if (bytes > gradients.workspace.size())
      gradients.workspace = DeviceBuffer(bytes);
  }
  AttnBackwardArgs args() const { return gradients.args(data); }

  harness::Shape shape;
  harness::ForwardProblem data;
  harness::BackwardProblem gradients;
};

/// Why a gradient check failed, gradient by gradient.
std::string describeFailure(const harness::GradientComparison &check) {
  std::ostringstream os;
  for (auto [error, name] : {std::make_pair(&check.dq, "dq"), std::make_pair(&check.dk, "dk"),
                             std::make_pair(&check.dv, "dv")}) {
    if (error->passed())
      continue;
    os << (os.tellp() > 0 ? "; " : "") << name << ": " << error->toleranceViolations
       << " past the tolerance, " << error->nonFinite << " not finite, "
       << error->zeroRowMismatches << " unreached rows not zero";
    if (!error->firstViolation.empty())
      os << " (first: " << error->firstViolation << ")";
  }
  return os.str();
}

/// Checks and times every backward candidate at one shape, over the
/// forward's o and lse. The gradients are checked against the CPU
/// reference at the shape when backwardCheckBudget allows, else on the
/// reduced problem backwardCheckShape gives; the timing is at the shape.
void measureBackwardShape(const TuneOptions &options, const SpecTuningKey &key,
                          Binary &forward, std::vector<Binary> &binaries,
                          const TuningShape &tuningShape, TuningShape &checkedShape,
                          std::vector<CandidateResult> &results) {
  const Binary *first = failUnloaded(binaries, results);
  if (!first)
    return;
  const AttnLaunchConfig &firstLaunch = first->compiled.launch;
  BackwardData timing(options, forward, binaries, tuningShape, firstLaunch, 2026);
  checkedShape = backwardCheckShape(tuningShape, key.qHeads, key.problem.headDim,
                                    options.backwardCheckBudget);
  const bool reduced = formatTuningShape(checkedShape) != formatTuningShape(tuningShape);
  std::unique_ptr<BackwardData> reducedData;
  if (reduced)
    reducedData =
        std::make_unique<BackwardData>(options, forward, binaries, checkedShape, firstLaunch, 2028);
  BackwardData &checking = reduced ? *reducedData : timing;
  const reference::Problem problem =
      referenceProblemFromSpec(options.specText, checking.shape.batch, checking.shape.seqlenQ,
                               checking.shape.seqlenK, hostCapturesOf(checking.data));
  const harness::ReferenceGradients expected =
      harness::computeReferenceGradients(problem, checking.data, checking.gradients);
  const AttnBackwardArgs timingArgs = timing.args();
  auto timerOf = [&](size_t b, size_t) -> Timer {
    Binary *binary = &binaries[b];
    return [binary, timingArgs](int warmup, int repeats) {
      return harness::medianMs(
          [&] {
            launchBackward(binary->backwardFunctions, binary->compiled.launch, timingArgs,
                           nullptr);
          },
          warmup, repeats);
    };
  };

  double fastestScreen = std::numeric_limits<double>::infinity();
  measureEach(options, binaries, results, [&](size_t b, size_t member) {
    CandidateResult &result = results[member];
    Binary &binary = binaries[b];
    const AttnLaunchConfig &launch = binary.compiled.launch;
    checking.gradients.poisonGradients();
    launchBackward(binary.backwardFunctions, launch, checking.args(), nullptr);
    ATTN_CU_CHECK(cuCtxSynchronize);
    const harness::GradientComparison check =
        harness::compareGradients(problem, expected, checking.gradients, launch.dtype);
    result.maxAbsError = std::max(
        {check.dq.maxErrorOverRms, check.dk.maxErrorOverRms, check.dv.maxErrorOverRms});
    if (!check.passed()) {
      result.status = CandidateStatus::WrongResult;
      result.message = describeFailure(check);
      return;
    }
    const Timer time = timerOf(b, member);
    // Checked on the reduced problem: one untimed call at the shape.
    if (reduced)
      launchBackward(binary.backwardFunctions, launch, timingArgs, nullptr);
    screen(options, result, time, fastestScreen);
  });
  timeFinalists(options, binaries, results, fastestScreen, timerOf,
                harness::backwardFlops(firstLaunch, timing.shape,
                                       harness::specHasCausalMask(options.specText)));
}
} // namespace

TuningShape backwardCheckShape(const TuningShape &shape, int64_t qHeads, int64_t headDim,
                               int64_t budget) {
  auto work = [&](const TuningShape &s) {
    return double(s.batch) * double(qHeads) * double(s.seqlenQ) * double(s.seqlenK) *
           double(headDim);
  };
  if (work(shape) <= double(budget))
    return shape;
  TuningShape reduced = shape;
  reduced.batch = 1;
  if (work(reduced) > double(budget)) {
    const double factor = std::sqrt(double(budget) / work(reduced));
    reduced.seqlenQ = std::max<int64_t>(1, int64_t(double(shape.seqlenQ) * factor));
    reduced.seqlenK = std::max<int64_t>(1, int64_t(double(shape.seqlenK) * factor));
    // A length held at 1 (one query against very many keys) leaves the
    // other to shrink alone.
    auto fitting = [&](int64_t other) {
      return std::max<int64_t>(
          1, int64_t(double(budget) / (double(qHeads) * double(other) * double(headDim))));
    };
    reduced.seqlenK = std::min(reduced.seqlenK, fitting(reduced.seqlenQ));
    reduced.seqlenQ = std::min(reduced.seqlenQ, fitting(reduced.seqlenK));
  }
  return reduced;
}

std::vector<TuneReport> tune(const TuneOptions &options, const ReportCallback &onReport) {
  Clock::time_point start = Clock::now();
  if (options.shapes.empty())
    throw Error("attn-tune: no shape to tune for");
  SpecTuningKey key = tuningKeyOfSpec(options.specText, options.specName);
  if (key.linearFamily)
    throw Error("attn-tune: @" + options.specName +
                " is linear attention or retention, whose plan is fixed (64-token chunks, 64 "
                "value columns); nothing to tune (attn-bench --segments times its sequence "
                "split)");

  // attn-tile's plan for each shape (the heuristic reads the key length),
  // or the backward's (one for all shapes): the baseline, always measured.
  auto heuristicFor = [&](const TuningShape &shape) {
    if (options.backward)
      return backwardTileConfig(key.problem);
    TileProblem problem = key.problem;
    problem.keyLength = shape.seqlenK;
    return defaultTileConfig(problem);
  };
  auto illegal = [&](const TileConfig &config) {
    return options.backward ? checkBackwardTileLegality(key.problem, config)
                            : checkTileLegality(key.problem, config);
  };
  std::vector<TileConfig> space;
  if (options.backward) {
    if (std::optional<std::string> why = illegal(backwardTileConfig(key.problem)))
      throw Error("attn-tune: @" + options.specName + " has no backward plan: " + *why);
    const TileSearchSpace &filter = options.space;
    auto listed = [](const std::vector<int> &values, int value) {
      return std::find(values.begin(), values.end(), value) != values.end();
    };
    for (const TileConfig &config : enumerateBackwardTileCandidates(key.problem))
      if (listed(filter.consumerWarpgroups, config.consumerWarpgroups) &&
          listed(filter.blockN, config.blockN) && listed(filter.stages, config.stages) &&
          listed(filter.softmaxChains, config.softmaxChains) &&
          listed(filter.persistentBlocksPerSm, config.persistentBlocksPerSm))
        space.push_back(config);
  } else if (!options.candidates.empty()) {
    for (const TileConfig &config : options.candidates)
      if (!illegal(config) && std::find(space.begin(), space.end(), config) == space.end())
        space.push_back(config);
  } else {
    space = enumerateTileCandidates(key.problem, options.space);
  }
  std::vector<TileConfig> candidates = space;
  for (const TuningShape &shape : options.shapes) {
    TileConfig heuristic = heuristicFor(shape);
    if (std::find(candidates.begin(), candidates.end(), heuristic) == candidates.end() &&
        !illegal(heuristic))
      candidates.push_back(heuristic);
  }
  if (candidates.empty())
    throw Error("attn-tune: the search space holds no legal tile plan for @" + options.specName);

  std::vector<CandidateResult> blank(candidates.size());
  std::vector<Binary> binaries;
  std::map<std::string, size_t> binaryOf;
  for (size_t i = 0; i < candidates.size(); ++i) {
    blank[i].config = candidates[i];
    auto [it, inserted] = binaryOf.emplace(binaryKey(candidates[i]), binaries.size());
    if (inserted) {
      binaries.push_back({});
      binaries.back().config = binaryConfig(candidates[i]);
      binaries.back().backward = options.backward;
    }
    binaries[it->second].members.push_back(i);
  }
  // The backward's o and lse come from the forward, attn-tile's heuristic
  // plan without a shape, compiled along with the candidates.
  Binary forward;
  forward.config = key.heuristic;
  std::vector<Binary *> jobs;
  for (Binary &binary : binaries)
    jobs.push_back(&binary);
  if (options.backward)
    jobs.push_back(&forward);

  Clock::time_point compileStart = Clock::now();
  compileAll(jobs, options);
  double compileSeconds = secondsSince(compileStart);

  ensureContext();
  std::string device = queryDevice().name;
  for (Binary *binary : jobs)
    load(*binary);
  if (options.backward && !forward.error.empty())
    throw Error("attn-tune: the forward of @" + options.specName +
                ", which gives the backward its o and lse, failed: " + forward.error);
  double setupSeconds = secondsSince(start);

  std::vector<TuneReport> reports;
  for (const TuningShape &shape : options.shapes) {
    Clock::time_point measureStart = Clock::now();
    TuneReport report;
    report.specName = options.specName;
    report.specHash = options.backward ? backwardTuningHash(key.specHash) : key.specHash;
    report.arch = options.arch;
    report.device = device;
    report.backward = options.backward;
    report.shape = shape;
    report.checkedShape = shape;
    report.bucket = ShapeBucket::of(shape, key.qHeads);
    report.heuristic = heuristicFor(shape);
    report.binaries = binaries.size();
    report.compileSeconds = compileSeconds;
    std::vector<CandidateResult> results = blank;
    for (CandidateResult &result : results)
      result.heuristic = result.config == report.heuristic;
    if (options.backward)
      measureBackwardShape(options, key, forward, binaries, shape, report.checkedShape, results);
    else
      measureForwardShape(options, key, binaries, shape, results);
    // Another shape's heuristic from outside the search space ran along
    // (its binary is shared) but is no candidate at this shape.
    results.erase(std::remove_if(results.begin(), results.end(),
                                 [&](const CandidateResult &result) {
                                   return !result.heuristic &&
                                          std::find(space.begin(), space.end(), result.config) ==
                                              space.end();
                                 }),
                  results.end());
    std::stable_sort(results.begin(), results.end(),
                     [](const CandidateResult &a, const CandidateResult &b) {
                       bool aOk = a.status == CandidateStatus::Measured;
                       bool bOk = b.status == CandidateStatus::Measured;
                       if (aOk != bOk)
                         return aOk;
                       if (a.finalist != b.finalist)
                         return a.finalist;
                       return aOk && a.milliseconds < b.milliseconds;
                     });
    report.results = std::move(results);
    report.measureSeconds = secondsSince(measureStart);
    // One shape tuned alone: setup (compile, load) plus its measurement.
    report.totalSeconds = setupSeconds + report.measureSeconds;
    if (onReport)
      onReport(report);
    reports.push_back(std::move(report));
  }
  return reports;
}

std::string renderTable(const TuneReport &report, size_t top) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  const CandidateResult *heuristic = report.heuristicResult();
  double heuristicMs = heuristic && heuristic->status == CandidateStatus::Measured
                           ? heuristic->milliseconds
                           : 0;
  // The backward has one softmax chain and a block per key tile, but two
  // register budgets for one consumer.
  os << "| rank | block_m | block_n | stages | consumers | "
     << (report.backward ? "budget" : "chains | persistent")
     << " | regs | local B | ms | TFLOP/s | vs heuristic |\n"
     << (report.backward ? "" : "|---") << "|---|---|---|---|---|---|---|---|---|---|---|\n";
  auto row = [&](size_t rank, const CandidateResult &r) {
    const TileConfig &c = r.config;
    os << "| " << rank << (r.heuristic ? " (heuristic)" : "") << " | " << c.blockM << " | "
       << c.blockN << " | " << c.stages << " | " << c.consumerWarpgroups << " | ";
    if (report.backward)
      os << c.consumerRegisters;
    else
      os << c.softmaxChains << " | " << c.persistentBlocksPerSm;
    os << " | " << r.registers << " | " << r.localBytes << " | ";
    os.precision(3);
    os << r.milliseconds << " | ";
    os.precision(1);
    os << r.tflops << " | ";
    os.precision(3);
    if (heuristicMs > 0)
      os << heuristicMs / r.milliseconds << "x";
    else
      os << "-";
    os << " |\n";
  };
  size_t measured = 0;
  std::map<std::string, size_t> failures;
  std::string firstFailure;
  for (size_t i = 0; i < report.results.size(); ++i) {
    const CandidateResult &r = report.results[i];
    if (r.status != CandidateStatus::Measured) {
      ++failures[statusName(r.status)];
      if (firstFailure.empty())
        firstFailure = describe(r.config, report.backward) + ": " + r.message.substr(0, 300);
      continue;
    }
    ++measured;
    if (i < top || r.heuristic)
      row(i + 1, r);
  }
  size_t finalists = 0;
  for (const CandidateResult &r : report.results)
    finalists += r.finalist;
  os << "\n" << report.results.size() << " candidates (" << report.binaries << " binaries), "
     << measured << " measured, " << finalists << " finalists";
  for (const auto &[what, count] : failures)
    os << ", " << count << " " << what;
  os.precision(1);
  os << "; compile " << report.compileSeconds << " s, measure " << report.measureSeconds
     << " s, total " << report.totalSeconds << " s\n";
  if (!firstFailure.empty())
    os << "first failure: " << firstFailure << "\n";
  if (report.backward && formatTuningShape(report.checkedShape) != formatTuningShape(report.shape))
    os << "gradients checked at B=" << report.checkedShape.batch
       << " Sq=" << report.checkedShape.seqlenQ << " Sk=" << report.checkedShape.seqlenK
       << " (the reference's budget), timed at the shape\n";
  if (!heuristic)
    os << "the heuristic plan is outside the search space\n";
  return os.str();
}

std::string renderSvg(const TuneReport &report) {
  const double width = 960, height = 540, left = 70, right = 210, top = 50, bottom = 60;
  double maxTflops = 1;
  for (const CandidateResult &r : report.results)
    if (r.status == CandidateStatus::Measured)
      maxTflops = std::max(maxTflops, r.tflops);
  maxTflops *= 1.08;
  const double minN = 16, maxN = 272;
  auto xOf = [&](const TileConfig &c) {
    // Stages and chains (backward: block_m and the register budget) spread
    // the points of one block_n apart.
    double jitter = (c.stages - 2.5) * 2.2;
    if (report.backward)
      jitter += (c.blockM > kWgmmaM ? 0.7 : 0) + (c.consumerRegisters > 240 ? -0.7 : 0);
    else
      jitter += c.softmaxChains == 1 ? -0.7 : c.softmaxChains == 2 ? 0 : 0.7;
    return left + (c.blockN + jitter - minN) / (maxN - minN) * (width - left - right);
  };
  auto yOf = [&](double tflops) { return height - bottom - tflops / maxTflops * (height - top - bottom); };
  const char *colors[] = {"#1b9e77", "#d95f02", "#7570b3"};
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
     << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  auto escape = [](const std::string &text) {
    std::string out;
    for (char c : text)
      out += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
    return out;
  };
  os << "<text x=\"" << left << "\" y=\"24\" font-size=\"15\">attn-tune @" << escape(report.specName)
     << (report.backward ? " (backward)" : "") << ": B=" << report.shape.batch << " Sq=" << report.shape.seqlenQ << " Sk="
     << report.shape.seqlenK << " on " << escape(report.device) << "</text>\n";
  // Axes, grid and ticks.
  for (int i = 0; i <= 5; ++i) {
    double value = maxTflops * i / 5, y = yOf(value);
    os << "<line x1=\"" << left << "\" x2=\"" << width - right << "\" y1=\"" << y << "\" y2=\"" << y
       << "\" stroke=\"#ddd\"/>\n<text x=\"" << left - 8 << "\" y=\"" << y + 4
       << "\" text-anchor=\"end\">" << value << "</text>\n";
  }
  for (int n = 32; n <= 256; n += 32) {
    double x = left + (n - minN) / (maxN - minN) * (width - left - right);
    os << "<text x=\"" << x << "\" y=\"" << height - bottom + 18 << "\" text-anchor=\"middle\">" << n
       << "</text>\n";
  }
  os << "<line x1=\"" << left << "\" x2=\"" << width - right << "\" y1=\"" << height - bottom
     << "\" y2=\"" << height - bottom << "\" stroke=\"black\"/>\n"
     << "<line x1=\"" << left << "\" x2=\"" << left << "\" y1=\"" << top << "\" y2=\""
     << height - bottom << "\" stroke=\"black\"/>\n"
     << "<text x=\"" << (left + width - right) / 2 << "\" y=\"" << height - 18
     << "\" text-anchor=\"middle\">block_n (points spread by stages and "
     << (report.backward ? "block_m, registers" : "softmax chains") << ")</text>\n"
     << "<text transform=\"translate(18," << (top + height - bottom) / 2
     << ") rotate(-90)\" text-anchor=\"middle\">TFLOP/s</text>\n";
  // Points: colour = block_m, circle = a block per tile, square = persistent.
  for (const CandidateResult &r : report.results) {
    if (r.status != CandidateStatus::Measured)
      continue;
    const TileConfig &c = r.config;
    const char *color = colors[std::clamp(c.consumerWarpgroups - 1, 0, 2)];
    double x = xOf(c), y = yOf(r.tflops);
    os << (c.persistentBlocksPerSm ? "<rect" : "<circle");
    if (c.persistentBlocksPerSm)
      os << " x=\"" << x - 3 << "\" y=\"" << y - 3 << "\" width=\"6\" height=\"6\"";
    else
      os << " cx=\"" << x << "\" cy=\"" << y << "\" r=\"3.2\"";
    os << " fill=\"" << color << "\" fill-opacity=\"0.75\"><title>" << describe(c, report.backward) << ": "
       << r.tflops << " TFLOP/s</title>" << (c.persistentBlocksPerSm ? "</rect>\n" : "</circle>\n");
  }
  auto ring = [&](const CandidateResult *r, const char *stroke, const char *label) {
    if (!r || r->status != CandidateStatus::Measured)
      return;
    double x = xOf(r->config), y = yOf(r->tflops);
    os << "<circle cx=\"" << x << "\" cy=\"" << y << "\" r=\"8\" fill=\"none\" stroke=\"" << stroke
       << "\" stroke-width=\"2\"/>\n<text x=\"" << x + 10 << "\" y=\"" << y - 10 << "\" fill=\""
       << stroke << "\">" << label << " " << describe(r->config, report.backward) << " (" << r->tflops
       << ")</text>\n";
  };
  ring(report.heuristicResult(), "#c00", "heuristic");
  ring(report.best(), "black", "best");
  // Legend.
  double lx = width - right + 20, ly = top + 10;
  // Colour = consumer warpgroups (the forward's block_m is 64 per consumer).
  const char *names[] = {"block_m 64", "block_m 128", "block_m 192"};
  const char *backwardNames[] = {"1 consumer", "2 consumers"};
  for (int i = 0; i < (report.backward ? 2 : 3); ++i)
    os << "<circle cx=\"" << lx << "\" cy=\"" << ly + 20 * i << "\" r=\"4\" fill=\"" << colors[i]
       << "\"/><text x=\"" << lx + 10 << "\" y=\"" << ly + 20 * i + 4 << "\">"
       << (report.backward ? backwardNames[i] : names[i]) << "</text>\n";
  if (report.backward) {
    os << "</svg>\n";
    return os.str();
  }
  os << "<circle cx=\"" << lx << "\" cy=\"" << ly + 70 << "\" r=\"4\" fill=\"#888\"/><text x=\""
     << lx + 10 << "\" y=\"" << ly + 74 << "\">a block per tile</text>\n"
     << "<rect x=\"" << lx - 4 << "\" y=\"" << ly + 86 << "\" width=\"8\" height=\"8\" fill=\"#888\"/>"
     << "<text x=\"" << lx + 10 << "\" y=\"" << ly + 94 << "\">persistent grid</text>\n"
     << "</svg>\n";
  return os.str();
}

} // namespace attn::tune
