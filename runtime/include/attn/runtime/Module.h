//===- Module.h - Loaded GPU modules and kernel functions -------*- C++ -*-===//
#ifndef ATTN_RUNTIME_MODULE_H
#define ATTN_RUNTIME_MODULE_H

#include "attn/runtime/Driver.h"

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace attn {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

/// A kernel entry point. Does not own anything: it is valid only while the
/// Module it came from is alive.
class KernelFunction {
public:
  KernelFunction() = default;
  KernelFunction(CUfunction fn, std::string name)
      : function(fn), kernelName(std::move(name)) {}

  CUfunction get() const { return function; }
  const std::string &name() const { return kernelName; }

  /// Allows launches with up to `bytes` of dynamic shared memory (needed
  /// above the 48 KiB default). Repeating the last value is free, so it can
  /// be called before every launch.
  void setMaxDynamicSharedMemory(int bytes);

  /// Reads a function attribute (registers, static shared memory, ...).
  int attribute(CUfunction_attribute attr) const;

  /// Launches on `stream`; `args` is the usual array of pointers to each
  /// kernel parameter.
  void launch(Dim3 grid, Dim3 block, int sharedMemoryBytes, CUstream stream,
              void **args);

  /// Launches on `stream` as a programmatic dependent launch: its blocks may
  /// start once every block of the kernel before it in the stream has
  /// signalled (griddepcontrol.launch_dependents) or exited, so the launch's
  /// latency hides behind that kernel's tail. The kernel must wait
  /// (griddepcontrol.wait) before it reads what its predecessor writes.
  /// An ordinary launch where the driver lacks cuLaunchKernelEx or is older
  /// than CUDA 12.3 (CUDA graphs capture the dependency from 12.3).
  void launchDependent(Dim3 grid, Dim3 block, int sharedMemoryBytes, CUstream stream,
                       void **args);

private:
  void launchWith(bool dependent, Dim3 grid, Dim3 block, int sharedMemoryBytes,
                  CUstream stream, void **args);

  CUfunction function = nullptr;
  std::string kernelName;
  int maxDynamicSharedMemory = -1; // Last value set, to skip repeats.
};

/// RAII owner of a CUmodule, loaded into the current context (the device's
/// primary context is made current if none is).
class Module {
public:
  /// JIT-compiles PTX text. On failure the message includes the JIT log.
  static Module loadPtx(std::string_view ptx);
  /// Loads a cubin (or fatbin) image.
  static Module loadCubin(const void *image, size_t bytes);

  Module() = default;
  ~Module();
  Module(Module &&other) noexcept;
  Module &operator=(Module &&other) noexcept;
  Module(const Module &) = delete;
  Module &operator=(const Module &) = delete;

  /// Looks up a kernel by its (mangled or extern "C") name.
  KernelFunction function(const std::string &name) const;
  /// The kernel of that name, or nothing where the module has none.
  std::optional<KernelFunction> findFunction(const std::string &name) const;

  CUmodule get() const { return module; }

private:
  explicit Module(CUmodule handle) : module(handle) {}
  static Module loadImage(const void *image, const char *what);
  void reset();

  CUmodule module = nullptr;
};

} // namespace attn

#endif // ATTN_RUNTIME_MODULE_H
