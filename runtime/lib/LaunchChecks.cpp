//===- LaunchChecks.cpp - Argument checks shared by the launches ---------===//

#include "LaunchChecks.h"

#include <fmt/format.h>

#include <climits>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace attn::detail {

[[noreturn]] void fail(std::string_view name, const std::string &what) {
  throw Error(fmt::format("{}: {}", name, what));
}

std::string shapeString(const TensorView &view) {
  return fmt::format("[{}, {}, {}, {}]", view.shape[0], view.shape[1], view.shape[2],
                     view.shape[3]);
}

std::string hexAddress(uintptr_t address) { return fmt::format("0x{:x}", address); }

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
    fail(name, fmt::format("data pointer {} is not device memory; expected an allocation on "
                           "device {} (e.g. cuMemAlloc)",
                           hexAddress(reinterpret_cast<uintptr_t>(ptr)), device));
  // Managed memory migrates to whichever device touches it.
  if (!info.managed && info.deviceOrdinal >= 0 && info.deviceOrdinal != device)
    fail(name, fmt::format("data pointer is memory of device {}, but the current context is "
                           "on device {}",
                           info.deviceOrdinal, device));
  if (info.rangeBytes != 0) {
    auto address = reinterpret_cast<uintptr_t>(ptr);
    uint64_t available = info.rangeStart + info.rangeBytes - address;
    if (extentBytes > available)
      fail(name, fmt::format("the view spans {} bytes from its data pointer, but its "
                             "allocation holds only {} bytes from there",
                             extentBytes, available));
  }
}

void validateAgainstConfig(const TensorView &view, const char *name,
                           const AttnLaunchConfig &config, int heads,
                           const char *headKind) {
  if (view.dtype != config.dtype)
    fail(name, std::string("dtype ") + dtypeName(view.dtype) +
                   " does not match the kernel's " + dtypeName(config.dtype));
  if (view.headDim() != config.headDim)
    fail(name, fmt::format("head_dim {} does not match the kernel's {}", view.headDim(),
                           config.headDim));
  if (view.heads() != heads) {
    std::string message = fmt::format("{} heads, but the kernel was compiled for {} {} heads",
                                      view.heads(), heads, headKind);
    if (config.kvHeads != config.qHeads)
      message += fmt::format(" (GQA: {} query heads, {} per kv head)", config.qHeads,
                             config.qHeads / config.kvHeads);
    fail(name, message);
  }
}

void requireIntRange(int64_t value, const char *name, const char *what) {
  if (value > INT_MAX)
    fail(name, fmt::format("{} {} exceeds the int range of the kernel ABI", what, value));
}

void requireForwardSeqlen(int64_t value, const char *name) {
  if (value > attn_abi::kMaxSeqlen)
    fail(name, fmt::format("seqlen {} exceeds the forward kernels' limit of {} rows", value,
                           attn_abi::kMaxSeqlen));
}

void requireQueryKeyExtents(const TensorView &q, const TensorView &k) {
  if (k.batch() != q.batch())
    fail("k", fmt::format("batch {} does not match q's batch {}", k.batch(), q.batch()));
  requireIntRange(q.batch(), "q", "batch");
  requireForwardSeqlen(q.seqlen(), "q");
  requireForwardSeqlen(k.seqlen(), "k");
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
    fail("packed.batch", fmt::format("must be positive, got {}", packed.batch));
  requireIntRange(packed.batch, "packed.batch", "sequence count");
  for (auto [view, name] : {std::make_pair(&q, "q"), std::make_pair(&k, "k")})
    if (view->batch() != 1)
      fail(name, fmt::format("packed sequences lie end to end in a tensor of batch 1, got "
                             "batch {}",
                             view->batch()));
  if (packed.maxSeqlenQ < 0 || packed.maxSeqlenQ > q.seqlen())
    fail("packed.maxSeqlenQ", fmt::format("{} must lie in [0, q's {} packed rows]",
                                          packed.maxSeqlenQ, q.seqlen()));
  if (packed.maxSeqlenK < 0 || packed.maxSeqlenK > k.seqlen())
    fail("packed.maxSeqlenK", fmt::format("{} must lie in [0, k's {} packed rows]",
                                          packed.maxSeqlenK, k.seqlen()));
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

void requireWorkspace(const void *workspace, uint64_t bytes, uint64_t needed,
                      const std::string &use, const char *sizeFunction) {
  if (bytes < needed)
    fail("workspace", fmt::format("{} bytes are too few for {}: {} needed ({})", bytes, use,
                                  needed, sizeFunction));
  if (reinterpret_cast<uintptr_t>(workspace) % alignof(float) != 0)
    fail("workspace", "pointer must be 4-byte aligned");
  requireDeviceMemory(workspace, needed, "workspace", currentDevice());
}

LinearBufferBytes linearBufferBytes(const AttnLaunchConfig &config, int64_t batch,
                                    int64_t seqlen) {
  const uint64_t heads = uint64_t(batch) * uint64_t(config.qHeads);
  return {heads * uint64_t(config.headDim) * uint64_t(config.headDim) * sizeof(float),
          heads * uint64_t(config.headDim) * sizeof(float),
          heads * uint64_t(seqlen) * sizeof(float)};
}

std::vector<SideBuffer> linearBuffers(const AttnLaunchConfig &config, const AttnLinearArgs &args) {
  const LinearBufferBytes bytes = linearBufferBytes(config, args.q.batch(), args.q.seqlen());
  return {{args.initialState, bytes.state, "initialState"},
          {args.finalState, bytes.state, "finalState"},
          {args.initialKeySum, bytes.keySum, "initialKeySum"},
          {args.finalKeySum, bytes.keySum, "finalKeySum"},
          {args.logDecay, bytes.decay, "logDecay"}};
}

void validateLinearViews(const AttnLaunchConfig &config, const TensorView &q, const TensorView &k,
                         const TensorView &v) {
  validateAgainstConfig(q, "q", config, config.qHeads, "query");
  validateAgainstConfig(k, "k", config, config.kvHeads, "kv");
  validateAgainstConfig(v, "v", config, config.kvHeads, "kv");
  for (auto [view, name] : {std::make_pair(&k, "k"), std::make_pair(&v, "v")})
    for (int dim = 0; dim < 2; ++dim)
      if (view->shape[dim] != q.shape[dim])
        fail(name, "shape " + shapeString(*view) + " does not match q's " + shapeString(q) +
                       " in batch and sequence length");
  requireIntRange(q.batch(), "q", "batch");
  requireIntRange(q.seqlen(), "q", "seqlen");
  if (q.batch() > 65535)
    fail("q", fmt::format("batch {} exceeds the grid's 65535", q.batch()));
}

void requireFloatAligned(const std::vector<SideBuffer> &buffers) {
  for (const SideBuffer &buffer : buffers)
    if (reinterpret_cast<uintptr_t>(buffer.pointer) % alignof(float) != 0)
      fail(buffer.name, "pointer must be 4-byte aligned");
}

void requireDeviceBuffers(std::initializer_list<std::pair<const TensorView *, const char *>> views,
                          const std::vector<SideBuffer> &buffers) {
  const int device = currentDevice();
  for (auto [view, name] : views)
    if (view->numElements() != 0)
      requireDeviceMemory(view->data, viewExtentBytes(*view), name, device);
  for (const SideBuffer &buffer : buffers)
    if (buffer.pointer && buffer.bytes != 0)
      requireDeviceMemory(buffer.pointer, buffer.bytes, buffer.name, device);
}

void validateLinearDevicePointers(const AttnLaunchConfig &config, const AttnLinearArgs &args) {
  requireDeviceBuffers({{&args.q, "q"}, {&args.k, "k"}, {&args.v, "v"}, {&args.o, "o"}},
                       linearBuffers(config, args));
}

} // namespace attn::detail

namespace attn {

LogicalShape logicalShape(const AttnForwardArgs &args) {
  if (args.packed.active())
    return {args.packed.batch, args.packed.maxSeqlenQ, args.packed.maxSeqlenK};
  if (args.paged.active())
    return {args.q.batch(), args.q.seqlen(), args.paged.maxSeqlenK};
  return {args.q.batch(), args.q.seqlen(), args.k.seqlen()};
}

} // namespace attn
