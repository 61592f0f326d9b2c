// attn-tile consulting the tuning database, end to end through the driver:
// the spec's tuning key, a tuned plan found by shape bucket, and the
// heuristic when there is no usable record; the backward's plan likewise
// from the backward's own records. Needs MLIR and NVRTC, no GPU.

#include "attn/Compiler/Compiler.h"
#include "attn/Compiler/TileConstraints.h"
#include "attn/Transforms/Passes.h"
#include "attn/runtime/Error.h"
#include "attn/runtime/TuningDatabase.h"

#include "TestSupport.h"

#include <catch2/catch.hpp>

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

using namespace attn;
using Catch::Matchers::Contains;

namespace {

using test::TempDir;

std::string specText(const std::string &name = "t", int qHeads = 16,
                     const std::string &mask = "#attn.causal<bottom_right>",
                     const std::string &attributes = "") {
  return "attn.kernel @" + name + "\n" +
         "    problem = #attn.problem<q_heads = " + std::to_string(qHeads) + ", kv_heads = " +
         std::to_string(qHeads) + ", head_dim = 128, element_type = bf16>\n" +
         "    mask = " + mask + "\n" + "    normalizer = #attn.softmax\n" + attributes;
}

/// A complete override: the heuristic with some fields changed.
std::string configText(const SpecTuningKey &key, int blockN, int chains, int persistent) {
  TileConfig config = key.heuristic;
  config.blockN = blockN;
  config.softmaxChains = chains;
  config.persistentBlocksPerSm = persistent;
  return formatTileOverride(config);
}

TuningRecord recordFor(const SpecTuningKey &key, const TuningShape &shape,
                       const std::string &config, double milliseconds = 1.0) {
  TuningRecord record;
  record.specHash = key.specHash;
  record.arch = "sm_90a";
  record.bucket = ShapeBucket::of(shape, key.qHeads);
  record.config = config;
  record.milliseconds = milliseconds;
  record.tflops = 500;
  record.device = "NVIDIA H100 80GB HBM3";
  record.unixSeconds = 1700000000;
  return record;
}

TuningShape shapeOf(int64_t batch, int64_t seqlenQ, int64_t seqlenK) {
  TuningShape shape;
  shape.batch = batch;
  shape.seqlenQ = seqlenQ;
  shape.seqlenK = seqlenK;
  return shape;
}

/// A spec parsed in a context of its own, its diagnostics collected:
/// warnings apart from errors.
struct ParsedSpec {
  explicit ParsedSpec(const std::string &text)
      : context(specRegistry()), handler(&context, [this](mlir::Diagnostic &diagnostic) {
          (diagnostic.getSeverity() == mlir::DiagnosticSeverity::Warning ? warnings : errors)
              .push_back(diagnostic.str());
          return mlir::success();
        }) {
    context.loadAllAvailableDialects();
    module = mlir::parseSourceString<mlir::ModuleOp>(text, mlir::ParserConfig(&context));
    REQUIRE(module);
  }
  static mlir::DialectRegistry specRegistry() {
    mlir::DialectRegistry registry;
    registerSpecDialects(registry);
    return registry;
  }
  /// The spec's kernel. No assertion inside a walk: an exception must not
  /// cross MLIR's frames.
  mlir::attn::KernelOp kernel() {
    mlir::attn::KernelOp found;
    module->walk([&](mlir::attn::KernelOp op) { found = op; });
    REQUIRE(found);
    return found;
  }

  mlir::MLIRContext context;
  std::vector<std::string> warnings, errors;
  mlir::ScopedDiagnosticHandler handler;
  mlir::OwningOpRef<mlir::ModuleOp> module;
};

/// Plans the spec (attn-tile, attn-plan-smem) and returns the kernel's full
/// tile plan, with the warnings attn-tile reported.
struct Planned {
  TileConfig config;
  std::vector<std::string> warnings;
};
Planned plan(const std::string &text, CompileOptions options) {
  options.planOnly = true;
  ParsedSpec spec(text);
  bool planned = mlir::succeeded(runCompilePipeline(*spec.module, options));
  INFO(Catch::Detail::stringify(spec.errors));
  REQUIRE(planned);
  mlir::attn::TilePlanAttr tile = spec.kernel().getTileAttr();
  REQUIRE(tile);
  Planned result;
  result.warnings = spec.warnings;
  result.config = mlir::attn::getTileConfig(tile);
  return result;
}

bool isHexDigest(const std::string &text) {
  if (text.size() != 64)
    return false;
  for (char c : text)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
  return true;
}

} // namespace

// attn-tile's heuristic for the key's problem planned for `keyLength` keys
// (a tuning shape without a usable record).
TileConfig heuristicAt(const SpecTuningKey &key, int64_t keyLength) {
  TileProblem problem = key.problem;
  problem.keyLength = keyLength;
  return defaultTileConfig(problem);
}

TEST_CASE("tuning key: the spec as written, not its name or plan", "[tuning][key]") {
  SpecTuningKey key = tuningKeyOfSpec(specText(), "t.mlir");
  CHECK(isHexDigest(key.specHash));
  CHECK(key.qHeads == 16);
  CHECK(key.problem.headDim == 128);
  CHECK(key.problem.elementBytes == 2);
  CHECK_FALSE(key.problem.evenTiles); // causal
  CHECK(key.heuristic == defaultTileConfig(key.problem));
  CHECK(key.heuristic.blockN == 128);

  // Deterministic; the name, the buffer name, the layout and a plan on the
  // op do not count.
  CHECK(tuningKeyOfSpec(specText(), "other.mlir").specHash == key.specHash);
  CHECK(tuningKeyOfSpec(specText("renamed"), "t.mlir").specHash == key.specHash);
  CHECK(tuningKeyOfSpec("// A comment.\n\n" + specText(), "t.mlir").specHash == key.specHash);
  std::string planned =
      specText("t", 16, "#attn.causal<bottom_right>",
               "    attributes {tile = #attn.tile<block_m = 64, block_n = 112, stages = 3, "
               "consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 232, "
               "producer_registers = 24>}\n");
  CHECK(tuningKeyOfSpec(planned, "t.mlir").specHash == key.specHash);
  // The measured split counts attn-tile lists are a plan too.
  std::string withSplits = specText("t", 16, "#attn.causal<bottom_right>",
                                    "    attributes {tuned_key_splits = array<i64: 16, 1, 4096, "
                                    "8>}\n");
  CHECK(tuningKeyOfSpec(withSplits, "t.mlir").specHash == key.specHash);

  // What the kernel computes does count.
  std::vector<std::string> others = {
      specText("t", 16, "#attn.causal<top_left>"),
      specText("t", 16, "#attn.no_mask"),
      specText("t", 32),
  };
  for (const std::string &other : others) {
    INFO(other);
    SpecTuningKey otherKey = tuningKeyOfSpec(other, "t.mlir");
    CHECK(isHexDigest(otherKey.specHash));
    CHECK(otherKey.specHash != key.specHash);
  }
  CHECK(tuningKeyOfSpec(specText("t", 32), "t.mlir").qHeads == 32);
  CHECK_FALSE(key.linearFamily);

  // Linear attention and retention have one plan: attn-tune refuses them.
  std::string retention =
      "attn.kernel @r problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, "
      "element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention\n";
  CHECK(tuningKeyOfSpec(retention, "r.mlir").linearFamily);

  CHECK_THROWS_AS(tuningKeyOfSpec("attn.kernel @broken", "bad.mlir"), Error);
}

TEST_CASE("attn-tile uses the tuned plan of the nearest bucket", "[tuning][tile]") {
  TempDir dir;
  std::string path = dir.path + "/tuning.tsv";
  SpecTuningKey key = tuningKeyOfSpec(specText(), "t.mlir");
  TuningDatabase db(path);
  // bh32_q8192_k8192 and bh16_q512_k512.
  db.record(recordFor(key, shapeOf(2, 8192, 8192), configText(key, 64, 2, 1)));
  db.record(recordFor(key, shapeOf(1, 512, 512), configText(key, 96, 1, 0)));
  // The same buckets for another spec and another arch.
  TuningRecord otherSpec =
      recordFor(key, shapeOf(2, 8192, 8192), configText(key, 112, 1, 0), 0.5);
  otherSpec.specHash = tuningKeyOfSpec(specText("t", 16, "#attn.no_mask"), "t.mlir").specHash;
  db.record(otherSpec);
  TuningRecord otherArch = otherSpec;
  otherArch.specHash = key.specHash;
  otherArch.arch = "sm_100a";
  db.record(otherArch);
  REQUIRE(db.records().size() == 4);

  CompileOptions options;
  options.tuningDatabase = path;

  SECTION("the shape's bucket") {
    options.tuningShape = "2,8192";
    Planned planned = plan(specText(), options);
    CHECK(planned.warnings.empty());
    CHECK(planned.config.blockN == 64);
    CHECK(planned.config.softmaxChains == 2);
    CHECK(planned.config.persistentBlocksPerSm == 1);
    CHECK(formatTileOverride(planned.config) == configText(key, 64, 2, 1));

    // Through the whole driver (emission and NVRTC), under another name.
    CompiledKernel kernel = compileSpec(specText("renamed"), "renamed.mlir", options);
    CHECK(kernel.launch.blockN == 64);
    CHECK(kernel.launch.blockM == 128);
    CHECK(kernel.launch.persistentBlocksPerSm == 1);
  }
  SECTION("a shape in the nearer bucket") {
    // 1 x 16 heads, 300 -> bh16_q512_k512: 0 away; bh32_q8192_k8192 is 9.
    options.tuningShape = "1,300,400";
    Planned planned = plan(specText(), options);
    CHECK(planned.config.blockN == 96);
    CHECK(planned.config.softmaxChains == 1);
    CHECK(planned.config.persistentBlocksPerSm == 0);
    CompiledKernel kernel = compileSpec(specText(), "t.mlir", options);
    CHECK(kernel.launch.blockN == 96);
    CHECK(kernel.launch.persistentBlocksPerSm == 0);
  }
  SECTION("no shape: the largest bucket") {
    Planned planned = plan(specText(), options);
    CHECK(planned.config.blockN == 64);
    CHECK(planned.config.softmaxChains == 2);
    CompiledKernel kernel = compileSpec(specText(), "t.mlir", options);
    CHECK(kernel.launch.blockN == 64);
    CHECK(kernel.launch.persistentBlocksPerSm == 1);
  }
  SECTION("a plan on the op is kept") {
    std::string preset =
        specText("t", 16, "#attn.causal<bottom_right>",
                 "    attributes {tile = #attn.tile<block_m = 64, block_n = 112, stages = 3, "
                 "consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 232, "
                 "producer_registers = 24>}\n");
    CHECK(plan(preset, options).config.blockN == 112);
  }
  SECTION("a tile override applies over the tuned plan") {
    options.tileOverride = "stages=3";
    Planned planned = plan(specText(), options);
    CHECK(planned.config.blockN == 64);
    CHECK(planned.config.stages == 3);
    CHECK(planned.config.softmaxChains == 2);
  }
  SECTION("no database: the heuristic") {
    options.tuningDatabase = "";
    options.tuningShape = "1,16384";
    // The shape's: a causal head dim 128 takes 160-key tiles from 8192 keys,
    // and one block per work tile from 16384.
    CHECK(plan(specText(), options).config == heuristicAt(key, 16384));
    CompiledKernel kernel = compileSpec(specText(), "t.mlir", options);
    CHECK(kernel.launch.blockN == 160);
    CHECK(kernel.launch.persistentBlocksPerSm == 0);
  }
  SECTION("another arch's records do not count") {
    // Only the sm_100a record exists for this spec's key there; sm_90a's
    // lookup must not see the no_mask spec's record either.
    std::string other = dir.path + "/other.tsv";
    TuningDatabase(other).record(otherArch);
    TuningDatabase(other).record(otherSpec);
    options.tuningDatabase = other;
    Planned planned = plan(specText(), options);
    CHECK(planned.warnings.empty());
    CHECK(planned.config == key.heuristic);
  }
}

namespace {
/// backwardTileConfigFor on the spec's kernel, with the warnings it gave.
Planned backwardPlan(const std::string &text, const CompileOptions &options) {
  ParsedSpec spec(text);
  mlir::FailureOr<TileConfig> config = backwardTileConfigFor(spec.kernel(), options);
  INFO(Catch::Detail::stringify(spec.errors));
  REQUIRE(mlir::succeeded(config));
  return {*config, spec.warnings};
}

/// The backward's default plan at head dim 128 with some fields changed.
TileConfig backwardConfig(int consumers, int blockM, int stages, int registers) {
  TileConfig config = backwardTileConfig(TileProblem{128, 2});
  config.consumerWarpgroups = consumers;
  config.blockN = 64 * consumers;
  config.blockM = blockM;
  config.stages = stages;
  config.consumerRegisters = registers;
  return config;
}
} // namespace

TEST_CASE("the backward's plan comes from the backward's records", "[tuning][backward]") {
  TempDir dir;
  const std::string path = dir.path + "/tuning.tsv";
  const SpecTuningKey key = tuningKeyOfSpec(specText(), "t.mlir");
  const TileConfig heuristic = backwardTileConfig(key.problem);
  // Two tuned backward plans, neither the default one, both legal.
  const TileConfig longPlan = backwardConfig(1, 64, 3, 256);
  const TileConfig shortPlan = backwardConfig(2, 64, 1, 240);
  for (const TileConfig &config : {longPlan, shortPlan}) {
    REQUIRE_FALSE(checkBackwardTileLegality(key.problem, config));
    REQUIRE(config != heuristic);
  }
  auto backwardRecord = [&](const TuningShape &shape, const TileConfig &config) {
    TuningRecord record = recordFor(key, shape, formatTileOverride(config));
    record.specHash = backwardTuningHash(key.specHash);
    return record;
  };
  TuningDatabase db(path);
  // bh32_q8192_k8192 and bh16_q512_k512.
  db.record(backwardRecord(shapeOf(2, 8192, 8192), longPlan));
  db.record(backwardRecord(shapeOf(1, 512, 512), shortPlan));

  CompileOptions options;
  options.tuningDatabase = path;

  SECTION("the shape's bucket, the nearest one, the largest without a shape") {
    options.tuningShape = "2,8192";
    Planned planned = backwardPlan(specText(), options);
    CHECK(planned.warnings.empty());
    CHECK(planned.config == longPlan);
    options.tuningShape = "1,300,400";
    CHECK(backwardPlan(specText(), options).config == shortPlan);
    options.tuningShape = "";
    CHECK(backwardPlan(specText(), options).config == longPlan);
  }
  SECTION("through compileBackwardSpec (emission and NVRTC), under another name") {
    options.tuningShape = "2,8192";
    CompiledKernel kernel = compileBackwardSpec(specText("renamed"), "renamed.mlir", options);
    CHECK(kernel.launch.backward == 1);
    CHECK(kernel.launch.blockM == longPlan.blockM);
    CHECK(kernel.launch.blockN == longPlan.blockN);
    CHECK(kernel.launch.threadsPerBlock == longPlan.threadsPerBlock());
  }
  SECTION("a tile override applies over the tuned plan") {
    options.tuningShape = "2,8192";
    options.tileOverride = "stages=1";
    TileConfig expected = longPlan;
    expected.stages = 1;
    CHECK(backwardPlan(specText(), options).config == expected);
    // Two consumers cannot hold the one-consumer plan's 256 registers: the
    // budget follows the consumers unless given.
    options.tileOverride = "consumer_warpgroups=2";
    Planned two = backwardPlan(specText(), options);
    CHECK(two.config == backwardConfig(2, 64, 3, 240));
    CHECK_FALSE(checkBackwardTileLegality(key.problem, two.config));
    options.tileOverride = "consumer_warpgroups=1,consumer_registers=248";
    CHECK(backwardPlan(specText(), options).config == backwardConfig(1, 64, 3, 248));
  }
  SECTION("a forward record is not a backward plan, and a backward one no forward plan") {
    // The same buckets under the spec's own hash, with plans that would be
    // legal backward plans: the backward's lookup must not see them.
    std::string forwardOnly = dir.path + "/forward.tsv";
    TuningDatabase(forwardOnly)
        .record(recordFor(key, shapeOf(2, 8192, 8192), formatTileOverride(longPlan)));
    TuningDatabase(forwardOnly)
        .record(recordFor(key, shapeOf(1, 512, 512), formatTileOverride(shortPlan)));
    options.tuningDatabase = forwardOnly;
    for (const std::string shape : {"2,8192", "1,300,400", ""}) {
      options.tuningShape = shape;
      Planned planned = backwardPlan(specText(), options);
      CHECK(planned.warnings.empty());
      CHECK(planned.config == heuristic);
    }
    // attn-tile over the database of backward records plans the forward's
    // heuristic, without a warning about them.
    options.tuningDatabase = path;
    options.tuningShape = "2,8192";
    Planned forward = plan(specText(), options);
    CHECK(forward.warnings.empty());
    CHECK(forward.config == heuristicAt(key, 8192));
  }
  SECTION("another spec's backward records do not count") {
    options.tuningShape = "2,8192";
    // Without a mask the default plan differs (80 query rows a step).
    const std::string unmasked = specText("t", 16, "#attn.no_mask");
    CHECK(backwardPlan(unmasked, options).config ==
          backwardTileConfig(tuningKeyOfSpec(unmasked, "t.mlir").problem));
    CHECK(backwardPlan(specText("t", 32), options).config == heuristic);
  }
  SECTION("no database: the default plan") {
    options.tuningDatabase = "";
    options.tuningShape = "2,8192";
    CHECK(backwardPlan(specText(), options).config == heuristic);
  }
}

TEST_CASE("attn-tile and the backward fall back to their heuristics without a usable record",
          "[tuning][tile][backward]") {
  // The forward's records are keyed by the spec's hash, the backward's by
  // its backward key; either kind of unusable record warns the same way.
  const bool backward = GENERATE(false, true);
  INFO((backward ? "backward" : "forward"));
  TempDir dir;
  std::string path = dir.path + "/tuning.tsv";
  SpecTuningKey key = tuningKeyOfSpec(specText(), "t.mlir");
  CompileOptions options;
  options.tuningDatabase = path;
  options.tuningShape = "2,8192";
  const TileConfig heuristic =
      backward ? backwardTileConfig(key.problem) : heuristicAt(key, 8192);
  REQUIRE(heuristic.blockN == (backward ? 128 : 160));
  const std::string fallback =
      backward ? "using the backward's heuristic plan" : "using the heuristic plan";
  auto planOf = [&] {
    return backward ? backwardPlan(specText(), options) : plan(specText(), options);
  };
  auto compiledBlockN = [&] {
    return (backward ? compileBackwardSpec : compileSpec)(specText(), "t.mlir", options,
                                                          BinaryKind::Ptx)
        .launch.blockN;
  };
  auto recordConfig = [&](const std::string &config) {
    TuningRecord record = recordFor(key, shapeOf(2, 8192, 8192), config);
    if (backward)
      record.specHash = backwardTuningHash(key.specHash);
    TuningDatabase(path).record(record);
  };

  SECTION("a missing file") {
    Planned planned = planOf();
    CHECK(planned.warnings.empty());
    CHECK(planned.config == heuristic);
    CHECK(compiledBlockN() == heuristic.blockN);
  }
  SECTION("an illegal record") {
    // Forward: 8-key tiles; backward: one consumer at 240 registers (head
    // dim 128 needs 248).
    TileConfig illegal = heuristic;
    if (backward) {
      illegal.consumerWarpgroups = 1;
      illegal.blockN = 64;
    } else {
      illegal.blockN = 8;
    }
    recordConfig(formatTileOverride(illegal));
    Planned planned = planOf();
    CHECK(planned.config == heuristic);
    REQUIRE(planned.warnings.size() == 1);
    CHECK_THAT(planned.warnings[0],
               Contains("is unusable") &&
                   Contains(backward ? "register budget" : "block_n (8)") &&
                   Contains("bh32_q8192_k8192") && Contains(fallback));
    int blockN = 0;
    REQUIRE_NOTHROW(blockN = compiledBlockN());
    CHECK(blockN == heuristic.blockN);
  }
  SECTION("a record that does not parse") {
    recordConfig("block_q=64");
    Planned planned = planOf();
    CHECK(planned.config == heuristic);
    REQUIRE(planned.warnings.size() == 1);
    CHECK_THAT(planned.warnings[0], Contains("unknown key 'block_q'"));
    CHECK(compiledBlockN() == heuristic.blockN);
  }
  SECTION("an unreadable database") {
    std::filesystem::create_directories(path); // a directory in its place
    Planned planned = planOf();
    CHECK(planned.config == heuristic);
    REQUIRE(planned.warnings.size() == 1);
    CHECK_THAT(planned.warnings[0], Contains(path) && Contains(fallback));
  }
  SECTION("a malformed shape fails") {
    options.tuningShape = "abc";
    CHECK_THROWS_WITH(compiledBlockN(), Contains("invalid tuning-shape"));
  }
}

TEST_CASE("attn-tile lists the spec's measured split counts in tuned_key_splits",
          "[tuning][tile][short]") {
  TempDir dir;
  std::string path = dir.path + "/tuning.tsv";
  SpecTuningKey key = tuningKeyOfSpec(specText(), "t.mlir");
  const std::string shortKey = shortQueryTuningHash(key.specHash);
  CHECK(isHexDigest(shortKey));
  CHECK(shortKey != key.specHash);
  CHECK(shortKey != backwardTuningHash(key.specHash));
  auto splitRecord = [&](const TuningShape &shape, const std::string &config) {
    TuningRecord record = recordFor(key, shape, config);
    record.specHash = shortKey;
    return record;
  };
  TuningDatabase db(path);
  // Recorded out of order: bh128_q1_k32768, bh16_q1_k4096, bh16_q16_k8192.
  db.record(splitRecord(shapeOf(8, 1, 32768), formatKeySplitsConfig(6)));
  db.record(splitRecord(shapeOf(1, 1, 4096), formatKeySplitsConfig(24)));
  db.record(splitRecord(shapeOf(1, 16, 8192), formatKeySplitsConfig(0)));
  // Another spec's split count, and one for another arch: not listed.
  TuningRecord otherSpec = splitRecord(shapeOf(2, 1, 2048), formatKeySplitsConfig(3));
  otherSpec.specHash =
      shortQueryTuningHash(tuningKeyOfSpec(specText("t", 16, "#attn.no_mask"), "t.mlir").specHash);
  db.record(otherSpec);
  TuningRecord otherArch = splitRecord(shapeOf(2, 1, 2048), formatKeySplitsConfig(3));
  otherArch.arch = "sm_100a";
  db.record(otherArch);

  CompileOptions options;
  options.tuningDatabase = path;
  options.tuningShape = "8,1,32768";
  options.planOnly = true;
  ParsedSpec spec(specText());
  REQUIRE(mlir::succeeded(runCompilePipeline(*spec.module, options)));
  CHECK(spec.warnings.empty());
  std::optional<llvm::ArrayRef<int64_t>> table = spec.kernel().getTunedKeySplits();
  REQUIRE(table);
  CHECK(std::vector<int64_t>(table->begin(), table->end()) ==
        std::vector<int64_t>{16, 1, 4096, 24, 16, 16, 8192, 0, 128, 1, 32768, 6});
  // The launch config carries them; the tile plan is the heuristic's (the
  // forward's lookup does not meet split records).
  const AttnLaunchConfig launch = launchConfigFor(spec.kernel());
  CHECK(launch.tunedKeySplits == std::vector<TunedKeySplits>{{ShapeBucket{16, 1, 4096}, 24},
                                                              {ShapeBucket{16, 16, 8192}, 0},
                                                              {ShapeBucket{128, 1, 32768}, 6}});
  CHECK(mlir::attn::getTileConfig(spec.kernel().getTileAttr()) == heuristicAt(key, 32768));

  SECTION("an unusable record warns and is left out") {
    db.record(splitRecord(shapeOf(4, 1, 1024), "key_splits=many"));
    db.record(splitRecord(shapeOf(4, 128, 1024), formatKeySplitsConfig(2)));
    ParsedSpec again(specText());
    REQUIRE(mlir::succeeded(runCompilePipeline(*again.module, options)));
    REQUIRE(again.warnings.size() == 2);
    CHECK_THAT(again.warnings[0] + again.warnings[1],
               Contains("short-query record 'key_splits=many' for bh64_q1_k1024 is unusable") &&
                   Contains("short-query record 'key_splits=2' for bh64_q128_k1024 is unusable"));
    CHECK(again.kernel().getTunedKeySplits()->size() == 12);
  }
  SECTION("two records of one bucket (databases concatenated): the faster, no error") {
    TuningRecord slower = splitRecord(shapeOf(8, 1, 32768), formatKeySplitsConfig(3));
    slower.milliseconds = 2.0;
    TuningRecord faster = splitRecord(shapeOf(8, 1, 32768), formatKeySplitsConfig(5));
    faster.milliseconds = 0.5;
    // record() would merge them: append the lines as `cat a.tsv b.tsv` does.
    TuningDatabase other(dir.path + "/other.tsv");
    other.record(slower);
    std::string text;
    {
      std::ifstream in(path);
      text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    std::ifstream second(dir.path + "/other.tsv");
    std::string line;
    while (std::getline(second, line))
      text += line + "\n";
    TuningDatabase fasterOnly(dir.path + "/faster.tsv");
    fasterOnly.record(faster);
    std::ifstream third(dir.path + "/faster.tsv");
    while (std::getline(third, line))
      if (line.rfind("#", 0) != 0)
        text += line + "\n";
    std::ofstream(path) << text;
    ParsedSpec again(specText());
    REQUIRE(mlir::succeeded(runCompilePipeline(*again.module, options)));
    std::optional<llvm::ArrayRef<int64_t>> merged = again.kernel().getTunedKeySplits();
    REQUIRE(merged);
    CHECK(std::vector<int64_t>(merged->begin(), merged->end()) ==
          std::vector<int64_t>{16, 1, 4096, 24, 16, 16, 8192, 0, 128, 1, 32768, 5});
  }
  SECTION("without a database the kernel has none") {
    options.tuningDatabase.clear();
    ParsedSpec bare(specText());
    REQUIRE(mlir::succeeded(runCompilePipeline(*bare.module, options)));
    CHECK_FALSE(bare.kernel().getTunedKeySplits());
    CHECK(launchConfigFor(bare.kernel()).tunedKeySplits.empty());
  }
}

TEST_CASE("short-query records' configs", "[tuning][short]") {
  CHECK(formatKeySplitsConfig(12) == "key_splits=12");
  CHECK(parseKeySplitsConfig("key_splits=12") == 12);
  CHECK(parseKeySplitsConfig("key_splits=0") == 0);
  CHECK(parseKeySplitsConfig("key_splits=1024") == 1024);
  CHECK_FALSE(parseKeySplitsConfig("key_splits=1025"));
  CHECK_FALSE(parseKeySplitsConfig("key_splits=-1"));
  CHECK_FALSE(parseKeySplitsConfig("key_splits=00"));
  CHECK_FALSE(parseKeySplitsConfig("key_splits="));
  CHECK_FALSE(parseKeySplitsConfig("block_m=64"));
}
