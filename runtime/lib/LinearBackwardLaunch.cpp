//===- LinearBackwardLaunch.cpp - Linear-family backward launch -----------===//

#include "attn/runtime/LinearBackwardLaunch.h"

#include "LaunchChecks.h"

#include "attn/runtime/DType.h"
#include "attn/runtime/TensorMap.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <utility>

namespace attn {

using namespace detail;

namespace {

bool sameShape(const TensorView &a, const TensorView &b) {
  return std::equal(a.shape, a.shape + 4, b.shape);
}

/// Where each buffer of the workspace lies (byte offsets, 256-aligned) and
/// how the passes split the sequence.
struct LinearBackwardLayout {
  // [batch, seqlen, q_heads, D] element copies.
  uint64_t revPhiK = 0, revV = 0, revPhiQ = 0, revDO = 0, revDPhiK = 0, revDV = 0;
  // [batch, seqlen, kv_heads, D]: phi(k) in order (a copy of k for the
  // identity map: the runtime does not know the spec's map).
  uint64_t phiK = 0;
  // [batch, seqlen, q_heads] fp32, gated only.
  uint64_t revLogDecay = 0;
  // [batch, q_heads, D, D] fp32 pass states.
  uint64_t stateInT = 0, dStateOutScaled = 0, dStateOutT = 0, stateOutT = 0;
  // The chunkwise kernel's split scratch, shared by the passes (which run
  // one after the other on the stream).
  uint64_t split = 0, splitBytes = 0;
  uint64_t total = 0;
  LinearSplit splitPlan;
};

LinearBackwardLayout layoutOf(const AttnLaunchConfig &config, const AttnLinearBackwardArgs &args) {
  LinearBackwardLayout layout;
  const uint64_t batch = uint64_t(args.q.batch()), seqlen = uint64_t(args.q.seqlen());
  const uint64_t d = uint64_t(config.headDim), element = dtypeSize(args.q.dtype);
  uint64_t next = 0;
  auto take = [&next](uint64_t bytes) {
    const uint64_t at = next;
    next += (bytes + 255) / 256 * 256;
    return at;
  };
  const uint64_t perQueryHeads = batch * seqlen * uint64_t(config.qHeads) * d * element;
  for (uint64_t *copy : {&layout.revPhiK, &layout.revV, &layout.revPhiQ, &layout.revDO,
                         &layout.revDPhiK, &layout.revDV})
    *copy = take(perQueryHeads);
  layout.phiK = take(batch * seqlen * uint64_t(config.kvHeads) * d * element);
  if (config.gated)
    layout.revLogDecay = take(batch * seqlen * uint64_t(config.qHeads) * sizeof(float));
  const uint64_t states = batch * uint64_t(config.qHeads) * d * d * sizeof(float);
  if (args.initialState)
    layout.stateInT = take(states);
  if (args.dFinalState) {
    layout.dStateOutScaled = take(states);
    layout.dStateOutT = take(states);
  }
  if (config.gated && args.dLogDecay && args.dFinalState)
    layout.stateOutT = take(states);
  layout.splitPlan = linearSplitFor(config, args.q.batch(), args.q.seqlen());
  layout.splitBytes = linearWorkspaceBytes(config, args.q.batch(), layout.splitPlan);
  layout.split = take(layout.splitBytes);
  layout.total = next;
  return layout;
}

/// One fp32 side buffer of a call: its pointer, bytes and name.
struct SideBuffer {
  const void *pointer;
  uint64_t bytes;
  const char *name;
};

std::vector<SideBuffer> sideBuffers(const AttnLaunchConfig &config,
                                    const AttnLinearBackwardArgs &args) {
  const uint64_t heads = uint64_t(args.q.batch()) * uint64_t(config.qHeads);
  const uint64_t state = heads * uint64_t(config.headDim) * uint64_t(config.headDim) * 4;
  const uint64_t decay = heads * uint64_t(args.q.seqlen()) * 4;
  return {{args.logDecay, decay, "logDecay"},
          {args.dLogDecay, decay, "dLogDecay"},
          {args.initialState, state, "initialState"},
          {args.dFinalState, state, "dFinalState"},
          {args.dInitialState, state, "dInitialState"}};
}

void copyStrides(const TensorView &view, long long (&strides)[3]) {
  for (int dim = 0; dim < 3; ++dim)
    strides[dim] = static_cast<long long>(view.strides[dim]);
}

attn_abi::AttnLinearBackwardParams encodeParams(const AttnLaunchConfig &config,
                                                const AttnLinearBackwardArgs &args,
                                                const LinearBackwardLayout &layout) {
  attn_abi::AttnLinearBackwardParams p{};
  p.q = args.q.data;
  p.k = args.k.data;
  p.v = args.v.data;
  p.d_o = args.dO.data;
  p.dq = args.dq.data;
  p.dk = args.dk.data;
  p.dv = args.dv.data;
  copyStrides(args.q, p.q_strides);
  copyStrides(args.k, p.k_strides);
  copyStrides(args.v, p.v_strides);
  copyStrides(args.dO, p.d_o_strides);
  copyStrides(args.dq, p.dq_strides);
  copyStrides(args.dk, p.dk_strides);
  copyStrides(args.dv, p.dv_strides);
  p.log_decay = args.logDecay;
  p.d_log_decay = args.dLogDecay;
  p.state_in = args.initialState;
  p.d_state_out = args.dFinalState;
  p.d_state_in = args.dInitialState;
  char *workspace = static_cast<char *>(args.workspace);
  auto at = [workspace](uint64_t offset) { return static_cast<void *>(workspace + offset); };
  auto floatsAt = [&](uint64_t offset, bool present) {
    return present ? static_cast<float *>(at(offset)) : nullptr;
  };
  p.rev_phi_k = at(layout.revPhiK);
  p.rev_v = at(layout.revV);
  p.rev_phi_q = at(layout.revPhiQ);
  p.rev_d_o = at(layout.revDO);
  p.rev_d_phi_k = at(layout.revDPhiK);
  p.rev_dv = at(layout.revDV);
  p.phi_k = at(layout.phiK);
  p.rev_log_decay = floatsAt(layout.revLogDecay, config.gated);
  p.state_in_t = floatsAt(layout.stateInT, args.initialState != nullptr);
  p.d_state_out_scaled = floatsAt(layout.dStateOutScaled, args.dFinalState != nullptr);
  p.d_state_out_t = floatsAt(layout.dStateOutT, args.dFinalState != nullptr);
  p.state_out_t =
      floatsAt(layout.stateOutT, config.gated && args.dLogDecay && args.dFinalState);
  p.batch = static_cast<int>(args.q.batch());
  p.seqlen = static_cast<int>(args.q.seqlen());
  p.q_heads = config.qHeads;
  p.kv_heads = config.kvHeads;
  p.scale = config.scale;
  return p;
}

/// A contiguous [batch, seqlen, heads, D] view of workspace memory.
TensorView workspaceView(const AttnLinearBackwardArgs &args, void *data, int heads) {
  return contiguousBSHD(data, args.q.dtype, args.q.batch(), args.q.seqlen(), heads,
                        args.q.headDim());
}

} // namespace

void validateLinearBackwardArgs(const AttnLaunchConfig &config,
                                const AttnLinearBackwardArgs &args) {
  validateLaunchConfig(config);
  if (!config.linearFamily || !config.backward)
    fail("config", "the kernel is not the backward module of linear attention or retention "
                   "(compile it with `attnc --backward` or Compiler::compileBackward)");
  if (config.normalize)
    fail("config", "normalized linear attention has no backward module yet");
  validateAgainstConfig(args.q, "q", config, config.qHeads, "query");
  validateAgainstConfig(args.k, "k", config, config.kvHeads, "kv");
  validateAgainstConfig(args.v, "v", config, config.kvHeads, "kv");
  validateAgainstConfig(args.dO, "dO", config, config.qHeads, "query");
  validateAgainstConfig(args.dq, "dq", config, config.qHeads, "query");
  validateAgainstConfig(args.dk, "dk", config, config.kvHeads, "kv");
  validateAgainstConfig(args.dv, "dv", config, config.kvHeads, "kv");
  for (auto [view, name] : {std::make_pair(&args.k, "k"), std::make_pair(&args.v, "v")})
    for (int dim = 0; dim < 2; ++dim)
      if (view->shape[dim] != args.q.shape[dim])
        fail(name, "shape " + shapeString(*view) + " does not match q's " + shapeString(args.q) +
                       " in batch and sequence length");
  for (auto [view, like, name] :
       {std::make_tuple(&args.dO, &args.q, "dO"), std::make_tuple(&args.dq, &args.q, "dq"),
        std::make_tuple(&args.dk, &args.k, "dk"), std::make_tuple(&args.dv, &args.v, "dv")})
    if (!sameShape(*view, *like))
      fail(name, "shape " + shapeString(*view) + " must equal " + shapeString(*like));
  for (auto [view, name] :
       {std::make_pair(&args.q, "q"), std::make_pair(&args.k, "k"), std::make_pair(&args.v, "v"),
        std::make_pair(&args.dO, "dO"), std::make_pair(&args.dq, "dq"),
        std::make_pair(&args.dk, "dk"), std::make_pair(&args.dv, "dv")})
    validateTmaOperand(*view, name);
  requireIntRange(args.q.batch(), "q", "batch");
  requireIntRange(args.q.seqlen(), "q", "seqlen");
  if (args.q.batch() > 65535)
    fail("q", fmt::format("batch {} exceeds the grid's 65535", args.q.batch()));
  if (config.gated && !args.logDecay && args.q.numElements() != 0)
    fail("logDecay", "the kernel is gated: pass the forward's per-token log-decays");
  if (!config.gated && (args.logDecay || args.dLogDecay))
    fail(args.logDecay ? "logDecay" : "dLogDecay",
         "the kernel is not gated; it takes no log-decays");
  for (const SideBuffer &buffer : sideBuffers(config, args))
    if (reinterpret_cast<uintptr_t>(buffer.pointer) % alignof(float) != 0)
      fail(buffer.name, "pointer must be 4-byte aligned");
  if (reinterpret_cast<uintptr_t>(args.workspace) % 256 != 0)
    fail("workspace", "pointer must be 256-byte aligned");
}

uint64_t linearBackwardWorkspaceBytes(const AttnLaunchConfig &config,
                                      const AttnLinearBackwardArgs &args) {
  validateLinearBackwardArgs(config, args);
  if (args.q.numElements() == 0)
    return 0;
  return layoutOf(config, args).total;
}

LinearBackwardFunctions loadLinearBackwardFunctions(const Module &module,
                                                    const AttnLaunchConfig &config) {
  LinearBackwardFunctions functions;
  functions.chunkwise = loadLinearFunctions(module, config);
  functions.prepare = module.function(ATTN_LINEAR_BWD_PREPARE_KERNEL_NAME);
  functions.states = module.function(ATTN_LINEAR_BWD_STATES_KERNEL_NAME);
  functions.query = module.function(ATTN_LINEAR_BWD_QUERY_KERNEL_NAME);
  functions.key = module.function(ATTN_LINEAR_BWD_KEY_KERNEL_NAME);
  functions.gate = module.function(ATTN_LINEAR_BWD_GATE_KERNEL_NAME);
  functions.initialState = module.function(ATTN_LINEAR_BWD_INITIAL_STATE_KERNEL_NAME);
  return functions;
}

void launchLinearBackward(LinearBackwardFunctions &functions, const AttnLaunchConfig &config,
                          const AttnLinearBackwardArgs &args, CUstream stream) {
  validateLinearBackwardArgs(config, args);
  if (args.q.batch() == 0)
    return;
  const int device = currentDevice();
  for (auto [view, name] :
       {std::make_pair(&args.q, "q"), std::make_pair(&args.k, "k"), std::make_pair(&args.v, "v"),
        std::make_pair(&args.dO, "dO"), std::make_pair(&args.dq, "dq"),
        std::make_pair(&args.dk, "dk"), std::make_pair(&args.dv, "dv")})
    if (view->numElements() != 0)
      requireDeviceMemory(view->data, viewExtentBytes(*view), name, device);
  for (const SideBuffer &buffer : sideBuffers(config, args))
    if (buffer.pointer && buffer.bytes != 0)
      requireDeviceMemory(buffer.pointer, buffer.bytes, buffer.name, device);

  const unsigned heads = static_cast<unsigned>(config.qHeads);
  const unsigned batch = static_cast<unsigned>(args.q.batch());
  const Dim3 helperBlock{ATTN_LINEAR_BWD_THREADS, 1, 1};
  const Dim3 stateGrid{
      static_cast<unsigned>((config.headDim * config.headDim + ATTN_LINEAR_BWD_THREADS - 1) /
                            ATTN_LINEAR_BWD_THREADS),
      heads, batch};
  if (args.q.seqlen() == 0) {
    attn_abi::AttnLinearBackwardParams params{};
    params.d_state_out = args.dFinalState;
    params.d_state_in = args.dInitialState;
    params.batch = static_cast<int>(batch);
    params.q_heads = config.qHeads;
    params.kv_heads = config.kvHeads;
    params.scale = config.scale;
    void *kernelArgs[] = {&params};
    if (args.dInitialState)
      functions.initialState.launch(stateGrid, helperBlock, 0, stream, kernelArgs);
    return;
  }

  const LinearBackwardLayout layout = layoutOf(config, args);
  requireWorkspace(args.workspace, args.workspaceBytes, layout.total,
                   "the reversed copies and pass states", "linearBackwardWorkspaceBytes");
  attn_abi::AttnLinearBackwardParams params = encodeParams(config, args, layout);
  void *kernelArgs[] = {&params};
  // Element-group kernels: enough blocks for every SM several times over;
  // the kernels stride over the rest.
  const unsigned helperBlocks = static_cast<unsigned>(multiprocessorsOf(device) * 8);
  const Dim3 helperGrid{helperBlocks, 1, 1};

  functions.prepare.launch(helperGrid, helperBlock, 0, stream, kernelArgs);
  if (args.initialState || args.dFinalState)
    functions.states.launch(stateGrid, helperBlock, 0, stream, kernelArgs);

  char *workspace = static_cast<char *>(args.workspace);
  AttnLaunchConfig passConfig = config;
  passConfig.backward = 0;
  AttnLinearArgs pass;
  pass.workspace = layout.splitBytes ? workspace + layout.split : nullptr;
  pass.workspaceBytes = layout.splitBytes;

  // dQ: (dO, v, phi(k)) in order from state_in^T; its final state is
  // S_final^T, which the gate's gradient needs.
  pass.q = args.dO;
  pass.k = args.v;
  pass.v = workspaceView(args, params.phi_k, config.kvHeads);
  pass.o = args.dq;
  pass.initialState = params.state_in_t;
  pass.finalState = params.state_out_t;
  pass.logDecay = args.logDecay;
  launchLinear(functions.chunkwise, passConfig, pass, stream);

  // The reversed passes, a copy of each kv head per query head.
  AttnLaunchConfig reversedConfig = passConfig;
  reversedConfig.kvHeads = config.qHeads;
  auto reversed = [&](void *data) { return workspaceView(args, data, config.qHeads); };
  pass.logDecay = params.rev_log_decay;
  // dV: (phi(k), phi(q), dO) from dS / s; its final state is
  // e^{-g_0} dS0 / s.
  pass.q = reversed(params.rev_phi_k);
  pass.k = reversed(params.rev_phi_q);
  pass.v = reversed(params.rev_d_o);
  pass.o = reversed(params.rev_dv);
  pass.initialState = params.d_state_out_scaled;
  pass.finalState = args.dInitialState;
  launchLinear(functions.chunkwise, reversedConfig, pass, stream);
  // d phi(k): (v, dO, phi(q)) from dS^T / s.
  pass.q = reversed(params.rev_v);
  pass.k = reversed(params.rev_d_o);
  pass.v = reversed(params.rev_phi_q);
  pass.o = reversed(params.rev_d_phi_k);
  pass.initialState = params.d_state_out_t;
  pass.finalState = nullptr;
  launchLinear(functions.chunkwise, reversedConfig, pass, stream);

  functions.query.launch(helperGrid, helperBlock, 0, stream, kernelArgs);
  functions.key.launch(helperGrid, helperBlock, 0, stream, kernelArgs);
  if (config.gated && args.dLogDecay)
    functions.gate.launch(Dim3{heads, batch, 1}, Dim3{ATTN_LINEAR_BWD_SCAN_THREADS, 1, 1}, 0,
                          stream, kernelArgs);
  if (args.dInitialState)
    functions.initialState.launch(stateGrid, helperBlock, 0, stream, kernelArgs);
}

} // namespace attn
