//===- EmbeddedExamples.h - The shipped example specs, built in -*- C++ -*-===//
//
// docs/examples/*.mlir as strings (cmake/EmbedFiles.cmake), so the GPU
// test binary runs from any directory, with or without a source tree.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_TESTS_GPU_EMBEDDEDEXAMPLES_H
#define ATTN_TESTS_GPU_EMBEDDEDEXAMPLES_H

#include <vector>

namespace attn::gputest {

struct EmbeddedExample {
  const char *path; // e.g. "causal_hd128.mlir"
  const char *contents;
};
const std::vector<EmbeddedExample> &embeddedExamples();

} // namespace attn::gputest

#endif // ATTN_TESTS_GPU_EMBEDDEDEXAMPLES_H
