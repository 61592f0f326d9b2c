// The backward of normalized linear attention's denominator. The forward
// gives o_t = num_t / den_t with den_t = phi(q_t) . Z_t, where Z_t is the
// initial key sum z0 plus phi(k_j) summed over the keys token t sees. With
// g_t = -(dO_t . o_t) / den_t (0 where den_t is 0):
//
//   num:  the unnormalized backward with dO_t / (scale den_t) for dO (the
//         passes' d_o_scaled);
//   den:  d phi(q)_t += g_t Z_t,
//         d phi(k)_j += sum over the rows t that see key j of g_t phi(q_t)
//                       + dZ (the final key sum's gradient),
//         dz0 = sum over every row of g_t phi(q_t) + dZ.
//
// The sums over the sequence are prefix sums (causal) or totals, taken in
// two levels: a thread walks a piece of ATTN_LINEAR_BWD_PIECE tokens for
// one element group, and a scan over the pieces gives each piece its start.
// Order of launches: key pieces, key scan, denominator, query scan (before
// the passes); key sum gradient (after them), which also applies phi' to dq
// and, without GQA, to dk, so that the query kernel does nothing and the
// key kernel only sums GQA's per-head outputs.
#pragma once

namespace attn_linear_bwd {

constexpr bool kNormalize = attn_linear_bwd_plan::kNormalize;
constexpr bool kCausal = attn_plan::kCausal;
constexpr int kPiece = ATTN_LINEAR_BWD_PIECE;

// A flat item index as (batch, head, piece, element group).
struct PieceGroup {
  int b, h, piece, column;
};
__device__ __forceinline__ PieceGroup pieceGroupOf(const Params &p, long long item, int heads) {
  PieceGroup r;
  r.column = static_cast<int>(item % kGroupsPerRow) * kGroup;
  long long rest = item / kGroupsPerRow;
  r.piece = static_cast<int>(rest % p.pieces);
  rest /= p.pieces;
  r.h = static_cast<int>(rest % heads);
  r.b = static_cast<int>(rest / heads);
  return r;
}

// Slot `piece` of a head's pieces (slot p.pieces: the total).
__device__ __forceinline__ float *pieceSlot(float *pieces, const Params &p, int heads, int b, int h,
                                            int piece) {
  return pieces + ((static_cast<long long>(b) * heads + h) * (p.pieces + 1) + piece) * kHeadDim;
}

__device__ __forceinline__ Group loadFloats(const float *at) {
  const float4 low = *reinterpret_cast<const float4 *>(at);
  const float4 high = *reinterpret_cast<const float4 *>(at + 4);
  return Group{{low.x, low.y, low.z, low.w, high.x, high.y, high.z, high.w}};
}

__device__ __forceinline__ void storeFloats(float *at, const Group &g) {
  *reinterpret_cast<float4 *>(at) = make_float4(g.x[0], g.x[1], g.x[2], g.x[3]);
  *reinterpret_cast<float4 *>(at + 4) = make_float4(g.x[4], g.x[5], g.x[6], g.x[7]);
}

__device__ __forceinline__ void addScaled(Group &sum, float factor, const Group &g) {
#pragma unroll
  for (int i = 0; i < kGroup; ++i)
    sum.x[i] += factor * g.x[i];
}

__device__ __forceinline__ float dotGroups(const Group &a, const Group &b) {
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < kGroup; ++i)
    sum += a.x[i] * b.x[i];
  return sum;
}

__device__ __forceinline__ Group mappedKey(const Params &p, int b, int t, int kvHead, int column) {
  return mapped(unpackGroup(loadGroup(p.k, stridedRow(p.k_strides, b, t, kvHead) + column)));
}

// Z before the piece's first token for query head r.h: z0 plus, causal, the
// key pieces before this one (key_pieces after the key scan), else every
// key.
__device__ __forceinline__ Group keySumBeforePiece(const Params &p, const PieceGroup &r) {
  const int kvHead = r.h / (p.q_heads / p.kv_heads);
  Group z = loadFloats(
      pieceSlot(p.key_pieces, p, p.kv_heads, r.b, kvHead, kCausal ? r.piece : p.pieces) + r.column);
  if (p.key_sum_in)
    addScaled(z, 1.f,
              loadFloats(p.key_sum_in + (static_cast<long long>(r.b) * p.q_heads + r.h) * kHeadDim +
                         r.column));
  return z;
}

// Exclusive scan of one head's piece sums for column threadIdx.x, in place,
// from `start`; the last slot gets the total.
__device__ __forceinline__ float scanPieces(float *slots, int pieces, bool fromEnd, float start) {
  const int column = threadIdx.x;
  float running = start;
  for (int i = 0; i < pieces; ++i) {
    float *slot = slots + (fromEnd ? pieces - 1 - i : i) * kHeadDim + column;
    const float own = *slot;
    *slot = running;
    running += own;
  }
  slots[pieces * kHeadDim + column] = running;
  return running;
}

} // namespace attn_linear_bwd

// Per (batch, kv head, piece, element group): phi(k) summed over the piece.
extern "C" __global__ void __launch_bounds__(ATTN_LINEAR_BWD_THREADS)
    attn_linear_bwd_key_pieces_kernel(
        const __grid_constant__ attn_abi::AttnLinearBackwardParams p) {
  using namespace attn_linear_bwd;
  if constexpr (kNormalize) {
    const long long items = static_cast<long long>(p.batch) * p.kv_heads * p.pieces * kGroupsPerRow;
    forEachItem(items, [&](long long item) {
      const PieceGroup r = pieceGroupOf(p, item, p.kv_heads);
      const int first = r.piece * kPiece, last = min(first + kPiece, p.seqlen);
      Group sum = {};
#pragma unroll 4
      for (int t = first; t < last; ++t)
        addScaled(sum, 1.f, mappedKey(p, r.b, t, r.h, r.column));
      storeFloats(pieceSlot(p.key_pieces, p, p.kv_heads, r.b, r.h, r.piece) + r.column, sum);
    });
  }
}

// Per (kv head, batch), a column a thread: key_pieces to the sums over the
// pieces before each, and the total.
extern "C" __global__ void __launch_bounds__(ATTN_LINEAR_BWD_THREADS)
    attn_linear_bwd_key_scan_kernel(const __grid_constant__ attn_abi::AttnLinearBackwardParams p) {
  using namespace attn_linear_bwd;
  if constexpr (kNormalize)
    if (threadIdx.x < kHeadDim)
      scanPieces(pieceSlot(p.key_pieces, p, p.kv_heads, blockIdx.y, blockIdx.x, 0), p.pieces, false,
                 0.f);
}

// Per (batch, query head, piece, element group), whole warps together (a
// row's groups reduce by shuffles): for each token, den_t, the passes' dO
// and g_t; and the piece's sum of g_t phi(q_t) into query_pieces.
extern "C" __global__ void __launch_bounds__(ATTN_LINEAR_BWD_THREADS)
    attn_linear_bwd_denominator_kernel(
        const __grid_constant__ attn_abi::AttnLinearBackwardParams p) {
  using namespace attn_linear_bwd;
  if constexpr (kNormalize) {
    const int group = p.q_heads / p.kv_heads;
    const long long items = static_cast<long long>(p.batch) * p.q_heads * p.pieces * kGroupsPerRow;
    forEachItemByWarps(items, [&](long long item, bool active) {
      const PieceGroup r = pieceGroupOf(p, active ? item : 0, p.q_heads);
      Group z = keySumBeforePiece(p, r), weighted = {};
      for (int i = 0; i < kPiece; ++i) {
        const int t = r.piece * kPiece + i;
        const bool row = active && t < p.seqlen;
        Group phiQ = {}, dO = {};
        float den = 0.f, dOdotO = 0.f;
        if (row) {
          if (kCausal)
            addScaled(z, 1.f, mappedKey(p, r.b, t, r.h / group, r.column));
          phiQ =
              mapped(unpackGroup(loadGroup(p.q, stridedRow(p.q_strides, r.b, t, r.h) + r.column)));
          dO = unpackGroup(loadGroup(p.d_o, stridedRow(p.d_o_strides, r.b, t, r.h) + r.column));
          const Group o =
              unpackGroup(loadGroup(p.o, stridedRow(p.o_strides, r.b, t, r.h) + r.column));
          den = dotGroups(phiQ, z);
          dOdotO = dotGroups(dO, o);
        }
        den = sumOverRow(den);
        dOdotO = sumOverRow(dOdotO);
        if (row) {
          const float inverse = den != 0.f ? 1.f / (p.scale * den) : 0.f;
          const float gradient = den != 0.f ? -dOdotO / den : 0.f;
          Group scaled;
#pragma unroll
          for (int e = 0; e < kGroup; ++e)
            scaled.x[e] = dO.x[e] * inverse;
          storeGroup(p.d_o_scaled, packedRow(p, p.q_heads, r.b, t, r.h) + r.column,
                     packGroup(scaled));
          if (r.column == 0)
            p.row_gradient[(static_cast<long long>(r.b) * p.seqlen + t) * p.q_heads + r.h] =
                gradient;
          addScaled(weighted, gradient, phiQ);
        }
      }
      if (active)
        storeFloats(pieceSlot(p.query_pieces, p, p.q_heads, r.b, r.h, r.piece) + r.column,
                    weighted);
    });
  }
}

// Per (query head, batch), a column a thread: query_pieces to dZ plus the
// sums over the pieces after each, and the total, which is z0's gradient.
// With no tokens (no pieces, no workspace) z0's gradient is dZ.
extern "C" __global__ void __launch_bounds__(ATTN_LINEAR_BWD_THREADS)
    attn_linear_bwd_query_scan_kernel(
        const __grid_constant__ attn_abi::AttnLinearBackwardParams p) {
  using namespace attn_linear_bwd;
  if constexpr (kNormalize) {
    const int column = threadIdx.x;
    if (column >= kHeadDim)
      return;
    const long long head = static_cast<long long>(blockIdx.y) * p.q_heads + blockIdx.x;
    const float dZ = p.d_key_sum_out ? p.d_key_sum_out[head * kHeadDim + column] : 0.f;
    const float total =
        p.query_pieces
            ? scanPieces(pieceSlot(p.query_pieces, p, p.q_heads, blockIdx.y, blockIdx.x, 0),
                         p.pieces, true, dZ)
            : dZ;
    if (p.d_key_sum_in)
      p.d_key_sum_in[head * kHeadDim + column] = total;
  }
}

// Per (batch, query head, piece, element group), after the passes: d phi(q)
// (in dq) gains g_t Z_t and becomes dq, walking the piece forward; this
// head's d phi(k) (in dk, or its per-head output with GQA) gains the sum of
// g phi(q) over the rows that see the key plus dZ, walking it backward, and
// without GQA becomes dk.
extern "C" __global__ void __launch_bounds__(ATTN_LINEAR_BWD_THREADS)
    attn_linear_bwd_key_sum_gradient_kernel(
        const __grid_constant__ attn_abi::AttnLinearBackwardParams p) {
  using namespace attn_linear_bwd;
  if constexpr (kNormalize) {
    const int group = p.q_heads / p.kv_heads;
    const long long items = static_cast<long long>(p.batch) * p.q_heads * p.pieces * kGroupsPerRow;
    forEachItem(items, [&](long long item) {
      const PieceGroup r = pieceGroupOf(p, item, p.q_heads);
      const int first = r.piece * kPiece, last = min(first + kPiece, p.seqlen);
      auto rowGradient = [&](int t) {
        return p.row_gradient[(static_cast<long long>(r.b) * p.seqlen + t) * p.q_heads + r.h];
      };
      Group z = keySumBeforePiece(p, r);
      for (int t = first; t < last; ++t) {
        if (kCausal)
          addScaled(z, 1.f, mappedKey(p, r.b, t, r.h / group, r.column));
        const long long at = stridedRow(p.dq_strides, r.b, t, r.h) + r.column;
        Group dPhiQ = unpackGroup(loadGroup(p.dq, at));
        addScaled(dPhiQ, rowGradient(t), z);
        if constexpr (kMap != FeatureMap::Identity)
          applyMapDerivative(
              dPhiQ, unpackGroup(loadGroup(p.q, stridedRow(p.q_strides, r.b, t, r.h) + r.column)));
        storeGroup(p.dq, at, packGroup(dPhiQ));
      }
      Group seen = loadFloats(
          pieceSlot(p.query_pieces, p, p.q_heads, r.b, r.h, kCausal ? r.piece : p.pieces) +
          r.column);
      for (int t = last - 1; t >= first; --t) {
        if (kCausal)
          addScaled(
              seen, rowGradient(t),
              mapped(unpackGroup(loadGroup(p.q, stridedRow(p.q_strides, r.b, t, r.h) + r.column))));
        const long long at = p.head_d_phi_k ? packedRow(p, p.q_heads, r.b, t, r.h) + r.column
                                            : stridedRow(p.dk_strides, r.b, t, r.h) + r.column;
        void *dPhiKOut = p.head_d_phi_k ? p.head_d_phi_k : p.dk;
        Group dPhiK = unpackGroup(loadGroup(dPhiKOut, at));
        addScaled(dPhiK, 1.f, seen);
        if (kMap != FeatureMap::Identity && !p.head_d_phi_k)
          applyMapDerivative(
              dPhiK, unpackGroup(loadGroup(p.k, stridedRow(p.k_strides, r.b, t, r.h) + r.column)));
        storeGroup(dPhiKOut, at, packGroup(dPhiK));
      }
    });
  }
}
