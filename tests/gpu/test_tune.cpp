// The tuning loop on the GPU: every candidate of a small search space is
// checked against the reference and timed, the ranking is by time, the best
// plan goes into a tuning database, and compiling the spec with that
// database (as attnc and the JIT do) gives the best plan back. At short
// query lengths the same for the short-query path's split count: every
// count checked against the reference, and the JIT's kernel then launching
// the recorded count on its own.
//
// Tagged [tune]: `attn_gpu_tests "[tune]"` runs only these.
#include <catch2/catch.hpp>

#include "TestSupport.h"
#include "SplitTuner.h"
#include "Tuner.h"
#include "AttnHarness.h"
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
const char *kDecodeSpec = R"(
attn.kernel @tune_decode
    problem = #attn.problem<q_heads = 8, kv_heads = 2, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.softmax
)";
} // namespace

TEST_CASE("the split tuner checks every count, records the fastest, and the JIT's kernel "
          "launches it", "[tune][short]") {
  test::TempDir dir;
  tune::TuneOptions options;
  options.specText = kDecodeSpec;
  options.specName = "tune_decode.mlir";
  // Awkward sizes: key lengths that are not stage multiples; one decode
  // token and five verification rows.
  options.shapes = {{3, 1, 3001}, {1, 5, 700}};
  options.warmup = 1;
  options.repeats = 2;
  options.rounds = 2;
  std::vector<tune::SplitTuneReport> reports = tune::tuneKeySplits(options);
  REQUIRE(reports.size() == 2);
  AttnLaunchConfig headDim128;
  headDim128.headDim = 128;
  for (const tune::SplitTuneReport &report : reports) {
    INFO(tune::renderSplitTable(report));
    const std::vector<int> ladder = keySplitLadder(headDim128, report.shape.seqlenK);
    CHECK(report.results.size() >= ladder.size());
    size_t automatic = 0;
    for (const tune::SplitCandidate &result : report.results) {
      CHECK(result.status == tune::CandidateStatus::Measured);
      CHECK(result.milliseconds > 0);
      automatic += result.automatic;
      if (result.automatic)
        CHECK(result.keySplits == report.automaticSplits);
    }
    CHECK(automatic == 1);
    for (size_t i = 1; i < report.results.size(); ++i)
      CHECK(report.results[i - 1].milliseconds <= report.results[i].milliseconds);
    REQUIRE(report.best());
    CHECK(report.bestRecord().specHash ==
          shortQueryTuningHash(tuningKeyOfSpec(kDecodeSpec, "tune_decode.mlir").specHash));
    CHECK(parseKeySplitsConfig(report.bestRecord().config) == report.best()->keySplits);
  }

  // Both records reach the JIT's kernel, which takes them on its own.
  TuningDatabase database(dir.path + "/tuning.tsv");
  for (const tune::SplitTuneReport &report : reports)
    database.record(report.bestRecord());
  JitOptions jitOptions;
  jitOptions.tuningDatabase = database.path();
  jitOptions.diskCache = DiskCacheOptions{};
  Compiler jit(jitOptions);
  Kernel kernel = jit.compile(kDecodeSpec, "tune_decode.mlir");
  const AttnLaunchConfig &launch = kernel.launchConfig();
  REQUIRE(launch.tunedKeySplits.size() == 2);
  const int multiprocessors = queryDevice(currentDevice()).multiprocessorCount;
  for (const tune::SplitTuneReport &report : reports) {
    INFO(tune::renderSplitTable(report));
    const harness::Shape shape{report.shape.batch, report.shape.seqlenQ, report.shape.seqlenK,
                               false};
    harness::ForwardProblem data(launch, shape, 99);
    AttnForwardArgs args = data.args();
    DeviceBuffer workspace(std::max<uint64_t>(forwardWorkspaceBytes(launch, args), 16));
    args.workspace = workspace.data();
    args.workspaceBytes = workspace.size();
    CHECK(shortQueryPlanFor(launch, args, multiprocessors).splits == report.best()->keySplits);
    data.poisonOutputs();
    kernel.run(args);
    ATTN_CU_CHECK(cuCtxSynchronize);
    const harness::Comparison check = harness::compareWithReference(
        referenceProblemFromSpec(kDecodeSpec, shape.batch, shape.seqlenQ, shape.seqlenK), data,
        launch.dtype);
    INFO(check.firstViolation);
    CHECK(check.passed());
  }
}

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
