//===- FuzzSpec.cpp - Fuzz the spec front end and the pass pipeline -------===//
//
// Feeds arbitrary bytes through parse -> verify -> attn-tile ->
// attn-plan-smem -> attn-classify-blocks -> attn-lower-mods ->
// attn-emit-cuda (NVRTC is left out for speed). A spec is either compiled
// or rejected with diagnostics; a crash, an assertion, a sanitizer report or
// a hang is a finding.
//
// Built with clang and -fsanitize=fuzzer this is a libFuzzer target
// (tools/fuzz.sh). Built without it (ATTNC_FUZZ_REPLAY), main() replays
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

#ifdef ATTNC_FUZZ_REPLAY
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

int main(int argc, char **argv) {
  std::vector<std::filesystem::path> inputs;
  for (int i = 1; i < argc; ++i) {
    std::filesystem::path path(argv[i]);
    if (std::filesystem::is_directory(path)) {
      for (const auto &entry : std::filesystem::recursive_directory_iterator(path))
        if (entry.is_regular_file())
          inputs.push_back(entry.path());
    } else {
      inputs.push_back(path);
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
    return 2;
  }
  for (const std::filesystem::path &input : inputs) {
    std::ifstream file(input, std::ios::binary);
    if (!file) {
      std::fprintf(stderr, "cannot read %s\n", input.c_str());
      return 2;
    }
    std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size());
  }
  std::printf("replayed %zu inputs without a crash\n", inputs.size());
  return 0;
}
#endif
