//===- ForwardSchedule.cpp - Forward grid, tail split, work orders --------===//

#include "attn/runtime/AttentionLaunch.h"

#include "LaunchChecks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

namespace attn {

using namespace detail;

int forwardHeadsPerTile(const AttnLaunchConfig &config, const AttnForwardArgs &args) {
  // Two consumer warpgroups of 64 rows each (the kernel's kMayPackHeads).
  constexpr int kSliceRows = 64, kPackedHeads = 2;
  if (config.linearFamily || config.backward || config.automaticWorkOrder ||
      config.blockM != kPackedHeads * kSliceRows || config.kvHeads <= 0 ||
      config.qHeads % config.kvHeads != 0 || (config.qHeads / config.kvHeads) % kPackedHeads != 0 ||
      args.workOrder || args.tileCoverage || args.tileKeyBits)
    return 1;
  return logicalShape(args).seqlenQ <= kSliceRows ? kPackedHeads : 1;
}

int forwardPageBoxRows(const AttnLaunchConfig &config, int64_t pageSize) {
  // A box lies inside one page and one key tile, and whole 8-row swizzle
  // atoms of it; boxes of 8 rows would double the producer's copies again,
  // so pages of an odd multiple of 8 rows stay on the short-query path.
  if (config.blockN <= 0 || pageSize <= 0)
    return 0;
  const int64_t rows = std::gcd(pageSize, int64_t(config.blockN));
  return rows % 16 == 0 ? static_cast<int>(rows) : 0;
}

int64_t forwardWorkTiles(const AttnLaunchConfig &config, int batch, int seqlenQ, int headsPerTile) {
  if (config.blockM <= 0)
    fail("config", "blockM must be positive");
  if (headsPerTile <= 0 || config.blockM % headsPerTile != 0 || config.qHeads % headsPerTile != 0)
    fail("forwardGrid", fmt::format("{} heads a work tile do not divide blockM {} and {} query "
                                    "heads",
                                    headsPerTile, config.blockM, config.qHeads));
  if (batch < 0 || seqlenQ < 0 || config.qHeads < 0)
    fail("forwardGrid", "negative extent");
  const int queryRows = config.blockM / headsPerTile;
  int64_t queryBlocks = (int64_t(seqlenQ) + queryRows - 1) / queryRows;
  // The kernel counts work tiles in 32-bit ints. Below 2^56, so no overflow.
  int64_t tilesPerBatch = queryBlocks * (config.qHeads / headsPerTile);
  if (batch != 0 && tilesPerBatch > std::numeric_limits<int>::max() / batch)
    fail("q", fmt::format("batch {} x heads {} / {} x ceil(seqlen / {}) {} work tiles exceed "
                          "2^31 - 1",
                          batch, config.qHeads, headsPerTile, queryRows, queryBlocks));
  return tilesPerBatch * batch;
}

Dim3 forwardGrid(const AttnLaunchConfig &config, int batch, int seqlenQ, int multiprocessors,
                 int headsPerTile) {
  if (multiprocessors <= 0)
    fail("forwardGrid", "multiprocessor count must be positive");
  int64_t tiles = forwardWorkTiles(config, batch, seqlenQ, headsPerTile);
  Dim3 grid;
  grid.x = static_cast<unsigned>(
      config.persistentBlocksPerSm > 0
          ? std::min<int64_t>(tiles, int64_t(config.persistentBlocksPerSm) * multiprocessors)
          : tiles);
  grid.y = 1;
  grid.z = 1;
  return grid;
}

ForwardTailSplit forwardTailSplitFor(const AttnLaunchConfig &config, int batch, int seqlenQ,
                                     int seqlenK, int gridBlocks) {
  ForwardTailSplit split;
  // Pieces of head dim 256 carry twice the O, and measured slower on H100.
  constexpr int kMaxHeadDim = 128;
  const int64_t tiles = forwardWorkTiles(config, batch, seqlenQ);
  if (!config.evenWorkTiles || config.headDim > kMaxHeadDim ||
      config.persistentBlocksPerSm <= 0 || gridBlocks <= 0 || tiles <= gridBlocks ||
      config.blockN <= 0 || seqlenK <= 0)
    return split;
  const int64_t tail = tiles % gridBlocks;
  const int64_t keyTiles = (int64_t(seqlenK) + config.blockN - 1) / config.blockN;
  const int64_t tailKeyTiles = tail * keyTiles;
  // Every block's run must hold a key tile: a tile's pieces are those of
  // the blocks from the one holding its first key tile to the one holding
  // its last. A piece costs its own Q load, pipeline fill and combination:
  // the split needs work tiles of at least kMinKeyTiles key tiles and must
  // shorten the whole run by at least 1 %: on H100 shorter pieces or smaller
  // savings measured slower (docs/benchmarks.md).
  constexpr int64_t kMinKeyTiles = 16;
  const int64_t longestRun = (tailKeyTiles + gridBlocks - 1) / gridBlocks;
  const int64_t rounds = tiles / gridBlocks + 1;
  if (tail == 0 || tailKeyTiles < gridBlocks || keyTiles < kMinKeyTiles ||
      100 * (keyTiles - longestRun) < rounds * keyTiles)
    return split;
  split.tiles = static_cast<int>(tail);
  split.keyTiles = static_cast<int>(keyTiles);
  return split;
}

uint64_t workOrderBytes(const AttnLaunchConfig &config, const AttnForwardArgs &args) {
  LogicalShape shape = logicalShape(args);
  return uint64_t(forwardWorkTiles(config, static_cast<int>(shape.batch),
                                   static_cast<int>(shape.seqlenQ))) *
         sizeof(int32_t);
}

std::vector<int32_t> workOrderOf(const std::vector<int32_t> &costs, WorkOrderPolicy policy) {
  int64_t total = 0;
  for (int32_t cost : costs)
    total += std::max<int32_t>(cost, 0);
  std::vector<int32_t> keys;
  for (int32_t cost : costs) {
    const int64_t clamped = std::max<int32_t>(cost, 0);
    const bool outlier = clamped * int64_t(costs.size()) > 2 * total;
    keys.push_back(policy == WorkOrderPolicy::OutliersFirst && !outlier
                       ? 0
                       : static_cast<int32_t>(std::min<int64_t>(clamped, ATTN_WORK_ORDER_MAX_KEY)));
  }
  std::vector<int32_t> order(costs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t left, int32_t right) { return keys[left] > keys[right]; });
  return order;
}

DeviceBuffer buildWorkOrder(const Module &module, const AttnLaunchConfig &config,
                            const AttnForwardArgs &args, CUstream stream,
                            WorkOrderPolicy policy) {
  AttnForwardArgs checked = args;
  checked.workOrder = nullptr;
  validateForwardArgs(config, checked);
  uint64_t tiles = workOrderBytes(config, checked) / sizeof(int32_t);
  // The order, then the costs it is sorted by: one allocation, so that no
  // free has to wait for the sort.
  DeviceBuffer order(std::max<uint64_t>(2 * tiles, 1) * sizeof(int32_t));
  if (tiles == 0)
    return order;
  validateDevicePointers(config, checked);
  attn_abi::AttnFwdParams params = encodeForwardParams(config, checked);
  // The order is for a launch with a work order, whose tiles take one head
  // each (forwardHeadsPerTile), as workOrderBytes counts them.
  params.heads_per_tile = 1;
  int *orderData = static_cast<int *>(order.data());
  int *costData = orderData + tiles;
  // Both looked up before either launches: a failed lookup must not free
  // the buffer under a running kernel.
  KernelFunction costKernel = module.function(ATTN_WORK_COST_KERNEL_NAME);
  KernelFunction orderKernel = module.function(ATTN_WORK_ORDER_KERNEL_NAME);
  constexpr uint64_t kTilesPerBlock = ATTN_WORK_COST_THREADS / 32;
  Dim3 grid{static_cast<unsigned>((tiles + kTilesPerBlock - 1) / kTilesPerBlock), 1, 1};
  void *costArgs[] = {&params, &costData};
  costKernel.launch(grid, Dim3{ATTN_WORK_COST_THREADS, 1, 1}, 0, stream, costArgs);
  launchWorkOrderSort(orderKernel, costData, static_cast<int>(tiles), policy, orderData, stream);
  return order;
}

void launchWorkOrderSort(KernelFunction &sortKernel, const int32_t *costs, int count,
                         WorkOrderPolicy policy, int32_t *order, CUstream stream) {
  int policyCode = policy == WorkOrderPolicy::OutliersFirst ? ATTN_WORK_ORDER_OUTLIERS_FIRST
                                                            : ATTN_WORK_ORDER_LONGEST_FIRST;
  void *arguments[] = {&costs, &count, &policyCode, &order};
  sortKernel.launch(Dim3{1, 1, 1}, Dim3{ATTN_WORK_ORDER_THREADS, 1, 1}, 0, stream, arguments);
}

namespace {
/// Lets this thread make driver calls that stream capture in global or
/// thread-local mode forbids (an allocation, an event query) while another
/// stream captures: they touch no capturing stream. The thread's mode comes
/// back with the guard's end.
class RelaxedCaptureMode {
public:
  RelaxedCaptureMode() { Driver::get().api().cuThreadExchangeStreamCaptureMode(&mode); }
  ~RelaxedCaptureMode() { Driver::get().api().cuThreadExchangeStreamCaptureMode(&mode); }
  RelaxedCaptureMode(const RelaxedCaptureMode &) = delete;
  RelaxedCaptureMode &operator=(const RelaxedCaptureMode &) = delete;

private:
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
};
} // namespace

const int32_t *AutomaticWorkOrders::orderFor(const Module &module, const AttnLaunchConfig &config,
                                             const AttnForwardArgs &args, CUstream stream) {
  if (!config.automaticWorkOrder || config.linearFamily || args.workOrder || args.tileCoverage ||
      args.packed.active() || args.paged.active())
    return nullptr;
  LogicalShape shape = logicalShape(args);
  std::tuple<int64_t, int64_t, int64_t> key{shape.batch, shape.seqlenQ, shape.seqlenK};
  std::lock_guard<std::mutex> lock(mutex);
  auto found = orders.find(key);
  // A finished order serves every call, captured or not, with no driver call.
  if (found != orders.end() && found->second.finished)
    return static_cast<const int32_t *>(found->second.order.data());
  RelaxedCaptureMode relaxed;
  // A stream whose capture status the driver refuses to tell (the legacy
  // stream while another stream captures) counts as capturing.
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (Driver::get().api().cuStreamIsCapturing(stream, &capture) != CUDA_SUCCESS)
    capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  const bool capturing = capture != CU_STREAM_CAPTURE_STATUS_NONE;
  if (found != orders.end()) {
    Built &built = found->second;
    if (!capturing && Driver::get().api().cuEventQuery(built.done.get()) == CUDA_SUCCESS) {
      built.finished = true;
      return static_cast<const int32_t *>(built.order.data());
    }
    // A graph cannot wait for work outside it: it takes a finished order only.
    if (capturing)
      return nullptr;
    ATTN_CU_CHECK(cuStreamWaitEvent, stream, built.done.get(), 0);
    return static_cast<const int32_t *>(built.order.data());
  }
  // Building launches kernels, which a graph being captured would record
  // instead of running.
  if (capturing || orders.size() >= kMaxShapes)
    return nullptr;
  Built built;
  built.order = buildWorkOrder(module, config, args, stream, WorkOrderPolicy::OutliersFirst);
  built.done.record(stream);
  auto inserted = orders.emplace(key, std::move(built)).first;
  return static_cast<const int32_t *>(inserted->second.order.data());
}

size_t AutomaticWorkOrders::size() const {
  std::lock_guard<std::mutex> lock(mutex);
  return orders.size();
}

} // namespace attn
