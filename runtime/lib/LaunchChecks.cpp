//===- LaunchChecks.cpp - Argument checks shared by the launches ---------===//

#include "LaunchChecks.h"

#include <climits>
#include <mutex>
#include <unordered_map>
#include <sstream>
#include <utility>
#include <vector>

namespace attn::detail {

[[noreturn]] void fail(std::string_view name, const std::string &what) {
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

uint64_t viewExtentBytes(const TensorView &view) {
  uint64_t lastOffset = 0;
  for (int dim = 0; dim < 4; ++dim)
    lastOffset += uint64_t(view.shape[dim] - 1) * uint64_t(view.strides[dim]);
  return (lastOffset + 1) * dtypeSize(view.dtype);
}

void requireDeviceMemory(const void *ptr, uint64_t extentBytes,
                         std::string_view name, int device) {
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

void requireForwardSeqlen(int64_t value, const char *name) {
  if (value > attn_abi::kMaxSeqlen)
    fail(name, "seqlen " + std::to_string(value) + " exceeds the forward kernels' limit of " +
                   std::to_string(attn_abi::kMaxSeqlen) + " rows");
}

void validatePackedSequences(const PackedSequences &packed, const TensorView &q,
                             const TensorView &k) {
  for (auto [offsets, name] : {std::make_pair(packed.cuSeqlensQ, "packed.cuSeqlensQ"),
                               std::make_pair(packed.cuSeqlensK, "packed.cuSeqlensK")}) {
    if (!offsets)
      fail(name, "pointer is null; packed sequences need both offset arrays");
    if (reinterpret_cast<uintptr_t>(offsets) % alignof(int32_t) != 0)
      fail(name, "pointer must be 4-byte aligned");
  }
  if (packed.batch <= 0)
    fail("packed.batch", "must be positive, got " + std::to_string(packed.batch));
  requireIntRange(packed.batch, "packed.batch", "sequence count");
  for (auto [view, name] : {std::make_pair(&q, "q"), std::make_pair(&k, "k")})
    if (view->batch() != 1)
      fail(name, "packed sequences lie end to end in a tensor of batch 1, got batch " +
                     std::to_string(view->batch()));
  if (packed.maxSeqlenQ < 0 || packed.maxSeqlenQ > q.seqlen())
    fail("packed.maxSeqlenQ", std::to_string(packed.maxSeqlenQ) + " must lie in [0, q's " +
                                  std::to_string(q.seqlen()) + " packed rows]");
  if (packed.maxSeqlenK < 0 || packed.maxSeqlenK > k.seqlen())
    fail("packed.maxSeqlenK", std::to_string(packed.maxSeqlenK) + " must lie in [0, k's " +
                                  std::to_string(k.seqlen()) + " packed rows]");
}

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

LogicalShape logicalShape(const AttnForwardArgs &args) {
  if (args.packed.active())
    return {args.packed.batch, args.packed.maxSeqlenQ, args.packed.maxSeqlenK};
  return {args.q.batch(), args.q.seqlen(), args.k.seqlen()};
}

void requireWorkspace(const void *workspace, uint64_t bytes, uint64_t needed,
                      const std::string &use, const char *sizeFunction) {
  if (bytes < needed)
    fail("workspace", std::to_string(bytes) + " bytes are too few for " + use + ": " +
                          std::to_string(needed) + " needed (" + sizeFunction + ")");
  if (reinterpret_cast<uintptr_t>(workspace) % alignof(float) != 0)
    fail("workspace", "pointer must be 4-byte aligned");
  requireDeviceMemory(workspace, needed, "workspace", currentDevice());
}

namespace {
/// The linear family's fp32 side buffers with their sizes in bytes.
struct LinearBuffer {
  const void *pointer;
  uint64_t bytes;
  const char *name;
};

std::vector<LinearBuffer> linearBuffers(const AttnLaunchConfig &config, const AttnLinearArgs &args) {
  uint64_t heads = uint64_t(args.q.batch()) * uint64_t(config.qHeads);
  uint64_t state = heads * uint64_t(config.headDim) * uint64_t(config.headDim) * sizeof(float);
  uint64_t keySum = heads * uint64_t(config.headDim) * sizeof(float);
  uint64_t decay = heads * uint64_t(args.q.seqlen()) * sizeof(float);
  return {{args.initialState, state, "initialState"},
          {args.finalState, state, "finalState"},
          {args.initialKeySum, keySum, "initialKeySum"},
          {args.finalKeySum, keySum, "finalKeySum"},
          {args.logDecay, decay, "logDecay"}};
}
} // namespace

void validateLinearDevicePointers(const AttnLaunchConfig &config, const AttnLinearArgs &args) {
  int device = currentDevice();
  for (auto [view, name] : {std::make_pair(&args.q, "q"), std::make_pair(&args.k, "k"),
                            std::make_pair(&args.v, "v"), std::make_pair(&args.o, "o")})
    if (view->numElements() != 0)
      requireDeviceMemory(view->data, viewExtentBytes(*view), name, device);
  for (const LinearBuffer &buffer : linearBuffers(config, args))
    if (buffer.pointer && buffer.bytes != 0)
      requireDeviceMemory(buffer.pointer, buffer.bytes, buffer.name, device);
}

} // namespace attn::detail
