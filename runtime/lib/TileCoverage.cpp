//===- TileCoverage.cpp - Tile coverage and key bits prepasses ------------===//

#include "attn/runtime/AttentionLaunch.h"

#include "LaunchChecks.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

namespace attn {

using namespace detail;

namespace {
/// The tile coverage's extents: [batch x q_heads][query blocks][key tiles].
struct TileCoverageShape {
  uint64_t batchHeads, queryBlocks, keyTiles;
  uint64_t bytes() const { return batchHeads * queryBlocks * keyTiles; }

  /// The grid of a kernel with a block per tile (key tiles, query blocks,
  /// batch x heads); throws attn::Error naming "q" past the grid's limits.
  Dim3 tileGrid(const std::string &kernel) const {
    if (batchHeads > 65535 || queryBlocks > 65535)
      fail("q", fmt::format("the {} grid takes at most 65535 (batch x heads) and 65535 query "
                            "blocks, got {} and {}",
                            kernel, batchHeads, queryBlocks));
    return Dim3{static_cast<unsigned>(keyTiles), static_cast<unsigned>(queryBlocks),
                static_cast<unsigned>(batchHeads)};
  }
};

TileCoverageShape tileCoverageShape(const AttnLaunchConfig &config, const AttnForwardArgs &args) {
  LogicalShape shape = logicalShape(args);
  return {uint64_t(shape.batch) * uint64_t(config.qHeads),
          (uint64_t(shape.seqlenQ) + config.blockM - 1) / config.blockM,
          (uint64_t(shape.seqlenK) + config.blockN - 1) / config.blockN};
}
} // namespace

uint64_t tileCoverageBytes(const AttnLaunchConfig &config, const AttnForwardArgs &args) {
  return tileCoverageShape(config, args).bytes();
}

uint64_t tileKeyBitsSlotBytes(const AttnLaunchConfig &config, const AttnForwardArgs &args) {
  return uint64_t(attn_abi::tileKeyBitsOffset(int64_t(tileCoverageBytes(config, args))));
}

DeviceBuffer buildTileCoverage(const Module &module, const AttnLaunchConfig &config,
                               const AttnForwardArgs &args, CUstream stream) {
  AttnForwardArgs checked = args;
  checked.tileCoverage = nullptr;
  checked.tileKeyBits = nullptr;
  validateForwardArgs(config, checked);
  TileCoverageShape shape = tileCoverageShape(config, checked);
  DeviceBuffer coverage(std::max<uint64_t>(shape.bytes(), 1));
  if (shape.bytes() == 0)
    return coverage;
  validateDevicePointers(config, checked);
  Dim3 grid = shape.tileGrid("tile coverage");
  attn_abi::AttnFwdParams params = encodeForwardParams(config, checked);
  params.tile_coverage = static_cast<unsigned char *>(coverage.data());
  KernelFunction kernel = module.function(ATTN_TILE_COVERAGE_KERNEL_NAME);
  Dim3 block{ATTN_TILE_COVERAGE_THREADS, 1, 1};
  void *kernelArgs[] = {&params};
  kernel.launch(grid, block, 0, stream, kernelArgs);
  return coverage;
}

DeviceBuffer buildTileKeyBits(const Module &module, const AttnLaunchConfig &config,
                              const AttnForwardArgs &args, CUstream stream) {
  AttnForwardArgs checked = args;
  checked.tileKeyBits = nullptr;
  if (!checked.tileCoverage)
    fail("tileCoverage", "the key bits store the partial tiles of a tile coverage: pass the one "
                         "from buildTileCoverage");
  validateForwardArgs(config, checked);
  TileCoverageShape shape = tileCoverageShape(config, checked);
  const uint64_t slotBytes = tileKeyBitsSlotBytes(config, checked);
  if (shape.bytes() == 0)
    return DeviceBuffer(std::max<uint64_t>(slotBytes, 1));
  validateDevicePointers(config, checked);
  if (shape.bytes() > uint64_t(INT_MAX))
    fail("q", fmt::format("the key bits number at most {} tiles, got {}", INT_MAX,
                          shape.bytes()));
  Dim3 grid = shape.tileGrid("key bits");
  // Looked up before anything launches: a failed lookup must not free a
  // buffer under a running kernel.
  KernelFunction slotKernel = module.function(ATTN_TILE_SLOT_KERNEL_NAME);
  KernelFunction bitsKernel = module.function(ATTN_TILE_KEY_BITS_KERNEL_NAME);
  const unsigned char *coverage = checked.tileCoverage;
  long long tiles = static_cast<long long>(shape.bytes());
  auto numberPartialTiles = [&](int *slots, int *count) {
    void *slotArgs[] = {&coverage, &tiles, &slots, &count};
    slotKernel.launch(Dim3{1, 1, 1}, Dim3{ATTN_TILE_SLOT_THREADS, 1, 1}, 0, stream, slotArgs);
  };
  // Count first: the partial tiles size the buffer.
  DeviceBuffer counter(sizeof(int32_t));
  numberPartialTiles(nullptr, static_cast<int *>(counter.data()));
  ATTN_CU_CHECK(cuStreamSynchronize, stream);
  const int32_t partialTiles = counter.download<int32_t>().at(0);
  DeviceBuffer bits(slotBytes + uint64_t(partialTiles) * uint64_t(attn_abi::tileKeyBitsPerTile(
                                                              config.blockM, config.blockN)));
  numberPartialTiles(static_cast<int *>(bits.data()), nullptr);
  // The key bits kernel writes the words through the parameters the forward
  // kernel reads them by.
  checked.tileKeyBits = bits.data();
  attn_abi::AttnFwdParams params = encodeForwardParams(config, checked);
  void *kernelArgs[] = {&params};
  bitsKernel.launch(grid, Dim3{ATTN_TILE_COVERAGE_THREADS, 1, 1}, 0, stream, kernelArgs);
  return bits;
}

} // namespace attn
