// The host API without a GPU: SpecBuilder against the shipped example specs,
// attn::Compiler's memory and disk caches (hit, miss, corruption, unusable
// directory, threads and processes asking for one kernel at once), and the
// checks Kernel makes before it needs a device.

#include "attn/Compiler/Compiler.h"
#include "attn/Compiler/Jit.h"
#include "attn/runtime/Hash.h"
#include "attn/runtime/LaunchMetadata.h"

#include "SpecTestSupport.h"
#include "TestSupport.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <catch2/catch.hpp>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <set>
#include <thread>

extern char **environ;

using namespace attn;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using test::readFile;
using test::TempDir;
using test::writeFile;

namespace {

JitOptions optionsWithCache(const std::string &directory,
                            std::vector<std::string> *warnings = nullptr) {
  DiskCacheOptions disk;
  disk.directory = directory;
  disk.warn = [warnings](const std::string &message) {
    if (!warnings)
      FAIL("unexpected warning: " << message);
    warnings->push_back(message);
  };
  JitOptions options;
  options.diskCache = disk;
  return options;
}

Spec causalSpec() {
  return SpecBuilder("causal_hd128").heads(16, 4).headDim(128).dtype(DType::BF16).causal();
}

std::string exampleText(const std::string &name) {
  return readFile(std::string(ATTNC_DOCS_EXAMPLES_DIR) + "/" + name + ".mlir");
}

/// The spec's kernel op as a separate parser and printer see it.
std::string parseAndPrint(const std::string &text) {
  test::SpecContext spec;
  mlir::OwningOpRef<mlir::ModuleOp> module = spec.parse(text);
  std::string printed;
  llvm::raw_string_ostream stream(printed);
  module->getBody()->front().print(stream);
  stream << "\n";
  return stream.str();
}

bool sameLaunch(const AttnLaunchConfig &a, const AttnLaunchConfig &b) {
  return serializeLaunchConfig(a) == serializeLaunchConfig(b);
}

/// Runs this test binary's hidden helper case in `count` processes started
/// together; returns their exit codes.
std::vector<int> runHelpers(int count, const std::string &cacheDir,
                            const std::vector<std::string> &resultPaths) {
  char self[4096];
  ssize_t length = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  REQUIRE(length > 0);
  self[length] = '\0';
  std::vector<pid_t> children;
  for (int i = 0; i < count; ++i) {
    std::vector<std::string> env;
    for (char **entry = environ; *entry; ++entry)
      env.push_back(*entry);
    env.push_back("ATTN_TEST_HELPER_CACHE=" + cacheDir);
    env.push_back("ATTN_TEST_HELPER_RESULT=" + resultPaths[i]);
    std::vector<char *> envp;
    for (std::string &entry : env)
      envp.push_back(entry.data());
    envp.push_back(nullptr);
    std::string tag = "[.jit-helper]";
    char *argv[] = {self, tag.data(), nullptr};
    pid_t pid;
    REQUIRE(::posix_spawn(&pid, self, nullptr, nullptr, argv, envp.data()) == 0);
    children.push_back(pid);
  }
  return test::waitForExitCodes(children);
}

} // namespace

//===----------------------------------------------------------------------===//
// SpecBuilder
//===----------------------------------------------------------------------===//

TEST_CASE("the builder builds the shipped example specs exactly", "[jit][builder]") {
  Compiler compiler(optionsWithCache(""));
  CHECK(compiler.printSpec(causalSpec()) == parseAndPrint(exampleText("causal_hd128")));
  CHECK(compiler.printSpec(SpecBuilder("full_hd64_f16")
                               .heads(32)
                               .headDim(64)
                               .dtype(DType::F16)
                               .scale(0.125)
                               .mask(Mask::none())) == parseAndPrint(exampleText("full_hd64_f16")));
  CHECK(compiler.printSpec(SpecBuilder("mqa_hd256").heads(8, 1).headDim(256).causal(
            CausalAlign::TopLeft)) == parseAndPrint(exampleText("mqa_hd256")));
  CHECK(compiler.printSpec(SpecBuilder("sliding_window_hd128")
                               .heads(16, 16)
                               .headDim(128)
                               .slidingWindow(1023, 0)) ==
        parseAndPrint(exampleText("sliding_window_hd128")));
  // The linear family.
  CHECK(compiler.printSpec(SpecBuilder("linear_elu_hd64")
                               .heads(32, 8)
                               .headDim(64)
                               .causal(CausalAlign::TopLeft)
                               .normalizer(Normalizer::linear(FeatureMap::EluPlusOne, true))) ==
        parseAndPrint(exampleText("linear_elu_hd64")));
  CHECK(compiler.printSpec(SpecBuilder("retention_hd128")
                               .heads(16)
                               .headDim(128)
                               .causal(CausalAlign::TopLeft)
                               .normalizer(Normalizer::retention())) ==
        parseAndPrint(exampleText("retention_hd128")));
  CHECK(compiler.printSpec(SpecBuilder("gated_retention_hd128")
                               .heads(16)
                               .headDim(128)
                               .causal(CausalAlign::TopLeft)
                               .normalizer(Normalizer::gatedRetention())) ==
        parseAndPrint(exampleText("gated_retention_hd128")));
  CHECK_THAT(compiler.printSpec(SpecBuilder("listed")
                                    .heads(2)
                                    .headDim(64)
                                    .causal()
                                    .normalizer(Normalizer::retention({0.5, 0.75}))),
             Contains("normalizer = #attn.retention<decay = [0.5, 0.75]>"));
}

TEST_CASE("builder errors name what is missing", "[jit][builder]") {
  CHECK_THROWS_WITH(SpecBuilder("k").headDim(128).build(),
                    StartsWith("SpecBuilder(\"k\"): ") && Contains("heads(q, kv) was not called"));
  CHECK_THROWS_WITH(SpecBuilder("k").heads(8).build(), Contains("headDim(d) was not called"));
  CHECK_THROWS_WITH(SpecBuilder("two words").heads(8).headDim(64).build(),
                    Contains("'two words'") && Contains("identifier"));
  Spec direct;
  direct.name = "x\n#include <evil>";
  Compiler compiler(optionsWithCache(""));
  CHECK_THROWS_WITH(compiler.compile(direct), Contains("identifier"));
}

TEST_CASE("invalid spec values are reported by the dialect's verifier", "[jit][builder]") {
  Compiler compiler(optionsWithCache(""));
  auto expectInvalid = [&](const Spec &spec, const std::string &detail) {
    CHECK_THROWS_WITH(compiler.compile(spec),
                      StartsWith("spec @k is invalid:\nerror: ") && Contains(detail));
    CHECK_THROWS_WITH(compiler.printSpec(spec), Contains(detail));
  };
  expectInvalid(SpecBuilder("k").heads(16, 3).headDim(128),
                "kv_heads (3) must divide q_heads (16)");
  expectInvalid(SpecBuilder("k").heads(16, 4).headDim(96), "unsupported head_dim 96");
  expectInvalid(SpecBuilder("k").heads(16, 4).headDim(128).dtype(DType::F32),
                "unsupported element_type 'f32'");
  expectInvalid(SpecBuilder("k").heads(4).headDim(64).slidingWindow(-1, 0),
                "left extent must be >= 0");
  expectInvalid(SpecBuilder("k").heads(4).headDim(64).scale(-0.5), "scale must be positive");
  expectInvalid(SpecBuilder("k").heads(2).headDim(64).causal().normalizer(
                    Normalizer::retention({0.5, 1.5})),
                "retention decay 1.5 must be in (0, 1]");
  expectInvalid(SpecBuilder("k").heads(2).headDim(64).normalizer(Normalizer::retention()),
                "retention is causal: it needs #attn.causal, got #attn.no_mask");
  expectInvalid(SpecBuilder("k").heads(2).headDim(256).causal().normalizer(Normalizer::linear()),
                "normalizer 'linear' supports head_dim 64 or 128, got 256");
  CHECK(compiler.stats().compiles == 0);
}

TEST_CASE("spec fingerprints tell every field apart", "[jit][builder]") {
  std::vector<Spec> specs = {
      causalSpec(),
      SpecBuilder("other").heads(16, 4).headDim(128).causal(),
      SpecBuilder("causal_hd128").heads(16, 2).headDim(128).causal(),
      SpecBuilder("causal_hd128").heads(8, 4).headDim(128).causal(),
      SpecBuilder("causal_hd128").heads(16, 4).headDim(64).causal(),
      SpecBuilder("causal_hd128").heads(16, 4).headDim(128).dtype(DType::F16).causal(),
      SpecBuilder("causal_hd128").heads(16, 4).headDim(128).scale(0.1).causal(),
      SpecBuilder("causal_hd128").heads(16, 4).headDim(128).scale(0.1000001).causal(),
      SpecBuilder("causal_hd128").heads(16, 4).headDim(128).causal(CausalAlign::TopLeft),
      SpecBuilder("causal_hd128").heads(16, 4).headDim(128),
      SpecBuilder("causal_hd128").heads(16, 4).headDim(128).slidingWindow(8, 0),
      SpecBuilder("causal_hd128").heads(16, 4).headDim(128).slidingWindow(0, 8),
      SpecBuilder("causal_hd128").heads(16, 4).headDim(128).slidingWindow(8, 0,
                                                                         CausalAlign::TopLeft),
      SpecBuilder("causal_hd128").heads(16, 4).headDim(128).causal().normalizer(
          Normalizer::linear()),
      SpecBuilder("causal_hd128").heads(16, 4).headDim(128).causal().normalizer(
          Normalizer::linear(FeatureMap::Relu)),
      SpecBuilder("causal_hd128").heads(16, 4).headDim(128).causal().normalizer(
          Normalizer::linear(FeatureMap::Relu, true)),
      SpecBuilder("causal_hd128").heads(16, 4).headDim(128).causal().normalizer(
          Normalizer::retention()),
      SpecBuilder("causal_hd128").heads(16, 4).headDim(128).causal().normalizer(
          Normalizer::gatedRetention()),
      SpecBuilder("causal_hd128").heads(16, 4).headDim(128).causal().normalizer(
          Normalizer::retention(std::vector<double>(16, 0.9))),
      SpecBuilder("causal_hd128").heads(16, 4).headDim(128).causal().normalizer(
          Normalizer::retention(std::vector<double>(16, 0.9000001))),
  };
  std::set<std::string> fingerprints;
  for (const Spec &spec : specs)
    fingerprints.insert(spec.fingerprint());
  CHECK(fingerprints.size() == specs.size());
  CHECK(causalSpec().fingerprint() == causalSpec().fingerprint());
}

//===----------------------------------------------------------------------===//
// Compiler and its caches
//===----------------------------------------------------------------------===//

TEST_CASE("JIT: a cold compile, then memory and disk hits of the same kernel", "[jit][cache]") {
  TempDir dir;
  Compiler first(optionsWithCache(dir.path));
  Kernel kernel = first.compile(causalSpec());
  CHECK(first.stats().compiles == 1);
  CHECK(first.stats().diskHits == 0);
  CHECK(first.diskCache()->stats().entries == 1);

  // What attnc's own path (compileSpec: parse, plan, emit, NVRTC to PTX)
  // makes of the shipped example is what the builder's kernel holds.
  CompiledKernel reference = compileSpec(exampleText("causal_hd128"), "causal_hd128.mlir");
  CHECK(sameLaunch(kernel.launchConfig(), reference.launch));
  CHECK(kernel.image().ptx == std::string(reference.binary.begin(), reference.binary.end()));
  CHECK_THAT(kernel.image().ptx, Contains(".target sm_90a") && Contains(".entry attn_fwd_kernel"));
  REQUIRE(kernel.image().cubin.size() > 4);
  CHECK(std::memcmp(kernel.image().cubin.data(), "\x7f" "ELF", 4) == 0);
  CHECK(kernel.name() == "causal_hd128");

  SECTION("the same Compiler answers from memory") {
    Kernel again = first.compile(causalSpec());
    CHECK(&again.image() == &kernel.image());
    // The text of the same kernel plans to the same IR: same entry.
    Kernel fromText = first.compile(exampleText("causal_hd128"), "causal_hd128.mlir");
    CHECK(&fromText.image() == &kernel.image());
    JitStats stats = first.stats();
    CHECK(stats.memoryHits == 2);
    CHECK(stats.compiles == 1);
  }
  SECTION("another Compiler (another process) answers from disk") {
    Compiler second(optionsWithCache(dir.path));
    Kernel fromDisk = second.compile(exampleText("causal_hd128"), "causal_hd128.mlir");
    CHECK(second.stats().diskHits == 1);
    CHECK(second.stats().compiles == 0);
    CHECK(fromDisk.image().ptx == kernel.image().ptx);
    CHECK(fromDisk.image().cubin == kernel.image().cubin);
    CHECK(sameLaunch(fromDisk.launchConfig(), kernel.launchConfig()));
  }
  SECTION("a different tile plan is a different entry") {
    JitOptions options = optionsWithCache(dir.path);
    options.tileOverride = "block_n=64";
    Compiler tiled(options);
    Kernel other = tiled.compile(causalSpec());
    CHECK(tiled.stats().compiles == 1);
    CHECK(other.launchConfig().blockN == 64);
    CHECK(tiled.diskCache()->stats().entries == 2);
  }
}

TEST_CASE("JIT: the plan follows the shape a kernel is compiled for", "[jit][cache]") {
  // No tuning database: attn-tile's heuristic reads the shape's key length
  // (an unmasked head dim 128 takes 160-key tiles from 2048 keys).
  TempDir dir;
  JitOptions options = optionsWithCache(dir.path);
  options.tuningDatabase = "";
  Compiler compiler(options);
  Spec full = SpecBuilder("full_hd128").heads(16).headDim(128).dtype(DType::BF16).mask(Mask::none());
  Kernel anyLength = compiler.compile(full);
  CHECK(anyLength.launchConfig().blockN == 128);
  Kernel longKeys = compiler.compile(full, TuningShape{2, 8192, 8192});
  CHECK(longKeys.launchConfig().blockN == 160);
  CHECK(longKeys.image().ptx != anyLength.image().ptx);
  // A short shape plans what no shape plans: one kernel, found by content.
  Kernel shortKeys = compiler.compile(full, TuningShape{16, 1024, 1024});
  CHECK(shortKeys.launchConfig().blockN == 128);
  CHECK(&shortKeys.image() == &anyLength.image());
  CHECK(compiler.stats().compiles == 2);
  CHECK(compiler.stats().memoryHits == 1);
  // A causal kernel takes 160-key tiles from 8192 keys, and keeps 128 below.
  Kernel causal = compiler.compile(causalSpec(), TuningShape{2, 8192, 8192});
  CHECK(causal.launchConfig().blockN == 160);
  Kernel shortCausal = compiler.compile(causalSpec(), TuningShape{4, 4096, 4096});
  CHECK(shortCausal.launchConfig().blockN == 128);
}

TEST_CASE("JIT: a damaged disk entry is detected and rebuilt", "[jit][cache]") {
  TempDir dir;
  std::string key;
  std::string original;
  {
    Compiler compiler(optionsWithCache(dir.path));
    compiler.compile(causalSpec());
    std::vector<CacheEntryInfo> entries = compiler.diskCache()->list();
    REQUIRE(entries.size() == 1);
    key = entries[0].key;
    original = readFile(compiler.diskCache()->entryPath(key));
  }
  DiskCache cache(optionsWithCache(dir.path).diskCache.value());

  SECTION("a flipped byte") {
    std::string bytes = original;
    bytes[bytes.size() / 3] ^= 0x40;
    writeFile(cache.entryPath(key), bytes);
  }
  SECTION("a truncated file") {
    writeFile(cache.entryPath(key), original.substr(0, original.size() - 100));
  }
  SECTION("a well-formed entry whose metadata does not match") {
    CacheEntry entry = *cache.load(key);
    AttnLaunchConfig wrong = parseLaunchConfig(*entry.find("launch"));
    wrong.sharedMemoryBytes += 1024;
    entry.set("launch", serializeLaunchConfig(wrong));
    REQUIRE(cache.store(key, entry));
  }

  Compiler rebuilding(optionsWithCache(dir.path));
  Kernel kernel = rebuilding.compile(causalSpec());
  CHECK(rebuilding.stats().compiles == 1);
  CHECK(rebuilding.stats().diskHits == 0);
  CHECK(readFile(cache.entryPath(key)).size() == original.size());

  Compiler reading(optionsWithCache(dir.path));
  Kernel reread = reading.compile(causalSpec());
  CHECK(reading.stats().diskHits == 1);
  CHECK(sameLaunch(reread.launchConfig(), kernel.launchConfig()));
}

TEST_CASE("JIT: an unusable cache directory leaves a memory cache and one warning",
          "[jit][cache]") {
  TempDir dir;
  writeFile(dir.path + "/file", "in the way");
  std::vector<std::string> warnings;
  Compiler compiler(optionsWithCache(dir.path + "/file/cache", &warnings));
  Spec small = SpecBuilder("small").heads(2, 1).headDim(64);
  compiler.compile(small);
  compiler.compile(small);
  CHECK(compiler.stats().compiles == 1);
  CHECK(compiler.stats().memoryHits == 1);
  compiler.compile(SpecBuilder("small_causal").heads(2, 1).headDim(64).causal());
  CHECK(compiler.stats().compiles == 2);
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Contains(dir.path + "/file/cache") && Contains("memory only"));
}

TEST_CASE("JIT: threads asking for one kernel at once compile it once", "[jit][cache]") {
  TempDir dir;
  Compiler compiler(optionsWithCache(dir.path));
  std::vector<Kernel> kernels(4);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      ++ready;
      while (ready < 4)
        std::this_thread::yield();
      kernels[i] = compiler.compile(causalSpec());
    });
  for (std::thread &thread : threads)
    thread.join();
  CHECK(compiler.stats().compiles == 1);
  CHECK(compiler.stats().memoryHits == 3);
  for (const Kernel &kernel : kernels)
    CHECK(&kernel.image() == &kernels[0].image());
}

TEST_CASE("JIT helper process (run by the process test)", "[.jit-helper]") {
  const char *cache = std::getenv("ATTN_TEST_HELPER_CACHE");
  const char *result = std::getenv("ATTN_TEST_HELPER_RESULT");
  REQUIRE(cache);
  REQUIRE(result);
  DiskCacheOptions disk;
  disk.directory = cache;
  JitOptions options;
  options.diskCache = disk;
  Compiler compiler(options);
  Kernel kernel = compiler.compile(causalSpec());
  JitStats stats = compiler.stats();
  writeFile(result, "compiles " + std::to_string(stats.compiles) + "\ndisk_hits " +
                        std::to_string(stats.diskHits) + "\nptx " +
                        Sha256::toHex(Sha256::hash(kernel.image().ptx)) + "\n");
}

TEST_CASE("JIT: two processes compiling one kernel at once compile it once and leave one "
          "entry",
          "[jit][cache][process]") {
  TempDir dir;
  std::string cacheDir = dir.path + "/cache";
  std::vector<std::string> results = {dir.path + "/a.txt", dir.path + "/b.txt"};
  CHECK(runHelpers(2, cacheDir, results) == std::vector<int>{0, 0});

  Compiler reader(optionsWithCache(cacheDir));
  Kernel kernel = reader.compile(causalSpec());
  CHECK(reader.stats().diskHits == 1);
  std::string expectedPtx = "ptx " + Sha256::toHex(Sha256::hash(kernel.image().ptx)) + "\n";
  std::string a = readFile(results[0]), b = readFile(results[1]);
  INFO("process A:\n" << a << "process B:\n" << b);
  // One compiled it, the other waited on the key's lock and read the entry.
  std::multiset<std::string> outcomes = {a.substr(0, a.find("ptx")),
                                         b.substr(0, b.find("ptx"))};
  CHECK(outcomes == std::multiset<std::string>{"compiles 1\ndisk_hits 0\n",
                                               "compiles 0\ndisk_hits 1\n"});
  CHECK_THAT(a, Contains(expectedPtx));
  CHECK_THAT(b, Contains(expectedPtx));
  CHECK(reader.diskCache()->stats().entries == 1);
  for (const auto &item : std::filesystem::directory_iterator(cacheDir))
    CHECK_THAT(item.path().filename().string(), !StartsWith(".tmp-"));
}

TEST_CASE("JIT: spec text errors carry their location", "[jit]") {
  Compiler compiler(optionsWithCache(""));
  CHECK_THROWS_WITH(
      compiler.compile("attn.kernel @k problem = #attn.problem<q_heads = 4, kv_heads = 4, "
                       "head_dim = 96, element_type = bf16> mask = #attn.no_mask normalizer = "
                       "#attn.softmax\n",
                       "bad.mlir"),
      Contains("bad.mlir:1:") && Contains("unsupported head_dim 96"));
  CHECK_THROWS_WITH(compiler.compile(exampleText("causal_hd128") + exampleText("mqa_hd256")),
                    Contains("exactly one attn.kernel, found 2"));
  JitOptions badArch;
  badArch.arch = "sm_80";
  badArch.diskCache = DiskCacheOptions();
  CHECK_THROWS_WITH(Compiler(badArch), StartsWith("arch: ") && Contains("sm_80"));
}

TEST_CASE("JIT: variants with regions and captures compile like attnc's", "[jit]") {
  // The JIT runs the same emit pipeline as attnc: the regions are lowered,
  // the captures reach the launch config, the coverage and work cost kernels
  // are in the PTX.
  Compiler compiler(optionsWithCache(""));
  for (const char *name : {"document_mask_hd128", "alibi_causal_hd128", "chunked_local_hd128"}) {
    INFO(name);
    Kernel kernel = compiler.compile(exampleText(name), std::string(name) + ".mlir");
    const std::string &ptx = kernel.image().ptx;
    CHECK(ptx.find(".entry attn_fwd_kernel") != std::string::npos);
    CHECK(ptx.find(".entry " ATTN_TILE_COVERAGE_KERNEL_NAME) != std::string::npos);
    CHECK(ptx.find(".entry " ATTN_WORK_COST_KERNEL_NAME) != std::string::npos);
    CHECK(ptx.find(".entry " ATTN_WORK_ORDER_KERNEL_NAME) != std::string::npos);
    CHECK(ptx.find("wgmma.mma_async") != std::string::npos);
    // Only the kernels with a mask_mod order their work tiles by themselves.
    CHECK(kernel.launchConfig().automaticWorkOrder ==
          (std::string(name) == "alibi_causal_hd128" ? 0 : 1));
  }
  Kernel document = compiler.compile(exampleText("document_mask_hd128"), "document.mlir");
  REQUIRE(document.launchConfig().captures.size() == 1);
  CHECK(document.launchConfig().captures[0].name == "document");
  CHECK(document.launchConfig().captures[0].dtype == DType::I32);
  CHECK(document.launchConfig().persistentBlocksPerSm == 0);
}

//===----------------------------------------------------------------------===//
// Kernel before the device
//===----------------------------------------------------------------------===//

TEST_CASE("JIT: the backward of a spec is compiled and cached beside its forward",
          "[jit][cache][backward]") {
  TempDir dir;
  Compiler first(optionsWithCache(dir.path));
  Compiler::TrainingKernels kernels = first.compileForTraining(causalSpec());
  CHECK(first.stats().compiles == 2);
  CHECK(first.diskCache()->stats().entries == 2);
  const AttnLaunchConfig &launch = kernels.backward.launchConfig();
  CHECK(launch.backward == 1);
  CHECK(launch.kernelName == ATTN_BWD_KERNEL_NAME);
  CHECK(kernels.forward.launchConfig().backward == 0);
  CHECK_THAT(kernels.backward.image().ptx, Contains(".entry attn_bwd_kernel") &&
                                               Contains(".entry attn_bwd_preprocess_kernel") &&
                                               Contains(".entry attn_bwd_convert_kernel"));
  // What attnc --backward makes of the shipped example.
  CompiledKernel reference =
      compileBackwardSpec(exampleText("causal_hd128"), "causal_hd128.mlir");
  CHECK(sameLaunch(launch, reference.launch));
  CHECK(kernels.backward.image().ptx ==
        std::string(reference.binary.begin(), reference.binary.end()));

  SECTION("the same Compiler answers from memory, from the text too") {
    Kernel again = first.compileBackward(exampleText("causal_hd128"), "causal_hd128.mlir");
    CHECK(&again.image() == &kernels.backward.image());
    CHECK(first.stats().compiles == 2);
  }
  SECTION("another Compiler answers from disk") {
    Compiler second(optionsWithCache(dir.path));
    Kernel fromDisk = second.compileBackward(causalSpec());
    CHECK(second.stats().diskHits == 1);
    CHECK(second.stats().compiles == 0);
    CHECK(fromDisk.image().ptx == kernels.backward.image().ptx);
    CHECK(sameLaunch(fromDisk.launchConfig(), launch));
  }
  SECTION("a retention spec's backward module is the linear family's, cached too") {
    const Spec retention = SpecBuilder("retention")
                               .heads(4, 4)
                               .headDim(128)
                               .dtype(DType::BF16)
                               .causal()
                               .normalizer(Normalizer::gatedRetention());
    Compiler::TrainingKernels pair = first.compileForTraining(retention);
    const AttnLaunchConfig &linear = pair.backward.launchConfig();
    CHECK(linear.backward == 1);
    CHECK(linear.linearFamily == 1);
    CHECK(linear.gated == 1);
    CHECK(linear.kernelName == ATTN_LINEAR_KERNEL_NAME);
    CHECK_THAT(pair.backward.image().ptx, Contains(".entry attn_linear_bwd_gate_kernel") &&
                                              Contains(".entry attn_linear_kernel"));
    CHECK(first.diskCache()->stats().entries == 4);
    // Before any device: its arguments are checked, and the forward module
    // is not taken for the backward.
    AttnLinearBackwardArgs args;
    args.q = contiguousBSHD(reinterpret_cast<void *>(0x10000000), DType::BF16, 1, 64, 4, 128);
    args.k = args.v = args.dO = args.dq = args.dk = args.dv = args.q;
    CHECK_THROWS_WITH(pair.backward.runLinearBackward(args),
                      StartsWith("logDecay: the kernel is gated"));
    CHECK_THROWS_WITH(pair.forward.runLinearBackward(args), StartsWith("config: "));
  }
  SECTION("a normalized linear spec's backward module holds the key sums' kernels") {
    const Spec normalized = SpecBuilder("normalized")
                                .heads(4, 4)
                                .headDim(128)
                                .dtype(DType::BF16)
                                .causal()
                                .normalizer(Normalizer::linear(FeatureMap::EluPlusOne, true));
    Kernel backward = first.compileBackward(normalized);
    CHECK(backward.launchConfig().normalize == 1);
    CHECK(backward.launchConfig().backward == 1);
    CHECK_THAT(backward.image().ptx,
               Contains(".entry attn_linear_bwd_denominator_kernel") &&
                   Contains(".entry attn_linear_bwd_key_sum_gradient_kernel"));
  }
  SECTION("backward arguments are checked before the driver is needed") {
    auto fake = [](uintptr_t address) { return reinterpret_cast<void *>(address); };
    AttnBackwardArgs args;
    args.q = contiguousBSHD(fake(0x10000000), DType::BF16, 1, 64, 16, 128);
    args.k = contiguousBSHD(fake(0x20000000), DType::BF16, 1, 64, 4, 128);
    args.v = args.k;
    args.o = args.q;
    args.dO = args.q;
    args.dq = args.q;
    args.dk = args.k;
    args.dv = args.k;
    args.lse = static_cast<const float *>(fake(0x50000000));
    args.dO.dtype = DType::F16;
    CHECK_THROWS_WITH(kernels.backward.runBackward(args),
                      StartsWith("dO: dtype f16 does not match the kernel's bf16"));
    args.dO.dtype = DType::BF16;
    CHECK_THROWS_WITH(kernels.backward.runBackward(args),
                      StartsWith("workspace: pointer is null; the backward needs"));
    args.workspace = fake(0x60000000);
    args.workspaceBytes = kernels.backward.backwardWorkspaceBytes(args);
    // 64 padded rows of 16 heads: base-2 log-sum-exp, delta, dQ's
    // accumulator (128 fp32 a row) and a counter per query block.
    CHECK(args.workspaceBytes == 64 * 16 * 4 * 2 + 64 * 16 * 128 * 4 + 256);
    args.dk = args.q;
    CHECK_THROWS_WITH(kernels.backward.runBackward(args), StartsWith("dk: 16 heads"));
    CHECK_THROWS_WITH(kernels.forward.runBackward(args),
                      StartsWith("config: the kernel is a forward module"));
  }
}

TEST_CASE("Kernel: argument errors come first and need no GPU", "[jit][kernel]") {
  TempDir dir;
  Compiler compiler(optionsWithCache(dir.path));
  Kernel kernel = compiler.compile(causalSpec());
  auto fake = [](uintptr_t address) { return reinterpret_cast<void *>(address); };
  TensorView q = contiguousBSHD(fake(0x10000000), DType::BF16, 1, 64, 16, 128);
  TensorView k = contiguousBSHD(fake(0x20000000), DType::BF16, 1, 64, 4, 128);
  TensorView v = contiguousBSHD(fake(0x30000000), DType::BF16, 1, 64, 4, 128);
  TensorView o = contiguousBSHD(fake(0x40000000), DType::BF16, 1, 64, 16, 128);
  auto *lse = static_cast<float *>(fake(0x50000000));

  TensorView halfQ = q;
  halfQ.dtype = DType::F16;
  CHECK_THROWS_WITH(kernel.run(halfQ, k, v, o, lse),
                    StartsWith("q: dtype f16 does not match the kernel's bf16"));
  TensorView wrongK = contiguousBSHD(fake(0x20000000), DType::BF16, 1, 64, 8, 128);
  CHECK_THROWS_WITH(kernel.run(q, wrongK, v, o, lse),
                    StartsWith("k: 8 heads") && Contains("4 kv heads") &&
                        Contains("GQA: 16 query heads, 4 per kv head"));
  if (!Driver::available())
    CHECK_THROWS_WITH(kernel.run(q, k, v, o, lse),
                      Contains(Driver::get().unavailableReason()));
  CHECK_THROWS_WITH(Kernel().run(q, k, v, o, lse), StartsWith("kernel: empty handle"));
}

TEST_CASE("Kernel: precompiled images from files", "[jit][kernel]") {
  TempDir dir;
  Compiler compiler(optionsWithCache(dir.path + "/cache"));
  Kernel compiled = compiler.compile(causalSpec());
  const KernelImage &image = compiled.image();
  std::string cubin = dir.path + "/k.cubin", ptx = dir.path + "/k.ptx",
              meta = dir.path + "/k.meta";
  writeFile(cubin, std::string(image.cubin.begin(), image.cubin.end()));
  writeFile(ptx, image.ptx);
  writeFile(meta, serializeLaunchConfig(image.launch));

  Kernel fromCubin = Kernel::fromFiles(cubin, meta);
  CHECK(fromCubin.image().cubin == image.cubin);
  CHECK(fromCubin.image().ptx.empty());
  CHECK(sameLaunch(fromCubin.launchConfig(), image.launch));
  Kernel fromPtx = Kernel::fromFiles(ptx, meta);
  CHECK(fromPtx.image().ptx == image.ptx);
  CHECK(fromPtx.image().cubin.empty());

  CHECK_THROWS_WITH(Kernel::fromFiles(meta, meta), StartsWith("binaryPath: ") &&
                                                       Contains("neither a cubin"));
  CHECK_THROWS_WITH(Kernel::fromFiles(cubin, ptx), StartsWith("metadataPath: '" + ptx + "'"));
  CHECK_THROWS_WITH(Kernel::fromFiles(dir.path + "/missing", meta),
                    StartsWith("binaryPath: cannot open"));
  CHECK_THROWS_WITH(Kernel(KernelImage()), StartsWith("image: ") && Contains("neither PTX"));
}

TEST_CASE("only sm_90 devices are accepted, naming the GPU found", "[jit][kernel]") {
  DeviceInfo hopper;
  hopper.name = "NVIDIA H100 80GB HBM3";
  hopper.computeCapabilityMajor = 9;
  hopper.computeCapabilityMinor = 0;
  CHECK_NOTHROW(checkDeviceSupported(hopper));

  DeviceInfo ampere;
  ampere.ordinal = 1;
  ampere.name = "NVIDIA A100-SXM4-80GB";
  ampere.computeCapabilityMajor = 8;
  ampere.computeCapabilityMinor = 0;
  CHECK_THROWS_WITH(checkDeviceSupported(ampere),
                    StartsWith("device 1 (NVIDIA A100-SXM4-80GB) is sm_80") &&
                        Contains("need an sm_90 GPU"));
  DeviceInfo blackwell = hopper;
  blackwell.name = "NVIDIA B200";
  blackwell.computeCapabilityMajor = 10;
  CHECK_THROWS_WITH(checkDeviceSupported(blackwell), Contains("(NVIDIA B200) is sm_100"));
}
