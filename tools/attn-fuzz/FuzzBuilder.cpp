//===- FuzzBuilder.cpp - Fuzz the builder API with random specs -----------===//
//
// The fuzzer's bytes choose a spec through SpecBuilder (RandomSpec.h, wild
// mode: values in and out of the supported ranges, random mask and score
// expressions, captures, tile overrides). It must compile to CUDA or be
// rejected with a message; its printed form must parse back and print the
// same. A crash, a sanitizer report or a broken property (std::logic_error,
// which aborts) is a finding. The first byte picks valid mode for one input
// in eight, whose specs must all compile.
//
//===----------------------------------------------------------------------===//

#include "RandomSpec.h"

#include "attn/runtime/Error.h"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  attn::fuzz::Choices choices(data, size);
  attn::fuzz::RandomSpecMode mode = choices.below(8) == 0 ? attn::fuzz::RandomSpecMode::Valid
                                                          : attn::fuzz::RandomSpecMode::Wild;
  try {
    attn::fuzz::RandomSpec random = attn::fuzz::randomSpec(choices, mode);
    attn::fuzz::SpecOutcome outcome = attn::fuzz::checkRandomSpec(random);
    if (mode == attn::fuzz::RandomSpecMode::Valid && !outcome.accepted) {
      std::fprintf(stderr, "a valid spec was rejected:\n%s\n%s\n", outcome.text.c_str(),
                   outcome.error.c_str());
      std::abort();
    }
  } catch (const attn::Error &error) {
    // The builder refused a value while the spec was drawn.
    if (mode == attn::fuzz::RandomSpecMode::Valid) {
      std::fprintf(stderr, "a valid spec was refused by the builder: %s\n", error.what());
      std::abort();
    }
  } catch (const std::logic_error &broken) {
    std::fprintf(stderr, "%s\n", broken.what());
    std::abort();
  }
  return 0;
}
