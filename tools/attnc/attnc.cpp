//===- attnc.cpp - Compile an attention spec ------------------------------===//
//
//   attnc spec.mlir -o out.ptx [--emit=mlir|cuda|ptx|cubin|metadata]
//         [--arch=sm_90a] [--tile=block_n=64,stages=3] [--print-ir-after-all]
//         [--kernel=name] [--backward]
//   attnc cache stats|list|clear [--cache-dir=DIR]
//   attnc cache warm spec.mlir... [--cache-dir=DIR] [--arch=...] [--tile=...]
//
// The cache commands work on attn::Compiler's disk cache: the directory is
// --cache-dir, else ATTNC_CACHE_DIR, else $XDG_CACHE_HOME/attnc, else
// ~/.cache/attnc. `warm` compiles specs into it ahead of time, so that the
// host programs on a machine find their kernels there.
//
//===----------------------------------------------------------------------===//

#include "ToolVersion.h"
#include "attn/Backend/Nvrtc.h"
#include "attn/Compiler/Compiler.h"
#include "attn/Compiler/Jit.h"
#include "attn/Compiler/KernelConfig.h"
#include "attn/Transforms/Passes.h"
#include "attn/runtime/LaunchMetadata.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <ctime>
#include <map>

using namespace llvm;

namespace {
enum class EmitKind { Mlir, Cuda, Ptx, Cubin, Metadata };

cl::SubCommand cacheCommand(
    "cache",
    "Inspect, clear or fill the compiled-kernel cache\n"
    "    stats             the directory, its entries, their size and the size limit\n"
    "    list              one line per entry: key, size, last use, kernel name\n"
    "    clear             removes every entry\n"
    "    warm <spec>...    compiles each spec into the cache (as the JIT's first use would)\n"
    "  The limit is ATTNC_CACHE_MAX_BYTES (bytes, or with K, M, G: powers of 1024;\n"
    "  default 1G): past it, the least recently used entries are evicted");

cl::opt<std::string> inputFilename(cl::Positional, cl::desc("<spec.mlir>"), cl::init("-"));
cl::opt<std::string> outputFilename("o", cl::desc("Output file (default: stdout)"),
                                    cl::value_desc("file"), cl::init("-"));
cl::opt<EmitKind> emitKind(
    "emit", cl::desc("What to produce"), cl::init(EmitKind::Ptx),
    cl::values(clEnumValN(EmitKind::Mlir, "mlir", "the planned IR (tile and smem attributes)"),
               clEnumValN(EmitKind::Cuda, "cuda", "the CUDA C++ translation unit"),
               clEnumValN(EmitKind::Ptx, "ptx", "PTX for compute_90a (default)"),
               clEnumValN(EmitKind::Cubin, "cubin", "a cubin for sm_90a"),
               clEnumValN(EmitKind::Metadata, "metadata",
                          "the launch metadata that Kernel::fromFiles reads")));
// --arch and --tile change the kernel, so `cache warm` takes them too.
cl::opt<std::string> arch("arch", cl::desc("Target GPU architecture"), cl::init("sm_90a"),
                          cl::sub(cl::SubCommand::getTopLevel()), cl::sub(cacheCommand));
cl::opt<std::string> tileOverride(
    "tile", cl::desc("Override the tile heuristic, e.g. block_n=64,stages=3"),
    cl::value_desc("key=value,..."), cl::init(""), cl::sub(cl::SubCommand::getTopLevel()),
    cl::sub(cacheCommand));
cl::opt<bool>
    pagedKv("paged-kv",
            cl::desc("A softmax forward kernel that also reads paged KV caches (prefill chunks and "
                     "verification over pages; without it paged calls take the short-query path)"),
            cl::init(false), cl::sub(cl::SubCommand::getTopLevel()));
cl::opt<std::string> shape(
    "shape",
    cl::desc("The problem size the kernel is for: the tuning database's plan for the nearest "
             "shape (default: its largest tuned shape), else the heuristic's for its key "
             "length; --tile applies over that plan"),
    cl::value_desc("B,S or B,Sq,Sk"), cl::init(""), cl::sub(cl::SubCommand::getTopLevel()),
    cl::sub(cacheCommand));
cl::opt<std::string> tuningDatabase(
    "tuning-db",
    cl::desc("Tuning database written by attn-tune (default: ATTNC_TUNING_DB, else tuning.tsv "
             "in the kernel cache directory); 'none' uses the heuristic plans"),
    cl::value_desc("file"), cl::init(""), cl::sub(cl::SubCommand::getTopLevel()),
    cl::sub(cacheCommand));
cl::opt<bool> printIrAfterAll("print-ir-after-all", cl::desc("Print the IR after each pass"),
                              cl::init(false));
cl::opt<bool> backward("backward",
                       cl::desc("Emit the backward module (dQ, dK, dV) instead of the forward; "
                                "--tile then overrides the backward plan"),
                       cl::init(false));
cl::opt<std::string> kernelName("kernel",
                                cl::desc("The kernel to emit when the spec holds several"),
                                cl::init(""));

cl::list<std::string> cacheOperands(cl::Positional, cl::sub(cacheCommand),
                                    cl::desc("stats | list | clear | warm <spec.mlir>..."));
cl::opt<std::string> cacheDirectory(
    "cache-dir",
    cl::desc("The cache directory (default: ATTNC_CACHE_DIR, else $XDG_CACHE_HOME/attnc, "
             "else ~/.cache/attnc)"),
    cl::value_desc("dir"), cl::init(""), cl::sub(cacheCommand));

/// --tuning-db, its default, or empty for 'none'.
std::string tuningDatabasePath() {
  if (tuningDatabase == "none")
    return "";
  return tuningDatabase.empty() ? attn::TuningDatabase::defaultPath() : tuningDatabase.getValue();
}

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

/// The -o file, or null after reporting why it cannot be opened.
std::unique_ptr<ToolOutputFile> openOutput() {
  std::string errorMessage;
  std::unique_ptr<ToolOutputFile> output = mlir::openOutputFile(outputFilename, &errorMessage);
  if (!output)
    errs() << "attnc: " << errorMessage << "\n";
  return output;
}

/// --backward: the backward module of the selected kernel, planned by
/// attn-tile's backward option (its tuning records, under --tile) and
/// attn-plan-smem; --emit=mlir prints the module with those plans
/// (`backward_tile`, `backward_smem`).
int compileBackward(mlir::ModuleOp module, const attn::CompileOptions &options) {
  mlir::FailureOr<mlir::attn::KernelOp> kernel = selectKernel(module);
  if (mlir::failed(kernel))
    return 1;
  std::unique_ptr<ToolOutputFile> output = openOutput();
  if (!output)
    return 1;
  if (emitKind == EmitKind::Cuda || emitKind == EmitKind::Mlir ||
      emitKind == EmitKind::Metadata) {
    mlir::FailureOr<attn::PlannedBackward> planned = attn::planBackward(*kernel, options);
    if (mlir::failed(planned))
      return 1;
    if (emitKind == EmitKind::Cuda)
      output->os() << planned->cudaSource;
    else if (emitKind == EmitKind::Mlir)
      module.print(output->os());
    else
      output->os() << attn::serializeLaunchConfig(planned->launch);
  } else {
    mlir::FailureOr<attn::CompiledKernel> compiled = attn::compileBackwardKernel(
        *kernel, options, emitKind == EmitKind::Cubin ? attn::BinaryKind::Cubin
                                                      : attn::BinaryKind::Ptx);
    if (mlir::failed(compiled))
      return 1;
    output->os().write(compiled->binary.data(), compiled->binary.size());
  }
  output->keep();
  return 0;
}

int compile(mlir::MLIRContext &context, llvm::SourceMgr &sourceMgr) {
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::parseSourceFile<mlir::ModuleOp>(sourceMgr,
                                                                                    &context);
  if (!module)
    return 1;

  attn::CompileOptions options;
  options.arch = arch;
  options.tileOverride = tileOverride;
  options.tuningDatabase = tuningDatabasePath();
  options.tuningShape = shape;
  options.pagedKv = pagedKv;
  options.planOnly = emitKind == EmitKind::Mlir || emitKind == EmitKind::Metadata;
  options.printIrAfterEachPass = printIrAfterAll;
  if (backward)
    return compileBackward(*module, options);
  if (mlir::failed(attn::runCompilePipeline(*module, options)))
    return 1;

  std::unique_ptr<ToolOutputFile> output = openOutput();
  if (!output)
    return 1;

  if (emitKind == EmitKind::Mlir) {
    module->print(output->os());
    output->keep();
    return 0;
  }

  mlir::FailureOr<mlir::attn::KernelOp> kernel = selectKernel(*module);
  if (mlir::failed(kernel))
    return 1;
  if (emitKind == EmitKind::Metadata) {
    output->os() << attn::serializeLaunchConfig(attn::launchConfigFor(*kernel));
  } else if (emitKind == EmitKind::Cuda) {
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

//===----------------------------------------------------------------------===//
// attnc cache
//===----------------------------------------------------------------------===//

int cacheError(const Twine &message) {
  errs() << "attnc: error: " << message << "\n";
  return 1;
}

/// "831890 bytes" below a KiB, else "812.4 KiB (831890 bytes)".
std::string formatBytes(uint64_t bytes) {
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
  char text[64];
  if (bytes < 1024) {
    std::snprintf(text, sizeof(text), "%llu bytes", static_cast<unsigned long long>(bytes));
    return text;
  }
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  for (; value >= 1024 && unit < 3; ++unit)
    value /= 1024;
  std::snprintf(text, sizeof(text), "%.1f %s (%llu bytes)", value, units[unit],
                static_cast<unsigned long long>(bytes));
  return text;
}

std::string formatLocalTime(int64_t nanoseconds) {
  std::time_t seconds = static_cast<std::time_t>(nanoseconds / 1000000000);
  std::tm local{};
  ::localtime_r(&seconds, &local);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S", &local);
  return text;
}

/// The `key value` lines of an entry's "info" section (see Jit.cpp).
std::map<std::string, std::string> parseEntryInfo(StringRef info) {
  std::map<std::string, std::string> fields;
  SmallVector<StringRef> lines;
  info.split(lines, '\n', -1, /*KeepEmpty=*/false);
  for (StringRef line : lines) {
    auto [key, value] = line.split(' ');
    fields[key.str()] = value.str();
  }
  return fields;
}

/// DiskCache's warning about an unusable directory, reworded as the error it
/// is here: the reason stays, the remark about falling back to memory goes.
std::string unusableDirectoryError(const std::string &directory, StringRef warning) {
  if (warning.empty())
    return "cache directory '" + directory + "' is not usable";
  warning.consume_front("attnc: warning: ");
  warning.consume_back("; compiled kernels are cached in memory only");
  return warning.str();
}

int warmCache(attn::DiskCacheOptions options, ArrayRef<std::string> specFiles,
              const std::string &warning) {
  std::string directory = options.directory;
  attn::JitOptions jitOptions;
  jitOptions.arch = arch;
  jitOptions.tileOverride = tileOverride;
  jitOptions.tuningDatabase = tuningDatabasePath();
  jitOptions.diskCache = std::move(options);
  attn::Compiler compiler(std::move(jitOptions));
  if (!compiler.diskCache()->usable())
    return cacheError(unusableDirectoryError(directory, warning));

  attn::TuningShape tuningShape;
  if (!shape.empty())
    if (std::optional<std::string> error = attn::parseTuningShape(shape, tuningShape))
      return cacheError("--shape: " + *error);
  bool failed = false;
  for (const std::string &specFile : specFiles) {
    ErrorOr<std::unique_ptr<MemoryBuffer>> text = MemoryBuffer::getFile(specFile);
    if (!text) {
      cacheError("cannot read '" + specFile + "': " + text.getError().message());
      failed = true;
      continue;
    }
    attn::JitStats before = compiler.stats();
    try {
      attn::Kernel kernel = shape.empty()
                                ? compiler.compile((*text)->getBuffer(), specFile)
                                : compiler.compile((*text)->getBuffer(), specFile, tuningShape);
      bool compiled = compiler.stats().compiles != before.compiles;
      outs() << specFile << ": @" << kernel.name() << " "
             << (compiled ? "compiled into the cache" : "already in the cache") << "\n";
    } catch (const attn::Error &error) {
      cacheError(error.what());
      failed = true;
    }
  }
  outs() << "cache directory: " << directory << "\n";
  return failed ? 1 : 0;
}

int printCacheStats(attn::DiskCache &cache, bool exists) {
  // DiskCache::stats() would create the directory.
  attn::DiskCacheStats stats = exists ? cache.stats() : attn::DiskCacheStats();
  outs() << "directory: " << cache.directory() << (exists ? "" : " (not created yet)") << "\n"
         << "entries:   " << stats.entries << "\n"
         << "size:      " << formatBytes(stats.bytes) << "\n"
         << "limit:     " << formatBytes(cache.maxBytes()) << "\n";
  return 0;
}

int printCacheList(attn::DiskCache &cache, bool exists) {
  std::vector<attn::CacheEntryInfo> entries;
  if (exists)
    entries = cache.list();
  if (entries.empty()) {
    outs() << "no entries in " << cache.directory() << "\n";
    return 0;
  }
  // Keys are SHA-256 digests: 64 hex digits.
  outs() << format("%-64s  %-24s  %-19s  %s\n", "key", "size", "last used", "kernel");
  uint64_t total = 0;
  for (const attn::CacheEntryInfo &entry : entries) {
    std::map<std::string, std::string> info = parseEntryInfo(entry.info);
    std::string kernel = info.count("name") ? "@" + info["name"] : "?";
    for (const char *field : {"arch", "attnc", "nvrtc", "driver"})
      if (info.count(field))
        kernel += std::string(" ") + field + " " + info[field];
    outs() << format("%-64s  %-24s  %-19s  %s\n", entry.key.c_str(),
                     formatBytes(entry.bytes).c_str(), formatLocalTime(entry.lastUseNs).c_str(),
                     kernel.c_str());
    total += entry.bytes;
  }
  outs() << entries.size() << (entries.size() == 1 ? " entry, " : " entries, ")
         << formatBytes(total) << " in " << cache.directory() << "\n";
  return 0;
}

int runCacheCommand() {
  if (cacheOperands.empty())
    return cacheError("give a cache command: stats, list, clear or warm <spec.mlir>...");
  const std::string &action = cacheOperands.front();
  ArrayRef<std::string> operands = ArrayRef<std::string>(cacheOperands).drop_front();
  if (action != "stats" && action != "list" && action != "clear" && action != "warm")
    return cacheError("unknown cache command '" + action +
                      "'; expected stats, list, clear or warm");
  if (action == "warm" && operands.empty())
    return cacheError("'attnc cache warm' needs at least one spec file");
  if (action != "warm" && !operands.empty())
    return cacheError("'attnc cache " + action + "' takes no operands, got '" +
                      operands.front() + "'");

  attn::DiskCacheOptions options;
  try {
    options = attn::DiskCacheOptions::fromEnvironment();
  } catch (const attn::Error &error) {
    return cacheError(error.what());
  }
  if (!cacheDirectory.empty())
    options.directory = cacheDirectory;
  if (options.directory.empty())
    return cacheError("no cache directory: ATTNC_CACHE_DIR, XDG_CACHE_HOME and HOME are "
                      "unset; give --cache-dir");
  std::string warning;
  options.warn = [&warning](const std::string &message) { warning = message; };

  if (action == "warm")
    return warmCache(std::move(options), operands, warning);

  // Looking at a cache that was never written must not create its directory.
  struct stat status;
  bool exists = ::stat(options.directory.c_str(), &status) == 0 || errno != ENOENT;
  attn::DiskCache cache(std::move(options));
  if (exists && !cache.usable())
    return cacheError(unusableDirectoryError(cache.directory(), warning));
  if (action == "stats")
    return printCacheStats(cache, exists);
  if (action == "list")
    return printCacheList(cache, exists);
  uint64_t removed = exists ? cache.clear() : 0;
  outs() << "removed " << removed << (removed == 1 ? " entry" : " entries") << " from "
         << cache.directory() << "\n";
  return 0;
}
} // namespace

int main(int argc, char **argv) {
  InitLLVM initLLVM(argc, argv);
  attn::installToolVersionPrinter();
  cl::ParseCommandLineOptions(argc, argv,
                              "attnc: compile an attn spec to a Hopper (sm_90a) kernel\n");

  if (!attn::backend::isSupportedArch(arch)) {
    errs() << "attnc: error: unsupported --arch=" << arch
           << "; the kernel templates target sm_90a\n";
    return 1;
  }
  if (cacheCommand)
    return runCacheCommand();

  mlir::DialectRegistry registry;
  attn::registerSpecDialects(registry);
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  // Diagnostics point at the spec; a dump of the op in generic form would
  // only repeat it less readably.
  context.printOpOnDiagnostic(false);

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
