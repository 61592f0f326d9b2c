// Every tile plan attn-tune would try is a kernel the GPU can run: each
// candidate of the default search space, at every head dim, compiles with
// NVRTC, assembles with ptxas for sm_90a without spills, fits the register
// file and the shared memory a block may opt into, and keeps the
// instructions the design depends on. Needs no GPU. The oracles are
// ptxas's own report and the H100's hardware limits, not the tiling rules
// that produced the candidates.
#include <catch2/catch.hpp>

#include "attn/Compiler/Compiler.h"
#include "attn/Compiler/Parallel.h"
#include "attn/Compiler/TileConstraints.h"
#include "attn/runtime/Error.h"

#include "TestSupport.h"

#include <atomic>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

namespace {

// Per block on sm_90 (CUDA C++ Programming Guide, compute capability 9.0):
// 227 KB of shared memory with the opt-in attribute, 64K 32-bit registers.
constexpr int kHopperSharedMemoryPerBlock = 227 * 1024;
constexpr int kHopperRegistersPerBlock = 64 * 1024;

std::string causalSpec(int headDim) {
  std::ostringstream text;
  text << "attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = "
       << headDim << ", element_type = bf16> mask = #attn.causal<top_left> "
       << "normalizer = #attn.softmax\n";
  return text.str();
}

struct CandidateOutcome {
  std::string plan;
  std::string failure; // empty when every check passed
  int registers = 0, threads = 0, sharedMemory = 0;
};

CandidateOutcome checkCandidate(const std::string &spec, const attn::TileConfig &config) {
  CandidateOutcome outcome;
  outcome.plan = attn::formatTileOverride(config);
  attn::CompileOptions options;
  options.tileOverride = outcome.plan;
  try {
    attn::CompiledKernel kernel = attn::compileSpec(spec, "k.mlir", options);
    outcome.threads = kernel.launch.threadsPerBlock;
    outcome.sharedMemory = kernel.launch.sharedMemoryBytes;
    std::string ptx(kernel.binary.begin(), kernel.binary.end());
    attn::test::PtxasReport report = attn::test::assembleWithPtxas(kernel.binary);
    outcome.registers = report.registers(kernel.launch.kernelName);
    if (ptx.find("wgmma.mma_async") == std::string::npos ||
        ptx.find("cp.async.bulk.tensor") == std::string::npos)
      outcome.failure = "the PTX lacks wgmma.mma_async or cp.async.bulk.tensor";
    else if (report.status != 0)
      outcome.failure = "ptxas failed:\n" + report.text;
    else if (!report.spillFree())
      outcome.failure = "spills:\n" + report.text;
    else if (outcome.registers <= 0)
      outcome.failure = "no register count in the ptxas report:\n" + report.text;
    else if (outcome.registers * outcome.threads > kHopperRegistersPerBlock)
      outcome.failure = std::to_string(outcome.registers) + " registers x " +
                        std::to_string(outcome.threads) + " threads exceed the register file";
    else if (outcome.sharedMemory > kHopperSharedMemoryPerBlock)
      outcome.failure = std::to_string(outcome.sharedMemory) + " bytes of shared memory";
  } catch (const attn::Error &error) {
    outcome.failure = std::string("compile failed: ") + error.what();
  }
  return outcome;
}

} // namespace

TEST_CASE("every tuning candidate assembles without spills and fits an sm_90 block",
          "[tune-candidates]") {
  int headDim = GENERATE(64, 128, 256);
  std::string spec = causalSpec(headDim);
  attn::SpecTuningKey key = attn::tuningKeyOfSpec(spec, "k.mlir");
  std::vector<attn::TileConfig> candidates = attn::enumerateTileCandidates(key.problem);
  REQUIRE(!candidates.empty());

  // A persistent plan differs from its one-tile-per-block twin only in O's
  // staging bytes (shared memory), not in code: one binary per remaining
  // plan, compiled one tile per block.
  std::map<std::string, attn::TileConfig> binaries;
  for (attn::TileConfig config : candidates) {
    config.persistentBlocksPerSm = 0;
    binaries.emplace(attn::formatTileOverride(config), config);
  }
  std::vector<attn::TileConfig> plans;
  for (const auto &[plan, config] : binaries)
    plans.push_back(config);

  std::vector<CandidateOutcome> outcomes(plans.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < plans.size(); i = next++)
      outcomes[i] = checkCandidate(spec, plans[i]);
  };
  attn::runOnThreads(std::max(1u, std::thread::hardware_concurrency()), worker);

  INFO("head dim " << headDim << ": " << plans.size() << " binaries for " << candidates.size()
                   << " candidates");
  size_t failures = 0;
  int maxRegisters = 0, maxSharedMemory = 0;
  for (const CandidateOutcome &outcome : outcomes) {
    maxRegisters = std::max(maxRegisters, outcome.registers);
    maxSharedMemory = std::max(maxSharedMemory, outcome.sharedMemory);
    if (outcome.failure.empty())
      continue;
    ++failures;
    UNSCOPED_INFO(outcome.plan << ": " << outcome.failure);
  }
  WARN("head dim " << headDim << ": " << plans.size() << " binaries checked, at most "
                   << maxRegisters << " registers and " << maxSharedMemory
                   << " bytes of shared memory");
  CHECK(failures == 0);
}
