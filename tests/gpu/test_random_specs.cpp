// Random valid specs from the builder API (tools/attn-fuzz/RandomSpec.h) run
// on the GPU against the CPU reference, which evaluates the same regions
// with its interpreter: random masks, score expressions, captures, head
// dims, GQA ratios, alignments, windows and legal tile plans, on awkward
// shapes. Seeded, so a failure names the seed that replays it.
#include <catch2/catch.hpp>

#include "AttnHarness.h"
#include "LoadedKernel.h"
#include "RandomSpec.h"
#include "attn/Compiler/Compiler.h"
#include "attn/Compiler/Jit.h"

#include <random>

using namespace attn;

namespace {

// The length of each extent of a declared capture at this launch.
std::vector<int64_t> captureShape(const Capture &capture, const Spec &spec,
                                  const harness::Shape &shape, std::mt19937_64 &random) {
  std::vector<int64_t> extents;
  for (const CaptureExtent &extent : capture.extents()) {
    switch (extent.kind()) {
    case CaptureExtent::Kind::Fixed:
      extents.push_back(extent.size());
      break;
    case CaptureExtent::Kind::Any:
      extents.push_back(1 + static_cast<int64_t>(random() % 64));
      break;
    case CaptureExtent::Kind::Batch:
      extents.push_back(shape.batch);
      break;
    case CaptureExtent::Kind::QHeads:
      extents.push_back(spec.qHeads);
      break;
    case CaptureExtent::Kind::KvHeads:
      extents.push_back(spec.kvHeads);
      break;
    case CaptureExtent::Kind::SeqlenQ:
      extents.push_back(shape.seqlenQ);
      break;
    case CaptureExtent::Kind::SeqlenK:
      extents.push_back(shape.seqlenK);
      break;
    }
  }
  return extents;
}

void addRandomCaptures(harness::ForwardProblem &data, const Spec &spec,
                       const harness::Shape &shape, std::mt19937_64 &random) {
  for (const Capture &capture : spec.captures) {
    std::vector<int64_t> extents = captureShape(capture, spec, shape, random);
    int64_t count = 1;
    for (int64_t extent : extents)
      count *= extent;
    if (capture.dtype() == DType::F32) {
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<float> values(count);
      for (float &value : values)
        value = normal(random);
      data.addCapture(std::move(values), extents);
    } else {
      std::vector<int32_t> values(count);
      for (int32_t &value : values)
        value = static_cast<int32_t>(random() % 9) - 3;
      data.addCapture(std::move(values), extents);
    }
  }
}

} // namespace

TEST_CASE("random valid specs from the builder match the reference", "[gpu][random]") {
  const int specs = 24;
  int withMaskMod = 0, withScoreMod = 0, withCaptures = 0, withTileOverride = 0;
  for (uint64_t seed = 1; seed <= specs; ++seed) {
    fuzz::Choices choices(seed);
    fuzz::RandomSpec random = fuzz::randomSpec(choices, fuzz::RandomSpecMode::Valid);
    std::string text = printSpecText(random.spec);
    INFO("seed " << seed << "\n" << text << "tile override: " << random.tileOverride);
    withMaskMod += random.spec.maskMod.has_value();
    withScoreMod += random.spec.scoreMod.has_value();
    withCaptures += !random.spec.captures.empty();
    withTileOverride += !random.tileOverride.empty();

    CompileOptions options;
    options.tileOverride = random.tileOverride;
    gputest::LoadedKernel &kernel = gputest::loadKernel(text, options);
    const CompiledKernel &compiled = kernel.compiled;

    std::mt19937_64 shapes(seed * 7919);
    static const int64_t lengths[] = {1, 37, 64, 129, 200, 333, 511};
    for (int run = 0; run < 2; ++run) {
      harness::Shape shape{1 + static_cast<int64_t>(shapes() % 2), lengths[shapes() % 7],
                           lengths[shapes() % 7], shapes() % 4 == 0};
      INFO("B=" << shape.batch << " Sq=" << shape.seqlenQ << " Sk=" << shape.seqlenK
                << (shape.headMajor ? " head-major" : ""));
      harness::ForwardProblem data(compiled.launch, shape, seed * 31 + run);
      addRandomCaptures(data, random.spec, shape, shapes);
      data.poisonOutputs();
      launchForward(kernel.function, compiled.launch, data.args(), nullptr);
      ATTN_CU_CHECK(cuCtxSynchronize);

      std::vector<HostCapture> host = gputest::hostCaptures(data);
      reference::Problem problem =
          referenceProblemFromSpec(text, shape.batch, shape.seqlenQ, shape.seqlenK, host);
      harness::Comparison result =
          harness::compareWithReference(problem, data, compiled.launch.dtype);
      INFO("max|dO|=" << result.maxAbsError << " rel-L2=" << result.relativeL2Error
                      << " max|dLSE|=" << result.maxLseError
                      << "\nfirst violation: " << result.firstViolation);
      CHECK(result.nonFinite == 0);
      CHECK(result.maskedRowMismatches == 0);
      CHECK(result.toleranceViolations == 0);
    }
  }
  // The seeds cover every kind of variant.
  CHECK(withMaskMod >= 4);
  CHECK(withScoreMod >= 4);
  CHECK(withCaptures >= 4);
  CHECK(withTileOverride >= 4);
}
