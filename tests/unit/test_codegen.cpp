// The emitted kernels compile with NVRTC and assemble with ptxas for sm_90a,
// for every head dim and element type, with the instructions the design
// depends on and without register spills. Needs no GPU.
#include <catch2/catch.hpp>

#include "attn/Backend/Nvrtc.h"
#include "attn/Compiler/Compiler.h"
#include "attn/Compiler/KernelConfig.h"
#include "attn/IR/AttnOps.h"
#include "attn/runtime/Error.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"

#include "SpecTestSupport.h"
#include "TestSupport.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <unistd.h>

namespace {

std::string spec(int headDim, const std::string &element, const std::string &mask) {
  std::ostringstream text;
  text << "attn.kernel @k problem = #attn.problem<q_heads = 8, kv_heads = 2, head_dim = "
       << headDim << ", element_type = " << element << "> mask = " << mask
       << " normalizer = #attn.softmax\n";
  return text.str();
}

} // namespace

TEST_CASE("every head dim and element type assembles for sm_90a without spills", "[codegen]") {
  int headDim = GENERATE(64, 128, 256);
  std::string element = GENERATE(std::string("bf16"), std::string("f16"));
  std::string mask = GENERATE(std::string("#attn.no_mask"), std::string("#attn.causal<top_left>"),
                              std::string("#attn.sliding_window<left = 64, right = 8>"));
  attn::CompiledKernel kernel = attn::compileSpec(spec(headDim, element, mask), "k.mlir");
  std::string ptx(kernel.binary.begin(), kernel.binary.end());
  CHECK(ptx.find("wgmma.mma_async") != std::string::npos);
  CHECK(ptx.find("cp.async.bulk.tensor") != std::string::npos);
  CHECK(ptx.find("mbarrier") != std::string::npos);
  CHECK(ptx.find("setmaxnreg") != std::string::npos);
  CHECK(ptx.find(".entry attn_fwd_kernel") != std::string::npos);

  attn::test::PtxasReport report = attn::test::assembleWithPtxas(kernel.binary);
  INFO(report.text);
  REQUIRE(report.status == 0);
  CHECK(report.spillFree());
  CHECK(report.registers(kernel.launch.kernelName) > 0);
}

TEST_CASE("only kernels compiled for paged caches hold the forward kernel's page walk",
          "[codegen][paged]") {
  // The page walk's block-table prefetch marks it. Head dims 64 and 128
  // assemble without spills with it; head dim 256 spills (4 to 80 bytes,
  // docs/runtime.md), which is why it is an option.
  int headDim = GENERATE(64, 128);
  const std::string text = spec(headDim, "bf16", "#attn.causal<bottom_right>");
  attn::CompiledKernel contiguous = attn::compileSpec(text, "k.mlir");
  CHECK(contiguous.launch.pagedForward == 0);
  CHECK(
      std::string(contiguous.binary.begin(), contiguous.binary.end()).find("prefetch.global.L1") ==
      std::string::npos);
  attn::CompileOptions options;
  options.pagedKv = true;
  attn::CompiledKernel paged = attn::compileSpec(text, "k.mlir", options);
  CHECK(paged.launch.pagedForward == 1);
  CHECK(std::string(paged.binary.begin(), paged.binary.end()).find("prefetch.global.L1") !=
        std::string::npos);
  attn::test::PtxasReport report = attn::test::assembleWithPtxas(paged.binary);
  INFO(report.text);
  REQUIRE(report.status == 0);
  CHECK(report.spillFree());
}

TEST_CASE("the short-query kernel finds a key's page by multiply and shift, not division",
          "[codegen][paged]") {
  // A division or remainder per copied row (the page size is a launch
  // argument) held each row's address behind the previous row's copy and
  // cost paged caches 12-28 % over contiguous ones (docs/benchmarks.md):
  // the page number is umulhi and a shift, and no remainder is left.
  int headDim = GENERATE(64, 128, 256);
  attn::CompiledKernel kernel =
      attn::compileSpec(spec(headDim, "bf16", "#attn.causal<bottom_right>"), "k.mlir");
  std::string ptx(kernel.binary.begin(), kernel.binary.end());
  const size_t begin = ptx.find(".entry attn_split_kv_kernel");
  REQUIRE(begin != std::string::npos);
  const size_t end = ptx.find(".entry", begin + 1);
  const std::string body = ptx.substr(begin, end == std::string::npos ? end : end - begin);
  CHECK(body.find("mul.hi.u32") != std::string::npos);
  CHECK(!std::regex_search(body, std::regex(R"(\brem\.[su]32)")));
}

TEST_CASE("every example's forward module assembles without spills or stack", "[codegen][examples]") {
  // Every spec in docs/examples, with the plan of no shape and the plan of
  // a long one (the heuristic takes wider key tiles there): each entry of
  // the module (the forward, the linear family's kernels, the coverage and
  // split kernels) has no stack frame and no spills.
  std::vector<std::string> examples;
  for (const auto &entry : std::filesystem::directory_iterator(ATTNC_DOCS_EXAMPLES_DIR))
    if (entry.path().extension() == ".mlir")
      examples.push_back(entry.path().string());
  std::sort(examples.begin(), examples.end());
  REQUIRE(examples.size() >= 19); // today's count: a missing directory must fail
  for (const std::string &path : examples) {
    for (const char *shape : {"", "2,8192"}) {
      attn::CompileOptions options;
      options.tuningShape = shape;
      attn::CompiledKernel kernel =
          attn::compileSpec(attn::test::readFile(path), path, options);
      attn::test::PtxasReport report = attn::test::assembleWithPtxas(kernel.binary);
      INFO(path << " shape '" << shape << "'\n" << report.text);
      REQUIRE(report.status == 0);
      CHECK(report.spillFree());
    }
  }
}

TEST_CASE("every backward kernel assembles for sm_90a without spills", "[codegen][backward]") {
  const int headDim = GENERATE(64, 128, 256);
  const std::string element = GENERATE(std::string("bf16"), std::string("f16"));
  const std::string mask =
      GENERATE(std::string("#attn.no_mask"), std::string("#attn.causal<bottom_right>"),
               std::string("#attn.sliding_window<left = 64, right = 8>"));
  attn::CompiledKernel kernel = attn::compileBackwardSpec(spec(headDim, element, mask), "k.mlir");
  std::string ptx(kernel.binary.begin(), kernel.binary.end());
  CHECK(ptx.find("wgmma.mma_async") != std::string::npos);
  CHECK(ptx.find("cp.async.bulk.tensor") != std::string::npos);
  CHECK(ptx.find("cp.reduce.async.bulk") != std::string::npos);
  CHECK(ptx.find("setmaxnreg") != std::string::npos);
  for (const char *entry : {".entry attn_bwd_kernel", ".entry attn_bwd_preprocess_kernel",
                            ".entry attn_bwd_convert_kernel"})
    CHECK(ptx.find(entry) != std::string::npos);
  CHECK(kernel.launch.backward == 1);

  attn::test::PtxasReport report = attn::test::assembleWithPtxas(kernel.binary);
  INFO(report.text);
  REQUIRE(report.status == 0);
  CHECK(report.spillFree());
  // The head-dim-64 consumers sit at their register limit: the mask's test
  // of a pair once made ptxas serialize their products (causal 0.87-0.89 of
  // today's speed on H200, docs/benchmarks.md).
  CHECK_FALSE(report.serializesWgmma());
}

TEST_CASE("the backward's 80-row plan (dQ transposed) assembles at every mask",
          "[codegen][backward]") {
  // The default plan without a mask at head dim 128 (two stages): no
  // spills, no serialized WGMMAs. A tuned plan may take it under a mask or
  // with one stage, where ptxas spills 8 to 24 bytes (the tuner times it).
  const std::string element = GENERATE(std::string("bf16"), std::string("f16"));
  const std::string mask =
      GENERATE(std::string("#attn.no_mask"), std::string("#attn.causal<bottom_right>"),
               std::string("#attn.sliding_window<left = 64, right = 8>"));
  const int stages = GENERATE(1, 2);
  attn::CompileOptions options;
  options.tileOverride = "block_m=80,stages=" + std::to_string(stages);
  attn::CompiledKernel kernel =
      attn::compileBackwardSpec(spec(128, element, mask), "k.mlir", options);
  CHECK(kernel.launch.blockM == 80);
  std::string ptx(kernel.binary.begin(), kernel.binary.end());
  // dQᵀ = Kᵀ dS: A (K) transposed, B (dS) not; dS stored transposed.
  CHECK(ptx.find("wgmma.mma_async.sync.aligned.m64n80k16") != std::string::npos);
  CHECK(ptx.find("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16") != std::string::npos);
  attn::test::PtxasReport report = attn::test::assembleWithPtxas(kernel.binary);
  INFO(report.text);
  REQUIRE(report.status == 0);
  if (mask == "#attn.no_mask" && stages == 2) {
    CHECK(report.spillFree());
    CHECK_FALSE(report.serializesWgmma());
  }
}

TEST_CASE("every region example's backward module assembles without spills",
          "[codegen][backward][mods]") {
  // The score_mods' and the mask_mods' (whose load and dQ writer warps walk
  // the step list instead of testing the mask), every kernel of the module.
  const char *example = GENERATE("softcap_causal_hd128", "alibi_causal_hd128",
                                 "alibi_learned_hd128", "relpos_learned_hd128", "t5_bias_hd128",
                                 "relpos_bias_causal_hd128", "prefix_lm_hd128",
                                 "document_mask_hd128", "longformer_hd128",
                                 "chunked_local_hd128", "bigbird_hd128");
  const std::string text =
      attn::test::readFile(std::string(ATTNC_DOCS_EXAMPLES_DIR) + "/" + example + ".mlir");
  attn::CompiledKernel kernel = attn::compileBackwardSpec(text, example);
  attn::test::PtxasReport report = attn::test::assembleWithPtxas(kernel.binary);
  INFO(example << "\n" << report.text);
  REQUIRE(report.status == 0);
  CHECK(report.spillFree());
  CHECK_FALSE(report.serializesWgmma());
}

TEST_CASE("buffer mask_mods' backward kernels assemble without spills at head dims 64 and 256",
          "[codegen][backward][mods]") {
  // Other tiles than the examples': 128 query rows a step at 64 (64 pairs a
  // thread), split columns at 256.
  const char *example = GENERATE("document_mask_hd128", "bigbird_hd128", "longformer_hd128");
  const char *headDim = GENERATE("head_dim = 64", "head_dim = 256");
  std::string text =
      attn::test::readFile(std::string(ATTNC_DOCS_EXAMPLES_DIR) + "/" + example + ".mlir");
  text = std::regex_replace(text, std::regex("head_dim = 128"), headDim);
  attn::CompiledKernel kernel = attn::compileBackwardSpec(text, example);
  attn::test::PtxasReport report = attn::test::assembleWithPtxas(kernel.binary);
  INFO(example << ", " << headDim << "\n" << report.text);
  REQUIRE(report.status == 0);
  CHECK(report.spillFree());
  CHECK_FALSE(report.serializesWgmma());
}

TEST_CASE("a spec without a backward template is refused with its location", "[codegen][backward]") {
  attn::CompileOptions twoConsumers;
  // Two consumers of 64 keys each (not sharing a tile) at head dim 256.
  twoConsumers.tileOverride = "block_n=128";
  CHECK_THROWS_WITH(
      attn::compileBackwardSpec(spec(256, "bf16", "#attn.no_mask"), "k.mlir", twoConsumers),
      Catch::Contains("k.mlir:1:1: error: 'attn.kernel' op backward plan is illegal: "
                      "shared-memory capacity: backward block_m 64, block_n 128, "
                      "stages 1, head_dim 256 needs"));
  attn::CompileOptions options;
  options.tileOverride = "block_m=72";
  CHECK_THROWS_WITH(attn::compileBackwardSpec(spec(128, "bf16", "#attn.no_mask"), "k.mlir",
                                              options),
                    Catch::Contains("WGMMA shape: a backward block_m (72) that is not a multiple "
                                    "of 64 computes dQ transposed: a multiple of 16"));
}

TEST_CASE("the linear family's backward module assembles without spills", "[codegen][linear]") {
  auto [mask, normalizer, headDim] = GENERATE(table<std::string, std::string, int>({
      {"#attn.causal<top_left>", "#attn.retention", 128},
      {"#attn.causal<top_left>", "#attn.retention<gated>", 128},
      {"#attn.causal<top_left>", "#attn.linear<feature_map = elu_plus_one>", 64},
      {"#attn.no_mask", "#attn.linear<feature_map = relu>", 128},
      {"#attn.causal<top_left>", "#attn.linear<feature_map = elu_plus_one, normalize = true>", 128},
      {"#attn.no_mask", "#attn.linear<feature_map = identity, normalize = true>", 64},
  }));
  std::ostringstream text;
  text << "attn.kernel @k problem = #attn.problem<q_heads = 8, kv_heads = 2, head_dim = " << headDim
       << ", element_type = bf16> mask = " << mask << " normalizer = " << normalizer << "\n";
  attn::CompiledKernel kernel = attn::compileBackwardSpec(text.str(), "k.mlir");
  CHECK(kernel.launch.linearFamily == 1);
  CHECK(kernel.launch.backward == 1);
  const bool normalized = normalizer.find("normalize = true") != std::string::npos;
  CHECK(kernel.launch.normalize == (normalized ? 1 : 0));
  const std::string ptx(kernel.binary.begin(), kernel.binary.end());

  CHECK(ptx.find("wgmma.mma_async") != std::string::npos);
  CHECK(ptx.find("cp.async.bulk.tensor") != std::string::npos);
  for (const char *entry :
       {ATTN_LINEAR_KERNEL_NAME, ATTN_LINEAR_SEGMENT_KERNEL_NAME, ATTN_LINEAR_FOLD_KERNEL_NAME,
        ATTN_LINEAR_BWD_STATES_KERNEL_NAME, ATTN_LINEAR_BWD_QUERY_KERNEL_NAME,
        ATTN_LINEAR_BWD_KEY_KERNEL_NAME, ATTN_LINEAR_BWD_GATE_KERNEL_NAME,
        ATTN_LINEAR_BWD_INITIAL_STATE_KERNEL_NAME, ATTN_LINEAR_BWD_KEY_PIECES_KERNEL_NAME,
        ATTN_LINEAR_BWD_KEY_SCAN_KERNEL_NAME, ATTN_LINEAR_BWD_DENOMINATOR_KERNEL_NAME,
        ATTN_LINEAR_BWD_QUERY_SCAN_KERNEL_NAME, ATTN_LINEAR_BWD_KEY_SUM_GRADIENT_KERNEL_NAME})
    CHECK(ptx.find(std::string(".entry ") + entry + "(") != std::string::npos);
  attn::test::PtxasReport report = attn::test::assembleWithPtxas(kernel.binary);
  INFO(text.str() << report.text);
  REQUIRE(report.status == 0);
  // A causal kernel's walks from the sequence's end are entry points of
  // their own; a non-causal one reverses nothing.
  const bool causal = mask.find("causal") != std::string::npos;
  for (const char *entry :
       {ATTN_LINEAR_REVERSED_KERNEL_NAME, ATTN_LINEAR_REVERSED_SEGMENT_KERNEL_NAME})
    CHECK((ptx.find(std::string(".entry ") + entry + "(") != std::string::npos) == causal);
  // The chunkwise kernels as the forward's budget allows them (below); the
  // helpers not at all.
  CHECK(report.spillStoreBytes(ATTN_LINEAR_KERNEL_NAME) <= 20);
  if (causal)
    CHECK(report.spillStoreBytes(ATTN_LINEAR_REVERSED_KERNEL_NAME) <= 20);
  for (const char *entry :
       {ATTN_LINEAR_BWD_STATES_KERNEL_NAME, ATTN_LINEAR_BWD_QUERY_KERNEL_NAME,
        ATTN_LINEAR_BWD_KEY_KERNEL_NAME, ATTN_LINEAR_BWD_GATE_KERNEL_NAME,
        ATTN_LINEAR_BWD_INITIAL_STATE_KERNEL_NAME, ATTN_LINEAR_BWD_KEY_PIECES_KERNEL_NAME,
        ATTN_LINEAR_BWD_KEY_SCAN_KERNEL_NAME, ATTN_LINEAR_BWD_DENOMINATOR_KERNEL_NAME,
        ATTN_LINEAR_BWD_QUERY_SCAN_KERNEL_NAME, ATTN_LINEAR_BWD_KEY_SUM_GRADIENT_KERNEL_NAME})
    CHECK(report.spillStoreBytes(entry) == 0);
}

TEST_CASE("every linear-family kernel assembles for sm_90a without spills", "[codegen][linear]") {
  // Two consumer warpgroups per SM, as two blocks of one value slice or one
  // block of two, need at most 168 registers a thread. Both plans of head
  // dim 128 (block_n = 64 or 128) assemble.
  int headDim = GENERATE(64, 128);
  int blockN = GENERATE(64, 128);
  if (blockN > headDim)
    return;
  std::string element = GENERATE(std::string("bf16"), std::string("f16"));
  auto [mask, normalizer] = GENERATE(table<std::string, std::string>({
      {"#attn.causal<top_left>", "#attn.retention"},
      {"#attn.causal<top_left>", "#attn.retention<gated>"},
      {"#attn.causal<bottom_right>", "#attn.linear<feature_map = elu_plus_one, normalize = true>"},
      {"#attn.no_mask", "#attn.linear<feature_map = relu>"},
      {"#attn.no_mask", "#attn.linear<normalize = true>"},
  }));
  std::ostringstream text;
  text << "attn.kernel @k problem = #attn.problem<q_heads = 8, kv_heads = 2, head_dim = " << headDim
       << ", element_type = " << element << "> mask = " << mask << " normalizer = " << normalizer
       << "\n";
  attn::CompileOptions options;
  options.tileOverride = "block_n=" + std::to_string(blockN);
  attn::CompiledKernel kernel = attn::compileSpec(text.str(), "k.mlir", options);
  CHECK(kernel.launch.blockN == blockN);
  CHECK(kernel.launch.threadsPerBlock == ATTN_LINEAR_THREADS(blockN / 64));
  std::string ptx(kernel.binary.begin(), kernel.binary.end());
  CHECK(ptx.find("wgmma.mma_async") != std::string::npos);
  CHECK(ptx.find("cp.async.bulk.tensor") != std::string::npos);
  CHECK(ptx.find(".entry attn_linear_kernel") != std::string::npos);
  CHECK(ptx.find(".entry attn_linear_segment_kernel") != std::string::npos);
  CHECK(ptx.find(".entry attn_linear_fold_kernel") != std::string::npos);
  CHECK(ptx.find(".entry attn_linear_decode_kernel") != std::string::npos);

  attn::test::PtxasReport report = attn::test::assembleWithPtxas(kernel.binary);
  INFO(text.str() << options.tileOverride << "\n" << report.text);
  REQUIRE(report.status == 0);
  // Under the 168-register cap of two warpgroups per SM. The normalized
  // kernel spilled 16 bytes and serialized its WGMMAs (ptxas C7512) while it
  // divided each output element by its row's denominator.
  CHECK(report.spillFree());
  CHECK_FALSE(report.serializesWgmma());
  for (const char *entry : {"attn_linear_kernel", "attn_linear_segment_kernel"}) {
    CHECK(report.registers(entry) > 0);
    CHECK(report.registers(entry) <= 168);
  }
}

TEST_CASE("NVRTC errors come back with the compiler log", "[codegen]") {
  attn::backend::NvrtcResult result = attn::backend::compileCuda(
      "__global__ void broken() { undeclared_name = 1; }\n", "broken.cu", "sm_90a",
      attn::backend::NvrtcOutput::Ptx);
  CHECK_FALSE(result.succeeded);
  CHECK(result.log.find("undeclared_name") != std::string::npos);
  CHECK(result.log.find("broken.cu") != std::string::npos);
}

TEST_CASE("a bad spec is reported with its location", "[codegen]") {
  std::string bad = "attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 3, "
                    "head_dim = 128, element_type = bf16> mask = #attn.no_mask "
                    "normalizer = #attn.softmax\n";
  REQUIRE_THROWS_WITH(attn::compileSpec(bad, "bad.mlir"),
                      Catch::Contains("bad.mlir:1:") && Catch::Contains("kv_heads (3)"));
}

TEST_CASE("the launch metadata follows the plan", "[codegen]") {
  attn::CompiledKernel kernel =
      attn::compileSpec(spec(128, "bf16", "#attn.no_mask"), "k.mlir");
  // attn-tile's heuristic for head dim 128 (two consumer warpgroups and one
  // producer, 128 x 128 tiles) and attn-plan-smem's layout: Q 32 KiB, two
  // K and two V stages of 32 KiB, O staging 32 KiB, 10 barriers, plus 1 KiB
  // of alignment slack.
  CHECK(kernel.launch.blockM == 128);
  CHECK(kernel.launch.blockN == 128);
  CHECK(kernel.launch.threadsPerBlock == 384);
  CHECK(kernel.launch.sharedMemoryBytes == 32768 + 4 * 32768 + 32768 + 10 * 8 + 1024);
  CHECK(kernel.launch.headDim == 128);
  // Unmasked: a persistent grid of one block per SM.
  CHECK(kernel.launch.persistentBlocksPerSm == 1);
  CHECK(kernel.launch.qHeads == 8);
  CHECK(kernel.launch.kvHeads == 2);
  CHECK(kernel.launch.scale == Approx(1.0 / std::sqrt(128.0)));
  CHECK(kernel.launch.automaticWorkOrder == 0);
}

TEST_CASE("a compiled mask_mod kernel takes the automatic work order", "[codegen]") {
  // After attn-lower-mods the region is an outlined function: the launch
  // config must still see the mask_mod.
  attn::CompiledKernel kernel = attn::compileSpec(
      "attn.kernel @k problem = #attn.problem<q_heads = 8, kv_heads = 8, head_dim = 128, "
      "element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax mask_mod {\n"
      "^bb0(%b: index, %h: index, %q: index, %kv: index):\n"
      "  %global = arith.constant 64 : index\n"
      "  %keep = arith.cmpi slt, %q, %global : index\n"
      "  attn.yield %keep : i1\n"
      "}\n",
      "k.mlir");
  CHECK(kernel.launch.automaticWorkOrder == 1);
  std::string ptx(kernel.binary.begin(), kernel.binary.end());
  CHECK(ptx.find(".entry " ATTN_WORK_ORDER_KERNEL_NAME) != std::string::npos);
}

namespace {
/// `text` as the body of an MLIR string literal.
std::string mlirStringBody(const std::string &text) {
  std::string escaped;
  for (char c : text) {
    if (c == '\n')
      escaped += "\\0A";
    else if (c == '"' || c == '\\')
      escaped += std::string("\\") + c;
    else
      escaped += c;
  }
  return escaped;
}

std::string scaledByCaptureSpec(const std::string &kernelName, const std::string &captureName) {
  return "attn.kernel @\"" + mlirStringBody(kernelName) +
         "\" problem = #attn.problem<q_heads = 8, kv_heads = 8, head_dim = 128, "
         "element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.softmax "
         "captures = [#attn.capture<\"" + mlirStringBody(captureName) + "\", f32, [q_heads]>] "
         "score_mod {\n"
         "^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %c: memref<?xf32>):\n"
         "  %w = memref.load %c[%h] : memref<?xf32>\n"
         "  %r = arith.mulf %s, %w : f32\n"
         "  attn.yield %r : f32\n"
         "}\n";
}
} // namespace

TEST_CASE("hostile names in a spec never reach the CUDA source unescaped", "[codegen]") {
  // A kernel symbol that would close the header comment, start a
  // preprocessor line and open a string if it were pasted into the source:
  // the kernel compiles with NVRTC and none of it appears verbatim (the
  // header comment shows the name with such characters replaced).
  std::string hostileKernel = "k */ int injected_decl; /*\n#error injected_directive\n\"";
  attn::CompiledKernel kernel =
      attn::compileSpec(scaledByCaptureSpec(hostileKernel, "scale"), "hostile.mlir");
  CHECK(kernel.name == hostileKernel);
  INFO(kernel.cudaSource.substr(0, 400));
  for (const char *fragment : {"*/ int injected_decl;", "\n#error injected_directive", "/*\n"})
    CHECK(kernel.cudaSource.find(fragment) == std::string::npos);
  std::string ptx(kernel.binary.begin(), kernel.binary.end());
  CHECK(ptx.find(".entry attn_fwd_kernel") != std::string::npos);

  // Capture names must be identifiers; anything else is a diagnostic.
  REQUIRE_THROWS_WITH(
      attn::compileSpec(scaledByCaptureSpec("k", "c\"); int injected_capture; //"),
                        "hostile.mlir"),
      Catch::Contains("hostile.mlir:1:") && Catch::Contains("must be an identifier"));
}

namespace {

// The backward's functions of one kernel, already lowered: capture c of
// rank 1 and learnable; `fullExtra` adds parameters to the score function,
// `vjpBody` is the vector-Jacobian product's, `attributes` the kernel's.
std::string loweredBackward(const std::string &fullExtra, const std::string &vjpBody,
                            const std::string &attributes) {
  const std::string capture = "!emitc.opaque<\"attn_dev::Capture<float, 1>\">";
  const std::string gradient = "!emitc.opaque<\"attn_dev::CaptureGradient<1> &\">";
  const std::string pair = "%b: !emitc.size_t, %h: !emitc.size_t, %q: !emitc.size_t, "
                           "%kv: !emitc.size_t";
  return "emitc.func @attn_score_mod_full_0(%s: f32, " + pair + ", %t: " + capture +
         ", %u: " + capture + fullExtra + ") -> f32 {\n  emitc.return %s : f32\n}\n" +
         "emitc.func @attn_score_mod_full_0_diag_0(%b: !emitc.size_t, %h: !emitc.size_t, %d: "
         "!emitc.size_t, %t: " + capture + ", %u: " + capture + ") -> f32 {\n" +
         "  %v = emitc.call_opaque \"attn_dev::loadCapture\"(%t, %d) : (" + capture +
         ", !emitc.size_t) -> f32\n  emitc.return %v : f32\n}\n" +
         "emitc.func @attn_score_mod_vjp_0(%dy: f32, %s: f32, " + pair + ", %t: " + capture +
         ", %u: " + capture + ", %gt: " + gradient + ", %gu: " + gradient + ") -> f32 {\n" +
         vjpBody + "  emitc.return %dy : f32\n}\n" +
         "attn.kernel @k problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 128, "
         "element_type = bf16> mask = #attn.causal<bottom_right> normalizer = #attn.softmax\n"
         "    captures = [#attn.capture<\"t\", f32, [?], grad>, #attn.capture<\"u\", f32, [?], "
         "grad>]\n    attributes {" + attributes + "}\n";
}

// Whether `step` (a kernel op to a FailureOr) takes the kernel of `text`,
// and its diagnostics.
template <typename Step>
std::pair<bool, std::string> runOnKernel(const std::string &text, const Step &step) {
  mlir::DialectRegistry registry = attn::test::SpecContext::makeRegistry();
  registry.insert<mlir::emitc::EmitCDialect>();
  attn::test::SpecContext spec(registry);
  attn::test::DiagnosticLog log(spec.context);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(text, &spec.context);
  INFO(text << log.text);
  REQUIRE(module);
  auto kernels = module->getOps<mlir::attn::KernelOp>();
  REQUIRE(!kernels.empty());
  const bool taken = mlir::succeeded(step(*kernels.begin()));
  return {taken, log.text};
}

// Whether planBackward takes the kernel of `text`, and its diagnostics.
std::pair<bool, std::string> planLowered(const std::string &text) {
  return runOnKernel(text, [](mlir::attn::KernelOp kernel) {
    return attn::planBackward(kernel, attn::CompileOptions());
  });
}

} // namespace

TEST_CASE("the backward's emitter refuses lowered functions the kernel cannot take",
          "[codegen][backward][mods]") {
  const std::string functions =
      "backward_score_mod_fn = @attn_score_mod_full_0, "
      "backward_score_mod_vjp_fn = @attn_score_mod_vjp_0";
  const std::string diagonals =
      ", backward_score_mod_diagonal_fns = [@attn_score_mod_full_0_diag_0]";
  // The kernel keeps one set of diagonal sums: a per-diagonal addition
  // into one of two learnable captures has nowhere to go.
  const std::string perDiagonal =
      "  %d = emitc.sub %q, %kv : (!emitc.size_t, !emitc.size_t) -> !emitc.size_t\n"
      "  emitc.call_opaque \"attn_dev::accumulateDiagonalGradient\"(%gt, %dy, %d) : "
      "(!emitc.opaque<\"attn_dev::CaptureGradient<1> &\">, f32, !emitc.size_t) -> ()\n";
  // The functions as attn-lower-mods leaves them are taken.
  const auto [planned, diagnostics] =
      planLowered(loweredBackward(", %staged: f32", "", functions + diagonals));
  INFO(diagnostics);
  CHECK(planned);
  const auto refused = [](const std::string &text) {
    const auto [planned, diagnostics] = planLowered(text);
    CHECK_FALSE(planned);
    return diagnostics;
  };
  CHECK_THAT(refused(loweredBackward("", perDiagonal, functions)),
             Catch::Contains("adds per diagonal into one of 2 learnable captures; the backward "
                             "sums one capture by diagonal"));
  // Diagonal functions belong to a score function.
  CHECK_THAT(refused(loweredBackward(
                 "", "", "backward_score_mod_vjp_fn = @attn_score_mod_vjp_0" + diagonals)),
             Catch::Contains("has backward score_mod diagonal functions but no backward "
                             "score_mod function"));
  // The score function takes each diagonal value after the captures.
  CHECK_THAT(refused(loweredBackward("", "", functions + diagonals)),
             Catch::Contains("backward mod function must take 8 arguments and return one value"));
}

TEST_CASE("the backward's emitter refuses diagonal sums of a kernel that adds none by diagonal",
          "[codegen][backward][mods]") {
  // attn-plan-smem's head-dim-128 plan with diagonal sums, written out.
  const std::string buffers =
      "#attn.buffer<\"k\", offset = 0, size = 32768, align = 1024, swizzle = 128>, "
      "#attn.buffer<\"v\", offset = 32768, size = 32768, align = 1024, swizzle = 128>, "
      "#attn.buffer<\"q\", offset = 65536, size = 32768, align = 1024, swizzle = 128, slots = "
      "2>, #attn.buffer<\"do\", offset = 98304, size = 32768, align = 1024, swizzle = 128, "
      "slots = 2>, #attn.buffer<\"lse\", offset = 131072, size = 512, align = 16, swizzle = 0, "
      "slots = 2>, #attn.buffer<\"delta\", offset = 131584, size = 512, align = 16, swizzle = "
      "0, slots = 2>, #attn.buffer<\"ds\", offset = 132096, size = 32768, align = 1024, swizzle "
      "= 128, slots = 2>, #attn.buffer<\"dq_staging\", offset = 164864, size = 32768, align = "
      "16, swizzle = 0, slots = 2>, #attn.buffer<\"dq_turns\", offset = 197632, size = 4, align "
      "= 4, swizzle = 0>, ";
  const std::string sums =
      "#attn.buffer<\"diagonal_sums\", offset = 197648, size = 6144, align = 16, swizzle = 0>, ";
  const std::string barriers =
      "#attn.buffer<\"barriers\", offset = 203792, size = 72, align = 8, swizzle = 0, slots = "
      "9>";
  const auto plan = [&](const std::string &all) {
    return "backward_score_mod_fn = @attn_score_mod_full_0, "
           "backward_score_mod_vjp_fn = @attn_score_mod_vjp_0, "
           "backward_tile = #attn.tile<block_m = 64, block_n = 128, stages = 2, "
           "consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, "
           "producer_registers = 24>, backward_smem = #attn.smem_plan<total = 203864, buffers = [" +
           all + "]>";
  };
  const auto build = [](const std::string &text) {
    return runOnKernel(text, [](mlir::attn::KernelOp kernel) {
      return mlir::attn::buildBackwardKernelConfig(kernel);
    });
  };
  // The same plan without the sums is taken.
  const auto [taken, takenLog] = build(loweredBackward("", "", plan(buffers + barriers)));
  INFO(takenLog);
  CHECK(taken);
  const auto [refused, refusal] = build(loweredBackward("", "", plan(buffers + sums + barriers)));
  CHECK_FALSE(refused);
  CHECK_THAT(refusal, Catch::Contains("backward shared-memory plan has diagonal sums, but the "
                                      "backward adds no capture gradient by diagonal"));
}
