//===- run_precompiled.cpp - A kernel compiled ahead of time --------------===//
//
// Links attnc::runtime only. Loads the PTX and launch metadata that
// `attnc --emit=ptx` and `--emit=metadata` wrote and checks launch arguments
// against them; neither step needs a GPU.
//
//   run_precompiled KERNEL.ptx KERNEL.meta
//
//===----------------------------------------------------------------------===//

#include "attn/runtime/Error.h"
#include "attn/runtime/Kernel.h"

#include <cstdint>
#include <cstdio>

int main(int argc, char **argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s KERNEL.ptx KERNEL.meta\n", argv[0]);
    return 2;
  }
  try {
    attn::Kernel kernel = attn::Kernel::fromFiles(argv[1], argv[2]);
    const attn::AttnLaunchConfig &config = kernel.launchConfig();
    std::printf("kernel: head_dim %d, q_heads %d, kv_heads %d, %d threads\n", config.headDim,
                config.qHeads, config.kvHeads, config.threadsPerBlock);

    // validateForwardArgs checks shapes and alignment without the driver;
    // the (made-up, aligned) addresses are never dereferenced.
    char *base = reinterpret_cast<char *>(uintptr_t(1) << 40);
    const int64_t batch = 2, seqlen = 1024, slot = int64_t(1) << 30;
    attn::AttnForwardArgs args;
    args.q = attn::contiguousBSHD(base, config.dtype, batch, seqlen, config.qHeads,
                                  config.headDim);
    args.k = attn::contiguousBSHD(base + slot, config.dtype, batch, seqlen, config.kvHeads,
                                  config.headDim);
    args.v = attn::contiguousBSHD(base + 2 * slot, config.dtype, batch, seqlen,
                                  config.kvHeads, config.headDim);
    args.o = attn::contiguousBSHD(base + 3 * slot, config.dtype, batch, seqlen, config.qHeads,
                                  config.headDim);
    args.lse = reinterpret_cast<float *>(base + 4 * slot);
    attn::validateForwardArgs(config, args);
    std::printf("arguments: accepted\n");

    args.k.shape[2] = config.kvHeads + 1;
    try {
      attn::validateForwardArgs(config, args);
      std::printf("arguments with a wrong k: accepted\n");
      return 1;
    } catch (const attn::Error &error) {
      std::printf("arguments with a wrong k: rejected (%s)\n", error.what());
    }
  } catch (const attn::Error &error) {
    std::fprintf(stderr, "run_precompiled: %s\n", error.what());
    return 1;
  }
  return 0;
}
