//===- CudaEmitter.cpp - Kernel template instantiation --------------------===//

#include "attn/CodeGen/CudaEmitter.h"
#include "attn/Compiler/TileConstraints.h"
#include "attn_params.h"

#include <algorithm>
#include <initializer_list>
#include <set>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace attn::codegen {

namespace {

const char *elementTag(ElementKind element) {
  return element == ElementKind::BF16 ? "Bf16" : "F16";
}

const char *elementPtx(ElementKind element) {
  return element == ElementKind::BF16 ? "bf16" : "f16";
}

// Only identifier characters of a spec's symbol reach the emitted source, and
// only inside a line comment.
std::string sanitizeForComment(std::string_view text) {
  std::string out;
  for (char c : text) {
    bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '_' || c == '.' || c == '-';
    out.push_back(safe ? c : '?');
  }
  return out;
}

const EmbeddedTemplate *findTemplate(std::string_view path) {
  for (const EmbeddedTemplate &file : embeddedTemplates())
    if (path == file.path)
      return &file;
  return nullptr;
}

void expandInto(std::string_view path, std::set<std::string> &included, std::ostringstream &out,
                std::string &error) {
  if (!included.insert(std::string(path)).second)
    return;
  const EmbeddedTemplate *file = findTemplate(path);
  if (!file) {
    error = "unknown template file '" + std::string(path) + "'";
    return;
  }
  std::istringstream lines(file->contents);
  std::string line;
  out << "// ---- " << path << "\n";
  while (std::getline(lines, line)) {
    std::string_view view(line);
    if (view.rfind("#pragma once", 0) == 0)
      continue;
    if (view.rfind("#include \"", 0) == 0) {
      size_t close = view.find('"', 10);
      if (close == std::string_view::npos) {
        error = "malformed include in template '" + std::string(path) + "'";
        return;
      }
      expandInto(view.substr(10, close - 10), included, out, error);
      if (!error.empty())
        return;
      continue;
    }
    out << line << "\n";
  }
}

/// The C++ expression of a formula's coverage of a tile, over the variables
/// of userMaskCoverage (b, h, q0, q1, k0, k1).
void emitCoverage(const TileFormula &formula, std::ostringstream &out) {
  if (formula.kind == TileFormula::Kind::DivSumGe) {
    // The affine part is a term with divisor 1; the parts' ranges add up.
    auto term = [&](const TileFormula::DivTerm &t) {
      out << "divTermRange(" << t.coef << "LL, " << t.batch << "LL * b + " << t.head << "LL * h + "
          << t.c << "LL, " << t.q << "LL, " << t.kv << "LL, " << t.divisor << "LL, q0, q1, k0, k1)";
    };
    out << "rangeCoverage(";
    term({1, formula.batch, formula.head, formula.q, formula.kv, formula.c, 1});
    for (const TileFormula::DivTerm &t : formula.divTerms) {
      out << " + ";
      term(t);
    }
    out << ")";
    return;
  }
  if (formula.kind == TileFormula::Kind::AffineGe) {
    out << "affineCoverage(" << formula.batch << "LL * b + " << formula.head << "LL * h + "
        << formula.c << "LL, " << formula.q << "LL, " << formula.kv << "LL, q0, q1, k0, k1)";
    return;
  }
  if (formula.terms.empty()) {
    // all_of() is true, any_of() and none_of()... of nothing: false, true.
    bool keeps = formula.kind != TileFormula::Kind::AnyOf;
    out << (keeps ? "Coverage::Full" : "Coverage::Empty");
    return;
  }
  const char *combine = formula.kind == TileFormula::Kind::AllOf ? "coverageAnd" : "coverageOr";
  if (formula.kind == TileFormula::Kind::NoneOf)
    out << "coverageNot(";
  for (size_t i = 0; i + 1 < formula.terms.size(); ++i)
    out << combine << "(";
  emitCoverage(formula.terms[0], out);
  for (size_t i = 1; i < formula.terms.size(); ++i) {
    out << ", ";
    emitCoverage(formula.terms[i], out);
    out << ")";
  }
  if (formula.kind == TileFormula::Kind::NoneOf)
    out << ")";
}

/// Whether every inequality of `formula` is affine (no floor quotient), so
/// that for a fixed row each one keeps the keys on one side of a bound.
bool hasOnlyAffineTerms(const TileFormula &formula) {
  if (formula.kind == TileFormula::Kind::DivSumGe)
    return false;
  for (const TileFormula &term : formula.terms)
    if (!hasOnlyAffineTerms(term))
      return false;
  return true;
}

/// Whether ThreadKeys can take an affine inequality's row term r = batch b +
/// head h + q q_idx + c in 32 bits: r, the key bound it gives and that
/// bound's distance from any tile's first key all fit, for batch and head
/// in [0, 2^31) and positions up to attn_abi::kMaxRegionPosition.
bool affineBoundFits32(const TileFormula &inequality) {
  using Wide = __int128;
  const Wide intMax = INT32_MAX, position = attn_abi::kMaxRegionPosition;
  if (inequality.kv > (1 << 29) || inequality.kv < -(1 << 29))
    return false;
  auto span = [](Wide coefficient, Wide largest) {
    return std::make_pair(std::min<Wide>(0, coefficient * largest),
                          std::max<Wide>(0, coefficient * largest));
  };
  Wide low = inequality.c, high = inequality.c;
  for (auto [coefficient, largest] : {std::make_pair(Wide(inequality.batch), intMax),
                                      std::make_pair(Wide(inequality.head), intMax),
                                      std::make_pair(Wide(inequality.q), position)}) {
    auto [spanLow, spanHigh] = span(coefficient, largest);
    low += spanLow;
    high += spanHigh;
  }
  // Within 3 * 2^29 of 0, so that a negation or an add of less than 2^29
  // (a divisor, the + 1 of a bound) stays inside an int too.
  const Wide margin = Wide(3) << 29;
  auto fits = [&](Wide value) { return value >= -margin && value <= margin; };
  if (inequality.kv == 0) // only the sign of r matters
    return fits(low) && fits(high);
  // The bound: key >= -floor(r / kv) for kv > 0, key < floor(r / -kv) + 1
  // for kv < 0 (floor moves a value by less than 1, so these enclose it).
  Wide boundLow = low, boundHigh = high;
  if (inequality.kv > 0) {
    boundLow = -high / inequality.kv - 1;
    boundHigh = -low / inequality.kv + 1;
  } else if (inequality.kv < 0) {
    boundLow = low / -inequality.kv - 1;
    boundHigh = high / -inequality.kv + 2;
  }
  return fits(low) && fits(high) && fits(boundLow) && fits(boundHigh) &&
         fits(boundLow - position) && fits(boundHigh);
}

/// The C++ expression of the keys a formula keeps for row q as bits of
/// `keys` (attn_dev::ThreadKeys): and, or and nor of the bits each
/// inequality keeps. The formula must have only affine terms. An inequality
/// whose row term fits in 32 bits (affineBoundFits32) is computed as an
/// int, a few instructions fewer per row.
void emitKeyBits(const TileFormula &formula, std::ostringstream &out) {
  if (formula.kind == TileFormula::Kind::AffineGe) {
    const char *type = affineBoundFits32(formula) ? "int" : "long long";
    out << "keys.template affine<" << type << ", " << formula.kv << ">(static_cast<" << type
        << ">(" << formula.batch << "LL * b + " << formula.head << "LL * h + " << formula.q
        << "LL * q + " << formula.c << "LL))";
    return;
  }
  const bool any = formula.kind != TileFormula::Kind::AllOf;
  if (formula.terms.empty()) {
    // all_of() keeps every key, any_of() none, none_of() every key.
    out << (formula.kind == TileFormula::Kind::AnyOf ? "keys.none()" : "keys.all()");
    return;
  }
  out << (formula.kind == TileFormula::Kind::NoneOf ? "~(" : "(");
  for (size_t i = 0; i < formula.terms.size(); ++i) {
    if (i > 0)
      out << (any ? " | " : " & ");
    emitKeyBits(formula.terms[i], out);
  }
  out << ")";
}

/// score_mod's values that depend on q and kv only through d = q - kv, as
/// the kernels read them: kScoreDiagonals, kScoreDiagonalSlots (at least
/// one, for the array type) and scoreDiagonal(p, n, b, h, d), value n as a
/// 32-bit word. `params` names the parameter block's type; `generic` makes
/// the function a template over it (named `Params`).
void emitScoreDiagonals(const std::vector<std::string> &functions,
                        const std::string &captureArgs, const char *params, bool generic,
                        std::ostringstream &out) {
  out << "  static constexpr int kScoreDiagonals = " << functions.size() << ";\n"
      << "  static constexpr int kScoreDiagonalSlots = " << std::max<size_t>(1, functions.size())
      << ";\n";
  if (generic)
    out << "  template <class " << params << ">\n";
  out << "  static __device__ __forceinline__ unsigned scoreDiagonal(const " << params
      << " &p, int n, long long b, long long h, long long d) {\n";
  for (size_t i = 0; i < functions.size(); ++i)
    out << "    if (n == " << i << ")\n      return attn_dev::toBits(" << functions[i] << "(b, h, d"
        << captureArgs << "));\n";
  out << "    return 0u;\n  }\n";
}

/// The staged diagonal values as a mod function's trailing arguments, from
/// the words `diagonals[i]`.
std::string diagonalArguments(const std::vector<std::string> &types) {
  std::string arguments;
  for (size_t i = 0; i < types.size(); ++i)
    arguments += ", attn_dev::fromBits(diagonals[" + std::to_string(i) + "], " +
                 (types[i] == "float" ? "float" : "int") + "())";
  return arguments;
}

/// A region's hooks in UserMods: the struct `<Name>Row` of its row values,
/// `<prefix>Row(p, b, h, q)` computing them, and `call` (`keeps` or `score`)
/// taking them with the key. `leading` is the region's argument before b
/// ("s, " for a score), `fallback` the result without a region. With
/// `diagonalParam`, `call` also takes the pair's staged diagonal values as
/// 32-bit words.
void emitModHooks(const ModFunctions &mod, const std::string &captureArgs, const char *name,
                  const char *prefix, const char *result, const char *call,
                  const char *leadingParam, const char *leading, const char *fallback,
                  const char *diagonalParam, std::ostringstream &out) {
  // Generic in the parameter block: the forward kernel and the short-query
  // kernels read the captures from their own.
  const char *params = "const Params &p";
  out << "  static constexpr bool k" << name << "UsesKeyFloat = "
      << (mod.usesKeyFloat ? "true" : "false") << ";\n";
  out << "  static constexpr bool k" << name << "RowUsesQuery = "
      << (mod.rowsUseQuery ? "true" : "false") << ";\n";
  out << "  struct " << name << "Row {\n";
  for (size_t i = 0; i < mod.rowTypes.size(); ++i)
    out << "    " << mod.rowTypes[i] << " v" << i << ";\n";
  out << "  };\n";
  out << "  template <class Params>\n"
      << "  static __device__ __forceinline__ " << name << "Row " << prefix << "Row(" << params
      << ", long long b, long long h, long long q) {\n"
      << "    " << name << "Row row;\n";
  for (size_t i = 0; i < mod.rowFunctions.size(); ++i)
    out << "    row.v" << i << " = " << mod.rowFunctions[i] << "(b, h, q" << captureArgs << ");\n";
  out << "    return row;\n  }\n";
  out << "  template <class Params>\n"
      << "  static __device__ __forceinline__ " << result << " " << call << "(" << params << ", const "
      << name << "Row &row, " << leadingParam
      << "long long b, long long h, long long q, long long k, float kf" << diagonalParam
      << ") {\n";
  if (mod.empty()) {
    out << "    return " << fallback << ";\n";
  } else {
    out << "    return " << mod.function << "(" << leading << "b, h, q, k, kf" << captureArgs
        << diagonalArguments(mod.diagonalTypes);
    for (size_t i = 0; i < mod.rowFunctions.size(); ++i)
      out << ", row.v" << i;
    out << ");\n";
  }
  out << "  }\n";
}

/// `value` as a C++ float literal that reads back exactly (hexadecimal).
std::string floatLiteral(float value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%af", static_cast<double>(value));
  return text;
}

/// namespace attn_plan's UserMods: the kernel's hooks into the user regions.
void emitUserMods(const UserMods &mods, std::ostringstream &out) {
  out << "struct UserMods {\n"
      << "  static constexpr bool kHasMaskMod = " << (mods.mask.empty() ? "false" : "true")
      << ";\n"
      << "  static constexpr bool kMaskProved = " << (mods.hasMaskFormula ? "true" : "false")
      << ";\n"
      << "  static constexpr bool kHasScoreMod = " << (mods.score.empty() ? "false" : "true")
      << ";\n"
      << "  // Constant factors of score_mod the kernel applies: to the score before it\n"
      << "  // (with the softmax scale) and to its result (in the softmax's exponent).\n"
      << "  static constexpr float kScoreInputScale = " << floatLiteral(mods.scoreInputScale)
      << ";\n"
      << "  static constexpr float kScoreOutputScale = " << floatLiteral(mods.scoreOutputScale)
      << ";\n"
      << "  // Every score_mod result is -inf or within [-kScoreBound, kScoreBound]\n"
      << "  // before kScoreOutputScale (0: unbounded).\n"
      << "  static constexpr float kScoreBound = " << floatLiteral(mods.scoreBound) << ";\n";

  out << "  // Whether mask_mod keeps all, none or some pairs of the tile [q0, q1] x [k0, k1].\n"
      << "  static __device__ __forceinline__ attn_dev::Coverage maskCoverage(long long b, long long "
         "h, long long q0, long long q1, long long k0, long long k1) {\n"
      << "    using namespace attn_dev;\n";
  if (mods.mask.empty())
    out << "    return Coverage::Full;\n";
  else if (!mods.hasMaskFormula)
    out << "    return Coverage::Partial; // not analysable: decided per element\n";
  else {
    out << "    return ";
    emitCoverage(mods.maskFormula, out);
    out << ";\n";
  }
  out << "  }\n";
  // A formula of affine inequalities, evaluated for a row over a thread's
  // keys of a tile: each inequality keeps the keys on one side of a bound,
  // so the partial tiles test one bit per pair instead of the region.
  const bool keyBits = mods.hasMaskFormula && hasOnlyAffineTerms(mods.maskFormula);
  out << "  static constexpr bool kMaskKeyBits = " << (keyBits ? "true" : "false") << ";\n"
      << "  // The keys of `keys` mask_mod keeps for row q (with kMaskKeyBits).\n"
      << "  template <class Keys>\n"
      << "  static __device__ __forceinline__ typename Keys::Bits maskKeyBits(long long b, long "
         "long h, long long q, const Keys &keys) {\n"
      << "    return ";
  if (keyBits)
    emitKeyBits(mods.maskFormula, out);
  else
    out << "keys.all()";
  out << ";\n  }\n";

  std::ostringstream captureArgs;
  for (size_t i = 0; i < mods.captures.size(); ++i)
    captureArgs << ", attn_dev::captureOf<" << (mods.captures[i].isFloat ? "float" : "int")
                << ", " << mods.captures[i].rank << ">(p.captures[" << i << "])";
  out << "  // mask_mod and score_mod: what they compute once per query row, and per key.\n";
  emitModHooks(mods.mask, captureArgs.str(), "Mask", "mask", "bool", "keeps", "", "", "true", "",
               out);
  // For the run-time tile coverage, which tests pairs one at a time.
  out << "  template <class Params>\n"
      << "  static __device__ __forceinline__ bool keeps(const Params &p, long "
         "long b, long long h, long long q, long long k) {\n"
      << "    return keeps(p, maskRow(p, b, h, q), b, h, q, k, "
         "attn_dev::exactIntToFloat(static_cast<int>(k)));\n  }\n";
  // score_mod's values that depend on q and kv only through d = q - kv,
  // which the kernel stages per key tile.
  const ModFunctions &score = mods.score;
  emitScoreDiagonals(score.diagonalFunctions, captureArgs.str(), "Params", /*generic=*/true,
                     out);
  emitModHooks(score, captureArgs.str(), "Score", "score", "float", "score", "float s, ", "s, ",
               "s", ", const unsigned (&diagonals)[kScoreDiagonalSlots]", out);
  // The terms attn-lower-mods took out of score_mod because they move every
  // score of a row alike: they belong to the row's log-sum-exp only.
  // With kScoreKeyRelative, score() reads kv as f32 measured from an origin
  // the kernel picks, and the offset takes it.
  out << "  static constexpr bool kHasScoreRowOffset = "
      << (score.rowOffsetFunction.empty() ? "false" : "true") << ";\n"
      << "  static constexpr bool kScoreKeyRelative = " << (score.keyRelative ? "true" : "false")
      << ";\n"
      << "  template <class Params>\n"
      << "  static __device__ __forceinline__ float scoreRowOffset(const Params "
         "&p, long long b, long long h, long long q, int keyOrigin) {\n";
  if (score.rowOffsetFunction.empty())
    out << "    return 0.f;\n";
  else
    out << "    return " << score.rowOffsetFunction << "(b, h, q" << captureArgs.str()
        << (score.keyRelative ? ", keyOrigin" : "") << ");\n";
  out << "  }\n};\n";
}

/// namespace attn_plan's BackwardMods: the backward kernel's hooks into the
/// user regions, a pair at a time.
void emitBackwardMods(const BackwardMods &mods, std::ostringstream &out) {
  std::ostringstream captureArgs;
  for (size_t i = 0; i < mods.captures.size(); ++i)
    captureArgs << ", attn_dev::captureOf<" << (mods.captures[i].isFloat ? "float" : "int")
                << ", " << mods.captures[i].rank << ">(p.captures[" << i << "])";
  std::ostringstream gradientArgs;
  for (size_t i = 0; i < mods.gradientRanks.size(); ++i)
    gradientArgs << ", gradients.g" << i;
  const std::string captures = captureArgs.str();
  auto call = [](const std::string &function, const std::string &arguments,
                 const char *fallback) {
    return function.empty() ? std::string(fallback) : function + "(" + arguments + ")";
  };
  const char *params = "const attn_abi::AttnBwdParams &p";
  const char *pair = "long long b, long long h, long long q, long long k";
  out << "struct BackwardMods {\n"
      << "  static constexpr bool kHasMaskMod = " << (mods.maskFunction.empty() ? "false" : "true")
      << ";\n"
      << "  static constexpr bool kHasScoreMod = "
      << (mods.scoreFunction.empty() ? "false" : "true") << ";\n"
      << "  static constexpr bool kMaskProved = " << (mods.hasMaskFormula ? "true" : "false")
      << ";\n"
      << "  static constexpr bool kLearnsCaptures = "
      << (mods.gradientRanks.empty() ? "false" : "true") << ";\n"
      << "  static constexpr bool kHasCaptures = " << (mods.captures.empty() ? "false" : "true")
      << ";\n"
      << "  // One learnable capture, added to by diagonal (q - kv) only.\n"
      << "  static constexpr bool kDiagonalGradient = "
      << (mods.diagonalGradient ? "true" : "false") << ";\n"
      << "  // Whether mask_mod keeps all, none or some pairs of the tile [q0, q1] x [k0, k1].\n"
      << "  static __device__ __forceinline__ attn_dev::Coverage maskCoverage(long long b, long "
         "long h, long long q0, long long q1, long long k0, long long k1) {\n"
      << "    using namespace attn_dev;\n"
      << "    return ";
  if (mods.hasMaskFormula)
    emitCoverage(mods.maskFormula, out);
  else
    out << (mods.maskFunction.empty() ? "Coverage::Full" : "Coverage::Partial");
  out << ";\n  }\n"
      << "  // score_mod's values that depend on q and kv only through d = q - kv:\n"
      << "  // each warp evaluates a step's diagonals once (bwd/score_diagonals.cuh).\n";
  emitScoreDiagonals(mods.diagonalFunctions, captures, "attn_abi::AttnBwdParams",
                     /*generic=*/false, out);
  out << "  // A consumer thread's accumulators of the learnable captures' gradients.\n"
      << "  struct Gradients {\n";
  for (size_t i = 0; i < mods.gradientRanks.size(); ++i)
    out << "    attn_dev::CaptureGradient<" << mods.gradientRanks[i] << "> g" << i << ";\n";
  out << "    __device__ __forceinline__ void init(" << params << ") {\n";
  for (size_t i = 0; i < mods.gradientRanks.size(); ++i)
    out << "      g" << i << " = attn_dev::gradientOf<" << mods.gradientRanks[i]
        << ">(p.capture_grads[" << i << "], p.capture_grads_exact);\n";
  out << "    }\n"
      << "    __device__ __forceinline__ void enable(bool on) {\n";
  for (size_t i = 0; i < mods.gradientRanks.size(); ++i)
    out << "      g" << i << ".enabled = on;\n";
  out << "    }\n"
      << "    __device__ __forceinline__ void findElements(bool on) {\n";
  for (size_t i = 0; i < mods.gradientRanks.size(); ++i)
    out << "      g" << i << ".findingElement = on;\n";
  out << "    }\n"
      << "    // With kDiagonalGradient: the sum of the pair just evaluated, taken\n"
      << "    // out; and a diagonal's sum added to the element findElements noted\n"
      << "    // (every lane of the warp calls it).\n"
      << "    __device__ __forceinline__ float takeDiagonalSum() {\n";
  if (mods.diagonalGradient)
    out << "      const float sum = g0.sum;\n      g0.sum = 0.f;\n      return sum;\n";
  else
    out << "      return 0.f;\n";
  out << "    }\n"
      << "    __device__ __forceinline__ void flushDiagonalSum(float sum) {\n";
  if (mods.diagonalGradient)
    out << "      attn_dev::flushWarpSums(g0, sum);\n";
  out << "    }\n"
      << "    // Every lane of the warp calls it.\n"
      << "    __device__ __forceinline__ void flush() {\n";
  for (size_t i = 0; i < mods.gradientRanks.size(); ++i)
    out << "      attn_dev::flushGradient(g" << i << ");\n";
  out << "    }\n  };\n"
      << "  static __device__ __forceinline__ bool keeps(" << params << ", " << pair << ") {\n"
      << "    return " << call(mods.maskFunction, "b, h, q, k" + captures, "true") << ";\n  }\n"
      << "  static __device__ __forceinline__ float score(" << params << ", float s, " << pair
      << ", const unsigned (&diagonals)[kScoreDiagonalSlots]) {\n"
      << "    return "
      << call(mods.scoreFunction,
              "s, b, h, q, k" + captures + diagonalArguments(mods.diagonalTypes), "s")
      << ";\n  }\n"
      << "  static __device__ __forceinline__ float scoreVjp(" << params
      << ", Gradients &gradients, float dy, float s, " << pair << ") {\n"
      << "    return "
      << call(mods.scoreVjpFunction, "dy, s, b, h, q, k" + captures + gradientArgs.str(), "dy")
      << ";\n  }\n};\n";
}

/// namespace attn_plan's `using Mask = ...;` for a mask policy.
void emitMaskPolicy(const MaskPolicy &mask, std::ostringstream &out) {
  switch (mask.kind) {
  case MaskPolicyKind::None:
    out << "using Mask = attn_dev::NoMask;\n";
    break;
  case MaskPolicyKind::Causal:
    out << "using Mask = attn_dev::CausalMask;\n";
    break;
  case MaskPolicyKind::SlidingWindow:
    out << "using Mask = attn_dev::SlidingWindowMask<" << mask.windowLeft << "LL, "
        << mask.windowRight << "LL>;\n";
    break;
  }
  out << "constexpr bool kMaskBottomRight = " << (mask.bottomRight ? "true" : "false") << ";\n";
}
} // namespace

std::string expandTemplate(std::string_view rootFile, std::string &error) {
  std::set<std::string> included;
  std::ostringstream out;
  expandInto(rootFile, included, out, error);
  return out.str();
}

std::string emitWgmmaWrapper(int n, ElementKind element, WgmmaForm form) {
  const int accumulators = n / 2;
  const bool fromRegisters = form == WgmmaForm::RS;
  const char *name = fromRegisters              ? "WgmmaRS"
                     : form == WgmmaForm::SSMN  ? "WgmmaSSMN"
                     : form == WgmmaForm::SSBMN ? "WgmmaSSBMN"
                     : form == WgmmaForm::SSAMN ? "WgmmaSSAMN"
                                                : "WgmmaSS";
  // The transpose immediates of A and B (shared-memory operands only).
  const char *transpose = form == WgmmaForm::SSMN    ? "1, 1"
                          : form == WgmmaForm::SSBMN ? "0, 1"
                          : form == WgmmaForm::SSAMN ? "1, 0"
                                                     : "0, 0";
  std::ostringstream out;
  out << "template <> struct " << name << "<" << n << ", " << elementTag(element) << "> {\n";
  if (fromRegisters)
    out << "  static __device__ __forceinline__ void mma(float (&d)[" << accumulators
        << "], u32 a0, u32 a1, u32 a2, u32 a3, u64 b) {\n";
  else
    out << "  static __device__ __forceinline__ void mma(float (&d)[" << accumulators
        << "], u64 a, u64 b, int accumulate) {\n";

  out << "    asm volatile(\"{\\n.reg .pred p;\\n\"\n";
  if (fromRegisters)
    out << "                 \"setp.ne.b32 p, 1, 0;\\n\"\n";
  else
    out << "                 \"setp.ne.b32 p, %" << accumulators + 2 << ", 0;\\n\"\n";
  out << "                 \"wgmma.mma_async.sync.aligned.m64n" << n << "k16.f32."
      << elementPtx(element) << "." << elementPtx(element) << " {";
  for (int i = 0; i < accumulators; ++i)
    out << (i ? ", " : "") << "%" << i;
  out << "}, ";
  if (fromRegisters)
    out << "{%" << accumulators << ", %" << accumulators + 1 << ", %" << accumulators + 2 << ", %"
        << accumulators + 3 << "}, %" << accumulators + 4 << ", p, 1, 1, 1;\\n\"\n";
  else
    out << "%" << accumulators << ", %" << accumulators + 1 << ", p, 1, 1, " << transpose
        << ";\\n\"\n";
  out << "                 \"}\\n\"\n                 : ";
  for (int i = 0; i < accumulators; ++i)
    out << (i ? ", " : "") << "\"+f\"(d[" << i << "])";
  if (fromRegisters)
    out << "\n                 : \"r\"(a0), \"r\"(a1), \"r\"(a2), \"r\"(a3), \"l\"(b));\n";
  else
    out << "\n                 : \"l\"(a), \"l\"(b), \"r\"(accumulate));\n";
  out << "  }\n};\n";
  return out.str();
}

namespace {
/// The start of every translation unit: a header naming the kernel, the
/// parameter ABI, and the device library shared by the kernels followed by
/// `deviceFiles`, each expanded once. Errors are appended to `error`.
void emitUnitPrologue(std::ostringstream &out, const std::string &kernelName,
                      const char *description, std::initializer_list<const char *> deviceFiles,
                      std::string &error) {
  out << "// Generated by attnc for kernel @" << sanitizeForComment(kernelName) << ".\n"
      << "// " << description << ", sm_90a. Do not edit: regenerate from the spec.\n\n";
  out << expandTemplate("attn_params.h", error);
  out << "using attn_abi::TensorMapBlob;\n\n";
  for (const char *device : {"device/numeric.cuh", "device/mbarrier.cuh", "device/tma.cuh",
                             "device/warpgroup.cuh", "device/wgmma.cuh", "device/masks.cuh"})
    out << expandTemplate(device, error);
  for (const char *device : deviceFiles)
    out << expandTemplate(device, error);
}
} // namespace

std::string emitForwardKernelSource(const ForwardKernelConfig &config) {
  std::ostringstream out;
  std::string error;
  emitUnitPrologue(out, config.kernelName, "Forward softmax attention",
                   {"device/captures.cuh", "device/online_softmax.cuh"}, error);

  if (!config.mods.source.empty())
    out << "// ---- user regions (attn-lower-mods, MLIR's C++ emitter)\n"
        << config.mods.source << "\n";

  out << "// ---- WGMMA shapes of this plan\nnamespace attn_dev {\n"
      << emitWgmmaWrapper(config.tile.blockN, config.element, WgmmaForm::SS)
      << emitWgmmaWrapper(config.headDim, config.element, WgmmaForm::RS)
      << "} // namespace attn_dev\n\n";

  out << "// ---- plan\nnamespace attn_plan {\n"
      << "using Element = attn_dev::" << elementTag(config.element) << ";\n";
  emitMaskPolicy(config.mask, out);
  emitUserMods(config.mods, out);
  out << "constexpr int kHeadDim = " << config.headDim << ";\n"
      << "constexpr int kBlockM = " << config.tile.blockM << ";\n"
      << "constexpr int kBlockN = " << config.tile.blockN << ";\n"
      << "constexpr int kStages = " << config.tile.stages << ";\n"
      << "constexpr int kConsumerWarpgroups = " << config.tile.consumerWarpgroups << ";\n"
      << "constexpr int kConsumerRegisters = " << config.tile.consumerRegisters << ";\n"
      << "constexpr int kProducerRegisters = " << config.tile.producerRegisters << ";\n"
      << "constexpr int kSoftmaxReductionChains = " << config.tile.softmaxChains << ";\n"
      << "constexpr int kMaxFixedSoftmaxRangeLog2 = " << kMaxFixedSoftmaxRangeLog2 << ";\n"
      << "constexpr bool kPagedKv = " << (config.pagedKv ? "true" : "false") << ";\n"
      << "constexpr unsigned kSmemQ = " << config.smem.q << ";\n"
      << "constexpr unsigned kSmemK = " << config.smem.k << ";\n"
      << "constexpr unsigned kSmemV = " << config.smem.v << ";\n"
      << "constexpr unsigned kSmemOStaging = " << config.smem.oStaging << ";\n"
      << "constexpr unsigned kSmemBarriers = " << config.smem.barriers << ";\n"
      << "constexpr unsigned kSmemScoreDiagonals = " << config.smem.scoreDiagonals << ";\n"
      << "constexpr unsigned kSmemScoreDiagonalBytes = " << config.smem.scoreDiagonalBytes << ";\n"
      << "constexpr int kScoreDiagonalWindows = " << config.smem.scoreDiagonalWindows << ";\n"
      << "constexpr unsigned kSmemKeyBits = " << config.smem.keyBits << ";\n"
      << "constexpr unsigned kSmemTotal = " << config.smem.total << ";\n"
      << "} // namespace attn_plan\n\n";

  out << expandTemplate("attn_fwd_sm90.cuh", error);
  if (!error.empty())
    return "#error " + error + "\n";
  return out.str();
}

bool backwardWalksStepList(const BackwardKernelConfig &config) {
  const bool splitsColumns = attn_abi::bwdSplitsColumns(config.headDim, config.tile.blockN,
                                                        config.tile.consumerWarpgroups);
  return !config.mods.maskFunction.empty() &&
         attn_abi::bwdPasses(config.headDim, splitsColumns) == 1;
}

std::string emitBackwardKernelSource(const BackwardKernelConfig &config) {
  std::ostringstream out;
  std::string error;
  emitUnitPrologue(out, config.kernelName, "Backward softmax attention",
                   {"device/captures.cuh"}, error);
  if (!config.mods.source.empty())
    out << "// ---- user regions (attn-differentiate-mods, attn-lower-mods)\n"
        << config.mods.source << "\n";

  // Sᵀ and dPᵀ (N = a consumer's query columns), dV and dK (N = its
  // columns of a pass, A from registers or, where consumers share a key
  // tile, shared memory: the kernel names both forms), dQ's pieces (templates/attn_bwd_sm90.cuh derives
  // the same widths).
  const int consumers = config.tile.consumerWarpgroups;
  const attn_abi::BwdWidths widths =
      attn_abi::bwdWidths(config.headDim, config.tile.blockM, config.tile.blockN, consumers);
  out << "// ---- WGMMA shapes of this plan\nnamespace attn_dev {\n"
      << emitWgmmaWrapper(widths.queryColumns, config.element, WgmmaForm::SS)
      << emitWgmmaWrapper(widths.gradColumns, config.element, WgmmaForm::RS)
      << emitWgmmaWrapper(widths.gradColumns, config.element, WgmmaForm::SSBMN)
      << (widths.dqTransposed
              ? emitWgmmaWrapper(widths.dqFragmentColumns, config.element, WgmmaForm::SSAMN)
              : emitWgmmaWrapper(widths.dqColumns, config.element, WgmmaForm::SSMN))
      << "} // namespace attn_dev\n\n";

  const BackwardSharedMemoryOffsets &smem = config.smem;
  // Whether the main kernel walks a step list: a macro, so that the
  // step-list kernel exists only where it does.
  out << "#define ATTN_PLAN_STEP_LIST " << (backwardWalksStepList(config) ? 1 : 0) << "\n";
  out << "// ---- plan\nnamespace attn_plan {\n"
      << "using Element = attn_dev::" << elementTag(config.element) << ";\n";
  emitMaskPolicy(config.mask, out);
  emitBackwardMods(config.mods, out);
  out << "constexpr int kHeadDim = " << config.headDim << ";\n"
      << "constexpr int kBlockM = " << config.tile.blockM << ";\n"
      << "constexpr int kBlockN = " << config.tile.blockN << ";\n"
      << "constexpr int kStages = " << config.tile.stages << ";\n"
      << "constexpr int kConsumerWarpgroups = " << consumers << ";\n"
      << "constexpr int kConsumerRegisters = " << config.tile.consumerRegisters << ";\n"
      << "constexpr int kProducerRegisters = " << config.tile.producerRegisters << ";\n"
      << "constexpr unsigned kSmemK = " << smem.k << ";\n"
      << "constexpr unsigned kSmemV = " << smem.v << ";\n"
      << "constexpr unsigned kSmemQ = " << smem.q << ";\n"
      << "constexpr unsigned kSmemDo = " << smem.dO << ";\n"
      << "constexpr unsigned kSmemLse = " << smem.lse << ";\n"
      << "constexpr unsigned kSmemDelta = " << smem.delta << ";\n"
      << "constexpr unsigned kSmemDs = " << smem.ds << ";\n"
      << "constexpr unsigned kSmemP = " << smem.p << ";\n"
      << "constexpr unsigned kSmemDqStaging = " << smem.dqStaging << ";\n"
      << "constexpr int kDqStagingBuffers = " << smem.dqStagingBuffers << ";\n"
      << "constexpr unsigned kSmemDqTurns = " << smem.dqTurns << ";\n"
      << "constexpr bool kBlockDiagonalSums = " << (smem.diagonalSums ? "true" : "false") << ";\n"
      << "constexpr unsigned kSmemDiagonalSums = " << smem.diagonalSums.value_or(0) << ";\n"
      << "constexpr int kBarrierCount = " << smem.barrierCount << ";\n"
      << "constexpr unsigned kSmemBarriers = " << smem.barriers << ";\n"
      << "constexpr unsigned kSmemTotal = " << smem.total << ";\n"
      << "} // namespace attn_plan\n\n";
  out << expandTemplate("attn_bwd_sm90.cuh", error);
  if (!error.empty())
    return "#error " + error + "\n";
  return out.str();
}

namespace {
/// A C++ float literal that reads back as the float nearest `value`: nine
/// significant digits, always with a decimal point or an exponent (so that
/// a whole number such as 0 does not become the invalid `0f`).
std::string floatLiteral(double value) {
  char number[32];
  std::snprintf(number, sizeof number, "%.9g", value);
  std::string text = number;
  if (text.find_first_of(".e") == std::string::npos)
    text += ".0";
  return text + "f";
}

const char *featureMapName(FeatureMapKind map) {
  switch (map) {
  case FeatureMapKind::Relu:
    return "Relu";
  case FeatureMapKind::EluPlusOne:
    return "EluPlusOne";
  case FeatureMapKind::Identity:
    break;
  }
  return "Identity";
}
} // namespace

std::string emitLinearKernelSource(const LinearKernelConfig &config) {
  std::ostringstream out;
  std::string error;
  emitUnitPrologue(out, config.kernelName, "Chunkwise linear attention / retention",
                   {"device/linear_state.cuh"}, error);

  out << "// ---- WGMMA shapes of this plan\nnamespace attn_dev {\n";
  // Q Kᵀ and Q S (N = 64 value columns), P V, and the state update (N = head dim).
  out << emitWgmmaWrapper(64, config.element, WgmmaForm::SS)
      << emitWgmmaWrapper(64, config.element, WgmmaForm::RS);
  if (config.headDim != 64)
    out << emitWgmmaWrapper(config.headDim, config.element, WgmmaForm::RS);
  out << "} // namespace attn_dev\n\n";

  const char *featureMap = featureMapName(config.featureMap);
  auto flag = [](bool value) { return value ? "true" : "false"; };
  // The entry points that walk the sequence from its end: a macro, so that
  // only a causal kernel's backward module compiles them.
  out << "#define ATTN_PLAN_LINEAR_REVERSED_WALKS "
      << (config.backwardPasses && config.causal ? 1 : 0) << "\n";
  out << "// ---- plan\nnamespace attn_plan {\n"
      << "using Element = attn_dev::" << elementTag(config.element) << ";\n"
      << "constexpr int kHeadDim = " << config.headDim << ";\n"
      << "constexpr int kChunk = " << config.chunk << ";\n"
      << "constexpr int kBlockColumns = " << config.blockColumns << ";\n"
      << "constexpr int kStages = " << config.stages << ";\n"
      << "constexpr attn_dev::FeatureMap kFeatureMap = attn_dev::FeatureMap::" << featureMap
      << ";\n"
      << "constexpr bool kNormalize = " << flag(config.normalize) << ";\n"
      << "constexpr bool kCausal = " << flag(config.causal) << ";\n"
      << "constexpr bool kGated = " << flag(config.decay == DecayKind::Gated) << ";\n"
      << "constexpr bool kFixedDecay = " << flag(config.decay == DecayKind::Fixed) << ";\n"
      << "constexpr bool kBackwardPasses = " << flag(config.backwardPasses) << ";\n";
  // Natural-log decay per query head (fixed decay); 0 otherwise.
  if (config.decay == DecayKind::Fixed && !config.gammas.empty()) {
    out << "__device__ const float kLogDecayOfHead[" << config.gammas.size() << "] = {";
    for (size_t h = 0; h < config.gammas.size(); ++h)
      out << (h ? ", " : "") << floatLiteral(std::log(config.gammas[h]));
    out << "};\n"
        << "__device__ __forceinline__ float logDecayOfHead(int head) { return "
           "kLogDecayOfHead[head]; }\n";
  } else {
    out << "__device__ __forceinline__ float logDecayOfHead(int) { return 0.f; }\n";
  }
  const LinearSharedMemoryOffsets &smem = config.smem;
  out << "constexpr unsigned kSmemQ = " << smem.q << ";\n"
      << "constexpr unsigned kSmemK = " << smem.k << ";\n"
      << "constexpr unsigned kSmemV = " << smem.v << ";\n"
      << "constexpr unsigned kSmemState = " << smem.state << ";\n"
      << "constexpr unsigned kSmemOStaging = " << smem.oStaging << ";\n"
      << "constexpr unsigned kSmemDecay = " << smem.decay << ";\n"
      << "constexpr unsigned kSmemDecayRing = " << smem.decayRing << ";\n"
      << "constexpr unsigned kSmemKeySum = " << smem.keySum << ";\n"
      << "constexpr unsigned kSmemBarriers = " << smem.barriers << ";\n"
      << "constexpr unsigned kSmemTotal = " << smem.total << ";\n"
      << "} // namespace attn_plan\n\n";
  out << expandTemplate("attn_linear_sm90.cuh", error);
  if (!error.empty())
    return "#error " + error + "\n";
  return out.str();
}

std::string emitLinearBackwardKernelSource(const LinearKernelConfig &config) {
  // The passes run unnormalized; the helper kernels handle the key sum.
  LinearKernelConfig chunkwise = config;
  chunkwise.backwardPasses = true;
  chunkwise.normalize = false;
  std::string source = emitLinearKernelSource(chunkwise);
  if (source.rfind("#error", 0) == 0)
    return source;
  std::ostringstream out;
  out << source << "\n// ---- the backward's own plan\nnamespace attn_linear_bwd_plan {\n"
      << "constexpr attn_dev::FeatureMap kFeatureMap = attn_dev::FeatureMap::"
      << featureMapName(config.featureMap) << ";\n"
      << "constexpr bool kNormalize = " << (config.normalize ? "true" : "false")
      << ";\n} // namespace attn_linear_bwd_plan\n\n";
  std::string error;
  out << expandTemplate("attn_linear_bwd_sm90.cuh", error);
  if (!error.empty())
    return "#error " + error + "\n";
  return out.str();
}

uint64_t templatesFingerprint() {
  // FNV-1a over paths and contents.
  uint64_t hash = 1469598103934665603ull;
  auto mix = [&hash](const char *text) {
    for (const char *c = text; *c; ++c) {
      hash ^= static_cast<unsigned char>(*c);
      hash *= 1099511628211ull;
    }
    hash ^= 0xff;
    hash *= 1099511628211ull;
  };
  for (const EmbeddedTemplate &file : embeddedTemplates()) {
    mix(file.path);
    mix(file.contents);
  }
  return hash;
}

} // namespace attn::codegen
