//===- TileConstraints.cpp - sm_90a tile legality (MLIR-free) -------------===//

#include "attn/Compiler/TileConstraints.h"
#include "attn/Transforms/SmemAllocator.h"

#include "attn_params.h"

#include <algorithm>
#include <cmath>
#include <cctype>
#include <cstdlib>
#include <sstream>
#include <utility>

namespace attn {

int defaultConsumerRegisters(int consumerWarpgroups) {
  return consumerWarpgroups >= 3 ? 160 : 240;
}

int64_t launchRegistersPerBlock(const TileConfig &config) {
  // setmaxnreg moves registers within what the launch allocated to the
  // block: the per-thread count the launch bounds allow (a multiple of 8,
  // at most 248 here) times the threads (384 threads: 168 x 384 = 64512).
  const int64_t threads = int64_t(kThreadsPerWarpgroup) *
                          (config.producerWarpgroups + config.consumerWarpgroups);
  return std::min<int64_t>(248, kRegistersPerBlock / threads / 8 * 8) * threads;
}

namespace {
/// The message when `config`'s register split asks for more than its launch
/// allocates (384 threads: 64512, not 65536): the consumers' setmaxnreg
/// increase would then wait forever. Forward and backward plans alike.
std::optional<std::string> launchRegisterOverrun(const TileConfig &config) {
  const int64_t blockRegisters =
      int64_t(kThreadsPerWarpgroup) *
      (int64_t(config.producerRegisters) * config.producerWarpgroups +
       int64_t(config.consumerRegisters) * config.consumerWarpgroups);
  const int64_t launchRegisters = launchRegistersPerBlock(config);
  if (blockRegisters <= launchRegisters)
    return std::nullopt;
  const int64_t threads = int64_t(kThreadsPerWarpgroup) *
                          (config.producerWarpgroups + config.consumerWarpgroups);
  std::ostringstream os;
  os << "register budget: 128 x (" << config.producerRegisters << " x "
     << config.producerWarpgroups << " + " << config.consumerRegisters << " x "
     << config.consumerWarpgroups << ") = " << blockRegisters << " registers per block, limit "
     << launchRegisters << " (what a launch of " << threads << " threads allocates)";
  return os.str();
}

/// The producer registers of a kernel whose producer warps fill staged
/// score_mod diagonals: their capture reads, and the schedule walk beside
/// them, spilled at 24 (T5 36 to 72 bytes, relative positions 12 to 60).
constexpr int kDiagonalFillRegisters = 40;

/// What the launch leaves a producer thread once the consumers have theirs,
/// a multiple of 8 up to `most`.
int leftoverProducerRegisters(const TileConfig &config, int most) {
  const int64_t left = launchRegistersPerBlock(config) -
                       int64_t(kThreadsPerWarpgroup) * config.consumerRegisters *
                           config.consumerWarpgroups;
  const int64_t perThread = left / (int64_t(kThreadsPerWarpgroup) * config.producerWarpgroups);
  return static_cast<int>(std::min<int64_t>(most, perThread / 8 * 8));
}

/// Gives `config` `count` consumer warpgroups: one 64-row WGMMA slice of Q
/// each (defaultTileConfig fits the registers once the plan is complete).
void setConsumerWarpgroups(TileConfig &config, int count) {
  config.consumerWarpgroups = count;
  config.blockM = kWgmmaM * count;
}
} // namespace

void fitForwardRegisters(const TileProblem &problem, TileConfig &config) {
  config.consumerRegisters = defaultConsumerRegisters(config.consumerWarpgroups);
  config.producerRegisters = 24;
  if (problem.scoreDiagonals == 0)
    return;
  // Three consumers of 160 leave a producer 32. Two of 240 leave it 24:
  // there consumers that fit in 232 (as their estimate says) give 8 each.
  // Same command, H200, B = 2, S = 8192 (docs/benchmarks.md): the
  // relative-position table 0.918 -> 0.912 ms, T5's buckets 0.957 ->
  // 1.047 (its 128-key tiles: 0.971).
  if (config.consumerWarpgroups == 2) {
    TileConfig narrower = config;
    narrower.consumerRegisters = 232;
    if (estimateConsumerRegisters(problem, narrower) <= narrower.consumerRegisters)
      config.consumerRegisters = narrower.consumerRegisters;
  }
  config.producerRegisters =
      std::max(24, leftoverProducerRegisters(config, kDiagonalFillRegisters));
}

TileConfig defaultTileConfig(const TileProblem &problem) {
  // Measured on H100 (docs/benchmarks.md): head dim 64 gains ~10% from a
  // third consumer warpgroup, head dim 256 ~5% from 80-key tiles; at head
  // dim 128, 128 x 128 was as fast as or faster than 112, 176 and 192 keys.
  TileConfig config;
  config.producerWarpgroups = 1;
  config.producerRegisters = 24;
  config.stages = 2;
  setConsumerWarpgroups(config, problem.headDim <= 64 ? 3 : 2);
  config.blockN = problem.headDim <= 128 ? 128 : 80;
  // Stored key bits take a stage's words beside each K tile: with 80-key
  // tiles at head dim 256 they pass the shared-memory limit by 2 KB.
  if (problem.headDim > 128 && problem.storedKeyBits)
    config.blockN = 64;
  // Same-run A/B at S = 8192 (H100): four chains gain 1.5 % at head dim
  // 128 (two consumers, 240 registers each) and lose 3 % at head dims 64
  // and 256, whose schedules have less room. On H200, on 128 x 128 tiles
  // without a score_mod, mask_mod or window, one chain is the faster
  // (docs/benchmarks.md, 2026-11-30, three rounds, B x S = 16384: causal
  // 0.6-2.5 % at 1024 keys, 0-1.6 % at 2048, 1.8-3.1 % at 4096; unmasked
  // 0-1.3 % at 1024). Four stay where they were measured ahead or level: a
  // document mask_mod (the plan set, 1.967 against 2.016 ms), a window at
  // 8192 keys (0.7-1.7 %); score_mods there were not measured.
  // At head dim 256 a score_mod takes four too: the plan set's f16
  // soft-capping (softcap_d256_f16_4k, H200, 2026-11-29 and 12-01) ran 4 %
  // faster with four than with one.
  const bool fourChains = (problem.headDim == 128 && (problem.hasScoreMod || problem.hasMaskMod ||
                                                      problem.slidingWindowOnly)) ||
                          (problem.headDim == 256 && problem.hasScoreMod);
  config.softmaxChains = fourChains ? 4 : 1;
  // Same-run A/B on H100 (docs/benchmarks.md, 2026-11-25), B x S = 16384:
  // unmasked head dim 128 with 128 x 160 tiles and one chain was 1.7 to
  // 4.9 % faster in every paired round at S = 2048 to 16384. Causal was
  // mixed (-2.3 % at 2048, +1.5 to +4.2 % at 8192 and 16384), so masked
  // kernels keep 128 keys; so do score_mods, which were not measured (and
  // whose staged diagonals would not fit beside 160-key stages).
  if (problem.headDim == 128 && problem.evenTiles && !problem.hasScoreMod &&
      problem.keyLength >= kWideKeyTileMinKeys) {
    config.blockN = 160;
    config.softmaxChains = 1;
  }
  // Even tiles: a persistent grid overlaps each tile's epilogue with the
  // next tile's loads (+18 % at S = 512). Tiles of a built-in mask: the
  // kernel deals them out in a snake, and so a persistent grid gained 4 to
  // 30 % on causal kernels up to 4096 keys (same-run A/B,
  // docs/benchmarks.md, 2026-11-26; a plain round-robin had lost 6 to 28 %).
  // Other masks keep the hardware's dynamic block dispatch.
  // At head dim 256 a sliding window keeps the dispatch: the plan set's
  // window_d256_8k (4095 keys to the left, H200, 2026-12-01, rounds)
  // took 0.709 ms against 0.896 on the persistent grid.
  const bool maskedPersistent =
      (problem.causalOnly || (problem.slidingWindowOnly && problem.headDim <= 128)) &&
      problem.keyLength < kMaskedPersistentMaxKeys;
  // A mask_mod's tiles go persistent where each visits few key tiles, so
  // that overlapping a tile's epilogue with the next one's loads pays (the
  // plan set, H200, 2026-12-01): a mask_mod the compiler classifies under
  // the causal mask (chunked_local_d128_8k, chunks of 1024 keys: 0.207
  // against 0.252 ms) and any mask_mod up to kShortMaskModMaxKeys keys
  // (document_d128_1k: 0.179 against 0.198). Longer ones keep the
  // dispatch: document_d128_8k (stored key bits) lost 9 % on the
  // persistent grid, Longformer (no built-in mask) 13 %.
  const bool maskModPersistent =
      problem.hasMaskMod && ((problem.causalMask && !problem.storedKeyBits &&
                              problem.keyLength < kMaskedPersistentMaxKeys) ||
                             (problem.keyLength > 0 && problem.keyLength <= kShortMaskModMaxKeys));
  config.persistentBlocksPerSm = problem.evenTiles || maskedPersistent || maskModPersistent ? 1 : 0;
  // Same-run A/B of the grid on H100 (docs/benchmarks.md, 2026-11-25,
  // evening; three rounds, B x S = 16384): causal head dim 64 at 1024 keys
  // gained 8.9 % from 128-row tiles with three stages (attn-tune's winner of
  // 11-23), causal head dim 128 2.3 % at 8192 keys and 3.7 % at 16384 from
  // 160-key tiles with one chain (+1.5 to +4.2 % in the A/B of the
  // morning, which found them 2.3 % slower at 2048 keys). At 512 keys the
  // H100's plan was 192 x 128 with four stages (+6.5 %); on H200 the plan
  // set's gqa8_causal_d64_512 (2026-12-01) ran fastest on 128 x 128 tiles
  // with three stages and two chains (0.157 ms against that plan's 0.172).
  const bool plainCausal = problem.causalOnly && !problem.hasScoreMod && problem.keyLength > 0;
  if (problem.headDim == 64 && plainCausal && problem.keyLength <= kMediumCausalMaxKeys) {
    setConsumerWarpgroups(config, 2);
    config.stages = 3;
    if (problem.keyLength <= kShortCausalMaxKeys)
      config.softmaxChains = 2;
  }
  // Causal score_mods too (same-command A/B on H100, 2026-11-26, B = 2, S =
  // 8192, three rounds): relative-position bias 1.013-1.023 -> 0.981-0.982
  // ms, ALiBi 0.949-0.950 -> 0.943-0.946.
  const bool causalWithoutMaskMod = problem.causalOnly && problem.keyLength > 0;
  // Staged score_mod diagonals (a relative-position table) take two
  // softmax chains there (same-command A/B on H100, 2026-11-26, B = 2,
  // S = 8192, three rounds): 0.946-0.959 ms with one, 0.928-0.938 with two,
  // 0.936-0.952 with four; plain causal 0.866-0.868 with one, 0.869-0.871
  // with two.
  // Diagonals that compute a transcendental (T5's log-spaced buckets) ran
  // fastest on 144-key tiles with four chains (H200, 2026-12-01, B = 2,
  // S = 8192, three rounds: 0.991-1.002 ms against 1.059-1.066 on 160 keys
  // with two); on those tiles a plain table read (relative positions) lost
  // 2.5 % (0.951-0.962 against 0.929-0.933).
  if (problem.headDim == 128 && causalWithoutMaskMod &&
      problem.keyLength >= kWideCausalMinKeys) {
    const bool computed = problem.scoreDiagonals > 0 && problem.transcendentalScoreDiagonals;
    config.blockN = computed ? 144 : 160;
    config.softmaxChains = computed ? 4 : problem.scoreDiagonals > 0 ? 2 : 1;
  }
  // A mask_mod that keeps the causal half-plane is planned like the causal
  // mask there: the plan set's prefix_lm_d128_8k (a 2048-key prefix, H200,
  // 2026-12-01) ran fastest on 128 x 160 tiles with two chains on the
  // persistent grid, 1.034 ms against 1.111 on 128 x 128 with four on the
  // dispatch.
  if (problem.headDim == 128 && problem.maskModKeepsCausal && !problem.hasScoreMod &&
      problem.keyLength >= kWideCausalMinKeys) {
    config.blockN = 160;
    config.softmaxChains = 2;
    config.persistentBlocksPerSm = problem.keyLength < kMaskedPersistentMaxKeys ? 1 : 0;
  }
  // Same-run A/B on H100 (docs/benchmarks.md, 2026-11-25, evening): bf16
  // soft-capping at head dim 128 (causal, B = 2, S = 8192) took 0.980-0.985
  // ms with 192 x 64 tiles, three consumers, four stages and two chains
  // (attn-tune's winner) against 1.050-1.069 with 128 x 128: without a
  // running maximum its tanh and exp2 per score keep the special-function
  // unit busy, and a third consumer warpgroup keeps more of them in
  // flight. f16, which keeps the running maximum, lost 6 % with it. Only
  // causal and unmasked kernels were measured; the plan replaces every
  // other rule's.
  if (problem.headDim == 128 && problem.fixedSoftmaxBase) {
    setConsumerWarpgroups(config, 3);
    config.blockN = 64;
    config.stages = 4;
    config.softmaxChains = 2;
    // With a sliding window the same tiles ran fastest on the hardware's
    // dispatch and one chain (the plan set's window_softcap_d128_8k, H200,
    // tools/plan-set/data/h200-2026-11-29.tsv, the finalists' rounds):
    // 0.544 ms against 0.607 on the persistent grid with two chains; on a
    // persistent grid every 192 x 64 plan was 4-6 % slower there.
    if (problem.slidingWindowOnly) {
      config.persistentBlocksPerSm = 0;
      config.softmaxChains = 1;
    }
  }
  fitForwardRegisters(problem, config);
  return config;
}

// Every key the override sets, as given.
static void setOverriddenKeys(TileConfig &config, const TileOverride &override) {
  for (auto [value, field] : {std::pair{override.blockM, &TileConfig::blockM},
                              std::pair{override.blockN, &TileConfig::blockN},
                              std::pair{override.stages, &TileConfig::stages},
                              std::pair{override.consumerWarpgroups, &TileConfig::consumerWarpgroups},
                              std::pair{override.producerWarpgroups, &TileConfig::producerWarpgroups},
                              std::pair{override.consumerRegisters, &TileConfig::consumerRegisters},
                              std::pair{override.producerRegisters, &TileConfig::producerRegisters},
                              std::pair{override.softmaxChains, &TileConfig::softmaxChains},
                              std::pair{override.persistentBlocksPerSm,
                                        &TileConfig::persistentBlocksPerSm}})
    if (value)
      config.*field = *value;
}

TileConfig applyTileOverride(const TileProblem &problem, const TileConfig &base,
                             const TileOverride &override) {
  TileConfig config = base;
  setOverriddenKeys(config, override);
  // block_m and consumer_warpgroups determine each other.
  if (override.blockM && !override.consumerWarpgroups &&
      *override.blockM % kWgmmaM == 0)
    config.consumerWarpgroups = *override.blockM / kWgmmaM;
  if (override.consumerWarpgroups && !override.blockM)
    config.blockM = kWgmmaM * *override.consumerWarpgroups;
  // The register split follows the plan unless given. One count given:
  // the other is the plan's where the launch holds both, else what the
  // launch leaves it (a multiple of 8).
  TileConfig fitted = config;
  fitForwardRegisters(problem, fitted);
  const int64_t launch = launchRegistersPerBlock(config);
  const int64_t consumerThreads = int64_t(kThreadsPerWarpgroup) * config.consumerWarpgroups;
  const int64_t producerThreads = int64_t(kThreadsPerWarpgroup) * config.producerWarpgroups;
  if (!override.consumerRegisters && !override.producerRegisters) {
    config.consumerRegisters = fitted.consumerRegisters;
    config.producerRegisters = fitted.producerRegisters;
  } else if (!override.producerRegisters) {
    const int64_t left = (launch - consumerThreads * config.consumerRegisters) / producerThreads;
    config.producerRegisters =
        static_cast<int>(std::min<int64_t>(fitted.producerRegisters, left / 8 * 8));
  } else if (!override.consumerRegisters) {
    const int64_t left = (launch - producerThreads * config.producerRegisters) / consumerThreads;
    config.consumerRegisters =
        static_cast<int>(std::min<int64_t>(fitted.consumerRegisters, left / 8 * 8));
  }
  return config;
}

static std::string trim(const std::string &s) {
  size_t begin = 0, end = s.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(s[begin])))
    ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(s[end - 1])))
    --end;
  return s.substr(begin, end - begin);
}

std::optional<std::string> parseTileOverride(const std::string &text,
                                             TileOverride &result) {
  result = TileOverride();
  if (trim(text).empty())
    return std::nullopt;
  static const std::pair<const char *, std::optional<int> TileOverride::*>
      keys[] = {
          {"block_m", &TileOverride::blockM},
          {"block_n", &TileOverride::blockN},
          {"stages", &TileOverride::stages},
          {"consumer_warpgroups", &TileOverride::consumerWarpgroups},
          {"producer_warpgroups", &TileOverride::producerWarpgroups},
          {"consumer_registers", &TileOverride::consumerRegisters},
          {"producer_registers", &TileOverride::producerRegisters},
          {"softmax_chains", &TileOverride::softmaxChains},
          {"persistent_blocks_per_sm", &TileOverride::persistentBlocksPerSm},
      };
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos)
      comma = text.size();
    std::string item = trim(text.substr(start, comma - start));
    start = comma + 1;

    size_t eq = item.find('=');
    if (eq == std::string::npos)
      return "expected 'key=value', got '" + item + "'";
    std::string key = trim(item.substr(0, eq));
    std::string value = trim(item.substr(eq + 1));

    std::optional<int> TileOverride::*field = nullptr;
    for (const auto &[name, member] : keys)
      if (key == name)
        field = member;
    if (!field)
      return "unknown key '" + key +
             "'; expected block_m, block_n, stages, consumer_warpgroups, "
             "producer_warpgroups, consumer_registers, producer_registers, "
             "softmax_chains or persistent_blocks_per_sm";
    if (result.*field)
      return "duplicate key '" + key + "'";

    bool digits = !value.empty() && value.size() <= 9;
    for (char c : value)
      digits = digits && std::isdigit(static_cast<unsigned char>(c));
    bool mayBeZero = field == &TileOverride::persistentBlocksPerSm;
    if (!digits || std::atoi(value.c_str()) < (mayBeZero ? 0 : 1))
      return "value of '" + key + "' must be a " +
             (mayBeZero ? "non-negative" : "positive") + " integer, got '" +
             value + "'";
    result.*field = std::atoi(value.c_str());
  }
  return std::nullopt;
}

std::string formatTileOverride(const TileConfig &config) {
  std::ostringstream os;
  os << "block_m=" << config.blockM << ",block_n=" << config.blockN
     << ",stages=" << config.stages
     << ",consumer_warpgroups=" << config.consumerWarpgroups
     << ",producer_warpgroups=" << config.producerWarpgroups
     << ",consumer_registers=" << config.consumerRegisters
     << ",producer_registers=" << config.producerRegisters
     << ",softmax_chains=" << config.softmaxChains
     << ",persistent_blocks_per_sm=" << config.persistentBlocksPerSm;
  return os.str();
}

int64_t estimateConsumerRegisters(const TileProblem &problem,
                                  const TileConfig &config) {
  // 32 covers addresses, row statistics and loop state: ptxas fits
  // 192 x 128 tiles of head dim 64 in 160 registers without spilling.
  // Above head dim 128 the output fragment's bookkeeping grows too: ptxas
  // spills 40-64 bytes at head dim 256 with block_n 96 in 240 registers
  // (the candidate test, test_tune_candidates.cpp, finds it).
  int64_t wideHeadExtra = std::max<int64_t>(0, problem.headDim - 128) / 8;
  // Score tiles wider than 160 keys leave no room for the packed-sequence
  // bookkeeping: at head dim 128, block_n 176 and 192 spill 4-48 bytes.
  int64_t wideTileExtra = config.blockN > 160 ? 16 : 0;
  return problem.headDim / 2 + config.blockN / 2 + config.blockN / 4 + 32 + wideHeadExtra +
         wideTileExtra;
}

int64_t estimateSharedMemoryBytes(const TileProblem &problem,
                                  const TileConfig &config) {
  int64_t row = int64_t(problem.headDim) * problem.elementBytes;
  int64_t q = int64_t(config.blockM) * row;
  int64_t kv = int64_t(config.blockN) * row;
  int64_t barriers = 8 * forwardBarrierCount(problem, config);
  return q + int64_t(config.stages) * (2 * kv + keyBitsStageBytes(problem, config)) + barriers +
         kSmemBaseAlignSlack;
}

int64_t keyBitsStageBytes(const TileProblem &problem, const TileConfig &config) {
  return problem.storedKeyBits ? attn_abi::tileKeyBitsPerTile(config.blockM, config.blockN) : 0;
}

int64_t forwardBarrierCount(const TileProblem &problem, const TileConfig &config) {
  int64_t diagonalBarriers =
      problem.scoreDiagonals > 0
          ? 2 * int64_t(config.consumerWarpgroups) * problem.scoreDiagonalWindows
          : 0;
  return 2 + 4 * int64_t(config.stages) + diagonalBarriers;
}

int64_t scoreDiagonalWindowBytes(const TileProblem &problem, const TileConfig &config) {
  constexpr int64_t kWordBytes = 4;
  return problem.scoreDiagonals * (int64_t(config.blockN) + kWgmmaM) * kWordBytes;
}

int64_t scoreDiagonalBytes(const TileProblem &problem, const TileConfig &config) {
  return int64_t(config.consumerWarpgroups) * problem.scoreDiagonalWindows *
         scoreDiagonalWindowBytes(problem, config);
}

std::optional<std::string> checkTileLegality(const TileProblem &problem,
                                             const TileConfig &config) {
  std::ostringstream os;
  // Warpgroup structure first: the WGMMA rule for block_m depends on it.
  if (config.consumerWarpgroups < 1 || config.consumerWarpgroups > 3) {
    os << "warpgroups: consumer_warpgroups (" << config.consumerWarpgroups
       << ") must be in [1, 3]";
    return os.str();
  }
  if (config.producerWarpgroups != 1) {
    os << "warpgroups: producer_warpgroups (" << config.producerWarpgroups
       << ") must be 1";
    return os.str();
  }
  if (problem.headDim <= 0 || problem.headDim > 256 ||
      problem.headDim % 16 != 0) {
    os << "WGMMA shape: head_dim (" << problem.headDim
       << ") must be a multiple of 16 and at most 256 (the N of the PV WGMMA)";
    return os.str();
  }
  if (config.blockM != kWgmmaM * config.consumerWarpgroups) {
    os << "WGMMA shape: block_m (" << config.blockM
       << ") must equal 64 x consumer_warpgroups ("
       << kWgmmaM * config.consumerWarpgroups << ")";
    return os.str();
  }
  if (config.blockN < 16 || config.blockN > 256 || config.blockN % 16 != 0) {
    os << "WGMMA shape: block_n (" << config.blockN
       << ") must be a multiple of 16 in [16, 256] (the N of the QK^T WGMMA)";
    return os.str();
  }
  if (config.stages < 1 || config.stages > 8) {
    os << "pipeline: stages (" << config.stages << ") must be in [1, 8]";
    return os.str();
  }
  for (auto [name, value] :
       {std::pair<const char *, int>{"consumer_registers",
                                     config.consumerRegisters},
        std::pair<const char *, int>{"producer_registers",
                                     config.producerRegisters}}) {
    if (value < 24 || value > 256 || value % 8 != 0) {
      os << "register budget: " << name << " (" << value
         << ") must be a multiple of 8 in [24, 256] (setmaxnreg)";
      return os.str();
    }
  }
  if (std::optional<std::string> overrun = launchRegisterOverrun(config))
    return *overrun;
  int64_t needed = estimateConsumerRegisters(problem, config);
  if (needed > config.consumerRegisters) {
    os << "register budget: head_dim " << problem.headDim << " with block_n "
       << config.blockN << " needs ~" << needed
       << " registers per consumer thread, budget "
       << config.consumerRegisters;
    return os.str();
  }
  int64_t smem = estimateSharedMemoryBytes(problem, config);
  if (smem > kMaxSharedMemoryPerBlock) {
    os << "shared-memory capacity: block_m " << config.blockM << ", block_n "
       << config.blockN << ", stages " << config.stages << ", head_dim "
       << problem.headDim << " needs " << smem << " bytes, limit "
       << kMaxSharedMemoryPerBlock;
    return os.str();
  }
  if (config.softmaxChains != 1 && config.softmaxChains != 2 &&
      config.softmaxChains != 4) {
    os << "schedule: softmax_chains (" << config.softmaxChains
       << ") must be 1, 2 or 4";
    return os.str();
  }
  if (config.persistentBlocksPerSm < 0 || config.persistentBlocksPerSm > 1) {
    // The kernel's persistent schedule holds at most one block per SM.
    os << "schedule: persistent_blocks_per_sm ("
       << config.persistentBlocksPerSm
       << ") must be 0 (a block per work tile) or 1";
    return os.str();
  }
  return std::nullopt;
}

std::vector<TileConfig> enumerateTileCandidates(const TileProblem &problem,
                                                const TileSearchSpace &space) {
  std::vector<TileConfig> candidates;
  for (int consumers : space.consumerWarpgroups)
    for (int blockN : space.blockN)
      for (int stages : space.stages)
        for (int chains : space.softmaxChains)
          for (int grid : space.persistentBlocksPerSm) {
            TileConfig config;
            config.consumerWarpgroups = consumers;
            config.blockM = kWgmmaM * consumers;
            config.blockN = blockN;
            config.stages = stages;
            config.producerWarpgroups = 1;
            config.softmaxChains = chains;
            fitForwardRegisters(problem, config);
            config.persistentBlocksPerSm = grid;
            if (!checkTileLegality(problem, config))
              candidates.push_back(config);
          }
  return candidates;
}

std::vector<TileConfig> firstUseCandidates(const TileProblem &problem, size_t count) {
  const TileConfig heuristic = defaultTileConfig(problem);
  // Until a cost model is fitted to tuning data, the plans nearest the
  // heuristic's: a step of a field costs as much as the tuned grid's
  // winners were seen to move it (block_n by powers of two and the
  // consumer count most, stages, chains and the grid policy least).
  auto distance = [&](const TileConfig &c) {
    return 2.0 * (c.consumerWarpgroups != heuristic.consumerWarpgroups) +
           2.0 * std::abs(std::log2(double(c.blockN) / heuristic.blockN)) +
           0.5 * std::abs(c.stages - heuristic.stages) +
           0.5 * (c.softmaxChains != heuristic.softmaxChains) +
           0.5 * (c.persistentBlocksPerSm != heuristic.persistentBlocksPerSm);
  };
  std::vector<TileConfig> others;
  for (const TileConfig &config : enumerateTileCandidates(problem))
    if (!(config == heuristic))
      others.push_back(config);
  std::sort(others.begin(), others.end(), [&](const TileConfig &a, const TileConfig &b) {
    const double da = distance(a), db = distance(b);
    return da != db ? da < db : formatTileOverride(a) < formatTileOverride(b);
  });
  std::vector<TileConfig> candidates{heuristic};
  for (const TileConfig &config : others) {
    if (candidates.size() >= count)
      break;
    candidates.push_back(config);
  }
  return candidates;
}

static_assert(kLinearSlice == ATTN_LINEAR_SLICE, "the kernel's value slice");

TileConfig linearTileConfig(int headDim, int64_t batchHeads) {
  TileConfig config;
  config.blockM = kWgmmaM;
  // Every value slice of a head in one block shares each chunk's Q and K
  // tiles, so an SM pulls them from L2 once, but the grid has half the
  // blocks. On H100 (docs/benchmarks.md) that was 2-6 % faster where
  // one-slice blocks leave SMs idle (the sequence is split either way),
  // gated retention too once its decays were copied ahead (eleventh run),
  // and 15-40 % slower where one-slice blocks just fill the GPU (batch x
  // heads = 64 at head dim 128). So a block takes both slices only for a
  // known shape that splits.
  const int64_t sliceBlocks = batchHeads * (headDim / kLinearSlice);
  const bool splits =
      batchHeads > 0 && !attn_abi::linearGridFillsGpu(sliceBlocks, kReferenceMultiprocessors);
  config.blockN = splits ? headDim : kLinearSlice;
  // A third stage, which fits, measured slower.
  config.stages = 2;
  config.consumerWarpgroups = config.blockN / kLinearSlice;
  config.producerWarpgroups = 1;
  config.consumerRegisters = 240;
  config.producerRegisters = 24;
  config.softmaxChains = 1;
  config.persistentBlocksPerSm = 0;
  return config;
}

TileConfig applyLinearTileOverride(const TileConfig &base, const TileOverride &override) {
  TileConfig config = base;
  setOverriddenKeys(config, override);
  // block_n and consumer_warpgroups determine each other: one consumer
  // warpgroup per 64-column value slice.
  if (override.blockN && !override.consumerWarpgroups)
    config.consumerWarpgroups = *override.blockN / kLinearSlice;
  if (override.consumerWarpgroups && !override.blockN)
    config.blockN = kLinearSlice * *override.consumerWarpgroups;
  return config;
}

std::optional<std::string> checkLinearTileLegality(const TileProblem &problem,
                                                   const TileConfig &config) {
  std::ostringstream os;
  if (config.blockM != kWgmmaM)
    os << "linear kernel: block_m (the chunk) must be 64, got " << config.blockM;
  else if (config.blockN != kLinearSlice && config.blockN != 2 * kLinearSlice)
    os << "linear kernel: block_n (the value columns of a block) must be 64 or 128, got "
       << config.blockN;
  else if (config.blockN > problem.headDim)
    os << "linear kernel: block_n (" << config.blockN << ") exceeds head_dim ("
       << problem.headDim << ")";
  else if (config.consumerWarpgroups * kLinearSlice != config.blockN)
    os << "linear kernel: one consumer warpgroup per 64 value columns: block_n = "
       << config.blockN << " needs " << config.blockN / kLinearSlice << ", got "
       << config.consumerWarpgroups;
  else if (config.producerWarpgroups != 1)
    os << "linear kernel: one producer warpgroup, got " << config.producerWarpgroups;
  else if (config.stages < 1 || config.stages > 4)
    os << "linear kernel: stages must be 1 to 4, got " << config.stages;
  else if (config.persistentBlocksPerSm != 0)
    os << "linear kernel: no persistent grid (one block per value columns, head and batch)";
  else if (config.softmaxChains != 1)
    os << "linear kernel: softmax_chains must be 1 (it has no softmax), got "
       << config.softmaxChains;
  else if (int64_t bytes =
               allocateSharedMemory(linearKernelSmemRequests(problem, config)).total +
               kSmemBaseAlignSlack;
           bytes > kMaxSharedMemoryPerBlock)
    os << "shared-memory capacity: block_n " << config.blockN << ", stages " << config.stages
       << ", head_dim " << problem.headDim << " needs " << bytes << " bytes, limit "
       << kMaxSharedMemoryPerBlock;
  else
    return std::nullopt;
  return os.str();
}

} // namespace attn

namespace attn {

void fitBackwardRegisters(const TileProblem &problem, TileConfig &config) {
  // One consumer past head dim 128 walks passes at 256 registers; the
  // producer warpgroup then takes 40 (its dQ writer's pass arithmetic
  // spilled 8-16 bytes at 24).
  const bool passes = config.consumerWarpgroups == 1 && problem.headDim > 128;
  config.consumerRegisters = passes ? 256 : 240;
  config.producerRegisters = passes ? 40 : 24;
}

TileConfig backwardTileConfig(const TileProblem &problem) {
  TileConfig config;
  config.consumerWarpgroups = 2;
  config.blockN = 2 * kWgmmaM;
  // Head dim 64 takes 128 query rows a step (each consumer's dQ piece is 64
  // rows), 128 takes 64 (its pieces are 64 columns): either way every
  // product of the step is m64n64 or wider and the consumers fit 240
  // registers. Without a mask, mask_mod or score_mod, head dim 128 takes 80
  // (dQ transposed, attn_abi::bwdTransposesDq): a quarter more rows a step
  // for the same barriers, waits and row statistics.
  config.blockM = problem.headDim == 64 ? 2 * kWgmmaM : kWgmmaM;
  if (problem.headDim == 128 && problem.evenTiles && !problem.hasScoreMod)
    config.blockM = kBackwardTransposedDqRows;
  config.stages = 2;
  fitBackwardRegisters(problem, config);
  if (problem.headDim > 128) {
    // Head dim 256: two consumers share one tile of 64 keys and split dK's
    // and dV's columns (attn_abi::bwdSplitsColumns), Pᵀ and dSᵀ meeting in
    // shared memory. K, V, Q and dO tiles twice as wide and dQ's staging
    // leave shared memory for one stage.
    config.blockN = kWgmmaM;
    config.blockM = kWgmmaM;
    config.stages = 1;
  }
  config.softmaxChains = 1;
  config.persistentBlocksPerSm = 0;
  return config;
}

int64_t estimateBackwardConsumerRegisters(const TileProblem &problem, const TileConfig &config) {
  const attn_abi::BwdWidths widths = attn_abi::bwdWidths(
      problem.headDim, config.blockM, config.blockN, std::max(config.consumerWarpgroups, 1));
  const int64_t dqRegisters = widths.dqFragmentColumns / 2;
  if (widths.splitsColumns)
    // dK and dV hold the consumer's columns; Sᵀ and dPᵀ of its query
    // columns are in shared memory before dQ's piece is computed.
    return widths.gradColumns + std::max<int64_t>(widths.queryColumns, dqRegisters) + 24;
  // dK and dV hold a pass's columns. Sᵀ and dPᵀ in fp32 are dead once
  // packed; the packed pair (block_m / 2) lives on beside dQ's piece until
  // the step's products complete.
  return widths.gradColumns +
         std::max<int64_t>(config.blockM, config.blockM / 2 + dqRegisters) + 24;
}

std::optional<std::string> checkBackwardTileLegality(const TileProblem &problem,
                                                     const TileConfig &config) {
  std::ostringstream os;
  const int consumers = config.consumerWarpgroups;
  const bool splitsColumns =
      attn_abi::bwdSplitsColumns(problem.headDim, config.blockN, consumers);
  const int passColumns = attn_abi::bwdPassColumns(problem.headDim, splitsColumns);
  const bool transposesDq = attn_abi::bwdTransposesDq(config.blockM);
  if (problem.headDim != 64 && problem.headDim != 128 && problem.headDim != 256)
    os << "backward: head_dim " << problem.headDim
       << " has no backward kernel (64, 128 and 256 have)";
  else if (consumers < 1 || consumers > 2)
    os << "warpgroups: the backward takes 1 or 2 consumer warpgroups, got " << consumers;
  else if (config.blockN != kWgmmaM * consumers && !splitsColumns)
    os << "WGMMA shape: backward block_n (" << config.blockN
       << ") must be 64 keys per consumer warpgroup (" << kWgmmaM * consumers
       << "), or 64 shared by two past head dim 128";
  else if (splitsColumns && config.blockM != kWgmmaM)
    os << "WGMMA shape: consumers sharing a key tile take backward block_m 64, got "
       << config.blockM;
  else if (transposesDq &&
           (config.blockM % 16 != 0 || consumers != 2 || problem.headDim != kWgmmaM * consumers))
    os << "WGMMA shape: a backward block_m (" << config.blockM
       << ") that is not a multiple of 64 computes dQ transposed: a multiple of 16, with two "
          "consumer warpgroups at head dim 128";
  else if (transposesDq && (problem.hasMaskMod || problem.hasScoreMod))
    os << "WGMMA shape: backward block_m " << config.blockM
       << " (dQ transposed) takes kernels without mask_mod or score_mod";
  else if (!transposesDq && config.blockM != kWgmmaM && config.blockM != kWgmmaM * consumers)
    os << "WGMMA shape: backward block_m (" << config.blockM << ") must be 64, "
       << kWgmmaM * consumers
       << " (64 per consumer warpgroup), or with two consumers at head dim 128 another "
          "multiple of 16 (dQ transposed)";
  else if (config.blockM == kWgmmaM && (passColumns / consumers) % 64 != 0)
    os << "WGMMA shape: with block_m 64 each consumer's dQ piece is " << passColumns << " / "
       << consumers << " = " << passColumns / consumers
       << " columns, which must be a multiple of 64";
  else if (config.producerWarpgroups != 1)
    os << "warpgroups: the backward has one producer warpgroup, got " << config.producerWarpgroups;
  else if (config.stages < 1 || config.stages > 4)
    os << "pipeline: backward stages must be 1 to 4, got " << config.stages;
  else if (config.persistentBlocksPerSm != 0)
    os << "schedule: the backward runs one block per key tile (persistent_blocks_per_sm 0)";
  else if (int64_t need = estimateBackwardConsumerRegisters(problem, config);
           need > config.consumerRegisters)
    os << "register budget: a backward consumer thread needs about " << need
       << " registers (dK, dV, Sᵀ, dPᵀ, dQ), budget " << config.consumerRegisters;
  else if (config.consumerRegisters % 8 != 0 || config.consumerRegisters < 24 ||
           config.consumerRegisters > 256 || config.producerRegisters % 8 != 0 ||
           config.producerRegisters < 24 || config.producerRegisters > 256)
    os << "register budget: consumer_registers (" << config.consumerRegisters
       << ") and producer_registers (" << config.producerRegisters
       << ") must be multiples of 8 in [24, 256] (setmaxnreg)";
  else if (std::optional<std::string> overrun = launchRegisterOverrun(config))
    os << *overrun;
  else if (int64_t bytes =
               allocateSharedMemory(backwardKernelSmemRequests(problem, config, 1)).total +
               kSmemBaseAlignSlack;
           bytes > kMaxSharedMemoryPerBlock)
    os << "shared-memory capacity: backward block_m " << config.blockM << ", block_n "
       << config.blockN << ", stages " << config.stages << ", head_dim " << problem.headDim
       << " needs " << bytes << " bytes, limit " << kMaxSharedMemoryPerBlock;
  else
    return std::nullopt;
  return os.str();
}

std::vector<TileConfig> enumerateBackwardTileCandidates(const TileProblem &problem) {
  std::vector<TileConfig> candidates;
  for (int consumers : {1, 2}) {
    // block_m 64 splits dQ's piece by columns, 64 x consumers by rows (the
    // same with one consumer).
    std::vector<int> rows{kWgmmaM};
    if (consumers > 1)
      rows.push_back(kWgmmaM * consumers);
    // dQ transposed (two consumers at head dim 128; wider steps exceed the
    // consumers' registers).
    rows.push_back(kBackwardTransposedDqRows);
    // Two consumers at 256 registers leave the producer none (2 x 256 of
    // 65536 / 128 = 512); one consumer has room for 256.
    TileConfig registers = backwardTileConfig(problem);
    registers.consumerWarpgroups = consumers;
    fitBackwardRegisters(problem, registers);
    const std::vector<int> budgets =
        consumers == 1 ? std::vector<int>{240, 256} : std::vector<int>{240};
    for (int blockM : rows)
      for (int stages = 1; stages <= 4; ++stages)
        for (int budget : budgets) {
          TileConfig config = backwardTileConfig(problem);
          config.consumerWarpgroups = consumers;
          // Past head dim 128 two consumers share a 64-key tile.
          config.blockN = problem.headDim > 128 ? kWgmmaM : kWgmmaM * consumers;
          config.blockM = blockM;
          config.stages = stages;
          config.consumerRegisters = budget;
          config.producerRegisters = registers.producerRegisters;
          if (!checkBackwardTileLegality(problem, config))
            candidates.push_back(config);
        }
  }
  return candidates;
}

} // namespace attn
