// The backward's kernels around the main kernel (attn_bwd_sm90.cuh): the
// preprocess, which prepares the per-row inputs in the workspace, and the
// conversion of dQ's fp32 accumulator, over a grid (query blocks, q_heads,
// batch) of ATTN_BWD_ROW_THREADS threads each; and the reading of the
// exact capture gradients' sums.
#pragma once

namespace attn_bwd {

constexpr int kRowWarps = ATTN_BWD_ROW_THREADS / 32;
// Each lane of a row's warp reads head_dim / 32 elements: 2 to 8.
constexpr int kLaneElements = kHeadDim / 32;
static_assert(kLaneElements % 2 == 0 && kLaneElements <= 8, "whole 16-bit pairs a lane");

// Element offset of (row, head) in a BSHD tensor with element strides
// [batch, row, head].
__device__ __forceinline__ i64 rowElement(const long long (&strides)[3], const Sequence &sequence,
                                          int query, int head) {
  return sequence.mapBatch * strides[0] + (static_cast<i64>(sequence.rowQ) + query) * strides[1] +
         static_cast<i64>(head) * strides[2];
}

// A lane's kLaneElements consecutive elements of a row as fp32.
__device__ __forceinline__ void loadLaneElements(const void *tensor, i64 element,
                                                 float (&values)[kLaneElements]) {
  const u32 *words = reinterpret_cast<const u32 *>(static_cast<const unsigned char *>(tensor) +
                                                   element * kElementBytes);
#pragma unroll
  for (int i = 0; i < kLaneElements / 2; ++i)
    unpackPair<Element>(__ldg(words + i), values[2 * i], values[2 * i + 1]);
}

} // namespace attn_bwd

// delta = rowsum(dO * O) and the log-sum-exp in base 2 (+inf for rows
// without keys and for the padding), per query row of the workspace; clears
// the block's dQ accumulator and, for the deterministic mode, its counter.
extern "C" __global__ void __launch_bounds__(ATTN_BWD_ROW_THREADS)
    attn_bwd_preprocess_kernel(const __grid_constant__ attn_abi::AttnBwdParams p) {
  using namespace attn_bwd;
  const int queryBlock = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  const Sequence sequence = sequenceOf(p, batch);
  const i64 stats = rowStatsBase(p, batch, head) + static_cast<i64>(queryBlock) * kBlockM;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int row = warp; row < kBlockM; row += kRowWarps) {
    const int query = queryBlock * kBlockM + row;
    float sum = 0.f, lseLog2 = __int_as_float(0x7f800000);
    if (query < sequence.seqlenQ) {
      float output[kLaneElements], outputGradient[kLaneElements];
      loadLaneElements(p.o, rowElement(p.o_strides, sequence, query, head) + lane * kLaneElements,
                       output);
      loadLaneElements(p.d_o,
                       rowElement(p.do_strides, sequence, query, head) + lane * kLaneElements,
                       outputGradient);
#pragma unroll
      for (int i = 0; i < kLaneElements; ++i)
        sum += output[i] * outputGradient[i];
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2)
        sum += __shfl_xor_sync(0xffffffffu, sum, offset);
      const i64 lseIndex = p.cu_seqlens_q
                               ? static_cast<i64>(head) * p.total_q + sequence.rowQ + query
                               : (static_cast<i64>(batch) * p.q_heads + head) * p.seqlen_q + query;
      const float lse = __ldg(p.lse + lseIndex);
      if (lse != negativeInfinity())
        lseLog2 = lse * kLog2e;
    }
    if (lane == 0) {
      p.lse_log2[stats + row] = lseLog2;
      p.delta[stats + row] = sum;
    }
  }
  float4 *accumulator = reinterpret_cast<float4 *>(dqAccumBlock(p, batch, head, queryBlock));
  for (int i = threadIdx.x; i < kBlockM * kHeadDim / 4; i += ATTN_BWD_ROW_THREADS)
    accumulator[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  if (orderedAdditions(p) && threadIdx.x < kPasses) {
    const i64 queryBlocks = attn_abi::bwdPaddedQueries(p.seqlen_q, kBlockM) / kBlockM;
    p.dq_semaphores[((static_cast<i64>(batch) * p.q_heads + head) * queryBlocks + queryBlock) *
                        kPasses +
                    threadIdx.x] = 0;
  }
}

namespace attn_bwd {
// Where element (row, column) of a query block's dQ lies in its accumulator
// (stageDqPiece's fragment order): the pass and its piece, then the
// fragment register i of thread t (warp w, lane l) of the m64 accumulator
// holding it.
__device__ __forceinline__ int dqAccumIndex(int row, int column) {
  const int pass = column / kPassColumns, passColumn = column % kPassColumns;
  const int piece =
      pass * kConsumers + (kDqSplitsRows ? row / 64 : passColumn / kDqColumns);
  const int pieceRow = row % 64, pieceColumn = passColumn % kDqColumns;
  const int warp = pieceRow / 16, half = (pieceRow % 16) / 8;
  const int lane = (pieceRow % 8) * 4 + (pieceColumn % 8) / 2;
  const int i = (pieceColumn / 8) * 4 + half * 2 + pieceColumn % 2;
  return piece * kDqPieceFloats + (i / 4) * kWarpgroupThreads * 4 +
         (warp * 32 + lane) * 4 + i % 4;
}

// The transposed accumulator's conversion (kDqTransposed): 16 bytes a thread
// and step, read in order. Float4 k of a piece is register group k / 128 of
// thread k % 128 (warp w, lane l): rows 8 (k / 128) + 2 (l % 4) + {0, 1} of
// columns 16 w + l / 4 + {0, 8}; the warp's stores cover whole 32-byte
// segments of 8 rows. (Reading dQ a row at a time would touch a 32-byte
// sector for every 4-byte value.)
__device__ __forceinline__ void convertTransposedDq(const attn_abi::AttnBwdParams &p,
                                                    const Sequence &sequence, const float *block,
                                                    int queryBlock, int head, int rows) {
  unsigned char *dq = static_cast<unsigned char *>(p.dq);
  const auto store = [&](int row, int column, u32 pair) {
    if (row >= rows)
      return;
    const i64 element = rowElement(p.dq_strides, sequence, queryBlock * kBlockM + row, head) + column;
    unsigned short *target = reinterpret_cast<unsigned short *>(dq + element * kElementBytes);
    target[0] = static_cast<unsigned short>(pair & 0xffffu);
    target[8] = static_cast<unsigned short>(pair >> 16);
  };
  const float4 *accumulator = reinterpret_cast<const float4 *>(block);
  constexpr int kPieceVectors = kDqPieceFloats / 4;
  for (int k = threadIdx.x; k < kConsumers * kPieceVectors; k += ATTN_BWD_ROW_THREADS) {
    const float4 value = accumulator[k];
    const int piece = k / kPieceVectors, within = k % kPieceVectors;
    const int thread = within % kWarpgroupThreads, lane = thread % 32;
    const int row = within / kWarpgroupThreads * 8 + 2 * (lane % 4);
    const int column = piece * 64 + thread / 32 * 16 + lane / 4;
    store(row, column, packPair<Element>(value.x * p.scale, value.z * p.scale));
    store(row + 1, column, packPair<Element>(value.y * p.scale, value.w * p.scale));
  }
}
} // namespace attn_bwd

// dQ = scale * the accumulator, rounded to the element type, for the rows
// inside the sequence: a pair of adjacent columns a thread and step, or
// where dQ was computed transposed, convertTransposedDq.
extern "C" __global__ void __launch_bounds__(ATTN_BWD_ROW_THREADS)
    attn_bwd_convert_kernel(const __grid_constant__ attn_abi::AttnBwdParams p) {
  using namespace attn_bwd;
  const int queryBlock = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  const Sequence sequence = sequenceOf(p, batch);
  const float *accumulator = dqAccumBlock(p, batch, head, queryBlock);
  const int rows = min(kBlockM, sequence.seqlenQ - queryBlock * kBlockM);
  if constexpr (kDqTransposed) {
    convertTransposedDq(p, sequence, accumulator, queryBlock, head, rows);
  } else {
    unsigned char *dq = static_cast<unsigned char *>(p.dq);
    for (int pair = threadIdx.x; pair < rows * kHeadDim / 2; pair += ATTN_BWD_ROW_THREADS) {
      const int row = pair / (kHeadDim / 2), column = 2 * (pair % (kHeadDim / 2));
      const float2 value =
          *reinterpret_cast<const float2 *>(accumulator + dqAccumIndex(row, column));
      const i64 element =
          rowElement(p.dq_strides, sequence, queryBlock * kBlockM + row, head) + column;
      *reinterpret_cast<u32 *>(dq + element * kElementBytes) =
          packPair<Element>(value.x * p.scale, value.y * p.scale);
    }
  }
}

// Each element of each capture gradient from its record of exact sums
// (attn_exact::exactSumValue), when the main kernel kept them.
extern "C" __global__ void __launch_bounds__(ATTN_BWD_ROW_THREADS)
    attn_bwd_capture_sum_kernel(const __grid_constant__ attn_abi::AttnBwdParams p) {
  using namespace attn_exact;
  const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (int capture = 0; capture < attn_abi::kMaxCaptures; ++capture) {
    float *output = p.capture_grad_outputs[capture];
    if (!output)
      continue;
    const attn_abi::CaptureArg &records = p.capture_grads[capture];
    const long long elements = attn_abi::captureElements(records);
    const long long *words = static_cast<const long long *>(records.data);
    for (long long element = first; element < elements; element += stride) {
      long long record[kExactSumWords];
      for (int word = 0; word < kExactSumWords; ++word)
        record[word] = words[exactWordOffset(word, element, elements)];
      output[element] = exactSumValue(record);
    }
  }
}
