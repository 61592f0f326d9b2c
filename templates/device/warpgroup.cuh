// Warpgroup-level control: register reallocation between roles and named
// barriers that synchronize one warpgroup without stopping the others.
#pragma once

namespace attn_dev {

constexpr int kWarpgroupThreads = 128;

template <int Registers> __device__ __forceinline__ void releaseRegisters() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(Registers));
}

template <int Registers> __device__ __forceinline__ void claimRegisters() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(Registers));
}

// Barrier 0 is __syncthreads(); warpgroup-local barriers use ids from 1 up.
__device__ __forceinline__ void warpgroupBarrier(int id) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "n"(kWarpgroupThreads) : "memory");
}

} // namespace attn_dev
