//===- Module.cpp - Loaded GPU modules and kernel functions ---------------===//

#include "attn/runtime/Module.h"

#include <fmt/format.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace attn {

void KernelFunction::setMaxDynamicSharedMemory(int bytes) {
  if (bytes == maxDynamicSharedMemory)
    return;
  ATTN_CU_CHECK_CTX(fmt::format("{}: max dynamic shared memory {} bytes", kernelName, bytes),
                    cuFuncSetAttribute, function,
                    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes);
  maxDynamicSharedMemory = bytes;
}

int KernelFunction::attribute(CUfunction_attribute attr) const {
  int value = 0;
  ATTN_CU_CHECK_CTX(kernelName, cuFuncGetAttribute, &value, attr, function);
  return value;
}

void KernelFunction::launch(Dim3 grid, Dim3 block, int sharedMemoryBytes,
                            CUstream stream, void **args) {
  launchWith(/*dependent=*/false, grid, block, sharedMemoryBytes, stream, args);
}

void KernelFunction::launchDependent(Dim3 grid, Dim3 block, int sharedMemoryBytes,
                                     CUstream stream, void **args) {
  // CUDA graphs take programmatic dependencies from driver 12.3 on.
  static const bool dependentLaunches =
      Driver::get().api().cuLaunchKernelEx && Driver::get().version() >= 12030;
  launchWith(dependentLaunches, grid, block, sharedMemoryBytes, stream, args);
}

void KernelFunction::launchWith(bool dependent, Dim3 grid, Dim3 block, int sharedMemoryBytes,
                                CUstream stream, void **args) {
  if (!function)
    throw Error("launch of an empty KernelFunction");
  if (sharedMemoryBytes < 0)
    throw Error(kernelName + ": negative shared memory size");
  const DriverApi &api = Driver::get().api();
  CUresult result;
  const char *call;
  if (dependent) {
    CUlaunchAttribute attribute{};
    attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attribute.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig config{};
    config.gridDimX = grid.x;
    config.gridDimY = grid.y;
    config.gridDimZ = grid.z;
    config.blockDimX = block.x;
    config.blockDimY = block.y;
    config.blockDimZ = block.z;
    config.sharedMemBytes = static_cast<unsigned>(sharedMemoryBytes);
    config.hStream = stream;
    config.attrs = &attribute;
    config.numAttrs = 1;
    result = api.cuLaunchKernelEx(&config, function, args, nullptr);
    call = "cuLaunchKernelEx";
  } else {
    result = api.cuLaunchKernel(function, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                static_cast<unsigned>(sharedMemoryBytes), stream, args, nullptr);
    call = "cuLaunchKernel";
  }
  // The launch's description only on failure: it is on every call's path.
  if (result != CUDA_SUCCESS)
    Driver::get().check(result, call,
                        fmt::format("{}, grid ({},{},{}), block ({},{},{}), {} bytes shared memory",
                                    kernelName, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                    sharedMemoryBytes));
}

Module Module::loadPtx(std::string_view ptx) {
  // The driver needs a NUL-terminated image.
  std::string text(ptx);
  return loadImage(text.c_str(), "PTX");
}

Module Module::loadCubin(const void *image, size_t bytes) {
  if (!image || bytes == 0)
    throw Error("loadCubin: empty image");
  return loadImage(image, "cubin");
}

Module Module::loadImage(const void *image, const char *what) {
  ensureContext();
  // The JIT writes its diagnostics here; without it a bad PTX only says
  // CUDA_ERROR_INVALID_PTX.
  std::vector<char> errorLog(16384, '\0');
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER,
                            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *values[] = {errorLog.data(), reinterpret_cast<void *>(
                                         static_cast<uintptr_t>(
                                             errorLog.size() - 1))};
  CUmodule module = nullptr;
  CUresult result = Driver::get().api().cuModuleLoadDataEx(
      &module, image, 2, options, values);
  if (result != CUDA_SUCCESS) {
    std::string message = std::string("cuModuleLoadDataEx failed (loading ") +
                          what + "): " + Driver::get().describe(result);
    if (errorLog[0] != '\0')
      message += "\nJIT error log:\n" + std::string(errorLog.data());
    throw Error(message);
  }
  return Module(module);
}

Module::~Module() { reset(); }

Module::Module(Module &&other) noexcept
    : module(std::exchange(other.module, nullptr)) {}

Module &Module::operator=(Module &&other) noexcept {
  if (this != &other) {
    reset();
    module = std::exchange(other.module, nullptr);
  }
  return *this;
}

void Module::reset() {
  // Destructors must not throw; an unload failure leaks at worst.
  if (module)
    Driver::get().api().cuModuleUnload(module);
  module = nullptr;
}

KernelFunction Module::function(const std::string &name) const {
  if (!module)
    throw Error("function '" + name + "' requested from an empty Module");
  CUfunction function = nullptr;
  ATTN_CU_CHECK_CTX("kernel '" + name + "'", cuModuleGetFunction, &function,
                    module, name.c_str());
  return KernelFunction(function, name);
}

std::optional<KernelFunction> Module::findFunction(const std::string &name) const {
  if (!module)
    throw Error("function '" + name + "' looked for in an empty Module");
  const DriverApi &api = Driver::get().api();
  // The module's kernels are listed by name rather than asked for and
  // refused: a refused cuModuleGetFunction is an API error that
  // compute-sanitizer reports on every launch that looks. Drivers before
  // CUDA 12.4 cannot list them and are asked.
  if (!api.cuModuleGetFunctionCount || !api.cuModuleEnumerateFunctions || !api.cuFuncGetName) {
    CUfunction function = nullptr;
    const CUresult result = api.cuModuleGetFunction(&function, module, name.c_str());
    if (result == CUDA_ERROR_NOT_FOUND)
      return std::nullopt;
    Driver::get().check(result, "cuModuleGetFunction", "kernel '" + name + "'");
    return KernelFunction(function, name);
  }
  unsigned count = 0;
  ATTN_CU_CHECK_CTX("kernels of a module", cuModuleGetFunctionCount, &count, module);
  if (count == 0)
    return std::nullopt;
  std::vector<CUfunction> functions(count);
  ATTN_CU_CHECK_CTX("kernels of a module", cuModuleEnumerateFunctions, functions.data(), count,
                    module);
  for (CUfunction listed : functions) {
    const char *listedName = nullptr;
    ATTN_CU_CHECK_CTX("a kernel's name", cuFuncGetName, &listedName, listed);
    if (listedName && name == listedName)
      return function(name); // a handle that is loaded, whatever the loading mode
  }
  return std::nullopt;
}

} // namespace attn
