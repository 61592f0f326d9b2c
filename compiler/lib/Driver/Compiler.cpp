//===- Compiler.cpp - attnc's compile driver ------------------------------===//

#include "attn/Compiler/Compiler.h"

#include "attn/Backend/Nvrtc.h"
#include "attn/Compiler/KernelConfig.h"
#include "attn/IR/AttnDialect.h"
#include "attn/Transforms/Passes.h"
#include "attn/runtime/Error.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

namespace attn {

void registerSpecDialects(mlir::DialectRegistry &registry) {
  registry.insert<mlir::attn::AttnDialect, mlir::arith::ArithDialect, mlir::math::MathDialect,
                  mlir::func::FuncDialect>();
}

void buildCompilePipeline(mlir::OpPassManager &pm, const CompileOptions &options) {
  mlir::attn::buildPlanPipeline(pm, options.tileOverride);
  if (!options.planOnly)
    pm.addPass(mlir::attn::createAttnEmitCuda());
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
  buildCompilePipeline(pm, options);
  return pm.run(module);
}

AttnLaunchConfig launchConfigFor(mlir::attn::KernelOp op) {
  mlir::attn::ProblemAttr problem = op.getProblem();
  mlir::attn::TilePlanAttr tile = op.getTileAttr();
  AttnLaunchConfig launch;
  launch.headDim = problem.getHeadDim();
  launch.qHeads = problem.getQHeads();
  launch.kvHeads = problem.getKvHeads();
  launch.dtype = problem.getElementType().isBF16() ? DType::BF16 : DType::F16;
  launch.scale = static_cast<float>(problem.getEffectiveScale());
  launch.blockM = tile.getBlockM();
  launch.blockN = tile.getBlockN();
  launch.threadsPerBlock = tile.getThreadsPerBlock();
  launch.sharedMemoryBytes = op.getSmemAttr().getLaunchBytes();
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

namespace {

// A context, a parsed module and a handler that renders diagnostics into a
// string, for the host entry points that report failures as attn::Error.
struct ParsedSpec {
  mlir::MLIRContext context;
  llvm::SourceMgr sourceMgr;
  std::string diagnostics;
  llvm::raw_string_ostream diagnosticStream{diagnostics};
  std::unique_ptr<mlir::SourceMgrDiagnosticHandler> handler;
  mlir::OwningOpRef<mlir::ModuleOp> module;

  ParsedSpec(const std::string &text, const std::string &bufferName) {
    mlir::DialectRegistry registry;
    registerSpecDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
    context.printOpOnDiagnostic(false);
    sourceMgr.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(text, bufferName),
                                 llvm::SMLoc());
    handler = std::make_unique<mlir::SourceMgrDiagnosticHandler>(sourceMgr, &context,
                                                                 diagnosticStream);
    module = mlir::parseSourceFile<mlir::ModuleOp>(sourceMgr, &context);
    if (!module)
      fail("could not parse the spec");
  }

  [[noreturn]] void fail(const std::string &what) {
    diagnosticStream.flush();
    throw Error(what + ":\n" + diagnostics);
  }

  mlir::attn::KernelOp singleKernel() {
    mlir::attn::KernelOp found;
    int count = 0;
    module->walk([&](mlir::attn::KernelOp op) {
      found = op;
      ++count;
    });
    if (count != 1)
      throw Error("the spec must hold exactly one attn.kernel, found " + std::to_string(count));
    return found;
  }
};

} // namespace

CompiledKernel compileSpec(const std::string &specText, const std::string &bufferName,
                           const CompileOptions &options) {
  ParsedSpec spec(specText, bufferName);
  mlir::attn::KernelOp op = spec.singleKernel();
  if (mlir::failed(runCompilePipeline(*spec.module, options)))
    spec.fail("compiling " + bufferName + " failed");
  mlir::FailureOr<CompiledKernel> kernel = compileEmittedKernel(op, options, BinaryKind::Ptx);
  if (mlir::failed(kernel))
    spec.fail("compiling " + bufferName + " failed");
  return std::move(*kernel);
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
  if (!op.getMaskMod().empty() || !op.getScoreMod().empty())
    throw Error("the reference evaluator does not interpret user regions yet");
  return result;
}

reference::Problem referenceProblemFromSpec(const std::string &specText, int64_t batch,
                                            int64_t seqlenQ, int64_t seqlenK) {
  ParsedSpec spec(specText, "spec");
  return referenceProblemFromKernel(spec.singleKernel(), batch, seqlenQ, seqlenK);
}

} // namespace attn
