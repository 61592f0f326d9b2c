// The step list of a mask_mod's backward (AttnBwdParams::step_list): for
// each block of the main kernel, the steps of its walk whose (query block,
// key tile) the mask_mod keeps a pair of, in walk order, each marked when it
// keeps them all. The main kernel's load warp, dQ writer and consumers then
// walk the same list with one load a step (StepWalk) instead of each
// evaluating the mask's coverage: the 24-register producer warps spilled
// doing so, and a sparse mask's blocks no longer walk their empty steps.
#pragma once

// Launched over the main kernel's grid with one warp a block, so that
// keyBlockOf gives each block the main kernel's walk. The deterministic
// mode lists every step (its turns count every key tile of a query block's
// run), still marking the full ones. A kernel without a list has nothing to
// do.
extern "C" __global__ void __launch_bounds__(ATTN_BWD_STEP_LIST_THREADS)
    attn_bwd_step_list_kernel(const __grid_constant__ attn_abi::AttnBwdParams p) {
  using namespace attn_bwd;
  static_assert(ATTN_BWD_STEP_LIST_THREADS == 32, "one warp lists a block's steps");
  if constexpr (kWalksStepList) {
    const KeyBlock block = keyBlockOf(p);
    u32 *list = stepListOf(p);
    const int lane = threadIdx.x;
    const int steps = block.empty() ? 0 : block.steps();
    const bool everyStep = orderedAdditions(p);
    int listed = 0;
    for (int first = 0; first < steps; first += 32) {
      const int step = first + lane;
      Coverage coverage = Coverage::Empty;
      if (step < steps)
        coverage = block.maskCoverageOf(p, step);
      const bool keep = step < steps && (everyStep || coverage != Coverage::Empty);
      const u32 kept = __ballot_sync(0xffffffffu, keep);
      if (keep)
        list[1 + listed + __popc(kept & ((1u << lane) - 1))] =
            static_cast<u32>(step) | (coverage == Coverage::Full ? kStepFull : 0u);
      listed += __popc(kept);
    }
    if (lane == 0)
      list[0] = static_cast<u32>(listed);
  }
}
