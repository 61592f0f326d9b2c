// SpecBuilder's expression API without a GPU: variants built in C++ evaluate
// like the shipped example specs written as MLIR (both read back through the
// CPU interpreter of their regions), affine masks built in C++ are proved by
// attn-classify-blocks like written ones, and every misuse is an error that
// names it.

#include "attn/Compiler/Compiler.h"
#include "attn/Compiler/Jit.h"
#include "attn/runtime/Error.h"

#include "SpecTestSupport.h"
#include "TestSupport.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

using namespace attn;
using Catch::Matchers::Contains;

namespace {

std::string exampleText(const std::string &name) {
  return test::readFile(std::string(ATTNC_DOCS_EXAMPLES_DIR) + "/" + name + ".mlir");
}

JitOptions noDiskCache() {
  JitOptions options;
  options.diskCache = DiskCacheOptions{};
  options.diskCache->directory = "";
  options.tuningDatabase = "";
  return options;
}

const Expr b = Expr::batch(), h = Expr::head(), q = Expr::qIdx(), kv = Expr::kvIdx(),
           s = Expr::score();

struct BuiltExample {
  const char *example;
  Spec spec;
};

// The examples of docs/examples written with the builder.
std::vector<BuiltExample> builtExamples() {
  auto base = [](const char *name) { return SpecBuilder(name).heads(16).headDim(128); };
  Capture slopes("slopes", DType::F32, {CaptureExtent::qHeads()});
  Capture bias("bias", DType::F32, {CaptureExtent::qHeads(), CaptureExtent::any()});
  Capture document("document", DType::I32, {CaptureExtent::batch(), CaptureExtent::seqlenK()});
  Capture randomBlocks("random_blocks", DType::I32, {CaptureExtent::any(), CaptureExtent::any()});
  return {
      {"prefix_lm_hd128", base("prefix_lm_hd128").maskMod(kv < 2048 || kv <= q)},
      {"longformer_hd128",
       base("longformer_hd128").maskMod((kv < q + 256 && q < kv + 256) || (q < 64 || kv < 64))},
      {"alibi_causal_hd128",
       base("alibi_causal_hd128").causal().capture(slopes).scoreMod(s - slopes(h) * (q - kv))},
      {"softcap_causal_hd128",
       base("softcap_causal_hd128").causal().scoreMod(tanh(s * 0.02f) * 50.0f)},
      {"relpos_bias_causal_hd128", base("relpos_bias_causal_hd128")
                                       .causal()
                                       .capture(bias)
                                       .scoreMod(s + bias(h, q + 8191 - kv))},
      {"document_mask_hd128", base("document_mask_hd128")
                                  .causal(CausalAlign::TopLeft)
                                  .capture(document)
                                  .maskMod(document(b, q) == document(b, kv))},
      {"chunked_local_hd128",
       base("chunked_local_hd128").causal(CausalAlign::TopLeft).maskMod(q / 1024 == kv / 1024)},
      {"bigbird_hd128",
       base("bigbird_hd128")
           .capture(randomBlocks)
           .maskMod(((kv < q + 192 && q < kv + 192) || (q < 64 || kv < 64)) ||
                    randomBlocks(q / 64, kv / 64) != 0)},
  };
}

// Captures for every example's declaration at batch 2, S = 4100 (the ? of
// bias is 2 * S, of random_blocks S / 64 + 1 both ways).
struct Captures {
  std::vector<float> f32;
  std::vector<int32_t> i32;
  std::vector<HostCapture> host;
};

Captures capturesFor(const std::string &example, int64_t batch, int64_t seqlen) {
  Captures captures;
  std::mt19937 random(7);
  if (example == "alibi_causal_hd128" || example == "relpos_bias_causal_hd128") {
    std::vector<int64_t> shape = example == "alibi_causal_hd128"
                                     ? std::vector<int64_t>{16}
                                     : std::vector<int64_t>{16, 2 * seqlen};
    int64_t count = 1;
    for (int64_t extent : shape)
      count *= extent;
    std::normal_distribution<float> normal(0.0f, 0.5f);
    for (int64_t i = 0; i < count; ++i)
      captures.f32.push_back(normal(random));
    captures.host.push_back(HostCapture{captures.f32.data(), DType::F32, shape});
  } else if (example == "document_mask_hd128" || example == "bigbird_hd128") {
    bool document = example == "document_mask_hd128";
    int64_t blocks = seqlen / 64 + 1;
    std::vector<int64_t> shape =
        document ? std::vector<int64_t>{batch, seqlen} : std::vector<int64_t>{blocks, blocks};
    std::uniform_int_distribution<int32_t> pick(0, document ? 3 : 9);
    int32_t id = 0;
    for (int64_t i = 0; i < shape[0] * shape[1]; ++i) {
      if (document && pick(random) == 0)
        ++id; // runs of equal document ids
      captures.i32.push_back(document ? id : (pick(random) == 0 ? 1 : 0));
    }
    captures.host.push_back(HostCapture{captures.i32.data(), DType::I32, shape});
  }
  return captures;
}

/// Whether the whole pipeline proves the mask of spec text per tile.
bool provesMaskTiles(const std::string &text) {
  test::SpecContext spec;
  mlir::OwningOpRef<mlir::ModuleOp> module = spec.parse(text);
  CompileOptions options;
  REQUIRE(mlir::succeeded(runCompilePipeline(*module, options)));
  // attn-lower-mods puts the region functions before the kernel.
  auto kernels = module->getBody()->getOps<mlir::attn::KernelOp>();
  REQUIRE(std::distance(kernels.begin(), kernels.end()) == 1);
  return static_cast<bool>((*kernels.begin()).getMaskTileFormulaAttr());
}

} // namespace

TEST_CASE("builder expressions evaluate like the example specs written as MLIR", "[builder]") {
  Compiler compiler(noDiskCache());
  const int64_t batch = 2, seqlen = 4100;
  // Positions around the examples' constants (64, 192, 256, 1024, 2048,
  // 8191) and the ends of the sequence.
  std::vector<int64_t> positions = {0, 1, 63, 64, 65, 191, 192, 255, 256, 257, 1023, 1024, 1025,
                                    2047, 2048, 2049, 4000, seqlen - 1};
  std::mt19937 random(11);
  std::uniform_int_distribution<int64_t> anywhere(0, seqlen - 1);
  for (int i = 0; i < 30; ++i)
    positions.push_back(anywhere(random));

  for (const BuiltExample &built : builtExamples()) {
    INFO(built.example);
    std::string printed = compiler.printSpec(built.spec);
    Captures captures = capturesFor(built.example, batch, seqlen);
    reference::Problem written = referenceProblemFromSpec(exampleText(built.example), batch,
                                                          seqlen, seqlen, captures.host);
    reference::Problem fromBuilder =
        referenceProblemFromSpec(printed, batch, seqlen, seqlen, captures.host);
    REQUIRE(static_cast<bool>(written.maskMod) == static_cast<bool>(fromBuilder.maskMod));
    REQUIRE(static_cast<bool>(written.scoreMod) == static_cast<bool>(fromBuilder.scoreMod));
    CHECK(written.mask.kind == fromBuilder.mask.kind);
    CHECK(written.mask.alignment == fromBuilder.mask.alignment);
    int64_t kept = 0, compared = 0;
    for (int64_t bi = 0; bi < batch; ++bi)
      for (int64_t hi : {0, 5, 15})
        for (int64_t qi : positions)
          for (int64_t ki : positions) {
            INFO("b=" << bi << " h=" << hi << " q=" << qi << " kv=" << ki);
            if (written.maskMod) {
              bool keep = written.maskMod(bi, hi, qi, ki);
              REQUIRE(fromBuilder.maskMod(bi, hi, qi, ki) == keep);
              kept += keep;
            }
            if (written.scoreMod)
              for (double score : {-3.5, 0.0, 0.75, 41.0}) {
                double expected = written.scoreMod(score, bi, hi, qi, ki);
                REQUIRE(fromBuilder.scoreMod(score, bi, hi, qi, ki) == expected);
              }
            ++compared;
          }
    // The masks keep some pairs and drop others at these positions.
    if (written.maskMod) {
      CHECK(kept > 0);
      CHECK(kept < compared);
    }
  }
}

TEST_CASE("affine masks built in C++ are proved per tile like written ones", "[builder]") {
  Compiler compiler(noDiskCache());
  for (const BuiltExample &built : builtExamples()) {
    INFO(built.example);
    bool written = provesMaskTiles(exampleText(built.example));
    CHECK(provesMaskTiles(compiler.printSpec(built.spec)) == written);
  }
  // The three affine ones are among them.
  CHECK(provesMaskTiles(exampleText("chunked_local_hd128")));
  CHECK(provesMaskTiles(exampleText("prefix_lm_hd128")));
  CHECK(provesMaskTiles(exampleText("longformer_hd128")));
}

TEST_CASE("built variants compile to CUDA through the whole pipeline", "[builder]") {
  Compiler compiler(noDiskCache());
  for (const BuiltExample &built : builtExamples()) {
    INFO(built.example);
    std::vector<std::string> sources =
        emitCudaSources(compiler.printSpec(built.spec), std::string(built.example) + ".mlir");
    REQUIRE(sources.size() == 1);
    CHECK(sources[0].find("attn_fwd_kernel") != std::string::npos);
  }
}

TEST_CASE("expression type errors name the operator and the types", "[builder]") {
  CHECK_THROWS_WITH(q + Expr::boolean(true), Contains("'+'") && Contains("(index, bool)"));
  CHECK_THROWS_WITH(q < Expr::boolean(false), Contains("'<'"));
  CHECK_THROWS_WITH(q && kv, Contains("'&&'") && Contains("needs bool operands"));
  CHECK_THROWS_WITH(!s, Contains("'!'") && Contains("(f32)"));
  CHECK_THROWS_WITH(select(q, s, s), Contains("'select'") && Contains("bool condition"));
  CHECK_THROWS_WITH(select(q < 1, s, q < 2), Contains("branches of one type"));
  CHECK_THROWS_WITH(tanh(q < 1), Contains("'tanh'"));
  // Mixed index and f32 arithmetic converts the index side.
  CHECK((q - kv * 0.5).type() == ExprType::F32);
  CHECK((q / 2).type() == ExprType::Index);
  CHECK((q == 2.0).type() == ExprType::Bool);
  CHECK(select(q < 1, s, q).type() == ExprType::F32);

  Capture table("table", DType::F32, {CaptureExtent::fixed(4), CaptureExtent::any()});
  CHECK_THROWS_WITH(table(q), Contains("'table'") && Contains("1 indices") &&
                                  Contains("2 extents"));
  CHECK_THROWS_WITH(table(q, s), Contains("'table'") && Contains("index expressions"));
  CHECK(table(h, q - kv).type() == ExprType::F32);
  Capture ids("ids", DType::I32, {CaptureExtent::seqlenK()});
  CHECK(ids(kv).type() == ExprType::Index);

  CHECK_THROWS_WITH(SpecBuilder("k").maskMod(q - kv), Contains("maskMod") &&
                                                          Contains("needs a bool expression"));
  CHECK_THROWS_WITH(SpecBuilder("k").maskMod(s > 0), Contains("score is not known to a mask"));
  CHECK_THROWS_WITH(SpecBuilder("k").scoreMod(s > 0), Contains("scoreMod") && Contains("bool"));
}

TEST_CASE("spec errors in regions and captures are diagnostics", "[builder]") {
  Compiler compiler(noDiskCache());
  Capture undeclared("bias", DType::F32, {CaptureExtent::qHeads()});
  CHECK_THROWS_WITH(compiler.printSpec(SpecBuilder("k").heads(4).headDim(64).scoreMod(
                        s + undeclared(h))),
                    Contains("score_mod reads capture 'bias'") &&
                        Contains("does not declare"));
  Capture declaredI32("bias", DType::I32, {CaptureExtent::qHeads()});
  CHECK_THROWS_WITH(compiler.printSpec(SpecBuilder("k")
                                           .heads(4)
                                           .headDim(64)
                                           .capture(declaredI32)
                                           .scoreMod(s + undeclared(h))),
                    Contains("as f32 of rank 1") && Contains("declares i32 of rank 1"));
  Capture halfPrecision("half", DType::BF16, {CaptureExtent::qHeads()});
  CHECK_THROWS_WITH(compiler.printSpec(SpecBuilder("k").heads(4).headDim(64).capture(
                        halfPrecision)),
                    Contains("capture 'half': unsupported element type"));
  Capture badName("not a name", DType::F32, {CaptureExtent::qHeads()});
  CHECK_THROWS_WITH(compiler.printSpec(SpecBuilder("k").heads(4).headDim(64).capture(badName)),
                    Contains("must be an identifier"));
  Capture rank4("deep", DType::F32,
                {CaptureExtent::any(), CaptureExtent::any(), CaptureExtent::any(),
                 CaptureExtent::any()});
  CHECK_THROWS_WITH(compiler.printSpec(SpecBuilder("k").heads(4).headDim(64).capture(rank4)),
                    Contains("rank must be 1 to 3"));
  Capture zero("zero", DType::F32, {CaptureExtent::fixed(0)});
  CHECK_THROWS_WITH(compiler.printSpec(SpecBuilder("k").heads(4).headDim(64).capture(zero)),
                    Contains("must be positive"));
  // A Spec filled in directly can put the score in a mask.
  Spec direct = SpecBuilder("k").heads(4).headDim(64);
  direct.maskMod = s > 0;
  CHECK_THROWS_WITH(compiler.printSpec(direct), Contains("only known to score_mod"));
}

TEST_CASE("printSpec prints an op that fails the verifier when asked to", "[builder]") {
  Compiler compiler(noDiskCache());
  // Retention needs a causal mask: the op builds, and the verifier refuses it.
  Spec spec = SpecBuilder("unmasked_retention")
                  .heads(4)
                  .headDim(64)
                  .normalizer(Normalizer::retention({0.9, 0.9, 0.9, 0.9}));
  CHECK_THROWS_WITH(compiler.printSpec(spec), Contains("causal"));
  std::string printed = compiler.printSpec(spec, SpecPrinting::AsBuilt);
  CHECK_THAT(printed, Contains("attn.kernel @unmasked_retention") &&
                          Contains("#attn.no_mask") && Contains("#attn.retention"));
  // An attribute the builder cannot make leaves nothing to print.
  Spec noOp = SpecBuilder("k").heads(4, 3).headDim(64);
  CHECK_THROWS_WITH(compiler.printSpec(noOp, SpecPrinting::AsBuilt),
                    Contains("kv_heads (3) must divide q_heads (4)"));
}

TEST_CASE("shared subexpressions are built, fingerprinted and lowered once", "[builder]") {
  // x_{i+1} = x_i + x_i: 60 levels, 2^60 paths, 61 nodes.
  Expr x = q;
  for (int i = 0; i < 60; ++i)
    x = x + x;
  std::string fingerprint = exprFingerprint(x);
  CHECK(std::count(fingerprint.begin(), fingerprint.end(), '\n') == 61);
  Compiler compiler(noDiskCache());
  std::string printed =
      compiler.printSpec(SpecBuilder("k").heads(4).headDim(64).maskMod(x >= kv));
  size_t adds = 0;
  for (size_t at = printed.find("arith.addi"); at != std::string::npos;
       at = printed.find("arith.addi", at + 1))
    ++adds;
  CHECK(adds == 60);
  CHECK_FALSE(emitCudaSources(printed, "shared.mlir").empty());

  // The same for a mask of two comparisons each level combines both ways:
  // 2^40 inequalities with repetition. Each value is analysed once, and the
  // mask is not classified (too many inequalities to test per tile), so the
  // kernel tests it per pair.
  auto interleaved = [&](int levels) {
    Expr a = q >= kv, b = kv >= 1;
    for (int i = 0; i < levels; ++i) {
      Expr both = a && b;
      b = a || b;
      a = both;
    }
    return compiler.printSpec(SpecBuilder("k").heads(4).headDim(64).maskMod(a));
  };
  CHECK_FALSE(provesMaskTiles(interleaved(40)));
  // A few levels stay within the limit and are proved.
  CHECK(provesMaskTiles(interleaved(4)));

  // Too deep to lower without recursion limits: refused when built.
  Expr chain = q;
  CHECK_THROWS_WITH(
      [&] {
        for (int i = 0; i < 5000; ++i)
          chain = chain + 1;
      }(),
      Contains("nested deeper than 2000"));
}

TEST_CASE("spec fingerprints tell expressions and captures apart", "[builder]") {
  auto base = [] { return SpecBuilder("k").heads(4).headDim(64); };
  Capture a("a", DType::F32, {CaptureExtent::qHeads()});
  Capture a2("a", DType::F32, {CaptureExtent::kvHeads()});
  Capture ai("a", DType::I32, {CaptureExtent::qHeads()});
  std::vector<Spec> specs = {
      base(),
      base().maskMod(q >= kv),
      base().maskMod(q > kv),
      base().maskMod(kv <= q),
      base().maskMod(q >= kv + 1),
      base().maskMod(q >= kv + 2),
      base().scoreMod(s * 0.5f),
      base().scoreMod(s * 0.25f),
      base().scoreMod(s * 0.5f).maskMod(q >= kv),
      base().capture(a),
      base().capture(a2),
      base().capture(ai),
      base().capture(a).scoreMod(s + a(h)),
  };
  std::set<std::string> fingerprints;
  for (const Spec &spec : specs)
    fingerprints.insert(spec.fingerprint());
  CHECK(fingerprints.size() == specs.size());
  // Rebuilt from scratch, the same expression has the same fingerprint.
  CHECK(Spec(base().maskMod(q / 64 == kv / 64)).fingerprint() ==
        Spec(base().maskMod(Expr::qIdx() / 64 == Expr::kvIdx() / 64)).fingerprint());
}
