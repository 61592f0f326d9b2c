//===- Jit.cpp - Compile attention kernels from a host program ------------===//

#include "attn/Compiler/Jit.h"

#include "SpecSession.h"

#include "attn/Backend/Nvrtc.h"
#include "attn/CodeGen/CudaEmitter.h"
#include "attn/Compiler/Compiler.h"
#include "attn/Compiler/KernelConfig.h"
#include "attn/Compiler/Parallel.h"
#include "attn/Compiler/SpecIR.h"
#include "attn/Transforms/Passes.h"
#include "attn/runtime/Driver.h"
#include "attn/runtime/Hash.h"
#include "attn/runtime/LaunchMetadata.h"
#include "attn/runtime/SingleFlightCache.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#ifndef ATTNC_VERSION
#error "ATTNC_VERSION must be defined by the build"
#endif

namespace attn {

const char *attncVersion() { return ATTNC_VERSION; }

namespace {

/// A module holding the op `spec` builds (`op`); invalid values fail
/// through `diagnostics`.
mlir::OwningOpRef<mlir::ModuleOp> buildSpecModule(mlir::MLIRContext &context, const Spec &spec,
                                                  detail::DiagnosticCapture &diagnostics,
                                                  const std::string &what,
                                                  mlir::attn::KernelOp &op) {
  mlir::OpBuilder builder(&context);
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(builder.getUnknownLoc());
  builder.setInsertionPointToEnd(module->getBody());
  op = buildKernelOp(builder, builder.getUnknownLoc(), spec);
  if (!op)
    diagnostics.fail(what);
  return module;
}

/// What the IR phase decides about one kernel: everything the key and the
/// NVRTC step need.
struct PlannedKernel {
  std::string name;
  /// The attn.kernel op after attn-tile and attn-plan-smem, printed.
  std::string plannedIr;
  std::string cudaSource;
  AttnLaunchConfig launch;
};

bool sameLaunch(const AttnLaunchConfig &a, const AttnLaunchConfig &b) {
  return serializeLaunchConfig(a) == serializeLaunchConfig(b);
}

} // namespace

/// "B,Sq,Sk", the form attn-tile's tuning-shape option reads.
static std::string tuningShapeText(const TuningShape &shape) {
  if (shape.batch <= 0 || shape.seqlenQ <= 0 || shape.seqlenK <= 0)
    throw Error(fmt::format("shape: batch, seqlenQ and seqlenK must be positive, got {}, {}, {}",
                            shape.batch, shape.seqlenQ, shape.seqlenK));
  return formatTuningShape(shape);
}

double medianRunMilliseconds(const Kernel &kernel, const AttnForwardArgs &args, CUstream stream,
                             int warmup, int repeats) {
  if (repeats < 1)
    throw Error(fmt::format("repeats: must be at least 1, got {}", repeats));
  for (int i = 0; i < warmup; ++i)
    kernel.run(args, stream);
  // Waited for only after the last launch: with the stream busy, a start
  // event completes when the launch before ends, not when the host has
  // checked the next one's arguments.
  std::vector<Event> starts(repeats), ends(repeats);
  for (int i = 0; i < repeats; ++i) {
    starts[i].record(stream);
    kernel.run(args, stream);
    ends[i].record(stream);
  }
  std::vector<float> times;
  for (int i = 0; i < repeats; ++i)
    times.push_back(Event::elapsedMs(starts[i], ends[i]));
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

AttnForwardArgs withoutPlanSizedBuffers(const AttnForwardArgs &args) {
  AttnForwardArgs stripped = args;
  stripped.tileCoverage = nullptr;
  stripped.tileKeyBits = nullptr;
  stripped.workOrder = nullptr;
  stripped.workspace = nullptr;
  stripped.workspaceBytes = 0;
  return stripped;
}

/// CandidateTimer's default: two launches, then the median of five. A split
/// count of first-use tuning gets a workspace of its own sized for it (the
/// call's is stripped): the pieces of more than one split, or the forward
/// kernel's tail split at count 0, as a call with a workspace runs them.
static double timeOnGpu(const Kernel &kernel, const AttnForwardArgs &args, CUstream stream) {
  const uint64_t scratchBytes =
      args.keySplits >= 0 && !args.workspace ? forwardWorkspaceBytes(kernel.launchConfig(), args)
                                             : 0;
  DeviceBuffer scratch;
  AttnForwardArgs timed = args;
  if (scratchBytes > 0) {
    scratch = DeviceBuffer(scratchBytes);
    timed.workspace = scratch.data();
    timed.workspaceBytes = scratch.size();
  }
  return medianRunMilliseconds(kernel, timed, stream, /*warmup=*/2, /*repeats=*/5);
}

/// The heuristic's plan stays unless a first-use candidate beats it by more
/// than this fraction (measurement noise).
constexpr double kFirstUseNoiseFloor = 0.01;

/// First-use tuning's timing loop over `count` candidates: the baseline
/// (candidate 0) first, whose failure or lack of a positive time is the
/// call's error (naming `baseline`); then the others while the budget
/// since `began` lasts (the baseline and one other are always timed),
/// leaving out those whose timing throws or gives no positive time (a
/// candidate with nothing to time returns 0). Returns the fastest, the
/// baseline when it is within kFirstUseNoiseFloor, and every time in
/// `milliseconds` (0 where none).
static size_t fastestOnFirstUse(size_t count, const std::function<double(size_t)> &time,
                                double budgetSeconds,
                                std::chrono::steady_clock::time_point began,
                                const std::string &baseline, std::vector<double> &milliseconds) {
  milliseconds.assign(count, 0);
  milliseconds[0] = time(0);
  if (!(milliseconds[0] > 0) || !std::isfinite(milliseconds[0]))
    throw Error(fmt::format("first-use tuning: the timer gave {} ms for {}", milliseconds[0],
                            baseline));
  size_t best = 0, timed = 1;
  for (size_t i = 1; i < count; ++i) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    if (timed >= 2 && elapsed > budgetSeconds)
      break;
    try {
      milliseconds[i] = time(i);
    } catch (const Error &) {
      milliseconds[i] = 0;
      continue;
    }
    if (!(milliseconds[i] > 0) || !std::isfinite(milliseconds[i])) {
      milliseconds[i] = 0;
      continue;
    }
    ++timed;
    if (milliseconds[i] < milliseconds[best])
      best = i;
  }
  return milliseconds[0] <= milliseconds[best] * (1 + kFirstUseNoiseFloor) ? 0 : best;
}

struct Compiler::Impl {
  JitOptions options;
  std::unique_ptr<DiskCache> disk;
  /// The key fields that do not depend on the kernel.
  std::string toolchain;

  // One context for every compile: its uniqued attributes are small and
  // reused. The IR phase (parse/build, passes, printing) holds irMutex,
  // because the diagnostic handler is per context; NVRTC runs outside it.
  mlir::MLIRContext context{mlir::MLIRContext::Threading::DISABLED};
  std::mutex irMutex;

  SingleFlightCache<std::string, Kernel> byRequest; // spec text or fingerprint
  SingleFlightCache<std::string, Kernel> byContent; // disk-cache key

  std::atomic<uint64_t> memoryHits{0}, diskHits{0}, compiles{0};

  explicit Impl(JitOptions opts) : options(std::move(opts)) {
    if (!backend::isSupportedArch(options.arch))
      throw Error("arch: unsupported target architecture '" + options.arch +
                  "'; the kernel templates need sm_90a");
    DiskCacheOptions diskOptions =
        options.diskCache ? *options.diskCache : DiskCacheOptions::fromEnvironment();
    if (!diskOptions.directory.empty())
      disk = std::make_unique<DiskCache>(std::move(diskOptions));
    if (!options.tuningDatabase)
      options.tuningDatabase = TuningDatabase::defaultPath();
    if (options.firstUse.enabled) {
      firstUseEnabled = *options.firstUse.enabled;
    } else {
      const char *autotune = std::getenv("ATTNC_AUTOTUNE");
      firstUseEnabled = autotune && std::string_view(autotune) == "1";
    }
    detail::prepareSpecContext(context);

    char templates[17];
    std::snprintf(templates, sizeof(templates), "%016" PRIx64, codegen::templatesFingerprint());
    // The driver version keys entries too: a cubin is only known to load on
    // a driver at least as new as the one it was first loaded with, and a
    // machine without a driver keeps entries of its own ("none").
    std::string driver = Driver::available() ? std::to_string(Driver::get().version()) : "none";
    toolchain = std::string("attnc ") + ATTNC_VERSION + "\narch " + options.arch + "\nnvrtc " +
                backend::nvrtcVersionString() + "\ndriver " + driver + "\ntemplates " +
                templates + "\n";
  }

  /// Runs the planning passes and the emitter over the module's kernel. The
  /// caller holds irMutex.
  PlannedKernel plan(mlir::ModuleOp module, mlir::attn::KernelOp op,
                     detail::DiagnosticCapture &diagnostics, const std::string &what,
                     const std::string &tuningShape, const std::string &tileOverride) {
    CompileOptions planOptions;
    planOptions.arch = options.arch;
    planOptions.tileOverride = tileOverride;
    planOptions.tuningDatabase = *options.tuningDatabase;
    planOptions.tuningShape = tuningShape;
    planOptions.planOnly = true;
    if (mlir::failed(mlir::verify(module)) ||
        mlir::failed(runCompilePipeline(module, planOptions)))
      diagnostics.fail(what);

    PlannedKernel planned;
    planned.name = op.getSymName().str();
    planned.launch = launchConfigFor(op);
    // The measured split counts change no code: they stay out of the
    // planned IR that keys the caches, and kernelFor gives the kernel the
    // plan's own (a new record costs no compile).
    op.removeTunedKeySplitsAttr();
    llvm::raw_string_ostream irStream(planned.plannedIr);
    op->print(irStream, mlir::OpPrintingFlags().useLocalScope());
    irStream.flush();

    mlir::PassManager emit(&context);
    mlir::attn::buildEmitPipeline(emit);
    if (mlir::failed(emit.run(module)))
      diagnostics.fail(what);
    planned.cudaSource =
        op->getAttrOfType<mlir::StringAttr>(mlir::attn::kCudaSourceAttrName).str();
    return planned;
  }

  /// The backward's plan and emitted unit of the module's kernel. The
  /// caller holds irMutex.
  PlannedKernel planBackwardKernel(mlir::ModuleOp module, mlir::attn::KernelOp op,
                             detail::DiagnosticCapture &diagnostics, const std::string &what) {
    CompileOptions backwardOptions;
    backwardOptions.arch = options.arch;
    backwardOptions.tileOverride = options.tileOverride;
    // The backward's records of the database (the largest tuned bucket: the
    // JIT's backward takes no shape).
    backwardOptions.tuningDatabase = *options.tuningDatabase;
    if (mlir::failed(mlir::verify(module)))
      diagnostics.fail(what);
    mlir::FailureOr<PlannedBackward> backward = ::attn::planBackward(op, backwardOptions);
    if (mlir::failed(backward))
      diagnostics.fail(what);
    PlannedKernel planned;
    planned.name = op.getSymName().str();
    // The forward's measured split counts are nothing to the backward.
    op.removeTunedKeySplitsAttr();
    llvm::raw_string_ostream irStream(planned.plannedIr);
    op->print(irStream, mlir::OpPrintingFlags().useLocalScope());
    irStream << "\nbackward " << formatTileOverride(backward->tile);
    irStream.flush();
    planned.launch = backward->launch;
    planned.cudaSource = std::move(backward->cudaSource);
    return planned;
  }

  std::string contentKey(const PlannedKernel &planned) const {
    Sha256 hash;
    hash.updateField("attnc-kernel-key 1");
    hash.updateField(toolchain);
    hash.updateField(planned.plannedIr);
    hash.updateField(planned.cudaSource);
    return Sha256::toHex(hash.finish());
  }

  CacheEntry compileToEntry(const PlannedKernel &planned) {
    backend::NvrtcResult result = backend::compileCuda(
        planned.cudaSource, planned.name + ".cu", options.arch, backend::NvrtcOutput::PtxAndCubin);
    if (!result.succeeded)
      throw Error("spec @" + planned.name + ": NVRTC failed to compile the emitted kernel:\n" +
                  result.log);
    ++compiles;
    CacheEntry entry;
    entry.set("info", "name " + planned.name + "\n" + toolchain);
    entry.set("launch", serializeLaunchConfig(planned.launch));
    entry.set("ir", planned.plannedIr);
    entry.set("ptx", std::string(result.binary.begin(), result.binary.end()));
    entry.set("cubin", std::string(result.cubin.begin(), result.cubin.end()));
    return entry;
  }

  /// The kernel of an entry, or nothing when the entry does not describe
  /// this planned kernel (then it is treated as corrupt).
  static std::optional<Kernel> kernelFromEntry(const CacheEntry &entry,
                                               const PlannedKernel &planned) {
    const std::string *launch = entry.find("launch");
    const std::string *ptx = entry.find("ptx");
    const std::string *cubin = entry.find("cubin");
    if (!launch || !ptx || !cubin)
      return std::nullopt;
    KernelImage image;
    image.name = planned.name;
    try {
      image.launch = parseLaunchConfig(*launch);
    } catch (const Error &) {
      return std::nullopt;
    }
    image.launch.tunedKeySplits = planned.launch.tunedKeySplits;
    if (!sameLaunch(image.launch, planned.launch))
      return std::nullopt;
    image.ptx = *ptx;
    image.cubin.assign(cubin->begin(), cubin->end());
    return Kernel(std::move(image));
  }

  /// Memory, then disk, then NVRTC, for a planned kernel.
  Kernel kernelFor(const PlannedKernel &planned) {
    std::string key = contentKey(planned);
    bool created = false;
    Kernel kernel = byContent.getOrCreate(
        key,
        [&] {
          auto build = [&] { return compileToEntry(planned); };
          bool built = true;
          CacheEntry entry = disk ? disk->loadOrBuild(key, build, &built) : build();
          std::optional<Kernel> kernel = kernelFromEntry(entry, planned);
          if (!kernel && !built) {
            // A well-formed entry that does not describe this kernel: replace it.
            disk->remove(key);
            entry = disk->loadOrBuild(key, build, &built);
            kernel = kernelFromEntry(entry, planned);
          }
          if (!kernel)
            throw Error("spec @" + planned.name + ": the disk cache entry " + key +
                        " does not match the kernel");
          if (!built)
            ++diskHits;
          return *kernel;
        },
        &created);
    if (!created)
      ++memoryHits;
    if (kernel.launchConfig().tunedKeySplits != planned.launch.tunedKeySplits) {
      KernelImage image = kernel.image();
      image.launch.tunedKeySplits = planned.launch.tunedKeySplits;
      return Kernel(std::move(image));
    }
    return kernel;
  }

  /// The request-level memory cache in front of `plan` + kernelFor.
  Kernel compileRequest(const std::string &request, const std::function<PlannedKernel()> &planIt) {
    bool created = false;
    Kernel kernel = byRequest.getOrCreate(
        request, [&] { return kernelFor(planIt()); }, &created);
    if (!created)
      ++memoryHits;
    return kernel;
  }

  std::string requestPrefix(char kind, const std::string &tuningShape,
                            const std::string &tileOverride) const {
    return std::string(1, kind) + "\n" + options.arch + "\n" + tileOverride + "\n" +
           tuningShape + "\n";
  }

  /// A built spec's kernel: the forward, planned for `tuningShape` under
  /// `tileOverride` (JitOptions::tileOverride unless given), or with
  /// `backward` its backward module.
  Kernel compileSpec(const Spec &spec, const std::string &tuningShape, bool backward = false,
                     const std::optional<std::string> &tileOverride = std::nullopt) {
    spec.validate();
    const std::string override = tileOverride.value_or(options.tileOverride);
    return compileRequest(requestPrefix(backward ? 'B' : 'S', tuningShape, override) +
                              spec.fingerprint(),
                          [&] {
      std::lock_guard<std::mutex> lock(irMutex);
      detail::DiagnosticCapture diagnostics(context);
      std::string what = "spec @" + spec.name + (backward ? " has no backward" : " is invalid");
      mlir::attn::KernelOp op;
      mlir::OwningOpRef<mlir::ModuleOp> module = buildSpecModule(context, spec, diagnostics, what, op);
      return backward ? planBackwardKernel(*module, op, diagnostics, what)
                      : plan(*module, op, diagnostics, what, tuningShape, override);
    });
  }

  /// compileSpec for spec text.
  Kernel compileText(std::string_view specText, std::string_view bufferName,
                     const std::string &tuningShape, bool backward = false,
                     const std::optional<std::string> &tileOverride = std::nullopt) {
    std::string text(specText);
    const std::string override = tileOverride.value_or(options.tileOverride);
    return compileRequest(requestPrefix(backward ? 'b' : 'T', tuningShape, override) + text, [&] {
      std::lock_guard<std::mutex> lock(irMutex);
      detail::DiagnosticCapture diagnostics(context);
      std::string name(bufferName);
      mlir::OwningOpRef<mlir::ModuleOp> module =
          detail::parseSpecModule(context, diagnostics, text, name);
      mlir::attn::KernelOp op = detail::singleKernel(*module);
      return backward ? planBackwardKernel(*module, op, diagnostics,
                                           "compiling the backward of " + name + " failed")
                      : plan(*module, op, diagnostics, "compiling " + name + " failed", tuningShape,
                             override);
    });
  }

  /// compileFor: the kernel for `args`' shape, tuned first when first-use
  /// tuning is on and the bucket has no record. `specText` gives the spec's
  /// text (its tuning key); `compileWith(override, shape)` compiles it.
  Kernel compileForArgs(const std::function<std::string()> &specText,
                        const std::function<Kernel(const std::optional<std::string> &,
                                                   const std::string &)> &compileWith,
                        const AttnForwardArgs &args, CUstream stream);

  /// First-use tuning of the short-query path's split count for a call
  /// that leaves it to the runtime: `planned` with the bucket's count added
  /// to its tunedKeySplits (measured on the call's arguments, or read from
  /// a record written since `planned` was planned). The caller holds
  /// tuningMutex.
  Kernel tuneKeySplitsOnFirstUse(const SpecTuningKey &key, const Kernel &planned,
                                 const AttnForwardArgs &args, const TuningShape &shape,
                                 int multiprocessors, CUstream stream);

  /// Records a first-use winner (when there is a database; a failure to
  /// write is reported, and this Compiler keeps the winner while later
  /// processes tune again) and counts the tuning and its time since `began`.
  void finishFirstUse(TuningDatabase &database, const std::string &specHash,
                      const ShapeBucket &bucket, const std::string &config, double milliseconds,
                      std::chrono::steady_clock::time_point began) {
    if (!database.path().empty()) {
      TuningRecord record;
      record.specHash = specHash;
      record.arch = options.arch;
      record.bucket = bucket;
      record.config = config;
      record.milliseconds = milliseconds;
      record.device = Driver::available() ? queryDevice().name : "";
      record.unixSeconds = static_cast<int64_t>(std::time(nullptr));
      try {
        database.record(record);
      } catch (const Error &error) {
        std::fprintf(stderr, "attnc: first-use tuning: %s\n", error.what());
      }
    }
    ++firstUseTunings;
    firstUseMicroseconds += static_cast<uint64_t>(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count() * 1e6);
  }

  bool firstUseEnabled = false;
  // The buckets this Compiler tuned (spec hash and bucket -> override), so
  // that a database it cannot write does not make every call tune again;
  // tuningMutex keeps two calls from tuning one bucket at once.
  std::mutex tuningMutex;
  std::map<std::string, std::string> tunedHere;
  // The kernels whose split counts this Compiler tuned, by spec hash and
  // bucket.
  std::map<std::string, Kernel> splitsTunedHere;
  std::map<std::string, SpecTuningKey> tuningKeys; // by spec text
  std::atomic<uint64_t> firstUseTunings{0}, firstUseMicroseconds{0};
};

Kernel Compiler::Impl::compileForArgs(
    const std::function<std::string()> &specText,
    const std::function<Kernel(const std::optional<std::string> &, const std::string &)>
        &compileWith,
    const AttnForwardArgs &args, CUstream stream) {
  const LogicalShape logical = logicalShape(args);
  const TuningShape shape{logical.batch, logical.seqlenQ, logical.seqlenK};
  const std::string shapeText = tuningShapeText(shape);
  if (!firstUseEnabled || !options.tileOverride.empty())
    return compileWith(std::nullopt, shapeText);
  std::lock_guard<std::mutex> lock(tuningMutex);
  const std::string text = specText();
  auto known = tuningKeys.find(text);
  if (known == tuningKeys.end())
    known = tuningKeys.emplace(text, tuningKeyOfSpec(text, "spec")).first;
  const SpecTuningKey &key = known->second;
  // The plan compile(spec, shape) takes. Linear attention has one plan; a
  // call the short-query path takes (every paged one) does not run the
  // forward kernel's plan.
  Kernel planned = compileWith(std::nullopt, shapeText);
  const int multiprocessors = Driver::available() ? queryDevice().multiprocessorCount
                                                  : int(kReferenceMultiprocessors);
  if (key.linearFamily || args.paged.active())
    return planned;
  // A call of few query rows that leaves the path to the runtime: its time
  // is the split count's (0 being the forward kernel), not the tile plan's.
  if (args.keySplits < 0 && logical.seqlenQ <= attn_abi::kShortQueryMaxRows &&
      !args.packed.active() && !args.tileCoverage && !args.tileKeyBits && !args.workOrder)
    return tuneKeySplitsOnFirstUse(key, planned, args, shape, multiprocessors, stream);
  if (shortQueryPlanFor(planned.launchConfig(), args, multiprocessors).splits > 0)
    return planned;
  const ShapeBucket bucket = ShapeBucket::of(shape, key.qHeads);
  const std::string tunedKey = key.specHash + " " + bucket.str();
  // An empty plan: the database has the bucket's record, which attn-tile
  // takes.
  if (auto tuned = tunedHere.find(tunedKey); tuned != tunedHere.end())
    return tuned->second.empty() ? planned : compileWith(tuned->second, shapeText);
  TuningDatabase database(*options.tuningDatabase);
  if (!database.path().empty()) {
    std::optional<TuningRecord> record = database.lookup(key.specHash, options.arch, bucket);
    if (record && record->bucket == bucket) {
      tunedHere[tunedKey] = "";
      return planned;
    }
  }

  const auto began = std::chrono::steady_clock::now();
  TileProblem problem = key.problem;
  problem.keyLength = shape.seqlenK;
  const std::vector<TileConfig> candidates =
      firstUseCandidates(problem, std::max<size_t>(1, options.firstUse.candidates));
  // NVRTC runs outside irMutex, so the candidates compile side by side. A
  // candidate that does not compile is left out.
  std::vector<std::optional<Kernel>> kernels(candidates.size());
  {
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i = next++; i < candidates.size(); i = next++) {
        try {
          kernels[i] = compileWith(formatTileOverride(candidates[i]), shapeText);
        } catch (const std::exception &) {
        }
      }
    };
    runOnThreads(
        std::min<size_t>(candidates.size(), std::max(1u, std::thread::hardware_concurrency())),
        work);
  }
  if (!kernels.front())
    throw Error(fmt::format("first-use tuning: the heuristic's plan {} does not compile for "
                            "shape {}",
                            formatTileOverride(candidates.front()), shapeText));

  // The heuristic's time is the call's own risk: its error propagates. A
  // neighbour that fails, or reports no positive time, is left out. The
  // candidates run without the call's tile coverage, key bits, work order
  // and workspace, which are sized for one plan's tiles.
  const AttnForwardArgs timing = withoutPlanSizedBuffers(args);
  const CandidateTimer &timer = options.firstUse.timer ? options.firstUse.timer : timeOnGpu;
  std::vector<double> milliseconds;
  const size_t best = fastestOnFirstUse(
      candidates.size(),
      [&](size_t i) { return kernels[i] ? timer(*kernels[i], timing, stream) : 0.0; },
      options.firstUse.budgetSeconds, began, "the heuristic's plan", milliseconds);
  const std::string winner = formatTileOverride(candidates[best]);
  tunedHere[tunedKey] = winner;
  finishFirstUse(database, key.specHash, bucket, winner, milliseconds[best], began);
  return *kernels[best];
}

Kernel Compiler::Impl::tuneKeySplitsOnFirstUse(const SpecTuningKey &key, const Kernel &planned,
                                                const AttnForwardArgs &args,
                                                const TuningShape &shape, int multiprocessors,
                                                CUstream stream) {
  const AttnLaunchConfig &config = planned.launchConfig();
  const ShapeBucket bucket = ShapeBucket::of(shape, key.qHeads);
  for (const TunedKeySplits &tuned : config.tunedKeySplits)
    if (tuned.bucket == bucket)
      return planned;
  const std::string tunedKey = key.specHash + " " + bucket.str();
  if (auto tuned = splitsTunedHere.find(tunedKey); tuned != splitsTunedHere.end())
    return tuned->second;
  auto withCount = [&](int keySplits) {
    KernelImage image = planned.image();
    image.launch.tunedKeySplits.push_back({bucket, keySplits});
    return splitsTunedHere.emplace(tunedKey, Kernel(std::move(image))).first->second;
  };
  // A record another process wrote after this kernel was planned.
  TuningDatabase database(*options.tuningDatabase);
  const std::string recordKey = shortQueryTuningHash(key.specHash);
  if (!database.path().empty())
    for (const TuningRecord &record : database.recordsOf(recordKey, options.arch))
      if (record.bucket == bucket)
        if (std::optional<int> splits = parseKeySplitsConfig(record.config))
          return withCount(*splits);

  const auto began = std::chrono::steady_clock::now();
  // The model's count first: its time is the call's own risk, its error
  // propagates. Another count that fails, or reports no positive time, is
  // left out.
  const int model = modelKeySplits(config, args, multiprocessors);
  std::vector<int> counts{model};
  for (int splits : keySplitLadder(config, shape.seqlenK))
    if (splits != model)
      counts.push_back(splits);
  const CandidateTimer &timer = options.firstUse.timer ? options.firstUse.timer : timeOnGpu;
  auto timeCount = [&](int splits) {
    AttnForwardArgs timing = withoutPlanSizedBuffers(args);
    timing.keySplits = splits;
    return timer(planned, timing, stream);
  };
  std::vector<double> milliseconds;
  const size_t best = fastestOnFirstUse(
      counts.size(), [&](size_t i) { return timeCount(counts[i]); },
      options.firstUse.budgetSeconds, began, fmt::format("the model's {} splits", model),
      milliseconds);
  finishFirstUse(database, recordKey, bucket, formatKeySplitsConfig(counts[best]),
                 milliseconds[best], began);
  return withCount(counts[best]);
}

Compiler::Compiler(JitOptions options) : impl(std::make_unique<Impl>(std::move(options))) {}

Compiler::~Compiler() = default;


Kernel Compiler::compile(const Spec &spec) { return impl->compileSpec(spec, ""); }

Kernel Compiler::compile(std::string_view specText, std::string_view bufferName) {
  return impl->compileText(specText, bufferName, "");
}

Kernel Compiler::compile(const Spec &spec, const TuningShape &shape) {
  return impl->compileSpec(spec, tuningShapeText(shape));
}

Kernel Compiler::compile(std::string_view specText, std::string_view bufferName,
                         const TuningShape &shape) {
  return impl->compileText(specText, bufferName, tuningShapeText(shape));
}

Kernel Compiler::compileFor(const Spec &spec, const AttnForwardArgs &args, CUstream stream) {
  spec.validate();
  return impl->compileForArgs(
      [&] { return printSpec(spec); },
      [&](const std::optional<std::string> &override, const std::string &shape) {
        return impl->compileSpec(spec, shape, /*backward=*/false, override);
      },
      args, stream);
}

Kernel Compiler::compileFor(std::string_view specText, std::string_view bufferName,
                            const AttnForwardArgs &args, CUstream stream) {
  return impl->compileForArgs(
      [&] { return std::string(specText); },
      [&](const std::optional<std::string> &override, const std::string &shape) {
        return impl->compileText(specText, bufferName, shape, /*backward=*/false, override);
      },
      args, stream);
}

Kernel Compiler::compileBackward(const Spec &spec) {
  return impl->compileSpec(spec, "", /*backward=*/true);
}

Kernel Compiler::compileBackward(std::string_view specText, std::string_view bufferName) {
  return impl->compileText(specText, bufferName, "", /*backward=*/true);
}

Compiler::TrainingKernels Compiler::compileForTraining(const Spec &spec) {
  return {compile(spec), compileBackward(spec)};
}

Compiler::TrainingKernels Compiler::compileForTraining(std::string_view specText,
                                                       std::string_view bufferName) {
  return {compile(specText, bufferName), compileBackward(specText, bufferName)};
}

std::string Compiler::printSpec(const Spec &spec, SpecPrinting mode) {
  return printSpecText(spec, mode);
}

std::string printSpecText(const Spec &spec, SpecPrinting mode) {
  spec.validate();
  // A context of its own: nothing a spec interns outlives the call.
  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  detail::prepareSpecContext(context);
  detail::DiagnosticCapture diagnostics(context);
  std::string what = "spec @" + spec.name + " is invalid";
  mlir::attn::KernelOp op;
  mlir::OwningOpRef<mlir::ModuleOp> module = buildSpecModule(context, spec, diagnostics, what, op);
  mlir::OpPrintingFlags flags;
  if (mode == SpecPrinting::Verified) {
    if (mlir::failed(mlir::verify(*module)))
      diagnostics.fail(what);
  } else {
    flags.assumeVerified();
  }
  std::string text;
  llvm::raw_string_ostream stream(text);
  op->print(stream, flags);
  stream << "\n";
  return stream.str();
}

JitStats Compiler::stats() const {
  JitStats stats;
  stats.memoryHits = impl->memoryHits;
  stats.diskHits = impl->diskHits;
  stats.compiles = impl->compiles;
  stats.firstUseTunings = impl->firstUseTunings;
  stats.firstUseSeconds = double(impl->firstUseMicroseconds) * 1e-6;
  return stats;
}

DiskCache *Compiler::diskCache() { return impl->disk.get(); }

void Compiler::clearMemoryCache() {
  impl->byRequest.clear();
  impl->byContent.clear();
}

} // namespace attn
