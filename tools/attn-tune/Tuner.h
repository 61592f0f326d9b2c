//===- Tuner.h - Measure every legal tile plan of a spec --------*- C++ -*-===//
//
// The tuning loop behind attn-tune: enumerate the legal tile plans of a spec
// (enumerateTileCandidates), compile them to cubins on CPU threads, then on
// the GPU run each one, check its output against the CPU reference on a
// sample of rows, and time the ones that pass (median of repeated launches
// after warm-up). Plans that differ only in the grid policy share a binary.
// With `backward`, the same loop over the backward's plans
// (enumerateBackwardTileCandidates): the forward runs once per shape for o
// and lse, and each candidate's gradients are checked against the CPU
// reference's on the whole problem, or on a reduced one for large shapes.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_TUNE_TUNER_H
#define ATTN_TUNE_TUNER_H

#include "attn/Compiler/TileConstraints.h"
#include "attn/runtime/TuningDatabase.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace attn::tune {

struct TuneOptions {
  std::string specText;
  std::string specName = "spec";
  std::string arch = "sm_90a";
  /// Every shape is measured with the same binaries (compiled once).
  std::vector<TuningShape> shapes;
  /// Tune the backward kernels (dQ, dK, dV) instead of the forward; the
  /// reports' spec hash is then backwardTuningHash of the spec's.
  bool backward = false;
  /// NAME=GENERATOR[@D0xD1...] for each capture (attn-bench's --capture).
  std::vector<std::string> captures;
  /// Every candidate that passes the check (its launch is the warm-up) is
  /// screened with one timed launch, and when that is within 2.5 x
  /// `finalistMargin` of the fastest screen so far, the median of
  /// `screenRepeats` more. The heuristic and those within
  /// `finalistMargin` of the fastest screen (at most `maxFinalists`) are
  /// then timed in `rounds` interleaved rounds of `warmup` + `repeats`
  /// launches each; a finalist's time is its median round.
  int screenRepeats = 3;
  double finalistMargin = 0.10;
  size_t maxFinalists = 24;
  int rounds = 5;
  int warmup = 2;
  int repeats = 5;
  /// Compile threads; 0: one per hardware thread.
  unsigned compileThreads = 0;
  /// The forward's search space; with `backward` a filter of the backward's
  /// candidates (each field's value must be listed).
  TileSearchSpace space;
  /// Forward: when not empty, these plans instead of the search space's
  /// (illegal ones are left out); the heuristic joins them as always.
  std::vector<TileConfig> candidates;
  /// Forward: reference rows checked per candidate (spread over batch,
  /// heads and sequence, plus the first and last rows of every (batch,
  /// head)).
  int64_t sampledRows = 512;
  /// Backward: the largest B x Hq x Sq x Sk x head_dim at which the CPU
  /// reference checks the gradients at the tuning shape itself (3.4 s on 2
  /// CPU cores without a mask). Beyond it the candidates are checked on a
  /// reduced problem (backwardCheckShape) and timed at the tuning shape.
  int64_t backwardCheckBudget = int64_t(1) << 31;
  /// Called with (phase, done, total) as candidates compile and run.
  std::function<void(const char *phase, size_t done, size_t total)> progress;
};

struct TuneReport;
/// Called with each shape's report as soon as it is measured.
using ReportCallback = std::function<void(const TuneReport &report)>;

enum class CandidateStatus { Measured, CompileFailed, WrongResult, LaunchFailed };
const char *statusName(CandidateStatus status);

struct CandidateResult {
  TileConfig config;
  bool heuristic = false; // attn-tile's plan for the report's shape
  CandidateStatus status = CandidateStatus::Measured;
  std::string message;    // why it failed
  double milliseconds = 0;
  double tflops = 0;
  int registers = 0;      // per thread, from the loaded (backward: main) function
  int localBytes = 0;     // local memory per thread (spills)
  /// Forward: the largest |O - reference| over the checked rows. Backward:
  /// the largest element error over its gradient's RMS (dq, dk, dv).
  double maxAbsError = 0;
  /// Timed with `repeats` launches (a finalist), not just screened.
  bool finalist = false;
  /// The screen's time: `milliseconds` until a finalist's rounds replace
  /// it. Screens compare with screens, rounds with rounds: the rounds, run
  /// back to back, have measured up to 6 % slower than the screens
  /// (docs/tuning.md).
  double screenMilliseconds = 0;
};

/// The best finalist must beat the heuristic by more than this fraction to
/// be preferred to it.
inline constexpr double kNoiseFloor = 0.01;

struct TuneReport {
  /// specHash: the records' key (backward: backwardTuningHash of the spec's).
  std::string specName, specHash, arch, device;
  bool backward = false;
  TuningShape shape;
  /// Where the candidates were checked: `shape`, or for a backward beyond
  /// backwardCheckBudget the reduced problem.
  TuningShape checkedShape;
  ShapeBucket bucket;
  TileConfig heuristic;
  /// Measured candidates fastest first, then the failures.
  std::vector<CandidateResult> results;
  size_t binaries = 0;
  double compileSeconds = 0, measureSeconds = 0, totalSeconds = 0;

  /// The fastest finalist, or the heuristic when it is within kNoiseFloor.
  const CandidateResult *best() const;
  const CandidateResult *heuristicResult() const;
  /// The database record of the best candidate; throws attn::Error when no
  /// candidate was measured.
  TuningRecord bestRecord() const;
};

/// Runs the loop; one report per shape, in order (the compile time is
/// counted in each). Needs an sm_90 GPU; throws attn::Error for an invalid
/// spec, captures that do not match it, or a spec with no legal candidate
/// (backward: no backward, or its forward does not compile).
std::vector<TuneReport> tune(const TuneOptions &options, const ReportCallback &onReport = {});

/// The backward's check shape for `shape`: `shape` itself when batch x
/// qHeads x Sq x Sk x headDim is within `budget`, else batch 1 with Sq and
/// Sk scaled by one factor (their ratio, hence the masks' geometry, kept)
/// to fit, each at least 1 (a length held at 1 leaves the other to shrink
/// alone).
TuningShape backwardCheckShape(const TuningShape &shape, int64_t qHeads, int64_t headDim,
                               int64_t budget);

/// The ranked table (the first `top` measured candidates, the heuristic's
/// row and the failures counted by kind).
std::string renderTable(const TuneReport &report, size_t top);

/// An SVG chart: every measured candidate's TFLOP/s by block_n, coloured
/// by consumer warpgroups, the heuristic and the best marked.
std::string renderSvg(const TuneReport &report);

} // namespace attn::tune

#endif // ATTN_TUNE_TUNER_H
