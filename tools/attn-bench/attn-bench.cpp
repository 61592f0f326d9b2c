//===- attn-bench.cpp - Measure compiled attention kernels ----------------===//
//
//   attn-bench spec.mlir [--batch=B --seqlen=S --seqlen-k=S] [--check]
//       compiles one spec, runs it, prints the error against the CPU
//       reference (with --check) and the TFLOP/s. A spec with captured
//       buffers gets each from --capture NAME=GENERATOR[@D0xD1...]:
//         ramp:A,B        f32, element i (row-major) = A + B * i
//         normal:SIGMA    f32, seeded normal values
//         segments:LO,HI  i32, along the last extent runs of LO..HI equal ids
//                         (document ids), restarting in each row
//         bernoulli:P     i32, 1 with probability P (seeded)
//       The shape follows the declaration; `?` extents come from @D0xD1.
//       A linear attention / retention spec runs the chunkwise kernel with
//       a final state (and, gated, seeded log-decays logsigmoid(N(0, 1)));
//       --check compares with the reference's recurrent form; it prints
//       TB/s counting the bytes of Q, K, V and O, for one call timed alone
//       and for calls queued back to back (the device's time per call, the
//       host's work hidden), and the host's time per call.
//   attn-bench spec.mlir --packed=L1,L2,...
//       packed sequences of those lengths (Sq = Sk each) in one launch,
//       then the padded alternative (a batch of that many sequences of the
//       longest length); TFLOP/s of both count the pairs the sequences need.
//   attn-bench --linear-grid
//       retention, gated retention and linear attention beside our causal
//       softmax at head dim 128, H = 16, bf16, S = 2048 to 65536 with
//       B = max(1, 16384 / S) (the peer script's shapes), and S = 8192 at
//       B = 1 for the comparison with S = 65536 at the same B*H. Each
//       linear kernel is planned for its shape, and every one is timed
//       (alone and back to back) before the softmax kernels.
//   attn-bench --grid
//       the grid of the peer comparison: head dim 64/128/256, seqlen 512 to
//       16384, causal and not, B*S = 16384 and H*D = 2048, bf16. With
//       --tuning-db each point runs the heuristic plan and the plan recorded
//       nearest its shape in 6 interleaved rounds (alternating which goes
//       first) and prints both.
//   attn-bench --linear-backward-grid
//       the linear family's backward beside its forward (BackwardBench.h).
//   attn-bench spec.mlir ... --first-use
//       also compiles the spec through the JIT with first-use tuning and
//       prints the tuning's time, the plan it chose and that plan's time.
//   attn-bench --plan-set=tools/plan-set/points.txt [--plan-set-points=A,B]
//       [--plan-set-data=FILE.tsv] [--plan-set-recorded=DATA.tsv,...]
//       tunes every point of the plan set and prints the default plan beside
//       the tuned one with their times (PlanSetBench.h); the data file gets
//       every measured candidate, for fitting a cost model. With
//       --plan-set-recorded, each point times its default only against the
//       plan those recorded data put first.
//   attn-bench --decode-grid [--quick] [--tuning-db=FILE]
//       [--decode-grid-points=SqxBATCHxHKVxDxSK,...]
//       the short-query path at decode and speculative-verification shapes,
//       contiguous and paged, beside the forward kernel (DecodeBench.h);
//       with --tuning-db, the split counts attn-tune recorded there; with
//       --decode-grid-points, those shapes instead of the grid.
//
// TFLOP/s = 4*B*H*Sq*Sk*D / time (halved for causal masks); the time is the
// median of --repeats launches after --warmup launches, timed with events.
//
//===----------------------------------------------------------------------===//

#include "ToolVersion.h"
#include "AttnHarness.h"
#include "BackwardBench.h"
#include "PlanSetBench.h"
#include "DecodeBench.h"
#include "attn/Compiler/Compiler.h"
#include "attn/Compiler/Jit.h"
#include "attn/Reference/LinearAttention.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <sstream>

using namespace llvm;

namespace {
cl::opt<std::string> specFile(cl::Positional, cl::desc("[spec.mlir]"), cl::init(""));
cl::opt<bool> grid("grid", cl::desc("Run the peer-comparison grid"), cl::init(false));
cl::opt<bool> linearGrid("linear-grid",
                         cl::desc("Run the linear attention / retention grid (see the header)"),
                         cl::init(false));
cl::opt<bool> linearBackwardGrid(
    "linear-backward-grid",
    cl::desc("Time the linear family's backward beside its forward (see the header)"),
    cl::init(false));
cl::opt<bool> decodeGrid("decode-grid",
                         cl::desc("Run the short-query grid: decode and speculative "
                                  "verification, contiguous and paged (see DecodeBench.h)"),
                         cl::init(false));
cl::opt<bool> quickGrid("quick", cl::desc("With --decode-grid: batch 1 and 8, up to 32768 keys"),
                        cl::init(false));
cl::list<std::string> decodeGridPoints(
    "decode-grid-points", cl::CommaSeparated,
    cl::desc("With --decode-grid: only these points, each SqxBATCHxHKVxDxSK (e.g. "
             "1x1x1x128x32768,16x8x8x128x8192)"));
cl::opt<bool> backwardGrid("backward-grid",
                           cl::desc("Run the backward grid (head dims 64, 128 and 256)"),
                           cl::init(false));
cl::list<int> backwardGridHeadDims(
    "backward-grid-head-dims", cl::CommaSeparated,
    cl::desc("With --backward-grid: only these head dims (e.g. 64,128)"));
cl::list<int64_t> backwardGridSeqlens(
    "backward-grid-seqlens", cl::CommaSeparated,
    cl::desc("With --backward-grid: only these sequence lengths (e.g. 2048,8192)"));
cl::opt<bool> backwardRun("backward", cl::desc("Time the spec's backward (with --check, check "
                                               "its gradients first)"),
                          cl::init(false));
cl::opt<int64_t> batch("batch", cl::desc("Batch size"), cl::init(2));
cl::opt<int64_t> seqlen("seqlen", cl::desc("Query sequence length"), cl::init(8192));
cl::opt<int64_t> seqlenK("seqlen-k", cl::desc("Key sequence length (default: --seqlen)"),
                         cl::init(0));
cl::opt<bool> check("check", cl::desc("Compare with the CPU reference evaluator"),
                    cl::init(false));
cl::opt<int> warmup("warmup", cl::desc("Untimed launches first"), cl::init(5));
cl::opt<int> repeats("repeats", cl::desc("Timed launches (median reported)"), cl::init(20));
cl::opt<std::string> tileOverride("tile",
                                  cl::desc("Tile override passed to attn-tile (with --backward: "
                                           "over the backward's plan)"),
                                  cl::init(""));
cl::opt<std::string> tuningDatabase(
    "tuning-db",
    cl::desc("Take the tile plan from this tuning database (the record nearest --batch, "
             "--seqlen, --seqlen-k, or each grid point's shape; with --decode-grid the "
             "short-query split counts recorded there); default: the heuristic"),
    cl::value_desc("file"), cl::init(""));
cl::opt<int> blocksPerSm("persistent-blocks-per-sm",
                         cl::desc("Grid policy over the plan's (a tile setting, added to "
                                  "--tile): 0 = one block per work tile, k > 0 = a persistent "
                                  "grid of k blocks per SM"),
                         cl::init(-1));

cl::opt<int> linearSegments(
    "segments",
    cl::desc("Linear attention / retention: split the sequence into this many segments "
             "(1: none; default: the runtime's choice)"),
    cl::init(0));

cl::opt<bool> firstUse(
    "first-use",
    cl::desc("Also compile the spec through the JIT with first-use tuning (Compiler::compileFor) "
             "into a fresh tuning database, and print its time, the plan it chose and that "
             "kernel's time beside the heuristic's"),
    cl::init(false));

cl::opt<std::string> planSet(
    "plan-set",
    cl::desc("FILE (tools/plan-set/points.txt): tune every point and print the default plan "
             "beside the tuned one (see PlanSetBench.h); records nothing"),
    cl::init(""));
cl::opt<std::string> planSetPoints(
    "plan-set-points", cl::desc("With --plan-set: only these points (comma-separated names)"),
    cl::init(""));
cl::opt<std::string> planSetData(
    "plan-set-data",
    cl::desc("With --plan-set: write every measured candidate to this file (tab-separated)"),
    cl::init(""));

cl::list<std::string> planSetRecorded(
    "plan-set-recorded", cl::CommaSeparated,
    cl::desc("With --plan-set: time each point's default only against the plan these "
             "--plan-set-data files put first (FILE,FILE...; the last file naming a point wins)"));

cl::opt<bool> tileCoverage(
    "tile-coverage",
    cl::desc("Build the masks' tile coverage once (timed separately) and pass it to every launch"),
    cl::init(false));

cl::opt<bool> tileKeyBits(
    "tile-key-bits",
    cl::desc("With --tile-coverage: also store the partial tiles' kept keys (built and timed "
             "with the coverage), so that their pairs test a bit instead of the mask_mod; "
             "--tile-key-bits=false evaluates the mask_mod per pair"),
    cl::init(true));

cl::opt<std::string> coverageOf(
    "coverage-of",
    cl::desc("VARIANT.mlir: run this spec (a mask_mod that reads a buffer, so that the run-time "
             "coverage decides) on the tiles VARIANT visits, each marked full: the plain kernel "
             "on a mask's tiles. VARIANT must share this spec's tiles; its captures come from "
             "--coverage-capture"),
    cl::init(""));

cl::list<std::string> coverageCaptureOptions(
    "coverage-capture",
    cl::desc("NAME=GENERATOR[@D0xD1...]: a captured buffer of --coverage-of's VARIANT (as "
             "--capture)"));

cl::opt<bool> useWorkOrder(
    "work-order",
    cl::desc("Build the longest-first order of the work tiles once (timed separately, after "
             "the tile coverage if any) and pass it to every launch"),
    cl::init(false));
cl::opt<bool> outliersFirst(
    "outliers-first",
    cl::desc("With --work-order: move only the work tiles costing more than twice the mean to "
             "the front (WorkOrderPolicy::OutliersFirst) instead of sorting every tile"),
    cl::init(false));
cl::opt<bool> automaticWorkOrder(
    "automatic-work-order",
    cl::desc("Without --work-order or --tile-coverage, start the work tiles of a kernel with a "
             "mask_mod in the order attn::Kernel::run takes (outliers first, built once, timed "
             "separately); off for the default order"),
    cl::init(true));
cl::opt<bool> tailSplit(
    "tail-split",
    cl::desc("Pass the forward workspace, so that a kernel without a mask splits its persistent "
             "grid's partial last round among all blocks (default on; off for an A/B)"),
    cl::init(true));

cl::list<int64_t> packedLengths(
    "packed", cl::CommaSeparated,
    cl::desc("L1,L2,...: packed sequences of these lengths (Sq = Sk each), timed beside the "
             "padded batch of the longest"));

cl::list<std::string> captureOptions(
    "capture", cl::desc("NAME=GENERATOR[@D0xD1...]: a captured buffer (see the file header)"));

struct Loaded {
  attn::CompiledKernel compiled;
  attn::Module module;
  attn::KernelFunction function;
  attn::LinearFunctions linear; // linear-family specs
  std::unique_ptr<attn::AutomaticWorkOrders> workOrders =
      std::make_unique<attn::AutomaticWorkOrders>();
};

/// Compiles and loads a spec planned for `shape` (attn-tile's heuristic
/// reads its key length; a shape of 0 tokens leaves it unknown); with a
/// tuning database, its plan is the one recorded nearest `shape`.
Loaded load(const std::string &spec, const std::string &name, const attn::TuningShape &shape,
            const std::string &database) {
  attn::CompileOptions options;
  options.tileOverride = tileOverride;
  // A tile setting, not only the launch's: a persistent plan gives O's
  // staging bytes of its own.
  if (blocksPerSm >= 0)
    options.tileOverride += fmt::format("{}persistent_blocks_per_sm={}",
                                        options.tileOverride.empty() ? "" : ",",
                                        blocksPerSm.getValue());
  options.tuningDatabase = database;
  if (shape.seqlenQ > 0)
    options.tuningShape = attn::formatTuningShape(shape);
  Loaded loaded;
  loaded.compiled = attn::compileSpec(spec, name, options);
  loaded.module = attn::Module::loadPtx(
      std::string_view(loaded.compiled.binary.data(), loaded.compiled.binary.size()));
  loaded.function = loaded.module.function(loaded.compiled.launch.kernelName);
  if (loaded.compiled.launch.linearFamily)
    loaded.linear = attn::loadLinearFunctions(loaded.module, loaded.compiled.launch);
  return loaded;
}

/// Bytes of Q, K, V and O of one call: what a memory-bound kernel must move.
double qkvoBytes(const attn::AttnLaunchConfig &launch, int64_t batch, int64_t seqlen) {
  return 2.0 * batch * seqlen * launch.headDim * 2.0 * (launch.qHeads + launch.kvHeads);
}

/// Seeded per-token log-decays logsigmoid(x), x ~ N(0, 1): the gate of a
/// gated kernel ([B, S, Hq] fp32), as the peer script draws it.
std::vector<float> gateLogDecays(size_t count, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> values(count);
  for (float &value : values) {
    float x = normal(random);
    value = std::min(x, 0.f) - std::log1p(std::exp(-std::fabs(x)));
  }
  return values;
}

attn::DeviceBuffer uploadFloats(const std::vector<float> &values) {
  attn::DeviceBuffer buffer(std::max<size_t>(values.size(), 1) * sizeof(float));
  if (!values.empty())
    buffer.upload(values);
  return buffer;
}

/// A linear-family spec: one run with --check against the reference's
/// recurrent form, then the timing.
int runLinearSpec(Loaded &kernel, const std::string &spec) {
  const attn::AttnLaunchConfig &launch = kernel.compiled.launch;
  attn::harness::Shape shape{batch, seqlen, seqlen, false};
  attn::harness::ForwardProblem data(launch, shape, 2026);
  std::printf("kernel @%s: linear family, B=%lld S=%lld Hq=%d Hkv=%d D=%d %s, chunk %d, "
              "%d threads, %d bytes smem\n",
              kernel.compiled.name.c_str(), (long long)shape.batch, (long long)shape.seqlenQ,
              launch.qHeads, launch.kvHeads, launch.headDim, attn::dtypeName(launch.dtype),
              launch.blockM, launch.threadsPerBlock, launch.sharedMemoryBytes);
  const size_t heads = size_t(shape.batch) * launch.qHeads;
  std::vector<float> logDecay;
  if (launch.gated)
    logDecay = gateLogDecays(heads * size_t(shape.seqlenQ), 7);
  attn::DeviceBuffer logDecayBuffer = uploadFloats(logDecay);
  attn::DeviceBuffer finalState(heads * launch.headDim * launch.headDim * sizeof(float));
  attn::DeviceBuffer finalKeySum(heads * launch.headDim * sizeof(float));
  attn::AttnLinearArgs args;
  args.q = data.q.view;
  args.k = data.k.view;
  args.v = data.v.view;
  args.o = data.o.view;
  args.finalState = static_cast<float *>(finalState.data());
  if (launch.normalize)
    args.finalKeySum = static_cast<float *>(finalKeySum.data());
  if (launch.gated)
    args.logDecay = static_cast<const float *>(logDecayBuffer.data());
  const attn::LinearSplit split =
      attn::linearSplitFor(launch, shape.batch, shape.seqlenQ, linearSegments);
  args.segments = linearSegments;
  attn::DeviceBuffer workspace(
      std::max<uint64_t>(attn::linearWorkspaceBytes(launch, shape.batch, split), 4));
  args.workspace = workspace.data();
  args.workspaceBytes = workspace.size();
  std::printf("sequence split: %d segments of %d chunks\n", split.segments, split.segmentChunks);
  bool passed = true;
  if (check) {
    data.poisonOutputs();
    attn::launchLinear(kernel.linear, launch, args, nullptr);
    ATTN_CU_CHECK(cuCtxSynchronize);
    attn::reference::LinearProblem problem = attn::linearReferenceProblemFromSpec(
        spec, shape.batch, shape.seqlenQ, launch.gated ? logDecay.data() : nullptr);
    auto hostView = [](const attn::harness::HostDeviceTensor &tensor) {
      const attn::TensorView &view = tensor.view;
      return attn::reference::HostTensor{
          tensor.host.data(),
          {view.shape[1] * view.shape[2] * view.shape[3], view.shape[2] * view.shape[3],
           view.shape[3], 1}};
    };
    std::vector<float> expected(data.q.host.size());
    attn::reference::linearForwardRecurrent(problem, hostView(data.q), hostView(data.k),
                                            hostView(data.v), expected.data(), {}, nullptr);
    const uint16_t *bits = data.downloadOutput();
    double error = 0, norm = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
      double actual = launch.dtype == attn::DType::BF16 ? attn::bf16ToFloat(bits[i])
                                                        : attn::f16ToFloat(bits[i]);
      double diff = std::isfinite(actual) ? actual - expected[i] : INFINITY;
      error += diff * diff;
      norm += double(expected[i]) * expected[i];
    }
    double relative = std::sqrt(error / std::max(norm, 1e-30));
    passed = relative < 2e-2;
    std::printf("check against the CPU reference (recurrent form): rel-L2 = %.3g, %s\n", relative,
                passed ? "PASS" : "FAIL (limit 2e-2)");
  }
  auto run = [&] { attn::launchLinear(kernel.linear, launch, args, nullptr); };
  double ms = attn::harness::medianMs(run, warmup, repeats);
  const double bytes = qkvoBytes(launch, shape.batch, shape.seqlenQ);
  std::printf("time %.3f ms (median of %d), %.2f TB/s (Q, K, V, O)\n", ms, int(repeats),
              bytes / ms / 1e9);
  attn::harness::BackToBackTimes queued = attn::harness::backToBackMs(run, warmup, repeats);
  std::printf("back to back %.3f ms a call, %.2f TB/s; the host takes %.1f us a call\n",
              queued.deviceMs, bytes / queued.deviceMs / 1e9, queued.hostMs * 1e3);
  return passed ? 0 : 1;
}

/// Packed sequences of --packed lengths in one launch, and the padded
/// alternative: a batch of as many sequences of the longest length.
/// TFLOP/s count the pairs each sequence computes.
/// What --tile-coverage and --work-order build once per shape (each timed
/// apart), with `args` pointing into them.
struct BuiltOnce {
  attn::DeviceBuffer coverage;
  attn::DeviceBuffer keyBits;
  attn::DeviceBuffer workOrder;
};

/// The forward workspace of the launches' calls, attached to `args`
/// (none without --tail-split).
attn::DeviceBuffer attachForwardWorkspace(
    std::initializer_list<const attn::AttnLaunchConfig *> launches, attn::AttnForwardArgs &args) {
  return tailSplit ? attn::harness::attachForwardWorkspace(launches, args) : attn::DeviceBuffer();
}

BuiltOnce buildOnce(Loaded &kernel, attn::AttnForwardArgs &args) {
  const attn::AttnLaunchConfig &launch = kernel.compiled.launch;
  auto millisecondsSince = [](std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
  };
  BuiltOnce built;
  if (!coverageOf.empty()) {
    auto text = MemoryBuffer::getFile(coverageOf);
    if (!text) {
      errs() << "attn-bench: cannot read " << coverageOf << ": " << text.getError().message()
             << "\n";
      std::exit(1);
    }
    Loaded variant = load((*text)->getBuffer().str(), coverageOf,
                          {batch, seqlen, seqlenK ? seqlenK : seqlen}, tuningDatabase);
    const attn::AttnLaunchConfig &variantLaunch = variant.compiled.launch;
    if (variantLaunch.blockM != launch.blockM || variantLaunch.blockN != launch.blockN) {
      errs() << "attn-bench: --coverage-of: " << coverageOf << " plans " << variantLaunch.blockM
             << " x " << variantLaunch.blockN << " tiles; it must plan this spec's "
             << launch.blockM << " x " << launch.blockN << "\n";
      std::exit(1);
    }
    // The variant's own captures, generated on a problem of its shape.
    attn::harness::Shape shape{batch, seqlen, seqlenK ? seqlenK : seqlen, false};
    attn::harness::ForwardProblem variantData(variantLaunch, shape, 2026);
    try {
      attn::harness::addGeneratedCaptures(variantData, variantLaunch, shape,
                                          coverageCaptureOptions);
    } catch (const attn::Error &error) {
      errs() << "attn-bench: --coverage-of " << coverageOf << ": " << error.what()
             << " (the variant's captures come from --coverage-capture)\n";
      std::exit(1);
    }
    attn::AttnForwardArgs variantArgs = args;
    variantArgs.captures = variantData.args().captures;
    attn::DeviceBuffer variantCoverage =
        attn::buildTileCoverage(variant.module, variantLaunch, variantArgs, nullptr);
    std::vector<uint8_t> bytes = variantCoverage.download<uint8_t>();
    bytes.resize(attn::tileCoverageBytes(launch, args));
    // 0 empty, 1 partial, 2 full: every visited tile full, no pair tested.
    uint64_t visited = 0;
    for (uint8_t &byte : bytes)
      if (byte != 0) {
        byte = 2;
        ++visited;
      }
    built.coverage = attn::DeviceBuffer(bytes.size());
    built.coverage.upload(bytes);
    args.tileCoverage = static_cast<const unsigned char *>(built.coverage.data());
    std::printf("on the tiles of %s: %llu of %llu (query block, key tile) pairs, all full\n",
                coverageOf.c_str(), (unsigned long long)visited,
                (unsigned long long)bytes.size());
  } else if (tileCoverage) {
    auto start = std::chrono::steady_clock::now();
    built.coverage = attn::buildTileCoverage(kernel.module, launch, args, nullptr);
    args.tileCoverage = static_cast<const unsigned char *>(built.coverage.data());
    if (tileKeyBits) {
      built.keyBits = attn::buildTileKeyBits(kernel.module, launch, args, nullptr);
      args.tileKeyBits = built.keyBits.data();
    }
    ATTN_CU_CHECK(cuCtxSynchronize);
    double buildMs = millisecondsSince(start);
    std::printf("tile coverage built in %.3f ms (%llu bytes", buildMs,
                (unsigned long long)attn::tileCoverageBytes(launch, args));
    if (tileKeyBits)
      std::printf(", key bits %llu bytes", (unsigned long long)built.keyBits.size());
    std::printf(")\n");
  }
  if (useWorkOrder) {
    auto start = std::chrono::steady_clock::now();
    built.workOrder = attn::buildWorkOrder(kernel.module, launch, args, nullptr,
                                           outliersFirst ? attn::WorkOrderPolicy::OutliersFirst
                                                         : attn::WorkOrderPolicy::LongestFirst);
    ATTN_CU_CHECK(cuCtxSynchronize);
    double buildMs = millisecondsSince(start);
    args.workOrder = static_cast<const int32_t *>(built.workOrder.data());
    std::printf("work order (%s) built in %.3f ms (%llu work tiles)\n",
                outliersFirst ? "outliers first" : "longest first", buildMs,
                (unsigned long long)(attn::workOrderBytes(launch, args) / sizeof(int32_t)));
  } else if (automaticWorkOrder) {
    auto start = std::chrono::steady_clock::now();
    if (const int32_t *order = kernel.workOrders->orderFor(kernel.module, launch, args, nullptr)) {
      ATTN_CU_CHECK(cuCtxSynchronize);
      args.workOrder = order;
      std::printf("automatic work order (outliers first) built in %.3f ms\n",
                  millisecondsSince(start));
    }
  }
  return built;
}

int runPackedSpec(Loaded &kernel, const std::string &spec) {
  const attn::AttnLaunchConfig &launch = kernel.compiled.launch;
  std::vector<int64_t> lengths(packedLengths.begin(), packedLengths.end());
  attn::PackedSequenceOffsets packed = attn::uploadPackedSequences(lengths, lengths);
  const int64_t count = packed.sequences.batch, longest = packed.sequences.maxSeqlenQ;
  const bool causal = attn::harness::specHasCausalMask(spec);
  double flops = 0;
  for (int64_t length : lengths)
    flops += attn::harness::forwardFlops(launch, {1, length, length, false}, causal);
  std::printf("kernel @%s: %lld packed sequences, %lld rows (longest %lld), Hq=%d Hkv=%d D=%d %s\n",
              kernel.compiled.name.c_str(), (long long)count, (long long)packed.totalQ,
              (long long)longest, launch.qHeads, launch.kvHeads, launch.headDim,
              attn::dtypeName(launch.dtype));

  attn::harness::ForwardProblem data(launch, {1, packed.totalQ, packed.totalK, false}, 2026);
  attn::harness::addGeneratedCaptures(data, launch, {count, longest, longest, false},
                                      captureOptions);
  attn::AttnForwardArgs args = data.args();
  args.packed = packed.sequences;
  BuiltOnce builtOnce = buildOnce(kernel, args);
  double ms = attn::harness::medianLaunchMs(kernel.function, launch, args, warmup, repeats);
  std::printf("packed: time %.3f ms (median of %d), %.1f TFLOP/s\n", ms, int(repeats),
              flops / ms / 1e9);

  attn::harness::Shape padded{count, longest, longest, false};
  attn::harness::ForwardProblem paddedData(launch, padded, 2026);
  attn::harness::addGeneratedCaptures(paddedData, launch, padded, captureOptions);
  double paddedMs =
      attn::harness::medianLaunchMs(kernel.function, launch, paddedData.args(), warmup, repeats);
  std::printf("padded to B=%lld S=%lld: time %.3f ms, %.1f TFLOP/s of the same useful work\n",
              (long long)count, (long long)longest, paddedMs, flops / paddedMs / 1e9);
  return 0;
}

/// --first-use: the JIT's first-use tuning of the spec at these arguments
/// (a fresh database in a temporary directory, no disk cache), its time and
/// plan, and the chosen kernel's time beside `heuristicMs`.
void runFirstUse(const std::string &spec, const attn::AttnForwardArgs &args, double heuristicMs) {
  SmallString<128> directory;
  if (sys::fs::createUniqueDirectory("attn-first-use", directory))
    throw attn::Error("--first-use: cannot create a temporary directory");
  attn::JitOptions options;
  options.diskCache = attn::DiskCacheOptions{};
  options.tuningDatabase = (directory + "/tuning.tsv").str();
  options.firstUse.enabled = true;
  attn::Compiler compiler(options);
  // The JIT kernel builds its own work order; the coverage and workspace
  // attn-bench built are the heuristic plan's.
  const attn::AttnForwardArgs call = attn::withoutPlanSizedBuffers(args);
  const attn::Kernel chosen = compiler.compileFor(spec, specFile, call);
  const attn::AttnLaunchConfig &launch = chosen.launchConfig();
  const attn::JitStats stats = compiler.stats();
  const double ms = attn::medianRunMilliseconds(chosen, call, nullptr, warmup, repeats);
  std::printf("first-use tuning: %.2f s (%llu bucket tuned), plan %dx%d%s: %.3f ms against the "
              "heuristic's %.3f (%.3f x its speed)\n",
              stats.firstUseSeconds, (unsigned long long)stats.firstUseTunings, launch.blockM,
              launch.blockN, launch.persistentBlocksPerSm ? " persistent" : "", ms, heuristicMs,
              heuristicMs / ms);
  sys::fs::remove_directories(directory);
}

int runSpec() {
  auto buffer = MemoryBuffer::getFileOrSTDIN(specFile);
  if (!buffer) {
    errs() << "attn-bench: cannot read " << specFile << ": " << buffer.getError().message()
           << "\n";
    return 1;
  }
  std::string spec = (*buffer)->getBuffer().str();
  // Planned for the shape it runs: packed sequences for their count and the
  // longest (the padded batch they are timed beside).
  attn::TuningShape planned{batch, seqlen, seqlenK ? seqlenK : seqlen};
  if (!packedLengths.empty()) {
    const int64_t longest = *std::max_element(packedLengths.begin(), packedLengths.end());
    if (longest > 0) // bad lengths are reported with the upload
      planned = {static_cast<int64_t>(packedLengths.size()), longest, longest};
  }
  Loaded kernel = load(spec, specFile, planned, tuningDatabase);
  if (kernel.compiled.launch.linearFamily)
    return runLinearSpec(kernel, spec);
  if (!packedLengths.empty()) {
    if (check) {
      errs() << "attn-bench: --check does not take --packed (the GPU tests [gpu][packed] "
                "check packed sequences)\n";
      return 1;
    }
    return runPackedSpec(kernel, spec);
  }
  attn::harness::Shape shape{batch, seqlen, seqlenK ? seqlenK : seqlen, false};
  attn::harness::ForwardProblem data(kernel.compiled.launch, shape, 2026);
  const attn::AttnLaunchConfig &launch = kernel.compiled.launch;
  attn::harness::addGeneratedCaptures(data, launch, shape, captureOptions);
  std::printf("kernel @%s: B=%lld Sq=%lld Sk=%lld Hq=%d Hkv=%d D=%d %s, block %dx%d, %d threads, "
              "%d bytes smem\n",
              kernel.compiled.name.c_str(), (long long)shape.batch, (long long)shape.seqlenQ,
              (long long)shape.seqlenK, launch.qHeads, launch.kvHeads, launch.headDim,
              attn::dtypeName(launch.dtype), launch.blockM, launch.blockN,
              launch.threadsPerBlock, launch.sharedMemoryBytes);
  attn::AttnForwardArgs args = data.args();
  BuiltOnce builtOnce = buildOnce(kernel, args);
  attn::DeviceBuffer workspace = attachForwardWorkspace({&launch}, args);
  bool passed = true;
  if (check) {
    data.poisonOutputs();
    attn::launchForward(kernel.function, launch, args, nullptr);
    ATTN_CU_CHECK(cuCtxSynchronize);
    std::vector<attn::HostCapture> host;
    for (const attn::harness::HostDeviceCapture &capture : data.captures)
      host.push_back({capture.hostData(), capture.view.dtype, capture.view.shape});
    attn::reference::Problem problem = attn::referenceProblemFromSpec(
        spec, shape.batch, shape.seqlenQ, shape.seqlenK, host);
    attn::harness::Comparison result =
        attn::harness::compareWithReference(problem, data, launch.dtype);
    passed = result.passed();
    std::printf("check against the CPU reference: max|dO| = %.3g, rel-L2 = %.3g, "
                "max|dLSE| = %.3g, %s\n",
                result.maxAbsError, result.relativeL2Error, result.maxLseError,
                passed ? "PASS" : ("FAIL: " + result.firstViolation).c_str());
  }
  double ms = attn::harness::medianLaunchMs(kernel.function, launch, args, warmup, repeats);
  double flops = attn::harness::forwardFlops(launch, shape, attn::harness::specHasCausalMask(spec));
  std::printf("time %.3f ms (median of %d), %.1f TFLOP/s\n", ms, int(repeats), flops / ms / 1e9);
  if (firstUse)
    runFirstUse(spec, args, ms);
  return passed ? 0 : 1;
}

/// The grid's arguments at (B, S) over buffers allocated for B*S = 16384:
/// packed BSHD tensors of one element count take any split of B*S, so the
/// inputs are generated once per head dim.
attn::AttnForwardArgs gridArgs(const attn::harness::ForwardProblem &data, int64_t batch,
                               int64_t seqlen) {
  attn::AttnForwardArgs args = data.args();
  for (attn::TensorView *view : {&args.q, &args.k, &args.v, &args.o}) {
    view->shape[0] = batch;
    view->shape[1] = seqlen;
    view->strides[0] = seqlen * view->strides[1];
  }
  return args;
}

/// The peer grid. With a tuning database each point runs the heuristic plan
/// and the plan recorded nearest its shape, timed in interleaved rounds (so
/// clock drift reaches both alike), and prints both.
int runGrid() {
  bool compare = !tuningDatabase.empty();
  constexpr int kRounds = 6;
  if (compare)
    std::printf("| head dim | seqlen | causal | heuristic TFLOP/s | heuristic ms | tuned TFLOP/s "
                "| tuned ms | gain | tuned plan |\n|---|---|---|---|---|---|---|---|---|\n");
  else
    std::printf("| head dim | seqlen | causal | attnc TFLOP/s | ms | plan |\n"
                "|---|---|---|---|---|---|\n");
  auto planName = [](const attn::AttnLaunchConfig &launch) {
    return fmt::format("{}x{}{}", launch.blockM, launch.blockN,
                       launch.persistentBlocksPerSm ? " persistent" : "");
  };
  for (int headDim : {64, 128, 256}) {
    std::optional<attn::harness::ForwardProblem> data;
    for (bool causal : {false, true}) {
      const std::string spec = attn::harness::gridSpecText(headDim, causal);
      for (int64_t s : {512, 1024, 2048, 4096, 8192, 16384}) {
        attn::harness::Shape shape{16384 / s, s, s, false};
        // Planned for the point's shape, as the JIT plans for a given one.
        Loaded heuristic = load(spec, "grid.mlir", {shape.batch, s, s}, "");
        if (!data)
          data.emplace(heuristic.compiled.launch, attn::harness::Shape{1, 16384, 16384, false}, 11);
        attn::AttnForwardArgs args = gridArgs(*data, shape.batch, s);
        double flops = attn::harness::forwardFlops(heuristic.compiled.launch, shape, causal);
        auto time = [&](Loaded &kernel) {
          return attn::harness::medianLaunchMs(kernel.function, kernel.compiled.launch, args,
                                               warmup, repeats);
        };
        if (!compare) {
          attn::DeviceBuffer workspace = attachForwardWorkspace({&heuristic.compiled.launch}, args);
          double ms = time(heuristic);
          std::printf("| %d | %lld | %s | %.1f | %.3f | %s |\n", headDim, (long long)s,
                      causal ? "yes" : "no", flops / ms / 1e9, ms,
                      planName(heuristic.compiled.launch).c_str());
          std::fflush(stdout);
          continue;
        }
        Loaded tuned = load(spec, "grid.mlir", {shape.batch, s, s}, tuningDatabase);
        attn::DeviceBuffer workspace =
            attachForwardWorkspace({&heuristic.compiled.launch, &tuned.compiled.launch}, args);
        std::vector<double> heuristicMs, tunedMs;
        // Alternating which plan goes first: under the power cap the clock
        // sags within a round, which would favour a fixed first plan.
        for (int round = 0; round < kRounds; ++round) {
          if (round % 2) {
            tunedMs.push_back(time(tuned));
            heuristicMs.push_back(time(heuristic));
          } else {
            heuristicMs.push_back(time(heuristic));
            tunedMs.push_back(time(tuned));
          }
        }
        std::sort(heuristicMs.begin(), heuristicMs.end());
        std::sort(tunedMs.begin(), tunedMs.end());
        double h = heuristicMs[kRounds / 2], t = tunedMs[kRounds / 2];
        std::printf("| %d | %lld | %s | %.1f | %.3f | %.1f | %.3f | %+.1f %% | %s |\n", headDim,
                    (long long)s, causal ? "yes" : "no", flops / h / 1e9, h, flops / t / 1e9, t,
                    100 * (h / t - 1), planName(tuned.compiled.launch).c_str());
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
/// Random bf16 BSHD tensors of `tokens` x `hidden` elements, drawn once as
/// a block of 2^20 values and repeated (the timing needs realistic values,
/// not distinct ones), viewed at any (B, S) split.
struct LinearGridTensors {
  LinearGridTensors(int64_t tokens, int64_t hidden) {
    std::mt19937_64 random(5);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<uint16_t> block(size_t(1) << 20);
    for (uint16_t &bits : block)
      bits = attn::floatToBf16(normal(random));
    size_t bytes = size_t(tokens) * hidden * 2;
    for (attn::DeviceBuffer *buffer : {&q, &k, &v, &o}) {
      *buffer = attn::DeviceBuffer(bytes);
      for (size_t offset = 0; offset < bytes; offset += block.size() * 2)
        buffer->copyFromHost(block.data(), std::min(block.size() * 2, bytes - offset), offset);
    }
    logDecay = uploadFloats(gateLogDecays(size_t(tokens) * 64, 7));
  }
  attn::DeviceBuffer q, k, v, o, logDecay;
};

int runLinearGrid() {
  constexpr int kHeadDim = 128, kHeads = 16;
  constexpr int64_t kMaxTokens = 65536;
  auto specOf = [](const char *name, const char *mask, const char *normalizer) {
    std::ostringstream spec;
    spec << "attn.kernel @" << name << " problem = #attn.problem<q_heads = " << kHeads
         << ", kv_heads = " << kHeads << ", head_dim = " << kHeadDim
         << ", element_type = bf16> mask = " << mask << " normalizer = " << normalizer << "\n";
    return spec.str();
  };
  // Each linear kernel is planned for the shape it runs (attn-tile's plan
  // depends on batch x heads), as attn-bench SPEC plans it.
  struct Variant {
    const char *name;
    std::string spec;
  };
  const std::vector<Variant> variants = {
      {"retention", specOf("retention", "#attn.causal<top_left>", "#attn.retention")},
      {"gated_retention",
       specOf("gated_retention", "#attn.causal<top_left>", "#attn.retention<gated>")},
      {"linear", specOf("linear", "#attn.causal<top_left>", "#attn.linear")}};
  Loaded softmax = load(specOf("softmax_causal", "#attn.causal<bottom_right>", "#attn.softmax"),
                        "linear-grid.mlir", {}, "");
  LinearGridTensors tensors(kMaxTokens, int64_t(kHeads) * kHeadDim);
  attn::DeviceBuffer state(size_t(kMaxTokens / 2048) * kHeads * kHeadDim * kHeadDim * 4);
  attn::DeviceBuffer lse(size_t(kMaxTokens) * kHeads * 4);
  // Room for the split of every shape of the grid: batch x pieces stays at
  // most 2 x SMs / heads, or batch x --segments x 8 (a state, key sum and
  // decay per head of each).
  const size_t pieces = std::max(64, 8 * std::max(int(linearSegments), 1));
  attn::DeviceBuffer workspace(pieces * kHeads * (kHeadDim * kHeadDim + kHeadDim + 1) * 4);

  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (int64_t s : {2048, 4096, 8192, 16384, 32768, 65536})
    shapes.push_back({std::max<int64_t>(1, 16384 / s), s});
  shapes.push_back({1, 8192});
  auto forwardArgs = [&](int64_t b, int64_t s) {
    auto view = [&](attn::DeviceBuffer &buffer) {
      return attn::contiguousBSHD(buffer.data(), attn::DType::BF16, b, s, kHeads, kHeadDim);
    };
    attn::AttnForwardArgs forward;
    forward.q = view(tensors.q);
    forward.k = view(tensors.k);
    forward.v = view(tensors.v);
    forward.o = view(tensors.o);
    forward.lse = static_cast<float *>(lse.data());
    return forward;
  };
  // Every linear kernel is timed before any softmax kernel: seconds of
  // softmax at long sequences leave the GPU slower for the kernel timed
  // right after (docs/benchmarks.md, tenth run).
  struct LinearTiming {
    int blockN;
    int segments;
    double bytes; // of Q, K, V and O
    double ms;
    attn::harness::BackToBackTimes queued;
  };
  std::vector<std::vector<LinearTiming>> linearTimings;
  for (auto [b, s] : shapes) {
    const attn::AttnForwardArgs forward = forwardArgs(b, s);
    linearTimings.emplace_back();
    for (const Variant &variant : variants) {
      Loaded kernel = load(variant.spec, "linear-grid.mlir", {b, s, s}, "");
      const attn::AttnLaunchConfig &launch = kernel.compiled.launch;
      attn::AttnLinearArgs args;
      args.q = forward.q;
      args.k = forward.k;
      args.v = forward.v;
      args.o = forward.o;
      args.finalState = static_cast<float *>(state.data());
      if (launch.gated)
        args.logDecay = static_cast<const float *>(tensors.logDecay.data());
      const attn::LinearSplit split = attn::linearSplitFor(launch, b, s, linearSegments);
      args.segments = linearSegments;
      args.workspace = workspace.data();
      args.workspaceBytes = workspace.size();
      if (attn::linearWorkspaceBytes(launch, b, split) > workspace.size())
        throw attn::Error("linear grid: the workspace is too small for the split");
      auto run = [&] { attn::launchLinear(kernel.linear, launch, args, nullptr); };
      const double ms = attn::harness::medianMs(run, warmup, repeats);
      linearTimings.back().push_back({launch.blockN, split.segments, qkvoBytes(launch, b, s), ms,
                                      attn::harness::backToBackMs(run, warmup, repeats)});
    }
  }
  // One call timed alone (events around it, the host's work inside), and
  // calls queued back to back (the device's time per call).
  std::printf("| kernel | B | S | block_n | segments | ms | TB/s (Q, K, V, O) | softmax ms | "
              "vs softmax | back-to-back ms | back-to-back TB/s | host us |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (size_t shape = 0; shape < shapes.size(); ++shape) {
    auto [b, s] = shapes[shape];
    double softmaxMs = attn::harness::medianLaunchMs(softmax.function, softmax.compiled.launch,
                                                     forwardArgs(b, s), warmup, repeats);
    std::printf("| softmax_causal | %lld | %lld | | | %.3f | %.2f | %.3f | 1.00 | | | |\n",
                (long long)b, (long long)s, softmaxMs,
                qkvoBytes(softmax.compiled.launch, b, s) / softmaxMs / 1e9, softmaxMs);
    for (size_t v = 0; v < variants.size(); ++v) {
      const LinearTiming &timing = linearTimings[shape][v];
      std::printf("| %s | %lld | %lld | %d | %d | %.3f | %.2f | %.3f | %.2f | %.3f | %.2f | "
                  "%.1f |\n",
                  variants[v].name, (long long)b, (long long)s, timing.blockN, timing.segments,
                  timing.ms, timing.bytes / timing.ms / 1e9, softmaxMs, softmaxMs / timing.ms,
                  timing.queued.deviceMs, timing.bytes / timing.queued.deviceMs / 1e9,
                  timing.queued.hostMs * 1e3);
    }
    std::fflush(stdout);
  }
  return 0;
}
} // namespace

int main(int argc, char **argv) {
  InitLLVM initLLVM(argc, argv);
  attn::installToolVersionPrinter();
  cl::ParseCommandLineOptions(argc, argv, "attn-bench: run and time attnc kernels\n");
  if (!grid && !linearGrid && !backwardGrid && !linearBackwardGrid && !decodeGrid &&
      planSet.empty() && specFile.empty()) {
    errs() << "attn-bench: give a spec file, --grid, --linear-grid, --backward-grid, "
              "--linear-backward-grid, --decode-grid or --plan-set (see --help)\n";
    return 1;
  }
  // The plan set is read (and its names checked) before looking for a GPU.
  std::vector<attn::tune::PlanSetPoint> planSetSelection;
  std::map<std::string, attn::TileConfig> recordedPlans;
  if (!planSetRecorded.empty() && planSet.empty()) {
    errs() << "attn-bench: --plan-set-recorded needs --plan-set\n";
    return 1;
  }
  if (!planSet.empty()) {
    try {
      planSetSelection =
          attn::tune::selectPlanSetPoints(attn::tune::readPlanSet(planSet), planSetPoints);
      if (!planSetRecorded.empty())
        recordedPlans = attn::tune::readRecordedTunedPlans(
            {planSetRecorded.begin(), planSetRecorded.end()}, planSetSelection);
    } catch (const attn::Error &error) {
      errs() << "attn-bench: " << error.what() << "\n";
      return 1;
    }
  }
  if (!decodeGridPoints.empty() && !decodeGrid) {
    errs() << "attn-bench: --decode-grid-points needs --decode-grid\n";
    return 1;
  }
  std::vector<attn::bench::DecodePoint> decodePoints;
  try {
    decodePoints = attn::bench::parseDecodePoints({decodeGridPoints.begin(), decodeGridPoints.end()});
  } catch (const attn::Error &error) {
    errs() << "attn-bench: " << error.what() << "\n";
    return 1;
  }
  std::string reason = attn::harness::gpuUnavailableReason();
  if (!reason.empty()) {
    std::printf("attn-bench: no GPU run: %s\n", reason.c_str());
    return 0;
  }
  try {
    attn::ensureContext();
    if (!planSetSelection.empty())
      return attn::bench::runPlanSet(planSetSelection, planSetData,
                                     planSetRecorded.empty() ? nullptr : &recordedPlans);
    if (backwardGrid)
      return attn::bench::runBackwardGrid(
          warmup, repeats, {backwardGridHeadDims.begin(), backwardGridHeadDims.end()},
          {backwardGridSeqlens.begin(), backwardGridSeqlens.end()});
    if (linearBackwardGrid)
      return attn::bench::runLinearBackwardGrid(warmup, repeats);
    if (decodeGrid)
      return attn::bench::runDecodeGrid(warmup, repeats, quickGrid, tuningDatabase, decodePoints);
    if (backwardRun) {
      auto buffer = MemoryBuffer::getFile(specFile);
      if (!buffer) {
        errs() << "attn-bench: cannot read " << specFile << "\n";
        return 1;
      }
      return attn::bench::runBackwardSpec((*buffer)->getBuffer().str(), specFile, batch, seqlen,
                                          seqlenK ? seqlenK : seqlen,
                                          std::vector<std::string>(captureOptions.begin(),
                                                                   captureOptions.end()),
                                          tileCoverage, check, warmup, repeats, tileOverride);
    }
    return grid ? runGrid() : linearGrid ? runLinearGrid() : runSpec();
  } catch (const attn::Error &error) {
    errs() << "attn-bench: " << error.what() << "\n";
    return 1;
  }
}
