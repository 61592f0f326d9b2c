// The backward's tile scheduling: a block's key tile and the query blocks it
// walks (KeyBlock, keyBlockOf), the steps of that walk a mask_mod keeps
// (StepWalk, the step list), and the order of dQ's additions to a query
// block (additionTurn).
#pragma once

#include "bwd/plan.cuh"

namespace attn_bwd {

// Roles: warpgroup 0's warp 0 loads, its warp 1 writes dQ, its warp 2
// takes the turns of a step list's empty steps; warpgroups 1..C compute.
enum ProducerWarp { kLoadWarp = 0, kDqWriterWarp = 1, kTurnWarp = 2 };

__device__ __forceinline__ Sequence sequenceOf(const attn_abi::AttnBwdParams &p, int batch) {
  return attn_dev::sequenceOf(p, batch, attn_plan::kMaskBottomRight);
}

// Whether the block's roles walk a step list (the compiler's decision,
// ATTN_PLAN_STEP_LIST): a mask_mod's kernel, in one pass. The step-list
// kernel writes it before the main kernel runs (attn_bwd_step_list_kernel).
constexpr bool kWalksStepList = Mods::kHasMaskMod && kPasses == 1;
static_assert(kWalksStepList == (ATTN_PLAN_STEP_LIST != 0),
              "the plan's step list is the one the kernel walks");

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
};

// Under a causal mask the grid is read longest walks first
// (attn_abi::bwdLongestWalksFirst; measured on an H200, head dim 128,
// B S = 16384: 2.4, 4.5 and 5.3 % faster at S = 2048, 4096, 8192). A
// mask_mod's walks are its own (a step list), so its kernels keep the
// x-major order, as do plans with passes: there the remap made three
// mask_mod kernels spill 8 bytes (unit.codegen) and the one-stage
// one-consumer plan at head dim 256 80 bytes (ptxas).
constexpr bool kLongestWalksFirst =
    Mask::kWorkGrowsWithQuery && !Mods::kHasMaskMod && kPasses == 1;

__device__ __forceinline__ KeyBlock keyBlockOf(const attn_abi::AttnBwdParams &p) {
  KeyBlock block;
  // The deterministic mode's orders wait on higher key tiles (additionTurn),
  // so its grid starts those first: a block waits only for blocks started
  // before it, whatever else the GPU runs.
  block.keyTile = static_cast<int>(orderedAdditions(p) ? gridDim.x - 1 - blockIdx.x : blockIdx.x);
  block.kvHead = static_cast<int>(blockIdx.y);
  block.batch = static_cast<int>(blockIdx.z);
  if constexpr (kLongestWalksFirst)
    if (!orderedAdditions(p)) {
      const attn_abi::BwdGridPosition position = attn_abi::bwdLongestWalksFirst(
          blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z), gridDim.x, gridDim.y,
          gridDim.z);
      block.keyTile = static_cast<int>(position.keyTile);
      block.kvHead = static_cast<int>(position.kvHead);
      block.batch = static_cast<int>(position.batch);
    }
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

// A step list's entry: the step, and this bit when the mask_mod keeps all
// of its pairs.
constexpr u32 kStepFull = 1u << 31;

// This block's step list in the workspace (AttnBwdParams::step_list): the
// count of the steps it walks and of the empty ones it lists, the steps it
// walks from the front of its entries and the empty ones from their back.
struct StepList {
  u32 *words;
  i64 capacity; // entries

  __device__ u32 *walked() const { return words + 2; }
  __device__ u32 *empty() const { return words + 2 + capacity; } // the k-th at [-1 - k]
};

__device__ __forceinline__ StepList stepListOf(const attn_abi::AttnBwdParams &p) {
  const i64 block =
      (static_cast<i64>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  const i64 words = attn_abi::bwdStepListEntries(p.seqlen_q, kBlockM, p.q_heads / p.kv_heads);
  return StepList{p.step_list + block * words, words - 2};
}

// The steps each role of the block walks, in the same order: all of the
// block's, or with a step list the steps it lists to walk. A role reads a
// position's entry once and takes the step (and the mask's fullness) from
// it, so that testing the mask costs the 24-register producer warps
// nothing.
struct StepWalk {
  const u32 *entries; // the walked entries, past the list's two counts
  int positions;

  __device__ u32 entryAt(int position) const {
    if constexpr (kWalksStepList)
      return __ldg(entries + position);
    else
      return static_cast<u32>(position);
  }
  __device__ static int stepOf(u32 entry) { return static_cast<int>(entry & ~kStepFull); }
};

__device__ __forceinline__ StepWalk stepWalkOf(const attn_abi::AttnBwdParams &p,
                                               const KeyBlock &block) {
  StepWalk walk;
  if constexpr (kWalksStepList) {
    const StepList list = stepListOf(p);
    walk.entries = list.walked();
    walk.positions = static_cast<int>(__ldg(list.words));
  } else {
    walk.entries = nullptr;
    walk.positions = block.steps();
  }
  return walk;
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
// computes it for a step with pairs (the 24-register writer warp spilled
// doing so), the turn warp for a step list's empty step.
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

} // namespace attn_bwd
