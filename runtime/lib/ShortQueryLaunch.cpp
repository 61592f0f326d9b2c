//===- ShortQueryLaunch.cpp - Decode, short queries and paged KV caches ---===//
//
// The host side of a softmax module's split-KV kernels (attn_split_kv_sm90.cuh):
// which calls take them, how many splits of the keys, the paged cache's
// checks, and the launch of the split and combine kernels.
//
//===----------------------------------------------------------------------===//

#include "attn/runtime/AttentionLaunch.h"
#include "attn/runtime/Driver.h"

#include "LaunchChecks.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <optional>

namespace attn {

using namespace detail;

namespace {

using attn_abi::kMaxKeySplits;
/// Shared memory a multiprocessor gives its blocks, and what each block
/// reserves besides its dynamic share (sm_90).
constexpr int kSharedBytesPerSm = 233472;
constexpr int kSharedReservedPerBlock = 1024;

bool shortQueryModule(const AttnLaunchConfig &config) {
  return !config.linearFamily && !config.backward;
}

/// Stages of keys (splitKvBlockN each) in `seqlenK` keys, at least one.
int64_t keyTilesOf(const AttnLaunchConfig &config, int64_t seqlenK) {
  const int blockN = attn_abi::splitKvBlockN(config.headDim);
  return std::max<int64_t>((seqlenK + blockN - 1) / blockN, 1);
}

int64_t rowsPerBlock(const AttnLaunchConfig &config) {
  return attn_abi::splitKvRows(config.headDim);
}

/// Blocks of packed rows (the query heads of a kv head times the query
/// positions) per (batch, kv head).
int64_t rowBlocksOf(const AttnLaunchConfig &config, int64_t seqlenQ) {
  const int64_t packedRows = int64_t(config.qHeads / config.kvHeads) * seqlenQ;
  return (packedRows + rowsPerBlock(config) - 1) / rowsPerBlock(config);
}

/// Whether the split kernel's grid holds the call: y holds each (row block,
/// kv head), z each batch index.
bool fitsShortQueryGrid(const AttnLaunchConfig &config, int64_t rowBlocks, int64_t batch) {
  return rowBlocks * config.kvHeads <= 65535 && batch <= 65535;
}

/// Query rows few enough that the short-query path's products cost little
/// beside reading the keys: such calls take it whatever the packing saves.
constexpr int64_t kFewQueryRows = 16;

/// What a block costs besides its stages, in stages: loading Q, filling
/// the pipeline, merging its warps' rows and storing them.
constexpr int64_t kBlockOverheadStages = 2;

/// The split count with the least time in the model (waves of resident
/// blocks times the stages each block streams, plus its overhead), the
/// fewest among equals.
int automaticSplits(int64_t baseBlocks, int64_t keyTiles, int64_t residentBlocks) {
  const int64_t limit = std::clamp<int64_t>(keyTiles / 2, 1, kMaxKeySplits);
  int best = 1;
  int64_t bestCost = INT64_MAX;
  for (int64_t splits = 1; splits <= limit; ++splits) {
    const int64_t waves = (baseBlocks * splits + residentBlocks - 1) / residentBlocks;
    const int64_t cost = waves * ((keyTiles + splits - 1) / splits + kBlockOverheadStages);
    if (cost < bestCost) {
      bestCost = cost;
      best = static_cast<int>(splits);
    }
  }
  return best;
}

/// The split count attn-tune measured for the call's shape bucket
/// (AttnLaunchConfig::tunedKeySplits), if it did.
std::optional<int> tunedSplitsOf(const AttnLaunchConfig &config, const LogicalShape &shape) {
  if (config.tunedKeySplits.empty())
    return std::nullopt;
  const ShapeBucket bucket =
      ShapeBucket::of(TuningShape{shape.batch, shape.seqlenQ, shape.seqlenK}, config.qHeads);
  for (const TunedKeySplits &tuned : config.tunedKeySplits)
    if (tuned.bucket == bucket)
      return tuned.keySplits;
  return std::nullopt;
}

ShortQueryPlan planOf(const AttnLaunchConfig &config, const AttnForwardArgs &args,
                      int multiprocessors, bool withWorkspace) {
  ShortQueryPlan plan;
  if (!shortQueryModule(config) || args.keySplits == 0)
    return plan;
  const LogicalShape shape = logicalShape(args);
  const bool automatic = args.keySplits < 0;
  // A paged call goes where a contiguous one would if the forward kernel
  // reads its pages.
  const bool forwardMayTake = !onlyShortQueryPath(config, args);
  if (automatic && forwardMayTake &&
      (shape.seqlenQ > attn_abi::kShortQueryMaxRows || args.packed.active() || args.tileCoverage ||
       args.tileKeyBits || args.workOrder))
    return plan;
  // A count measured on a contiguous cache replaces the model's for
  // contiguous calls only: paged calls hide their page lookups behind more
  // blocks in flight than a contiguous cache needs (at batch 8, 8 kv heads,
  // 32768 keys: 2 splits are the fastest contiguous, and cost a paged cache
  // 27 % where the model's 4 cost it 1 to 2 %).
  const std::optional<int> tuned =
      automatic && !args.paged.active() ? tunedSplitsOf(config, shape) : std::nullopt;
  if (tuned == 0)
    return plan;
  const int64_t rowBlocks = rowBlocksOf(config, shape.seqlenQ);
  // Past a few rows the forward kernel's WGMMA tiles outrun the path's
  // warp-level products, unless packing the heads halves the reads of K and
  // V (each row block reads them once, each forward work tile once).
  const int64_t forwardReads =
      int64_t(config.qHeads) * ((shape.seqlenQ + config.blockM - 1) / config.blockM);
  if (automatic && !tuned && forwardMayTake && shape.seqlenQ > kFewQueryRows &&
      2 * rowBlocks * config.kvHeads > forwardReads)
    return plan;
  plan.rowBlocks = static_cast<int>(std::max<int64_t>(rowBlocks, 1));
  if (!automatic) {
    plan.splits = args.keySplits;
    return plan;
  }
  if (!withWorkspace) {
    plan.splits = 1;
    return plan;
  }
  const int64_t keyTiles = keyTilesOf(config, shape.seqlenK);
  // The bucket's count, measured at one key length of the bucket, leaves no
  // split without keys at a shorter one.
  if (tuned > 0) {
    plan.splits = static_cast<int>(std::min<int64_t>(*tuned, keyTiles));
    return plan;
  }
  const int64_t perSm = std::max(
      1, kSharedBytesPerSm /
             (attn_abi::splitKvSharedBytes(config.headDim) + kSharedReservedPerBlock));
  const int64_t baseBlocks = std::max<int64_t>(shape.batch, 1) * config.kvHeads * rowBlocks;
  plan.splits = automaticSplits(baseBlocks, keyTiles, perSm * multiprocessors);
  return plan;
}

struct ShortQueryScratch {
  uint64_t outputBytes = 0, lseBytes = 0;
  uint64_t bytes() const { return outputBytes + lseBytes; }
};

ShortQueryScratch scratchOf(const AttnLaunchConfig &config, const AttnForwardArgs &args,
                            int splits) {
  ShortQueryScratch scratch;
  if (splits <= 1)
    return scratch;
  const LogicalShape shape = logicalShape(args);
  const uint64_t rows = uint64_t(shape.batch) * uint64_t(config.qHeads) * uint64_t(shape.seqlenQ);
  scratch.outputBytes = uint64_t(splits) * rows * uint64_t(config.headDim) * sizeof(float);
  scratch.lseBytes = (uint64_t(splits) * rows * sizeof(float) + 15) & ~15ull;
  return scratch;
}

attn_abi::AttnSplitKvParams encodeParams(const AttnLaunchConfig &config,
                                         const AttnForwardArgs &args, const ShortQueryPlan &plan) {
  attn_abi::AttnSplitKvParams params{};
  params.q = args.q.data;
  params.k = args.k.data;
  params.v = args.v.data;
  params.o = args.o.data;
  const TensorView *views[] = {&args.q, &args.k, &args.v, &args.o};
  long long(*strides[])[3] = {&params.q_strides, &params.k_strides, &params.v_strides,
                              &params.o_strides};
  for (int index = 0; index < 4; ++index)
    for (int dim = 0; dim < 3; ++dim)
      (*strides[index])[dim] = views[index]->strides[dim];
  params.lse = args.lse;
  const LogicalShape shape = logicalShape(args);
  params.batch = static_cast<int>(shape.batch);
  params.seqlen_q = static_cast<int>(shape.seqlenQ);
  params.seqlen_k = static_cast<int>(shape.seqlenK);
  if (args.paged.active()) {
    params.block_table = args.paged.blockTable;
    params.block_table_stride = args.paged.blockTableStride;
    params.max_pages = static_cast<int>(args.paged.maxPages);
    params.seqlens_k = args.paged.seqlensK;
    params.num_pages = static_cast<int>(args.k.shape[0]);
    params.page_size = static_cast<int>(args.k.shape[1]);
    const attn_abi::PageDivider divider = attn_abi::pageDividerOf(params.page_size);
    params.page_magic = divider.magic;
    params.page_shift = divider.shift;
  }
  params.q_heads = config.qHeads;
  params.kv_heads = config.kvHeads;
  params.row_blocks = plan.rowBlocks;
  params.splits = plan.splits;
  constexpr double kLog2e = 1.4426950408889634074;
  params.scale = config.scale;
  params.scale_log2 = static_cast<float>(double(config.scale) * kLog2e);
  fillCaptureEntries(args.captures, params.captures);
  return params;
}

} // namespace

bool detail::onlyShortQueryPath(const AttnLaunchConfig &config, const AttnForwardArgs &args) {
  const bool forwardReadsPages =
      config.pagedForward && forwardPageBoxRows(config, args.k.shape[1]) > 0;
  return args.paged.active() && !forwardReadsPages;
}

std::string detail::whyForwardSkipsPages(const AttnLaunchConfig &config,
                                         const AttnForwardArgs &args) {
  if (!config.pagedForward)
    return "the forward kernel was compiled without paged KV caches (CompileOptions::pagedKv, "
           "attnc --paged-kv)";
  return fmt::format("the forward kernel reads pages of a multiple of 16 rows, not pages of {} "
                     "rows",
                     args.k.shape[1]);
}

void detail::validatePagedKvCache(const AttnLaunchConfig &config, const AttnForwardArgs &args) {
  const PagedKvCache &paged = args.paged;
  if (args.packed.active())
    fail("paged", "a paged KV cache takes unpacked queries: pass q as [batch, seqlen_q, "
                  "q_heads, head_dim] without packed sequences");
  if (args.keySplits == 0 && onlyShortQueryPath(config, args))
    fail("keySplits", "0 asks for the forward kernel, but " + whyForwardSkipsPages(config, args));
  if (args.tileCoverage || args.tileKeyBits || args.workOrder)
    fail("paged", "a paged call takes no tile coverage, key bits or work order");
  for (auto [pointer, name] : {std::make_pair(paged.blockTable, "paged.blockTable"),
                               std::make_pair(paged.seqlensK, "paged.seqlensK")}) {
    if (!pointer)
      fail(name, "pointer is null");
    if (reinterpret_cast<uintptr_t>(pointer) % alignof(int32_t) != 0)
      fail(name, "pointer must be 4-byte aligned");
  }
  const int64_t pages = args.k.shape[0], pageSize = args.k.shape[1];
  if (pages <= 0 || pageSize <= 0)
    fail("k", fmt::format("a page pool [pages, page_size, kv_heads, head_dim] needs pages and "
                          "rows, got {}",
                          shapeString(args.k)));
  requireIntRange(pages, "k", "page count");
  requireForwardSeqlen(pageSize, "k");
  if (paged.maxPages <= 0)
    fail("paged.maxPages", fmt::format("must be positive, got {}", paged.maxPages));
  requireIntRange(paged.maxPages, "paged.maxPages", "page count");
  if (paged.blockTableStride < paged.maxPages)
    fail("paged.blockTableStride",
         fmt::format("{} is shorter than a row of paged.maxPages = {} pages",
                     paged.blockTableStride, paged.maxPages));
  if (paged.maxSeqlenK < 0 || paged.maxSeqlenK > paged.maxPages * pageSize)
    fail("paged.maxSeqlenK",
         fmt::format("{} is outside [0, paged.maxPages x page size = {}]", paged.maxSeqlenK,
                     paged.maxPages * pageSize));
  requireForwardSeqlen(paged.maxSeqlenK, "paged.maxSeqlenK");
  requireIntRange(args.q.batch(), "q", "batch");
  requireForwardSeqlen(args.q.seqlen(), "q");
}

void detail::validateShortQueryArgs(const AttnLaunchConfig &config, const AttnForwardArgs &args) {
  if (args.keySplits < -1)
    fail("keySplits", fmt::format("must be -1 (automatic), 0 (the forward kernel) or a split "
                                  "count, got {}",
                                  args.keySplits));
  if (args.keySplits > kMaxKeySplits)
    fail("keySplits", fmt::format("{} splits exceed the limit of {}", args.keySplits,
                                  kMaxKeySplits));
  if (args.keySplits >= 1 && !shortQueryModule(config))
    fail("keySplits", "only softmax forward modules have the short-query path");
  if (args.keySplits >= 1 && args.packed.active())
    fail("keySplits", "packed sequences take the forward kernel: leave keySplits at -1 or 0");
  const LogicalShape shape = logicalShape(args);
  const int64_t rowBlocks = rowBlocksOf(config, shape.seqlenQ);
  if ((onlyShortQueryPath(config, args) || args.keySplits >= 1) &&
      !fitsShortQueryGrid(config, rowBlocks, shape.batch)) {
    if (!fitsShortQueryGrid(config, rowBlocks, /*batch=*/1))
      fail("q", fmt::format("{} query rows are too many for the short-query path's grid ({} "
                            "blocks of {} packed rows per kv head)",
                            shape.seqlenQ, rowBlocks, rowsPerBlock(config)));
    fail("q", fmt::format("batch {} exceeds the short-query path's limit of 65535",
                          shape.batch));
  }
}

namespace {
/// planOf, except that an automatic choice falls back to the forward kernel
/// where the path's grid limits would refuse the call.
ShortQueryPlan checkedPlanOf(const AttnLaunchConfig &config, const AttnForwardArgs &args,
                             int multiprocessors, bool withWorkspace) {
  const ShortQueryPlan plan = planOf(config, args, multiprocessors, withWorkspace);
  if (plan.splits > 0 && !onlyShortQueryPath(config, args) && args.keySplits < 0 &&
      !fitsShortQueryGrid(config, plan.rowBlocks, logicalShape(args).batch))
    return ShortQueryPlan{};
  return plan;
}
} // namespace

ShortQueryPlan detail::shortQueryPlanOf(const AttnLaunchConfig &config,
                                        const AttnForwardArgs &args, int multiprocessors) {
  return checkedPlanOf(config, args, multiprocessors, args.workspace != nullptr);
}

ShortQueryPlan shortQueryPlanFor(const AttnLaunchConfig &config, const AttnForwardArgs &args,
                                 int multiprocessors) {
  validateForwardArgs(config, args);
  return shortQueryPlanOf(config, args, multiprocessors);
}

int modelKeySplits(const AttnLaunchConfig &config, const AttnForwardArgs &args,
                   int multiprocessors) {
  validateForwardArgs(config, args);
  AttnLaunchConfig model = config;
  model.tunedKeySplits.clear();
  AttnForwardArgs automatic = args;
  automatic.keySplits = -1;
  return checkedPlanOf(model, automatic, multiprocessors, /*withWorkspace=*/true).splits;
}

bool combineLaunchesDependent(int splits, uint64_t splitBlocks, int multiprocessors) {
  return splitBlocks <= uint64_t(multiprocessors) || splits <= kDependentCombineMaxSplits;
}

std::vector<int> keySplitLadder(const AttnLaunchConfig &config, int64_t seqlenK) {
  const int64_t limit = std::min<int64_t>(keyTilesOf(config, seqlenK), kMaxKeySplits);
  std::vector<int> ladder;
  for (int64_t power = 1; power <= limit; power *= 2) {
    ladder.push_back(int(power));
    if (power >= 2 && power + power / 2 <= limit)
      ladder.push_back(int(power + power / 2));
  }
  ladder.push_back(0);
  return ladder;
}

std::optional<uint64_t> detail::shortQueryWorkspaceBytes(const AttnLaunchConfig &config,
                                                         const AttnForwardArgs &args,
                                                         int multiprocessors) {
  const ShortQueryPlan plan = checkedPlanOf(config, args, multiprocessors, /*withWorkspace=*/true);
  if (plan.splits == 0)
    return std::nullopt;
  return scratchOf(config, args, plan.splits).bytes();
}

ShortQueryFunctions loadShortQueryFunctions(const Module &module, const AttnLaunchConfig &config) {
  ShortQueryFunctions functions{module.function(ATTN_SPLIT_KV_KERNEL_NAME),
                                module.function(ATTN_SPLIT_KV_COMBINE_KERNEL_NAME)};
  functions.split.setMaxDynamicSharedMemory(attn_abi::splitKvSharedBytes(config.headDim));
  return functions;
}

void launchShortQuery(ShortQueryFunctions &functions, const AttnLaunchConfig &config,
                      const AttnForwardArgs &args, CUstream stream) {
  validateForwardArgs(config, args);
  const int multiprocessors = multiprocessorsOf(currentDevice());
  const ShortQueryPlan plan = shortQueryPlanOf(config, args, multiprocessors);
  if (plan.splits == 0)
    fail("keySplits", "the call does not take the short-query path (keySplits 0, or an "
                      "automatic choice of the forward kernel)");
  const LogicalShape shape = logicalShape(args);
  if (shape.batch == 0 || shape.seqlenQ == 0)
    return;
  validateDevicePointers(config, args);
  attn_abi::AttnSplitKvParams params = encodeParams(config, args, plan);
  const ShortQueryScratch scratch = scratchOf(config, args, plan.splits);
  if (scratch.bytes() > 0) {
    requireWorkspace(args.workspace, args.workspaceBytes, scratch.bytes(),
                     fmt::format("{} splits of the keys", plan.splits), "forwardWorkspaceBytes");
    auto *base = static_cast<unsigned char *>(args.workspace);
    if (reinterpret_cast<uintptr_t>(base) % 16 != 0)
      fail("workspace", "the short-query path's pieces need a 16-byte aligned workspace");
    params.partial_o = reinterpret_cast<float *>(base);
    params.partial_lse = reinterpret_cast<float *>(base + scratch.outputBytes);
  }
  const int sharedBytes = attn_abi::splitKvSharedBytes(config.headDim);
  functions.split.setMaxDynamicSharedMemory(sharedBytes);
  void *kernelArgs[] = {&params};
  functions.split.launch(Dim3{static_cast<unsigned>(plan.splits),
                              static_cast<unsigned>(plan.rowBlocks * config.kvHeads),
                              static_cast<unsigned>(shape.batch)},
                         Dim3{attn_abi::kSplitKvThreads, 1, 1}, sharedBytes, stream, kernelArgs);
  if (plan.splits > 1) {
    const uint64_t rows = uint64_t(shape.batch) * config.qHeads * shape.seqlenQ;
    const Dim3 combineGrid{static_cast<unsigned>(rows),
                           static_cast<unsigned>(config.headDim / ATTN_SPLIT_KV_COMBINE_COLUMNS),
                           1};
    const Dim3 combineBlock{ATTN_SPLIT_KV_COMBINE_THREADS, 1, 1};
    const uint64_t splitBlocks =
        uint64_t(plan.splits) * plan.rowBlocks * config.kvHeads * shape.batch;
    if (combineLaunchesDependent(plan.splits, splitBlocks, multiprocessors))
      functions.combine.launchDependent(combineGrid, combineBlock, 0, stream, kernelArgs);
    else
      functions.combine.launch(combineGrid, combineBlock, 0, stream, kernelArgs);
  }
}

} // namespace attn
