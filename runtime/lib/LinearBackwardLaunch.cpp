//===- LinearBackwardLaunch.cpp - Linear-family backward launch -----------===//

#include "attn/runtime/LinearBackwardLaunch.h"

#include "LaunchChecks.h"

#include "attn/runtime/DType.h"
#include "attn/runtime/TensorMap.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace attn {

using namespace detail;

namespace {

bool sameShape(const TensorView &a, const TensorView &b) {
  return std::equal(a.shape, a.shape + 4, b.shape);
}

/// Where each buffer of the workspace lies (byte offsets, 256-aligned) and
/// how the passes split the sequence.
struct LinearBackwardLayout {
  // GQA: the reversed passes' outputs per query head, [batch, seqlen,
  // q_heads, D] elements; without GQA they write dk and dv.
  bool perHead = false;
  uint64_t headDPhiK = 0, headDv = 0;
  // [batch, q_heads, D, D] fp32 pass states.
  uint64_t stateInT = 0, dStateOutScaled = 0, dStateOutT = 0, stateOutT = 0;
  // Normalized linear attention: the passes' dO, the rows' denominator
  // gradients and the key sums' pieces.
  uint64_t dOScaled = 0, rowGradient = 0, keyPieces = 0, queryPieces = 0;
  int pieces = 0;
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
  layout.perHead = config.qHeads != config.kvHeads;
  if (layout.perHead) {
    const uint64_t perQueryHead = batch * seqlen * uint64_t(config.qHeads) * d * element;
    layout.headDPhiK = take(perQueryHead);
    layout.headDv = take(perQueryHead);
  }
  const uint64_t states = batch * uint64_t(config.qHeads) * d * d * sizeof(float);
  if (args.initialState)
    layout.stateInT = take(states);
  if (args.dFinalState) {
    layout.dStateOutScaled = take(states);
    layout.dStateOutT = take(states);
  }
  if (config.gated && args.dLogDecay && args.dFinalState)
    layout.stateOutT = take(states);
  if (config.normalize) {
    const uint64_t rows = batch * seqlen * uint64_t(config.qHeads);
    layout.pieces = int((seqlen + ATTN_LINEAR_BWD_PIECE - 1) / ATTN_LINEAR_BWD_PIECE);
    const uint64_t slots = batch * uint64_t(layout.pieces + 1) * d * sizeof(float);
    layout.dOScaled = take(rows * d * element);
    layout.rowGradient = take(rows * sizeof(float));
    layout.keyPieces = take(slots * uint64_t(config.kvHeads));
    layout.queryPieces = take(slots * uint64_t(config.qHeads));
  }
  layout.splitPlan = linearSplitFor(config, args.q.batch(), args.q.seqlen());
  layout.splitBytes = linearWorkspaceBytes(config, args.q.batch(), layout.splitPlan);
  layout.split = take(layout.splitBytes);
  layout.total = next;
  return layout;
}

/// The side buffers a backward call passes.
std::vector<SideBuffer> sideBuffers(const AttnLaunchConfig &config,
                                    const AttnLinearBackwardArgs &args) {
  const LinearBufferBytes bytes = linearBufferBytes(config, args.q.batch(), args.q.seqlen());
  return {{args.logDecay, bytes.decay, "logDecay"},
          {args.dLogDecay, bytes.decay, "dLogDecay"},
          {args.initialState, bytes.state, "initialState"},
          {args.dFinalState, bytes.state, "dFinalState"},
          {args.dInitialState, bytes.state, "dInitialState"},
          {args.initialKeySum, bytes.keySum, "initialKeySum"},
          {args.dFinalKeySum, bytes.keySum, "dFinalKeySum"},
          {args.dInitialKeySum, bytes.keySum, "dInitialKeySum"}};
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
  p.dq = args.dq.data;
  p.dk = args.dk.data;
  p.dv = args.dv.data;
  copyStrides(args.q, p.q_strides);
  copyStrides(args.k, p.k_strides);
  copyStrides(args.dq, p.dq_strides);
  copyStrides(args.dk, p.dk_strides);
  copyStrides(args.dv, p.dv_strides);
  p.log_decay = args.logDecay;
  p.d_log_decay = args.dLogDecay;
  p.state_in = args.initialState;
  p.d_state_out = args.dFinalState;
  p.d_state_in = args.dInitialState;
  char *workspace = static_cast<char *>(args.workspace);
  auto floatsAt = [&](uint64_t offset, bool present) {
    return present ? reinterpret_cast<float *>(workspace + offset) : nullptr;
  };
  if (layout.perHead) {
    p.head_d_phi_k = workspace + layout.headDPhiK;
    p.head_dv = workspace + layout.headDv;
  }
  p.state_in_t = floatsAt(layout.stateInT, args.initialState != nullptr);
  p.d_state_out_scaled = floatsAt(layout.dStateOutScaled, args.dFinalState != nullptr);
  p.d_state_out_t = floatsAt(layout.dStateOutT, args.dFinalState != nullptr);
  p.state_out_t =
      floatsAt(layout.stateOutT, config.gated && args.dLogDecay && args.dFinalState);
  if (config.normalize) {
    p.o = args.o.data;
    p.d_o = args.dO.data;
    copyStrides(args.o, p.o_strides);
    copyStrides(args.dO, p.d_o_strides);
    p.key_sum_in = args.initialKeySum;
    p.d_key_sum_out = args.dFinalKeySum;
    p.d_key_sum_in = args.dInitialKeySum;
    p.d_o_scaled = workspace + layout.dOScaled;
    p.row_gradient = floatsAt(layout.rowGradient, true);
    p.key_pieces = floatsAt(layout.keyPieces, true);
    p.query_pieces = floatsAt(layout.queryPieces, true);
    p.pieces = layout.pieces;
  }
  p.batch = static_cast<int>(args.q.batch());
  p.seqlen = static_cast<int>(args.q.seqlen());
  p.q_heads = config.qHeads;
  p.kv_heads = config.kvHeads;
  p.scale = config.scale;
  return p;
}

/// Whether two elements of `view` share an address (a zero stride, or
/// strides that interleave): the helper kernels update dq and dk in place.
bool overlapsItself(const TensorView &view) {
  std::pair<int64_t, int64_t> dims[4]; // (stride, size) of the dims of size > 1
  int count = 0;
  for (int dim = 0; dim < 4; ++dim)
    if (view.shape[dim] > 1)
      dims[count++] = {view.strides[dim], view.shape[dim]};
  std::sort(dims, dims + count);
  for (int i = 0; i < count; ++i)
    if (dims[i].first < (i == 0 ? 1 : dims[i - 1].first * dims[i - 1].second))
      return true;
  return false;
}

/// The kernels read the inputs (q, k, v, dO, the log-decays, the initial
/// state, the final state's gradient) after earlier kernels wrote the
/// outputs (dq, dk, dv, the log-decays' and the initial state's gradients,
/// the workspace): an output sharing memory with an input, with another
/// output or with itself would give wrong gradients silently, so it is
/// refused.
void requireNoOverlaps(const AttnLaunchConfig &config, const AttnLinearBackwardArgs &args) {
  struct Range {
    uintptr_t begin, end;
    const char *name;
  };
  const bool tokens = args.q.numElements() != 0;
  auto viewRange = [tokens](const TensorView &view, const char *name) {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(view.data);
    return Range{begin, tokens ? begin + viewExtentBytes(view) : begin, name};
  };
  std::vector<Range> inputs = {viewRange(args.q, "q"), viewRange(args.k, "k"),
                               viewRange(args.v, "v"), viewRange(args.dO, "dO")};
  if (config.normalize)
    inputs.push_back(viewRange(args.o, "o"));
  std::vector<Range> outputs = {viewRange(args.dq, "dq"), viewRange(args.dk, "dk"),
                                viewRange(args.dv, "dv")};
  for (const SideBuffer &buffer : sideBuffers(config, args)) {
    if (!buffer.pointer)
      continue;
    const uintptr_t begin = reinterpret_cast<uintptr_t>(buffer.pointer);
    const std::string_view name = buffer.name;
    const bool written = name == "dLogDecay" || name == "dInitialState" || name == "dInitialKeySum";
    (written ? outputs : inputs).push_back(Range{begin, begin + buffer.bytes, buffer.name});
  }
  if (args.workspace) {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(args.workspace);
    outputs.push_back(Range{begin, begin + args.workspaceBytes, "workspace"});
  }
  auto overlap = [](const Range &a, const Range &b) { return a.begin < b.end && b.begin < a.end; };
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Range &output = outputs[i];
    for (const Range &input : inputs)
      if (overlap(output, input))
        fail(output.name, fmt::format("shares memory with {}, which the backward reads after "
                                      "writing {}: give it a buffer of its own",
                                      input.name, output.name));
    for (size_t j = 0; j < i; ++j)
      if (overlap(output, outputs[j]))
        fail(output.name, fmt::format("shares memory with {}", outputs[j].name));
  }
  for (auto [view, name] : {std::make_pair(&args.dq, "dq"), std::make_pair(&args.dk, "dk"),
                            std::make_pair(&args.dv, "dv")})
    if (tokens && overlapsItself(*view))
      fail(name, "its strides make elements share memory; the backward writes each element once");
}

} // namespace

void validateLinearBackwardArgs(const AttnLaunchConfig &config,
                                const AttnLinearBackwardArgs &args) {
  validateLaunchConfig(config);
  if (!config.linearFamily || !config.backward)
    fail("config", "the kernel is not the backward module of linear attention or retention "
                   "(compile it with `attnc --backward` or Compiler::compileBackward)");
  validateLinearViews(config, args.q, args.k, args.v);
  validateAgainstConfig(args.dO, "dO", config, config.qHeads, "query");
  validateAgainstConfig(args.dq, "dq", config, config.qHeads, "query");
  validateAgainstConfig(args.dk, "dk", config, config.kvHeads, "kv");
  validateAgainstConfig(args.dv, "dv", config, config.kvHeads, "kv");
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
  if (config.gated && !args.logDecay && args.q.numElements() != 0)
    fail("logDecay", "the kernel is gated: pass the forward's per-token log-decays");
  if (!config.gated && (args.logDecay || args.dLogDecay))
    fail(args.logDecay ? "logDecay" : "dLogDecay",
         "the kernel is not gated; it takes no log-decays");
  if (config.normalize) {
    if (!args.o.data) {
      // An empty sequence has no output to read.
      if (args.q.numElements() != 0)
        fail("o", "normalized linear attention's backward reads the forward's output: pass it");
    } else {
      // Read by element groups, as dO.
      validateAgainstConfig(args.o, "o", config, config.qHeads, "query");
      if (!sameShape(args.o, args.q))
        fail("o", "shape " + shapeString(args.o) + " must equal " + shapeString(args.q) +
                      " (the forward's output)");
      validateTmaOperand(args.o, "o");
    }
  } else {
    if (args.o.data)
      fail("o", "the kernel does not normalize; its backward takes no forward output");
    for (auto [pointer, name] :
         {std::make_pair<const void *>(args.initialKeySum, "initialKeySum"),
          std::make_pair<const void *>(args.dFinalKeySum, "dFinalKeySum"),
          std::make_pair<const void *>(args.dInitialKeySum, "dInitialKeySum")})
      if (pointer)
        fail(name, "the kernel does not normalize, so it has no key sum");
  }
  requireFloatAligned(sideBuffers(config, args));
  if (reinterpret_cast<uintptr_t>(args.workspace) % 256 != 0)
    fail("workspace", "pointer must be 256-byte aligned");
  requireNoOverlaps(config, args);
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
  functions.states = module.function(ATTN_LINEAR_BWD_STATES_KERNEL_NAME);
  functions.query = module.function(ATTN_LINEAR_BWD_QUERY_KERNEL_NAME);
  functions.key = module.function(ATTN_LINEAR_BWD_KEY_KERNEL_NAME);
  functions.gate = module.function(ATTN_LINEAR_BWD_GATE_KERNEL_NAME);
  functions.initialState = module.function(ATTN_LINEAR_BWD_INITIAL_STATE_KERNEL_NAME);
  functions.keyPieces = module.function(ATTN_LINEAR_BWD_KEY_PIECES_KERNEL_NAME);
  functions.keyScan = module.function(ATTN_LINEAR_BWD_KEY_SCAN_KERNEL_NAME);
  functions.denominator = module.function(ATTN_LINEAR_BWD_DENOMINATOR_KERNEL_NAME);
  functions.queryScan = module.function(ATTN_LINEAR_BWD_QUERY_SCAN_KERNEL_NAME);
  functions.keySumGradient = module.function(ATTN_LINEAR_BWD_KEY_SUM_GRADIENT_KERNEL_NAME);
  return functions;
}

void launchLinearBackward(LinearBackwardFunctions &functions, const AttnLaunchConfig &config,
                          const AttnLinearBackwardArgs &args, CUstream stream) {
  validateLinearBackwardArgs(config, args);
  if (args.q.batch() == 0)
    return;
  requireDeviceBuffers({{&args.q, "q"},
                        {&args.k, "k"},
                        {&args.v, "v"},
                        {&args.dO, "dO"},
                        {&args.dq, "dq"},
                        {&args.dk, "dk"},
                        {&args.dv, "dv"}},
                       sideBuffers(config, args));

  const unsigned heads = static_cast<unsigned>(config.qHeads);
  const unsigned batch = static_cast<unsigned>(args.q.batch());
  const Dim3 helperBlock{ATTN_LINEAR_BWD_THREADS, 1, 1};
  const Dim3 stateGrid{
      static_cast<unsigned>((config.headDim * config.headDim + ATTN_LINEAR_BWD_THREADS - 1) /
                            ATTN_LINEAR_BWD_THREADS),
      heads, batch};
  const Dim3 scanBlock{static_cast<unsigned>(config.headDim), 1, 1};
  const Dim3 queryScanGrid{heads, batch, 1};
  if (args.q.seqlen() == 0) {
    attn_abi::AttnLinearBackwardParams params{};
    params.d_state_out = args.dFinalState;
    params.d_state_in = args.dInitialState;
    params.d_key_sum_out = args.dFinalKeySum;
    params.d_key_sum_in = args.dInitialKeySum;
    params.batch = static_cast<int>(batch);
    params.q_heads = config.qHeads;
    params.kv_heads = config.kvHeads;
    params.scale = config.scale;
    void *kernelArgs[] = {&params};
    if (args.dInitialState)
      functions.initialState.launch(stateGrid, helperBlock, 0, stream, kernelArgs);
    if (config.normalize && args.dInitialKeySum)
      functions.queryScan.launch(queryScanGrid, scanBlock, 0, stream, kernelArgs);
    return;
  }

  const LinearBackwardLayout layout = layoutOf(config, args);
  if (layout.total > 0)
    requireWorkspace(args.workspace, args.workspaceBytes, layout.total,
                     "the per-head outputs, pass states and split", "linearBackwardWorkspaceBytes");
  attn_abi::AttnLinearBackwardParams params = encodeParams(config, args, layout);
  void *kernelArgs[] = {&params};
  // Element-group kernels: enough blocks for every SM several times over;
  // the kernels stride over the rest.
  const unsigned helperBlocks = static_cast<unsigned>(multiprocessorsOf(currentDevice()) * 8);
  const Dim3 helperGrid{helperBlocks, 1, 1};
  if (args.initialState || args.dFinalState)
    functions.states.launch(stateGrid, helperBlock, 0, stream, kernelArgs);
  // Normalized: the denominators' gradients, and the passes' dO.
  TensorView passDO = args.dO;
  if (config.normalize) {
    functions.keyPieces.launch(helperGrid, helperBlock, 0, stream, kernelArgs);
    functions.keyScan.launch(Dim3{static_cast<unsigned>(config.kvHeads), batch, 1}, scanBlock, 0,
                             stream, kernelArgs);
    functions.denominator.launch(helperGrid, helperBlock, 0, stream, kernelArgs);
    functions.queryScan.launch(queryScanGrid, scanBlock, 0, stream, kernelArgs);
    passDO = contiguousBSHD(params.d_o_scaled, args.q.dtype, args.q.batch(), args.q.seqlen(),
                            config.qHeads, config.headDim);
  }

  char *workspace = static_cast<char *>(args.workspace);
  AttnLaunchConfig passConfig = config;
  passConfig.backward = 0;
  passConfig.normalize = 0;
  AttnLinearArgs pass;
  pass.workspace = layout.splitBytes ? workspace + layout.split : nullptr;
  pass.workspaceBytes = layout.splitBytes;
  pass.logDecay = args.logDecay;

  // dQ: (dO, v, phi(k)) in sequence order from state_in^T; its final state
  // is S_final^T, which the gate's gradient needs.
  pass.q = passDO;
  pass.k = args.v;
  pass.v = args.k;
  pass.o = args.dq;
  pass.initialState = params.state_in_t;
  pass.finalState = params.state_out_t;
  LinearPassOptions options;
  options.featureMapOperands = ATTN_LINEAR_MAP_V;
  launchLinearPass(functions.chunkwise, passConfig, pass, options, stream);

  // The reversed walks (a non-causal pass has no order to reverse), their
  // q the kv-headed tensor.
  options.reverse = config.causal != 0;
  options.headsSwapped = true;
  auto perHead = [&](uint64_t offset) {
    return contiguousBSHD(workspace + offset, args.q.dtype, args.q.batch(), args.q.seqlen(),
                          config.qHeads, config.headDim);
  };
  // dV: (phi(k), phi(q), dO) from dS / s; its final state is
  // e^{-g_0} dS0 / s.
  pass.q = args.k;
  pass.k = args.q;
  pass.v = passDO;
  pass.o = layout.perHead ? perHead(layout.headDv) : args.dv;
  pass.initialState = params.d_state_out_scaled;
  pass.finalState = args.dInitialState;
  options.featureMapOperands = ATTN_LINEAR_MAP_Q | ATTN_LINEAR_MAP_K;
  launchLinearPass(functions.chunkwise, passConfig, pass, options, stream);
  // d phi(k): (v, dO, phi(q)) from dS^T / s.
  pass.q = args.v;
  pass.k = passDO;
  pass.v = args.q;
  pass.o = layout.perHead ? perHead(layout.headDPhiK) : args.dk;
  pass.initialState = params.d_state_out_t;
  pass.finalState = nullptr;
  options.featureMapOperands = ATTN_LINEAR_MAP_V;
  launchLinearPass(functions.chunkwise, passConfig, pass, options, stream);

  if (config.normalize)
    functions.keySumGradient.launch(helperGrid, helperBlock, 0, stream, kernelArgs);
  functions.query.launch(helperGrid, helperBlock, 0, stream, kernelArgs);
  functions.key.launch(helperGrid, helperBlock, 0, stream, kernelArgs);
  if (config.gated && args.dLogDecay)
    functions.gate.launch(Dim3{heads, batch, 1}, Dim3{ATTN_LINEAR_BWD_SCAN_THREADS, 1, 1}, 0,
                          stream, kernelArgs);
  if (args.dInitialState)
    functions.initialState.launch(stateGrid, helperBlock, 0, stream, kernelArgs);
}

} // namespace attn
