// The plan set (tools/plan-set/points.txt) that attn-bench --plan-set tunes:
// every point reads, compiles for its shape and has its captures; the set
// covers the kinds of kernel it claims to; malformed sets are refused with
// file:line; and the report helpers compute what they say. Needs no GPU.
#include <catch2/catch.hpp>

#include "PlanSet.h"

#include "AttnHarness.h"
#include "attn/Compiler/Compiler.h"
#include "attn/runtime/Error.h"

#include "TestSupport.h"

#include <fmt/format.h>

#include <fstream>
#include <map>
#include <set>

using namespace attn;
using namespace attn::tune;

TEST_CASE("every point of the plan set compiles for its shape and has its captures",
          "[plan-set]") {
  const std::vector<PlanSetPoint> points = readPlanSet(ATTNC_PLAN_SET);
  REQUIRE(points.size() >= 20);
  std::set<int64_t> headDims;
  int gqa = 0, unequalLengths = 0, windows = 0, scoreMods = 0, scoreModsWithCaptures = 0,
      bufferMasks = 0, shortSequences = 0, longSequences = 0;
  for (const PlanSetPoint &point : points) {
    INFO(point.name << " (" << point.specPath << ")");
    CompileOptions options;
    options.tuningShape = formatTuningShape(point.shape);
    const CompiledKernel kernel = compileSpec(point.specText, point.specPath, options);
    const AttnLaunchConfig &launch = kernel.launch;
    const harness::Shape shape{point.shape.batch, point.shape.seqlenQ, point.shape.seqlenK,
                               false};
    const std::vector<harness::GeneratedCapture> captures =
        harness::generateCaptures(launch, shape, point.captures);
    CHECK(captures.size() == launch.captures.size());

    headDims.insert(launch.headDim);
    gqa += launch.qHeads > launch.kvHeads;
    unequalLengths += point.shape.seqlenQ != point.shape.seqlenK;
    windows += point.specText.find("#attn.sliding_window") != std::string::npos;
    const bool scoreMod = point.specText.find("score_mod {") != std::string::npos;
    const bool maskMod = point.specText.find("mask_mod {") != std::string::npos;
    scoreMods += scoreMod;
    scoreModsWithCaptures += scoreMod && !launch.captures.empty();
    bufferMasks += maskMod && !launch.captures.empty();
    shortSequences += point.shape.seqlenK <= 1024;
    longSequences += point.shape.seqlenK >= 8192;
  }
  CHECK(headDims == std::set<int64_t>{64, 128, 256});
  CHECK(gqa >= 3);
  CHECK(unequalLengths >= 2);
  CHECK(windows >= 3);
  CHECK(scoreMods - scoreModsWithCaptures >= 2);
  CHECK(scoreModsWithCaptures >= 3);
  CHECK(bufferMasks >= 2);
  CHECK(shortSequences >= 3);
  CHECK(longSequences >= 10);
}

TEST_CASE("malformed plan sets are refused with the file and line", "[plan-set]") {
  test::TempDir dir;
  const std::string specPath = dir.path + "/k.mlir";
  test::writeFile(specPath, "attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, "
                            "head_dim = 64, element_type = bf16> mask = #attn.no_mask "
                            "normalizer = #attn.softmax\n");
  auto refused = [&](const std::string &text) {
    const std::string path = dir.path + "/set.txt";
    test::writeFile(path, text);
    try {
      readPlanSet(path);
    } catch (const Error &error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  const std::string set = dir.path + "/set.txt";
  CHECK(refused("# comment\n\na k.mlir 2,128,128\n") == "accepted");
  CHECK(refused("# only comments\n") == set + ": the plan set has no point");
  CHECK(refused("a k.mlir\n") == set + ":1: point 'a' needs a spec and a shape B,Sq,Sk");
  CHECK(refused("a k.mlir 2,128,128\na k.mlir 1,64,64\n") ==
        set + ":2: point 'a' is named twice");
  CHECK_THAT(refused("a k.mlir 2;128\n"), Catch::StartsWith(set + ":1: point 'a': shape '2;128': "));
  CHECK(refused("a k.mlir 2,128,128 slopes\n") ==
        set + ":1: point 'a': capture 'slopes' is not NAME=GENERATOR");
  CHECK(refused("\nb missing.mlir 2,128,128\n") ==
        set + ":2: point 'b': cannot read " + dir.path + "/missing.mlir");
  CHECK(refused("a k.mlir 2,128,128 # a comment after the point\n") == "accepted");

  test::writeFile(set, "a k.mlir 2,128,128\nb k.mlir 1,64,256 x=normal:1\n");
  const std::vector<PlanSetPoint> points = readPlanSet(set);
  REQUIRE(points.size() == 2);
  CHECK(points[1].name == "b");
  CHECK(points[1].line == 2);
  CHECK(points[1].specPath == specPath);
  CHECK((points[1].shape.batch == 1 && points[1].shape.seqlenQ == 64 &&
         points[1].shape.seqlenK == 256));
  CHECK(points[1].captures == std::vector<std::string>{"x=normal:1"});
  CHECK(selectPlanSetPoints(points, "").size() == 2);
  CHECK(selectPlanSetPoints(points, "b").front().name == "b");
  CHECK_THROWS_WITH(selectPlanSetPoints(points, "b,c"), "the plan set has no point 'c'");
}

TEST_CASE("the default's speed over the tuned plan's, and the candidates' data rows",
          "[plan-set]") {
  TuneReport report;
  report.shape = {2, 1024, 2048};
  auto result = [](int blockN, double ms, bool heuristic, bool finalist) {
    CandidateResult r;
    r.config.blockN = blockN;
    r.milliseconds = ms;
    // A finalist's rounds replaced its screen's time.
    r.screenMilliseconds = finalist ? ms * 0.9 : ms;
    r.heuristic = heuristic;
    r.finalist = finalist;
    return r;
  };
  // Fastest first, as tune() orders them: 1.5 ms beats the heuristic's 2.0.
  report.results = {result(160, 1.5, false, true), result(128, 2.0, true, true),
                    result(64, 3.0, false, false)};
  report.results.push_back(result(96, 0, false, false));
  report.results.back().status = CandidateStatus::WrongResult;
  CHECK(defaultOverTuned(report) == Approx(0.75));
  // Within kNoiseFloor the heuristic is the best: 1.
  report.results[0].milliseconds = 1.995;
  CHECK(defaultOverTuned(report) == Approx(1.0));
  // A heuristic that failed has no fraction.
  report.results[1].status = CandidateStatus::LaunchFailed;
  CHECK(defaultOverTuned(report) == 0);
  report.results[1].status = CandidateStatus::Measured;

  PlanSetPoint point;
  point.name = "p";
  const std::string rows = planSetDataRows(point, report);
  // The three measured candidates, not the failed one.
  CHECK(std::count(rows.begin(), rows.end(), '\n') == 3);
  const std::string header = planSetDataHeader();
  const auto fields = [](const std::string &line) {
    return std::count(line.begin(), line.end(), '\t') + 1;
  };
  CHECK(fields(header.substr(0, header.find('\n'))) == fields(rows.substr(0, rows.find('\n'))));
  CHECK_THAT(rows, Catch::StartsWith("p\t2\t1024\t2048\t"));
  CHECK_THAT(rows, Catch::Contains("\t2.000000\t1\t1\t1.800000\n"));
  CHECK_THAT(rows, Catch::Contains("\t3.000000\t0\t0\t3.000000\n"));
}

TEST_CASE("recorded data name each point's fastest finalist, the last file winning", "[plan-set]") {
  const test::TempDir temp;
  const std::string &dir = temp.path;
  const std::string header = planSetDataHeader();
  auto row = [](const char *point, int blockN, int chains, int grid, const char *ms, int finalist) {
    return fmt::format(
        "{}\t2\t8192\t8192\t128\t{}\t2\t2\t240\t24\t{}\t{}\t168\t0\t{}\t0\t{}\t1.0\n", point,
        blockN, chains, grid, ms, finalist);
  };
  const std::string first = dir + "/first.tsv", second = dir + "/second.tsv";
  // In `first`, a's fastest finalist is 160 keys; a screen (finalist 0)
  // faster still does not count. b is only there.
  std::ofstream(first) << header << row("a", 128, 4, 0, "1.2", 1) << row("a", 160, 1, 1, "1.1", 1)
                       << row("a", 144, 1, 1, "0.9", 0) << row("b", 96, 2, 0, "0.5", 1);
  // `second` records a again: its plan replaces first's even where slower.
  std::ofstream(second) << header << row("a", 112, 2, 1, "1.4", 1);
  const std::map<std::string, TileConfig> one = readRecordedTunedPlans({first}, {});
  REQUIRE(one.size() == 2);
  CHECK(one.at("a").blockN == 160);
  CHECK(one.at("a").persistentBlocksPerSm == 1);
  CHECK(one.at("b").softmaxChains == 2);
  const std::map<std::string, TileConfig> both = readRecordedTunedPlans({first, second}, {});
  CHECK(both.at("a").blockN == 112);
  CHECK(both.at("b").blockN == 96);
  // A point the files do not record is named.
  PlanSetPoint unrecorded;
  unrecorded.name = "c";
  CHECK_THROWS_WITH(readRecordedTunedPlans({first, second}, {unrecorded}),
                    Catch::Contains("no recorded plan for point 'c'"));

  const std::string broken = dir + "/broken.tsv";
  std::ofstream(broken) << header << row("a", 128, 4, 0, "1.2", 1) << "a\t2\n";
  CHECK_THROWS_WITH(readRecordedTunedPlans({broken}, {}), Catch::Contains("broken.tsv:3:"));
  const std::string badValue = dir + "/bad-value.tsv";
  std::string text = row("a", 128, 4, 0, "1.2", 1);
  text.replace(text.find("\t128\t"), 5, "\t12x\t");
  std::ofstream(badValue) << header << text;
  CHECK_THROWS_WITH(readRecordedTunedPlans({badValue}, {}),
                    Catch::Contains("bad-value.tsv:2: block_m '12x' is not an integer"));
  CHECK_THROWS_WITH(readRecordedTunedPlans({dir + "/missing.tsv"}, {}),
                    Catch::Contains("cannot read the plan-set data"));
}

TEST_CASE("the repository's recorded data name a legal plan for every point", "[plan-set]") {
  const std::string data =
      std::string(ATTNC_PLAN_SET).substr(0, std::string(ATTNC_PLAN_SET).rfind('/')) + "/data/";
  const std::vector<PlanSetPoint> points = readPlanSet(ATTNC_PLAN_SET);
  const std::map<std::string, TileConfig> plans =
      readRecordedTunedPlans({data + "h200-2026-11-29.tsv", data + "h200-2026-12-01.tsv"}, points);
  for (const PlanSetPoint &point : points) {
    INFO(point.name);
    REQUIRE(plans.count(point.name) == 1);
    TileProblem problem = tuningKeyOfSpec(point.specText, point.specPath).problem;
    problem.keyLength = point.shape.seqlenK;
    CHECK_FALSE(checkTileLegality(problem, plans.at(point.name)));
  }
}
