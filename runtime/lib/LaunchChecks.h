//===- LaunchChecks.h - Argument checks shared by the launches --*- C++ -*-===//
//
// The checks every kernel launch makes of its arguments (forward, backward,
// linear): views against the compiled plan, device memory, integer ranges;
// and the device's multiprocessor count, which grids are sized by.
// Each throws attn::Error whose message starts with the argument's name.
// Also what the launch files share besides checks: the TMA box width, a
// forward call's logical shape and its parameter block.
// Internal to the runtime library.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_RUNTIME_LIB_LAUNCHCHECKS_H
#define ATTN_RUNTIME_LIB_LAUNCHCHECKS_H

#include "attn/runtime/AttentionLaunch.h"

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace attn::detail {

[[noreturn]] void fail(std::string_view name, const std::string &what);

/// "[b, s, h, d]".
std::string shapeString(const TensorView &view);

std::string hexAddress(uintptr_t address);

/// Bytes from the first to one past the last element a view can touch.
uint64_t viewExtentBytes(const TensorView &view);

/// Checks with the driver that `ptr` is memory of `device` (or managed) and
/// that its allocation holds `extentBytes` from it.
void requireDeviceMemory(const void *ptr, uint64_t extentBytes, std::string_view name,
                         int device);

/// Checks what the plan fixes: dtype, head_dim and head count.
void validateAgainstConfig(const TensorView &view, const char *name,
                           const AttnLaunchConfig &config, int heads, const char *headKind);

/// Fails when `value` exceeds the int range of the kernel ABI.
void requireIntRange(int64_t value, const char *name, const char *what);

/// The forward kernels' sequence bound, which the compiler's proofs about
/// mask regions rely on (attn_abi::kMaxSeqlen); the backward takes the
/// forward's shapes and keeps the bound.
void requireForwardSeqlen(int64_t value, const char *name);

/// What the forward and the backward require of q and k beyond the plan:
/// one batch, an int batch, and sequences within requireForwardSeqlen.
void requireQueryKeyExtents(const TensorView &q, const TensorView &k);

/// The multiprocessors of a device, asked of the driver once per device.
int multiprocessorsOf(int device);

/// What can be checked of packed sequences without reading the offsets:
/// both arrays present and aligned, a positive count, q and k of batch 1
/// holding the longest lengths.
void validatePackedSequences(const PackedSequences &packed, const TensorView &q,
                             const TensorView &k);

/// Checks a workspace of `bytes` that `needed` bytes of it serve `use`
/// (sized by `sizeFunction`): enough bytes, 4-byte alignment, device memory.
void requireWorkspace(const void *workspace, uint64_t bytes, uint64_t needed,
                      const std::string &use, const char *sizeFunction);

/// One fp32 side buffer of a linear-family call (states, key sums,
/// log-decays and their gradients): its pointer, the bytes the call uses
/// and its name.
struct SideBuffer {
  const void *pointer;
  uint64_t bytes;
  const char *name;
};

/// The bytes of a linear-family call's side buffers: a state (head_dim²
/// floats), a key sum (head_dim floats) and a log-decay row (one float a
/// token) per (batch, query head).
struct LinearBufferBytes {
  uint64_t state, keySum, decay;
};
LinearBufferBytes linearBufferBytes(const AttnLaunchConfig &config, int64_t batch,
                                    int64_t seqlen);

/// The side buffers a forward call passes.
std::vector<SideBuffer> linearBuffers(const AttnLaunchConfig &config, const AttnLinearArgs &args);

/// What both linear launches check of q, k and v: dtype, head_dim and heads
/// against the plan, k and v matching q in batch and length, and the ABI's
/// and the grid's bounds on batch and length.
void validateLinearViews(const AttnLaunchConfig &config, const TensorView &q, const TensorView &k,
                         const TensorView &v);

/// Fails for a side buffer that is not 4-byte aligned.
void requireFloatAligned(const std::vector<SideBuffer> &buffers);

/// Checks with the driver that each non-empty view and side buffer is
/// device memory of the current device holding what the call touches.
void requireDeviceBuffers(std::initializer_list<std::pair<const TensorView *, const char *>> views,
                          const std::vector<SideBuffer> &buffers);

/// Checks with the driver the device memory of a linear-family call: its
/// views and the fp32 side buffers it passes.
void validateLinearDevicePointers(const AttnLaunchConfig &config, const AttnLinearArgs &args);

/// How a chunkwise launch runs beyond its arguments (AttnLinearParams'
/// reverse, heads_swapped and feature_map_operands): the forward's default,
/// or one of the backward's passes.
struct LinearPassOptions {
  bool reverse = false;
  bool headsSwapped = false;
  int featureMapOperands = ATTN_LINEAR_MAP_Q | ATTN_LINEAR_MAP_K;
};

/// The chunkwise launches of launchLinear for arguments already checked
/// (with heads_swapped, q has the kv heads and k, v the query heads).
void launchLinearPass(LinearFunctions &functions, const AttnLaunchConfig &config,
                      const AttnLinearArgs &args, const LinearPassOptions &options,
                      CUstream stream);

/// Columns of a TMA box of Q, K, V or O: 128-byte rows of a 16-bit type.
constexpr unsigned kTmaBoxCols = 64;


/// The captured buffers of a launch of this shape against the config's
/// declarations ("captures: ...", "capture 'NAME': ...").
void validateCaptureViews(const AttnLaunchConfig &config,
                          const std::vector<CaptureView> &captures, const LogicalShape &shape);
/// The backward's gradient buffers: one per capture declared with `grad`,
/// in order, each f32 of its capture's shape ("captureGrads: ...",
/// "gradient of capture 'NAME': ...").
void validateCaptureGradients(const AttnLaunchConfig &config,
                              const std::vector<CaptureGradView> &gradients,
                              const LogicalShape &shape);
/// Bytes of a capture's contiguous elements. A shape that needs more than
/// int64 bytes is refused rather than wrapped ("LABEL: ..."), so the
/// device-memory check cannot be fooled by an overflowed size.
int64_t captureBytes(const CaptureView &view, const std::string &label);
/// That every non-empty capture lies in device memory of `device`.
void requireCaptureMemory(const AttnLaunchConfig &config,
                          const std::vector<CaptureView> &captures, int device);
/// The kernel ABI's capture entries: `captures` in order, extents padded
/// with 1 up to kMaxCaptureRank; unused entries null with extents 1.
void fillCaptureEntries(const std::vector<CaptureView> &captures,
                        attn_abi::CaptureArg (&entries)[attn_abi::kMaxCaptures]);

/// The parameter block of arguments validateForwardArgs has accepted
/// (defined in ForwardLaunch.cpp; the prepasses encode through it too).
attn_abi::AttnFwdParams encodeForwardParams(const AttnLaunchConfig &config,
                                            const AttnForwardArgs &args);

/// What a paged KV cache needs of its arrays and pools beyond the views'
/// plan checks ("paged.*", "k", "q", "keySplits").
void validatePagedKvCache(const AttnLaunchConfig &config, const AttnForwardArgs &args);
/// A paged call the forward kernel does not read (compiled without
/// pagedForward, or pages forwardPageBoxRows refuses): only the short-query
/// path takes it.
bool onlyShortQueryPath(const AttnLaunchConfig &config, const AttnForwardArgs &args);
/// Why the forward kernel does not read the call's pages, for messages.
std::string whyForwardSkipsPages(const AttnLaunchConfig &config, const AttnForwardArgs &args);
/// AttnForwardArgs::keySplits and the short-query path's grid limits.
void validateShortQueryArgs(const AttnLaunchConfig &config, const AttnForwardArgs &args);
/// shortQueryPlanFor for arguments validateForwardArgs has accepted.
ShortQueryPlan shortQueryPlanOf(const AttnLaunchConfig &config, const AttnForwardArgs &args,
                                int multiprocessors);
/// The workspace a call uses on the short-query path when it has one;
/// nullopt when the call takes the forward kernel.
std::optional<uint64_t> shortQueryWorkspaceBytes(const AttnLaunchConfig &config,
                                                 const AttnForwardArgs &args, int multiprocessors);
} // namespace attn::detail

#endif // ATTN_RUNTIME_LIB_LAUNCHCHECKS_H
