//===- VariantCaptures.h - Captures of the example variants ---*- C++ -*-===//
//
// What the GPU tests pass as the example specs' captures: per-head slopes,
// bias tables, document ids.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_TESTS_GPU_VARIANTCAPTURES_H
#define ATTN_TESTS_GPU_VARIANTCAPTURES_H

#include "AttnHarness.h"

#include <functional>
#include <random>

namespace attn::gputest {

// Adds the captured buffers a variant declares, for one shape.
using CaptureMaker = std::function<void(harness::ForwardProblem &, const AttnLaunchConfig &,
                                        const harness::Shape &, std::mt19937_64 &)>;

// Adds the captures `captures` makes for `shape` (none when it is empty),
// drawn from a generator seeded from the problem's seed.
inline void addCaptures(harness::ForwardProblem &data, const AttnLaunchConfig &launch,
                        const harness::Shape &shape, const CaptureMaker &captures,
                        uint64_t seed) {
  if (!captures)
    return;
  std::mt19937_64 random(seed * 7919 + 1);
  captures(data, launch, shape, random);
}

// A [q_heads, columns] f32 table of N(0, 0.5) values, the capture of a
// relative-position bias.
inline CaptureMaker normalBiasTable(int64_t columns) {
  return [columns](harness::ForwardProblem &data, const AttnLaunchConfig &launch,
                   const harness::Shape &, std::mt19937_64 &random) {
    std::normal_distribution<float> normal(0.f, 0.5f);
    std::vector<float> bias(launch.qHeads * columns);
    for (float &value : bias)
      value = normal(random);
    data.addCapture(bias, {launch.qHeads, columns});
  };
}

// ALiBi's slopes, (h + 1) / q_heads.
inline void addSlopes(harness::ForwardProblem &data, const AttnLaunchConfig &launch,
                      const harness::Shape &, std::mt19937_64 &) {
  std::vector<float> slopes;
  for (int h = 0; h < launch.qHeads; ++h)
    slopes.push_back(float(h + 1) / float(launch.qHeads));
  data.addCapture(slopes, {launch.qHeads});
}

// Document ids [batch, seqlen_k] in runs of 1 to 400 keys.
inline void addDocuments(harness::ForwardProblem &data, const AttnLaunchConfig &,
                         const harness::Shape &shape, std::mt19937_64 &random) {
  std::vector<int32_t> ids;
  for (int64_t b = 0; b < shape.batch; ++b) {
    int32_t document = 0;
    int64_t left = 0;
    for (int64_t s = 0; s < shape.seqlenK; ++s, --left) {
      if (left == 0) {
        left = 1 + random() % 400;
        ++document;
      }
      ids.push_back(document);
    }
  }
  data.addCapture(ids, {shape.batch, shape.seqlenK});
}

} // namespace attn::gputest

#endif // ATTN_TESTS_GPU_VARIANTCAPTURES_H
