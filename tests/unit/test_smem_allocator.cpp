// The shared-memory allocator (attn-plan-smem's, MLIR-free): first fit
// with alignment, bytes shared only between buffers whose lifetimes do not
// overlap, and the alias it records, on hand-placed cases; then the
// invariants over the kernels' own requests (every plan the heuristic picks
// for a few problems): aligned offsets, no two live buffers sharing a byte,
// and a total that covers every buffer.
#include "attn/Compiler/TileConstraints.h"
#include "attn/Transforms/SmemAllocator.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace attn;

namespace {

const SmemPlacement &placed(const SmemLayout &layout, const std::string &name) {
  for (const SmemPlacement &buffer : layout.buffers)
    if (buffer.name == name)
      return buffer;
  FAIL("no buffer " << name);
  return layout.buffers.front();
}

/// Every offset aligned, no two buffers live at once sharing a byte, the
/// total past every buffer's end.
void checkInvariants(const std::vector<SmemRequest> &requests, const SmemLayout &layout) {
  REQUIRE(layout.buffers.size() == requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const SmemPlacement &a = layout.buffers[i];
    INFO(a.name << " at " << a.offset << ", " << a.size << " bytes");
    CHECK(a.offset % requests[i].align == 0);
    CHECK(a.offset + a.size <= layout.total);
    for (size_t j = 0; j < i; ++j) {
      const SmemPlacement &b = layout.buffers[j];
      const bool liveTogether = requests[i].liveBegin < requests[j].liveEnd &&
                                requests[j].liveBegin < requests[i].liveEnd;
      const bool shareBytes = a.size > 0 && b.size > 0 && a.offset < b.offset + b.size &&
                              b.offset < a.offset + a.size;
      INFO("beside " << b.name << " at " << b.offset << ", " << b.size << " bytes");
      CHECK_FALSE((liveTogether && shareBytes));
    }
  }
}

} // namespace

TEST_CASE("buffers live together never share bytes; alignment gaps are filled", "[smem]") {
  const std::vector<SmemRequest> requests = {
      {"a", 100, 16, 0, 1, 0, 3},
      {"b", 64, 128, 0, 1, 0, 3},
      {"c", 8, 8, 0, 1, 0, 3},
  };
  const SmemLayout layout = allocateSharedMemory(requests);
  CHECK(placed(layout, "a").offset == 0);
  CHECK(placed(layout, "b").offset == 128); // 100 rounded up to b's 128
  // The alignment gap [100, 128) holds c's 8 bytes at 104.
  CHECK(placed(layout, "c").offset == 104);
  CHECK(layout.total == 192);
  for (const SmemPlacement &buffer : layout.buffers)
    CHECK(buffer.aliases.empty());
  checkInvariants(requests, layout);
}

TEST_CASE("buffers of disjoint lifetimes share bytes and name the alias", "[smem]") {
  const std::vector<SmemRequest> requests = {
      {"main_loop", 256, 16, 0, 1, 1, 2},
      {"epilogue", 128, 16, 0, 1, 2, 3},
  };
  const SmemLayout layout = allocateSharedMemory(requests);
  CHECK(placed(layout, "epilogue").offset == 0);
  CHECK(placed(layout, "epilogue").aliases == "main_loop");
  CHECK(placed(layout, "main_loop").aliases.empty());
  CHECK(layout.total == 256);
  checkInvariants(requests, layout);
}

TEST_CASE("first fit takes the lowest gap that a dead buffer left", "[smem]") {
  // p lives throughout; q only in phase 1, between p and r; s lives in
  // phase 2, when q is dead: it takes q's bytes, the lowest gap.
  const std::vector<SmemRequest> requests = {
      {"p", 64, 64, 0, 1, 0, 3},
      {"q", 64, 64, 0, 1, 1, 2},
      {"r", 64, 64, 0, 1, 0, 3},
      {"s", 64, 64, 0, 1, 2, 3},
  };
  const SmemLayout layout = allocateSharedMemory(requests);
  CHECK(placed(layout, "p").offset == 0);
  CHECK(placed(layout, "q").offset == 64);
  CHECK(placed(layout, "r").offset == 128);
  CHECK(placed(layout, "s").offset == 64);
  CHECK(placed(layout, "s").aliases == "q");
  CHECK(layout.total == 192);
  checkInvariants(requests, layout);

  // A gap too small for the request is passed over.
  const std::vector<SmemRequest> wider = {
      {"p", 64, 64, 0, 1, 0, 3},
      {"q", 64, 64, 0, 1, 1, 2},
      {"r", 64, 64, 0, 1, 0, 3},
      {"s", 96, 32, 0, 1, 2, 3},
  };
  const SmemLayout passed = allocateSharedMemory(wider);
  CHECK(placed(passed, "s").offset == 192);
  CHECK(placed(passed, "s").aliases.empty());
  checkInvariants(wider, passed);
}

TEST_CASE("an empty buffer aliases nothing", "[smem]") {
  const std::vector<SmemRequest> requests = {
      {"a", 64, 16, 0, 1, 0, 1},
      {"empty", 0, 16, 0, 1, 1, 2},
  };
  const SmemLayout layout = allocateSharedMemory(requests);
  CHECK(placed(layout, "empty").aliases.empty());
  CHECK(layout.total == 64);
}

TEST_CASE("the kernels' own plans keep the allocator's invariants", "[smem]") {
  const int headDim = GENERATE(64, 128, 256);
  const bool causal = GENERATE(false, true);
  TileProblem problem;
  problem.headDim = headDim;
  problem.elementBytes = 2;
  problem.evenTiles = !causal;
  problem.causalOnly = causal;
  problem.keyLength = 8192;
  INFO("head dim " << headDim << (causal ? ", causal" : ""));
  const TileConfig forward = defaultTileConfig(problem);
  const std::vector<SmemRequest> forwardRequests = forwardKernelSmemRequests(problem, forward);
  const SmemLayout forwardLayout = allocateSharedMemory(forwardRequests);
  checkInvariants(forwardRequests, forwardLayout);
  CHECK(forwardLayout.total + kSmemBaseAlignSlack <= kMaxSharedMemoryPerBlock);

  const TileConfig backward = backwardTileConfig(problem);
  const BackwardSmemChoice choice = backwardSmemChoice(problem, backward);
  const std::vector<SmemRequest> backwardRequests =
      backwardKernelSmemRequests(problem, backward, choice.dqStagingBuffers, choice.diagonalSums);
  const SmemLayout backwardLayout = allocateSharedMemory(backwardRequests);
  checkInvariants(backwardRequests, backwardLayout);
  CHECK(backwardLayout.total + kSmemBaseAlignSlack <= kMaxSharedMemoryPerBlock);
}

TEST_CASE("the backward takes diagonal sums ahead of a second dQ staging buffer", "[smem]") {
  TileProblem problem;
  problem.headDim = 128;
  problem.elementBytes = 2;
  problem.causalOnly = true;
  problem.hasScoreMod = true;
  problem.keyLength = 8192;
  const TileConfig config = backwardTileConfig(problem);
  const auto launchBytes = [&](int buffers, bool sums) {
    return allocateSharedMemory(backwardKernelSmemRequests(problem, config, buffers, sums)).total +
           kSmemBaseAlignSlack;
  };
  // Without a per-diagonal addition: both staging buffers, no sums.
  BackwardSmemChoice choice = backwardSmemChoice(problem, config);
  CHECK(choice.dqStagingBuffers == 2);
  CHECK_FALSE(choice.diagonalSums);
  // With one, head dim 128 has room for the sums beside one buffer only.
  problem.diagonalGradient = true;
  choice = backwardSmemChoice(problem, config);
  CHECK(choice.dqStagingBuffers == 1);
  CHECK(choice.diagonalSums);
  CHECK(launchBytes(2, true) > kMaxSharedMemoryPerBlock);
  CHECK(launchBytes(1, true) <= kMaxSharedMemoryPerBlock);
  const std::vector<SmemRequest> requests = backwardKernelSmemRequests(problem, config, 1, true);
  const SmemLayout layout = allocateSharedMemory(requests);
  checkInvariants(requests, layout);
  // Two steps' rows of 8 warps, 80 floats each, and a float per consumer
  // thread.
  bool found = false;
  for (const SmemRequest &request : requests)
    if (request.name == "diagonal_sums") {
      found = true;
      CHECK(request.size == 2 * 8 * 80 * 4 + 256 * 4);
    }
  CHECK(found);
  // Head dim 256: one staging buffer already fills shared memory.
  problem.headDim = 256;
  const TileConfig wide = backwardTileConfig(problem);
  choice = backwardSmemChoice(problem, wide);
  CHECK(choice.dqStagingBuffers == 1);
  CHECK_FALSE(choice.diagonalSums);
}
