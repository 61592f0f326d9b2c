//===- LoadedBackward.h - Backward modules for the GPU tests ---*- C++ -*-===//
//
// A spec's backward module compiled and loaded once per test run, and the
// gradient checks the backward tests share.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_TESTS_GPU_LOADEDBACKWARD_H
#define ATTN_TESTS_GPU_LOADEDBACKWARD_H

#include <catch2/catch.hpp>

#include "BackwardHarness.h"
#include "attn/Compiler/Compiler.h"
#include "attn/runtime/BackwardLaunch.h"
#include "attn/runtime/Module.h"
#include "LoadedKernel.h"

#include <map>
#include <string>

namespace attn::gputest {

/// A spec's backward module, compiled and loaded once per run.
struct LoadedBackward {
  CompiledKernel compiled;
  Module module;
  BackwardFunctions functions;
};

inline LoadedBackward &loadBackward(const std::string &spec, const CompileOptions &options = {}) {
  static std::map<std::string, LoadedBackward> cache;
  const std::string key = options.tileOverride + "\n" + spec;
  auto found = cache.find(key);
  if (found != cache.end())
    return found->second;
  ensureContext();
  LoadedBackward loaded;
  loaded.compiled = compileBackwardSpec(spec, "test.mlir", options);
  loaded.module = Module::loadPtx(
      std::string_view(loaded.compiled.binary.data(), loaded.compiled.binary.size()));
  loaded.functions = loadBackwardFunctions(loaded.module, loaded.compiled.launch);
  return cache.emplace(key, std::move(loaded)).first->second;
}

/// Every gradient within the tolerance, finite, and zero on the rows no
/// pair reaches.
inline void checkGradients(const harness::GradientComparison &result) {
  for (auto [error, name] : {std::make_pair(&result.dq, "dq"), std::make_pair(&result.dk, "dk"),
                             std::make_pair(&result.dv, "dv")}) {
    INFO(name << ": rel-L2 " << error->relativeL2 << ", max error / RMS "
              << error->maxErrorOverRms << "; first violation: " << error->firstViolation);
    CHECK(error->nonFinite == 0);
    CHECK(error->zeroRowMismatches == 0);
    CHECK(error->toleranceViolations == 0);
  }
}

} // namespace attn::gputest

#endif // ATTN_TESTS_GPU_LOADEDBACKWARD_H
