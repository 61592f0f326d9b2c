//===- Attnc.cpp - C API over the attnc JIT and runtime -------------------===//
//
// attn-c/Attnc.h over attn::Compiler and attn::Kernel. Every entry point
// turns an exception into ATTNC_ERROR and keeps its message for
// attnc_last_error(); the C structs become the runtime's argument structs
// here, so that a bad rank or dtype is reported before the runtime's own
// checks (which name the same arguments) run.
//
//===----------------------------------------------------------------------===//

// The API's declarations are the only symbols this library exports: the
// target compiles with hidden visibility, and the version script
// (attnc_c.map) hides the LLVM and MLIR archives linked into it.
#pragma GCC visibility push(default)
#include "attn-c/Attnc.h"
#pragma GCC visibility pop

#include "attn/Compiler/Jit.h"
#include "attn/runtime/AttentionLaunch.h"
#include "attn/runtime/Error.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <limits>
#include <cstddef>
#include <exception>
#include <string>
#include <utility>

//===----------------------------------------------------------------------===//
// Layout
//===----------------------------------------------------------------------===//

// The header promises callers (ctypes, other FFIs) structs of 8-byte words
// without padding; these pin the sizes it states and the offsets of the
// fields that follow nested structs.
static_assert(sizeof(attnc_tensor) == 88 && alignof(attnc_tensor) == 8);
static_assert(offsetof(attnc_tensor, dtype) == 8 && offsetof(attnc_tensor, rank) == 16 &&
              offsetof(attnc_tensor, shape) == 24 && offsetof(attnc_tensor, strides) == 56);
static_assert(sizeof(attnc_packed) == 40 && alignof(attnc_packed) == 8);
static_assert(offsetof(attnc_packed, batch) == 16 && offsetof(attnc_packed, max_seqlen_k) == 32);
static_assert(sizeof(attnc_paged) == 40 && alignof(attnc_paged) == 8);
static_assert(offsetof(attnc_paged, seqlens_k) == 24 && offsetof(attnc_paged, max_seqlen_k) == 32);
static_assert(sizeof(attnc_forward_args) == 504 && alignof(attnc_forward_args) == 8);
static_assert(offsetof(attnc_forward_args, o) == 3 * 88 &&
              offsetof(attnc_forward_args, lse) == 4 * 88 &&
              offsetof(attnc_forward_args, num_captures) == 4 * 88 + 16 &&
              offsetof(attnc_forward_args, packed) == 4 * 88 + 24 &&
              offsetof(attnc_forward_args, tile_coverage) == 4 * 88 + 64 &&
              offsetof(attnc_forward_args, workspace_bytes) == 4 * 88 + 96 &&
              offsetof(attnc_forward_args, paged) == 4 * 88 + 104 &&
              offsetof(attnc_forward_args, key_splits) == 4 * 88 + 144);
static_assert(sizeof(attnc_backward_args) == 840 && alignof(attnc_backward_args) == 8);
static_assert(offsetof(attnc_backward_args, lse) == 5 * 88 &&
              offsetof(attnc_backward_args, dq) == 5 * 88 + 8 &&
              offsetof(attnc_backward_args, packed) == 8 * 88 + 8 &&
              offsetof(attnc_backward_args, workspace) == 8 * 88 + 48 &&
              offsetof(attnc_backward_args, deterministic) == 8 * 88 + 64 &&
              offsetof(attnc_backward_args, captures) == 8 * 88 + 72 &&
              offsetof(attnc_backward_args, capture_grads) == 8 * 88 + 88 &&
              offsetof(attnc_backward_args, tile_coverage) == 8 * 88 + 104 &&
              offsetof(attnc_backward_args, capture_grad_atomics) == 8 * 88 + 128);
static_assert(sizeof(attnc_linear_args) == 416 && alignof(attnc_linear_args) == 8);
static_assert(offsetof(attnc_linear_args, initial_state) == 4 * 88 &&
              offsetof(attnc_linear_args, log_decay) == 4 * 88 + 32 &&
              offsetof(attnc_linear_args, segments) == 4 * 88 + 56);
static_assert(sizeof(attnc_linear_backward_args) == 784 &&
              alignof(attnc_linear_backward_args) == 8);
static_assert(offsetof(attnc_linear_backward_args, log_decay) == 7 * 88 &&
              offsetof(attnc_linear_backward_args, workspace_bytes) == 7 * 88 + 48 &&
              offsetof(attnc_linear_backward_args, o) == 7 * 88 + 56 &&
              offsetof(attnc_linear_backward_args, d_initial_key_sum) == 8 * 88 + 72);
static_assert(sizeof(attnc_kernel_info) == 128 && alignof(attnc_kernel_info) == 8);
static_assert(offsetof(attnc_kernel_info, scale) == 32 &&
              offsetof(attnc_kernel_info, automatic_work_order) == 120);
static_assert(sizeof(attnc_jit_stats) == 24 && alignof(attnc_jit_stats) == 8);

static_assert(ATTNC_BF16 == static_cast<int>(attn::DType::BF16) &&
              ATTNC_F16 == static_cast<int>(attn::DType::F16) &&
              ATTNC_F32 == static_cast<int>(attn::DType::F32) &&
              ATTNC_I32 == static_cast<int>(attn::DType::I32));

//===----------------------------------------------------------------------===//
// Handles
//===----------------------------------------------------------------------===//

struct attnc_compiler {
  explicit attnc_compiler(attn::JitOptions options) : compiler(std::move(options)) {}
  attn::Compiler compiler;
};

struct attnc_kernel {
  attn::Kernel kernel;
};

struct attnc_buffer {
  attn::DeviceBuffer buffer;
};

namespace {

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

thread_local std::string lastError;
/// Set when the message itself could not be stored (out of memory).
thread_local bool lastErrorLost = false;

void setLastError(const char *message) noexcept {
  try {
    lastError = message;
    lastErrorLost = false;
  } catch (...) {
    lastErrorLost = true;
  }
}

/// Runs `body`, turning whatever it throws into ATTNC_ERROR and the
/// thread's last error: no exception may cross the C boundary.
template <typename Body> attnc_status guarded(Body &&body) noexcept {
  try {
    body();
    return ATTNC_OK;
  } catch (const std::exception &error) {
    setLastError(error.what());
  } catch (...) {
    setLastError("unknown exception");
  }
  return ATTNC_ERROR;
}

void requireHandle(const void *handle, const char *name) {
  if (!handle)
    throw attn::Error(std::string(name) + ": null handle");
}

void requirePointer(const void *pointer, const char *name) {
  if (!pointer)
    throw attn::Error(std::string(name) + ": null pointer");
}

/// Clears an output pointer first, so that a failed call leaves no stale
/// value behind.
template <typename T> void requireOut(T **out, const char *name) {
  requirePointer(out, name);
  *out = nullptr;
}

//===----------------------------------------------------------------------===//
// Argument conversion
//===----------------------------------------------------------------------===//

std::string shapeOf(const int64_t *values, int64_t rank) {
  return fmt::format("[{}]", fmt::join(values, values + std::max<int64_t>(rank, 0), ", "));
}

attn::DType toDType(int64_t dtype, const std::string &name) {
  if (dtype < ATTNC_BF16 || dtype > ATTNC_I32)
    throw attn::Error(fmt::format("{}: dtype {} is not one of ATTNC_BF16 (0), ATTNC_F16 (1), "
                                  "ATTNC_F32 (2), ATTNC_I32 (3)",
                                  name, dtype));
  return static_cast<attn::DType>(dtype);
}

/// An attention operand: rank 4, BSHD. Strides go through as given; the
/// runtime checks the layout the kernel needs.
attn::TensorView toTensorView(const attnc_tensor &tensor, const char *name) {
  if (tensor.rank != 4)
    throw attn::Error(fmt::format("{}: rank {}, expected 4 (BSHD)", name, tensor.rank));
  attn::TensorView view;
  view.data = tensor.data;
  view.dtype = toDType(tensor.dtype, name);
  for (int dim = 0; dim < 4; ++dim) {
    view.shape[dim] = tensor.shape[dim];
    view.strides[dim] = tensor.strides[dim];
  }
  return view;
}

/// A captured buffer: rank 1 to kMaxCaptureRank, contiguous row-major.
/// CaptureView has no strides, so a strided view is refused here rather
/// than read wrongly by the kernel. Extents of 1 may have any stride, as in
/// PyTorch's is_contiguous().
attn::CaptureView toCaptureView(const attnc_tensor &tensor, int64_t index,
                                const char *list = "captures") {
  const std::string name = fmt::format("{}[{}]", list, index);
  if (tensor.rank < 1 || tensor.rank > attn_abi::kMaxCaptureRank)
    throw attn::Error(fmt::format("{}: rank {}, expected 1 to {}", name, tensor.rank,
                                  attn_abi::kMaxCaptureRank));
  attn::CaptureView view;
  view.data = tensor.data;
  view.dtype = toDType(tensor.dtype, name);
  view.shape.assign(tensor.shape, tensor.shape + tensor.rank);
  bool empty = false;
  for (int64_t extent : view.shape) {
    if (extent < 0)
      throw attn::Error(name + ": shape " + shapeOf(tensor.shape, tensor.rank) +
                        " has a negative extent");
    empty = empty || extent == 0;
  }
  int64_t expected = 1;
  for (int64_t dim = tensor.rank - 1; dim >= 0 && !empty; --dim) {
    if (tensor.shape[dim] != 1 && tensor.strides[dim] != expected)
      throw attn::Error(name + ": strides " + shapeOf(tensor.strides, tensor.rank) +
                        " of shape " + shapeOf(tensor.shape, tensor.rank) +
                        " are not contiguous row-major (captured buffers must be)");
    expected *= tensor.shape[dim];
  }
  return view;
}

attn::PackedSequences toPacked(const attnc_packed &packed) {
  // All zero stays inactive (PackedSequences::active()).
  attn::PackedSequences sequences;
  sequences.cuSeqlensQ = packed.cu_seqlens_q;
  sequences.cuSeqlensK = packed.cu_seqlens_k;
  sequences.batch = packed.batch;
  sequences.maxSeqlenQ = packed.max_seqlen_q;
  sequences.maxSeqlenK = packed.max_seqlen_k;
  return sequences;
}

attn::PagedKvCache toPaged(const attnc_paged &paged) {
  // All zero stays inactive (PagedKvCache::active()).
  attn::PagedKvCache cache;
  cache.blockTable = paged.block_table;
  cache.blockTableStride = paged.block_table_stride;
  cache.maxPages = paged.max_pages;
  cache.seqlensK = paged.seqlens_k;
  cache.maxSeqlenK = paged.max_seqlen_k;
  return cache;
}

/// attnc_forward_args::key_splits (0 the default) as AttnForwardArgs::keySplits
/// (-1 the default).
int toKeySplits(int64_t keySplits) {
  if (keySplits == 0)
    return -1;
  if (keySplits == -1)
    return 0;
  if (keySplits < -1 || keySplits > std::numeric_limits<int>::max())
    throw attn::Error(fmt::format("key_splits: must be 0 (automatic), -1 (the forward kernel) or "
                                  "a split count, got {}",
                                  keySplits));
  return static_cast<int>(keySplits);
}

/// q, k, v and o, which every kind of call has.
template <typename CArgs, typename Args> void convertOperands(const CArgs &from, Args &to) {
  to.q = toTensorView(from.q, "q");
  to.k = toTensorView(from.k, "k");
  to.v = toTensorView(from.v, "v");
  to.o = toTensorView(from.o, "o");
}

/// `count` buffers of `list` ("captures", "capture_grads").
std::vector<attn::CaptureView> toCaptureViews(const attnc_tensor *tensors, int64_t count,
                                              const char *list) {
  // Bounded before reading the array, so that a garbage count reads no
  // memory past what a kernel can declare.
  if (count < 0 || count > attn_abi::kMaxCaptures)
    throw attn::Error(
        fmt::format("num_{}: {} is not in 0 to {}", list, count, attn_abi::kMaxCaptures));
  if (count > 0 && !tensors)
    throw attn::Error(fmt::format("{}: null pointer with num_{} {}", list, list, count));
  std::vector<attn::CaptureView> views;
  for (int64_t index = 0; index < count; ++index)
    views.push_back(toCaptureView(tensors[index], index, list));
  return views;
}

attn::AttnForwardArgs toForwardArgs(const attnc_forward_args *args) {
  requirePointer(args, "args");
  attn::AttnForwardArgs forward;
  convertOperands(*args, forward);
  forward.lse = args->lse;
  forward.captures = toCaptureViews(args->captures, args->num_captures, "captures");
  forward.packed = toPacked(args->packed);
  forward.tileCoverage = static_cast<const unsigned char *>(args->tile_coverage);
  forward.tileKeyBits = args->tile_key_bits;
  forward.workOrder = args->work_order;
  forward.workspace = args->workspace;
  forward.workspaceBytes = args->workspace_bytes;
  forward.paged = toPaged(args->paged);
  forward.keySplits = toKeySplits(args->key_splits);
  return forward;
}

attn::AttnBackwardArgs toBackwardArgs(const attnc_backward_args *args) {
  requirePointer(args, "args");
  attn::AttnBackwardArgs backward;
  convertOperands(*args, backward);
  backward.dO = toTensorView(args->d_o, "d_o");
  backward.lse = args->lse;
  backward.dq = toTensorView(args->dq, "dq");
  backward.dk = toTensorView(args->dk, "dk");
  backward.dv = toTensorView(args->dv, "dv");
  backward.packed = toPacked(args->packed);
  backward.workspace = args->workspace;
  backward.workspaceBytes = args->workspace_bytes;
  if (args->deterministic != 0 && args->deterministic != 1)
    throw attn::Error(fmt::format("deterministic: must be 0 or 1, got {}", args->deterministic));
  backward.deterministic = args->deterministic == 1;
  if (args->capture_grad_atomics != 0 && args->capture_grad_atomics != 1)
    throw attn::Error(fmt::format("capture_grad_atomics: must be 0 or 1, got {}",
                                  args->capture_grad_atomics));
  backward.captureGradSum = args->capture_grad_atomics == 1
                                ? attn::AttnBackwardArgs::CaptureGradSum::Atomic
                                : attn::AttnBackwardArgs::CaptureGradSum::Exact;
  backward.captures = toCaptureViews(args->captures, args->num_captures, "captures");
  backward.tileCoverage = static_cast<const unsigned char *>(args->tile_coverage);
  for (int64_t extent : {args->coverage_block_m, args->coverage_block_n})
    if (extent < 0 || extent > 65536)
      throw attn::Error(fmt::format("coverage_block_m, coverage_block_n: {} x {} is not a tile",
                                    args->coverage_block_m, args->coverage_block_n));
  backward.coverageBlockM = static_cast<int>(args->coverage_block_m);
  backward.coverageBlockN = static_cast<int>(args->coverage_block_n);
  for (const attn::CaptureView &gradient :
       toCaptureViews(args->capture_grads, args->num_capture_grads, "capture_grads")) {
    if (gradient.dtype != attn::DType::F32)
      throw attn::Error(fmt::format("capture_grads: dtype {}, expected f32",
                                    attn::dtypeName(gradient.dtype)));
    backward.captureGrads.push_back(
        attn::CaptureGradView{static_cast<float *>(const_cast<void *>(gradient.data)),
                              gradient.shape});
  }
  return backward;
}

attn::AttnLinearArgs toLinearArgs(const attnc_linear_args *args) {
  requirePointer(args, "args");
  attn::AttnLinearArgs linear;
  convertOperands(*args, linear);
  linear.initialState = args->initial_state;
  linear.finalState = args->final_state;
  linear.initialKeySum = args->initial_key_sum;
  linear.finalKeySum = args->final_key_sum;
  linear.logDecay = args->log_decay;
  linear.workspace = args->workspace;
  linear.workspaceBytes = args->workspace_bytes;
  if (args->segments < INT_MIN || args->segments > INT_MAX)
    throw attn::Error(fmt::format("segments: {} exceeds the int range", args->segments));
  linear.segments = static_cast<int>(args->segments);
  return linear;
}

attn::AttnLinearBackwardArgs toLinearBackwardArgs(const attnc_linear_backward_args *args) {
  requirePointer(args, "args");
  attn::AttnLinearBackwardArgs backward;
  backward.q = toTensorView(args->q, "q");
  backward.k = toTensorView(args->k, "k");
  backward.v = toTensorView(args->v, "v");
  backward.dO = toTensorView(args->d_o, "d_o");
  backward.dq = toTensorView(args->dq, "dq");
  backward.dk = toTensorView(args->dk, "dk");
  backward.dv = toTensorView(args->dv, "dv");
  backward.logDecay = args->log_decay;
  backward.dLogDecay = args->d_log_decay;
  backward.initialState = args->initial_state;
  backward.dFinalState = args->d_final_state;
  backward.dInitialState = args->d_initial_state;
  backward.workspace = args->workspace;
  backward.workspaceBytes = args->workspace_bytes;
  if (args->o.data || args->o.rank)
    backward.o = toTensorView(args->o, "o");
  backward.initialKeySum = args->initial_key_sum;
  backward.dFinalKeySum = args->d_final_key_sum;
  backward.dInitialKeySum = args->d_initial_key_sum;
  return backward;
}

CUstream toStream(void *stream) { return static_cast<CUstream>(stream); }

/// guarded() over the kernel of a handle that must not be null.
template <typename Body> attnc_status onKernel(const attnc_kernel *kernel, Body &&body) noexcept {
  return guarded([&] {
    requireHandle(kernel, "kernel");
    body(kernel->kernel);
  });
}

/// The tile coverage or key bits (`build`) in a buffer handle.
using BufferBuilder = attn::DeviceBuffer (attn::Kernel::*)(const attn::AttnForwardArgs &,
                                                           CUstream) const;
attnc_status buildBuffer(BufferBuilder build, const attnc_kernel *kernel,
                         const attnc_forward_args *args, void *stream,
                         attnc_buffer **out) noexcept {
  return guarded([&] {
    requireOut(out, "out");
    requireHandle(kernel, "kernel");
    attn::DeviceBuffer buffer = (kernel->kernel.*build)(toForwardArgs(args), toStream(stream));
    *out = new attnc_buffer{std::move(buffer)};
  });
}

} // namespace

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

extern "C" {

const char *attnc_version(void) { return attn::attncVersion(); }

int32_t attnc_c_api_version(void) { return ATTNC_C_API_VERSION; }

const char *attnc_last_error(void) {
  return lastErrorLost ? "out of memory while recording the error" : lastError.c_str();
}

attnc_status attnc_compiler_create(const char *tuning_database, const char *cache_dir,
                                   attnc_compiler **out) {
  return guarded([&] {
    requireOut(out, "out");
    attn::JitOptions options;
    if (tuning_database)
      options.tuningDatabase = std::string(tuning_database);
    if (cache_dir) {
      // "" is the cache turned off, without reading the environment (whose
      // malformed ATTNC_CACHE_MAX_BYTES would otherwise fail the call).
      attn::DiskCacheOptions disk;
      if (*cache_dir) {
        disk = attn::DiskCacheOptions::fromEnvironment();
        disk.directory = cache_dir;
      }
      options.diskCache = std::move(disk);
    }
    *out = new attnc_compiler(std::move(options));
  });
}

void attnc_compiler_destroy(attnc_compiler *compiler) { delete compiler; }

attnc_status attnc_compiler_stats(const attnc_compiler *compiler, attnc_jit_stats *out) {
  return guarded([&] {
    requireHandle(compiler, "compiler");
    requirePointer(out, "out");
    attn::JitStats stats = compiler->compiler.stats();
    *out = {stats.memoryHits, stats.diskHits, stats.compiles};
  });
}

attnc_status attnc_compile(attnc_compiler *compiler, const char *spec_text,
                           const char *buffer_name, int32_t backward, attnc_kernel **out) {
  return guarded([&] {
    requireOut(out, "out");
    requireHandle(compiler, "compiler");
    requirePointer(spec_text, "spec_text");
    if (backward != 0 && backward != 1)
      throw attn::Error(fmt::format("backward: must be 0 or 1, got {}", backward));
    // The C++ API's default name, for callers with nothing better to say.
    std::string_view name = buffer_name ? buffer_name : "spec";
    attn::Kernel kernel = backward ? compiler->compiler.compileBackward(spec_text, name)
                                   : compiler->compiler.compile(spec_text, name);
    *out = new attnc_kernel{std::move(kernel)};
  });
}

void attnc_kernel_destroy(attnc_kernel *kernel) { delete kernel; }

attnc_status attnc_kernel_get_info(const attnc_kernel *kernel, attnc_kernel_info *out) {
  return onKernel(kernel, [&](const attn::Kernel &compiled) {
    requirePointer(out, "out");
    const attn::AttnLaunchConfig &config = compiled.launchConfig();
    attnc_kernel_info info = {};
    info.head_dim = config.headDim;
    info.q_heads = config.qHeads;
    info.kv_heads = config.kvHeads;
    info.dtype = static_cast<int64_t>(config.dtype);
    info.scale = config.scale;
    info.block_m = config.blockM;
    info.block_n = config.blockN;
    info.threads_per_block = config.threadsPerBlock;
    info.shared_memory_bytes = config.sharedMemoryBytes;
    info.linear_family = config.linearFamily;
    info.backward = config.backward;
    info.causal = config.causal;
    info.normalize = config.normalize;
    info.gated = config.gated;
    info.num_captures = static_cast<int64_t>(config.captures.size());
    info.automatic_work_order = config.automaticWorkOrder;
    *out = info;
  });
}

const char *attnc_kernel_ptx(const attnc_kernel *kernel, size_t *size) {
  const char *ptx = nullptr;
  guarded([&] {
    requirePointer(size, "size");
    *size = 0;
    requireHandle(kernel, "kernel");
    const attn::KernelImage &image = kernel->kernel.image();
    if (image.ptx.empty())
      throw attn::Error("kernel: '" + image.name + "' carries a cubin and no PTX");
    *size = image.ptx.size();
    ptx = image.ptx.c_str();
  });
  return ptx;
}

attnc_status attnc_kernel_load(const attnc_kernel *kernel) {
  return onKernel(kernel, [&](const attn::Kernel &compiled) { compiled.load(); });
}

attnc_status attnc_run_forward(const attnc_kernel *kernel, const attnc_forward_args *args,
                               void *stream) {
  return onKernel(kernel, [&](const attn::Kernel &compiled) {
    compiled.run(toForwardArgs(args), toStream(stream));
  });
}

attnc_status attnc_run_backward(const attnc_kernel *kernel, const attnc_backward_args *args,
                                void *stream) {
  return onKernel(kernel, [&](const attn::Kernel &compiled) {
    compiled.runBackward(toBackwardArgs(args), toStream(stream));
  });
}

attnc_status attnc_run_linear(const attnc_kernel *kernel, const attnc_linear_args *args,
                              void *stream) {
  return onKernel(kernel, [&](const attn::Kernel &compiled) {
    compiled.runLinear(toLinearArgs(args), toStream(stream));
  });
}

attnc_status attnc_run_decode(const attnc_kernel *kernel, const attnc_linear_args *args,
                              void *stream) {
  return onKernel(kernel, [&](const attn::Kernel &compiled) {
    compiled.decode(toLinearArgs(args), toStream(stream));
  });
}

attnc_status attnc_run_linear_backward(const attnc_kernel *kernel,
                                       const attnc_linear_backward_args *args, void *stream) {
  return onKernel(kernel, [&](const attn::Kernel &compiled) {
    compiled.runLinearBackward(toLinearBackwardArgs(args), toStream(stream));
  });
}

attnc_status attnc_linear_backward_workspace_bytes(const attnc_kernel *kernel,
                                                   const attnc_linear_backward_args *args,
                                                   uint64_t *out) {
  return onKernel(kernel, [&](const attn::Kernel &compiled) {
    requirePointer(out, "out");
    *out = compiled.linearBackwardWorkspaceBytes(toLinearBackwardArgs(args));
  });
}

attnc_status attnc_linear_workspace_bytes(const attnc_kernel *kernel,
                                          const attnc_linear_args *args, uint64_t *out) {
  return onKernel(kernel, [&](const attn::Kernel &compiled) {
    requirePointer(out, "out");
    *out = attn::linearWorkspaceBytes(compiled.launchConfig(), toLinearArgs(args));
  });
}

attnc_status attnc_forward_workspace_bytes(const attnc_kernel *kernel,
                                           const attnc_forward_args *args, uint64_t *out) {
  return onKernel(kernel, [&](const attn::Kernel &compiled) {
    requirePointer(out, "out");
    *out = attn::forwardWorkspaceBytes(compiled.launchConfig(), toForwardArgs(args));
  });
}

attnc_status attnc_backward_workspace_bytes(const attnc_kernel *kernel,
                                            const attnc_backward_args *args, uint64_t *out) {
  return onKernel(kernel, [&](const attn::Kernel &compiled) {
    requirePointer(out, "out");
    *out = compiled.backwardWorkspaceBytes(toBackwardArgs(args));
  });
}

attnc_status attnc_build_tile_coverage(const attnc_kernel *kernel,
                                       const attnc_forward_args *args, void *stream,
                                       attnc_buffer **out) {
  return buildBuffer(&attn::Kernel::buildTileCoverage, kernel, args, stream, out);
}

attnc_status attnc_build_tile_key_bits(const attnc_kernel *kernel,
                                       const attnc_forward_args *args, void *stream,
                                       attnc_buffer **out) {
  return buildBuffer(&attn::Kernel::buildTileKeyBits, kernel, args, stream, out);
}

void *attnc_buffer_data(const attnc_buffer *buffer) {
  void *data = nullptr;
  guarded([&] {
    requireHandle(buffer, "buffer");
    data = buffer->buffer.data();
  });
  return data;
}

uint64_t attnc_buffer_bytes(const attnc_buffer *buffer) {
  uint64_t bytes = 0;
  guarded([&] {
    requireHandle(buffer, "buffer");
    bytes = buffer->buffer.size();
  });
  return bytes;
}

void attnc_buffer_destroy(attnc_buffer *buffer) { delete buffer; }

} // extern "C"
