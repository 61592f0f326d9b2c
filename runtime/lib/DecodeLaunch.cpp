//===- DecodeLaunch.cpp - One-token step of linear attention --------------===//

#include "attn/runtime/AttentionLaunch.h"

#include "LaunchChecks.h"

namespace attn {

using namespace detail;

namespace {
/// The parameter block of a step validateLinearArgs has accepted.
attn_abi::AttnDecodeParams encodeDecodeParams(const AttnLaunchConfig &config,
                                              const AttnDecodeArgs &args) {
  attn_abi::AttnDecodeParams params{};
  const TensorView *views[] = {&args.q, &args.k, &args.v, &args.o};
  long long(*strides[])[2] = {&params.q_strides, &params.k_strides, &params.v_strides,
                              &params.o_strides};
  for (int index = 0; index < 4; ++index) {
    (*strides[index])[0] = views[index]->strides[0];
    (*strides[index])[1] = views[index]->strides[2];
  }
  params.q = args.q.data;
  params.k = args.k.data;
  params.v = args.v.data;
  params.o = args.o.data;
  params.state_in = args.initialState;
  params.state_out = args.finalState;
  params.key_sum_in = args.initialKeySum;
  params.key_sum_out = args.finalKeySum;
  params.log_decay = args.logDecay;
  params.batch = static_cast<int>(args.q.batch());
  params.q_heads = config.qHeads;
  params.kv_heads = config.kvHeads;
  params.scale = config.scale;
  return params;
}
} // namespace

void launchDecode(KernelFunction &kernel, const AttnLaunchConfig &config,
                  const AttnDecodeArgs &args, CUstream stream) {
  validateLinearArgs(config, args, /*decode=*/true);
  if (args.q.batch() == 0)
    return;
  validateLinearDevicePointers(config, args);
  attn_abi::AttnDecodeParams params = encodeDecodeParams(config, args);
  Dim3 grid{static_cast<unsigned>(config.qHeads), static_cast<unsigned>(args.q.batch()), 1};
  Dim3 block{ATTN_DECODE_THREADS, 1, 1};
  void *kernelArgs[] = {&params};
  kernel.launch(grid, block, 0, stream, kernelArgs);
}

} // namespace attn
