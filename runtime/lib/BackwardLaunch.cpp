//===- BackwardLaunch.cpp - Backward attention kernel launch --------------===//

#include "attn/runtime/BackwardLaunch.h"

#include "LaunchChecks.h"

#include "attn/runtime/TensorMap.h"

#include "exact_sum.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <cmath>

namespace attn {

using namespace detail;

namespace {
constexpr uint64_t kWorkspaceAlign = 256;

uint64_t alignUp(uint64_t value, uint64_t align) { return (value + align - 1) / align * align; }

/// The batch and sequence bounds of a call: the tensors' own, or for packed
/// sequences their count and the longest lengths.
LogicalShape backwardShape(const AttnBackwardArgs &args) {
  if (args.packed.active())
    return {args.packed.batch, args.packed.maxSeqlenQ, args.packed.maxSeqlenK};
  return {args.q.batch(), args.q.seqlen(), args.k.seqlen()};
}

/// Whether the main kernel sums the capture gradients into exact records.
bool exactCaptureGrads(const AttnBackwardArgs &args) {
  return !args.captureGrads.empty() &&
         args.captureGradSum == AttnBackwardArgs::CaptureGradSum::Exact;
}

/// The capture gradients as the capture views they are laid out as.
std::vector<CaptureView> gradientViews(const AttnBackwardArgs &args) {
  std::vector<CaptureView> views;
  for (const CaptureGradView &gradient : args.captureGrads)
    views.push_back(CaptureView{gradient.data, DType::F32, gradient.shape});
  return views;
}

/// The grid dimensions a backward call launches, checked against the
/// hardware's limits: (key tiles, kv heads, batch) for the main kernel (and
/// the step list), (query blocks, q heads, batch) for the row kernels.
struct BackwardGrids {
  Dim3 main, rows;
};

BackwardGrids backwardGrids(const AttnLaunchConfig &config, const LogicalShape &shape) {
  const int64_t keyTiles = (shape.seqlenK + config.blockN - 1) / config.blockN;
  const int64_t queryBlocks = (shape.seqlenQ + config.blockM - 1) / config.blockM;
  if (shape.batch > 65535)
    fail("q", fmt::format("batch {} exceeds the backward grid's 65535 (the grid's z dimension)",
                          shape.batch));
  BackwardGrids grids;
  grids.main = Dim3{static_cast<unsigned>(keyTiles), static_cast<unsigned>(config.kvHeads),
                    static_cast<unsigned>(shape.batch)};
  grids.rows = Dim3{static_cast<unsigned>(queryBlocks), static_cast<unsigned>(config.qHeads),
                    static_cast<unsigned>(shape.batch)};
  return grids;
}

/// Words of the step list: bwdStepListEntries for each block of the main
/// kernel's grid, none where the config walks no list.
uint64_t stepListWords(const AttnLaunchConfig &config, const LogicalShape &shape) {
  if (!config.stepList)
    return 0;
  const Dim3 grid = backwardGrids(config, shape).main;
  const uint64_t perBlock = uint64_t(attn_abi::bwdStepListEntries(
      shape.seqlenQ, config.blockM, config.qHeads / config.kvHeads));
  // An entry holds its step in 31 bits.
  if (perBlock - 2 > uint64_t(INT32_MAX))
    fail("q", fmt::format("{} query blocks of {} rows times {} query heads a kv head exceed the "
                          "step list's 2^31 steps a block",
                          (shape.seqlenQ + config.blockM - 1) / config.blockM, config.blockM,
                          config.qHeads / config.kvHeads));
  return uint64_t(grid.x) * grid.y * grid.z * perBlock;
}

/// The workspace's parts, in order, each 256-byte aligned.
struct WorkspaceLayout {
  uint64_t lseLog2 = 0, delta = 0, dqAccum = 0, semaphores = 0;
  /// The step list's words (AttnBwdParams::step_list); none without one.
  uint64_t stepList = 0;
  /// The exact capture gradients' records, one part per gradient.
  std::vector<uint64_t> captureRecords;
  uint64_t captureRecordsBegin = 0, total = 0;
};

WorkspaceLayout workspaceLayout(const AttnLaunchConfig &config, const LogicalShape &shape,
                                const AttnBackwardArgs &args) {
  const uint64_t rows = uint64_t(shape.batch) * uint64_t(config.qHeads) *
                        uint64_t(attn_abi::bwdPaddedQueries(shape.seqlenQ, config.blockM));
  const uint64_t queryBlocks = rows / uint64_t(config.blockM);
  WorkspaceLayout layout;
  layout.lseLog2 = 0;
  layout.delta = alignUp(rows * sizeof(float), kWorkspaceAlign);
  layout.dqAccum = layout.delta + alignUp(rows * sizeof(float), kWorkspaceAlign);
  layout.semaphores =
      layout.dqAccum + alignUp(rows * uint64_t(config.headDim) * sizeof(float), kWorkspaceAlign);
  // The deterministic mode's counters: one per query block and pass.
  const uint64_t counters = queryBlocks * uint64_t(attn_abi::bwdPasses(config.headDim));
  layout.stepList = layout.semaphores + alignUp(counters * sizeof(int32_t), kWorkspaceAlign);
  layout.captureRecordsBegin =
      layout.stepList + alignUp(stepListWords(config, shape) * sizeof(uint32_t), kWorkspaceAlign);
  layout.total = layout.captureRecordsBegin;
  if (exactCaptureGrads(args))
    for (const CaptureView &gradient : gradientViews(args)) {
      const uint64_t elements = uint64_t(captureBytes(gradient, "captureGrads")) / sizeof(float);
      if (elements > (uint64_t(1) << 52))
        fail("captureGrads", fmt::format("{} elements need more exact-sum workspace than 2^57 "
                                         "bytes; use CaptureGradSum::Atomic",
                                         elements));
      layout.captureRecords.push_back(layout.total);
      layout.total +=
          alignUp(elements * attn_exact::kExactSumWords * sizeof(int64_t), kWorkspaceAlign);
    }
  return layout;
}

/// Elements of lse: [B, Hq, Sq], or [Hq, total_q] for packed sequences.
uint64_t lseElements(const AttnLaunchConfig &config, const AttnBackwardArgs &args) {
  const uint64_t rows = uint64_t(args.q.seqlen()) * uint64_t(config.qHeads);
  return args.packed.active() ? rows : rows * uint64_t(args.q.batch());
}

/// A gradient or dO must have the shape of the tensor it belongs to.
void requireSameShape(const TensorView &view, const char *name, const TensorView &like,
                      const char *likeName) {
  for (int dim = 0; dim < 4; ++dim)
    if (view.shape[dim] != like.shape[dim])
      fail(name, "shape " + shapeString(view) + " does not match " + likeName + "'s " +
                     shapeString(like));
}

/// Bytes of the forward's tile coverage for this call: one per (batch, query
/// head, forward query block, forward key tile).
uint64_t coverageBytes(const AttnLaunchConfig &config, const AttnBackwardArgs &args,
                       const LogicalShape &shape) {
  const uint64_t queryBlocks =
      (uint64_t(shape.seqlenQ) + uint64_t(args.coverageBlockM) - 1) / uint64_t(args.coverageBlockM);
  const uint64_t keyTiles =
      (uint64_t(shape.seqlenK) + uint64_t(args.coverageBlockN) - 1) / uint64_t(args.coverageBlockN);
  return uint64_t(shape.batch) * uint64_t(config.qHeads) * queryBlocks * keyTiles;
}
} // namespace

void validateBackwardArgs(const AttnLaunchConfig &config, const AttnBackwardArgs &args) {
  validateLaunchConfig(config);
  if (config.linearFamily)
    fail("config", "the kernel is linear attention or retention: its backward module runs "
                   "with runLinearBackward (AttnLinearBackwardArgs)");
  if (!config.backward)
    fail("config", "the kernel is a forward module: compile the spec's backward "
                   "(attnc --backward, Compiler::compileBackward) and launch that");
  validateAgainstConfig(args.q, "q", config, config.qHeads, "query");
  validateAgainstConfig(args.k, "k", config, config.kvHeads, "kv");
  validateAgainstConfig(args.v, "v", config, config.kvHeads, "kv");
  validateAgainstConfig(args.o, "o", config, config.qHeads, "query");
  validateAgainstConfig(args.dO, "dO", config, config.qHeads, "query");
  validateAgainstConfig(args.dq, "dq", config, config.qHeads, "query");
  validateAgainstConfig(args.dk, "dk", config, config.kvHeads, "kv");
  validateAgainstConfig(args.dv, "dv", config, config.kvHeads, "kv");
  requireSameShape(args.o, "o", args.q, "q");
  requireSameShape(args.dO, "dO", args.q, "q");
  requireSameShape(args.dq, "dq", args.q, "q");
  requireSameShape(args.v, "v", args.k, "k");
  requireSameShape(args.dk, "dk", args.k, "k");
  requireSameShape(args.dv, "dv", args.k, "k");
  requireQueryKeyExtents(args.q, args.k);
  // Q, K, V and dO go through TMA; O, dq, dk and dv through pointers with
  // the same rules (the row kernels read and write whole 4-byte pairs).
  validateTmaOperands(args.q, args.k, args.v, args.o);
  validateTmaOperand(args.dO, "dO");
  validateTmaOperand(args.dq, "dq");
  validateTmaOperand(args.dk, "dk");
  validateTmaOperand(args.dv, "dv");
  if (args.packed.active())
    validatePackedSequences(args.packed, args.q, args.k);

  if (!args.lse && lseElements(config, args) != 0)
    fail("lse", "pointer is null");
  if (reinterpret_cast<uintptr_t>(args.lse) % alignof(float) != 0)
    fail("lse", "pointer must be 4-byte aligned");

  const LogicalShape shape = backwardShape(args);
  backwardGrids(config, shape);
  validateCaptureViews(config, args.captures, shape);
  validateCaptureGradients(config, args.captureGrads, shape);
  if (args.tileCoverage && (args.coverageBlockM <= 0 || args.coverageBlockN <= 0))
    fail("tileCoverage", fmt::format("needs the forward's tile (coverageBlockM, coverageBlockN "
                                     "positive), got {} x {}",
                                     args.coverageBlockM, args.coverageBlockN));
  if (args.deterministic && !args.captureGrads.empty() &&
      args.captureGradSum == AttnBackwardArgs::CaptureGradSum::Atomic)
    fail("captureGradSum", "Atomic sums the capture gradients with float atomics, which are not "
                           "bitwise reproducible: the deterministic mode needs Exact");
  const uint64_t needed = workspaceLayout(config, shape, args).total;
  if (shape.batch > 0 && (shape.seqlenQ > 0 || shape.seqlenK > 0)) {
    if (!args.workspace)
      fail("workspace",
           fmt::format("pointer is null; the backward needs {} bytes (backwardWorkspaceBytes)",
                       needed));
    if (args.workspaceBytes < needed)
      fail("workspace", fmt::format("{} bytes, but this call needs {} (backwardWorkspaceBytes)",
                                    args.workspaceBytes, needed));
    if (reinterpret_cast<uintptr_t>(args.workspace) % kWorkspaceAlign != 0)
      fail("workspace", "pointer must be 256-byte aligned");
  }
}

uint64_t backwardWorkspaceBytes(const AttnLaunchConfig &config, const AttnBackwardArgs &args) {
  // Every check but the workspace's own.
  AttnBackwardArgs shapes = args;
  shapes.workspace = nullptr;
  shapes.workspaceBytes = 0;
  shapes.deterministic = false;
  validateLaunchConfig(config);
  const LogicalShape shape = backwardShape(shapes);
  if (shape.batch < 0 || shape.seqlenQ < 0 || shape.seqlenK < 0)
    fail("q", "negative extents in shape " + shapeString(args.q));
  return workspaceLayout(config, shape, shapes).total;
}

namespace {
/// The parameter block of arguments validateBackwardArgs has accepted, with
/// their workspace layout and capture gradients' views.
attn_abi::AttnBwdParams encodeBackwardParams(const AttnLaunchConfig &config,
                                             const AttnBackwardArgs &args,
                                             const WorkspaceLayout &layout,
                                             const std::vector<CaptureView> &gradients) {
  attn_abi::AttnBwdParams params{};
  params.q_map = encodeBSHDTensorMap(args.q, config.blockM, kTmaBoxCols, "q");
  params.k_map = encodeBSHDTensorMap(args.k, config.blockN, kTmaBoxCols, "k");
  params.v_map = encodeBSHDTensorMap(args.v, config.blockN, kTmaBoxCols, "v");
  params.do_map = encodeBSHDTensorMap(args.dO, config.blockM, kTmaBoxCols, "dO");
  params.o = args.o.data;
  params.d_o = args.dO.data;
  params.dq = args.dq.data;
  params.dk = args.dk.data;
  params.dv = args.dv.data;
  auto copyStrides = [](const TensorView &view, long long (&strides)[3]) {
    strides[0] = view.strides[0];
    strides[1] = view.strides[1];
    strides[2] = view.strides[2];
  };
  copyStrides(args.o, params.o_strides);
  copyStrides(args.dO, params.do_strides);
  copyStrides(args.dq, params.dq_strides);
  copyStrides(args.dk, params.dk_strides);
  copyStrides(args.dv, params.dv_strides);
  params.lse = args.lse;
  const LogicalShape shape = backwardShape(args);
  char *workspace = static_cast<char *>(args.workspace);
  params.lse_log2 = reinterpret_cast<float *>(workspace + layout.lseLog2);
  params.delta = reinterpret_cast<float *>(workspace + layout.delta);
  params.dq_accum = reinterpret_cast<float *>(workspace + layout.dqAccum);
  params.dq_semaphores = reinterpret_cast<int *>(workspace + layout.semaphores);
  params.deterministic = args.deterministic ? 1 : 0;
  // One block per multiprocessor: the plan's shared memory takes more than
  // half of one.
  params.resident_blocks = multiprocessorsOf(currentDevice());
  params.batch = static_cast<int>(shape.batch);
  params.seqlen_q = static_cast<int>(shape.seqlenQ);
  params.seqlen_k = static_cast<int>(shape.seqlenK);
  params.q_heads = config.qHeads;
  params.kv_heads = config.kvHeads;
  constexpr double kLog2e = 1.4426950408889634074;
  params.scale = config.scale;
  params.scale_log2 = static_cast<float>(double(config.scale) * kLog2e);
  if (args.packed.active()) {
    params.cu_seqlens_q = args.packed.cuSeqlensQ;
    params.cu_seqlens_k = args.packed.cuSeqlensK;
    params.total_q = static_cast<int>(args.q.seqlen());
    params.total_k = static_cast<int>(args.k.seqlen());
  }
  fillCaptureEntries(args.captures, params.captures);
  fillCaptureEntries(gradients, params.capture_grads);
  if (exactCaptureGrads(args)) {
    // The main kernel adds into the records; the sum kernel writes the
    // gradients from them.
    params.capture_grads_exact = 1;
    for (size_t index = 0; index < gradients.size(); ++index) {
      params.capture_grad_outputs[index] = args.captureGrads[index].data;
      params.capture_grads[index].data = workspace + layout.captureRecords[index];
    }
  }
  params.tile_coverage = args.tileCoverage;
  params.coverage_block_m = args.coverageBlockM;
  params.coverage_block_n = args.coverageBlockN;
  if (config.stepList)
    params.step_list = reinterpret_cast<unsigned *>(workspace + layout.stepList);
  return params;
}
} // namespace

attn_abi::AttnBwdParams makeBackwardParams(const AttnLaunchConfig &config,
                                           const AttnBackwardArgs &args) {
  validateBackwardArgs(config, args);
  return encodeBackwardParams(config, args, workspaceLayout(config, backwardShape(args), args),
                              gradientViews(args));
}

BackwardFunctions loadBackwardFunctions(const Module &module, const AttnLaunchConfig &config) {
  BackwardFunctions functions;
  functions.preprocess = module.function(ATTN_BWD_PREPROCESS_KERNEL_NAME);
  functions.main = module.function(config.kernelName);
  functions.convert = module.function(ATTN_BWD_CONVERT_KERNEL_NAME);
  functions.captureSum = module.function(ATTN_BWD_CAPTURE_SUM_KERNEL_NAME);
  // The main kernel of a module with the step-list kernel reads the list
  // unchecked: a config that disagrees would launch it without one.
  std::optional<KernelFunction> stepList = module.findFunction(ATTN_BWD_STEP_LIST_KERNEL_NAME);
  if (stepList.has_value() != (config.stepList != 0))
    fail("config", fmt::format("step_list is {}, but the module's main kernel walks {}step list "
                               "(the compiler's launch metadata says which)",
                               config.stepList, stepList ? "a " : "no "));
  if (stepList)
    functions.stepList = *stepList;
  functions.main.setMaxDynamicSharedMemory(config.sharedMemoryBytes);
  return functions;
}

void launchBackward(const Module &module, const AttnLaunchConfig &config,
                    const AttnBackwardArgs &args, CUstream stream) {
  BackwardFunctions functions = loadBackwardFunctions(module, config);
  launchBackward(functions, config, args, stream);
}

void launchBackward(BackwardFunctions &functions, const AttnLaunchConfig &config,
                    const AttnBackwardArgs &args, CUstream stream) {
  validateBackwardArgs(config, args);
  const LogicalShape shape = backwardShape(args);
  if (shape.batch == 0 || (shape.seqlenQ == 0 && shape.seqlenK == 0))
    return;
  // A host pointer or a view past its allocation would surface later as an
  // illegal address, a sticky error that poisons the context.
  const int device = currentDevice();
  const std::pair<const TensorView *, const char *> views[] = {
      {&args.q, "q"},   {&args.k, "k"},   {&args.v, "v"},   {&args.o, "o"},
      {&args.dO, "dO"}, {&args.dq, "dq"}, {&args.dk, "dk"}, {&args.dv, "dv"}};
  for (auto [view, name] : views)
    if (view->numElements() != 0)
      requireDeviceMemory(view->data, viewExtentBytes(*view), name, device);
  if (uint64_t elements = lseElements(config, args))
    requireDeviceMemory(args.lse, elements * sizeof(float), "lse", device);
  if (args.packed.active()) {
    const uint64_t offsetBytes = uint64_t(args.packed.batch + 1) * sizeof(int32_t);
    requireDeviceMemory(args.packed.cuSeqlensQ, offsetBytes, "packed.cuSeqlensQ", device);
    requireDeviceMemory(args.packed.cuSeqlensK, offsetBytes, "packed.cuSeqlensK", device);
  }
  const WorkspaceLayout layout = workspaceLayout(config, shape, args);
  requireDeviceMemory(args.workspace, layout.total, "workspace", device);
  requireCaptureMemory(config, args.captures, device);
  if (args.tileCoverage)
    requireDeviceMemory(args.tileCoverage, coverageBytes(config, args, shape), "tileCoverage",
                        device);
  const std::vector<CaptureView> gradients = gradientViews(args);
  requireCaptureMemory(config, gradients, device);

  // Validated above: encode without checking again.
  attn_abi::AttnBwdParams params = encodeBackwardParams(config, args, layout, gradients);
  void *kernelArgs[] = {&params};
  const BackwardGrids grids = backwardGrids(config, shape);
  const Dim3 rowBlock{ATTN_BWD_ROW_THREADS, 1, 1};
  // The main kernel adds into the capture gradients, or into their exact
  // records (then the sum kernel overwrites every element).
  const bool exact = exactCaptureGrads(args);
  uint64_t gradientElements = 0;
  for (const CaptureView &gradient : gradients)
    if (uint64_t bytes = captureBytes(gradient, "captureGrads")) {
      gradientElements = std::max<uint64_t>(gradientElements, bytes / sizeof(float));
      if (!exact)
        ATTN_CU_CHECK_CTX("captureGrads: clearing a gradient", cuMemsetD32Async,
                          reinterpret_cast<CUdeviceptr>(gradient.data), 0,
                          bytes / sizeof(float), stream);
    }
  if (exact && gradientElements > 0)
    ATTN_CU_CHECK_CTX("workspace: clearing the capture gradients' sums", cuMemsetD32Async,
                      reinterpret_cast<CUdeviceptr>(static_cast<char *>(args.workspace) +
                                                    layout.captureRecordsBegin),
                      0, (layout.total - layout.captureRecordsBegin) / sizeof(int32_t), stream);
  if (grids.rows.x > 0)
    functions.preprocess.launch(grids.rows, rowBlock, 0, stream, kernelArgs);
  if (grids.main.x > 0 && config.stepList)
    functions.stepList.launch(grids.main, Dim3{ATTN_BWD_STEP_LIST_THREADS, 1, 1}, 0, stream,
                              kernelArgs);
  if (grids.main.x > 0)
    functions.main.launch(grids.main,
                          Dim3{static_cast<unsigned>(config.threadsPerBlock), 1, 1},
                          config.sharedMemoryBytes, stream, kernelArgs);
  if (grids.rows.x > 0)
    functions.convert.launch(grids.rows, rowBlock, 0, stream, kernelArgs);
  if (exact && gradientElements > 0) {
    const uint64_t blocks = std::min<uint64_t>(
        (gradientElements + ATTN_BWD_ROW_THREADS - 1) / ATTN_BWD_ROW_THREADS,
        uint64_t(multiprocessorsOf(device)) * 8);
    functions.captureSum.launch(Dim3{static_cast<unsigned>(blocks), 1, 1}, rowBlock, 0, stream,
                                kernelArgs);
  }
}

} // namespace attn
