// Warp-level tensor-core products and asynchronous copies for the kernels
// whose tiles are too small for a warpgroup's WGMMA (the short-query path:
// a decode step packs a handful of query rows into a tile). Fragments
// follow PTX's m16n8k16 layouts: lane l holds rows l / 4 and l / 4 + 8,
// columns 2 (l % 4) and 2 (l % 4) + 1 of each 8-column group.
#pragma once

namespace attn_dev {

// Four 8x8 matrices of 16-bit elements from shared memory: lanes 8 i to
// 8 i + 7 give the row addresses of matrix i, register i receives it.
__device__ __forceinline__ void loadMatrixX4(u32 address, u32 (&regs)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(regs[0]), "=r"(regs[1]), "=r"(regs[2]), "=r"(regs[3])
               : "r"(address));
}

// The same, each matrix transposed: for an operand stored k-major.
__device__ __forceinline__ void loadMatrixX4Transposed(u32 address, u32 (&regs)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(regs[0]), "=r"(regs[1]), "=r"(regs[2]), "=r"(regs[3])
               : "r"(address));
}

// acc (16x8 fp32) += a (16x16) * b (16x8), 16-bit inputs of `Element`.
template <class Element>
__device__ __forceinline__ void mma16816(float (&acc)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  if constexpr (Element::kExponentBits == 8)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 16 bytes from global to shared memory, bypassing L1; with `valid` false
// the destination is zero-filled and nothing is read.
// No memory clobber: the wait and the block barrier after it order the
// stage's readers, and ordinary loads (a block table) may move above it.
__device__ __forceinline__ void copyAsync16(u32 destination, const void *source, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(destination),
               "l"(source), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void commitAsyncCopies() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// Waits until at most `Pending` committed groups of this thread are in flight.
template <int Pending> __device__ __forceinline__ void waitAsyncCopies() {
  asm volatile("cp.async.wait_group %0;" ::"n"(Pending) : "memory");
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of rows of
// `RowChunks` chunks, XOR-swizzled so that the 8 rows an ldmatrix phase
// reads at one logical chunk fall in 8 different bank groups.
template <int RowChunks> __device__ __forceinline__ u32 swizzledChunk(int row, int chunk) {
  static_assert(RowChunks % 8 == 0, "rows of whole 128-byte lines");
  return static_cast<u32>((row * RowChunks + (chunk ^ (row & 7))) * 16);
}

} // namespace attn_dev
