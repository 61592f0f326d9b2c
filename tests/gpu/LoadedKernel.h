// A compiled spec loaded into the current context, shared by the GPU tests:
// one module per spec text, tile override and tuning shape, compiled and loaded once for
// the whole run; and the captures of a problem as the reference reads them.
#ifndef ATTN_TESTS_GPU_LOADEDKERNEL_H
#define ATTN_TESTS_GPU_LOADEDKERNEL_H

#include "AttnHarness.h"
#include "EmbeddedExamples.h"
#include "attn/Compiler/Compiler.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace attn::gputest {

struct LoadedKernel {
  CompiledKernel compiled;
  Module module;
  KernelFunction function;
};

/// The built-in masks the GPU tests run every kernel under: none, causal in
/// both alignments, and two sliding windows (one aligned top-left).
inline const char *const kBuiltInMasks[] = {
    "#attn.no_mask", "#attn.causal<top_left>", "#attn.causal<bottom_right>",
    "#attn.sliding_window<left = 100, right = 20>",
    "#attn.sliding_window<left = 0, right = 300, align = top_left>"};

/// A softmax spec named @test with a built-in mask.
inline std::string specText(int headDim, const std::string &element, const std::string &mask,
                            int64_t qHeads, int64_t kvHeads) {
  return harness::softmaxSpecText("test", headDim, element, mask, qHeads, kvHeads);
}

inline LoadedKernel &loadKernel(const std::string &spec, const CompileOptions &options = {}) {
  static std::map<std::string, LoadedKernel> cache;
  std::string key = options.tileOverride + "\n" + options.tuningShape + "\n" +
                    (options.pagedKv ? "paged\n" : "\n") + spec;
  auto found = cache.find(key);
  if (found != cache.end())
    return found->second;
  ensureContext();
  LoadedKernel loaded;
  loaded.compiled = compileSpec(spec, "test.mlir", options);
  loaded.module = Module::loadPtx(
      std::string_view(loaded.compiled.binary.data(), loaded.compiled.binary.size()));
  loaded.function = loaded.module.function(loaded.compiled.launch.kernelName);
  return cache.emplace(key, std::move(loaded)).first->second;
}

/// What a run builds once before it launches (bit flags): the run-time tile
/// coverage, then the longest-first work order (which counts with it), and
/// the stored key bits of the coverage's partial tiles (with kTileCoverage).
enum Prepared : unsigned { kNothing = 0, kTileCoverage = 1, kWorkOrder = 2, kTileKeyBits = 4 };

/// The buffers `prepare` built; the arguments point into them.
struct PreparedBuffers {
  DeviceBuffer coverage;
  DeviceBuffer keyBits;
  DeviceBuffer workOrder;
};

inline PreparedBuffers prepare(const LoadedKernel &kernel, AttnForwardArgs &args,
                               unsigned prepared) {
  PreparedBuffers buffers;
  const AttnLaunchConfig &launch = kernel.compiled.launch;
  if (prepared & kTileCoverage) {
    buffers.coverage = buildTileCoverage(kernel.module, launch, args, nullptr);
    args.tileCoverage = static_cast<const unsigned char *>(buffers.coverage.data());
    if (prepared & kTileKeyBits) {
      buffers.keyBits = buildTileKeyBits(kernel.module, launch, args, nullptr);
      args.tileKeyBits = buffers.keyBits.data();
    }
  }
  if (prepared & kWorkOrder) {
    buffers.workOrder = buildWorkOrder(kernel.module, launch, args, nullptr);
    args.workOrder = static_cast<const int32_t *>(buffers.workOrder.data());
  }
  return buffers;
}

/// The order in a buffer from buildWorkOrder (its first workOrderBytes).
inline std::vector<int32_t> downloadWorkOrder(const DeviceBuffer &buffer,
                                              const AttnLaunchConfig &launch,
                                              const AttnForwardArgs &args) {
  std::vector<int32_t> order = buffer.download<int32_t>();
  order.resize(workOrderBytes(launch, args) / sizeof(int32_t));
  return order;
}

/// A shipped example spec (docs/examples/NAME), built into the binary.
inline std::string readExample(const std::string &name) {
  for (const EmbeddedExample &example : embeddedExamples())
    if (name == example.path)
      return example.contents;
  FAIL("docs/examples/" << name << " is not among the embedded examples");
  return {};
}

inline std::string replaceAll(std::string text, const std::string &from, const std::string &to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

/// A shipped example (written for 16 query and 16 key/value heads) with
/// fewer heads, GQA 2:1 by default, to keep the CPU reference fast.
inline std::string exampleWithHeads(const std::string &name,
                                    const std::string &heads = "q_heads = 4, kv_heads = 2") {
  return replaceAll(readExample(name), "q_heads = 16, kv_heads = 16", heads);
}

/// Whether the reference keeps pair (q, k) of batch b, head h: the built-in
/// mask and the mask_mod, for a pair inside the sequences.
inline bool referenceKeeps(const reference::Problem &problem, int64_t b, int64_t h, int64_t q,
                           int64_t k) {
  return reference::maskAllows(problem.mask, q, k, problem.seqlenQ, problem.seqlenK) &&
         (!problem.maskMod || problem.maskMod(b, h, q, k));
}

/// body(b, h, query block, key tile) for every tile in coverage order.
/// Query blocks and key tiles count `queryBlocks` and `keyTiles` (0: those
/// of the problem's lengths), so that packed sequences can count those of
/// the longest one.
template <typename Body>
void forEachReferenceTile(const reference::Problem &problem, const AttnLaunchConfig &launch,
                          int64_t queryBlocks, int64_t keyTiles, Body &&body) {
  if (queryBlocks == 0)
    queryBlocks = (problem.seqlenQ + launch.blockM - 1) / launch.blockM;
  if (keyTiles == 0)
    keyTiles = (problem.seqlenK + launch.blockN - 1) / launch.blockN;
  for (int64_t b = 0; b < problem.batch; ++b)
    for (int64_t h = 0; h < problem.qHeads; ++h)
      for (int64_t qb = 0; qb < queryBlocks; ++qb)
        for (int64_t kt = 0; kt < keyTiles; ++kt)
          body(b, h, qb, kt);
}

/// The coverage byte of every (batch, head, query block, key tile) from the
/// reference's mask predicates: 0 no pair kept, 2 all pairs inside the
/// sequences kept and every key of the tile inside the key length, 1
/// otherwise; tiles counted as in forEachReferenceTile.
inline std::vector<uint8_t> referenceTileCoverage(const reference::Problem &problem,
                                                  const AttnLaunchConfig &launch,
                                                  int64_t queryBlocks = 0, int64_t keyTiles = 0) {
  std::vector<uint8_t> coverage;
  forEachReferenceTile(problem, launch, queryBlocks, keyTiles,
                       [&](int64_t b, int64_t h, int64_t qb, int64_t kt) {
    int64_t inside = 0, kept = 0;
    for (int64_t q = qb * launch.blockM; q < std::min((qb + 1) * launch.blockM, problem.seqlenQ); ++q)
      for (int64_t k = kt * launch.blockN; k < std::min((kt + 1) * launch.blockN, problem.seqlenK); ++k) {
        ++inside;
        kept += referenceKeeps(problem, b, h, q, k);
      }
    const bool keysInside = (kt + 1) * launch.blockN <= problem.seqlenK;
    coverage.push_back(kept == 0 ? 0 : (kept == inside && keysInside ? 2 : 1));
  });
  return coverage;
}

/// The stored key bits of the partial tiles of `problem`, those `coverage`
/// (its referenceTileCoverage) has at 1, in coverage order, as the bytes of
/// their words (ATTN's tile_key_bits layout): per tile blockM rows x 4 lane
/// quads, each word of blockN / 4 bits (4 bytes up to 128 keys a tile, else
/// 8), bit 2 j + e of quad c keeping key 8 j + 2 c + e of the tile. Tiles
/// counted as in forEachReferenceTile.
inline std::vector<uint8_t> referenceTileKeyWords(const reference::Problem &problem,
                                                  const AttnLaunchConfig &launch,
                                                  const std::vector<uint8_t> &coverage,
                                                  int64_t queryBlocks = 0, int64_t keyTiles = 0) {
  const int64_t wordBytes = launch.blockN <= 128 ? 4 : 8;
  std::vector<uint8_t> words;
  size_t tile = 0;
  forEachReferenceTile(problem, launch, queryBlocks, keyTiles,
                       [&](int64_t b, int64_t h, int64_t qb, int64_t kt) {
    if (coverage[tile++] != 1)
      return;
    for (int64_t row = 0; row < launch.blockM; ++row)
      for (int64_t quad = 0; quad < 4; ++quad) {
        uint64_t word = 0;
        const int64_t q = qb * launch.blockM + row;
        for (int64_t bit = 0; bit < launch.blockN / 4; ++bit) {
          const int64_t k = kt * launch.blockN + 8 * (bit / 2) + 2 * quad + bit % 2;
          if (q < problem.seqlenQ && k < problem.seqlenK && referenceKeeps(problem, b, h, q, k))
            word |= uint64_t(1) << bit;
        }
        for (int64_t byte = 0; byte < wordBytes; ++byte)
          words.push_back(uint8_t(word >> (8 * byte)));
      }
  });
  return words;
}

/// Checks a buffer from buildTileKeyBits against the expected coverage and
/// partial tiles' words: a slot per coverage byte (partial tiles numbered in
/// order, -1 for the others), then from tileKeyBitsOffset the words.
inline void checkTileKeyBits(const DeviceBuffer &keyBits, const std::vector<uint8_t> &coverage,
                             const std::vector<uint8_t> &words) {
  std::vector<int32_t> slots;
  int32_t partial = 0;
  for (uint8_t byte : coverage)
    slots.push_back(byte == 1 ? partial++ : -1);
  const size_t offset = size_t(attn_abi::tileKeyBitsOffset(int64_t(coverage.size())));
  REQUIRE(keyBits.size() == offset + words.size());
  std::vector<uint8_t> stored = keyBits.download<uint8_t>();
  std::vector<int32_t> storedSlots(slots.size());
  std::memcpy(storedSlots.data(), stored.data(), slots.size() * sizeof(int32_t));
  CHECK(storedSlots == slots);
  CHECK(std::vector<uint8_t>(stored.begin() + offset, stored.end()) == words);
}

/// The cost of every work tile in the kernel's default order (each (batch,
/// head)'s query blocks from the last one down): its key tiles that keep a
/// pair, from referenceTileCoverage. The work cost kernel counts the same
/// where it knows each tile's coverage (a proved mask_mod, a run-time tile
/// coverage, or none).
inline std::vector<int32_t> referenceWorkCosts(const reference::Problem &problem,
                                               const AttnLaunchConfig &launch) {
  const int64_t queryBlocks = (problem.seqlenQ + launch.blockM - 1) / launch.blockM;
  const int64_t keyTiles = (problem.seqlenK + launch.blockN - 1) / launch.blockN;
  std::vector<uint8_t> coverage = referenceTileCoverage(problem, launch);
  std::vector<int32_t> costs;
  for (int64_t headBatch = 0; headBatch < problem.batch * problem.qHeads; ++headBatch)
    for (int64_t queryBlock = queryBlocks - 1; queryBlock >= 0; --queryBlock) {
      auto row = coverage.begin() + (headBatch * queryBlocks + queryBlock) * keyTiles;
      costs.push_back(int32_t(keyTiles - std::count(row, row + keyTiles, uint8_t(0))));
    }
  return costs;
}

/// Checks a comparison with the reference: no non-finite output, no row
/// masked on one side only, every element within tolerance; `what` names
/// the case in the failure message.
inline void checkComparison(const harness::Comparison &result, const std::string &what) {
  INFO(what << "\nmax|dO|=" << result.maxAbsError << " rel-L2=" << result.relativeL2Error
            << " max|dLSE|=" << result.maxLseError << "\nfirst violation: "
            << result.firstViolation);
  CHECK(result.nonFinite == 0);
  CHECK(result.maskedRowMismatches == 0);
  CHECK(result.toleranceViolations == 0);
}

/// The host copies of a problem's captures, as the reference reads them.
inline std::vector<HostCapture> hostCaptures(const harness::ForwardProblem &data) {
  std::vector<HostCapture> host;
  for (const harness::HostDeviceCapture &capture : data.captures)
    host.push_back(HostCapture{capture.hostData(), capture.view.dtype, capture.view.shape});
  return host;
}

} // namespace attn::gputest

#endif // ATTN_TESTS_GPU_LOADEDKERNEL_H
