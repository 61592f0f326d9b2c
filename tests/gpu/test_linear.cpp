// Linear attention and retention on the GPU against the CPU reference's
// parallel and recurrent forms: every feature map, normalization, fixed and
// gated decay, causal and not, GQA, sequence lengths that are not chunk
// multiples, head-major strides, carried state, a prefill split in two and
// the one-token step.
#include <catch2/catch.hpp>

#include "AttnHarness.h"
#include "LinearTestSupport.h"
#include "LoadedKernel.h"
#include "attn/Compiler/Jit.h"
#include "attn/Reference/LinearAttention.h"

#include <cmath>
#include <random>
#include <sstream>

using namespace attn;
using namespace attn::gputest;
using attn::gputest::LoadedKernel;
using attn::gputest::loadKernel;

namespace {

struct LinearCase {
  int qHeads = 4, kvHeads = 4, headDim = 128;
  std::string mask = "#attn.causal<top_left>";
  std::string normalizer = "#attn.retention";
  reference::FeatureMap featureMap = reference::FeatureMap::Identity;
  bool normalize = false, causal = true, gated = false, fixedDecay = true;
  float lowestLogDecay = -0.5f; // gated: log-decays drawn from [lowestLogDecay, 0]
  std::vector<double> gammas;   // fixed decay: per query head, else the multi-scale default
  std::string tile;             // a tile override, else the default plan
};

std::string specFor(const LinearCase &c) {
  std::ostringstream spec;
  spec << "attn.kernel @linear_test problem = #attn.problem<q_heads = " << c.qHeads
       << ", kv_heads = " << c.kvHeads << ", head_dim = " << c.headDim
       << ", element_type = bf16> mask = " << c.mask << " normalizer = " << c.normalizer << "\n";
  return spec.str();
}

LoadedKernel &loadCase(const LinearCase &c) {
  CompileOptions options;
  options.tileOverride = c.tile;
  return loadKernel(specFor(c), options);
}

// O of the device as fp32 in contiguous BSHD order.
std::vector<float> downloadOutput(const harness::ForwardProblem &data) {
  const TensorView &view = data.o.view;
  const uint16_t *bits = data.downloadOutput();
  std::vector<float> out;
  for (int64_t b = 0; b < view.shape[0]; ++b)
    for (int64_t s = 0; s < view.shape[1]; ++s)
      for (int64_t h = 0; h < view.shape[2]; ++h)
        for (int64_t d = 0; d < view.shape[3]; ++d)
          out.push_back(bf16ToFloat(bits[b * view.strides[0] + s * view.strides[1] +
                                         h * view.strides[2] + d * view.strides[3]]));
  return out;
}

reference::LinearProblem referenceProblem(const LinearCase &c, const AttnLaunchConfig &launch,
                                          const harness::Shape &shape, const float *logDecay) {
  reference::LinearProblem problem;
  problem.batch = shape.batch;
  problem.seqlen = shape.seqlenQ;
  problem.qHeads = c.qHeads;
  problem.kvHeads = c.kvHeads;
  problem.headDim = c.headDim;
  problem.scale = launch.scale;
  problem.featureMap = c.featureMap;
  problem.normalize = c.normalize;
  problem.causal = c.causal;
  if (c.gated)
    problem.logDecay = logDecay;
  else if (c.fixedDecay && !c.gammas.empty())
    problem.gamma = c.gammas;
  else if (c.fixedDecay)
    for (int h = 0; h < c.qHeads; ++h)
      problem.gamma.push_back(reference::multiScaleGamma(h));
  return problem;
}

// One chunkwise launch against both reference forms, with a random initial
// state (and key sum) when `withState`; checks O and the final state. With
// `segments` > 0 the sequence is split into that many segments (through a
// workspace), which must give the same result; the segment kernel's pieces
// then hold at least `minPieceChunks` chunks.
void checkCase(const LinearCase &c, harness::Shape shape, bool withState, uint64_t seed,
               int segments = 0, int minPieceChunks = 1) {
  LoadedKernel &kernel = loadCase(c);
  const AttnLaunchConfig &launch = kernel.compiled.launch;
  REQUIRE(launch.linearFamily == 1);
  shape.seqlenK = shape.seqlenQ;
  harness::ForwardProblem data(launch, shape, seed);
  std::mt19937_64 random(seed + 1);
  const size_t heads = size_t(shape.batch) * c.qHeads, d = size_t(c.headDim);

  reference::LinearState initial;
  std::vector<float> stateIn, keySumIn, logDecay;
  if (withState) {
    stateIn = randomValues(heads * d * d, random, -0.5f, 0.5f);
    initial.kv.assign(stateIn.begin(), stateIn.end());
    if (c.normalize) {
      keySumIn = randomValues(heads * d, random, 0.f, 4.f);
      initial.keySum.assign(keySumIn.begin(), keySumIn.end());
    }
  }
  if (c.gated)
    logDecay = randomValues(size_t(shape.batch) * shape.seqlenQ * c.qHeads, random, c.lowestLogDecay, 0.f);
  DeviceBuffer stateInBuffer = upload(stateIn), keySumInBuffer = upload(keySumIn);
  DeviceBuffer logDecayBuffer = upload(logDecay);
  DeviceBuffer stateOut(heads * d * d * sizeof(float)), keySumOut(heads * d * sizeof(float));

  AttnLinearArgs args;
  args.q = data.q.view;
  args.k = data.k.view;
  args.v = data.v.view;
  args.o = data.o.view;
  args.initialState = withState ? static_cast<const float *>(stateInBuffer.data()) : nullptr;
  args.finalState = static_cast<float *>(stateOut.data());
  if (c.normalize) {
    args.initialKeySum = withState ? static_cast<const float *>(keySumInBuffer.data()) : nullptr;
    args.finalKeySum = static_cast<float *>(keySumOut.data());
  }
  if (c.gated)
    args.logDecay = static_cast<const float *>(logDecayBuffer.data());
  LinearSplit split;
  DeviceBuffer workspace;
  if (segments > 0) {
    split = linearSplitFor(launch, shape.batch, shape.seqlenQ, segments);
    REQUIRE(split.segments >= 2);
    REQUIRE(split.segments <= segments);
    REQUIRE(int64_t(split.segments) * split.segmentChunks * 64 >= shape.seqlenQ);
    REQUIRE(split.stateChunks >= minPieceChunks);
    workspace = DeviceBuffer(std::max<uint64_t>(linearWorkspaceBytes(launch, shape.batch, split), 4));
    // NaN pieces: a main-kernel block that read them before the segment
    // kernel wrote them would fail the checks below.
    workspace.fill32(0x7fc00000u);
    args.workspace = workspace.data();
    args.workspaceBytes = workspace.size();
    args.segments = segments;
  }
  data.poisonOutputs();
  launchLinear(kernel.module, launch, args, nullptr);
  ATTN_CU_CHECK(cuCtxSynchronize);

  reference::LinearProblem problem = referenceProblem(c, launch, shape, logDecay.data());
  std::vector<float> parallel(data.q.host.size()), recurrent(data.q.host.size());
  reference::LinearState finalParallel, finalRecurrent;
  reference::linearForwardParallel(problem, hostTensor(data.q), hostTensor(data.k),
                                   hostTensor(data.v), parallel.data(), initial, &finalParallel);
  reference::linearForwardRecurrent(problem, hostTensor(data.q), hostTensor(data.k),
                                    hostTensor(data.v), recurrent.data(), initial, &finalRecurrent);
  // The two reference forms agree (they are independent computations).
  CHECK(relativeL2(recurrent, parallel) < 1e-5);

  std::vector<float> output = downloadOutput(data);
  double outputError = relativeL2(output, parallel);
  std::vector<float> state = stateOut.download<float>();
  state.resize(heads * d * d);
  double stateError = relativeL2(state, finalParallel.kv);
  INFO("spec: " << specFor(c) << "B=" << shape.batch << " S=" << shape.seqlenQ
                << " headMajor=" << shape.headMajor << " state=" << withState << " segments="
                << split.segments << " of " << split.segmentChunks << " chunks");
  INFO("O relative L2 error " << outputError << ", state " << stateError);
  // bf16 inputs, a bf16 copy of the state for Q S, bf16 weights and output.
  CHECK(outputError < 2e-2);
  CHECK(stateError < 1e-2);
  if (c.normalize) {
    std::vector<float> keySum = keySumOut.download<float>();
    keySum.resize(heads * d);
    // phi(k) is rounded to the element type in shared memory before it
    // feeds both the state product and the key sum: each term is off by at
    // most 2^-9 relative (bf16), which bounds the relative L2 error.
    CHECK(relativeL2(keySum, finalParallel.keySum) < 2e-3);
  }
}

} // namespace

TEST_CASE("retention with the multi-scale decay matches the reference", "[gpu][linear]") {
  LinearCase c;
  c.kvHeads = 2;
  checkCase(c, harness::Shape{2, 200, 200}, /*withState=*/false, 11);
  checkCase(c, harness::Shape{1, 64, 64}, /*withState=*/true, 12);
  checkCase(c, harness::Shape{1, 1, 1}, /*withState=*/true, 13);
}

TEST_CASE("retention with an explicit decay list, head dim 64", "[gpu][linear]") {
  LinearCase c;
  c.headDim = 64;
  c.qHeads = c.kvHeads = 2;
  c.normalizer = "#attn.retention<decay = [0.96875, 0.984375]>";
  // multiScaleGamma gives the same two values, so the reference needs no list.
  checkCase(c, harness::Shape{2, 129, 129, /*headMajor=*/true}, /*withState=*/true, 21);
}

TEST_CASE("gated retention matches the reference", "[gpu][linear]") {
  LinearCase c;
  c.normalizer = "#attn.retention<gated>";
  c.gated = true;
  checkCase(c, harness::Shape{2, 130, 130}, /*withState=*/true, 31);
  c.headDim = 64;
  checkCase(c, harness::Shape{1, 300, 300}, /*withState=*/false, 32);
  // Walks shorter than the producer's decay lookahead (one partial chunk,
  // two chunks), and 3 query heads over one KV head: the decays' words lie
  // an odd head count apart.
  c.headDim = 128;
  c.qHeads = 3;
  c.kvHeads = 1;
  checkCase(c, harness::Shape{2, 40, 40}, /*withState=*/true, 36);
  checkCase(c, harness::Shape{1, 100, 100}, /*withState=*/false, 37);
}

TEST_CASE("retention with strong decays stays finite", "[gpu][linear]") {
  // Log-decays down to -8 a token: within a chunk, e^(G_i - G_j) above the
  // diagonal reaches far past the float range, and must not enter P as
  // 0 * inf; the weights of early tokens and the inter-chunk factors
  // underflow to 0. Such chunks take the exact (unfactored) decay, and so
  // does a fixed gamma of 0.05 (a range of 63 x 4.3 bits), beside a mild
  // head that factors.
  LinearCase c;
  c.qHeads = c.kvHeads = 2;
  c.normalizer = "#attn.retention<decay = [0.05, 0.9]>";
  c.gammas = {0.05, 0.9};
  checkCase(c, harness::Shape{1, 200, 200}, /*withState=*/true, 35);
  c = LinearCase();
  c.normalizer = "#attn.retention<gated>";
  c.gated = true;
  c.lowestLogDecay = -8.f;
  checkCase(c, harness::Shape{2, 190, 190}, /*withState=*/true, 33);
  checkCase(c, harness::Shape{1, 300, 300}, /*withState=*/false, 34, /*segments=*/2);
}

TEST_CASE("linear attention: feature maps, normalization, causal and not", "[gpu][linear]") {
  LinearCase c;
  c.fixedDecay = false;
  c.kvHeads = 1;
  c.normalizer = "#attn.linear";
  checkCase(c, harness::Shape{1, 100, 100}, /*withState=*/true, 41);
  c.normalizer = "#attn.linear<feature_map = elu_plus_one, normalize = true>";
  c.featureMap = reference::FeatureMap::EluPlusOne;
  c.normalize = true;
  checkCase(c, harness::Shape{2, 65, 65}, /*withState=*/true, 42);
  c.headDim = 64;
  checkCase(c, harness::Shape{1, 257, 257, /*headMajor=*/true}, /*withState=*/false, 43);
  c.headDim = 128;
  c.mask = "#attn.no_mask";
  c.causal = false;
  c.normalizer = "#attn.linear<feature_map = relu>";
  c.featureMap = reference::FeatureMap::Relu;
  c.normalize = false;
  checkCase(c, harness::Shape{2, 150, 150}, /*withState=*/true, 44);
  c.normalizer = "#attn.linear<feature_map = elu_plus_one, normalize = true>";
  c.featureMap = reference::FeatureMap::EluPlusOne;
  c.normalize = true;
  checkCase(c, harness::Shape{1, 70, 70}, /*withState=*/false, 45);
}

TEST_CASE("a sequence split into segments matches the reference", "[gpu][linear]") {
  // Every variant with the segment kernel and the folded entry states: 2
  // and 3 segments, uneven last segments, the initial state folded in too.
  LinearCase c;
  c.kvHeads = 2;
  checkCase(c, harness::Shape{2, 300, 300}, /*withState=*/true, 71, /*segments=*/3);
  checkCase(c, harness::Shape{1, 129, 129}, /*withState=*/false, 72, /*segments=*/2);
  c.normalizer = "#attn.retention<gated>";
  c.gated = true;
  checkCase(c, harness::Shape{2, 330, 330}, /*withState=*/true, 73, /*segments=*/4);
  c.headDim = 64;
  checkCase(c, harness::Shape{1, 200, 200, /*headMajor=*/true}, /*withState=*/false, 74, 2);
  c = LinearCase();
  c.fixedDecay = false;
  c.normalizer = "#attn.linear<feature_map = elu_plus_one, normalize = true>";
  c.featureMap = reference::FeatureMap::EluPlusOne;
  c.normalize = true;
  checkCase(c, harness::Shape{2, 250, 250}, /*withState=*/true, 75, /*segments=*/3);
  c.mask = "#attn.no_mask";
  c.causal = false;
  checkCase(c, harness::Shape{1, 260, 260}, /*withState=*/true, 76, /*segments=*/5);
  c.normalizer = "#attn.linear<feature_map = relu>";
  c.featureMap = reference::FeatureMap::Relu;
  c.normalize = false;
  checkCase(c, harness::Shape{2, 190, 190}, /*withState=*/false, 77, /*segments=*/2);
}

TEST_CASE("one and two value slices a block match the reference", "[gpu][linear]") {
  // Both plans of head dim 128 through overrides: one value slice a block,
  // and both slices in one block (two consumer warpgroups sharing Q and K),
  // with the feature map applied by both warpgroups, each slice's key sum,
  // non-causal passes, gated decay, splits and carried state.
  LinearCase c;
  c.tile = "block_n=128";
  c.kvHeads = 2;
  checkCase(c, harness::Shape{2, 200, 200}, /*withState=*/true, 81, /*segments=*/3);
  checkCase(c, harness::Shape{1, 64, 64}, /*withState=*/true, 87);
  c.tile = "block_n=64";
  c.fixedDecay = false;
  c.kvHeads = 4;
  c.normalizer = "#attn.linear<feature_map = elu_plus_one, normalize = true>";
  c.featureMap = reference::FeatureMap::EluPlusOne;
  c.normalize = true;
  checkCase(c, harness::Shape{1, 150, 150}, /*withState=*/true, 82, /*segments=*/2);
  c.tile = "block_n=128";
  checkCase(c, harness::Shape{2, 150, 150}, /*withState=*/true, 86, /*segments=*/2);
  c.mask = "#attn.no_mask";
  c.causal = false;
  c.normalizer = "#attn.linear<feature_map = relu>";
  c.featureMap = reference::FeatureMap::Relu;
  c.normalize = false;
  c.tile = "block_n=128";
  checkCase(c, harness::Shape{2, 140, 140}, /*withState=*/true, 85, /*segments=*/2);
  c = LinearCase();
  c.tile = "block_n=128";
  c.normalizer = "#attn.retention<gated>";
  c.gated = true;
  checkCase(c, harness::Shape{2, 190, 190}, /*withState=*/true, 83);
  checkCase(c, harness::Shape{1, 330, 330}, /*withState=*/false, 84, /*segments=*/4);
  // Each plan gives the launch the threads it names.
  CHECK(loadCase(c).compiled.launch.threadsPerBlock == ATTN_LINEAR_THREADS(2));
  c.tile = "block_n=64";
  CHECK(loadCase(c).compiled.launch.threadsPerBlock == ATTN_LINEAR_THREADS(1));
}

TEST_CASE("the segment kernel's backward walk over pieces of several chunks matches the reference",
          "[gpu][linear]") {
  // Enough blocks (32 (head, batch) pairs at head dim 64) that each of the
  // 18 chunks' two segments splits into pieces of three chunks, which the
  // segment kernel walks last chunk first, weighting each token by the
  // decay to its piece's end: the fixed multi-scale decay, then per-token
  // gates, and an uneven last chunk.
  LinearCase c;
  c.headDim = 64;
  c.qHeads = c.kvHeads = 8;
  checkCase(c, harness::Shape{4, 1100, 1100}, /*withState=*/true, 78, /*segments=*/2,
            /*minPieceChunks=*/2);
  c.normalizer = "#attn.retention<gated>";
  c.gated = true;
  checkCase(c, harness::Shape{4, 1100, 1100}, /*withState=*/false, 79, /*segments=*/2,
            /*minPieceChunks=*/2);
}

TEST_CASE("a prefill in two halves equals one prefill, and the one-token step continues it",
          "[gpu][linear]") {
  LinearCase c;
  c.normalizer = "#attn.retention<gated>";
  c.gated = true;
  LoadedKernel &kernel = loadKernel(specFor(c));
  const AttnLaunchConfig &launch = kernel.compiled.launch;
  // Through the module's launch functions, and through the JIT kernel's
  // runLinear and decode (the kernels it looked up once at load).
  const bool throughJit = GENERATE(false, true);
  INFO((throughJit ? "attn::Kernel::runLinear and decode" : "launchLinear and launchDecode"));
  Kernel jitKernel;
  if (throughJit) {
    JitOptions options;
    options.diskCache = DiskCacheOptions{};
    jitKernel = Compiler(options).compile(specFor(c), "linear_jit.mlir");
  }
  auto prefill = [&](const AttnLinearArgs &args) {
    if (throughJit)
      jitKernel.runLinear(args, nullptr);
    else
      launchLinear(kernel.module, launch, args, nullptr);
  };
  const int64_t first = 100, second = 93, total = first + second;
  harness::ForwardProblem whole(launch, harness::Shape{1, total, total}, 51);
  std::mt19937_64 random(52);
  const size_t heads = size_t(c.qHeads), d = size_t(c.headDim);
  std::vector<float> logDecay = randomValues(size_t(total + 1) * heads, random, -0.3f, 0.f);
  DeviceBuffer logDecayBuffer = upload(logDecay);
  DeviceBuffer wholeState(heads * d * d * 4), halfState(heads * d * d * 4);

  auto slice = [](TensorView view, int64_t begin, int64_t length) {
    view.data = static_cast<char *>(view.data) + begin * view.strides[1] * 2;
    view.shape[1] = length;
    return view;
  };
  auto argsFor = [&](int64_t begin, int64_t length) {
    AttnLinearArgs args;
    args.q = slice(whole.q.view, begin, length);
    args.k = slice(whole.k.view, begin, length);
    args.v = slice(whole.v.view, begin, length);
    args.o = slice(whole.o.view, begin, length);
    args.logDecay = static_cast<const float *>(logDecayBuffer.data()) + begin * heads;
    return args;
  };
  // One prefill over all tokens (O poisoned first: a row it does not write
  // reads NaN), its sequence split.
  whole.poisonOutputs();
  AttnLinearArgs one = argsFor(0, total);
  one.finalState = static_cast<float *>(wholeState.data());
  // Split in two segments: the segment and fold kernels run too.
  const LinearSplit split = linearSplitFor(launch, 1, total, 2);
  REQUIRE(split.segments == 2);
  DeviceBuffer workspace(std::max<uint64_t>(linearWorkspaceBytes(launch, 1, split), 4));
  one.workspace = workspace.data();
  one.workspaceBytes = workspace.size();
  one.segments = 2;
  prefill(one);
  ATTN_CU_CHECK(cuCtxSynchronize);
  std::vector<float> oneOutput = downloadOutput(whole);
  std::vector<float> oneState = wholeState.download<float>();

  // The same in two halves, the second starting from the first's state,
  // updated in place (each block reads and writes only its own slice).
  whole.poisonOutputs();
  AttnLinearArgs firstHalf = argsFor(0, first), secondHalf = argsFor(first, second);
  firstHalf.finalState = static_cast<float *>(halfState.data());
  secondHalf.initialState = static_cast<const float *>(halfState.data());
  secondHalf.finalState = static_cast<float *>(halfState.data());
  prefill(firstHalf);
  prefill(secondHalf);
  ATTN_CU_CHECK(cuCtxSynchronize);
  std::vector<float> twoOutput = downloadOutput(whole);
  std::vector<float> twoState = halfState.download<float>();
  INFO("two halves against one prefill");
  CHECK(relativeL2(twoOutput, oneOutput) < 1e-2);
  CHECK(relativeL2(twoState, oneState) < 1e-2);

  // The one-token step after the whole prefill, against the recurrent
  // reference over total + 1 tokens (the extra token has random q, k, v).
  harness::ForwardProblem token(launch, harness::Shape{1, 1, 1}, 53);
  AttnDecodeArgs step;
  step.q = token.q.view;
  step.k = token.k.view;
  step.v = token.v.view;
  step.o = token.o.view;
  step.initialState = static_cast<const float *>(wholeState.data());
  step.finalState = static_cast<float *>(wholeState.data()); // in place
  step.logDecay = static_cast<const float *>(logDecayBuffer.data()) + total * heads;
  if (throughJit) {
    jitKernel.decode(step, nullptr);
  } else {
    KernelFunction decode = kernel.module.function(ATTN_DECODE_KERNEL_NAME);
    launchDecode(decode, launch, step, nullptr);
  }
  ATTN_CU_CHECK(cuCtxSynchronize);

  reference::LinearProblem problem =
      referenceProblem(c, launch, harness::Shape{1, total + 1, total + 1}, logDecay.data());
  // Host q, k, v of total + 1 tokens: the prefill's then the step's.
  auto joined = [&](const harness::HostDeviceTensor &all, const harness::HostDeviceTensor &one) {
    std::vector<float> values = all.host;
    values.insert(values.end(), one.host.begin(), one.host.end());
    return values;
  };
  std::vector<float> q = joined(whole.q, token.q), k = joined(whole.k, token.k),
                     v = joined(whole.v, token.v);
  auto view = [&](const std::vector<float> &values) {
    return reference::HostTensor{values.data(), {int64_t((total + 1) * heads * d), int64_t(heads * d),
                                                 int64_t(d), 1}};
  };
  std::vector<float> expected(q.size());
  reference::LinearState finalState;
  reference::linearForwardRecurrent(problem, view(q), view(k), view(v), expected.data(), {},
                                    &finalState);
  std::vector<float> lastExpected(expected.end() - heads * d, expected.end());
  std::vector<float> lastOutput = downloadOutput(token);
  std::vector<float> stepState = wholeState.download<float>();
  INFO("one-token step");
  CHECK(relativeL2(lastOutput, lastExpected) < 2e-2);
  CHECK(relativeL2(stepState, finalState.kv) < 1e-2);
  // The prefill's outputs against the same reference (its first total rows).
  std::vector<float> prefixExpected(expected.begin(), expected.end() - heads * d);
  CHECK(relativeL2(oneOutput, prefixExpected) < 2e-2);
}

TEST_CASE("linear-family launches name the argument they reject", "[gpu][linear]") {
  LinearCase c;
  c.normalizer = "#attn.retention<gated>";
  LoadedKernel &kernel = loadKernel(specFor(c));
  harness::ForwardProblem data(kernel.compiled.launch, harness::Shape{1, 256, 256}, 61);
  AttnLinearArgs args;
  args.q = data.q.view;
  args.k = data.k.view;
  args.v = data.v.view;
  args.o = data.o.view;
  CHECK_THROWS_WITH(launchLinear(kernel.module, kernel.compiled.launch, args, nullptr),
                    Catch::StartsWith("logDecay:"));
  CHECK_THROWS_WITH(launchForward(kernel.function, kernel.compiled.launch, data.args(), nullptr),
                    Catch::StartsWith("config:"));
  DeviceBuffer logDecay(256 * 4 * sizeof(float)), workspace(64);
  args.logDecay = static_cast<const float *>(logDecay.data());
  args.workspace = workspace.data();
  args.workspaceBytes = workspace.size();
  args.segments = 2;
  CHECK_THROWS_WITH(launchLinear(kernel.module, kernel.compiled.launch, args, nullptr),
                    Catch::StartsWith("workspace:") && Catch::Contains("too few"));
  args.segments = -1;
  CHECK_THROWS_WITH(launchLinear(kernel.module, kernel.compiled.launch, args, nullptr),
                    Catch::StartsWith("segments:"));
}
