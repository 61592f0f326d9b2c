// The tuning loop on the GPU: every candidate of a small search space is
// checked against the reference and timed, the ranking is by time, the best
// plan goes into a tuning database, and compiling the spec with that
// database (as attnc and the JIT do) gives the best plan back.
//
// Tagged [tune]: `attn_gpu_tests "[tune]"` runs only these.
#include <catch2/catch.hpp>

#include "TestSupport.h"
#include "Tuner.h"
#include "attn/Compiler/Compiler.h"
#include "attn/Compiler/Jit.h"

using namespace attn;

namespace {
const char *kCausalSpec = R"(
attn.kernel @tune_causal
    problem = #attn.problem<q_heads = 4, kv_heads = 2, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.softmax
)";
} // namespace

TEST_CASE("the tuner measures, ranks and records; compiles then use the record", "[tune]") {
  test::TempDir dir;
  tune::TuneOptions options;
  options.specText = kCausalSpec;
  options.specName = "tune_causal.mlir";
  // Awkward sizes: neither length is a tile multiple, Sq != Sk.
  options.shapes = {{2, 300, 517}, {1, 1000, 1000}};
  options.space.consumerWarpgroups = {1, 2};
  options.space.blockN = {64, 128};
  options.space.stages = {2};
  options.space.softmaxChains = {1, 4};
  options.space.persistentBlocksPerSm = {0, 1};
  options.warmup = 1;
  options.repeats = 3;
  options.rounds = 2;
  options.sampledRows = 1 << 20; // every row

  std::vector<tune::TuneReport> reports = tune::tune(options);
  REQUIRE(reports.size() == 2);
  for (const tune::TuneReport &report : reports) {
    INFO(tune::renderTable(report, 100));
    // 2 consumers x 2 block_n x 2 chains x 2 grids, all legal at head dim
    // 128; a persistent plan is a binary of its own (O's staging bytes).
    REQUIRE(report.results.size() == 16);
    CHECK(report.binaries == 16);
    for (const tune::CandidateResult &result : report.results) {
      CHECK(result.status == tune::CandidateStatus::Measured);
      CHECK(result.localBytes == 0);
    }
    // Finalists (timed at length) first, each group by time.
    for (size_t i = 1; i < report.results.size(); ++i) {
      const tune::CandidateResult &a = report.results[i - 1], &b = report.results[i];
      CHECK(a.finalist >= b.finalist);
      if (a.finalist == b.finalist)
        CHECK(a.milliseconds <= b.milliseconds);
    }
    REQUIRE(report.heuristicResult());
    CHECK(report.heuristicResult()->config == report.heuristic);
    REQUIRE(report.best());
    CHECK(report.best()->finalist);
    if (report.heuristicResult()->finalist)
      CHECK(report.best()->milliseconds <= report.heuristicResult()->milliseconds);
    CHECK(tune::renderSvg(report).find("<svg") == 0);
  }

  // Record both buckets; each compile picks the record of its bucket.
  TuningDatabase database(dir.path + "/tuning.tsv");
  for (const tune::TuneReport &report : reports)
    database.record(report.bestRecord());
  REQUIRE(database.records().size() == 2);
  for (const tune::TuneReport &report : reports) {
    CompileOptions compile;
    compile.tuningDatabase = database.path();
    compile.tuningShape = formatTuningShape(report.shape);
    CompiledKernel kernel = compileSpec(kCausalSpec, "tune_causal.mlir", compile);
    const TileConfig &best = report.best()->config;
    CHECK(kernel.launch.blockM == best.blockM);
    CHECK(kernel.launch.blockN == best.blockN);
    CHECK(kernel.launch.persistentBlocksPerSm == best.persistentBlocksPerSm);
  }
}

TEST_CASE("a candidate the search space lacks is still compared: the heuristic", "[tune]") {
  tune::TuneOptions options;
  options.specText = kCausalSpec;
  options.specName = "tune_causal.mlir";
  options.shapes = {{1, 256, 256}};
  options.space.consumerWarpgroups = {1};
  options.space.blockN = {64};
  options.space.stages = {2};
  options.space.softmaxChains = {1};
  options.space.persistentBlocksPerSm = {0};
  options.warmup = 1;
  options.repeats = 2;
  options.rounds = 2;
  std::vector<tune::TuneReport> reports = tune::tune(options);
  REQUIRE(reports.size() == 1);
  REQUIRE(reports[0].results.size() == 2);
  REQUIRE(reports[0].heuristicResult());
  CHECK(reports[0].heuristicResult()->status == tune::CandidateStatus::Measured);
}
