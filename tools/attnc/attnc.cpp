//===- attnc.cpp - Compile an attention spec ------------------------------===//
//
//   attnc spec.mlir -o out.ptx [--emit=mlir|cuda|ptx|cubin] [--arch=sm_90a]
//         [--tile=block_n=64,stages=3] [--print-ir-after-all] [--kernel=name]
//
//===----------------------------------------------------------------------===//

#include "attn/Backend/Nvrtc.h"
#include "attn/Compiler/Compiler.h"
#include "attn/Compiler/KernelConfig.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace llvm;

namespace {
enum class EmitKind { Mlir, Cuda, Ptx, Cubin };

cl::opt<std::string> inputFilename(cl::Positional, cl::desc("<spec.mlir>"), cl::init("-"));
cl::opt<std::string> outputFilename("o", cl::desc("Output file (default: stdout)"),
                                    cl::value_desc("file"), cl::init("-"));
cl::opt<EmitKind> emitKind(
    "emit", cl::desc("What to produce"), cl::init(EmitKind::Ptx),
    cl::values(clEnumValN(EmitKind::Mlir, "mlir", "the planned IR (tile and smem attributes)"),
               clEnumValN(EmitKind::Cuda, "cuda", "the CUDA C++ translation unit"),
               clEnumValN(EmitKind::Ptx, "ptx", "PTX for compute_90a (default)"),
               clEnumValN(EmitKind::Cubin, "cubin", "a cubin for sm_90a")));
cl::opt<std::string> arch("arch", cl::desc("Target GPU architecture"), cl::init("sm_90a"));
cl::opt<std::string> tileOverride(
    "tile", cl::desc("Override the tile heuristic, e.g. block_n=64,stages=3"),
    cl::value_desc("key=value,..."), cl::init(""));
cl::opt<bool> printIrAfterAll("print-ir-after-all", cl::desc("Print the IR after each pass"),
                              cl::init(false));
cl::opt<std::string> kernelName("kernel",
                                cl::desc("The kernel to emit when the spec holds several"),
                                cl::init(""));

mlir::FailureOr<mlir::attn::KernelOp> selectKernel(mlir::ModuleOp module) {
  SmallVector<mlir::attn::KernelOp> kernels;
  module.walk([&](mlir::attn::KernelOp op) {
    if (kernelName.empty() || op.getSymName() == kernelName)
      kernels.push_back(op);
  });
  if (kernels.size() == 1)
    return kernels.front();
  if (kernels.empty())
    return mlir::emitError(module.getLoc())
           << (kernelName.empty() ? "the spec holds no attn.kernel"
                                  : "no attn.kernel named @" + kernelName);
  return mlir::emitError(module.getLoc())
         << "the spec holds " << kernels.size() << " kernels; choose one with --kernel=<name>";
}

int compile(mlir::MLIRContext &context, llvm::SourceMgr &sourceMgr) {
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::parseSourceFile<mlir::ModuleOp>(sourceMgr,
                                                                                    &context);
  if (!module)
    return 1;

  attn::CompileOptions options;
  options.arch = arch;
  options.tileOverride = tileOverride;
  options.planOnly = emitKind == EmitKind::Mlir;
  options.printIrAfterEachPass = printIrAfterAll;
  if (mlir::failed(attn::runCompilePipeline(*module, options)))
    return 1;

  std::string errorMessage;
  std::unique_ptr<ToolOutputFile> output = mlir::openOutputFile(outputFilename, &errorMessage);
  if (!output) {
    errs() << "attnc: " << errorMessage << "\n";
    return 1;
  }

  if (emitKind == EmitKind::Mlir) {
    module->print(output->os());
    output->keep();
    return 0;
  }

  mlir::FailureOr<mlir::attn::KernelOp> kernel = selectKernel(*module);
  if (mlir::failed(kernel))
    return 1;
  if (emitKind == EmitKind::Cuda) {
    output->os() << (*kernel)->getAttrOfType<mlir::StringAttr>(mlir::attn::kCudaSourceAttrName)
                        .getValue();
  } else {
    mlir::FailureOr<attn::CompiledKernel> compiled = attn::compileEmittedKernel(
        *kernel, options, emitKind == EmitKind::Ptx ? attn::BinaryKind::Ptx
                                                    : attn::BinaryKind::Cubin);
    if (mlir::failed(compiled))
      return 1;
    output->os().write(compiled->binary.data(), compiled->binary.size());
  }
  output->keep();
  return 0;
}
} // namespace

int main(int argc, char **argv) {
  InitLLVM initLLVM(argc, argv);
  cl::ParseCommandLineOptions(argc, argv,
                              "attnc: compile an attn spec to a Hopper (sm_90a) kernel\n");

  mlir::DialectRegistry registry;
  attn::registerSpecDialects(registry);
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  // Diagnostics point at the spec; a dump of the op in generic form would
  // only repeat it less readably.
  context.printOpOnDiagnostic(false);

  if (!attn::backend::isSupportedArch(arch)) {
    errs() << "attnc: error: unsupported --arch=" << arch
           << "; the kernel templates target sm_90a\n";
    return 1;
  }

  std::string errorMessage;
  std::unique_ptr<MemoryBuffer> input = mlir::openInputFile(inputFilename, &errorMessage);
  if (!input) {
    errs() << "attnc: " << errorMessage << "\n";
    return 1;
  }
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(std::move(input), SMLoc());
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context);
  return compile(context, sourceMgr);
}
