//===- AttentionLaunch.cpp - Forward attention kernel launch --------------===//

#include "attn/runtime/AttentionLaunch.h"

#include "attn/runtime/TensorMap.h"

#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <sstream>
#include <unordered_map>

namespace attn {

namespace {
constexpr unsigned kBoxCols = 64; // 128-byte rows of a 16-bit type.
constexpr unsigned kOutputBoxRows = 64; // one consumer warpgroup's WGMMA slice

[[noreturn]] void fail(const char *name, const std::string &what) {
  throw Error(std::string(name) + ": " + what);
}

std::string shapeString(const TensorView &view) {
  std::ostringstream os;
  os << "[" << view.shape[0] << ", " << view.shape[1] << ", " << view.shape[2]
     << ", " << view.shape[3] << "]";
  return os.str();
}

std::string hexAddress(uintptr_t address) {
  std::ostringstream os;
  os << "0x" << std::hex << address;
  return os.str();
}

/// Bytes from the first to one past the last element a view can touch.
uint64_t viewExtentBytes(const TensorView &view) {
  uint64_t lastOffset = 0;
  for (int dim = 0; dim < 4; ++dim)
    lastOffset += uint64_t(view.shape[dim] - 1) * uint64_t(view.strides[dim]);
  return (lastOffset + 1) * dtypeSize(view.dtype);
}

void requireDeviceMemory(const void *ptr, uint64_t extentBytes,
                         const char *name, int device) {
  PointerInfo info = queryPointer(ptr);
  if (!info.device)
    fail(name, "data pointer " + hexAddress(reinterpret_cast<uintptr_t>(ptr)) +
                   " is not device memory; expected an allocation on device " +
                   std::to_string(device) + " (e.g. cuMemAlloc)");
  // Managed memory migrates to whichever device touches it.
  if (!info.managed && info.deviceOrdinal >= 0 && info.deviceOrdinal != device)
    fail(name, "data pointer is memory of device " +
                   std::to_string(info.deviceOrdinal) +
                   ", but the current context is on device " +
                   std::to_string(device));
  if (info.rangeBytes != 0) {
    auto address = reinterpret_cast<uintptr_t>(ptr);
    uint64_t available = info.rangeStart + info.rangeBytes - address;
    if (extentBytes > available)
      fail(name, "the view spans " + std::to_string(extentBytes) +
                     " bytes from its data pointer, but its allocation "
                     "holds only " +
                     std::to_string(available) + " bytes from there");
  }
}

/// Checks what the plan fixes: dtype, head_dim and head count.
void validateAgainstConfig(const TensorView &view, const char *name,
                           const AttnLaunchConfig &config, int heads,
                           const char *headKind) {
  if (view.dtype != config.dtype)
    fail(name, std::string("dtype ") + dtypeName(view.dtype) +
                   " does not match the kernel's " + dtypeName(config.dtype));
  if (view.headDim() != config.headDim)
    fail(name, "head_dim " + std::to_string(view.headDim()) +
                   " does not match the kernel's " +
                   std::to_string(config.headDim));
  if (view.heads() != heads) {
    std::string message = std::to_string(view.heads()) +
                          " heads, but the kernel was compiled for " +
                          std::to_string(heads) + " " + headKind + " heads";
    if (config.kvHeads != config.qHeads)
      message += " (GQA: " + std::to_string(config.qHeads) + " query heads, " +
                 std::to_string(config.qHeads / config.kvHeads) +
                 " per kv head)";
    fail(name, message);
  }
}

void requireIntRange(int64_t value, const char *name, const char *what) {
  if (value > INT_MAX)
    fail(name, std::string(what) + " " + std::to_string(value) +
                   " exceeds the int range of the kernel ABI");
}
} // namespace

void validateLaunchConfig(const AttnLaunchConfig &config) {
  auto requirePositive = [](int value, const char *field) {
    if (value <= 0)
      fail("config", std::string(field) + " must be positive, got " +
                         std::to_string(value));
  };
  requirePositive(config.headDim, "headDim");
  requirePositive(config.qHeads, "qHeads");
  requirePositive(config.kvHeads, "kvHeads");
  requirePositive(config.blockM, "blockM");
  requirePositive(config.blockN, "blockN");
  requirePositive(config.threadsPerBlock, "threadsPerBlock");
  if (config.sharedMemoryBytes < 0)
    fail("config", "sharedMemoryBytes must be non-negative");
  if (config.persistentBlocksPerSm < 0)
    fail("config", "persistentBlocksPerSm must be non-negative");
  if (config.qHeads % config.kvHeads != 0)
    fail("config", "qHeads (" + std::to_string(config.qHeads) +
                       ") must be a multiple of kvHeads (" +
                       std::to_string(config.kvHeads) + ")");
  if (config.dtype != DType::BF16 && config.dtype != DType::F16)
    fail("config", std::string("dtype must be bf16 or f16, got ") +
                       dtypeName(config.dtype));
  if (!std::isfinite(config.scale))
    fail("config", "scale must be finite");
}

void validateForwardArgs(const AttnLaunchConfig &config,
                         const AttnForwardArgs &args) {
  validateLaunchConfig(config);
  validateAgainstConfig(args.q, "q", config, config.qHeads, "query");
  validateAgainstConfig(args.k, "k", config, config.kvHeads, "kv");
  validateAgainstConfig(args.v, "v", config, config.kvHeads, "kv");
  validateAgainstConfig(args.o, "o", config, config.qHeads, "query");

  for (int dim = 0; dim < 2; ++dim) {
    if (args.o.shape[dim] != args.q.shape[dim])
      fail("o", "shape " + shapeString(args.o) + " does not match q's " +
                    shapeString(args.q));
    if (args.v.shape[dim] != args.k.shape[dim])
      fail("v", "shape " + shapeString(args.v) + " does not match k's " +
                    shapeString(args.k));
  }
  if (args.k.batch() != args.q.batch())
    fail("k", "batch " + std::to_string(args.k.batch()) +
                  " does not match q's batch " +
                  std::to_string(args.q.batch()));

  // Layout: Q, K, V and O all go through TMA, so one set of rules covers
  // all four.
  validateTmaOperand(args.q, "q");
  validateTmaOperand(args.k, "k");
  validateTmaOperand(args.v, "v");
  validateTmaOperand(args.o, "o");

  requireIntRange(args.q.batch(), "q", "batch");
  requireIntRange(args.q.seqlen(), "q", "seqlen");
  requireIntRange(args.k.seqlen(), "k", "seqlen");
  forwardWorkTiles(config, static_cast<int>(args.q.batch()), static_cast<int>(args.q.seqlen()));

  const int64_t lseElements =
      args.q.batch() * int64_t(config.qHeads) * args.q.seqlen();
  if (!args.lse && lseElements != 0)
    fail("lse", "pointer is null");
  if (reinterpret_cast<uintptr_t>(args.lse) % alignof(float) != 0)
    fail("lse", "pointer must be 4-byte aligned");
}

void validateDevicePointers(const AttnForwardArgs &args, int qHeads) {
  // A host pointer, another device's memory or a view past its allocation
  // would otherwise surface later as an illegal address: a sticky error that
  // poisons the context.
  int device = currentDevice();
  for (auto [view, name] : {std::make_pair(&args.q, "q"),
                            std::make_pair(&args.k, "k"),
                            std::make_pair(&args.v, "v"),
                            std::make_pair(&args.o, "o")})
    if (view->numElements() != 0)
      requireDeviceMemory(view->data, viewExtentBytes(*view), name, device);
  uint64_t lseElements = uint64_t(args.q.batch()) * uint64_t(qHeads) *
                         uint64_t(args.q.seqlen());
  if (lseElements != 0)
    requireDeviceMemory(args.lse, lseElements * sizeof(float), "lse", device);
}

namespace {

/// The parameter block of arguments validateForwardArgs has accepted.
attn_abi::AttnFwdParams encodeForwardParams(const AttnLaunchConfig &config,
                                            const AttnForwardArgs &args) {
  attn_abi::AttnFwdParams params{};
  params.q_map = encodeBSHDTensorMap(args.q, config.blockM, kBoxCols, "q");
  params.k_map = encodeBSHDTensorMap(args.k, config.blockN, kBoxCols, "k");
  params.v_map = encodeBSHDTensorMap(args.v, config.blockN, kBoxCols, "v");
  // Each consumer warpgroup stores its own 64 rows of O.
  params.o_map = encodeBSHDTensorMap(args.o, kOutputBoxRows, kBoxCols, "o");
  params.lse = args.lse;
  params.batch = static_cast<int>(args.q.batch());
  params.seqlen_q = static_cast<int>(args.q.seqlen());
  params.seqlen_k = static_cast<int>(args.k.seqlen());
  params.q_heads = config.qHeads;
  params.kv_heads = config.kvHeads;
  // The kernel exponentiates with exp2, so fold log2(e) into the scale.
  constexpr double kLog2e = 1.4426950408889634074;
  params.scale_log2 = static_cast<float>(double(config.scale) * kLog2e);
  return params;
}

} // namespace

attn_abi::AttnFwdParams makeForwardParams(const AttnLaunchConfig &config,
                                          const AttnForwardArgs &args) {
  validateForwardArgs(config, args);
  return encodeForwardParams(config, args);
}

int64_t forwardWorkTiles(const AttnLaunchConfig &config, int batch, int seqlenQ) {
  if (config.blockM <= 0)
    fail("config", "blockM must be positive");
  if (batch < 0 || seqlenQ < 0 || config.qHeads < 0)
    fail("forwardGrid", "negative extent");
  int64_t queryBlocks = (int64_t(seqlenQ) + config.blockM - 1) / config.blockM;
  // The kernel counts work tiles in 32-bit ints. Below 2^56, so no overflow.
  int64_t tilesPerBatch = queryBlocks * config.qHeads;
  if (batch != 0 && tilesPerBatch > std::numeric_limits<int>::max() / batch)
    fail("q", "batch " + std::to_string(batch) + " x heads " + std::to_string(config.qHeads) +
                  " x ceil(seqlen / " + std::to_string(config.blockM) + ") " +
                  std::to_string(queryBlocks) + " work tiles exceed 2^31 - 1");
  return tilesPerBatch * batch;
}

Dim3 forwardGrid(const AttnLaunchConfig &config, int batch, int seqlenQ, int multiprocessors) {
  if (multiprocessors <= 0)
    fail("forwardGrid", "multiprocessor count must be positive");
  int64_t tiles = forwardWorkTiles(config, batch, seqlenQ);
  Dim3 grid;
  grid.x = static_cast<unsigned>(
      config.persistentBlocksPerSm > 0
          ? std::min<int64_t>(tiles, int64_t(config.persistentBlocksPerSm) * multiprocessors)
          : tiles);
  grid.y = 1;
  grid.z = 1;
  return grid;
}

namespace {

/// Multiprocessors of a device, asked of the driver once per device.
int multiprocessorsOf(int device) {
  static std::mutex mutex;
  static std::unordered_map<int, int> counts;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = counts.find(device);
  if (found != counts.end())
    return found->second;
  int count = queryDevice(device).multiprocessorCount;
  counts.emplace(device, count);
  return count;
}

} // namespace

void launchForward(KernelFunction &kernel, const AttnLaunchConfig &config,
                   const AttnForwardArgs &args, CUstream stream) {
  validateForwardArgs(config, args);
  if (args.q.batch() == 0 || args.q.seqlen() == 0)
    return;

  validateDevicePointers(args, config.qHeads);

  attn_abi::AttnFwdParams params = encodeForwardParams(config, args);
  kernel.setMaxDynamicSharedMemory(config.sharedMemoryBytes);
  Dim3 grid = forwardGrid(config, static_cast<int>(args.q.batch()),
                          static_cast<int>(args.q.seqlen()), multiprocessorsOf(currentDevice()));
  Dim3 block{static_cast<unsigned>(config.threadsPerBlock), 1, 1};
  void *kernelArgs[] = {&params};
  kernel.launch(grid, block, config.sharedMemoryBytes, stream, kernelArgs);
}

} // namespace attn
