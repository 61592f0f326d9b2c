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
//   attn-bench --grid
//       the grid of the peer comparison: head dim 64/128/256, seqlen 512 to
//       16384, causal and not, B*S = 16384 and H*D = 2048, bf16. With
//       --tuning-db each point runs the heuristic plan and the plan recorded
//       nearest its shape in 6 interleaved rounds (alternating which goes
//       first) and prints both.
//
// TFLOP/s = 4*B*H*Sq*Sk*D / time (halved for causal masks); the time is the
// median of --repeats launches after --warmup launches, timed with events.
//
//===----------------------------------------------------------------------===//

#include "AttnHarness.h"
#include "attn/Compiler/Compiler.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <sstream>

using namespace llvm;

namespace {
cl::opt<std::string> specFile(cl::Positional, cl::desc("[spec.mlir]"), cl::init(""));
cl::opt<bool> grid("grid", cl::desc("Run the peer-comparison grid"), cl::init(false));
cl::opt<int64_t> batch("batch", cl::desc("Batch size"), cl::init(2));
cl::opt<int64_t> seqlen("seqlen", cl::desc("Query sequence length"), cl::init(8192));
cl::opt<int64_t> seqlenK("seqlen-k", cl::desc("Key sequence length (default: --seqlen)"),
                         cl::init(0));
cl::opt<bool> check("check", cl::desc("Compare with the CPU reference evaluator"),
                    cl::init(false));
cl::opt<int> warmup("warmup", cl::desc("Untimed launches first"), cl::init(5));
cl::opt<int> repeats("repeats", cl::desc("Timed launches (median reported)"), cl::init(20));
cl::opt<std::string> tileOverride("tile", cl::desc("Tile override passed to attn-tile"),
                                  cl::init(""));
cl::opt<std::string> tuningDatabase(
    "tuning-db",
    cl::desc("Take the tile plan from this tuning database (the record nearest --batch, "
             "--seqlen, --seqlen-k, or each grid point's shape); default: the heuristic"),
    cl::value_desc("file"), cl::init(""));
cl::opt<int> blocksPerSm("persistent-blocks-per-sm",
                         cl::desc("Grid policy over the plan's: 0 = one block per work tile, "
                                  "k > 0 = a persistent grid of k blocks per SM"),
                         cl::init(-1));

cl::opt<bool> tileCoverage(
    "tile-coverage",
    cl::desc("Build the masks' tile coverage once (timed separately) and pass it to every launch"),
    cl::init(false));

cl::list<std::string> captureOptions(
    "capture", cl::desc("NAME=GENERATOR[@D0xD1...]: a captured buffer (see the file header)"));

struct Loaded {
  attn::CompiledKernel compiled;
  attn::Module module;
  attn::KernelFunction function;
};

/// Compiles and loads a spec; with a tuning database, its plan is the one
/// recorded nearest `shape`.
Loaded load(const std::string &spec, const std::string &name, const attn::TuningShape &shape,
            const std::string &database) {
  attn::CompileOptions options;
  options.tileOverride = tileOverride;
  options.tuningDatabase = database;
  if (!database.empty())
    options.tuningShape = attn::formatTuningShape(shape);
  Loaded loaded;
  loaded.compiled = attn::compileSpec(spec, name, options);
  if (blocksPerSm >= 0)
    loaded.compiled.launch.persistentBlocksPerSm = blocksPerSm;
  loaded.module = attn::Module::loadPtx(
      std::string_view(loaded.compiled.binary.data(), loaded.compiled.binary.size()));
  loaded.function = loaded.module.function(loaded.compiled.launch.kernelName);
  return loaded;
}

int runSpec() {
  auto buffer = MemoryBuffer::getFileOrSTDIN(specFile);
  if (!buffer) {
    errs() << "attn-bench: cannot read " << specFile << ": " << buffer.getError().message()
           << "\n";
    return 1;
  }
  std::string spec = (*buffer)->getBuffer().str();
  Loaded kernel =
      load(spec, specFile, {batch, seqlen, seqlenK ? seqlenK : seqlen}, tuningDatabase);
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
  bool passed = true;
  if (check) {
    data.poisonOutputs();
    attn::launchForward(kernel.function, launch, data.args(), nullptr);
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
  attn::AttnForwardArgs args = data.args();
  attn::DeviceBuffer coverage;
  if (tileCoverage) {
    auto start = std::chrono::steady_clock::now();
    coverage = attn::buildTileCoverage(kernel.module, launch, args, nullptr);
    ATTN_CU_CHECK(cuCtxSynchronize);
    double buildMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    args.tileCoverage = static_cast<const unsigned char *>(coverage.data());
    std::printf("tile coverage built in %.3f ms (%llu bytes)\n", buildMs,
                (unsigned long long)attn::tileCoverageBytes(launch, args));
  }
  double ms = attn::harness::medianLaunchMs(kernel.function, launch, args, warmup, repeats);
  double flops = attn::harness::forwardFlops(launch, shape, attn::harness::specHasCausalMask(spec));
  std::printf("time %.3f ms (median of %d), %.1f TFLOP/s\n", ms, int(repeats), flops / ms / 1e9);
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
    return std::to_string(launch.blockM) + "x" + std::to_string(launch.blockN) +
           (launch.persistentBlocksPerSm ? " persistent" : "");
  };
  for (int headDim : {64, 128, 256}) {
    int heads = 2048 / headDim;
    std::optional<attn::harness::ForwardProblem> data;
    for (bool causal : {false, true}) {
      std::ostringstream spec;
      spec << "attn.kernel @grid_d" << headDim << (causal ? "_causal" : "")
           << " problem = #attn.problem<q_heads = " << heads << ", kv_heads = " << heads
           << ", head_dim = " << headDim << ", element_type = bf16> mask = "
           << (causal ? "#attn.causal<bottom_right>" : "#attn.no_mask")
           << " normalizer = #attn.softmax\n";
      Loaded heuristic = load(spec.str(), "grid.mlir", {}, "");
      if (!data)
        data.emplace(heuristic.compiled.launch, attn::harness::Shape{1, 16384, 16384, false}, 11);
      for (int64_t s : {512, 1024, 2048, 4096, 8192, 16384}) {
        attn::harness::Shape shape{16384 / s, s, s, false};
        attn::AttnForwardArgs args = gridArgs(*data, shape.batch, s);
        double flops = attn::harness::forwardFlops(heuristic.compiled.launch, shape, causal);
        auto time = [&](Loaded &kernel) {
          return attn::harness::medianLaunchMs(kernel.function, kernel.compiled.launch, args,
                                               warmup, repeats);
        };
        if (!compare) {
          double ms = time(heuristic);
          std::printf("| %d | %lld | %s | %.1f | %.3f | %s |\n", headDim, (long long)s,
                      causal ? "yes" : "no", flops / ms / 1e9, ms,
                      planName(heuristic.compiled.launch).c_str());
          std::fflush(stdout);
          continue;
        }
        Loaded tuned = load(spec.str(), "grid.mlir", {shape.batch, s, s}, tuningDatabase);
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
} // namespace

int main(int argc, char **argv) {
  InitLLVM initLLVM(argc, argv);
  cl::ParseCommandLineOptions(argc, argv, "attn-bench: run and time attnc kernels\n");
  if (!grid && specFile.empty()) {
    errs() << "attn-bench: give a spec file or --grid (see --help)\n";
    return 1;
  }
  std::string reason = attn::harness::gpuUnavailableReason();
  if (!reason.empty()) {
    std::printf("attn-bench: no GPU run: %s\n", reason.c_str());
    return 0;
  }
  try {
    attn::ensureContext();
    return grid ? runGrid() : runSpec();
  } catch (const attn::Error &error) {
    errs() << "attn-bench: " << error.what() << "\n";
    return 1;
  }
}
