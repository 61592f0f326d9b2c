// Forward softmax attention for sm_90a.
//
// A persistent grid of at most one block per SM walks the work tiles (BLOCK_M
// query rows of one (batch, head)) in a static round-robin. Warpgroup 0 is
// the producer: one thread streams each tile's Q and a ring of K/V stages
// into shared memory with TMA, completing on mbarriers; the ring runs on
// across tiles, so the next tile's loads overlap this tile's epilogue. Warpgroups 1..C are
// consumers, each owning 64 query rows: S = Q Kᵀ on WGMMA from shared memory,
// masking and the online softmax in registers, then O += P V on WGMMA with P
// taken from registers. Each consumer overlaps the softmax of one key tile
// with the PV product of the previous one, and the consumers take turns on
// the tensor cores (ping-pong). The epilogue normalizes O, stores it through
// shared memory with TMA, and writes the per-row log-sum-exp.
//
// Everything the compiler decided arrives through namespace attn_plan, emitted
// ahead of this file: element type, head dim, tile sizes, stage count, register
// split, mask policy and the shared-memory offsets of every buffer, and
// through attn_plan::UserMods the spec's mask_mod / score_mod regions and the
// per-tile coverage test derived from the mask_mod.
#pragma once

#include "device/sequence.cuh"

namespace attn_kernel {

using namespace attn_dev;
using Element = attn_plan::Element;
using Mask = attn_plan::Mask;
using Mods = attn_plan::UserMods;

constexpr int kHeadDim = attn_plan::kHeadDim;
constexpr int kBlockM = attn_plan::kBlockM;
constexpr int kBlockN = attn_plan::kBlockN;
constexpr int kStages = attn_plan::kStages;
constexpr int kConsumers = attn_plan::kConsumerWarpgroups;
constexpr int kThreads = (kConsumers + 1) * kWarpgroupThreads;

constexpr int kElementBytes = 2;
// TMA boxes and swizzle atoms are 64 elements (128 bytes) wide; a tile of
// head_dim columns is stored as head_dim / 64 column blocks.
constexpr int kColumnBlock = 64;
constexpr int kColumnBlocks = kHeadDim / kColumnBlock;
constexpr u32 kRowBytes = kColumnBlock * kElementBytes;
constexpr u32 kAtomBytes = 8 * kRowBytes;
constexpr u32 kQTileBytes = kBlockM * kHeadDim * kElementBytes;
constexpr u32 kKvTileBytes = kBlockN * kHeadDim * kElementBytes;
constexpr int kWarpsPerWarpgroup = kWarpgroupThreads / 32;

// The plan gives O's staging area bytes of its own when they fit; otherwise
// it reuses Q's, and the next tile's Q must wait for this tile's O store.
constexpr bool kStagingSharesQ = attn_plan::kSmemOStaging < attn_plan::kSmemQ + kQTileBytes &&
                                 attn_plan::kSmemQ < attn_plan::kSmemOStaging + kQTileBytes;

constexpr int kScoreRegs = kBlockN / 2;  // S accumulator: 64 x BLOCK_N fp32
constexpr int kOutputRegs = kHeadDim / 2; // O accumulator: 64 x head_dim fp32
constexpr int kPRegs = kBlockN / 4;      // P: 64 x BLOCK_N packed 16-bit

static_assert(kBlockM == 64 * kConsumers, "one 64-row WGMMA slice per consumer warpgroup");
static_assert(kHeadDim % kColumnBlock == 0, "head dim must be a multiple of 64");
static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "BLOCK_N is the N of a WGMMA");

// Staged score_mod diagonals (DiagonalStage): values per pair, and windows
// per consumer.
constexpr int kDiagonals = Mods::kScoreDiagonals;
constexpr int kDiagonalWindows = attn_plan::kScoreDiagonalWindows;

// Shared-memory barriers, laid out as
// [q_full, q_empty, k_full[S], v_full[S], k_empty[S], v_empty[S]], then with
// staged diagonals [diagonal_full, diagonal_empty] per consumer and window.
// K and V slots are released separately: a K slot frees as soon as its QKᵀ
// completes, one iteration before the V slot of the same stage.
struct Barriers {
  u32 base;
  __device__ u32 qFull() const { return base; }
  __device__ u32 qEmpty() const { return base + 8; }
  __device__ u32 kFull(int stage) const { return base + 8 * (2 + stage); }
  __device__ u32 vFull(int stage) const { return base + 8 * (2 + kStages + stage); }
  __device__ u32 kEmpty(int stage) const { return base + 8 * (2 + 2 * kStages + stage); }
  __device__ u32 vEmpty(int stage) const { return base + 8 * (2 + 3 * kStages + stage); }
  __device__ u32 diagonalFull(int consumer, int window) const {
    return base + 8 * (2 + 4 * kStages + 2 * (consumer * kDiagonalWindows + window));
  }
  __device__ u32 diagonalEmpty(int consumer, int window) const {
    return diagonalFull(consumer, window) + 8;
  }
};

// Each consumer warp releases a slot or the Q tile once (its lane 0, after
// the warp's wgmma.wait_group), so an empty barrier expects one arrival per
// consumer warp.
constexpr int kReleaseArrivals = kConsumers * kWarpsPerWarpgroup;

// The half-open range of key tiles this block visits; tiles outside it are
// fully masked for every row of the block and are never loaded.
struct KeyTileRange {
  int begin;
  int end;
};

__device__ __forceinline__ KeyTileRange keyTilesFor(int queryBegin, int queryEnd, int seqlenK,
                                                    i64 shift) {
  i64 keyBegin = Mask::keyBegin(queryBegin, shift);
  i64 keyEnd = Mask::keyEnd(queryEnd - 1, shift, seqlenK);
  KeyTileRange range;
  range.begin = static_cast<int>(keyBegin / kBlockN);
  range.end = keyEnd > keyBegin ? static_cast<int>((keyEnd + kBlockN - 1) / kBlockN) : range.begin;
  return range;
}

__device__ __forceinline__ Sequence sequenceOf(const attn_abi::AttnFwdParams &p, int batch) {
  return attn_dev::sequenceOf(p, batch, attn_plan::kMaskBottomRight);
}

// One unit of the persistent schedule: BLOCK_M query rows of one (batch,
// head) and the key tiles they visit: those of `keys` that the mask_mod's
// coverage test does not prove empty (all of them without a mask_mod).
// Query blocks past a packed sequence's end are empty and skipped.
// A piece of a split tail tile (TileSchedule) visits part of the tile's key
// tiles; tailTile is then its index among the tail tiles (else -1), and
// pieces how many blocks' pieces make up the tile, the first of them from
// block firstPieceBlock.
struct WorkTile {
  int queryBlock;
  int queryBegin;
  int queryLast;
  int head;
  int kvHead;
  int batch;
  Sequence sequence;
  KeyTileRange keys;
  int tailTile;
  int pieces;
  int firstPieceBlock;

  __device__ bool empty() const { return queryBegin >= sequence.seqlenQ; }
};

// Tail split: possible where every work tile visits the same key tiles.
constexpr bool kSplitsTail = Mask::kEveryQueryVisitsEveryKey && !Mods::kHasMaskMod;

// A mask_mod the compiler could not classify may come with a tile coverage
// computed at run time (p.tile_coverage, see attn_tile_coverage_kernel).
constexpr bool kRuntimeCoverage = Mods::kHasMaskMod && !Mods::kMaskProved;
// Otherwise the compiler derived the mask_mod's coverage of any tile.
constexpr bool kMaskModProved = Mods::kHasMaskMod && Mods::kMaskProved;

// A bounded score_mod (soft-capping) puts every exponent of the softmax
// within +-kScoreRangeLog2 (base 2) before any shift. Up to
// kMaxFixedSoftmaxRangeLog2 (80, from the compiler), one fixed
// base keeps every exp2 between 2^-120 (a row whose scores all sit at the
// bottom still sums to a normal number) and 2^40 (sums and the output stay
// far from overflow): no running maximum, no rescaling of the output. P
// enters the PV product in the element type: bf16 holds that range, f16
// (2^-24 to 2^15) does not, so f16 keeps the running maximum.
constexpr float kScoreRangeLog2 = Mods::kScoreBound * kLog2e * Mods::kScoreOutputScale;
constexpr bool kFixedSoftmaxBase = Mods::kHasScoreMod && Element::kExponentBits == 8 &&
                                   kScoreRangeLog2 > 0.f &&
                                   kScoreRangeLog2 <= attn_plan::kMaxFixedSoftmaxRangeLog2;
constexpr float kFixedSoftmaxBaseLog2 = kScoreRangeLog2 > 40.f ? kScoreRangeLog2 - 40.f : 0.f;
static_assert(attn_plan::kMaxFixedSoftmaxRangeLog2 == 80,
              "the fixed base's window, 2^-120 to 2^40, holds a range of 80");

// Position of a tile's byte in p.tile_coverage, laid out
// [batch][q_heads][query block][key tile].
__device__ __forceinline__ i64 tileCoverageIndex(const attn_abi::AttnFwdParams &p, int batch,
                                                 int head, int queryBlock, int keyTile) {
  i64 queryBlocks = (p.seqlen_q + kBlockM - 1) / kBlockM;
  i64 keyTiles = (p.seqlen_k + kBlockN - 1) / kBlockN;
  return ((static_cast<i64>(batch) * p.q_heads + head) * queryBlocks + queryBlock) * keyTiles +
         keyTile;
}

__device__ __forceinline__ Coverage runtimeCoverage(const attn_abi::AttnFwdParams &p,
                                                    const WorkTile &work, int tile) {
  return static_cast<Coverage>(__ldg(
      p.tile_coverage + tileCoverageIndex(p, work.batch, work.head, work.queryBlock, tile)));
}

// Stored key bits (p.tile_key_bits): a partial tile's kept keys, one word
// per row and lane quad, in ThreadKeys' bit order, so that a mask_mod the
// compiler could not classify costs a load a row instead of a region per
// pair.
using KeyBits = typename ThreadKeys<kBlockN>::Bits;
constexpr u32 kTileKeyWordsBytes = attn_abi::tileKeyBitsPerTile(kBlockM, kBlockN);
static_assert(sizeof(KeyBits) * kBlockM * 4 == kTileKeyWordsBytes,
              "tileKeyBitsPerTile sizes the runtime's key bits buffer and the plan's key_bits");
constexpr bool kStoredKeyBits = kRuntimeCoverage;

// The partial tiles' slots, then their words.
__device__ __forceinline__ const int *tileKeySlots(const attn_abi::AttnFwdParams &p) {
  return reinterpret_cast<const int *>(p.tile_key_bits);
}
__device__ __forceinline__ KeyBits *tileKeyWords(const attn_abi::AttnFwdParams &p, int slot) {
  return reinterpret_cast<KeyBits *>(p.tile_key_words) + static_cast<i64>(slot) * kBlockM * 4;
}
static_assert(attn_plan::kSmemKeyBits % 16 == 0 && kTileKeyWordsBytes % 16 == 0,
              "a bulk copy's shared-memory destination and size are multiples of 16 bytes");
// Stage `stage`'s copy of its key tile's words, loaded beside the K tile
// (the key_bits buffer of the shared-memory plan).
__device__ __forceinline__ u32 keyWordsTile(u32 smemBase, int stage) {
  return smemBase + attn_plan::kSmemKeyBits + stage * kTileKeyWordsBytes;
}

// The slot of key tile `tile` of `work`: -1 unless the launch has stored key
// bits and the coverage has the tile partial, or where the slot's words lie
// past the buffer's allocation (tile_key_slot_limit).
__device__ __forceinline__ int storedKeySlot(const attn_abi::AttnFwdParams &p,
                                             const WorkTile &work, int tile) {
  if (!p.tile_key_bits)
    return -1;
  const int slot = __ldg(tileKeySlots(p) +
                         tileCoverageIndex(p, work.batch, work.head, work.queryBlock, tile));
  return slot < p.tile_key_slot_limit ? slot : -1;
}

// Whether the block loads and computes key tile `tile` of `work`. The
// producer and every consumer ask the same question for the whole work tile,
// so they agree on the sequence of tiles.
__device__ __forceinline__ bool visitsKeyTile(const attn_abi::AttnFwdParams &p,
                                              const WorkTile &work, int tile) {
  if constexpr (!Mods::kHasMaskMod)
    return true;
  if constexpr (kRuntimeCoverage)
    if (p.tile_coverage)
      return runtimeCoverage(p, work, tile) != Coverage::Empty;
  i64 keyFirst = static_cast<i64>(tile) * kBlockN;
  i64 keyLast = minI64(keyFirst + kBlockN, work.sequence.seqlenK) - 1;
  return Mods::maskCoverage(work.batch, work.head, work.queryBegin, work.queryLast, keyFirst,
                            keyLast) != Coverage::Empty;
}

// The first visited key tile at or after `tile` (keys.end if none), for the
// producer's single thread.
__device__ __forceinline__ int nextVisitedTile(const attn_abi::AttnFwdParams &p,
                                               const WorkTile &work, int tile) {
  while (tile < work.keys.end && !visitsKeyTile(p, work, tile))
    ++tile;
  return tile;
}

// The tiles of `work` the block visits among the 32 from `base`, for a whole
// consumer warp: each lane tests one, so skipping a run of empty tiles costs
// one test per lane instead of one per tile.
__device__ __forceinline__ unsigned visitedTilesInWindow(const attn_abi::AttnFwdParams &p,
                                                         const WorkTile &work, int base,
                                                         int lane) {
  int candidate = base + lane;
  return __ballot_sync(0xffffffffu,
                       candidate < work.keys.end && visitsKeyTile(p, work, candidate));
}

// A consumer warp's walk over the tiles the block visits, for kernels with a
// mask_mod: one window test serves the steps of up to 32 tiles, which then
// read its bits, and also gives each tile's coverage of the consumer's own
// rows (sliceCoverage), so no step evaluates the mask's formula itself.
// Measured on H100 against a test per step: prefix-LM -4 %, chunked local
// -6 %, BigBird with its coverage -4 %.
struct VisitedTileWalk {
  int base;       // the window's first tile
  unsigned bits;  // the visited tiles of the window, bit i for tile base + i
  unsigned full;  // those the masks keep whole for the slice's rows
  unsigned empty; // those they leave empty for them
  int slot;       // with stored key bits, this lane's tile's slot (storedKeySlot)

  // The first visited tile at or after `tile` (keys.end if none); `tile`
  // never goes back. Defined after sliceCoverage.
  __device__ __forceinline__ int next(const attn_abi::AttnFwdParams &p, const WorkTile &work,
                                      int tile, int sliceBegin, int sliceLast, int lane);

  // sliceCoverage of a tile next() returned from the current window.
  __device__ __forceinline__ Coverage coverage(int tile) const {
    const unsigned bit = 1u << (tile - base);
    return (full & bit) ? Coverage::Full : ((empty & bit) ? Coverage::Empty : Coverage::Partial);
  }

  // The slot in the stored key bits of a tile next() returned, for the
  // whole warp.
  __device__ __forceinline__ int slotOf(int tile) const {
    return __shfl_sync(0xffffffffu, slot, tile - base);
  }
};

// How many key tiles of `work` the block visits, counted by a whole warp.
__device__ __forceinline__ int countVisitedTilesInWarp(const attn_abi::AttnFwdParams &p,
                                                       const WorkTile &work, int lane) {
  if constexpr (!Mods::kHasMaskMod)
    return work.keys.end - work.keys.begin;
  int count = 0;
  for (int base = work.keys.begin; base < work.keys.end; base += 32)
    count += __popc(visitedTilesInWindow(p, work, base, lane));
  return count;
}

// The run of work tiles is dealt out in rounds of gridDim.x, block b taking
// position b of even rounds and gridDim.x - 1 - b of odd ones (a snake):
// the blocks that drew a round's long tiles draw the next round's short
// ones, so that causal blocks end together.
//
// In the default order the query block runs fastest, so the blocks working
// at once share the K and V of a few heads in L2, and from the last query
// block down, so causal tiles with the most key tiles start first. When a
// head's query blocks outnumber a quarter of the grid, causal tiles go
// query-block-major instead (every head's last query block, then the one
// before, ...: longest first): there a default round holds about one head's
// lengths, shifted from round to round, and the snake no longer pairs long
// with short, while query-block-major rounds each hold tiles of nearly one
// length; with so few heads, the blocks of a round still share each head's
// K and V. Measured on 2026-11-26 (docs/benchmarks.md): the default order
// there lost 12 % (head dim 64) and 27 % (head dim 256) at 8192 keys, and
// query-block-major below the quarter lost 4 to 21 % (L2 reuse of K and V).
// Masks whose long tiles lie elsewhere (Longformer's global rows) come with
// p.work_order, the same tiles sorted by cost, longest first. Packed
// sequences count query blocks of the longest one.
// With a split tail (p.tail_tiles > 0, equal work tiles, a persistent grid
// whose last round is partial), the full rounds deal whole tiles and the
// last tail_tiles tiles, fewer than the blocks, are cut along their key
// tiles: laid end to end, their key tiles split into gridDim.x equal runs,
// one per block, each a piece at the end of one tile and perhaps one at the
// start of the next. The block's positions past tailBegin are its two
// pieces (tailBegin + 2 block + second).
struct TileSchedule {
  int queryBlocks;
  int count;
  int tailBegin;   // the first split tile (count without a split)
  int end;         // one past the last position
  int keyTiles;    // key tiles of every work tile (split tail only)
  i64 tailKeyTiles; // of the split tiles, end to end

  __device__ explicit TileSchedule(const attn_abi::AttnFwdParams &p)
      : queryBlocks((p.seqlen_q + kBlockM - 1) / kBlockM),
        count(queryBlocks * p.q_heads * p.batch), tailBegin(count), end(count),
        keyTiles((p.seqlen_k + kBlockN - 1) / kBlockN), tailKeyTiles(0) {
    const int blocks = static_cast<int>(gridDim.x);
    // Every block's run must hold a key tile (the runtime's split does).
    if (kSplitsTail && p.tail_tiles > 0 && p.tail_tiles < blocks && p.tail_tiles < count &&
        static_cast<i64>(p.tail_tiles) * keyTiles >= blocks && p.tail_partials &&
        p.tail_counters && !p.cu_seqlens_q && !p.work_order) {
      tailBegin = count - p.tail_tiles;
      end = tailBegin + 2 * blocks;
      tailKeyTiles = static_cast<i64>(p.tail_tiles) * keyTiles;
    }
  }

  // This block's position in the first round, and in the round after the
  // one of `position` (recomputed from it: the loop carries one variable).
  __device__ static int firstPosition() { return static_cast<int>(blockIdx.x); }
  __device__ int nextPosition(int position) const {
    const int blocks = static_cast<int>(gridDim.x), block = static_cast<int>(blockIdx.x);
    const int firstPiece = tailBegin + 2 * block;
    if (position >= tailBegin)
      return position == firstPiece ? position + 1 : end;
    const int round = position / blocks + 1;
    const int next = round * blocks + ((round & 1) ? blocks - 1 - block : block);
    return next < tailBegin ? next : (tailBegin < count ? firstPiece : end);
  }

  // Split tail: where block b's run of key tiles starts, and the block whose
  // run holds key tile x (of the tail's, end to end).
  __device__ i64 runBegin(int block) const {
    return block * tailKeyTiles / static_cast<int>(gridDim.x);
  }
  __device__ int blockOfTailKeyTile(i64 x) const {
    const i64 blocks = gridDim.x;
    return static_cast<int>(((x + 1) * blocks + tailKeyTiles - 1) / tailKeyTiles - 1);
  }
  // The slot of tail_partials that block `block`'s piece of tail tile
  // `tailTile` writes: its second if its run started in an earlier tile.
  __device__ int pieceSlot(int block, int tailTile) const {
    return 2 * block + (runBegin(block) / keyTiles < tailTile ? 1 : 0);
  }

  // Piece `second` of this block's run (empty if the run has no such piece).
  __device__ WorkTile tailPiece(const attn_abi::AttnFwdParams &p, int position) const {
    const int block = (position - tailBegin) / 2, second = (position - tailBegin) % 2;
    const i64 begin = runBegin(block), finish = runBegin(block + 1);
    const int tailTile = static_cast<int>(begin / keyTiles) + second;
    const i64 first = max(begin, static_cast<i64>(tailTile) * keyTiles);
    const i64 last = min(finish, static_cast<i64>(tailTile + 1) * keyTiles);
    WorkTile work;
    if (first >= last) {
      work.queryBegin = 0;
      work.sequence.seqlenQ = 0; // empty()
      return work;
    }
    work = atDefault(p, tailBegin + tailTile);
    work.keys.end = work.keys.begin + static_cast<int>(last - static_cast<i64>(tailTile) * keyTiles);
    work.keys.begin += static_cast<int>(first - static_cast<i64>(tailTile) * keyTiles);
    work.tailTile = tailTile;
    work.firstPieceBlock = blockOfTailKeyTile(static_cast<i64>(tailTile) * keyTiles);
    work.pieces = blockOfTailKeyTile(static_cast<i64>(tailTile + 1) * keyTiles - 1) -
                  work.firstPieceBlock + 1;
    return work;
  }

  // The work tile at position `index` of the run. One call of atDefault
  // for the three orders: three inlined copies spilled 620 bytes in the
  // document-mask example.
  __device__ WorkTile at(const attn_abi::AttnFwdParams &p, int index) const {
    if (index >= tailBegin)
      return tailPiece(p, index);
    int defaultIndex = index;
    if (p.work_order) {
      // One unsigned min clamps both ends of an entry out of range.
      defaultIndex = static_cast<int>(min(static_cast<unsigned>(__ldg(p.work_order + index)),
                                          static_cast<unsigned>(count - 1)));
    } else if (Mask::kWorkGrowsWithQuery && !Mods::kHasMaskMod &&
               4 * queryBlocks >= static_cast<int>(gridDim.x)) {
      // Query-block-major: position index is query block queryBlocks - 1 -
      // index / headBatches of head-batch index % headBatches.
      const int headBatches = p.q_heads * p.batch;
      const int fromLast = index / headBatches;
      defaultIndex = (index - fromLast * headBatches) * queryBlocks + fromLast;
    }
    return atDefault(p, defaultIndex);
  }

  // The work tile at position `index` of the default order.
  __device__ WorkTile atDefault(const attn_abi::AttnFwdParams &p, int index) const {
    int queryBlock = queryBlocks - 1 - index % queryBlocks;
    int headBatch = index / queryBlocks;
    WorkTile work;
    work.queryBlock = queryBlock;
    work.queryBegin = queryBlock * kBlockM;
    work.head = headBatch % p.q_heads;
    work.kvHead = work.head / (p.q_heads / p.kv_heads);
    work.batch = headBatch / p.q_heads;
    work.sequence = sequenceOf(p, work.batch);
    work.queryLast = min(work.queryBegin + kBlockM, work.sequence.seqlenQ) - 1;
    work.keys = keyTilesFor(work.queryBegin, work.queryLast + 1, work.sequence.seqlenK,
                            work.sequence.shift);
    work.tailTile = -1;
    work.pieces = 1;
    work.firstPieceBlock = 0;
    return work;
  }
};

// ---------------------------------------------------------------------------
// Producer: one thread issues every TMA load.

__device__ __forceinline__ void loadTile(u32 destination, u32 rows, const TensorMapBlob *map,
                                         u32 barrier, int row, int head, int batch) {
#pragma unroll
  for (int block = 0; block < kColumnBlocks; ++block)
    tmaLoad4d(destination + block * rows * kRowBytes, map, barrier, block * kColumnBlock, row, head,
              batch);
}

// The block's work tiles and the key tiles each visits, in the order the
// consumers take them: onWork(work) once per work tile, then
// onKeyTile(work, tile) per visited key tile. For the producer's threads.
template <class OnWork, class OnKeyTile>
__device__ __forceinline__ void forEachVisitedTile(const attn_abi::AttnFwdParams &p,
                                                   const TileSchedule &schedule, OnWork &&onWork,
                                                   OnKeyTile &&onKeyTile) {
  for (int index = schedule.firstPosition(); index < schedule.end;
       index = schedule.nextPosition(index)) {
    const WorkTile work = schedule.at(p, index);
    if (work.empty())
      continue;
    onWork(work);
    for (int tile = nextVisitedTile(p, work, work.keys.begin); tile < work.keys.end;
         tile = nextVisitedTile(p, work, tile + 1))
      onKeyTile(work, tile);
  }
}

__device__ void produce(const attn_abi::AttnFwdParams &p, u32 smemBase, const Barriers &barriers,
                        const TileSchedule &schedule) {
  prefetchTensorMap(&p.q_map);
  prefetchTensorMap(&p.k_map);
  prefetchTensorMap(&p.v_map);
  prefetchTensorMap(&p.o_map);

  int ring = 0; // key tiles loaded so far, over all work tiles
  int qLoads = 0;
  auto loadQ = [&](const WorkTile &work) {
    // Every work tile loads Q, even one with no key tile to visit, so that
    // the consumers' Q phases never depend on the mask. The previous Q must
    // have been released (and, where staging shares its bytes, stored).
    if (qLoads > 0)
      mbarrierWait(barriers.qEmpty(), (qLoads - 1) & 1);
    mbarrierArriveExpectTx(barriers.qFull(), kQTileBytes);
    loadTile(smemBase + attn_plan::kSmemQ, kBlockM, &p.q_map, barriers.qFull(),
             work.sequence.rowQ + work.queryBegin, work.head, work.sequence.mapBatch);
    ++qLoads;
  };
  auto loadKeyTile = [&](const WorkTile &work, int tile) {
    RingSlot slot = ringSlot<kStages>(ring);
    // The slot's previous tile (ring - kStages) must have been released;
    // its release completed the phase before this slot's current one.
    bool reused = ring >= kStages;
    int keyRow = work.sequence.rowK + tile * kBlockN;
    // A partial tile's stored key bits come with its K tile.
    const int keySlot = kStoredKeyBits ? storedKeySlot(p, work, tile) : -1;
    if (reused)
      mbarrierWait(barriers.kEmpty(slot.stage), slot.phase ^ 1);
    mbarrierArriveExpectTx(barriers.kFull(slot.stage),
                           kKvTileBytes + (keySlot >= 0 ? kTileKeyWordsBytes : 0));
    loadTile(smemBase + attn_plan::kSmemK + slot.stage * kKvTileBytes, kBlockN, &p.k_map,
             barriers.kFull(slot.stage), keyRow, work.kvHead, work.sequence.mapBatch);
    if (keySlot >= 0)
      bulkLoad(keyWordsTile(smemBase, slot.stage), tileKeyWords(p, keySlot), kTileKeyWordsBytes,
               barriers.kFull(slot.stage));
    if (reused)
      mbarrierWait(barriers.vEmpty(slot.stage), slot.phase ^ 1);
    mbarrierArriveExpectTx(barriers.vFull(slot.stage), kKvTileBytes);
    loadTile(smemBase + attn_plan::kSmemV + slot.stage * kKvTileBytes, kBlockN, &p.v_map,
             barriers.vFull(slot.stage), keyRow, work.kvHead, work.sequence.mapBatch);
    ++ring;
  };
  forEachVisitedTile(p, schedule, loadQ, loadKeyTile);
}

// ---------------------------------------------------------------------------
// Consumer pieces.

// S = Q_slice Kᵀ, issued asynchronously as one WGMMA group: A is this
// warpgroup's 64 rows of Q, B the K tile, both K-major; each k-step of 16
// columns advances 32 bytes inside a 128-byte row.
__device__ __forceinline__ void issueScores(float (&scores)[kScoreRegs], u32 qSlice, u32 kTile) {
  wgmmaFence();
#pragma unroll
  for (int step = 0; step < kHeadDim / 16; ++step) {
    u32 blockOffset = (step / 4), inRow = (step % 4) * 32;
    u64 a = swizzled128Descriptor(qSlice + blockOffset * kBlockM * kRowBytes + inRow, 16, kAtomBytes);
    u64 b = swizzled128Descriptor(kTile + blockOffset * kBlockN * kRowBytes + inRow, 16, kAtomBytes);
    WgmmaSS<kBlockN, Element>::mma(scores, a, b, step > 0);
  }
  wgmmaCommitGroup();
}

// Lane 0 of each warp gives a ring slot (or the Q tile) back to the
// producer, once the warp's WGMMA groups that read it have completed.
__device__ __forceinline__ void releaseSlot(u32 emptyBarrier, int lane) {
  if (lane == 0)
    mbarrierArrive(emptyBarrier);
}

// Ping-pong between consumer warpgroups: each issues its WGMMAs only on its
// turn and then hands the turn to the next, so the tensor cores run one
// warpgroup's GEMMs while the others do their softmax. Turns are named
// barriers of two warpgroups (the waiter syncs, the previous one arrives).
// All consumers take the same number of turns (one per GEMM issue of the same
// work tiles), so the turns go round in order across work tiles.
struct GemmTurns {
  static constexpr int kFirstBarrier = 1 + kConsumers; // after the epilogue barriers
  static constexpr bool kEnabled = kConsumers > 1;
  int consumer;

  // The last consumer opens the first turn of consumer 0.
  __device__ __forceinline__ void open() const {
    if (kEnabled && consumer == kConsumers - 1)
      namedBarrierArrive(kFirstBarrier, 2 * kWarpgroupThreads);
  }
  __device__ __forceinline__ void wait() const {
    if (kEnabled)
      namedBarrierSync(kFirstBarrier + consumer, 2 * kWarpgroupThreads);
  }
  __device__ __forceinline__ void pass() const {
    if (kEnabled)
      namedBarrierArrive(kFirstBarrier + (consumer + 1) % kConsumers, 2 * kWarpgroupThreads);
  }
  // The last consumer's final pass opened a turn of consumer 0; consumer 0
  // takes it so that no barrier is left half arrived at exit.
  __device__ __forceinline__ void close() const {
    if (kEnabled && consumer == 0)
      wait();
  }
};

// Calls body(i, half, row, key, keyFloat) for each score fragment element
// of this thread in the tile of keys from keyBase. With NeedsKeyFloat,
// keyFloat is key - keyOrigin as f32 for the user regions (the origin is 0
// unless the score_mod reads kv relative to one): within 2^24 the sum of
// the lane's first key, converted once per tile, and the element's column
// offset is exact, so each element costs one add; beyond it each element
// converts its own key.
template <bool NeedsKeyFloat, class Body>
__device__ __forceinline__ void forEachScoreElement(int row0, int keyBase, int lane, Body &&body,
                                                    int keyOrigin = 0) {
  const int laneKey = keyBase + fragmentColumn(0, lane);
  const int relativeBase = keyBase - keyOrigin;
  if (NeedsKeyFloat && relativeBase > -(1 << 24) && relativeBase + kBlockN <= (1 << 24)) {
    const float laneKeyFloat = exactIntToFloat(laneKey - keyOrigin);
#pragma unroll
    for (int i = 0; i < kScoreRegs; ++i)
      body(i, fragmentRowHalf(i), row0 + 8 * fragmentRowHalf(i), laneKey + fragmentColumn(i, 0),
           laneKeyFloat + static_cast<float>(fragmentColumn(i, 0)));
    return;
  }
#pragma unroll
  for (int i = 0; i < kScoreRegs; ++i) {
    const int key = laneKey + fragmentColumn(i, 0);
    body(i, fragmentRowHalf(i), row0 + 8 * fragmentRowHalf(i), key,
         NeedsKeyFloat ? exactIntToFloat(key - keyOrigin) : 0.f);
  }
}

// How much of key tile `keyTile` the masks keep for the query rows
// [sliceBegin, sliceLast] of one consumer: Full tiles skip the per-element
// test, and tiles the mask_mod's formula proves Empty for the slice (a work
// tile visits them for other rows) skip the score_mod and give P = 0. The
// run-time coverage is per work tile: it never proves a slice empty.
__device__ __forceinline__ Coverage sliceCoverage(const attn_abi::AttnFwdParams &p,
                                                  const WorkTile &work, int keyTile,
                                                  int sliceBegin, int sliceLast) {
  const int keyFirst = keyTile * kBlockN, keyLast = keyFirst + kBlockN - 1;
  Coverage coverage = keyLast >= work.sequence.seqlenK ||
                              !Mask::coversTile(sliceBegin, sliceLast, keyFirst, keyLast,
                                                work.sequence.shift)
                          ? Coverage::Partial
                          : Coverage::Full;
  if constexpr (kRuntimeCoverage) {
    if (!p.tile_coverage || runtimeCoverage(p, work, keyTile) != Coverage::Full)
      coverage = Coverage::Partial;
  } else if constexpr (Mods::kHasMaskMod) {
    coverage = coverageAnd(coverage, Mods::maskCoverage(work.batch, work.head, sliceBegin,
                                                        sliceLast, keyFirst, keyLast));
  }
  return coverage;
}

__device__ __forceinline__ int VisitedTileWalk::next(const attn_abi::AttnFwdParams &p,
                                                     const WorkTile &work, int tile,
                                                     int sliceBegin, int sliceLast, int lane) {
  if constexpr (!Mods::kHasMaskMod)
    return tile;
  for (;;) {
    const unsigned offset = static_cast<unsigned>(tile - base);
    if (offset < 32) {
      const unsigned ahead = bits & (0xffffffffu << offset);
      if (ahead)
        return base + __ffs(ahead) - 1;
      tile = base + 32;
    }
    if (tile >= work.keys.end)
      return work.keys.end;
    base = tile;
    bits = visitedTilesInWindow(p, work, base, lane);
    const int candidate = base + lane;
    const Coverage mine = (bits >> lane) & 1u
                              ? sliceCoverage(p, work, candidate, sliceBegin, sliceLast)
                              : Coverage::Empty;
    full = __ballot_sync(0xffffffffu, mine == Coverage::Full);
    empty = __ballot_sync(0xffffffffu, mine == Coverage::Empty);
    if constexpr (kStoredKeyBits)
      slot = (bits >> lane) & 1u ? storedKeySlot(p, work, candidate) : -1;
  }
}

// This thread's two rows of a tile's stored key bits; slot -1 where the
// coverage has the tile full (the masks keep all its keys). The producer
// copies a partial tile's words into the stage beside its K tile, so that
// they are read from shared memory once the K tile is there. (Read from
// global memory when the walk reached the tile, with an L1 prefetch, their
// latency stood after every partial tile's scores: BigBird 0.675 -> 0.633 ms
// without the loads, H100, docs/benchmarks.md.)
struct StoredKeyRows {
  int slot;
  KeyBits rows[2];
};

__device__ __forceinline__ StoredKeyRows readStoredKeyRows(int slot, u32 words, int rowInBlock,
                                                           int lane) {
  StoredKeyRows stored{slot, {0, 0}};
  if (slot >= 0) {
    const u32 first = words + (rowInBlock * 4 + (lane & 3)) * sizeof(KeyBits);
    stored.rows[0] = loadShared<KeyBits>(first);
    stored.rows[1] = loadShared<KeyBits>(first + 8 * 4 * sizeof(KeyBits));
  }
  return stored;
}

// Sets the scores of the keys `kept` (ThreadKeys bits, one word a row)
// leaves out to -inf.
__device__ __forceinline__ void applyKeptKeys(float (&scores)[kScoreRegs],
                                              const KeyBits (&kept)[2]) {
#pragma unroll
  for (int i = 0; i < kScoreRegs; ++i) {
    const int bit = 2 * (i >> 2) + (i & 1);
    scores[i] = (kept[fragmentRowHalf(i)] >> bit) & 1 ? scores[i] : negativeInfinity();
  }
}

// Sets the scores the mask, the mask_mod or the key length excludes to -inf.
// A mask_mod the compiler proves as affine inequalities (kMaskKeyBits)
// never runs per pair: each row's kept keys become bits (ThreadKeys), a few
// instructions per row, and a pair tests its bit (Longformer 0.35 -> 0.31
// ms at head dim 128, 0.32 -> 0.25 at 64, H100, docs/benchmarks.md).
// (Deciding 16 x 8 fragment groups first and testing pairs only in partial
// groups measured slower for every variant: the group tests cost more than
// the per-pair tests they save.)
// A mask_mod kernel at head dim 128 evaluates every term of a pair's test
// and selects, without a branch: the short-circuit form made each pair a
// branch with a convergence barrier (document mask with its coverage 0.58 ->
// 0.40 ms, Longformer -5 %, H100, docs/benchmarks.md). The built-in masks
// alone keep the short-circuit form (the select spills at head dim 64), and
// so do head dims 64 and 256, where it spills more in some kernels
// (Longformer at 64: 16 -> 132 bytes) and was not measured.
constexpr bool kBranchlessMaskTest = Mods::kHasMaskMod && kHeadDim == 128;

// StoredBits: the launch has stored key bits (p.tile_key_bits), so that a
// partial tile's pairs test them instead of the mask_mod.
template <bool StoredBits>
__device__ __forceinline__ void applyMask(const attn_abi::AttnFwdParams &p,
                                          float (&scores)[kScoreRegs], const WorkTile &work,
                                          const typename Mods::MaskRow (&maskRows)[2], int row0,
                                          int keyBase, int lane, const StoredKeyRows &stored) {
  if constexpr (Mods::kMaskKeyBits) {
    // Each row's kept keys as bits (ThreadKeys), then one bit test a pair.
    const ThreadKeys<kBlockN> keys{keyBase + fragmentColumn(0, lane)};
    KeyBits kept[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + 8 * half;
      kept[half] = Mods::maskKeyBits(work.batch, work.head, row, keys) &
                   Mask::keptKeys(row, work.sequence.shift, keys) &
                   keys.below(work.sequence.seqlenK);
    }
    applyKeptKeys(scores, kept);
    return;
  }
  if constexpr (StoredBits) {
    KeyBits kept[2];
#pragma unroll
    for (int half = 0; half < 2; ++half)
      kept[half] = stored.slot >= 0 ? stored.rows[half] : ThreadKeys<kBlockN>::all();
    applyKeptKeys(scores, kept);
    return;
  }
  forEachScoreElement<Mods::kMaskUsesKeyFloat>(
      row0, keyBase, lane, [&](int i, int half, int row, int key, float keyFloat) {
        if constexpr (kBranchlessMaskTest) {
          // A region's capture reads are bounds-checked, so evaluating it
          // past seqlen_k is safe.
          bool keep = (key < work.sequence.seqlenK) & Mask::allows(row, key, work.sequence.shift);
          keep &= Mods::keeps(p, maskRows[half], work.batch, work.head, row, key, keyFloat);
          scores[i] = keep ? scores[i] : negativeInfinity();
        } else {
          bool keep = key < work.sequence.seqlenK && Mask::allows(row, key, work.sequence.shift);
          if constexpr (Mods::kHasMaskMod)
            keep = keep && Mods::keeps(p, maskRows[half], work.batch, work.head, row, key, keyFloat);
          if (!keep)
            scores[i] = negativeInfinity();
        }
      });
}

// score_mod values that depend on q and kv only through d = q - kv (a
// relative-position table; attn-lower-mods outlines them): instead of a
// capture read per pair, each consumer warpgroup reads the kBlockN + 63
// diagonals its 64 rows meet in a key tile from a window of its own in shared
// memory; each pair then reads its word at a constant offset from the lane's
// base. Producer warp 1 + c fills consumer c's windows (stageDiagonals), a
// key tile ahead of its softmax, so no consumer thread waits on the table's
// global loads: the windows form a ring with a full and an empty mbarrier
// each, like the K/V stages. The consumer waits for a window's fill at the
// tile's score_mod, and each of its warps gives it back once its lanes have
// read their words.
constexpr int kDiagonalsPerTile = kBlockN + 63;
constexpr u32 kDiagonalWindowBytes = (kBlockN + 64) * 4;
static_assert(kDiagonals == 0 || kConsumers < kWarpsPerWarpgroup,
              "a producer warp beside the TMA warp fills each consumer's windows");
static_assert(kDiagonals == 0 || kConsumers * kDiagonalWindows * kDiagonals *
                                         kDiagonalWindowBytes <=
                                     attn_plan::kSmemScoreDiagonalBytes,
              "the score_diagonals buffer (attn::scoreDiagonalBytes) holds every window");
constexpr int kColumnGroups = kBlockN / 8;

// Consumer `consumer`'s windows: [window][diagonal value][kBlockN + 64] words.
__device__ __forceinline__ u32 diagonalWindow(u32 smemBase, int consumer, int window) {
  return smemBase + attn_plan::kSmemScoreDiagonals +
         (consumer * kDiagonalWindows + window) * kDiagonals * kDiagonalWindowBytes;
}

// body(n, w) for the words lane + 32 w of each value n a fill warp's lane
// loads and stores.
constexpr int kDiagonalLaneWords = (kDiagonalsPerTile + 31) / 32;
template <class Body>
__device__ __forceinline__ void forEachLaneWord(int lane, Body &&body) {
#pragma unroll
  for (int n = 0; n < kDiagonals; ++n)
#pragma unroll
    for (int w = 0; w < kDiagonalLaneWords; ++w)
      if (lane + 32 * w < kDiagonalsPerTile)
        body(n, w);
}

// The producer warp of consumer `consumer`: for every key tile the block
// visits, in the consumers' order, it loads the values of the slice's rows
// (word x of a window holds d = sliceRow0 - (keyTile kBlockN + kBlockN - 1) +
// x), then waits for the window to be free, stores them and signals them
// full, one arrival per lane.
__device__ void stageDiagonals(const attn_abi::AttnFwdParams &p, u32 smemBase,
                               const Barriers &barriers, const TileSchedule &schedule,
                               int consumer, int lane) {
  int fills = 0;
  auto fill = [&](const WorkTile &work, int tile) {
    const int sliceRow0 = work.queryBegin + 64 * consumer;
    const long long first = static_cast<long long>(sliceRow0) - tile * kBlockN - (kBlockN - 1);
    u32 words[Mods::kScoreDiagonalSlots][kDiagonalLaneWords];
    forEachLaneWord(lane, [&](int n, int w) {
      words[n][w] = Mods::scoreDiagonal(p, n, work.batch, work.head, first + lane + 32 * w);
    });
    // As the K/V ring: the window's previous fill must have been given back.
    const RingSlot slot = ringSlot<kDiagonalWindows>(fills);
    if (fills >= kDiagonalWindows)
      mbarrierWait(barriers.diagonalEmpty(consumer, slot.stage), slot.phase ^ 1);
    const u32 address = diagonalWindow(smemBase, consumer, slot.stage);
    forEachLaneWord(lane, [&](int n, int w) {
      asm volatile("st.shared.b32 [%0], %1;" ::"r"(address + n * kDiagonalWindowBytes +
                                                   4 * (lane + 32 * w)),
                   "r"(words[n][w])
                   : "memory");
    });
    mbarrierArrive(barriers.diagonalFull(consumer, slot.stage));
    ++fills;
  };
  forEachVisitedTile(p, schedule, [](const WorkTile &) {}, fill);
}

// A consumer's side of its windows: the fills come in the order of the key
// tiles it visits, so the window of the key tile at ring position
// `position` (the K/V ring's count, over all work tiles) is that position's
// slot of the window ring. Its wait and arrival sit inside the softmax, as
// asm statements that hide their loop and branch from the compiler.
struct DiagonalStage {
  u32 smemBase;
  int consumer;

  // The window of the key tile at `position`, once filled.
  __device__ __forceinline__ u32 acquire(const Barriers &barriers, int position) const {
    const RingSlot slot = ringSlot<kDiagonalWindows>(position);
    mbarrierWaitInAsm(barriers.diagonalFull(consumer, slot.stage), slot.phase);
    return diagonalWindow(smemBase, consumer, slot.stage);
  }
  // Gives it back once this warp's lanes have read it.
  __device__ __forceinline__ void release(const Barriers &barriers, int position, int lane) const {
    mbarrierArriveForWarp(
        barriers.diagonalEmpty(consumer, ringSlot<kDiagonalWindows>(position).stage), lane);
  }
};

// The words of a published window this thread's pairs read. Element i
// (row 16 warp + lane / 4 + 8 h of the slice, column 8 g + 2 (lane % 4) + e)
// meets diagonal word 16 warp + lane / 4 - 2 (lane % 4) + kBlockN - 1 -
// 8 (g - h) - e: row half 1 at group g meets what half 0 meets at g - 1, so
// 2 (kBlockN / 8 + 1) reads serve the kBlockN / 2 elements.
// words[n][g - h + 1][e].
__device__ __forceinline__ void readDiagonals(u32 window, int warp, int lane,
                                              u32 (&words)[Mods::kScoreDiagonalSlots]
                                                          [kColumnGroups + 1][2]) {
  const u32 laneWord = window + 4 * (16 * warp + lane / 4 - 2 * (lane % 4) + kBlockN - 1);
#pragma unroll
  for (int n = 0; n < kDiagonals; ++n)
#pragma unroll
    for (int group = -1; group < kColumnGroups; ++group)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        words[n][group + 1][e] =
            loadShared<u32>(laneWord + n * kDiagonalWindowBytes - 4 * (8 * group + e));
}

// Replaces each raw score s by score_mod(scale * s, batch, head, q, k)
// (with Mods::kScoreKeyRelative, k as f32 is measured from keyOrigin).
__device__ __forceinline__ void applyScoreMod(const attn_abi::AttnFwdParams &p,
                                              float (&scores)[kScoreRegs], const WorkTile &work,
                                              const typename Mods::ScoreRow (&scoreRows)[2],
                                              int row0, int keyBase, float scale, int lane,
                                              const DiagonalStage &diagonals,
                                              const Barriers &barriers, int position,
                                              int keyOrigin) {
  u32 words[Mods::kScoreDiagonalSlots][kColumnGroups + 1][2];
  if constexpr (kDiagonals > 0) {
    readDiagonals(diagonals.acquire(barriers, position), (threadIdx.x % kWarpgroupThreads) / 32,
                  lane, words);
    diagonals.release(barriers, position, lane);
  }
  forEachScoreElement<Mods::kScoreUsesKeyFloat>(
      row0, keyBase, lane, [&](int i, int half, int row, int key, float keyFloat) {
        unsigned pairWords[Mods::kScoreDiagonalSlots] = {};
#pragma unroll
        for (int n = 0; n < kDiagonals; ++n)
          pairWords[n] = words[n][(i >> 2) - half + 1][i & 1];
        scores[i] = Mods::score(p, scoreRows[half], scores[i] * scale, work.batch, work.head, row,
                                key, keyFloat, pairWords);
      },
      Mods::kScoreKeyRelative ? keyOrigin : 0);
}

__device__ __forceinline__ void packProbabilities(const float (&scores)[kScoreRegs],
                                                  u32 (&probabilities)[kPRegs]) {
#pragma unroll
  for (int i = 0; i < kPRegs; ++i)
    probabilities[i] = packPair<Element>(scores[2 * i], scores[2 * i + 1]);
}

// Writes the normalized O slice (64 rows) and the log-sum-exp per row. The
// fragments go to a staging slice laid out as the O tensor map's 128-byte
// swizzled boxes (swizzledAddress: 64-column blocks of kBlockM 128-byte rows,
// which also keeps the fragment stores free of bank conflicts); one thread
// then stores the slice with TMA, which clips rows past seqlen_q. The slice
// never touches another warpgroup's rows. The store is left in flight: the
// next use of the slice waits for it to have been read. A packed sequence's
// partial slice is copied by the warps instead (storeWarpRows).
static_assert(kRowBytes == 128, "staging rows of 64 16-bit elements");

// Copies the rows this warp staged (16 of the slice, from `firstRow`) that
// lie before `rowEnd` to O rows sliceRow0 + row of `head`, 16 bytes per lane
// and step. TMA clips only at the tensor's end, and past a packed sequence's
// end lie the next sequence's rows.
__device__ __forceinline__ void storeWarpRows(const attn_abi::AttnFwdParams &p, u32 staging,
                                              int firstRow, int rowEnd, i64 sliceRow0, int head,
                                              int lane) {
  constexpr int kChunksPerRow = kHeadDim / 8;
  unsigned char *o = static_cast<unsigned char *>(p.o);
  const int rows = clampInt(rowEnd - firstRow, 0, 16);
#pragma unroll 1
  for (int index = lane; index < rows * kChunksPerRow; index += 32) {
    int row = firstRow + index / kChunksPerRow, chunk = index % kChunksPerRow;
    u32 word0, word1, word2, word3;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(word0), "=r"(word1), "=r"(word2), "=r"(word3)
                 : "r"(swizzledAddress(staging, kBlockM, row, chunk * 8)));
    i64 element = (sliceRow0 + row) * p.o_row_stride + head * p.o_head_stride + chunk * 8;
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(o + element * kElementBytes),
                 "r"(word0), "r"(word1), "r"(word2), "r"(word3)
                 : "memory");
  }
}

// The score_mod terms that move a whole row alike were left out of the
// scores (attn-lower-mods): a finite offset belongs to the row's
// log-sum-exp only. A row that saw no key keeps O = 0 and -inf; otherwise
// an offset of -inf masks the row, and +inf or NaN gives NaN, as such
// scores would have. With kScoreKeyRelative the offset also adds the
// score's key terms at keyOrigin.
__device__ __forceinline__ void applyScoreRowOffset(const attn_abi::AttnFwdParams &p,
                                                    const WorkTile &work, int row0, int keyOrigin,
                                                    float (&output)[kOutputRegs],
                                                    float (&logSumExp)[2]) {
  float outputFactor[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float offset = Mods::kScoreOutputScale *
                   Mods::scoreRowOffset(p, work.batch, work.head, row0 + 8 * half, keyOrigin);
    outputFactor[half] = 1.f;
    if (logSumExp[half] == negativeInfinity()) {
      // No key reached the row: it stays masked whatever the offset.
    } else if (offset == negativeInfinity()) {
      outputFactor[half] = 0.f;
      logSumExp[half] = negativeInfinity();
    } else if (!isfinite(offset)) {
      outputFactor[half] = __int_as_float(0x7fffffff);
      logSumExp[half] = outputFactor[half];
    } else {
      logSumExp[half] += offset;
    }
  }
#pragma unroll
  for (int i = 0; i < kOutputRegs; ++i)
    output[i] *= outputFactor[fragmentRowHalf(i)];
}

__device__ void storeOutput(const attn_abi::AttnFwdParams &p, const float (&output)[kOutputRegs],
                            const float (&logSumExp)[2], u32 staging, int consumer,
                            int sliceQueryBegin, const WorkTile &work) {
  const int thread = threadIdx.x % kWarpgroupThreads;
  const int warp = thread / 32, lane = thread % 32;
  const int head = work.head;

  if constexpr (!kStagingSharesQ) {
    // The previous work tile's store must have read the slice.
    if (thread == 0)
      tmaStoreWaitRead();
    warpgroupBarrier(1 + consumer);
  }
  storeFragmentSwizzled<Element, kHeadDim>(output, staging, kBlockM, warp, lane);
  // Located again, once O is staged, rather than kept in registers through
  // the main loop.
  const Sequence sequence = sequenceOf(p, work.batch);
  const bool packed = p.cu_seqlens_q != nullptr;
  // A packed sequence's partial slice: each warp copies the rows it staged,
  // before the barrier below, so that the slice is free after it just as
  // after a TMA store has read it.
  const bool storedByWarps = packed && sliceQueryBegin + 64 > sequence.seqlenQ;
  if (storedByWarps) {
    __syncwarp();
    storeWarpRows(p, staging, warp * 16, sequence.seqlenQ - sliceQueryBegin,
                  static_cast<i64>(sequence.rowQ) + sliceQueryBegin, head, lane);
  }
  fenceSharedForAsyncProxy();
  warpgroupBarrier(1 + consumer);

  if (thread == 0 && !storedByWarps) {
#pragma unroll
    for (int block = 0; block < kColumnBlocks; ++block)
      tmaStore4d(&p.o_map, staging + block * kBlockM * kRowBytes, block * kColumnBlock,
                 sequence.rowQ + sliceQueryBegin, head, sequence.mapBatch);
    tmaStoreCommit();
  }

  if ((lane & 3) == 0) {
    // [batch, q_heads, seqlen_q], or [q_heads, total_q] for packed sequences.
    const i64 rowBase = packed ? static_cast<i64>(head) * p.total_q + sequence.rowQ
                               : (static_cast<i64>(work.batch) * p.q_heads + head) * p.seqlen_q;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      int query = sliceQueryBegin + warp * 16 + lane / 4 + 8 * half;
      if (query < sequence.seqlenQ)
        p.lse[rowBase + query] = logSumExp[half];
    }
  }
}

// A piece of a split tail tile, per warp (16 rows, independent of the other
// warps): writes its normalized O and log-sum-exp to its slot, then counts
// itself; the warp that completes the tile's count takes the others' pieces
// in, O = sum_j e^(lse_j - lse) O_j with lse = log sum_j e^(lse_j), and
// stores the rows and their log-sum-exp itself.
__device__ void combineTailPieces(const attn_abi::AttnFwdParams &p, const TileSchedule &schedule,
                                  const WorkTile &work, float (&output)[kOutputRegs],
                                  float (&logSumExp)[2], int consumer, int sliceQueryBegin) {
  constexpr long long kWarpFloats = attn_abi::tailPieceWarpFloats(kHeadDim);
  static_assert(kWarpFloats == (kOutputRegs + 2) * 32, "a thread's O fragment and two LSEs");
  constexpr int kSlotWarps = kConsumers * kWarpsPerWarpgroup;
  const int thread = threadIdx.x % kWarpgroupThreads;
  const int warp = thread / 32, lane = thread % 32;
  const int slotWarp = consumer * kWarpsPerWarpgroup + warp;
  auto warpPiece = [&](int slot) {
    return p.tail_partials + (static_cast<i64>(slot) * kSlotWarps + slotWarp) * kWarpFloats;
  };
  const int block = static_cast<int>(blockIdx.x);
  float *mine = warpPiece(schedule.pieceSlot(block, work.tailTile));
#pragma unroll
  for (int i = 0; i < kOutputRegs; ++i)
    mine[i * 32 + lane] = output[i];
  mine[kOutputRegs * 32 + lane] = logSumExp[0];
  mine[(kOutputRegs + 1) * 32 + lane] = logSumExp[1];
  // Release the piece, then count it.
  __threadfence();
  __syncwarp();
  int *counter = p.tail_counters + static_cast<i64>(work.tailTile) * kSlotWarps + slotWarp;
  int arrived = 0;
  if (lane == 0)
    arrived = atomicAdd(counter, 1);
  arrived = __shfl_sync(0xffffffff, arrived, 0);
  if (arrived != work.pieces - 1)
    return;
  // The last piece: acquire the others, and leave the count at 0.
  __threadfence();
  if (lane == 0)
    *counter = 0;
  for (int piece = 0; piece < work.pieces; ++piece) {
    const int other = work.firstPieceBlock + piece;
    if (other == block)
      continue;
    const float *theirs = warpPiece(schedule.pieceSlot(other, work.tailTile));
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float their = __ldcg(theirs + (kOutputRegs + half) * 32 + lane);
      const float high = fmaxf(logSumExp[half], their);
      // Rows no key reached in either keep O = 0 and -inf.
      const bool none = high == negativeInfinity();
      const float ours = none ? 0.f : fastExp2((logSumExp[half] - high) * kLog2e);
      const float them = none ? 0.f : fastExp2((their - high) * kLog2e);
      const float sum = ours + them;
      logSumExp[half] = none ? high : high + __logf(sum);
      const float inverse = none ? 0.f : 1.f / sum;
#pragma unroll
      for (int i = 0; i < kOutputRegs; ++i)
        if (fragmentRowHalf(i) == half)
          output[i] = (output[i] * ours + __ldcg(theirs + i * 32 + lane) * them) * inverse;
    }
  }
  // The rows, from registers: two adjacent columns a store.
  const Sequence &sequence = work.sequence;
  unsigned char *o = static_cast<unsigned char *>(p.o);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int query = sliceQueryBegin + warp * 16 + lane / 4 + 8 * half;
    if (query >= sequence.seqlenQ)
      continue;
    const i64 rowElement = static_cast<i64>(work.batch) * p.o_batch_stride +
                           static_cast<i64>(query) * p.o_row_stride +
                           static_cast<i64>(work.head) * p.o_head_stride;
#pragma unroll
    for (int i = 0; i < kOutputRegs; i += 2)
      if (fragmentRowHalf(i) == half) {
        const u32 pair = packPair<Element>(output[i], output[i + 1]);
        asm volatile("st.global.b32 [%0], %1;" ::"l"(o + (rowElement + fragmentColumn(i, lane)) *
                                                             kElementBytes),
                     "r"(pair)
                     : "memory");
      }
    if ((lane & 3) == 0)
      p.lse[(static_cast<i64>(work.batch) * p.q_heads + work.head) * p.seqlen_q + query] =
          logSumExp[half];
  }
}

// One work tile of a consumer, software-pipelined inside the warpgroup:
// iteration j issues S_j = Q K_jᵀ and O += P_{j-1} V_{j-1} back to back, then
// runs the softmax of S_j while the PV product is still on the tensor cores.
// Only the rescaling of O waits for that product. `tileCount` is the number
// of key tiles the work tile visits, `ring` the key tiles this block consumed
// before it; `qPhase` is this tile's Q load. StoredBits as for applyMask:
// the form without the mask_mod's per-pair code needs fewer registers (the
// BigBird kernel's main loop reloaded 10 spilled values an iteration).
template <bool StoredBits>
__device__ void consumeTile(const attn_abi::AttnFwdParams &p, u32 smemBase,
                            const Barriers &barriers, int consumer, const TileSchedule &schedule,
                            const WorkTile &work, int tileCount, int ring, u32 qPhase,
                            const GemmTurns &turns) {
  const int thread = threadIdx.x % kWarpgroupThreads;
  const int warp = thread / 32, lane = thread % 32;
  const int sliceQueryBegin = work.queryBegin + 64 * consumer;
  const int row0 = sliceQueryBegin + warp * 16 + lane / 4;
  const int sliceLast = min(sliceQueryBegin + 63, work.sequence.seqlenQ - 1);
  const u32 qSlice = smemBase + attn_plan::kSmemQ + consumer * 64 * kRowBytes;
  auto kTile = [&](int stage) { return smemBase + attn_plan::kSmemK + stage * kKvTileBytes; };
  auto vTile = [&](int stage) { return smemBase + attn_plan::kSmemV + stage * kKvTileBytes; };
  // Q is free once the last QKᵀ has read it, unless O's staging shares it.
  auto releaseQAfterScores = [&]() {
    if constexpr (!kStagingSharesQ)
      releaseSlot(barriers.qEmpty(), lane);
  };

  float output[kOutputRegs];
#pragma unroll
  for (int i = 0; i < kOutputRegs; ++i)
    output[i] = 0.f;
  RowStatistics stats;
  stats.reset();
  if constexpr (kFixedSoftmaxBase)
    stats.max[0] = stats.max[1] = kFixedSoftmaxBaseLog2;

  // What the user regions compute once per query row of this thread. Row
  // values that do not read q are the second row's too: then the two rows
  // share every per-key product with them (ALiBi's slope times kv).
  typename Mods::MaskRow maskRows[2];
  typename Mods::ScoreRow scoreRows[2];
  maskRows[0] = Mods::maskRow(p, work.batch, work.head, row0);
  scoreRows[0] = Mods::scoreRow(p, work.batch, work.head, row0);
  maskRows[1] = Mods::kMaskRowUsesQuery ? Mods::maskRow(p, work.batch, work.head, row0 + 8)
                                        : maskRows[0];
  scoreRows[1] = Mods::kScoreRowUsesQuery ? Mods::scoreRow(p, work.batch, work.head, row0 + 8)
                                          : scoreRows[0];

  // A score_mod sees scaled scores, so the softmax then scales by log2(e)
  // alone; without one the scale folds into the exponent. The constant
  // factors attn-lower-mods took out of score_mod join these two scales.
  const float kLn2 = 0.6931471805599453f;
  const float softmaxScaleLog2 =
      Mods::kHasScoreMod ? kLog2e * Mods::kScoreOutputScale : p.scale_log2;
  const float scoreModInputScale = p.scale_log2 * kLn2 * Mods::kScoreInputScale;
  // Where a score_mod that reads kv relative to an origin measures it from:
  // the slice's first diagonal key, so that the keys near the diagonal
  // (those a distance bias favours) give small values.
  const int keyOrigin = static_cast<int>(
      min(max(static_cast<i64>(sliceQueryBegin) + work.sequence.shift, i64(0)),
          static_cast<i64>(work.sequence.seqlenK)));

  // Its first next() tests the window at keys.begin.
  VisitedTileWalk walk{work.keys.begin - 32, 0u, 0u, 0u, -1};
  // This thread's rows' stored key bits of a tile, where the launch has
  // them, once the tile's K (and words) arrived in stage `stage`.
  const int rowInBlock = row0 - work.queryBegin;
  auto storedRowsOf = [&](int keyTile, int stage) {
    return StoredBits ? readStoredKeyRows(walk.slotOf(keyTile), keyWordsTile(smemBase, stage),
                                          rowInBlock, lane)
                      : StoredKeyRows{-1, {0, 0}};
  };
  // Hands a K stage (and its key words) back to the producer once the scores
  // have read K; with stored bits, after every lane's reads of the words.
  auto releaseKeySlot = [&](int stage) {
    if constexpr (StoredBits)
      __syncwarp();
    releaseSlot(barriers.kEmpty(stage), lane);
  };
  const DiagonalStage diagonals{smemBase, consumer};
  // Scores of key tile `keyTile` (at ring position `position`) ->
  // probabilities, with the O rescale factor.
  auto softmaxOfTile = [&](float (&scores)[kScoreRegs], int keyTile, int position,
                           const StoredKeyRows &stored, float (&rescale)[2]) {
    int keyBase = keyTile * kBlockN;
    Coverage coverage = Mods::kHasMaskMod
                            ? walk.coverage(keyTile)
                            : sliceCoverage(p, work, keyTile, sliceQueryBegin, sliceLast);
    // A tile visited for the other consumers' rows only: the softmax gives
    // P = 0 and keeps the statistics, with nothing evaluated per element.
    const bool sliceEmpty = kMaskModProved && coverage == Coverage::Empty;
    if constexpr (Mods::kHasScoreMod) {
      if (!sliceEmpty) {
        applyScoreMod(p, scores, work, scoreRows, row0, keyBase, scoreModInputScale, lane,
                      diagonals, barriers, position, keyOrigin);
      } else if constexpr (kDiagonals > 0) {
        // The fill still comes: take it and give it back unread.
        diagonals.acquire(barriers, position);
        diagonals.release(barriers, position, lane);
      }
    }
    // Tiles the masks fully cover skip the per-element test.
    if (coverage != Coverage::Full && !sliceEmpty)
      applyMask<StoredBits>(p, scores, work, maskRows, row0, keyBase, lane, stored);
    if constexpr (kFixedSoftmaxBase)
      fixedBaseProbabilities<attn_plan::kSoftmaxReductionChains>(
          scores, softmaxScaleLog2, kFixedSoftmaxBaseLog2, sliceEmpty, stats);
    else
      softmaxProbabilities<attn_plan::kSoftmaxReductionChains>(scores, softmaxScaleLog2,
                                                               sliceEmpty, stats, rescale);
  };

  mbarrierWait(barriers.qFull(), qPhase);
  if (tileCount == 0) {
    releaseQAfterScores();
  } else {
    float scores[kScoreRegs];
    u32 probabilities[kPRegs];
    float rescale[2];

    // Prologue: S_0 alone.
    int keyTile = walk.next(p, work, work.keys.begin, sliceQueryBegin, sliceLast, lane);
    RingSlot slot = ringSlot<kStages>(ring);
    mbarrierWait(barriers.kFull(slot.stage), slot.phase);
    StoredKeyRows stored = storedRowsOf(keyTile, slot.stage);
    turns.wait();
    issueScores(scores, qSlice, kTile(slot.stage));
    turns.pass();
    wgmmaWaitGroup<0>();
    fenceRegisters(scores);
    releaseKeySlot(slot.stage);
    if (tileCount == 1)
      releaseQAfterScores();
    softmaxOfTile(scores, keyTile, ring, stored, rescale);
    packProbabilities(scores, probabilities);

    for (int iteration = 1; iteration < tileCount; ++iteration) {
      keyTile = walk.next(p, work, keyTile + 1, sliceQueryBegin, sliceLast, lane);
      RingSlot previous = slot;
      slot = ringSlot<kStages>(ring + iteration);
      mbarrierWait(barriers.kFull(slot.stage), slot.phase);
      stored = storedRowsOf(keyTile, slot.stage);
      mbarrierWait(barriers.vFull(previous.stage), previous.phase);
      turns.wait();
      issueScores(scores, qSlice, kTile(slot.stage));
      issueRegisterProduct<kHeadDim, kBlockN, Element>(output, probabilities,
                                                        vTile(previous.stage));
      turns.pass();

      wgmmaWaitGroup<1>(); // S_j done, PV_{j-1} may still run
      fenceRegisters(scores);
      releaseKeySlot(slot.stage);
      if (iteration == tileCount - 1)
        releaseQAfterScores();
      softmaxOfTile(scores, keyTile, ring + iteration, stored, rescale);

      wgmmaWaitGroup<0>();
      fenceRegisters(output);
      fenceRegisters(probabilities);
      releaseSlot(barriers.vEmpty(previous.stage), lane);
      if constexpr (!kFixedSoftmaxBase)
        rescaleOutput(output, rescale);
      packProbabilities(scores, probabilities);
    }

    // Epilogue: the last PV alone.
    mbarrierWait(barriers.vFull(slot.stage), slot.phase);
    turns.wait();
    issueRegisterProduct<kHeadDim, kBlockN, Element>(output, probabilities, vTile(slot.stage));
    turns.pass();
    wgmmaWaitGroup<0>();
    fenceRegisters(output);
    releaseSlot(barriers.vEmpty(slot.stage), lane);
  }

  float logSumExp[2];
  finalizeSoftmax(output, stats, logSumExp);
  if constexpr (Mods::kHasScoreRowOffset)
    applyScoreRowOffset(p, work, row0, keyOrigin, output, logSumExp);
  if (kSplitsTail && work.tailTile >= 0) {
    combineTailPieces(p, schedule, work, output, logSumExp, consumer, sliceQueryBegin);
    // Q is free: the piece stages nothing in it.
    if constexpr (kStagingSharesQ)
      if (thread == 0)
        mbarrierArrive(barriers.qEmpty(), kWarpsPerWarpgroup);
    return;
  }
  u32 staging = smemBase + attn_plan::kSmemOStaging + consumer * 64 * kRowBytes;
  storeOutput(p, output, logSumExp, staging, consumer, sliceQueryBegin, work);
  if constexpr (kStagingSharesQ) {
    // The slice is this warpgroup's rows of Q: the next Q may land once the
    // store has read them. One thread arrives for the warpgroup's warps.
    if (thread == 0) {
      tmaStoreWaitRead();
      mbarrierArrive(barriers.qEmpty(), kWarpsPerWarpgroup);
    }
  }
}

__device__ void consume(const attn_abi::AttnFwdParams &p, u32 smemBase, const Barriers &barriers,
                        int consumer, const TileSchedule &schedule) {
  const GemmTurns turns{consumer};
  turns.open();
  int ring = 0;
  u32 qPhase = 0;
  for (int index = schedule.firstPosition(); index < schedule.end;
       index = schedule.nextPosition(index)) {
    const WorkTile work = schedule.at(p, index);
    if (work.empty())
      continue;
    const int tileCount = countVisitedTilesInWarp(p, work, threadIdx.x % 32);
    if (kStoredKeyBits && p.tile_key_bits)
      consumeTile<kStoredKeyBits>(p, smemBase, barriers, consumer, schedule, work, tileCount,
                                  ring, qPhase, turns);
    else
      consumeTile<false>(p, smemBase, barriers, consumer, schedule, work, tileCount, ring, qPhase,
                         turns);
    ring += tileCount;
    qPhase ^= 1;
  }
  turns.close();
  // Shared memory must outlive the copy engine's reads of the last store.
  if (threadIdx.x % kWarpgroupThreads == 0)
    tmaStoreWaitRead();
}

} // namespace attn_kernel

extern "C" __global__ void __launch_bounds__(attn_kernel::kThreads, 1)
    attn_fwd_kernel(const __grid_constant__ attn_abi::AttnFwdParams p) {
  using namespace attn_kernel;
  const u32 smemBase = alignedDynamicShared();
  const Barriers barriers{smemBase + attn_plan::kSmemBarriers};
  const TileSchedule schedule(p);

  const int warpgroup = threadIdx.x / kWarpgroupThreads;
  if (threadIdx.x == 0) {
    for (int consumer = 0; consumer < (kDiagonals > 0 ? kConsumers : 0); ++consumer)
      for (int window = 0; window < kDiagonalWindows; ++window) {
        mbarrierInit(barriers.diagonalFull(consumer, window), 32);
        mbarrierInit(barriers.diagonalEmpty(consumer, window), kWarpsPerWarpgroup);
      }
    mbarrierInit(barriers.qFull(), 1);
    mbarrierInit(barriers.qEmpty(), kReleaseArrivals);
    for (int stage = 0; stage < kStages; ++stage) {
      mbarrierInit(barriers.kFull(stage), 1);
      mbarrierInit(barriers.vFull(stage), 1);
      mbarrierInit(barriers.kEmpty(stage), kReleaseArrivals);
      mbarrierInit(barriers.vEmpty(stage), kReleaseArrivals);
    }
    fenceBarrierInit();
  }
  __syncthreads();

  if (warpgroup == 0) {
    releaseRegisters<attn_plan::kProducerRegisters>();
    const int warp = threadIdx.x / 32;
    if (threadIdx.x == 0)
      produce(p, smemBase, barriers, schedule);
    else if constexpr (kDiagonals > 0)
      if (warp >= 1 && warp <= kConsumers)
        stageDiagonals(p, smemBase, barriers, schedule, warp - 1, threadIdx.x % 32);
  } else {
    claimRegisters<attn_plan::kConsumerRegisters>();
    consume(p, smemBase, barriers, warpgroup - 1, schedule);
  }
}

namespace attn_kernel {
// One stored word of a tile at run time: row q's keys keyBase + 8 j + e
// (j < kBlockN / 8, e < 2) as ThreadKeys bits, those inside the sequences and
// those the built-in mask and the mask_mod keep among them.
struct TileKeyWord {
  KeyBits inside;
  KeyBits kept;
};

__device__ __forceinline__ TileKeyWord evaluateTileKeyWord(const attn_abi::AttnFwdParams &p,
                                                           const Sequence &sequence, int batch,
                                                           int head, int q, int keyBase) {
  TileKeyWord word{0, 0};
  if (q >= sequence.seqlenQ)
    return word;
  for (int bit = 0; bit < kBlockN / 4; ++bit) {
    const int k = keyBase + 8 * (bit >> 1) + (bit & 1);
    if (k >= sequence.seqlenK)
      break;
    word.inside |= KeyBits(1) << bit;
    if (Mask::allows(q, k, sequence.shift) && Mods::keeps(p, batch, head, q, k))
      word.kept |= KeyBits(1) << bit;
  }
  return word;
}

__device__ __forceinline__ int countKeyBits(unsigned bits) { return __popc(bits); }
__device__ __forceinline__ int countKeyBits(unsigned long long bits) { return __popcll(bits); }

// Word `word` of tile (queryBlock, keyTile): row word / 4 of the block, lane
// quad word % 4.
__device__ __forceinline__ TileKeyWord evaluateTileKeyWord(const attn_abi::AttnFwdParams &p,
                                                           const Sequence &sequence, int batch,
                                                           int head, int queryBlock, int keyTile,
                                                           int word) {
  return evaluateTileKeyWord(p, sequence, batch, head, queryBlock * kBlockM + word / 4,
                             keyTile * kBlockN + 2 * (word % 4));
}
} // namespace attn_kernel

// Tile coverage of the masks at run time, for a mask_mod the compiler could
// not classify (it reads a buffer, ...): block (key tile, query block,
// batch * head) tests every pair of its tile inside the sequences against the
// built-in mask and the mask_mod and writes Empty, Partial or Full (Empty
// past a packed sequence's end; Full only where every key of the tile lies
// inside the key length). The
// forward kernel then skips the empty tiles and the per-pair test of the full
// ones. Built once per shape and captures, reused by every launch.
extern "C" __global__ void __launch_bounds__(ATTN_TILE_COVERAGE_THREADS)
    attn_tile_coverage_kernel(const __grid_constant__ attn_abi::AttnFwdParams p) {
  using namespace attn_kernel;
  const int keyTile = blockIdx.x, queryBlock = blockIdx.y;
  const int batch = blockIdx.z / p.q_heads, head = blockIdx.z % p.q_heads;
  const Sequence sequence = sequenceOf(p, batch);
  __shared__ int counts[2]; // pairs inside the sequences, pairs kept
  if (threadIdx.x == 0)
    counts[0] = counts[1] = 0;
  __syncthreads();
  int inside = 0, kept = 0;
  for (int word = threadIdx.x; word < kBlockM * 4; word += blockDim.x) {
    const TileKeyWord bits =
        evaluateTileKeyWord(p, sequence, batch, head, queryBlock, keyTile, word);
    inside += countKeyBits(bits.inside);
    kept += countKeyBits(bits.kept);
  }
  atomicAdd(&counts[0], inside);
  atomicAdd(&counts[1], kept);
  __syncthreads();
  if (threadIdx.x == 0) {
    // A tile past the key length is partial for the forward kernel anyway
    // (sliceCoverage): so it gets stored key bits, and a full tile keeps
    // every key.
    const bool keysInside = (keyTile + 1) * kBlockN <= sequence.seqlenK;
    Coverage coverage = counts[1] == 0 ? Coverage::Empty
                        : (counts[1] == counts[0] && keysInside ? Coverage::Full
                                                                : Coverage::Partial);
    p.tile_coverage[tileCoverageIndex(p, batch, head, queryBlock, keyTile)] =
        static_cast<unsigned char>(coverage);
  }
}

// Numbers the partial tiles of a tile coverage in coverage order: slots[i]
// is tile i's slot (-1 unless partial), *partialTiles their count; either
// may be null. One block, 32 tiles a warp per step.
extern "C" __global__ void __launch_bounds__(ATTN_TILE_SLOT_THREADS)
    attn_tile_slot_kernel(const unsigned char *coverage, long long tiles, int *slots,
                          int *partialTiles) {
  constexpr int kWarps = ATTN_TILE_SLOT_THREADS / 32;
  __shared__ int warpPartials[kWarps];
  __shared__ int before;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (threadIdx.x == 0)
    before = 0;
  for (long long first = 0; first < tiles; first += ATTN_TILE_SLOT_THREADS) {
    const long long tile = first + threadIdx.x;
    const bool partial =
        tile < tiles && coverage[tile] == static_cast<unsigned char>(attn_kernel::Coverage::Partial);
    const unsigned partialLanes = __ballot_sync(0xffffffffu, partial);
    if (lane == 0)
      warpPartials[warp] = __popc(partialLanes);
    __syncthreads();
    int slot = before + __popc(partialLanes & ((1u << lane) - 1));
    for (int w = 0; w < warp; ++w)
      slot += warpPartials[w];
    if (slots && tile < tiles)
      slots[tile] = partial ? slot : -1;
    __syncthreads();
    if (threadIdx.x == ATTN_TILE_SLOT_THREADS - 1)
      before = slot + partial;
    __syncthreads();
  }
  if (threadIdx.x == 0 && partialTiles)
    *partialTiles = before;
}

// The stored key bits of every partial tile (AttnFwdParams::tile_key_bits),
// whose slots the slot kernel wrote: block (key tile, query block, batch *
// head) as the coverage kernel's, for the forward kernel's per-pair test of
// a mask_mod the compiler could not classify.
extern "C" __global__ void __launch_bounds__(ATTN_TILE_COVERAGE_THREADS)
    attn_tile_key_bits_kernel(const __grid_constant__ attn_abi::AttnFwdParams p) {
  using namespace attn_kernel;
  const int keyTile = blockIdx.x, queryBlock = blockIdx.y;
  const int batch = blockIdx.z / p.q_heads, head = blockIdx.z % p.q_heads;
  const int slot = tileKeySlots(p)[tileCoverageIndex(p, batch, head, queryBlock, keyTile)];
  if (slot < 0)
    return;
  const Sequence sequence = sequenceOf(p, batch);
  KeyBits *words = tileKeyWords(p, slot);
  for (int word = threadIdx.x; word < kBlockM * 4; word += blockDim.x)
    words[word] = evaluateTileKeyWord(p, sequence, batch, head, queryBlock, keyTile, word).kept;
}

// The cost of each work tile, in default order, for the work order kernel
// below: the key tiles its block visits (those the forward kernel would
// load, with p.tile_coverage when given), 0 for an empty tile past a packed
// sequence's end. One warp per work tile.
extern "C" __global__ void __launch_bounds__(ATTN_WORK_COST_THREADS)
    attn_work_cost_kernel(const __grid_constant__ attn_abi::AttnFwdParams p, int *costs) {
  using namespace attn_kernel;
  const TileSchedule schedule(p);
  const int index = blockIdx.x * (ATTN_WORK_COST_THREADS / 32) + threadIdx.x / 32;
  if (index >= schedule.count)
    return;
  const WorkTile work = schedule.atDefault(p, index);
  const int cost = work.empty() ? 0 : countVisitedTilesInWarp(p, work, threadIdx.x % 32);
  if (threadIdx.x % 32 == 0)
    costs[index] = cost;
}

// A work order from the work cost kernel's costs, on the GPU, so that
// building one needs no synchronization: a stable counting sort of the work
// tiles by key, largest key first, ties in default order. The key is the
// cost (ATTN_WORK_ORDER_LONGEST_FIRST), or, with
// ATTN_WORK_ORDER_OUTLIERS_FIRST, the cost of a tile that costs more than
// twice the mean and 0 for the others: the outliers start first, longest
// first, and the other tiles keep the default order with its L2 sharing.
// Keys stop at ATTN_WORK_ORDER_MAX_KEY. One block.
constexpr int kWorkOrderKeys = ATTN_WORK_ORDER_MAX_KEY + 1;
static_assert(kWorkOrderKeys % 32 == 0 && ATTN_WORK_ORDER_THREADS % 32 == 0,
              "the scan takes 32 keys a step; the block is whole warps");

extern "C" __global__ void __launch_bounds__(ATTN_WORK_ORDER_THREADS)
    attn_work_order_kernel(const int *costs, int count, int policy, int *order) {
  // cursor[key]: the histogram, then where the next tile of that key goes.
  __shared__ int cursor[kWorkOrderKeys];
  __shared__ unsigned long long totalCost;
  for (int key = threadIdx.x; key < kWorkOrderKeys; key += blockDim.x)
    cursor[key] = 0;
  if (threadIdx.x == 0)
    totalCost = 0;
  __syncthreads();
  const unsigned lane = threadIdx.x % 32;
  if (policy == ATTN_WORK_ORDER_OUTLIERS_FIRST) {
    unsigned long long sum = 0;
    for (int i = threadIdx.x; i < count; i += blockDim.x)
      sum += static_cast<unsigned long long>(max(costs[i], 0));
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
      sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == 0)
      atomicAdd(&totalCost, sum);
    __syncthreads();
  }
  const unsigned long long outlierBound = 2 * totalCost;
  auto keyOf = [&](int i) {
    const int cost = max(costs[i], 0);
    if (policy == ATTN_WORK_ORDER_OUTLIERS_FIRST &&
        static_cast<unsigned long long>(cost) * static_cast<unsigned>(count) <= outlierBound)
      return 0;
    return min(cost, ATTN_WORK_ORDER_MAX_KEY);
  };
  for (int i = threadIdx.x; i < count; i += blockDim.x)
    atomicAdd(&cursor[keyOf(i)], 1);
  __syncthreads();
  if (threadIdx.x >= 32)
    return;
  // Exclusive scan from the largest key down: a key's first position is the
  // number of tiles with larger keys.
  int before = 0;
  for (int top = kWorkOrderKeys - 1; top >= 0; top -= 32) {
    const int key = top - static_cast<int>(lane);
    const int tiles = cursor[key];
    int inclusive = tiles;
#pragma unroll
    for (int offset = 1; offset < 32; offset *= 2) {
      const int below = __shfl_up_sync(0xffffffffu, inclusive, offset);
      if (lane >= static_cast<unsigned>(offset))
        inclusive += below;
    }
    cursor[key] = before + inclusive - tiles;
    before += __shfl_sync(0xffffffffu, inclusive, 31);
  }
  __syncwarp();
  // Scatter in default order, 32 tiles at a time: lanes with equal keys take
  // consecutive positions in lane order, claimed by the lowest of them.
  for (int first = 0; first < count; first += 32) {
    const int i = first + static_cast<int>(lane);
    const unsigned live = __ballot_sync(0xffffffffu, i < count);
    if (i < count) {
      const int key = keyOf(i);
      const unsigned peers = __match_any_sync(live, key);
      const int leader = __ffs(peers) - 1;
      int position = 0;
      if (static_cast<int>(lane) == leader) {
        position = cursor[key];
        cursor[key] = position + __popc(peers);
      }
      position = __shfl_sync(peers, position, leader);
      order[position + __popc(peers & ((1u << lane) - 1))] = i;
    }
    __syncwarp();
  }
}
