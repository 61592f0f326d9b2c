// Runtime checks that need no GPU: argument validation (which must not touch
// the driver), grid computation, and behaviour without a CUDA driver.

#include "attn/runtime/Runtime.h"

#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <climits>
#include <cstdint>
#include <functional>
#include <string>

using namespace attn;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

/// Fake device addresses: validation only looks at their values.
void *fakePointer(uintptr_t address) {
  return reinterpret_cast<void *>(address);
}

AttnLaunchConfig makeConfig() {
  AttnLaunchConfig config;
  config.headDim = 128;
  config.qHeads = 8;
  config.kvHeads = 2;
  config.dtype = DType::BF16;
  config.scale = 0.088388f;
  config.blockM = 128;
  config.blockN = 128;
  config.threadsPerBlock = 384;
  config.sharedMemoryBytes = 200 * 1024;
  return config;
}

/// B=2, Sq=100, Sk=300, Hq=8, Hkv=2, D=128, contiguous bf16.
AttnForwardArgs makeArgs() {
  AttnForwardArgs args;
  args.q = contiguousBSHD(fakePointer(0x10000000), DType::BF16, 2, 100, 8, 128);
  args.k = contiguousBSHD(fakePointer(0x20000000), DType::BF16, 2, 300, 2, 128);
  args.v = contiguousBSHD(fakePointer(0x30000000), DType::BF16, 2, 300, 2, 128);
  args.o = contiguousBSHD(fakePointer(0x40000000), DType::BF16, 2, 100, 8, 128);
  args.lse = static_cast<float *>(fakePointer(0x50000000));
  return args;
}

/// Applies `mutate` to a valid (config, args) pair and expects an
/// attn::Error whose message starts with `prefix` and contains `detail`.
void expectInvalid(
    const std::function<void(AttnLaunchConfig &, AttnForwardArgs &)> &mutate,
    const std::string &prefix, const std::string &detail) {
  AttnLaunchConfig config = makeConfig();
  AttnForwardArgs args = makeArgs();
  mutate(config, args);
  CHECK_THROWS_AS(validateForwardArgs(config, args), Error);
  CHECK_THROWS_WITH(validateForwardArgs(config, args),
                    StartsWith(prefix) && Contains(detail));
}

bool libcudaLoadable() {
  void *handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  return handle != nullptr; // Left open: the runtime may share it.
}

} // namespace

TEST_CASE("valid forward arguments pass validation", "[runtime][validate]") {
  CHECK_NOTHROW(validateForwardArgs(makeConfig(), makeArgs()));
  CHECK(makeConfig().kernelName == "attn_fwd_kernel");

  SECTION("padded strides that stay 16-byte multiples") {
    AttnForwardArgs args = makeArgs();
    // Rows of 8 heads padded to 9 head slots, batches padded by one row.
    args.q.strides[2] = 136;
    args.q.strides[1] = 9 * 136;
    args.q.strides[0] = 101 * 9 * 136;
    CHECK_NOTHROW(validateForwardArgs(makeConfig(), args));
  }
  SECTION("fp16") {
    AttnLaunchConfig config = makeConfig();
    config.dtype = DType::F16;
    AttnForwardArgs args = makeArgs();
    for (TensorView *view : {&args.q, &args.k, &args.v, &args.o})
      view->dtype = DType::F16;
    CHECK_NOTHROW(validateForwardArgs(config, args));
  }
  SECTION("empty query sequence may use null pointers") {
    AttnForwardArgs args = makeArgs();
    args.q = contiguousBSHD(nullptr, DType::BF16, 2, 0, 8, 128);
    args.o = contiguousBSHD(nullptr, DType::BF16, 2, 0, 8, 128);
    args.lse = nullptr;
    CHECK_NOTHROW(validateForwardArgs(makeConfig(), args));
  }
}

TEST_CASE("dtype mismatches name the argument", "[runtime][validate]") {
  expectInvalid([](auto &, auto &a) { a.q.dtype = DType::F16; }, "q:",
                "dtype f16 does not match the kernel's bf16");
  expectInvalid([](auto &, auto &a) { a.k.dtype = DType::F16; }, "k:",
                "dtype");
  expectInvalid([](auto &, auto &a) { a.v.dtype = DType::F32; }, "v:",
                "dtype f32");
  expectInvalid([](auto &, auto &a) { a.o.dtype = DType::F16; }, "o:",
                "dtype");
  expectInvalid([](auto &c, auto &) { c.dtype = DType::F32; }, "config:",
                "dtype");
}

TEST_CASE("shape mismatches name the argument", "[runtime][validate]") {
  expectInvalid([](auto &, auto &a) { a.q.shape[3] = 64; }, "q:",
                "head_dim 64 does not match the kernel's 128");
  expectInvalid([](auto &, auto &a) { a.k.shape[3] = 64; }, "k:", "head_dim");
  expectInvalid([](auto &, auto &a) { a.v.shape[3] = 256; }, "v:",
                "head_dim");
  expectInvalid([](auto &, auto &a) { a.o.shape[3] = 64; }, "o:", "head_dim");
  expectInvalid([](auto &, auto &a) { a.q.shape[2] = 4; }, "q:",
                "4 heads, but the kernel was compiled for 8 query heads");
  expectInvalid([](auto &, auto &a) { a.o.shape[2] = 4; }, "o:", "heads");
  expectInvalid([](auto &, auto &a) { a.k.shape[2] = 8; }, "k:",
                "compiled for 2 kv heads");
  expectInvalid([](auto &, auto &a) { a.v.shape[2] = 1; }, "v:", "kv heads");
  expectInvalid([](auto &, auto &a) { a.o.shape[1] = 99; }, "o:",
                "does not match q's");
  expectInvalid([](auto &, auto &a) { a.o.shape[0] = 1; }, "o:",
                "does not match q's");
  expectInvalid([](auto &, auto &a) { a.v.shape[1] = 299; }, "v:",
                "does not match k's");
  expectInvalid(
      [](auto &, auto &a) {
        a.k.shape[0] = 3;
        a.v.shape[0] = 3;
      },
      "k:", "batch 3 does not match q's batch 2");
}

TEST_CASE("layout errors name the argument", "[runtime][validate]") {
  expectInvalid([](auto &, auto &a) { a.q.data = nullptr; }, "q:", "null");
  expectInvalid([](auto &, auto &a) { a.k.data = nullptr; }, "k:", "null");
  expectInvalid([](auto &, auto &a) { a.v.data = nullptr; }, "v:", "null");
  expectInvalid([](auto &, auto &a) { a.o.data = nullptr; }, "o:", "null");
  expectInvalid([](auto &, auto &a) { a.lse = nullptr; }, "lse:", "null");

  expectInvalid([](auto &, auto &a) { a.q.strides[3] = 2; }, "q:",
                "last dim (head_dim) must be contiguous");
  expectInvalid([](auto &, auto &a) { a.o.strides[3] = 0; }, "o:",
                "contiguous");

  expectInvalid([](auto &, auto &a) { a.q.strides[1] = 12; }, "q:",
                "stride of dim 1 must be a multiple of 16 bytes, got 24");
  expectInvalid([](auto &, auto &a) { a.k.strides[2] = 132; }, "k:",
                "stride of dim 2 must be a multiple of 16 bytes, got 264");
  expectInvalid([](auto &, auto &a) { a.v.strides[0] += 4; }, "v:",
                "stride of dim 0 must be a multiple of 16 bytes");
  expectInvalid([](auto &, auto &a) { a.o.strides[1] = 1028; }, "o:",
                "stride of dim 1");
  expectInvalid([](auto &, auto &a) { a.k.strides[1] = -256; }, "k:",
                "non-negative");

  expectInvalid([](auto &, auto &a) { a.q.data = fakePointer(0x10000008); },
                "q:", "16-byte aligned");
  expectInvalid([](auto &, auto &a) { a.k.data = fakePointer(0x20000002); },
                "k:", "16-byte aligned");
  expectInvalid([](auto &, auto &a) { a.v.data = fakePointer(0x30000004); },
                "v:", "16-byte aligned");
  expectInvalid([](auto &, auto &a) { a.o.data = fakePointer(0x40000001); },
                "o:", "16-byte aligned");
  expectInvalid(
      [](auto &, auto &a) {
        a.lse = static_cast<float *>(fakePointer(0x50000002));
      },
      "lse:", "aligned");
}

TEST_CASE("inconsistent configs are rejected", "[runtime][validate]") {
  expectInvalid([](auto &c, auto &) { c.kvHeads = 3; }, "config:",
                "multiple of kvHeads");
  expectInvalid([](auto &c, auto &) { c.blockM = 0; }, "config:", "blockM");
  expectInvalid([](auto &c, auto &) { c.threadsPerBlock = 0; }, "config:",
                "threadsPerBlock");
  expectInvalid([](auto &c, auto &) { c.headDim = -1; }, "config:",
                "headDim");
}

TEST_CASE("forward work tiles and the persistent grid", "[runtime]") {
  AttnLaunchConfig config = makeConfig(); // blockM 128, 8 query heads
  CHECK(forwardWorkTiles(config, 3, 4097) == 33 * 8 * 3); // ceil(4097 / 128)
  CHECK(forwardWorkTiles(config, 1, 128) == 8);
  CHECK(forwardWorkTiles(config, 1, 129) == 16);
  CHECK(forwardWorkTiles(config, 1, 0) == 0);

  // One block per work tile, handed out by the hardware.
  config.persistentBlocksPerSm = 0;
  Dim3 grid = forwardGrid(config, 3, 4097, 132);
  CHECK(grid.x == 33 * 8 * 3);
  CHECK(grid.y == 1);
  CHECK(grid.z == 1);
  // Persistent: k blocks per multiprocessor, fewer when there is less work.
  config.persistentBlocksPerSm = 1;
  CHECK(forwardGrid(config, 3, 4097, 132).x == 132);
  config.persistentBlocksPerSm = 2;
  CHECK(forwardGrid(config, 3, 4097, 132).x == 264);
  CHECK(forwardGrid(config, 1, 129, 132).x == 16);
  CHECK(forwardGrid(config, 1, 0, 132).x == 0);
  config.blockM = 64;
  CHECK(forwardWorkTiles(config, 1, 4097) == 65 * 8);

  // Work tiles are counted in 32-bit ints by the kernel.
  config.qHeads = 65536;
  config.kvHeads = 1;
  CHECK_THROWS_WITH(forwardGrid(config, 65536, 64, 132),
                    Catch::Matchers::StartsWith("q:") && Catch::Matchers::Contains("work tiles"));
  // Counts whose product would not even fit 64 bits are refused too.
  config.qHeads = INT_MAX;
  CHECK_THROWS_WITH(forwardWorkTiles(config, INT_MAX, INT_MAX),
                    Catch::Matchers::StartsWith("q:") && Catch::Matchers::Contains("work tiles"));
  CHECK_THROWS_WITH(forwardGrid(config, 1, 64, 0), Catch::Matchers::Contains("multiprocessor"));
}

TEST_CASE("tensor map operand checks need no driver", "[runtime][tma]") {
  TensorView view =
      contiguousBSHD(fakePointer(0x10000000), DType::BF16, 1, 64, 4, 64);
  CHECK_NOTHROW(validateTmaOperand(view, "x"));

  TensorView f32 = view;
  f32.dtype = DType::F32;
  CHECK_THROWS_WITH(validateTmaOperand(f32, "x"),
                    StartsWith("x:") && Contains("bf16 or f16"));
  // Box checks come before the driver is needed.
  CHECK_THROWS_WITH(encodeBSHDTensorMap(view, 64, 128, "x"),
                    StartsWith("x:") && Contains("box cols"));
  CHECK_THROWS_WITH(encodeBSHDTensorMap(view, 0, 64, "x"),
                    StartsWith("x:") && Contains("box rows"));
  CHECK_THROWS_WITH(encodeBSHDTensorMap(view, 257, 64, "x"),
                    StartsWith("x:") && Contains("box rows"));
  CHECK_THROWS_WITH(encodeBSHDTensorMap(view, 64, 4, "x"),
                    StartsWith("x:") && Contains("box cols"));
}

TEST_CASE("ABI layout", "[runtime][abi]") {
  STATIC_REQUIRE(sizeof(attn_abi::TensorMapBlob) == 128);
  STATIC_REQUIRE(alignof(attn_abi::TensorMapBlob) == 64);
  STATIC_REQUIRE(sizeof(CUtensorMap) == sizeof(attn_abi::TensorMapBlob));
  Dim3 dims;
  CHECK(dims.x == 1);
  CHECK(dims.y == 1);
  CHECK(dims.z == 1);
}

TEST_CASE("contiguousBSHD strides", "[runtime]") {
  TensorView view = contiguousBSHD(nullptr, DType::F16, 2, 3, 4, 5);
  CHECK(view.strides[3] == 1);
  CHECK(view.strides[2] == 5);
  CHECK(view.strides[1] == 20);
  CHECK(view.strides[0] == 60);
  CHECK(view.numElements() == 120);
}

TEST_CASE("driver availability", "[runtime][driver]") {
  // Must not throw or crash, whatever the machine.
  bool available = Driver::available();
  CHECK(Driver::available() == available); // Stable across calls.
  CHECK_FALSE(isDevicePointer(nullptr));

  if (available) {
    CHECK(Driver::get().unavailableReason().empty());
    CHECK(Driver::get().version() > 0);
    CHECK(deviceCount() >= 0);
    return;
  }

  const std::string &reason = Driver::get().unavailableReason();
  CHECK_FALSE(reason.empty());
  if (!libcudaLoadable())
    CHECK_THAT(reason, StartsWith("no CUDA driver: libcuda.so.1 could not be "
                                  "loaded ("));

  // Every use throws the same attn::Error.
  CHECK_THROWS_AS(Driver::get().api(), Error);
  CHECK_THROWS_WITH(Driver::get().version(), reason);
  CHECK_THROWS_WITH(deviceCount(), reason);
  CHECK_THROWS_WITH(ensureContext(), reason);
  CHECK_THROWS_WITH(queryDevice(), reason);
  CHECK_THROWS_WITH(DeviceBuffer(256), reason);
  CHECK_THROWS_WITH(Module::loadPtx(".version 8.0\n"), reason);
  CHECK_THROWS_WITH(Event(), reason);
  CHECK_FALSE(isDevicePointer(fakePointer(0x10000000)));

  TensorView view =
      contiguousBSHD(fakePointer(0x10000000), DType::BF16, 1, 64, 4, 64);
  CHECK_THROWS_WITH(encodeBSHDTensorMap(view, 64, 64, "q"), reason);
  CHECK_THROWS_WITH(makeForwardParams(makeConfig(), makeArgs()), reason);

  KernelFunction kernel;
  CHECK_THROWS_WITH(launchForward(kernel, makeConfig(), makeArgs(), nullptr),
                    reason);
}

TEST_CASE("no CUDA driver message", "[runtime][driver]") {
  if (Driver::available() || libcudaLoadable())
    return; // Only meaningful on a machine without libcuda.
  CHECK_THROWS_WITH(DeviceBuffer(16), Contains("no CUDA driver"));
  CHECK_THROWS_WITH(ATTN_CU_CHECK(cuCtxSynchronize), Contains("no CUDA driver"));
}

TEST_CASE("empty launches do nothing", "[runtime]") {
  // No driver is needed: nothing is launched for an empty batch or query
  // sequence (the kernel object is never used).
  KernelFunction kernel;
  AttnForwardArgs args = makeArgs();
  args.q.shape[1] = 0;
  args.o.shape[1] = 0;
  CHECK_NOTHROW(launchForward(kernel, makeConfig(), args, nullptr));

  args = makeArgs();
  for (TensorView *view : {&args.q, &args.k, &args.v, &args.o})
    view->shape[0] = 0;
  CHECK_NOTHROW(launchForward(kernel, makeConfig(), args, nullptr));

  // Still validated: a bad argument is reported even when empty.
  args.q.dtype = DType::F16;
  CHECK_THROWS_WITH(launchForward(kernel, makeConfig(), args, nullptr),
                    StartsWith("q:"));
}
