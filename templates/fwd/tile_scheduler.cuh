// The forward kernel's plan constants and shared-memory barriers, and its
// schedule: the work tiles of the persistent grid (TileSchedule, with the
// split tail), the key tiles each visits (the mask_mod's tile coverage, at
// compile or run time) and the consumers' walk over them (VisitedTileWalk).
#pragma once

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

// Over a paged KV cache (p.block_table, in kernels compiled for them) each
// sequence holds its own key count, seqlens_k[batch] clamped to [0,
// seqlen_k]; its queries and its pages' rows start at 0.
__device__ __forceinline__ Sequence sequenceOf(const attn_abi::AttnFwdParams &p, int batch) {
  Sequence sequence = attn_dev::sequenceOf(p, batch, attn_plan::kMaskBottomRight);
  if (attn_plan::kPagedKv && p.block_table) {
    sequence.seqlenK = clampInt(__ldg(p.seqlens_k + batch), 0, p.seqlen_k);
    if (attn_plan::kMaskBottomRight)
      sequence.shift = static_cast<long long>(sequence.seqlenK) - sequence.seqlenQ;
  }
  return sequence;
}

// One unit of the persistent schedule: BLOCK_M query rows of one (batch,
// head), or 64 rows of each of two heads that share a kv head where the
// launch packs heads, and the key tiles they visit: those of `keys` that
// the mask_mod's coverage test does not prove empty (all of them without a
// mask_mod).
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

// Whether the work tiles pack two query heads (p.heads_per_tile): only
// without a mask_mod, whose coverage and stored key bits are indexed by the
// tile's one head, and with two consumers. Plans of three (192 rows) keep
// the code of one head a tile: its few more instructions a tile measured
// 2.4 % slower at head dim 64 without a mask (H200), and groups of query
// heads divisible by three are rare.
constexpr bool kMayPackHeads = !Mods::kHasMaskMod && kConsumers == 2;
__device__ __forceinline__ bool packsHeads(const attn_abi::AttnFwdParams &p) {
  return kMayPackHeads && p.heads_per_tile == kConsumers;
}
// A work tile's query positions, and the work tiles of one (batch, query
// block): read from the parameters where needed rather than kept in
// registers across the main loop.
__device__ __forceinline__ int tileQueryRows(const attn_abi::AttnFwdParams &p) {
  return packsHeads(p) ? 64 : kBlockM;
}
__device__ __forceinline__ int tilesPerQueryBlock(const attn_abi::AttnFwdParams &p) {
  return packsHeads(p) ? p.q_heads / kConsumers : p.q_heads;
}

// Consumer c's 64 rows of a work tile: rows queryBegin + 64 c on of the
// tile's head, or, where the tile packs heads, rows queryBegin on of head
// + c (consumerWork).
__device__ __forceinline__ int sliceBegin(const attn_abi::AttnFwdParams &p, const WorkTile &work,
                                          int consumer) {
  return work.queryBegin + (packsHeads(p) ? 0 : 64 * consumer);
}
__device__ __forceinline__ WorkTile consumerWork(const attn_abi::AttnFwdParams &p,
                                                 const WorkTile &work, int consumer) {
  WorkTile own = work;
  if (packsHeads(p))
    own.head += consumer;
  return own;
}

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
      : queryBlocks((p.seqlen_q + tileQueryRows(p) - 1) / tileQueryRows(p)),
        count(queryBlocks * tilesPerQueryBlock(p) * p.batch), tailBegin(count), end(count),
        keyTiles((p.seqlen_k + kBlockN - 1) / kBlockN), tailKeyTiles(0) {
    const int blocks = static_cast<int>(gridDim.x);
    // Every block's run must hold a key tile (the runtime's split does).
    if (kSplitsTail && !packsHeads(p) && p.tail_tiles > 0 && p.tail_tiles < blocks &&
        p.tail_tiles < count &&
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
      const int headBatches = tilesPerQueryBlock(p) * p.batch;
      const int fromLast = index / headBatches;
      defaultIndex = (index - fromLast * headBatches) * queryBlocks + fromLast;
    }
    return atDefault(p, defaultIndex);
  }

  // The work tile at position `index` of the default order.
  __device__ WorkTile atDefault(const attn_abi::AttnFwdParams &p, int index) const {
    int queryBlock = queryBlocks - 1 - index % queryBlocks;
    int headBatch = index / queryBlocks;
    const int tilesPerBatch = tilesPerQueryBlock(p);
    const int headStep = packsHeads(p) ? kConsumers : 1;
    WorkTile work;
    work.queryBlock = queryBlock;
    work.queryBegin = queryBlock * tileQueryRows(p);
    work.head = (headBatch % tilesPerBatch) * headStep;
    work.kvHead = work.head / (p.q_heads / p.kv_heads);
    work.batch = headBatch / tilesPerBatch;
    work.sequence = sequenceOf(p, work.batch);
    work.queryLast = min(work.queryBegin + tileQueryRows(p), work.sequence.seqlenQ) - 1;
    work.keys = keyTilesFor(work.queryBegin, work.queryLast + 1, work.sequence.seqlenK,
                            work.sequence.shift);
    work.tailTile = -1;
    work.pieces = 1;
    work.firstPieceBlock = 0;
    return work;
  }
};

} // namespace attn_kernel
