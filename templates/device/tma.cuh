// TMA (cp.async.bulk.tensor) loads of 4-D tiles described by a tensor map in
// kernel parameter space; completion is signalled on an mbarrier.
#pragma once

namespace attn_dev {

__device__ __forceinline__ void prefetchTensorMap(const void *tensorMap) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<u64>(tensorMap)) : "memory");
}

// Loads the box at coordinates (c0 innermost .. c3) into shared memory at
// `destination`; out-of-bounds elements are zero-filled by the copy engine.
__device__ __forceinline__ void tmaLoad4d(u32 destination, const void *tensorMap, u32 barrier,
                                          int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(destination),
               "l"(reinterpret_cast<u64>(tensorMap)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
               "r"(barrier)
               : "memory");
}

} // namespace attn_dev
