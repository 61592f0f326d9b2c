// attn-tile consulting the tuning database, end to end through the driver:
// the spec's tuning key, a tuned plan found by shape bucket, and the
// heuristic when there is no usable record. Needs MLIR and NVRTC, no GPU.

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

/// Plans the spec (attn-tile, attn-plan-smem) and returns the kernel's full
/// tile plan, with the warnings attn-tile reported.
struct Planned {
  TileConfig config;
  std::vector<std::string> warnings;
};
Planned plan(const std::string &text, CompileOptions options) {
  options.planOnly = true;
  mlir::DialectRegistry registry;
  registerSpecDialects(registry);
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  Planned result;
  std::vector<std::string> errors;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &diagnostic) {
    (diagnostic.getSeverity() == mlir::DiagnosticSeverity::Warning ? result.warnings : errors)
        .push_back(diagnostic.str());
    return mlir::success();
  });
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(text, mlir::ParserConfig(&context));
  REQUIRE(module);
  bool planned = mlir::succeeded(runCompilePipeline(*module, options));
  INFO(Catch::Detail::stringify(errors));
  REQUIRE(planned);
  // No assertion inside the walk: an exception must not cross MLIR's frames.
  mlir::attn::TilePlanAttr tile;
  module->walk([&](mlir::attn::KernelOp op) { tile = op.getTileAttr(); });
  REQUIRE(tile);
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

TEST_CASE("attn-tile falls back to the heuristic without a usable record", "[tuning][tile]") {
  TempDir dir;
  std::string path = dir.path + "/tuning.tsv";
  SpecTuningKey key = tuningKeyOfSpec(specText(), "t.mlir");
  CompileOptions options;
  options.tuningDatabase = path;
  options.tuningShape = "2,8192";
  const TileConfig heuristic = heuristicAt(key, 8192);
  REQUIRE(heuristic.blockN == 160);

  SECTION("a missing file") {
    Planned planned = plan(specText(), options);
    CHECK(planned.warnings.empty());
    CHECK(planned.config == heuristic);
    CHECK(compileSpec(specText(), "t.mlir", options).launch.blockN == heuristic.blockN);
  }
  SECTION("an illegal record") {
    TileConfig illegal = heuristic;
    illegal.blockN = 8;
    TuningDatabase(path).record(recordFor(key, shapeOf(2, 8192, 8192), formatTileOverride(illegal)));
    Planned planned = plan(specText(), options);
    CHECK(planned.config == heuristic);
    REQUIRE(planned.warnings.size() == 1);
    CHECK_THAT(planned.warnings[0], Contains("is unusable") && Contains("block_n (8)") &&
                                        Contains("bh32_q8192_k8192") &&
                                        Contains("using the heuristic plan"));
    CompiledKernel kernel;
    REQUIRE_NOTHROW(kernel = compileSpec(specText(), "t.mlir", options));
    CHECK(kernel.launch.blockN == heuristic.blockN);
  }
  SECTION("a record that does not parse") {
    TuningDatabase(path).record(recordFor(key, shapeOf(2, 8192, 8192), "block_q=64"));
    Planned planned = plan(specText(), options);
    CHECK(planned.config == heuristic);
    REQUIRE(planned.warnings.size() == 1);
    CHECK_THAT(planned.warnings[0], Contains("unknown key 'block_q'"));
    CHECK(compileSpec(specText(), "t.mlir", options).launch.blockN == heuristic.blockN);
  }
  SECTION("an unreadable database") {
    std::filesystem::create_directories(path); // a directory in its place
    Planned planned = plan(specText(), options);
    CHECK(planned.config == heuristic);
    REQUIRE(planned.warnings.size() == 1);
    CHECK_THAT(planned.warnings[0], Contains(path) && Contains("using the heuristic plan"));
  }
  SECTION("a malformed shape fails") {
    options.tuningShape = "abc";
    CHECK_THROWS_WITH(compileSpec(specText(), "t.mlir", options),
                      Contains("invalid tuning-shape"));
  }
}
