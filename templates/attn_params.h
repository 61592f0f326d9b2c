// The launch ABI shared by the host runtime (C++) and the kernel templates
// (NVRTC). Both sides include this one header so the parameter block cannot
// drift between them. It uses only fixed-width builtin types: NVRTC compiles it
// without any system header.
#ifndef ATTN_TEMPLATES_ATTN_PARAMS_H
#define ATTN_TEMPLATES_ATTN_PARAMS_H

namespace attn_abi {

// An opaque 128-byte TMA descriptor (CUtensorMap), encoded on the host by
// cuTensorMapEncodeTiled and read by the copy engine from kernel parameter
// space. 64-byte alignment is required by the hardware.
struct alignas(64) TensorMapBlob {
  unsigned long long words[16];
};

// The longest sequence, in query or key rows (packed sequences: all of
// them together), a forward kernel takes; the runtime refuses longer ones.
// Mask regions see positions up to one tile (at most 256 rows or keys) past
// a sequence's end, so none exceeds kMaxRegionPosition: attn-lower-mods
// proves a mask region's index arithmetic exact in 32 bits against it.
constexpr int kMaxSeqlen = 1 << 30;
constexpr int kMaxRegionPosition = kMaxSeqlen + 256;

// The most query heads a spec may have: the linear-family and backward
// grids put heads on a grid dimension (y), which holds at most 65535
// blocks, and launch metadata keeps head counts as int.
constexpr int kMaxHeads = 65535;

// A buffer captured by a spec's mask_mod / score_mod regions: a contiguous
// row-major array of `rank` dimensions (rank <= kMaxCaptureRank, unused
// trailing extents are 1). Reads outside the extents give 0.
constexpr int kMaxCaptures = 4;
constexpr int kMaxCaptureRank = 3;
struct CaptureArg {
  const void *data;
  long long extents[kMaxCaptureRank];
};

// A capture's elements: the product of its first `rank` extents (the
// others are 1).
constexpr long long captureElements(const CaptureArg &arg, int rank = kMaxCaptureRank) {
  long long elements = 1;
  for (int dim = 0; dim < rank; ++dim)
    elements *= arg.extents[dim];
  return elements;
}

// Parameters of the forward softmax attention kernel.
//
// Tensors use the BSHD layout: Q and O are [batch, seqlen_q, q_heads, head_dim],
// K and V are [batch, seqlen_k, kv_heads, head_dim]; the last dimension is
// contiguous, the other strides are free (multiples of 16 bytes for TMA).
// Q, K and V are read and O is written through tensor maps whose box shapes
// come from the plan (O: 64 rows, one consumer warpgroup's slice).
// LSE is [batch, q_heads, seqlen_q] fp32, contiguous, natural logarithm.
//
// Packed sequences (cu_seqlens_q non-null): `batch` sequences lie end to end
// in tensors of batch 1, Q and O of total_q rows, K and V of total_k rows;
// sequence b's queries are rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1
// (keys likewise with cu_seqlens_k), and seqlen_q, seqlen_k bound every
// sequence's length. Masks and regions see positions inside the sequence and
// b as the batch index. LSE is then [q_heads, total_q]. O's rows past a
// sequence's end belong to the next one, so a partial slice is stored by the
// threads through `o` (element strides o_row_stride, o_head_stride) instead
// of TMA.
struct AttnFwdParams {
  TensorMapBlob q_map;
  TensorMapBlob k_map;
  TensorMapBlob v_map;
  TensorMapBlob o_map;
  float *lse;
  int batch;
  int seqlen_q;
  int seqlen_k;
  int q_heads;
  int kv_heads;
  // softmax scale multiplied by log2(e): the kernel works in base 2.
  float scale_log2;
  // The spec's captured buffers, in declaration order (unused entries null).
  CaptureArg captures[kMaxCaptures];
  // Optional tile coverage of the masks, one byte (0 empty, 1 partial,
  // 2 full: every pair inside the sequences kept, and every key of the tile
  // inside the key length) per [batch][q_heads][query block][key tile], written by the
  // coverage kernel for masks the compiler could not classify; null when
  // absent. The forward kernel only reads it.
  unsigned char *tile_coverage;
  // Optional stored key bits of the partial tiles of tile_coverage (null
  // when absent), written by the key bits kernels: first one int32 slot per
  // tile coverage byte (the partial tiles numbered 0, 1, ... in coverage
  // order, -1 for the others), then, from byte
  // tileKeyBitsOffset(coverage bytes), per slot [BLOCK_M rows][4 quads] words
  // of BLOCK_N / 4 bits (32-bit words up to 128 keys a tile, else 64-bit):
  // bit 2 j + e of row r's word c keeps key 8 j + 2 c + e of the tile, for
  // the mask, the mask_mod and the sequence lengths together. The forward
  // kernel only reads them. tile_key_words points at the words (set by the
  // runtime beside tile_key_bits), and tile_key_slot_limit bounds the slots
  // whose words the allocation holds: the kernel reads a slot at or past it
  // (a buffer built for other shapes) as a full tile, so that a foreign
  // buffer gives wrong rows but never an access outside it.
  unsigned *tile_key_bits;
  unsigned *tile_key_words;
  int tile_key_slot_limit;
  // Optional order of the work tiles: entry i is the default-order index
  // (see the kernel's TileSchedule) of the i-th work tile to start, a
  // permutation written by the host from the work cost kernel's counts;
  // null keeps the default order. Out-of-range entries are clamped.
  const int *work_order;
  const int *cu_seqlens_q;
  const int *cu_seqlens_k;
  int total_q;
  int total_k;
  // O for the stores the threads make themselves (a packed sequence's
  // partial slice, a split tail tile's rows), in elements.
  void *o;
  long long o_batch_stride;
  long long o_row_stride;
  long long o_head_stride;
  // Optional split of the persistent grid's last, partial round (see the
  // kernel's TileSchedule): its last tail_tiles work tiles are cut along
  // their key tiles so that every block takes an equal run of them. The
  // pieces meet in tail_partials, per block two slots of [consumer warpgroup]
  // [warp][head_dim / 2 + 2][32] fp32 (the O fragment and log-sum-exp of a
  // warp's rows), and count themselves in tail_counters, per tail tile
  // [consumer warpgroup][warp] int32, which the kernel leaves at 0 (the
  // runtime zeroes them before each launch). tail_tiles 0: no split.
  int tail_tiles;
  float *tail_partials;
  int *tail_counters;
  // 1, or 2 where a work tile of a plan of two consumer warpgroups packs
  // two query heads of one kv head: consumer c then takes the tile's 64
  // query positions of head `head + c`, and the tile reads K and V once for
  // both (few query positions, GQA). The runtime sets it for kernels
  // without a mask_mod (forwardHeadsPerTile); q_map's box then spans two
  // heads of 64 rows, which in shared memory lie as the 128 rows of an
  // unpacked tile.
  int heads_per_tile;
  // Optional paged KV cache (block_table non-null; kernels compiled with
  // attn_plan::kPagedKv only): k_map and v_map span the page pools
  // [num_pages, page_size, kv_heads, head_dim] as a batch of num_pages
  // sequences of page_size rows, with boxes of page_box_rows rows (a
  // divisor of page_size and of BLOCK_N, a multiple of 16). Key j of
  // sequence b lies in page block_table[b * block_table_stride + j /
  // page_size], row j % page_size; the sequence holds seqlens_k[b] keys,
  // clamped to [0, seqlen_k] (the runtime bounds seqlen_k by max_pages *
  // page_size). Boxes past a sequence's last page read page -1, which the
  // copy engine fills with zeros, as it does for page numbers outside the
  // pool. page_magic and page_shift divide by page_size (PageDivider).
  const int *block_table;
  const int *seqlens_k;
  long long block_table_stride;
  int page_size;
  int page_box_rows;
  unsigned page_magic;
  int page_shift;
};

// Parameters of the short-query (split-KV) kernels of a softmax module:
// decode, speculative verification and other calls with few query rows,
// and every call over a paged KV cache.
//
// The query heads of one kv head are packed as the rows of one tile: packed
// row r of (batch b, kv head g) is query position r / group of query head
// g * group + r % group, where group = q_heads / kv_heads (so a decode step
// of 8 query heads over one kv head fills 8 rows of one tile instead of one
// row of 8). A block takes splitKvRows(head_dim) packed rows and one of `splits`
// equal pieces of the keys those rows may see; with splits > 1 each piece
// writes its normalized O in fp32 and its log-sum-exp (base 2) to
// partial_o [splits][batch][q_heads][seqlen_q][head_dim] and partial_lse
// [splits][batch][q_heads][seqlen_q], and the combine kernel merges them
// into o and lse.
//
// q, o: [batch, seqlen_q, q_heads, head_dim]; element strides of the batch,
// row and head dimensions, head_dim contiguous. k, v: contiguous caches
// [batch, seqlen_k, kv_heads, head_dim] (page_size 0), or paged caches
// [num_pages, page_size, kv_heads, head_dim] (page_size > 0): key j of
// sequence b lies in page block_table[b * block_table_stride + j /
// page_size], row j % page_size, and the sequence holds seqlens_k[b] keys
// (clamped to [0, min(seqlen_k, max_pages * page_size)]; page numbers to
// [0, num_pages)). Strides of k and v: [page or batch, row, head].
// lse: [batch, q_heads, seqlen_q] fp32, natural logarithm.
struct AttnSplitKvParams {
  const void *q;
  const void *k;
  const void *v;
  void *o;
  long long q_strides[3];
  long long k_strides[3];
  long long v_strides[3];
  long long o_strides[3];
  float *lse;
  float *partial_o;
  float *partial_lse;
  const int *block_table;
  const int *seqlens_k;
  long long block_table_stride;
  int max_pages;
  int num_pages;
  int page_size;
  // A key's page is (umulhi(page_magic, key) + key) >> page_shift: the
  // smallest page_shift with 2^page_shift >= page_size, and page_magic =
  // floor(2^32 (2^page_shift - page_size) / page_size) + 1.
  unsigned page_magic;
  int page_shift;
  int batch;
  int seqlen_q;
  int seqlen_k;
  int q_heads;
  int kv_heads;
  // Blocks of splitKvRows(head_dim) packed rows per (batch, kv head).
  int row_blocks;
  int splits;
  // The softmax scale, and it multiplied by log2(e).
  float scale;
  float scale_log2;
  CaptureArg captures[kMaxCaptures];
};

// The short-query plan, a function of the head dim: key rows a pipeline
// stage holds (K and V), stages, and the block's shared memory (Q's
// splitKvRows rows, then the stages), all 16-bit elements. Head dim 256
// packs 32 rows a block, so that two blocks share a multiprocessor.
constexpr int splitKvRows(int headDim) { return headDim <= 128 ? 64 : 32; }
constexpr int kSplitKvThreads = 128;
constexpr int splitKvBlockN(int headDim) { return headDim <= 64 ? 128 : (headDim <= 128 ? 64 : 32); }
constexpr int splitKvStages(int headDim) { return 3; }
constexpr int splitKvSharedBytes(int headDim) {
  return (splitKvRows(headDim) + splitKvStages(headDim) * 2 * splitKvBlockN(headDim)) * headDim * 2;
}

// A page size's page_magic and page_shift (AttnSplitKvParams): the keys'
// page numbers by a multiply and a shift, exact for keys below 2^31.
struct PageDivider {
  unsigned magic;
  int shift;
};
constexpr PageDivider pageDividerOf(int pageSize) {
  int shift = 0;
  while ((1ll << shift) < pageSize)
    ++shift;
  const unsigned long long size = static_cast<unsigned long long>(pageSize);
  return {static_cast<unsigned>((((1ull << shift) - size) << 32) / size + 1), shift};
}
// The most query rows a call sends down the short-query path by itself
// (longer queries take the forward kernel unless the KV cache is paged;
// attn::shortQueryPlanFor says which shorter ones take it).
constexpr int kShortQueryMaxRows = 64;
#define ATTN_SPLIT_KV_KERNEL_NAME "attn_split_kv_kernel"
// The most splits of a call: beyond them the combine's reads of the pieces
// cost more than the keys.
constexpr int kMaxKeySplits = 1024;
// The combine: grid (batch * q_heads * seqlen_q, head_dim /
// ATTN_SPLIT_KV_COMBINE_COLUMNS), a block per output row's columns.
#define ATTN_SPLIT_KV_COMBINE_KERNEL_NAME "attn_split_kv_combine_kernel"
#define ATTN_SPLIT_KV_COMBINE_THREADS 128
#define ATTN_SPLIT_KV_COMBINE_COLUMNS 32

// Parameters of the backward softmax attention kernels (the preprocess, the
// main kernel over key tiles, and dQ's conversion), one block for all three.
//
// Q, K, V, O, dO and their gradients use the forward's BSHD layout (packed
// sequences likewise, with cu_seqlens_q / cu_seqlens_k, total_q, total_k);
// the main kernel reads Q and dO through maps of bwd block_m-row boxes and K
// and V through maps of block_n-row boxes, 64 columns each. The preprocess
// reads O and dO, the epilogues write dQ, dK and dV through element pointers
// with element strides [batch, row, head] (head_dim contiguous). lse is the
// forward's log-sum-exp ([batch, q_heads, seqlen_q]; packed: [q_heads,
// total_q]).
//
// The workspace (attn::backwardWorkspaceBytes) holds, per (batch, query
// head) and query position padded to whole query blocks of the
// sequence bound seqlen_q: lse_log2 (the log-sum-exp in base 2, +inf for a
// row without keys and for padding), delta (rowsum(dO * O)) and dq_accum
// (fp32 dQ / scale, head_dim per row, in the kernel's fragment order), and
// with `deterministic` one int32 counter per (batch, query head, query
// block) that orders the blocks' dQ additions by key tile. dK and dV of a
// kv head sum over its query heads in one block (no atomics).
struct AttnBwdParams {
  TensorMapBlob q_map;
  TensorMapBlob k_map;
  TensorMapBlob v_map;
  TensorMapBlob do_map;
  const void *o;
  const void *d_o;
  void *dq;
  void *dk;
  void *dv;
  long long o_strides[3];
  long long do_strides[3];
  long long dq_strides[3];
  long long dk_strides[3];
  long long dv_strides[3];
  const float *lse;
  float *lse_log2;
  float *delta;
  float *dq_accum;
  int *dq_semaphores;
  int deterministic;
  // Blocks of the main kernel the GPU runs at once (its multiprocessors):
  // the deterministic mode's rotated order needs a (batch, kv head)'s key
  // tiles resident together.
  int resident_blocks;
  int batch;
  int seqlen_q;
  int seqlen_k;
  int q_heads;
  int kv_heads;
  // The softmax scale, and it multiplied by log2(e).
  float scale;
  float scale_log2;
  const int *cu_seqlens_q;
  const int *cu_seqlens_k;
  int total_q;
  int total_k;
  // The spec's captured buffers, in declaration order (unused entries null),
  // and the gradients of those declared with `grad`, in declaration order
  // among them, with the capture's extents, cleared by the runtime and
  // accumulated into by the main kernel. With capture_grads_exact, each
  // entry's data is a record of attn_exact::kExactSumWords int64 words per
  // element, word-major (exact_sum.h; in the workspace), which the sum kernel turns into
  // the floats at capture_grad_outputs; otherwise the f32 gradients
  // themselves, added to with float atomics.
  CaptureArg captures[kMaxCaptures];
  CaptureArg capture_grads[kMaxCaptures];
  int capture_grads_exact;
  float *capture_grad_outputs[kMaxCaptures];
  // Optional (null when absent): the forward's tile coverage of the masks
  // for the same shapes and captures (AttnFwdParams::tile_coverage), over
  // the forward's tiles of coverage_block_m x coverage_block_n. The main
  // kernel skips the steps whose tiles it marks empty.
  const unsigned char *tile_coverage;
  int coverage_block_m;
  int coverage_block_n;
  // The step list (a mask_mod's kernel in one pass; in the workspace, else
  // null): per block of the main kernel's grid, bwdStepListEntries words:
  // the count of the steps it walks and the count of the empty steps it
  // does not, then the steps it walks, in order, each (bits 0-30) with bit
  // 31 set when the mask_mod keeps all of its pairs, and at the end of the
  // block's words the empty steps (listed only where dQ's additions are
  // ordered: their turns still count). The step-list kernel writes it, the
  // main kernel's roles walk it.
  unsigned *step_list;
};

// Past head dim 128 the accumulators of dK and dV for 64 keys would not
// fit a consumer's registers. Two consumer warpgroups of one 64-key tile
// split them by columns (bwdSplitsColumns): each holds half of dK's and
// dV's columns and computes Sᵀ and dPᵀ for half of the step's queries,
// which both read from shared memory as Pᵀ and dSᵀ.
constexpr bool bwdSplitsColumns(int headDim, int blockN, int consumers) {
  return headDim > 128 && consumers > 1 && blockN == 64;
}
// Otherwise (one consumer) the backward walks a head's query blocks once per
// 128 columns of dK and dV, a pass. Each pass recomputes Sᵀ and dPᵀ and
// adds its columns of dQ; the deterministic mode counts each pass's
// additions apart. Without `splitsColumns`, the most passes a head dim may
// take (what the host sizes counters by).
constexpr int bwdPasses(int headDim, bool splitsColumns = false) {
  return headDim > 128 && !splitsColumns ? headDim / 128 : 1;
}
// The columns of dK, dV and dQ one pass covers.
constexpr int bwdPassColumns(int headDim, bool splitsColumns = false) {
  return headDim / bwdPasses(headDim, splitsColumns);
}

// The widths of a backward plan's fragments (consumers >= 1), shared by the
// kernel, the emitter's WGMMA shapes and the register estimate.
//
// A step of a multiple of 64 query rows computes dQ = dS K, a consumer's
// piece 64 of its rows (when the step has 64 per consumer) or a share of its
// columns. A step of another multiple of 16 rows (80 at head dim 128, which
// takes 25 % more rows a step than 64 within the consumers' registers)
// cannot give a warpgroup 64 of its rows, so its consumers compute dQ
// transposed, dQᵀ = Kᵀ dSᵀ, each 64 of its columns for all of the step's
// rows (dqTransposed: bwdTransposesDq).
struct BwdWidths {
  bool splitsColumns; // bwdSplitsColumns
  int passColumns;    // of dK, dV and dQ, a pass
  int gradColumns;    // of dK and dV, a consumer's
  int queryColumns;   // of Sᵀ and dPᵀ, a consumer's
  bool dqSplitsRows;  // a dQ piece is 64 rows (64 per consumer), else all of them
  int dqColumns;      // of dQ, a consumer's piece
  bool dqTransposed;  // the piece is dQᵀ: its 64 rows are dQ's columns
  int dqFragmentColumns; // N of the piece's accumulator: dqColumns, or the step's rows
};
constexpr bool bwdTransposesDq(int blockM) { return blockM % 64 != 0; }
constexpr BwdWidths bwdWidths(int headDim, int blockM, int blockN, int consumers) {
  const bool splits = bwdSplitsColumns(headDim, blockN, consumers);
  const int passColumns = bwdPassColumns(headDim, splits);
  const bool dqRows = blockM == 64 * consumers;
  const bool transposed = bwdTransposesDq(blockM);
  const int dqColumns = dqRows ? passColumns : passColumns / consumers;
  return BwdWidths{splits,
                   passColumns,
                   splits ? passColumns / consumers : passColumns,
                   splits ? blockM / consumers : blockM,
                   dqRows,
                   dqColumns,
                   transposed,
                   transposed ? blockM : dqColumns};
}

// With a learnable capture added to by diagonal (q - kv), a backward plan
// with room for them sums a step's diagonals over its key tile in shared
// memory (templates/bwd/diagonal_sums.cuh): a row of a consumer warp's sums
// (its query columns + 15 diagonals, from entry 1), two steps' rows of every
// consumer warp, then a float per consumer thread (the sum an owner carries
// to the next step). Each of the step's diagonals needs an owner thread,
// and owners are assigned modulo the consumer threads. Plans whose
// consumers own key slices in one pass only (head dim <= 128, the plans
// the GPU tests run): past that the default plans have no room for the
// sums anyway.
constexpr int bwdDiagonalRowFloats(int queryColumns) { return queryColumns + 16; }
constexpr bool bwdBlockDiagonalSumsFit(int headDim, int blockM, int blockN, int consumers) {
  return headDim <= 128 && (consumers == 1 || consumers == 2 || consumers == 4) &&
         blockM + blockN - 1 <= 128 * consumers;
}
constexpr long long bwdDiagonalSumBytes(int headDim, int blockM, int blockN, int consumers) {
  return 2LL * 4 * consumers *
             bwdDiagonalRowFloats(bwdWidths(headDim, blockM, blockN, consumers).queryColumns) * 4 +
         128LL * consumers * 4;
}

// The backward's main grid is (key tiles, kv heads, batch), and blocks start
// in the order of their linear index. Under a causal mask a lower key tile
// walks more query blocks, so read x-major, the last (kv head, batch) lanes'
// longest walks would start when little else is left. Read instead
// key-tile-major within groups of kBwdLaneGroup lanes (the last group may
// hold fewer), each group starts its longest walks first and ends with its
// shortest. A bijection from [0, tiles * kvHeads * batches) onto the grid.
// Eight lanes end the tail in a list-scheduling model of 132
// multiprocessors (S >= 2048) while keeping few enough query heads in
// flight that their Q, dO and dQ rows stay in L2.
constexpr unsigned kBwdLaneGroup = 8;
struct BwdGridPosition {
  unsigned keyTile, kvHead, batch;
};
constexpr BwdGridPosition bwdLongestWalksFirst(unsigned linear, unsigned tiles, unsigned kvHeads,
                                               unsigned batches) {
  const unsigned group = linear / (tiles * kBwdLaneGroup);
  const unsigned within = linear - group * tiles * kBwdLaneGroup;
  const unsigned remaining = kvHeads * batches - group * kBwdLaneGroup;
  const unsigned groupLanes = remaining < kBwdLaneGroup ? remaining : kBwdLaneGroup;
  const unsigned lane = group * kBwdLaneGroup + within % groupLanes;
  return BwdGridPosition{within / groupLanes, lane % kvHeads, lane / kvHeads};
}

// Query positions of one (batch, query head) in the backward's workspace:
// seqlen_q rounded up to whole query blocks.
constexpr long long bwdPaddedQueries(long long seqlenQ, int blockM) {
  return (seqlenQ + blockM - 1) / blockM * blockM;
}

#define ATTN_BWD_PREPROCESS_KERNEL_NAME "attn_bwd_preprocess_kernel"
#define ATTN_BWD_KERNEL_NAME "attn_bwd_kernel"
#define ATTN_BWD_CONVERT_KERNEL_NAME "attn_bwd_convert_kernel"
// The exact capture gradients' records to floats: a 1-D grid of
// ATTN_BWD_ROW_THREADS threads, an element a thread at a time.
#define ATTN_BWD_CAPTURE_SUM_KERNEL_NAME "attn_bwd_capture_sum_kernel"
// The step list (AttnBwdParams::step_list): the main kernel's grid, a warp
// a block. Words of one block's list: its two counts, and one entry per
// (query head of the group, query block) at most.
#define ATTN_BWD_STEP_LIST_KERNEL_NAME "attn_bwd_step_list_kernel"
#define ATTN_BWD_STEP_LIST_THREADS 32
constexpr long long bwdStepListEntries(long long seqlenQ, int blockM, int group) {
  return 2 + static_cast<long long>(group) * ((seqlenQ + blockM - 1) / blockM);
}
// The preprocess and the conversion: grid (query blocks of bwd block_m
// rows, q_heads, batch), ATTN_BWD_ROW_THREADS threads, a warp per row at a
// time.
#define ATTN_BWD_ROW_THREADS 256

// A consumer warp's piece in tail_partials: the O fragment of its 16 rows
// (head_dim / 2 floats a thread) and their two log-sum-exps, for 32 threads.
// The runtime sizes the workspace with it and the kernel addresses it.
constexpr long long tailPieceWarpFloats(int headDim) { return (headDim / 2 + 2) * 32LL; }

// Where the words of tile_key_bits start: after one int32 slot per tile
// coverage byte, 256-byte aligned.
constexpr long long tileKeyBitsOffset(long long coverageBytes) {
  return (coverageBytes * 4 + 255) / 256 * 256;
}
// Bytes of one partial tile's words in tile_key_bits.
constexpr long long tileKeyBitsPerTile(int blockM, int blockN) {
  return blockM * 4LL * (blockN <= 128 ? 4 : 8);
}

// Whether a chunkwise linear grid of `blocks` blocks gives most of the
// multiprocessors work; if not, the runtime splits the sequence
// (linearSplitFor), and attn-tile plans for that split.
constexpr bool linearGridFillsGpu(long long blocks, long long multiprocessors) {
  return 10 * blocks >= 9 * multiprocessors;
}

// Parameters of the chunkwise linear attention / retention kernel.
//
// Q, K, V, O as for AttnFwdParams (BSHD, seqlen_q = seqlen_k = seqlen); the
// maps' boxes are one chunk of rows by 64 columns. The state S is
// [batch, q_heads, head_dim (keys), head_dim (values)] fp32 contiguous; the
// key sum z (normalized linear attention) [batch, q_heads, head_dim] fp32.
// Null inputs stand for zero, null outputs are not written. log_decay is the
// gated form's per-token log-decay, [batch, seqlen, q_heads] fp32 contiguous.
struct AttnLinearParams {
  TensorMapBlob q_map;
  TensorMapBlob k_map;
  TensorMapBlob v_map;
  TensorMapBlob o_map;
  const float *state_in;
  float *state_out;
  const float *key_sum_in;
  float *key_sum_out;
  const float *log_decay;
  // Sequence parallelism: with segments > 1 the main kernel's blocks each
  // own a segment of segment_chunks chunks. First the segment kernel cuts
  // the sequence before the last segment (all of it, non-causal) into
  // state_segments pieces of state_chunks chunks (a divisor of
  // segment_chunks, so that pieces are finer than segments and fill the
  // GPU) and writes each piece's own state contribution (from a zero state)
  // into segment_state [batch, q_heads, state_segments, head_dim, head_dim],
  // its key sum into segment_key_sum [batch, q_heads, state_segments,
  // head_dim] and its total log2-decay into segment_log2_decay [batch,
  // q_heads, state_segments]. The fold kernel then replaces each piece's
  // state and key sum by the running fold from state_in through that
  // piece, so that a main block reads its entry state from the slot of the
  // last piece before its segment (the last piece, non-causal). segments =
  // 1 runs the main kernel alone.
  float *segment_state;
  float *segment_key_sum;
  float *segment_log2_decay;
  int segments;
  int segment_chunks;
  int state_segments;
  int state_chunks;
  int batch;
  int seqlen;
  int q_heads;
  int kv_heads;
  float scale;
  // How the backward runs this kernel (the forward: 0, Q | K).
  // heads_swapped: q has kv_heads heads and k, v q_heads (query head h
  // still reads head h / (q_heads / kv_heads) of the kv-headed tensor).
  // feature_map_operands: which of q, k, v the feature map applies to. A
  // walk from the sequence's end (padded to whole chunks, the padding
  // first; each step from token t + 1 to t decaying by token t + 1's
  // log-decay; rows load and store in sequence order) is an entry point of
  // its own, ATTN_LINEAR_REVERSED_KERNEL_NAME.
  int heads_swapped;
  int feature_map_operands;
};
#define ATTN_LINEAR_MAP_Q 1
#define ATTN_LINEAR_MAP_K 2
#define ATTN_LINEAR_MAP_V 4

// Parameters of the one-token (recurrent) step of the same kernel: q, o
// [batch, q_heads, head_dim] and k, v [batch, kv_heads, head_dim] of one
// token, with element strides of the batch and head dimensions (head_dim
// contiguous); the state as above, updated from state_in into state_out
// (they may be the same buffer); log_decay [batch, q_heads] fp32.
struct AttnDecodeParams {
  const void *q;
  const void *k;
  const void *v;
  void *o;
  long long q_strides[2];
  long long k_strides[2];
  long long v_strides[2];
  long long o_strides[2];
  const float *state_in;
  float *state_out;
  const float *key_sum_in;
  float *key_sum_out;
  const float *log_decay;
  int batch;
  int q_heads;
  int kv_heads;
  float scale;
};

#define ATTN_LINEAR_KERNEL_NAME "attn_linear_kernel"
// Value columns of the state one consumer warpgroup of a chunkwise block
// owns (a value slice); a block owns block_n / ATTN_LINEAR_SLICE of them.
#define ATTN_LINEAR_SLICE 64
// Threads of a chunkwise block: a consumer warpgroup per value slice and
// one producer warp.
#define ATTN_LINEAR_THREADS(slices) ((slices) * 128 + 32)
// Chunkwise blocks resident on an SM, as their launch bounds promise: two
// of one slice, one of two. Either way 3 warps share some SM
// sub-partition's 16384 registers: at most 168 a thread.
#define ATTN_LINEAR_BLOCKS_PER_SM(slices) ((slices) == 1 ? 2 : 1)
// Chunks of gated log-decays the producer warp keeps in flight: it copies
// a chunk's this many chunks before it scans them, into a ring of one slot
// more in shared memory.
#define ATTN_LINEAR_DECAY_LOOKAHEAD 2
#define ATTN_LINEAR_DECAY_RING_SLOTS (ATTN_LINEAR_DECAY_LOOKAHEAD + 1)
#define ATTN_DECODE_KERNEL_NAME "attn_linear_decode_kernel"
#define ATTN_LINEAR_SEGMENT_KERNEL_NAME "attn_linear_segment_kernel"
// The chunkwise and segment kernels walking the sequence from its end: in
// the backward module of a causal kernel only (its dV and dK passes).
#define ATTN_LINEAR_REVERSED_KERNEL_NAME "attn_linear_reversed_kernel"
#define ATTN_LINEAR_REVERSED_SEGMENT_KERNEL_NAME "attn_linear_reversed_segment_kernel"
// The fold of the segment kernel's pieces: grid (ceil(elements /
// ATTN_LINEAR_FOLD_THREADS), q_heads, batch), one element a thread, of the
// head_dim^2 state elements and, when the kernel normalizes, then the
// head_dim key sum dims.
#define ATTN_LINEAR_FOLD_KERNEL_NAME "attn_linear_fold_kernel"
#define ATTN_LINEAR_FOLD_THREADS 256
#define ATTN_DECODE_THREADS 128

// The linear family's backward runs the chunkwise kernel above three times
// (a dQ pass in sequence order, a dV and a dK pass walking the sequence from
// its end) around these helper kernels, an element group a thread in blocks
// of ATTN_LINEAR_BWD_THREADS (the gate kernel: a block per (query head,
// batch) of ATTN_LINEAR_BWD_SCAN_THREADS). Tensors are [batch, seqlen,
// heads, head_dim] with element strides of the first three dimensions
// (head_dim contiguous).
struct AttnLinearBackwardParams {
  // The caller's tensors.
  const void *q;
  const void *k;
  void *dq; // d phi(q) after the dQ pass; the query kernel finishes it
  void *dk; // without GQA, d phi(k) after the dK pass; the key kernel finishes it
  void *dv; // without GQA, written by the dV pass
  long long q_strides[3];
  long long k_strides[3];
  long long dq_strides[3];
  long long dk_strides[3];
  long long dv_strides[3];
  const float *log_decay;     // [batch, seqlen, q_heads], gated only
  float *d_log_decay;         // the same; null: not wanted
  const float *state_in;      // [batch, q_heads, head_dim, head_dim]; null: 0
  const float *d_state_out;   // the final state's gradient; null: 0
  float *d_state_in;          // the initial state's gradient; null: not wanted
  // The workspace (GQA only, else null): the reversed passes' outputs per
  // query head, contiguous [batch, seqlen, q_heads, head_dim]; the key sum
  // kernel adds to head_d_phi_k.
  void *head_d_phi_k;
  const void *head_dv;
  // Pass states, [batch, q_heads, head_dim, head_dim] fp32.
  float *state_in_t;          // state_in transposed
  float *d_state_out_scaled;  // d_state_out / scale
  float *d_state_out_t;       // the same, transposed
  float *state_out_t;         // the dQ pass's final state: S_final transposed
  // Normalized linear attention only (else null): o = num / den with
  // den_t = phi(q_t) . Z_t, Z_t = z0 + the key sum through token t (every
  // token, non-causal). The caller's dO and the forward's o (strided as q),
  // the initial key sum z0 and the final key sum's gradient dZ
  // ([batch, q_heads, head_dim] fp32; null: 0), z0's gradient (null: not
  // wanted). Workspace: d_o_scaled = dO / (scale den), which the passes
  // take for dO, contiguous [batch, seqlen, q_heads, head_dim];
  // row_gradient g_t = -(dO_t . o_t) / den_t [batch, seqlen, q_heads];
  // per piece of ATTN_LINEAR_BWD_PIECE tokens, key_pieces [batch, kv_heads,
  // pieces + 1, head_dim] (the sum of phi(k) over the piece, then the sum
  // over the pieces before it, the last slot the total) and query_pieces
  // [batch, q_heads, pieces + 1, head_dim] (the sum of g phi(q) over the
  // piece, then dZ plus the sum over the pieces after it, the last slot
  // dZ plus the total).
  const void *o;
  const void *d_o;
  long long o_strides[3];
  long long d_o_strides[3];
  const float *key_sum_in;
  const float *d_key_sum_out;
  float *d_key_sum_in;
  void *d_o_scaled;
  float *row_gradient;
  float *key_pieces;
  float *query_pieces;
  int pieces;
  int batch;
  int seqlen;
  int q_heads;
  int kv_heads;
  float scale;
};
#define ATTN_LINEAR_BWD_STATES_KERNEL_NAME "attn_linear_bwd_states_kernel"
#define ATTN_LINEAR_BWD_QUERY_KERNEL_NAME "attn_linear_bwd_query_kernel"
#define ATTN_LINEAR_BWD_KEY_KERNEL_NAME "attn_linear_bwd_key_kernel"
#define ATTN_LINEAR_BWD_GATE_KERNEL_NAME "attn_linear_bwd_gate_kernel"
#define ATTN_LINEAR_BWD_INITIAL_STATE_KERNEL_NAME "attn_linear_bwd_initial_state_kernel"
#define ATTN_LINEAR_BWD_THREADS 256
#define ATTN_LINEAR_BWD_SCAN_THREADS 1024
// Normalized linear attention's key sum kernels: the key pieces, the
// denominator and the key sum gradient kernels walk pieces of this many
// tokens, a thread an element group; the two scans run a block per (head,
// batch) of head_dim threads.
#define ATTN_LINEAR_BWD_KEY_PIECES_KERNEL_NAME "attn_linear_bwd_key_pieces_kernel"
#define ATTN_LINEAR_BWD_KEY_SCAN_KERNEL_NAME "attn_linear_bwd_key_scan_kernel"
#define ATTN_LINEAR_BWD_DENOMINATOR_KERNEL_NAME "attn_linear_bwd_denominator_kernel"
#define ATTN_LINEAR_BWD_QUERY_SCAN_KERNEL_NAME "attn_linear_bwd_query_scan_kernel"
#define ATTN_LINEAR_BWD_KEY_SUM_GRADIENT_KERNEL_NAME "attn_linear_bwd_key_sum_gradient_kernel"
#define ATTN_LINEAR_BWD_PIECE 64

// The kernel's entry point name in the emitted translation unit.
#define ATTN_FWD_KERNEL_NAME "attn_fwd_kernel"
// The tile coverage kernel's entry point, in the same unit: grid
// (key tiles, query blocks, batch * q_heads), 256 threads.
#define ATTN_TILE_COVERAGE_KERNEL_NAME "attn_tile_coverage_kernel"
#define ATTN_TILE_COVERAGE_THREADS 256
// The key bits kernels, in the same unit. The slot kernel numbers the
// partial tiles of a tile coverage: one block of ATTN_TILE_SLOT_THREADS;
// parameters (const unsigned char *coverage, long long tiles, int *slots,
// int *partial_tiles), either output null to skip it. The key bits kernel then
// writes each partial tile's bits (AttnFwdParams::tile_key_bits): grid and
// block as the tile coverage kernel's.
#define ATTN_TILE_SLOT_KERNEL_NAME "attn_tile_slot_kernel"
#define ATTN_TILE_SLOT_THREADS 1024
#define ATTN_TILE_KEY_BITS_KERNEL_NAME "attn_tile_key_bits_kernel"
// The work cost kernel's entry point, in the same unit: one warp per work
// tile, ATTN_WORK_COST_THREADS / 32 work tiles per block; its second
// parameter is the int array of costs it writes.
#define ATTN_WORK_COST_KERNEL_NAME "attn_work_cost_kernel"
#define ATTN_WORK_COST_THREADS 128
// The work order kernel's entry point, in the same unit: one block of
// ATTN_WORK_ORDER_THREADS; parameters (const int *costs, int count, int
// policy, int *order), policy one of the two below.
#define ATTN_WORK_ORDER_KERNEL_NAME "attn_work_order_kernel"
#define ATTN_WORK_ORDER_THREADS 1024
#define ATTN_WORK_ORDER_LONGEST_FIRST 0
#define ATTN_WORK_ORDER_OUTLIERS_FIRST 1
// Costs above this many key tiles sort as equal.
#define ATTN_WORK_ORDER_MAX_KEY 4095

} // namespace attn_abi

#endif // ATTN_TEMPLATES_ATTN_PARAMS_H
