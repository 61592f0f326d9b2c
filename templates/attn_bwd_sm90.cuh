// Backward softmax attention for sm_90a: dQ, dK and dV from dO, the
// forward's inputs and its log-sum-exp.
//
// Three kernels in one unit. The preprocess (bwd/row_kernels.cuh) turns the
// forward's log-sum-exp into base 2, computes delta = rowsum(dO * O) and
// clears dQ's fp32 accumulator; the main kernel below walks, for one key
// tile of BLOCK_N keys and one kv head, the query blocks of BLOCK_M rows
// that may see the tile, for every query head of the kv head's group; the
// conversion scales the accumulator into dQ.
//
// Main kernel: warpgroup 0 is the producer, one thread of which loads the K
// and V tiles once and streams a ring of (Q, dO, log-sum-exp, delta) stages
// with TMA and bulk copies, completing on mbarriers. Warpgroups 1..C are
// consumers, each owning 64 keys of the tile: per query block it computes
// Sᵀ = K Qᵀ and dPᵀ = V dOᵀ on WGMMA from shared memory, Pᵀ and
// dSᵀ = Pᵀ (dPᵀ - delta) in registers, then accumulates dV += Pᵀ dO and
// dK += dSᵀ Q in registers (A from the packed fragments), and stores dSᵀ to
// shared memory, where all consumers' slices form dS for dQ = dS K: each
// consumer computes one piece of the query block's dQ (64 rows when the
// block has a slice per consumer, else head_dim / C columns), issued ahead
// of dK's product, and stages it in shared memory while dK's runs, from
// where warp 1 of warpgroup 0 adds it to the fp32 accumulator in global
// memory with one bulk reduction (cp.reduce.async.bulk add.f32). Past head dim 128 the walk runs once per
// 128 columns of dK and dV (a pass), recomputing Sᵀ and dPᵀ.
//
// With p.deterministic (and always where consumers split the columns:
// orderedAdditions) each query block takes the key tiles' additions in
// one order (additionTurn; a counter per query block and pass, waited on by
// the writer warp, not the consumers), so dQ is bitwise reproducible; dK and
// dV always are: one block owns a key tile of a kv head for all its query
// heads. The epilogue scales dK by the softmax scale and stores dK and dV.
//
// Everything the compiler decided arrives through namespace attn_plan,
// emitted ahead of this file: element type, head dim, tile sizes, stages,
// register split, mask policy and the shared-memory offsets of every buffer.
#pragma once

#include "device/sequence.cuh"

namespace attn_bwd {

using namespace attn_dev;
using Element = attn_plan::Element;
using Mask = attn_plan::Mask;
using Mods = attn_plan::BackwardMods;
// mask_mod or score_mod: P and dS come from the regions a pair at a time
// (regionGradientsOf).
constexpr bool kHasRegions = Mods::kHasMaskMod || Mods::kHasScoreMod;

constexpr int kHeadDim = attn_plan::kHeadDim;
constexpr int kBlockM = attn_plan::kBlockM; // query rows a step
constexpr int kBlockN = attn_plan::kBlockN; // keys a block
constexpr int kStages = attn_plan::kStages;
constexpr int kConsumers = attn_plan::kConsumerWarpgroups;
constexpr int kThreads = (kConsumers + 1) * kWarpgroupThreads;
constexpr int kWarpsPerWarpgroup = kWarpgroupThreads / 32;

constexpr int kElementBytes = 2;
// TMA boxes and swizzle atoms are 64 elements (128 bytes) wide: a tile of
// head_dim columns is head_dim / 64 column blocks of its rows.
constexpr int kColumnBlock = 64;
constexpr int kColumnBlocks = kHeadDim / kColumnBlock;
constexpr u32 kRowBytes = kColumnBlock * kElementBytes;
constexpr u32 kAtomBytes = 8 * kRowBytes;
constexpr u32 kQTileBytes = kBlockM * kHeadDim * kElementBytes;
constexpr u32 kKvTileBytes = kBlockN * kHeadDim * kElementBytes;
constexpr u32 kRowStatBytes = kBlockM * 4;
constexpr u32 kDsTileBytes = kBlockN * kBlockM * kElementBytes;

// Past head dim 128, two consumers of one 64-key tile split dK's and dV's
// columns (attn_abi::bwdSplitsColumns): consumer c holds columns
// [c D / C, (c + 1) D / C) of dK and dV and computes Sᵀ and dPᵀ for the
// step's query columns [c BLOCK_M / C, ...); Pᵀ and dSᵀ meet in shared
// memory, the A operands of dV's and dK's products.
constexpr bool kSplitsColumns = attn_abi::bwdSplitsColumns(kHeadDim, kBlockN, kConsumers);
static_assert(kBlockN == (kSplitsColumns ? 64 : 64 * kConsumers),
              "one 64-key WGMMA slice per consumer warpgroup, or one shared by all");
static_assert(kHeadDim % kColumnBlock == 0, "head dim must be a multiple of 64");
static_assert(kBlockM % 64 == 0 && kBlockM <= 256, "BLOCK_M is the N of Sᵀ's WGMMA");
static_assert(!kSplitsColumns || kBlockM == 64, "split columns: 64 query rows a step");

// With one consumer, past head dim 128 the block walks its query blocks
// once per 128 columns of dK and dV (attn_abi::bwdPasses): pass k
// accumulates columns [128 k, 128 k + 128) of dK and dV and adds the same
// columns of dQ.
constexpr int kPasses = attn_abi::bwdPasses(kHeadDim, kSplitsColumns);
constexpr int kPassColumns = attn_abi::bwdPassColumns(kHeadDim, kSplitsColumns);
// The columns of dK and dV a consumer accumulates, and the query columns of
// Sᵀ and dPᵀ it computes.
constexpr int kGradColumns = kSplitsColumns ? kPassColumns / kConsumers : kPassColumns;
constexpr int kQueryColumns = kSplitsColumns ? kBlockM / kConsumers : kBlockM;
static_assert(kPassColumns % kColumnBlock == 0 && kGradColumns % kColumnBlock == 0 &&
                  kGradColumns <= 128,
              "a consumer's columns are whole 64-column blocks, at most 128");

// A pass's dQ of a query block splits into one piece per consumer: its rows
// when the block has 64 per consumer, else its columns.
constexpr bool kDqSplitsRows = kBlockM == 64 * kConsumers;
static_assert(kDqSplitsRows || kBlockM == 64, "dQ pieces are 64 rows, or all 64 rows");
constexpr int kDqColumns = kDqSplitsRows ? kPassColumns : kPassColumns / kConsumers;
static_assert(kDqColumns % kColumnBlock == 0, "a dQ piece spans whole 64-column blocks");
constexpr int kDqPieceFloats = 64 * kDqColumns;

constexpr int kScoreRegs = kQueryColumns / 2;  // Sᵀ, dPᵀ: 64 keys x its query columns fp32
constexpr int kPackedRegs = kQueryColumns / 4; // Pᵀ, dSᵀ packed 16-bit
constexpr int kGradRegs = kGradColumns / 2;    // dK, dV: 64 keys x its columns fp32
constexpr int kDqRegs = kDqColumns / 2;        // a dQ piece: 64 x kDqColumns fp32
// With 64 query rows a step, Sᵀ's exponentials overlap dPᵀ's product and
// dV's product dSᵀ's computation; with 128, Sᵀ, dPᵀ and P's packed copy
// together would not fit the registers beside dK and dV, so both products
// complete first. The regions need both products before either result.
constexpr bool kExponentialsBesideDp = kBlockM <= 64 && !kHasRegions;
static_assert(kDqRegs % 4 == 0, "dQ staging stores four floats at a time");
// dQ's product ahead of dK's, its piece staged while dK's runs (head dim
// 128: 5-11 % dense, 1-2 % with a score_mod; docs/benchmarks.md). With
// 128 rows a step, a mask_mod or passes, dK's goes first (before the dSᵀ
// barrier) and dQ's piece waits for both: the other order spills there.
constexpr bool kDqBeforeDk =
    kBlockM <= 64 && kPasses == 1 && !Mods::kHasMaskMod && !kSplitsColumns;

// dQ pieces are staged in a ring of kDqBuffers per consumer (two where
// shared memory holds them), so that a consumer goes on while the writer
// warp's reduction of its last piece is in flight.
constexpr int kDqBuffers = attn_plan::kDqStagingBuffers;

// Whether dQ's additions follow the deterministic mode's orders
// (additionTurn): on request, and always where consumers split the columns,
// whose default-mode additions were the slower (H100, head dim 256: 2.85
// against 2.35 ms at S = 2048 without a mask, 1.55 against 1.44 causal;
// docs/benchmarks.md).
__device__ __forceinline__ bool orderedAdditions(const attn_abi::AttnBwdParams &p) {
  return kSplitsColumns || p.deterministic;
}

// Shared-memory barriers: [kv_full, full[S], empty[S], dq_full[C][B],
// dq_empty[C][B]]. A stage holds one query block's Q, dO, log-sum-exp and
// delta; a dQ buffer one consumer's piece.
struct Barriers {
  u32 base;
  __device__ u32 kvFull() const { return base; }
  __device__ u32 full(int stage) const { return base + 8 * (1 + stage); }
  __device__ u32 empty(int stage) const { return base + 8 * (1 + kStages + stage); }
  __device__ u32 dqFull(int consumer, int buffer) const {
    return base + 8 * (1 + 2 * kStages + consumer * kDqBuffers + buffer);
  }
  __device__ u32 dqEmpty(int consumer, int buffer) const {
    return dqFull(consumer, buffer) + 8 * kConsumers * kDqBuffers;
  }
};
static_assert(attn_plan::kBarrierCount == 1 + 2 * kStages + 2 * kConsumers * kDqBuffers,
              "the plan's barriers buffer holds every barrier");

// Each consumer warp releases a stage once (lane 0, after its WGMMAs that
// read the stage have completed), and marks its rows of a dQ piece staged.
constexpr int kReleaseArrivals = kConsumers * kWarpsPerWarpgroup;

// The named barrier (0 is __syncthreads) at which all consumers' dS slices
// are written.
constexpr int kDsWrittenBarrier = 1;

// Roles: warpgroup 0's warp 0 loads, its warp 1 writes dQ; warpgroups 1..C
// compute.
enum ProducerWarp { kLoadWarp = 0, kDqWriterWarp = 1 };

__device__ __forceinline__ Sequence sequenceOf(const attn_abi::AttnBwdParams &p, int batch) {
  return attn_dev::sequenceOf(p, batch, attn_plan::kMaskBottomRight);
}

// Whether a kernel may skip steps (KeyBlock::skips): a mask_mod's, without
// passes.
constexpr bool kSkipsSteps = Mods::kHasMaskMod && kPasses == 1;

// The block's unit of work: key tile `keyTile` of kv head `kvHead` in batch
// `batch`, and the query blocks [queryBlockBegin, queryBlockEnd) whose rows
// may see one of its keys, walked for each pass and each of the group's
// query heads from the block `rotation` past the first (then round).
struct KeyBlock {
  int keyTile;
  int kvHead;
  int batch;
  int group;
  Sequence sequence;
  int keyTiles; // of the sequence
  int queryBlockBegin;
  int queryBlockEnd;
  int rotation;
  int rotationStride; // query blocks between two key tiles' starts
  bool rotated;       // the deterministic mode's rotation (additionTurn) is on

  __device__ bool empty() const { return keyTile * kBlockN >= sequence.seqlenK; }
  __device__ int queryBlocks() const { return queryBlockEnd - queryBlockBegin; }
  __device__ int stepsPerPass() const { return group * queryBlocks(); }
  __device__ int steps() const { return kPasses * stepsPerPass(); }
  __device__ int passOf(int step) const {
    if constexpr (kPasses > 1)
      return step / stepsPerPass();
    else
      return 0;
  }
  __device__ int headOf(int step) const {
    if constexpr (kPasses > 1)
      step %= stepsPerPass();
    return kvHead * group + step / queryBlocks();
  }
  __device__ int queryBlockOf(int step) const {
    const int offset = step % queryBlocks() + rotation;
    return queryBlockBegin + (offset < queryBlocks() ? offset : offset - queryBlocks());
  }
  // What the mask_mod keeps of the step's (query block, key tile): its
  // proved formula's coverage, else the forward's tile coverage of the
  // forward tiles the step overlaps (empty or full when they all are).
  __device__ Coverage maskCoverageOf(const attn_abi::AttnBwdParams &p, int step) const {
    const i64 query0 = static_cast<i64>(queryBlockOf(step)) * kBlockM;
    const i64 key0 = static_cast<i64>(keyTile) * kBlockN;
    const i64 queryLast = minI64(query0 + kBlockM, sequence.seqlenQ) - 1;
    const i64 keyLast = minI64(key0 + kBlockN, sequence.seqlenK) - 1;
    if constexpr (Mods::kMaskProved) {
      return Mods::maskCoverage(batch, headOf(step), query0, queryLast, key0, keyLast);
    } else {
      if (!p.tile_coverage)
        return Coverage::Partial;
      const i64 queryBlocks = (p.seqlen_q + p.coverage_block_m - 1) / p.coverage_block_m;
      const i64 keyTiles = (p.seqlen_k + p.coverage_block_n - 1) / p.coverage_block_n;
      const unsigned char *rows =
          p.tile_coverage + (static_cast<i64>(batch) * p.q_heads + headOf(step)) * queryBlocks *
                                keyTiles;
      bool empty = true, full = true;
      for (i64 block = query0 / p.coverage_block_m; block <= queryLast / p.coverage_block_m;
           ++block)
        for (i64 tile = key0 / p.coverage_block_n; tile <= keyLast / p.coverage_block_n; ++tile) {
          const Coverage coverage = static_cast<Coverage>(__ldg(rows + block * keyTiles + tile));
          empty = empty && coverage == Coverage::Empty;
          full = full && coverage == Coverage::Full;
        }
      return empty ? Coverage::Empty : full ? Coverage::Full : Coverage::Partial;
    }
  }
  // Steps whose query block the mask_mod keeps no pair of (its proved
  // formula, or the forward's tile coverage) are skipped by every role
  // alike. Not in the deterministic mode (its turns count every key tile of
  // a query block's run) nor with passes.
  __device__ bool skips(const attn_abi::AttnBwdParams &p, int step) const {
    if constexpr (kSkipsSteps)
      return !orderedAdditions(p) && maskCoverageOf(p, step) == Coverage::Empty;
    else
      return false;
  }
};

__device__ __forceinline__ KeyBlock keyBlockOf(const attn_abi::AttnBwdParams &p) {
  KeyBlock block;
  // The deterministic mode's orders wait on higher key tiles (additionTurn),
  // so its grid starts those first: a block waits only for blocks started
  // before it, whatever else the GPU runs.
  block.keyTile = static_cast<int>(orderedAdditions(p) ? gridDim.x - 1 - blockIdx.x : blockIdx.x);
  block.kvHead = static_cast<int>(blockIdx.y);
  block.batch = static_cast<int>(blockIdx.z);
  block.group = p.q_heads / p.kv_heads;
  block.sequence = sequenceOf(p, block.batch);
  block.keyTiles = (block.sequence.seqlenK + kBlockN - 1) / kBlockN;
  block.queryBlockBegin = block.queryBlockEnd = block.rotation = 0;
  block.rotated = false;
  block.rotationStride = 1;
  if (block.empty())
    return block;
  const i64 keyFirst = static_cast<i64>(block.keyTile) * kBlockN;
  const i64 keyLast = minI64(keyFirst + kBlockN, block.sequence.seqlenK) - 1;
  const i64 seqlenQ = block.sequence.seqlenQ;
  const i64 queryBegin = minI64(Mask::queryBegin(keyFirst, block.sequence.shift), seqlenQ);
  const i64 queryEnd =
      maxI64(minI64(Mask::queryEnd(keyLast, block.sequence.shift, seqlenQ), seqlenQ), 0);
  block.queryBlockBegin = static_cast<int>(queryBegin / kBlockM);
  block.queryBlockEnd = queryEnd > queryBegin ? static_cast<int>((queryEnd + kBlockM - 1) / kBlockM)
                                              : block.queryBlockBegin;
  // Deterministic and unmasked: key tile n starts its walk at query block
  // n floor(M / N) (of M blocks and N tiles), so that blocks walking in step
  // meet each query block in the order of their additions (additionTurn).
  // That order waits round the key tiles, so it needs them all running at
  // once (at most resident_blocks of them); otherwise, and with fewer query
  // blocks than key tiles, every walk starts at 0 and the last tile adds
  // first.
  if (orderedAdditions(p) && Mask::kEveryQueryVisitsEveryKey &&
      block.queryBlocks() >= block.keyTiles && block.keyTiles <= p.resident_blocks) {
    block.rotated = true;
    block.rotationStride = block.queryBlocks() / block.keyTiles;
    block.rotation = block.keyTile * block.rotationStride;
  }
  return block;
}

// The deterministic mode's order of the key tiles' additions to a query
// block: this block's place in it (its turn). The key tiles that visit a
// query block are a contiguous run (for every built-in mask), and blocks
// walking in step reach it in this order, so an addition rarely waits:
// masked walks start later the higher the key tile, so the last tile of the
// run adds first, then the one before; unmasked walks are rotated
// (KeyBlock::rotation: tile n starts at query block n k), so the tile whose
// walk started at or last before the query block adds first, then the tiles
// before it, round; without the rotation, the last tile first. Consumer 0
// computes it (the 24-register writer warp spilled doing so).
__device__ __forceinline__ int additionTurn(const KeyBlock &block, int queryBlock) {
  if constexpr (Mask::kEveryQueryVisitsEveryKey) {
    if (!block.rotated)
      return block.keyTiles - 1 - block.keyTile;
    const int first = min(block.keyTiles - 1, queryBlock / block.rotationStride);
    const int turn = first - block.keyTile;
    return turn < 0 ? turn + block.keyTiles : turn;
  } else {
    const Sequence &sequence = block.sequence;
    const i64 lastRow = minI64(static_cast<i64>(queryBlock + 1) * kBlockM, sequence.seqlenQ) - 1;
    const int last =
        static_cast<int>((Mask::keyEnd(lastRow, sequence.shift, sequence.seqlenK) - 1) / kBlockN);
    return last - block.keyTile;
  }
}

// Where a (batch, query head)'s rows start in the workspace's per-row arrays.
__device__ __forceinline__ i64 rowStatsBase(const attn_abi::AttnBwdParams &p, int batch,
                                            int head) {
  return (static_cast<i64>(batch) * p.q_heads + head) *
         attn_abi::bwdPaddedQueries(p.seqlen_q, kBlockM);
}

// ---------------------------------------------------------------------------
// Producer: one thread issues every load.

static_assert(kRowBytes == 128 && kColumnBlock == 64, "tmaLoadColumnBlocks' layout");

__device__ __forceinline__ u32 stageQ(u32 smemBase, int stage) {
  return smemBase + attn_plan::kSmemQ + stage * kQTileBytes;
}
__device__ __forceinline__ u32 stageDo(u32 smemBase, int stage) {
  return smemBase + attn_plan::kSmemDo + stage * kQTileBytes;
}
__device__ __forceinline__ u32 stageLse(u32 smemBase, int stage) {
  return smemBase + attn_plan::kSmemLse + stage * kRowStatBytes;
}
__device__ __forceinline__ u32 stageDelta(u32 smemBase, int stage) {
  return smemBase + attn_plan::kSmemDelta + stage * kRowStatBytes;
}

__device__ void produce(const attn_abi::AttnBwdParams &p, u32 smemBase, const Barriers &barriers,
                        const KeyBlock &block) {
  prefetchTensorMap(&p.q_map);
  prefetchTensorMap(&p.k_map);
  prefetchTensorMap(&p.v_map);
  prefetchTensorMap(&p.do_map);
  const Sequence &sequence = block.sequence;
  const int keyRow = sequence.rowK + block.keyTile * kBlockN;
  mbarrierArriveExpectTx(barriers.kvFull(), 2 * kKvTileBytes);
  tmaLoadColumnBlocks<kColumnBlocks>(smemBase + attn_plan::kSmemK, kBlockN, &p.k_map,
                                     barriers.kvFull(), keyRow, block.kvHead, sequence.mapBatch);
  tmaLoadColumnBlocks<kColumnBlocks>(smemBase + attn_plan::kSmemV, kBlockN, &p.v_map,
                                     barriers.kvFull(), keyRow, block.kvHead, sequence.mapBatch);

  const int steps = block.steps();
  int issued = 0; // steps not skipped: the ring's positions
  for (int step = 0; step < steps; ++step) {
    int position = step;
    if constexpr (kSkipsSteps) {
      if (block.skips(p, step))
        continue;
      position = issued++;
    }
    const RingSlot slot = ringSlot<kStages>(position);
    if (position >= kStages)
      mbarrierWait(barriers.empty(slot.stage), slot.phase ^ 1);
    const int head = block.headOf(step), queryBlock = block.queryBlockOf(step);
    const int queryRow = sequence.rowQ + queryBlock * kBlockM;
    const u32 full = barriers.full(slot.stage);
    mbarrierArriveExpectTx(full, 2 * kQTileBytes + 2 * kRowStatBytes);
    tmaLoadColumnBlocks<kColumnBlocks>(stageQ(smemBase, slot.stage), kBlockM, &p.q_map, full,
                                       queryRow, head, sequence.mapBatch);
    tmaLoadColumnBlocks<kColumnBlocks>(stageDo(smemBase, slot.stage), kBlockM, &p.do_map, full,
                                       queryRow, head, sequence.mapBatch);
    const i64 stats = rowStatsBase(p, block.batch, head) + static_cast<i64>(queryBlock) * kBlockM;
    bulkLoad(stageLse(smemBase, slot.stage), p.lse_log2 + stats, kRowStatBytes, full);
    bulkLoad(stageDelta(smemBase, slot.stage), p.delta + stats, kRowStatBytes, full);
  }
}

// ---------------------------------------------------------------------------
// Consumer pieces.

// D[64 keys x its query columns] = A[64 x head_dim] Bᵀ, issued as one WGMMA
// group: A is this consumer's slice of the K or V tile, B the consumer's
// rows of the stage's Q or dO, both K-major; each k-step of 16 columns
// advances 32 bytes inside a row.
__device__ __forceinline__ void issueKeyRowProduct(float (&d)[kScoreRegs], u32 slice, u32 tile) {
  wgmmaFence();
#pragma unroll
  for (int step = 0; step < kHeadDim / 16; ++step) {
    const u32 block = step / 4, inRow = (step % 4) * 32;
    const u64 a = swizzled128Descriptor(slice + block * kBlockN * kRowBytes + inRow, 16, kAtomBytes);
    const u64 b = swizzled128Descriptor(tile + block * kBlockM * kRowBytes + inRow, 16, kAtomBytes);
    WgmmaSS<kQueryColumns, Element>::mma(d, a, b, step > 0);
  }
  wgmmaCommitGroup();
}

// This consumer's dQ piece of pass `pass` = dS K over all BLOCK_N keys: A is
// dSᵀ in shared memory read MN-major (the piece's 64 query columns), B the
// K tile read MN-major (the piece's columns); each k-step of 16 keys
// advances 16 rows.
__device__ __forceinline__ void issueDqProduct(float (&dq)[kDqRegs], u32 dsTile, u32 kTile,
                                               int consumer, int pass) {
  const int aBlock = kDqSplitsRows ? consumer : 0;
  const int bBlock = (pass * kPassColumns + (kDqSplitsRows ? 0 : consumer * kDqColumns)) /
                     kColumnBlock;
  const u32 aBase = dsTile + aBlock * kBlockN * kRowBytes;
  const u32 bBase = kTile + bBlock * kBlockN * kRowBytes;
  wgmmaFence();
#pragma unroll
  for (int step = 0; step < kBlockN / 16; ++step) {
    const u64 a = swizzled128Descriptor(aBase + step * 16 * kRowBytes, kBlockN * kRowBytes, kAtomBytes);
    const u64 b = swizzled128Descriptor(bBase + step * 16 * kRowBytes, kBlockN * kRowBytes, kAtomBytes);
    WgmmaSSMN<kDqColumns, Element>::mma(dq, a, b, step > 0);
  }
  wgmmaCommitGroup();
}

// Two adjacent fp32 words of shared memory.
__device__ __forceinline__ void loadSharedPair(u32 address, float &first, float &second) {
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(first), "=f"(second) : "r"(address));
}

// Turns Sᵀ into Pᵀ = exp2(scale_log2 Sᵀ - lse_log2), per query column,
// with P = 0 for the pairs the mask or the key length excludes (`partial`:
// the slice's tile is not kept whole). A row without keys has lse_log2 =
// +inf, so its P is 0.
__device__ __forceinline__ void probabilitiesOf(float (&scores)[kScoreRegs], u32 lse,
                                                float scaleLog2, bool partial,
                                                const Sequence &sequence, int key0, int query0,
                                                int lane) {
#pragma unroll
  for (int group = 0; group < kQueryColumns / 8; ++group) {
    const int column = group * 8 + 2 * (lane & 3);
    float rowLse[2];
    loadSharedPair(lse + column * 4, rowLse[0], rowLse[1]);
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int i = group * 4 + half * 2 + e;
        float probability = fastExp2(scores[i] * scaleLog2 - rowLse[e]);
        if (partial) {
          const int key = key0 + 8 * half, query = query0 + column + e;
          const bool keep = key < sequence.seqlenK && Mask::allows(query, key, sequence.shift);
          probability = keep ? probability : 0.f;
        }
        scores[i] = probability;
      }
  }
}

// Turns dPᵀ into dSᵀ = Pᵀ (dPᵀ - delta), per query column.
__device__ __forceinline__ void scoreGradientsOf(float (&gradients)[kScoreRegs],
                                                 const float (&probabilities)[kScoreRegs],
                                                 u32 delta, int lane) {
#pragma unroll
  for (int group = 0; group < kQueryColumns / 8; ++group) {
    float rowDelta[2];
    loadSharedPair(delta + (group * 8 + 2 * (lane & 3)) * 4, rowDelta[0], rowDelta[1]);
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int i = group * 4 + half * 2 + e;
        gradients[i] = probabilities[i] * (gradients[i] - rowDelta[e]);
      }
  }
}

// With mask_mod or score_mod: Pᵀ and dSᵀ together, a pair at a time, from
// the raw Sᵀ and dPᵀ. The forward's softmax (and log-sum-exp) ran over
// score_mod(scale s); P (dP - delta) is the gradient of that modified
// score, which score_mod's vector-Jacobian product carries back to the
// score, adding into the learnable captures' gradients on the way. A pair
// whose gradient is 0 skips the product: a masked pair's region need not
// even be finite there.
__device__ __forceinline__ void regionPairGradient(
    const attn_abi::AttnBwdParams &p, typename Mods::Gradients &captureGradients, float &score,
    float &gradient, float rowLse, float rowDelta, bool partial, bool maskPartial,
    const Sequence &sequence, int batch, int head, int key, int query) {
  bool keep = !partial || (key < sequence.seqlenK && Mask::allows(query, key, sequence.shift));
  if constexpr (Mods::kHasMaskMod)
    keep = keep && (!maskPartial || Mods::keeps(p, batch, head, query, key));
  const float scaled = score * p.scale;
  // Evaluated for every pair (a masked one's result is dropped): out of the
  // branch, its evaluation dominates the vector-Jacobian product's, which
  // the compiler then reuses instead of evaluating the region again.
  const float modified = Mods::score(p, scaled, batch, head, query, key);
  const float probability = keep ? fastExp2(modified * kLog2e - rowLse) : 0.f;
  const float modGradient = probability * (gradient - rowDelta);
  score = probability;
  gradient = modGradient != 0.f ? Mods::scoreVjp(p, captureGradients, modGradient, scaled, batch,
                                                 head, query, key)
                                : 0.f;
}

// Every pair of the thread's fragments. With learnable captures the pairs
// go diagonal by diagonal (q - kv ascending): a thread's pairs (key0,
// column c) and (key0 + 8, column c + 8) lie on one diagonal and come one
// after the other, so a capture indexed by q - kv (a relative-position or
// bucketed bias) sums both in a register before one addition to memory.
// A score_mod that reads captures takes that order too, and the others the
// fragment order (a row pair's statistics loaded once): so each example's
// consumers stay within their registers (ptxas; unit.codegen pins them).
__device__ __forceinline__ void regionGradientsOf(const attn_abi::AttnBwdParams &p,
                                                  typename Mods::Gradients &captureGradients,
                                                  float (&scores)[kScoreRegs],
                                                  float (&gradients)[kScoreRegs], u32 lse,
                                                  u32 delta, bool partial, bool maskPartial,
                                                  const Sequence &sequence, int batch, int head,
                                                  int key0, int query0, int lane) {
  if constexpr (Mods::kLearnsCaptures || (Mods::kHasScoreMod && Mods::kHasCaptures)) {
#pragma unroll
    for (int e = 0; e < 2; ++e)
#pragma unroll
      for (int group = 0; group < kQueryColumns / 8; ++group) {
        const int column = group * 8 + 2 * (lane & 3) + e;
        const float rowLse = __uint_as_float(loadShared<u32>(lse + column * 4));
        const float rowDelta = __uint_as_float(loadShared<u32>(delta + column * 4));
#pragma unroll
        for (int half = 1; half >= 0; --half) {
          const int i = group * 4 + half * 2 + e;
          regionPairGradient(p, captureGradients, scores[i], gradients[i], rowLse, rowDelta,
                             partial, maskPartial, sequence, batch, head, key0 + 8 * half,
                             query0 + column);
        }
      }
  } else {
#pragma unroll
    for (int group = 0; group < kQueryColumns / 8; ++group) {
      const int column = group * 8 + 2 * (lane & 3);
      float rowLse[2], rowDelta[2];
      loadSharedPair(lse + column * 4, rowLse[0], rowLse[1]);
      loadSharedPair(delta + column * 4, rowDelta[0], rowDelta[1]);
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int i = group * 4 + half * 2 + e;
          regionPairGradient(p, captureGradients, scores[i], gradients[i], rowLse[e],
                             rowDelta[e], partial, maskPartial, sequence, batch, head,
                             key0 + 8 * half, query0 + column + e);
        }
    }
  }
}

__device__ __forceinline__ void packFragments(const float (&values)[kScoreRegs],
                                              u32 (&packed)[kPackedRegs]) {
#pragma unroll
  for (int i = 0; i < kPackedRegs; ++i)
    packed[i] = packPair<Element>(values[2 * i], values[2 * i + 1]);
}

// The dQ accumulator of a query block: pieces of kDqPieceFloats, pass by
// pass and consumer by consumer, each in fragment order, [kDqRegs / 4][128
// threads][4], so that both the staging stores and the bulk reduction move
// whole contiguous lines.
__device__ __forceinline__ float *dqAccumBlock(const attn_abi::AttnBwdParams &p, int batch,
                                               int head, int queryBlock) {
  return p.dq_accum +
         (rowStatsBase(p, batch, head) + static_cast<i64>(queryBlock) * kBlockM) * kHeadDim;
}

__device__ __forceinline__ u32 dqStaging(u32 smemBase, int consumer, int buffer) {
  return smemBase + attn_plan::kSmemDqStaging + (consumer * kDqBuffers + buffer) * kDqPieceFloats * 4;
}

// The deterministic mode's turn (additionTurn) of the piece in dQ buffer
// `buffer`, an int32 word consumer 0 writes beside its piece.
__device__ __forceinline__ u32 dqTurn(u32 smemBase, int buffer) {
  return smemBase + attn_plan::kSmemDqTurns + buffer * 4;
}

// Stages a consumer's dQ piece for the writer warp, once the writer has
// read the buffer's previous piece: whole 16-byte lines, then a fence for
// the copy engine and one arrival per warp.
__device__ __forceinline__ void stageDqPiece(u32 smemBase, const Barriers &barriers,
                                             const float (&dq)[kDqRegs], int step, int consumer,
                                             int thread, int turn) {
  const RingSlot slot = ringSlot<kDqBuffers>(step);
  if (step >= kDqBuffers)
    mbarrierWait(barriers.dqEmpty(consumer, slot.stage), slot.phase ^ 1);
  const u32 staging = dqStaging(smemBase, consumer, slot.stage);
#pragma unroll
  for (int j = 0; j < kDqRegs / 4; ++j)
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(staging +
                                                                  (j * kWarpgroupThreads + thread) * 16),
                 "f"(dq[4 * j]), "f"(dq[4 * j + 1]), "f"(dq[4 * j + 2]), "f"(dq[4 * j + 3])
                 : "memory");
  if (consumer == 0 && thread == 0)
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(dqTurn(smemBase, slot.stage)), "r"(turn)
                 : "memory");
  fenceSharedForAsyncProxy();
  mbarrierArriveForWarp(barriers.dqFull(consumer, slot.stage), thread % 32);
}

// The writer warp's lane 0: adds each step's staged dQ pieces to the
// accumulator in global memory, one bulk reduction a piece, and gives the
// buffers back once the copy engine has read them. Deterministic: a step's
// additions wait for those of the key tiles before it in the query block's
// order (additionTurn, which consumer 0 stages beside its piece; a counter
// per query block) and complete before they count themselves.
__device__ void writeDq(const attn_abi::AttnBwdParams &p, u32 smemBase, const Barriers &barriers,
                        const KeyBlock &block) {
  const i64 queryBlocks = attn_abi::bwdPaddedQueries(p.seqlen_q, kBlockM) / kBlockM;
  const int steps = block.steps();
  int written = 0; // steps not skipped: the ring's positions
  for (int step = 0; step < steps; ++step) {
    int position = step;
    if constexpr (kSkipsSteps) {
      if (block.skips(p, step))
        continue;
      position = written++;
    }
    const int head = block.headOf(step), queryBlock = block.queryBlockOf(step);
    const RingSlot slot = ringSlot<kDqBuffers>(position);
    for (int consumer = 0; consumer < kConsumers; ++consumer)
      mbarrierWait(barriers.dqFull(consumer, slot.stage), slot.phase);
    int *counter = nullptr;
    if (orderedAdditions(p)) {
      i64 counterIndex =
          (static_cast<i64>(block.batch) * p.q_heads + head) * queryBlocks + queryBlock;
      // Spelled out only where there are passes: the 24-register writer warp
      // spilled for the folded form too.
      if constexpr (kPasses > 1)
        counterIndex = counterIndex * kPasses + block.passOf(step);
      counter = p.dq_semaphores + counterIndex;
      const int target = loadShared<int>(dqTurn(smemBase, slot.stage));
      int seen;
      do {
        asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
      } while (seen < target);
    }
    float *accumulator = dqAccumBlock(p, block.batch, head, queryBlock);
    if constexpr (kPasses > 1)
      accumulator += block.passOf(step) * kConsumers * kDqPieceFloats;
    for (int consumer = 0; consumer < kConsumers; ++consumer)
      bulkReduceAddF32(accumulator + consumer * kDqPieceFloats,
                       dqStaging(smemBase, consumer, slot.stage), kDqPieceFloats * 4);
    tmaStoreCommit();
    if (counter) {
      bulkWaitComplete();
      asm volatile("fence.acq_rel.gpu;" ::: "memory");
      asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(counter) : "memory");
    } else {
      tmaStoreWaitRead();
    }
    for (int consumer = 0; consumer < kConsumers; ++consumer)
      mbarrierArrive(barriers.dqEmpty(consumer, slot.stage));
  }
  bulkWaitComplete();
}

// Stores this thread's rows of a dK or dV slice (scaled by `factor`), those
// inside the sequence's keys: pairs of adjacent columns, 4 bytes a store.
__device__ __forceinline__ void storeKeyGradients(void *tensor, const long long (&strides)[3],
                                                  const float (&values)[kGradRegs], float factor,
                                                  const KeyBlock &block, int key0, int lane,
                                                  int firstColumn) {
  unsigned char *base = static_cast<unsigned char *>(tensor);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int key = key0 + 8 * half;
    if (key >= block.sequence.seqlenK)
      continue;
    const i64 row = static_cast<i64>(block.sequence.rowK) + key;
    const i64 rowElement = block.sequence.mapBatch * strides[0] + row * strides[1] +
                           static_cast<i64>(block.kvHead) * strides[2] + firstColumn;
#pragma unroll
    for (int group = 0; group < kGradColumns / 8; ++group) {
      const int i = group * 4 + half * 2;
      const i64 element = rowElement + group * 8 + 2 * (lane & 3);
      const u32 packed = packPair<Element>(values[i] * factor, values[i + 1] * factor);
      asm volatile("st.global.b32 [%0], %1;" ::"l"(base + element * kElementBytes), "r"(packed)
                   : "memory");
    }
  }
}

// Stores this consumer's columns of a pass of dK (scaled) and dV and
// clears the accumulators for the next pass.
__device__ __forceinline__ void storePassGradients(const attn_abi::AttnBwdParams &p,
                                                   float (&dK)[kGradRegs], float (&dV)[kGradRegs],
                                                   const KeyBlock &block, int key0, int lane,
                                                   int consumer, int pass) {
  const int firstColumn = pass * kPassColumns + (kSplitsColumns ? consumer * kGradColumns : 0);
  storeKeyGradients(p.dk, p.dk_strides, dK, p.scale, block, key0, lane, firstColumn);
  storeKeyGradients(p.dv, p.dv_strides, dV, 1.f, block, key0, lane, firstColumn);
#pragma unroll
  for (int i = 0; i < kGradRegs; ++i)
    dK[i] = dV[i] = 0.f;
}

__device__ void consume(const attn_abi::AttnBwdParams &p, u32 smemBase, const Barriers &barriers,
                        const KeyBlock &block, int consumer) {
  const int thread = threadIdx.x % kWarpgroupThreads;
  const int warp = thread / 32, lane = thread % 32;
  const Sequence &sequence = block.sequence;
  const u32 kTile = smemBase + attn_plan::kSmemK, vTile = smemBase + attn_plan::kSmemV;
  // The consumer's 64 keys (all the tile's when it splits columns) and
  // first query column of each step.
  const int keySlice = kSplitsColumns ? 0 : consumer;
  const int firstQueryColumn = kSplitsColumns ? consumer * kQueryColumns : 0;
  const u32 kSlice = kTile + keySlice * 64 * kRowBytes, vSlice = vTile + keySlice * 64 * kRowBytes;
  const int sliceFirst = block.keyTile * kBlockN + keySlice * 64;
  const int sliceLast = sliceFirst + 63;
  // This thread's keys: rows key0 and key0 + 8 of the fragments.
  const int key0 = sliceFirst + warp * 16 + lane / 4;

  float dK[kGradRegs], dV[kGradRegs];
#pragma unroll
  for (int i = 0; i < kGradRegs; ++i)
    dK[i] = dV[i] = 0.f;
  typename Mods::Gradients captureGradients;
  captureGradients.init(p);

  mbarrierWait(barriers.kvFull(), 0);
  const int steps = block.steps();
  int computed = 0; // steps not skipped: the rings' positions
  for (int step = 0; step < steps; ++step) {
    int position = step;
    if constexpr (kSkipsSteps) {
      if (block.skips(p, step))
        continue;
      position = computed++;
    }
    const RingSlot slot = ringSlot<kStages>(position);
    const int queryBlock = block.queryBlockOf(step);
    // A constant 0 without passes (computed, it cost the head-dim-64
    // consumers an 8-byte spill).
    int pass = 0;
    if constexpr (kPasses > 1) {
      pass = block.passOf(step);
      // Later passes recompute the pairs: their capture gradients are in.
      captureGradients.enable(pass == 0);
    }
    const int query0 = queryBlock * kBlockM;
    // The consumer's query columns of the step: its rows of Q and dO (B of
    // Sᵀ's and dPᵀ's products), their statistics and positions.
    const int queryFirst = query0 + firstQueryColumn;
    const u32 qTile = stageQ(smemBase, slot.stage), doTile = stageDo(smemBase, slot.stage);
    // Computed where used: held across the products, they cost the
    // head-dim-64 consumers a spill.
    const auto lse = [&] { return stageLse(smemBase, slot.stage) + 4 * firstQueryColumn; };
    const auto delta = [&] { return stageDelta(smemBase, slot.stage) + 4 * firstQueryColumn; };
    // The consumer's columns of Q and dO in this pass, the B operands of dK's
    // and dV's products.
    const u32 gradOffset =
        (pass * kPassColumns + (kSplitsColumns ? consumer * kGradColumns : 0)) / kColumnBlock *
        kBlockM * kRowBytes;
    mbarrierWait(barriers.full(slot.stage), slot.phase);

    float scores[kScoreRegs], gradients[kScoreRegs];
    issueKeyRowProduct(scores, kSlice, qTile + firstQueryColumn * kRowBytes);
    issueKeyRowProduct(gradients, vSlice, doTile + firstQueryColumn * kRowBytes);
    // A mask_mod the coverage shows keeping the whole tile needs no per-pair
    // test.
    bool maskPartial = false;
    if constexpr (Mods::kHasMaskMod)
      maskPartial = block.maskCoverageOf(p, step) != Coverage::Full;
    const bool partial = maskPartial || sliceLast >= sequence.seqlenK ||
                         !Mask::coversTile(queryFirst, queryFirst + kQueryColumns - 1, sliceFirst,
                                           sliceLast, sequence.shift);
    u32 probabilities[kPackedRegs], scoreGradients[kPackedRegs];
    if constexpr (kExponentialsBesideDp) {
      // Sᵀ and dPᵀ as two groups: the exponentials run while dPᵀ is on the
      // tensor cores, and dV's product (from registers) while dSᵀ is
      // computed.
      wgmmaWaitGroup<1>();
      fenceRegisters(scores);
      probabilitiesOf(scores, lse(), p.scale_log2, partial, sequence, key0, queryFirst, lane);
      if constexpr (kSplitsColumns) {
        wgmmaWaitGroup<0>();
      } else {
        packFragments(scores, probabilities);
        issueRegisterProduct<kGradColumns, kQueryColumns, Element>(dV, probabilities,
                                                               doTile + gradOffset);
        wgmmaWaitGroup<1>();
      }
      fenceRegisters(gradients);
      scoreGradientsOf(gradients, scores, delta(), lane);
    } else {
      wgmmaWaitGroup<0>();
      fenceRegisters(scores);
      fenceRegisters(gradients);
      if constexpr (kHasRegions) {
        regionGradientsOf(p, captureGradients, scores, gradients, lse(), delta(), partial,
                          maskPartial, sequence, block.batch, block.headOf(step), key0,
                          queryFirst, lane);
      } else {
        probabilitiesOf(scores, lse(), p.scale_log2, partial, sequence, key0, queryFirst, lane);
        scoreGradientsOf(gradients, scores, delta(), lane);
      }
      if constexpr (!kSplitsColumns) {
        packFragments(scores, probabilities);
        issueRegisterProduct<kGradColumns, kQueryColumns, Element>(dV, probabilities,
                                                               doTile + gradOffset);
      }
    }

    // dSᵀ (and with split columns Pᵀ) of every consumer, for dQ (and dV and
    // dK): two buffers, so that a consumer may write the next step's while
    // another still reads this one (the barrier below is passed only once
    // every consumer finished the step before).
    const u32 dsTile = smemBase + attn_plan::kSmemDs + (position & 1) * kDsTileBytes;
    if constexpr (kSplitsColumns) {
      const u32 pTile = smemBase + attn_plan::kSmemP + (position & 1) * kDsTileBytes;
      storeFragmentSwizzled<Element, kQueryColumns>(scores, pTile, kBlockN, warp, lane,
                                                    firstQueryColumn);
      storeFragmentSwizzled<Element, kQueryColumns>(gradients, dsTile, kBlockN, warp, lane,
                                                    firstQueryColumn);
      fenceSharedForAsyncProxy();
      namedBarrierSync(kDsWrittenBarrier, kConsumers * kWarpgroupThreads);
      // dV's, dQ's and dK's products in one go; dQ's piece is staged while
      // dK's runs.
      issueSharedProduct<kGradColumns, kBlockM, Element>(dV, pTile, doTile + gradOffset);
      float dq[kDqRegs];
      issueDqProduct(dq, dsTile, kTile, consumer, pass);
      issueSharedProduct<kGradColumns, kBlockM, Element>(dK, dsTile, qTile + gradOffset);
      wgmmaWaitGroup<1>();
      fenceRegisters(dq);
      const int turn =
          orderedAdditions(p) && consumer == 0 && thread == 0 ? additionTurn(block, queryBlock) : 0;
      stageDqPiece(smemBase, barriers, dq, position, consumer, thread, turn);
      wgmmaWaitGroup<0>();
      fenceRegisters(dV);
      fenceRegisters(dK);
      mbarrierArriveForWarp(barriers.empty(slot.stage), lane);
    } else {
      packFragments(gradients, scoreGradients);
      if constexpr (!kDqBeforeDk)
        issueRegisterProduct<kGradColumns, kQueryColumns, Element>(dK, scoreGradients,
                                                               qTile + gradOffset);
      storeFragmentSwizzled<Element, kQueryColumns>(gradients, dsTile, kBlockN,
                                                    consumer * kWarpsPerWarpgroup + warp, lane);
      fenceSharedForAsyncProxy();
      namedBarrierSync(kDsWrittenBarrier, kConsumers * kWarpgroupThreads);
      float dq[kDqRegs];
      issueDqProduct(dq, dsTile, kTile, consumer, pass);
      const auto releaseStage = [&] {
        fenceRegisters(dV);
        fenceRegisters(dK);
        fenceRegisters(probabilities);
        fenceRegisters(scoreGradients);
        mbarrierArriveForWarp(barriers.empty(slot.stage), lane);
      };
      const auto stageDq = [&] {
        const int turn =
            orderedAdditions(p) && consumer == 0 && thread == 0 ? additionTurn(block, queryBlock) : 0;
        stageDqPiece(smemBase, barriers, dq, position, consumer, thread, turn);
      };
      if constexpr (kDqBeforeDk) {
        issueRegisterProduct<kGradColumns, kQueryColumns, Element>(dK, scoreGradients,
                                                               qTile + gradOffset);
        wgmmaWaitGroup<1>();
        fenceRegisters(dq);
        stageDq();
        wgmmaWaitGroup<0>();
        releaseStage();
      } else {
        wgmmaWaitGroup<0>();
        fenceRegisters(dq);
        releaseStage();
        stageDq();
      }
    }
    if (kPasses > 1 && step + 1 < steps && block.passOf(step + 1) != pass)
      storePassGradients(p, dK, dV, block, key0, lane, consumer, pass);
  }
  captureGradients.flush();
  // A key tile no query sees walks no step: every pass's gradients are 0.
  if constexpr (kPasses > 1)
    if (steps == 0)
      for (int pass = 0; pass + 1 < kPasses; ++pass)
        storePassGradients(p, dK, dV, block, key0, lane, consumer, pass);
  storePassGradients(p, dK, dV, block, key0, lane, consumer, kPasses - 1);
}

} // namespace attn_bwd

extern "C" __global__ void __launch_bounds__(attn_bwd::kThreads, 1)
    attn_bwd_kernel(const __grid_constant__ attn_abi::AttnBwdParams p) {
  using namespace attn_bwd;
  const u32 smemBase = alignedDynamicShared();
  const Barriers barriers{smemBase + attn_plan::kSmemBarriers};
  const KeyBlock block = keyBlockOf(p);
  // A key tile past its sequence's keys has no gradient to write.
  if (block.empty())
    return;

  if (threadIdx.x == 0) {
    mbarrierInit(barriers.kvFull(), 1);
    for (int stage = 0; stage < kStages; ++stage) {
      mbarrierInit(barriers.full(stage), 1);
      mbarrierInit(barriers.empty(stage), kReleaseArrivals);
    }
    for (int consumer = 0; consumer < kConsumers; ++consumer)
      for (int buffer = 0; buffer < kDqBuffers; ++buffer) {
        mbarrierInit(barriers.dqFull(consumer, buffer), kWarpsPerWarpgroup);
        mbarrierInit(barriers.dqEmpty(consumer, buffer), 1);
      }
    fenceBarrierInit();
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / kWarpgroupThreads;
  if (warpgroup == 0) {
    releaseRegisters<attn_plan::kProducerRegisters>();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (warp == kLoadWarp && lane == 0)
      produce(p, smemBase, barriers, block);
    else if (warp == kDqWriterWarp && lane == 0)
      writeDq(p, smemBase, barriers, block);
  } else {
    claimRegisters<attn_plan::kConsumerRegisters>();
    consume(p, smemBase, barriers, block, warpgroup - 1);
  }
}

#include "bwd/row_kernels.cuh"
