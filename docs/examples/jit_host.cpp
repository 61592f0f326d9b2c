//===- jit_host.cpp - A host program that JIT-compiles a kernel -----------===//
//
// The host API end to end: describe a causal GQA kernel in C++ (16 query
// heads, 4 key/value heads, head dim 128, bf16), compile it at run time,
// run it on random inputs and compare the result with the CPU reference.
//
//   build/bin/jit_host [batch [seqlen_q [seqlen_k]]]      (default 2 512 512)
//
// The first run on a machine compiles with NVRTC and stores the kernel in the
// disk cache (ATTNC_CACHE_DIR, else ~/.cache/attnc); later runs load it from
// there. Without an sm_90 GPU the program compiles the kernel, says why it
// ran nothing and exits with 0. With one it exits with 1 when the output is
// outside the tolerance of tools/harness.
//
//===----------------------------------------------------------------------===//

#include "AttnHarness.h"
#include "attn/Compiler/Compiler.h"
#include "attn/Compiler/Jit.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace {

/// Where compile() found the kernel, from the Compiler's counters.
const char *origin(const attn::JitStats &stats) {
  if (stats.compiles)
    return "compiled with NVRTC and stored in the disk cache";
  if (stats.diskHits)
    return "loaded from the disk cache";
  return "found in memory";
}

int64_t sizeArgument(int argc, char **argv, int index, int64_t fallback) {
  return index < argc ? std::atoll(argv[index]) : fallback;
}

int run(int argc, char **argv) {
  attn::harness::Shape shape;
  shape.batch = sizeArgument(argc, argv, 1, 2);
  shape.seqlenQ = sizeArgument(argc, argv, 2, 512);
  shape.seqlenK = sizeArgument(argc, argv, 3, shape.seqlenQ);

  // 1. The kernel, as data: no MLIR text.
  attn::Spec spec = attn::SpecBuilder("causal_gqa_hd128")
                        .heads(/*qHeads=*/16, /*kvHeads=*/4)
                        .headDim(128)
                        .dtype(attn::DType::BF16)
                        .causal(attn::CausalAlign::BottomRight);

  // 2. Compile it (or find it in the cache). No GPU is needed for this.
  attn::Compiler compiler;
  auto start = std::chrono::steady_clock::now();
  attn::Kernel kernel = compiler.compile(spec);
  double compileMs =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const attn::AttnLaunchConfig &launch = kernel.launchConfig();
  std::printf("kernel @%s: %s in %.1f ms\n", kernel.name().c_str(), origin(compiler.stats()),
              compileMs);
  std::printf("  block %dx%d, %d threads, %d bytes of shared memory\n", launch.blockM,
              launch.blockN, launch.threadsPerBlock, launch.sharedMemoryBytes);

  std::string noGpu = attn::harness::gpuUnavailableReason();
  if (!noGpu.empty()) {
    std::printf("no GPU run: %s\n", noGpu.c_str());
    return 0;
  }

  // 3. Device tensors in BSHD layout, filled with random values (the harness
  //    keeps a host copy of exactly what it uploaded, for the reference).
  attn::harness::ForwardProblem data(launch, shape, /*seed=*/2026);
  data.poisonOutputs();
  std::printf("  B=%lld Sq=%lld Sk=%lld on %s\n", static_cast<long long>(shape.batch),
              static_cast<long long>(shape.seqlenQ), static_cast<long long>(shape.seqlenK),
              attn::queryDevice(attn::currentDevice()).name.c_str());

  // 4. Run: the arguments are checked against the kernel, then it launches.
  kernel.run(data.q.view, data.k.view, data.v.view, data.o.view,
             static_cast<float *>(data.lse.data()), /*stream=*/nullptr);
  ATTN_CU_CHECK(cuCtxSynchronize);

  // 5. The CPU reference of the same spec.
  attn::reference::Problem problem = attn::referenceProblemFromSpec(
      compiler.printSpec(spec), shape.batch, shape.seqlenQ, shape.seqlenK);
  attn::harness::Comparison result =
      attn::harness::compareWithReference(problem, data, launch.dtype);
  attn::harness::Tolerance tolerance = attn::harness::toleranceFor(launch.dtype);
  std::printf("max|dO| = %.3g (tolerance %.3g + %.3g*|ref|), rel-L2 = %.3g, max|dLSE| = %.3g "
              "(tolerance %.3g)\n",
              result.maxAbsError, tolerance.absolute, tolerance.relative, result.relativeL2Error,
              result.maxLseError, tolerance.lseAbsolute);
  if (!result.passed()) {
    std::printf("FAIL: %s\n", result.firstViolation.c_str());
    return 1;
  }
  std::printf("PASS\n");
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  try {
    return run(argc, argv);
  } catch (const attn::Error &error) {
    std::fprintf(stderr, "jit_host: %s\n", error.what());
    return 1;
  }
}
