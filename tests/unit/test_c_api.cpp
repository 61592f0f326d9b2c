// The C API (attn-c/Attnc.h, libattnc_c.so) as a C caller sees it, without
// a GPU: status codes and the per-thread last error, compiling the shipped
// example forward and backward through the caches, and launch arguments
// rejected before the driver is needed. Where a number can be computed
// another way (the kernel's plan, the backward's workspace), the C++ API
// linked into this test computes it on its own.

#include "attn-c/Attnc.h"

#include "attn/Compiler/Jit.h"
#include "attn/runtime/Driver.h"

#include "TestSupport.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <memory>
#include <regex>
#include <string>
#include <thread>

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

using CompilerHandle = std::unique_ptr<attnc_compiler, decltype(&attnc_compiler_destroy)>;
using KernelHandle = std::unique_ptr<attnc_kernel, decltype(&attnc_kernel_destroy)>;

std::string exampleText(const std::string &name) {
  return attn::test::readFile(std::string(ATTNC_DOCS_EXAMPLES_DIR) + "/" + name + ".mlir");
}

/// One disk cache for the whole run, so that each kernel is compiled by
/// NVRTC once; nothing outside it is read or written.
const std::string &cacheDir() {
  static attn::test::TempDir dir;
  return dir.path;
}

/// A compiler on the run's cache without a tuning database (heuristic
/// plans, whatever the user's database holds).
CompilerHandle makeCompiler(const char *cacheDirectory = cacheDir().c_str()) {
  attnc_compiler *compiler = nullptr;
  REQUIRE(attnc_compiler_create("", cacheDirectory, &compiler) == ATTNC_OK);
  REQUIRE(compiler);
  return CompilerHandle(compiler, &attnc_compiler_destroy);
}

KernelHandle compileExample(attnc_compiler *compiler, int32_t backward) {
  const std::string text = exampleText("causal_hd128");
  attnc_kernel *kernel = nullptr;
  if (attnc_compile(compiler, text.c_str(), "causal_hd128.mlir", backward, &kernel) != ATTNC_OK)
    FAIL(attnc_last_error());
  REQUIRE(kernel);
  return KernelHandle(kernel, &attnc_kernel_destroy);
}

/// The same kernel from the C++ API, from the same disk cache.
attn::Kernel compileExampleInCpp(bool backward) {
  attn::JitOptions options;
  options.tuningDatabase = "";
  attn::DiskCacheOptions disk;
  disk.directory = cacheDir();
  options.diskCache = disk;
  attn::Compiler compiler(options);
  const std::string text = exampleText("causal_hd128");
  return backward ? compiler.compileBackward(text, "causal_hd128.mlir")
                  : compiler.compile(text, "causal_hd128.mlir");
}

std::string lastError() { return attnc_last_error(); }

attnc_kernel_info infoOf(const attnc_kernel *kernel) {
  attnc_kernel_info info;
  REQUIRE(attnc_kernel_get_info(kernel, &info) == ATTNC_OK);
  return info;
}

std::string ptxOf(const attnc_kernel *kernel) {
  size_t size = 0;
  const char *ptx = attnc_kernel_ptx(kernel, &size);
  REQUIRE(ptx);
  CHECK(size == std::strlen(ptx));
  return std::string(ptx, size);
}

/// A contiguous BSHD tensor at a fake (aligned) device address: the checks
/// before the driver never dereference it.
attnc_tensor bshd(uintptr_t address, int64_t batch, int64_t seqlen, int64_t heads,
                  int64_t headDim, int64_t dtype = ATTNC_BF16) {
  attnc_tensor tensor = {};
  tensor.data = reinterpret_cast<void *>(address);
  tensor.dtype = dtype;
  tensor.rank = 4;
  const int64_t shape[4] = {batch, seqlen, heads, headDim};
  int64_t stride = 1;
  for (int dim = 3; dim >= 0; --dim) {
    tensor.shape[dim] = shape[dim];
    tensor.strides[dim] = stride;
    stride *= shape[dim];
  }
  return tensor;
}

attn::TensorView toView(const attnc_tensor &tensor) {
  return attn::contiguousBSHD(tensor.data, static_cast<attn::DType>(tensor.dtype),
                              tensor.shape[0], tensor.shape[1], tensor.shape[2],
                              tensor.shape[3]);
}

/// Forward arguments the causal example accepts up to the driver.
attnc_forward_args validForwardArgs() {
  attnc_forward_args args = {};
  args.q = bshd(0x10000000, 1, 64, 16, 128);
  args.k = bshd(0x20000000, 1, 64, 4, 128);
  args.v = bshd(0x30000000, 1, 64, 4, 128);
  args.o = bshd(0x40000000, 1, 64, 16, 128);
  args.lse = reinterpret_cast<float *>(uintptr_t(0x50000000));
  return args;
}

/// A call that failed with a message starting with `prefix`.
void checkFailure(attnc_status status, const std::string &prefix) {
  CHECK(status == ATTNC_ERROR);
  CHECK_THAT(lastError(), StartsWith(prefix));
}

} // namespace

TEST_CASE("C API: versions", "[c-api]") {
  CHECK(std::string(attnc_version()) == attn::attncVersion());
  CHECK(std::string(attnc_version()) == "0.1.0");
  CHECK(attnc_c_api_version() == ATTNC_C_API_VERSION);
  CHECK(ATTNC_C_API_VERSION == 6);
}

TEST_CASE("C API: null handles and outputs are errors naming the parameter", "[c-api]") {
  CompilerHandle compiler = makeCompiler("");
  attnc_forward_args forward = validForwardArgs();
  attnc_backward_args backward = {};
  attnc_linear_args linear = {};
  attnc_jit_stats stats;
  attnc_kernel_info info;
  uint64_t bytes = 0;

  checkFailure(attnc_compiler_create("", "", nullptr), "out: null pointer");
  checkFailure(attnc_compiler_stats(nullptr, &stats), "compiler: null handle");
  checkFailure(attnc_compiler_stats(compiler.get(), nullptr), "out: null pointer");

  // A failed call clears its output.
  attnc_kernel *kernel = reinterpret_cast<attnc_kernel *>(uintptr_t(8));
  checkFailure(attnc_compile(nullptr, "", "spec", 0, &kernel), "compiler: null handle");
  CHECK(kernel == nullptr);
  checkFailure(attnc_compile(compiler.get(), nullptr, "spec", 0, &kernel),
               "spec_text: null pointer");
  checkFailure(attnc_compile(compiler.get(), "", "spec", 0, nullptr), "out: null pointer");
  checkFailure(attnc_compile(compiler.get(), "", "spec", 2, &kernel),
               "backward: must be 0 or 1, got 2");

  checkFailure(attnc_kernel_get_info(nullptr, &info), "kernel: null handle");
  checkFailure(attnc_kernel_load(nullptr), "kernel: null handle");
  size_t size = 1;
  CHECK(attnc_kernel_ptx(nullptr, &size) == nullptr);
  CHECK(size == 0);
  CHECK_THAT(lastError(), StartsWith("kernel: null handle"));
  checkFailure(attnc_run_forward(nullptr, &forward, nullptr), "kernel: null handle");
  checkFailure(attnc_run_backward(nullptr, &backward, nullptr), "kernel: null handle");
  checkFailure(attnc_run_linear(nullptr, &linear, nullptr), "kernel: null handle");
  checkFailure(attnc_run_decode(nullptr, &linear, nullptr), "kernel: null handle");
  checkFailure(attnc_forward_workspace_bytes(nullptr, &forward, &bytes), "kernel: null handle");
  checkFailure(attnc_backward_workspace_bytes(nullptr, &backward, &bytes),
               "kernel: null handle");
  checkFailure(attnc_linear_workspace_bytes(nullptr, &linear, &bytes), "kernel: null handle");

  attnc_buffer *buffer = reinterpret_cast<attnc_buffer *>(uintptr_t(8));
  checkFailure(attnc_build_tile_coverage(nullptr, &forward, nullptr, &buffer),
               "kernel: null handle");
  CHECK(buffer == nullptr);
  checkFailure(attnc_build_tile_key_bits(nullptr, &forward, nullptr, nullptr),
               "out: null pointer");
  CHECK(attnc_buffer_data(nullptr) == nullptr);
  CHECK_THAT(lastError(), StartsWith("buffer: null handle"));
  CHECK(attnc_buffer_bytes(nullptr) == 0);

  // Destroying nothing is allowed, as free(NULL) is.
  attnc_compiler_destroy(nullptr);
  attnc_kernel_destroy(nullptr);
  attnc_buffer_destroy(nullptr);
}

TEST_CASE("C API: a malformed spec fails with its diagnostics", "[c-api]") {
  CompilerHandle compiler = makeCompiler("");
  attnc_kernel *kernel = nullptr;
  const char *text = "attn.kernel @broken\n"
                     "    problem = #attn.problem<q_heads = 16>\n";
  CHECK(attnc_compile(compiler.get(), text, "broken.mlir", 0, &kernel) == ATTNC_ERROR);
  CHECK(kernel == nullptr);
  const std::string message = lastError();
  INFO(message);
  CHECK(std::regex_search(message, std::regex(R"(broken\.mlir:2:[0-9]+: )")));
  CHECK_THAT(message, Contains("missing 'kv_heads'"));
}

TEST_CASE("C API: the causal example compiles to its plan and PTX", "[c-api]") {
  CompilerHandle compiler = makeCompiler();
  KernelHandle kernel = compileExample(compiler.get(), 0);

  const attnc_kernel_info info = infoOf(kernel.get());
  // What docs/examples/causal_hd128.mlir says.
  CHECK(info.head_dim == 128);
  CHECK(info.q_heads == 16);
  CHECK(info.kv_heads == 4);
  CHECK(info.dtype == ATTNC_BF16);
  CHECK(info.causal == 1);
  CHECK(info.scale == Approx(1 / std::sqrt(128.0)).epsilon(1e-6));
  CHECK(info.linear_family == 0);
  CHECK(info.backward == 0);
  CHECK(info.num_captures == 0);
  // What the plan fixes, as the C++ API reads it.
  const attn::AttnLaunchConfig config = compileExampleInCpp(false).launchConfig();
  CHECK(info.block_m == config.blockM);
  CHECK(info.block_n == config.blockN);
  CHECK(info.threads_per_block == config.threadsPerBlock);
  CHECK(info.shared_memory_bytes == config.sharedMemoryBytes);
  CHECK(info.automatic_work_order == config.automaticWorkOrder);

  CHECK_THAT(ptxOf(kernel.get()), Contains("wgmma.mma_async") &&
                                      Contains("cp.async.bulk.tensor") &&
                                      Contains(".entry " ATTN_FWD_KERNEL_NAME));
}

TEST_CASE("C API: backward = 1 compiles the spec's backward", "[c-api]") {
  CompilerHandle compiler = makeCompiler();
  KernelHandle kernel = compileExample(compiler.get(), 1);
  const attnc_kernel_info info = infoOf(kernel.get());
  CHECK(info.backward == 1);
  CHECK(info.head_dim == 128);
  CHECK_THAT(ptxOf(kernel.get()), Contains(".entry " ATTN_BWD_KERNEL_NAME));
}

TEST_CASE("C API: compiling the same text again is a memory hit", "[c-api]") {
  CompilerHandle compiler = makeCompiler();
  attnc_jit_stats stats;
  REQUIRE(attnc_compiler_stats(compiler.get(), &stats) == ATTNC_OK);
  CHECK(stats.memory_hits == 0);
  CHECK(stats.disk_hits + stats.compiles == 0);

  KernelHandle first = compileExample(compiler.get(), 0);
  REQUIRE(attnc_compiler_stats(compiler.get(), &stats) == ATTNC_OK);
  CHECK(stats.memory_hits == 0);
  CHECK(stats.disk_hits + stats.compiles == 1);

  KernelHandle second = compileExample(compiler.get(), 0);
  REQUIRE(attnc_compiler_stats(compiler.get(), &stats) == ATTNC_OK);
  CHECK(stats.memory_hits == 1);
  CHECK(stats.disk_hits + stats.compiles == 1);
  // Both handles share one image.
  size_t size = 0;
  CHECK(attnc_kernel_ptx(first.get(), &size) == attnc_kernel_ptx(second.get(), &size));
}

TEST_CASE("C API: launch arguments are checked before the driver is needed", "[c-api]") {
  CompilerHandle compiler = makeCompiler();
  KernelHandle kernel = compileExample(compiler.get(), 0);
  attnc_forward_args args = validForwardArgs();
  uint64_t bytes = 0;

  SECTION("valid arguments get as far as the driver") {
    // Without a driver the launch fails on it; on a GPU machine the fake
    // addresses fail the device-memory checks instead.
    CHECK(attnc_run_forward(kernel.get(), &args, nullptr) == ATTNC_ERROR);
    if (!attn::Driver::available())
      CHECK_THAT(lastError(), Contains(attn::Driver::get().unavailableReason()));
    // The tail split's size depends on the device's multiprocessors.
    CHECK(attnc_forward_workspace_bytes(kernel.get(), &args, &bytes) ==
          (attn::Driver::available() ? ATTNC_OK : ATTNC_ERROR));
    if (!attn::Driver::available())
      CHECK_THAT(lastError(), Contains(attn::Driver::get().unavailableReason()));
  }
  SECTION("null arguments") {
    checkFailure(attnc_run_forward(kernel.get(), nullptr, nullptr), "args: null pointer");
    checkFailure(attnc_forward_workspace_bytes(kernel.get(), &args, nullptr),
                 "out: null pointer");
  }
  SECTION("an operand of rank 3") {
    args.q.rank = 3;
    checkFailure(attnc_run_forward(kernel.get(), &args, nullptr),
                 "q: rank 3, expected 4 (BSHD)");
    checkFailure(attnc_forward_workspace_bytes(kernel.get(), &args, &bytes),
                 "q: rank 3, expected 4 (BSHD)");
  }
  SECTION("a dtype outside the enum") {
    args.k.dtype = 9;
    checkFailure(attnc_run_forward(kernel.get(), &args, nullptr), "k: dtype 9 is not one of");
  }
  SECTION("a head dim the kernel was not compiled for (the runtime's check)") {
    args.q = bshd(0x10000000, 1, 64, 16, 64);
    checkFailure(attnc_run_forward(kernel.get(), &args, nullptr),
                 "q: head_dim 64 does not match the kernel's 128");
  }
  SECTION("captures") {
    attnc_tensor capture = {};
    capture.data = reinterpret_cast<void *>(uintptr_t(0x60000000));
    capture.dtype = ATTNC_F32;
    args.captures = &capture;
    args.num_captures = 1;

    capture.rank = 4;
    checkFailure(attnc_run_forward(kernel.get(), &args, nullptr),
                 "captures[0]: rank 4, expected 1 to 3");

    // A [16, 8] buffer stored column-major.
    capture.rank = 2;
    capture.shape[0] = 16;
    capture.shape[1] = 8;
    capture.strides[0] = 1;
    capture.strides[1] = 16;
    checkFailure(attnc_run_forward(kernel.get(), &args, nullptr),
                 "captures[0]: strides [1, 16] of shape [16, 8] are not contiguous");

    // Row-major, it reaches the runtime's count check: the kernel has none.
    capture.strides[0] = 8;
    capture.strides[1] = 1;
    checkFailure(attnc_run_forward(kernel.get(), &args, nullptr), "captures: ");

    args.captures = nullptr;
    checkFailure(attnc_run_forward(kernel.get(), &args, nullptr),
                 "captures: null pointer with num_captures 1");
  }
  SECTION("a paged cache reaches the runtime's checks") {
    // k and v as pools of 8 pages of 16 rows.
    args.k = bshd(0x20000000, 8, 16, 4, 128);
    args.v = bshd(0x30000000, 8, 16, 4, 128);
    args.paged.block_table = reinterpret_cast<const int32_t *>(uintptr_t(0x70000000));
    args.paged.seqlens_k = reinterpret_cast<const int32_t *>(uintptr_t(0x70001000));
    args.paged.block_table_stride = 4;
    checkFailure(attnc_run_forward(kernel.get(), &args, nullptr),
                 "paged.maxPages: must be positive, got 0");
    args.paged.max_pages = 4;
    args.paged.max_seqlen_k = 65;
    checkFailure(attnc_run_forward(kernel.get(), &args, nullptr),
                 "paged.maxSeqlenK: 65 is outside [0, paged.maxPages x page size = 64]");
    args.paged.seqlens_k = nullptr;
    checkFailure(attnc_run_forward(kernel.get(), &args, nullptr),
                 "paged.seqlensK: pointer is null");
    // -1 keeps the forward kernel, which reads no pages.
    args.paged.seqlens_k = reinterpret_cast<const int32_t *>(uintptr_t(0x70001000));
    args.key_splits = -1;
    checkFailure(attnc_run_forward(kernel.get(), &args, nullptr),
                 "keySplits: 0 asks for the forward kernel");
  }
  SECTION("key_splits: 0 is automatic, -1 the forward kernel, then split counts") {
    args.key_splits = -2;
    checkFailure(attnc_run_forward(kernel.get(), &args, nullptr),
                 "key_splits: must be 0 (automatic), -1 (the forward kernel) or a split count, "
                 "got -2");
    args.key_splits = 5000;
    checkFailure(attnc_run_forward(kernel.get(), &args, nullptr),
                 "keySplits: 5000 splits exceed the limit of 1024");
    args.key_splits = int64_t(1) << 40;
    checkFailure(attnc_run_forward(kernel.get(), &args, nullptr), "key_splits: must be 0");
  }
  SECTION("linear-family calls convert their operands too") {
    attnc_linear_args linear = {};
    linear.q = args.q;
    linear.k = args.k;
    linear.v = args.v;
    linear.o = args.o;
    linear.o.rank = 3;
    checkFailure(attnc_run_linear(kernel.get(), &linear, nullptr), "o: rank 3");
    checkFailure(attnc_run_decode(kernel.get(), &linear, nullptr), "o: rank 3");
    linear.o.rank = 4;
    checkFailure(attnc_run_linear(kernel.get(), &linear, nullptr), "config: ");
  }
}

TEST_CASE("C API: the backward's workspace is the runtime's", "[c-api]") {
  CompilerHandle compiler = makeCompiler();
  KernelHandle kernel = compileExample(compiler.get(), 1);

  attnc_backward_args args = {};
  args.q = bshd(0x10000000, 2, 200, 16, 128);
  args.k = bshd(0x20000000, 2, 300, 4, 128);
  args.v = bshd(0x30000000, 2, 300, 4, 128);
  args.o = bshd(0x40000000, 2, 200, 16, 128);
  args.d_o = bshd(0x50000000, 2, 200, 16, 128);
  args.lse = reinterpret_cast<const float *>(uintptr_t(0x60000000));
  args.dq = bshd(0x70000000, 2, 200, 16, 128);
  args.dk = bshd(0x80000000, 2, 300, 4, 128);
  args.dv = bshd(0x90000000, 2, 300, 4, 128);
  uint64_t bytes = 0;
  if (attnc_backward_workspace_bytes(kernel.get(), &args, &bytes) != ATTNC_OK)
    FAIL(attnc_last_error());

  attn::AttnBackwardArgs cpp;
  cpp.q = toView(args.q);
  cpp.k = toView(args.k);
  cpp.v = toView(args.v);
  cpp.o = toView(args.o);
  cpp.dO = toView(args.d_o);
  cpp.lse = args.lse;
  cpp.dq = toView(args.dq);
  cpp.dk = toView(args.dk);
  cpp.dv = toView(args.dv);
  const uint64_t expected =
      attn::backwardWorkspaceBytes(compileExampleInCpp(true).launchConfig(), cpp);
  CHECK(expected > 0);
  CHECK(bytes == expected);

  args.deterministic = 2;
  checkFailure(attnc_backward_workspace_bytes(kernel.get(), &args, &bytes),
               "deterministic: must be 0 or 1, got 2");
  args.deterministic = 1;
  args.d_o.rank = 2;
  checkFailure(attnc_backward_workspace_bytes(kernel.get(), &args, &bytes),
               "d_o: rank 2, expected 4 (BSHD)");
  // Without a workspace the launch is refused before the driver.
  args.d_o.rank = 4;
  checkFailure(attnc_run_backward(kernel.get(), &args, nullptr), "workspace: pointer is null");
  // The captures' and gradients' arrays are bounded and checked before use.
  args.num_capture_grads = 9;
  checkFailure(attnc_backward_workspace_bytes(kernel.get(), &args, &bytes),
               "num_capture_grads: 9 is not in 0 to 4");
  args.num_capture_grads = 1;
  checkFailure(attnc_backward_workspace_bytes(kernel.get(), &args, &bytes),
               "capture_grads: null pointer with num_capture_grads 1");
  args.num_capture_grads = 0;
  args.coverage_block_m = -1;
  checkFailure(attnc_backward_workspace_bytes(kernel.get(), &args, &bytes),
               "coverage_block_m, coverage_block_n: -1 x 0 is not a tile");
  args.coverage_block_m = 0;
  args.capture_grad_atomics = 2;
  checkFailure(attnc_backward_workspace_bytes(kernel.get(), &args, &bytes),
               "capture_grad_atomics: must be 0 or 1, got 2");
}

TEST_CASE("C API: the linear family's workspace checks its arguments first", "[c-api]") {
  CompilerHandle compiler = makeCompiler();
  const std::string text = exampleText("linear_elu_hd64");
  attnc_kernel *raw = nullptr;
  if (attnc_compile(compiler.get(), text.c_str(), "linear_elu_hd64.mlir", 0, &raw) != ATTNC_OK)
    FAIL(attnc_last_error());
  KernelHandle kernel(raw, &attnc_kernel_destroy);
  attnc_kernel_info info = {};
  REQUIRE(attnc_kernel_get_info(kernel.get(), &info) == ATTNC_OK);
  CHECK(info.linear_family == 1);

  attnc_linear_args args = {};
  args.q = bshd(0x10000000, 1, 256, 32, 64);
  args.k = bshd(0x20000000, 1, 256, 8, 64);
  args.v = bshd(0x30000000, 1, 256, 8, 64);
  args.o = bshd(0x40000000, 1, 256, 32, 64);
  uint64_t bytes = 0;
  checkFailure(attnc_linear_workspace_bytes(kernel.get(), &args, nullptr), "out: null pointer");
  args.q.rank = 3;
  checkFailure(attnc_linear_workspace_bytes(kernel.get(), &args, &bytes),
               "q: rank 3, expected 4 (BSHD)");
  args.q.rank = 4;
  args.segments = -1;
  checkFailure(attnc_linear_workspace_bytes(kernel.get(), &args, &bytes), "segments: ");
  args.segments = 0;
  // The split depends on the device's multiprocessors.
  CHECK(attnc_linear_workspace_bytes(kernel.get(), &args, &bytes) ==
        (attn::Driver::available() ? ATTNC_OK : ATTNC_ERROR));
}

TEST_CASE("C API: the linear family's backward sizes its workspace and checks its arguments",
          "[c-api]") {
  CompilerHandle compiler = makeCompiler();
  const std::string text = exampleText("retention_hd128");
  attnc_kernel *raw = nullptr;
  if (attnc_compile(compiler.get(), text.c_str(), "retention_hd128.mlir", 1, &raw) != ATTNC_OK)
    FAIL(attnc_last_error());
  KernelHandle kernel(raw, &attnc_kernel_destroy);
  attnc_kernel_info info = {};
  REQUIRE(attnc_kernel_get_info(kernel.get(), &info) == ATTNC_OK);
  CHECK(info.linear_family == 1);
  CHECK(info.backward == 1);

  attnc_linear_backward_args args = {};
  args.q = bshd(0x10000000, 2, 256, 16, 128);
  args.k = bshd(0x20000000, 2, 256, 16, 128);
  args.v = bshd(0x30000000, 2, 256, 16, 128);
  args.d_o = bshd(0x40000000, 2, 256, 16, 128);
  args.dq = bshd(0x50000000, 2, 256, 16, 128);
  args.dk = bshd(0x60000000, 2, 256, 16, 128);
  args.dv = bshd(0x70000000, 2, 256, 16, 128);
  uint64_t bytes = 1;
  checkFailure(attnc_run_linear_backward(nullptr, &args, nullptr), "kernel: null handle");
  checkFailure(attnc_run_linear_backward(kernel.get(), nullptr, nullptr), "args: null pointer");
  checkFailure(attnc_linear_backward_workspace_bytes(kernel.get(), &args, nullptr),
               "out: null pointer");
  args.dv.shape[1] = 255;
  checkFailure(attnc_linear_backward_workspace_bytes(kernel.get(), &args, &bytes), "dv: ");
  args.dv.shape[1] = 256;
  args.dk.data = args.v.data;
  checkFailure(attnc_run_linear_backward(kernel.get(), &args, nullptr),
               "dk: shares memory with v");
  args.dk.data = reinterpret_cast<void *>(uintptr_t(0x60000000));
  const int64_t tokenStride = args.dq.strides[1];
  args.dq.strides[1] = 0;
  checkFailure(attnc_run_linear_backward(kernel.get(), &args, nullptr),
               "dq: its strides make elements share memory");
  args.dq.strides[1] = tokenStride;
  args.initial_state = reinterpret_cast<const float *>(uintptr_t(0x90000000));
  args.d_initial_state = reinterpret_cast<float *>(uintptr_t(0x90000000));
  checkFailure(attnc_run_linear_backward(kernel.get(), &args, nullptr),
               "dInitialState: shares memory with initialState");
  args.initial_state = nullptr;
  args.d_initial_state = nullptr;
  args.d_o.rank = 3;
  checkFailure(attnc_run_linear_backward(kernel.get(), &args, nullptr),
               "d_o: rank 3, expected 4 (BSHD)");
  args.d_o.rank = 4;
  args.log_decay = reinterpret_cast<const float *>(uintptr_t(0x80000000));
  checkFailure(attnc_run_linear_backward(kernel.get(), &args, nullptr),
               "logDecay: the kernel is not gated");
  args.log_decay = nullptr;
  // The split depends on the device; one state's copies do not: two heads'
  // transposed initial state, D x D f32 per head, at least.
  args.initial_state = reinterpret_cast<const float *>(uintptr_t(0x90000000));
  if (attn::Driver::available()) {
    REQUIRE(attnc_linear_backward_workspace_bytes(kernel.get(), &args, &bytes) == ATTNC_OK);
    CHECK(bytes >= uint64_t(2) * 16 * 128 * 128 * 4);
  }

  // A forward module is not the backward's.
  attnc_kernel *forwardRaw = nullptr;
  REQUIRE(attnc_compile(compiler.get(), text.c_str(), "retention_hd128.mlir", 0, &forwardRaw) ==
          ATTNC_OK);
  KernelHandle forward(forwardRaw, &attnc_kernel_destroy);
  checkFailure(attnc_run_linear_backward(forward.get(), &args, nullptr), "config: ");
  args.initial_state = nullptr;
  args.d_final_key_sum = reinterpret_cast<const float *>(uintptr_t(0xa0000000));
  checkFailure(attnc_run_linear_backward(kernel.get(), &args, nullptr),
               "dFinalKeySum: the kernel does not normalize");

  // Normalized linear attention's backward reads the forward's output.
  const std::string normalizedText = exampleText("linear_elu_hd64");
  attnc_kernel *normalizedRaw = nullptr;
  if (attnc_compile(compiler.get(), normalizedText.c_str(), "linear_elu_hd64.mlir", 1,
                    &normalizedRaw) != ATTNC_OK)
    FAIL(attnc_last_error());
  KernelHandle normalized(normalizedRaw, &attnc_kernel_destroy);
  attnc_linear_backward_args gqa = {};
  gqa.q = gqa.d_o = gqa.dq = bshd(0x10000000, 2, 256, 32, 64);
  gqa.d_o.data = reinterpret_cast<void *>(uintptr_t(0x20000000));
  gqa.dq.data = reinterpret_cast<void *>(uintptr_t(0x30000000));
  gqa.k = bshd(0x40000000, 2, 256, 8, 64);
  gqa.v = bshd(0x50000000, 2, 256, 8, 64);
  gqa.dk = bshd(0x60000000, 2, 256, 8, 64);
  gqa.dv = bshd(0x70000000, 2, 256, 8, 64);
  checkFailure(attnc_linear_backward_workspace_bytes(normalized.get(), &gqa, &bytes),
               "o: normalized linear attention's backward reads the forward's output");
  gqa.o = bshd(0x80000000, 2, 256, 32, 64);
  gqa.o.rank = 3;
  checkFailure(attnc_linear_backward_workspace_bytes(normalized.get(), &gqa, &bytes),
               "o: rank 3, expected 4 (BSHD)");
  gqa.o.rank = 4;
  gqa.d_initial_key_sum = reinterpret_cast<float *>(uintptr_t(0x80000000));
  checkFailure(attnc_run_linear_backward(normalized.get(), &gqa, nullptr),
               "dInitialKeySum: shares memory with o");
}

TEST_CASE("C API: the last error belongs to the calling thread", "[c-api]") {
  checkFailure(attnc_compiler_create("", "", nullptr), "out: null pointer");
  std::string before, after;
  std::thread other([&] {
    before = attnc_last_error();
    CHECK(attnc_kernel_load(nullptr) == ATTNC_ERROR);
    after = attnc_last_error();
  });
  other.join();
  CHECK(before.empty());
  CHECK(after == "kernel: null handle");
  CHECK(lastError() == "out: null pointer");

  // A call that succeeds keeps the message of the last failure.
  CompilerHandle compiler = makeCompiler("");
  CHECK(lastError() == "out: null pointer");
}
