// attn-differentiate-mods' vector-Jacobian products against central finite
// differences of the score functions it copies, both evaluated by the CPU
// region interpreter. For every operation the pass differentiates, a
// score_mod applies it to the score (and, where it takes two floats, to a
// value of a learnable capture) at points away from the operation's kinks;
// then how dy, repeated reads and reads outside the extents reach the
// gradients.

#include "attn/Compiler/Compiler.h"
#include "attn/Compiler/ModInterpreter.h"
#include "attn/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/STLExtras.h"

#include <catch2/catch.hpp>

#include "SpecTestSupport.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

using namespace attn;

namespace {

/// The score function and the VJP the pass derives from one score_mod.
struct Derived {
  ModInterpreter full;
  ModInterpreter vjp;
};

/// Runs attn-differentiate-mods on a kernel with `captures` (all learnable,
/// each `memref<?...xf32>`, passed as the region's `captureArgs`) whose
/// score_mod is `body` ending in `%r`, and translates
/// @attn_score_mod_full_0 and @attn_score_mod_vjp_0.
Derived derive(const std::string &captures, const std::string &captureArgs,
               const std::string &body) {
  mlir::DialectRegistry registry = test::SpecContext::makeRegistry();
  registry.insert<mlir::memref::MemRefDialect>();
  test::SpecContext spec(registry);
  mlir::MLIRContext &context = spec.context;
  test::DiagnosticLog log(context);
  const std::string text =
      "attn.kernel @k problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, "
      "element_type = bf16>\n"
      "    mask = #attn.no_mask normalizer = #attn.softmax\n"
      "    captures = [" + captures + "]\n"
      "    score_mod {\n"
      "    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index" + captureArgs + "):\n" +
      body + "\n      attn.yield %r : f32\n    }\n";
  INFO(text);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(text, &context, "test.mlir");
  INFO(log.text);
  REQUIRE(module);
  mlir::PassManager pm(&context);
  pm.addPass(mlir::attn::createAttnDifferentiateMods());
  REQUIRE(mlir::succeeded(pm.run(*module)));
  auto full = module->lookupSymbol<mlir::func::FuncOp>("attn_score_mod_full_0");
  auto vjp = module->lookupSymbol<mlir::func::FuncOp>("attn_score_mod_vjp_0");
  REQUIRE(full);
  REQUIRE(vjp);
  // The programs outlive the context.
  return {ModInterpreter(full.getBody()), ModInterpreter(vjp.getBody())};
}

/// A score_mod over the learnable capture theta[q_heads], whose element at
/// %h the body reads as %w.
Derived deriveWithTheta(const std::string &body) {
  return derive("#attn.capture<\"theta\", f32, [q_heads], grad>",
                ", %theta: memref<?xf32>",
                "      %w = memref.load %theta[%h] : memref<?xf32>\n" + body);
}

/// Where a score is evaluated; theta[kHead] is %w.
struct Pair {
  int64_t b = 0, h = 1, q = 5, kv = 3;
};
constexpr size_t kHead = 1;

/// A capture's values and shape.
struct Buffer {
  std::vector<float> values;
  std::vector<int64_t> shape;
};

/// A gradient buffer inside guard elements on both sides, which an add
/// outside its extents would overwrite.
struct GuardedGradient {
  static constexpr size_t kGuard = 4;
  static constexpr float kSentinel = 1234.5f;
  std::vector<float> storage;
  explicit GuardedGradient(size_t size) : storage(size + 2 * kGuard, kSentinel) {
    std::fill(storage.begin() + kGuard, storage.end() - kGuard, 0.0f);
  }
  float *data() { return storage.data() + kGuard; }
  std::vector<float> values() const {
    return std::vector<float>(storage.begin() + kGuard, storage.end() - kGuard);
  }
  bool guardsIntact() const {
    return std::all_of(storage.begin(), storage.begin() + kGuard,
                       [](float v) { return v == kSentinel; }) &&
           std::all_of(storage.end() - kGuard, storage.end(),
                       [](float v) { return v == kSentinel; });
  }
};

std::vector<ModValue> indexValues(const Pair &pair) {
  return {ModValue::index(pair.b), ModValue::index(pair.h), ModValue::index(pair.q),
          ModValue::index(pair.kv)};
}

float score(const Derived &derived, float s, std::vector<Buffer> buffers,
            const Pair &pair = {}) {
  std::vector<ModValue> scalars = {ModValue::f(s)};
  llvm::append_range(scalars, indexValues(pair));
  std::vector<HostCapture> captures;
  for (Buffer &buffer : buffers)
    captures.push_back({buffer.values.data(), DType::F32, buffer.shape});
  return derived.full.evaluate(scalars, captures).f32;
}

struct Gradients {
  float ds = 0.0f;
  /// One per capture, as its values.
  std::vector<std::vector<float>> captures;
};

/// The VJP at dy and s; each capture's gradient buffer starts at 0.
Gradients vjp(const Derived &derived, float dy, float s, std::vector<Buffer> buffers,
              const Pair &pair = {}) {
  std::vector<ModValue> scalars = {ModValue::f(dy), ModValue::f(s)};
  llvm::append_range(scalars, indexValues(pair));
  std::vector<GuardedGradient> gradients;
  for (const Buffer &buffer : buffers)
    gradients.emplace_back(buffer.values.size());
  std::vector<HostCapture> captures;
  for (Buffer &buffer : buffers)
    captures.push_back({buffer.values.data(), DType::F32, buffer.shape});
  for (auto [buffer, gradient] : llvm::zip(buffers, gradients))
    captures.push_back({gradient.data(), DType::F32, buffer.shape});
  const std::vector<Buffer> before = buffers;
  Gradients result;
  result.ds = derived.vjp.evaluate(scalars, captures).f32;
  // The VJP reads the captures and writes only their gradients.
  for (auto [buffer, original] : llvm::zip(buffers, before))
    CHECK(buffer.values == original.values);
  for (const GuardedGradient &gradient : gradients) {
    CHECK(gradient.guardsIntact());
    result.captures.push_back(gradient.values());
  }
  return result;
}

/// The central difference of `f` at x, over the step actually taken (x + h
/// and x - h rounded to f32). h = 1e-2 max(1, |x|): the f32 evaluations
/// round off about 6e-8 |f| / h (below 1e-4 here), which a smaller step
/// would amplify, and the truncation error, h^2 |f'''| / 6, stays within
/// about 1e-3 of |f'| at the points chosen below.
template <typename F>
double centralDifference(float x, F f) {
  const float h = 1e-2f * std::max(1.0f, std::abs(x));
  const float up = x + h, down = x - h;
  return (double(f(up)) - double(f(down))) / (double(up) - double(down));
}

/// Whether a derivative agrees with its finite-difference estimate: within
/// 1e-2 relative (well above the estimate's error, see centralDifference,
/// and well below what a wrong rule gives: a missing ln 2 is 30 % off, a
/// wrong sign 200 %) plus 1e-3 absolute for derivatives near 0.
bool agrees(double derivative, double estimate) {
  return std::abs(derivative - estimate) <=
         1e-2 * std::max(std::abs(derivative), std::abs(estimate)) + 1e-3;
}

/// theta with `w` at kHead.
Buffer theta(float w) { return {{0.75f, w, -1.25f, 2.5f}, {4}}; }

/// One differentiated operation: the body computing %r from %s and %w, and
/// the points (s, w) at which it is smooth.
struct OpCase {
  const char *name;
  std::string body;
  std::vector<std::pair<float, float>> points;
};

std::vector<OpCase> opCases() {
  // Points for two operands with distinct values, and for the score alone
  // (where %w is unused; its gradient is then 0).
  const std::vector<std::pair<float, float>> binary = {{0.5f, 1.5f}, {-3.0f, 0.5f},
                                                       {12.0f, -7.0f}};
  const std::vector<std::pair<float, float>> anyScore = {{-2.0f, 1.0f}, {0.3f, 1.0f},
                                                         {1.5f, 1.0f}};
  const std::vector<std::pair<float, float>> positive = {{0.25f, 1.0f}, {2.0f, 1.0f},
                                                         {30.0f, 1.0f}};
  const std::vector<std::pair<float, float>> apart = {{0.5f, 1.5f}, {2.0f, -1.0f},
                                                      {-3.0f, -2.5f}};
  // No integer (or, for round, half) lies within a step of these.
  const std::vector<std::pair<float, float>> between = {{0.3f, 1.0f}, {-1.7f, 1.0f},
                                                        {12.2f, 1.0f}};
  return {
      {"arith.addf", "      %r = arith.addf %s, %w : f32", binary},
      {"arith.subf", "      %r = arith.subf %s, %w : f32", binary},
      {"arith.mulf", "      %r = arith.mulf %s, %w : f32", binary},
      {"arith.divf", "      %r = arith.divf %s, %w : f32", binary},
      {"arith.negf", "      %r = arith.negf %s : f32", anyScore},
      // trunc(s / w) is constant within the steps around these points.
      {"arith.remf", "      %r = arith.remf %s, %w : f32",
       {{7.3f, 2.1f}, {-5.2f, 1.7f}, {0.4f, -1.5f}, {3.0f, 0.7f}}},
      {"arith.select",
       "      %zero = arith.constant 0.0 : f32\n"
       "      %positive = arith.cmpf ogt, %s, %zero : f32\n"
       "      %r = arith.select %positive, %s, %w : f32",
       {{0.5f, 2.0f}, {-1.5f, 3.0f}, {4.0f, -2.0f}}},
      {"arith.maximumf", "      %r = arith.maximumf %s, %w : f32", apart},
      {"arith.minimumf", "      %r = arith.minimumf %s, %w : f32", apart},
      {"arith.maxnumf", "      %r = arith.maxnumf %s, %w : f32", apart},
      {"arith.minnumf", "      %r = arith.minnumf %s, %w : f32", apart},
      {"math.absf", "      %r = math.absf %s : f32", {{0.5f, 1.0f}, {-1.5f, 1.0f}, {7.0f, 1.0f}}},
      {"math.exp", "      %r = math.exp %s : f32", {{-2.0f, 1.0f}, {0.3f, 1.0f}, {2.5f, 1.0f}}},
      {"math.exp2", "      %r = math.exp2 %s : f32", {{-2.0f, 1.0f}, {0.3f, 1.0f}, {3.0f, 1.0f}}},
      {"math.expm1", "      %r = math.expm1 %s : f32",
       {{-1.0f, 1.0f}, {0.05f, 1.0f}, {1.5f, 1.0f}}},
      {"math.log", "      %r = math.log %s : f32", {{0.5f, 1.0f}, {2.0f, 1.0f}, {30.0f, 1.0f}}},
      {"math.log2", "      %r = math.log2 %s : f32", {{0.5f, 1.0f}, {2.0f, 1.0f}, {30.0f, 1.0f}}},
      {"math.log1p", "      %r = math.log1p %s : f32",
       {{-0.5f, 1.0f}, {0.3f, 1.0f}, {5.0f, 1.0f}}},
      {"math.sqrt", "      %r = math.sqrt %s : f32", positive},
      {"math.rsqrt", "      %r = math.rsqrt %s : f32", positive},
      {"math.tanh", "      %r = math.tanh %s : f32", anyScore},
      {"math.sin", "      %r = math.sin %s : f32", {{-2.0f, 1.0f}, {0.3f, 1.0f}, {4.0f, 1.0f}}},
      {"math.cos", "      %r = math.cos %s : f32", {{-2.0f, 1.0f}, {0.3f, 1.0f}, {4.0f, 1.0f}}},
      {"math.erf", "      %r = math.erf %s : f32", {{-1.0f, 1.0f}, {0.3f, 1.0f}, {1.2f, 1.0f}}},
      {"math.powf (score as base)", "      %r = math.powf %s, %w : f32",
       {{0.5f, 1.5f}, {2.0f, -0.7f}, {3.0f, 2.5f}}},
      {"math.powf (score as exponent)", "      %r = math.powf %w, %s : f32",
       {{1.5f, 0.5f}, {-0.7f, 2.0f}, {2.5f, 3.0f}}},
      // A constant exponent: the base's rule holds for a negative base too.
      {"math.powf (constant exponent)",
       "      %three = arith.constant 3.0 : f32\n"
       "      %r = math.powf %s, %three : f32",
       {{-1.5f, 1.0f}, {-0.4f, 1.0f}, {2.0f, 1.0f}}},
      {"math.fma (score multiplied)", "      %r = math.fma %s, %w, %w : f32", binary},
      {"math.fma (score added)", "      %r = math.fma %w, %s, %s : f32", binary},
      {"math.copysign", "      %r = math.copysign %s, %w : f32",
       {{0.5f, 1.5f}, {-2.0f, 3.0f}, {1.5f, -0.5f}, {-0.7f, -2.0f}}},
      {"math.floor", "      %r = math.floor %s : f32", between},
      {"math.ceil", "      %r = math.ceil %s : f32", between},
      {"math.round", "      %r = math.round %s : f32", between},
      // The chain rule, and two uses of the capture's value adding up:
      // soft-capping with a learnable cap, w tanh(s / w).
      {"w tanh(s / w)",
       "      %x = arith.divf %s, %w : f32\n"
       "      %t = math.tanh %x : f32\n"
       "      %r = arith.mulf %w, %t : f32",
       {{10.0f, 30.0f}, {-45.0f, 20.0f}, {3.0f, 5.0f}}},
      // ALiBi with a learnable slope: s + w (kv - q).
      {"s + w (kv - q)",
       "      %d = arith.subi %kv, %q : index\n"
       "      %di = arith.index_cast %d : index to i32\n"
       "      %df = arith.sitofp %di : i32 to f32\n"
       "      %bias = arith.mulf %w, %df : f32\n"
       "      %r = arith.addf %s, %bias : f32",
       binary},
  };
}

} // namespace

TEST_CASE("each operation's VJP matches finite differences of its score function",
          "[differentiate-mods]") {
  for (const OpCase &op : opCases()) {
    INFO(op.name);
    Derived derived = deriveWithTheta(op.body);
    for (auto [s, w] : op.points) {
      INFO("s = " << s << ", w = " << w);
      Gradients got = vjp(derived, 1.0f, s, {theta(w)});
      REQUIRE(std::isfinite(got.ds));
      const double ds = centralDifference(s, [&](float x) {
        return score(derived, x, {theta(w)});
      });
      const double dw = centralDifference(w, [&](float x) {
        return score(derived, s, {theta(x)});
      });
      CHECK(agrees(got.ds, ds));
      CAPTURE(got.ds, ds, got.captures[0][kHead], dw);
      CHECK(agrees(got.captures[0][kHead], dw));
      // Only the element read gets a gradient.
      for (size_t i = 0; i < got.captures[0].size(); ++i)
        if (i != kHead)
          CHECK(got.captures[0][i] == 0.0f);

      // dy scales the VJP linearly; doubling is exact in binary floating
      // point, whatever the VJP multiplies or divides dy by.
      Gradients twice = vjp(derived, 2.0f, s, {theta(w)});
      CHECK(twice.ds == 2.0f * got.ds);
      CHECK(twice.captures[0][kHead] == 2.0f * got.captures[0][kHead]);
      Gradients none = vjp(derived, 0.0f, s, {theta(w)});
      CHECK(none.ds == 0.0f);
      CHECK(none.captures[0][kHead] == 0.0f);
    }
  }
}

TEST_CASE("floor, ceil and round have derivative 0", "[differentiate-mods]") {
  // The finite differences above are 0 too; this pins the VJP itself.
  for (const char *op : {"math.floor", "math.ceil", "math.round"}) {
    INFO(op);
    Derived derived = deriveWithTheta(std::string("      %f = ") + op +
                                      " %s : f32\n      %r = arith.mulf %f, %w : f32");
    Gradients got = vjp(derived, 1.0f, 2.7f, {theta(1.5f)});
    CHECK(got.ds == 0.0f);
    // The rounded score times dy reaches w: 3 for round and ceil, 2 for floor.
    CHECK(got.captures[0][kHead] == score(derived, 2.7f, {theta(1.0f)}));
  }
}

TEST_CASE("the interpreter evaluates math.expm1 as expm1", "[differentiate-mods]") {
  // Not as exp(s) - 1, which loses every digit near 0: the finite
  // differences of expm1 rely on it.
  Derived derived = deriveWithTheta("      %r = math.expm1 %s : f32");
  CHECK(score(derived, 1e-6f, {theta(1.0f)}) == std::expm1(1e-6f));
  CHECK(score(derived, -2.0f, {theta(1.0f)}) == std::expm1(-2.0f));
}

TEST_CASE("a capture read at two indices gets both contributions", "[differentiate-mods]") {
  // s * theta[0] + theta[h]^2.
  Derived derived = deriveWithTheta("      %c0 = arith.constant 0 : index\n"
                                    "      %a = memref.load %theta[%c0] : memref<?xf32>\n"
                                    "      %sa = arith.mulf %s, %a : f32\n"
                                    "      %ww = arith.mulf %w, %w : f32\n"
                                    "      %r = arith.addf %sa, %ww : f32");
  const float s = 1.5f;
  SECTION("two elements") {
    Gradients got = vjp(derived, 1.0f, s, {theta(-2.0f)});
    CHECK(got.ds == 0.75f); // theta[0]
    CHECK(got.captures[0] == std::vector<float>{1.5f, -4.0f, 0.0f, 0.0f});
    for (size_t i : {size_t(0), kHead}) {
      INFO("element " << i);
      const double estimate = centralDifference(theta(-2.0f).values[i], [&](float x) {
        Buffer buffer = theta(-2.0f);
        buffer.values[i] = x;
        return score(derived, s, {buffer});
      });
      CHECK(agrees(got.captures[0][i], estimate));
    }
  }
  SECTION("one element read twice") {
    Pair pair;
    pair.h = 0;
    Gradients got = vjp(derived, 1.0f, s, {theta(-2.0f)}, pair);
    // s + 2 theta[0] = 1.5 + 1.5.
    CHECK(got.captures[0] == std::vector<float>{3.0f, 0.0f, 0.0f, 0.0f});
  }
}

TEST_CASE("a read outside the capture's extents adds nothing", "[differentiate-mods]") {
  // theta[i] * s + theta[h]: outside, the read is 0, so ds is 0, and the
  // gradient of theta[i] is dropped, not written past the buffer.
  auto check = [](const Derived &derived, const Pair &pair, bool inside, size_t i) {
    Gradients got = vjp(derived, 1.0f, 1.5f, {theta(-2.0f)}, pair);
    std::vector<float> expected = {0.0f, 1.0f, 0.0f, 0.0f};
    if (inside)
      expected[i] += 1.5f;
    CHECK(got.ds == (inside ? theta(-2.0f).values[i] : 0.0f));
    CHECK(got.captures[0] == expected);
  };
  SECTION("at kv") {
    Derived derived = deriveWithTheta("      %o = memref.load %theta[%kv] : memref<?xf32>\n"
                                      "      %p = arith.mulf %o, %s : f32\n"
                                      "      %r = arith.addf %p, %w : f32");
    for (int64_t kv : {2, 4, 7}) {
      INFO("kv = " << kv);
      Pair pair;
      pair.kv = kv;
      check(derived, pair, kv < 4, size_t(kv));
    }
  }
  SECTION("at q - kv, negative") {
    Derived derived = deriveWithTheta("      %i = arith.subi %q, %kv : index\n"
                                      "      %o = memref.load %theta[%i] : memref<?xf32>\n"
                                      "      %p = arith.mulf %o, %s : f32\n"
                                      "      %r = arith.addf %p, %w : f32");
    for (int64_t kv : {3, 6, 7}) {
      INFO("kv = " << kv);
      Pair pair;
      pair.kv = kv;
      check(derived, pair, kv <= 5, size_t(5 - kv));
    }
  }
}

TEST_CASE("a rank-2 learnable capture gets its gradient at the read's indices",
          "[differentiate-mods]") {
  // table[h, kv] * s: its gradient lands at row h, column kv (row-major).
  Derived derived = derive("#attn.capture<\"table\", f32, [q_heads, 8], grad>",
                           ", %table: memref<?x?xf32>",
                           "      %t = memref.load %table[%h, %kv] : memref<?x?xf32>\n"
                           "      %r = arith.mulf %t, %s : f32");
  Buffer table{std::vector<float>(32), {4, 8}};
  for (size_t i = 0; i < table.values.size(); ++i)
    table.values[i] = 0.25f * float(i);
  Pair pair;
  pair.h = 2;
  pair.kv = 6;
  Gradients got = vjp(derived, 0.5f, 3.0f, {table}, pair);
  CHECK(got.ds == 0.5f * table.values[2 * 8 + 6]);
  std::vector<float> expected(32, 0.0f);
  expected[2 * 8 + 6] = 1.5f; // dy * s
  CHECK(got.captures[0] == expected);
}
