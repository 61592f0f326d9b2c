// The split tuner's host side (tools/attn-tune/SplitTuner.h): the split
// counts it tries, which shapes it takes, how it picks and records a count,
// its table, and the inputs it refuses before touching a GPU.
#include <catch2/catch.hpp>

#include "SplitTuner.h"

#include "attn/runtime/Error.h"

using namespace attn;
using namespace attn::tune;
using Catch::Matchers::Contains;

namespace {
const char *kDecodeSpec = R"(
attn.kernel @decode
    problem = #attn.problem<q_heads = 32, kv_heads = 8, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.softmax
)";

SplitCandidate measured(int keySplits, double milliseconds, bool automatic = false) {
  SplitCandidate candidate;
  candidate.keySplits = keySplits;
  candidate.milliseconds = milliseconds;
  candidate.terabytesPerSecond = 1.0 / milliseconds;
  candidate.automatic = automatic;
  return candidate;
}
} // namespace

TEST_CASE("the split tuner takes query lengths up to 64", "[tune][short]") {
  CHECK(isShortQueryShape({8, 1, 32768}));
  CHECK(isShortQueryShape({8, 64, 32768}));
  CHECK_FALSE(isShortQueryShape({8, 65, 32768}));

  TuneOptions options;
  options.specText = kDecodeSpec;
  options.shapes = {{8, 1, 4096}, {2, 128, 4096}};
  CHECK_THROWS_WITH(tuneKeySplits(options),
                    Contains("query length 128 is beyond the short-query path's 64"));
  options.shapes = {{8, 1, 4096}};
  options.backward = true;
  CHECK_THROWS_WITH(tuneKeySplits(options), Contains("the backward has no short-query path"));
  options.backward = false;
  options.specText = "attn.kernel @r problem = #attn.problem<q_heads = 16, kv_heads = 16, "
                     "head_dim = 128, element_type = bf16> mask = #attn.causal<top_left> "
                     "normalizer = #attn.retention\n";
  CHECK_THROWS_WITH(tuneKeySplits(options), Contains("has no short-query path"));
  options.specText = "attn.kernel @broken";
  CHECK_THROWS_AS(tuneKeySplits(options), Error);
  options.shapes.clear();
  CHECK_THROWS_WITH(tuneKeySplits(options), Contains("no shape"));
}

TEST_CASE("the split tuner keeps the automatic count within the noise floor", "[tune][short]") {
  SplitTuneReport report;
  report.specName = "decode";
  report.specHash = std::string(64, 'a');
  report.arch = "sm_90a";
  report.device = "NVIDIA H200";
  report.bucket = ShapeBucket{256, 1, 32768};
  report.automaticSplits = 4;
  report.results = {measured(6, 0.1000), measured(4, 0.1005, true), measured(0, 0.5)};
  REQUIRE(report.automaticResult());
  CHECK(report.best()->keySplits == 4);
  report.results[1].milliseconds = 0.1020;
  CHECK(report.best()->keySplits == 6);

  TuningRecord record = report.bestRecord();
  CHECK(record.config == "key_splits=6");
  CHECK(record.bucket == report.bucket);
  CHECK(record.milliseconds == 0.1);

  const std::string table = renderSplitTable(report);
  CHECK_THAT(table, Contains("| 1 | 6 | 0.1000 |"));
  CHECK_THAT(table, Contains("| 2 (automatic) | 4 | 0.1020 |"));
  CHECK_THAT(table, Contains("| 0 (forward kernel) |"));
  CHECK_THAT(table, Contains("3 split counts, 0 failed"));

  report.results = {};
  CHECK_FALSE(report.best());
  CHECK_THROWS_WITH(report.bestRecord(), Contains("no split count of @decode was measured"));
}
