//===- SplitTuner.h - Measure the short-query path's split counts -*- C++ -*-===//
//
// attn-tune at a query length up to kShortQueryMaxRows (decode, speculative
// verification): the tile plan does not decide the time there, the number
// of pieces the keys are split into does. For each such shape the loop
// compiles the spec's heuristic plan once, runs the short-query path with
// each split count of keySplitLadder (1, 2, 3, 4, 6, 8, 12, ... up to one
// split per key tile, and the forward kernel as count 0) and the model's
// count (modelKeySplits) when the ladder lacks it, checks every output
// against the CPU reference on sampled rows, and times them over enough
// copies of K and V that they come from memory, not from L2, as in serving,
// where each layer reads its own cache. The record it leaves
// (shortQueryTuningHash, `key_splits=N`) reaches the kernel through
// attn-tile's `tuned_key_splits`; it is measured on a contiguous cache and
// applies to contiguous calls (paged ones keep the runtime's model).
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_TUNE_SPLITTUNER_H
#define ATTN_TUNE_SPLITTUNER_H

#include "Tuner.h"

#include <functional>
#include <string>
#include <vector>

namespace attn::tune {

/// Whether attn-tune measures split counts at `shape` rather than tile plans.
bool isShortQueryShape(const TuningShape &shape);

struct SplitCandidate {
  int keySplits = 0;      // 0: the forward kernel
  bool automatic = false; // the runtime's own choice at the shape
  CandidateStatus status = CandidateStatus::Measured;
  std::string message;
  double milliseconds = 0;
  /// Bytes of K and V read once / time, in TB/s.
  double terabytesPerSecond = 0;
  /// The largest |O - reference| over the checked rows.
  double maxAbsError = 0;
};

struct SplitTuneReport {
  /// specHash: shortQueryTuningHash of the spec's tuning hash.
  std::string specName, specHash, arch, device;
  TuningShape shape;
  ShapeBucket bucket;
  /// The runtime's choice without a record (0: the forward kernel).
  int automaticSplits = 0;
  /// Measured candidates fastest first, then the failures.
  std::vector<SplitCandidate> results;
  double compileSeconds = 0, measureSeconds = 0;

  /// The fastest, or the automatic choice when within kNoiseFloor of it.
  const SplitCandidate *best() const;
  const SplitCandidate *automaticResult() const;
  /// The database record of best(); throws attn::Error when nothing was
  /// measured.
  TuningRecord bestRecord() const;
};

/// Runs the loop over every shape of `options` (each must be a short-query
/// shape; options.backward must be off); one report per shape, in order.
/// Needs an sm_90 GPU; throws attn::Error for an invalid spec, a linear one,
/// captures that do not match it, or a plan that does not compile.
std::vector<SplitTuneReport>
tuneKeySplits(const TuneOptions &options,
              const std::function<void(const SplitTuneReport &)> &onReport = {});

/// The ranked table of a report's candidates.
std::string renderSplitTable(const SplitTuneReport &report);

} // namespace attn::tune

#endif // ATTN_TUNE_SPLITTUNER_H
