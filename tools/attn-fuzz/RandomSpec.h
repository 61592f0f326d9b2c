//===- RandomSpec.h - Random well-typed specs from the builder API -*- C++ -*-===//
//
// Structured fuzzing of SpecBuilder: every choice (head dim, heads, dtype,
// scale, mask, captures, mask and score expressions, tile override) is drawn
// from a Choices source, either the fuzzer's bytes or a seeded generator, so
// a failing input replays exactly.
//
// Two modes:
//  * wild: values in and out of the supported ranges (head dim 96, kv heads
//    not dividing q heads, f32 elements, negative windows, bf16 captures,
//    reads of undeclared captures, malformed tile overrides, ...). Each spec
//    must compile to CUDA or be rejected with a diagnostic; nothing crashes.
//  * valid: only supported values and legal tile plans, and expressions
//    whose results the GPU and the CPU reference agree on within the
//    tolerance (no division by zero, bounded score changes): every spec must
//    compile, and on a GPU it must match the reference.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_TOOLS_RANDOMSPEC_H
#define ATTN_TOOLS_RANDOMSPEC_H

#include "attn/Compiler/Spec.h"

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>

namespace attn::fuzz {

/// Where choices come from: the bytes of a fuzzer input (zeros once they run
/// out) or a seeded Mersenne Twister.
class Choices {
public:
  Choices(const uint8_t *data, size_t size) : data(data), size(size), fromBytes(true) {}
  explicit Choices(uint64_t seed) : random(seed), fromBytes(false) {}

  /// A value in [0, bound) (bound > 0).
  uint64_t below(uint64_t bound);
  /// A value in [lo, hi].
  int64_t between(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo) + 1));
  }
  bool percent(unsigned chance) { return below(100) < chance; }
  template <typename T, size_t N>
  const T &pick(const T (&values)[N]) {
    return values[below(N)];
  }

private:
  const uint8_t *data = nullptr;
  size_t size = 0;
  std::mt19937_64 random;
  bool fromBytes;
};

enum class RandomSpecMode { Wild, Valid };

struct RandomSpec {
  Spec spec;
  /// `key=value,...` for attn-tile (possibly malformed in wild mode).
  std::string tileOverride;
};

/// Draws a spec. Wild mode may throw attn::Error while building (a type
/// error the builder refuses, a name that is not an identifier): that is a
/// rejection, like a diagnostic.
RandomSpec randomSpec(Choices &choices, RandomSpecMode mode);

/// What became of a spec.
struct SpecOutcome {
  bool accepted = false;
  /// The printed op (empty when the builder or the verifier refused it).
  std::string text;
  /// The error message of a rejection.
  std::string error;
};

/// Builds `random`, prints it, checks that the text parses back and prints
/// identically, and runs the whole pipeline up to the emitted CUDA source
/// (no NVRTC). Rejections are returned; a broken property (a rejection
/// without a message, a round trip that differs, an accepted spec without a
/// kernel) throws std::logic_error.
SpecOutcome checkRandomSpec(const RandomSpec &random);

} // namespace attn::fuzz

#endif // ATTN_TOOLS_RANDOMSPEC_H
