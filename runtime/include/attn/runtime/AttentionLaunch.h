//===- AttentionLaunch.h - Forward attention kernel launch ------*- C++ -*-===//
//
// Host side of the forward softmax attention kernel: argument validation
// against the compiled plan, construction of the ABI parameter block
// (attn_params.h), and the launch itself.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_RUNTIME_ATTENTIONLAUNCH_H
#define ATTN_RUNTIME_ATTENTIONLAUNCH_H

#include "attn/runtime/DeviceBuffer.h"
#include "attn/runtime/Module.h"
#include "attn/runtime/Tensor.h"
#include "attn/runtime/TuningDatabase.h"

#include "attn_params.h"

#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace attn {

/// One extent of a captured buffer as the spec declares it.
struct CaptureDim {
  /// Fixed: exactly `size`. Any: whatever the caller passes. The others: the
  /// launch's batch, the kernel's query or kv heads, or q's or k's seqlen.
  enum class Kind { Fixed, Any, Batch, QHeads, KvHeads, SeqlenQ, SeqlenK };
  Kind kind = Kind::Any;
  int64_t size = 0; // Fixed only
};

/// A buffer that the spec's mask or score regions read (per-head slopes, a
/// bias table, per-token document ids), passed at every launch.
struct CaptureDecl {
  std::string name;             // identifier from the spec, used in error messages
  DType dtype = DType::F32;     // F32 or I32
  std::vector<CaptureDim> dims; // rank 1..kMaxCaptureRank
  /// The backward writes this (f32) capture's gradient (AttnBackwardArgs::
  /// captureGrads); the forward reads it like any other.
  bool requiresGrad = false;
};

/// How a declared extent is written in launch metadata and messages: the
/// size for Fixed, otherwise "?", "batch", "q_heads", "kv_heads", "seqlen_q"
/// or "seqlen_k".
std::string captureDimSpelling(const CaptureDim &dim);

/// The extent a declared dim requires at a launch of these sizes: the fixed
/// size, or the size it is tied to; -1 for Any (any extent >= 0).
int64_t requiredCaptureExtent(const CaptureDim &dim, int64_t batch, int64_t qHeads,
                              int64_t kvHeads, int64_t seqlenQ, int64_t seqlenK);

/// Whether `name` is an identifier ([A-Za-z_][A-Za-z0-9_]*), as capture
/// names must be.
bool isCaptureName(std::string_view name);

/// A split count attn-tune measured for the short-query path at one shape
/// bucket (ShapeBucket: batch x query heads, query length and key length,
/// each rounded up to a power of two). keySplits 0: the forward kernel.
struct TunedKeySplits {
  ShapeBucket bucket;
  int keySplits = 0;
  bool operator==(const TunedKeySplits &o) const {
    return bucket == o.bucket && keySplits == o.keySplits;
  }
};

/// What the compiler's plan fixes about a kernel (from its metadata).
struct AttnLaunchConfig {
  int headDim = 0;
  int qHeads = 0;
  int kvHeads = 0;
  DType dtype = DType::BF16;
  float scale = 1.0f;
  int blockM = 0;
  int blockN = 0;
  int threadsPerBlock = 0;
  /// Dynamic shared memory, including alignment slack.
  int sharedMemoryBytes = 0;
  /// The grid: 0 launches one block per work tile and lets the hardware
  /// hand them out; k > 0 launches k blocks per multiprocessor (a persistent
  /// grid, each block walking the work tiles round-robin).
  int persistentBlocksPerSm = 0;
  /// 1 when every work tile of the softmax kernel visits every key tile (no
  /// mask): a persistent grid's partial last round can then be split
  /// (ForwardTailSplit).
  int evenWorkTiles = 0;
  /// 1 when the softmax kernel has a mask_mod: its work tiles' costs follow
  /// the user's mask, which the default order does not foresee (Longformer's
  /// global rows visit every key tile). Kernel::run then starts the outliers
  /// first (WorkOrderPolicy::OutliersFirst), with an order it builds once per
  /// shape (AutomaticWorkOrders).
  int automaticWorkOrder = 0;
  /// 1 when the forward kernel also reads paged KV caches (compiled with
  /// CompileOptions::pagedKv, `attnc --paged-kv`): paged calls whose pages
  /// it reads (forwardPageBoxRows) may take it. 0: paged calls take the
  /// short-query path.
  int pagedForward = 0;
  std::string kernelName = ATTN_FWD_KERNEL_NAME;
  /// 1 for linear attention and retention (the chunkwise kernel, launched
  /// with AttnLinearArgs; kernelName is ATTN_LINEAR_KERNEL_NAME), 0 for
  /// softmax. The flags `normalize` and `gated` below are 0 or 1 and
  /// describe the linear family: normalized by the key sum (the state
  /// includes it), gated (a per-token log-decay is passed at launch).
  int linearFamily = 0;
  /// 1 for the backward module of a softmax kernel (the preprocess, main
  /// and conversion kernels, launched with AttnBackwardArgs; kernelName is
  /// ATTN_BWD_KERNEL_NAME; blockM and blockN are the backward plan's query
  /// rows a step and keys a block).
  int backward = 0;
  /// 1 for a backward module whose main kernel walks a step list (a
  /// mask_mod, one pass over the head dim): the launch runs the step-list
  /// kernel into the workspace first (attn_abi::bwdStepListEntries).
  int stepList = 0;
  /// 1 where the spec's mask is the built-in causal one (either
  /// alignment), for every kernel; the linear family's launch reads it.
  int causal = 1;
  int normalize = 0;
  int gated = 0;
  /// The spec's captured buffers, in declaration order (at most
  /// attn_abi::kMaxCaptures).
  std::vector<CaptureDecl> captures;
  /// The short-query path's measured split counts (the kernel's
  /// `tuned_key_splits`, from the tuning database when it was planned). An
  /// automatic call (keySplits -1) on a contiguous cache in one of these
  /// buckets takes the listed count instead of the model's
  /// (shortQueryPlanFor).
  std::vector<TunedKeySplits> tunedKeySplits;
  // A new field must also go into LaunchMetadata.cpp (the disk cache and
  // `attnc --emit=metadata` serialize every field).
};

/// Packed (variable-length) sequences: `batch` sequences laid end to end,
/// without padding, in q and o ([1, total_q, Hq, D]) and in k and v
/// ([1, total_k, Hkv, D]). Sequence b's queries are rows cuSeqlensQ[b] to
/// cuSeqlensQ[b + 1] - 1 of q and o, its keys rows cuSeqlensK[b] to
/// cuSeqlensK[b + 1] - 1 of k and v: device int32 arrays of batch + 1
/// non-decreasing offsets from 0 to the total. maxSeqlenQ and maxSeqlenK bound
/// every sequence's lengths; the grid is sized by them.
///
/// Masks and regions see positions inside each sequence and b as the batch
/// index (a causal mask is causal within each sequence, aligned by that
/// sequence's lengths). The captures' `batch`, `seqlen_q` and `seqlen_k`
/// extents are batch, maxSeqlenQ and maxSeqlenK. lse is [Hq, total_q].
///
/// The launch checks the arrays' memory but cannot read their values without
/// a synchronization: the kernel clamps each sequence to the tensors and to
/// the maxima, so that no access leaves them, but offsets that break the
/// rules above give wrong rows. uploadPackedSequences checks the values on
/// the host as it uploads them.
struct PackedSequences {
  const int32_t *cuSeqlensQ = nullptr;
  const int32_t *cuSeqlensK = nullptr;
  int64_t batch = 0;
  int64_t maxSeqlenQ = 0;
  int64_t maxSeqlenK = 0;

  /// Whether any field is set: the call is then a packed one.
  bool active() const { return cuSeqlensQ || cuSeqlensK || batch != 0; }
};

/// A paged KV cache (the vLLM / FlashInfer convention): k and v are
/// [numPages, pageSize, Hkv, D] pools, and sequence b's key j lies in page
/// blockTable[b * blockTableStride + j / pageSize], row j % pageSize. Pages
/// may come in any order and be shared between sequences. blockTable is a
/// device int32 array of batch rows of maxPages entries (row stride
/// blockTableStride >= maxPages); seqlensK a device int32 array of the batch's
/// key lengths, each at most maxSeqlenK <= maxPages * pageSize. The captures'
/// `seqlen_k` extent and the grid's key range are maxSeqlenK.
///
/// The launch cannot read the arrays without a synchronization: the kernels
/// clamp each length to [0, maxSeqlenK], and no page number leaves the
/// pools (the short-query path clamps it to [0, numPages), the forward
/// kernel's copies read zeros for it), but entries out of those ranges give
/// wrong rows. Rows of a sequence's last page past its length may hold
/// anything, NaN included.
struct PagedKvCache {
  const int32_t *blockTable = nullptr;
  int64_t blockTableStride = 0;
  int64_t maxPages = 0;
  const int32_t *seqlensK = nullptr;
  int64_t maxSeqlenK = 0;

  /// Whether any field is set: k and v are then page pools.
  bool active() const { return blockTable || seqlensK || maxPages != 0 || maxSeqlenK != 0; }
};

/// Device tensors of one forward call. q, o: [B, Sq, Hq, D]; k, v:
/// [B, Sk, Hkv, D]; lse: [B, Hq, Sq] fp32 contiguous, device memory;
/// captures: one per CaptureDecl of the config, in the same order. With
/// `packed` set, the sequences of the batch are packed (PackedSequences).
struct AttnForwardArgs {
  TensorView q, k, v, o;
  float *lse = nullptr;
  std::vector<CaptureView> captures;
  PackedSequences packed;
  /// Optional: the masks' tile coverage from buildTileCoverage for these
  /// shapes and captures (device memory of tileCoverageBytes bytes). Without
  /// it a mask the compiler could not classify is tested on every tile of
  /// the built-in mask's range.
  const unsigned char *tileCoverage = nullptr;
  /// Optional, with tileCoverage: the stored key bits of its partial tiles,
  /// from buildTileKeyBits for the same shapes, captures and coverage
  /// (device memory of at least tileKeyBitsSlotBytes bytes). With them the
  /// kernel tests a partial tile's pairs by one load a row instead of
  /// evaluating the mask_mod per pair.
  const void *tileKeyBits = nullptr;
  /// Optional: the order in which the work tiles start, from buildWorkOrder
  /// for these shapes, captures and tile coverage (device memory of
  /// workOrderBytes bytes). Without it they start in the default order
  /// (each head's query blocks from the last one down).
  const int32_t *workOrder = nullptr;
  /// Optional: device workspace of forwardWorkspaceBytes bytes, 4-byte
  /// aligned. With it, a kernel without a mask splits the last, partial
  /// round of its persistent grid among all blocks (ForwardTailSplit).
  /// Launches that share a workspace must not run concurrently.
  void *workspace = nullptr;
  uint64_t workspaceBytes = 0;
  /// Optional: a paged KV cache (PagedKvCache). Such calls take the forward
  /// kernel where a contiguous call of their shape would, the kernel was
  /// compiled for paged caches (AttnLaunchConfig::pagedForward) and the
  /// pages suit its tiles (forwardPageBoxRows); else the short-query path.
  PagedKvCache paged;
  /// The short-query (split-KV) path: -1 lets the launch choose it for short
  /// queries as shortQueryPlanFor says (and for paged calls whose pages the
  /// forward kernel cannot read), with its split count; 0 keeps the forward
  /// kernel; k >= 1 takes the path with k splits of the keys. Splits beyond
  /// one need the workspace (forwardWorkspaceBytes sizes it); without one
  /// the launch chooses a single split.
  int keySplits = -1;
};

/// The batch and sequence lengths a call has for its grid, its captures, its
/// tile coverage and its plan: the tensors' own, for packed sequences their
/// count and the longest lengths, for a paged cache the longest key length.
struct LogicalShape {
  int64_t batch, seqlenQ, seqlenK;
};

LogicalShape logicalShape(const AttnForwardArgs &args);

/// The offsets of packed sequences on the device (PackedSequences), made from
/// each sequence's lengths.
struct PackedSequenceOffsets {
  DeviceBuffer offsets; // cuSeqlensQ's batch + 1 entries, then cuSeqlensK's
  PackedSequences sequences;
  int64_t totalQ = 0;
  int64_t totalK = 0;
};

/// Checks the lengths (as many for keys as for queries, at least one
/// sequence, none negative, totals within int32) and uploads their running
/// sums; throws attn::Error naming "seqlensQ" or "seqlensK".
PackedSequenceOffsets uploadPackedSequences(const std::vector<int64_t> &seqlensQ,
                                            const std::vector<int64_t> &seqlensK);

/// Bytes of a tile coverage: one per (batch, query head, query block of
/// blockM rows, key tile of blockN rows); packed sequences count the longest
/// lengths (query blocks past a sequence's end are empty).
uint64_t tileCoverageBytes(const AttnLaunchConfig &config, const AttnForwardArgs &args);

/// Bytes of the slots at the start of a tile key bits buffer: one int32 per
/// tile coverage byte, 256-byte aligned. The partial tiles' words follow.
uint64_t tileKeyBitsSlotBytes(const AttnLaunchConfig &config, const AttnForwardArgs &args);

/// Bytes of a work order: one int32 per work tile (forwardWorkTiles of the
/// logical batch and query length).
uint64_t workOrderBytes(const AttnLaunchConfig &config, const AttnForwardArgs &args);

/// How buildWorkOrder orders the work tiles by their costs (the key tiles
/// each visits). Both keep the default order among tiles they rank equal.
enum class WorkOrderPolicy {
  /// Every tile by cost, longest first.
  LongestFirst,
  /// The outliers (tiles that cost more than twice the mean) first, longest
  /// first, then every other tile in the default order, which keeps the
  /// sharing of K and V in L2 between neighbouring work tiles. The order
  /// Kernel::run builds by itself (AttnLaunchConfig::automaticWorkOrder).
  OutliersFirst,
};

/// The order of work tiles of the given costs under `policy`: their indices,
/// ranked as WorkOrderPolicy says, equal ranks in index order; costs above
/// ATTN_WORK_ORDER_MAX_KEY rank as equal. The host form of what
/// buildWorkOrder computes on the GPU.
std::vector<int32_t> workOrderOf(const std::vector<int32_t> &costs, WorkOrderPolicy policy);

/// Checks that a config is self-consistent (positive sizes, kvHeads divides
/// qHeads, a 16-bit dtype, a finite scale, at most kMaxCaptures captures,
/// each with an identifier name, an f32 or i32 dtype, rank 1..kMaxCaptureRank
/// and positive fixed sizes); throws attn::Error("config: ...").
void validateLaunchConfig(const AttnLaunchConfig &config);

/// Checks the arguments against the config without touching the driver;
/// throws attn::Error whose message starts with the offending argument
/// ("q: ...", "k: ...", "lse: ...", "config: ...", "captures: ..." for their
/// count, "capture 'NAME': ..." for one of them).
void validateForwardArgs(const AttnLaunchConfig &config,
                         const AttnForwardArgs &args);

/// Checks with the driver that every non-empty argument, captures included,
/// is device memory of the current context's device and that its allocation
/// holds the whole view; throws attn::Error("q: ...", ...,
/// "capture 'NAME': ..."). Makes device 0's primary context current if no
/// context is.
void validateDevicePointers(const AttnLaunchConfig &config,
                            const AttnForwardArgs &args);

/// Builds the kernel's parameter block (encodes the tensor maps, so it needs
/// the driver). Q maps use blockM-row boxes, K/V maps blockN-row boxes (over
/// a paged cache, forwardPageBoxRows-row boxes of the pools; refused unless
/// the kernel reads such pages), the O map 64-row boxes, all 64 columns.
/// Validates first.
attn_abi::AttnFwdParams makeForwardParams(const AttnLaunchConfig &config,
                                          const AttnForwardArgs &args);

/// Fills params.captures from arguments validateForwardArgs has accepted:
/// args.captures in order, their extents padded with 1 up to
/// kMaxCaptureRank; the unused entries get a null pointer and extents 1.
/// Needs no driver.
void fillCaptureArgs(const AttnForwardArgs &args,
                     attn_abi::AttnFwdParams &params);

/// Query heads one work tile of the forward kernel takes for this call: 1,
/// or 2 where the tile packs two query heads of one kv head, 64 query
/// positions each, and reads K and V once for both. Packed for calls of at
/// most 64 query positions (the longest packed sequence's) to a kernel of
/// 128-row tiles (two consumer warpgroups) without a mask_mod
/// (automaticWorkOrder 0), without a work order and with an even number of
/// query heads per kv head: such a call's tile would otherwise hold at most
/// 64 rows.
int forwardHeadsPerTile(const AttnLaunchConfig &config, const AttnForwardArgs &args);

/// The rows of each copy the forward kernel makes from a paged KV cache of
/// `pageSize`-row pages: their greatest common divisor with blockN (a box
/// lies inside one page and one key tile), or 0 where that is not a
/// multiple of 16 (the page size is not: key tiles are) and only the
/// short-query path reads such pages.
int forwardPageBoxRows(const AttnLaunchConfig &config, int64_t pageSize);

/// The kernel's units of work: ceil(seqlenQ / (blockM / headsPerTile))
/// query blocks for each (batch, group of headsPerTile heads). Throws
/// attn::Error naming "q" when they exceed what an int counts.
int64_t forwardWorkTiles(const AttnLaunchConfig &config, int batch, int seqlenQ,
                         int headsPerTile = 1);

/// {grid blocks, 1, 1}: one per work tile, or with persistentBlocksPerSm =
/// k, min(work tiles, k x multiprocessors). Either way block b takes work
/// tiles b, b + gridDim.x, ... Throws like forwardWorkTiles. The grid of
/// one head a tile (the default) also serves a launch that packs heads:
/// its blocks past the fewer tiles find no work.
Dim3 forwardGrid(const AttnLaunchConfig &config, int batch, int seqlenQ, int multiprocessors,
                 int headsPerTile = 1);

/// The split of a persistent grid's last round: when it holds fewer work
/// tiles than blocks, its `tiles` work tiles are cut along their keyTiles
/// key tiles, laid end to end, into one equal run per block, so that no
/// block idles while others finish whole tiles. The pieces of a tile meet
/// in the workspace. Only kernels whose work tiles all visit every key tile
/// (AttnLaunchConfig::evenWorkTiles) split; packed sequences and a work
/// order do not. tiles == 0: no split (uneven work tiles, head dim above
/// 128, one block per tile, a full last round, work tiles of fewer than 16
/// key tiles, a split that would shorten the run by less than 1 %).
struct ForwardTailSplit {
  int tiles = 0;
  int keyTiles = 0;
};
ForwardTailSplit forwardTailSplitFor(const AttnLaunchConfig &config, int batch, int seqlenQ,
                                     int seqlenK, int gridBlocks);

/// How a call takes the short-query path (AttnForwardArgs::keySplits):
/// `splits` pieces of the keys of each block of splitKvRows packed rows
/// (the query heads of a kv head times the query positions), rowBlocks such
/// blocks per (batch, kv head). splits == 0: the call takes the forward
/// kernel. Chosen automatically, a call of up to 16 query rows takes the
/// path, and one of up to kShortQueryMaxRows rows where its row blocks read
/// K and V at most half as often as the forward kernel's work tiles would
/// (GQA packing); the splits minimize waves of resident blocks (two a
/// multiprocessor) times the stages each streams plus
/// a block's overhead, leaving each split at least two stages of keys;
/// without a workspace, one split. Where attn-tune measured the call's shape
/// bucket (config.tunedKeySplits), the measured count replaces both choices
/// for a contiguous cache (0: the forward kernel; at most one split per key
/// tile; still one without a workspace); a paged call keeps the model's.
struct ShortQueryPlan {
  int splits = 0;
  int rowBlocks = 0;
};
ShortQueryPlan shortQueryPlanFor(const AttnLaunchConfig &config, const AttnForwardArgs &args,
                                 int multiprocessors);

/// The split count the runtime's model gives a call with a workspace,
/// whatever config.tunedKeySplits lists (0: the forward kernel): the
/// baseline that attn-tune and first-use tuning measure others against.
int modelKeySplits(const AttnLaunchConfig &config, const AttnForwardArgs &args,
                   int multiprocessors);

/// The split counts worth measuring for a call of `seqlenK` keys: 1, 2, 3,
/// then powers of two and one and a half times them, up to one split per
/// key tile of the short-query path (at most kMaxKeySplits), then 0 (the
/// forward kernel).
std::vector<int> keySplitLadder(const AttnLaunchConfig &config, int64_t seqlenK);

/// Whether the short-query path launches its combine kernel as a dependent
/// of the split kernel (KernelFunction::launchDependent), so that the
/// combine's launch hides behind the split blocks' last stores. Its blocks
/// then start on the multiprocessors with room beside the split blocks:
/// every one where the split grid has at most one block each, else only a
/// few, which a combine of at most kDependentCombineMaxSplits pieces a row
/// does not mind and one of 256 pieces does (H200: 9 to 14 % slower than
/// after an ordinary launch; docs/benchmarks.md).
inline constexpr int kDependentCombineMaxSplits = 32;
bool combineLaunchesDependent(int splits, uint64_t splitBlocks, int multiprocessors);

/// Bytes of AttnForwardArgs::workspace that the call uses (0: none). On the
/// forward kernel, its tail split's: per tail tile and consumer warp a
/// counter, per block two pieces of BLOCK_M rows of fp32 O and log-sum-exp.
/// On the short-query path, with its automatic or requested splits beyond
/// one: per split and output row, head_dim fp32 values of O and a
/// log-sum-exp.
uint64_t forwardWorkspaceBytes(const AttnLaunchConfig &config, const AttnForwardArgs &args);

/// The short-query path's two kernels in a softmax module
/// (ATTN_SPLIT_KV_KERNEL_NAME, ATTN_SPLIT_KV_COMBINE_KERNEL_NAME).
struct ShortQueryFunctions {
  KernelFunction split;
  KernelFunction combine;
};
/// Looks both up (throws attn::Error when the module lacks them: a module
/// of another kind, or one compiled before the path existed) and allows
/// the split kernel its shared memory.
ShortQueryFunctions loadShortQueryFunctions(const Module &module, const AttnLaunchConfig &config);

/// Launches a call shortQueryPlanFor sends down the short-query path (plan
/// splits > 0) on `stream`: the split kernel, then with splits beyond one the
/// combine. Validates like launchForward first.
void launchShortQuery(ShortQueryFunctions &functions, const AttnLaunchConfig &config,
                      const AttnForwardArgs &args, CUstream stream);

/// Validates (validateForwardArgs, then validateDevicePointers), builds the
/// parameters, raises the kernel's dynamic shared memory limit and launches
/// on `stream`. Launches nothing when the batch or seqlen_q is zero, or when
/// a check fails.
void launchForward(KernelFunction &kernel, const AttnLaunchConfig &config,
                   const AttnForwardArgs &args, CUstream stream);

/// Runs the module's tile coverage kernel (ATTN_TILE_COVERAGE_KERNEL_NAME)
/// for the arguments' shapes and captures (q, k, captures; O, V and LSE are
/// not touched) and returns the coverage, to pass as args.tileCoverage to
/// every launch with the same shapes and captures. It tests every pair once
/// (B x Hq x Sq x Sk evaluations of the masks): build it once, reuse it.
/// Validates like launchForward (args.tileCoverage is ignored).
DeviceBuffer buildTileCoverage(const Module &module, const AttnLaunchConfig &config,
                               const AttnForwardArgs &args, CUstream stream);

/// Stores the kept keys of every partial tile of args.tileCoverage, for
/// args.tileKeyBits: the module's slot kernel (ATTN_TILE_SLOT_KERNEL_NAME)
/// numbers the partial tiles, then its key bits kernel
/// (ATTN_TILE_KEY_BITS_KERNEL_NAME) evaluates their pairs again and writes a
/// bit per pair: tileKeyBitsSlotBytes, then blockM x blockN / 8 bytes per
/// partial tile (2 KiB for 128 x 128 tiles; twice that past 128 keys a tile).
/// It synchronizes `stream` once, to size the buffer by the partial tiles'
/// count. Build it once per shape and captures, after the coverage, and pass
/// both to every launch. Validates like launchForward; throws attn::Error
/// naming "tileCoverage" when args has none.
DeviceBuffer buildTileKeyBits(const Module &module, const AttnLaunchConfig &config,
                              const AttnForwardArgs &args, CUstream stream);

/// Launches the work order kernel (`sortKernel`, the module's
/// ATTN_WORK_ORDER_KERNEL_NAME) on `stream`: `order` receives the ranking of
/// the `count` device `costs` under `policy`, what workOrderOf computes on the
/// host. buildWorkOrder's second step.
void launchWorkOrderSort(KernelFunction &sortKernel, const int32_t *costs, int count,
                         WorkOrderPolicy policy, int32_t *order, CUstream stream);

/// Runs the module's work cost kernel (ATTN_WORK_COST_KERNEL_NAME), which
/// counts the key tiles each work tile visits (with args.tileCoverage when
/// set), then its work order kernel (ATTN_WORK_ORDER_KERNEL_NAME), which
/// sorts them under `policy` (workOrderOf), both on `stream`, without a
/// synchronization. The buffer's first workOrderBytes bytes are the order
/// (the costs follow): pass it as args.workOrder to every launch with the
/// same shapes, captures and coverage, on `stream` or after it. Masks whose
/// longest work tiles the default order starts late (Longformer's global
/// rows, buffer-driven masks) then end with short ones; the output does not
/// depend on the order. Build it once, reuse it. Validates like
/// launchForward (args.workOrder is ignored).
DeviceBuffer buildWorkOrder(const Module &module, const AttnLaunchConfig &config,
                            const AttnForwardArgs &args, CUstream stream,
                            WorkOrderPolicy policy = WorkOrderPolicy::LongestFirst);

/// The work orders Kernel::run builds by itself for a config with
/// automaticWorkOrder, one per (batch, seqlen_q, seqlen_k) of one context:
/// built on `stream` by the first call with those shapes
/// (WorkOrderPolicy::OutliersFirst: two kernels, no synchronization; it
/// allocates the order's memory), then reused; calls on other streams wait
/// for the build until it has been seen finished. Calls that take none:
/// packed sequences, calls with a tile coverage or a work order of their
/// own, calls on a stream being captured into a graph while their shape's
/// order is not finished (capture never builds one), and shapes past the
/// first kMaxShapes. The driver calls run in relaxed capture mode, so that
/// a capture on another stream stays valid. The orders live as long as this
/// object, so that graphs captured with them stay valid.
class AutomaticWorkOrders {
public:
  static constexpr size_t kMaxShapes = 64;

  AutomaticWorkOrders() = default;
  AutomaticWorkOrders(const AutomaticWorkOrders &) = delete;
  AutomaticWorkOrders &operator=(const AutomaticWorkOrders &) = delete;

  /// The order to launch `args` with (null for none), `module` being the
  /// kernel's module in the current context. Validates like buildWorkOrder
  /// when it builds one.
  const int32_t *orderFor(const Module &module, const AttnLaunchConfig &config,
                          const AttnForwardArgs &args, CUstream stream);
  /// How many shapes have an order.
  size_t size() const;

private:
  struct Built {
    DeviceBuffer order;
    /// Recorded after the build on its stream.
    Event done;
    /// `done` has been seen complete: no call waits for it any more.
    bool finished = false;
  };
  mutable std::mutex mutex;
  std::map<std::tuple<int64_t, int64_t, int64_t>, Built> orders;
};

/// Device tensors of one linear attention / retention call (a linear-family
/// config). q, o: [B, S, Hq, D]; k, v: [B, S, Hkv, D] (one sequence length;
/// the TMA layout rules of the softmax kernel). The state S is
/// [B, Hq, D, D] fp32 contiguous (key dim, then value dim), the key sum z of
/// a normalized kernel [B, Hq, D] fp32: null initial values stand for zero,
/// null finals are not written; the final buffers may be the initial ones
/// (each block reads its part before it writes it). logDecay, for a gated kernel only:
/// [B, S, Hq] fp32 contiguous natural-log decays (<= 0).
///
/// Sequence parallelism: with a device workspace of linearWorkspaceBytes()
/// the sequence is cut into segments, so that batch x heads x segments
/// blocks fill the GPU; each segment's state contribution is computed first
/// (a second kernel of the module) and folded in by the segments after it.
/// Without a workspace one block walks the whole sequence. `segments` > 0
/// asks for that many segments (1: no split; see linearSplitFor); 0 lets
/// the runtime choose.
struct AttnLinearArgs {
  TensorView q, k, v, o;
  const float *initialState = nullptr;
  float *finalState = nullptr;
  const float *initialKeySum = nullptr;
  float *finalKeySum = nullptr;
  const float *logDecay = nullptr;
  void *workspace = nullptr;
  uint64_t workspaceBytes = 0;
  int segments = 0;
};

/// How launchLinear cuts a sequence: `segments` segments of
/// `segmentChunks` chunks (of blockM tokens) each for the main kernel; the
/// segment kernel computes the state of `stateSegments` pieces of
/// `stateChunks` chunks (a divisor of segmentChunks) covering the segments
/// before the last (all of them, non-causal).
struct LinearSplit {
  int segments = 1;
  int segmentChunks = 1;
  int stateSegments = 0;
  int stateChunks = 1;
};

/// The split for a problem on the current device: none when the unsplit
/// grid gives most multiprocessors a block; otherwise as many segments as
/// keep every multiprocessor's resident blocks busy (two of one value
/// slice, one of two: ATTN_LINEAR_BLOCKS_PER_SM), of at least 4 chunks
/// each. When `maxSegments` > 0, that many (at most one per chunk).
/// The pieces are fine enough for the segment kernel to fill the GPU too.
LinearSplit linearSplitFor(const AttnLaunchConfig &config, int64_t batch, int64_t seqlen,
                           int maxSegments = 0);

/// The workspace a split needs (0 for one segment): each segment's state,
/// key sum and decay, fp32.
uint64_t linearWorkspaceBytes(const AttnLaunchConfig &config, int64_t batch,
                              const LinearSplit &split);

/// The workspace a launchLinear call with these arguments would ask for to
/// split its sequence (linearSplitFor with args.segments, on the current
/// device; 0 when no split pays). Validates the arguments first, as the
/// launch does.
uint64_t linearWorkspaceBytes(const AttnLaunchConfig &config, const AttnLinearArgs &args);

/// One token against a carried state (the recurrent form): q, o
/// [B, 1, Hq, D], k, v [B, 1, Hkv, D] (head_dim contiguous, any other
/// strides), the state and key sum as in AttnLinearArgs, read from the
/// initial pointers and written to the final ones (the same buffer updates
/// in place); logDecay [B, Hq] for a gated kernel.
using AttnDecodeArgs = AttnLinearArgs;

/// Checks a linear-family call without the driver; throws attn::Error
/// naming the argument ("q: ...", "logDecay: ...", "config: ...").
/// `decode` checks the one-token form.
void validateLinearArgs(const AttnLaunchConfig &config, const AttnLinearArgs &args,
                        bool decode = false);

/// The kernels of a linear-family module (ATTN_LINEAR_KERNEL_NAME, the
/// segment and fold kernels, the decode step), looked up once and with the
/// chunkwise kernels' dynamic shared memory allowed once, so that a call
/// only launches them (attn::Kernel keeps one per loaded context).
struct LinearFunctions {
  KernelFunction chunkwise, segment, fold, decode;
  /// The backward module of a causal kernel: the chunkwise and segment
  /// kernels walking the sequence from its end (unloaded elsewhere).
  KernelFunction reversedChunkwise, reversedSegment;
};
LinearFunctions loadLinearFunctions(const Module &module, const AttnLaunchConfig &config);

/// Validates (also the device pointers), builds the parameters and launches
/// the chunkwise kernels: one block per (block_n value columns, query head,
/// batch, segment), after the segment and fold kernels when the sequence is
/// split.
void launchLinear(LinearFunctions &functions, const AttnLaunchConfig &config,
                  const AttnLinearArgs &args, CUstream stream);
/// The same with the kernels of `module` looked up for this call.
void launchLinear(const Module &module, const AttnLaunchConfig &config,
                  const AttnLinearArgs &args, CUstream stream);

/// The same for the one-token step (ATTN_DECODE_KERNEL_NAME of the module).
void launchDecode(KernelFunction &kernel, const AttnLaunchConfig &config,
                  const AttnDecodeArgs &args, CUstream stream);

} // namespace attn

// The umbrella includes the backward's launch too.
#include "attn/runtime/BackwardLaunch.h"
#include "attn/runtime/LinearBackwardLaunch.h"

#endif // ATTN_RUNTIME_ATTENTIONLAUNCH_H
