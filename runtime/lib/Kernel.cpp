//===- Kernel.cpp - A compiled attention kernel, ready to run -------------===//

#include "attn/runtime/Kernel.h"

#include "attn/runtime/LaunchMetadata.h"

#include "LaunchChecks.h"

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>

namespace attn {

struct Kernel::Loaded {
  CUcontext context;
  Module module;
  KernelFunction function;
  LinearFunctions linear;     // linear-family kernels only
  BackwardFunctions backward; // softmax backward modules only
  LinearBackwardFunctions linearBackward; // linear-family backward modules only
  // Softmax forward modules: the short-query path's kernels (absent from
  // modules compiled before it existed, which then run every call on the
  // forward kernel).
  std::optional<ShortQueryFunctions> shortQuery;
  AutomaticWorkOrders workOrders;
};

struct Kernel::State {
  KernelImage image;
  std::mutex mutex;
  // unique_ptr keeps each function at a fixed address while runs use it and
  // another context's load grows the vector.
  std::vector<std::unique_ptr<Loaded>> loaded;
};

namespace {
std::string readFile(const std::string &path, const char *what) {
  std::ifstream file(path, std::ios::binary);
  if (!file)
    throw Error(std::string(what) + ": cannot open '" + path + "'");
  std::string bytes((std::istreambuf_iterator<char>(file)),
                    std::istreambuf_iterator<char>());
  if (file.bad())
    throw Error(std::string(what) + ": cannot read '" + path + "'");
  return bytes;
}

bool isCubinOrFatbin(const std::string &bytes) {
  static const char kElfMagic[] = {0x7f, 'E', 'L', 'F'};
  static const unsigned char kFatbinMagic[] = {0x50, 0xed, 0x55, 0xba};
  return (bytes.size() >= 4 && std::memcmp(bytes.data(), kElfMagic, 4) == 0) ||
         (bytes.size() >= 4 && std::memcmp(bytes.data(), kFatbinMagic, 4) == 0);
}
} // namespace

void checkDeviceSupported(const DeviceInfo &device) {
  if (device.computeCapabilityMajor == 9 && device.computeCapabilityMinor == 0)
    return;
  throw Error(fmt::format("device {} ({}) is sm_{}{}; attnc kernels need an sm_90 GPU (Hopper: "
                          "H100, H200, GH200)",
                          device.ordinal, device.name, device.computeCapabilityMajor,
                          device.computeCapabilityMinor));
}

Kernel::Kernel(KernelImage image) {
  if (image.ptx.empty() && image.cubin.empty())
    throw Error("image: kernel '" + image.name +
                "' has neither PTX nor a cubin");
  try {
    validateLaunchConfig(image.launch);
  } catch (const Error &error) {
    throw Error("image: kernel '" + image.name + "': " + error.what());
  }
  if (image.launch.kernelName.empty())
    throw Error("image: kernel '" + image.name + "' has no entry point name");
  state = std::make_shared<State>();
  state->image = std::move(image);
}

Kernel Kernel::fromFiles(const std::string &binaryPath,
                         const std::string &metadataPath) {
  std::string binary = readFile(binaryPath, "binaryPath");
  KernelImage image;
  if (isCubinOrFatbin(binary)) {
    image.cubin.assign(binary.begin(), binary.end());
  } else if (binary.find(".version") != std::string::npos &&
             binary.find(".target") != std::string::npos) {
    image.ptx = std::move(binary);
  } else {
    throw Error("binaryPath: '" + binaryPath +
                "' is neither a cubin (ELF) nor PTX text");
  }
  std::string metadata = readFile(metadataPath, "metadataPath");
  try {
    image.launch = parseLaunchConfig(metadata);
  } catch (const Error &error) {
    throw Error("metadataPath: '" + metadataPath + "': " + error.what());
  }
  image.name = binaryPath;
  return Kernel(std::move(image));
}

const KernelImage &Kernel::image() const {
  if (!state)
    throw Error("kernel: empty handle (default-constructed Kernel)");
  return state->image;
}

const std::string &Kernel::name() const { return image().name; }

const AttnLaunchConfig &Kernel::launchConfig() const { return image().launch; }

Kernel::Loaded &Kernel::loadedForCurrentContext() const {
  const KernelImage &kernel = image();
  CUcontext context = ensureContext();
  std::lock_guard<std::mutex> lock(state->mutex);
  // A context destroyed by the program and a new one at the same address
  // would reuse a stale entry; primary contexts (ensureContext) never go.
  for (const auto &loaded : state->loaded)
    if (loaded->context == context)
      return *loaded;

  checkDeviceSupported(queryDevice(currentDevice()));
  Module module;
  std::string cubinError;
  if (!kernel.cubin.empty()) {
    try {
      module = Module::loadCubin(kernel.cubin.data(), kernel.cubin.size());
    } catch (const Error &error) {
      // A driver older than the NVRTC that made the cubin; PTX may still do.
      cubinError = error.what();
    }
  }
  if (!module.get()) {
    if (kernel.ptx.empty())
      throw Error("kernel '" + kernel.name + "': loading its cubin failed: " +
                  cubinError);
    try {
      module = Module::loadPtx(kernel.ptx);
    } catch (const Error &error) {
      throw Error("kernel '" + kernel.name + "': " +
                  (cubinError.empty()
                       ? std::string()
                       : "loading its cubin failed (" + cubinError + "), ") +
                  "loading its PTX failed: " + error.what());
    }
  }
  auto loaded = std::make_unique<Loaded>();
  loaded->context = context;
  loaded->function = module.function(kernel.launch.kernelName);
  // Set once here, so that launches only read it (launchForward skips the
  // call when the value is unchanged) and can run on several threads.
  loaded->function.setMaxDynamicSharedMemory(kernel.launch.sharedMemoryBytes);
  if (kernel.launch.linearFamily && kernel.launch.backward)
    loaded->linearBackward = loadLinearBackwardFunctions(module, kernel.launch);
  else if (kernel.launch.linearFamily)
    loaded->linear = loadLinearFunctions(module, kernel.launch);
  else if (kernel.launch.backward)
    loaded->backward = loadBackwardFunctions(module, kernel.launch);
  if (!kernel.launch.linearFamily && !kernel.launch.backward) {
    try {
      loaded->shortQuery = loadShortQueryFunctions(module, kernel.launch);
    } catch (const Error &) {
      loaded->shortQuery.reset();
    }
  }
  loaded->module = std::move(module);
  state->loaded.push_back(std::move(loaded));
  return *state->loaded.back();
}

void Kernel::load() const { loadedForCurrentContext(); }

DeviceBuffer Kernel::buildTileCoverage(const AttnForwardArgs &args, CUstream stream) const {
  const AttnLaunchConfig &config = launchConfig();
  validateForwardArgs(config, args);
  return ::attn::buildTileCoverage(loadedForCurrentContext().module, config, args, stream);
}

DeviceBuffer Kernel::buildTileKeyBits(const AttnForwardArgs &args, CUstream stream) const {
  const AttnLaunchConfig &config = launchConfig();
  // args.tileKeyBits is ignored, as by attn::buildTileKeyBits.
  AttnForwardArgs checked = args;
  checked.tileKeyBits = nullptr;
  validateForwardArgs(config, checked);
  return ::attn::buildTileKeyBits(loadedForCurrentContext().module, config, checked, stream);
}

DeviceBuffer Kernel::buildWorkOrder(const AttnForwardArgs &args, CUstream stream,
                                    WorkOrderPolicy policy) const {
  const AttnLaunchConfig &config = launchConfig();
  validateForwardArgs(config, args);
  return ::attn::buildWorkOrder(loadedForCurrentContext().module, config, args, stream, policy);
}

void Kernel::run(const AttnForwardArgs &args, CUstream stream) const {
  const AttnLaunchConfig &config = launchConfig();
  // Argument errors first: they need no driver, and name what to fix.
  validateForwardArgs(config, args);
  if (args.q.batch() == 0 || args.q.seqlen() == 0)
    return;
  Loaded &loaded = loadedForCurrentContext();
  // Decode, short queries and paged caches: the split-KV kernels.
  const ShortQueryPlan shortQuery =
      detail::shortQueryPlanOf(config, args, detail::multiprocessorsOf(currentDevice()));
  if (shortQuery.splits > 0) {
    if (loaded.shortQuery) {
      launchShortQuery(*loaded.shortQuery, config, args, stream);
      return;
    }
    if (args.paged.active() || args.keySplits > 0)
      throw Error("kernel '" + name() + "': its module has no short-query kernels (compiled "
                  "before attnc had them): recompile it for paged KV caches and keySplits");
  }
  if (const int32_t *order = loaded.workOrders.orderFor(loaded.module, config, args, stream)) {
    AttnForwardArgs ordered = args;
    ordered.workOrder = order;
    launchForward(loaded.function, config, ordered, stream);
    return;
  }
  launchForward(loaded.function, config, args, stream);
}

size_t Kernel::automaticWorkOrderCount() const {
  return loadedForCurrentContext().workOrders.size();
}

void Kernel::runLinear(const AttnLinearArgs &args, CUstream stream) const {
  const AttnLaunchConfig &config = launchConfig();
  validateLinearArgs(config, args);
  if (args.q.batch() == 0 || args.q.seqlen() == 0)
    return;
  launchLinear(loadedForCurrentContext().linear, config, args, stream);
}

void Kernel::runBackward(const AttnBackwardArgs &args, CUstream stream) const {
  const AttnLaunchConfig &config = launchConfig();
  // Argument errors first: they need no driver, and name what to fix.
  validateBackwardArgs(config, args);
  launchBackward(loadedForCurrentContext().backward, config, args, stream);
}

uint64_t Kernel::backwardWorkspaceBytes(const AttnBackwardArgs &args) const {
  return ::attn::backwardWorkspaceBytes(launchConfig(), args);
}

void Kernel::runLinearBackward(const AttnLinearBackwardArgs &args, CUstream stream) const {
  const AttnLaunchConfig &config = launchConfig();
  // Argument errors first: they need no driver, and name what to fix.
  validateLinearBackwardArgs(config, args);
  launchLinearBackward(loadedForCurrentContext().linearBackward, config, args, stream);
}

uint64_t Kernel::linearBackwardWorkspaceBytes(const AttnLinearBackwardArgs &args) const {
  return ::attn::linearBackwardWorkspaceBytes(launchConfig(), args);
}

void Kernel::decode(const AttnDecodeArgs &args, CUstream stream) const {
  const AttnLaunchConfig &config = launchConfig();
  validateLinearArgs(config, args, /*decode=*/true);
  if (args.q.batch() == 0)
    return;
  launchDecode(loadedForCurrentContext().linear.decode, config, args, stream);
}

void Kernel::run(const TensorView &q, const TensorView &k, const TensorView &v,
                 const TensorView &o, float *lse, CUstream stream) const {
  run(q, k, v, o, lse, /*captures=*/{}, stream);
}

void Kernel::run(const TensorView &q, const TensorView &k, const TensorView &v,
                 const TensorView &o, float *lse,
                 const std::vector<CaptureView> &captures,
                 CUstream stream) const {
  AttnForwardArgs args;
  args.q = q;
  args.k = k;
  args.v = v;
  args.o = o;
  args.lse = lse;
  args.captures = captures;
  run(args, stream);
}

} // namespace attn
