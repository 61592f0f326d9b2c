//===- Compiler.cpp - attnc's compile driver ------------------------------===//

#include "attn/Compiler/Compiler.h"

#include "SpecSession.h"

#include "attn/Backend/Nvrtc.h"
#include "attn/Compiler/KernelConfig.h"
#include "attn/IR/AttnDialect.h"
#include "attn/Transforms/Passes.h"
#include "attn/runtime/Error.h"
#include "attn/runtime/TuningDatabase.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

namespace attn {

void registerSpecDialects(mlir::DialectRegistry &registry) {
  registry.insert<mlir::attn::AttnDialect, mlir::arith::ArithDialect, mlir::math::MathDialect,
                  mlir::func::FuncDialect, mlir::memref::MemRefDialect>();
}

/// attn-tile's options for a compile's forward plan.
static mlir::attn::AttnTileOptions tileOptionsOf(const CompileOptions &options) {
  mlir::attn::AttnTileOptions tileOptions;
  tileOptions.tileOverride = options.tileOverride;
  tileOptions.tuningDatabase = options.tuningDatabase;
  tileOptions.tuningShape = options.tuningShape;
  tileOptions.arch = options.arch;
  return tileOptions;
}

void buildCompilePipeline(mlir::OpPassManager &pm, const CompileOptions &options) {
  mlir::attn::buildPlanPipeline(pm, tileOptionsOf(options));
  if (!options.planOnly)
    mlir::attn::buildEmitPipeline(pm);
}

mlir::LogicalResult runCompilePipeline(mlir::ModuleOp module, const CompileOptions &options) {
  if (!backend::isSupportedArch(options.arch))
    return mlir::emitError(module.getLoc())
           << "unsupported target architecture '" << options.arch
           << "'; the kernel templates need sm_90a";
  mlir::PassManager pm(module.getContext());
  if (options.printIrAfterEachPass) {
    module.getContext()->disableMultithreading();
    pm.enableIRPrinting(/*shouldPrintBeforePass=*/[](mlir::Pass *, mlir::Operation *) {
                          return false;
                        },
                        /*shouldPrintAfterPass=*/[](mlir::Pass *, mlir::Operation *) {
                          return true;
                        },
                        /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false);
  }
  if (options.pagedKv)
    module.walk([](mlir::attn::KernelOp op) {
      op->setAttr(mlir::attn::kPagedKvAttrName, mlir::UnitAttr::get(op.getContext()));
    });
  buildCompilePipeline(pm, options);
  return pm.run(module);
}

/// The runtime's form of a capture declaration.
static CaptureDecl captureDeclFor(mlir::attn::CaptureAttr capture) {
  CaptureDecl decl;
  decl.name = capture.getName().str();
  decl.dtype = capture.getElementType().isF32() ? DType::F32 : DType::I32;
  decl.requiresGrad = capture.getRequiresGrad();
  for (auto [kind, size] : llvm::zip(capture.getDimKinds(), capture.getDimSizes())) {
    CaptureDim dim;
    switch (kind) {
    case mlir::attn::CaptureDimKind::fixed:
      dim.kind = CaptureDim::Kind::Fixed;
      dim.size = size;
      break;
    case mlir::attn::CaptureDimKind::any:
      dim.kind = CaptureDim::Kind::Any;
      break;
    case mlir::attn::CaptureDimKind::batch:
      dim.kind = CaptureDim::Kind::Batch;
      break;
    case mlir::attn::CaptureDimKind::q_heads:
      dim.kind = CaptureDim::Kind::QHeads;
      break;
    case mlir::attn::CaptureDimKind::kv_heads:
      dim.kind = CaptureDim::Kind::KvHeads;
      break;
    case mlir::attn::CaptureDimKind::seqlen_q:
      dim.kind = CaptureDim::Kind::SeqlenQ;
      break;
    case mlir::attn::CaptureDimKind::seqlen_k:
      dim.kind = CaptureDim::Kind::SeqlenK;
      break;
    }
    decl.dims.push_back(dim);
  }
  return decl;
}

/// The launch fields a plan fixes: the problem's, and those of a tile plan
/// and its shared-memory layout (the forward's or the backward's).
static AttnLaunchConfig launchOfPlan(mlir::attn::KernelOp op, mlir::attn::TilePlanAttr tile,
                                     mlir::attn::SmemPlanAttr smem) {
  mlir::attn::ProblemAttr problem = op.getProblem();
  AttnLaunchConfig launch;
  launch.headDim = problem.getHeadDim();
  launch.qHeads = problem.getQHeads();
  launch.kvHeads = problem.getKvHeads();
  launch.dtype = problem.getElementType().isBF16() ? DType::BF16 : DType::F16;
  launch.scale = static_cast<float>(problem.getEffectiveScale());
  launch.blockM = tile.getBlockM();
  launch.blockN = tile.getBlockN();
  launch.threadsPerBlock = tile.getThreadsPerBlock();
  launch.sharedMemoryBytes = smem.getLaunchBytes();
  launch.causal = mlir::isa<mlir::attn::CausalAttr>(op.getMask());
  return launch;
}

AttnLaunchConfig launchConfigFor(mlir::attn::KernelOp op) {
  mlir::attn::TilePlanAttr tile = op.getTileAttr();
  AttnLaunchConfig launch = launchOfPlan(op, tile, op.getSmemAttr());
  launch.persistentBlocksPerSm = tile.getPersistentBlocksPerSm();
  launch.evenWorkTiles = mlir::isa<mlir::attn::SoftmaxAttr>(op.getNormalizer()) &&
                         mlir::attn::getTileProblem(op).evenTiles;
  // The region, or once attn-lower-mods has outlined it, its function.
  launch.automaticWorkOrder = mlir::isa<mlir::attn::SoftmaxAttr>(op.getNormalizer()) &&
                              (!op.getMaskMod().empty() || op.getMaskModFnAttr());
  launch.pagedForward = mlir::isa<mlir::attn::SoftmaxAttr>(op.getNormalizer()) &&
                        op->hasAttr(mlir::attn::kPagedKvAttrName);
  if (op.getNormalizer().isLinearFamily()) {
    launch.kernelName = ATTN_LINEAR_KERNEL_NAME;
    // The plan's producer warpgroup is a single warp in this kernel.
    launch.threadsPerBlock = ATTN_LINEAR_THREADS(tile.getConsumerWarpgroups());
    launch.linearFamily = 1;
    auto linear = mlir::dyn_cast<mlir::attn::LinearAttr>(op.getNormalizer());
    launch.normalize = linear && linear.getNormalize();
    auto retention = mlir::dyn_cast<mlir::attn::RetentionAttr>(op.getNormalizer());
    launch.gated = retention && retention.getGated();
  }
  for (mlir::attn::CaptureAttr capture : op.getCaptureList())
    launch.captures.push_back(captureDeclFor(capture));
  if (std::optional<llvm::ArrayRef<int64_t>> table = op.getTunedKeySplits())
    for (size_t i = 0; i + 3 < table->size(); i += 4)
      launch.tunedKeySplits.push_back(
          {ShapeBucket{(*table)[i], (*table)[i + 1], (*table)[i + 2]}, int((*table)[i + 3])});
  return launch;
}

mlir::FailureOr<CompiledKernel> compileEmittedKernel(mlir::attn::KernelOp op,
                                                     const CompileOptions &options,
                                                     BinaryKind kind) {
  auto source = op->getAttrOfType<mlir::StringAttr>(mlir::attn::kCudaSourceAttrName);
  if (!source)
    return op.emitOpError("has no emitted CUDA source: run attn-emit-cuda first");
  backend::NvrtcResult result =
      backend::compileCuda(source.str(), op.getSymName().str() + ".cu", options.arch,
                           kind == BinaryKind::Ptx ? backend::NvrtcOutput::Ptx
                                                   : backend::NvrtcOutput::Cubin);
  if (!result.succeeded)
    return op.emitOpError("NVRTC failed to compile the emitted kernel:\n") << result.log;
  CompiledKernel kernel;
  kernel.name = op.getSymName().str();
  kernel.cudaSource = source.str();
  kernel.binary = std::move(result.binary);
  kernel.kind = kind;
  kernel.launch = launchConfigFor(op);
  return kernel;
}

mlir::FailureOr<TileConfig> backwardTileConfigFor(mlir::attn::KernelOp op,
                                                  const CompileOptions &options) {
  return mlir::attn::backwardTilePlan(op, options.tileOverride, options.tuningDatabase,
                                      options.tuningShape, options.arch);
}

/// The linear family's backward: the forward's plan (attn-tile and
/// attn-plan-smem as for the forward, under options.tileOverride), emitted
/// as the backward module around its chunkwise kernel.
static mlir::FailureOr<PlannedBackward> planLinearBackward(mlir::attn::KernelOp op,
                                                           const CompileOptions &options) {
  auto module = op->getParentOfType<mlir::ModuleOp>();
  mlir::PassManager pm(op.getContext());
  mlir::attn::buildPlanPipeline(pm, tileOptionsOf(options));
  if (mlir::failed(pm.run(module)))
    return mlir::failure();
  mlir::FailureOr<codegen::LinearKernelConfig> config = mlir::attn::buildLinearKernelConfig(op);
  if (mlir::failed(config))
    return mlir::failure();
  PlannedBackward planned;
  planned.tile = mlir::attn::getTileConfig(op.getTileAttr());
  planned.cudaSource = codegen::emitLinearBackwardKernelSource(*config);
  planned.launch = launchConfigFor(op);
  planned.launch.backward = 1;
  return planned;
}

mlir::FailureOr<PlannedBackward> planBackward(mlir::attn::KernelOp op,
                                              const CompileOptions &options) {
  if (op.getNormalizer().isLinearFamily())
    return planLinearBackward(op, options);
  // attn-tile (with the backward) and attn-plan-smem over the op's module.
  // The forward's plan as the forward plans it; options.tileOverride is
  // the backward's.
  mlir::attn::AttnTileOptions tileOptions = tileOptionsOf(options);
  tileOptions.tileOverride.clear();
  tileOptions.backward = true;
  tileOptions.backwardTileOverride = options.tileOverride;
  auto module = op->getParentOfType<mlir::ModuleOp>();
  mlir::PassManager pm(op.getContext());
  mlir::attn::buildBackwardPipeline(pm, tileOptions);
  if (mlir::failed(pm.run(module)))
    return mlir::failure();
  mlir::FailureOr<codegen::BackwardKernelConfig> config =
      mlir::attn::buildBackwardKernelConfig(op);
  if (mlir::failed(config))
    return mlir::failure();
  PlannedBackward planned;
  planned.tile = config->tile;
  planned.cudaSource = codegen::emitBackwardKernelSource(*config);
  planned.launch = launchOfPlan(op, op.getBackwardTileAttr(), op.getBackwardSmemAttr());
  planned.launch.kernelName = ATTN_BWD_KERNEL_NAME;
  planned.launch.stepList = codegen::backwardWalksStepList(*config);
  for (mlir::attn::CaptureAttr capture : op.getCaptureList())
    planned.launch.captures.push_back(captureDeclFor(capture));
  planned.launch.backward = 1;
  return planned;
}

mlir::FailureOr<CompiledKernel> compileBackwardKernel(mlir::attn::KernelOp op,
                                                      const CompileOptions &options,
                                                      BinaryKind kind) {
  mlir::FailureOr<PlannedBackward> planned = planBackward(op, options);
  if (mlir::failed(planned))
    return mlir::failure();
  CompiledKernel kernel;
  kernel.name = op.getSymName().str();
  kernel.cudaSource = std::move(planned->cudaSource);
  backend::NvrtcResult result =
      backend::compileCuda(kernel.cudaSource, kernel.name + ".cu", options.arch,
                           kind == BinaryKind::Ptx ? backend::NvrtcOutput::Ptx
                                                   : backend::NvrtcOutput::Cubin);
  if (!result.succeeded)
    return op.emitOpError("NVRTC failed to compile the emitted backward kernel:\n") << result.log;
  kernel.binary = std::move(result.binary);
  kernel.kind = kind;
  kernel.launch = planned->launch;
  return kernel;
}

namespace detail {

void prepareSpecContext(mlir::MLIRContext &context) {
  mlir::DialectRegistry registry;
  registerSpecDialects(registry);
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();
  context.printOpOnDiagnostic(false);
}

DiagnosticCapture::DiagnosticCapture(mlir::MLIRContext &context)
    : handler(manager, &context, stream),
      locationless(&context, [this](mlir::Diagnostic &diagnostic) {
        if (diagnostic.getLocation()->findInstanceOf<mlir::FileLineColLoc>())
          return mlir::failure(); // The SourceMgr handler's.
        auto render = [this](mlir::Diagnostic &item) {
          switch (item.getSeverity()) {
          case mlir::DiagnosticSeverity::Error:
            stream << "error: ";
            break;
          case mlir::DiagnosticSeverity::Warning:
            stream << "warning: ";
            break;
          case mlir::DiagnosticSeverity::Note:
            stream << "note: ";
            break;
          case mlir::DiagnosticSeverity::Remark:
            stream << "remark: ";
            break;
          }
          stream << item.str() << "\n";
        };
        render(diagnostic);
        for (mlir::Diagnostic &note : diagnostic.getNotes())
          render(note);
        return mlir::success();
      }) {}

void DiagnosticCapture::fail(const std::string &what) {
  stream.flush();
  throw Error(what + ":\n" + text);
}

mlir::OwningOpRef<mlir::ModuleOp> parseSpecModule(mlir::MLIRContext &context,
                                                  DiagnosticCapture &diagnostics,
                                                  const std::string &text,
                                                  const std::string &bufferName) {
  llvm::SourceMgr &manager = diagnostics.sourceMgr();
  manager.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(text, bufferName),
                             llvm::SMLoc());
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(manager, &context);
  if (!module)
    diagnostics.fail("could not parse the spec");
  return module;
}

mlir::attn::KernelOp singleKernel(mlir::ModuleOp module) {
  mlir::attn::KernelOp found;
  int count = 0;
  module->walk([&](mlir::attn::KernelOp op) {
    found = op;
    ++count;
  });
  if (count != 1)
    throw Error(fmt::format("the spec must hold exactly one attn.kernel, found {}", count));
  return found;
}

} // namespace detail

namespace {

// A private context holding one parsed spec, for the one-shot entry points.
struct ParsedSpec {
  mlir::MLIRContext context;
  detail::DiagnosticCapture diagnostics{context};
  mlir::OwningOpRef<mlir::ModuleOp> module;

  ParsedSpec(const std::string &text, const std::string &bufferName) {
    detail::prepareSpecContext(context);
    module = detail::parseSpecModule(context, diagnostics, text, bufferName);
  }
};

} // namespace

CompiledKernel compileSpec(const std::string &specText, const std::string &bufferName,
                           const CompileOptions &options, BinaryKind kind) {
  ParsedSpec spec(specText, bufferName);
  mlir::attn::KernelOp op = detail::singleKernel(*spec.module);
  if (mlir::failed(runCompilePipeline(*spec.module, options)))
    spec.diagnostics.fail("compiling " + bufferName + " failed");
  mlir::FailureOr<CompiledKernel> kernel = compileEmittedKernel(op, options, kind);
  if (mlir::failed(kernel))
    spec.diagnostics.fail("compiling " + bufferName + " failed");
  return std::move(*kernel);
}

CompiledKernel compileBackwardSpec(const std::string &specText, const std::string &bufferName,
                                   const CompileOptions &options, BinaryKind kind) {
  ParsedSpec spec(specText, bufferName);
  mlir::attn::KernelOp op = detail::singleKernel(*spec.module);
  mlir::FailureOr<CompiledKernel> kernel = compileBackwardKernel(op, options, kind);
  if (mlir::failed(kernel))
    spec.diagnostics.fail("compiling the backward of " + bufferName + " failed");
  return std::move(*kernel);
}

std::vector<std::string> emitCudaSources(const std::string &specText,
                                         const std::string &bufferName,
                                         const CompileOptions &options) {
  ParsedSpec spec(specText, bufferName);
  CompileOptions emitting = options;
  emitting.planOnly = false;
  if (mlir::failed(runCompilePipeline(*spec.module, emitting)))
    spec.diagnostics.fail("compiling " + bufferName + " failed");
  std::vector<std::string> sources;
  spec.module->walk([&](mlir::attn::KernelOp op) {
    if (auto source = op->getAttrOfType<mlir::StringAttr>(mlir::attn::kCudaSourceAttrName))
      sources.push_back(source.str());
  });
  return sources;
}

SpecTuningKey tuningKeyOfSpec(const std::string &specText, const std::string &bufferName) {
  ParsedSpec spec(specText, bufferName);
  mlir::attn::KernelOp op = detail::singleKernel(*spec.module);
  SpecTuningKey key;
  key.specHash = mlir::attn::tuningSpecHash(op);
  key.problem = mlir::attn::getTileProblem(op);
  key.heuristic = defaultTileConfig(key.problem);
  key.qHeads = op.getProblem().getQHeads();
  key.linearFamily = op.getNormalizer().isLinearFamily();
  return key;
}

reference::Problem referenceProblemFromKernel(mlir::attn::KernelOp op, int64_t batch,
                                              int64_t seqlenQ, int64_t seqlenK) {
  mlir::attn::ProblemAttr problem = op.getProblem();
  reference::Problem result;
  result.batch = batch;
  result.seqlenQ = seqlenQ;
  result.seqlenK = seqlenK;
  result.qHeads = problem.getQHeads();
  result.kvHeads = problem.getKvHeads();
  result.headDim = problem.getHeadDim();
  result.scale = problem.getEffectiveScale();
  auto alignmentOf = [](mlir::attn::MaskAlignment alignment) {
    return alignment == mlir::attn::MaskAlignment::bottom_right
               ? reference::MaskAlignment::BottomRight
               : reference::MaskAlignment::TopLeft;
  };
  mlir::Attribute mask = op.getMask();
  if (auto causal = mlir::dyn_cast<mlir::attn::CausalAttr>(mask)) {
    result.mask.kind = reference::MaskKind::Causal;
    result.mask.alignment = alignmentOf(causal.getAlignment());
  } else if (auto window = mlir::dyn_cast<mlir::attn::SlidingWindowAttr>(mask)) {
    result.mask.kind = reference::MaskKind::SlidingWindow;
    result.mask.alignment = alignmentOf(window.getAlign());
    result.mask.windowLeft = window.getLeft();
    result.mask.windowRight = window.getRight();
  } else if (!mlir::isa<mlir::attn::NoMaskAttr>(mask)) {
    throw Error("the reference evaluator does not know this mask yet");
  }
  return result;
}

reference::LinearProblem linearReferenceProblemFromSpec(const std::string &specText,
                                                        int64_t batch, int64_t seqlen,
                                                        const float *logDecay) {
  ParsedSpec spec(specText, "spec");
  mlir::attn::KernelOp op = detail::singleKernel(*spec.module);
  if (!op.getNormalizer().isLinearFamily())
    throw Error("the spec's normalizer is " + op.getNormalizer().getKindName().str() +
                ", not linear attention or retention");
  mlir::attn::ProblemAttr problemAttr = op.getProblem();
  reference::LinearProblem problem;
  problem.batch = batch;
  problem.seqlen = seqlen;
  problem.qHeads = problemAttr.getQHeads();
  problem.kvHeads = problemAttr.getKvHeads();
  problem.headDim = problemAttr.getHeadDim();
  problem.scale = problemAttr.getEffectiveScale();
  problem.causal = mlir::isa<mlir::attn::CausalAttr>(op.getMask());
  if (auto linear = mlir::dyn_cast<mlir::attn::LinearAttr>(op.getNormalizer())) {
    switch (linear.getFeatureMap()) {
    case mlir::attn::FeatureMapKind::identity:
      problem.featureMap = reference::FeatureMap::Identity;
      break;
    case mlir::attn::FeatureMapKind::relu:
      problem.featureMap = reference::FeatureMap::Relu;
      break;
    case mlir::attn::FeatureMapKind::elu_plus_one:
      problem.featureMap = reference::FeatureMap::EluPlusOne;
      break;
    }
    problem.normalize = linear.getNormalize();
  } else if (auto retention = mlir::dyn_cast<mlir::attn::RetentionAttr>(op.getNormalizer())) {
    if (retention.getGated()) {
      if (!logDecay)
        throw Error("logDecay: the spec is gated retention: pass the per-token log-decays");
      problem.logDecay = logDecay;
    } else {
      for (int64_t head = 0; head < problem.qHeads; ++head)
        problem.gamma.push_back(retention.getGamma(head));
    }
  }
  return problem;
}

reference::Problem referenceProblemFromSpec(const std::string &specText, int64_t batch,
                                            int64_t seqlenQ, int64_t seqlenK,
                                            const std::vector<HostCapture> &captures,
                                            std::shared_ptr<CaptureGradients> *captureGradients) {
  ParsedSpec spec(specText, "spec");
  mlir::attn::KernelOp op = detail::singleKernel(*spec.module);
  mlir::attn::ProblemAttr problemAttr = op.getProblem();

  // The captures must be what the spec declares, extents included: the
  // launch sizes are known here, and a mismatch is a bug of the caller.
  llvm::SmallVector<mlir::attn::CaptureAttr> declared = op.getCaptureList();
  if (captures.size() != declared.size()) {
    std::string names;
    for (mlir::attn::CaptureAttr capture : declared)
      names += (names.empty() ? "'" : ", '") + capture.getName().str() + "'";
    throw Error(fmt::format("the spec declares {} captures{}, got {}", declared.size(),
                            names.empty() ? std::string() : " (" + names + ")", captures.size()));
  }
  for (auto [capture, buffer] : llvm::zip(declared, captures)) {
    const std::string which = "capture '" + capture.getName().str() + "': ";
    const CaptureDecl decl = captureDeclFor(capture);
    if (buffer.dtype != decl.dtype)
      throw Error(which + "expected " + dtypeName(decl.dtype) + ", got " +
                  dtypeName(buffer.dtype));
    if (buffer.shape.size() != decl.dims.size())
      throw Error(fmt::format("{}expected rank {}, got {}", which, decl.dims.size(),
                              buffer.shape.size()));
    for (size_t dim = 0; dim < decl.dims.size(); ++dim) {
      const CaptureDim &declaredDim = decl.dims[dim];
      const int64_t expected =
          requiredCaptureExtent(declaredDim, batch, problemAttr.getQHeads(),
                                problemAttr.getKvHeads(), seqlenQ, seqlenK);
      const int64_t extent = buffer.shape[dim];
      if (extent >= 0 && (expected < 0 || extent == expected))
        continue;
      std::string wanted = "a size >= 0";
      if (expected >= 0)
        wanted = declaredDim.kind == CaptureDim::Kind::Fixed
                     ? fmt::format("{}", expected)
                     : fmt::format("{} = {}", captureDimSpelling(declaredDim), expected);
      throw Error(fmt::format("{}extent {} is {}, expected {}", which, dim, extent, wanted));
    }
  }

  // What maskMod and scoreMod evaluate: the region programs (they hold no
  // reference to the module) and private copies of the captures, shared by
  // the problem's copies.
  struct Mods {
    std::unique_ptr<ModInterpreter> mask, score, scoreVjp;
    std::vector<std::vector<uint32_t>> storage;
    std::vector<HostCapture> captures;
    // The learnable captures' gradients, which the vector-Jacobian product
    // adds into; their buffers follow the captures in its arguments.
    std::shared_ptr<CaptureGradients> gradients = std::make_shared<CaptureGradients>();
    std::vector<HostCapture> capturesAndGradients;
  };
  auto mods = std::make_shared<Mods>();
  mods->storage.reserve(captures.size());
  for (auto [capture, buffer] : llvm::zip(declared, captures)) {
    int64_t elements = 1;
    for (int64_t extent : buffer.shape)
      elements *= extent;
    if (elements > 0 && !buffer.data)
      throw Error("capture '" + capture.getName().str() + "': data is null");
    const uint32_t *data = static_cast<const uint32_t *>(buffer.data);
    std::vector<uint32_t> &copy = mods->storage.emplace_back();
    if (elements > 0)
      copy.assign(data, data + elements); // f32 and i32 elements are four bytes.
    mods->captures.push_back({copy.data(), buffer.dtype, buffer.shape});
  }
  try {
    if (!op.getMaskMod().empty())
      mods->mask = std::make_unique<ModInterpreter>(op.getMaskMod());
    if (!op.getScoreMod().empty()) {
      mods->score = std::make_unique<ModInterpreter>(op.getScoreMod());
      // The derivative the backward kernel evaluates (attn-differentiate-mods).
      // A score_mod without one still has a forward: its problem then has no
      // scoreModVjp, which reference::backward() refuses.
      mlir::PassManager pm(op.getContext());
      pm.addPass(mlir::attn::createAttnDifferentiateMods());
      bool differentiable = true;
      {
        mlir::ScopedDiagnosticHandler quiet(op.getContext(), [&](mlir::Diagnostic &) {
          differentiable = false;
          return mlir::success();
        });
        differentiable = mlir::succeeded(pm.run(*spec.module)) && differentiable;
      }
      if (differentiable)
        mods->scoreVjp = std::make_unique<ModInterpreter>(
            mlir::SymbolTable::lookupNearestSymbolFrom<mlir::func::FuncOp>(
                op, op.getBackwardScoreModVjpFnAttr())
                .getBody());
    }
  } catch (const std::invalid_argument &error) {
    throw Error(std::string("the reference evaluator cannot run a user region: ") +
                error.what());
  }

  mods->capturesAndGradients = mods->captures;
  for (auto [capture, buffer] : llvm::zip(declared, captures))
    if (capture.getRequiresGrad()) {
      int64_t elements = 1;
      for (int64_t extent : buffer.shape)
        elements *= extent;
      std::vector<float> &gradient =
          mods->gradients->emplace_back(static_cast<size_t>(std::max<int64_t>(elements, 0)));
      mods->capturesAndGradients.push_back({gradient.data(), DType::F32, buffer.shape});
    }
  if (captureGradients)
    *captureGradients = mods->gradients;

  reference::Problem result = referenceProblemFromKernel(op, batch, seqlenQ, seqlenK);
  if (mods->mask)
    result.maskMod = [mods](int64_t b, int64_t h, int64_t q, int64_t k) {
      return mods->mask->evaluateMask(b, h, q, k, mods->captures);
    };
  if (mods->score)
    result.scoreMod = [mods](double score, int64_t b, int64_t h, int64_t q, int64_t k) {
      // The GPU computes the region in f32 on the f32 score.
      return static_cast<double>(
          mods->score->evaluateScore(static_cast<float>(score), b, h, q, k, mods->captures));
    };
  if (mods->scoreVjp)
    result.scoreModVjp = [mods](double dy, double score, int64_t b, int64_t h, int64_t q,
                                int64_t k, bool accumulateCaptures) {
      std::vector<ModValue> scalars = {
          ModValue::f(static_cast<float>(dy)), ModValue::f(static_cast<float>(score)),
          ModValue::index(b), ModValue::index(h), ModValue::index(q), ModValue::index(k)};
      if (accumulateCaptures)
        return double(mods->scoreVjp->evaluate(scalars, mods->capturesAndGradients).f32);
      // Called from several threads at once: the additions go to this
      // thread's scratch copies of the gradients, which nobody reads.
      thread_local std::vector<std::vector<float>> scratch;
      std::vector<HostCapture> bindings = mods->captures;
      scratch.resize(mods->gradients->size());
      for (size_t i = 0; i < mods->gradients->size(); ++i) {
        const HostCapture &gradient = mods->capturesAndGradients[mods->captures.size() + i];
        scratch[i].resize((*mods->gradients)[i].size());
        bindings.push_back({scratch[i].data(), DType::F32, gradient.shape});
      }
      return double(mods->scoreVjp->evaluate(scalars, bindings).f32);
    };
  return result;
}

} // namespace attn
