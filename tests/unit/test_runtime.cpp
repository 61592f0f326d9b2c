// Runtime checks that need no GPU: argument validation (which must not touch
// the driver), grid computation, behaviour without a CUDA driver, packed
// sequences and work orders. Captured buffers: test_runtime_captures.cpp.

#include "RuntimeTestArgs.h"
#include "attn/runtime/Runtime.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <dlfcn.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

using namespace attn;
using attn::test::expectInvalid;
using attn::test::fakePointer;
using attn::test::makeArgs;
using attn::test::makeConfig;
using Catch::Matchers::Contains;
using Catch::Matchers::EndsWith;
using Catch::Matchers::StartsWith;

namespace {


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

TEST_CASE("sequences longer than the forward kernels' limit are rejected",
          "[runtime][validate]") {
  // The compiler proves mask regions' 32-bit arithmetic exact up to this
  // limit, so one row more must not reach a kernel.
  const int64_t tooLong = int64_t(attn_abi::kMaxSeqlen) + 1;
  expectInvalid(
      [&](auto &, auto &a) {
        a.q = contiguousBSHD(a.q.data, DType::BF16, 2, tooLong, 8, 128);
        a.o = contiguousBSHD(a.o.data, DType::BF16, 2, tooLong, 8, 128);
      },
      "q:", "seqlen 1073741825 exceeds the forward kernels' limit of 1073741824 rows");
  expectInvalid(
      [&](auto &, auto &a) {
        a.k = contiguousBSHD(a.k.data, DType::BF16, 2, tooLong, 2, 128);
        a.v = contiguousBSHD(a.v.data, DType::BF16, 2, tooLong, 2, 128);
      },
      "k:", "exceeds the forward kernels' limit");
  AttnForwardArgs args = makeArgs();
  args.k = contiguousBSHD(args.k.data, DType::BF16, 2, attn_abi::kMaxSeqlen, 2, 128);
  args.v = contiguousBSHD(args.v.data, DType::BF16, 2, attn_abi::kMaxSeqlen, 2, 128);
  CHECK_NOTHROW(validateForwardArgs(makeConfig(), args));
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

TEST_CASE("short queries pack query heads per forward work tile", "[runtime]") {
  // makeConfig: blockM 128 (two consumer warpgroups), 8 query heads over
  // 2 kv heads; makeArgs: Sq 100.
  AttnLaunchConfig config = makeConfig();
  AttnForwardArgs args = makeArgs();
  auto withQueries = [&](int64_t seqlenQ) {
    AttnForwardArgs call = args;
    call.q = contiguousBSHD(args.q.data, DType::BF16, 2, seqlenQ, 8, 128);
    call.o = contiguousBSHD(args.o.data, DType::BF16, 2, seqlenQ, 8, 128);
    return call;
  };
  CHECK(forwardHeadsPerTile(config, args) == 1);
  CHECK(forwardHeadsPerTile(config, withQueries(64)) == 2);
  CHECK(forwardHeadsPerTile(config, withQueries(1)) == 2);
  CHECK(forwardHeadsPerTile(config, withQueries(65)) == 1);
  // Two packed heads a tile: 64 query positions of each.
  CHECK(forwardWorkTiles(config, 2, 64, 2) == 2 * 4);
  CHECK(forwardWorkTiles(config, 2, 65, 2) == 2 * 2 * 4);
  config.persistentBlocksPerSm = 0;
  CHECK(forwardGrid(config, 3, 33, 132, 2).x == 3 * 4);
  CHECK_THROWS_WITH(forwardWorkTiles(config, 1, 64, 3), Contains("3 heads a work tile"));

  // Not packed: a mask_mod (its coverage is indexed by the tile's head), a
  // work order, three consumers or one, an odd group of query heads.
  AttnLaunchConfig maskMod = makeConfig();
  maskMod.automaticWorkOrder = 1;
  CHECK(forwardHeadsPerTile(maskMod, withQueries(64)) == 1);
  AttnForwardArgs ordered = withQueries(64);
  ordered.workOrder = static_cast<const int *>(fakePointer(0x60000000));
  CHECK(forwardHeadsPerTile(config, ordered) == 1);
  AttnLaunchConfig threeConsumers = makeConfig();
  threeConsumers.blockM = 192;
  threeConsumers.qHeads = 12;
  CHECK(forwardHeadsPerTile(threeConsumers, withQueries(64)) == 1);
  AttnLaunchConfig oddGroup = makeConfig();
  oddGroup.qHeads = 6;
  CHECK(forwardHeadsPerTile(oddGroup, withQueries(64)) == 1);
  AttnLaunchConfig oneConsumer = makeConfig();
  oneConsumer.blockM = 64;
  CHECK(forwardHeadsPerTile(oneConsumer, withQueries(64)) == 1);
  AttnLaunchConfig mha = makeConfig();
  mha.kvHeads = 8;
  CHECK(forwardHeadsPerTile(mha, withQueries(64)) == 1);
}

TEST_CASE("the split of a persistent grid's partial last round", "[runtime]") {
  AttnLaunchConfig config = makeConfig(); // blockM 128, 8 query heads
  config.qHeads = config.kvHeads = 16;
  config.blockN = 160;
  config.persistentBlocksPerSm = 1;
  config.evenWorkTiles = 1;
  // B = 2, S = 8192: 2048 work tiles on 132 blocks, 15 full rounds and 68
  // tiles of 52 key tiles (the last one partial) left: runs of 26 or 27 key
  // tiles, 16 rounds shortened by 25 / 52 of one.
  ForwardTailSplit split = forwardTailSplitFor(config, 2, 8192, 8192, 132);
  CHECK(split.tiles == 68);
  CHECK(split.keyTiles == 52);
  CHECK(forwardTailSplitFor(config, 2, 8192, 2560, 132).keyTiles == 16);
  // A full last round: nothing to split.
  CHECK(forwardTailSplitFor(config, 2, 8192, 8192, 128).tiles == 0);
  // On 121 blocks 112 tiles are left: runs of up to 49 key tiles save 3 / 52
  // of one of 17 rounds, less than 1 %; on 139 blocks 102 tiles: 13 / 52 of
  // one of 15 rounds.
  CHECK(forwardTailSplitFor(config, 2, 8192, 8192, 121).tiles == 0);
  CHECK(forwardTailSplitFor(config, 2, 8192, 8192, 139).tiles == 102);
  // Work tiles of fewer than 16 key tiles are not split, nor fewer key
  // tiles than blocks: 4 tiles of 17 (4 heads of 34 query blocks).
  CHECK(forwardTailSplitFor(config, 2, 8192, 2400, 132).tiles == 0);
  config.qHeads = config.kvHeads = 4;
  CHECK(forwardTailSplitFor(config, 1, 34 * 128, 2600, 132).tiles == 0);
  config.qHeads = config.kvHeads = 16;
  // Uneven work tiles (a mask), one block per tile, fewer tiles than blocks.
  config.evenWorkTiles = 0;
  CHECK(forwardTailSplitFor(config, 2, 8192, 8192, 132).tiles == 0);
  config.evenWorkTiles = 1;
  config.persistentBlocksPerSm = 0;
  CHECK(forwardTailSplitFor(config, 2, 8192, 8192, 2048).tiles == 0);
  config.persistentBlocksPerSm = 1;
  CHECK(forwardTailSplitFor(config, 1, 1024, 8192, 128).tiles == 0);
  // Head dim 256 does not split.
  config.headDim = 256;
  CHECK(forwardTailSplitFor(config, 2, 8192, 8192, 132).tiles == 0);
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

namespace {

/// Three packed sequences: q rows 0..249 of [1, 250, 8, 128] (longest 130),
/// k and v rows 0..599 (longest 300); lse [8, 250].
AttnForwardArgs makePackedArgs() {
  AttnForwardArgs args;
  args.q = contiguousBSHD(fakePointer(0x10000000), DType::BF16, 1, 250, 8, 128);
  args.k = contiguousBSHD(fakePointer(0x20000000), DType::BF16, 1, 600, 2, 128);
  args.v = contiguousBSHD(fakePointer(0x30000000), DType::BF16, 1, 600, 2, 128);
  args.o = contiguousBSHD(fakePointer(0x40000000), DType::BF16, 1, 250, 8, 128);
  args.lse = static_cast<float *>(fakePointer(0x50000000));
  args.packed.cuSeqlensQ = static_cast<const int32_t *>(fakePointer(0x70000000));
  args.packed.cuSeqlensK = static_cast<const int32_t *>(fakePointer(0x70000100));
  args.packed.batch = 3;
  args.packed.maxSeqlenQ = 130;
  args.packed.maxSeqlenK = 300;
  return args;
}

void expectPackedInvalid(const std::function<void(AttnForwardArgs &)> &mutate,
                         const std::string &prefix, const std::string &detail) {
  AttnForwardArgs args = makePackedArgs();
  mutate(args);
  CHECK_THROWS_AS(validateForwardArgs(makeConfig(), args), Error);
  CHECK_THROWS_WITH(validateForwardArgs(makeConfig(), args),
                    StartsWith(prefix) && Contains(detail));
}

} // namespace

TEST_CASE("packed sequences pass validation and set the parameter block's sizes",
          "[runtime][validate][packed]") {
  AttnLaunchConfig config = makeConfig();
  AttnForwardArgs args = makePackedArgs();
  CHECK(args.packed.active());
  CHECK_FALSE(makeArgs().packed.active());
  CHECK_NOTHROW(validateForwardArgs(config, args));
  // The grid and the tile coverage count the sequences and the longest
  // lengths: 3 x 8 heads x ceil(130 / 128) query blocks x ceil(300 / 128)
  // key tiles.
  CHECK(forwardWorkTiles(config, 3, 130) == 3 * 8 * 2);
  CHECK(tileCoverageBytes(config, args) == uint64_t(3 * 8 * 2 * 3));
  // Key bits: an int32 slot per coverage byte, 576 bytes, rounded up to 256.
  CHECK(tileKeyBitsSlotBytes(config, args) == uint64_t(768));
  CHECK(workOrderBytes(config, args) == uint64_t(3 * 8 * 2 * 4));
}

TEST_CASE("stored key bits need the tile coverage they belong to", "[runtime][validate]") {
  AttnLaunchConfig config = makeConfig();
  AttnForwardArgs args = makeArgs();
  alignas(16) long long stored = 0;
  args.tileKeyBits = &stored;
  CHECK_THROWS_WITH(validateForwardArgs(config, args),
                    StartsWith("tileKeyBits:") && Contains("tileCoverage"));
  unsigned char coverage = 0;
  args.tileCoverage = &coverage;
  CHECK_NOTHROW(validateForwardArgs(config, args));
  // The kernel bulk-copies its words, which needs 16-byte alignment.
  alignas(16) unsigned char words[32] = {};
  args.tileKeyBits = words + 8;
  CHECK_THROWS_WITH(validateForwardArgs(config, args),
                    StartsWith("tileKeyBits:") && Contains("16-byte aligned"));
  args.tileKeyBits = words + 16;
  CHECK_NOTHROW(validateForwardArgs(config, args));
  // A 128 x 128 tile stores 128 rows x 4 quads of 32-bit words; wider key
  // tiles take 64-bit words.
  CHECK(attn_abi::tileKeyBitsPerTile(128, 128) == 2048);
  CHECK(attn_abi::tileKeyBitsPerTile(128, 64) == 2048);
  CHECK(attn_abi::tileKeyBitsPerTile(64, 176) == 2048);
  CHECK(attn_abi::tileKeyBitsOffset(0) == 0);
  CHECK(attn_abi::tileKeyBitsOffset(1) == 256);
  CHECK(attn_abi::tileKeyBitsOffset(64) == 256);
  CHECK(attn_abi::tileKeyBitsOffset(65) == 512);
}

TEST_CASE("the work order starts the costliest tiles first, ties in index order",
          "[runtime][schedule]") {
  auto longestFirst = [](const std::vector<int32_t> &costs) {
    return workOrderOf(costs, WorkOrderPolicy::LongestFirst);
  };
  CHECK(longestFirst({}).empty());
  CHECK(longestFirst({3, 9, 0, 9, 5, 3}) == std::vector<int32_t>{1, 3, 4, 0, 5, 2});
  CHECK(longestFirst({2, 2, 2}) == std::vector<int32_t>{0, 1, 2});
  // Costs past ATTN_WORK_ORDER_MAX_KEY rank as equal.
  CHECK(longestFirst({5, ATTN_WORK_ORDER_MAX_KEY + 7, ATTN_WORK_ORDER_MAX_KEY}) ==
        std::vector<int32_t>{1, 2, 0});
}

TEST_CASE("the outliers-first order moves only tiles above twice the mean",
          "[runtime][schedule]") {
  auto outliersFirst = [](const std::vector<int32_t> &costs) {
    return workOrderOf(costs, WorkOrderPolicy::OutliersFirst);
  };
  CHECK(outliersFirst({}).empty());
  // Mean 11.25 (sum 90 over 8, the negative cost counting 0): 23 and 30
  // are above 22.5, longest first; the rest keep their order although 20
  // and 1 differ.
  CHECK(outliersFirst({1, 9, 23, 20, 4, 30, 3, -10}) ==
        std::vector<int32_t>{5, 2, 0, 1, 3, 4, 6, 7});
  // A tile of exactly twice the mean is no outlier; even costs keep the
  // default order (a causal-like ramp too).
  CHECK(outliersFirst({2, 1, 1, 0}) == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(outliersFirst({1, 2, 3, 4}) == std::vector<int32_t>{0, 1, 2, 3});
  // Longformer's shape: one global-row tile of 64 key tiles among band tiles of 9.
  std::vector<int32_t> longformer(64, 9);
  longformer[63] = 64;
  std::vector<int32_t> expected{63};
  for (int32_t i = 0; i < 63; ++i)
    expected.push_back(i);
  CHECK(outliersFirst(longformer) == expected);
}

TEST_CASE("packed sequence errors name the argument", "[runtime][validate][packed]") {
  expectPackedInvalid([](auto &a) { a.packed.cuSeqlensK = nullptr; }, "packed.cuSeqlensK: ",
                      "pointer is null");
  expectPackedInvalid([](auto &a) { a.packed.cuSeqlensQ = nullptr; }, "packed.cuSeqlensQ: ",
                      "pointer is null");
  expectPackedInvalid(
      [](auto &a) { a.packed.cuSeqlensQ = static_cast<const int32_t *>(fakePointer(0x70000002)); },
      "packed.cuSeqlensQ: ", "4-byte aligned");
  expectPackedInvalid([](auto &a) { a.packed.batch = 0; }, "packed.batch: ",
                      "must be positive, got 0");
  expectPackedInvalid([](auto &a) { a.packed.batch = int64_t(INT_MAX) + 1; }, "packed.batch: ",
                      "exceeds the int range");
  expectPackedInvalid(
      [](auto &a) {
        a.q = contiguousBSHD(a.q.data, DType::BF16, 2, 125, 8, 128);
        a.o = contiguousBSHD(a.o.data, DType::BF16, 2, 125, 8, 128);
        a.k = contiguousBSHD(a.k.data, DType::BF16, 2, 300, 2, 128);
        a.v = contiguousBSHD(a.v.data, DType::BF16, 2, 300, 2, 128);
      },
      "q: ", "packed sequences lie end to end in a tensor of batch 1, got batch 2");
  expectPackedInvalid([](auto &a) { a.packed.maxSeqlenQ = 251; }, "packed.maxSeqlenQ: ",
                      "251 must lie in [0, q's 250 packed rows]");
  expectPackedInvalid([](auto &a) { a.packed.maxSeqlenK = -1; }, "packed.maxSeqlenK: ",
                      "must lie in [0, k's 600 packed rows]");
  // Setting only the count makes the call a packed one: the arrays are missing.
  AttnForwardArgs args = makeArgs();
  args.packed.batch = 2;
  CHECK_THROWS_WITH(validateForwardArgs(makeConfig(), args), StartsWith("packed.cuSeqlensQ: "));
}

TEST_CASE("packed sequences size captures by the sequence count and longest lengths",
          "[runtime][validate][packed][captures]") {
  AttnLaunchConfig config = makeConfig();
  CaptureDecl document{"document", DType::I32,
                       {{CaptureDim::Kind::Batch, 0}, {CaptureDim::Kind::SeqlenK, 0}}};
  config.captures = {document};
  AttnForwardArgs args = makePackedArgs();
  args.captures = {{fakePointer(0x60000000), DType::I32, {3, 300}}};
  CHECK_NOTHROW(validateForwardArgs(config, args));
  args.captures[0].shape = {1, 600};
  CHECK_THROWS_WITH(validateForwardArgs(config, args),
                    StartsWith("capture 'document': dim 0 is 1, expected 3 (batch)"));
}

TEST_CASE("uploadPackedSequences checks the lengths before touching the device",
          "[runtime][validate][packed]") {
  CHECK_THROWS_WITH(uploadPackedSequences({}, {}),
                    StartsWith("seqlensQ: packed sequences need at least one sequence"));
  CHECK_THROWS_WITH(uploadPackedSequences({1, 2}, {3}),
                    StartsWith("seqlensK: has 1 lengths, but seqlensQ has 2"));
  CHECK_THROWS_WITH(uploadPackedSequences({1, -2}, {3, 4}),
                    StartsWith("seqlensQ[1]: length -2 is negative"));
  CHECK_THROWS_WITH(uploadPackedSequences({1, 2}, {INT_MAX, 1}),
                    StartsWith("seqlensK[1]: the packed rows up to here, 2147483648, exceed"));
}

namespace {
/// A backward module's config: the head-dim-128 plan's tiles.
AttnLaunchConfig backwardConfig(int qHeads, int kvHeads) {
  AttnLaunchConfig config;
  config.headDim = 128;
  config.qHeads = qHeads;
  config.kvHeads = kvHeads;
  config.dtype = DType::BF16;
  config.scale = 0.088f;
  config.blockM = 64;
  config.blockN = 128;
  config.threadsPerBlock = 384;
  config.sharedMemoryBytes = 1024;
  config.backward = 1;
  return config;
}

/// Two sequences of 100 queries over 300 keys with the config's heads, and a
/// workspace of no size yet.
AttnBackwardArgs backwardArgs(const AttnLaunchConfig &config) {
  AttnBackwardArgs args;
  args.q = args.o = args.dO = args.dq =
      contiguousBSHD(fakePointer(0x10000000), DType::BF16, 2, 100, config.qHeads, 128);
  args.k = args.v = args.dk = args.dv =
      contiguousBSHD(fakePointer(0x20000000), DType::BF16, 2, 300, config.kvHeads, 128);
  args.lse = static_cast<const float *>(fakePointer(0x30000000));
  args.workspace = fakePointer(0x40000000);
  return args;
}
} // namespace

TEST_CASE("backward capture gradients and tile coverage are checked with the config",
          "[runtime][validate][backward]") {
  AttnLaunchConfig config = backwardConfig(4, 4);
  config.captures = {CaptureDecl{"slopes", DType::F32, {{CaptureDim::Kind::QHeads, 0}}, true}};
  AttnBackwardArgs args = backwardArgs(config);
  args.workspaceBytes = backwardWorkspaceBytes(config, args);
  args.captures = {CaptureView{fakePointer(0x50000000), DType::F32, {4}}};
  float *gradient = static_cast<float *>(fakePointer(0x60000000));

  CHECK_THROWS_WITH(validateBackwardArgs(config, args),
                    StartsWith("captureGrads: the kernel declares 1 learnable capture (slopes), "
                               "got 0 gradient buffers"));
  args.captureGrads = {CaptureGradView{gradient, {3}}};
  CHECK_THROWS_WITH(validateBackwardArgs(config, args),
                    StartsWith("gradient of capture 'slopes': dim 0 is 3, expected 4 (q_heads)"));
  args.captureGrads = {CaptureGradView{gradient, {4}}};
  // Exact sums keep a 128-byte record per gradient element in the
  // workspace (two 256-byte blocks here); atomics need none.
  const uint64_t withoutGradients = args.workspaceBytes;
  CHECK_THROWS_WITH(validateBackwardArgs(config, args), StartsWith("workspace: "));
  args.workspaceBytes = backwardWorkspaceBytes(config, args);
  CHECK(args.workspaceBytes == withoutGradients + 512);
  CHECK_NOTHROW(validateBackwardArgs(config, args));
  args.captureGradSum = AttnBackwardArgs::CaptureGradSum::Atomic;
  CHECK(backwardWorkspaceBytes(config, args) == withoutGradients);
  CHECK_NOTHROW(validateBackwardArgs(config, args));
  args.deterministic = true;
  CHECK_THROWS_WITH(validateBackwardArgs(config, args),
                    StartsWith("captureGradSum: Atomic sums the capture gradients with float "
                               "atomics"));
  args.captureGradSum = AttnBackwardArgs::CaptureGradSum::Exact;
  CHECK_NOTHROW(validateBackwardArgs(config, args));
  args.deterministic = false;
  args.tileCoverage = static_cast<const unsigned char *>(fakePointer(0x70000000));
  CHECK_THROWS_WITH(validateBackwardArgs(config, args),
                    StartsWith("tileCoverage: needs the forward's tile"));
  args.coverageBlockM = args.coverageBlockN = 128;
  CHECK_NOTHROW(validateBackwardArgs(config, args));
}

TEST_CASE("a backward that walks a step list sizes it in the workspace",
          "[runtime][validate][backward]") {
  AttnLaunchConfig config = backwardConfig(8, 2);
  AttnBackwardArgs args = backwardArgs(config);
  const uint64_t withoutList = backwardWorkspaceBytes(config, args);
  // 3 key tiles x 2 kv heads x 2 sequences = 12 blocks, each with two
  // counts and 4 query heads x 2 query blocks of entries: 120 words, 480
  // bytes in two 256-byte blocks.
  config.stepList = 1;
  args.workspaceBytes = backwardWorkspaceBytes(config, args);
  CHECK(args.workspaceBytes == withoutList + 512);
  CHECK_NOTHROW(validateBackwardArgs(config, args));
  args.workspaceBytes -= 256;
  CHECK_THROWS_WITH(validateBackwardArgs(config, args),
                    StartsWith(fmt::format("workspace: {} bytes, but this call needs {}",
                                           withoutList + 256, withoutList + 512)));
  // A step takes 31 bits of its entry.
  config.qHeads = 64;
  config.kvHeads = 1;
  args.q = args.o = args.dO = args.dq =
      contiguousBSHD(fakePointer(0x10000000), DType::BF16, 1, INT_MAX, 64, 128);
  args.k = args.v = args.dk = args.dv =
      contiguousBSHD(fakePointer(0x20000000), DType::BF16, 1, 300, 1, 128);
  CHECK_THROWS_WITH(backwardWorkspaceBytes(config, args),
                    StartsWith("q: 33554432 query blocks of 64 rows times 64 query heads a kv "
                               "head exceed the step list's 2^31 steps a block"));
}
