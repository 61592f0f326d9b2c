// mbarrier primitives: the producer's TMA loads complete on them (transaction
// counts) and the consumers release stage slots through them.
#pragma once

namespace attn_dev {

__device__ __forceinline__ void mbarrierInit(u32 barrier, u32 arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(barrier), "r"(arrivals) : "memory");
}

// Makes initialized barriers visible to the async proxy (the copy engine).
__device__ __forceinline__ void fenceBarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// One arrival that also announces `bytes` of transactions still to land.
__device__ __forceinline__ void mbarrierArriveExpectTx(u32 barrier, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(barrier), "r"(bytes)
               : "memory");
}

// Announces `bytes` of transactions still to land, without arriving: the
// phase then completes on the arrivals still owed and the bytes.
__device__ __forceinline__ void mbarrierExpectTx(u32 barrier, u32 bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(barrier), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbarrierArrive(u32 barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(barrier) : "memory");
}

// `count` arrivals at once (one thread standing for several warps).
__device__ __forceinline__ void mbarrierArrive(u32 barrier, u32 count) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;" ::"r"(barrier), "r"(count)
               : "memory");
}

// Blocks until the barrier's phase with the given parity has completed.
__device__ __forceinline__ void mbarrierWait(u32 barrier, u32 parity) {
  u32 done;
  do {
    asm volatile("{\n"
                 ".reg .pred complete;\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 complete, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, complete;\n"
                 "}\n"
                 : "=r"(done)
                 : "r"(barrier), "r"(parity)
                 : "memory");
  } while (!done);
}

// mbarrierWait as one asm statement that holds the whole loop: for waits in
// the middle of a consumer's softmax, where a loop the compiler sees split
// the registers' live ranges and made head dim 64's consumers spill.
__device__ __forceinline__ void mbarrierWaitInAsm(u32 barrier, u32 parity) {
  asm volatile("{\n"
               ".reg .pred complete;\n"
               "WAIT:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 complete, [%0], %1;\n"
               "@!complete bra WAIT;\n"
               "}\n" ::"r"(barrier),
               "r"(parity)
               : "memory");
}

// One arrival for a warp, from its lane 0, once every lane has come here
// (the lanes' earlier shared-memory accesses are then ordered before it):
// the arrival is predicated inside the asm, with no branch around it.
__device__ __forceinline__ void mbarrierArriveForWarp(u32 barrier, int lane) {
  __syncwarp();
  asm volatile("{\n"
               ".reg .pred first;\n"
               "setp.eq.u32 first, %1, 0;\n"
               "@first mbarrier.arrive.shared::cta.b64 _, [%0];\n"
               "}\n" ::"r"(barrier),
               "r"(lane)
               : "memory");
}

// Position of the `iteration`-th use of a ring of `Stages` slots: the slot,
// and the parity its full / empty barriers are at on that round.
struct RingSlot {
  int stage;
  u32 phase;
};

template <int Stages> __device__ __forceinline__ RingSlot ringSlot(int iteration) {
  return RingSlot{iteration % Stages, static_cast<u32>((iteration / Stages) & 1)};
}

} // namespace attn_dev
