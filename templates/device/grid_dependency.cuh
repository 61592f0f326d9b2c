// Programmatic dependent launch (sm_90): a kernel launched with it
// (KernelFunction::launchDependent) may start while the kernel before it in
// the stream still runs, and waits for that kernel's completion and memory
// before it reads its results. launch_dependents does nothing where no
// dependent kernel follows; wait returns at once in a kernel launched the
// ordinary way (stream order already waited).
#pragma once

namespace attn_dev {

// Lets the dependent kernel's blocks start once every block of this kernel
// has executed this (or exited).
__device__ __forceinline__ void allowDependentLaunch() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// Waits until the kernels this one depends on have completed and their
// writes are visible.
__device__ __forceinline__ void waitForPrerequisiteGrids() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

} // namespace attn_dev
