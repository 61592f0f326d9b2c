//===- Tuner.h - Measure every legal tile plan of a spec --------*- C++ -*-===//
//
// The tuning loop behind attn-tune: enumerate the legal tile plans of a spec
// (enumerateTileCandidates), compile them to cubins on CPU threads, then on
// the GPU run each one, check its output against the CPU reference on a
// sample of rows, and time the ones that pass (median of repeated launches
// after warm-up). Plans that differ only in the grid policy share a binary.
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
  TileSearchSpace space;
  /// Reference rows checked per candidate (spread over batch, heads and
  /// sequence, plus the first and last rows of every (batch, head)).
  int64_t sampledRows = 512;
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
  int registers = 0;      // per thread, from the loaded function
  int localBytes = 0;     // local memory per thread (spills)
  double maxAbsError = 0;
  /// Timed with `repeats` launches (a finalist), not just screened.
  bool finalist = false;
};

/// The best finalist must beat the heuristic by more than this fraction to
/// be preferred to it.
inline constexpr double kNoiseFloor = 0.01;

struct TuneReport {
  std::string specName, specHash, arch, device;
  TuningShape shape;
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
/// spec, captures that do not match it, or a spec with no legal candidate.
std::vector<TuneReport> tune(const TuneOptions &options, const ReportCallback &onReport = {});

/// The ranked table (the first `top` measured candidates, the heuristic's
/// row and the failures counted by kind).
std::string renderTable(const TuneReport &report, size_t top);

/// An SVG chart: every measured candidate's TFLOP/s by block_n, one series
/// per (block_m, stages), the heuristic and the best marked.
std::string renderSvg(const TuneReport &report);

} // namespace attn::tune

#endif // ATTN_TUNE_TUNER_H
