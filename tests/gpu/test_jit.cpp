// The host API on the GPU. Kernels from attn::Compiler (builder and text
// specs; fresh, from the disk cache, from memory, from precompiled files)
// against the CPU reference, and every check Kernel::run makes before it
// launches: each refusal names the argument, and the outputs keep the poison
// they were filled with, so nothing ran.
//
// Tagged [jit]: `attn_gpu_tests "[jit]"` runs only these.
#include <catch2/catch.hpp>

#include "AttnHarness.h"
#include "TestSupport.h"
#include "attn/Compiler/Compiler.h"
#include "attn/Compiler/Jit.h"
#include "attn/runtime/LaunchMetadata.h"

#include <atomic>
#include <climits>
#include <cstdlib>
#include <functional>
#include <memory>
#include <thread>

using namespace attn;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using test::TempDir;
using test::writeFile;

namespace {

JitOptions cacheIn(const std::string &directory) {
  DiskCacheOptions disk;
  disk.directory = directory;
  JitOptions options;
  options.diskCache = disk;
  return options;
}

/// The reference problem of a built spec, read from the IR it builds.
reference::Problem referenceFor(Compiler &compiler, const Spec &spec, const harness::Shape &shape) {
  return referenceProblemFromSpec(compiler.printSpec(spec), shape.batch, shape.seqlenQ,
                                  shape.seqlenK);
}

/// Poisons the outputs, runs `kernel` on `data`, waits, and compares with
/// the reference.
harness::Comparison runAndCompare(const Kernel &kernel, harness::ForwardProblem &data,
                                  const reference::Problem &problem, CUstream stream = nullptr) {
  data.poisonOutputs();
  kernel.run(data.args(), stream);
  ATTN_CU_CHECK(cuCtxSynchronize);
  return harness::compareWithReference(problem, data, kernel.launchConfig().dtype);
}

#define CHECK_MATCHES_REFERENCE(comparison)                                                        \
  do {                                                                                             \
    const harness::Comparison &result_ = (comparison);                                             \
    INFO("max|dO|=" << result_.maxAbsError << " rel-L2=" << result_.relativeL2Error                \
                    << " max|dLSE|=" << result_.maxLseError                                        \
                    << "\nfirst violation: " << result_.firstViolation);                           \
    CHECK(result_.passed());                                                                       \
  } while (false)

} // namespace

//===----------------------------------------------------------------------===//
// The JIT path against the reference
//===----------------------------------------------------------------------===//

namespace {
struct JitCase {
  const char *what;
  std::function<Spec()> spec;
  harness::Shape shape;
};
} // namespace

TEST_CASE("JIT-compiled kernels from the builder match the reference", "[gpu][jit]") {
  static const JitCase cases[] = {
      {"causal GQA 16:4, head dim 128, bf16",
       [] { return SpecBuilder("jit_causal_gqa").heads(16, 4).headDim(128).causal(); },
       {1, 300, 517, false}},
      {"top-left sliding window, MQA, head dim 64, f16",
       [] {
         return SpecBuilder("jit_window_mqa")
             .heads(4, 1)
             .headDim(64)
             .dtype(DType::F16)
             .slidingWindow(50, 10, CausalAlign::TopLeft);
       },
       {2, 200, 200, true}},
      {"no mask, explicit scale, head dim 256, bf16",
       [] { return SpecBuilder("jit_full_d256").heads(2).headDim(256).scale(0.05); },
       {1, 129, 70, false}},
  };
  JitCase testCase = GENERATE(from_range(std::begin(cases), std::end(cases)));
  INFO(testCase.what);
  TempDir cache;
  Compiler compiler(cacheIn(cache.path));
  Spec spec = testCase.spec();
  Kernel kernel = compiler.compile(spec);
  REQUIRE(compiler.stats().compiles == 1);

  harness::ForwardProblem data(kernel.launchConfig(), testCase.shape, 17);
  CHECK_MATCHES_REFERENCE(
      runAndCompare(kernel, data, referenceFor(compiler, spec, testCase.shape)));
}

TEST_CASE("a kernel from the disk cache, from memory or from files computes the same",
          "[gpu][jit]") {
  TempDir dir;
  Spec spec = SpecBuilder("jit_cached").heads(8, 2).headDim(128).causal();
  harness::Shape shape{2, 190, 260, false};

  Compiler first(cacheIn(dir.path + "/cache"));
  Kernel compiled = first.compile(spec);
  harness::ForwardProblem data(compiled.launchConfig(), shape, 5);
  reference::Problem problem = referenceFor(first, spec, shape);
  CHECK_MATCHES_REFERENCE(runAndCompare(compiled, data, problem));
  const std::vector<uint8_t> expectedO = data.o.buffer.download<uint8_t>();
  const std::vector<uint8_t> expectedLse = data.lse.download<uint8_t>();

  auto expectSameOutputs = [&](const Kernel &kernel, CUstream stream = nullptr) {
    CHECK_MATCHES_REFERENCE(runAndCompare(kernel, data, problem, stream));
    CHECK(data.o.buffer.download<uint8_t>() == expectedO);
    CHECK(data.lse.download<uint8_t>() == expectedLse);
  };

  SECTION("memory hit: the same image, already loaded") {
    Kernel again = first.compile(spec);
    CHECK(first.stats().memoryHits == 1);
    CHECK(&again.image() == &compiled.image());
    expectSameOutputs(again);
  }
  SECTION("disk hit: a new Compiler loads its own module") {
    Compiler second(cacheIn(dir.path + "/cache"));
    Kernel fromDisk = second.compile(spec);
    CHECK(second.stats().diskHits == 1);
    CHECK(second.stats().compiles == 0);
    CHECK(&fromDisk.image() != &compiled.image());
    fromDisk.load();
    expectSameOutputs(fromDisk);
  }
  SECTION("a cubin and its metadata shipped as files (Kernel::fromFiles)") {
    const KernelImage &image = compiled.image();
    writeFile(dir.path + "/k.cubin", std::string(image.cubin.begin(), image.cubin.end()));
    writeFile(dir.path + "/k.meta", serializeLaunchConfig(image.launch));
    expectSameOutputs(Kernel::fromFiles(dir.path + "/k.cubin", dir.path + "/k.meta"));
  }
  SECTION("PTX shipped as a file, compiled by the driver") {
    writeFile(dir.path + "/k.ptx", compiled.image().ptx);
    writeFile(dir.path + "/k.meta", serializeLaunchConfig(compiled.launchConfig()));
    Kernel fromPtx = Kernel::fromFiles(dir.path + "/k.ptx", dir.path + "/k.meta");
    // The driver's PTX compiler may schedule differently from NVRTC's, so
    // only the reference decides here.
    CHECK_MATCHES_REFERENCE(runAndCompare(fromPtx, data, problem));
  }
  SECTION("on a stream of the caller's") {
    CUstream stream = nullptr;
    ATTN_CU_CHECK(cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);
    expectSameOutputs(compiled, stream);
    ATTN_CU_CHECK(cuStreamDestroy, stream);
  }
}

TEST_CASE("a text spec compiles and runs like the builder's", "[gpu][jit]") {
  // docs/examples/causal_hd128.mlir, inline: the test binary may run where
  // the sources are not.
  const std::string text = "attn.kernel @causal_hd128\n"
                           "    problem = #attn.problem<q_heads = 16, kv_heads = 4, head_dim = "
                           "128, element_type = bf16>\n"
                           "    mask = #attn.causal<bottom_right>\n"
                           "    normalizer = #attn.softmax\n";
  TempDir dir;
  Compiler compiler(cacheIn(dir.path));
  Kernel fromText = compiler.compile(text, "causal_hd128.mlir");
  Kernel fromBuilder =
      compiler.compile(SpecBuilder("causal_hd128").heads(16, 4).headDim(128).causal());
  CHECK(&fromText.image() == &fromBuilder.image());
  harness::Shape shape{1, 257, 257, false};
  harness::ForwardProblem data(fromText.launchConfig(), shape, 9);
  CHECK_MATCHES_REFERENCE(runAndCompare(
      fromText, data, referenceProblemFromSpec(text, shape.batch, shape.seqlenQ, shape.seqlenK)));
}

TEST_CASE("first-use tuning times real candidates and returns a kernel that matches the "
          "reference",
          "[gpu][jit][first_use]") {
  // The GPU path of Compiler::compileFor: the default timer launches each
  // candidate on the call's arguments; the winner is recorded, computes the
  // reference's answer, and a second call of the bucket times nothing.
  TempDir dir;
  JitOptions options = cacheIn(dir.path + "/cache");
  options.tuningDatabase = dir.path + "/tuning.tsv";
  options.firstUse.enabled = true;
  options.firstUse.candidates = 4;
  Compiler compiler(options);
  Spec spec = SpecBuilder("first_use_gpu").heads(8, 2).headDim(128).causal();
  const harness::Shape shape{2, 1000, 1000, false};
  const reference::Problem problem = referenceFor(compiler, spec, shape);

  // The shape's plan (the heuristic's) only sizes the problem's buffers.
  Kernel sizing = Compiler(cacheIn(dir.path + "/cache")).compile(spec);
  harness::ForwardProblem data(sizing.launchConfig(), shape, 23);
  data.poisonOutputs();
  Kernel tuned = compiler.compileFor(spec, data.args());
  CHECK(compiler.stats().firstUseTunings == 1);
  CHECK(compiler.stats().firstUseSeconds > 0);
  CHECK(compiler.stats().firstUseSeconds < 60);
  const std::vector<TuningRecord> records = TuningDatabase(*options.tuningDatabase).records();
  REQUIRE(records.size() == 1);
  CHECK(records[0].milliseconds > 0);
  CHECK_MATCHES_REFERENCE(runAndCompare(tuned, data, problem));

  Kernel again = compiler.compileFor(spec, data.args());
  CHECK(compiler.stats().firstUseTunings == 1);
  CHECK(again.image().ptx == tuned.image().ptx);
}

TEST_CASE("first-use tuning of a decode call times real split counts and the kernel it returns "
          "matches the reference with them",
          "[gpu][jit][first_use][short]") {
  TempDir dir;
  JitOptions options = cacheIn(dir.path + "/cache");
  options.tuningDatabase = dir.path + "/tuning.tsv";
  options.firstUse.enabled = true;
  Compiler compiler(options);
  Spec spec = SpecBuilder("first_use_decode").heads(8, 2).headDim(128).causal();
  // One query row of 3 sequences over 3001 keys: not a tile multiple.
  const harness::Shape shape{3, 1, 3001, false};
  const reference::Problem problem = referenceFor(compiler, spec, shape);
  Kernel sizing = Compiler(cacheIn(dir.path + "/cache")).compile(spec);
  harness::ForwardProblem data(sizing.launchConfig(), shape, 31);
  Kernel tuned = compiler.compileFor(spec, data.args());
  CHECK(compiler.stats().firstUseTunings == 1);
  CHECK(compiler.stats().firstUseSeconds < 10);
  const std::vector<TuningRecord> records = TuningDatabase(*options.tuningDatabase).records();
  REQUIRE(records.size() == 1);
  const std::optional<int> recorded = parseKeySplitsConfig(records[0].config);
  REQUIRE(recorded);
  REQUIRE(tuned.launchConfig().tunedKeySplits.size() == 1);
  CHECK(tuned.launchConfig().tunedKeySplits[0].keySplits == *recorded);

  // The call with a workspace for the recorded count runs it and matches.
  AttnForwardArgs args = data.args();
  DeviceBuffer workspace(std::max<uint64_t>(forwardWorkspaceBytes(tuned.launchConfig(), args), 16));
  args.workspace = workspace.data();
  args.workspaceBytes = workspace.size();
  CHECK(shortQueryPlanFor(tuned.launchConfig(), args,
                          queryDevice(currentDevice()).multiprocessorCount)
            .splits == *recorded);
  data.poisonOutputs();
  tuned.run(args);
  ATTN_CU_CHECK(cuCtxSynchronize);
  CHECK_MATCHES_REFERENCE(
      harness::compareWithReference(problem, data, tuned.launchConfig().dtype));
  compiler.compileFor(spec, data.args());
  CHECK(compiler.stats().firstUseTunings == 1);
}

TEST_CASE("threads compiling and running one kernel at once", "[gpu][jit]") {
  TempDir dir;
  Compiler compiler(cacheIn(dir.path));
  Spec spec = SpecBuilder("jit_threads").heads(4, 2).headDim(64).causal();
  harness::Shape shape{1, 150, 150, false};
  constexpr int kThreads = 4;
  reference::Problem problem = referenceFor(compiler, spec, shape);
  // Catch's assertions are not thread safe: threads record, the test checks.
  std::vector<harness::Comparison> results(kThreads);
  std::vector<std::string> errors(kThreads);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      try {
        ++ready;
        while (ready < kThreads)
          std::this_thread::yield();
        Kernel kernel = compiler.compile(spec);
        harness::ForwardProblem data(kernel.launchConfig(), shape, 100 + i);
        data.poisonOutputs();
        kernel.run(data.args());
        ATTN_CU_CHECK(cuStreamSynchronize, nullptr);
        results[i] = harness::compareWithReference(problem, data, kernel.launchConfig().dtype);
      } catch (const std::exception &error) {
        errors[i] = error.what();
      }
    });
  for (std::thread &thread : threads)
    thread.join();
  CHECK(compiler.stats().compiles == 1);
  for (int i = 0; i < kThreads; ++i) {
    INFO("thread " << i);
    CHECK(errors[i] == "");
    CHECK_MATCHES_REFERENCE(results[i]);
  }
}

//===----------------------------------------------------------------------===//
// Validation: refused before anything runs
//===----------------------------------------------------------------------===//

namespace {

/// A GQA kernel (8 query heads, 2 kv heads, head dim 128, bf16) and valid
/// device arguments for it: B=2, Sq=100, Sk=130, BSHD.
struct CheckedLaunch {
  TempDir cache;
  Compiler compiler{cacheIn(cache.path)};
  Kernel kernel = compiler.compile(SpecBuilder("jit_checked").heads(8, 2).headDim(128).causal());
  harness::ForwardProblem data{kernel.launchConfig(), {2, 100, 130, false}, 23};

  CheckedLaunch() { data.poisonOutputs(); }

  /// Runs `runner` (the checked kernel by default) with `args` and expects
  /// an attn::Error whose message starts with "<argument>: " and contains
  /// `detail`; then checks that the device is healthy and that O and the LSE
  /// still hold their poison.
  void expectRefused(const AttnForwardArgs &args, const std::string &argument,
                     const std::string &detail, const Kernel *runner = nullptr) {
    CHECK_THROWS_WITH((runner ? *runner : kernel).run(args),
                      StartsWith(argument + ": ") && Contains(detail));
    ATTN_CU_CHECK(cuCtxSynchronize);
    CHECK(outputsUntouched());
  }

  bool outputsUntouched() const {
    for (uint8_t byte : data.o.buffer.download<uint8_t>())
      if (byte != 0xFF)
        return false;
    for (uint32_t word : data.lse.download<uint32_t>())
      if (word != 0x7FC00000u)
        return false;
    return true;
  }
};

/// One invalid argument set: which argument the message must name, what it
/// must say, and how to spoil valid arguments.
struct InvalidCase {
  const char *argument;
  const char *detail;
  std::function<void(AttnForwardArgs &)> spoil;
};

uint8_t *bytes(void *pointer) { return static_cast<uint8_t *>(pointer); }

} // namespace

TEST_CASE("every argument error is refused with the argument's name before a launch",
          "[gpu][jit][validate]") {
  CheckedLaunch launch;
  const int64_t kInt32Overflow = int64_t(INT_MAX) + 1;
  const std::vector<InvalidCase> cases = {
      // Element type.
      {"q", "dtype f16 does not match the kernel's bf16", [](auto &a) { a.q.dtype = DType::F16; }},
      {"k", "dtype f16 does not match the kernel's bf16", [](auto &a) { a.k.dtype = DType::F16; }},
      {"v", "dtype f32 does not match the kernel's bf16", [](auto &a) { a.v.dtype = DType::F32; }},
      {"o", "dtype f16 does not match the kernel's bf16", [](auto &a) { a.o.dtype = DType::F16; }},
      // Head dim.
      {"q", "head_dim 64 does not match the kernel's 128", [](auto &a) { a.q.shape[3] = 64; }},
      {"k", "head_dim 64 does not match the kernel's 128", [](auto &a) { a.k.shape[3] = 64; }},
      {"v", "head_dim 256 does not match the kernel's 128", [](auto &a) { a.v.shape[3] = 256; }},
      {"o", "head_dim 64 does not match the kernel's 128", [](auto &a) { a.o.shape[3] = 64; }},
      // Heads and the GQA ratio.
      {"q",
       "4 heads, but the kernel was compiled for 8 query heads (GQA: 8 query heads, 4 per "
       "kv head)",
       [](auto &a) { a.q.shape[2] = 4; }},
      {"k",
       "8 heads, but the kernel was compiled for 2 kv heads (GQA: 8 query heads, 4 per kv "
       "head)",
       [](auto &a) { a.k.shape[2] = 8; }},
      {"v", "1 heads, but the kernel was compiled for 2 kv heads",
       [](auto &a) { a.v.shape[2] = 1; }},
      {"o", "16 heads, but the kernel was compiled for 8 query heads",
       [](auto &a) { a.o.shape[2] = 16; }},
      // Batch and sequence lengths that disagree.
      {"o", "shape [2, 99, 8, 128] does not match q's [2, 100, 8, 128]",
       [](auto &a) { a.o.shape[1] = 99; }},
      {"o", "shape [1, 100, 8, 128] does not match q's [2, 100, 8, 128]",
       [](auto &a) { a.o.shape[0] = 1; }},
      {"v", "shape [2, 129, 2, 128] does not match k's [2, 130, 2, 128]",
       [](auto &a) { a.v.shape[1] = 129; }},
      {"k", "batch 1 does not match q's batch 2", [](auto &a) { a.k.shape[0] = a.v.shape[0] = 1; }},
      // Layout: head_dim contiguous, strides and pointers 16-byte aligned.
      {"q", "last dim (head_dim) must be contiguous (stride 1), got 2",
       [](auto &a) { a.q.strides[3] = 2; }},
      {"k", "last dim (head_dim) must be contiguous", [](auto &a) { a.k.strides[3] = 0; }},
      {"v", "last dim (head_dim) must be contiguous", [](auto &a) { a.v.strides[3] = -1; }},
      {"o", "last dim (head_dim) must be contiguous", [](auto &a) { a.o.strides[3] = 8; }},
      {"q", "stride of dim 1 must be a multiple of 16 bytes, got 2056",
       [](auto &a) { a.q.strides[1] += 4; }},
      {"k", "stride of dim 2 must be a multiple of 16 bytes, got 264",
       [](auto &a) { a.k.strides[2] = 132; }},
      {"v", "stride of dim 0 must be a multiple of 16 bytes", [](auto &a) { a.v.strides[0] += 1; }},
      {"o", "stride of dim 1 must be a multiple of 16 bytes", [](auto &a) { a.o.strides[1] -= 2; }},
      {"k", "stride of dim 1 must be non-negative, got -256",
       [](auto &a) { a.k.strides[1] = -256; }},
      {"q", "data pointer must be 16-byte aligned",
       [](auto &a) { a.q.data = bytes(a.q.data) + 8; }},
      {"k", "data pointer must be 16-byte aligned",
       [](auto &a) { a.k.data = bytes(a.k.data) + 2; }},
      {"v", "data pointer must be 16-byte aligned",
       [](auto &a) { a.v.data = bytes(a.v.data) + 4; }},
      {"o", "data pointer must be 16-byte aligned",
       [](auto &a) { a.o.data = bytes(a.o.data) + 1; }},
      {"lse", "pointer must be 4-byte aligned",
       [](auto &a) { a.lse = reinterpret_cast<float *>(bytes(a.lse) + 2); }},
      // Null pointers for tensors that are not empty.
      {"q", "data pointer is null", [](auto &a) { a.q.data = nullptr; }},
      {"k", "data pointer is null", [](auto &a) { a.k.data = nullptr; }},
      {"v", "data pointer is null", [](auto &a) { a.v.data = nullptr; }},
      {"o", "data pointer is null", [](auto &a) { a.o.data = nullptr; }},
      {"lse", "pointer is null", [](auto &a) { a.lse = nullptr; }},
      // Sizes and strides beyond what TMA and the kernel's ints hold.
      {"q", "size of dim 1 must be non-negative, got -1",
       [](auto &a) { a.q.shape[1] = a.o.shape[1] = -1; }},
      {"q", "stride of dim 0 must be below 2^40 bytes",
       [](auto &a) { a.q.strides[0] = int64_t(1) << 40; }},
      // The forward kernels' sequence bound (attn_abi::kMaxSeqlen, which the
      // compiler's 32-bit mask arithmetic relies on) comes before TMA's 2^32.
      {"k", "seqlen 4294967297 exceeds the forward kernels' limit of 1073741824 rows",
       [](auto &a) { a.k.shape[1] = a.v.shape[1] = (int64_t(1) << 32) + 1; }},
      {"q", "seqlen 2147483648 exceeds the forward kernels' limit",
       [&](auto &a) { a.q.shape[1] = a.o.shape[1] = kInt32Overflow; }},
      {"k", "seqlen 1073741825 exceeds the forward kernels' limit",
       [&](auto &a) { a.k.shape[1] = a.v.shape[1] = int64_t(attn_abi::kMaxSeqlen) + 1; }},
      {"q", "work tiles exceed 2^31 - 1",
       [](auto &a) {
         // Batch x heads x query blocks: (2^31 - 1) x 8 x 1.
         for (TensorView *view : {&a.q, &a.k, &a.v, &a.o}) {
           view->shape[0] = INT_MAX;
           view->strides[0] = 0;
         }
       }},
  };
  for (const InvalidCase &invalid : cases) {
    AttnForwardArgs args = launch.data.args();
    invalid.spoil(args);
    INFO("expected: " << invalid.argument << ": " << invalid.detail);
    launch.expectRefused(args, invalid.argument, invalid.detail);
  }

  // The same arguments unspoiled run and write the outputs.
  launch.kernel.run(launch.data.args());
  ATTN_CU_CHECK(cuCtxSynchronize);
  CHECK_FALSE(launch.outputsUntouched());
}

TEST_CASE("memory that is not a device allocation holding the view is refused",
          "[gpu][jit][validate]") {
  CheckedLaunch launch;
  const AttnForwardArgs valid = launch.data.args();
  const size_t qBytes = launch.data.q.buffer.size();
  std::unique_ptr<void, decltype(&std::free)> host(std::aligned_alloc(256, qBytes), &std::free);
  REQUIRE(host);

  SECTION("host memory") {
    for (TensorView AttnForwardArgs::*tensor :
         {&AttnForwardArgs::q, &AttnForwardArgs::k, &AttnForwardArgs::v, &AttnForwardArgs::o}) {
      AttnForwardArgs args = valid;
      (args.*tensor).data = host.get();
      const char *name = tensor == &AttnForwardArgs::q   ? "q"
                         : tensor == &AttnForwardArgs::k ? "k"
                         : tensor == &AttnForwardArgs::v ? "v"
                                                         : "o";
      launch.expectRefused(args, name, "is not device memory; expected an allocation on device");
    }
    AttnForwardArgs args = valid;
    args.lse = static_cast<float *>(host.get());
    launch.expectRefused(args, "lse", "is not device memory");
  }
  SECTION("an address nothing was allocated at") {
    AttnForwardArgs args = valid;
    // The first page is never mapped.
    args.v.data = reinterpret_cast<void *>(uintptr_t(0x1000));
    launch.expectRefused(args, "v", "data pointer 0x1000 is not device memory");
  }
  SECTION("views that run past the end of their allocation") {
    AttnForwardArgs longer = valid;
    longer.q.shape[1] = longer.o.shape[1] = 101;
    launch.expectRefused(longer, "q", "but its allocation holds only");

    AttnForwardArgs shifted = valid;
    shifted.k.data = bytes(shifted.k.data) + 1024;
    launch.expectRefused(shifted, "k", "the view spans");

    DeviceBuffer smallLse(64);
    AttnForwardArgs tooSmall = valid;
    tooSmall.lse = static_cast<float *>(smallLse.data());
    launch.expectRefused(tooSmall, "lse", "but its allocation holds only");
  }
}

TEST_CASE("memory of another GPU is refused", "[gpu][jit][validate]") {
  if (deviceCount() < 2) {
    WARN("skipped: needs two GPUs, found " << deviceCount());
    return;
  }
  CheckedLaunch launch;
  CUcontext home = ensureContext();
  CUdevice secondDevice;
  ATTN_CU_CHECK(cuDeviceGet, &secondDevice, 1);
  CUcontext second = nullptr;
  ATTN_CU_CHECK(cuDevicePrimaryCtxRetain, &second, secondDevice);
  ATTN_CU_CHECK(cuCtxSetCurrent, second);
  auto onSecond = std::make_unique<DeviceBuffer>(launch.data.o.buffer.size());
  ATTN_CU_CHECK(cuCtxSetCurrent, home);

  AttnForwardArgs args = launch.data.args();
  args.o.data = onSecond->data();
  launch.expectRefused(args, "o",
                       "data pointer is memory of device 1, but the current context "
                       "is on device 0");

  ATTN_CU_CHECK(cuCtxSetCurrent, second);
  onSecond.reset();
  ATTN_CU_CHECK(cuCtxSetCurrent, home);
}

TEST_CASE("an empty Kernel handle is refused", "[gpu][jit][validate]") {
  CheckedLaunch launch;
  Kernel empty;
  launch.expectRefused(launch.data.args(), "kernel", "empty handle", &empty);
}

TEST_CASE("empty problems launch nothing and succeed on the supported device",
          "[gpu][jit][validate]") {
  CheckedLaunch launch;
  AttnForwardArgs noQueries = launch.data.args();
  noQueries.q.shape[1] = noQueries.o.shape[1] = 0;
  CHECK_NOTHROW(launch.kernel.run(noQueries));
  AttnForwardArgs noBatch = launch.data.args();
  noBatch.q.shape[0] = noBatch.o.shape[0] = noBatch.k.shape[0] = noBatch.v.shape[0] = 0;
  CHECK_NOTHROW(launch.kernel.run(noBatch));
  ATTN_CU_CHECK(cuCtxSynchronize);
  CHECK(launch.outputsUntouched());
  CHECK_NOTHROW(checkDeviceSupported(queryDevice(currentDevice())));
}
