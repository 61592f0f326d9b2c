// Warpgroup-level control: register reallocation between roles and named
// barriers that synchronize one warpgroup without stopping the others.
#pragma once

namespace attn_dev {

constexpr int kWarpgroupThreads = 128;

// The thread's warpgroup, broadcast from lane 0 so that the compiler knows
// it is the same across the warp: values derived from it (a consumer's
// slice of a tile, its WGMMA descriptors) then live in uniform registers
// instead of being moved there before every WGMMA.
__device__ __forceinline__ int warpgroupIndex() {
  return __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / kWarpgroupThreads, 0);
}

template <int Registers> __device__ __forceinline__ void releaseRegisters() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(Registers));
}

template <int Registers> __device__ __forceinline__ void claimRegisters() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(Registers));
}

// Named barriers: barrier 0 is __syncthreads(); the kernels use ids from 1
// up. `threads` counts both the syncing and the arriving threads.
__device__ __forceinline__ void namedBarrierSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Signals a named barrier without waiting for it.
__device__ __forceinline__ void namedBarrierArrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void warpgroupBarrier(int id) { namedBarrierSync(id, kWarpgroupThreads); }

} // namespace attn_dev
