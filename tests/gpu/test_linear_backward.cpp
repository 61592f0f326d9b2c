// The backward of linear attention and retention on the GPU against the CPU
// reference's backward (double, derived from the parallel form; its own
// tests check it against finite differences): feature maps, causal and
// not, fixed and gated decay (with the log-decays' gradient), GQA, lengths
// that are not chunk multiples, head-major strides, a split sequence, an
// initial state and a final state's gradient, normalized linear attention
// (with the key sums' gradients); and the argument checks.
#include <catch2/catch.hpp>

#include "AttnHarness.h"
#include "LinearTestSupport.h"
#include "attn/Compiler/Compiler.h"
#include "attn/Reference/LinearAttention.h"
#include "attn/runtime/Kernel.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <sstream>

using namespace attn;
using namespace attn::gputest;

namespace {

struct BackwardCase {
  int qHeads = 4, kvHeads = 4, headDim = 128;
  bool causal = true;
  bool normalize = false; // #attn.linear<..., normalize = true> in `normalizer`
  std::string normalizer = "#attn.retention";
  reference::FeatureMap featureMap = reference::FeatureMap::Identity;
  enum class Decay { None, MultiScale, Gated } decay = Decay::MultiScale;
};

std::string specFor(const BackwardCase &c) {
  std::ostringstream spec;
  spec << "attn.kernel @linear_backward_test problem = #attn.problem<q_heads = " << c.qHeads
       << ", kv_heads = " << c.kvHeads << ", head_dim = " << c.headDim
       << ", element_type = bf16> mask = "
       << (c.causal ? "#attn.causal<top_left>" : "#attn.no_mask")
       << " normalizer = " << c.normalizer << "\n";
  return spec.str();
}

/// The spec's backward module as a runtime Kernel, compiled once per run.
const Kernel &backwardKernel(const BackwardCase &c) {
  static std::map<std::string, Kernel> cache;
  const std::string spec = specFor(c);
  auto found = cache.find(spec);
  if (found != cache.end())
    return found->second;
  CompiledKernel compiled = compileBackwardSpec(spec, "test.mlir", {});
  KernelImage image;
  image.name = compiled.name;
  image.ptx.assign(compiled.binary.begin(), compiled.binary.end());
  image.launch = compiled.launch;
  return cache.emplace(spec, Kernel(std::move(image))).first->second;
}

/// A 16-bit BSHD device tensor holding `values` (contiguous BSHD, rounded to
/// the type), laid out as makeTensor lays it out.
harness::HostDeviceTensor uploadTensor(const std::vector<float> &values, int64_t batch,
                                       int64_t seqlen, int heads, int headDim, bool headMajor) {
  harness::HostDeviceTensor tensor =
      harness::makeTensor(DType::BF16, batch, seqlen, heads, headDim, headMajor, nullptr);
  std::vector<uint16_t> bits(values.size());
  int64_t index = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < seqlen; ++t)
      for (int h = 0; h < heads; ++h)
        for (int e = 0; e < headDim; ++e, ++index)
          bits[harness::offsetOf(tensor.view, b, t, h, e)] = floatToBf16(values[index]);
  if (!bits.empty())
    tensor.buffer.copyFromHost(bits.data(), bits.size() * sizeof(uint16_t));
  tensor.host.resize(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    tensor.host[i] = roundTo(DType::BF16, values[i]);
  return tensor;
}

/// One backward launch against the reference. `withState` passes a random
/// initial state and a random gradient of the final state, and asks for the
/// initial state's gradient (normalized: the same of the key sum).
void checkBackward(const BackwardCase &c, int64_t batch, int64_t seqlen, bool withState,
                   bool headMajor, uint64_t seed) {
  const Kernel &kernel = backwardKernel(c);
  const AttnLaunchConfig &launch = kernel.launchConfig();
  REQUIRE(launch.linearFamily == 1);
  REQUIRE(launch.backward == 1);
  std::mt19937_64 random(seed);
  auto tensor = [&](int heads) {
    return harness::makeTensor(DType::BF16, batch, seqlen, heads, c.headDim, headMajor, &random);
  };
  harness::HostDeviceTensor q = tensor(c.qHeads), k = tensor(c.kvHeads), v = tensor(c.kvHeads),
                            dO = tensor(c.qHeads);
  harness::HostDeviceTensor dq = tensor(c.qHeads), dk = tensor(c.kvHeads), dv = tensor(c.kvHeads);
  // NaN in every output element, so that one the backward skips shows.
  for (harness::HostDeviceTensor *out : {&dq, &dk, &dv})
    out->buffer.fill32(0x7fc07fc0u);

  const size_t heads = size_t(batch) * c.qHeads, d = size_t(c.headDim);
  const size_t tokens = size_t(batch) * size_t(seqlen) * c.qHeads;
  std::vector<float> stateIn, dStateOut, logDecay, keySumIn, dKeySumOut;
  if (withState) {
    stateIn = randomValues(heads * d * d, random, -0.5f, 0.5f);
    dStateOut = randomValues(heads * d * d, random, -0.5f, 0.5f);
    if (c.normalize) {
      // Positive, as a key sum of elu+1 features is.
      keySumIn = randomValues(heads * d, random, 0.f, 4.f);
      dKeySumOut = randomValues(heads * d, random, -0.5f, 0.5f);
    }
  }
  const bool gated = c.decay == BackwardCase::Decay::Gated;
  if (gated)
    logDecay = randomValues(tokens, random, -0.5f, 0.f);
  DeviceBuffer stateInBuffer = upload(stateIn), dStateOutBuffer = upload(dStateOut),
               logDecayBuffer = upload(logDecay);
  DeviceBuffer dStateIn(heads * d * d * sizeof(float)), dLogDecay(std::max<size_t>(tokens, 1) * 4);
  dStateIn.fill32(0x7fc00000u);
  dLogDecay.fill32(0x7fc00000u);
  DeviceBuffer keySumInBuffer = upload(keySumIn), dKeySumOutBuffer = upload(dKeySumOut),
               dKeySumIn(heads * d * sizeof(float));
  dKeySumIn.fill32(0x7fc00000u);

  reference::LinearProblem problem;
  problem.batch = batch;
  problem.seqlen = seqlen;
  problem.qHeads = c.qHeads;
  problem.kvHeads = c.kvHeads;
  problem.headDim = c.headDim;
  problem.scale = launch.scale;
  problem.featureMap = c.featureMap;
  problem.causal = c.causal;
  problem.normalize = c.normalize;
  if (c.decay == BackwardCase::Decay::MultiScale)
    for (int h = 0; h < c.qHeads; ++h)
      problem.gamma.push_back(reference::multiScaleGamma(h));
  if (gated)
    problem.logDecay = logDecay.data();
  reference::LinearState initial, dFinal;
  initial.kv.assign(stateIn.begin(), stateIn.end());
  initial.keySum.assign(keySumIn.begin(), keySumIn.end());
  dFinal.kv.assign(dStateOut.begin(), dStateOut.end());
  dFinal.keySum.assign(dKeySumOut.begin(), dKeySumOut.end());
  // Normalized: the forward's output, from the reference's forward and
  // rounded to bf16 as the forward kernel stores it.
  harness::HostDeviceTensor o;
  if (c.normalize) {
    std::vector<float> forward(size_t(batch) * seqlen * c.qHeads * d);
    reference::linearForwardParallel(problem, hostTensor(q), hostTensor(k), hostTensor(v),
                                     forward.data(), initial, nullptr);
    o = uploadTensor(forward, batch, seqlen, c.qHeads, c.headDim, headMajor);
  }

  AttnLinearBackwardArgs args;
  args.q = q.view;
  args.k = k.view;
  args.v = v.view;
  args.dO = dO.view;
  args.dq = dq.view;
  args.dk = dk.view;
  args.dv = dv.view;
  if (gated) {
    args.logDecay = static_cast<const float *>(logDecayBuffer.data());
    args.dLogDecay = static_cast<float *>(dLogDecay.data());
  }
  if (withState) {
    args.initialState = static_cast<const float *>(stateInBuffer.data());
    args.dFinalState = static_cast<const float *>(dStateOutBuffer.data());
    args.dInitialState = static_cast<float *>(dStateIn.data());
  }
  if (c.normalize) {
    args.o = o.view;
    if (withState) {
      args.initialKeySum = static_cast<const float *>(keySumInBuffer.data());
      args.dFinalKeySum = static_cast<const float *>(dKeySumOutBuffer.data());
      args.dInitialKeySum = static_cast<float *>(dKeySumIn.data());
    }
  }
  DeviceBuffer workspace(std::max<uint64_t>(kernel.linearBackwardWorkspaceBytes(args), 256));
  workspace.fill32(0x7fc00000u);
  args.workspace = workspace.data();
  args.workspaceBytes = workspace.size();
  kernel.runLinearBackward(args);
  ATTN_CU_CHECK(cuCtxSynchronize);

  reference::LinearGradients expected;
  reference::linearBackwardParallel(problem, hostTensor(q), hostTensor(k), hostTensor(v),
                                    hostTensor(dO), initial, dFinal, &expected);

  const double dqError = relativeL2(harness::downloadBSHD(dq), expected.dq);
  const double dkError = relativeL2(harness::downloadBSHD(dk), expected.dk);
  const double dvError = relativeL2(harness::downloadBSHD(dv), expected.dv);
  INFO("spec: " << specFor(c) << "B=" << batch << " S=" << seqlen << " state=" << withState
                << " headMajor=" << headMajor);
  INFO("relative L2: dq " << dqError << ", dk " << dkError << ", dv " << dvError);
  std::printf("linear backward %s B=%lld S=%lld state=%d: dq %.2e dk %.2e dv %.2e",
              specFor(c).c_str(), (long long)batch, (long long)seqlen, int(withState), dqError,
              dkError, dvError);
  // bf16 inputs and outputs, bf16 copies of the passes' operands and a
  // bf16 state copy inside each pass, as the forward (which holds 2e-2).
  CHECK(dqError < 2e-2);
  CHECK(dkError < 2e-2);
  CHECK(dvError < 2e-2);
  if (gated) {
    std::vector<float> gate = dLogDecay.download<float>();
    gate.resize(tokens);
    const double gateError = relativeL2(gate, expected.dLogDecay);
    std::printf(" dg %.2e", gateError);
    INFO("dLogDecay relative L2 " << gateError);
    // dB_t = phi(q_t) . d phi(q)_t - phi(k_t) . d phi(k)_t from the bf16
    // outputs of the passes; the suffix sums then cancel most of each term
    // (with a final state's gradient, <dS, S_final> against the sum of its
    // per-token parts), which magnifies the rounding: 1e-2 without a
    // state, 4.7e-2 with one at S = 1000 (H200). A wrong term or shift
    // gives errors of order 1.
    CHECK(gateError < (withState ? 8e-2 : 3e-2));
  }
  if (withState) {
    std::vector<float> state = dStateIn.download<float>();
    state.resize(heads * d * d);
    const double stateError = relativeL2(state, expected.dInitial.kv);
    std::printf(" dS0 %.2e", stateError);
    INFO("dInitialState relative L2 " << stateError);
    CHECK(stateError < 1e-2);
    if (c.normalize) {
      std::vector<float> keySum = dKeySumIn.download<float>();
      keySum.resize(heads * d);
      const double keySumError = relativeL2(keySum, expected.dInitial.keySum);
      std::printf(" dz0 %.2e", keySumError);
      INFO("dInitialKeySum relative L2 " << keySumError);
      CHECK(keySumError < 1e-2);
    }
  }
  std::printf("\n");
}

} // namespace

TEST_CASE("retention's backward matches the reference", "[gpu][linear][linear_backward]") {
  BackwardCase c;
  checkBackward(c, 2, 300, /*withState=*/true, /*headMajor=*/false, 1);
  checkBackward(c, 1, 64, /*withState=*/false, /*headMajor=*/false, 2);
  c.headDim = 64;
  c.kvHeads = 2;
  checkBackward(c, 2, 129, /*withState=*/true, /*headMajor=*/true, 3);
}

TEST_CASE("gated retention's backward, with the log-decays' gradient",
          "[gpu][linear][linear_backward]") {
  BackwardCase c;
  c.normalizer = "#attn.retention<gated>";
  c.decay = BackwardCase::Decay::Gated;
  c.kvHeads = 1;
  checkBackward(c, 2, 1000, /*withState=*/true, /*headMajor=*/false, 4);
  checkBackward(c, 1, 77, /*withState=*/false, /*headMajor=*/true, 5);
}

TEST_CASE("linear attention's backward: feature maps, causal and not",
          "[gpu][linear][linear_backward]") {
  using reference::FeatureMap;
  const std::pair<FeatureMap, const char *> maps[] = {{FeatureMap::Identity, "identity"},
                                                      {FeatureMap::Relu, "relu"},
                                                      {FeatureMap::EluPlusOne, "elu_plus_one"}};
  uint64_t seed = 10;
  for (auto [map, name] : maps)
    for (bool causal : {true, false}) {
      BackwardCase c;
      c.normalizer = std::string("#attn.linear<feature_map = ") + name + ">";
      c.featureMap = map;
      c.decay = BackwardCase::Decay::None;
      c.causal = causal;
      c.headDim = map == FeatureMap::Relu ? 64 : 128;
      c.kvHeads = 2;
      checkBackward(c, 2, 200, /*withState=*/seed % 2 == 0, /*headMajor=*/false, seed);
      ++seed;
    }
}

TEST_CASE("normalized linear attention's backward, with the key sums' gradients",
          "[gpu][linear][linear_backward]") {
  using reference::FeatureMap;
  BackwardCase c;
  c.normalizer = "#attn.linear<feature_map = elu_plus_one, normalize = true>";
  c.featureMap = FeatureMap::EluPlusOne;
  c.normalize = true;
  c.decay = BackwardCase::Decay::None;
  // GQA, lengths that are not piece or chunk multiples, head-major strides.
  c.kvHeads = 2;
  checkBackward(c, 2, 300, /*withState=*/true, /*headMajor=*/false, 50);
  checkBackward(c, 1, 64, /*withState=*/false, /*headMajor=*/true, 51);
  c.causal = false;
  checkBackward(c, 2, 200, /*withState=*/true, /*headMajor=*/false, 52);
  c.causal = true;
  c.headDim = 64;
  c.kvHeads = c.qHeads;
  checkBackward(c, 1, 1000, /*withState=*/true, /*headMajor=*/false, 53);
  c.normalizer = "#attn.linear<feature_map = relu, normalize = true>";
  c.featureMap = FeatureMap::Relu;
  c.headDim = 128;
  checkBackward(c, 1, 129, /*withState=*/false, /*headMajor=*/false, 54);
}

TEST_CASE("a long sequence's backward, split over segments, matches the reference",
          "[gpu][linear][linear_backward]") {
  // One batch of two heads leaves most SMs idle unsplit: every pass runs
  // the segment and fold kernels.
  BackwardCase c;
  c.qHeads = c.kvHeads = 2;
  {
    const Kernel &kernel = backwardKernel(c);
    AttnLaunchConfig pass = kernel.launchConfig();
    pass.backward = 0;
    ensureContext();
    REQUIRE(linearSplitFor(pass, 1, 2048).segments > 1);
  }
  checkBackward(c, 1, 2048, /*withState=*/true, /*headMajor=*/false, 20);
  c.normalizer = "#attn.retention<gated>";
  c.decay = BackwardCase::Decay::Gated;
  checkBackward(c, 1, 2048, /*withState=*/true, /*headMajor=*/false, 21);
}

TEST_CASE("an empty sequence's backward passes the final state's gradient through",
          "[gpu][linear][linear_backward]") {
  BackwardCase c;
  const Kernel &kernel = backwardKernel(c);
  ensureContext();
  const size_t elements = size_t(2) * c.qHeads * c.headDim * c.headDim;
  std::mt19937_64 random(30);
  std::vector<float> dStateOut = randomValues(elements, random, -1.f, 1.f);
  DeviceBuffer dStateOutBuffer = upload(dStateOut), dStateIn(elements * sizeof(float));
  dStateIn.fill32(0x7fc00000u);
  harness::HostDeviceTensor queries =
      harness::makeTensor(DType::BF16, 2, 0, c.qHeads, c.headDim, false, &random);
  harness::HostDeviceTensor keys =
      harness::makeTensor(DType::BF16, 2, 0, c.kvHeads, c.headDim, false, &random);
  AttnLinearBackwardArgs args;
  args.q = queries.view;
  args.k = args.v = keys.view;
  args.dO = args.dq = args.q;
  args.dk = args.dv = args.k;
  args.dFinalState = static_cast<const float *>(dStateOutBuffer.data());
  args.dInitialState = static_cast<float *>(dStateIn.data());
  CHECK(kernel.linearBackwardWorkspaceBytes(args) == 0);
  kernel.runLinearBackward(args);
  ATTN_CU_CHECK(cuCtxSynchronize);
  CHECK(dStateIn.download<float>() == dStateOut);

  // Normalized, the key sum's gradient passes through too (o may be absent:
  // there is no output).
  BackwardCase normalized;
  normalized.normalizer = "#attn.linear<feature_map = elu_plus_one, normalize = true>";
  normalized.decay = BackwardCase::Decay::None;
  const Kernel &normalizedKernel = backwardKernel(normalized);
  const size_t keySumElements = size_t(2) * c.qHeads * c.headDim;
  std::vector<float> dKeySumOut = randomValues(keySumElements, random, -1.f, 1.f);
  DeviceBuffer dKeySumOutBuffer = upload(dKeySumOut), dKeySumIn(keySumElements * sizeof(float));
  dKeySumIn.fill32(0x7fc00000u);
  dStateIn.fill32(0x7fc00000u);
  args.dFinalKeySum = static_cast<const float *>(dKeySumOutBuffer.data());
  args.dInitialKeySum = static_cast<float *>(dKeySumIn.data());
  CHECK(normalizedKernel.linearBackwardWorkspaceBytes(args) == 0);
  normalizedKernel.runLinearBackward(args);
  ATTN_CU_CHECK(cuCtxSynchronize);
  CHECK(dStateIn.download<float>() == dStateOut);
  CHECK(dKeySumIn.download<float>() == dKeySumOut);
}

TEST_CASE("the linear backward names the argument it rejects", "[gpu][linear][linear_backward]") {
  BackwardCase c;
  c.normalizer = "#attn.retention<gated>";
  c.decay = BackwardCase::Decay::Gated;
  c.kvHeads = 1; // GQA: the per-head outputs need a workspace
  const Kernel &kernel = backwardKernel(c);
  ensureContext();
  std::mt19937_64 random(40);
  auto tensor = [&](int heads, int64_t seqlen) {
    return harness::makeTensor(DType::BF16, 1, seqlen, heads, c.headDim, false, &random);
  };
  harness::HostDeviceTensor q = tensor(c.qHeads, 128), dO = tensor(c.qHeads, 128),
                            dq = tensor(c.qHeads, 128), k = tensor(c.kvHeads, 128),
                            v = tensor(c.kvHeads, 128), dk = tensor(c.kvHeads, 128),
                            dv = tensor(c.kvHeads, 128), shortK = tensor(c.kvHeads, 64);
  DeviceBuffer logDecay(size_t(128) * c.qHeads * 4);
  AttnLinearBackwardArgs args;
  args.q = q.view;
  args.dO = dO.view;
  args.dq = dq.view;
  args.k = k.view;
  args.v = v.view;
  args.dk = dk.view;
  args.dv = dv.view;
  args.logDecay = static_cast<const float *>(logDecay.data());

  AttnLinearBackwardArgs bad = args;
  bad.logDecay = nullptr;
  CHECK_THROWS_WITH(kernel.runLinearBackward(bad), Catch::StartsWith("logDecay:"));
  bad = args;
  bad.dv = shortK.view;
  CHECK_THROWS_WITH(kernel.runLinearBackward(bad), Catch::StartsWith("dv:"));
  bad = args;
  bad.dO.dtype = DType::F16;
  CHECK_THROWS_WITH(kernel.runLinearBackward(bad), Catch::StartsWith("dO:"));
  bad = args;
  bad.dLogDecay = reinterpret_cast<float *>(static_cast<char *>(logDecay.data()) + 2);
  CHECK_THROWS_WITH(kernel.runLinearBackward(bad), Catch::StartsWith("dLogDecay:"));
  // An output in an input's memory would be read after it is written.
  bad = args;
  bad.dq = args.q;
  CHECK_THROWS_WITH(kernel.runLinearBackward(bad), Catch::StartsWith("dq: shares memory with q"));
  bad = args;
  bad.dv = args.dk;
  CHECK_THROWS_WITH(kernel.runLinearBackward(bad), Catch::StartsWith("dv: shares memory with dk"));
  bad = args;
  DeviceBuffer small(256);
  bad.workspace = small.data();
  bad.workspaceBytes = small.size();
  CHECK_THROWS_WITH(kernel.runLinearBackward(bad), Catch::StartsWith("workspace:"));

  // A forward module is not a backward one.
  CompiledKernel forward = compileSpec(specFor(c), "test.mlir", {});
  KernelImage image;
  image.name = forward.name;
  image.ptx.assign(forward.binary.begin(), forward.binary.end());
  image.launch = forward.launch;
  CHECK_THROWS_WITH(Kernel(std::move(image)).runLinearBackward(args),
                    Catch::StartsWith("config:"));
}
