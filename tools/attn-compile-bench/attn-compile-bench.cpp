//===- attn-compile-bench.cpp - What a host program waits for its kernel --===//
//
//   attn-compile-bench [spec.mlir] [--repeats=N] [--memory-repeats=N]
//
// Times attn::Compiler on the causal head-dim-128 kernel of
// docs/examples/causal_hd128.mlir (built with SpecBuilder, or read from the
// spec file given):
//   cold compile    a new Compiler on a new, empty cache directory, then
//                   compile(): planning, CUDA emission, NVRTC, the cache store;
//   disk-cache hit  a new Compiler on that directory (as in a new process),
//                   then compile(): planning again, the key, the entry read;
//   memory hit      compile() again on the same Compiler;
//   module load     Kernel::load() of a kernel not yet loaded (GPU only).
// Each is repeated and the median reported beside the targets.
//
//===----------------------------------------------------------------------===//

#include "ToolVersion.h"
#include "AttnHarness.h"
#include "attn/Backend/Nvrtc.h"
#include "attn/Compiler/Jit.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"

#include <stdlib.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

using namespace llvm;

namespace {
cl::opt<std::string> specFile(cl::Positional,
                              cl::desc("[spec.mlir] (default: the builder's causal_hd128)"),
                              cl::init(""));
cl::opt<int> repeats("repeats", cl::desc("Cold compiles, disk hits and module loads to time"),
                     cl::init(5));
cl::opt<int> memoryRepeats("memory-repeats", cl::desc("Memory-cache hits to time"), cl::init(1000));

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// "1.42 s", "3.10 ms" or "1.2 us".
std::string formatSeconds(double seconds) {
  char text[32];
  if (seconds >= 1)
    std::snprintf(text, sizeof(text), "%.2f s", seconds);
  else if (seconds >= 1e-3)
    std::snprintf(text, sizeof(text), "%.2f ms", seconds * 1e3);
  else
    std::snprintf(text, sizeof(text), "%.1f us", seconds * 1e6);
  return text;
}

struct Timings {
  std::vector<double> seconds;

  double median() const {
    std::vector<double> sorted = seconds;
    std::sort(sorted.begin(), sorted.end());
    size_t middle = sorted.size() / 2;
    return sorted.size() % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
  }
  double min() const { return *std::min_element(seconds.begin(), seconds.end()); }
  double max() const { return *std::max_element(seconds.begin(), seconds.end()); }
};

void printRow(const char *what, const Timings &timings, std::optional<double> targetSeconds) {
  std::string target = "", verdict = "";
  if (targetSeconds) {
    target = "<= " + formatSeconds(*targetSeconds);
    verdict = timings.median() <= *targetSeconds ? "met" : "MISSED";
  }
  std::printf("| %-24s | %10s | %10s | %10s | %6zu | %-10s | %-6s |\n", what,
              formatSeconds(timings.median()).c_str(), formatSeconds(timings.min()).c_str(),
              formatSeconds(timings.max()).c_str(), timings.seconds.size(), target.c_str(),
              verdict.c_str());
}

/// A new directory under the system's temporary directory, removed with
/// its contents at the end of the scope.
struct ScratchDirectory {
  std::string path;
  ScratchDirectory() {
    path = (std::filesystem::temp_directory_path() / "attn-compile-bench-XXXXXX").string();
    if (!::mkdtemp(path.data()))
      throw attn::Error("cannot create a directory like " + path);
  }
  ~ScratchDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

attn::JitOptions cacheIn(const std::string &directory) {
  attn::DiskCacheOptions disk;
  disk.directory = directory;
  attn::JitOptions options;
  options.diskCache = disk;
  return options;
}

void require(bool condition, const std::string &what) {
  if (!condition)
    throw attn::Error("unexpected cache behaviour: " + what);
}

int runBench(const std::function<attn::Kernel(attn::Compiler &)> &compileOnce,
             const std::string &what) {
  ScratchDirectory scratch;
  Timings cold, construct, disk, memory, load;
  std::string lastCacheDir;
  for (int i = 0; i < repeats; ++i) {
    // Not there yet: the Compiler creates it, as on a machine's first run.
    lastCacheDir = fmt::format("{}/cold-{}", scratch.path, i);
    Clock::time_point start = Clock::now();
    attn::Compiler compiler(cacheIn(lastCacheDir));
    construct.seconds.push_back(secondsSince(start));
    compileOnce(compiler);
    cold.seconds.push_back(secondsSince(start));
    require(compiler.stats().compiles == 1, "a cold compile did not run NVRTC");
  }

  std::vector<attn::Kernel> unloaded;
  for (int i = 0; i < repeats; ++i) {
    Clock::time_point start = Clock::now();
    attn::Compiler compiler(cacheIn(lastCacheDir));
    unloaded.push_back(compileOnce(compiler));
    disk.seconds.push_back(secondsSince(start));
    require(compiler.stats().diskHits == 1, "a new Compiler missed the disk cache");
  }

  attn::Compiler warm(cacheIn(lastCacheDir));
  compileOnce(warm);
  for (int i = 0; i < memoryRepeats; ++i) {
    Clock::time_point start = Clock::now();
    compileOnce(warm);
    memory.seconds.push_back(secondsSince(start));
  }
  require(warm.stats().memoryHits == uint64_t(memoryRepeats), "a memory lookup missed");

  std::string noGpu = attn::harness::gpuUnavailableReason();
  if (noGpu.empty()) {
    attn::ensureContext(); // Context creation is not the module's cost.
    for (const attn::Kernel &kernel : unloaded) {
      Clock::time_point start = Clock::now();
      kernel.load();
      load.seconds.push_back(secondsSince(start));
    }
  }

  std::printf("attn-compile-bench: %s, %s, NVRTC %s, attnc %s\n\n", what.c_str(), "sm_90a",
              attn::backend::nvrtcVersionString().c_str(), attn::attncVersion());
  std::printf("| %-24s | %10s | %10s | %10s | %6s | %-10s | %-6s |\n", "step", "median", "min",
              "max", "runs", "target", "");
  std::printf("|%s|%s|%s|%s|%s|%s|%s|\n", std::string(26, '-').c_str(),
              std::string(12, '-').c_str(), std::string(12, '-').c_str(),
              std::string(12, '-').c_str(), std::string(8, '-').c_str(),
              std::string(12, '-').c_str(), std::string(8, '-').c_str());
  printRow("cold compile", cold, 3.0);
  printRow("  of which new Compiler", construct, std::nullopt);
  printRow("disk-cache hit", disk, 5e-3);
  printRow("memory-cache hit", memory, 20e-6);
  if (noGpu.empty())
    printRow("module load", load, std::nullopt);
  else
    std::printf("\nmodule load: not measured (%s)\n", noGpu.c_str());
  return 0;
}
} // namespace

int main(int argc, char **argv) {
  InitLLVM initLLVM(argc, argv);
  attn::installToolVersionPrinter();
  cl::ParseCommandLineOptions(argc, argv,
                              "attn-compile-bench: time attn::Compiler's cold compile, disk "
                              "and memory cache hits\n");
  if (repeats < 1 || memoryRepeats < 1) {
    errs() << "attn-compile-bench: --repeats and --memory-repeats must be positive\n";
    return 1;
  }
  try {
    if (specFile.empty()) {
      attn::Spec spec = attn::SpecBuilder("causal_hd128")
                            .heads(16, 4)
                            .headDim(128)
                            .dtype(attn::DType::BF16)
                            .causal(attn::CausalAlign::BottomRight);
      return runBench([&](attn::Compiler &compiler) { return compiler.compile(spec); },
                      "@causal_hd128 from SpecBuilder");
    }
    auto buffer = MemoryBuffer::getFile(specFile);
    if (!buffer) {
      errs() << "attn-compile-bench: cannot read " << specFile << ": "
             << buffer.getError().message() << "\n";
      return 1;
    }
    std::string text = (*buffer)->getBuffer().str();
    return runBench(
        [&](attn::Compiler &compiler) { return compiler.compile(text, specFile.getValue()); },
        specFile.getValue());
  } catch (const attn::Error &error) {
    errs() << "attn-compile-bench: " << error.what() << "\n";
    return 1;
  }
}
