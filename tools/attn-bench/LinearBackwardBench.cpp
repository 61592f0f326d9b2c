//===- LinearBackwardBench.cpp - attn-bench's linear-family backward ------===//

#include "BackwardBench.h"

#include "AttnHarness.h"
#include "attn/Compiler/Compiler.h"
#include "attn/runtime/Kernel.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>
#include <utility>

namespace attn::bench {

namespace {

/// A runtime Kernel of a compiled module.
Kernel kernelOf(CompiledKernel compiled) {
  KernelImage image;
  image.name = compiled.name;
  image.ptx.assign(compiled.binary.begin(), compiled.binary.end());
  image.launch = compiled.launch;
  return Kernel(std::move(image));
}

/// `bytes` of seeded normal bf16 values (a 1 Mi-element block repeated).
DeviceBuffer normalBf16(size_t bytes, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<uint16_t> block(size_t(1) << 20);
  for (uint16_t &bits : block)
    bits = floatToBf16(normal(random));
  DeviceBuffer buffer(bytes);
  for (size_t offset = 0; offset < bytes; offset += block.size() * 2)
    buffer.copyFromHost(block.data(), std::min(block.size() * 2, bytes - offset), offset);
  return buffer;
}

} // namespace

int runLinearBackwardGrid(int warmup, int repeats) {
  constexpr int kHeadDim = 128, kHeads = 16;
  constexpr int64_t kMaxTokens = 65536;
  struct Variant {
    const char *name, *normalizer;
  };
  const Variant variants[] = {
      {"retention", "#attn.retention"},
      {"gated_retention", "#attn.retention<gated>"},
      {"linear", "#attn.linear"},
      {"linear_normalized", "#attn.linear<feature_map = identity, normalize = true>"}};
  const size_t tensorBytes = size_t(kMaxTokens) * kHeads * kHeadDim * 2;
  DeviceBuffer q = normalBf16(tensorBytes, 1), k = normalBf16(tensorBytes, 2),
               v = normalBf16(tensorBytes, 3), dO = normalBf16(tensorBytes, 4);
  DeviceBuffer o(tensorBytes), dq(tensorBytes), dk(tensorBytes), dv(tensorBytes);
  std::vector<float> gates(size_t(kMaxTokens) * kHeads);
  {
    std::mt19937_64 random(7);
    std::normal_distribution<float> normal(0.f, 1.f);
    for (float &gate : gates) {
      const float x = normal(random);
      gate = std::min(x, 0.f) - std::log1p(std::exp(-std::fabs(x))); // logsigmoid
    }
  }
  DeviceBuffer logDecay(gates.size() * 4), dLogDecay(gates.size() * 4);
  logDecay.upload(gates);
  DeviceBuffer finalState(size_t(kMaxTokens / 4096) * kHeads * kHeadDim * kHeadDim * 4);

  std::printf("| kernel | B | S | forward ms | backward ms | backward TB/s (q, k, v, dO, dq, "
              "dk, dv) | backward / forward |\n|---|---|---|---|---|---|---|\n");
  const std::pair<int64_t, int64_t> shapes[] = {{4, 4096}, {2, 8192},  {1, 16384},
                                                {1, 32768}, {1, 65536}, {1, 8192}};
  for (auto [b, s] : shapes) {
    auto view = [&](DeviceBuffer &buffer) {
      return contiguousBSHD(buffer.data(), DType::BF16, b, s, kHeads, kHeadDim);
    };
    for (const Variant &variant : variants) {
      std::ostringstream spec;
      spec << "attn.kernel @" << variant.name << " problem = #attn.problem<q_heads = " << kHeads
           << ", kv_heads = " << kHeads << ", head_dim = " << kHeadDim
           << ", element_type = bf16> mask = #attn.causal<top_left> normalizer = "
           << variant.normalizer << "\n";
      CompileOptions options;
      options.tuningShape = formatTuningShape({b, s, s});
      Kernel forward = kernelOf(compileSpec(spec.str(), "linear-backward-grid.mlir", options));
      Kernel backward =
          kernelOf(compileBackwardSpec(spec.str(), "linear-backward-grid.mlir", options));
      const bool gated = forward.launchConfig().gated;
      const bool normalized = forward.launchConfig().normalize;

      AttnLinearArgs forwardArgs;
      forwardArgs.q = view(q);
      forwardArgs.k = view(k);
      forwardArgs.v = view(v);
      forwardArgs.o = view(o);
      forwardArgs.finalState = static_cast<float *>(finalState.data());
      if (gated)
        forwardArgs.logDecay = static_cast<const float *>(logDecay.data());
      DeviceBuffer forwardWorkspace(
          std::max<uint64_t>(linearWorkspaceBytes(forward.launchConfig(), forwardArgs), 4));
      forwardArgs.workspace = forwardWorkspace.data();
      forwardArgs.workspaceBytes = forwardWorkspace.size();

      AttnLinearBackwardArgs args;
      args.q = view(q);
      args.k = view(k);
      args.v = view(v);
      args.dO = view(dO);
      args.dq = view(dq);
      args.dk = view(dk);
      args.dv = view(dv);
      if (gated) {
        args.logDecay = static_cast<const float *>(logDecay.data());
        args.dLogDecay = static_cast<float *>(dLogDecay.data());
      }
      if (normalized)
        args.o = view(o); // the forward's output (the timing loop below rewrites it)
      DeviceBuffer workspace(std::max<uint64_t>(backward.linearBackwardWorkspaceBytes(args), 256));
      args.workspace = workspace.data();
      args.workspaceBytes = workspace.size();

      const double forwardMs =
          harness::medianMs([&] { forward.runLinear(forwardArgs); }, warmup, repeats);
      const double backwardMs =
          harness::medianMs([&] { backward.runLinearBackward(args); }, warmup, repeats);
      const double bytes = 7.0 * b * s * kHeads * kHeadDim * 2;
      std::printf("| %s | %lld | %lld | %.3f | %.3f | %.2f | %.2f |\n", variant.name,
                  (long long)b, (long long)s, forwardMs, backwardMs, bytes / backwardMs / 1e9,
                  backwardMs / forwardMs);
      std::fflush(stdout);
    }
  }
  return 0;
}

} // namespace attn::bench
