// The attention variants shipped in docs/examples (user mask_mod / score_mod
// regions, captured buffers) against the CPU reference, which evaluates the
// same regions with the interpreter: prefix-LM, ALiBi, soft-capping,
// Longformer, document masking, relative-position bias, chunked local
// attention and BigBird, on lengths that are not tile multiples, Sq != Sk,
// GQA, and rows that no key survives.
#include <catch2/catch.hpp>

#include "AttnHarness.h"
#include "LoadedKernel.h"
#include "VariantCaptures.h"
#include "attn/Compiler/Compiler.h"
#include "attn/Compiler/Jit.h"

#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <sstream>

using namespace attn;
using attn::gputest::exampleWithHeads;
using attn::gputest::kNothing;
using attn::gputest::kTileCoverage;
using attn::gputest::kTileKeyBits;
using attn::gputest::kWorkOrder;
using attn::gputest::LoadedKernel;
using attn::gputest::loadKernel;
using attn::gputest::referenceTileCoverage;
using attn::gputest::replaceAll;
using attn::gputest::CaptureMaker;
using attn::gputest::addDocuments;
using attn::gputest::addSlopes;
using attn::gputest::normalBiasTable;

namespace {

// `prepared` (gputest::Prepared) builds the tile coverage, checked against
// the reference's, and the work order, checked against the reference's costs.
void runVariant(const std::string &spec, const harness::Shape &shape, const CaptureMaker &captures,
                uint64_t seed, unsigned prepared = kNothing, const CompileOptions &options = {}) {
  LoadedKernel &kernel = loadKernel(spec, options);
  const AttnLaunchConfig &launch = kernel.compiled.launch;
  harness::ForwardProblem data(launch, shape, seed);
  gputest::addCaptures(data, launch, shape, captures, seed);
  data.poisonOutputs();
  AttnForwardArgs args = data.args();
  gputest::PreparedBuffers buffers = gputest::prepare(kernel, args, prepared);
  launchForward(kernel.function, launch, args, nullptr);
  ATTN_CU_CHECK(cuCtxSynchronize);

  std::vector<HostCapture> host = gputest::hostCaptures(data);
  reference::Problem problem =
      referenceProblemFromSpec(spec, shape.batch, shape.seqlenQ, shape.seqlenK, host);
  if (prepared & kTileCoverage) {
    const std::vector<uint8_t> coverage = referenceTileCoverage(problem, launch);
    CHECK(buffers.coverage.download<uint8_t>() == coverage);
    if (prepared & kTileKeyBits)
      gputest::checkTileKeyBits(buffers.keyBits, coverage,
                                gputest::referenceTileKeyWords(problem, launch, coverage));
  }
  if (prepared & kWorkOrder)
    CHECK(gputest::downloadWorkOrder(buffers.workOrder, launch, args) ==
          workOrderOf(gputest::referenceWorkCosts(problem, launch), WorkOrderPolicy::LongestFirst));
  std::ostringstream what;
  what << "spec: " << spec << "\nB=" << shape.batch << " Sq=" << shape.seqlenQ
       << " Sk=" << shape.seqlenK;
  gputest::checkComparison(harness::compareWithReference(problem, data, launch.dtype),
                           what.str());
}

// A JIT kernel of `spec`, compiled with the memory cache only.
Kernel compileWithoutDiskCache(const std::string &spec, const std::string &name) {
  JitOptions options;
  options.diskCache = DiskCacheOptions{};
  return Compiler(options).compile(spec, name);
}

} // namespace

TEST_CASE("prefix-LM matches the reference", "[gpu][variants]") {
  std::string spec = exampleWithHeads("prefix_lm_hd128.mlir");
  runVariant(spec, {1, 2300, 2300, false}, {}, 1);
  runVariant(spec, {2, 300, 2200, false}, {}, 2);
}

TEST_CASE("ALiBi with captured slopes matches the reference", "[gpu][variants]") {
  std::string spec = exampleWithHeads("alibi_causal_hd128.mlir");
  runVariant(spec, {1, 1000, 1000, false}, addSlopes, 3);
  runVariant(spec, {2, 77, 1000, true}, addSlopes, 4);
  // The other head dims and f16: the same regions in other kernel plans.
  for (const char *headDim : {"head_dim = 64", "head_dim = 256"})
    runVariant(replaceAll(spec, "head_dim = 128", headDim), {1, 513, 700, false}, addSlopes, 5);
  runVariant(replaceAll(spec, "bf16", "f16"), {1, 513, 700, false}, addSlopes, 6);
  // Planned for 8192 keys: 160-key tiles with one softmax chain.
  CompileOptions wide;
  wide.tuningShape = "2,8192,8192";
  REQUIRE(loadKernel(spec, wide).compiled.launch.blockN == 160);
  runVariant(spec, {1, 1000, 1300, false}, addSlopes, 7, kNothing, wide);
}

TEST_CASE("score_mod terms that move a whole row go to the log-sum-exp", "[gpu][variants]") {
  // s + bias[h] + 1 - 0.75 q + 0.5 kv: the per-head bias, the constant and
  // the query's term leave the scores (attn-lower-mods' row offset) and
  // must come back in the log-sum-exp; rows that no key reaches keep -inf.
  std::string spec = R"(attn.kernel @row_terms
    problem = #attn.problem<q_heads = 4, kv_heads = 2, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.softmax
    captures = [#attn.capture<"head_bias", f32, [q_heads]>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?xf32>):
      %hb = memref.load %bias[%h] : memref<?xf32>
      %one = arith.constant 1.0 : f32
      %qw = arith.constant -0.75 : f32
      %kw = arith.constant 0.5 : f32
      %qi = arith.index_cast %q : index to i32
      %qf = arith.sitofp %qi : i32 to f32
      %kvi = arith.index_cast %kv : index to i32
      %kvf = arith.sitofp %kvi : i32 to f32
      %qterm = arith.mulf %qw, %qf : f32
      %kterm = arith.mulf %kw, %kvf : f32
      %a = arith.addf %s, %hb : f32
      %b1 = arith.addf %a, %one : f32
      %c = arith.addf %b1, %qterm : f32
      %r = arith.addf %c, %kterm : f32
      attn.yield %r : f32
    }
)";
  REQUIRE(loadKernel(spec).compiled.cudaSource.find("kHasScoreRowOffset = true") !=
          std::string::npos);
  runVariant(spec, {1, 700, 700, false}, addSlopes, 46);
  runVariant(spec, {2, 600, 150, true}, addSlopes, 47); // rows with no key
  runVariant(replaceAll(replaceAll(spec, "bf16", "f16"), "head_dim = 128", "head_dim = 64"),
             {1, 333, 517, false}, addSlopes, 48);
  runVariant(replaceAll(spec, "head_dim = 128", "head_dim = 256"), {1, 300, 300, false},
             addSlopes, 49);
  // A head whose bias is -inf masks every row of it through the offset.
  auto maskedHead = [](harness::ForwardProblem &data, const AttnLaunchConfig &launch,
                       const harness::Shape &, std::mt19937_64 &) {
    std::vector<float> bias(launch.qHeads, 0.25f);
    bias[1] = -std::numeric_limits<float>::infinity();
    data.addCapture(bias, {launch.qHeads});
  };
  runVariant(spec, {2, 300, 400, false}, maskedHead, 50);
}

TEST_CASE("ALiBi keeps its accuracy at 65536 keys", "[gpu][variants]") {
  // The region keeps s + slope * kv per pair and the row's -slope * q goes
  // to the log-sum-exp; kv is measured from an origin near the diagonal so
  // that neither rounds relative to the position (slopes 0.5 and 1, rows
  // sampled across the sequence: the reference computes only those).
  std::string spec = exampleWithHeads("alibi_causal_hd128.mlir", "q_heads = 2, kv_heads = 1");
  LoadedKernel &kernel = loadKernel(spec);
  const AttnLaunchConfig &launch = kernel.compiled.launch;
  const harness::Shape shape{1, 65536, 65536, false};
  harness::ForwardProblem data(launch, shape, 51);
  std::mt19937_64 random(51);
  addSlopes(data, launch, shape, random);
  data.poisonOutputs();
  launchForward(kernel.function, launch, data.args(), nullptr);
  ATTN_CU_CHECK(cuCtxSynchronize);
  reference::Problem problem = referenceProblemFromSpec(spec, shape.batch, shape.seqlenQ,
                                                        shape.seqlenK, gputest::hostCaptures(data));
  problem.rows = [](int64_t, int64_t, int64_t q) {
    return q % 4099 == 0 || q >= 65536 - 8 || q < 8;
  };
  harness::Comparison result = harness::compareWithReference(problem, data, launch.dtype);
  INFO("max|dO|=" << result.maxAbsError << " max|dLSE|=" << result.maxLseError
                  << "\nfirst violation: " << result.firstViolation);
  CHECK(result.nonFinite == 0);
  CHECK(result.toleranceViolations == 0);
  CHECK(result.maxLseError < 5e-4);
}

TEST_CASE("tanh soft-capping matches the reference", "[gpu][variants]") {
  std::string spec = exampleWithHeads("softcap_causal_hd128.mlir");
  // bf16 soft-capping runs on a fixed softmax base, which attn-tile plans
  // with three consumer warpgroups and 64-key tiles.
  const AttnLaunchConfig &launch = loadKernel(spec).compiled.launch;
  REQUIRE(launch.blockM == 192);
  REQUIRE(launch.blockN == 64);
  runVariant(spec, {1, 1000, 1000, false}, {}, 7);
  runVariant(spec, {1, 1000, 77, false}, {}, 8); // bottom-right: rows with no key
  runVariant(spec, {2, 333, 1201, true}, {}, 46);
  // Unmasked, on the persistent grid.
  std::string unmasked = replaceAll(spec, "#attn.causal<bottom_right>", "#attn.no_mask");
  REQUIRE(loadKernel(unmasked).compiled.launch.persistentBlocksPerSm == 1);
  runVariant(unmasked, {2, 450, 701, false}, {}, 47);
  // Beside a sliding window (local layers of Gemma 2): partial tiles on
  // both edges of the band.
  std::string windowed =
      replaceAll(spec, "#attn.causal<bottom_right>", "#attn.sliding_window<left = 100, right = 20>");
  REQUIRE(loadKernel(windowed).compiled.launch.blockM == 192);
  runVariant(windowed, {1, 700, 900, false}, {}, 48);
  // f16 P cannot hold the fixed-base softmax's range (its exponentials of
  // small scores underflowed to 0): the kernel keeps the running maximum.
  runVariant(replaceAll(spec, "bf16", "f16"), {2, 300, 531, true}, {}, 45);
}

TEST_CASE("a bounded score_mod whose scores all sit at the bottom of its range matches the "
          "reference", "[gpu][variants]") {
  // -50 * tanh(1000 + |s|): bounded by 50, so the softmax runs against a
  // fixed base, and every score is -50, the bottom of the range (O is the
  // mean of the visible values): against a base at the top of the range,
  // 50 log2(e) above, their exponentials would underflow to 0.
  std::string spec = R"(attn.kernel @bottom_of_range
    problem = #attn.problem<q_heads = 2, kv_heads = 1, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %offset = arith.constant 1000.0 : f32
      %cap = arith.constant -50.0 : f32
      %magnitude = math.absf %s : f32
      %x = arith.addf %magnitude, %offset : f32
      %t = math.tanh %x : f32
      %r = arith.mulf %t, %cap : f32
      attn.yield %r : f32
    }
)";
  runVariant(spec, {1, 700, 700, false}, {}, 27);
  runVariant(spec, {1, 300, 900, false}, {}, 28);
}

TEST_CASE("Longformer matches the reference", "[gpu][variants]") {
  std::string spec = exampleWithHeads("longformer_hd128.mlir");
  runVariant(spec, {1, 1100, 1100, false}, {}, 9);
  runVariant(spec, {1, 700, 1300, false}, {}, 10);
  // Three 64-row slices per query block: beyond the band, the global rows'
  // slice computes each key tile and the other two skip it.
  runVariant(replaceAll(spec, "head_dim = 128", "head_dim = 64"), {1, 1100, 1100, false}, {}, 11);
  // Longest first: the query block of the global rows, of each (batch,
  // head), starts before the band's.
  runVariant(spec, {2, 1100, 1100, false}, {}, 25, kWorkOrder);
}

TEST_CASE("document masking with captured ids matches the reference", "[gpu][variants]") {
  std::string spec = exampleWithHeads("document_mask_hd128.mlir");
  const CaptureMaker documents = addDocuments;
  runVariant(spec, {2, 1000, 1000, false}, documents, 11);
  runVariant(spec, {1, 1500, 1500, true}, documents, 12);
  // With the tile coverage built at run time (checked against the
  // reference's): empty tiles skipped, full ones untested per pair.
  runVariant(spec, {2, 1000, 1000, false}, documents, 21, kTileCoverage);
  runVariant(spec, {1, 700, 1300, false}, documents, 22, kTileCoverage | kWorkOrder);
  // With the partial tiles' key bits stored as well (checked against the
  // reference's): their pairs test a stored bit.
  runVariant(spec, {2, 1000, 1000, false}, documents, 26, kTileCoverage | kTileKeyBits);
  runVariant(spec, {1, 700, 1300, false}, documents, 27,
             kTileCoverage | kTileKeyBits | kWorkOrder);
}

TEST_CASE("stored key bits match the reference at every head dim and key tile width",
          "[gpu][variants]") {
  // The words of 128-row tiles at head dim 128, of 192-row tiles with three
  // consumers at 64, of 64-key tiles at 256 (16 bits a word), and of
  // 192-key tiles (64-bit words); each checked against the reference's
  // words, and the output against the reference's.
  std::string spec = exampleWithHeads("document_mask_hd128.mlir");
  int seed = 70;
  for (const char *headDim : {"head_dim = 64", "head_dim = 256"})
    runVariant(replaceAll(spec, "head_dim = 128", headDim), {2, 1000, 1300, false}, addDocuments,
               seed++, kTileCoverage | kTileKeyBits);
  CompileOptions wide;
  wide.tileOverride = "block_m=128,block_n=192,consumer_warpgroups=2";
  const std::string headDim64 = replaceAll(spec, "head_dim = 128", "head_dim = 64");
  REQUIRE(loadKernel(headDim64, wide).compiled.launch.blockN == 192);
  runVariant(headDim64, {2, 1000, 1300, false}, addDocuments, seed++,
             kTileCoverage | kTileKeyBits, wide);
  runVariant(headDim64, {1, 700, 500, false}, addDocuments, seed++,
             kTileCoverage | kTileKeyBits | kWorkOrder, wide);
}

TEST_CASE("relative-position bias from a captured table matches the reference",
          "[gpu][variants]") {
  std::string spec = exampleWithHeads("relpos_bias_causal_hd128.mlir");
  const CaptureMaker table = normalBiasTable(2 * 8192 - 1);
  runVariant(spec, {1, 1000, 1000, false}, table, 13);
  runVariant(spec, {1, 200, 900, false}, table, 14);
  // Head dim 256's plan has room for one staged value (one window per
  // consumer); head dim 64 stages it for three consumers.
  for (const char *headDim : {"head_dim = 256", "head_dim = 64"})
    runVariant(replaceAll(spec, "head_dim = 128", headDim), {1, 777, 1100, false}, table, 15);
  // Planned for 8192 keys: 160-key tiles, whose windows hold 223 diagonals,
  // with two softmax chains.
  CompileOptions wide;
  wide.tuningShape = "2,8192,8192";
  REQUIRE(loadKernel(spec, wide).compiled.launch.blockN == 160);
  runVariant(spec, {1, 1000, 1000, false}, table, 16, kNothing, wide);
  runVariant(spec, {2, 333, 1201, false}, table, 17, kNothing, wide);
}

TEST_CASE("score_mod values staged per diagonal match the reference", "[gpu][variants]") {
  // Two values the kernel stages per key tile (functions of q - kv): a table
  // read scaled per head, and a bias read through an i32 bucket table. The
  // tables are narrower than the diagonals the shapes meet, so reads fall
  // outside on both sides and give 0; the factor 3 and the offset make the
  // index wrap below 0 for most keys after the query.
  std::string spec = R"(attn.kernel @staged_diagonals
    problem = #attn.problem<q_heads = 4, kv_heads = 2, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [q_heads, ?]>, #attn.capture<"scale", f32, [q_heads]>,
                #attn.capture<"bucket", i32, [?]>, #attn.capture<"bucket_bias", f32, [?]>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?x?xf32>,
         %scale: memref<?xf32>, %bucket: memref<?xi32>, %bucketBias: memref<?xf32>):
      %offset = arith.constant 600 : index
      %shifted = arith.addi %q, %offset : index
      %column = arith.subi %shifted, %kv : index
      %value = memref.load %bias[%h, %column] : memref<?x?xf32>
      %factor = memref.load %scale[%h] : memref<?xf32>
      %scaled = arith.mulf %value, %factor : f32
      %first = arith.addf %s, %scaled : f32
      %c3 = arith.constant 3 : index
      %tripled = arith.muli %column, %c3 : index
      %b32 = memref.load %bucket[%tripled] : memref<?xi32>
      %bucketIndex = arith.index_cast %b32 : i32 to index
      %bucketValue = memref.load %bucketBias[%bucketIndex] : memref<?xf32>
      %second = arith.addf %first, %bucketValue : f32
      attn.yield %second : f32
    }
)";
  auto tables = [](harness::ForwardProblem &data, const AttnLaunchConfig &launch,
                   const harness::Shape &, std::mt19937_64 &random) {
    std::normal_distribution<float> normal(0.f, 0.5f);
    const int64_t columns = 1100, buckets = 2500, biases = 40;
    std::vector<float> bias(launch.qHeads * columns), scale, bucketBias(biases);
    for (float &value : bias)
      value = normal(random);
    for (int h = 0; h < launch.qHeads; ++h)
      scale.push_back(0.5f + 0.25f * float(h));
    std::vector<int32_t> bucket(buckets);
    for (int32_t &value : bucket)
      value = int32_t(random() % (biases + 5)); // some past the bias table
    for (float &value : bucketBias)
      value = normal(random);
    data.addCapture(bias, {launch.qHeads, columns});
    data.addCapture(scale, {launch.qHeads});
    data.addCapture(bucket, {buckets});
    data.addCapture(bucketBias, {biases});
  };
  runVariant(spec, {1, 1000, 1000, false}, tables, 25);
  runVariant(spec, {2, 300, 1700, true}, tables, 26);
  // Head dim 64 (three consumers, 192-row blocks) stages them too; head dim
  // 256 has no room for two values and reads them per pair.
  for (const char *headDim : {"head_dim = 64", "head_dim = 256"})
    runVariant(replaceAll(spec, "head_dim = 128", headDim), {1, 777, 650, false}, tables, 27);
  runVariant(replaceAll(spec, "mask = #attn.no_mask", "mask = #attn.causal<bottom_right>"),
             {1, 900, 1300, false}, tables, 28);
}

TEST_CASE("staged diagonals follow a mask_mod's walk over the key tiles", "[gpu][variants]") {
  // A relative-position table under a mask_mod whose band leaves most key
  // tiles unvisited and whose global keys bring back key tile 0: each
  // visited tile stages the diagonals of its own keys, the walk jumping
  // from tile 0 to the band. One consumer (two windows in turn) and two (one
  // window each). With the wide band no slice of a visited tile is empty;
  // the narrow one (half width 20, under the 64 rows of a slice) leaves
  // one consumer's slice empty in the tiles the band reaches for the
  // other's rows only: that consumer skips the score_mod and gives the
  // window back unread. The narrow band runs with s + value and with
  // s × value.
  std::string spec = R"(attn.kernel @banded_table_bias
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [q_heads, ?]>]
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index, %unused: memref<?x?xf32>):
      %half_window = arith.constant 200 : index
      %global = arith.constant 40 : index
      %upper = arith.addi %q, %half_window : index
      %lower = arith.addi %kv, %half_window : index
      %below = arith.cmpi slt, %kv, %upper : index
      %above = arith.cmpi slt, %q, %lower : index
      %band = arith.andi %below, %above : i1
      %global_kv = arith.cmpi slt, %kv, %global : index
      %keep = arith.ori %band, %global_kv : i1
      attn.yield %keep : i1
    }
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?x?xf32>):
      %offset = arith.constant 3000 : index
      %shifted = arith.addi %q, %offset : index
      %column = arith.subi %shifted, %kv : index
      %value = memref.load %bias[%h, %column] : memref<?x?xf32>
      %biased = arith.addf %s, %value : f32
      attn.yield %biased : f32
    }
)";
  const CaptureMaker table = normalBiasTable(6001);
  const std::string narrow =
      replaceAll(spec, "%half_window = arith.constant 200", "%half_window = arith.constant 20");
  const std::string narrowScaled =
      replaceAll(narrow, "%biased = arith.addf %s, %value", "%biased = arith.mulf %s, %value");
  REQUIRE(narrow != spec);
  REQUIRE(narrowScaled != narrow);
  for (const char *tile : {"", "block_m=64,consumer_warpgroups=1"}) {
    CompileOptions options;
    options.tileOverride = tile;
    INFO("tile override '" << tile << "'");
    REQUIRE(loadKernel(spec, options).compiled.launch.blockM == (*tile ? 64 : 128));
    runVariant(spec, {2, 1500, 2900, false}, table, 41, kNothing, options);
    runVariant(spec, {1, 2333, 1777, false}, table, 42, kNothing, options);
    runVariant(narrow, {2, 1300, 1500, false}, table, 43, kNothing, options);
    runVariant(narrowScaled, {2, 1300, 1500, false}, table, 44, kNothing, options);
  }
}

TEST_CASE("masks of affine inequalities, tested as key bits, match the reference",
          "[gpu][variants]") {
  // A proved mask_mod of affine inequalities decides a partial tile's pairs
  // from per-row key bits (attn_dev::ThreadKeys): kv coefficients other
  // than 1 (rounded bounds 2 kv <= q + 101 and 3 kv >= q - 400), a bound
  // that does not read kv (q >= 5, its negation gives empty rows), and one
  // whose row term takes the 64-bit form (kv <= q + 1000 b - 900: the batch
  // coefficient may pass an int), under each built-in mask, at every head
  // dim, on lengths that are no tile multiples, Sq != Sk.
  std::string spec = R"(attn.kernel @affine_bits
    problem = #attn.problem<q_heads = 2, kv_heads = 1, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %c2 = arith.constant 2 : index
      %c3 = arith.constant 3 : index
      %c5 = arith.constant 5 : index
      %c101 = arith.constant 101 : index
      %c400 = arith.constant 400 : index
      %twice = arith.muli %kv, %c2 : index
      %upper = arith.addi %q, %c101 : index
      %below = arith.cmpi sle, %twice, %upper : index
      %thrice = arith.muli %kv, %c3 : index
      %shifted = arith.addi %thrice, %c400 : index
      %above = arith.cmpi sge, %shifted, %q : index
      %band = arith.andi %below, %above : i1
      %late = arith.cmpi sge, %q, %c5 : index
      %inner = arith.andi %band, %late : i1
      %c900 = arith.constant 900 : index
      %c1000 = arith.constant 1000 : index
      %per_batch = arith.muli %b, %c1000 : index
      %reach = arith.addi %q, %per_batch : index
      %reach_kv = arith.addi %kv, %c900 : index
      %far = arith.cmpi sle, %reach_kv, %reach : index
      %keep = arith.ori %inner, %far : i1
      attn.yield %keep : i1
    }
)";
  int seed = 40;
  for (const char *mask : {"#attn.no_mask", "#attn.causal<bottom_right>",
                           "#attn.sliding_window<left = 300, right = 40>"})
    for (const char *headDim : {"head_dim = 64", "head_dim = 128", "head_dim = 256"})
      runVariant(replaceAll(replaceAll(spec, "#attn.no_mask", mask), "head_dim = 128", headDim),
                 {2, 1000, 1300, false}, {}, seed++);
}

TEST_CASE("signed divisions of negative positions match the reference", "[gpu][variants]") {
  // kv - q is negative under the causal mask: truncating / and % must divide
  // it signed, in 32 bits (narrowed) and in 64 ((kv - q) 2^32 / 2^31 = 2 (kv
  // - q) and its compare stay there), where index values are size_t in the
  // CUDA source.
  std::string spec = R"(attn.kernel @signed_divisions
    problem = #attn.problem<q_heads = 2, kv_heads = 1, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %d = arith.subi %kv, %q : index
      %c37 = arith.constant 37 : index
      %c3 = arith.constant 3 : index
      %cm5 = arith.constant -5 : index
      %zero = arith.constant 0 : index
      %quotient = arith.divsi %d, %c37 : index
      %remainder = arith.remsi %quotient, %c3 : index
      %thirds = arith.cmpi ne, %remainder, %zero : index
      %fifth = arith.remsi %d, %cm5 : index
      %fifths = arith.cmpi eq, %fifth, %zero : index
      %either = arith.ori %thirds, %fifths : i1
      %scale = arith.constant 4294967296 : index
      %wide = arith.muli %d, %scale : index
      %half_scale = arith.constant 2147483648 : index
      %back = arith.divsi %wide, %half_scale : index
      %twice = arith.addi %d, %d : index
      %exact = arith.cmpi eq, %back, %twice : index
      %keep = arith.andi %either, %exact : i1
      attn.yield %keep : i1
    }
)";
  runVariant(spec, {2, 700, 900, false}, {}, 60);
}

TEST_CASE("chunked local attention matches the reference", "[gpu][variants]") {
  runVariant(exampleWithHeads("chunked_local_hd128.mlir"), {1, 2100, 2100, false}, {}, 15);
}

TEST_CASE("BigBird with captured random blocks matches the reference", "[gpu][variants]") {
  std::string spec = exampleWithHeads("bigbird_hd128.mlir");
  auto blocks = [](harness::ForwardProblem &data, const AttnLaunchConfig &,
                   const harness::Shape &shape, std::mt19937_64 &random) {
    int64_t rows = (shape.seqlenQ + 63) / 64, columns = (shape.seqlenK + 63) / 64;
    std::vector<int32_t> chosen(rows * columns);
    for (int32_t &value : chosen)
      value = random() % 10 == 0;
    data.addCapture(chosen, {rows, columns});
  };
  runVariant(spec, {1, 1000, 1000, false}, blocks, 16);
  runVariant(spec, {2, 640, 1100, false}, blocks, 17);
  runVariant(spec, {2, 640, 1100, false}, blocks, 23, kTileCoverage | kWorkOrder);
  runVariant(spec, {2, 640, 1100, false}, blocks, 28, kTileCoverage | kTileKeyBits);
  runVariant(spec, {1, 1000, 1000, false}, blocks, 29, kTileCoverage | kTileKeyBits | kWorkOrder);
}

TEST_CASE("rows that no key survives give 0 and -inf", "[gpu][variants]") {
  // Rows below 300 keep no key (whole work tiles among them visit no key
  // tile); the score_mod masks odd keys with -inf.
  std::string spec = R"(attn.kernel @empty_rows
    problem = #attn.problem<q_heads = 2, kv_heads = 1, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %first = arith.constant 300 : index
      %keep = arith.cmpi sge, %q, %first : index
      attn.yield %keep : i1
    }
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %two = arith.constant 2 : index
      %zero = arith.constant 0 : index
      %ninf = arith.constant 0xFF800000 : f32
      %parity = arith.remui %kv, %two : index
      %even = arith.cmpi eq, %parity, %zero : index
      %r = arith.select %even, %s, %ninf : f32
      attn.yield %r : f32
    }
)";
  runVariant(spec, {1, 700, 500, false}, {}, 18);
}

TEST_CASE("a JIT kernel builds and uses the tile coverage, its key bits and the work order", "[gpu][variants]") {
  // attn::Compiler -> attn::Kernel: coverage from Kernel::buildTileCoverage,
  // its key bits from Kernel::buildTileKeyBits, order from
  // Kernel::buildWorkOrder, output against the reference.
  std::string spec = exampleWithHeads("document_mask_hd128.mlir");
  Kernel kernel = compileWithoutDiskCache(spec, "document_mask.mlir");
  harness::Shape shape{1, 900, 900, false};
  harness::ForwardProblem data(kernel.launchConfig(), shape, 24);
  std::vector<int32_t> ids;
  for (int64_t s = 0; s < shape.seqlenK; ++s)
    ids.push_back(int32_t(s / 250));
  data.addCapture(ids, {1, shape.seqlenK});
  data.poisonOutputs();
  AttnForwardArgs args = data.args();
  DeviceBuffer coverage = kernel.buildTileCoverage(args);
  args.tileCoverage = static_cast<const unsigned char *>(coverage.data());
  DeviceBuffer keyBits = kernel.buildTileKeyBits(args);
  args.tileKeyBits = keyBits.data();
  DeviceBuffer workOrder = kernel.buildWorkOrder(args);
  args.workOrder = static_cast<const int32_t *>(workOrder.data());
  kernel.run(args);
  ATTN_CU_CHECK(cuCtxSynchronize);
  std::vector<HostCapture> host{{data.captures[0].i32.data(), DType::I32, {1, shape.seqlenK}}};
  reference::Problem problem =
      referenceProblemFromSpec(spec, shape.batch, shape.seqlenQ, shape.seqlenK, host);
  harness::Comparison result = harness::compareWithReference(problem, data, DType::BF16);
  INFO("first violation: " << result.firstViolation);
  CHECK(result.passed());
}

TEST_CASE("key bits whose allocation lacks a slot's words read that tile as full",
          "[gpu][variants]") {
  // A buffer built for other shapes can hold fewer words than the coverage's
  // slots name: the launch bounds the slots by the allocation
  // (tile_key_slot_limit), so the kernel never reads past it (compute-sanitizer
  // memcheck runs this test) and the tiles past the bound keep all keys.
  std::string spec = exampleWithHeads("document_mask_hd128.mlir");
  LoadedKernel &kernel = loadKernel(spec);
  const AttnLaunchConfig &launch = kernel.compiled.launch;
  harness::Shape shape{2, 1000, 1000, false};
  harness::ForwardProblem data(launch, shape, 75);
  std::mt19937_64 random(75);
  addDocuments(data, launch, shape, random);
  data.poisonOutputs();
  AttnForwardArgs args = data.args();
  gputest::PreparedBuffers buffers =
      gputest::prepare(kernel, args, kTileCoverage | kTileKeyBits);
  const uint64_t slotBytes = tileKeyBitsSlotBytes(launch, args);
  const uint64_t tileBytes = uint64_t(attn_abi::tileKeyBitsPerTile(launch.blockM, launch.blockN));
  REQUIRE(buffers.keyBits.size() > slotBytes + tileBytes); // more than one partial tile
  // The slots and the first tile's words only.
  std::vector<uint8_t> stored = buffers.keyBits.download<uint8_t>();
  stored.resize(slotBytes + tileBytes);
  DeviceBuffer truncated(stored.size());
  truncated.upload(stored);
  args.tileKeyBits = truncated.data();
  launchForward(kernel.function, launch, args, nullptr);
  ATTN_CU_CHECK(cuCtxSynchronize);
  std::vector<HostCapture> host = gputest::hostCaptures(data);
  reference::Problem problem =
      referenceProblemFromSpec(spec, shape.batch, shape.seqlenQ, shape.seqlenK, host);
  harness::Comparison result = harness::compareWithReference(problem, data, launch.dtype);
  CHECK(result.nonFinite == 0);
  // The tiles past the bound kept pairs the mask drops.
  CHECK(result.toleranceViolations > 0);
}

TEST_CASE("a variant launched without its captured buffer is refused", "[gpu][variants]") {
  std::string spec = exampleWithHeads("alibi_causal_hd128.mlir");
  LoadedKernel &kernel = loadKernel(spec);
  harness::ForwardProblem data(kernel.compiled.launch, {1, 64, 64, false}, 19);
  REQUIRE_THROWS_WITH(launchForward(kernel.function, kernel.compiled.launch, data.args(), nullptr),
                      Catch::Contains("captures") && Catch::Contains("slopes"));
}

TEST_CASE("the work order kernel ranks costs as workOrderOf does", "[gpu][variants]") {
  LoadedKernel &kernel = loadKernel(exampleWithHeads("longformer_hd128.mlir"));
  KernelFunction sort = kernel.module.function(ATTN_WORK_ORDER_KERNEL_NAME);
  std::mt19937 random(27);
  // Past one warp's 32 tiles and one block's 1024; mostly short tiles, a
  // few long ones, some past ATTN_WORK_ORDER_MAX_KEY, some negative.
  for (int count : {1, 32, 33, 1000, 5000}) {
    std::vector<int32_t> costs(count);
    for (int32_t &cost : costs) {
      const unsigned kind = random() % 100;
      cost = kind < 90   ? int32_t(random() % 12)
             : kind < 97 ? int32_t(random() % 200)
             : kind < 99 ? int32_t(ATTN_WORK_ORDER_MAX_KEY - 2 + random() % 5)
                         : -int32_t(random() % 3);
    }
    for (WorkOrderPolicy policy : {WorkOrderPolicy::LongestFirst, WorkOrderPolicy::OutliersFirst}) {
      DeviceBuffer buffer(2 * costs.size() * sizeof(int32_t));
      buffer.copyFromHost(costs.data(), costs.size() * sizeof(int32_t),
                          costs.size() * sizeof(int32_t));
      int32_t *order = static_cast<int32_t *>(buffer.data());
      launchWorkOrderSort(sort, order + count, count, policy, order, nullptr);
      ATTN_CU_CHECK(cuCtxSynchronize);
      std::vector<int32_t> sorted = buffer.download<int32_t>();
      sorted.resize(costs.size());
      INFO("count " << count << ", policy " << int(policy));
      CHECK(sorted == workOrderOf(costs, policy));
    }
  }
}

TEST_CASE("Kernel::run starts a mask_mod kernel's outlying work tiles first", "[gpu][variants]") {
  // Longformer at 2600 tokens: the query block of the global rows visits
  // every key tile, more than twice the mean of the band's blocks.
  std::string spec = exampleWithHeads("longformer_hd128.mlir");
  Kernel kernel = compileWithoutDiskCache(spec, "longformer.mlir");
  REQUIRE(kernel.launchConfig().automaticWorkOrder == 1);
  harness::Shape shape{1, 2600, 2600, false};
  harness::ForwardProblem data(kernel.launchConfig(), shape, 29);
  data.poisonOutputs();
  AttnForwardArgs args = data.args();
  CHECK(kernel.automaticWorkOrderCount() == 0);
  kernel.run(args);
  ATTN_CU_CHECK(cuCtxSynchronize);
  CHECK(kernel.automaticWorkOrderCount() == 1);

  reference::Problem problem =
      referenceProblemFromSpec(spec, shape.batch, shape.seqlenQ, shape.seqlenK, {});
  harness::Comparison result = harness::compareWithReference(problem, data, DType::BF16);
  INFO("first violation: " << result.firstViolation);
  CHECK(result.passed());

  // The order it builds, against the reference's costs: the global rows'
  // blocks first, the band's in the default order.
  std::vector<int32_t> costs = gputest::referenceWorkCosts(problem, kernel.launchConfig());
  std::vector<int32_t> expected = workOrderOf(costs, WorkOrderPolicy::OutliersFirst);
  std::vector<int32_t> identity(expected.size());
  std::iota(identity.begin(), identity.end(), 0);
  REQUIRE(expected != identity);
  DeviceBuffer order = kernel.buildWorkOrder(args, nullptr, WorkOrderPolicy::OutliersFirst);
  CHECK(gputest::downloadWorkOrder(order, kernel.launchConfig(), args) == expected);

  // The shape's order is reused; another shape gets its own.
  kernel.run(args);
  CHECK(kernel.automaticWorkOrderCount() == 1);
  harness::ForwardProblem shorter(kernel.launchConfig(), {1, 700, 700, false}, 30);
  kernel.run(shorter.args());
  ATTN_CU_CHECK(cuCtxSynchronize);
  CHECK(kernel.automaticWorkOrderCount() == 2);
  // A call with an order of its own takes none.
  harness::ForwardProblem other(kernel.launchConfig(), {1, 900, 900, false}, 31);
  AttnForwardArgs otherArgs = other.args();
  DeviceBuffer otherOrder = kernel.buildWorkOrder(otherArgs);
  otherArgs.workOrder = static_cast<const int32_t *>(otherOrder.data());
  kernel.run(otherArgs);
  ATTN_CU_CHECK(cuCtxSynchronize);
  CHECK(kernel.automaticWorkOrderCount() == 2);

  // Captured into a graph in global mode (PyTorch's default): the call of
  // the shape whose order has finished takes it, the call of a new shape
  // builds nothing and runs in the default order, and the capture stays
  // valid. The replay gives the reference's outputs.
  data.poisonOutputs();
  harness::ForwardProblem fresh(kernel.launchConfig(), {1, 1500, 1500, false}, 32);
  fresh.poisonOutputs();
  ATTN_CU_CHECK(cuCtxSynchronize);
  CUstream stream = nullptr;
  ATTN_CU_CHECK(cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);
  ATTN_CU_CHECK(cuStreamBeginCapture, stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
  kernel.run(args, stream);
  kernel.run(fresh.args(), stream);
  CUgraph graph = nullptr;
  ATTN_CU_CHECK(cuStreamEndCapture, stream, &graph);
  CHECK(kernel.automaticWorkOrderCount() == 2);
  CUgraphExec replay = nullptr;
  ATTN_CU_CHECK(cuGraphInstantiate, &replay, graph, 0);
  ATTN_CU_CHECK(cuGraphLaunch, replay, stream);
  ATTN_CU_CHECK(cuStreamSynchronize, stream);
  ATTN_CU_CHECK(cuGraphExecDestroy, replay);
  ATTN_CU_CHECK(cuGraphDestroy, graph);
  ATTN_CU_CHECK(cuStreamDestroy, stream);
  harness::Comparison replayed = harness::compareWithReference(problem, data, DType::BF16);
  INFO("replayed, first violation: " << replayed.firstViolation);
  CHECK(replayed.passed());
  reference::Problem freshProblem = referenceProblemFromSpec(spec, 1, 1500, 1500, {});
  harness::Comparison freshResult = harness::compareWithReference(freshProblem, fresh, DType::BF16);
  INFO("new shape in the graph, first violation: " << freshResult.firstViolation);
  CHECK(freshResult.passed());
}

TEST_CASE("a work order that is not device memory of every work tile is refused",
          "[gpu][variants]") {
  LoadedKernel &kernel = loadKernel(exampleWithHeads("longformer_hd128.mlir"));
  const AttnLaunchConfig &launch = kernel.compiled.launch;
  // 4 heads x ceil(300 / 128) query blocks: 12 work tiles.
  harness::ForwardProblem data(launch, {1, 300, 300, false}, 26);
  AttnForwardArgs args = data.args();
  std::vector<int32_t> host(12);
  args.workOrder = host.data();
  CHECK_THROWS_WITH(launchForward(kernel.function, launch, args, nullptr),
                    Catch::StartsWith("workOrder: data pointer") &&
                        Catch::Contains("is not device memory"));
  DeviceBuffer tooShort(11 * sizeof(int32_t));
  args.workOrder = static_cast<const int32_t *>(tooShort.data());
  CHECK_THROWS_WITH(launchForward(kernel.function, launch, args, nullptr),
                    Catch::StartsWith("workOrder: the view spans 48 bytes"));
}
