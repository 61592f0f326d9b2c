//===- Driver.h - Run-time loaded CUDA driver API ---------------*- C++ -*-===//
//
// The runtime does not link libcuda: it dlopens libcuda.so.1 on first use so
// that everything builds, and the unit tests run, on machines without a GPU.
// cuda.h is included only for its types and for the #defines that map API
// names onto versioned symbols (cuMemAlloc -> cuMemAlloc_v2); the function
// table below is declared through those macros so that each member has the
// versioned symbol's name and signature.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_RUNTIME_DRIVER_H
#define ATTN_RUNTIME_DRIVER_H

#include "attn/runtime/Error.h"

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

// Per-thread default stream builds rename symbols to *_ptsz/_ptds; the table
// below assumes the legacy names.
#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
#error "attn runtime: CUDA_API_PER_THREAD_DEFAULT_STREAM is not supported"
#endif

/// Every driver entry point the runtime uses. Each name is macro-expanded by
/// cuda.h before use, so the table holds e.g. cuMemAlloc_v2.
#define ATTN_CUDA_DRIVER_FUNCTIONS(X)                                          \
  X(cuInit)                                                                    \
  X(cuDriverGetVersion)                                                        \
  X(cuGetErrorString)                                                          \
  X(cuGetErrorName)                                                            \
  X(cuDeviceGetCount)                                                          \
  X(cuDeviceGet)                                                               \
  X(cuDeviceGetAttribute)                                                      \
  X(cuDeviceGetName)                                                           \
  X(cuDevicePrimaryCtxRetain)                                                  \
  X(cuCtxGetCurrent)                                                           \
  X(cuCtxSetCurrent)                                                           \
  X(cuCtxGetDevice)                                                            \
  X(cuCtxSynchronize)                                                          \
  X(cuModuleLoadDataEx)                                                        \
  X(cuModuleUnload)                                                            \
  X(cuModuleGetFunction)                                                       \
  X(cuFuncSetAttribute)                                                        \
  X(cuFuncGetAttribute)                                                        \
  X(cuLaunchKernel)                                                            \
  X(cuTensorMapEncodeTiled)                                                    \
  X(cuMemAlloc)                                                                \
  X(cuMemFree)                                                                 \
  X(cuMemAllocHost)                                                            \
  X(cuMemFreeHost)                                                             \
  X(cuMemcpyHtoD)                                                              \
  X(cuMemcpyDtoH)                                                              \
  X(cuMemsetD8)                                                                \
  X(cuMemsetD32)                                                               \
  X(cuMemsetD32Async)                                                          \
  X(cuStreamCreate)                                                            \
  X(cuStreamDestroy)                                                           \
  X(cuStreamSynchronize)                                                       \
  X(cuStreamWaitEvent)                                                         \
  X(cuStreamIsCapturing)                                                       \
  X(cuStreamBeginCapture)                                                      \
  X(cuStreamEndCapture)                                                        \
  X(cuThreadExchangeStreamCaptureMode)                                         \
  X(cuGraphInstantiate)                                                        \
  X(cuGraphLaunch)                                                             \
  X(cuGraphDestroy)                                                            \
  X(cuGraphExecDestroy)                                                        \
  X(cuEventCreate)                                                             \
  X(cuEventRecord)                                                             \
  X(cuEventSynchronize)                                                        \
  X(cuEventQuery)                                                              \
  X(cuEventElapsedTime)                                                        \
  X(cuEventDestroy)                                                            \
  X(cuPointerGetAttribute)                                                      \
  X(cuPointerGetAttributes)

/// Entry points the runtime uses where the driver has them (null where it
/// does not): listing a module's kernels (CUDA 12.4), launches with
/// attributes (12.0).
#define ATTN_CUDA_DRIVER_OPTIONAL_FUNCTIONS(X)                                 \
  X(cuLaunchKernelEx)                                                          \
  X(cuModuleGetFunctionCount)                                                  \
  X(cuModuleEnumerateFunctions)                                                \
  X(cuFuncGetName)

namespace attn {

/// Function pointers resolved from libcuda.so.1. Use through ATTN_CU_CHECK or
/// Driver::get().api().cuXxx(...) with the unversioned API name.
struct DriverApi {
#define ATTN_DECLARE_DRIVER_FN(fn) decltype(&::fn) fn = nullptr;
  ATTN_CUDA_DRIVER_FUNCTIONS(ATTN_DECLARE_DRIVER_FN)
  ATTN_CUDA_DRIVER_OPTIONAL_FUNCTIONS(ATTN_DECLARE_DRIVER_FN)
#undef ATTN_DECLARE_DRIVER_FN
};

/// Process-wide handle on the CUDA driver. Loading and cuInit happen once,
/// on the first get(), and are thread safe. Failures are remembered, not
/// thrown, so that available() can answer; every other use then throws.
class Driver {
public:
  /// The singleton. Never throws.
  static Driver &get();

  /// True if libcuda.so.1 was loaded, all symbols resolved and cuInit(0)
  /// succeeded. Never throws.
  static bool available();

  /// Why the driver is unusable (empty when available).
  const std::string &unavailableReason() const { return reason; }

  /// The function table; throws attn::Error if the driver is unusable.
  const DriverApi &api() const;

  /// Throws attn::Error("<call> failed: NAME (description)") unless
  /// `result` is CUDA_SUCCESS. `context` is appended when non-empty.
  void check(CUresult result, const char *call,
             std::string_view context = {}) const;

  /// "CUDA_ERROR_NAME (description)" for a result code.
  std::string describe(CUresult result) const;

  /// The driver's CUDA version (e.g. 13000); throws if unusable.
  int version() const;

  Driver(const Driver &) = delete;
  Driver &operator=(const Driver &) = delete;

private:
  Driver();
  void load();

  DriverApi table;
  std::string reason;
  bool usable = false;
};

/// Calls a driver function by its API name and throws attn::Error naming the
/// call on failure, e.g. ATTN_CU_CHECK(cuMemAlloc, &ptr, bytes).
#define ATTN_CU_CHECK(fn, ...)                                                 \
  ::attn::Driver::get().check(::attn::Driver::get().api().fn(__VA_ARGS__), #fn)

/// Like ATTN_CU_CHECK, with extra text for the message (what was being done).
#define ATTN_CU_CHECK_CTX(context, fn, ...)                                    \
  ::attn::Driver::get().check(::attn::Driver::get().api().fn(__VA_ARGS__),     \
                              #fn, context)

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int computeCapabilityMajor = 0;
  int computeCapabilityMinor = 0;
  int multiprocessorCount = 0;
  /// Opt-in maximum of dynamic shared memory per block, in bytes.
  int maxSharedMemoryPerBlockOptin = 0;
};

/// Number of CUDA devices; throws if the driver is unusable.
int deviceCount();

/// Makes the primary context of `device` current on this thread unless some
/// context already is, and returns the current context.
CUcontext ensureContext(int device = 0);

/// Name and limits of a device.
DeviceInfo queryDevice(int device = 0);

/// True if `ptr` is memory the device can address (device or managed
/// allocation). Never throws; false if the driver is unusable.
bool isDevicePointer(const void *ptr);

/// What the driver knows about an address.
struct PointerInfo {
  /// Device or managed memory (false for host memory the driver does not
  /// know, and for pinned host memory).
  bool device = false;
  bool managed = false;
  /// The device the memory belongs to, or -1 if unknown.
  int deviceOrdinal = -1;
  /// The allocation holding `ptr` ([rangeStart, rangeStart + rangeBytes)),
  /// both 0 if unknown.
  uintptr_t rangeStart = 0;
  size_t rangeBytes = 0;
};

/// Never throws; a default PointerInfo if the driver is unusable or does not
/// know `ptr`.
PointerInfo queryPointer(const void *ptr);

/// The ordinal of the current context's device; makes device 0's primary
/// context current if none is.
int currentDevice();

/// RAII CUDA event, for timing work on a stream.
class Event {
public:
  Event();
  ~Event();
  Event(Event &&other) noexcept;
  Event &operator=(Event &&other) noexcept;
  Event(const Event &) = delete;
  Event &operator=(const Event &) = delete;

  void record(CUstream stream = nullptr);
  void synchronize();
  CUevent get() const { return event; }

  /// Milliseconds between two recorded events (waits for `end`).
  static float elapsedMs(const Event &start, Event &end);

private:
  CUevent event = nullptr;
};

} // namespace attn

#endif // ATTN_RUNTIME_DRIVER_H
