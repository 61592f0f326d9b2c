// The linear family's argument checks without a GPU: validateLinearArgs
// (forward and one-token step) and validateLinearBackwardArgs accept valid
// calls and name the argument of each refusal. They must not touch the
// driver: the pointers are fake addresses.

#include "RuntimeTestArgs.h"
#include "attn/runtime/LinearBackwardLaunch.h"
#include "attn/runtime/Runtime.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <string>

using namespace attn;
using attn::test::fakePointer;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

/// Retention, head dim 128, 8 query heads over 2 kv heads, bf16, causal.
AttnLaunchConfig linearConfig(bool backward, bool gated) {
  AttnLaunchConfig config = test::makeConfig();
  config.blockM = 64; // a chunk
  config.linearFamily = true;
  config.causal = true;
  config.gated = gated;
  config.backward = backward;
  return config;
}

TensorView view(uintptr_t address, int64_t heads) {
  return contiguousBSHD(fakePointer(address), DType::BF16, 2, 300, heads, 128);
}

AttnLinearArgs forwardArgs() {
  AttnLinearArgs args;
  args.q = view(0x10000000, 8);
  args.k = view(0x20000000, 2);
  args.v = view(0x30000000, 2);
  args.o = view(0x40000000, 8);
  return args;
}

AttnLinearBackwardArgs backwardArgs() {
  AttnLinearBackwardArgs args;
  args.q = view(0x10000000, 8);
  args.k = view(0x20000000, 2);
  args.v = view(0x30000000, 2);
  args.dO = view(0x40000000, 8);
  args.dq = view(0x50000000, 8);
  args.dk = view(0x60000000, 2);
  args.dv = view(0x70000000, 2);
  return args;
}

using ForwardMutation = std::function<void(AttnLaunchConfig &, AttnLinearArgs &)>;
using BackwardMutation = std::function<void(AttnLaunchConfig &, AttnLinearBackwardArgs &)>;

void expectForwardInvalid(const ForwardMutation &mutate, const std::string &prefix,
                          const std::string &detail, bool decode = false) {
  AttnLaunchConfig config = linearConfig(false, false);
  AttnLinearArgs args = forwardArgs();
  mutate(config, args);
  CHECK_THROWS_WITH(validateLinearArgs(config, args, decode),
                    StartsWith(prefix) && Contains(detail));
}

void expectBackwardInvalid(const BackwardMutation &mutate, const std::string &prefix,
                           const std::string &detail) {
  AttnLaunchConfig config = linearConfig(true, false);
  AttnLinearBackwardArgs args = backwardArgs();
  mutate(config, args);
  CHECK_THROWS_WITH(validateLinearBackwardArgs(config, args),
                    StartsWith(prefix) && Contains(detail));
}

} // namespace

TEST_CASE("valid linear forward and backward arguments pass", "[runtime][validate][linear]") {
  CHECK_NOTHROW(validateLinearArgs(linearConfig(false, false), forwardArgs(), false));
  AttnLinearArgs gated = forwardArgs();
  gated.logDecay = static_cast<const float *>(fakePointer(0x80000000));
  CHECK_NOTHROW(validateLinearArgs(linearConfig(false, true), gated, false));
  AttnLinearArgs step = forwardArgs();
  for (TensorView *v : {&step.q, &step.k, &step.v, &step.o}) {
    v->shape[1] = 1;
    v->strides[0] = v->shape[2] * v->shape[3];
  }
  CHECK_NOTHROW(validateLinearArgs(linearConfig(false, false), step, true));

  CHECK_NOTHROW(validateLinearBackwardArgs(linearConfig(true, false), backwardArgs()));
  AttnLinearBackwardArgs gatedBackward = backwardArgs();
  gatedBackward.logDecay = static_cast<const float *>(fakePointer(0x80000000));
  gatedBackward.dLogDecay = static_cast<float *>(fakePointer(0x90000000));
  CHECK_NOTHROW(validateLinearBackwardArgs(linearConfig(true, true), gatedBackward));
  AttnLaunchConfig normalized = linearConfig(true, false);
  normalized.normalize = true;
  AttnLinearBackwardArgs normalizedBackward = backwardArgs();
  normalizedBackward.o = view(0xa0000000, 8);
  normalizedBackward.initialKeySum = static_cast<const float *>(fakePointer(0xb0000000));
  normalizedBackward.dFinalKeySum = static_cast<const float *>(fakePointer(0xb1000000));
  normalizedBackward.dInitialKeySum = static_cast<float *>(fakePointer(0xb2000000));
  CHECK_NOTHROW(validateLinearBackwardArgs(normalized, normalizedBackward));
}

TEST_CASE("linear forward refusals name the argument", "[runtime][validate][linear]") {
  expectForwardInvalid([](AttnLaunchConfig &c, AttnLinearArgs &) { c.linearFamily = false; },
                       "config", "softmax attention");
  expectForwardInvalid([](AttnLaunchConfig &c, AttnLinearArgs &) { c.backward = true; }, "config",
                       "runLinearBackward");
  expectForwardInvalid([](AttnLaunchConfig &, AttnLinearArgs &a) { a.k.shape[0] = 3; }, "k",
                       "in batch and sequence length");
  expectForwardInvalid([](AttnLaunchConfig &, AttnLinearArgs &a) { a.v.shape[1] = 299; }, "v",
                       "in batch and sequence length");
  expectForwardInvalid([](AttnLaunchConfig &, AttnLinearArgs &a) { a.o.shape[2] = 2; }, "o",
                       "query heads");
  expectForwardInvalid([](AttnLaunchConfig &, AttnLinearArgs &a) { a.k.dtype = DType::F16; },
                       "k", "dtype");
  expectForwardInvalid(
      [](AttnLaunchConfig &, AttnLinearArgs &a) {
        for (TensorView *v : {&a.q, &a.k, &a.v, &a.o})
          v->shape[0] = 70000;
      },
      "q", "batch 70000 exceeds the grid's 65535");
  expectForwardInvalid([](AttnLaunchConfig &, AttnLinearArgs &) {}, "q",
                       "the one-token step takes seqlen 1", /*decode=*/true);
  expectForwardInvalid(
      [](AttnLaunchConfig &, AttnLinearArgs &a) {
        a.finalKeySum = static_cast<float *>(fakePointer(0x80000000));
      },
      "finalKeySum", "does not normalize");
  expectForwardInvalid([](AttnLaunchConfig &c, AttnLinearArgs &) { c.gated = true; }, "logDecay",
                       "the kernel is gated");
  expectForwardInvalid(
      [](AttnLaunchConfig &, AttnLinearArgs &a) {
        a.logDecay = static_cast<const float *>(fakePointer(0x80000000));
      },
      "logDecay", "not gated");
  expectForwardInvalid(
      [](AttnLaunchConfig &, AttnLinearArgs &a) {
        a.initialState = static_cast<const float *>(fakePointer(0x80000002));
      },
      "initialState", "4-byte aligned");
}

TEST_CASE("linear backward refusals name the argument", "[runtime][validate][linear]") {
  expectBackwardInvalid([](AttnLaunchConfig &c, AttnLinearBackwardArgs &) { c.backward = false; },
                        "config", "not the backward module");
  // Normalized linear attention reads the forward's output; the others
  // take neither it nor key sums.
  expectBackwardInvalid([](AttnLaunchConfig &c, AttnLinearBackwardArgs &) { c.normalize = true; },
                        "o", "reads the forward's output");
  expectBackwardInvalid(
      [](AttnLaunchConfig &c, AttnLinearBackwardArgs &a) {
        c.normalize = true;
        a.o = contiguousBSHD(fakePointer(0xa0000000), DType::BF16, 2, 300, 2, 128);
      },
      "o", "heads");
  expectBackwardInvalid(
      [](AttnLaunchConfig &c, AttnLinearBackwardArgs &a) {
        c.normalize = true;
        a.o = view(0x40000000, 8); // dO's memory: dO is read, o too, so this passes
        a.dInitialKeySum = static_cast<float *>(fakePointer(0x40000000));
      },
      "dInitialKeySum", "shares memory with dO");
  expectBackwardInvalid(
      [](AttnLaunchConfig &, AttnLinearBackwardArgs &a) { a.o = view(0xa0000000, 8); }, "o",
      "does not normalize");
  expectBackwardInvalid(
      [](AttnLaunchConfig &, AttnLinearBackwardArgs &a) {
        a.dFinalKeySum = static_cast<const float *>(fakePointer(0xa0000000));
      },
      "dFinalKeySum", "no key sum");
  expectBackwardInvalid([](AttnLaunchConfig &, AttnLinearBackwardArgs &a) { a.k.shape[0] = 3; },
                        "k", "in batch and sequence length");
  expectBackwardInvalid([](AttnLaunchConfig &, AttnLinearBackwardArgs &a) { a.v.shape[1] = 299; },
                        "v", "in batch and sequence length");
  expectBackwardInvalid(
      [](AttnLaunchConfig &, AttnLinearBackwardArgs &a) { a.dq.dtype = DType::F16; }, "dq",
      "dtype");
  expectBackwardInvalid(
      [](AttnLaunchConfig &, AttnLinearBackwardArgs &a) {
        a.dO = contiguousBSHD(fakePointer(0x40000000), DType::BF16, 2, 299, 8, 128);
      },
      "dO", "must equal");
  expectBackwardInvalid(
      [](AttnLaunchConfig &, AttnLinearBackwardArgs &a) {
        a.dk = contiguousBSHD(fakePointer(0x60000000), DType::BF16, 2, 301, 2, 128);
      },
      "dk", "must equal");
  expectBackwardInvalid(
      [](AttnLaunchConfig &, AttnLinearBackwardArgs &a) {
        for (TensorView *v : {&a.q, &a.k, &a.v, &a.dO, &a.dq, &a.dk, &a.dv})
          v->shape[0] = 70000;
      },
      "q", "batch 70000 exceeds the grid's 65535");
  expectBackwardInvalid([](AttnLaunchConfig &c, AttnLinearBackwardArgs &) { c.gated = true; },
                        "logDecay", "the kernel is gated");
  expectBackwardInvalid(
      [](AttnLaunchConfig &, AttnLinearBackwardArgs &a) {
        a.dLogDecay = static_cast<float *>(fakePointer(0x80000000));
      },
      "dLogDecay", "not gated");
  expectBackwardInvalid(
      [](AttnLaunchConfig &, AttnLinearBackwardArgs &a) {
        a.dFinalState = static_cast<const float *>(fakePointer(0x80000002));
      },
      "dFinalState", "4-byte aligned");
  expectBackwardInvalid(
      [](AttnLaunchConfig &, AttnLinearBackwardArgs &a) { a.workspace = fakePointer(0x80000010); },
      "workspace", "256-byte aligned");
  expectBackwardInvalid(
      [](AttnLaunchConfig &, AttnLinearBackwardArgs &a) { a.dq.data = a.q.data; }, "dq",
      "shares memory with q");
}
