// Autotuning on first use (Compiler::compileFor) with a fake timer: the
// heuristic's plan and its nearest neighbours compile, are timed in order,
// the fastest is returned and recorded for the shape's bucket, and later
// calls (this Compiler or a new one reading the database) time nothing.
// The switch (JitOptions and ATTNC_AUTOTUNE), the noise floor and the time
// budget are pinned too; and for short queries the same over the
// short-query path's split counts. Needs no GPU: the fake timer launches
// nothing.
#include "attn/Compiler/Compiler.h"
#include "attn/Compiler/Jit.h"
#include "attn/Compiler/Spec.h"
#include "attn/runtime/Error.h"

#include "TestSupport.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <map>

using namespace attn;

namespace {

const char *kSpec = "attn.kernel @first_use problem = #attn.problem<q_heads = 8, kv_heads = 2, "
                    "head_dim = 128, element_type = bf16> mask = #attn.causal<bottom_right> "
                    "normalizer = #attn.softmax\n";

/// Arguments checked as a launch's are (shapes, strides, alignment), with
/// pointers nothing reads: compileFor reads their shapes, and the fake
/// timer launches nothing.
AttnForwardArgs argsOfShape(int64_t batch, int64_t seqlenQ, int64_t seqlenK) {
  AttnForwardArgs args;
  const int64_t q[4] = {batch, seqlenQ, 8, 128}, kv[4] = {batch, seqlenK, 2, 128};
  for (int d = 0; d < 4; ++d) {
    args.q.shape[d] = args.o.shape[d] = q[d];
    args.k.shape[d] = args.v.shape[d] = kv[d];
  }
  // Aligned stand-ins for device pointers: nothing dereferences them.
  uintptr_t address = 0x100000;
  for (TensorView *view : {&args.q, &args.k, &args.v, &args.o}) {
    view->data = reinterpret_cast<void *>(address += 0x100000);
    view->strides[3] = 1;
    for (int d = 2; d >= 0; --d)
      view->strides[d] = view->strides[d + 1] * view->shape[d + 1];
  }
  args.lse = reinterpret_cast<float *>(address += 0x100000);
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
  // Every candidate is timed however slow the machine compiles them (a
  // sanitizer build under load took past the 10 s default with two left);
  // the budget's own test sets it to 0.
  options.firstUse.budgetSeconds = 1e9;
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

  // A decode call that asks for its split count tunes nothing.
  FakeTimer decode{{1.0, 0.5}};
  Compiler decoding(firstUseOptions(dir.path + "/decode.tsv", decode, 2));
  AttnForwardArgs requested = argsOfShape(2, 1, 4096);
  requested.keySplits = 4;
  decoding.compileFor(kSpec, "spec", requested);
  CHECK(decode.calls == 0);
  CHECK(decoding.stats().firstUseTunings == 0);

  FakeTimer forced{{1.0, 0.5}};
  JitOptions given = firstUseOptions(dir.path + "/given.tsv", forced, 2);
  given.tileOverride = "block_n=64";
  Compiler withOverride(given);
  const Kernel kernel = withOverride.compileFor(kSpec, "spec", argsOfShape(2, 1024, 1024));
  CHECK(forced.calls == 0);
  CHECK(kernel.launchConfig().blockN == 64);
  CHECK(TuningDatabase(dir.path + "/given.tsv").records().empty());
}

TEST_CASE("first-use tuning of a built spec records under the key attn-tile looks up",
          "[jit][first-use]") {
  // The builder's form of kSpec: its record must reach a later compile of
  // the built spec (the hash of its printed text is attn-tile's).
  const Spec spec = SpecBuilder("first_use").heads(8, 2).headDim(128).causal(
      CausalAlign::BottomRight);
  test::TempDir dir;
  const std::string database = dir.path + "/tuning.tsv";
  const std::vector<TileConfig> candidates = candidatesAt({4, 2048, 2048}, 3);
  FakeTimer fake{{1.0, 0.6, 0.8}};
  Compiler compiler(firstUseOptions(database, fake, 3));
  const Kernel tuned = compiler.compileFor(spec, argsOfShape(4, 2048, 2048));
  CHECK(fake.calls == 3);
  CHECK(tuned.image().ptx == ptxOf(candidates[1], {4, 2048, 2048}));

  FakeTimer later{{}};
  Compiler next(firstUseOptions(database, later, 3));
  CHECK(next.compileFor(spec, argsOfShape(4, 2048, 2048)).image().ptx == tuned.image().ptx);
  CHECK(later.calls == 0);
}

TEST_CASE("a neighbour whose timing fails or gives no time is left out", "[jit][first-use]") {
  test::TempDir dir;
  const std::vector<TileConfig> candidates = candidatesAt({2, 2048, 2048}, 4);
  size_t calls = 0;
  JitOptions options;
  options.diskCache = DiskCacheOptions{};
  options.tuningDatabase = dir.path + "/tuning.tsv";
  options.firstUse.enabled = true;
  options.firstUse.candidates = 4;
  // The heuristic 1.0; the second throws, the third reports 0 (no time),
  // the fourth 0.9: the fourth wins.
  options.firstUse.timer = [&](const Kernel &, const AttnForwardArgs &, CUstream) -> double {
    switch (calls++) {
    case 0: return 1.0;
    case 1: throw Error("launch failed");
    case 2: return 0.0;
    default: return 0.9;
    }
  };
  Compiler compiler(options);
  const Kernel kernel = compiler.compileFor(kSpec, "spec", argsOfShape(2, 2048, 2048));
  CHECK(calls == 4);
  CHECK(kernel.image().ptx == ptxOf(candidates[3], {2, 2048, 2048}));

  // The heuristic's own failure is the call's: it propagates.
  JitOptions failing = options;
  failing.tuningDatabase = dir.path + "/other.tsv";
  failing.firstUse.timer = [](const Kernel &, const AttnForwardArgs &, CUstream) -> double {
    throw Error("launch failed");
  };
  Compiler broken(failing);
  CHECK_THROWS_WITH(broken.compileFor(kSpec, "spec", argsOfShape(2, 2048, 2048)),
                    "launch failed");
}

TEST_CASE("first-use tuning of a short query measures split counts, records the fastest and "
          "the kernel takes it", "[jit][first-use][short]") {
  test::TempDir dir;
  const std::string database = dir.path + "/tuning.tsv";
  // 8 query heads over 2 kv heads, one query row, 3000 keys (47 tiles of
  // 64): the model's count first, then the ladder without it.
  const AttnForwardArgs args = argsOfShape(2, 1, 3000);
  std::vector<int> timedCounts;
  std::map<int, double> times = {{8, 0.6}, {16, 0.5}, {0, 3.0}};
  JitOptions options;
  options.diskCache = DiskCacheOptions{};
  options.tuningDatabase = database;
  options.firstUse.enabled = true;
  options.firstUse.timer = [&](const Kernel &, const AttnForwardArgs &timing, CUstream) {
    CHECK(timing.workspace == nullptr); // the call's own is not lent out
    timedCounts.push_back(timing.keySplits);
    return times.count(timing.keySplits) ? times.at(timing.keySplits) : 1.0;
  };
  Compiler compiler(options);
  const Kernel kernel = compiler.compileFor(kSpec, "spec", args);
  const int model = modelKeySplits(kernel.launchConfig(), args, int(kReferenceMultiprocessors));
  REQUIRE(!timedCounts.empty());
  CHECK(timedCounts.front() == model);
  std::vector<int> expected{model};
  for (int splits : keySplitLadder(kernel.launchConfig(), 3000))
    if (splits != model)
      expected.push_back(splits);
  CHECK(timedCounts == expected);
  CHECK(std::find(timedCounts.begin(), timedCounts.end(), 32) != timedCounts.end());

  // The kernel carries the fastest count for the bucket and takes it.
  const ShapeBucket bucket = ShapeBucket::of({2, 1, 3000}, 8);
  CHECK(kernel.launchConfig().tunedKeySplits == std::vector<TunedKeySplits>{{bucket, 16}});
  AttnForwardArgs withWorkspace = args;
  withWorkspace.workspace = reinterpret_cast<void *>(0x9000000);
  withWorkspace.workspaceBytes = uint64_t(1) << 30;
  CHECK(shortQueryPlanFor(kernel.launchConfig(), withWorkspace, int(kReferenceMultiprocessors))
            .splits == 16);
  CHECK(compiler.stats().firstUseTunings == 1);

  // Recorded under the spec's short-query key.
  const std::vector<TuningRecord> records = TuningDatabase(database).records();
  REQUIRE(records.size() == 1);
  CHECK(records[0].specHash ==
        shortQueryTuningHash(tuningKeyOfSpec(kSpec, "spec").specHash));
  CHECK(records[0].bucket == bucket);
  CHECK(records[0].config == "key_splits=16");
  CHECK(records[0].milliseconds == 0.5);

  // Another call of the bucket times nothing and gets the same count.
  timedCounts.clear();
  CHECK(compiler.compileFor(kSpec, "spec", argsOfShape(2, 1, 2500))
            .launchConfig()
            .tunedKeySplits == kernel.launchConfig().tunedKeySplits);
  CHECK(timedCounts.empty());

  // A new Compiler plans the kernel with the record: nothing to time.
  Compiler later(options);
  const Kernel planned = later.compileFor(kSpec, "spec", args);
  CHECK(timedCounts.empty());
  CHECK(planned.launchConfig().tunedKeySplits == std::vector<TunedKeySplits>{{bucket, 16}});
  CHECK(later.stats().firstUseTunings == 0);

  SECTION("the model's count stays within the noise floor") {
    test::TempDir other;
    options.tuningDatabase = other.path + "/tuning.tsv";
    times = {{model, 1.0}, {model == 16 ? 8 : 16, 0.995}};
    Compiler close(options);
    CHECK(close.compileFor(kSpec, "spec", args).launchConfig().tunedKeySplits ==
          std::vector<TunedKeySplits>{{bucket, model}});
  }
  SECTION("a paged call is not tuned") {
    test::TempDir other;
    options.tuningDatabase = other.path + "/tuning.tsv";
    AttnForwardArgs paged = argsOfShape(2, 1, 1);
    paged.k = contiguousBSHD(paged.k.data, DType::BF16, 100, 64, 2, 128);
    paged.v = contiguousBSHD(paged.v.data, DType::BF16, 100, 64, 2, 128);
    paged.paged.blockTable = reinterpret_cast<const int32_t *>(0x8000000);
    paged.paged.blockTableStride = 50;
    paged.paged.maxPages = 50;
    paged.paged.seqlensK = reinterpret_cast<const int32_t *>(0x8100000);
    paged.paged.maxSeqlenK = 3000;
    timedCounts.clear();
    Compiler pagedCompiler(options);
    CHECK(pagedCompiler.compileFor(kSpec, "spec", paged).launchConfig().tunedKeySplits.empty());
    CHECK(timedCounts.empty());
  }
}

TEST_CASE("a new split record reaches a cached kernel without a compile", "[jit][short]") {
  test::TempDir dir;
  JitOptions options;
  options.diskCache = DiskCacheOptions{};
  options.diskCache->directory = dir.path + "/cache";
  options.tuningDatabase = dir.path + "/tuning.tsv";
  Compiler compiler(options);
  const Kernel first = compiler.compile(kSpec, "spec");
  CHECK(first.launchConfig().tunedKeySplits.empty());
  CHECK(compiler.stats().compiles == 1);

  TuningRecord record;
  record.specHash = shortQueryTuningHash(tuningKeyOfSpec(kSpec, "spec").specHash);
  record.arch = "sm_90a";
  record.bucket = ShapeBucket{16, 1, 4096};
  record.config = formatKeySplitsConfig(12);
  record.milliseconds = 0.02;
  record.device = "test";
  record.unixSeconds = 1700000000;
  TuningDatabase(*options.tuningDatabase).record(record);

  // From memory (once the request cache is cleared) and from disk (a new
  // Compiler): the same binary, the new table, no NVRTC.
  compiler.clearMemoryCache();
  const Kernel again = compiler.compile(kSpec, "spec");
  CHECK(again.launchConfig().tunedKeySplits ==
        std::vector<TunedKeySplits>{{ShapeBucket{16, 1, 4096}, 12}});
  CHECK(again.image().ptx == first.image().ptx);
  Compiler fresh(options);
  const Kernel fromDisk = fresh.compile(kSpec, "spec");
  CHECK(fromDisk.launchConfig().tunedKeySplits == again.launchConfig().tunedKeySplits);
  CHECK(compiler.stats().compiles == 1);
  CHECK(fresh.stats().compiles == 0);
  CHECK(fresh.stats().diskHits == 1);
  // The backward does not carry them.
  CHECK(fresh.compileBackward(kSpec, "spec").launchConfig().tunedKeySplits.empty());
}
