// Every head dim, element type and mask of the forward kernel against the CPU
// reference evaluator on awkward shapes: length 1, lengths that are not tile
// multiples, Sq != Sk both ways (with fully masked rows under bottom-right
// alignment), GQA 8:1 and MQA, head-major (non-BSHD) strides.
#include <catch2/catch.hpp>

#include "AttnHarness.h"
#include "LoadedKernel.h"
#include "attn/Compiler/Compiler.h"

#include <map>
#include <sstream>

using namespace attn;
using attn::gputest::LoadedKernel;
using attn::gputest::loadKernel;
using attn::gputest::specText;

namespace {

struct Case {
  int64_t qHeads, kvHeads;
  harness::Shape shape;
};

// With `withWorkspace`, the call gets the forward workspace, which it must
// use (a split tail).
void checkAgainstReference(int headDim, const std::string &element, const std::string &mask,
                           const Case &testCase, uint64_t seed,
                           const CompileOptions &options = {}, bool withWorkspace = false) {
  std::string spec = specText(headDim, element, mask, testCase.qHeads, testCase.kvHeads);
  LoadedKernel &kernel = loadKernel(spec, options);
  harness::ForwardProblem data(kernel.compiled.launch, testCase.shape, seed);
  AttnForwardArgs args = data.args();
  DeviceBuffer workspace;
  if (withWorkspace) {
    uint64_t bytes = forwardWorkspaceBytes(kernel.compiled.launch, args);
    REQUIRE(bytes > 0);
    workspace = DeviceBuffer(bytes);
    // NaN pieces and counters: a piece combined before it was written, or
    // a count the kernel did not start from 0, shows in the result.
    workspace.fill32(0x7fc00000u);
    args.workspace = workspace.data();
    args.workspaceBytes = workspace.size();
  }
  data.poisonOutputs();
  launchForward(kernel.function, kernel.compiled.launch, args, nullptr);
  ATTN_CU_CHECK(cuCtxSynchronize);

  reference::Problem problem = referenceProblemFromSpec(
      spec, testCase.shape.batch, testCase.shape.seqlenQ, testCase.shape.seqlenK);
  harness::Comparison result =
      harness::compareWithReference(problem, data, kernel.compiled.launch.dtype);
  INFO("spec: " << spec << "B=" << testCase.shape.batch << " Sq=" << testCase.shape.seqlenQ
                << " Sk=" << testCase.shape.seqlenK << " Hq=" << testCase.qHeads
                << " Hkv=" << testCase.kvHeads << " headMajor=" << testCase.shape.headMajor
                << "\nmax|dO|=" << result.maxAbsError << " rel-L2=" << result.relativeL2Error
                << " max|dLSE|=" << result.maxLseError << "\nfirst violation: "
                << result.firstViolation);
  CHECK(result.nonFinite == 0);
  CHECK(result.maskedRowMismatches == 0);
  CHECK(result.toleranceViolations == 0);
}

const std::vector<Case> &awkwardCases() {
  static const std::vector<Case> cases = {
      {2, 1, {2, 1, 1, false}},        // one query, one key
      {8, 1, {1, 77, 1000, false}},    // GQA 8:1, Sq < Sk
      {2, 2, {2, 1000, 77, false}},    // Sq > Sk: bottom-right rows with no key
      {4, 1, {1, 333, 1000, true}},    // MQA, head-major strides
      {2, 1, {1, 4097, 4097, false}},  // one past a tile multiple
  };
  return cases;
}

const auto &kMasks = gputest::kBuiltInMasks;

} // namespace

TEST_CASE("forward kernel matches the reference on awkward shapes", "[gpu]") {
  int headDim = GENERATE(64, 128, 256);
  std::string element = GENERATE(std::string("bf16"), std::string("f16"));
  std::string mask = GENERATE(from_range(std::begin(kMasks), std::end(kMasks)));
  uint64_t seed = 1;
  for (const Case &testCase : awkwardCases()) {
    // The longest shape is checked for every mask at head dim 128 and for the
    // plain kernel elsewhere, to keep the CPU reference's time in bounds.
    if (testCase.shape.seqlenQ > 4000 && headDim != 128 && mask != kMasks[0])
      continue;
    checkAgainstReference(headDim, element, mask, testCase, seed++);
  }
}

TEST_CASE("the plan for long keys matches the reference on awkward shapes", "[gpu]") {
  // Planned for 8192 keys, the unmasked head-dim-128 kernel takes 128 x 160
  // tiles (attn-tile's heuristic); it must be right at any length, the last
  // key tile partial included.
  CompileOptions options;
  options.tuningShape = "2,8192,8192";
  std::string element = GENERATE(std::string("bf16"), std::string("f16"));
  const LoadedKernel &kernel =
      loadKernel(specText(128, element, kMasks[0], 2, 1), options);
  REQUIRE(kernel.compiled.launch.blockN == 160);
  uint64_t seed = 100;
  for (const Case &testCase : awkwardCases())
    checkAgainstReference(128, element, kMasks[0], testCase, seed++, options);
  checkAgainstReference(128, element, kMasks[0], {2, 2, {1, 300, 2081, false}}, seed++, options);
}

TEST_CASE("the plans for causal key lengths match the reference on awkward shapes", "[gpu]") {
  // attn-tile's heuristic plans causal kernels by key length: at head dim
  // 64 128 x 128 tiles with three stages up to 1024 keys (two softmax chains
  // up to 512), at head dim 128 160-key tiles from 8192; a persistent grid
  // below 16384 keys. Each must be right at any length, under either alignment of
  // the causal mask.
  struct Plan {
    int headDim;
    const char *tuningShape;
    int blockM, blockN, persistentBlocksPerSm;
  };
  const Plan plan =
      GENERATE(Plan{64, "32,512,512", 128, 128, 1}, Plan{64, "16,1024,1024", 128, 128, 1},
               Plan{128, "2,8192,8192", 128, 160, 1}, Plan{128, "1,16384,16384", 128, 160, 0});
  CompileOptions options;
  options.tuningShape = plan.tuningShape;
  std::string element = GENERATE(std::string("bf16"), std::string("f16"));
  INFO("head dim " << plan.headDim << ", planned for " << plan.tuningShape << ", " << element);
  const LoadedKernel &kernel =
      loadKernel(specText(plan.headDim, element, kMasks[2], 2, 1), options);
  const AttnLaunchConfig &launch = kernel.compiled.launch;
  REQUIRE(launch.blockM == plan.blockM);
  REQUIRE(launch.blockN == plan.blockN);
  REQUIRE(launch.persistentBlocksPerSm == plan.persistentBlocksPerSm);
  uint64_t seed = 300;
  for (const char *mask : {kMasks[1], kMasks[2]})
    for (const Case &testCase : awkwardCases())
      checkAgainstReference(plan.headDim, element, mask, testCase, seed++, options);
}

TEST_CASE("the persistent schedule deals every causal tile once, in both orders", "[gpu]") {
  // A persistent causal grid takes its work tiles in rounds of one per
  // block, alternating direction; with more query blocks a head than a
  // quarter of the grid, in query-block-major order. Shapes with more tiles
  // than the H100's 132 blocks, the last round partial: head dim 64 (192
  // rows a tile) at 700 tokens, 4 query blocks a head, in the default order;
  // head dim 128 at 4250 tokens, 34 query blocks, query-block-major.
  std::string element = GENERATE(std::string("bf16"), std::string("f16"));
  uint64_t seed = 400;
  for (const char *mask : {kMasks[1], kMasks[2]}) {
    const Case shortRuns{16, 4, {3, 700, 700, false}};
    const Case longRuns{4, 1, {1, 4250, 4250, false}};
    REQUIRE(loadKernel(specText(64, element, mask, shortRuns.qHeads, shortRuns.kvHeads))
                .compiled.launch.persistentBlocksPerSm == 1);
    REQUIRE(loadKernel(specText(128, element, mask, longRuns.qHeads, longRuns.kvHeads))
                .compiled.launch.persistentBlocksPerSm == 1);
    checkAgainstReference(64, element, mask, shortRuns, seed++);
    checkAgainstReference(128, element, mask, longRuns, seed++);
  }
}

TEST_CASE("a persistent grid's partial last round, split along the keys, matches the reference",
          "[gpu]") {
  // Unmasked kernels: the last round's work tiles are cut into equal runs of
  // key tiles, one per block, and the pieces of a tile combined by the warp
  // that finishes last (ForwardTailSplit). Query lengths are searched for a
  // split on this GPU; Sk is no multiple of the key tile, and head-major
  // strides put O's batch stride apart from its rows'.
  struct SplitCase {
    int headDim;
    const char *element;
    int64_t qHeads, kvHeads, batch, seqlenK;
    bool headMajor;
  };
  // Key lengths of 17 or 18 key tiles of 128 (16 at least split) at head
  // dims 128 and 64 (192 query rows, three consumer warpgroups).
  const SplitCase split = GENERATE(SplitCase{128, "bf16", 4, 2, 2, 2100, false},
                                   SplitCase{64, "bf16", 8, 1, 1, 2200, true},
                                   SplitCase{128, "f16", 2, 2, 3, 2200, false});
  const std::string spec =
      specText(split.headDim, split.element, kMasks[0], split.qHeads, split.kvHeads);
  const LoadedKernel &kernel = loadKernel(spec);
  REQUIRE(kernel.compiled.launch.persistentBlocksPerSm == 1);
  const int multiprocessors = queryDevice(currentDevice()).multiprocessorCount;
  int64_t seqlenQ = 0;
  for (int64_t candidate = 600; candidate <= 8000 && seqlenQ == 0; candidate += 37) {
    const AttnLaunchConfig &launch = kernel.compiled.launch;
    int blocks = static_cast<int>(
        forwardGrid(launch, int(split.batch), int(candidate), multiprocessors).x);
    if (forwardTailSplitFor(launch, int(split.batch), int(candidate), int(split.seqlenK), blocks)
            .tiles > 0)
      seqlenQ = candidate;
  }
  INFO("head dim " << split.headDim << " " << split.element << ", Sq " << seqlenQ);
  REQUIRE(seqlenQ > 0);
  const Case testCase{split.qHeads, split.kvHeads,
                      {split.batch, seqlenQ, split.seqlenK, split.headMajor}};
  checkAgainstReference(split.headDim, split.element, kMasks[0], testCase, 500, {},
                        /*withWorkspace=*/true);
}

TEST_CASE("an explicit softmax scale is honoured", "[gpu]") {
  std::string spec =
      "attn.kernel @scaled problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, "
      "element_type = bf16, scale = 0.5> mask = #attn.no_mask normalizer = #attn.softmax\n";
  LoadedKernel &kernel = loadKernel(spec);
  harness::ForwardProblem data(kernel.compiled.launch, {1, 130, 200, false}, 7);
  data.poisonOutputs();
  launchForward(kernel.function, kernel.compiled.launch, data.args(), nullptr);
  ATTN_CU_CHECK(cuCtxSynchronize);
  reference::Problem problem = referenceProblemFromSpec(spec, 1, 130, 200);
  REQUIRE(problem.scale == Approx(0.5));
  harness::Comparison result = harness::compareWithReference(problem, data, DType::BF16);
  INFO("first violation: " << result.firstViolation);
  CHECK(result.passed());
}

TEST_CASE("a launch with mismatched arguments is refused before anything runs", "[gpu]") {
  std::string spec = specText(128, "bf16", "#attn.no_mask", 4, 2);
  LoadedKernel &kernel = loadKernel(spec);
  harness::ForwardProblem data(kernel.compiled.launch, {1, 64, 64, false}, 3);
  AttnForwardArgs args = data.args();
  args.k.shape[2] = 3; // kv heads that do not match the spec
  REQUIRE_THROWS_WITH(launchForward(kernel.function, kernel.compiled.launch, args, nullptr),
                      Catch::Contains("k"));
}
