// TMA (cp.async.bulk.tensor) copies of 4-D tiles described by a tensor map in
// kernel parameter space. Loads complete on an mbarrier; stores are tracked
// as bulk groups of the issuing thread. Then single-word asynchronous copies
// (cp.async), tracked as groups of the issuing thread too.
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

// Loads `rows` rows of a BSHD tile ColumnBlocks 64-element column blocks
// wide, one TMA box (of 128-byte rows) per block, the blocks `rows` rows
// apart in shared memory from `destination`: how the kernels lay out a Q,
// K, V or dO tile for WGMMA's 128-byte swizzle.
template <int ColumnBlocks>
__device__ __forceinline__ void tmaLoadColumnBlocks(u32 destination, u32 rows,
                                                    const void *tensorMap, u32 barrier, int row,
                                                    int head, int batch) {
#pragma unroll
  for (int block = 0; block < ColumnBlocks; ++block)
    tmaLoad4d(destination + block * rows * 128, tensorMap, barrier, block * 64, row, head, batch);
}

// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from
// global to shared memory, completing on `barrier` like tmaLoad4d.
__device__ __forceinline__ void bulkLoad(u32 destination, const void *source, u32 bytes,
                                         u32 barrier) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1], %2, [%3];" ::"r"(destination),
               "l"(reinterpret_cast<u64>(source)), "r"(bytes), "r"(barrier)
               : "memory");
}

// Stores the box at `source` in shared memory to coordinates (c0 .. c3);
// elements outside the tensor are not written.
__device__ __forceinline__ void tmaStore4d(const void *tensorMap, u32 source, int c0, int c1,
                                           int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group"
               " [%0, {%1, %2, %3, %4}], [%5];" ::"l"(reinterpret_cast<u64>(tensorMap)),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(source)
               : "memory");
}

__device__ __forceinline__ void tmaStoreCommit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Waits until the committed stores have finished reading shared memory.
__device__ __forceinline__ void tmaStoreWaitRead() {
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

// Adds `bytes` (a multiple of 16; both addresses 16-byte aligned) of fp32
// values from shared memory to global memory element by element, as one
// bulk group of the issuing thread like tmaStore4d; the additions are
// atomic with respect to other reductions.
__device__ __forceinline__ void bulkReduceAddF32(float *destination, u32 source, u32 bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(
                   reinterpret_cast<u64>(destination)),
               "r"(source), "r"(bytes)
               : "memory");
}

// Waits until the committed bulk groups have completed, their writes to
// global memory included.
__device__ __forceinline__ void bulkWaitComplete() {
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// Makes this thread's shared-memory writes visible to the copy engine (the
// async proxy) before a TMA store reads them.
__device__ __forceinline__ void fenceSharedForAsyncProxy() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Word copies by the thread's load unit (cp.async), for data too scattered
// for a TMA box. Each thread commits its copies in groups and waits for its
// own groups; other threads see the words after a barrier.

// A 4-byte copy from global to shared memory, zero-filled where `valid` is
// false (the source is then not read).
__device__ __forceinline__ void copyWordAsync(u32 destination, const void *source, bool valid) {
  asm volatile("cp.async.ca.shared::cta.global [%0], [%1], 4, %2;" ::"r"(destination), "l"(source),
               "r"(valid ? 4 : 0)
               : "memory");
}

// Closes the thread's group of copies issued since the last commit (an
// empty group if none).
__device__ __forceinline__ void commitCopyGroup() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// Blocks until at most `Pending` of the thread's most recent groups are
// still in flight.
template <int Pending> __device__ __forceinline__ void waitCopyGroups() {
  asm volatile("cp.async.wait_group %0;" ::"n"(Pending) : "memory");
}

} // namespace attn_dev
