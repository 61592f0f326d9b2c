// The backward kernels against the CPU reference's gradients (double) on
// awkward shapes: lengths that are not tile multiples, Sq != Sk both ways
// (fully masked rows under bottom-right alignment), GQA and MQA (dK and dV
// summed over a group), head-major strides, every mask of the backward,
// both element types, both modes; and the deterministic mode's bitwise
// reproducibility.
#include <catch2/catch.hpp>

#include "AttnHarness.h"
#include "BackwardHarness.h"
#include "LoadedBackward.h"
#include "LoadedKernel.h"
#include "attn/Compiler/Compiler.h"
#include "attn/Compiler/Jit.h"

#include <cstring>
#include <map>
#include <tuple>
#include <sstream>

using namespace attn;
using attn::gputest::checkGradients;
using attn::gputest::LoadedBackward;
using attn::gputest::loadBackward;
using attn::gputest::LoadedKernel;
using attn::gputest::loadKernel;
using attn::gputest::specText;

namespace {

struct Case {
  int64_t qHeads, kvHeads;
  harness::Shape shape;
};

/// Runs the forward, then the backward, of `spec` on random inputs and
/// compares the gradients with the reference's.
void checkBackward(const std::string &spec, const Case &testCase, uint64_t seed,
                   bool deterministic, const CompileOptions &backwardOptions = {}) {
  LoadedKernel &forward = loadKernel(spec);
  LoadedBackward &backward = loadBackward(spec, backwardOptions);
  harness::ForwardProblem data(forward.compiled.launch, testCase.shape, seed);
  AttnForwardArgs forwardArgs = data.args();
  launchForward(forward.function, forward.compiled.launch, forwardArgs, nullptr);
  harness::BackwardProblem gradients(backward.compiled.launch, data, seed + 1000);
  gradients.poisonGradients();
  launchBackward(backward.functions, backward.compiled.launch,
                 gradients.args(data, deterministic), nullptr);
  ATTN_CU_CHECK(cuCtxSynchronize);

  reference::Problem problem = referenceProblemFromSpec(
      spec, testCase.shape.batch, testCase.shape.seqlenQ, testCase.shape.seqlenK);
  const harness::ReferenceGradients expected =
      harness::computeReferenceGradients(problem, data, gradients);
  const harness::GradientComparison result =
      harness::compareGradients(problem, expected, gradients, backward.compiled.launch.dtype);
  INFO("spec: " << spec << "B=" << testCase.shape.batch << " Sq=" << testCase.shape.seqlenQ
                << " Sk=" << testCase.shape.seqlenK << " Hq=" << testCase.qHeads
                << " Hkv=" << testCase.kvHeads << " headMajor=" << testCase.shape.headMajor
                << " deterministic=" << deterministic);
  checkGradients(result);
}

const std::vector<Case> &awkwardCases() {
  static const std::vector<Case> cases = {
      {2, 1, {2, 1, 1, false}},      // one query, one key
      {8, 1, {1, 77, 300, false}},   // GQA 8:1, Sq < Sk
      {2, 2, {2, 300, 77, false}},   // Sq > Sk: bottom-right rows with no key
      {4, 1, {1, 200, 333, true}},   // MQA, head-major strides
      {2, 1, {1, 513, 513, false}},  // one past a tile multiple
  };
  return cases;
}

const auto &kMasks = gputest::kBuiltInMasks;

} // namespace

TEST_CASE("backward kernels match the reference on awkward shapes", "[gpu][backward]") {
  const int headDim = GENERATE(64, 128, 256);
  const std::string element = GENERATE(std::string("bf16"), std::string("f16"));
  const std::string mask = GENERATE(from_range(std::begin(kMasks), std::end(kMasks)));
  uint64_t seed = 1;
  for (const Case &testCase : awkwardCases())
    checkBackward(specText(headDim, element, mask, testCase.qHeads, testCase.kvHeads), testCase,
                  seed++, /*deterministic=*/seed % 2 == 0);
}

TEST_CASE("backward plans with one consumer or one stage match the reference",
          "[gpu][backward]") {
  // block_n 64 (one consumer warpgroup): head dim 128 then splits dQ by
  // rows as head dim 64 does with two, and head dim 256 walks two passes
  // of 128 columns instead of splitting them between two consumers.
  const auto [headDim, overrideText] =
      GENERATE(std::make_tuple(64, std::string("consumer_warpgroups=1,block_m=64,consumer_registers=256")),
               std::make_tuple(64, std::string("stages=1")),
               std::make_tuple(128, std::string("consumer_warpgroups=1,block_m=64,consumer_registers=256")),
               std::make_tuple(128, std::string("stages=1")),
               std::make_tuple(256, std::string("consumer_warpgroups=1")));
  CompileOptions options;
  options.tileOverride = overrideText;
  checkBackward(specText(headDim, "bf16", kMasks[1], 4, 2), {4, 2, {2, 190, 190, false}}, 7,
                false, options);
}

TEST_CASE("the 80-row plan (dQ transposed) matches the reference under every mask",
          "[gpu][backward]") {
  // The default plan at head dim 128 without a mask; a tuned plan may take
  // it under the others. Steps of 80 rows meet key tiles of 128 off their
  // boundaries, and the padded rows of a last block of 80.
  const std::string element = GENERATE(std::string("bf16"), std::string("f16"));
  const std::string mask = GENERATE(from_range(std::begin(kMasks), std::end(kMasks)));
  CompileOptions options;
  options.tileOverride = "block_m=80";
  uint64_t seed = 11;
  for (const Case &testCase : awkwardCases())
    checkBackward(specText(128, element, mask, testCase.qHeads, testCase.kvHeads), testCase, seed++,
                  /*deterministic=*/seed % 2 == 1, options);
}

TEST_CASE("the deterministic backward is bitwise reproducible", "[gpu][backward]") {
  // Many key tiles meet every query block, and 8 query heads share a kv
  // head: the order of dQ's additions is what varies between runs. Each of
  // the mode's orders: rotated walks (Sq = Sk, no mask), walks from the
  // first query block (Sq < Sk), masked walks.
  const int headDim = GENERATE(64, 128, 256);
  const auto [mask, seqlenQ, seqlenK] =
      GENERATE(std::make_tuple(kMasks[0], 1024, 1024), std::make_tuple(kMasks[0], 1024, 2048),
               std::make_tuple(kMasks[2], 1500, 1024));
  const std::string spec = specText(headDim, "bf16", mask, 8, 1);
  LoadedKernel &forward = loadKernel(spec);
  LoadedBackward &backward = loadBackward(spec);
  harness::ForwardProblem data(forward.compiled.launch, {1, seqlenQ, seqlenK, false}, 5);
  AttnForwardArgs forwardArgs = data.args();
  launchForward(forward.function, forward.compiled.launch, forwardArgs, nullptr);
  harness::BackwardProblem gradients(backward.compiled.launch, data, 6);
  std::vector<float> first[3];
  for (int run = 0; run < 5; ++run) {
    gradients.poisonGradients();
    launchBackward(backward.functions, backward.compiled.launch,
                   gradients.args(data, /*deterministic=*/true), nullptr);
    ATTN_CU_CHECK(cuCtxSynchronize);
    const std::vector<float> now[3] = {harness::downloadBSHD(gradients.dq),
                                       harness::downloadBSHD(gradients.dk),
                                       harness::downloadBSHD(gradients.dv)};
    for (int tensor = 0; tensor < 3; ++tensor) {
      if (run == 0)
        first[tensor] = now[tensor];
      else
        CHECK(std::memcmp(now[tensor].data(), first[tensor].data(),
                          now[tensor].size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("backward arguments are checked before anything is launched", "[gpu][backward]") {
  const std::string spec = specText(128, "bf16", kMasks[1], 4, 2);
  LoadedKernel &forward = loadKernel(spec);
  LoadedBackward &backward = loadBackward(spec);
  harness::ForwardProblem data(forward.compiled.launch, {1, 128, 128, false}, 3);
  harness::BackwardProblem gradients(backward.compiled.launch, data, 4);
  const AttnLaunchConfig &launch = backward.compiled.launch;

  AttnBackwardArgs args = gradients.args(data);
  args.dk = gradients.dq.view; // query heads where kv heads belong
  CHECK_THROWS_WITH(launchBackward(backward.functions, launch, args, nullptr),
                    Catch::StartsWith("dk: 4 heads"));
  args = gradients.args(data);
  args.workspaceBytes = 64;
  CHECK_THROWS_WITH(launchBackward(backward.functions, launch, args, nullptr),
                    Catch::StartsWith("workspace: 64 bytes"));
  args = gradients.args(data);
  args.lse = nullptr;
  CHECK_THROWS_WITH(launchBackward(backward.functions, launch, args, nullptr),
                    Catch::StartsWith("lse: pointer is null"));
  // The forward module is not a backward one.
  CHECK_THROWS_WITH(launchBackward(backward.functions, forward.compiled.launch,
                                   gradients.args(data), nullptr),
                    Catch::StartsWith("config: the kernel is a forward module"));
}

TEST_CASE("backward on small shapes, for the sanitizers", "[gpu][backward][sanitize]") {
  // Every head dim's default plan, both modes, a causal mask with rows
  // that see no key and a GQA group, kept small for compute-sanitizer.
  const int headDim = GENERATE(64, 128, 256);
  const bool deterministic = GENERATE(false, true);
  checkBackward(specText(headDim, "bf16", kMasks[2], 4, 2), {4, 2, {2, 150, 130, false}}, 9,
                deterministic);
  // Head dim 128 without a mask: the 80-row plan.
  if (headDim == 128)
    checkBackward(specText(headDim, "bf16", kMasks[0], 4, 2), {4, 2, {2, 150, 130, false}}, 10,
                  deterministic);
}

TEST_CASE("backward over packed sequences matches the reference sequence by sequence",
          "[gpu][backward][packed]") {
  // Sequences end to end in tensors of batch 1: lengths that are not tile
  // multiples, an empty query sequence (its keys get zero gradients), one
  // with more queries than keys (bottom-right rows with no key), Sq != Sk.
  // Longformer's mask_mod, its band narrowed to |q - kv| < 40 beside 64
  // global tokens (in each sequence's positions), walks a step list sized
  // by the longest sequence.
  const int headDim = GENERATE(64, 128);
  const std::string mask = GENERATE(std::string(kMasks[0]), std::string(kMasks[2]),
                                    std::string(kMasks[3]), std::string("longformer"));
  const bool deterministic = GENERATE(false, true);
  const std::vector<int64_t> lengthsQ{100, 0, 257, 64, 190}, lengthsK{130, 50, 200, 64, 129};
  const std::string spec =
      mask == "longformer"
          ? gputest::replaceAll(
                gputest::replaceAll(gputest::exampleWithHeads("longformer_hd128.mlir",
                                                              "q_heads = 4, kv_heads = 2"),
                                    "head_dim = 128", "head_dim = " + std::to_string(headDim)),
                "arith.constant 256 : index", "arith.constant 40 : index")
          : specText(headDim, "bf16", mask, 4, 2);
  LoadedKernel &forward = loadKernel(spec);
  LoadedBackward &backward = loadBackward(spec);
  const AttnLaunchConfig &launch = backward.compiled.launch;
  PackedSequenceOffsets packed = uploadPackedSequences(lengthsQ, lengthsK);
  harness::ForwardProblem data(forward.compiled.launch, {1, packed.totalQ, packed.totalK, false},
                               21);
  AttnForwardArgs forwardArgs = data.args();
  forwardArgs.packed = packed.sequences;
  launchForward(forward.function, forward.compiled.launch, forwardArgs, nullptr);
  harness::BackwardProblem gradients(launch, data, 22, packed.sequences);
  gradients.poisonGradients();
  launchBackward(backward.functions, launch, gradients.args(data, deterministic), nullptr);
  ATTN_CU_CHECK(cuCtxSynchronize);

  // The reference of every sequence on its own, laid out as the packed
  // gradients, and the rows no pair reaches.
  const int64_t hq = launch.qHeads, hkv = launch.kvHeads, d = launch.headDim;
  harness::ReferenceGradients expected;
  expected.dq.assign(packed.totalQ * hq * d, 0.f);
  expected.dk.assign(packed.totalK * hkv * d, 0.f);
  expected.dv.assign(packed.totalK * hkv * d, 0.f);
  harness::MaskedRows masked;
  int64_t rowQ = 0, rowK = 0;
  for (size_t index = 0; index < lengthsQ.size(); ++index) {
    const int64_t sq = lengthsQ[index], sk = lengthsK[index];
    const reference::Problem problem = referenceProblemFromSpec(spec, 1, sq, sk);
    auto tensor = [d](const std::vector<float> &host, int64_t row, int64_t heads) {
      return reference::HostTensor{host.data() + row * heads * d, {0, heads * d, d, 1}};
    };
    reference::backward(problem, tensor(data.q.host, rowQ, hq), tensor(data.k.host, rowK, hkv),
                        tensor(data.v.host, rowK, hkv), tensor(gradients.dO.host, rowQ, hq),
                        expected.dq.data() + rowQ * hq * d, expected.dk.data() + rowK * hkv * d,
                        expected.dv.data() + rowK * hkv * d);
    const harness::MaskedRows rows = harness::maskedRowsOf(problem);
    masked.queries.insert(masked.queries.end(), rows.queries.begin(), rows.queries.end());
    masked.keys.insert(masked.keys.end(), rows.keys.begin(), rows.keys.end());
    rowQ += sq;
    rowK += sk;
  }
  const harness::GradientComparison result =
      harness::compareGradients(masked, expected, gradients, launch.dtype);
  INFO("spec: " << spec << "deterministic=" << deterministic);
  checkGradients(result);
}

TEST_CASE("Kernel::runBackward runs the JIT's backward of a spec", "[gpu][backward][jit]") {
  JitOptions options;
  options.diskCache = DiskCacheOptions{}; // memory only
  options.diskCache->directory.clear();
  options.tuningDatabase = "";
  Compiler compiler(options);
  const std::string spec = specText(128, "bf16", kMasks[1], 4, 2);
  const Compiler::TrainingKernels kernels = compiler.compileForTraining(spec, "jit.mlir");
  const harness::Shape shape{2, 200, 333, true};
  harness::ForwardProblem data(kernels.forward.launchConfig(), shape, 31);
  kernels.forward.run(data.args());
  harness::BackwardProblem gradients(kernels.backward.launchConfig(), data, 32);
  gradients.poisonGradients();
  const AttnBackwardArgs args = gradients.args(data);
  REQUIRE(kernels.backward.backwardWorkspaceBytes(args) <= gradients.workspace.size());
  kernels.backward.runBackward(args);
  ATTN_CU_CHECK(cuCtxSynchronize);
  const reference::Problem problem =
      referenceProblemFromSpec(spec, shape.batch, shape.seqlenQ, shape.seqlenK);
  const harness::GradientComparison result = harness::compareGradients(
      problem, harness::computeReferenceGradients(problem, data, gradients), gradients,
      DType::BF16);
  checkGradients(result);
}
