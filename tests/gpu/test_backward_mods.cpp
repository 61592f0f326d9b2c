// The backward through mask_mod and score_mod regions, and the gradients of
// learnable captures, against the CPU reference: its gradients (double) come
// through the vector-Jacobian product attn-differentiate-mods derives, which
// the unit tests check against finite differences. Every example with a
// region runs its backward; the learnable examples (ALiBi's slopes, a
// relative-position table, T5's buckets) also compare the capture gradients.
#include <catch2/catch.hpp>

#include "LoadedBackward.h"
#include "LoadedKernel.h"
#include "VariantCaptures.h"

#include <cstring>
#include <random>

using namespace attn;
using attn::gputest::CaptureMaker;
using attn::gputest::exampleWithHeads;
using attn::gputest::LoadedBackward;
using attn::gputest::LoadedKernel;
using attn::gputest::replaceAll;

namespace {

// T5's bucket table: [q_heads, 32] of N(0, 0.5).
const CaptureMaker kBucketTable = gputest::normalBiasTable(32);
// The relative-position examples read bias[h, q - kv + 8191].
const CaptureMaker kPositionTable = gputest::normalBiasTable(2 * 8192 - 1);

// BigBird's chosen blocks of 64 x 64, one in ten.
void addBlocks(harness::ForwardProblem &data, const AttnLaunchConfig &,
               const harness::Shape &shape, std::mt19937_64 &random) {
  int64_t rows = (shape.seqlenQ + 63) / 64, columns = (shape.seqlenK + 63) / 64;
  std::vector<int32_t> chosen(rows * columns);
  for (int32_t &value : chosen)
    value = random() % 10 == 0;
  data.addCapture(chosen, {rows, columns});
}

/// How a test launches the backward.
struct RunOptions {
  /// The forward's tile coverage goes to both kernels.
  bool coverage = false;
  bool deterministic = false;
  AttnBackwardArgs::CaptureGradSum captureGradSum = AttnBackwardArgs::CaptureGradSum::Exact;
};
RunOptions withCoverage() {
  RunOptions options;
  options.coverage = true;
  return options;
}

/// Runs `spec`'s forward and backward on random inputs and compares dq, dk,
/// dv and every learnable capture's gradient with the reference's.
void runBackwardVariant(const std::string &spec, const harness::Shape &shape,
                        const CaptureMaker &captures, uint64_t seed,
                        const RunOptions &options = {}) {
  const bool coverage = options.coverage;
  LoadedKernel &forward = gputest::loadKernel(spec);
  LoadedBackward &backward = gputest::loadBackward(spec);
  harness::ForwardProblem data(forward.compiled.launch, shape, seed);
  gputest::addCaptures(data, forward.compiled.launch, shape, captures, seed);
  AttnForwardArgs forwardArgs = data.args();
  gputest::PreparedBuffers prepared =
      gputest::prepare(forward, forwardArgs, coverage ? gputest::kTileCoverage : gputest::kNothing);
  launchForward(forward.function, forward.compiled.launch, forwardArgs, nullptr);
  harness::BackwardProblem gradients(backward.compiled.launch, data, seed + 1000);
  gradients.poisonGradients();
  for (DeviceBuffer &gradient : gradients.captureGrads)
    gradient.fill32(0x7FC00000u); // NaN: the launch must clear them
  AttnBackwardArgs backwardArgs = gradients.args(data, options.deterministic);
  backwardArgs.captureGradSum = options.captureGradSum;
  if (coverage) {
    backwardArgs.tileCoverage = forwardArgs.tileCoverage;
    backwardArgs.coverageBlockM = forward.compiled.launch.blockM;
    backwardArgs.coverageBlockN = forward.compiled.launch.blockN;
  }
  launchBackward(backward.functions, backward.compiled.launch, backwardArgs, nullptr);
  ATTN_CU_CHECK(cuCtxSynchronize);

  std::shared_ptr<CaptureGradients> expectedCaptures;
  reference::Problem problem =
      referenceProblemFromSpec(spec, shape.batch, shape.seqlenQ, shape.seqlenK,
                               gputest::hostCaptures(data), &expectedCaptures);
  const harness::ReferenceGradients expected =
      harness::computeReferenceGradients(problem, data, gradients);
  INFO("spec: " << spec << "B=" << shape.batch << " Sq=" << shape.seqlenQ
                << " Sk=" << shape.seqlenK << " headMajor=" << shape.headMajor);
  gputest::checkGradients(
      harness::compareGradients(problem, expected, gradients, backward.compiled.launch.dtype));
  REQUIRE(expectedCaptures->size() == gradients.captureGrads.size());
  for (size_t index = 0; index < gradients.captureGrads.size(); ++index) {
    const harness::CaptureGradientError error = harness::compareCaptureGradient(
        (*expectedCaptures)[index], gradients.captureGrads[index].download<float>());
    INFO("capture gradient " << index << ": rel-L2 " << error.relativeL2
                             << ", max error / max " << error.maxErrorOverMax);
    // Sums over every pair of fp32 products of bf16 inputs, against double.
    CHECK(error.passed(2e-2));
  }
}

const std::vector<harness::Shape> &awkwardShapes() {
  static const std::vector<harness::Shape> shapes = {
      {2, 300, 300, false}, // not a tile multiple
      {1, 200, 333, false}, // Sq < Sk
      {1, 333, 130, true},  // Sq > Sk: bottom-right rows with no key; head-major
  };
  return shapes;
}

struct Variant {
  const char *example;
  CaptureMaker captures;
};

const std::vector<Variant> &regionVariants() {
  static const std::vector<Variant> variants = {
      {"alibi_causal_hd128.mlir", gputest::addSlopes},
      {"softcap_causal_hd128.mlir", {}},
      {"relpos_bias_causal_hd128.mlir", kPositionTable},
      {"document_mask_hd128.mlir", gputest::addDocuments},
      {"longformer_hd128.mlir", {}},
      {"prefix_lm_hd128.mlir", {}},
      {"chunked_local_hd128.mlir", {}},
      {"bigbird_hd128.mlir", addBlocks},
      {"alibi_learned_hd128.mlir", gputest::addSlopes},
      {"relpos_learned_hd128.mlir", kPositionTable},
      {"t5_bias_hd128.mlir", kBucketTable},
  };
  return variants;
}

} // namespace

TEST_CASE("the backward of every example with regions matches the reference",
          "[gpu][backward][mods]") {
  uint64_t seed = 100;
  for (const Variant &variant : regionVariants())
    for (const harness::Shape &shape : awkwardShapes()) {
      INFO(variant.example);
      runBackwardVariant(exampleWithHeads(variant.example), shape, variant.captures, seed++);
    }
}

TEST_CASE("the forward's tile coverage lets the backward skip a buffer mask's empty steps",
          "[gpu][backward][mods]") {
  const std::string documents = exampleWithHeads("document_mask_hd128.mlir");
  const std::string bigbird = exampleWithHeads("bigbird_hd128.mlir");
  uint64_t seed = 500;
  for (const harness::Shape &shape : awkwardShapes()) {
    runBackwardVariant(documents, shape, gputest::addDocuments, seed++, withCoverage());
    runBackwardVariant(bigbird, shape, addBlocks, seed++, withCoverage());
  }
  // Head dim 64: other forward and backward tiles.
  runBackwardVariant(replaceAll(documents, "head_dim = 128", "head_dim = 64"),
                     {2, 700, 900, false}, gputest::addDocuments, seed++, withCoverage());
}

TEST_CASE("mask_mods' step lists in the deterministic mode, at head dims 64 and 256 and in MQA",
          "[gpu][backward][mods]") {
  // The deterministic mode lists every step, marking the full ones; head dim
  // 256's split columns always order their additions; MQA lists 4 query
  // heads' steps a block.
  RunOptions deterministic;
  deterministic.deterministic = true;
  RunOptions deterministicCoverage = withCoverage();
  deterministicCoverage.deterministic = true;
  const std::string prefix = exampleWithHeads("prefix_lm_hd128.mlir");
  runBackwardVariant(prefix, {2, 300, 300, false}, {}, 600, deterministic);
  runBackwardVariant(exampleWithHeads("document_mask_hd128.mlir"), {1, 200, 333, false},
                     gputest::addDocuments, 601, deterministicCoverage);
  runBackwardVariant(replaceAll(prefix, "head_dim = 128", "head_dim = 256"), {1, 333, 130, true},
                     {}, 602);
  runBackwardVariant(replaceAll(exampleWithHeads("longformer_hd128.mlir"), "head_dim = 128",
                                "head_dim = 64"),
                     {2, 700, 900, false}, {}, 603);
  runBackwardVariant(exampleWithHeads("chunked_local_hd128.mlir", "q_heads = 4, kv_heads = 1"),
                     {2, 300, 500, false}, {}, 604);
  runBackwardVariant(exampleWithHeads("bigbird_hd128.mlir", "q_heads = 4, kv_heads = 1"),
                     {1, 500, 500, false}, addBlocks, 605, withCoverage());
}

TEST_CASE("a buffer mask_mod beside learnable slopes: the diagonal walk's mask",
          "[gpu][backward][mods]") {
  // A mask_mod with a learnable capture walks the pairs diagonal by
  // diagonal, testing the mask 8 pairs at a time; the slopes' gradient sums
  // over the kept pairs only.
  const std::string spec =
      "attn.kernel @document_alibi\n"
      "  problem = #attn.problem<q_heads = 4, kv_heads = 2, head_dim = 128, element_type = bf16>\n"
      "  mask = #attn.causal<bottom_right> normalizer = #attn.softmax\n"
      "  captures = [#attn.capture<\"document\", i32, [batch, seqlen_k]>,\n"
      "              #attn.capture<\"slopes\", f32, [q_heads], grad>]\n"
      "  mask_mod {\n"
      "  ^bb0(%b: index, %h: index, %q: index, %kv: index, %document: memref<?x?xi32>,\n"
      "       %slopes: memref<?xf32>):\n"
      "    %dq = memref.load %document[%b, %q] : memref<?x?xi32>\n"
      "    %dk = memref.load %document[%b, %kv] : memref<?x?xi32>\n"
      "    %same = arith.cmpi eq, %dq, %dk : i32\n"
      "    attn.yield %same : i1\n"
      "  }\n"
      "  score_mod {\n"
      "  ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %document: memref<?x?xi32>,\n"
      "       %slopes: memref<?xf32>):\n"
      "    %slope = memref.load %slopes[%h] : memref<?xf32>\n"
      "    %qi = arith.index_cast %q : index to i32\n"
      "    %kvi = arith.index_cast %kv : index to i32\n"
      "    %qf = arith.sitofp %qi : i32 to f32\n"
      "    %kvf = arith.sitofp %kvi : i32 to f32\n"
      "    %distance = arith.subf %qf, %kvf : f32\n"
      "    %bias = arith.mulf %slope, %distance : f32\n"
      "    %biased = arith.subf %s, %bias : f32\n"
      "    attn.yield %biased : f32\n"
      "  }\n";
  const CaptureMaker documentsAndSlopes = [](harness::ForwardProblem &data,
                                             const AttnLaunchConfig &launch,
                                             const harness::Shape &shape,
                                             std::mt19937_64 &random) {
    gputest::addDocuments(data, launch, shape, random);
    gputest::addSlopes(data, launch, shape, random);
  };
  for (const char *headDim : {"head_dim = 64", "head_dim = 128"}) {
    const std::string text = replaceAll(spec, "head_dim = 128", headDim);
    runBackwardVariant(text, {2, 300, 300, false}, documentsAndSlopes, 700);
    runBackwardVariant(text, {1, 200, 333, false}, documentsAndSlopes, 701);
  }
}

TEST_CASE("a backward config whose step list disagrees with its module is refused",
          "[gpu][backward][mods]") {
  // The main kernel of a listing module reads the list unchecked.
  LoadedBackward &listing = gputest::loadBackward(exampleWithHeads("prefix_lm_hd128.mlir"));
  AttnLaunchConfig config = listing.compiled.launch;
  REQUIRE(config.stepList == 1);
  config.stepList = 0;
  CHECK_THROWS_WITH(loadBackwardFunctions(listing.module, config),
                    Catch::StartsWith("config: step_list is 0, but the module's main kernel "
                                      "walks a step list"));
  LoadedBackward &dense = gputest::loadBackward(exampleWithHeads("causal_hd128.mlir"));
  config = dense.compiled.launch;
  REQUIRE(config.stepList == 0);
  config.stepList = 1;
  CHECK_THROWS_WITH(loadBackwardFunctions(dense.module, config),
                    Catch::StartsWith("config: step_list is 1, but the module's main kernel "
                                      "walks no step list"));
}

TEST_CASE("regions in the backward at head dims 64 and 256, f16 and MQA", "[gpu][backward][mods]") {
  const std::string softcap = exampleWithHeads("softcap_causal_hd128.mlir");
  const std::string slopes = exampleWithHeads("alibi_learned_hd128.mlir");
  for (const char *headDim : {"head_dim = 64", "head_dim = 256"}) {
    runBackwardVariant(replaceAll(softcap, "head_dim = 128", headDim), {1, 257, 190, false}, {},
                       200);
    runBackwardVariant(replaceAll(slopes, "head_dim = 128", headDim), {2, 190, 257, false},
                       gputest::addSlopes, 201);
  }
  runBackwardVariant(replaceAll(softcap, "bf16", "f16"), {1, 300, 300, false}, {}, 202);
  runBackwardVariant(exampleWithHeads("t5_bias_hd128.mlir", "q_heads = 4, kv_heads = 1"),
                     {2, 200, 200, false}, kBucketTable, 203);
}

TEST_CASE("a learnable soft-capped ALiBi: capture gradients through tanh",
          "[gpu][backward][mods]") {
  // The slope's gradient depends on the score through tanh's derivative.
  const std::string spec = replaceAll(
      exampleWithHeads("alibi_learned_hd128.mlir"),
      "      attn.yield %biased : f32",
      "      %cap = arith.constant 20.0 : f32\n"
      "      %inverse = arith.constant 0.05 : f32\n"
      "      %scaled = arith.mulf %biased, %inverse : f32\n"
      "      %squashed = math.tanh %scaled : f32\n"
      "      %capped = arith.mulf %squashed, %cap : f32\n"
      "      attn.yield %capped : f32");
  REQUIRE(spec.find("math.tanh") != std::string::npos);
  runBackwardVariant(spec, {2, 300, 300, false}, gputest::addSlopes, 300);
  runBackwardVariant(spec, {1, 333, 130, false}, gputest::addSlopes, 301);
}

TEST_CASE("two learnable captures: a relative-position table beside a per-head bias",
          "[gpu][backward][mods]") {
  // Only a kernel's one learnable capture is summed by diagonal: here the
  // table keeps the per-pair element test and the bias is summed a step at
  // a time.
  std::string spec = replaceAll(
      exampleWithHeads("relpos_learned_hd128.mlir"),
      "captures = [#attn.capture<\"bias\", f32, [q_heads, ?], grad>]",
      "captures = [#attn.capture<\"bias\", f32, [q_heads, ?], grad>, "
      "#attn.capture<\"slopes\", f32, [q_heads], grad>]");
  spec = replaceAll(spec, "%bias: memref<?x?xf32>):",
                    "%bias: memref<?x?xf32>, %slopes: memref<?xf32>):");
  spec = replaceAll(spec, "      attn.yield %biased : f32",
                    "      %slope = memref.load %slopes[%h] : memref<?xf32>\n"
                    "      %both = arith.addf %biased, %slope : f32\n"
                    "      attn.yield %both : f32");
  REQUIRE(spec.find("%both") != std::string::npos);
  REQUIRE(spec.find("%slopes: memref") != std::string::npos);
  const CaptureMaker tableAndSlopes = [](harness::ForwardProblem &data,
                                         const AttnLaunchConfig &launch,
                                         const harness::Shape &shape, std::mt19937_64 &random) {
    kPositionTable(data, launch, shape, random);
    gputest::addSlopes(data, launch, shape, random);
  };
  runBackwardVariant(spec, {2, 300, 300, false}, tableAndSlopes, 310);
  runBackwardVariant(spec, {1, 333, 130, true}, tableAndSlopes, 311);
}

TEST_CASE("score_mod's diagonal values at head dims 64 and 256, and two values of one table",
          "[gpu][backward][mods]") {
  // Each warp evaluates a step's diagonals once (bwd/score_diagonals.cuh):
  // head dim 64 takes 128 query columns a step (four words a lane), 256
  // splits them over the consumers (32 each: one word).
  const std::string positions = exampleWithHeads("relpos_learned_hd128.mlir");
  runBackwardVariant(replaceAll(positions, "head_dim = 128", "head_dim = 64"),
                     {1, 300, 257, false}, kPositionTable, 320);
  runBackwardVariant(replaceAll(positions, "head_dim = 128", "head_dim = 256"),
                     {2, 190, 257, false}, kPositionTable, 321);
  runBackwardVariant(exampleWithHeads("relpos_bias_causal_hd128.mlir", "q_heads = 4, kv_heads = 1"),
                     {2, 257, 190, true}, kPositionTable, 322);
  // bias[h, q - kv + 8191] + bias[h, kv - q + 8191] / 2: two staged values;
  // the table's two additions keep the per-pair element test.
  const std::string mirrored = replaceAll(
      positions, "      %biased = arith.addf %s, %value : f32\n",
      "      %mirrored_shifted = arith.addi %kv, %offset : index\n"
      "      %mirrored = arith.subi %mirrored_shifted, %q : index\n"
      "      %other = memref.load %bias[%h, %mirrored] : memref<?x?xf32>\n"
      "      %half = arith.constant 0.5 : f32\n"
      "      %scaled = arith.mulf %other, %half : f32\n"
      "      %first = arith.addf %s, %value : f32\n"
      "      %biased = arith.addf %first, %scaled : f32\n");
  REQUIRE(mirrored.find("%mirrored") != std::string::npos);
  runBackwardVariant(mirrored, {2, 300, 300, false}, kPositionTable, 323);
  runBackwardVariant(mirrored, {1, 333, 130, true}, kPositionTable, 324);
}

TEST_CASE("the key tile's diagonal sums across query heads, rotated walks and step lists",
          "[gpu][backward][mods]") {
  // A plan with room sums a step's diagonals over its key tile in shared
  // memory and carries them to the next query block of the same head
  // (bwd/diagonal_sums.cuh). Here a block walks 4 query heads, the
  // deterministic mode rotates its query blocks (the last is followed by
  // the first), and a buffer mask_mod's step list skips the empty steps.
  const std::string positions =
      exampleWithHeads("relpos_learned_hd128.mlir", "q_heads = 4, kv_heads = 1");
  runBackwardVariant(positions, {2, 300, 257, false}, kPositionTable, 330);
  RunOptions deterministic;
  deterministic.deterministic = true;
  runBackwardVariant(positions, {1, 700, 700, true}, kPositionTable, 331, deterministic);
  std::string documents = replaceAll(
      exampleWithHeads("relpos_learned_hd128.mlir", "q_heads = 4, kv_heads = 2"),
      "captures = [#attn.capture<\"bias\", f32, [q_heads, ?], grad>]",
      "captures = [#attn.capture<\"document\", i32, [batch, seqlen_k]>, "
      "#attn.capture<\"bias\", f32, [q_heads, ?], grad>]\n"
      "    mask_mod {\n"
      "    ^bb0(%b: index, %h: index, %q: index, %kv: index, %document: memref<?x?xi32>, "
      "%bias: memref<?x?xf32>):\n"
      "      %dq = memref.load %document[%b, %q] : memref<?x?xi32>\n"
      "      %dk = memref.load %document[%b, %kv] : memref<?x?xi32>\n"
      "      %same = arith.cmpi eq, %dq, %dk : i32\n"
      "      attn.yield %same : i1\n"
      "    }");
  documents = replaceAll(documents, "%kv: index, %bias: memref<?x?xf32>):\n      %offset",
                         "%kv: index, %document: memref<?x?xi32>, %bias: memref<?x?xf32>):\n"
                         "      %offset");
  REQUIRE(documents.find("mask_mod") != std::string::npos);
  REQUIRE(documents.find("%document: memref<?x?xi32>, %bias: memref<?x?xf32>):\n      %offset") !=
          std::string::npos);
  const CaptureMaker documentsAndTable = [](harness::ForwardProblem &data,
                                            const AttnLaunchConfig &launch,
                                            const harness::Shape &shape, std::mt19937_64 &random) {
    gputest::addDocuments(data, launch, shape, random);
    kPositionTable(data, launch, shape, random);
  };
  runBackwardVariant(documents, {2, 300, 300, false}, documentsAndTable, 332);
  runBackwardVariant(documents, {1, 700, 900, false}, documentsAndTable, 333, withCoverage());
}

TEST_CASE("the backward through regions on small shapes, for the sanitizers",
          "[gpu][backward][mods][sanitize]") {
  runBackwardVariant(exampleWithHeads("alibi_learned_hd128.mlir"), {1, 130, 70, false},
                     gputest::addSlopes, 400);
  runBackwardVariant(exampleWithHeads("document_mask_hd128.mlir"), {2, 70, 130, false},
                     gputest::addDocuments, 401);
  runBackwardVariant(exampleWithHeads("t5_bias_hd128.mlir"), {1, 100, 100, false}, kBucketTable,
                     402);
  // The key tile's diagonal sums, carried over query blocks and heads.
  runBackwardVariant(exampleWithHeads("relpos_learned_hd128.mlir", "q_heads = 4, kv_heads = 1"),
                     {1, 200, 150, false}, kPositionTable, 405);
  runBackwardVariant(exampleWithHeads("document_mask_hd128.mlir"), {1, 200, 150, false},
                     gputest::addDocuments, 403, withCoverage());
  // A step list of every step.
  RunOptions deterministic;
  deterministic.deterministic = true;
  runBackwardVariant(exampleWithHeads("prefix_lm_hd128.mlir"), {1, 150, 200, false}, {}, 404,
                     deterministic);
}

namespace {
/// Launches the backward of `spec` `runs` times on the same inputs: each
/// run's capture gradients, and in the deterministic mode dq, dk and dv,
/// must be the first run's bits.
void checkRepeatable(const std::string &spec, const harness::Shape &shape,
                     const CaptureMaker &captures, uint64_t seed, bool deterministic, int runs) {
  LoadedKernel &forward = gputest::loadKernel(spec);
  LoadedBackward &backward = gputest::loadBackward(spec);
  harness::ForwardProblem data(forward.compiled.launch, shape, seed);
  gputest::addCaptures(data, forward.compiled.launch, shape, captures, seed);
  AttnForwardArgs forwardArgs = data.args();
  gputest::PreparedBuffers prepared = gputest::prepare(forward, forwardArgs, gputest::kNothing);
  launchForward(forward.function, forward.compiled.launch, forwardArgs, nullptr);
  harness::BackwardProblem gradients(backward.compiled.launch, data, seed + 1000);
  REQUIRE_FALSE(gradients.captureGrads.empty());
  const AttnBackwardArgs args = gradients.args(data, deterministic);
  std::vector<std::vector<float>> first;
  for (int run = 0; run < runs; ++run) {
    for (DeviceBuffer &gradient : gradients.captureGrads)
      gradient.fill32(0x7FC00000u);
    launchBackward(backward.functions, backward.compiled.launch, args, nullptr);
    ATTN_CU_CHECK(cuCtxSynchronize);
    std::vector<std::vector<float>> results;
    for (DeviceBuffer &gradient : gradients.captureGrads)
      results.push_back(gradient.download<float>());
    if (deterministic)
      for (const harness::HostDeviceTensor *tensor : {&gradients.dq, &gradients.dk, &gradients.dv})
        results.push_back(harness::downloadBSHD(*tensor));
    if (run == 0) {
      first = std::move(results);
      continue;
    }
    INFO("spec: " << spec << "run " << run << (deterministic ? ", deterministic" : ""));
    for (size_t index = 0; index < results.size(); ++index) {
      INFO("result " << index << " (capture gradients first, then dq, dk, dv)");
      REQUIRE(results[index].size() == first[index].size());
      CHECK(std::memcmp(results[index].data(), first[index].data(),
                        results[index].size() * sizeof(float)) == 0);
    }
  }
}
} // namespace

TEST_CASE("exact capture gradients are the same bits on every run; atomics match the reference",
          "[gpu][backward][mods]") {
  const std::string slopes = exampleWithHeads("alibi_learned_hd128.mlir");
  const std::string positions = exampleWithHeads("relpos_learned_hd128.mlir");
  const std::string buckets = exampleWithHeads("t5_bias_hd128.mlir");
  // Many key tiles and heads adding into each element, in both modes.
  const harness::Shape shape{2, 1000, 1000, false};
  for (bool deterministic : {false, true}) {
    checkRepeatable(slopes, shape, gputest::addSlopes, 600, deterministic, 20);
    checkRepeatable(positions, shape, kPositionTable, 601, deterministic, 20);
    checkRepeatable(buckets, shape, kBucketTable, 602, deterministic, 20);
  }
  RunOptions atomics;
  atomics.captureGradSum = AttnBackwardArgs::CaptureGradSum::Atomic;
  runBackwardVariant(slopes, {2, 300, 300, false}, gputest::addSlopes, 603, atomics);
  runBackwardVariant(buckets, {1, 333, 130, true}, kBucketTable, 604, atomics);
  RunOptions deterministic;
  deterministic.deterministic = true;
  runBackwardVariant(positions, {2, 300, 300, false}, kPositionTable, 605, deterministic);
}
