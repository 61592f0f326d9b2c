//===- FuzzSpec.cpp - Fuzz the spec front end and the pass pipeline -------===//
//
// Feeds arbitrary bytes through parse -> verify -> attn-tile ->
// attn-plan-smem -> attn-classify-blocks -> attn-lower-mods ->
// attn-emit-cuda (NVRTC is left out for speed). A spec is either compiled
// or rejected with diagnostics; a crash, an assertion, a sanitizer report or
// a hang is a finding.
//
// Built with clang and -fsanitize=fuzzer this is a libFuzzer target
// (tools/fuzz.sh). Built without it, FuzzReplayMain.cpp's main() replays
// the files and directories named on its command line through the same
// entry point: the test suite runs the corpus and every kept finding so.
//
//===----------------------------------------------------------------------===//

#include "attn/Compiler/Compiler.h"
#include "attn/runtime/Error.h"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  try {
    std::vector<std::string> sources = attn::emitCudaSources(text, "fuzz.mlir");
    // Every kernel that got through the pipeline has a translation unit.
    for (const std::string &source : sources)
      if (source.find("attn_fwd_kernel") == std::string::npos)
        __builtin_trap();
  } catch (const attn::Error &) {
    // Rejected with diagnostics: the expected outcome for most inputs.
  }
  return 0;
}
