//===- AttentionLaunch.cpp - Forward attention kernel launch --------------===//

#include "attn/runtime/AttentionLaunch.h"

#include "LaunchChecks.h"

#include "attn/runtime/TensorMap.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <numeric>
#include <sstream>
#include <tuple>
#include <unordered_map>

namespace attn {

using namespace detail;

namespace {
constexpr unsigned kBoxCols = 64; // 128-byte rows of a 16-bit type.
constexpr unsigned kOutputBoxRows = 64; // one consumer warpgroup's WGMMA slice

const char *symbolicDimSpelling(CaptureDim::Kind kind) {
  switch (kind) {
  case CaptureDim::Kind::Fixed:
    return "fixed";
  case CaptureDim::Kind::Any:
    return "?";
  case CaptureDim::Kind::Batch:
    return "batch";
  case CaptureDim::Kind::QHeads:
    return "q_heads";
  case CaptureDim::Kind::KvHeads:
    return "kv_heads";
  case CaptureDim::Kind::SeqlenQ:
    return "seqlen_q";
  case CaptureDim::Kind::SeqlenK:
    return "seqlen_k";
  }
  return "<invalid capture dim>";
}

/// False for a value cast into the enum from outside its enumerators.
bool isKnownKind(CaptureDim::Kind kind) {
  switch (kind) {
  case CaptureDim::Kind::Fixed:
  case CaptureDim::Kind::Any:
  case CaptureDim::Kind::Batch:
  case CaptureDim::Kind::QHeads:
  case CaptureDim::Kind::KvHeads:
  case CaptureDim::Kind::SeqlenQ:
  case CaptureDim::Kind::SeqlenK:
    return true;
  }
  return false;
}

std::string captureLabel(const std::string &name) {
  return "capture '" + name + "'";
}

template <typename Range, typename Format>
std::string bracketed(const Range &items, Format format) {
  std::string text = "[";
  for (const auto &item : items) {
    if (text.size() > 1)
      text += ", ";
    text += format(item);
  }
  return text + "]";
}

std::string declaredShapeString(const CaptureDecl &decl) {
  return bracketed(decl.dims, captureDimSpelling);
}

std::string captureShapeString(const CaptureView &view) {
  return bracketed(view.shape, [](int64_t size) { return std::to_string(size); });
}

/// Bytes of a capture's contiguous elements. A shape that needs more than
/// int64 bytes is refused rather than wrapped, so the device-memory check
/// cannot be fooled by an overflowed size.
int64_t captureBytes(const CaptureView &view, const std::string &label) {
  for (int64_t size : view.shape)
    if (size == 0)
      return 0;
  int64_t bytes = static_cast<int64_t>(dtypeSize(view.dtype));
  for (int64_t size : view.shape)
    if (size < 0 || __builtin_mul_overflow(bytes, size, &bytes))
      fail(label, "shape " + captureShapeString(view) +
                      " does not fit in 2^63 bytes");
  return bytes;
}

void validateCaptureDecls(const std::vector<CaptureDecl> &captures) {
  if (captures.size() > size_t(attn_abi::kMaxCaptures))
    fail("config", std::to_string(captures.size()) +
                       " captured buffers exceed the kernel ABI's limit of " +
                       std::to_string(attn_abi::kMaxCaptures));
  for (size_t index = 0; index < captures.size(); ++index) {
    const CaptureDecl &decl = captures[index];
    if (!isCaptureName(decl.name))
      fail("config", "capture " + std::to_string(index) + ": name '" +
                         decl.name + "' is not an identifier");
    // Messages name captures, so a repeated name would be ambiguous.
    std::string label = captureLabel(decl.name) + ": ";
    for (size_t earlier = 0; earlier < index; ++earlier)
      if (captures[earlier].name == decl.name)
        fail("config", label + "declared twice (captures " +
                           std::to_string(earlier) + " and " +
                           std::to_string(index) + ")");
    if (decl.dtype != DType::F32 && decl.dtype != DType::I32)
      fail("config", label + "dtype must be f32 or i32, got " +
                         dtypeName(decl.dtype));
    if (decl.dims.empty() || decl.dims.size() > size_t(attn_abi::kMaxCaptureRank))
      fail("config", label + "rank must be 1 to " +
                         std::to_string(attn_abi::kMaxCaptureRank) + ", got " +
                         std::to_string(decl.dims.size()));
    for (size_t dim = 0; dim < decl.dims.size(); ++dim) {
      const CaptureDim &declared = decl.dims[dim];
      if (!isKnownKind(declared.kind))
        fail("config", label + "dim " + std::to_string(dim) +
                           " has an invalid kind " +
                           std::to_string(static_cast<int>(declared.kind)));
      if (declared.kind == CaptureDim::Kind::Fixed && declared.size <= 0)
        fail("config", label + "dim " + std::to_string(dim) +
                           " has fixed size " + std::to_string(declared.size) +
                           "; fixed sizes must be positive");
    }
  }
}

/// The batch and sequence lengths a call has for its grid, its captures and
/// its tile coverage: the tensors' own, or for packed sequences their count
/// and the longest lengths.
struct LogicalShape {
  int64_t batch, seqlenQ, seqlenK;
};

LogicalShape logicalShape(const AttnForwardArgs &args) {
  if (args.packed.active())
    return {args.packed.batch, args.packed.maxSeqlenQ, args.packed.maxSeqlenK};
  return {args.q.batch(), args.q.seqlen(), args.k.seqlen()};
}

/// Elements of lse: [B, Hq, Sq], or [Hq, total_q] for packed sequences.
uint64_t lseElementCount(const AttnLaunchConfig &config, const AttnForwardArgs &args) {
  uint64_t rows = uint64_t(args.q.seqlen()) * uint64_t(config.qHeads);
  return args.packed.active() ? rows : rows * uint64_t(args.q.batch());
}

/// The extent a declared dim requires of this launch.
int64_t requiredExtent(const CaptureDim &dim, const AttnLaunchConfig &config,
                       const AttnForwardArgs &args) {
  LogicalShape shape = logicalShape(args);
  return requiredCaptureExtent(dim, shape.batch, config.qHeads, config.kvHeads, shape.seqlenQ,
                               shape.seqlenK);
}

void validateCapture(const CaptureDecl &decl, const CaptureView &view,
                     const AttnLaunchConfig &config,
                     const AttnForwardArgs &args) {
  std::string label = captureLabel(decl.name);
  if (view.dtype != decl.dtype)
    fail(label, std::string("dtype ") + dtypeName(view.dtype) +
                    " does not match the declared " + dtypeName(decl.dtype));
  if (view.shape.size() != decl.dims.size())
    fail(label, "shape " + captureShapeString(view) + " has rank " +
                    std::to_string(view.shape.size()) +
                    ", but the kernel declares rank " +
                    std::to_string(decl.dims.size()) + ": " +
                    declaredShapeString(decl));
  for (size_t dim = 0; dim < decl.dims.size(); ++dim) {
    const CaptureDim &declared = decl.dims[dim];
    int64_t actual = view.shape[dim];
    if (declared.kind == CaptureDim::Kind::Any) {
      if (actual < 0)
        fail(label, "dim " + std::to_string(dim) +
                        " must be non-negative, got " + std::to_string(actual));
      continue;
    }
    int64_t expected = requiredExtent(declared, config, args);
    if (actual != expected)
      fail(label, "dim " + std::to_string(dim) + " is " +
                      std::to_string(actual) + ", expected " +
                      std::to_string(expected) +
                      (declared.kind == CaptureDim::Kind::Fixed
                           ? std::string()
                           : std::string(" (") + symbolicDimSpelling(declared.kind) +
                                 ")"));
  }
  if (captureBytes(view, label) != 0 && !view.data)
    fail(label, "data pointer is null");
  // The kernel loads whole 4-byte elements.
  if (reinterpret_cast<uintptr_t>(view.data) % dtypeSize(decl.dtype) != 0)
    fail(label, "data pointer must be " +
                    std::to_string(dtypeSize(decl.dtype)) + "-byte aligned");
}

void validateCaptures(const AttnLaunchConfig &config,
                      const AttnForwardArgs &args) {
  const std::vector<CaptureDecl> &decls = config.captures;
  if (args.captures.size() != decls.size()) {
    std::string declared = "no captured buffers";
    if (!decls.empty()) {
      std::string names;
      for (const CaptureDecl &decl : decls)
        names += (names.empty() ? "" : ", ") + decl.name;
      declared = std::to_string(decls.size()) +
                 (decls.size() == 1 ? " captured buffer (" : " captured buffers (") +
                 names + ")";
    }
    fail("captures", "the kernel declares " + declared + ", got " +
                         std::to_string(args.captures.size()));
  }
  for (size_t index = 0; index < decls.size(); ++index)
    validateCapture(decls[index], args.captures[index], config, args);
}
} // namespace

int64_t requiredCaptureExtent(const CaptureDim &dim, int64_t batch, int64_t qHeads,
                              int64_t kvHeads, int64_t seqlenQ, int64_t seqlenK) {
  switch (dim.kind) {
  case CaptureDim::Kind::Fixed:
    return dim.size;
  case CaptureDim::Kind::Batch:
    return batch;
  case CaptureDim::Kind::QHeads:
    return qHeads;
  case CaptureDim::Kind::KvHeads:
    return kvHeads;
  case CaptureDim::Kind::SeqlenQ:
    return seqlenQ;
  case CaptureDim::Kind::SeqlenK:
    return seqlenK;
  case CaptureDim::Kind::Any:
    break;
  }
  return -1; // Any has no required extent; validated configs have no others.
}

std::string captureDimSpelling(const CaptureDim &dim) {
  if (dim.kind == CaptureDim::Kind::Fixed)
    return std::to_string(dim.size);
  return symbolicDimSpelling(dim.kind);
}

bool isCaptureName(std::string_view name) {
  auto isLetter = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  };
  if (name.empty() || !isLetter(name.front()))
    return false;
  for (char c : name)
    if (!isLetter(c) && !(c >= '0' && c <= '9'))
      return false;
  return true;
}

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
  validateCaptureDecls(config.captures);
}

void validateForwardArgs(const AttnLaunchConfig &config,
                         const AttnForwardArgs &args) {
  validateLaunchConfig(config);
  if (config.linearFamily)
    fail("config", "the kernel is linear attention or retention: launch it with "
                   "AttnLinearArgs (Kernel::runLinear)");
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

  requireIntRange(args.q.batch(), "q", "batch");
  requireForwardSeqlen(args.q.seqlen(), "q");
  requireForwardSeqlen(args.k.seqlen(), "k");

  // Layout: Q, K, V and O all go through TMA, so one set of rules covers
  // all four.
  validateTmaOperands(args.q, args.k, args.v, args.o);

  if (args.packed.active())
    validatePackedSequences(args.packed, args.q, args.k);
  const LogicalShape shape = logicalShape(args);
  forwardWorkTiles(config, static_cast<int>(shape.batch), static_cast<int>(shape.seqlenQ));

  if (!args.lse && lseElementCount(config, args) != 0)
    fail("lse", "pointer is null");
  if (reinterpret_cast<uintptr_t>(args.lse) % alignof(float) != 0)
    fail("lse", "pointer must be 4-byte aligned");

  validateCaptures(config, args);
  if (args.tileKeyBits && !args.tileCoverage)
    fail("tileKeyBits", "stores the partial tiles of a tile coverage: pass that coverage as "
                        "tileCoverage too");
  // The kernel copies a tile's words into shared memory with a bulk copy,
  // whose source must be 16-byte aligned (the words begin 256 bytes in).
  if (reinterpret_cast<uintptr_t>(args.tileKeyBits) % 16 != 0)
    fail("tileKeyBits", "pointer must be 16-byte aligned");
}

void validateDevicePointers(const AttnLaunchConfig &config,
                            const AttnForwardArgs &args) {
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
  uint64_t lseElements = lseElementCount(config, args);
  if (lseElements != 0)
    requireDeviceMemory(args.lse, lseElements * sizeof(float), "lse", device);
  if (args.packed.active()) {
    uint64_t offsetBytes = uint64_t(args.packed.batch + 1) * sizeof(int32_t);
    requireDeviceMemory(args.packed.cuSeqlensQ, offsetBytes, "packed.cuSeqlensQ", device);
    requireDeviceMemory(args.packed.cuSeqlensK, offsetBytes, "packed.cuSeqlensK", device);
  }
  if (args.tileCoverage)
    requireDeviceMemory(args.tileCoverage, tileCoverageBytes(config, args), "tileCoverage",
                        device);
  if (args.tileKeyBits)
    requireDeviceMemory(args.tileKeyBits, tileKeyBitsSlotBytes(config, args), "tileKeyBits",
                        device);
  if (args.workOrder)
    requireDeviceMemory(args.workOrder, workOrderBytes(config, args), "workOrder", device);
  for (size_t index = 0; index < args.captures.size(); ++index) {
    const CaptureView &capture = args.captures[index];
    // The kernel bounds its reads by the extents alone, so the allocation
    // must hold every element they cover.
    std::string label = index < config.captures.size()
                            ? captureLabel(config.captures[index].name)
                            : "capture " + std::to_string(index);
    int64_t bytes = captureBytes(capture, label);
    if (bytes != 0)
      requireDeviceMemory(capture.data, uint64_t(bytes), label, device);
  }
}

namespace {

/// How many partial tiles' words the allocation holding the key bits
/// `buffer` has room for from `words` on (INT_MAX where the driver does not
/// say). Asked of the buffer's start: `words` may lie at its allocation's end.
int tileKeySlotLimit(const AttnLaunchConfig &config, const void *buffer, const char *words) {
  PointerInfo info = queryPointer(buffer);
  if (info.rangeBytes == 0)
    return INT_MAX;
  const auto address = reinterpret_cast<uintptr_t>(words);
  const uintptr_t end = info.rangeStart + info.rangeBytes;
  if (address >= end)
    return 0;
  const uint64_t tiles =
      (end - address) / uint64_t(attn_abi::tileKeyBitsPerTile(config.blockM, config.blockN));
  return static_cast<int>(std::min<uint64_t>(tiles, INT_MAX));
}

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
  const LogicalShape shape = logicalShape(args);
  params.batch = static_cast<int>(shape.batch);
  params.seqlen_q = static_cast<int>(shape.seqlenQ);
  params.seqlen_k = static_cast<int>(shape.seqlenK);
  if (args.packed.active()) {
    params.cu_seqlens_q = args.packed.cuSeqlensQ;
    params.cu_seqlens_k = args.packed.cuSeqlensK;
    params.total_q = static_cast<int>(args.q.seqlen());
    params.total_k = static_cast<int>(args.k.seqlen());
  }
  // A packed sequence's last partial slice of O, and a split tail tile's
  // rows, are stored by the threads.
  params.o = args.o.data;
  params.o_batch_stride = args.o.strides[0];
  params.o_row_stride = args.o.strides[1];
  params.o_head_stride = args.o.strides[2];
  params.q_heads = config.qHeads;
  params.kv_heads = config.kvHeads;
  // The kernel exponentiates with exp2, so fold log2(e) into the scale.
  constexpr double kLog2e = 1.4426950408889634074;
  params.scale_log2 = static_cast<float>(double(config.scale) * kLog2e);
  fillCaptureArgs(args, params);
  params.tile_coverage = const_cast<unsigned char *>(args.tileCoverage);
  params.tile_key_bits = static_cast<unsigned *>(const_cast<void *>(args.tileKeyBits));
  if (args.tileKeyBits) {
    char *words = static_cast<char *>(const_cast<void *>(args.tileKeyBits)) +
                  tileKeyBitsSlotBytes(config, args);
    params.tile_key_words = reinterpret_cast<unsigned *>(words);
    params.tile_key_slot_limit = tileKeySlotLimit(config, args.tileKeyBits, words);
  }
  params.work_order = args.workOrder;
  return params;
}

} // namespace

attn_abi::AttnFwdParams makeForwardParams(const AttnLaunchConfig &config,
                                          const AttnForwardArgs &args) {
  validateForwardArgs(config, args);
  return encodeForwardParams(config, args);
}

void fillCaptureArgs(const AttnForwardArgs &args,
                     attn_abi::AttnFwdParams &params) {
  if (args.captures.size() > size_t(attn_abi::kMaxCaptures))
    fail("captures", std::to_string(args.captures.size()) +
                         " captured buffers exceed the kernel ABI's limit of " +
                         std::to_string(attn_abi::kMaxCaptures));
  for (size_t index = 0; index < size_t(attn_abi::kMaxCaptures); ++index) {
    attn_abi::CaptureArg &entry = params.captures[index];
    // Extents of 1 keep every index of an unused entry or dim in bounds at 0.
    entry.data = nullptr;
    for (long long &extent : entry.extents)
      extent = 1;
    if (index >= args.captures.size())
      continue;
    const CaptureView &capture = args.captures[index];
    if (capture.shape.size() > size_t(attn_abi::kMaxCaptureRank))
      fail("capture " + std::to_string(index),
           "rank " + std::to_string(capture.shape.size()) +
               " exceeds the kernel ABI's limit of " +
               std::to_string(attn_abi::kMaxCaptureRank));
    entry.data = capture.data;
    for (size_t dim = 0; dim < capture.shape.size(); ++dim)
      entry.extents[dim] = capture.shape[dim];
  }
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

ForwardTailSplit forwardTailSplitFor(const AttnLaunchConfig &config, int batch, int seqlenQ,
                                     int seqlenK, int gridBlocks) {
  ForwardTailSplit split;
  // Pieces of head dim 256 carry twice the O, and measured slower on H100.
  constexpr int kMaxHeadDim = 128;
  const int64_t tiles = forwardWorkTiles(config, batch, seqlenQ);
  if (!config.evenWorkTiles || config.headDim > kMaxHeadDim ||
      config.persistentBlocksPerSm <= 0 || gridBlocks <= 0 || tiles <= gridBlocks ||
      config.blockN <= 0 || seqlenK <= 0)
    return split;
  const int64_t tail = tiles % gridBlocks;
  const int64_t keyTiles = (int64_t(seqlenK) + config.blockN - 1) / config.blockN;
  const int64_t tailKeyTiles = tail * keyTiles;
  // Every block's run must hold a key tile: a tile's pieces are those of
  // the blocks from the one holding its first key tile to the one holding
  // its last. A piece costs its own Q load, pipeline fill and combination:
  // the split needs work tiles of at least kMinKeyTiles key tiles and must
  // shorten the whole run by at least 1 %: on H100 shorter pieces or smaller
  // savings measured slower (docs/benchmarks.md).
  constexpr int64_t kMinKeyTiles = 16;
  const int64_t longestRun = (tailKeyTiles + gridBlocks - 1) / gridBlocks;
  const int64_t rounds = tiles / gridBlocks + 1;
  if (tail == 0 || tailKeyTiles < gridBlocks || keyTiles < kMinKeyTiles ||
      100 * (keyTiles - longestRun) < rounds * keyTiles)
    return split;
  split.tiles = static_cast<int>(tail);
  split.keyTiles = static_cast<int>(keyTiles);
  return split;
}

namespace {

/// Checks a workspace of `bytes` that `needed` bytes of it serve `use`
/// (sized by `sizeFunction`): enough bytes, 4-byte alignment, device memory.
void requireWorkspace(const void *workspace, uint64_t bytes, uint64_t needed,
                      const std::string &use, const char *sizeFunction) {
  if (bytes < needed)
    fail("workspace", std::to_string(bytes) + " bytes are too few for " + use + ": " +
                          std::to_string(needed) + " needed (" + sizeFunction + ")");
  if (reinterpret_cast<uintptr_t>(workspace) % alignof(float) != 0)
    fail("workspace", "pointer must be 4-byte aligned");
  requireDeviceMemory(workspace, needed, "workspace", currentDevice());
}

/// Where a tail split's counters and pieces lie in the forward workspace.
struct ForwardScratch {
  uint64_t counterBytes = 0, pieceBytes = 0;
  uint64_t bytes() const { return counterBytes + pieceBytes; }
};

ForwardScratch forwardScratch(const AttnLaunchConfig &config, const ForwardTailSplit &split,
                              int gridBlocks) {
  ForwardScratch scratch;
  if (split.tiles == 0)
    return scratch;
  // attn_params.h: a counter per tail tile and consumer warp; per block two
  // slots of a piece per consumer warp.
  constexpr uint64_t kWarpThreads = 32, kWarpgroupWarps = 4;
  const uint64_t consumerWarps =
      (uint64_t(config.threadsPerBlock) / (kWarpThreads * kWarpgroupWarps) - 1) * kWarpgroupWarps;
  scratch.counterBytes = (uint64_t(split.tiles) * consumerWarps * sizeof(int32_t) + 15) & ~15ull;
  scratch.pieceBytes = 2 * uint64_t(gridBlocks) * consumerWarps *
                       uint64_t(attn_abi::tailPieceWarpFloats(config.headDim)) * sizeof(float);
  return scratch;
}

/// The tail split a call takes on a grid of `gridBlocks`, and where it lies
/// in the workspace: none for packed sequences or a work order.
struct ForwardTail {
  ForwardTailSplit split;
  ForwardScratch scratch;
};

ForwardTail forwardTailOf(const AttnLaunchConfig &config, const AttnForwardArgs &args,
                          const LogicalShape &shape, int gridBlocks) {
  ForwardTail tail;
  if (args.packed.active() || args.workOrder)
    return tail;
  tail.split = forwardTailSplitFor(config, static_cast<int>(shape.batch),
                                   static_cast<int>(shape.seqlenQ),
                                   static_cast<int>(shape.seqlenK), gridBlocks);
  tail.scratch = forwardScratch(config, tail.split, gridBlocks);
  return tail;
}

/// Multiprocessors of a device, asked of the driver once per device.

} // namespace

void launchForward(KernelFunction &kernel, const AttnLaunchConfig &config,
                   const AttnForwardArgs &args, CUstream stream) {
  validateForwardArgs(config, args);
  const LogicalShape shape = logicalShape(args);
  if (args.q.batch() == 0 || args.q.seqlen() == 0 || shape.batch == 0 || shape.seqlenQ == 0)
    return;

  validateDevicePointers(config, args);

  attn_abi::AttnFwdParams params = encodeForwardParams(config, args);
  kernel.setMaxDynamicSharedMemory(config.sharedMemoryBytes);
  Dim3 grid = forwardGrid(config, static_cast<int>(shape.batch), static_cast<int>(shape.seqlenQ),
                          multiprocessorsOf(currentDevice()));
  const ForwardTail tail = args.workspace
                               ? forwardTailOf(config, args, shape, static_cast<int>(grid.x))
                               : ForwardTail{};
  if (tail.scratch.bytes() > 0) {
    requireWorkspace(args.workspace, args.workspaceBytes, tail.scratch.bytes(),
                     "the split of " + std::to_string(tail.split.tiles) + " tail tiles",
                     "forwardWorkspaceBytes");
    unsigned char *base = static_cast<unsigned char *>(args.workspace);
    params.tail_tiles = tail.split.tiles;
    params.tail_counters = reinterpret_cast<int *>(base);
    params.tail_partials = reinterpret_cast<float *>(base + tail.scratch.counterBytes);
    ATTN_CU_CHECK_CTX("workspace: zeroing the tail split's counters", cuMemsetD32Async,
                      reinterpret_cast<CUdeviceptr>(base), 0,
                      tail.scratch.counterBytes / sizeof(int32_t), stream);
  }
  Dim3 block{static_cast<unsigned>(config.threadsPerBlock), 1, 1};
  void *kernelArgs[] = {&params};
  kernel.launch(grid, block, config.sharedMemoryBytes, stream, kernelArgs);
}

uint64_t forwardWorkspaceBytes(const AttnLaunchConfig &config, const AttnForwardArgs &args) {
  validateForwardArgs(config, args);
  const LogicalShape shape = logicalShape(args);
  if (shape.batch == 0 || shape.seqlenQ == 0)
    return 0;
  const Dim3 grid = forwardGrid(config, static_cast<int>(shape.batch),
                                static_cast<int>(shape.seqlenQ), multiprocessorsOf(currentDevice()));
  return forwardTailOf(config, args, shape, static_cast<int>(grid.x)).scratch.bytes();
}

void validateLinearArgs(const AttnLaunchConfig &config, const AttnLinearArgs &args, bool decode) {
  validateLaunchConfig(config);
  if (!config.linearFamily)
    fail("config", "the kernel is softmax attention, not linear attention or retention");
  validateAgainstConfig(args.q, "q", config, config.qHeads, "query");
  validateAgainstConfig(args.k, "k", config, config.kvHeads, "kv");
  validateAgainstConfig(args.v, "v", config, config.kvHeads, "kv");
  validateAgainstConfig(args.o, "o", config, config.qHeads, "query");
  for (auto [view, name] : {std::make_pair(&args.k, "k"), std::make_pair(&args.v, "v"),
                            std::make_pair(&args.o, "o")})
    for (int dim = 0; dim < 2; ++dim)
      if (view->shape[dim] != args.q.shape[dim])
        fail(name, "shape " + shapeString(*view) + " does not match q's " + shapeString(args.q) +
                       " in batch and sequence length");
  if (decode) {
    if (args.q.seqlen() != 1)
      fail("q", "the one-token step takes seqlen 1, got " + std::to_string(args.q.seqlen()));
  } else {
    validateTmaOperands(args.q, args.k, args.v, args.o);
  }
  requireIntRange(args.q.batch(), "q", "batch");
  requireIntRange(args.q.seqlen(), "q", "seqlen");
  if (args.q.batch() > 65535)
    fail("q", "batch " + std::to_string(args.q.batch()) + " exceeds the grid's 65535");
  if (!config.normalize && (args.initialKeySum || args.finalKeySum))
    fail(args.initialKeySum ? "initialKeySum" : "finalKeySum",
         "the kernel does not normalize, so it has no key sum");
  if (config.gated && !args.logDecay && args.q.numElements() != 0)
    fail("logDecay", "the kernel is gated: pass the per-token log-decays");
  if (!config.gated && args.logDecay)
    fail("logDecay", "the kernel is not gated; it takes no log-decays");
  for (auto [pointer, name] : {std::make_pair(static_cast<const void *>(args.initialState), "initialState"),
                               std::make_pair(static_cast<const void *>(args.finalState), "finalState"),
                               std::make_pair(static_cast<const void *>(args.initialKeySum), "initialKeySum"),
                               std::make_pair(static_cast<const void *>(args.finalKeySum), "finalKeySum"),
                               std::make_pair(static_cast<const void *>(args.logDecay), "logDecay")})
    if (reinterpret_cast<uintptr_t>(pointer) % alignof(float) != 0)
      fail(name, "pointer must be 4-byte aligned");
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
} // namespace

LinearSplit linearSplitFor(const AttnLaunchConfig &config, int64_t batch, int64_t seqlen,
                           int maxSegments) {
  // A split costs a second pass over K and V: it pays only while the
  // unsplit grid leaves SMs idle. Since one fold kernel gives every segment
  // its entry state, filling the GPU pays down to segments of 4 chunks (the
  // shortest measured on H100: docs/benchmarks.md, ninth run).
  constexpr int64_t kMinSegmentChunks = 4;
  const int64_t blocksPerSm = ATTN_LINEAR_BLOCKS_PER_SM(config.blockN / ATTN_LINEAR_SLICE);
  LinearSplit split;
  const int64_t chunks = (seqlen + config.blockM - 1) / config.blockM;
  const int64_t blocks = int64_t(config.headDim / config.blockN) * config.qHeads * batch;
  if (chunks == 0 || blocks == 0)
    return split;
  const int64_t multiprocessors = multiprocessorsOf(currentDevice());
  const int64_t resident = blocksPerSm * multiprocessors;
  int64_t segments = std::min<int64_t>(maxSegments, chunks);
  if (maxSegments <= 0) {
    if (attn_abi::linearGridFillsGpu(blocks, multiprocessors))
      return split;
    segments = std::max<int64_t>(1, std::min(resident / blocks, chunks / kMinSegmentChunks));
  }
  split.segmentChunks = static_cast<int>((chunks + segments - 1) / segments);
  split.segments = static_cast<int>((chunks + split.segmentChunks - 1) / split.segmentChunks);
  if (split.segments == 1)
    return split;
  // Pieces per segment: enough segment-kernel blocks to fill the GPU,
  // dividing the segment evenly.
  const int64_t coveredSegments = config.causal ? split.segments - 1 : split.segments;
  int64_t pieces = std::max<int64_t>(1, resident / (blocks * coveredSegments));
  pieces = std::min<int64_t>(pieces, split.segmentChunks);
  while (split.segmentChunks % pieces != 0)
    --pieces;
  split.stateChunks = static_cast<int>(split.segmentChunks / pieces);
  split.stateSegments =
      config.causal ? static_cast<int>(coveredSegments * pieces)
                    : static_cast<int>((chunks + split.stateChunks - 1) / split.stateChunks);
  // The grids' z extents (batch x segments or pieces) must stay within
  // 65535; past that the sequence is not split.
  if (batch * std::max(split.segments, split.stateSegments) > 65535)
    return LinearSplit{};
  return split;
}

namespace {
/// Where the split's scratch lives in the workspace: per (batch, head,
/// segment) the state, then the key sums, then the log2-decays.
struct LinearScratch {
  uint64_t stateFloats = 0, keySumFloats = 0, decayFloats = 0;
  uint64_t bytes() const { return (stateFloats + keySumFloats + decayFloats) * sizeof(float); }
};

LinearScratch linearScratch(const AttnLaunchConfig &config, int64_t batch, const LinearSplit &split) {
  LinearScratch scratch;
  if (split.segments <= 1)
    return scratch;
  const uint64_t parts = uint64_t(batch) * uint64_t(config.qHeads) * uint64_t(split.stateSegments);
  scratch.stateFloats = parts * uint64_t(config.headDim) * uint64_t(config.headDim);
  scratch.keySumFloats = parts * uint64_t(config.headDim);
  scratch.decayFloats = parts;
  return scratch;
}
} // namespace

uint64_t linearWorkspaceBytes(const AttnLaunchConfig &config, int64_t batch,
                              const LinearSplit &split) {
  return linearScratch(config, batch, split).bytes();
}

LinearFunctions loadLinearFunctions(const Module &module, const AttnLaunchConfig &config) {
  LinearFunctions functions;
  functions.chunkwise = module.function(config.kernelName);
  functions.segment = module.function(ATTN_LINEAR_SEGMENT_KERNEL_NAME);
  functions.fold = module.function(ATTN_LINEAR_FOLD_KERNEL_NAME);
  functions.decode = module.function(ATTN_DECODE_KERNEL_NAME);
  functions.chunkwise.setMaxDynamicSharedMemory(config.sharedMemoryBytes);
  functions.segment.setMaxDynamicSharedMemory(config.sharedMemoryBytes);
  return functions;
}

void launchLinear(const Module &module, const AttnLaunchConfig &config,
                  const AttnLinearArgs &args, CUstream stream) {
  LinearFunctions functions = loadLinearFunctions(module, config);
  launchLinear(functions, config, args, stream);
}

void launchLinear(LinearFunctions &functions, const AttnLaunchConfig &config,
                  const AttnLinearArgs &args, CUstream stream) {
  validateLinearArgs(config, args);
  if (args.q.batch() == 0 || args.q.seqlen() == 0)
    return;
  validateLinearDevicePointers(config, args);
  if (args.segments < 0)
    fail("segments", "expected 0 (chosen by the runtime) or a positive cap, got " +
                         std::to_string(args.segments));
  LinearSplit split;
  if (args.workspace)
    split = linearSplitFor(config, args.q.batch(), args.q.seqlen(), args.segments);
  const LinearScratch scratch = linearScratch(config, args.q.batch(), split);
  if (scratch.bytes() > 0)
    requireWorkspace(args.workspace, args.workspaceBytes, scratch.bytes(),
                     std::to_string(split.segments) + " segments", "linearWorkspaceBytes");
  attn_abi::AttnLinearParams params{};
  params.q_map = encodeBSHDTensorMap(args.q, config.blockM, kBoxCols, "q");
  params.k_map = encodeBSHDTensorMap(args.k, config.blockM, kBoxCols, "k");
  params.v_map = encodeBSHDTensorMap(args.v, config.blockM, kBoxCols, "v");
  params.o_map = encodeBSHDTensorMap(args.o, config.blockM, kBoxCols, "o");
  params.state_in = args.initialState;
  params.state_out = args.finalState;
  params.key_sum_in = args.initialKeySum;
  params.key_sum_out = args.finalKeySum;
  params.log_decay = args.logDecay;
  float *workspace = static_cast<float *>(args.workspace);
  params.segment_state = scratch.bytes() ? workspace : nullptr;
  params.segment_key_sum = scratch.bytes() ? workspace + scratch.stateFloats : nullptr;
  params.segment_log2_decay =
      scratch.bytes() ? workspace + scratch.stateFloats + scratch.keySumFloats : nullptr;
  params.segments = split.segments;
  params.state_segments = split.stateSegments;
  params.state_chunks = split.stateChunks;
  params.segment_chunks =
      split.segments > 1 ? split.segmentChunks
                         : static_cast<int>((args.q.seqlen() + config.blockM - 1) / config.blockM);
  params.batch = static_cast<int>(args.q.batch());
  params.seqlen = static_cast<int>(args.q.seqlen());
  params.q_heads = config.qHeads;
  params.kv_heads = config.kvHeads;
  params.scale = config.scale;
  Dim3 block{static_cast<unsigned>(config.threadsPerBlock), 1, 1};
  void *kernelArgs[] = {&params};
  // One block per block_n value columns of each (head, batch, segment or
  // piece).
  auto gridOf = [&](int segments) {
    return Dim3{static_cast<unsigned>(config.headDim / config.blockN),
                static_cast<unsigned>(config.qHeads),
                static_cast<unsigned>(args.q.batch() * segments)};
  };
  if (split.segments > 1) {
    functions.segment.launch(gridOf(split.stateSegments), block, config.sharedMemoryBytes, stream,
                             kernelArgs);
    // One thread per element of a head's state (and of its key sum).
    const int64_t foldElements =
        int64_t(config.headDim) * config.headDim + (config.normalize ? config.headDim : 0);
    const Dim3 foldGrid{
        static_cast<unsigned>((foldElements + ATTN_LINEAR_FOLD_THREADS - 1) /
                              ATTN_LINEAR_FOLD_THREADS),
        static_cast<unsigned>(config.qHeads), static_cast<unsigned>(args.q.batch())};
    functions.fold.launch(foldGrid, Dim3{ATTN_LINEAR_FOLD_THREADS, 1, 1}, 0, stream, kernelArgs);
  }
  functions.chunkwise.launch(gridOf(split.segments), block, config.sharedMemoryBytes, stream,
                             kernelArgs);
}

void launchDecode(KernelFunction &kernel, const AttnLaunchConfig &config,
                  const AttnDecodeArgs &args, CUstream stream) {
  validateLinearArgs(config, args, /*decode=*/true);
  if (args.q.batch() == 0)
    return;
  validateLinearDevicePointers(config, args);
  attn_abi::AttnDecodeParams params{};
  const TensorView *views[] = {&args.q, &args.k, &args.v, &args.o};
  long long(*strides[])[2] = {&params.q_strides, &params.k_strides, &params.v_strides,
                              &params.o_strides};
  for (int index = 0; index < 4; ++index) {
    (*strides[index])[0] = views[index]->strides[0];
    (*strides[index])[1] = views[index]->strides[2];
  }
  params.q = args.q.data;
  params.k = args.k.data;
  params.v = args.v.data;
  params.o = args.o.data;
  params.state_in = args.initialState;
  params.state_out = args.finalState;
  params.key_sum_in = args.initialKeySum;
  params.key_sum_out = args.finalKeySum;
  params.log_decay = args.logDecay;
  params.batch = static_cast<int>(args.q.batch());
  params.q_heads = config.qHeads;
  params.kv_heads = config.kvHeads;
  params.scale = config.scale;
  Dim3 grid{static_cast<unsigned>(config.qHeads), static_cast<unsigned>(args.q.batch()), 1};
  Dim3 block{ATTN_DECODE_THREADS, 1, 1};
  void *kernelArgs[] = {&params};
  kernel.launch(grid, block, 0, stream, kernelArgs);
}

namespace {
/// The tile coverage's extents: [batch x q_heads][query blocks][key tiles].
struct TileCoverageShape {
  uint64_t batchHeads, queryBlocks, keyTiles;
  uint64_t bytes() const { return batchHeads * queryBlocks * keyTiles; }

  /// The grid of a kernel with a block per tile (key tiles, query blocks,
  /// batch x heads); throws attn::Error naming "q" past the grid's limits.
  Dim3 tileGrid(const std::string &kernel) const {
    if (batchHeads > 65535 || queryBlocks > 65535)
      fail("q", "the " + kernel + " grid takes at most 65535 (batch x heads) and 65535 query "
                "blocks, got " + std::to_string(batchHeads) + " and " +
                std::to_string(queryBlocks));
    return Dim3{static_cast<unsigned>(keyTiles), static_cast<unsigned>(queryBlocks),
                static_cast<unsigned>(batchHeads)};
  }
};

TileCoverageShape tileCoverageShape(const AttnLaunchConfig &config, const AttnForwardArgs &args) {
  LogicalShape shape = logicalShape(args);
  return {uint64_t(shape.batch) * uint64_t(config.qHeads),
          (uint64_t(shape.seqlenQ) + config.blockM - 1) / config.blockM,
          (uint64_t(shape.seqlenK) + config.blockN - 1) / config.blockN};
}
} // namespace

uint64_t tileCoverageBytes(const AttnLaunchConfig &config, const AttnForwardArgs &args) {
  return tileCoverageShape(config, args).bytes();
}

uint64_t tileKeyBitsSlotBytes(const AttnLaunchConfig &config, const AttnForwardArgs &args) {
  return uint64_t(attn_abi::tileKeyBitsOffset(int64_t(tileCoverageBytes(config, args))));
}

PackedSequenceOffsets uploadPackedSequences(const std::vector<int64_t> &seqlensQ,
                                            const std::vector<int64_t> &seqlensK) {
  if (seqlensQ.empty())
    fail("seqlensQ", "packed sequences need at least one sequence");
  if (seqlensK.size() != seqlensQ.size())
    fail("seqlensK", "has " + std::to_string(seqlensK.size()) + " lengths, but seqlensQ has " +
                         std::to_string(seqlensQ.size()));
  PackedSequenceOffsets packed;
  std::vector<int32_t> offsets;
  offsets.reserve(2 * (seqlensQ.size() + 1));
  for (auto [lengths, name, total, longest] :
       {std::make_tuple(&seqlensQ, "seqlensQ", &packed.totalQ, &packed.sequences.maxSeqlenQ),
        std::make_tuple(&seqlensK, "seqlensK", &packed.totalK, &packed.sequences.maxSeqlenK)}) {
    offsets.push_back(0);
    for (size_t index = 0; index < lengths->size(); ++index) {
      int64_t length = (*lengths)[index];
      std::string at = std::string(name) + "[" + std::to_string(index) + "]";
      if (length < 0)
        fail(at, "length " + std::to_string(length) + " is negative");
      *total += length;
      if (*total > INT_MAX)
        fail(at, "the packed rows up to here, " + std::to_string(*total) +
                     ", exceed the int range of the kernel ABI");
      *longest = std::max(*longest, length);
      offsets.push_back(static_cast<int32_t>(*total));
    }
  }
  packed.offsets = DeviceBuffer(offsets.size() * sizeof(int32_t));
  packed.offsets.upload(offsets);
  const int32_t *device = static_cast<const int32_t *>(packed.offsets.data());
  packed.sequences.cuSeqlensQ = device;
  packed.sequences.cuSeqlensK = device + seqlensQ.size() + 1;
  packed.sequences.batch = static_cast<int64_t>(seqlensQ.size());
  return packed;
}

DeviceBuffer buildTileCoverage(const Module &module, const AttnLaunchConfig &config,
                               const AttnForwardArgs &args, CUstream stream) {
  AttnForwardArgs checked = args;
  checked.tileCoverage = nullptr;
  checked.tileKeyBits = nullptr;
  validateForwardArgs(config, checked);
  TileCoverageShape shape = tileCoverageShape(config, checked);
  DeviceBuffer coverage(std::max<uint64_t>(shape.bytes(), 1));
  if (shape.bytes() == 0)
    return coverage;
  validateDevicePointers(config, checked);
  Dim3 grid = shape.tileGrid("tile coverage");
  attn_abi::AttnFwdParams params = encodeForwardParams(config, checked);
  params.tile_coverage = static_cast<unsigned char *>(coverage.data());
  KernelFunction kernel = module.function(ATTN_TILE_COVERAGE_KERNEL_NAME);
  Dim3 block{ATTN_TILE_COVERAGE_THREADS, 1, 1};
  void *kernelArgs[] = {&params};
  kernel.launch(grid, block, 0, stream, kernelArgs);
  return coverage;
}

DeviceBuffer buildTileKeyBits(const Module &module, const AttnLaunchConfig &config,
                              const AttnForwardArgs &args, CUstream stream) {
  AttnForwardArgs checked = args;
  checked.tileKeyBits = nullptr;
  if (!checked.tileCoverage)
    fail("tileCoverage", "the key bits store the partial tiles of a tile coverage: pass the one "
                         "from buildTileCoverage");
  validateForwardArgs(config, checked);
  TileCoverageShape shape = tileCoverageShape(config, checked);
  const uint64_t slotBytes = tileKeyBitsSlotBytes(config, checked);
  if (shape.bytes() == 0)
    return DeviceBuffer(std::max<uint64_t>(slotBytes, 1));
  validateDevicePointers(config, checked);
  if (shape.bytes() > uint64_t(INT_MAX))
    fail("q", "the key bits number at most " + std::to_string(INT_MAX) + " tiles, got " +
                  std::to_string(shape.bytes()));
  Dim3 grid = shape.tileGrid("key bits");
  // Looked up before anything launches: a failed lookup must not free a
  // buffer under a running kernel.
  KernelFunction slotKernel = module.function(ATTN_TILE_SLOT_KERNEL_NAME);
  KernelFunction bitsKernel = module.function(ATTN_TILE_KEY_BITS_KERNEL_NAME);
  const unsigned char *coverage = checked.tileCoverage;
  long long tiles = static_cast<long long>(shape.bytes());
  auto numberPartialTiles = [&](int *slots, int *count) {
    void *slotArgs[] = {&coverage, &tiles, &slots, &count};
    slotKernel.launch(Dim3{1, 1, 1}, Dim3{ATTN_TILE_SLOT_THREADS, 1, 1}, 0, stream, slotArgs);
  };
  // Count first: the partial tiles size the buffer.
  DeviceBuffer counter(sizeof(int32_t));
  numberPartialTiles(nullptr, static_cast<int *>(counter.data()));
  ATTN_CU_CHECK(cuStreamSynchronize, stream);
  const int32_t partialTiles = counter.download<int32_t>().at(0);
  DeviceBuffer bits(slotBytes + uint64_t(partialTiles) * uint64_t(attn_abi::tileKeyBitsPerTile(
                                                              config.blockM, config.blockN)));
  numberPartialTiles(static_cast<int *>(bits.data()), nullptr);
  // The key bits kernel writes the words through the parameters the forward
  // kernel reads them by.
  checked.tileKeyBits = bits.data();
  attn_abi::AttnFwdParams params = encodeForwardParams(config, checked);
  void *kernelArgs[] = {&params};
  bitsKernel.launch(grid, Dim3{ATTN_TILE_COVERAGE_THREADS, 1, 1}, 0, stream, kernelArgs);
  return bits;
}

uint64_t workOrderBytes(const AttnLaunchConfig &config, const AttnForwardArgs &args) {
  LogicalShape shape = logicalShape(args);
  return uint64_t(forwardWorkTiles(config, static_cast<int>(shape.batch),
                                   static_cast<int>(shape.seqlenQ))) *
         sizeof(int32_t);
}

std::vector<int32_t> workOrderOf(const std::vector<int32_t> &costs, WorkOrderPolicy policy) {
  int64_t total = 0;
  for (int32_t cost : costs)
    total += std::max<int32_t>(cost, 0);
  std::vector<int32_t> keys;
  for (int32_t cost : costs) {
    const int64_t clamped = std::max<int32_t>(cost, 0);
    const bool outlier = clamped * int64_t(costs.size()) > 2 * total;
    keys.push_back(policy == WorkOrderPolicy::OutliersFirst && !outlier
                       ? 0
                       : static_cast<int32_t>(std::min<int64_t>(clamped, ATTN_WORK_ORDER_MAX_KEY)));
  }
  std::vector<int32_t> order(costs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t left, int32_t right) { return keys[left] > keys[right]; });
  return order;
}

DeviceBuffer buildWorkOrder(const Module &module, const AttnLaunchConfig &config,
                            const AttnForwardArgs &args, CUstream stream,
                            WorkOrderPolicy policy) {
  AttnForwardArgs checked = args;
  checked.workOrder = nullptr;
  validateForwardArgs(config, checked);
  uint64_t tiles = workOrderBytes(config, checked) / sizeof(int32_t);
  // The order, then the costs it is sorted by: one allocation, so that no
  // free has to wait for the sort.
  DeviceBuffer order(std::max<uint64_t>(2 * tiles, 1) * sizeof(int32_t));
  if (tiles == 0)
    return order;
  validateDevicePointers(config, checked);
  attn_abi::AttnFwdParams params = encodeForwardParams(config, checked);
  int *orderData = static_cast<int *>(order.data());
  int *costData = orderData + tiles;
  // Both looked up before either launches: a failed lookup must not free
  // the buffer under a running kernel.
  KernelFunction costKernel = module.function(ATTN_WORK_COST_KERNEL_NAME);
  KernelFunction orderKernel = module.function(ATTN_WORK_ORDER_KERNEL_NAME);
  constexpr uint64_t kTilesPerBlock = ATTN_WORK_COST_THREADS / 32;
  Dim3 grid{static_cast<unsigned>((tiles + kTilesPerBlock - 1) / kTilesPerBlock), 1, 1};
  void *costArgs[] = {&params, &costData};
  costKernel.launch(grid, Dim3{ATTN_WORK_COST_THREADS, 1, 1}, 0, stream, costArgs);
  launchWorkOrderSort(orderKernel, costData, static_cast<int>(tiles), policy, orderData, stream);
  return order;
}

void launchWorkOrderSort(KernelFunction &sortKernel, const int32_t *costs, int count,
                         WorkOrderPolicy policy, int32_t *order, CUstream stream) {
  int policyCode = policy == WorkOrderPolicy::OutliersFirst ? ATTN_WORK_ORDER_OUTLIERS_FIRST
                                                            : ATTN_WORK_ORDER_LONGEST_FIRST;
  void *arguments[] = {&costs, &count, &policyCode, &order};
  sortKernel.launch(Dim3{1, 1, 1}, Dim3{ATTN_WORK_ORDER_THREADS, 1, 1}, 0, stream, arguments);
}

namespace {
/// Lets this thread make driver calls that stream capture in global or
/// thread-local mode forbids (an allocation, an event query) while another
/// stream captures: they touch no capturing stream. The thread's mode comes
/// back with the guard's end.
class RelaxedCaptureMode {
public:
  RelaxedCaptureMode() { Driver::get().api().cuThreadExchangeStreamCaptureMode(&mode); }
  ~RelaxedCaptureMode() { Driver::get().api().cuThreadExchangeStreamCaptureMode(&mode); }
  RelaxedCaptureMode(const RelaxedCaptureMode &) = delete;
  RelaxedCaptureMode &operator=(const RelaxedCaptureMode &) = delete;

private:
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
};
} // namespace

const int32_t *AutomaticWorkOrders::orderFor(const Module &module, const AttnLaunchConfig &config,
                                             const AttnForwardArgs &args, CUstream stream) {
  if (!config.automaticWorkOrder || config.linearFamily || args.workOrder || args.tileCoverage ||
      args.packed.active())
    return nullptr;
  LogicalShape shape = logicalShape(args);
  std::tuple<int64_t, int64_t, int64_t> key{shape.batch, shape.seqlenQ, shape.seqlenK};
  std::lock_guard<std::mutex> lock(mutex);
  auto found = orders.find(key);
  // A finished order serves every call, captured or not, with no driver call.
  if (found != orders.end() && found->second.finished)
    return static_cast<const int32_t *>(found->second.order.data());
  RelaxedCaptureMode relaxed;
  // A stream whose capture status the driver refuses to tell (the legacy
  // stream while another stream captures) counts as capturing.
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (Driver::get().api().cuStreamIsCapturing(stream, &capture) != CUDA_SUCCESS)
    capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  const bool capturing = capture != CU_STREAM_CAPTURE_STATUS_NONE;
  if (found != orders.end()) {
    Built &built = found->second;
    if (!capturing && Driver::get().api().cuEventQuery(built.done.get()) == CUDA_SUCCESS) {
      built.finished = true;
      return static_cast<const int32_t *>(built.order.data());
    }
    // A graph cannot wait for work outside it: it takes a finished order only.
    if (capturing)
      return nullptr;
    ATTN_CU_CHECK(cuStreamWaitEvent, stream, built.done.get(), 0);
    return static_cast<const int32_t *>(built.order.data());
  }
  // Building launches kernels, which a graph being captured would record
  // instead of running.
  if (capturing || orders.size() >= kMaxShapes)
    return nullptr;
  Built built;
  built.order = buildWorkOrder(module, config, args, stream, WorkOrderPolicy::OutliersFirst);
  built.done.record(stream);
  auto inserted = orders.emplace(key, std::move(built)).first;
  return static_cast<const int32_t *>(inserted->second.order.data());
}

size_t AutomaticWorkOrders::size() const {
  std::lock_guard<std::mutex> lock(mutex);
  return orders.size();
}

} // namespace attn
