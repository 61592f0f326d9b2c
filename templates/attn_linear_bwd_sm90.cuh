// The backward of linear attention and retention: the helper kernels around
// three runs of the chunkwise kernel (attn_linear_sm90.cuh, with the spec's
// feature map applied to the operands each run names).
//
// With phi the feature map, B_t the inclusive prefix sum of the log-decays
// and dS the final state's incoming gradient, the gradients are three
// chunkwise linear attentions of their own:
//
//   d phi(q)_t = s sum_{j <= t} e^{B_t - B_j} (dO_t . v_j) phi(k_j)
//                + s e^{B_t} S0 dO_t
//     the chunkwise kernel over (q, k, v) = (dO, v, phi(k)) from state
//     S0^T; its final state is S_final^T.
//   dv_j = s sum_{t >= j} e^{B_t - B_j} (phi(k_j) . phi(q_t)) dO_t
//          + e^{B_T - B_j} dS^T phi(k_j)
//     the chunkwise kernel walking the sequence from its end (reverse),
//     (q, k, v) = (phi(k), phi(q), dO), from state dS / s; the reversed
//     walk shifts the log-decays by one token so that its causal decay
//     spans the same tokens. Its final state is e^{-g_0} dS0 / s, the
//     initial state's gradient.
//   d phi(k)_j = s sum_{t >= j} e^{B_t - B_j} (v_j . dO_t) phi(q_t)
//                + e^{B_T - B_j} dS v_j
//     the same walk over (v, dO, phi(q)) from state dS^T / s.
//
// The reversed passes run per query head (their q is the kv head's tensor:
// heads_swapped); with GQA they write per-head outputs that the key kernel
// sums over each kv head's query heads. The key kernel applies phi' to dk,
// the query kernel to dq. The gate's gradient: with
// dB_t = phi(q_t) . d phi(q)_t - phi(k_t) . d phi(k)_t (per query head),
// plus <dS, S_final> at the last token, the gradient of g_t is the suffix
// sum of dB from t on.
//
// Normalized linear attention divides by a key sum; its kernels are in
// linear/key_sum_bwd.cuh, and the passes then run unnormalized.
//
// The plan arrives through namespaces attn_plan (the chunkwise kernel's)
// and attn_linear_bwd_plan (the spec's feature map and normalization).
#pragma once

namespace attn_linear_bwd {

using namespace attn_dev;
using Element = attn_plan::Element;
using Params = attn_abi::AttnLinearBackwardParams;

constexpr FeatureMap kMap = attn_linear_bwd_plan::kFeatureMap;
constexpr int kHeadDim = attn_plan::kHeadDim;
// A thread's element group: 8 elements, 16 bytes.
constexpr int kGroup = 8;
constexpr int kGroupsPerRow = kHeadDim / kGroup;
static_assert(32 % kGroupsPerRow == 0, "a row's groups lie in one warp");

// Eight elements in fp32.
struct Group {
  float x[kGroup];
};

__device__ __forceinline__ uint4 loadGroup(const void *base, long long element) {
  return *reinterpret_cast<const uint4 *>(static_cast<const unsigned short *>(base) + element);
}

__device__ __forceinline__ void storeGroup(void *base, long long element, uint4 words) {
  *reinterpret_cast<uint4 *>(static_cast<unsigned short *>(base) + element) = words;
}

__device__ __forceinline__ Group unpackGroup(uint4 words) {
  Group g;
  unpackPair<Element>(words.x, g.x[0], g.x[1]);
  unpackPair<Element>(words.y, g.x[2], g.x[3]);
  unpackPair<Element>(words.z, g.x[4], g.x[5]);
  unpackPair<Element>(words.w, g.x[6], g.x[7]);
  return g;
}

__device__ __forceinline__ uint4 packGroup(const Group &g) {
  return make_uint4(packPair<Element>(g.x[0], g.x[1]), packPair<Element>(g.x[2], g.x[3]),
                    packPair<Element>(g.x[4], g.x[5]), packPair<Element>(g.x[6], g.x[7]));
}

// d phi(x) / dx, with phi as the chunkwise kernel evaluates it.
__device__ __forceinline__ float featureMapDerivative(float x) {
  if constexpr (kMap == FeatureMap::Relu)
    return x > 0.f ? 1.f : 0.f;
  else if constexpr (kMap == FeatureMap::EluPlusOne)
    return x > 0.f ? 1.f : fastExp2(x * kLog2e);
  else
    return 1.f;
}

// gradient *= phi'(input), elementwise: d phi(x) into dx.
__device__ __forceinline__ void applyMapDerivative(Group &gradient, const Group &input) {
#pragma unroll
  for (int i = 0; i < kGroup; ++i)
    gradient.x[i] *= featureMapDerivative(input.x[i]);
}

__device__ __forceinline__ Group mapped(const Group &g) {
  Group out;
#pragma unroll
  for (int i = 0; i < kGroup; ++i)
    out.x[i] = featureMap<kMap>(g.x[i]);
  return out;
}

// Element offset of (batch, token, head) in a caller's strided tensor and in
// a contiguous workspace copy of `heads` heads.
__device__ __forceinline__ long long stridedRow(const long long strides[3], int b, int t, int h) {
  return b * strides[0] + t * strides[1] + h * strides[2];
}
__device__ __forceinline__ long long packedRow(const Params &p, int heads, int b, int t, int h) {
  return ((static_cast<long long>(b) * p.seqlen + t) * heads + h) * kHeadDim;
}

// A flat item index as (batch, token, head, element group).
struct RowGroup {
  int b, t, h, column;
};
__device__ __forceinline__ RowGroup rowGroupOf(const Params &p, long long item, int heads) {
  RowGroup r;
  r.column = static_cast<int>(item % kGroupsPerRow) * kGroup;
  long long row = item / kGroupsPerRow;
  r.h = static_cast<int>(row % heads);
  row /= heads;
  r.t = static_cast<int>(row % p.seqlen);
  r.b = static_cast<int>(row / p.seqlen);
  return r;
}

// fn(item) for this thread's items of [0, items), striding over the grid.
template <class Fn> __device__ __forceinline__ void forEachItem(long long items, Fn fn) {
  for (long long item = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
       item < items; item += static_cast<long long>(gridDim.x) * blockDim.x)
    fn(item);
}

// fn(item, active) as forEachItem, but whole warps go round together (fn
// may shuffle within the warp); active says whether item < items.
template <class Fn> __device__ __forceinline__ void forEachItemByWarps(long long items, Fn fn) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long first = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x -
                         (threadIdx.x % 32);
       first < items; first += stride) {
    const long long item = first + threadIdx.x % 32;
    fn(item, item < items);
  }
}

__device__ __forceinline__ float sumOverRow(float value) {
#pragma unroll
  for (int offset = 1; offset < kGroupsPerRow; offset *= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

// Where the head's state (head_dim² floats) starts in a state buffer.
__device__ __forceinline__ long long stateBase(const attn_abi::AttnLinearBackwardParams &p,
                                               long long batch, long long head) {
  return (batch * p.q_heads + head) * kHeadDim * kHeadDim;
}

} // namespace attn_linear_bwd

// The pass states: state_in transposed (the dQ pass's), d_state_out / s
// (the dV pass's) and its transpose (the dK pass's). Grid (ceil(D^2 /
// ATTN_LINEAR_BWD_THREADS), q_heads, batch).
extern "C" __global__ void __launch_bounds__(ATTN_LINEAR_BWD_THREADS)
    attn_linear_bwd_states_kernel(const __grid_constant__ attn_abi::AttnLinearBackwardParams p) {
  using namespace attn_linear_bwd;
  const int element = blockIdx.x * ATTN_LINEAR_BWD_THREADS + threadIdx.x;
  if (element >= kHeadDim * kHeadDim)
    return;
  const int key = element / kHeadDim, value = element % kHeadDim;
  const long long base = stateBase(p, blockIdx.z, blockIdx.y);
  const long long transposed = base + value * kHeadDim + key;
  if (p.state_in)
    p.state_in_t[transposed] = p.state_in[base + element];
  if (p.d_state_out) {
    const float scaled = p.d_state_out[base + element] / p.scale;
    p.d_state_out_scaled[base + element] = scaled;
    p.d_state_out_t[transposed] = scaled;
  }
}

// Per query row: dq = d phi(q) phi'(q) in place (feature maps), and the
// gate's dB_t = phi(q_t) . d phi(q)_t - phi(k_t) . d phi(k)_t (gated, when
// its gradient is wanted) into d_log_decay, which the gate kernel then sums.
extern "C" __global__ void __launch_bounds__(ATTN_LINEAR_BWD_THREADS)
    attn_linear_bwd_query_kernel(const __grid_constant__ attn_abi::AttnLinearBackwardParams p) {
  using namespace attn_linear_bwd;
  if (attn_linear_bwd_plan::kNormalize ||
      (kMap == FeatureMap::Identity && !(attn_plan::kGated && p.d_log_decay)))
    return; // dq is d phi(q) already, or the key sum gradient kernel's
  const int group = p.q_heads / p.kv_heads;
  const long long items = static_cast<long long>(p.batch) * p.seqlen * p.q_heads * kGroupsPerRow;
  // A row's groups reduce by shuffles.
  forEachItemByWarps(items, [&](long long item, bool active) {
    const RowGroup r = rowGroupOf(p, active ? item : 0, p.q_heads);
    float gate = 0.f;
    if (active) {
      const long long dqAt = stridedRow(p.dq_strides, r.b, r.t, r.h) + r.column;
      const Group dPhiQ = unpackGroup(loadGroup(p.dq, dqAt));
      const Group q = unpackGroup(loadGroup(p.q, stridedRow(p.q_strides, r.b, r.t, r.h) + r.column));
      if constexpr (kMap != FeatureMap::Identity) {
        Group dq = dPhiQ;
        applyMapDerivative(dq, q);
        storeGroup(p.dq, dqAt, packGroup(dq));
      }
      if (attn_plan::kGated && p.d_log_decay) {
        const Group phiQ = mapped(q);
        const Group phiK = mapped(unpackGroup(
            loadGroup(p.k, stridedRow(p.k_strides, r.b, r.t, r.h / group) + r.column)));
        // This head's d phi(k): its own output with GQA, else dk before
        // the key kernel finishes it.
        const Group dPhiK = unpackGroup(
            p.head_d_phi_k
                ? loadGroup(p.head_d_phi_k, packedRow(p, p.q_heads, r.b, r.t, r.h) + r.column)
                : loadGroup(p.dk, stridedRow(p.dk_strides, r.b, r.t, r.h) + r.column));
#pragma unroll
        for (int i = 0; i < kGroup; ++i)
          gate += phiQ.x[i] * dPhiQ.x[i] - phiK.x[i] * dPhiK.x[i];
      }
    }
    if (attn_plan::kGated && p.d_log_decay) {
      gate = sumOverRow(gate);
      if (active && r.column == 0)
        p.d_log_decay[(static_cast<long long>(r.b) * p.seqlen + r.t) * p.q_heads + r.h] = gate;
    }
  });
}

// Per kv row: dk = phi'(k) d phi(k) and dv, summed over the kv head's
// query heads (GQA: the reversed passes' per-head outputs); without GQA the
// passes wrote dk and dv, and dk takes phi' in place.
extern "C" __global__ void __launch_bounds__(ATTN_LINEAR_BWD_THREADS)
    attn_linear_bwd_key_kernel(const __grid_constant__ attn_abi::AttnLinearBackwardParams p) {
  using namespace attn_linear_bwd;
  const bool perHead = p.head_d_phi_k != nullptr;
  if ((kMap == FeatureMap::Identity || attn_linear_bwd_plan::kNormalize) && !perHead)
    return; // dk is d phi(k) already, or the key sum gradient kernel's
  const int group = p.q_heads / p.kv_heads;
  const long long items = static_cast<long long>(p.batch) * p.seqlen * p.kv_heads * kGroupsPerRow;
  forEachItem(items, [&](long long item) {
    const RowGroup r = rowGroupOf(p, item, p.kv_heads);
    const long long dkAt = stridedRow(p.dk_strides, r.b, r.t, r.h) + r.column;
    Group dPhiK = {}, dv = {};
    if (perHead) {
      for (int g = 0; g < group; ++g) {
        const long long in = packedRow(p, p.q_heads, r.b, r.t, r.h * group + g) + r.column;
        const Group headDPhiK = unpackGroup(loadGroup(p.head_d_phi_k, in));
        const Group headDv = unpackGroup(loadGroup(p.head_dv, in));
#pragma unroll
        for (int i = 0; i < kGroup; ++i) {
          dPhiK.x[i] += headDPhiK.x[i];
          dv.x[i] += headDv.x[i];
        }
      }
      storeGroup(p.dv, stridedRow(p.dv_strides, r.b, r.t, r.h) + r.column, packGroup(dv));
    } else {
      dPhiK = unpackGroup(loadGroup(p.dk, dkAt));
    }
    if constexpr (kMap != FeatureMap::Identity) {
      applyMapDerivative(
          dPhiK, unpackGroup(loadGroup(p.k, stridedRow(p.k_strides, r.b, r.t, r.h) + r.column)));
    }
    storeGroup(p.dk, dkAt, packGroup(dPhiK));
  });
}

// The gate's gradient of one (query head, batch): d_log_decay holds dB;
// each is replaced by its suffix sum, which starts from <dS, S_final>.
// Thread i walks the i-th last stretch of tokens, so that the threads'
// exclusive prefix sum is the suffix sum past each stretch.
extern "C" __global__ void __launch_bounds__(ATTN_LINEAR_BWD_SCAN_THREADS)
    attn_linear_bwd_gate_kernel(const __grid_constant__ attn_abi::AttnLinearBackwardParams p) {
  using namespace attn_linear_bwd;
  constexpr int kThreads = ATTN_LINEAR_BWD_SCAN_THREADS, kWarps = kThreads / 32;
  static_assert(kWarps == 32, "warp 0 scans one total per warp, a lane each");
  __shared__ float warpSums[kWarps];
  __shared__ float finalInner;
  const int head = blockIdx.x, batch = blockIdx.y, thread = threadIdx.x;
  const int lane = thread % 32, warp = thread / 32;

  // <dS, S_final>, with S_final transposed in state_out_t.
  float inner = 0.f;
  if (p.d_state_out) {
    const long long base = stateBase(p, batch, head);
    for (int e = thread; e < kHeadDim * kHeadDim; e += kThreads)
      inner += p.d_state_out[base + e] *
               p.state_out_t[base + (e % kHeadDim) * kHeadDim + e / kHeadDim];
  }
  for (int offset = 16; offset > 0; offset /= 2)
    inner += __shfl_xor_sync(0xffffffffu, inner, offset);
  if (lane == 0)
    warpSums[warp] = inner;
  __syncthreads();
  if (thread == 0) {
    float total = 0.f;
    for (int w = 0; w < kWarps; ++w)
      total += warpSums[w];
    finalInner = total;
  }
  __syncthreads();

  const int stretch = (p.seqlen + kThreads - 1) / kThreads;
  const int last = p.seqlen - thread * stretch; // one past this thread's last token
  const int first = max(last - stretch, 0);
  float *gradient = p.d_log_decay + static_cast<long long>(batch) * p.seqlen * p.q_heads + head;
  const long long step = p.q_heads;
  float own = 0.f;
  for (int t = first; t < last; ++t)
    own += gradient[t * step];

  float prefix = own;
#pragma unroll
  for (int offset = 1; offset < 32; offset *= 2) {
    const float other = __shfl_up_sync(0xffffffffu, prefix, offset);
    if (lane >= offset)
      prefix += other;
  }
  if (lane == 31)
    warpSums[warp] = prefix;
  __syncthreads();
  if (warp == 0) {
    float total = warpSums[lane];
#pragma unroll
    for (int offset = 1; offset < 32; offset *= 2) {
      const float other = __shfl_up_sync(0xffffffffu, total, offset);
      if (lane >= offset)
        total += other;
    }
    warpSums[lane] = total;
  }
  __syncthreads();
  float running = finalInner + prefix - own + (warp > 0 ? warpSums[warp - 1] : 0.f);
  for (int t = last - 1; t >= first; --t) {
    running += gradient[t * step];
    gradient[t * step] = running;
  }
}

// The initial state's gradient: the dV pass left e^{-g_0} dS0 / s in
// d_state_in; scaled here. An empty sequence passes dS through. Grid as
// the states kernel's.
extern "C" __global__ void __launch_bounds__(ATTN_LINEAR_BWD_THREADS)
    attn_linear_bwd_initial_state_kernel(
        const __grid_constant__ attn_abi::AttnLinearBackwardParams p) {
  using namespace attn_linear_bwd;
  const int element = blockIdx.x * ATTN_LINEAR_BWD_THREADS + threadIdx.x;
  if (element >= kHeadDim * kHeadDim)
    return;
  const int head = blockIdx.y, batch = blockIdx.z;
  const long long at = stateBase(p, batch, head) + element;
  if (p.seqlen == 0) {
    p.d_state_in[at] = p.d_state_out ? p.d_state_out[at] : 0.f;
    return;
  }
  const float firstLogDecay =
      attn_plan::kGated ? p.log_decay[static_cast<long long>(batch) * p.seqlen * p.q_heads + head]
                        : attn_plan::logDecayOfHead(head);
  p.d_state_in[at] *= p.scale * expf(firstLogDecay);
}

#include "linear/key_sum_bwd.cuh"
