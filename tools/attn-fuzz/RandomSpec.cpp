//===- RandomSpec.cpp - Random well-typed specs from the builder API ------===//

#include "RandomSpec.h"

#include "attn/Compiler/Compiler.h"
#include "attn/Compiler/Jit.h"
#include "attn/Compiler/TileConstraints.h"
#include "attn/runtime/Error.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace attn::fuzz {

uint64_t Choices::below(uint64_t bound) {
  if (!fromBytes)
    return std::uniform_int_distribution<uint64_t>(0, bound - 1)(random);
  // Little-endian bytes, as many as the bound needs; zeros when exhausted.
  uint64_t value = 0;
  for (uint64_t span = bound - 1; span != 0; span >>= 8) {
    value = (value << 8) | (size ? *data : 0);
    if (size) {
      ++data;
      --size;
    }
  }
  return value % bound;
}

namespace {

/// Draws expressions and spec fields for one mode.
class Generator {
public:
  Generator(Choices &choices, RandomSpecMode mode)
      : c(choices), wild(mode == RandomSpecMode::Wild) {
    // Some wild specs keep every field in range, so that their wild
    // expressions reach the passes behind the verifier.
    outOfRangePercent = wild && !c.percent(30) ? 8 : 0;
  }

  RandomSpec spec();

private:
  // An index value. In valid mode no division or remainder by zero and no
  // overflow.
  Expr index(int depth) {
    if (depth <= 0 || c.percent(30))
      return indexLeaf();
    switch (c.below(wild ? 10 : 9)) {
    case 0:
      return index(depth - 1) + index(depth - 1);
    case 1:
      return index(depth - 1) - index(depth - 1);
    case 2:
      return index(depth - 1) * (wild ? index(depth - 1) : Expr(c.between(-3, 8)));
    case 3:
      return index(depth - 1) / divisor(depth);
    case 4:
      return index(depth - 1) % divisor(depth);
    case 5:
      return c.percent(50) ? min(index(depth - 1), index(depth - 1))
                           : max(index(depth - 1), index(depth - 1));
    case 6:
      return c.percent(50) ? abs(index(depth - 1)) : -index(depth - 1);
    case 7:
      return select(boolean(depth - 1), index(depth - 1), index(depth - 1));
    case 8:
      return captureRead(DType::I32, depth);
    default: // wild: any operator on any value
      return anyValue(depth - 1) + anyValue(depth - 1);
    }
  }

  Expr indexLeaf() {
    switch (c.below(6)) {
    case 0:
      return Expr::batch();
    case 1:
      return Expr::head();
    case 2:
      return Expr::qIdx();
    case 3:
      return Expr::kvIdx();
    case 4:
      if (wild && c.percent(30)) {
        static const long extremes[] = {std::numeric_limits<long>::min(),
                                        std::numeric_limits<long>::max(), -1, 0, 1 << 30};
        return Expr(c.pick(extremes));
      }
      return Expr(static_cast<long>(c.between(-50, 3000)));
    default:
      return Expr(static_cast<long>(c.between(-4, 300)));
    }
  }

  Expr divisor(int depth) {
    if (outOfRange())
      return index(depth - 1); // zero or negative at some pairs
    long value = static_cast<long>(c.between(1, 70));
    return Expr(c.percent(25) ? -value : value);
  }

  Expr boolean(int depth) {
    if (depth <= 0 || c.percent(15))
      return compare(0);
    switch (c.below(wild ? 6 : 5)) {
    case 0:
      return boolean(depth - 1) && boolean(depth - 1);
    case 1:
      return boolean(depth - 1) || boolean(depth - 1);
    case 2:
      return !boolean(depth - 1);
    case 3:
    case 4:
      return compare(depth - 1);
    default:
      return Expr::boolean(c.percent(50));
    }
  }

  Expr compare(int depth) {
    Expr a = index(depth), b = index(depth);
    if (captures.size() && c.percent(20)) {
      // A captured f32 against a constant: exact on both sides.
      a = captureRead(DType::F32, depth);
      b = Expr(static_cast<double>(c.between(-2, 2)) * 0.5);
    }
    if (outOfRange())
      a = anyValue(depth);
    switch (c.below(6)) {
    case 0:
      return a == b;
    case 1:
      return a != b;
    case 2:
      return a < b;
    case 3:
      return a <= b;
    case 4:
      return a > b;
    default:
      return a >= b;
    }
  }

  // A read of a declared capture of `dtype` (in wild mode of any capture,
  // declared or not, with any number of indices); index 0 when there is
  // none in valid mode.
  Expr captureRead(DType dtype, int depth) {
    std::vector<const Capture *> fitting;
    for (const Capture &capture : captures)
      if (wild || capture.dtype() == dtype)
        fitting.push_back(&capture);
    if (wild && (fitting.empty() || outOfRange())) {
      static const DType dtypes[] = {DType::F32, DType::I32};
      Capture undeclared("undeclared", c.pick(dtypes), {CaptureExtent::any()});
      return undeclared(index(depth - 1));
    }
    if (fitting.empty())
      return Expr(0);
    const Capture &capture = *fitting[c.below(fitting.size())];
    std::vector<Expr> at;
    size_t count = capture.extents().size();
    if (outOfRange())
      count = c.below(4);
    for (size_t i = 0; i < count; ++i)
      at.push_back(index(depth - 1));
    return capture(at);
  }

  // Valid mode: an f32 value that is exact in f32 on both sides (index
  // values clamped to 2^20 and scaled by powers of two, captured values,
  // the score scaled by powers of two), so that the GPU and the reference
  // compute it alike up to the score's own rounding.
  Expr exactF32(int depth) {
    static const double powers[] = {0.25, 0.5, 1.0, 2.0, 1.0 / 64};
    if (depth <= 0 || c.percent(25)) {
      switch (c.below(4)) {
      case 0:
        return Expr::score() * c.pick(powers);
      case 1:
        return Expr(static_cast<double>(c.between(-12, 12)) * 0.25);
      case 2:
        if (!captures.empty())
          return captureRead(DType::F32, depth);
        [[fallthrough]];
      default:
        return min(max(index(depth), Expr(-(1 << 20))), Expr(1 << 20)) * Expr(c.pick(powers));
      }
    }
    switch (c.below(5)) {
    case 0:
      return exactF32(depth - 1) + exactF32(depth - 1);
    case 1:
      return exactF32(depth - 1) - exactF32(depth - 1);
    case 2:
      return exactF32(depth - 1) * c.pick(powers);
    case 3:
      return c.percent(50) ? abs(exactF32(depth - 1)) : -exactF32(depth - 1);
    default:
      return c.percent(50) ? min(exactF32(depth - 1), exactF32(depth - 1))
                           : max(exactF32(depth - 1), exactF32(depth - 1));
    }
  }

  // Valid mode: a bias of magnitude at most 3 (or -inf, which masks).
  Expr boundedBias(int depth) {
    switch (c.below(4)) {
    case 0:
      return tanh(exactF32(depth)) * Expr(static_cast<double>(c.between(-12, 12)) * 0.25);
    case 1: {
      Expr low = c.percent(20) ? Expr(-std::numeric_limits<double>::infinity())
                               : Expr(static_cast<double>(c.between(-12, 12)) * 0.25);
      return select(boolean(depth - 1), low, Expr(static_cast<double>(c.between(-4, 4)) * 0.25));
    }
    case 2:
      return tanh(exactF32(depth) * 0.125);
    default:
      return Expr(static_cast<double>(c.between(-12, 12)) * 0.25);
    }
  }

  // Wild mode: any f32 (or index) value, with every function and constant.
  Expr anyValue(int depth) {
    if (depth <= 0 || c.percent(20)) {
      static const double constants[] = {0.0,
                                         -0.0,
                                         1.0,
                                         -1.5,
                                         1e30,
                                         std::numeric_limits<double>::infinity(),
                                         -std::numeric_limits<double>::infinity(),
                                         std::numeric_limits<double>::quiet_NaN()};
      switch (c.below(3)) {
      case 0:
        return Expr::score();
      case 1:
        return Expr(c.pick(constants));
      default:
        return indexLeaf();
      }
    }
    Expr a = anyValue(depth - 1);
    switch (c.below(12)) {
    case 0:
      return a + anyValue(depth - 1);
    case 1:
      return a - anyValue(depth - 1);
    case 2:
      return a * anyValue(depth - 1);
    case 3:
      return a / anyValue(depth - 1);
    case 4:
      return a % anyValue(depth - 1);
    case 5:
      return exp(a);
    case 6:
      return log(a);
    case 7:
      return sqrt(a);
    case 8:
      return tanh(a);
    case 9:
      return select(boolean(depth - 1), a, anyValue(depth - 1));
    case 10:
      return captureRead(DType::F32, depth);
    default:
      return c.percent(50) ? min(a, anyValue(depth - 1)) : abs(a);
    }
  }

  void declareCaptures(SpecBuilder &builder);
  std::string tileOverride(const Spec &spec);

  /// In wild mode, whether this choice leaves the supported range.
  bool outOfRange() { return outOfRangePercent && c.percent(outOfRangePercent); }

  Choices &c;
  bool wild;
  unsigned outOfRangePercent = 0;
  std::vector<Capture> captures;
};

void Generator::declareCaptures(SpecBuilder &builder) {
  size_t count = c.below(outOfRange() ? 7 : 4);
  for (size_t i = 0; i < count; ++i) {
    std::string name = "c" + std::to_string(i);
    if (outOfRange()) {
      static const char *names[] = {"c0", "", "9lives", "a b", "x\"y", "score"};
      name = c.pick(names);
    }
    DType dtype = c.percent(50) ? DType::F32 : DType::I32;
    if (outOfRange())
      dtype = c.percent(50) ? DType::BF16 : DType::F16;
    size_t rank = outOfRange() ? c.below(5) : c.between(1, 3);
    std::vector<CaptureExtent> extents;
    for (size_t d = 0; d < rank; ++d) {
      switch (c.below(7)) {
      case 0:
        extents.push_back(
            CaptureExtent::fixed(outOfRange() ? c.between(-2, 100) : c.between(1, 40)));
        break;
      case 1:
        extents.push_back(CaptureExtent::any());
        break;
      case 2:
        extents.push_back(CaptureExtent::batch());
        break;
      case 3:
        extents.push_back(CaptureExtent::qHeads());
        break;
      case 4:
        extents.push_back(CaptureExtent::kvHeads());
        break;
      case 5:
        extents.push_back(CaptureExtent::seqlenQ());
        break;
      default:
        extents.push_back(CaptureExtent::seqlenK());
        break;
      }
    }
    captures.emplace_back(name, dtype, extents);
    builder.capture(captures.back());
  }
}

std::string Generator::tileOverride(const Spec &spec) {
  if (c.percent(50))
    return "";
  if (outOfRange()) {
    static const char *keys[] = {"block_m",          "block_n",           "stages",
                                 "consumer_warpgroups", "producer_warpgroups",
                                 "consumer_registers",  "producer_registers",
                                 "softmax_chains",      "persistent_blocks_per_sm",
                                 "bogus",               ""};
    static const long values[] = {-1, 0, 1, 2, 3, 4, 16, 24, 48, 64, 80, 96, 128, 192, 240, 256,
                                  1L << 40};
    std::string text;
    size_t count = c.between(1, 4);
    for (size_t i = 0; i < count; ++i) {
      text += (i ? "," : "") + std::string(c.pick(keys));
      if (!c.percent(5))
        text += "=" + std::to_string(c.pick(values));
    }
    return text;
  }
  // A legal plan of the tuner's search space.
  TileProblem problem{static_cast<int>(spec.headDim), 2,
                      spec.mask.kind() == Mask::Kind::None && !spec.maskMod};
  // Any mask_mod may be one the compiler cannot classify, whose kernel stages
  // stored key bits: the plans that leave room for them are legal either way.
  problem.storedKeyBits = static_cast<bool>(spec.maskMod);
  std::vector<TileConfig> candidates = enumerateTileCandidates(problem);
  if (candidates.empty())
    return "";
  return formatTileOverride(candidates[c.below(candidates.size())]);
}

RandomSpec Generator::spec() {
  static const int64_t validHeadDims[] = {64, 128, 256};
  static const int64_t wildHeadDims[] = {64, 128, 256, 0, -64, 32, 96, 192, 512};
  int64_t headDim = outOfRange() ? c.pick(wildHeadDims) : c.pick(validHeadDims);
  static const int64_t kvHeadChoices[] = {1, 2, 4};
  int64_t kvHeads = outOfRange() ? c.between(-1, 5) : c.pick(kvHeadChoices);
  int64_t groups = std::max<int64_t>(1, 4 / std::max<int64_t>(kvHeads, 1));
  int64_t qHeads = outOfRange() ? c.between(-1, 9) : kvHeads * c.between(1, groups);
  std::string name = "random_" + std::to_string(c.below(1000));
  if (outOfRange())
    name = c.percent(50) ? "" : "k */ #error";

  SpecBuilder builder(name);
  builder.heads(qHeads, kvHeads).headDim(headDim);
  static const DType validTypes[] = {DType::BF16, DType::F16};
  static const DType wildTypes[] = {DType::BF16, DType::F16, DType::F32, DType::I32};
  builder.dtype(outOfRange() ? c.pick(wildTypes) : c.pick(validTypes));
  if (c.percent(30)) {
    static const double wildScales[] = {0.0, -0.5, 1e-30, 1e30,
                                        std::numeric_limits<double>::quiet_NaN(),
                                        std::numeric_limits<double>::infinity()};
    builder.scale(outOfRange() ? c.pick(wildScales)
                                        : 0.05 + 0.01 * static_cast<double>(c.below(25)));
  }
  static const CausalAlign aligns[] = {CausalAlign::TopLeft, CausalAlign::BottomRight};
  switch (c.below(3)) {
  case 0:
    break;
  case 1:
    builder.causal(c.pick(aligns));
    break;
  default:
    builder.slidingWindow(outOfRange() ? c.between(-3, 300) : c.between(0, 300),
                          outOfRange() ? c.between(-3, 300) : c.between(0, 300), c.pick(aligns));
  }
  declareCaptures(builder);
  int depth = static_cast<int>(c.between(1, wild ? 6 : 4));
  if (c.percent(50))
    builder.maskMod(outOfRange() ? anyValue(depth) : boolean(depth));
  if (c.percent(50)) {
    if (wild) {
      builder.scoreMod(anyValue(depth));
    } else {
      static const double weights[] = {0.5, 1.0, 1.0, 2.0};
      builder.scoreMod(Expr::score() * c.pick(weights) + boundedBias(depth));
    }
  }
  RandomSpec random;
  random.spec = builder.build();
  random.tileOverride = tileOverride(random.spec);
  return random;
}

/// `text` parsed in a fresh context and printed again.
std::string reprint(const std::string &text) {
  mlir::DialectRegistry registry;
  registerSpecDialects(registry);
  mlir::MLIRContext context(registry, mlir::MLIRContext::Threading::DISABLED);
  context.loadAllAvailableDialects();
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(text, &context);
  if (!module)
    throw std::logic_error("the printed spec does not parse:\n" + text);
  std::string printed;
  llvm::raw_string_ostream stream(printed);
  module->getBody()->front().print(stream);
  stream << "\n";
  return stream.str();
}

} // namespace

RandomSpec randomSpec(Choices &choices, RandomSpecMode mode) {
  return Generator(choices, mode).spec();
}

SpecOutcome checkRandomSpec(const RandomSpec &random) {
  SpecOutcome outcome;
  auto rejected = [&](const Error &error) {
    outcome.error = error.what();
    if (outcome.error.empty())
      throw std::logic_error("a rejection without a message:\n" + outcome.text);
    return outcome;
  };
  try {
    outcome.text = printSpecText(random.spec);
  } catch (const Error &error) {
    return rejected(error);
  }
  if (std::string again = reprint(outcome.text); again != outcome.text)
    throw std::logic_error("printing, parsing and printing again differs:\n" + outcome.text +
                           "\nthen\n" + again);
  CompileOptions options;
  options.tileOverride = random.tileOverride;
  std::vector<std::string> sources;
  try {
    sources = emitCudaSources(outcome.text, "random.mlir", options);
  } catch (const Error &error) {
    return rejected(error);
  }
  if (sources.size() != 1 || sources[0].find("attn_fwd_kernel") == std::string::npos)
    throw std::logic_error("an accepted spec without its kernel:\n" + outcome.text);
  outcome.accepted = true;
  return outcome;
}

} // namespace attn::fuzz
