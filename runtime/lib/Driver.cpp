//===- Driver.cpp - Run-time loaded CUDA driver API -----------------------===//

#include "attn/runtime/Driver.h"

#include <fmt/format.h>

#include <dlfcn.h>

#include <map>
#include <mutex>
#include <utility>

namespace attn {

namespace {
#define ATTN_STRINGIFY_IMPL(x) #x
// Expands its argument first, so cuda.h's renames reach the string.
#define ATTN_STRINGIFY(x) ATTN_STRINGIFY_IMPL(x)

constexpr const char *kDriverLibrary = "libcuda.so.1";

template <typename Fn>
void resolveSymbol(void *handle, const char *name, Fn &slot,
                   std::string &missing) {
  void *symbol = dlsym(handle, name);
  // cuEventElapsedTime_v2 appeared in CUDA 12.8; older drivers export only
  // the original, which has the same signature.
  if (!symbol && std::string_view(name) == "cuEventElapsedTime_v2")
    symbol = dlsym(handle, "cuEventElapsedTime");
  if (!symbol) {
    missing += missing.empty() ? "" : ", ";
    missing += name;
    return;
  }
  slot = reinterpret_cast<Fn>(symbol);
}
} // namespace

Driver::Driver() {
  // get() must never throw; record any surprise as the reason instead.
  try {
    load();
  } catch (const std::exception &e) {
    usable = false;
    reason = std::string("CUDA driver unusable: ") + e.what();
  }
}

void Driver::load() {
  dlerror(); // Clear any stale error so the message below is ours.
  // Never dlclosed: modules and buffers may outlive static destructors.
  void *handle = dlopen(kDriverLibrary, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *why = dlerror();
    reason = std::string("no CUDA driver: ") + kDriverLibrary +
             " could not be loaded (" + (why ? why : "unknown error") + ")";
    return;
  }

  std::string missing;
#define ATTN_RESOLVE_DRIVER_FN(fn)                                             \
  resolveSymbol(handle, ATTN_STRINGIFY(fn), table.fn, missing);
  ATTN_CUDA_DRIVER_FUNCTIONS(ATTN_RESOLVE_DRIVER_FN)
#undef ATTN_RESOLVE_DRIVER_FN
  // Left null where the driver lacks them: their users fall back.
#define ATTN_RESOLVE_OPTIONAL_DRIVER_FN(fn)                                    \
  table.fn = reinterpret_cast<decltype(table.fn)>(dlsym(handle, ATTN_STRINGIFY(fn)));
  ATTN_CUDA_DRIVER_OPTIONAL_FUNCTIONS(ATTN_RESOLVE_OPTIONAL_DRIVER_FN)
#undef ATTN_RESOLVE_OPTIONAL_DRIVER_FN
  if (!missing.empty()) {
    reason = std::string("CUDA driver unusable: ") + kDriverLibrary +
             " lacks " + missing + " (driver too old?)";
    return;
  }

  CUresult result = table.cuInit(0);
  if (result != CUDA_SUCCESS) {
    reason = "CUDA driver unusable: cuInit failed: " + describe(result);
    return;
  }
  usable = true;
}

Driver &Driver::get() {
  static Driver instance; // Initialised once, thread safe (C++11).
  return instance;
}

bool Driver::available() { return get().usable; }

const DriverApi &Driver::api() const {
  if (!usable)
    throw Error(reason);
  return table;
}

std::string Driver::describe(CUresult result) const {
  const char *name = nullptr;
  const char *text = nullptr;
  if (table.cuGetErrorName)
    table.cuGetErrorName(result, &name);
  if (table.cuGetErrorString)
    table.cuGetErrorString(result, &text);
  std::string out = name ? name : fmt::format("CUresult {}", static_cast<int>(result));
  if (text)
    out += std::string(" (") + text + ")";
  return out;
}

void Driver::check(CUresult result, const char *call,
                   std::string_view context) const {
  if (result == CUDA_SUCCESS)
    return;
  std::string message = std::string(call) + " failed";
  if (!context.empty())
    message += " (" + std::string(context) + ")";
  throw Error(message + ": " + describe(result));
}

int Driver::version() const {
  int value = 0;
  check(api().cuDriverGetVersion(&value), "cuDriverGetVersion");
  return value;
}

int deviceCount() {
  int count = 0;
  ATTN_CU_CHECK(cuDeviceGetCount, &count);
  return count;
}

CUcontext ensureContext(int device) {
  CUcontext current = nullptr;
  ATTN_CU_CHECK(cuCtxGetCurrent, &current);
  if (current)
    return current;

  // Retain each primary context once for the life of the process; later
  // threads only make it current.
  static std::mutex mutex;
  static std::map<int, CUcontext> retained;
  CUcontext primary = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = retained.find(device);
    if (it != retained.end()) {
      primary = it->second;
    } else {
      CUdevice handle;
      std::string what = fmt::format("device {}", device);
      ATTN_CU_CHECK_CTX(what, cuDeviceGet, &handle, device);
      ATTN_CU_CHECK_CTX(what, cuDevicePrimaryCtxRetain, &primary, handle);
      retained.emplace(device, primary);
    }
  }
  ATTN_CU_CHECK(cuCtxSetCurrent, primary);
  return primary;
}

DeviceInfo queryDevice(int device) {
  std::string what = fmt::format("device {}", device);
  CUdevice handle;
  ATTN_CU_CHECK_CTX(what, cuDeviceGet, &handle, device);

  DeviceInfo info;
  info.ordinal = device;
  char name[256] = {};
  ATTN_CU_CHECK_CTX(what, cuDeviceGetName, name, sizeof(name) - 1, handle);
  info.name = name;

  auto attribute = [&](CUdevice_attribute attr, const char *attrName) {
    int value = 0;
    ATTN_CU_CHECK_CTX(what + ", " + attrName, cuDeviceGetAttribute, &value,
                      attr, handle);
    return value;
  };
  info.computeCapabilityMajor =
      attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "cc major");
  info.computeCapabilityMinor =
      attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "cc minor");
  info.multiprocessorCount =
      attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "SM count");
  info.maxSharedMemoryPerBlockOptin =
      attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                "max shared memory per block (opt-in)");
  return info;
}

bool isDevicePointer(const void *ptr) { return queryPointer(ptr).device; }

PointerInfo queryPointer(const void *ptr) {
  PointerInfo info;
  if (!Driver::available() || !ptr)
    return info;
  unsigned int memoryType = 0;
  unsigned int managed = 0;
  int ordinal = -1;
  CUdeviceptr rangeStart = 0;
  size_t rangeBytes = 0;
  // One call for all attributes: this runs before every launch.
  CUpointer_attribute attributes[] = {
      CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
      CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
      CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void *values[] = {&memoryType, &managed, &ordinal, &rangeStart, &rangeBytes};
  CUresult result = Driver::get().api().cuPointerGetAttributes(
      sizeof(attributes) / sizeof(attributes[0]), attributes, values,
      reinterpret_cast<CUdeviceptr>(ptr));
  // Unknown host memory either fails or reports memory type 0.
  if (result != CUDA_SUCCESS)
    return info;
  info.managed = managed != 0;
  info.device = memoryType == CU_MEMORYTYPE_DEVICE ||
                memoryType == CU_MEMORYTYPE_UNIFIED || info.managed;
  info.deviceOrdinal = ordinal;
  info.rangeStart = static_cast<uintptr_t>(rangeStart);
  info.rangeBytes = rangeBytes;
  return info;
}

int currentDevice() {
  ensureContext();
  CUdevice device = 0;
  ATTN_CU_CHECK(cuCtxGetDevice, &device);
  // Device handles are the ordinals cuDeviceGet was given.
  return static_cast<int>(device);
}

Event::Event() {
  ensureContext();
  ATTN_CU_CHECK(cuEventCreate, &event, CU_EVENT_DEFAULT);
}

Event::~Event() {
  // Only non-null if creation succeeded, so the driver is usable here.
  if (event)
    Driver::get().api().cuEventDestroy(event);
}

Event::Event(Event &&other) noexcept
    : event(std::exchange(other.event, nullptr)) {}

Event &Event::operator=(Event &&other) noexcept {
  if (this != &other) {
    if (event)
      Driver::get().api().cuEventDestroy(event);
    event = std::exchange(other.event, nullptr);
  }
  return *this;
}

void Event::record(CUstream stream) {
  ATTN_CU_CHECK(cuEventRecord, event, stream);
}

void Event::synchronize() { ATTN_CU_CHECK(cuEventSynchronize, event); }

float Event::elapsedMs(const Event &start, Event &end) {
  end.synchronize();
  float ms = 0.0f;
  ATTN_CU_CHECK(cuEventElapsedTime, &ms, start.event, end.event);
  return ms;
}

} // namespace attn
