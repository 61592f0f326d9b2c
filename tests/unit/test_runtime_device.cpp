// Runtime checks against a real driver and GPU. Each test returns early
// (passing) where no usable driver or device exists, so the unit binary runs
// everywhere; on a GPU machine they exercise the driver paths end to end.

#include "attn/runtime/Runtime.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

using namespace attn;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

bool haveDevice() {
  return Driver::available() && deviceCount() > 0;
}

// A stand-in for the attention kernel with the real parameter block: block
// (0,0,0) thread 0 copies seqlen_q, seqlen_k, scale_log2, q_heads and kv_heads
// into lse[0..4], captures[0].extents[0] into lse[6] and
// captures[3].extents[2] into lse[7]; thread 0 of every block adds 1 to
// lse[5] (block count). Offsets follow attn_params.h (checked by
// static_asserts below).
const char *kProbePtx = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .entry attn_fwd_kernel(.param .align 64 .b8 params[896])
{
  .reg .pred %p<3>;
  .reg .b32 %r<12>;
  .reg .b64 %rd<8>;
  .reg .f32 %f<10>;

  ld.param.u64 %rd1, [params+512];
  cvta.to.global.u64 %rd2, %rd1;
  mov.u32 %r1, %tid.x;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra DONE;
  mov.f32 %f1, 0f3F800000;
  atom.global.add.f32 %f2, [%rd2+20], %f1;
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ctaid.y;
  mov.u32 %r4, %ctaid.z;
  or.b32 %r5, %r2, %r3;
  or.b32 %r5, %r5, %r4;
  setp.ne.u32 %p2, %r5, 0;
  @%p2 bra DONE;
  ld.param.u32 %r6, [params+524];
  cvt.rn.f32.s32 %f3, %r6;
  st.global.f32 [%rd2], %f3;
  ld.param.u32 %r7, [params+528];
  cvt.rn.f32.s32 %f4, %r7;
  st.global.f32 [%rd2+4], %f4;
  ld.param.f32 %f5, [params+540];
  st.global.f32 [%rd2+8], %f5;
  ld.param.u32 %r8, [params+532];
  cvt.rn.f32.s32 %f6, %r8;
  st.global.f32 [%rd2+12], %f6;
  ld.param.u32 %r9, [params+536];
  cvt.rn.f32.s32 %f7, %r9;
  st.global.f32 [%rd2+16], %f7;
  ld.param.u64 %rd3, [params+552];
  cvt.rn.f32.s64 %f8, %rd3;
  st.global.f32 [%rd2+24], %f8;
  ld.param.u64 %rd4, [params+664];
  cvt.rn.f32.s64 %f9, %rd4;
  st.global.f32 [%rd2+28], %f9;
DONE:
  ret;
}
)";

static_assert(offsetof(attn_abi::AttnFwdParams, lse) == 512, "probe PTX");
static_assert(offsetof(attn_abi::AttnFwdParams, seqlen_q) == 524, "");
static_assert(offsetof(attn_abi::AttnFwdParams, seqlen_k) == 528, "");
static_assert(offsetof(attn_abi::AttnFwdParams, q_heads) == 532, "");
static_assert(offsetof(attn_abi::AttnFwdParams, kv_heads) == 536, "");
static_assert(offsetof(attn_abi::AttnFwdParams, scale_log2) == 540, "");
static_assert(offsetof(attn_abi::AttnFwdParams, captures) == 544, "probe PTX");
static_assert(sizeof(attn_abi::CaptureArg) == 32, "");
static_assert(offsetof(attn_abi::CaptureArg, data) == 0, "");
static_assert(offsetof(attn_abi::CaptureArg, extents) == 8, "");
static_assert(sizeof(attn_abi::AttnFwdParams) == 896, "probe PTX");

} // namespace

TEST_CASE("device query and context", "[device]") {
  if (!haveDevice())
    return;
  CHECK(ensureContext() != nullptr);
  CHECK(ensureContext() == ensureContext());
  DeviceInfo info = queryDevice(0);
  CHECK_FALSE(info.name.empty());
  CHECK(info.computeCapabilityMajor >= 7);
  CHECK(info.multiprocessorCount > 0);
  CHECK(info.maxSharedMemoryPerBlockOptin >= 48 * 1024);
  CHECK_THROWS_WITH(queryDevice(deviceCount()), Contains("cuDeviceGet"));
}

TEST_CASE("device buffers", "[device]") {
  if (!haveDevice())
    return;
  std::vector<uint32_t> host(1000);
  for (size_t i = 0; i < host.size(); ++i)
    host[i] = static_cast<uint32_t>(i * 2654435761u);
  DeviceBuffer buffer(host.size() * 4);
  CHECK(isDevicePointer(buffer.data()));
  CHECK_FALSE(isDevicePointer(host.data()));
  buffer.upload(host);
  CHECK(buffer.download<uint32_t>() == host);

  buffer.fill(0xAB);
  for (uint32_t word : buffer.download<uint32_t>())
    REQUIRE(word == 0xABABABABu);
  buffer.fill32(0x7FC00000u);
  for (uint32_t word : buffer.download<uint32_t>())
    REQUIRE(word == 0x7FC00000u);

  // Partial copies at an offset.
  uint32_t marker = 0x12345678u;
  buffer.copyFromHost(&marker, 4, 40);
  uint32_t back = 0;
  buffer.copyToHost(&back, 4, 40);
  CHECK(back == marker);
  CHECK_THROWS_WITH(buffer.copyToHost(&back, 8, 3996),
                    Contains("exceeds the buffer"));

  DeviceBuffer moved = std::move(buffer);
  CHECK(moved.size() == 4000);
  CHECK(buffer.data() == nullptr);
  DeviceBuffer empty(0);
  CHECK(empty.data() == nullptr);
}

TEST_CASE("module loading and launch", "[device]") {
  if (!haveDevice())
    return;
  CHECK_THROWS_WITH(Module::loadPtx(".version 7.0\n.target sm_70\nbogus;\n"),
                    StartsWith("cuModuleLoadDataEx failed") &&
                        Contains("JIT error log"));

  Module module = Module::loadPtx(kProbePtx);
  CHECK_THROWS_WITH(module.function("missing_kernel"),
                    Contains("cuModuleGetFunction") &&
                        Contains("missing_kernel"));
  KernelFunction kernel = module.function(ATTN_FWD_KERNEL_NAME);
  CHECK(kernel.attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK) >= 128);

  // A real-sized problem description; the probe only reads the parameters.
  AttnLaunchConfig config;
  config.headDim = 128;
  config.qHeads = 4;
  config.kvHeads = 2;
  config.dtype = DType::BF16;
  config.scale = 0.125f;
  config.blockM = 128;
  config.blockN = 128;
  config.threadsPerBlock = 128;
  config.sharedMemoryBytes = 100 * 1024; // Needs the opt-in attribute.
  const int64_t b = 2, sq = 300, sk = 500;
  DeviceBuffer q(b * sq * 4 * 128 * 2), k(b * sk * 2 * 128 * 2),
      v(b * sk * 2 * 128 * 2), o(b * sq * 4 * 128 * 2),
      lse(b * 4 * sq * sizeof(float));
  lse.fill(0);
  AttnForwardArgs args;
  args.q = contiguousBSHD(q.data(), DType::BF16, b, sq, 4, 128);
  args.k = contiguousBSHD(k.data(), DType::BF16, b, sk, 2, 128);
  args.v = contiguousBSHD(v.data(), DType::BF16, b, sk, 2, 128);
  args.o = contiguousBSHD(o.data(), DType::BF16, b, sq, 4, 128);
  args.lse = static_cast<float *>(lse.data());

  attn_abi::AttnFwdParams params = makeForwardParams(config, args);
  CHECK(params.batch == 2);
  CHECK(params.seqlen_q == 300);
  CHECK(params.seqlen_k == 500);
  CHECK(params.q_heads == 4);
  CHECK(params.kv_heads == 2);
  CHECK(params.scale_log2 == Approx(0.125 * 1.4426950408889634));

  launchForward(kernel, config, args, nullptr);
  ATTN_CU_CHECK(cuCtxSynchronize);
  std::vector<float> out(8);
  lse.copyToHost(out.data(), out.size() * sizeof(float));
  CHECK(out[0] == 300.0f);
  CHECK(out[1] == 500.0f);
  CHECK(out[2] == Approx(0.125 * 1.4426950408889634));
  CHECK(out[3] == 4.0f);
  CHECK(out[4] == 2.0f);
  CHECK(out[5] == 3.0f * 4 * 2); // ceil(300/128) x heads x batch blocks.
  CHECK(out[6] == 1.0f);         // No captures: unused entries have extents 1.
  CHECK(out[7] == 1.0f);

  // Captures reach the kernel in declaration order, extents padded with 1.
  AttnLaunchConfig withCaptures = config;
  withCaptures.captures = {
      {"slopes", DType::F32, {{CaptureDim::Kind::QHeads}}},
      {"doc_ids", DType::I32, {{CaptureDim::Kind::Batch}, {CaptureDim::Kind::SeqlenK}}},
  };
  DeviceBuffer slopes(4 * sizeof(float)), docIds(b * sk * sizeof(int32_t));
  AttnForwardArgs captureArgs = args;
  captureArgs.captures = {{slopes.data(), DType::F32, {4}},
                          {docIds.data(), DType::I32, {b, sk}}};
  attn_abi::AttnFwdParams captureParams = makeForwardParams(withCaptures, captureArgs);
  CHECK(captureParams.captures[0].data == slopes.data());
  CHECK(captureParams.captures[1].data == docIds.data());
  CHECK(captureParams.captures[1].extents[1] == sk);
  CHECK(captureParams.captures[1].extents[2] == 1);
  CHECK(captureParams.captures[2].data == nullptr);
  lse.fill(0);
  launchForward(kernel, withCaptures, captureArgs, nullptr);
  ATTN_CU_CHECK(cuCtxSynchronize);
  lse.copyToHost(out.data(), out.size() * sizeof(float));
  CHECK(out[6] == 4.0f);
  CHECK(out[7] == 1.0f);

  // A capture in host memory, or larger than its allocation, is refused
  // before anything is launched.
  std::vector<float> hostSlopes(4);
  AttnForwardArgs hostCapture = captureArgs;
  hostCapture.captures[0].data = hostSlopes.data();
  CHECK_THROWS_WITH(launchForward(kernel, withCaptures, hostCapture, nullptr),
                    StartsWith("capture 'slopes': ") && Contains("not device memory"));
  AttnForwardArgs shortCapture = captureArgs;
  shortCapture.captures[1].data = static_cast<char *>(docIds.data()) + 4;
  CHECK_THROWS_WITH(launchForward(kernel, withCaptures, shortCapture, nullptr),
                    StartsWith("capture 'doc_ids': ") &&
                        Contains("spans " + std::to_string(b * sk * 4)) &&
                        Contains("holds only " + std::to_string(b * sk * 4 - 4)));

  // Host memory is refused before anything is launched.
  std::vector<uint16_t> hostQ(size_t(b * sq * 4 * 128));
  AttnForwardArgs hostArgs = args;
  hostArgs.q.data = hostQ.data();
  CHECK_THROWS_WITH(launchForward(kernel, config, hostArgs, nullptr),
                    StartsWith("q:") && Contains("not device memory"));

  // Too much shared memory: the driver's refusal names the kernel.
  AttnLaunchConfig greedy = config;
  greedy.sharedMemoryBytes = 1 << 30;
  CHECK_THROWS_WITH(launchForward(kernel, greedy, args, nullptr),
                    Contains("cuFuncSetAttribute") &&
                        Contains(ATTN_FWD_KERNEL_NAME));

  Event start, stop;
  start.record();
  launchForward(kernel, config, args, nullptr);
  stop.record();
  CHECK(Event::elapsedMs(start, stop) >= 0.0f);
}

TEST_CASE("tensor map encoding", "[device]") {
  if (!haveDevice())
    return;
  DeviceBuffer storage(2 * 64 * 8 * 128 * 2);
  TensorView view =
      contiguousBSHD(storage.data(), DType::F16, 2, 64, 8, 128);
  attn_abi::TensorMapBlob blob = encodeBSHDTensorMap(view, 128, 64, "q");
  bool nonZero = false;
  for (unsigned long long word : blob.words)
    nonZero |= word != 0;
  CHECK(nonZero);

  // Head-major strides (BHSD storage) are accepted as well.
  view.strides[2] = 64 * 128;
  view.strides[1] = 128;
  view.strides[0] = 8 * 64 * 128;
  CHECK_NOTHROW(encodeBSHDTensorMap(view, 64, 64, "k"));

  // An empty sequence is encoded with extent 1 rather than rejected.
  TensorView empty = contiguousBSHD(storage.data(), DType::BF16, 2, 0, 8, 128);
  CHECK_NOTHROW(encodeBSHDTensorMap(empty, 128, 64, "k"));
}
