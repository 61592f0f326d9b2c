//===- attn-tune.cpp - Find the fastest tile plan of a spec ---------------===//
//
//   attn-tune spec.mlir --shape=B,S[,Sk][;B,S...] [--backward] [--capture NAME=GEN...]
//       [--tuning-db=FILE|none] [--plot=FILE.svg] [--top=N] [--jobs=N]
//
// Compiles every legal tile plan of the spec on CPU threads, runs each on the
// GPU, checks its output against the CPU reference on sampled rows, times
// the ones that pass (median of --repeats launches after --warmup), prints
// them ranked, records the fastest in the tuning database (which attnc and
// the JIT consult) and draws every candidate's TFLOP/s as an SVG. Several
// shapes (separated by ';') share one compilation; each gets its table, its
// record and its plot (FILE-<bucket>.svg). With --backward the same for the
// backward kernels (dQ, dK, dV) over the forward's o and lse: gradients
// checked against the CPU reference (on a reduced problem for large
// shapes), records under the spec's backward key, which attnc --backward
// and compileBackwardSpec consult. A shape whose query length is at most 64
// (decode, speculative verification) tunes the short-query path's split
// count instead (SplitTuner.h): its record (`key_splits=N`) reaches the
// kernel's `tuned_key_splits` when attnc or the JIT plans it again.
//
//===----------------------------------------------------------------------===//

#include "ToolVersion.h"
#include "AttnHarness.h"
#include "SplitTuner.h"
#include "Tuner.h"

#include "attn/Compiler/Compiler.h"
#include "attn/runtime/Error.h"
#include "attn/runtime/TuningDatabase.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

using namespace llvm;

namespace {
cl::opt<std::string> specFile(cl::Positional, cl::desc("<spec.mlir>"), cl::Required);
cl::opt<std::string> shapeText("shape",
                               cl::desc("Problem sizes to tune for, ';'-separated (default: 2,8192); "
                                        "with Sq <= 64 the short-query path's split count "
                                        "is tuned instead of the tile plan"),
                               cl::value_desc("B,S or B,Sq,Sk[;...]"), cl::init("2,8192"));
cl::list<std::string> captureOptions(
    "capture", cl::desc("NAME=GENERATOR[@D0xD1...]: a captured buffer (as attn-bench); "
                        "repeat the option for each capture"));
cl::opt<bool> backward("backward",
                       cl::desc("Tune the backward kernels (dQ, dK, dV) instead of the forward"),
                       cl::init(false));
cl::opt<int> warmup("warmup", cl::desc("Untimed launches per finalist round (default: 2)"),
                    cl::init(2));
cl::opt<int> repeats("repeats",
                     cl::desc("Timed launches per finalist round, their median kept (default: 5)"),
                     cl::init(5));
cl::opt<int> rounds("rounds",
                    cl::desc("Interleaved timing rounds of the finalists (default: 5)"),
                    cl::init(5));
cl::opt<unsigned> jobs("jobs", cl::desc("Compile threads (default: all hardware threads)"),
                       cl::init(0));
cl::opt<unsigned> top("top", cl::desc("Rows of the ranked table (default: 15)"), cl::init(15));
cl::opt<std::string> tuningDatabase(
    "tuning-db",
    cl::desc("Where the best plan is recorded (default: ATTNC_TUNING_DB, else tuning.tsv in "
             "the kernel cache directory); 'none' records nothing"),
    cl::value_desc("file"), cl::init(""));
cl::opt<std::string> plotFile("plot",
                              cl::desc("SVG of every candidate (default: <spec>.tune.svg, with "
                                       "--backward <spec>.tune-backward.svg, in the current "
                                       "directory; 'none' for no plot)"),
                              cl::value_desc("file"), cl::init(""));
cl::list<int> onlyBlockN("block-n",
                         cl::desc("Restrict the search to these block_n values, a "
                                  "comma-separated list (default: every legal one)"),
                         cl::CommaSeparated);
cl::list<int> onlyStages("stages",
                         cl::desc("Restrict the search to these stage counts, a "
                                  "comma-separated list (default: every legal one)"),
                         cl::CommaSeparated);

/// One line of progress: redrawn in place on a terminal, a line per tenth
/// otherwise (logs stay short).
void showProgress(const char *phase, size_t done, size_t total) {
  static bool terminal = ::isatty(STDERR_FILENO);
  constexpr int kWidth = 30;
  int filled = total ? int(kWidth * done / total) : kWidth;
  if (terminal) {
    std::fprintf(stderr, "\r%-8s [%s%s] %zu/%zu", phase, std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, '.').c_str(), done, total);
    if (done == total)
      std::fprintf(stderr, "\n");
  } else if (done == total || (total >= 10 && done % (total / 10) == 0)) {
    std::fprintf(stderr, "%s: %zu/%zu\n", phase, done, total);
  }
  std::fflush(stderr);
}
} // namespace

int main(int argc, char **argv) {
  InitLLVM initLLVM(argc, argv);
  attn::installToolVersionPrinter();
  cl::ParseCommandLineOptions(argc, argv, "attn-tune: find the fastest tile plan of a spec\n");
  auto buffer = MemoryBuffer::getFile(specFile);
  if (!buffer) {
    errs() << "attn-tune: cannot read " << specFile << ": " << buffer.getError().message() << "\n";
    return 1;
  }
  attn::tune::TuneOptions options;
  options.specText = (*buffer)->getBuffer().str();
  options.specName = specFile;
  options.backward = backward;
  std::vector<attn::TuningShape> parsedShapes;
  std::stringstream shapes(shapeText);
  for (std::string item; std::getline(shapes, item, ';');) {
    attn::TuningShape shape;
    if (std::optional<std::string> error = attn::parseTuningShape(item, shape)) {
      errs() << "attn-tune: --shape: " << *error << "\n";
      return 1;
    }
    parsedShapes.push_back(shape);
  }
  options.captures.assign(captureOptions.begin(), captureOptions.end());
  options.warmup = warmup;
  options.repeats = repeats;
  options.rounds = rounds;
  options.compileThreads = jobs;
  if (!onlyBlockN.empty())
    options.space.blockN.assign(onlyBlockN.begin(), onlyBlockN.end());
  if (!onlyStages.empty())
    options.space.stages.assign(onlyStages.begin(), onlyStages.end());
  options.progress = showProgress;

  // A malformed spec is reported as such, GPU or not.
  try {
    attn::tuningKeyOfSpec(options.specText, options.specName);
  } catch (const attn::Error &error) {
    errs() << error.what() << "\n";
    return 1;
  }
  std::string reason = attn::harness::gpuUnavailableReason();
  if (!reason.empty()) {
    errs() << "attn-tune: needs an sm_90 GPU to measure: " << reason << "\n";
    return 1;
  }
  try {
    std::string databasePath = tuningDatabase.empty() ? attn::TuningDatabase::defaultPath()
                                                      : tuningDatabase.getValue();
    bool allMeasured = true;
    auto recordBest = [&](const attn::TuningRecord &record, const char *what,
                          attn::TuningDatabase::Merge merge) {
      if (databasePath == "none" || databasePath.empty())
        return;
      attn::TuningDatabase(databasePath).record(record, merge);
      outs() << "recorded in " << databasePath << " (" << what << record.specHash.substr(0, 12)
             << ", " << record.bucket.str() << ")\n";
    };
    // Short queries: the split count (the tile plan does not decide their
    // time); the rest: the tile plan.
    attn::tune::TuneOptions splitOptions = options;
    splitOptions.shapes.clear();
    options.shapes.clear();
    for (const attn::TuningShape &shape : parsedShapes)
      (!backward && attn::tune::isShortQueryShape(shape) ? splitOptions : options)
          .shapes.push_back(shape);
    if (!splitOptions.shapes.empty())
      attn::tune::tuneKeySplits(splitOptions, [&](const attn::tune::SplitTuneReport &report) {
        outs() << "\nattn-tune @" << specFile << " (short-query split count) B="
               << report.shape.batch << " Sq=" << report.shape.seqlenQ
               << " Sk=" << report.shape.seqlenK << " (" << report.bucket.str() << ") on "
               << report.device << "\n\n"
               << attn::tune::renderSplitTable(report);
        const attn::tune::SplitCandidate *best = report.best();
        const attn::tune::SplitCandidate *automatic = report.automaticResult();
        if (best && automatic && automatic->status == attn::tune::CandidateStatus::Measured)
          outs() << "best key_splits=" << best->keySplits << ": "
                 << format("%.4f", best->milliseconds) << " ms, automatic ("
                 << report.automaticSplits << ") " << format("%.4f", automatic->milliseconds)
                 << " ms (" << format("%.3f", automatic->milliseconds / best->milliseconds)
                 << "x)\n";
        allMeasured = allMeasured && best;
        if (best)
          recordBest(report.bestRecord(), "short-query key ",
                     attn::TuningDatabase::Merge::Replace);
        outs().flush();
      });
    if (options.shapes.empty())
      return allMeasured ? 0 : 1;
    bool several = options.shapes.size() > 1;
    // Each shape is reported and recorded as soon as it is measured.
    attn::tune::tune(options, [&](const attn::tune::TuneReport &report) {
      outs() << "\nattn-tune @" << specFile << (report.backward ? " (backward)" : "")
             << " B=" << report.shape.batch
             << " Sq=" << report.shape.seqlenQ << " Sk=" << report.shape.seqlenK << " ("
             << report.bucket.str() << ") on " << report.device << "\n\n"
             << attn::tune::renderTable(report, top);
      const attn::tune::CandidateResult *best = report.best();
      const attn::tune::CandidateResult *heuristic = report.heuristicResult();
      if (best && heuristic && heuristic->status == attn::tune::CandidateStatus::Measured)
        outs() << "best " << attn::formatTileOverride(best->config) << ": "
               << format("%.3f", best->milliseconds) << " ms, heuristic "
               << format("%.3f", heuristic->milliseconds) << " ms ("
               << format("%.3f", heuristic->milliseconds / best->milliseconds) << "x)\n";
      allMeasured = allMeasured && best;

      std::string plot =
          plotFile.empty()
              ? sys::path::stem(specFile).str() + (backward ? ".tune-backward.svg" : ".tune.svg")
              : plotFile.getValue();
      if (plot != "none") {
        if (several)
          plot = (sys::path::parent_path(plot).empty() ? std::string()
                                                       : sys::path::parent_path(plot).str() + "/") +
                 sys::path::stem(plot).str() + "-" + report.bucket.str() + ".svg";
        std::ofstream(plot) << attn::tune::renderSvg(report);
        outs() << "plot: " << plot << "\n";
      }
      if (best)
        recordBest(report.bestRecord(), report.backward ? "backward key " : "spec ",
                   attn::TuningDatabase::Merge::KeepFaster);
      outs().flush();
    });
    return allMeasured ? 0 : 1;
  } catch (const attn::Error &error) {
    errs() << "attn-tune: " << error.what() << "\n";
    return 1;
  }
}
