//===- Jit.cpp - Compile attention kernels from a host program ------------===//

#include "attn/Compiler/Jit.h"

#include "SpecSession.h"

#include "attn/Backend/Nvrtc.h"
#include "attn/CodeGen/CudaEmitter.h"
#include "attn/Compiler/Compiler.h"
#include "attn/Compiler/KernelConfig.h"
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

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <mutex>

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
                     const std::string &tuningShape) {
    CompileOptions planOptions;
    planOptions.arch = options.arch;
    planOptions.tileOverride = options.tileOverride;
    planOptions.tuningDatabase = *options.tuningDatabase;
    planOptions.tuningShape = tuningShape;
    planOptions.planOnly = true;
    if (mlir::failed(mlir::verify(module)) ||
        mlir::failed(runCompilePipeline(module, planOptions)))
      diagnostics.fail(what);

    PlannedKernel planned;
    planned.name = op.getSymName().str();
    llvm::raw_string_ostream irStream(planned.plannedIr);
    op->print(irStream, mlir::OpPrintingFlags().useLocalScope());
    irStream.flush();
    planned.launch = launchConfigFor(op);

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

  std::string requestPrefix(char kind, const std::string &tuningShape) const {
    return std::string(1, kind) + "\n" + options.arch + "\n" + options.tileOverride + "\n" +
           tuningShape + "\n";
  }

  /// A built spec's kernel: the forward, planned for `tuningShape`, or with
  /// `backward` its backward module.
  Kernel compileSpec(const Spec &spec, const std::string &tuningShape, bool backward = false) {
    spec.validate();
    return compileRequest(requestPrefix(backward ? 'B' : 'S', tuningShape) + spec.fingerprint(),
                          [&] {
      std::lock_guard<std::mutex> lock(irMutex);
      detail::DiagnosticCapture diagnostics(context);
      std::string what = "spec @" + spec.name + (backward ? " has no backward" : " is invalid");
      mlir::attn::KernelOp op;
      mlir::OwningOpRef<mlir::ModuleOp> module = buildSpecModule(context, spec, diagnostics, what, op);
      return backward ? planBackwardKernel(*module, op, diagnostics, what)
                      : plan(*module, op, diagnostics, what, tuningShape);
    });
  }

  /// compileSpec for spec text.
  Kernel compileText(std::string_view specText, std::string_view bufferName,
                     const std::string &tuningShape, bool backward = false) {
    std::string text(specText);
    return compileRequest(requestPrefix(backward ? 'b' : 'T', tuningShape) + text, [&] {
      std::lock_guard<std::mutex> lock(irMutex);
      detail::DiagnosticCapture diagnostics(context);
      std::string name(bufferName);
      mlir::OwningOpRef<mlir::ModuleOp> module =
          detail::parseSpecModule(context, diagnostics, text, name);
      mlir::attn::KernelOp op = detail::singleKernel(*module);
      return backward ? planBackwardKernel(*module, op, diagnostics,
                                           "compiling the backward of " + name + " failed")
                      : plan(*module, op, diagnostics, "compiling " + name + " failed", tuningShape);
    });
  }
};

Compiler::Compiler(JitOptions options) : impl(std::make_unique<Impl>(std::move(options))) {}

Compiler::~Compiler() = default;

/// "B,Sq,Sk", the form attn-tile's tuning-shape option reads.
static std::string tuningShapeText(const TuningShape &shape) {
  if (shape.batch <= 0 || shape.seqlenQ <= 0 || shape.seqlenK <= 0)
    throw Error(fmt::format("shape: batch, seqlenQ and seqlenK must be positive, got {}, {}, {}",
                            shape.batch, shape.seqlenQ, shape.seqlenK));
  return formatTuningShape(shape);
}

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
  return stats;
}

DiskCache *Compiler::diskCache() { return impl->disk.get(); }

void Compiler::clearMemoryCache() {
  impl->byRequest.clear();
  impl->byContent.clear();
}

} // namespace attn
