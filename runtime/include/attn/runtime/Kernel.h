//===- Kernel.h - A compiled attention kernel, ready to run -----*- C++ -*-===//
//
// What a host program launches: the kernel's PTX and/or cubin with its launch
// metadata, loaded on first use into each context it runs in. attn::Compiler
// (compiler/) produces Kernels at run time; a program that ships precompiled
// kernels builds them from `attnc --emit=cubin` and `--emit=metadata` output
// with Kernel::fromFiles and needs only this runtime.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_RUNTIME_KERNEL_H
#define ATTN_RUNTIME_KERNEL_H

#include "attn/runtime/AttentionLaunch.h"

#include <memory>
#include <string>
#include <vector>

namespace attn {

/// Everything needed to load and launch one kernel.
struct KernelImage {
  /// The spec's symbol name, for messages.
  std::string name;
  /// PTX for compute_90a (may be empty when a cubin is given).
  std::string ptx;
  /// A cubin for sm_90a (may be empty when PTX is given).
  std::vector<char> cubin;
  AttnLaunchConfig launch;
};

/// A handle on a compiled kernel; copies share the image and the loaded
/// modules. Loading and running are thread safe.
class Kernel {
public:
  /// An empty handle; valid() is false.
  Kernel() = default;
  /// Throws attn::Error("image: ...") without PTX or cubin, or with an
  /// inconsistent launch config.
  explicit Kernel(KernelImage image);

  /// `binaryPath` holds a cubin or PTX (told apart by content),
  /// `metadataPath` the launch metadata (LaunchMetadata.h). Throws
  /// attn::Error naming the file on failure.
  static Kernel fromFiles(const std::string &binaryPath,
                          const std::string &metadataPath);

  bool valid() const { return state != nullptr; }
  const std::string &name() const;
  const AttnLaunchConfig &launchConfig() const;
  const KernelImage &image() const;

  /// Loads the module into the current context (device 0's primary context
  /// if none is current), once per context. Throws attn::Error without a
  /// driver ("no CUDA driver: ..."), without a device, or on a GPU other than
  /// sm_90 (naming the GPU found). Prefers the cubin and falls back to PTX.
  void load() const;

  /// Checks every argument against the kernel (dtype, heads, head dim,
  /// shapes, contiguity, 16-byte alignment, device memory of the current
  /// device) and launches on `stream`. Throws attn::Error naming the
  /// argument; nothing is launched after a failed check. A kernel with
  /// launchConfig().automaticWorkOrder starts its work tiles in the order
  /// AutomaticWorkOrders builds on the first run of each shape. `lse` receives the
  /// [batch, q_heads, seqlen_q] fp32 log-sum-exp. A kernel whose spec
  /// captures buffers needs them too (the overload with `captures`).
  void run(const TensorView &q, const TensorView &k, const TensorView &v,
           const TensorView &o, float *lse, CUstream stream = nullptr) const;
  /// As above, with the spec's captured buffers in declaration order
  /// (launchConfig().captures says what each must be).
  void run(const TensorView &q, const TensorView &k, const TensorView &v,
           const TensorView &o, float *lse,
           const std::vector<CaptureView> &captures,
           CUstream stream = nullptr) const;
  void run(const AttnForwardArgs &args, CUstream stream = nullptr) const;

  /// Linear attention and retention (launchConfig().linearFamily): the
  /// chunkwise kernel over a whole sequence, carrying the state in and out
  /// (AttnLinearArgs; give it a workspace of linearWorkspaceBytes() to split
  /// the sequence over more blocks). Throws attn::Error naming the argument.
  void runLinear(const AttnLinearArgs &args, CUstream stream = nullptr) const;
  /// The one-token recurrent step of the same spec (AttnDecodeArgs).
  void decode(const AttnDecodeArgs &args, CUstream stream = nullptr) const;

  /// The backward (launchConfig().backward: a module compiled with
  /// Compiler::compileBackward or `attnc --backward`): dq, dk and dv from
  /// the forward's inputs, its o and lse, and dO (AttnBackwardArgs), with a
  /// workspace of backwardWorkspaceBytes(args). Throws attn::Error naming
  /// the argument; nothing is launched after a failed check.
  void runBackward(const AttnBackwardArgs &args, CUstream stream = nullptr) const;
  /// The workspace a runBackward call with these shapes needs.
  uint64_t backwardWorkspaceBytes(const AttnBackwardArgs &args) const;

  /// The backward of linear attention or retention (a backward module of
  /// a linear-family spec: launchConfig().linearFamily and .backward): dq,
  /// dk, dv, gated retention's log-decay gradient and the initial state's
  /// from the forward's inputs and dO (AttnLinearBackwardArgs), with a
  /// workspace of linearBackwardWorkspaceBytes(args). Throws attn::Error
  /// naming the argument; nothing is launched after a failed check.
  void runLinearBackward(const AttnLinearBackwardArgs &args, CUstream stream = nullptr) const;
  uint64_t linearBackwardWorkspaceBytes(const AttnLinearBackwardArgs &args) const;

  /// The masks' tile coverage for these arguments' shapes and captures
  /// (attn::buildTileCoverage with this kernel's module): pass it as
  /// args.tileCoverage to later runs with the same shapes and captures.
  DeviceBuffer buildTileCoverage(const AttnForwardArgs &args, CUstream stream = nullptr) const;
  /// The stored key bits of the partial tiles of args.tileCoverage
  /// (attn::buildTileKeyBits with this kernel's module; synchronizes
  /// `stream`): pass them as args.tileKeyBits beside the coverage.
  DeviceBuffer buildTileKeyBits(const AttnForwardArgs &args, CUstream stream = nullptr) const;
  /// The order of the work tiles for these arguments under `policy`
  /// (attn::buildWorkOrder with this kernel's module; args.tileCoverage
  /// counts), built on `stream` without a synchronization: the buffer holds
  /// the order, then the costs. Pass it as args.workOrder to later runs with
  /// the same shapes, captures and coverage, on `stream` or ordered after it.
  DeviceBuffer buildWorkOrder(const AttnForwardArgs &args, CUstream stream = nullptr,
                              WorkOrderPolicy policy = WorkOrderPolicy::LongestFirst) const;
  /// How many shapes run() has built an automatic work order for, in the
  /// current context.
  size_t automaticWorkOrderCount() const;

private:
  struct State;
  struct Loaded;
  /// The module and function loaded into the current context (loaded on
  /// first use).
  Loaded &loadedForCurrentContext() const;

  std::shared_ptr<State> state;
};

/// Throws attn::Error unless `device` is an sm_90 GPU (the kernels use
/// sm_90a-only instructions). The message names the GPU found.
void checkDeviceSupported(const DeviceInfo &device);

} // namespace attn

#endif // ATTN_RUNTIME_KERNEL_H
