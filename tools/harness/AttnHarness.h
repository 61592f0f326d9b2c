//===- AttnHarness.h - Run a compiled kernel against the reference -*- C++ -*-===//
//
// Shared by the GPU tests and attn-bench: random inputs on the device (and
// their exact host copies), a launch, a comparison with the CPU reference
// evaluator, and event timing. Needs no MLIR.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_HARNESS_ATTNHARNESS_H
#define ATTN_HARNESS_ATTNHARNESS_H

#include "attn/Reference/ReferenceAttention.h"
#include "attn/runtime/Runtime.h"

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

namespace attn::harness {

struct Shape {
  int64_t batch = 1, seqlenQ = 1, seqlenK = 1;
  /// Store Q, K, V and O head-major ([B, H, S, D] in memory) instead of BSHD,
  /// so the sequence and head strides are not the packed ones.
  bool headMajor = false;
};

/// A 4-D tensor on the device plus the fp32 values of its elements on the host.
struct HostDeviceTensor {
  DeviceBuffer buffer;
  TensorView view;
  std::vector<float> host; // contiguous BSHD copy of the device values
};

/// A captured buffer on the device and its host copy (f32 or i32 values).
struct HostDeviceCapture {
  DeviceBuffer buffer;
  CaptureView view;
  std::vector<float> f32;
  std::vector<int32_t> i32;

  /// The host copy's elements, of view.dtype.
  const void *hostData() const {
    return view.dtype == DType::F32 ? static_cast<const void *>(f32.data())
                                    : static_cast<const void *>(i32.data());
  }
};

/// Page-locked host memory: device-to-host copies into it run at the link's
/// full speed and need no first-touch page faults, which dominates checking
/// a large O many times (attn-tune checks every candidate).
class PinnedHostBuffer {
public:
  PinnedHostBuffer() = default;
  explicit PinnedHostBuffer(size_t bytes);
  ~PinnedHostBuffer();
  PinnedHostBuffer(PinnedHostBuffer &&other) noexcept;
  PinnedHostBuffer &operator=(PinnedHostBuffer &&other) noexcept;
  PinnedHostBuffer(const PinnedHostBuffer &) = delete;
  PinnedHostBuffer &operator=(const PinnedHostBuffer &) = delete;

  void *data() const { return pointer; }
  size_t size() const { return bytes; }

private:
  void release();

  void *pointer = nullptr;
  size_t bytes = 0;
};

/// A [batch, seqlen, heads, headDim] tensor of `dtype` on the device, BSHD
/// or head-major; with `random`, filled with standard-normal values rounded
/// to the type, whose exact fp32 copies `host` holds (contiguous BSHD).
HostDeviceTensor makeTensor(DType dtype, int64_t batch, int64_t seqlen, int64_t heads,
                            int64_t headDim, bool headMajor, std::mt19937_64 *random);

/// Element offset of (b, s, h, d) in a view.
int64_t offsetOf(const TensorView &view, int64_t b, int64_t s, int64_t h, int64_t d);

/// A 16-bit device tensor's values as contiguous BSHD fp32.
std::vector<float> downloadBSHD(const HostDeviceTensor &tensor);

/// Inputs and outputs of one forward problem, allocated for `config`.
class ForwardProblem {
public:
  ForwardProblem(const AttnLaunchConfig &config, const Shape &shape, uint64_t seed);

  AttnForwardArgs args() const;
  /// Fills O and LSE with NaN so that an element the kernel skipped is caught.
  void poisonOutputs();
  /// Uploads a captured buffer (row-major `shape`); args() passes the
  /// captures in the order they were added.
  void addCapture(std::vector<float> values, std::vector<int64_t> shape);
  void addCapture(std::vector<int32_t> values, std::vector<int64_t> shape);
  const Shape &shape() const { return shapeValue; }
  /// Copies O from the device into a staging buffer kept for the next call
  /// and returns its element bits (laid out as o.view).
  const uint16_t *downloadOutput() const;

  HostDeviceTensor q, k, v, o;
  DeviceBuffer lse;
  std::vector<HostDeviceCapture> captures;

private:
  Shape shapeValue;
  mutable PinnedHostBuffer outputStaging; // downloadOutput's, allocated on first use
};

struct Comparison {
  double maxAbsError = 0;      // over O
  double maxLseError = 0;      // over finite LSE entries
  double relativeL2Error = 0;  // ||O - ref|| / ||ref||
  int64_t toleranceViolations = 0;
  int64_t maskedRowMismatches = 0; // rows where exactly one side is -inf, or O != 0
  int64_t nonFinite = 0;
  std::string firstViolation;

  bool passed() const {
    return toleranceViolations == 0 && maskedRowMismatches == 0 && nonFinite == 0;
  }
};

/// Per-element tolerance |gpu - ref| <= absolute + relative * |ref| for O,
/// and lseAbsolute for the log-sum-exp.
struct Tolerance {
  double absolute, relative, lseAbsolute;
};

/// Tolerances for the element type (see the derivation in the .cpp).
Tolerance toleranceFor(DType dtype);

/// The reference's O ([B, Sq, Hq, D]) and LSE ([B, Hq, Sq]) for the
/// problem's host inputs (only the rows problem.rows selects, when set).
struct ReferenceOutputs {
  std::vector<float> o, lse;
};
ReferenceOutputs computeReference(const reference::Problem &problem, const ForwardProblem &data);

/// Compares the device outputs with `reference` over the rows problem.rows
/// selects (all rows when unset).
Comparison compareOutputs(const reference::Problem &problem, const ReferenceOutputs &reference,
                          const ForwardProblem &data, DType dtype);

/// Runs the reference on the problem's host inputs and compares the device
/// outputs with it.
Comparison compareWithReference(const reference::Problem &problem, const ForwardProblem &data,
                                DType dtype);

/// Median time in milliseconds of `repeats` calls of `launch` (each timed
/// with events on the null stream) after `warmup` untimed calls.
double medianMs(const std::function<void()> &launch, int warmup, int repeats);

/// Timings of calls queued back to back: `device` is the median, over
/// `repeats` rounds, of the event time of `burst` calls divided by `burst`
/// (the device's time per call once the host runs ahead: launch gaps, no
/// host work); `host` is the median host time one call takes to return.
/// With burst = 1 each round times one call alone (medianMs).
struct BackToBackTimes {
  double deviceMs = 0, hostMs = 0;
};
BackToBackTimes backToBackMs(const std::function<void()> &launch, int warmup, int repeats,
                             int burst = 20);

/// Median time in milliseconds of `repeats` launches after `warmup`.
double medianLaunchMs(KernelFunction &kernel, const AttnLaunchConfig &config,
                      const AttnForwardArgs &args, int warmup, int repeats);

/// Attaches to `args` a forward workspace of the size the launches of each
/// config need (forwardWorkspaceBytes: the split of a persistent grid's
/// last round), held by the returned buffer; none when none needs one.
DeviceBuffer attachForwardWorkspace(std::initializer_list<const AttnLaunchConfig *> launches,
                                    AttnForwardArgs &args);

/// The spec text of a softmax kernel with a built-in mask (`mask` is an
/// attribute, e.g. "#attn.causal<bottom_right>"), named @`name`.
std::string softmaxSpecText(const std::string &name, int headDim, const std::string &element,
                            const std::string &mask, int64_t qHeads, int64_t kvHeads);

/// The peer grid's spec at a head dim: H x D = 2048, bf16, causal aligned
/// bottom-right or no mask, named @grid_d<D>[_causal].
std::string gridSpecText(int headDim, bool causal);

/// Whether a spec's built-in mask is causal (forwardFlops then halves).
bool specHasCausalMask(const std::string &specText);

/// 4·B·H·Sq·Sk·D floating-point operations, halved for causal masks.
double forwardFlops(const AttnLaunchConfig &config, const Shape &shape, bool causal);

/// A captured buffer's generated values, f32 or i32, and its extents.
struct GeneratedCapture {
  bool isFloat = true;
  std::vector<float> f32;
  std::vector<int32_t> i32;
  std::vector<int64_t> extents;
};

/// Generates every capture `launch` declares, in order, from
/// NAME=GENERATOR[@D0xD1...] options (attn-bench's --capture), on the host:
///   ramp:A,B        f32, element i (row-major) = A + B * i
///   normal:SIGMA    f32, seeded normal values
///   segments:LO,HI  i32, along the last extent runs of LO..HI equal ids
///                   (document ids), restarting in each row
///   bernoulli:P     i32, 1 with probability P (seeded)
/// The shape follows the declaration; `?` extents come from @D0xD1. Throws
/// attn::Error naming the capture for a missing or mismatched generator.
std::vector<GeneratedCapture> generateCaptures(const AttnLaunchConfig &launch, const Shape &shape,
                                               const std::vector<std::string> &captureOptions);

/// Uploads generateCaptures' buffers to `data`.
void addGeneratedCaptures(ForwardProblem &data, const AttnLaunchConfig &launch, const Shape &shape,
                          const std::vector<std::string> &captureOptions);

/// Why GPU work cannot run here (no driver, no device, not sm_90), or empty.
std::string gpuUnavailableReason();

} // namespace attn::harness

#endif // ATTN_HARNESS_ATTNHARNESS_H
