//===- SplitTuner.cpp - Measure the short-query path's split counts -------===//

#include "SplitTuner.h"

#include "AttnHarness.h"
#include "attn/Compiler/Compiler.h"
#include "attn/Compiler/Parallel.h"
#include "attn/runtime/Error.h"
#include "attn/runtime/Runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <limits>
#include <map>
#include <memory>

namespace attn::tune {

namespace {
using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// K and V of the calls being timed rotate over copies that together exceed
/// this, so that a call finds its keys in memory, not in the 50 MB L2.
constexpr uint64_t kRotationBytes = uint64_t(256) << 20;
constexpr int kMaxCopies = 16;

/// Rows checked per candidate: spread evenly over the batch, the heads and
/// the query positions (the reference reads every key for each).
constexpr int64_t kCheckedRows = 128;

reference::RowFilter spreadRows(const TuningShape &shape, int64_t qHeads) {
  const int64_t total = shape.batch * qHeads * shape.seqlenQ;
  const int64_t stride = std::max<int64_t>(1, total / kCheckedRows);
  const int64_t seqlenQ = shape.seqlenQ;
  return [=](int64_t b, int64_t h, int64_t q) {
    return ((b * qHeads + h) * seqlenQ + q) % stride == 0;
  };
}

/// Bytes a BSHD view spans (its last element's offset plus one).
uint64_t spanBytes(const TensorView &view) {
  int64_t last = 0;
  for (int d = 0; d < 4; ++d)
    last += (view.shape[d] - 1) * view.strides[d];
  return uint64_t(last + 1) * dtypeSize(view.dtype);
}

/// One compiled plan: the forward kernel and the short-query kernels.
struct LoadedPlan {
  CompiledKernel compiled;
  std::string error;
  Module module;
  KernelFunction forward;
  ShortQueryFunctions shortQuery;
};

/// Checks and times every split count at one shape.
void measureShape(const TuneOptions &options, const SpecTuningKey &key, LoadedPlan &plan,
                  SplitTuneReport &report) {
  const TuningShape &tuningShape = report.shape;
  const AttnLaunchConfig &launch = plan.compiled.launch;
  harness::Shape shape{tuningShape.batch, tuningShape.seqlenQ, tuningShape.seqlenK, false};
  harness::ForwardProblem data(launch, shape, 2026);
  harness::addGeneratedCaptures(data, launch, shape, options.captures);
  std::vector<HostCapture> hostCaptures;
  for (const harness::HostDeviceCapture &capture : data.captures)
    hostCaptures.push_back({capture.hostData(), capture.view.dtype, capture.view.shape});
  reference::Problem problem = referenceProblemFromSpec(
      options.specText, shape.batch, shape.seqlenQ, shape.seqlenK, hostCaptures);
  problem.rows = spreadRows(tuningShape, key.qHeads);
  const harness::ReferenceOutputs expected = harness::computeReference(problem, data);

  const AttnForwardArgs base = data.args();
  const int multiprocessors = queryDevice(currentDevice()).multiprocessorCount;
  std::vector<int> ladder = keySplitLadder(launch, tuningShape.seqlenK);

  // One workspace for the largest need (the most splits, the automatic
  // choice's, or the forward kernel's tail split).
  uint64_t workspaceBytes = std::max<uint64_t>(16, forwardWorkspaceBytes(launch, base));
  for (int splits : ladder) {
    AttnForwardArgs args = base;
    args.keySplits = splits;
    workspaceBytes = std::max(workspaceBytes, forwardWorkspaceBytes(launch, args));
  }
  DeviceBuffer workspace(workspaceBytes);
  auto withWorkspace = [&](AttnForwardArgs args, int keySplits) {
    args.workspace = workspace.data();
    args.workspaceBytes = workspace.size();
    args.keySplits = keySplits;
    return args;
  };
  report.automaticSplits = modelKeySplits(launch, base, multiprocessors);
  if (std::find(ladder.begin(), ladder.end(), report.automaticSplits) == ladder.end())
    ladder.insert(ladder.end() - 1, report.automaticSplits);

  // Copies of K and V to rotate over; the first is the checked problem's.
  const uint64_t kBytes = spanBytes(base.k), vBytes = spanBytes(base.v);
  const int copies = int(std::clamp<uint64_t>(kRotationBytes / (kBytes + vBytes) + 1, 1, kMaxCopies));
  std::vector<DeviceBuffer> keyCopies, valueCopies;
  std::vector<std::pair<void *, void *>> caches{{base.k.data, base.v.data}};
  std::vector<uint8_t> keyBytes(copies > 1 ? kBytes : 0), valueBytes(copies > 1 ? vBytes : 0);
  if (copies > 1) {
    ATTN_CU_CHECK(cuMemcpyDtoH, keyBytes.data(), CUdeviceptr(base.k.data), kBytes);
    ATTN_CU_CHECK(cuMemcpyDtoH, valueBytes.data(), CUdeviceptr(base.v.data), vBytes);
  }
  for (int copy = 1; copy < copies; ++copy) {
    keyCopies.emplace_back(kBytes);
    valueCopies.emplace_back(vBytes);
    keyCopies.back().copyFromHost(keyBytes.data(), kBytes);
    valueCopies.back().copyFromHost(valueBytes.data(), vBytes);
    caches.emplace_back(keyCopies.back().data(), valueCopies.back().data());
  }

  AutomaticWorkOrders workOrders;
  auto launchWith = [&](AttnForwardArgs args) {
    if (args.keySplits > 0) {
      launchShortQuery(plan.shortQuery, launch, args, nullptr);
      return;
    }
    args.workOrder = workOrders.orderFor(plan.module, launch, args, nullptr);
    launchForward(plan.forward, launch, args, nullptr);
  };

  std::vector<SplitCandidate> results;
  for (int splits : ladder) {
    SplitCandidate candidate;
    candidate.keySplits = splits;
    candidate.automatic = splits == report.automaticSplits;
    try {
      data.poisonOutputs();
      launchWith(withWorkspace(base, splits));
      ATTN_CU_CHECK(cuCtxSynchronize);
      const harness::Comparison check =
          harness::compareOutputs(problem, expected, data, launch.dtype);
      candidate.maxAbsError = check.maxAbsError;
      if (!check.passed()) {
        candidate.status = CandidateStatus::WrongResult;
        candidate.message = check.firstViolation;
      }
    } catch (const Error &error) {
      candidate.status = CandidateStatus::LaunchFailed;
      candidate.message = error.what();
    }
    results.push_back(candidate);
    if (options.progress)
      options.progress("check", results.size(), ladder.size());
  }

  // Every measured count in each round, odd rounds in reverse (the clock's
  // drift under a power cap reaches all alike); a count's time is its
  // median round.
  std::vector<std::vector<double>> rounds(results.size());
  size_t next = 0;
  for (int round = 0; round < options.rounds; ++round)
    for (size_t i = 0; i < results.size(); ++i) {
      const size_t c = round % 2 ? results.size() - 1 - i : i;
      if (results[c].status != CandidateStatus::Measured)
        continue;
      rounds[c].push_back(harness::backToBackMs(
                              [&] {
                                AttnForwardArgs args = withWorkspace(base, results[c].keySplits);
                                args.k.data = caches[next].first;
                                args.v.data = caches[next].second;
                                next = (next + 1) % caches.size();
                                launchWith(args);
                              },
                              options.warmup, options.repeats)
                              .deviceMs);
    }
  for (size_t c = 0; c < results.size(); ++c) {
    if (rounds[c].empty())
      continue;
    std::sort(rounds[c].begin(), rounds[c].end());
    results[c].milliseconds = rounds[c][rounds[c].size() / 2];
    results[c].terabytesPerSecond = double(kBytes + vBytes) / results[c].milliseconds / 1e9;
  }
  std::stable_sort(results.begin(), results.end(), [](const SplitCandidate &a, const SplitCandidate &b) {
    const bool aOk = a.status == CandidateStatus::Measured;
    const bool bOk = b.status == CandidateStatus::Measured;
    if (aOk != bOk)
      return aOk;
    return aOk && a.milliseconds < b.milliseconds;
  });
  report.results = std::move(results);
}
} // namespace

bool isShortQueryShape(const TuningShape &shape) {
  return shape.seqlenQ <= attn_abi::kShortQueryMaxRows;
}

const SplitCandidate *SplitTuneReport::best() const {
  if (results.empty() || results.front().status != CandidateStatus::Measured)
    return nullptr;
  const SplitCandidate *automatic = automaticResult();
  if (automatic && automatic->status == CandidateStatus::Measured &&
      automatic->milliseconds <= results.front().milliseconds * (1 + kNoiseFloor))
    return automatic;
  return &results.front();
}

const SplitCandidate *SplitTuneReport::automaticResult() const {
  for (const SplitCandidate &result : results)
    if (result.automatic)
      return &result;
  return nullptr;
}

TuningRecord SplitTuneReport::bestRecord() const {
  const SplitCandidate *winner = best();
  if (!winner)
    throw Error("attn-tune: no split count of @" + specName + " was measured");
  TuningRecord record;
  record.specHash = specHash;
  record.arch = arch;
  record.bucket = bucket;
  record.config = formatKeySplitsConfig(winner->keySplits);
  record.milliseconds = winner->milliseconds;
  // The record's rate column: TB/s of K and V here, not TFLOP/s.
  record.tflops = winner->terabytesPerSecond;
  record.device = device;
  record.unixSeconds = int64_t(std::time(nullptr));
  return record;
}

std::vector<SplitTuneReport>
tuneKeySplits(const TuneOptions &options,
              const std::function<void(const SplitTuneReport &)> &onReport) {
  if (options.shapes.empty())
    throw Error("attn-tune: no shape to tune for");
  if (options.backward)
    throw Error("attn-tune: the backward has no short-query path");
  for (const TuningShape &shape : options.shapes)
    if (!isShortQueryShape(shape))
      throw Error(fmt::format("attn-tune: query length {} is beyond the short-query path's {}",
                              shape.seqlenQ, attn_abi::kShortQueryMaxRows));
  SpecTuningKey key = tuningKeyOfSpec(options.specText, options.specName);
  if (key.linearFamily)
    throw Error("attn-tune: @" + options.specName +
                " is linear attention or retention, which has no short-query path");

  // The heuristic plan of each shape (it reads the key length), compiled
  // once per distinct plan on CPU threads.
  std::vector<TileConfig> planOfShape;
  std::map<std::string, size_t> planIndex;
  std::vector<TileConfig> distinct;
  for (const TuningShape &shape : options.shapes) {
    TileProblem problem = key.problem;
    problem.keyLength = shape.seqlenK;
    planOfShape.push_back(defaultTileConfig(problem));
    if (planIndex.emplace(formatTileOverride(planOfShape.back()), distinct.size()).second)
      distinct.push_back(planOfShape.back());
  }
  Clock::time_point compileStart = Clock::now();
  std::vector<LoadedPlan> plans(distinct.size());
  std::atomic<size_t> nextPlan{0};
  runOnThreads(distinct.size(), [&] {
    for (size_t i = nextPlan++; i < distinct.size(); i = nextPlan++) {
      CompileOptions compile;
      compile.arch = options.arch;
      compile.tileOverride = formatTileOverride(distinct[i]);
      try {
        plans[i].compiled =
            compileSpec(options.specText, options.specName, compile, BinaryKind::Cubin);
      } catch (const Error &error) {
        plans[i].error = error.what();
      }
    }
  });
  const double compileSeconds = secondsSince(compileStart);
  ensureContext();
  const std::string device = queryDevice().name;
  for (LoadedPlan &plan : plans) {
    if (!plan.error.empty())
      throw Error("attn-tune: @" + options.specName + " does not compile: " + plan.error);
    // The runtime's own choice is the baseline: no earlier record applies.
    plan.compiled.launch.tunedKeySplits.clear();
    plan.module = Module::loadCubin(plan.compiled.binary.data(), plan.compiled.binary.size());
    plan.forward = plan.module.function(plan.compiled.launch.kernelName);
    plan.shortQuery = loadShortQueryFunctions(plan.module, plan.compiled.launch);
  }

  std::vector<SplitTuneReport> reports;
  for (size_t s = 0; s < options.shapes.size(); ++s) {
    Clock::time_point measureStart = Clock::now();
    SplitTuneReport report;
    report.specName = options.specName;
    report.specHash = shortQueryTuningHash(key.specHash);
    report.arch = options.arch;
    report.device = device;
    report.shape = options.shapes[s];
    report.bucket = ShapeBucket::of(report.shape, key.qHeads);
    report.compileSeconds = compileSeconds;
    measureShape(options, key, plans[planIndex.at(formatTileOverride(planOfShape[s]))], report);
    report.measureSeconds = secondsSince(measureStart);
    if (onReport)
      onReport(report);
    reports.push_back(std::move(report));
  }
  return reports;
}

std::string renderSplitTable(const SplitTuneReport &report) {
  const SplitCandidate *automatic = report.automaticResult();
  const double automaticMs = automatic && automatic->status == CandidateStatus::Measured
                                 ? automatic->milliseconds
                                 : 0;
  std::string text = "| rank | key splits | ms | K+V TB/s | max abs error | vs automatic |\n"
                     "|---|---|---|---|---|---|\n";
  size_t failed = 0;
  std::string firstFailure;
  for (size_t i = 0; i < report.results.size(); ++i) {
    const SplitCandidate &r = report.results[i];
    const std::string splits =
        r.keySplits == 0 ? std::string("0 (forward kernel)") : std::to_string(r.keySplits);
    if (r.status != CandidateStatus::Measured) {
      ++failed;
      if (firstFailure.empty())
        firstFailure = fmt::format("{} splits: {}: {}", r.keySplits, statusName(r.status),
                                   r.message.substr(0, 300));
      continue;
    }
    text += fmt::format("| {}{} | {} | {:.4f} | {:.2f} | {:.2g} | {} |\n", i + 1,
                        r.automatic ? " (automatic)" : "", splits, r.milliseconds,
                        r.terabytesPerSecond, r.maxAbsError,
                        automaticMs > 0 ? fmt::format("{:.3f}x", automaticMs / r.milliseconds)
                                        : std::string("-"));
  }
  text += fmt::format("\n{} split counts, {} failed; compile {:.1f} s, measure {:.1f} s\n",
                      report.results.size(), failed, report.compileSeconds, report.measureSeconds);
  if (!firstFailure.empty())
    text += "first failure: " + firstFailure + "\n";
  if (!automatic)
    text += fmt::format("the automatic choice ({} splits) is outside the ladder\n",
                        report.automaticSplits);
  return text;
}

} // namespace attn::tune
