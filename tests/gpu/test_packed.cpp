// Packed (variable-length) sequences against the CPU reference, which
// evaluates each sequence on its own: sequences end to end in tensors of
// batch 1, lengths that are not tile multiples, empty sequences, sequences
// with no key (rows that must give 0 and -inf), Sq != Sk per sequence,
// built-in masks aligned by each sequence's lengths, mask_mod and score_mod
// regions that see the sequence index as the batch, captures sized by the
// longest sequence, a run-time tile coverage, GQA, head-major strides, and
// the head dims whose O staging shares Q's shared memory.
#include <catch2/catch.hpp>

#include "AttnHarness.h"
#include "LoadedKernel.h"
#include "attn/Compiler/Compiler.h"

#include <algorithm>
#include <fstream>
#include <functional>
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
using attn::gputest::readExample;
using attn::gputest::referenceTileCoverage;
using attn::gputest::replaceAll;

namespace {

struct PackedLengths {
  std::vector<int64_t> q, k;
};

// Adds the captures of one packed problem (extents from the sequence count
// and the longest lengths).
using CaptureMaker = std::function<void(harness::ForwardProblem &, const AttnLaunchConfig &,
                                        const PackedSequences &, std::mt19937_64 &)>;

// The reference problem of sequence `index` alone: its lengths, and regions
// that see `index` as the batch.
reference::Problem sequenceProblem(const reference::Problem &packed, int64_t index,
                                   int64_t seqlenQ, int64_t seqlenK) {
  reference::Problem problem = packed;
  problem.batch = 1;
  problem.seqlenQ = seqlenQ;
  problem.seqlenK = seqlenK;
  if (packed.maskMod)
    problem.maskMod = [mod = packed.maskMod, index](int64_t, int64_t h, int64_t q, int64_t k) {
      return mod(index, h, q, k);
    };
  if (packed.scoreMod)
    problem.scoreMod = [mod = packed.scoreMod, index](double s, int64_t, int64_t h, int64_t q,
                                                      int64_t k) { return mod(s, index, h, q, k); };
  return problem;
}

// Returns the query heads the call's work tiles took (forwardHeadsPerTile).
int runPacked(const std::string &spec, const PackedLengths &lengths, uint64_t seed,
              const CaptureMaker &captures = {}, bool headMajor = false,
              unsigned prepared = kNothing) {
  LoadedKernel &kernel = loadKernel(spec);
  const AttnLaunchConfig &launch = kernel.compiled.launch;
  PackedSequenceOffsets packed = uploadPackedSequences(lengths.q, lengths.k);
  harness::ForwardProblem data(launch, {1, packed.totalQ, packed.totalK, headMajor}, seed);
  std::mt19937_64 random(seed * 7919 + 1);
  if (captures)
    captures(data, launch, packed.sequences, random);
  data.poisonOutputs();
  AttnForwardArgs args = data.args();
  args.packed = packed.sequences;
  gputest::PreparedBuffers buffers = gputest::prepare(kernel, args, prepared);
  launchForward(kernel.function, launch, args, nullptr);
  ATTN_CU_CHECK(cuCtxSynchronize);

  const int64_t hq = launch.qHeads, hkv = launch.kvHeads, d = launch.headDim;
  const int64_t totalQ = packed.totalQ, totalK = packed.totalK;
  const int64_t sequences = packed.sequences.batch;
  reference::Problem whole =
      referenceProblemFromSpec(spec, sequences, packed.sequences.maxSeqlenQ,
                               packed.sequences.maxSeqlenK, gputest::hostCaptures(data));

  // The reference of every sequence, laid out as the packed outputs:
  // O [1, total_q, Hq, D] and LSE [Hq, total_q].
  harness::ReferenceOutputs expected;
  expected.o.assign(totalQ * hq * d, 0.f);
  expected.lse.assign(hq * totalQ, 0.f);
  std::vector<uint8_t> expectedCoverage;
  int64_t rowQ = 0, rowK = 0;
  for (int64_t index = 0; index < sequences; ++index) {
    const int64_t sq = lengths.q[index], sk = lengths.k[index];
    reference::Problem problem = sequenceProblem(whole, index, sq, sk);
    reference::HostTensor q{data.q.host.data() + rowQ * hq * d, {0, hq * d, d, 1}};
    reference::HostTensor k{data.k.host.data() + rowK * hkv * d, {0, hkv * d, d, 1}};
    reference::HostTensor v{data.v.host.data() + rowK * hkv * d, {0, hkv * d, d, 1}};
    std::vector<float> o(std::max<int64_t>(sq * hq * d, 1)), lse(std::max<int64_t>(hq * sq, 1));
    if (sq > 0)
      reference::forward(problem, q, k, v, o.data(), lse.data());
    std::copy(o.begin(), o.begin() + sq * hq * d, expected.o.begin() + rowQ * hq * d);
    for (int64_t h = 0; h < hq; ++h)
      std::copy(lse.begin() + h * sq, lse.begin() + (h + 1) * sq,
                expected.lse.begin() + h * totalQ + rowQ);
    rowQ += sq;
    rowK += sk;
  }
  if (prepared & kWorkOrder) {
    // Any permutation is a valid order; the output check below is the
    // oracle of its decoding.
    std::vector<int32_t> order = gputest::downloadWorkOrder(buffers.workOrder, launch, args);
    std::sort(order.begin(), order.end());
    std::vector<int32_t> identity(order.size());
    std::iota(identity.begin(), identity.end(), 0);
    CHECK(order == identity);
  }
  if (prepared & kTileCoverage) {
    // Sequence by sequence, in the query blocks and key tiles of the
    // longest lengths (those past a sequence's end are empty).
    const int64_t queryBlocks = (packed.sequences.maxSeqlenQ + launch.blockM - 1) / launch.blockM;
    const int64_t keyTiles = (packed.sequences.maxSeqlenK + launch.blockN - 1) / launch.blockN;
    std::vector<uint8_t> expectedWords;
    for (int64_t index = 0; index < sequences; ++index) {
      reference::Problem sequence =
          sequenceProblem(whole, index, lengths.q[index], lengths.k[index]);
      std::vector<uint8_t> bytes = referenceTileCoverage(sequence, launch, queryBlocks, keyTiles);
      expectedCoverage.insert(expectedCoverage.end(), bytes.begin(), bytes.end());
      if (prepared & kTileKeyBits) {
        std::vector<uint8_t> words =
            gputest::referenceTileKeyWords(sequence, launch, bytes, queryBlocks, keyTiles);
        expectedWords.insert(expectedWords.end(), words.begin(), words.end());
      }
    }
    CHECK(buffers.coverage.download<uint8_t>() == expectedCoverage);
    if (prepared & kTileKeyBits)
      gputest::checkTileKeyBits(buffers.keyBits, expectedCoverage, expectedWords);
  }

  reference::Problem layout;
  layout.batch = 1;
  layout.seqlenQ = totalQ;
  layout.seqlenK = totalK;
  layout.qHeads = hq;
  layout.kvHeads = hkv;
  layout.headDim = d;
  harness::Comparison result = harness::compareOutputs(layout, expected, data, launch.dtype);
  std::ostringstream shape;
  for (size_t index = 0; index < lengths.q.size(); ++index)
    shape << " (" << lengths.q[index] << ", " << lengths.k[index] << ")";
  INFO("spec: " << spec << "\n(Sq, Sk) per sequence:" << shape.str()
                << "\nmax|dO|=" << result.maxAbsError << " rel-L2=" << result.relativeL2Error
                << " max|dLSE|=" << result.maxLseError
                << "\nfirst violation: " << result.firstViolation);
  CHECK(result.nonFinite == 0);
  CHECK(result.maskedRowMismatches == 0);
  CHECK(result.toleranceViolations == 0);
  return forwardHeadsPerTile(launch, args);
}

// ALiBi's slopes, one per query head.
void addSlopes(harness::ForwardProblem &data, const AttnLaunchConfig &launch,
               const PackedSequences &, std::mt19937_64 &) {
  std::vector<float> values;
  for (int h = 0; h < launch.qHeads; ++h)
    values.push_back(float(h + 1) / float(launch.qHeads));
  data.addCapture(values, {launch.qHeads});
}

// Lengths that cross tile boundaries, an empty sequence, a single row, and
// a sequence with no keys.
const PackedLengths kAwkward{{300, 1, 0, 129, 64, 700, 65}, {300, 1, 7, 200, 0, 700, 190}};

} // namespace

TEST_CASE("packed causal sequences match the reference per sequence", "[gpu][packed]") {
  // Bottom-right causal: each sequence aligned by its own Sk - Sq, so the
  // first rows of a sequence with Sq > Sk see no key.
  std::string spec = readExample("causal_hd128.mlir");
  spec = replaceAll(spec, "q_heads = 16, kv_heads = 4", "q_heads = 4, kv_heads = 2");
  runPacked(spec, kAwkward, 1);
  runPacked(spec, {{513, 70, 1}, {200, 900, 1}}, 2, {}, /*headMajor=*/true);
  // Longest first: the long sequence's tiles start before the short ones'.
  runPacked(spec, kAwkward, 8, {}, /*headMajor=*/false, kWorkOrder);
  // Top-left causal and no mask, and the other head dims and f16: other
  // tile shapes, and at head dim 256 O's staging shares Q's bytes.
  runPacked(replaceAll(spec, "bottom_right", "top_left"), kAwkward, 3);
  std::string full = exampleWithHeads("full_hd128.mlir");
  runPacked(full, kAwkward, 4);
  for (const char *headDim : {"head_dim = 64", "head_dim = 256"}) {
    runPacked(replaceAll(spec, "head_dim = 128", headDim), kAwkward, 5);
    runPacked(replaceAll(full, "head_dim = 128", headDim), {{190, 63, 257}, {190, 400, 100}}, 6);
  }
  runPacked(replaceAll(full, "bf16", "f16"), {{100, 333}, {250, 333}}, 7);
}

TEST_CASE("packed sequences with masks and regions match the reference", "[gpu][packed]") {
  runPacked(exampleWithHeads("sliding_window_hd128.mlir"), {{1500, 200, 1100}, {1500, 300, 1100}}, 11);
  runPacked(exampleWithHeads("prefix_lm_hd128.mlir"), {{2300, 100, 40}, {2300, 2200, 40}}, 12);
  runPacked(exampleWithHeads("softcap_causal_hd128.mlir"), kAwkward, 13);
  runPacked(exampleWithHeads("alibi_causal_hd128.mlir"), kAwkward, 14, addSlopes);
}

TEST_CASE("a packed document mask reads captures sized by the longest sequence", "[gpu][packed]") {
  // document[b, kv]: runs of equal ids inside each sequence; the mask_mod
  // reads it with b the sequence index and positions inside the sequence.
  auto documents = [](harness::ForwardProblem &data, const AttnLaunchConfig &,
                      const PackedSequences &packed, std::mt19937_64 &random) {
    std::vector<int32_t> ids;
    std::uniform_int_distribution<int> run(1, 150);
    for (int64_t b = 0; b < packed.batch; ++b) {
      int32_t document = 0;
      for (int64_t remaining = run(random), kv = 0; kv < packed.maxSeqlenK; ++kv, --remaining) {
        if (remaining == 0) {
          remaining = run(random);
          ++document;
        }
        ids.push_back(document);
      }
    }
    data.addCapture(ids, {packed.batch, packed.maxSeqlenK});
  };
  std::string spec = exampleWithHeads("document_mask_hd128.mlir");
  PackedLengths lengths{{900, 0, 333, 129}, {900, 5, 333, 129}};
  runPacked(spec, lengths, 21, documents);
  runPacked(spec, lengths, 22, documents, /*headMajor=*/false, kTileCoverage | kWorkOrder);
  runPacked(spec, lengths, 23, documents, /*headMajor=*/false, kTileCoverage | kTileKeyBits);
}

TEST_CASE("packed launches check their arguments on the device", "[gpu][packed]") {
  LoadedKernel &kernel = loadKernel(readExample("full_hd128.mlir"));
  const AttnLaunchConfig &launch = kernel.compiled.launch;
  PackedSequenceOffsets packed = uploadPackedSequences({100, 28}, {64, 64});
  CHECK(packed.totalQ == 128);
  CHECK(packed.totalK == 128);
  CHECK(packed.sequences.maxSeqlenQ == 100);
  CHECK(packed.offsets.download<int32_t>() == std::vector<int32_t>{0, 100, 128, 0, 64, 128});
  harness::ForwardProblem data(launch, {1, 128, 128, false}, 31);
  AttnForwardArgs args = data.args();
  args.packed = packed.sequences;
  // Host memory for the offsets, and offsets that do not cover the count.
  std::vector<int32_t> host{0, 100, 128};
  args.packed.cuSeqlensQ = host.data();
  CHECK_THROWS_WITH(launchForward(kernel.function, launch, args, nullptr),
                    Catch::Matchers::StartsWith("packed.cuSeqlensQ: data pointer") &&
                        Catch::Matchers::Contains("is not device memory"));
  args.packed = packed.sequences;
  args.packed.batch = 40;
  CHECK_THROWS_WITH(launchForward(kernel.function, launch, args, nullptr),
                    Catch::Matchers::StartsWith("packed.cuSeqlensQ: the view spans 164 bytes"));
}

TEST_CASE("packed short sequences match the reference with query heads packed per work tile",
          "[gpu][packed]") {
  // At most 64 rows a sequence: each work tile takes 64 rows of two query
  // heads of one kv head; a sequence's rows past its end are the next
  // one's, which the warps do not store. ALiBi reads each head's slope.
  const PackedLengths shortRows{{64, 1, 0, 33, 17, 64}, {300, 1, 7, 0, 64, 1000}};
  std::string spec = replaceAll(readExample("causal_hd128.mlir"), "q_heads = 16, kv_heads = 4",
                                "q_heads = 8, kv_heads = 2");
  CHECK(runPacked(spec, shortRows, 21) == 2);
  CHECK(runPacked(spec, shortRows, 22, {}, /*headMajor=*/true) == 2);
  CHECK(runPacked(exampleWithHeads("alibi_causal_hd128.mlir", "q_heads = 8, kv_heads = 2"),
                  shortRows, 23, addSlopes) == 2);
}
