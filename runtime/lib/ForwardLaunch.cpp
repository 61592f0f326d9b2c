//===- ForwardLaunch.cpp - Forward attention kernel launch ----------------===//

#include "attn/runtime/AttentionLaunch.h"

#include "LaunchChecks.h"

#include "attn/runtime/TensorMap.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace attn {

using namespace detail;

namespace {
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

std::string declaredShapeString(const CaptureDecl &decl) {
  std::vector<std::string> dims;
  for (const CaptureDim &dim : decl.dims)
    dims.push_back(captureDimSpelling(dim));
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

std::string captureShapeString(const CaptureView &view) {
  return fmt::format("[{}]", fmt::join(view.shape, ", "));
}

} // namespace

int64_t detail::captureBytes(const CaptureView &view, const std::string &label) {
  for (int64_t size : view.shape)
    if (size == 0)
      return 0;
  int64_t bytes = static_cast<int64_t>(dtypeSize(view.dtype));
  for (int64_t size : view.shape)
    if (size < 0 || __builtin_mul_overflow(bytes, size, &bytes))
      fail(label, fmt::format("shape {} does not fit in 2^63 bytes", captureShapeString(view)));
  return bytes;
}

namespace {

void validateCaptureDecls(const std::vector<CaptureDecl> &captures) {
  if (captures.size() > size_t(attn_abi::kMaxCaptures))
    fail("config", fmt::format("{} captured buffers exceed the kernel ABI's limit of {}",
                               captures.size(), attn_abi::kMaxCaptures));
  for (size_t index = 0; index < captures.size(); ++index) {
    const CaptureDecl &decl = captures[index];
    if (!isCaptureName(decl.name))
      fail("config", fmt::format("capture {}: name '{}' is not an identifier", index, decl.name));
    // Messages name captures, so a repeated name would be ambiguous.
    std::string label = captureLabel(decl.name) + ": ";
    for (size_t earlier = 0; earlier < index; ++earlier)
      if (captures[earlier].name == decl.name)
        fail("config", fmt::format("{}declared twice (captures {} and {})", label, earlier, index));
    if (decl.dtype != DType::F32 && decl.dtype != DType::I32)
      fail("config", label + "dtype must be f32 or i32, got " +
                         dtypeName(decl.dtype));
    if (decl.dims.empty() || decl.dims.size() > size_t(attn_abi::kMaxCaptureRank))
      fail("config", fmt::format("{}rank must be 1 to {}, got {}", label,
                                 attn_abi::kMaxCaptureRank, decl.dims.size()));
    for (size_t dim = 0; dim < decl.dims.size(); ++dim) {
      const CaptureDim &declared = decl.dims[dim];
      if (!isKnownKind(declared.kind))
        fail("config", fmt::format("{}dim {} has an invalid kind {}", label, dim,
                                   static_cast<int>(declared.kind)));
      if (declared.kind == CaptureDim::Kind::Fixed && declared.size <= 0)
        fail("config", fmt::format("{}dim {} has fixed size {}; fixed sizes must be positive",
                                   label, dim, declared.size));
    }
  }
}

/// Elements of lse: [B, Hq, Sq], or [Hq, total_q] for packed sequences.
uint64_t lseElementCount(const AttnLaunchConfig &config, const AttnForwardArgs &args) {
  uint64_t rows = uint64_t(args.q.seqlen()) * uint64_t(config.qHeads);
  return args.packed.active() ? rows : rows * uint64_t(args.q.batch());
}

/// The extent a declared dim requires of a launch of this shape.
int64_t requiredExtent(const CaptureDim &dim, const AttnLaunchConfig &config,
                       const LogicalShape &shape) {
  return requiredCaptureExtent(dim, shape.batch, config.qHeads, config.kvHeads, shape.seqlenQ,
                               shape.seqlenK);
}

void validateCapture(const CaptureDecl &decl, const CaptureView &view,
                     const AttnLaunchConfig &config, const LogicalShape &shape,
                     const std::string &label) {
  if (view.dtype != decl.dtype)
    fail(label, std::string("dtype ") + dtypeName(view.dtype) +
                    " does not match the declared " + dtypeName(decl.dtype));
  if (view.shape.size() != decl.dims.size())
    fail(label, fmt::format("shape {} has rank {}, but the kernel declares rank {}: {}",
                            captureShapeString(view), view.shape.size(), decl.dims.size(),
                            declaredShapeString(decl)));
  for (size_t dim = 0; dim < decl.dims.size(); ++dim) {
    const CaptureDim &declared = decl.dims[dim];
    int64_t actual = view.shape[dim];
    if (declared.kind == CaptureDim::Kind::Any) {
      if (actual < 0)
        fail(label, fmt::format("dim {} must be non-negative, got {}", dim, actual));
      continue;
    }
    int64_t expected = requiredExtent(declared, config, shape);
    if (actual != expected)
      fail(label, fmt::format("dim {} is {}, expected {}{}", dim, actual, expected,
                              declared.kind == CaptureDim::Kind::Fixed
                                  ? std::string()
                                  : fmt::format(" ({})", symbolicDimSpelling(declared.kind))));
  }
  if (captureBytes(view, label) != 0 && !view.data)
    fail(label, "data pointer is null");
  // The kernel loads whole 4-byte elements.
  if (reinterpret_cast<uintptr_t>(view.data) % dtypeSize(decl.dtype) != 0)
    fail(label, fmt::format("data pointer must be {}-byte aligned", dtypeSize(decl.dtype)));
}

} // namespace

void detail::validateCaptureViews(const AttnLaunchConfig &config,
                                  const std::vector<CaptureView> &captures,
                                  const LogicalShape &shape) {
  const std::vector<CaptureDecl> &decls = config.captures;
  if (captures.size() != decls.size()) {
    std::string declared = "no captured buffers";
    if (!decls.empty()) {
      std::string names;
      for (const CaptureDecl &decl : decls)
        names += (names.empty() ? "" : ", ") + decl.name;
      declared = fmt::format("{} captured buffer{} ({})", decls.size(),
                             decls.size() == 1 ? "" : "s", names);
    }
    fail("captures",
         fmt::format("the kernel declares {}, got {}", declared, captures.size()));
  }
  for (size_t index = 0; index < decls.size(); ++index)
    validateCapture(decls[index], captures[index], config, shape, captureLabel(decls[index].name));
}

void detail::validateCaptureGradients(const AttnLaunchConfig &config,
                                      const std::vector<CaptureGradView> &gradients,
                                      const LogicalShape &shape) {
  std::vector<const CaptureDecl *> learnable;
  for (const CaptureDecl &decl : config.captures)
    if (decl.requiresGrad)
      learnable.push_back(&decl);
  if (gradients.size() != learnable.size()) {
    std::string names;
    for (const CaptureDecl *decl : learnable)
      names += (names.empty() ? "" : ", ") + decl->name;
    fail("captureGrads",
         fmt::format("the kernel declares {} learnable capture{}{}, got {} gradient buffer{}",
                     learnable.size(), learnable.size() == 1 ? "" : "s",
                     names.empty() ? "" : " (" + names + ")", gradients.size(),
                     gradients.size() == 1 ? "" : "s"));
  }
  for (size_t index = 0; index < learnable.size(); ++index) {
    const CaptureGradView &gradient = gradients[index];
    validateCapture(*learnable[index], CaptureView{gradient.data, DType::F32, gradient.shape},
                    config, shape, "gradient of " + captureLabel(learnable[index]->name));
  }
}

void detail::requireCaptureMemory(const AttnLaunchConfig &config,
                                  const std::vector<CaptureView> &captures, int device) {
  for (size_t index = 0; index < captures.size(); ++index) {
    const CaptureView &capture = captures[index];
    // The kernel bounds its reads by the extents alone, so the allocation
    // must hold every element they cover.
    std::string label = index < config.captures.size()
                            ? captureLabel(config.captures[index].name)
                            : fmt::format("capture {}", index);
    int64_t bytes = captureBytes(capture, label);
    if (bytes != 0)
      requireDeviceMemory(capture.data, uint64_t(bytes), label, device);
  }
}

void detail::fillCaptureEntries(const std::vector<CaptureView> &captures,
                                attn_abi::CaptureArg (&entries)[attn_abi::kMaxCaptures]) {
  if (captures.size() > size_t(attn_abi::kMaxCaptures))
    fail("captures", fmt::format("{} captured buffers exceed the kernel ABI's limit of {}",
                                 captures.size(), attn_abi::kMaxCaptures));
  for (size_t index = 0; index < size_t(attn_abi::kMaxCaptures); ++index) {
    attn_abi::CaptureArg &entry = entries[index];
    // Extents of 1 keep every index of an unused entry or dim in bounds at 0.
    entry.data = nullptr;
    for (long long &extent : entry.extents)
      extent = 1;
    if (index >= captures.size())
      continue;
    const CaptureView &capture = captures[index];
    if (capture.shape.size() > size_t(attn_abi::kMaxCaptureRank))
      fail(fmt::format("capture {}", index),
           fmt::format("rank {} exceeds the kernel ABI's limit of {}", capture.shape.size(),
                       attn_abi::kMaxCaptureRank));
    entry.data = capture.data;
    for (size_t dim = 0; dim < capture.shape.size(); ++dim)
      entry.extents[dim] = capture.shape[dim];
  }
}

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
      fail("config", fmt::format("{} must be positive, got {}", field, value));
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
    fail("config", fmt::format("qHeads ({}) must be a multiple of kvHeads ({})", config.qHeads,
                               config.kvHeads));
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
  if (args.paged.active())
    validatePagedKvCache(config, args);
  else
    requireQueryKeyExtents(args.q, args.k);
  validateShortQueryArgs(config, args);

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

  validateCaptureViews(config, args.captures, shape);
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
  if (args.paged.active()) {
    const uint64_t rows = uint64_t(args.q.batch());
    if (rows > 0) {
      requireDeviceMemory(args.paged.blockTable,
                          ((rows - 1) * uint64_t(args.paged.blockTableStride) +
                           uint64_t(args.paged.maxPages)) *
                              sizeof(int32_t),
                          "paged.blockTable", device);
      requireDeviceMemory(args.paged.seqlensK, rows * sizeof(int32_t), "paged.seqlensK", device);
    }
  }
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
  requireCaptureMemory(config, args.captures, device);
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
} // namespace

/// A paged call's page boxes need a kernel compiled for them, and pages of
/// a multiple of 16 rows.
static void requireForwardReadsPages(const AttnLaunchConfig &config, const AttnForwardArgs &args) {
  if (onlyShortQueryPath(config, args))
    fail("paged", whyForwardSkipsPages(config, args) +
                      ": launch the call with launchShortQuery (Kernel::run chooses it)");
}

attn_abi::AttnFwdParams detail::encodeForwardParams(const AttnLaunchConfig &config,
                                                    const AttnForwardArgs &args) {
  requireForwardReadsPages(config, args);
  attn_abi::AttnFwdParams params{};
  // A work tile that packs heads loads the same blockM rows of Q, 64 of
  // each head.
  params.heads_per_tile = forwardHeadsPerTile(config, args);
  params.q_map = encodeBSHDTensorMap(args.q, config.blockM / params.heads_per_tile, kTmaBoxCols,
                                     "q", params.heads_per_tile);
  // Over a paged cache the maps span the pools, a box a page's piece.
  const int keyBoxRows =
      args.paged.active() ? forwardPageBoxRows(config, args.k.shape[1]) : config.blockN;
  params.k_map = encodeBSHDTensorMap(args.k, keyBoxRows, kTmaBoxCols, "k");
  params.v_map = encodeBSHDTensorMap(args.v, keyBoxRows, kTmaBoxCols, "v");
  if (args.paged.active()) {
    params.block_table = args.paged.blockTable;
    params.seqlens_k = args.paged.seqlensK;
    params.block_table_stride = args.paged.blockTableStride;
    params.page_size = static_cast<int>(args.k.shape[1]);
    params.page_box_rows = keyBoxRows;
    const attn_abi::PageDivider divider = attn_abi::pageDividerOf(params.page_size);
    params.page_magic = divider.magic;
    params.page_shift = divider.shift;
  }
  // Each consumer warpgroup stores its own 64 rows of O.
  params.o_map = encodeBSHDTensorMap(args.o, kOutputBoxRows, kTmaBoxCols, "o");
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

attn_abi::AttnFwdParams makeForwardParams(const AttnLaunchConfig &config,
                                          const AttnForwardArgs &args) {
  validateForwardArgs(config, args);
  return encodeForwardParams(config, args);
}

void fillCaptureArgs(const AttnForwardArgs &args,
                     attn_abi::AttnFwdParams &params) {
  fillCaptureEntries(args.captures, params.captures);
}

namespace {

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
/// in the workspace: none for packed sequences, a work order or work tiles
/// of more than one head (headsPerTile, forwardHeadsPerTile).
struct ForwardTail {
  ForwardTailSplit split;
  ForwardScratch scratch;
};

ForwardTail forwardTailOf(const AttnLaunchConfig &config, const AttnForwardArgs &args,
                          const LogicalShape &shape, int gridBlocks, int headsPerTile) {
  ForwardTail tail;
  if (args.packed.active() || args.paged.active() || args.workOrder || headsPerTile > 1)
    return tail;
  tail.split = forwardTailSplitFor(config, static_cast<int>(shape.batch),
                                   static_cast<int>(shape.seqlenQ),
                                   static_cast<int>(shape.seqlenK), gridBlocks);
  tail.scratch = forwardScratch(config, tail.split, gridBlocks);
  return tail;
}

} // namespace

void launchForward(KernelFunction &kernel, const AttnLaunchConfig &config,
                   const AttnForwardArgs &args, CUstream stream) {
  validateForwardArgs(config, args);
  requireForwardReadsPages(config, args);
  const LogicalShape shape = logicalShape(args);
  if (args.q.batch() == 0 || args.q.seqlen() == 0 || shape.batch == 0 || shape.seqlenQ == 0)
    return;

  validateDevicePointers(config, args);

  attn_abi::AttnFwdParams params = encodeForwardParams(config, args);
  kernel.setMaxDynamicSharedMemory(config.sharedMemoryBytes);
  Dim3 grid = forwardGrid(config, static_cast<int>(shape.batch), static_cast<int>(shape.seqlenQ),
                          multiprocessorsOf(currentDevice()), params.heads_per_tile);
  const ForwardTail tail =
      args.workspace
          ? forwardTailOf(config, args, shape, static_cast<int>(grid.x), params.heads_per_tile)
          : ForwardTail{};
  if (tail.scratch.bytes() > 0) {
    requireWorkspace(args.workspace, args.workspaceBytes, tail.scratch.bytes(),
                     fmt::format("the split of {} tail tiles", tail.split.tiles),
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
  if (std::optional<uint64_t> bytes =
          shortQueryWorkspaceBytes(config, args, multiprocessorsOf(currentDevice())))
    return *bytes;
  const int headsPerTile = forwardHeadsPerTile(config, args);
  const Dim3 grid =
      forwardGrid(config, static_cast<int>(shape.batch), static_cast<int>(shape.seqlenQ),
                  multiprocessorsOf(currentDevice()), headsPerTile);
  return forwardTailOf(config, args, shape, static_cast<int>(grid.x), headsPerTile).scratch.bytes();
}

PackedSequenceOffsets uploadPackedSequences(const std::vector<int64_t> &seqlensQ,
                                            const std::vector<int64_t> &seqlensK) {
  if (seqlensQ.empty())
    fail("seqlensQ", "packed sequences need at least one sequence");
  if (seqlensK.size() != seqlensQ.size())
    fail("seqlensK", fmt::format("has {} lengths, but seqlensQ has {}", seqlensK.size(),
                                 seqlensQ.size()));
  PackedSequenceOffsets packed;
  std::vector<int32_t> offsets;
  offsets.reserve(2 * (seqlensQ.size() + 1));
  for (auto [lengths, name, total, longest] :
       {std::make_tuple(&seqlensQ, "seqlensQ", &packed.totalQ, &packed.sequences.maxSeqlenQ),
        std::make_tuple(&seqlensK, "seqlensK", &packed.totalK, &packed.sequences.maxSeqlenK)}) {
    offsets.push_back(0);
    for (size_t index = 0; index < lengths->size(); ++index) {
      int64_t length = (*lengths)[index];
      std::string at = fmt::format("{}[{}]", name, index);
      if (length < 0)
        fail(at, fmt::format("length {} is negative", length));
      *total += length;
      if (*total > INT_MAX)
        fail(at, fmt::format("the packed rows up to here, {}, exceed the int range of the "
                             "kernel ABI",
                             *total));
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

} // namespace attn
