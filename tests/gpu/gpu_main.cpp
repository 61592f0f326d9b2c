// Main of the GPU tests: on a machine without a usable sm_90 GPU it says why
// and exits with 77, which CTest reports as skipped.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "AttnHarness.h"

#include <cstdio>

int main(int argc, char **argv) {
  std::string reason = attn::harness::gpuUnavailableReason();
  if (!reason.empty()) {
    std::printf("skipped: the GPU tests need an sm_90 GPU: %s\n", reason.c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
