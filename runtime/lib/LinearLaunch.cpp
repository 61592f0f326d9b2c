//===- LinearLaunch.cpp - Linear attention and retention launch -----------===//

#include "attn/runtime/AttentionLaunch.h"

#include "LaunchChecks.h"

#include "attn/runtime/TensorMap.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

namespace attn {

using namespace detail;

void validateLinearArgs(const AttnLaunchConfig &config, const AttnLinearArgs &args, bool decode) {
  validateLaunchConfig(config);
  if (!config.linearFamily)
    fail("config", "the kernel is softmax attention, not linear attention or retention");
  if (config.backward)
    fail("config", "the kernel is a backward module: run it with runLinearBackward "
                   "(AttnLinearBackwardArgs)");
  validateLinearViews(config, args.q, args.k, args.v);
  validateAgainstConfig(args.o, "o", config, config.qHeads, "query");
  for (int dim = 0; dim < 2; ++dim)
    if (args.o.shape[dim] != args.q.shape[dim])
      fail("o", "shape " + shapeString(args.o) + " does not match q's " + shapeString(args.q) +
                    " in batch and sequence length");
  if (decode) {
    if (args.q.seqlen() != 1)
      fail("q", fmt::format("the one-token step takes seqlen 1, got {}", args.q.seqlen()));
  } else {
    validateTmaOperands(args.q, args.k, args.v, args.o);
  }
  if (!config.normalize && (args.initialKeySum || args.finalKeySum))
    fail(args.initialKeySum ? "initialKeySum" : "finalKeySum",
         "the kernel does not normalize, so it has no key sum");
  if (config.gated && !args.logDecay && args.q.numElements() != 0)
    fail("logDecay", "the kernel is gated: pass the per-token log-decays");
  if (!config.gated && args.logDecay)
    fail("logDecay", "the kernel is not gated; it takes no log-decays");
  requireFloatAligned(linearBuffers(config, args));
}

LinearSplit linearSplitFor(const AttnLaunchConfig &config, int64_t batch, int64_t seqlen,
                           int maxSegments) {
  // A split costs a second pass over K and V: it pays only while the
  // unsplit grid leaves SMs idle. Since one fold kernel gives every segment
  // its entry state, filling the GPU pays down to segments of 4 chunks (the
  // shortest measured on H100: docs/benchmarks.md, ninth run).
  constexpr int64_t kMinSegmentChunks = 4;
  const int64_t blocksPerSm = ATTN_LINEAR_BLOCKS_PER_SM(config.blockN / ATTN_LINEAR_SLICE);
  LinearSplit split;
  const int64_t chunks = (seqlen + config.blockM - 1) / config.blockM;
  const int64_t blocks = int64_t(config.headDim / config.blockN) * config.qHeads * batch;
  if (chunks == 0 || blocks == 0)
    return split;
  const int64_t multiprocessors = multiprocessorsOf(currentDevice());
  const int64_t resident = blocksPerSm * multiprocessors;
  int64_t segments = std::min<int64_t>(maxSegments, chunks);
  if (maxSegments <= 0) {
    if (attn_abi::linearGridFillsGpu(blocks, multiprocessors))
      return split;
    segments = std::max<int64_t>(1, std::min(resident / blocks, chunks / kMinSegmentChunks));
  }
  split.segmentChunks = static_cast<int>((chunks + segments - 1) / segments);
  split.segments = static_cast<int>((chunks + split.segmentChunks - 1) / split.segmentChunks);
  if (split.segments == 1)
    return split;
  // Pieces per segment: enough segment-kernel blocks to fill the GPU,
  // dividing the segment evenly.
  const int64_t coveredSegments = config.causal ? split.segments - 1 : split.segments;
  int64_t pieces = std::max<int64_t>(1, resident / (blocks * coveredSegments));
  pieces = std::min<int64_t>(pieces, split.segmentChunks);
  while (split.segmentChunks % pieces != 0)
    --pieces;
  split.stateChunks = static_cast<int>(split.segmentChunks / pieces);
  split.stateSegments =
      config.causal ? static_cast<int>(coveredSegments * pieces)
                    : static_cast<int>((chunks + split.stateChunks - 1) / split.stateChunks);
  // The grids' z extents (batch x segments or pieces) must stay within
  // 65535; past that the sequence is not split.
  if (batch * std::max(split.segments, split.stateSegments) > 65535)
    return LinearSplit{};
  return split;
}

namespace {
/// Where the split's scratch lives in the workspace: per (batch, head,
/// segment) the state, then the key sums, then the log2-decays.
struct LinearScratch {
  uint64_t stateFloats = 0, keySumFloats = 0, decayFloats = 0;
  uint64_t bytes() const { return (stateFloats + keySumFloats + decayFloats) * sizeof(float); }
};

LinearScratch linearScratch(const AttnLaunchConfig &config, int64_t batch, const LinearSplit &split) {
  LinearScratch scratch;
  if (split.segments <= 1)
    return scratch;
  const uint64_t parts = uint64_t(batch) * uint64_t(config.qHeads) * uint64_t(split.stateSegments);
  scratch.stateFloats = parts * uint64_t(config.headDim) * uint64_t(config.headDim);
  scratch.keySumFloats = parts * uint64_t(config.headDim);
  scratch.decayFloats = parts;
  return scratch;
}

/// The parameter block of arguments validateLinearArgs has accepted, cut
/// by `split`, whose scratch lies at the start of the workspace.
attn_abi::AttnLinearParams encodeLinearParams(const AttnLaunchConfig &config,
                                              const AttnLinearArgs &args, const LinearSplit &split,
                                              const LinearScratch &scratch) {
  attn_abi::AttnLinearParams params{};
  params.q_map = encodeBSHDTensorMap(args.q, config.blockM, kTmaBoxCols, "q");
  params.k_map = encodeBSHDTensorMap(args.k, config.blockM, kTmaBoxCols, "k");
  params.v_map = encodeBSHDTensorMap(args.v, config.blockM, kTmaBoxCols, "v");
  params.o_map = encodeBSHDTensorMap(args.o, config.blockM, kTmaBoxCols, "o");
  params.state_in = args.initialState;
  params.state_out = args.finalState;
  params.key_sum_in = args.initialKeySum;
  params.key_sum_out = args.finalKeySum;
  params.log_decay = args.logDecay;
  float *workspace = static_cast<float *>(args.workspace);
  params.segment_state = scratch.bytes() ? workspace : nullptr;
  params.segment_key_sum = scratch.bytes() ? workspace + scratch.stateFloats : nullptr;
  params.segment_log2_decay =
      scratch.bytes() ? workspace + scratch.stateFloats + scratch.keySumFloats : nullptr;
  params.segments = split.segments;
  params.state_segments = split.stateSegments;
  params.state_chunks = split.stateChunks;
  params.segment_chunks =
      split.segments > 1 ? split.segmentChunks
                         : static_cast<int>((args.q.seqlen() + config.blockM - 1) / config.blockM);
  params.batch = static_cast<int>(args.q.batch());
  params.seqlen = static_cast<int>(args.q.seqlen());
  params.q_heads = config.qHeads;
  params.kv_heads = config.kvHeads;
  params.scale = config.scale;
  return params;
}
} // namespace

uint64_t linearWorkspaceBytes(const AttnLaunchConfig &config, int64_t batch,
                              const LinearSplit &split) {
  return linearScratch(config, batch, split).bytes();
}

namespace {
void requireSegmentCap(int segments) {
  if (segments < 0)
    fail("segments", fmt::format("expected 0 (chosen by the runtime) or a positive cap, got {}",
                                 segments));
}
} // namespace

uint64_t linearWorkspaceBytes(const AttnLaunchConfig &config, const AttnLinearArgs &args) {
  validateLinearArgs(config, args);
  requireSegmentCap(args.segments);
  const LinearSplit split =
      linearSplitFor(config, args.q.batch(), args.q.seqlen(), args.segments);
  return linearWorkspaceBytes(config, args.q.batch(), split);
}

LinearFunctions loadLinearFunctions(const Module &module, const AttnLaunchConfig &config) {
  LinearFunctions functions;
  functions.chunkwise = module.function(config.kernelName);
  functions.segment = module.function(ATTN_LINEAR_SEGMENT_KERNEL_NAME);
  functions.fold = module.function(ATTN_LINEAR_FOLD_KERNEL_NAME);
  functions.decode = module.function(ATTN_DECODE_KERNEL_NAME);
  functions.chunkwise.setMaxDynamicSharedMemory(config.sharedMemoryBytes);
  functions.segment.setMaxDynamicSharedMemory(config.sharedMemoryBytes);
  if (config.backward && config.causal) {
    functions.reversedChunkwise = module.function(ATTN_LINEAR_REVERSED_KERNEL_NAME);
    functions.reversedSegment = module.function(ATTN_LINEAR_REVERSED_SEGMENT_KERNEL_NAME);
    functions.reversedChunkwise.setMaxDynamicSharedMemory(config.sharedMemoryBytes);
    functions.reversedSegment.setMaxDynamicSharedMemory(config.sharedMemoryBytes);
  }
  return functions;
}

void launchLinear(const Module &module, const AttnLaunchConfig &config,
                  const AttnLinearArgs &args, CUstream stream) {
  LinearFunctions functions = loadLinearFunctions(module, config);
  launchLinear(functions, config, args, stream);
}

void launchLinear(LinearFunctions &functions, const AttnLaunchConfig &config,
                  const AttnLinearArgs &args, CUstream stream) {
  validateLinearArgs(config, args);
  if (args.q.batch() == 0 || args.q.seqlen() == 0)
    return;
  validateLinearDevicePointers(config, args);
  launchLinearPass(functions, config, args, LinearPassOptions{}, stream);
}

namespace detail {
void launchLinearPass(LinearFunctions &functions, const AttnLaunchConfig &config,
                      const AttnLinearArgs &args, const LinearPassOptions &options,
                      CUstream stream) {
  requireSegmentCap(args.segments);
  LinearSplit split;
  if (args.workspace)
    split = linearSplitFor(config, args.q.batch(), args.q.seqlen(), args.segments);
  const LinearScratch scratch = linearScratch(config, args.q.batch(), split);
  if (scratch.bytes() > 0)
    requireWorkspace(args.workspace, args.workspaceBytes, scratch.bytes(),
                     fmt::format("{} segments", split.segments), "linearWorkspaceBytes");
  attn_abi::AttnLinearParams params = encodeLinearParams(config, args, split, scratch);
  params.heads_swapped = options.headsSwapped;
  params.feature_map_operands = options.featureMapOperands;
  Dim3 block{static_cast<unsigned>(config.threadsPerBlock), 1, 1};
  void *kernelArgs[] = {&params};
  // One block per block_n value columns of each (head, batch, segment or
  // piece).
  auto gridOf = [&](int segments) {
    return Dim3{static_cast<unsigned>(config.headDim / config.blockN),
                static_cast<unsigned>(config.qHeads),
                static_cast<unsigned>(args.q.batch() * segments)};
  };
  KernelFunction &segment = options.reverse ? functions.reversedSegment : functions.segment;
  KernelFunction &chunkwise = options.reverse ? functions.reversedChunkwise : functions.chunkwise;
  if (split.segments > 1) {
    segment.launch(gridOf(split.stateSegments), block, config.sharedMemoryBytes, stream,
                   kernelArgs);
    // One thread per element of a head's state (and of its key sum).
    const int64_t foldElements =
        int64_t(config.headDim) * config.headDim + (config.normalize ? config.headDim : 0);
    const Dim3 foldGrid{
        static_cast<unsigned>((foldElements + ATTN_LINEAR_FOLD_THREADS - 1) /
                              ATTN_LINEAR_FOLD_THREADS),
        static_cast<unsigned>(config.qHeads), static_cast<unsigned>(args.q.batch())};
    functions.fold.launch(foldGrid, Dim3{ATTN_LINEAR_FOLD_THREADS, 1, 1}, 0, stream, kernelArgs);
  }
  chunkwise.launch(gridOf(split.segments), block, config.sharedMemoryBytes, stream, kernelArgs);
}
} // namespace detail

} // namespace attn
