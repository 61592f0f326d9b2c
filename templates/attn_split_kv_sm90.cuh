// The short-query path of a softmax module: decode steps, speculative
// verification and every call over a paged KV cache (AttnSplitKvParams).
//
// Few query rows leave a 128-row WGMMA tile nearly empty and the grid
// nearly idle, and the kernel is bound by reading K and V once. So each kv
// head's query heads are packed as the rows of one tile (GQA packing), and
// the keys of a (batch, kv head) are cut into `splits` pieces, a block
// each (flash-decoding), whose partial results the combine kernel merges
// through their log-sum-exps. A block of four warps streams its keys
// through a ring of cp.async stages (any row address: pages in any order),
// and its warps split each stage's keys (few rows) or its rows (many):
// S = Q Kᵀ and O += P V on warp-level mma.sync, the online softmax in
// registers. The warps' partial rows meet in shared memory at the end.
#pragma once

#include "device/warp_mma.cuh"

// quadMax and quadSum come from device/online_softmax.cuh, which the forward
// unit holds.

namespace attn_split_kv {

using namespace attn_dev;
using Element = attn_plan::Element;
using Mods = attn_plan::UserMods;
using Mask = attn_plan::Mask;
typedef long long i64;

constexpr int kHeadDim = attn_plan::kHeadDim;
constexpr int kBlockN = attn_abi::splitKvBlockN(kHeadDim);
constexpr int kStages = attn_abi::splitKvStages(kHeadDim);
constexpr int kRows = attn_abi::splitKvRows(kHeadDim);
constexpr int kThreads = attn_abi::kSplitKvThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kRowChunks = kHeadDim / 8; // 16-byte chunks of a row
constexpr int kKeySteps = kHeadDim / 16; // k-steps of S = Q Kᵀ
constexpr int kDimTiles = kHeadDim / 8;  // 8-column tiles of O
constexpr u32 kQBytes = kRows * kHeadDim * 2;
constexpr u32 kTileBytes = kBlockN * kHeadDim * 2;
static_assert(kRows % 16 == 0 && kRows <= 16 * kWarps, "a warp owns 16 rows");
static_assert(kBlockN % 16 == 0 && kHeadDim % 64 == 0, "whole mma tiles");
static_assert(kQBytes + 2 * kStages * kTileBytes == attn_abi::splitKvSharedBytes(kHeadDim),
              "the launch reserves this layout");

// Where one block's work lies: its (batch, kv head), its packed rows and
// its split's keys.
struct Work {
  int batch, kvHead, split;
  int group;             // query heads per kv head
  int packedRows;        // group * seqlen_q
  int rowBegin;          // the block's first packed row
  int seqlenK;           // the sequence's keys
  i64 shift;             // the built-in mask's (Sk - Sq when aligned bottom-right)
  int keyBegin, keyEnd;  // the split's keys
};

// The keys sequence `batch` holds: seqlen_k, or with a paged cache its own
// length, clamped so that no key lies past the pages of its table row.
__device__ __forceinline__ int sequenceKeys(const attn_abi::AttnSplitKvParams &p, int batch) {
  if (p.page_size == 0)
    return p.seqlen_k;
  const i64 capacity = static_cast<i64>(p.max_pages) * p.page_size;
  return static_cast<int>(minI64(maxI64(__ldg(p.seqlens_k + batch), 0), minI64(capacity, p.seqlen_k)));
}

__device__ __forceinline__ i64 maskShift(const attn_abi::AttnSplitKvParams &p, int seqlenK) {
  return attn_plan::kMaskBottomRight ? static_cast<i64>(seqlenK) - p.seqlen_q : 0;
}

__device__ Work workOf(const attn_abi::AttnSplitKvParams &p) {
  Work work;
  work.split = blockIdx.x;
  work.kvHead = blockIdx.y % p.kv_heads;
  work.rowBegin = (blockIdx.y / p.kv_heads) * kRows;
  work.batch = blockIdx.z;
  work.group = p.q_heads / p.kv_heads;
  work.packedRows = work.group * p.seqlen_q;
  work.seqlenK = sequenceKeys(p, work.batch);
  work.shift = maskShift(p, work.seqlenK);
  // The keys any of the block's query positions may see, in equal runs of
  // whole stages per split.
  const int rowEnd = min(work.rowBegin + kRows, work.packedRows);
  const i64 first = Mask::keyBegin(work.rowBegin / work.group, work.shift);
  const i64 last = Mask::keyEnd((rowEnd - 1) / work.group, work.shift, work.seqlenK);
  const int begin = static_cast<int>(minI64(maxI64(first, 0), work.seqlenK));
  const int end = static_cast<int>(maxI64(minI64(last, work.seqlenK), begin));
  const int tiles = (end - begin + kBlockN - 1) / kBlockN;
  const int tilesPerSplit = (tiles + p.splits - 1) / p.splits;
  work.keyBegin = min(end, begin + work.split * tilesPerSplit * kBlockN);
  work.keyEnd = min(end, work.keyBegin + tilesPerSplit * kBlockN);
  return work;
}

// ---- loads: Q once, then K and V a stage at a time, every thread a share.

// Element offset of key `key`'s row for kv head `kvHead` in a cache of
// `strides` (a paged one's page looked up in the block table).
__device__ __forceinline__ i64 keyRowOffset(const attn_abi::AttnSplitKvParams &p,
                                            const long long (&strides)[3], const Work &work,
                                            i64 page, int row) {
  return page * strides[0] + static_cast<i64>(row) * strides[1] +
         static_cast<i64>(work.kvHead) * strides[2];
}

__device__ __forceinline__ void loadQuery(const attn_abi::AttnSplitKvParams &p, u32 smemBase,
                                          const Work &work) {
  for (int index = threadIdx.x; index < kRows * kRowChunks; index += kThreads) {
    const int row = index / kRowChunks, chunk = index % kRowChunks;
    const int packed = work.rowBegin + row;
    const bool valid = packed < work.packedRows;
    const unsigned short *source = static_cast<const unsigned short *>(p.q);
    if (valid) {
      const int position = packed / work.group;
      const int head = work.kvHead * work.group + packed % work.group;
      source += work.batch * p.q_strides[0] + position * p.q_strides[1] +
                head * p.q_strides[2] + chunk * 8;
    }
    copyAsync16(smemBase + swizzledChunk<kRowChunks>(row, chunk), source, valid);
  }
}

__device__ __forceinline__ u32 keyStage(u32 smemBase, int stage) {
  return smemBase + kQBytes + stage * 2 * kTileBytes;
}
__device__ __forceinline__ u32 valueStage(u32 smemBase, int stage) {
  return keyStage(smemBase, stage) + kTileBytes;
}

// Each thread copies one 16-byte column chunk of kRowsPerThread rows of a
// stage, for K and for V.
static_assert(kThreads % kRowChunks == 0, "a thread keeps one column chunk");
constexpr int kRowStep = kThreads / kRowChunks;
constexpr int kRowsPerThread = kBlockN / kRowStep;
static_assert(kBlockN % kRowStep == 0, "whole rows per thread");

// The pages of a stage's rows this thread copies (a paged cache's block
// table entries; unused for a contiguous one). The kernel looks them up a
// stage before the copies that use them, so that the table's loads hide
// behind a stage's products instead of delaying the copies.
struct StagePages {
  int entry[kRowsPerThread];
};

__device__ __forceinline__ int stageKey(const Work &work, int tile, int i) {
  const int key = work.keyBegin + tile * kBlockN + threadIdx.x / kRowChunks + i * kRowStep;
  return min(key, work.keyEnd - 1);
}

// A key's page of the block table, and its row in it: shifts for the
// power-of-two page sizes, a division otherwise.
__device__ __forceinline__ int pageOf(const attn_abi::AttnSplitKvParams &p, int key) {
  return p.page_shift >= 0 ? key >> p.page_shift : key / p.page_size;
}
__device__ __forceinline__ int rowInPage(const attn_abi::AttnSplitKvParams &p, int key) {
  return p.page_shift >= 0 ? key & (p.page_size - 1) : key % p.page_size;
}

// A block table entry, loaded where the call stands: a volatile load is
// not sunk next to its use, so its latency overlaps the products between.
__device__ __forceinline__ int loadTableEntry(const int *address) {
  int value;
  asm volatile("ld.global.nc.b32 %0, [%1];" : "=r"(value) : "l"(address));
  return value;
}

__device__ __forceinline__ StagePages lookupStagePages(const attn_abi::AttnSplitKvParams &p,
                                                       const Work &work, int tile) {
  StagePages pages;
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i)
    pages.entry[i] =
        p.page_size > 0
            ? loadTableEntry(p.block_table + work.batch * p.block_table_stride +
                             pageOf(p, max(stageKey(work, tile, i), 0)))
            : work.batch;
  return pages;
}

// Keys keyBegin + tile kBlockN ... of the split into stage `stage` (zeros
// past its end), from the pages `pages` looked up for them.
__device__ __forceinline__ void loadKeyTile(const attn_abi::AttnSplitKvParams &p, u32 smemBase,
                                            const Work &work, int tile, int stage,
                                            const StagePages &pages) {
  const int firstKey = work.keyBegin + tile * kBlockN;
  const int chunk = threadIdx.x % kRowChunks, firstRow = threadIdx.x / kRowChunks;
  const unsigned short *k = static_cast<const unsigned short *>(p.k) + chunk * 8;
  const unsigned short *v = static_cast<const unsigned short *>(p.v) + chunk * 8;
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int row = firstRow + i * kRowStep;
    const int key = stageKey(work, tile, i);
    const bool valid = firstKey + row < work.keyEnd;
    i64 page = pages.entry[i];
    int pageRow = key;
    if (p.page_size > 0) {
      page = min(max(pages.entry[i], 0), p.num_pages - 1);
      pageRow = rowInPage(p, key);
    }
    const u32 offset = swizzledChunk<kRowChunks>(row, chunk);
    copyAsync16(keyStage(smemBase, stage) + offset,
                k + keyRowOffset(p, p.k_strides, work, page, pageRow), valid);
    copyAsync16(valueStage(smemBase, stage) + offset,
                v + keyRowOffset(p, p.v_strides, work, page, pageRow), valid);
  }
}

// ---- one warp's rows: the query position, head and regions' row values of
// the two rows (lane / 4 and lane / 4 + 8 of its 16) a lane holds.

struct RowContext {
  int position[2];
  int head[2];
  int keyOrigin[2];
  // The keys the built-in mask keeps for the row (a range for each of
  // them), cut to the split's keys.
  int keyLow[2], keyHigh[2];
  typename Mods::MaskRow maskRow[2];
  typename Mods::ScoreRow scoreRow[2];
};

__device__ __forceinline__ RowContext rowContext(const attn_abi::AttnSplitKvParams &p,
                                                 const Work &work, int firstRow, int lane) {
  RowContext rows;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    // Padding rows past the packed rows compute on zero queries, unstored.
    const int packed = min(work.rowBegin + firstRow + lane / 4 + 8 * half, work.packedRows - 1);
    rows.position[half] = packed / work.group;
    rows.head[half] = work.kvHead * work.group + packed % work.group;
    // A score_mod measuring keys from an origin: the row's diagonal.
    rows.keyOrigin[half] = static_cast<int>(
        minI64(maxI64(rows.position[half] + work.shift, 0), work.seqlenK));
    const KeyRange kept = rowKeyRange<Mask>(rows.position[half], work.shift, work.seqlenK);
    rows.keyLow[half] = static_cast<int>(kept.begin);
    rows.keyHigh[half] = static_cast<int>(minI64(kept.end, work.keyEnd));
    rows.maskRow[half] = Mods::maskRow(p, work.batch, rows.head[half], rows.position[half]);
    rows.scoreRow[half] = Mods::scoreRow(p, work.batch, rows.head[half], rows.position[half]);
  }
  return rows;
}

// The exponent (base 2) of the raw score of the pair (row half, key), -inf
// for a pair the masks drop or a key outside the split.
__device__ __forceinline__ float scoreLog2(const attn_abi::AttnSplitKvParams &p,
                                           const Work &work, const RowContext &rows, int half,
                                           int key, float raw) {
  const int q = rows.position[half], h = rows.head[half];
  bool kept = key >= rows.keyLow[half] && key < rows.keyHigh[half];
  if constexpr (Mods::kHasMaskMod)
    kept = kept && Mods::keeps(p, rows.maskRow[half], work.batch, h, q, key,
                               exactIntToFloat(key));
  if (!kept)
    return negativeInfinity();
  if constexpr (!Mods::kHasScoreMod) {
    return raw * p.scale_log2;
  } else {
    unsigned diagonals[Mods::kScoreDiagonalSlots] = {};
#pragma unroll
    for (int n = 0; n < Mods::kScoreDiagonals; ++n)
      diagonals[n] = Mods::scoreDiagonal(p, n, work.batch, h, static_cast<i64>(q) - key);
    const float keyFloat =
        exactIntToFloat(Mods::kScoreKeyRelative ? key - rows.keyOrigin[half] : key);
    const float score = Mods::score(p, rows.scoreRow[half], raw * p.scale * Mods::kScoreInputScale,
                                    work.batch, h, q, key, keyFloat, diagonals);
    return score * (kLog2e * Mods::kScoreOutputScale);
  }
}

// ---- the online softmax of a warp's 16 rows over its keys.

struct WarpState {
  float output[kDimTiles][4];
  float rowMax[2];  // base 2, over the keys seen
  float rowSum[2];  // this lane's share of the row's sum of exponentials
};

__device__ __forceinline__ void initState(WarpState &state) {
#pragma unroll
  for (int tile = 0; tile < kDimTiles; ++tile)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      state.output[tile][e] = 0.f;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    state.rowMax[half] = negativeInfinity();
    state.rowSum[half] = 0.f;
  }
}

// The warp's A operands of Q, a 16-column k-step each: held in registers
// through the whole split where they fit beside O (head dim up to 128),
// else read from shared memory at every step.
constexpr bool kQueryInRegisters = kHeadDim <= 128;
struct QueryFragments {
  u32 a[kQueryInRegisters ? kKeySteps : 1][4];
};

__device__ __forceinline__ void loadQueryFragment(u32 query, int firstRow, int step, int lane,
                                                  u32 (&a)[4]) {
  const int matrix = lane / 8;
  const int queryRow = firstRow + (matrix % 2) * 8 + lane % 8;
  loadMatrixX4(query + swizzledChunk<kRowChunks>(queryRow, 2 * step + matrix / 2), a);
}

__device__ __forceinline__ void loadQueryFragments(u32 query, int firstRow, int lane,
                                                   QueryFragments &fragments) {
  if constexpr (kQueryInRegisters)
#pragma unroll
    for (int step = 0; step < kKeySteps; ++step)
      loadQueryFragment(query, firstRow, step, lane, fragments.a[step]);
}

// S of the warp's rows against StepKeys keys from `keyRow0` of a stage:
// element [n][e] is row lane / 4 + 8 (e / 2), key keyRow0 + 8 n +
// 2 (lane % 4) + e % 2.
template <int StepKeys>
__device__ __forceinline__ void queryKeyProduct(u32 query, const QueryFragments &fragments,
                                                u32 keys, int firstRow, int keyRow0, int lane,
                                                float (&scores)[StepKeys / 8][4]) {
#pragma unroll
  for (int n = 0; n < StepKeys / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      scores[n][e] = 0.f;
  const int matrix = lane / 8, matrixRow = lane % 8;
#pragma unroll
  for (int step = 0; step < kKeySteps; ++step) {
    u32 a[4];
    if constexpr (kQueryInRegisters) {
#pragma unroll
      for (int i = 0; i < 4; ++i)
        a[i] = fragments.a[step][i];
    } else {
      loadQueryFragment(query, firstRow, step, lane, a);
    }
#pragma unroll
    for (int pair = 0; pair < StepKeys / 16; ++pair) {
      u32 b[4];
      const int keyRow = keyRow0 + 16 * pair + (matrix / 2) * 8 + matrixRow;
      loadMatrixX4(keys + swizzledChunk<kRowChunks>(keyRow, 2 * step + matrix % 2), b);
      mma16816<Element>(scores[2 * pair], a, b[0], b[1]);
      mma16816<Element>(scores[2 * pair + 1], a, b[2], b[3]);
    }
  }
}

// Turns the exponents into probabilities against the updated row maxima,
// rescaling O where a maximum grew, and packs them as the A operands of
// the PV product (16 rows x 16 keys each).
template <int StepKeys>
__device__ __forceinline__ void softmaxStep(WarpState &state, float (&scores)[StepKeys / 8][4],
                                            u32 (&probabilities)[StepKeys / 16][4]) {
  float scale[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float tileMax = negativeInfinity();
#pragma unroll
    for (int n = 0; n < StepKeys / 8; ++n)
      tileMax = fmaxf(tileMax, fmaxf(scores[n][2 * half], scores[n][2 * half + 1]));
    const float rowMax = fmaxf(state.rowMax[half], quadMax(tileMax));
    // A row that has seen no key yet keeps 0 as its reference (no NaN).
    const float reference = rowMax == negativeInfinity() ? 0.f : rowMax;
    scale[half] = fastExp2(state.rowMax[half] - reference);
    state.rowMax[half] = rowMax;
    float sum = 0.f;
#pragma unroll
    for (int n = 0; n < StepKeys / 8; ++n)
#pragma unroll
      for (int e = 2 * half; e < 2 * half + 2; ++e) {
        scores[n][e] = fastExp2(scores[n][e] - reference);
        sum += scores[n][e];
      }
    state.rowSum[half] = state.rowSum[half] * scale[half] + sum;
  }
  // Most steps leave every maximum where it was: skip the rescale then.
  if (__any_sync(0xffffffffu, scale[0] != 1.f || scale[1] != 1.f)) {
#pragma unroll
    for (int tile = 0; tile < kDimTiles; ++tile)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        state.output[tile][e] *= scale[e / 2];
  }
#pragma unroll
  for (int k = 0; k < StepKeys / 16; ++k) {
    probabilities[k][0] = packPair<Element>(scores[2 * k][0], scores[2 * k][1]);
    probabilities[k][1] = packPair<Element>(scores[2 * k][2], scores[2 * k][3]);
    probabilities[k][2] = packPair<Element>(scores[2 * k + 1][0], scores[2 * k + 1][1]);
    probabilities[k][3] = packPair<Element>(scores[2 * k + 1][2], scores[2 * k + 1][3]);
  }
}

// O += P V over StepKeys keys from `keyRow0` of a stage.
template <int StepKeys>
__device__ __forceinline__ void probabilityValueProduct(u32 values, int keyRow0, int lane,
                                                        const u32 (&probabilities)[StepKeys / 16][4],
                                                        WarpState &state) {
  const int matrix = lane / 8;
#pragma unroll
  for (int k = 0; k < StepKeys / 16; ++k) {
    const int keyRow = keyRow0 + 16 * k + (matrix % 2) * 8 + lane % 8;
#pragma unroll
    for (int pair = 0; pair < kDimTiles / 2; ++pair) {
      u32 b[4];
      loadMatrixX4Transposed(values + swizzledChunk<kRowChunks>(keyRow, 2 * pair + matrix / 2),
                             b);
      mma16816<Element>(state.output[2 * pair], probabilities[k], b[0], b[1]);
      mma16816<Element>(state.output[2 * pair + 1], probabilities[k], b[2], b[3]);
    }
  }
}

// A warp's share of one stage: its warpKeys keys from keyRow0, StepKeys at
// a time (StepKeys divides warpKeys).
template <int StepKeys>
__device__ __forceinline__ void consumeStage(const attn_abi::AttnSplitKvParams &p,
                                             const Work &work, const RowContext &rows,
                                             const QueryFragments &fragments, u32 smemBase,
                                             int stage, int tileKey, int firstRow, int keyRow0,
                                             int warpKeys, int lane, WarpState &state) {
  for (int offset = 0; offset < warpKeys; offset += StepKeys) {
    float scores[StepKeys / 8][4];
    queryKeyProduct<StepKeys>(smemBase, fragments, keyStage(smemBase, stage), firstRow,
                              keyRow0 + offset, lane, scores);
#pragma unroll
    for (int n = 0; n < StepKeys / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        scores[n][e] = scoreLog2(p, work, rows, e / 2,
                                 tileKey + keyRow0 + offset + 8 * n + 2 * (lane % 4) + e % 2,
                                 scores[n][e]);
    u32 probabilities[StepKeys / 16][4];
    softmaxStep<StepKeys>(state, scores, probabilities);
    probabilityValueProduct<StepKeys>(valueStage(smemBase, stage), keyRow0 + offset, lane,
                                      probabilities, state);
  }
}

// ---- the end of a row: its offset, its stores.

// The score_mod terms attn-lower-mods moved out of the scores because they
// move a whole row alike (as the forward's epilogue applies them): the
// factor of O and the natural log-sum-exp of a row whose base-2 one is
// `logSumExp2` (-inf: no key reached it).
struct RowResult {
  float outputFactor;
  float logSumExp;
};

template <class Params>
__device__ __forceinline__ RowResult finishRow(const Params &p, int batch, int head, int position,
                                               int seqlenK, float logSumExp2) {
  const float kLn2 = 0.6931471805599453f;
  RowResult result{1.f, logSumExp2 * kLn2};
  if (logSumExp2 == negativeInfinity())
    return RowResult{0.f, negativeInfinity()};
  if constexpr (Mods::kHasScoreRowOffset) {
    const int origin = static_cast<int>(
        minI64(maxI64(position + maskShift(p, seqlenK), 0), seqlenK));
    const float offset =
        Mods::kScoreOutputScale * Mods::scoreRowOffset(p, batch, head, position, origin);
    if (offset == negativeInfinity())
      result = RowResult{0.f, negativeInfinity()};
    else if (!isfinite(offset))
      result = RowResult{__int_as_float(0x7fffffff), __int_as_float(0x7fffffff)};
    else
      result.logSumExp += offset;
  }
  return result;
}

// Count consecutive O values of a row from column `column`, in the output's
// element type.
template <int Count>
__device__ __forceinline__ void storeOutput(const attn_abi::AttnSplitKvParams &p, int batch,
                                            int position, int head, int column,
                                            const float (&values)[Count]) {
  static_assert(Count % 4 == 0, "whole 8-byte stores");
  unsigned short *row = static_cast<unsigned short *>(p.o) + batch * p.o_strides[0] +
                        position * p.o_strides[1] + head * p.o_strides[2] + column;
#pragma unroll
  for (int i = 0; i < Count; i += 4) {
    uint2 packed = make_uint2(packPair<Element>(values[i], values[i + 1]),
                              packPair<Element>(values[i + 2], values[i + 3]));
    *reinterpret_cast<uint2 *>(row + i) = packed;
  }
}

__device__ __forceinline__ i64 outputRowIndex(const attn_abi::AttnSplitKvParams &p, int batch,
                                              int head, int position) {
  return (static_cast<i64>(batch) * p.q_heads + head) * p.seqlen_q + position;
}

// The warps' partial rows in shared memory (over the K/V stages, once the
// last one is consumed): per warp [16 rows][kHeadDim + 8] floats of O (the
// padding spreads a quad's rows over the banks), then per warp 16 row
// maxima and 16 sums.
constexpr int kPartialStride = kHeadDim + 8;
constexpr u32 kPartialOutputBytes = kWarps * 16 * kPartialStride * 4;
static_assert(kPartialOutputBytes + kWarps * 16 * 8 <= 2 * kStages * kTileBytes,
              "the partial rows fit over the stages");

__device__ __forceinline__ void storePartialRows(u32 scratch, int warp, int lane,
                                                 const WarpState &state) {
#pragma unroll
  for (int tile = 0; tile < kDimTiles; ++tile)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = lane / 4 + 8 * half, column = 8 * tile + 2 * (lane % 4);
      asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(
                       scratch + ((warp * 16 + row) * kPartialStride + column) * 4),
                   "f"(state.output[tile][2 * half]), "f"(state.output[tile][2 * half + 1])
                   : "memory");
    }
  if (lane % 4 == 0)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const u32 rowStats = scratch + kPartialOutputBytes + (warp * 16 + lane / 4 + 8 * half) * 8;
      asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(rowStats),
                   "f"(state.rowMax[half]), "f"(state.rowSum[half])
                   : "memory");
    }
}

// Merges the key warps' pieces of the block's rows and stores each row: O
// and the log-sum-exp themselves with one split, else the split's piece.
__device__ void storeBlockRows(const attn_abi::AttnSplitKvParams &p, u32 scratch,
                               const Work &work, int rowWarps, int keyWarps) {
  constexpr int kChunk = 8;
  const int rows = min(kRows, work.packedRows - work.rowBegin);
  for (int item = threadIdx.x; item < rows * (kHeadDim / kChunk); item += kThreads) {
    const int row = item / (kHeadDim / kChunk), column = (item % (kHeadDim / kChunk)) * kChunk;
    const int rowWarp = row / 16, rowInWarp = row % 16;
    float maximum = negativeInfinity();
    float2 stats[kWarps];
#pragma unroll
    for (int keyWarp = 0; keyWarp < kWarps; ++keyWarp)
      if (keyWarp < keyWarps) {
        const int warp = rowWarp + keyWarp * rowWarps;
        asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];"
                     : "=f"(stats[keyWarp].x), "=f"(stats[keyWarp].y)
                     : "r"(scratch + kPartialOutputBytes + (warp * 16 + rowInWarp) * 8));
        maximum = fmaxf(maximum, stats[keyWarp].x);
      }
    const float reference = maximum == negativeInfinity() ? 0.f : maximum;
    float sum = 0.f, values[kChunk] = {};
#pragma unroll
    for (int keyWarp = 0; keyWarp < kWarps; ++keyWarp)
      if (keyWarp < keyWarps) {
        const int warp = rowWarp + keyWarp * rowWarps;
        const float weight = fastExp2(stats[keyWarp].x - reference);
        sum += stats[keyWarp].y * weight;
        const u32 source = scratch + ((warp * 16 + rowInWarp) * kPartialStride + column) * 4;
#pragma unroll
        for (int i = 0; i < kChunk; i += 4) {
          float4 piece;
          asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                       : "=f"(piece.x), "=f"(piece.y), "=f"(piece.z), "=f"(piece.w)
                       : "r"(source + 4 * i));
          values[i] += piece.x * weight;
          values[i + 1] += piece.y * weight;
          values[i + 2] += piece.z * weight;
          values[i + 3] += piece.w * weight;
        }
      }
    const float inverse = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
    for (int i = 0; i < kChunk; ++i)
      values[i] *= inverse;
    const float logSumExp2 = sum > 0.f ? reference + __log2f(sum) : negativeInfinity();
    const int packed = work.rowBegin + row;
    const int position = packed / work.group;
    const int head = work.kvHead * work.group + packed % work.group;
    const i64 outputRow = outputRowIndex(p, work.batch, head, position);
    if (p.splits == 1) {
      const RowResult result =
          finishRow(p, work.batch, head, position, work.seqlenK, logSumExp2);
#pragma unroll
      for (int i = 0; i < kChunk; ++i)
        values[i] *= result.outputFactor;
      storeOutput(p, work.batch, position, head, column, values);
      if (column == 0)
        p.lse[outputRow] = result.logSumExp;
    } else {
      const i64 piece = static_cast<i64>(work.split) * p.batch * p.q_heads * p.seqlen_q + outputRow;
      float4 *destination = reinterpret_cast<float4 *>(p.partial_o + piece * kHeadDim + column);
#pragma unroll
      for (int i = 0; i < kChunk; i += 4)
        destination[i / 4] = make_float4(values[i], values[i + 1], values[i + 2], values[i + 3]);
      if (column == 0)
        p.partial_lse[piece] = logSumExp2;
    }
  }
}

} // namespace attn_split_kv

// grid (splits, row blocks * kv_heads, batch), kSplitKvThreads threads,
// splitKvSharedBytes(head_dim) of dynamic shared memory.
extern "C" __global__ void __launch_bounds__(attn_abi::kSplitKvThreads, 2)
    attn_split_kv_kernel(const __grid_constant__ attn_abi::AttnSplitKvParams p) {
  using namespace attn_split_kv;
  extern __shared__ __align__(16) unsigned char splitKvShared[];
  const u32 smemBase = sharedAddress(splitKvShared);
  const Work work = workOf(p);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  // Few rows: the warps split each stage's keys; many: its rows.
  const int blockRows = min(kRows, work.packedRows - work.rowBegin);
  const int rowWarps = blockRows <= 16 ? 1 : (blockRows <= 32 ? 2 : 4);
  const int keyWarps = min(kWarps / rowWarps, kBlockN / 16);
  const int rowWarp = warp % rowWarps, keyWarp = warp / rowWarps;
  const bool computes = keyWarp < keyWarps;
  const int warpKeys = kBlockN / keyWarps;

  const RowContext rows = rowContext(p, work, 16 * rowWarp, lane);
  WarpState state;
  initState(state);
  QueryFragments fragments;

  const int tiles = (work.keyEnd - work.keyBegin + kBlockN - 1) / kBlockN;
  loadQuery(p, smemBase, work);
#pragma unroll
  for (int stage = 0; stage < kStages - 1; ++stage) {
    if (stage < tiles)
      loadKeyTile(p, smemBase, work, stage, stage, lookupStagePages(p, work, stage));
    commitAsyncCopies();
  }
  StagePages nextPages = lookupStagePages(p, work, kStages - 1);
  for (int tile = 0; tile < tiles; ++tile) {
    waitAsyncCopies<kStages - 2>();
    __syncthreads();
    // The stage the previous tile used is free now that every warp passed
    // the barrier: refill it kStages - 1 tiles ahead.
    const int ahead = tile + kStages - 1;
    if (ahead < tiles) {
      loadKeyTile(p, smemBase, work, ahead, ahead % kStages, nextPages);
      nextPages = lookupStagePages(p, work, ahead + 1);
    }
    commitAsyncCopies();
    if (computes) {
      if (tile == 0) // Q arrived with the first stage
        loadQueryFragments(smemBase, 16 * rowWarp, lane, fragments);
      const int stage = tile % kStages;
      const int tileKey = work.keyBegin + tile * kBlockN;
      const int keyRow0 = keyWarp * warpKeys;
      if (warpKeys % 64 == 0)
        consumeStage<64>(p, work, rows, fragments, smemBase, stage, tileKey, 16 * rowWarp,
                         keyRow0, warpKeys, lane, state);
      else if (warpKeys % 32 == 0)
        consumeStage<32>(p, work, rows, fragments, smemBase, stage, tileKey, 16 * rowWarp,
                         keyRow0, warpKeys, lane, state);
      else
        consumeStage<16>(p, work, rows, fragments, smemBase, stage, tileKey, 16 * rowWarp,
                         keyRow0, warpKeys, lane, state);
    }
  }
  waitAsyncCopies<0>();
  __syncthreads();
  const u32 scratch = keyStage(smemBase, 0);
  if (computes) {
#pragma unroll
    for (int half = 0; half < 2; ++half)
      state.rowSum[half] = quadSum(state.rowSum[half]);
    storePartialRows(scratch, warp, lane, state);
  }
  __syncthreads();
  storeBlockRows(p, scratch, work, rowWarps, keyWarps);
}

// Merges the splits' pieces of one output row's 32 columns a block: the
// threads take the splits' log-sum-exps in turn, then each takes a 4-column
// chunk of every (ATTN_SPLIT_KV_COMBINE_THREADS / 8)-th split, so that many
// pieces' loads are in flight together and a decode step's few rows still
// spread over the multiprocessors; the chunks' groups meet in shared memory.
extern "C" __global__ void __launch_bounds__(ATTN_SPLIT_KV_COMBINE_THREADS)
    attn_split_kv_combine_kernel(const __grid_constant__ attn_abi::AttnSplitKvParams p) {
  using namespace attn_split_kv;
  constexpr int kThreadsPerRow = ATTN_SPLIT_KV_COMBINE_THREADS;
  constexpr int kChunks = ATTN_SPLIT_KV_COMBINE_COLUMNS / 4;
  constexpr int kGroups = kThreadsPerRow / kChunks;
  static_assert(kThreadsPerRow % kChunks == 0 && kHeadDim % ATTN_SPLIT_KV_COMBINE_COLUMNS == 0,
                "whole chunk groups");
  __shared__ float weights[attn_abi::kMaxKeySplits];
  __shared__ float reduction[kThreadsPerRow / 32];
  __shared__ float4 groupSums[kGroups][kChunks];

  const i64 outputRow = blockIdx.x;
  const i64 rowsTotal = static_cast<i64>(p.batch) * p.q_heads * p.seqlen_q;
  const int position = static_cast<int>(outputRow % p.seqlen_q);
  const int head = static_cast<int>((outputRow / p.seqlen_q) % p.q_heads);
  const int batch = static_cast<int>(outputRow / (static_cast<i64>(p.seqlen_q) * p.q_heads));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int splits = min(p.splits, attn_abi::kMaxKeySplits);

  // The block's maximum and the splits' weights against it.
  float maximum = negativeInfinity();
  for (int split = threadIdx.x; split < splits; split += kThreadsPerRow) {
    weights[split] = p.partial_lse[split * rowsTotal + outputRow];
    maximum = fmaxf(maximum, weights[split]);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    maximum = fmaxf(maximum, __shfl_xor_sync(0xffffffffu, maximum, offset));
  if (lane == 0)
    reduction[warp] = maximum;
  __syncthreads();
  maximum = reduction[0];
#pragma unroll
  for (int other = 1; other < kThreadsPerRow / 32; ++other)
    maximum = fmaxf(maximum, reduction[other]);
  const float reference = maximum == negativeInfinity() ? 0.f : maximum;
  float sum = 0.f;
  for (int split = threadIdx.x; split < splits; split += kThreadsPerRow) {
    weights[split] = fastExp2(weights[split] - reference);
    sum += weights[split];
  }
  sum = quadSum(sum);
#pragma unroll
  for (int offset = 4; offset < 32; offset *= 2)
    sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  __syncthreads();
  if (lane == 0)
    reduction[warp] = sum;
  __syncthreads();
  sum = 0.f;
#pragma unroll
  for (int other = 0; other < kThreadsPerRow / 32; ++other)
    sum += reduction[other];

  const int chunk = threadIdx.x % kChunks, group = threadIdx.x / kChunks;
  const int column = blockIdx.y * ATTN_SPLIT_KV_COMBINE_COLUMNS;
  float4 total = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
  for (int split = group; split < splits; split += kGroups) {
    const float weight = weights[split];
    const float4 piece = reinterpret_cast<const float4 *>(
        p.partial_o + (split * rowsTotal + outputRow) * kHeadDim + column)[chunk];
    // An empty split's piece holds zeros; weight 0 keeps a stray NaN out.
    if (weight > 0.f) {
      total.x += piece.x * weight;
      total.y += piece.y * weight;
      total.z += piece.z * weight;
      total.w += piece.w * weight;
    }
  }
  groupSums[group][chunk] = total;
  __syncthreads();
  if (threadIdx.x >= kChunks)
    return;
#pragma unroll
  for (int other = 1; other < kGroups; ++other) {
    const float4 part = groupSums[other][chunk];
    total.x += part.x;
    total.y += part.y;
    total.z += part.z;
    total.w += part.w;
  }
  const float logSumExp2 = sum > 0.f ? reference + __log2f(sum) : negativeInfinity();
  const RowResult result =
      finishRow(p, batch, head, position, sequenceKeys(p, batch), logSumExp2);
  const float factor = sum > 0.f ? result.outputFactor / sum : 0.f;
  float values[4] = {total.x * factor, total.y * factor, total.z * factor, total.w * factor};
  storeOutput(p, batch, position, head, column + 4 * chunk, values);
  if (threadIdx.x == 0 && blockIdx.y == 0)
    p.lse[outputRow] = result.logSumExp;
}
