// A compiled spec loaded into the current context, shared by the GPU tests:
// one module per spec text and tile override, compiled and loaded once for
// the whole run; and the captures of a problem as the reference reads them.
#ifndef ATTN_TESTS_GPU_LOADEDKERNEL_H
#define ATTN_TESTS_GPU_LOADEDKERNEL_H

#include "AttnHarness.h"
#include "attn/Compiler/Compiler.h"

#include <map>
#include <string>

namespace attn::gputest {

struct LoadedKernel {
  CompiledKernel compiled;
  Module module;
  KernelFunction function;
};

inline LoadedKernel &loadKernel(const std::string &spec, const CompileOptions &options = {}) {
  static std::map<std::string, LoadedKernel> cache;
  std::string key = options.tileOverride + "\n" + spec;
  auto found = cache.find(key);
  if (found != cache.end())
    return found->second;
  ensureContext();
  LoadedKernel loaded;
  loaded.compiled = compileSpec(spec, "test.mlir", options);
  loaded.module = Module::loadPtx(
      std::string_view(loaded.compiled.binary.data(), loaded.compiled.binary.size()));
  loaded.function = loaded.module.function(loaded.compiled.launch.kernelName);
  return cache.emplace(key, std::move(loaded)).first->second;
}

/// The host copies of a problem's captures, as the reference reads them.
inline std::vector<HostCapture> hostCaptures(const harness::ForwardProblem &data) {
  std::vector<HostCapture> host;
  for (const harness::HostDeviceCapture &capture : data.captures)
    host.push_back(HostCapture{capture.hostData(), capture.view.dtype, capture.view.shape});
  return host;
}

} // namespace attn::gputest

#endif // ATTN_TESTS_GPU_LOADEDKERNEL_H
