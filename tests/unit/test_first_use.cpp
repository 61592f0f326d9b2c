// Autotuning on first use (Compiler::compileFor) with a fake timer: the
// heuristic's plan and its nearest neighbours compile, are timed in order,
// the fastest is returned and recorded for the shape's bucket, and later
// calls (this Compiler or a new one reading the database) time nothing.
// The switch (JitOptions and ATTNC_AUTOTUNE), the noise floor and the time
// budget are pinned too. Needs no GPU: the fake timer launches nothing.
#include "attn/Compiler/Compiler.h"
#include "attn/Compiler/Jit.h"
#include "attn/runtime/Error.h"

#include "TestSupport.h"

#include <catch2/catch.hpp>

#include <cstdlib>

using namespace attn;

namespace {

const char *kSpec = "attn.kernel @first_use problem = #attn.problem<q_heads = 8, kv_heads = 2, "
                    "head_dim = 128, element_type = bf16> mask = #attn.causal<bottom_right> "
                    "normalizer = #attn.softmax\n";

/// Arguments of the shape only: compileFor reads their shapes, and the fake
/// timer launches nothing.
AttnForwardArgs argsOfShape(int64_t batch, int64_t seqlenQ, int64_t seqlenK) {
  AttnForwardArgs args;
  const int64_t q[4] = {batch, seqlenQ, 8, 128}, kv[4] = {batch, seqlenK, 2, 128};
  for (int d = 0; d < 4; ++d) {
    args.q.shape[d] = args.o.shape[d] = q[d];
    args.k.shape[d] = args.v.shape[d] = kv[d];
  }
  return args;
}

/// A timer that answers `times` in call order (the candidates' order) and
/// counts its calls.
struct FakeTimer {
  std::vector<double> times;
  size_t calls = 0;
  CandidateTimer timer() {
    return [this](const Kernel &, const AttnForwardArgs &, CUstream) {
      return times.at(calls++);
    };
  }
};

JitOptions firstUseOptions(const std::string &database, FakeTimer &fake, size_t candidates) {
  JitOptions options;
  options.diskCache = DiskCacheOptions{}; // no disk cache
  options.tuningDatabase = database;
  options.firstUse.enabled = true;
  options.firstUse.candidates = candidates;
  options.firstUse.timer = fake.timer();
  return options;
}

/// The PTX of kSpec compiled with `plan` at `shape`.
std::string ptxOf(const TileConfig &plan, const TuningShape &shape) {
  JitOptions options;
  options.diskCache = DiskCacheOptions{};
  options.tuningDatabase = "";
  options.tileOverride = formatTileOverride(plan);
  return Compiler(options).compile(kSpec, "spec", shape).image().ptx;
}

/// The plans first-use tuning tries for kSpec at `shape`.
std::vector<TileConfig> candidatesAt(const TuningShape &shape, size_t count) {
  TileProblem problem = tuningKeyOfSpec(kSpec, "spec").problem;
  problem.keyLength = shape.seqlenK;
  return firstUseCandidates(problem, count);
}

} // namespace

TEST_CASE("first-use tuning returns and records the fastest candidate, once per bucket",
          "[jit][first-use]") {
  test::TempDir dir;
  const std::string database = dir.path + "/tuning.tsv";
  const std::vector<TileConfig> candidates = candidatesAt({2, 4096, 4096}, 4);
  REQUIRE(candidates.size() == 4);
  CHECK(candidates.front() == [] {
    TileProblem problem = tuningKeyOfSpec(kSpec, "spec").problem;
    problem.keyLength = 4096;
    return defaultTileConfig(problem);
  }());
  // The third candidate is fastest.
  FakeTimer fake{{1.0, 0.9, 0.7, 0.8}};
  Compiler compiler(firstUseOptions(database, fake, 4));
  const Kernel tuned = compiler.compileFor(kSpec, "spec", argsOfShape(2, 4096, 4096));
  CHECK(fake.calls == 4);
  const std::string winnerPtx = ptxOf(candidates[2], {2, 4096, 4096});
  CHECK(tuned.image().ptx == winnerPtx);
  CHECK(winnerPtx != ptxOf(candidates[0], {2, 4096, 4096}));
  CHECK(compiler.stats().firstUseTunings == 1);
  CHECK(compiler.stats().firstUseSeconds > 0);

  const std::vector<TuningRecord> records = TuningDatabase(database).records();
  REQUIRE(records.size() == 1);
  CHECK(records[0].config == formatTileOverride(candidates[2]));
  CHECK(records[0].milliseconds == Approx(0.7));
  CHECK(records[0].bucket == ShapeBucket::of({2, 4096, 4096}, 8));

  // Another shape of the same bucket: nothing timed, the same plan.
  const Kernel again = compiler.compileFor(kSpec, "spec", argsOfShape(2, 3000, 3000));
  CHECK(fake.calls == 4);
  CHECK(again.image().ptx == ptxOf(candidates[2], {2, 3000, 3000}));
  CHECK(compiler.stats().firstUseTunings == 1);

  // A new Compiler (a later process) reads the record: nothing timed.
  FakeTimer later{{}};
  Compiler next(firstUseOptions(database, later, 4));
  const Kernel fromRecord = next.compileFor(kSpec, "spec", argsOfShape(2, 4096, 4096));
  CHECK(later.calls == 0);
  CHECK(fromRecord.image().ptx == winnerPtx);
  CHECK(next.stats().firstUseTunings == 0);

  // A new bucket is tuned on its own first call.
  FakeTimer other{{1.0, 2.0, 3.0, 4.0}};
  Compiler third(firstUseOptions(database, other, 4));
  third.compileFor(kSpec, "spec", argsOfShape(8, 512, 512));
  CHECK(other.calls == 4);
  CHECK(TuningDatabase(database).records().size() == 2);
}

TEST_CASE("first-use tuning keeps the heuristic within the noise floor and within its budget",
          "[jit][first-use]") {
  test::TempDir dir;
  const std::vector<TileConfig> candidates = candidatesAt({1, 2048, 2048}, 3);
  {
    // 0.5 % faster is noise: the heuristic stays.
    FakeTimer fake{{1.0, 0.995, 1.2}};
    Compiler compiler(firstUseOptions(dir.path + "/a.tsv", fake, 3));
    compiler.compileFor(kSpec, "spec", argsOfShape(1, 2048, 2048));
    CHECK(fake.calls == 3);
    CHECK(TuningDatabase(dir.path + "/a.tsv").records().at(0).config ==
          formatTileOverride(candidates[0]));
  }
  {
    // No time left: the heuristic and one other are timed, no more.
    FakeTimer fake{{1.0, 0.5, 0.1}};
    JitOptions options = firstUseOptions(dir.path + "/b.tsv", fake, 3);
    options.firstUse.budgetSeconds = 0;
    Compiler compiler(options);
    compiler.compileFor(kSpec, "spec", argsOfShape(1, 2048, 2048));
    CHECK(fake.calls == 2);
    CHECK(TuningDatabase(dir.path + "/b.tsv").records().at(0).config ==
          formatTileOverride(candidates[1]));
  }
}

TEST_CASE("first-use tuning is off unless asked for, and never overrides a given plan",
          "[jit][first-use]") {
  test::TempDir dir;
  const std::string database = dir.path + "/tuning.tsv";
  FakeTimer fake{{1.0, 0.5}};
  JitOptions options = firstUseOptions(database, fake, 2);

  options.firstUse.enabled = false;
  Compiler off(options);
  off.compileFor(kSpec, "spec", argsOfShape(2, 1024, 1024));
  CHECK(fake.calls == 0);

  options.firstUse.enabled = std::nullopt;
  ::unsetenv("ATTNC_AUTOTUNE");
  Compiler unset(options);
  unset.compileFor(kSpec, "spec", argsOfShape(2, 1024, 1024));
  CHECK(fake.calls == 0);

  ::setenv("ATTNC_AUTOTUNE", "1", 1);
  Compiler fromEnvironment(options);
  ::unsetenv("ATTNC_AUTOTUNE");
  fromEnvironment.compileFor(kSpec, "spec", argsOfShape(2, 1024, 1024));
  CHECK(fake.calls == 2);

  FakeTimer forced{{1.0, 0.5}};
  JitOptions given = firstUseOptions(dir.path + "/given.tsv", forced, 2);
  given.tileOverride = "block_n=64";
  Compiler withOverride(given);
  const Kernel kernel = withOverride.compileFor(kSpec, "spec", argsOfShape(2, 1024, 1024));
  CHECK(forced.calls == 0);
  CHECK(kernel.launchConfig().blockN == 64);
  CHECK(TuningDatabase(dir.path + "/given.tsv").records().empty());
}
