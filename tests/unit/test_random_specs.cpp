// Structured fuzzing of the builder API without a GPU (RandomSpec.h): random
// well-typed specs from seeds. Valid ones (supported values, legal tile
// plans) must all compile to CUDA; wild ones (values in and out of range,
// undeclared captures, malformed tile overrides) must compile or be
// rejected with a message. Every printed spec must parse back and print the
// same. The fuzz target attn-fuzz-builder explores the same space from
// bytes.

#include "RandomSpec.h"

#include "attn/runtime/Error.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <map>

using namespace attn;
using namespace attn::fuzz;

namespace {

struct Tally {
  int accepted = 0, rejectedByBuilder = 0, rejectedWithDiagnostic = 0;
  std::map<std::string, int> firstLines; // of the diagnostics, for the report
};

Tally runSeeds(RandomSpecMode mode, uint64_t first, int count) {
  Tally tally;
  for (int i = 0; i < count; ++i) {
    uint64_t seed = first + static_cast<uint64_t>(i);
    INFO("seed " << seed);
    Choices choices(seed);
    RandomSpec random;
    try {
      random = randomSpec(choices, mode);
    } catch (const Error &error) {
      ++tally.rejectedByBuilder;
      CHECK(std::string(error.what()).size() > 0);
      continue;
    }
    SpecOutcome outcome = checkRandomSpec(random);
    if (outcome.accepted) {
      ++tally.accepted;
      continue;
    }
    ++tally.rejectedWithDiagnostic;
    INFO(outcome.text << "tile override: " << random.tileOverride << "\n" << outcome.error);
    CHECK(mode == RandomSpecMode::Wild);
    // A diagnostic, not a bare message: "error: ..." with its location when
    // the text parsed.
    CHECK(outcome.error.find("error") != std::string::npos);
    size_t at = outcome.error.find("error: ");
    std::string line = at == std::string::npos ? outcome.error : outcome.error.substr(at + 7);
    ++tally.firstLines[line.substr(0, std::min<size_t>(line.find('\n'), 60))];
  }
  return tally;
}

} // namespace

TEST_CASE("random valid specs from the builder all compile to CUDA", "[builder][random]") {
  Tally tally = runSeeds(RandomSpecMode::Valid, 1, 300);
  CHECK(tally.rejectedByBuilder == 0);
  CHECK(tally.rejectedWithDiagnostic == 0);
  CHECK(tally.accepted == 300);
}

TEST_CASE("random wild specs compile or are rejected with a diagnostic", "[builder][random]") {
  Tally tally = runSeeds(RandomSpecMode::Wild, 1000, 1500);
  WARN("wild specs: " << tally.accepted << " compiled, " << tally.rejectedByBuilder
                      << " refused by the builder, " << tally.rejectedWithDiagnostic
                      << " rejected with diagnostics");
  if (std::getenv("ATTN_RANDOM_SPECS_REPORT"))
    for (const auto &[line, count] : tally.firstLines)
      WARN(count << " x " << line);
  // The generator reaches both outcomes and all three stages.
  CHECK(tally.accepted > 50);
  CHECK(tally.rejectedByBuilder > 50);
  CHECK(tally.rejectedWithDiagnostic > 50);
}
