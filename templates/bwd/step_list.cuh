// The step list of a mask_mod's backward (AttnBwdParams::step_list): for
// each block of the main kernel, the steps of its walk whose (query block,
// key tile) the mask_mod keeps a pair of, in walk order, each marked when it
// keeps them all (and where dQ's additions are ordered, the empty ones
// apart). The main kernel's load warp, dQ writer and consumers then
// walk the same list with one load a step (StepWalk) instead of each
// evaluating the mask's coverage: the 24-register producer warps spilled
// doing so, and a sparse mask's blocks no longer walk their empty steps.
#pragma once

// Launched over the main kernel's grid with one warp a block, so that
// keyBlockOf gives each block the main kernel's walk. Where dQ's additions
// are ordered (the deterministic mode, split columns) the empty steps are
// listed apart: the main kernel's turn warp takes their turns (nothing to
// add) while the other roles walk the rest. Only a unit whose main kernel
// walks a list has it: the runtime checks the config against that.
#if ATTN_PLAN_STEP_LIST
extern "C" __global__ void __launch_bounds__(ATTN_BWD_STEP_LIST_THREADS)
    attn_bwd_step_list_kernel(const __grid_constant__ attn_abi::AttnBwdParams p) {
  using namespace attn_bwd;
  static_assert(ATTN_BWD_STEP_LIST_THREADS == 32, "one warp lists a block's steps");
  static_assert(kWalksStepList, "the plan's step list is the one the kernel walks");
  const KeyBlock block = keyBlockOf(p);
  const StepList list = stepListOf(p);
  const int lane = threadIdx.x;
  const int steps = block.empty() ? 0 : block.steps();
  const bool listsEmpty = orderedAdditions(p);
  const u32 below = (1u << lane) - 1;
  int walked = 0, empty = 0;
  for (int first = 0; first < steps; first += 32) {
    const int step = first + lane;
    Coverage coverage = Coverage::Empty;
    if (step < steps)
      coverage = block.maskCoverageOf(p, step);
    const bool walk = step < steps && coverage != Coverage::Empty;
    const bool skip = step < steps && coverage == Coverage::Empty && listsEmpty;
    const u32 walks = __ballot_sync(0xffffffffu, walk), skips = __ballot_sync(0xffffffffu, skip);
    if (walk)
      list.walked()[walked + __popc(walks & below)] =
          static_cast<u32>(step) | (coverage == Coverage::Full ? kStepFull : 0u);
    if (skip)
      list.empty()[-1 - (empty + __popc(skips & below))] = static_cast<u32>(step);
    walked += __popc(walks);
    empty += __popc(skips);
  }
  if (lane == 0) {
    list.words[0] = static_cast<u32>(walked);
    list.words[1] = static_cast<u32>(empty);
  }
}
#endif
