//===- CudaEmitter.h - Kernel template instantiation ------------*- C++ -*-===//
//
// Turns a planned kernel (problem, mask policy, tile plan and shared-memory
// plan, all decided by the passes) into one self-contained CUDA C++
// translation unit: the templates from templates/ are inlined, so NVRTC needs
// no include path, and the plan becomes compile-time constants.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_CODEGEN_CUDAEMITTER_H
#define ATTN_CODEGEN_CUDAEMITTER_H

#include "attn/Compiler/TileConstraints.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attn::codegen {

enum class ElementKind { BF16, F16 };
enum class MaskPolicyKind { None, Causal, SlidingWindow };

struct MaskPolicy {
  MaskPolicyKind kind = MaskPolicyKind::None;
  bool bottomRight = false;
  int64_t windowLeft = 0;
  int64_t windowRight = 0;
};

// Byte offsets of the buffers inside the (1024-byte aligned) dynamic shared
// memory of one block.
struct SharedMemoryOffsets {
  int64_t q = 0, k = 0, v = 0, oStaging = 0, barriers = 0, total = 0;
  int64_t scoreDiagonals = 0; // when the score_mod has diagonal functions
  int64_t scoreDiagonalBytes = 0; // the size of that buffer, 0 without one
  int64_t scoreDiagonalWindows = 1; // windows per consumer in that buffer
  int64_t keyBits = 0; // with stored key bits (a mask_mod the compiler cannot prove)
};

// A mask as and/or/nor of affine inequalities (#attn.tile_formula), for the
// per-tile coverage test.
struct TileFormula {
  enum class Kind { AllOf, AnyOf, NoneOf, AffineGe, DivSumGe };
  Kind kind = Kind::AllOf;
  // AffineGe: batch * b + head * h + q * q_idx + kv * kv_idx + c >= 0.
  // DivSumGe: the same plus the sum of divTerms >= 0.
  int64_t batch = 0, head = 0, q = 0, kv = 0, c = 0;
  // coef * floor((batch * b + head * h + q * q_idx + kv * kv_idx + c) / divisor)
  struct DivTerm {
    int64_t coef = 1, batch = 0, head = 0, q = 0, kv = 0, c = 0, divisor = 1;
  };
  std::vector<DivTerm> divTerms;
  std::vector<TileFormula> terms;
};

// A captured buffer as the device code sees it.
struct CaptureShape {
  bool isFloat = true; // f32, else i32
  int rank = 1;
};

// One user region lowered to device functions (attn-lower-mods), printed by
// MLIR's C++ emitter. `function` takes the region's arguments, kv as float
// after kv, the captures, then one value per entry of `rowFunctions`:
// rowFunctions[i](b, h, q, captures...) computes, once per query row, the
// part of the region that does not depend on the key (a `rowTypes[i]`).
//
// A score region may also have `diagonalFunctions`: diagonalFunctions[i](b,
// h, d, captures...) computes a value that depends on q and kv only through
// d = q - kv (a `diagonalTypes[i]`, float or int32_t), which the kernel
// stages per key tile; `function` takes those values after the captures and
// before the row values.
struct ModFunctions {
  std::string function; // empty: no such region
  std::vector<std::string> rowFunctions;
  std::vector<std::string> rowTypes;
  std::vector<std::string> diagonalFunctions;
  std::vector<std::string> diagonalTypes;
  bool usesKeyFloat = false; // whether `function` reads kv as float
  // Whether a row function reads q: if none does, the row values are the
  // same for every row of a (batch, head), and the kernel computes them once.
  bool rowsUseQuery = false;
  // score_mod's terms taken out of `function` that depend on neither the
  // key nor the score, a function of (b, h, q, captures...): the row's
  // log-sum-exp adds them. Empty: none.
  std::string rowOffsetFunction;
  // `function` reads kv (as f32) relative to an origin the kernel picks per
  // work tile, and rowOffsetFunction takes the origin last.
  bool keyRelative = false;
  bool empty() const { return function.empty(); }
};

// The user regions: `source` defines the functions of `mask`
// (b, h, q, kv, ...) and `score` (score, b, h, q, kv, ...).
struct UserMods {
  std::string source;
  ModFunctions mask;
  ModFunctions score;
  std::vector<CaptureShape> captures;
  bool hasMaskFormula = false;
  TileFormula maskFormula;
  // Constant factors attn-lower-mods took out of the score region: of the
  // score before it, and of its result (positive).
  float scoreInputScale = 1.f;
  float scoreOutputScale = 1.f;
  // Every score_mod result is -inf or within [-scoreBound, scoreBound]
  // (before scoreOutputScale); 0 when unbounded.
  float scoreBound = 0.f;
};

struct ForwardKernelConfig {
  std::string kernelName; // the spec's symbol, for the header comment only
  ElementKind element = ElementKind::BF16;
  int headDim = 128;
  TileConfig tile;
  MaskPolicy mask;
  UserMods mods;
  SharedMemoryOffsets smem;
  // Whether the forward kernel also reads paged KV caches (kPagedKv).
  bool pagedKv = false;
};

// The complete translation unit for the forward softmax kernel.
std::string emitForwardKernelSource(const ForwardKernelConfig &config);

// Byte offsets of the backward kernel's buffers (attn-plan-smem's backward
// plan): the K and V tiles, rings of `stages` Q, dO, log-sum-exp and delta
// slots, two dSᵀ tiles (and two Pᵀ tiles where consumers share a key tile;
// else p is 0), dQ's fp32 staging and the mbarriers.
struct BackwardSharedMemoryOffsets {
  int64_t k = 0, v = 0, q = 0, dO = 0, lse = 0, delta = 0, ds = 0, p = 0, dqStaging = 0,
          dqTurns = 0, barriers = 0, total = 0;
  int64_t dqStagingBuffers = 1; // per consumer warpgroup
  // The key tile's capture-gradient sums by diagonal, where the plan has them.
  std::optional<int64_t> diagonalSums;
  int64_t barrierCount = 0;
};

// The backward softmax kernels (templates/attn_bwd_sm90.cuh): tile.blockM
// query rows a step, tile.blockN keys a block (64 per consumer warpgroup).
// The backward's user regions (attn-differentiate-mods, lowered by
// attn-lower-mods), evaluated a pair at a time. Each function name is empty
// without its region.
struct BackwardMods {
  std::string source; // the functions, printed by MLIR's C++ emitter
  // (b, h, q, kv, captures...) -> bool
  std::string maskFunction;
  // (s, b, h, q, kv, captures..., diagonal values...) -> float
  std::string scoreFunction;
  // score_mod's values that depend on q and kv only through d = q - kv:
  // (b, h, d, captures...) -> f32 or i32, evaluated once per diagonal.
  std::vector<std::string> diagonalFunctions;
  std::vector<std::string> diagonalTypes;
  // (dy, s, b, h, q, kv, captures..., gradients...) -> dy * d score / d s,
  // adding into the gradients of the learnable captures.
  std::string scoreVjpFunction;
  std::vector<CaptureShape> captures;
  // The rank of each learnable capture's gradient, in declaration order.
  std::vector<int> gradientRanks;
  // One learnable capture, whose one addition's element depends on the pair
  // only through q - kv (attn.per_diagonal): the consumers sum each
  // diagonal's pairs before adding to memory.
  bool diagonalGradient = false;
  // What attn-classify-blocks proved of the mask_mod (the forward's).
  bool hasMaskFormula = false;
  TileFormula maskFormula;
};

struct BackwardKernelConfig {
  std::string kernelName; // for the header comment only
  ElementKind element = ElementKind::BF16;
  int headDim = 128;
  TileConfig tile;
  MaskPolicy mask;
  BackwardMods mods;
  BackwardSharedMemoryOffsets smem;
};

// Whether the backward's main kernel walks a step list (a mask_mod, one
// pass): the step-list kernel writes each block's steps that the mask_mod
// keeps a pair of, and the launch sizes the list in the workspace
// (AttnLaunchConfig::stepList).
bool backwardWalksStepList(const BackwardKernelConfig &config);

// The complete translation unit for the backward: the preprocess, the
// step list, the main kernel and dQ's conversion.
std::string emitBackwardKernelSource(const BackwardKernelConfig &config);

// Linear attention and retention (templates/attn_linear_sm90.cuh): one
// block per (64 value columns, query head, batch) walks the chunks of the
// sequence, carrying the state.
enum class FeatureMapKind { Identity, Relu, EluPlusOne };
enum class DecayKind { None, Fixed, Gated };

struct LinearSharedMemoryOffsets {
  int64_t q = 0, k = 0, v = 0, state = 0, oStaging = 0, decay = 0, decayRing = 0, keySum = 0,
          barriers = 0, total = 0;
};

struct LinearKernelConfig {
  std::string kernelName; // for the header comment only
  ElementKind element = ElementKind::BF16;
  int headDim = 128;
  int chunk = 64;
  int blockColumns = 64; // value columns of a block: 64 per consumer warpgroup
  int stages = 2;
  bool causal = true;
  FeatureMapKind featureMap = FeatureMapKind::Identity;
  bool normalize = false;
  DecayKind decay = DecayKind::None;
  // Fixed decay: gamma of each query head.
  std::vector<double> gammas;
  LinearSharedMemoryOffsets smem;
  // The chunkwise kernel reads the backward's pass options (reversed walk,
  // swapped heads, the operands the feature map applies to).
  bool backwardPasses = false;
};

// The complete translation unit for linear attention or retention: the
// chunkwise kernel and the one-token recurrent step.
std::string emitLinearKernelSource(const LinearKernelConfig &config);

// The backward module of the same spec (normalize must be false): the
// chunkwise kernel built with the backward's pass options, which its three
// passes run, and the helper kernels of attn_linear_bwd_sm90.cuh.
std::string emitLinearBackwardKernelSource(const LinearKernelConfig &config);

// The WGMMA wrapper specializations for m64nNk16 with fp32 accumulation.
// SS: both operands from shared memory, K-major (Q Kᵀ). RS: A from
// registers, B MN-major (P V). SSMN: both from shared memory, MN-major
// (the backward's dS K). SSBMN: A K-major, B MN-major (dK and dV where
// consumers share a key tile). SSAMN: A MN-major, B K-major (the
// backward's transposed dQ, Kᵀ dSᵀ).
enum class WgmmaForm { SS, RS, SSMN, SSBMN, SSAMN };
std::string emitWgmmaWrapper(int n, ElementKind element, WgmmaForm form);

// Inlines `#include "..."` directives that name embedded template files,
// each file once. Unknown includes are an error (returned in `error`).
std::string expandTemplate(std::string_view rootFile, std::string &error);

// The embedded template files (generated at build time from templates/).
struct EmbeddedTemplate {
  const char *path;
  const char *contents;
};
const std::vector<EmbeddedTemplate> &embeddedTemplates();

// Hash of every embedded template's contents (for cache keys).
uint64_t templatesFingerprint();

} // namespace attn::codegen

#endif // ATTN_CODEGEN_CUDAEMITTER_H
