//===- AttnHarness.cpp - Run a compiled kernel against the reference ------===//

#include "AttnHarness.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <utility>

namespace attn::harness {

namespace {

uint16_t toBits(DType dtype, float value) {
  return dtype == DType::BF16 ? floatToBf16(value) : floatToF16(value);
}

float fromBits(DType dtype, uint16_t bits) {
  return dtype == DType::BF16 ? bf16ToFloat(bits) : f16ToFloat(bits);
}

// Element strides of a [B, S, H, D] tensor stored BSHD or head-major (BHSD).
void setStrides(TensorView &view, bool headMajor) {
  int64_t s = view.shape[1], h = view.shape[2], d = view.shape[3];
  if (headMajor) {
    view.strides[0] = h * s * d;
    view.strides[1] = d;
    view.strides[2] = s * d;
  } else {
    view.strides[0] = s * h * d;
    view.strides[1] = h * d;
    view.strides[2] = d;
  }
  view.strides[3] = 1;
}


} // namespace

HostDeviceTensor makeTensor(DType dtype, int64_t batch, int64_t seqlen, int64_t heads,
                            int64_t headDim, bool headMajor, std::mt19937_64 *random) {
  HostDeviceTensor tensor;
  int64_t count = batch * seqlen * heads * headDim;
  // At least one element so that empty problems still have a valid pointer.
  tensor.buffer = DeviceBuffer(std::max<int64_t>(count, 8) * dtypeSize(dtype));
  tensor.view.data = tensor.buffer.data();
  tensor.view.dtype = dtype;
  tensor.view.shape[0] = batch;
  tensor.view.shape[1] = seqlen;
  tensor.view.shape[2] = heads;
  tensor.view.shape[3] = headDim;
  setStrides(tensor.view, headMajor);
  if (!random)
    return tensor;

  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<uint16_t> device(count);
  tensor.host.resize(count);
  int64_t index = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seqlen; ++s)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < headDim; ++d, ++index) {
          uint16_t bits = toBits(dtype, normal(*random));
          tensor.host[index] = fromBits(dtype, bits);
          device[offsetOf(tensor.view, b, s, h, d)] = bits;
        }
  if (count)
    tensor.buffer.copyFromHost(device.data(), device.size() * sizeof(uint16_t));
  return tensor;
}


int64_t offsetOf(const TensorView &view, int64_t b, int64_t s, int64_t h, int64_t d) {
  return b * view.strides[0] + s * view.strides[1] + h * view.strides[2] + d * view.strides[3];
}

std::vector<float> downloadBSHD(const HostDeviceTensor &tensor) {
  const TensorView &view = tensor.view;
  const int64_t count = view.numElements();
  std::vector<float> values(count);
  if (count == 0)
    return values;
  std::vector<uint16_t> bits(tensor.buffer.size() / sizeof(uint16_t));
  tensor.buffer.copyToHost(bits.data(), bits.size() * sizeof(uint16_t));
  int64_t index = 0;
  for (int64_t b = 0; b < view.shape[0]; ++b)
    for (int64_t s = 0; s < view.shape[1]; ++s)
      for (int64_t h = 0; h < view.shape[2]; ++h)
        for (int64_t d = 0; d < view.shape[3]; ++d, ++index)
          values[index] = fromBits(view.dtype, bits[offsetOf(view, b, s, h, d)]);
  return values;
}

ForwardProblem::ForwardProblem(const AttnLaunchConfig &config, const Shape &shape, uint64_t seed)
    : shapeValue(shape) {
  std::mt19937_64 random(seed);
  q = makeTensor(config.dtype, shape.batch, shape.seqlenQ, config.qHeads, config.headDim,
                 shape.headMajor, &random);
  k = makeTensor(config.dtype, shape.batch, shape.seqlenK, config.kvHeads, config.headDim,
                 shape.headMajor, &random);
  v = makeTensor(config.dtype, shape.batch, shape.seqlenK, config.kvHeads, config.headDim,
                 shape.headMajor, &random);
  o = makeTensor(config.dtype, shape.batch, shape.seqlenQ, config.qHeads, config.headDim,
                 shape.headMajor, nullptr);
  lse = DeviceBuffer(std::max<int64_t>(shape.batch * config.qHeads * shape.seqlenQ, 1) *
                     sizeof(float));
}

AttnForwardArgs ForwardProblem::args() const {
  AttnForwardArgs args;
  args.q = q.view;
  args.k = k.view;
  args.v = v.view;
  args.o = o.view;
  args.lse = static_cast<float *>(lse.data());
  for (const HostDeviceCapture &capture : captures)
    args.captures.push_back(capture.view);
  return args;
}

namespace {
template <typename T>
HostDeviceCapture uploadCapture(std::vector<T> &values, DType dtype, std::vector<int64_t> shape) {
  HostDeviceCapture capture;
  capture.buffer = DeviceBuffer(std::max<size_t>(values.size(), 1) * sizeof(T));
  capture.buffer.upload(values);
  capture.view = CaptureView{capture.buffer.data(), dtype, std::move(shape)};
  return capture;
}
} // namespace

void ForwardProblem::addCapture(std::vector<float> values, std::vector<int64_t> shape) {
  captures.push_back(uploadCapture(values, DType::F32, std::move(shape)));
  captures.back().f32 = std::move(values);
}

void ForwardProblem::addCapture(std::vector<int32_t> values, std::vector<int64_t> shape) {
  captures.push_back(uploadCapture(values, DType::I32, std::move(shape)));
  captures.back().i32 = std::move(values);
}

PinnedHostBuffer::PinnedHostBuffer(size_t size) : bytes(size) {
  if (bytes == 0)
    return;
  ensureContext();
  ATTN_CU_CHECK_CTX(fmt::format("allocating {} bytes of pinned host memory", bytes),
                    cuMemAllocHost, &pointer, bytes);
}

PinnedHostBuffer::~PinnedHostBuffer() { release(); }

void PinnedHostBuffer::release() {
  if (pointer)
    Driver::get().api().cuMemFreeHost(pointer);
  pointer = nullptr;
  bytes = 0;
}

PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer &&other) noexcept
    : pointer(std::exchange(other.pointer, nullptr)), bytes(std::exchange(other.bytes, 0)) {}

PinnedHostBuffer &PinnedHostBuffer::operator=(PinnedHostBuffer &&other) noexcept {
  if (this != &other) {
    release();
    pointer = std::exchange(other.pointer, nullptr);
    bytes = std::exchange(other.bytes, 0);
  }
  return *this;
}

const uint16_t *ForwardProblem::downloadOutput() const {
  if (outputStaging.size() != o.buffer.size())
    outputStaging = PinnedHostBuffer(o.buffer.size());
  o.buffer.copyToHost(outputStaging.data(), o.buffer.size());
  return static_cast<const uint16_t *>(outputStaging.data());
}

void ForwardProblem::poisonOutputs() {
  o.buffer.fill(0xFF);   // NaN in bf16 and f16
  lse.fill32(0x7FC00000); // quiet NaN in fp32
}

// Tolerances. The reference sees exactly the rounded inputs, so the error is
// the kernel's own: scores and sums are fp32 (relative error ~1e-6 at these
// sizes, ex2/lg2.approx ~2^-22), P is rounded to the element type before the
// PV product (relative 2^-8 for bf16, 2^-11 for f16, so at most that times
// max|V| ~ 4.5 for standard-normal V), and O is rounded once more on output
// (relative 2^-9 / 2^-12). Hence abs 0.02 + rel 2^-7 for bf16 and
// abs 0.003 + rel 2^-10 for f16; the log-sum-exp stays in fp32: 2e-3.
Tolerance toleranceFor(DType dtype) {
  if (dtype == DType::BF16)
    return {0.02, 1.0 / 128, 2e-3};
  return {0.003, 1.0 / 1024, 2e-3};
}

ReferenceOutputs computeReference(const reference::Problem &problem, const ForwardProblem &data) {
  const int64_t b = problem.batch, sq = problem.seqlenQ, sk = problem.seqlenK;
  const int64_t hq = problem.qHeads, hk = problem.kvHeads, d = problem.headDim;
  auto packed = [](int64_t s, int64_t h, int64_t dim) {
    reference::HostTensor tensor{nullptr, {s * h * dim, h * dim, dim, 1}};
    return tensor;
  };
  reference::HostTensor q = packed(sq, hq, d), k = packed(sk, hk, d), v = packed(sk, hk, d);
  q.data = data.q.host.data();
  k.data = data.k.host.data();
  v.data = data.v.host.data();
  ReferenceOutputs reference;
  reference.o.assign(b * sq * hq * d, 0.f);
  reference.lse.assign(b * hq * sq, 0.f);
  reference::forward(problem, q, k, v, reference.o.data(), reference.lse.data());
  return reference;
}

Comparison compareWithReference(const reference::Problem &problem, const ForwardProblem &data,
                                DType dtype) {
  return compareOutputs(problem, computeReference(problem, data), data, dtype);
}

Comparison compareOutputs(const reference::Problem &problem, const ReferenceOutputs &reference,
                          const ForwardProblem &data, DType dtype) {
  const int64_t b = problem.batch, sq = problem.seqlenQ;
  const int64_t hq = problem.qHeads, d = problem.headDim;
  const std::vector<float> &refO = reference.o, &refLse = reference.lse;

  const uint16_t *gpuBits = data.downloadOutput();
  std::vector<float> gpuLse(b * hq * sq);
  if (!gpuLse.empty())
    data.lse.copyToHost(gpuLse.data(), gpuLse.size() * sizeof(float));

  Tolerance tolerance = toleranceFor(dtype);
  Comparison result;
  double errorSquares = 0, refSquares = 0;
  auto note = [&result](const std::string &what) {
    if (result.firstViolation.empty())
      result.firstViolation = what;
  };
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t s = 0; s < sq; ++s) {
        if (problem.rows && !problem.rows(bi, h, s))
          continue;
        float want = refLse[(bi * hq + h) * sq + s], got = gpuLse[(bi * hq + h) * sq + s];
        bool maskedRow = std::isinf(want) && want < 0;
        if (maskedRow != (std::isinf(got) && got < 0)) {
          ++result.maskedRowMismatches;
          std::ostringstream what;
          what << "lse[b=" << bi << ",h=" << h << ",q=" << s << "] = " << got << ", want "
               << want;
          note(what.str());
        } else if (!maskedRow) {
          double error = std::fabs(double(got) - want);
          if (!std::isfinite(got))
            ++result.nonFinite;
          result.maxLseError = std::max(result.maxLseError, error);
          if (error > tolerance.lseAbsolute) {
            ++result.toleranceViolations;
            std::ostringstream what;
            what << "lse[b=" << bi << ",h=" << h << ",q=" << s << "] = " << got << ", want "
                 << want;
            note(what.str());
          }
        }
        for (int64_t dim = 0; dim < d; ++dim) {
          float ref = refO[((bi * sq + s) * hq + h) * d + dim];
          float gpu = fromBits(dtype, gpuBits[offsetOf(data.o.view, bi, s, h, dim)]);
          if (!std::isfinite(gpu)) {
            ++result.nonFinite;
            note(fmt::format("O is not finite at b={} h={} q={}", bi, h, s));
            continue;
          }
          double error = std::fabs(double(gpu) - ref);
          if (maskedRow && gpu != 0.f) {
            ++result.maskedRowMismatches;
            note(fmt::format("fully masked row has nonzero O at q={}", s));
          }
          result.maxAbsError = std::max(result.maxAbsError, error);
          errorSquares += error * error;
          refSquares += double(ref) * ref;
          if (error > tolerance.absolute + tolerance.relative * std::fabs(ref)) {
            ++result.toleranceViolations;
            std::ostringstream what;
            what << "O[b=" << bi << ",q=" << s << ",h=" << h << ",d=" << dim << "] = " << gpu
                 << ", want " << ref;
            note(what.str());
          }
        }
      }
  result.relativeL2Error = refSquares > 0 ? std::sqrt(errorSquares / refSquares) : 0;
  return result;
}

BackToBackTimes backToBackMs(const std::function<void()> &launch, int warmup, int repeats,
                             int burst) {
  for (int i = 0; i < warmup; ++i)
    launch();
  ATTN_CU_CHECK(cuCtxSynchronize);
  CUevent start, stop;
  ATTN_CU_CHECK(cuEventCreate, &start, 0);
  ATTN_CU_CHECK(cuEventCreate, &stop, 0);
  std::vector<double> device, host;
  burst = std::max(burst, 1);
  for (int round = 0; round < std::max(repeats, 1); ++round) {
    ATTN_CU_CHECK(cuEventRecord, start, nullptr);
    for (int i = 0; i < burst; ++i) {
      auto before = std::chrono::steady_clock::now();
      launch();
      host.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - before)
              .count());
    }
    ATTN_CU_CHECK(cuEventRecord, stop, nullptr);
    ATTN_CU_CHECK(cuEventSynchronize, stop);
    float ms = 0;
    ATTN_CU_CHECK(cuEventElapsedTime, &ms, start, stop);
    device.push_back(double(ms) / burst);
  }
  ATTN_CU_CHECK(cuEventDestroy, start);
  ATTN_CU_CHECK(cuEventDestroy, stop);
  auto median = [](std::vector<double> &values) {
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
  };
  return {median(device), median(host)};
}

double medianMs(const std::function<void()> &launch, int warmup, int repeats) {
  return backToBackMs(launch, warmup, repeats, /*burst=*/1).deviceMs;
}

double medianLaunchMs(KernelFunction &kernel, const AttnLaunchConfig &config,
                      const AttnForwardArgs &args, int warmup, int repeats) {
  return medianMs([&] { launchForward(kernel, config, args, nullptr); }, warmup, repeats);
}

DeviceBuffer attachForwardWorkspace(std::initializer_list<const AttnLaunchConfig *> launches,
                                    AttnForwardArgs &args) {
  uint64_t bytes = 0;
  for (const AttnLaunchConfig *launch : launches)
    bytes = std::max(bytes, forwardWorkspaceBytes(*launch, args));
  if (bytes == 0)
    return DeviceBuffer();
  DeviceBuffer workspace(bytes);
  args.workspace = workspace.data();
  args.workspaceBytes = workspace.size();
  return workspace;
}

std::string softmaxSpecText(const std::string &name, int headDim, const std::string &element,
                            const std::string &mask, int64_t qHeads, int64_t kvHeads) {
  std::ostringstream spec;
  spec << "attn.kernel @" << name << " problem = #attn.problem<q_heads = " << qHeads
       << ", kv_heads = " << kvHeads << ", head_dim = " << headDim
       << ", element_type = " << element << "> mask = " << mask
       << " normalizer = #attn.softmax\n";
  return spec.str();
}

std::string gridSpecText(int headDim, bool causal) {
  const int heads = 2048 / headDim;
  return softmaxSpecText(fmt::format("grid_d{}{}", headDim, causal ? "_causal" : ""), headDim,
                         "bf16", causal ? "#attn.causal<bottom_right>" : "#attn.no_mask", heads,
                         heads);
}

bool specHasCausalMask(const std::string &specText) {
  return specText.find("#attn.causal") != std::string::npos;
}

double forwardFlops(const AttnLaunchConfig &config, const Shape &shape, bool causal) {
  double flops = 4.0 * shape.batch * config.qHeads * double(shape.seqlenQ) * shape.seqlenK *
                 config.headDim;
  return causal ? flops / 2 : flops;
}

std::string gpuUnavailableReason() {
  if (!Driver::available())
    return Driver::get().unavailableReason();
  try {
    int count = 0;
    ATTN_CU_CHECK(cuDeviceGetCount, &count);
    if (count == 0)
      return "no CUDA device";
    DeviceInfo info = queryDevice(0);
    if (info.computeCapabilityMajor != 9 || info.computeCapabilityMinor != 0)
      return fmt::format("device 0 ({}) is sm_{}{}; the kernels need sm_90", info.name,
                         info.computeCapabilityMajor, info.computeCapabilityMinor);
  } catch (const Error &error) {
    return error.what();
  }
  return {};
}

/// The extents of a declared capture at this shape; `?` extents come from
/// the option's @D0xD1 suffix.
static std::vector<int64_t> captureShape(const CaptureDecl &decl, const AttnLaunchConfig &launch,
                                  const Shape &shape, const std::string &explicitShape) {
  std::vector<int64_t> given;
  std::stringstream dims(explicitShape);
  for (std::string dim; std::getline(dims, dim, 'x');)
    given.push_back(std::stoll(dim));
  std::vector<int64_t> extents;
  for (size_t i = 0; i < decl.dims.size(); ++i) {
    int64_t extent = requiredCaptureExtent(decl.dims[i], shape.batch, launch.qHeads,
                                                 launch.kvHeads, shape.seqlenQ, shape.seqlenK);
    if (extent < 0) {
      if (i >= given.size())
        throw Error(fmt::format("capture '{}': extent {} is '?': give the shape as --capture "
                                "{}=...@D0xD1",
                                decl.name, i, decl.name));
      extent = given[i];
    }
    extents.push_back(extent);
  }
  return extents;
}

std::vector<GeneratedCapture> generateCaptures(const AttnLaunchConfig &launch, const Shape &shape,
                                               const std::vector<std::string> &captureOptions) {
  std::mt19937_64 random(2026);
  std::vector<GeneratedCapture> generated;
  for (const CaptureDecl &decl : launch.captures) {
    std::string generator, explicitShape;
    for (const std::string &option : captureOptions)
      if (option.rfind(decl.name + "=", 0) == 0) {
        generator = option.substr(decl.name.size() + 1);
        size_t at = generator.find('@');
        if (at != std::string::npos) {
          explicitShape = generator.substr(at + 1);
          generator.resize(at);
        }
      }
    if (generator.empty())
      throw Error("capture '" + decl.name + "': the spec reads it; pass --capture " +
                        decl.name + "=GENERATOR (see attn-bench's header)");
    std::vector<int64_t> extents = captureShape(decl, launch, shape, explicitShape);
    int64_t count = 1;
    for (int64_t extent : extents)
      count *= extent;
    std::string kind = generator.substr(0, generator.find(':'));
    std::string arguments = generator.find(':') == std::string::npos ? "" : generator.substr(generator.find(':') + 1);
    double a = 0, b = 0;
    std::sscanf(arguments.c_str(), "%lf,%lf", &a, &b);
    bool wantsFloat = kind == "ramp" || kind == "normal";
    if (wantsFloat != (decl.dtype == DType::F32))
      throw Error("capture '" + decl.name + "': generator '" + kind + "' does not make " +
                        dtypeName(decl.dtype) + " values");
    if (kind == "ramp" || kind == "normal") {
      std::normal_distribution<float> normal(0.f, float(a));
      std::vector<float> values(count);
      for (int64_t i = 0; i < count; ++i)
        values[i] = kind == "ramp" ? float(a + b * double(i)) : normal(random);
      generated.push_back({true, std::move(values), {}, extents});
    } else if (kind == "segments" || kind == "bernoulli") {
      std::vector<int32_t> values(count);
      int64_t row = extents.back();
      int32_t id = 0;
      int64_t left = 0;
      for (int64_t i = 0; i < count; ++i) {
        if (kind == "bernoulli") {
          values[i] = std::uniform_real_distribution<double>(0, 1)(random) < a;
          continue;
        }
        if (i % row == 0 || left == 0) {
          left = int64_t(a) + int64_t(random() % uint64_t(std::max<int64_t>(1, int64_t(b - a + 1))));
          id = i % row == 0 ? 0 : id + 1;
        }
        values[i] = id;
        --left;
      }
      generated.push_back({false, {}, std::move(values), extents});
    } else {
      throw Error("capture '" + decl.name + "': unknown generator '" + kind + "'");
    }
  }
  return generated;
}

void addGeneratedCaptures(ForwardProblem &data, const AttnLaunchConfig &launch, const Shape &shape,
                          const std::vector<std::string> &captureOptions) {
  for (GeneratedCapture &capture : generateCaptures(launch, shape, captureOptions)) {
    if (capture.isFloat)
      data.addCapture(std::move(capture.f32), capture.extents);
    else
      data.addCapture(std::move(capture.i32), capture.extents);
  }
}

} // namespace attn::harness
