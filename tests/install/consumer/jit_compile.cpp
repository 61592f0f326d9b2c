//===- jit_compile.cpp - A spec compiled at run time ----------------------===//
//
// Links attnc::compiler. Compiles a spec file to PTX with attn::Compiler (no
// GPU needed) and checks that the PTX uses Hopper's warpgroup MMA.
//
//   jit_compile SPEC.mlir
//
//===----------------------------------------------------------------------===//

#include "attn/Compiler/Jit.h"
#include "attn/runtime/Error.h"

#include <cstdio>
#include <fstream>
#include <sstream>

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SPEC.mlir\n", argv[0]);
    return 2;
  }
  std::ifstream file(argv[1]);
  std::stringstream text;
  text << file.rdbuf();
  if (!file) {
    std::fprintf(stderr, "jit_compile: cannot read %s\n", argv[1]);
    return 1;
  }
  try {
    attn::JitOptions options;
    options.tuningDatabase = "";                   // attn-tile's heuristic plan
    options.diskCache = attn::DiskCacheOptions{};  // no disk cache: NVRTC compiles
    attn::Compiler compiler(options);
    attn::Kernel kernel = compiler.compile(text.str(), argv[1]);
    const std::string &ptx = kernel.image().ptx;
    bool wgmma = ptx.find("wgmma.mma_async") != std::string::npos;
    std::printf("%s: %zu bytes of PTX %s wgmma.mma_async, %d NVRTC compile(s)\n",
                kernel.name().c_str(), ptx.size(), wgmma ? "with" : "without",
                int(compiler.stats().compiles));
    return wgmma ? 0 : 1;
  } catch (const attn::Error &error) {
    std::fprintf(stderr, "jit_compile: %s\n", error.what());
    return 1;
  }
}
