// The CPU interpreter of mask_mod and score_mod regions, and the reference
// problems built on it. Operations are checked against values worked out by
// hand; whole problems against hand-written C++ masks and score functions
// given to the reference evaluator directly.

#include "attn/Compiler/Compiler.h"
#include "attn/Compiler/ModInterpreter.h"
#include "attn/IR/AttnOps.h"
#include "attn/Reference/ReferenceAttention.h"
#include "attn/runtime/Error.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <catch2/catch.hpp>

#include "SpecTestSupport.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

using namespace attn;
using Catch::Matchers::Contains;

namespace {

constexpr const char *kHeader =
    "attn.kernel @t problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, "
    "element_type = bf16>\n"
    "    mask = #attn.no_mask normalizer = #attn.softmax\n";

/// Parses `text` as buffer "test.mlir" without verification, so that any
/// argument and result types can be tried.
mlir::OwningOpRef<mlir::ModuleOp> parseUnverified(mlir::MLIRContext &context,
                                                  const std::string &text) {
  mlir::DialectRegistry registry;
  registerSpecDialects(registry);
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();
  test::DiagnosticLog log(context);
  mlir::ParserConfig config(&context, /*verifyAfterParse=*/false);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(text, config, "test.mlir");
  INFO(text << "\n" << log.text);
  REQUIRE(module);
  return module;
}

/// Translates the mask_mod region `^bb0(args): body` of a kernel. The body
/// starts on line 5 of buffer "test.mlir".
ModInterpreter compileRegion(const std::string &args, const std::string &body) {
  mlir::MLIRContext context;
  std::string text =
      std::string(kHeader) + "    mask_mod {\n  ^bb0(" + args + "):\n" + body + "\n  }\n";
  mlir::OwningOpRef<mlir::ModuleOp> module = parseUnverified(context, text);
  mlir::attn::KernelOp kernel;
  module->walk([&](mlir::attn::KernelOp op) { kernel = op; });
  REQUIRE(kernel);
  // The program outlives the context.
  return ModInterpreter(kernel.getMaskMod());
}

/// Translates the body of the only `func.func` of `text`, which starts on
/// line 1 of buffer "test.mlir".
ModInterpreter compileFunction(const std::string &text) {
  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module = parseUnverified(context, text);
  mlir::func::FuncOp function;
  module->walk([&](mlir::func::FuncOp op) { function = op; });
  REQUIRE(function);
  return ModInterpreter(function.getBody());
}

ModValue i32(int64_t value) { return ModValue::integer(32, static_cast<uint64_t>(value)); }

/// `op` on two values of `type` (an integer type of `width` bits), read
/// back signed.
int64_t intBinary(const std::string &op, int64_t a, int64_t b, const std::string &type = "i32",
                  unsigned width = 32) {
  ModInterpreter program =
      compileRegion("%a: " + type + ", %b: " + type,
                    "    %r = " + op + " %a, %b : " + type + "\n    attn.yield %r : " + type);
  return program
      .evaluate({ModValue::integer(width, static_cast<uint64_t>(a)),
                 ModValue::integer(width, static_cast<uint64_t>(b))},
                {})
      .getSExt();
}

bool cmpi(const std::string &predicate, int64_t a, int64_t b, const std::string &type = "i32",
          unsigned width = 32) {
  ModInterpreter program = compileRegion(
      "%a: " + type + ", %b: " + type,
      "    %r = arith.cmpi " + predicate + ", %a, %b : " + type + "\n    attn.yield %r : i1");
  return program
      .evaluate({ModValue::integer(width, static_cast<uint64_t>(a)),
                 ModValue::integer(width, static_cast<uint64_t>(b))},
                {})
      .isTrue();
}

/// A one-operand cast or op from `from` (an integer of `fromWidth` bits or
/// f32) to `to`, written `op %a : from to to` when `to` differs.
ModValue unary(const std::string &op, const std::string &from, ModValue a,
               const std::string &to) {
  std::string types = from == to ? from : from + " to " + to;
  ModInterpreter program = compileRegion(
      "%a: " + from, "    %r = " + op + " %a : " + types + "\n    attn.yield %r : " + to);
  return program.evaluate({a}, {});
}

float floatOp(const std::string &op, std::vector<float> operands) {
  std::string args, uses;
  std::vector<ModValue> values;
  for (size_t i = 0; i < operands.size(); ++i) {
    std::string name = "%a" + std::to_string(i);
    args += (i ? ", " : "") + name + ": f32";
    uses += (i ? ", " : "") + name;
    values.push_back(ModValue::f(operands[i]));
  }
  ModInterpreter program =
      compileRegion(args, "    %r = " + op + " " + uses + " : f32\n    attn.yield %r : f32");
  ModValue result = program.evaluate(values, {});
  REQUIRE(result.kind == ModValue::Kind::F32);
  return result.f32;
}

bool cmpf(const std::string &predicate, float a, float b) {
  ModInterpreter program = compileRegion(
      "%a: f32, %b: f32", "    %r = arith.cmpf " + predicate + ", %a, %b : f32\n"
                          "    attn.yield %r : i1");
  return program.evaluate({ModValue::f(a), ModValue::f(b)}, {}).isTrue();
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

} // namespace

TEST_CASE("integer arithmetic wraps at the operation's width", "[mod-interpreter]") {
  CHECK(intBinary("arith.addi", 2147483647, 1) == -2147483648LL);
  CHECK(intBinary("arith.subi", 3, 5) == -2);
  CHECK(intBinary("arith.muli", 65536, 65536) == 0);
  CHECK(intBinary("arith.muli", -3, 7) == -21);
  CHECK(intBinary("arith.addi", 127, 1, "i8", 8) == -128);
  CHECK(intBinary("arith.muli", 16, 16, "i8", 8) == 0);
  CHECK(intBinary("arith.addi", std::numeric_limits<int64_t>::max(), 1, "i64", 64) ==
        std::numeric_limits<int64_t>::min());
  CHECK(intBinary("arith.subi", 0, 1, "index", 64) == -1);
}

TEST_CASE("integer division, remainder, min and max", "[mod-interpreter]") {
  CHECK(intBinary("arith.divsi", -7, 2) == -3);
  CHECK(intBinary("arith.divsi", 7, -2) == -3);
  // -7 is 4294967289 unsigned: / 2 = 2147483644.
  CHECK(intBinary("arith.divui", -7, 2) == 2147483644);
  CHECK(intBinary("arith.remsi", -7, 2) == -1);
  CHECK(intBinary("arith.remsi", 7, -2) == 1);
  CHECK(intBinary("arith.remui", -7, 10) == 9); // 4294967289 % 10
  CHECK(intBinary("arith.floordivsi", -7, 2) == -4);
  CHECK(intBinary("arith.floordivsi", 7, -2) == -4);
  CHECK(intBinary("arith.floordivsi", 7, 2) == 3);
  CHECK(intBinary("arith.floordivsi", -8, 2) == -4);
  CHECK(intBinary("arith.ceildivsi", -7, 2) == -3);
  CHECK(intBinary("arith.ceildivsi", 7, 2) == 4);
  CHECK(intBinary("arith.ceildivsi", -7, -2) == 4);
  CHECK(intBinary("arith.ceildivsi", 8, 2) == 4);
  CHECK(intBinary("arith.maxsi", -1, 1) == 1);
  CHECK(intBinary("arith.minsi", -1, 1) == -1);
  CHECK(intBinary("arith.maxui", -1, 1) == -1); // 0xffffffff
  CHECK(intBinary("arith.minui", -1, 1) == 1);
  // Undefined in MLIR; the interpreter picks values instead of trapping.
  CHECK(intBinary("arith.divsi", 5, 0) == 0);
  CHECK(intBinary("arith.divui", 5, 0) == 0);
  CHECK(intBinary("arith.remsi", 5, 0) == 0);
  CHECK(intBinary("arith.remui", 5, 0) == 0);
  CHECK(intBinary("arith.divsi", -2147483648LL, -1) == -2147483648LL);
  CHECK(intBinary("arith.remsi", -2147483648LL, -1) == 0);
  const int64_t min64 = std::numeric_limits<int64_t>::min();
  CHECK(intBinary("arith.divsi", min64, -1, "i64", 64) == min64);
  CHECK(intBinary("arith.floordivsi", min64, -1, "i64", 64) == min64);
  CHECK(intBinary("arith.remsi", min64, -1, "i64", 64) == 0);
}

TEST_CASE("bitwise operations and shifts", "[mod-interpreter]") {
  CHECK(intBinary("arith.andi", 12, 10) == 8);
  CHECK(intBinary("arith.ori", 12, 10) == 14);
  CHECK(intBinary("arith.xori", 12, 10) == 6);
  CHECK(intBinary("arith.shli", 1, 31) == -2147483648LL);
  CHECK(intBinary("arith.shli", 3, 4) == 48);
  CHECK(intBinary("arith.shrsi", -8, 1) == -4);
  CHECK(intBinary("arith.shrui", -8, 1) == 2147483644); // 0x7ffffffc
  // From the width on, shifts clamp as the GPU's do.
  CHECK(intBinary("arith.shli", 1, 32) == 0);
  CHECK(intBinary("arith.shrui", -1, 40) == 0);
  CHECK(intBinary("arith.shrsi", -5, 40) == -1);
  CHECK(intBinary("arith.shrsi", 5, 40) == 0);
  CHECK(intBinary("arith.shrsi", -128, 3, "i8", 8) == -16);
  CHECK(unary("math.absi", "i32", i32(-5), "i32").getSExt() == 5);
  CHECK(unary("math.absi", "i32", i32(-2147483648LL), "i32").getSExt() == -2147483648LL);
}

TEST_CASE("cmpi, every predicate", "[mod-interpreter]") {
  // -1 against 1: below signed, above unsigned.
  CHECK_FALSE(cmpi("eq", -1, 1));
  CHECK(cmpi("ne", -1, 1));
  CHECK(cmpi("slt", -1, 1));
  CHECK(cmpi("sle", -1, 1));
  CHECK_FALSE(cmpi("sgt", -1, 1));
  CHECK_FALSE(cmpi("sge", -1, 1));
  CHECK_FALSE(cmpi("ult", -1, 1));
  CHECK_FALSE(cmpi("ule", -1, 1));
  CHECK(cmpi("ugt", -1, 1));
  CHECK(cmpi("uge", -1, 1));
  CHECK(cmpi("eq", 4, 4));
  CHECK(cmpi("sle", 4, 4));
  CHECK(cmpi("uge", 4, 4));
  CHECK_FALSE(cmpi("slt", 4, 4));
  CHECK(cmpi("slt", -1, 0, "index", 64));
  CHECK(cmpi("ugt", -1, 0, "index", 64));
  CHECK(cmpi("slt", 1, 0, "i1", 1)); // i1 true is -1 signed
  CHECK(cmpi("ugt", 1, 0, "i1", 1));
}

TEST_CASE("integer and float conversions", "[mod-interpreter]") {
  ModValue minusOne64 = ModValue::integer(64, static_cast<uint64_t>(-1));
  CHECK(unary("arith.index_cast", "i64", minusOne64, "index").getSExt() == -1);
  CHECK(unary("arith.index_cast", "index", ModValue::index((int64_t(1) << 32) + 5), "i32")
            .getSExt() == 5);
  CHECK(unary("arith.index_cast", "i32", i32(-3), "index").getSExt() == -3);
  CHECK(unary("arith.index_castui", "i32", i32(-1), "index").getSExt() == 4294967295LL);
  ModValue minusOne8 = ModValue::integer(8, 0xff);
  CHECK(unary("arith.extsi", "i8", minusOne8, "i32").getSExt() == -1);
  CHECK(unary("arith.extui", "i8", minusOne8, "i32").getSExt() == 255);
  CHECK(unary("arith.extui", "i1", ModValue::integer(1, 1), "i32").getSExt() == 1);
  CHECK(unary("arith.extsi", "i1", ModValue::integer(1, 1), "i32").getSExt() == -1);
  CHECK(unary("arith.trunci", "i32", i32(300), "i8").getSExt() == 44);
  CHECK(unary("arith.trunci", "i32", i32(200), "i8").getSExt() == -56);
  CHECK(unary("arith.sitofp", "i32", i32(-3), "f32").f32 == -3.0f);
  CHECK(unary("arith.uitofp", "i32", i32(-1), "f32").f32 == 4294967296.0f);
  CHECK(unary("arith.sitofp", "i64", minusOne64, "f32").f32 == -1.0f);
  // 2^24 + 1 is not an f32: the conversion rounds to even.
  CHECK(unary("arith.sitofp", "i32", i32(16777217), "f32").f32 == 16777216.0f);
  CHECK(unary("arith.fptosi", "f32", ModValue::f(2.9f), "i32").getSExt() == 2);
  CHECK(unary("arith.fptosi", "f32", ModValue::f(-2.9f), "i32").getSExt() == -2);
  CHECK(unary("arith.fptoui", "f32", ModValue::f(3.7f), "i32").getSExt() == 3);
  // Out of range saturates, NaN gives 0 (the GPU's conversions).
  CHECK(unary("arith.fptosi", "f32", ModValue::f(1e10f), "i32").getSExt() == 2147483647);
  CHECK(unary("arith.fptosi", "f32", ModValue::f(-1e10f), "i32").getSExt() == -2147483648LL);
  CHECK(unary("arith.fptosi", "f32", ModValue::f(kNaN), "i32").getSExt() == 0);
  CHECK(unary("arith.fptosi", "f32", ModValue::f(300.0f), "i8").getSExt() == 127);
  CHECK(unary("arith.fptoui", "f32", ModValue::f(-1.5f), "i32").getSExt() == 0);
  CHECK(unary("arith.fptoui", "f32", ModValue::f(1e10f), "i32").getZExt() == 4294967295ULL);
  CHECK(unary("arith.fptosi", "f32", ModValue::f(1e30f), "i64").getSExt() ==
        std::numeric_limits<int64_t>::max());
}

TEST_CASE("constants of every kind and select", "[mod-interpreter]") {
  ModInterpreter program = compileRegion("%c: i1, %x: f32",
                                         "    %i = arith.constant -7 : i32\n"
                                         "    %n = arith.constant 40 : index\n"
                                         "    %t = arith.constant true\n"
                                         "    %h = arith.constant 1.5 : f32\n"
                                         "    %in = arith.index_cast %i : i32 to index\n"
                                         "    %sum = arith.addi %in, %n : index\n"
                                         "    %sf = arith.index_cast %sum : index to i32\n"
                                         "    %f = arith.sitofp %sf : i32 to f32\n"
                                         "    %g = arith.mulf %f, %h : f32\n"
                                         "    %both = arith.andi %c, %t : i1\n"
                                         "    %r = arith.select %both, %g, %x : f32\n"
                                         "    attn.yield %r : f32");
  // (-7 + 40) * 1.5 = 49.5 when %c, else %x.
  CHECK(program.evaluate({ModValue::integer(1, 1), ModValue::f(2.0f)}, {}).f32 == 49.5f);
  CHECK(program.evaluate({ModValue::integer(1, 0), ModValue::f(2.0f)}, {}).f32 == 2.0f);
  CHECK(program.getNumScalarArguments() == 2);
  CHECK(program.getNumCaptureArguments() == 0);

  ModInterpreter integers = compileRegion(
      "%c: i1, %a: i32, %b: i32",
      "    %r = arith.select %c, %a, %b : i32\n    attn.yield %r : i32");
  CHECK(integers.evaluate({ModValue::integer(1, 1), i32(-4), i32(9)}, {}).getSExt() == -4);
  CHECK(integers.evaluate({ModValue::integer(1, 0), i32(-4), i32(9)}, {}).getSExt() == 9);

  ModInterpreter yieldsFalse =
      compileRegion("%a: index", "    %f = arith.constant false\n    attn.yield %f : i1");
  CHECK_FALSE(yieldsFalse.evaluate({ModValue::index(3)}, {}).isTrue());
}

TEST_CASE("float arithmetic is evaluated in f32", "[mod-interpreter]") {
  // In double these would be 16777217 and 0.3000000000000000444.
  CHECK(floatOp("arith.addf", {16777216.0f, 1.0f}) == 16777216.0f);
  CHECK(floatOp("arith.mulf", {0.1f, 3.0f}) == 0.1f * 3.0f);
  CHECK(floatOp("arith.subf", {1.5f, 4.0f}) == -2.5f);
  CHECK(floatOp("arith.divf", {1.0f, 3.0f}) == 1.0f / 3.0f);
  CHECK(floatOp("arith.divf", {1.0f, 0.0f}) == kInf);
  CHECK(floatOp("arith.remf", {7.5f, 2.0f}) == 1.5f);
  CHECK(floatOp("arith.remf", {-7.5f, 2.0f}) == -1.5f);
  CHECK(floatOp("arith.negf", {2.0f}) == -2.0f);
  CHECK(std::signbit(floatOp("arith.negf", {0.0f})));
  CHECK(floatOp("arith.maximumf", {-1.0f, 3.0f}) == 3.0f);
  CHECK(floatOp("arith.minimumf", {-1.0f, 3.0f}) == -1.0f);
  CHECK(std::isnan(floatOp("arith.maximumf", {kNaN, 1.0f})));
  CHECK(std::isnan(floatOp("arith.minimumf", {1.0f, kNaN})));
  CHECK_FALSE(std::signbit(floatOp("arith.maximumf", {-0.0f, 0.0f})));
  CHECK(std::signbit(floatOp("arith.minimumf", {0.0f, -0.0f})));
  CHECK(floatOp("arith.maxnumf", {kNaN, 1.0f}) == 1.0f);
  CHECK(floatOp("arith.minnumf", {2.0f, kNaN}) == 2.0f);
  CHECK(floatOp("arith.maxnumf", {-2.0f, 1.0f}) == 1.0f);
  CHECK(floatOp("arith.minnumf", {-2.0f, 1.0f}) == -2.0f);
}

TEST_CASE("cmpf, every predicate, ordered and unordered", "[mod-interpreter]") {
  struct Row {
    const char *predicate;
    bool less, equal, unordered; // (1, 2), (2, 2), (NaN, 2)
  };
  const Row rows[] = {
      {"false", false, false, false}, {"oeq", false, true, false}, {"ogt", false, false, false},
      {"oge", false, true, false},    {"olt", true, false, false}, {"ole", true, true, false},
      {"one", true, false, false},    {"ord", true, true, false},  {"ueq", false, true, true},
      {"ugt", false, false, true},    {"uge", false, true, true},  {"ult", true, false, true},
      {"ule", true, true, true},      {"une", true, false, true},  {"uno", false, false, true},
      {"true", true, true, true},
  };
  for (const Row &row : rows) {
    INFO(row.predicate);
    CHECK(cmpf(row.predicate, 1.0f, 2.0f) == row.less);
    CHECK(cmpf(row.predicate, 2.0f, 2.0f) == row.equal);
    CHECK(cmpf(row.predicate, kNaN, 2.0f) == row.unordered);
  }
  CHECK(cmpf("ogt", 3.0f, 2.0f));
  CHECK(cmpf("oeq", -0.0f, 0.0f));
}

TEST_CASE("math operations", "[mod-interpreter]") {
  CHECK(floatOp("math.absf", {-2.5f}) == 2.5f);
  CHECK(floatOp("math.exp", {0.0f}) == 1.0f);
  CHECK(floatOp("math.exp", {1.0f}) == Approx(2.718281828).epsilon(1e-6));
  CHECK(floatOp("math.exp2", {3.0f}) == 8.0f);
  CHECK(floatOp("math.exp2", {-1.0f}) == 0.5f);
  CHECK(floatOp("math.log", {1.0f}) == 0.0f);
  CHECK(floatOp("math.log", {7.389056f}) == Approx(2.0).epsilon(1e-6));
  CHECK(floatOp("math.log2", {8.0f}) == 3.0f);
  CHECK(floatOp("math.log1p", {0.0f}) == 0.0f);
  CHECK(floatOp("math.log1p", {1e-10f}) == Approx(1e-10).epsilon(1e-6));
  CHECK(floatOp("math.sqrt", {9.0f}) == 3.0f);
  CHECK(floatOp("math.rsqrt", {4.0f}) == 0.5f);
  CHECK(floatOp("math.tanh", {0.0f}) == 0.0f);
  CHECK(floatOp("math.tanh", {20.0f}) == 1.0f);
  CHECK(floatOp("math.tanh", {0.5f}) == Approx(0.46211716).epsilon(1e-6));
  CHECK(floatOp("math.sin", {0.0f}) == 0.0f);
  CHECK(floatOp("math.sin", {1.5707964f}) == Approx(1.0).epsilon(1e-6));
  CHECK(floatOp("math.cos", {0.0f}) == 1.0f);
  CHECK(floatOp("math.cos", {3.1415927f}) == Approx(-1.0).epsilon(1e-6));
  CHECK(floatOp("math.floor", {-1.5f}) == -2.0f);
  CHECK(floatOp("math.ceil", {-1.5f}) == -1.0f);
  CHECK(floatOp("math.round", {2.5f}) == 3.0f); // halves away from zero
  CHECK(floatOp("math.round", {-2.5f}) == -3.0f);
  CHECK(floatOp("math.round", {2.4f}) == 2.0f);
  CHECK(floatOp("math.powf", {2.0f, 10.0f}) == 1024.0f);
  CHECK(floatOp("math.powf", {9.0f, 0.5f}) == 3.0f);
  CHECK(floatOp("math.erf", {0.0f}) == 0.0f);
  CHECK(floatOp("math.erf", {1.0f}) == Approx(0.84270079).epsilon(1e-6));
  CHECK(floatOp("math.fma", {2.0f, 3.0f, 4.0f}) == 10.0f);
  // Fused: (1 + 2^-12)^2 - 1 keeps the 2^-24 that a rounded product loses.
  const float e = 1.0f + std::ldexp(1.0f, -12);
  CHECK(floatOp("math.fma", {e, e, -1.0f}) ==
        std::ldexp(1.0f, -11) + std::ldexp(1.0f, -24));
  CHECK(floatOp("math.copysign", {3.0f, -0.0f}) == -3.0f);
  CHECK(floatOp("math.copysign", {-3.0f, 1.0f}) == 3.0f);
}

TEST_CASE("index arithmetic wraps and compares signed", "[mod-interpreter]") {
  ModInterpreter program = compileRegion(
      "%b: index, %h: index, %q: index, %kv: index",
      "    %d = arith.subi %q, %kv : index\n"
      "    %zero = arith.constant 0 : index\n"
      "    %neg = arith.cmpi slt, %d, %zero : index\n"
      "    %big = arith.cmpi ugt, %d, %zero : index\n"
      "    %both = arith.andi %neg, %big : i1\n"
      "    attn.yield %both : i1");
  CHECK(program.evaluateMask(0, 0, 3, 5, {}));       // d = -2: below 0 signed, huge unsigned
  CHECK_FALSE(program.evaluateMask(0, 0, 5, 3, {})); // d = 2
  CHECK_FALSE(program.evaluateMask(0, 0, 4, 4, {}));

  ModInterpreter narrowed = compileRegion(
      "%b: index, %h: index, %q: index, %kv: index",
      "    %d = arith.subi %q, %kv : index\n"
      "    %d32 = arith.index_cast %d : index to i32\n"
      "    %m = arith.constant -3 : i32\n"
      "    %keep = arith.cmpi sge, %d32, %m : i32\n"
      "    attn.yield %keep : i1");
  CHECK(narrowed.evaluateMask(0, 0, 3, 5, {}));
  CHECK(narrowed.evaluateMask(0, 0, 3, 6, {}));
  CHECK_FALSE(narrowed.evaluateMask(0, 0, 3, 7, {}));
}

TEST_CASE("captures: row-major loads, 0 outside the extents", "[mod-interpreter]") {
  ModInterpreter program = compileRegion(
      "%s: f32, %b: index, %h: index, %q: index, %kv: index, %table: memref<?x?xf32>, "
      "%ids: memref<?xi32>",
      "    %t = memref.load %table[%q, %kv] : memref<?x?xf32>\n"
      "    %id = memref.load %ids[%h] : memref<?xi32>\n"
      "    %idf = arith.sitofp %id : i32 to f32\n"
      "    %x = arith.addf %t, %idf : f32\n"
      "    %r = arith.addf %x, %s : f32\n"
      "    attn.yield %r : f32");
  CHECK(program.getNumScalarArguments() == 5);
  CHECK(program.getNumCaptureArguments() == 2);
  std::vector<float> table(12);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c)
      table[r * 4 + c] = 10.0f * r + c;
  std::vector<int32_t> ids = {-100, 200};
  std::vector<HostCapture> captures = {{table.data(), DType::F32, {3, 4}},
                                       {ids.data(), DType::I32, {2}}};
  CHECK(program.evaluateScore(0.5f, 0, 0, 2, 1, captures) == 21.0f - 100.0f + 0.5f);
  CHECK(program.evaluateScore(0.0f, 0, 1, 1, 3, captures) == 13.0f + 200.0f);
  // Column 4 would alias row 1 in a flat read; it is outside the extents.
  CHECK(program.evaluateScore(0.0f, 0, 0, 0, 4, captures) == -100.0f);
  CHECK(program.evaluateScore(0.0f, 0, 0, 3, 0, captures) == -100.0f);
  CHECK(program.evaluateScore(0.0f, 0, 2, 2, 2, captures) == 22.0f); // ids[2] reads 0
  CHECK(program.evaluateScore(0.0f, 0, -1, 2, 2, captures) == 22.0f);

  SECTION("an index below zero through index arithmetic") {
    ModInterpreter before = compileRegion(
        "%b: index, %h: index, %q: index, %kv: index, %ids: memref<?xi32>",
        "    %one = arith.constant 1 : index\n"
        "    %prev = arith.subi %kv, %one : index\n"
        "    %id = memref.load %ids[%prev] : memref<?xi32>\n"
        "    %zero = arith.constant 0 : i32\n"
        "    %keep = arith.cmpi eq, %id, %zero : i32\n"
        "    attn.yield %keep : i1");
    std::vector<int32_t> values = {5, 6, 7};
    std::vector<HostCapture> one = {{values.data(), DType::I32, {3}}};
    CHECK(before.evaluateMask(0, 0, 0, 0, one)); // ids[-1] reads 0
    CHECK_FALSE(before.evaluateMask(0, 0, 0, 1, one));
    CHECK(before.evaluateMask(0, 0, 0, 4, one)); // ids[3] reads 0
  }

  SECTION("captures that do not fit the region are refused") {
    std::vector<HostCapture> swapped = {captures[1], captures[0]};
    CHECK_THROWS_WITH(program.evaluateScore(0.0f, 0, 0, 0, 0, swapped),
                      Contains("capture #0") && Contains("must be f32"));
    std::vector<HostCapture> flat = {{table.data(), DType::F32, {12}}, captures[1]};
    CHECK_THROWS_WITH(program.evaluateScore(0.0f, 0, 0, 0, 0, flat), Contains("rank 2"));
    CHECK_THROWS_AS(program.evaluateScore(0.0f, 0, 0, 0, 0, {}), std::invalid_argument);
    std::vector<HostCapture> null = {{nullptr, DType::F32, {3, 4}}, captures[1]};
    CHECK_THROWS_WITH(program.evaluateScore(0.0f, 0, 0, 0, 0, null), Contains("no data"));
    CHECK_THROWS_WITH(program.evaluateMask(0, 0, 0, 0, captures), Contains("not a mask_mod"));
  }
}

TEST_CASE("what the interpreter cannot evaluate is named with its location",
          "[mod-interpreter]") {
  // The body starts on line 5 of "test.mlir".
  CHECK_THROWS_WITH(compileRegion("%a: f32", "    %r = math.atan %a : f32\n"
                                             "    attn.yield %r : f32"),
                    Contains("'math.atan'") && Contains("test.mlir:5:10") &&
                        Contains("not supported"));
  CHECK_THROWS_WITH(compileRegion("%a: f32", "    %c = arith.constant 1.0 : f64\n"
                                             "    attn.yield %a : f32"),
                    Contains("'arith.constant'") && Contains("f64"));
  CHECK_THROWS_WITH(compileRegion("%a: f32", "    %v = arith.constant dense<1.0> : vector<2xf32>\n"
                                             "    attn.yield %a : f32"),
                    Contains("'arith.constant'") && Contains("vector<2xf32>"));
  CHECK_THROWS_WITH(compileRegion("%a: f32", "    %c = arith.constant 1.0 : f32\n"
                                             "    %r = arith.addf %a, %c : f32\n"
                                             "    %i = arith.bitcast %r : f32 to i32\n"
                                             "    attn.yield %i : i32"),
                    Contains("'arith.bitcast'") && Contains("test.mlir:7:10"));
  CHECK_THROWS_WITH(compileRegion("%a: i128", "    attn.yield %a : i128"),
                    Contains("i128"));
  CHECK_THROWS_AS(compileRegion("%a: f32", "    %r = math.atan %a : f32\n"
                                           "    attn.yield %r : f32"),
                  std::invalid_argument);
}

TEST_CASE("func.func bodies ending in func.return", "[mod-interpreter]") {
  // The regions cloned as functions, as attn-differentiate-mods writes them.
  ModInterpreter score = compileFunction(
      "func.func @attn_score_mod_full_0(%s: f32, %b: index, %h: index, %q: index, %kv: index,\n"
      "                                 %slopes: memref<?xf32>) -> f32 {\n"
      "  %slope = memref.load %slopes[%h] : memref<?xf32>\n"
      "  %d = arith.subi %q, %kv : index\n"
      "  %di = arith.index_cast %d : index to i64\n"
      "  %df = arith.sitofp %di : i64 to f32\n"
      "  %bias = arith.mulf %slope, %df : f32\n"
      "  %r = arith.subf %s, %bias : f32\n"
      "  func.return %r : f32\n"
      "}\n");
  CHECK(score.getNumScalarArguments() == 5);
  CHECK(score.getNumCaptureArguments() == 1);
  std::vector<float> slopes = {0.5f, 0.25f};
  std::vector<HostCapture> captures = {{slopes.data(), DType::F32, {2}}};
  CHECK(score.evaluateScore(1.0f, 0, 1, 5, 2, captures) == 1.0f - 0.25f * 3);
  CHECK(score.evaluateScore(1.0f, 0, 0, 2, 5, captures) == 1.0f + 0.5f * 3);

  ModInterpreter mask = compileFunction(
      "func.func @attn_mask_mod_full_0(%b: index, %h: index, %q: index, %kv: index) -> i1 {\n"
      "  %keep = arith.cmpi ule, %kv, %q : index\n"
      "  return %keep : i1\n"
      "}\n");
  CHECK(mask.evaluateMask(0, 0, 3, 2, {}));
  CHECK_FALSE(mask.evaluateMask(0, 0, 2, 3, {}));

  CHECK_THROWS_WITH(compileFunction("func.func @f(%a: f32) {\n"
                                    "  return\n"
                                    "}\n"),
                    Contains("'func.return'") && Contains("test.mlir:2:3") &&
                        Contains("exactly one value"));
}

TEST_CASE("memref.atomic_rmw addf accumulates into a capture", "[mod-interpreter]") {
  SECTION("a vector-Jacobian product adding into a gradient") {
    // ALiBi's s - slopes[h] * (q - kv): dy passes through to the score, and
    // dy * -(q - kv) goes to the gradient of slopes[h].
    ModInterpreter vjp = compileFunction(
        "func.func @attn_score_mod_vjp_0(%dy: f32, %s: f32, %b: index, %h: index, %q: index,\n"
        "    %kv: index, %slopes: memref<?xf32>, %slopes_grad: memref<?xf32>) -> f32 {\n"
        "  %d = arith.subi %q, %kv : index\n"
        "  %di = arith.index_cast %d : index to i64\n"
        "  %df = arith.sitofp %di : i64 to f32\n"
        "  %neg = arith.negf %df : f32\n"
        "  %c = arith.mulf %dy, %neg : f32\n"
        "  %old = memref.atomic_rmw addf %c, %slopes_grad[%h] : (f32, memref<?xf32>) -> f32\n"
        "  return %dy : f32\n"
        "}\n");
    CHECK(vjp.getNumScalarArguments() == 6);
    CHECK(vjp.getNumCaptureArguments() == 2);
    std::vector<float> slopes = {0.5f, 0.25f}, grad = {0.0f, 0.0f};
    std::vector<HostCapture> captures = {{slopes.data(), DType::F32, {2}},
                                         {grad.data(), DType::F32, {2}}};
    auto evaluate = [&](float dy, int64_t h, int64_t q, int64_t kv) {
      return vjp
          .evaluate({ModValue::f(dy), ModValue::f(0.75f), ModValue::index(0),
                     ModValue::index(h), ModValue::index(q), ModValue::index(kv)},
                    captures)
          .f32;
    };
    CHECK(evaluate(2.0f, 1, 5, 2) == 2.0f); // grad[1] += 2 * -3
    CHECK(grad == std::vector<float>{0.0f, -6.0f});
    CHECK(evaluate(0.5f, 0, 1, 4) == 0.5f); // grad[0] += 0.5 * 3
    CHECK(evaluate(1.0f, 1, 3, 2) == 1.0f); // grad[1] += 1 * -1
    CHECK(grad == std::vector<float>{1.5f, -7.0f});
    // Head 2 is outside the extents: nothing is written.
    CHECK(evaluate(1.0f, 2, 3, 2) == 1.0f);
    CHECK(evaluate(1.0f, -1, 3, 2) == 1.0f);
    CHECK(grad == std::vector<float>{1.5f, -7.0f});
    CHECK(slopes == std::vector<float>{0.5f, 0.25f});
  }

  SECTION("row-major elements, the old value as the result") {
    ModInterpreter add = compileFunction(
        "func.func @add(%v: f32, %i: index, %j: index, %buf: memref<?x?xf32>) -> f32 {\n"
        "  %old = memref.atomic_rmw addf %v, %buf[%i, %j] : (f32, memref<?x?xf32>) -> f32\n"
        "  return %old : f32\n"
        "}\n");
    std::vector<float> buffer(6, 0.0f);
    std::vector<HostCapture> captures = {{buffer.data(), DType::F32, {2, 3}}};
    auto evaluate = [&](float value, int64_t i, int64_t j) {
      return add.evaluate({ModValue::f(value), ModValue::index(i), ModValue::index(j)}, captures)
          .f32;
    };
    CHECK(evaluate(1.5f, 1, 2) == 0.0f);
    CHECK(evaluate(2.0f, 1, 2) == 1.5f);
    CHECK(evaluate(-0.25f, 0, 1) == 0.0f);
    CHECK(buffer == std::vector<float>{0.0f, -0.25f, 0.0f, 0.0f, 0.0f, 3.5f});
    // Column 3 would alias row 1 in a flat write; it and the other indices
    // outside the extents write nothing and read 0 as the old value.
    CHECK(evaluate(4.0f, 0, 3) == 0.0f);
    CHECK(evaluate(4.0f, 2, 0) == 0.0f);
    CHECK(evaluate(4.0f, -1, 2) == 0.0f);
    CHECK(evaluate(4.0f, 1, -1) == 0.0f);
    CHECK(buffer == std::vector<float>{0.0f, -0.25f, 0.0f, 0.0f, 0.0f, 3.5f});
  }

  SECTION("kinds other than addf are rejected with the operation's location") {
    CHECK_THROWS_WITH(
        compileFunction(
            "func.func @f(%v: f32, %i: index, %buf: memref<?xf32>) -> f32 {\n"
            "  %old = memref.atomic_rmw maximumf %v, %buf[%i] : (f32, memref<?xf32>) -> f32\n"
            "  return %old : f32\n"
            "}\n"),
        Contains("'memref.atomic_rmw'") && Contains("test.mlir:2:10") &&
            Contains("maximumf") && Contains("only 'addf'"));
    CHECK_THROWS_AS(
        compileFunction(
            "func.func @f(%v: i32, %i: index, %buf: memref<?xi32>) -> i32 {\n"
            "  %old = memref.atomic_rmw addi %v, %buf[%i] : (i32, memref<?xi32>) -> i32\n"
            "  return %old : i32\n"
            "}\n"),
        std::invalid_argument);
  }
}

TEST_CASE("many evaluations of one program", "[mod-interpreter]") {
  // A document mask over 1000 x 1000 pairs, against the same test in C++.
  ModInterpreter program = compileRegion(
      "%b: index, %h: index, %q: index, %kv: index, %doc: memref<?x?xi32>",
      "    %dq = memref.load %doc[%b, %q] : memref<?x?xi32>\n"
      "    %dk = memref.load %doc[%b, %kv] : memref<?x?xi32>\n"
      "    %same = arith.cmpi eq, %dq, %dk : i32\n"
      "    %causal = arith.cmpi ule, %kv, %q : index\n"
      "    %keep = arith.andi %same, %causal : i1\n"
      "    attn.yield %keep : i1");
  const int64_t n = 1000;
  std::vector<int32_t> doc(n);
  for (int64_t i = 0; i < n; ++i)
    doc[i] = static_cast<int32_t>(i / 37);
  std::vector<HostCapture> captures = {{doc.data(), DType::I32, {1, n}}};
  int64_t mismatches = 0, kept = 0;
  for (int64_t q = 0; q < n; ++q)
    for (int64_t kv = 0; kv < n; ++kv) {
      bool keep = program.evaluateMask(0, 0, q, kv, captures);
      kept += keep;
      mismatches += keep != (doc[q] == doc[kv] && kv <= q);
    }
  CHECK(mismatches == 0);
  CHECK(kept > n);
}

//===----------------------------------------------------------------------===//
// Reference problems with user regions
//===----------------------------------------------------------------------===//

namespace {

struct Tensors {
  std::vector<float> q, k, v;
};

Tensors randomTensors(const reference::Problem &p, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Tensors t;
  t.q.resize(static_cast<size_t>(p.batch * p.seqlenQ * p.qHeads * p.headDim));
  t.k.resize(static_cast<size_t>(p.batch * p.seqlenK * p.kvHeads * p.headDim));
  t.v.resize(t.k.size());
  for (std::vector<float> *x : {&t.q, &t.k, &t.v})
    for (float &value : *x)
      value = dist(rng);
  return t;
}

struct Output {
  std::vector<float> o, lse;
};

Output runForward(const reference::Problem &p, const Tensors &t) {
  auto view = [](const std::vector<float> &data, int64_t s, int64_t h, int64_t d) {
    return reference::HostTensor{data.data(), {s * h * d, h * d, d, 1}};
  };
  Output out;
  out.o.assign(static_cast<size_t>(p.batch * p.seqlenQ * p.qHeads * p.headDim),
               std::numeric_limits<float>::quiet_NaN());
  out.lse.assign(static_cast<size_t>(p.batch * p.qHeads * p.seqlenQ),
                 std::numeric_limits<float>::quiet_NaN());
  reference::forward(p, view(t.q, p.seqlenQ, p.qHeads, p.headDim),
                     view(t.k, p.seqlenK, p.kvHeads, p.headDim),
                     view(t.v, p.seqlenK, p.kvHeads, p.headDim), out.o.data(),
                     out.lse.data());
  return out;
}

/// Equal within `tolerance`, with -inf (rows that keep no key) only where
/// the other has it.
void requireClose(const Output &a, const Output &b, double tolerance) {
  REQUIRE(a.o.size() == b.o.size());
  REQUIRE(a.lse.size() == b.lse.size());
  for (size_t i = 0; i < a.lse.size(); ++i) {
    INFO("lse " << i);
    REQUIRE(std::isinf(a.lse[i]) == std::isinf(b.lse[i]));
    if (!std::isinf(a.lse[i]))
      REQUIRE(a.lse[i] == Approx(b.lse[i]).margin(tolerance));
  }
  for (size_t i = 0; i < a.o.size(); ++i) {
    INFO("o " << i);
    REQUIRE(a.o[i] == Approx(b.o[i]).margin(tolerance));
  }
}

reference::Problem smallProblem() {
  reference::Problem p;
  p.batch = 2;
  p.seqlenQ = 37;
  p.seqlenK = 53;
  p.qHeads = 2;
  p.kvHeads = 2;
  p.headDim = 64;
  p.scale = 1.0 / 8.0;
  return p;
}

std::string kernelText(const std::string &name, const std::string &mask,
                       const std::string &captures, const std::string &regions) {
  return "attn.kernel @" + name +
         " problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, "
         "element_type = bf16>\n"
         "    mask = " +
         mask + "\n    normalizer = #attn.softmax\n" +
         (captures.empty() ? std::string() : "    captures = [" + captures + "]\n") + regions;
}

} // namespace

TEST_CASE("reference: a maskMod equal to causal gives the built-in causal output",
          "[mod-interpreter][reference]") {
  reference::Problem builtIn = smallProblem();
  Tensors tensors = randomTensors(builtIn, 1);
  for (auto alignment :
       {reference::MaskAlignment::TopLeft, reference::MaskAlignment::BottomRight}) {
    builtIn.mask.kind = reference::MaskKind::Causal;
    builtIn.mask.alignment = alignment;
    reference::Problem modded = smallProblem();
    const int64_t shift = alignment == reference::MaskAlignment::BottomRight
                              ? modded.seqlenK - modded.seqlenQ
                              : 0;
    modded.maskMod = [shift](int64_t, int64_t, int64_t q, int64_t k) { return k <= q + shift; };
    Output expected = runForward(builtIn, tensors);
    Output actual = runForward(modded, tensors);
    // The same arithmetic on the same kept pairs: bit for bit.
    CHECK(actual.o == expected.o);
    CHECK(actual.lse == expected.lse);
  }
}

TEST_CASE("reference: maskMod and scoreMod combine with the built-in mask",
          "[mod-interpreter][reference]") {
  reference::Problem p = smallProblem();
  Tensors tensors = randomTensors(p, 2);
  p.mask.kind = reference::MaskKind::Causal;
  p.mask.alignment = reference::MaskAlignment::TopLeft;

  // Keep even keys only, and drop every key of query row 5: its output is 0
  // and its lse -inf.
  reference::Problem modded = p;
  modded.maskMod = [](int64_t, int64_t, int64_t q, int64_t k) { return k % 2 == 0 && q != 5; };
  // The same selection made by a score of -inf.
  reference::Problem scored = p;
  scored.scoreMod = [](double s, int64_t, int64_t, int64_t q, int64_t k) {
    return k % 2 == 0 && q != 5 ? s : -std::numeric_limits<double>::infinity();
  };
  Output a = runForward(modded, tensors), b = runForward(scored, tensors);
  CHECK(a.o == b.o);
  CHECK(a.lse == b.lse);
  for (int64_t h = 0; h < p.qHeads; ++h)
    CHECK(std::isinf(a.lse[static_cast<size_t>(h * p.seqlenQ + 5)]));
  for (int64_t d = 0; d < p.headDim; ++d)
    CHECK(a.o[static_cast<size_t>((5 * p.qHeads) * p.headDim + d)] == 0.0f);
  // Row 0 keeps key 0 only (causal and even): o is v[0] exactly, lse the
  // scaled score.
  CHECK(a.o[0] == tensors.v[0]);

  // A maskMod never sees pairs the built-in mask drops.
  reference::Problem checked = p;
  checked.maskMod = [](int64_t, int64_t, int64_t q, int64_t k) {
    if (k > q)
      throw std::logic_error("maskMod called for a pair causal drops");
    return true;
  };
  Output c = runForward(checked, tensors), plain = runForward(p, tensors);
  CHECK(c.o == plain.o);

  // An exception of a mod reaches the caller.
  reference::Problem throwing = p;
  throwing.scoreMod = [](double, int64_t, int64_t, int64_t, int64_t) -> double {
    throw std::runtime_error("from scoreMod");
  };
  CHECK_THROWS_WITH(runForward(throwing, tensors), "from scoreMod");
}

TEST_CASE("reference problems from specs with regions match hand-written C++",
          "[mod-interpreter][reference]") {
  const reference::Problem shape = smallProblem();
  const int64_t B = shape.batch, Sq = shape.seqlenQ, Sk = shape.seqlenK;
  reference::Problem oracle = shape;
  oracle.scale = 0.125; // 1/sqrt(64), the spec's default
  std::string text;
  std::vector<HostCapture> captures;
  // Kept alive by the test only until the problem is built: it copies them.
  std::vector<float> slopes = {0.5f, 0.0625f};
  std::vector<int32_t> doc(static_cast<size_t>(B * Sk));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t k = 0; k < Sk; ++k)
      doc[static_cast<size_t>(b * Sk + k)] = static_cast<int32_t>(b == 0 ? k / 10 : k / 17 + 3);

  SECTION("prefix-LM") {
    // kv < 16 or kv <= q (the shape is small, so the prefix is too).
    text = kernelText("prefix_lm", "#attn.no_mask", "",
                      "    mask_mod {\n"
                      "    ^bb0(%b: index, %h: index, %q: index, %kv: index):\n"
                      "      %p = arith.constant 16 : index\n"
                      "      %in_prefix = arith.cmpi ult, %kv, %p : index\n"
                      "      %causal = arith.cmpi ule, %kv, %q : index\n"
                      "      %keep = arith.ori %in_prefix, %causal : i1\n"
                      "      attn.yield %keep : i1\n"
                      "    }\n");
    oracle.maskMod = [](int64_t, int64_t, int64_t q, int64_t k) { return k < 16 || k <= q; };
  }
  SECTION("ALiBi with captured slopes") {
    text = kernelText("alibi", "#attn.causal<bottom_right>",
                      "#attn.capture<\"slopes\", f32, [q_heads]>",
                      "    score_mod {\n"
                      "    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, "
                      "%slopes: memref<?xf32>):\n"
                      "      %slope = memref.load %slopes[%h] : memref<?xf32>\n"
                      "      %qi = arith.index_cast %q : index to i64\n"
                      "      %ki = arith.index_cast %kv : index to i64\n"
                      "      %d = arith.subi %qi, %ki : i64\n"
                      "      %df = arith.sitofp %d : i64 to f32\n"
                      "      %bias = arith.mulf %slope, %df : f32\n"
                      "      %r = arith.subf %s, %bias : f32\n"
                      "      attn.yield %r : f32\n"
                      "    }\n");
    captures = {{slopes.data(), DType::F32, {2}}};
    oracle.mask.kind = reference::MaskKind::Causal;
    oracle.mask.alignment = reference::MaskAlignment::BottomRight;
    const std::vector<double> slopeValues(slopes.begin(), slopes.end());
    oracle.scoreMod = [slopeValues](double s, int64_t, int64_t h, int64_t q, int64_t k) {
      return s - slopeValues[static_cast<size_t>(h)] * double(q - k);
    };
  }
  SECTION("tanh soft-cap") {
    text = kernelText("softcap", "#attn.causal<top_left>", "",
                      "    score_mod {\n"
                      "    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):\n"
                      "      %cap = arith.constant 0.5 : f32\n"
                      "      %x = arith.divf %s, %cap : f32\n"
                      "      %t = math.tanh %x : f32\n"
                      "      %r = arith.mulf %t, %cap : f32\n"
                      "      attn.yield %r : f32\n"
                      "    }\n");
    oracle.mask.kind = reference::MaskKind::Causal;
    oracle.mask.alignment = reference::MaskAlignment::TopLeft;
    oracle.scoreMod = [](double s, int64_t, int64_t, int64_t, int64_t) {
      return 0.5 * std::tanh(s / 0.5);
    };
  }
  SECTION("document mask with captured ids") {
    text = kernelText("documents", "#attn.no_mask",
                      "#attn.capture<\"doc\", i32, [batch, seqlen_k]>",
                      "    mask_mod {\n"
                      "    ^bb0(%b: index, %h: index, %q: index, %kv: index, "
                      "%doc: memref<?x?xi32>):\n"
                      "      %dq = memref.load %doc[%b, %q] : memref<?x?xi32>\n"
                      "      %dk = memref.load %doc[%b, %kv] : memref<?x?xi32>\n"
                      "      %keep = arith.cmpi eq, %dq, %dk : i32\n"
                      "      attn.yield %keep : i1\n"
                      "    }\n");
    captures = {{doc.data(), DType::I32, {B, Sk}}};
    const std::vector<int32_t> ids = doc;
    oracle.maskMod = [ids, Sk](int64_t b, int64_t, int64_t q, int64_t k) {
      return ids[static_cast<size_t>(b * Sk + q)] == ids[static_cast<size_t>(b * Sk + k)];
    };
  }

  reference::Problem fromSpec = referenceProblemFromSpec(text, B, Sq, Sk, captures);
  CHECK(fromSpec.scale == oracle.scale);
  CHECK(static_cast<bool>(fromSpec.maskMod) == static_cast<bool>(oracle.maskMod));
  CHECK(static_cast<bool>(fromSpec.scoreMod) == static_cast<bool>(oracle.scoreMod));
  // The problem holds its own copies of the captures.
  std::fill(slopes.begin(), slopes.end(), 99.0f);
  std::fill(doc.begin(), doc.end(), 0);
  captures.clear();

  Tensors tensors = randomTensors(oracle, 3);
  Output expected = runForward(oracle, tensors);
  Output actual = runForward(fromSpec, tensors);
  // The regions run in f32 where the oracle runs in double.
  requireClose(actual, expected, 2e-5);
}

TEST_CASE("reference problems from specs run on several threads", "[mod-interpreter][reference]") {
  // Large enough for the reference's threads: every evaluation shares one
  // program and one copy of the captures.
  const int64_t B = 1, S = 384;
  std::vector<int32_t> doc(static_cast<size_t>(S));
  for (int64_t i = 0; i < S; ++i)
    doc[static_cast<size_t>(i)] = static_cast<int32_t>(i / 50);
  std::string text = kernelText("documents", "#attn.causal<top_left>",
                                "#attn.capture<\"doc\", i32, [batch, seqlen_k]>",
                                "    mask_mod {\n"
                                "    ^bb0(%b: index, %h: index, %q: index, %kv: index, "
                                "%doc: memref<?x?xi32>):\n"
                                "      %dq = memref.load %doc[%b, %q] : memref<?x?xi32>\n"
                                "      %dk = memref.load %doc[%b, %kv] : memref<?x?xi32>\n"
                                "      %keep = arith.cmpi eq, %dq, %dk : i32\n"
                                "      attn.yield %keep : i1\n"
                                "    }\n");
  reference::Problem fromSpec =
      referenceProblemFromSpec(text, B, S, S, {{doc.data(), DType::I32, {B, S}}});
  reference::Problem oracle = fromSpec;
  oracle.maskMod = [doc](int64_t, int64_t, int64_t q, int64_t k) {
    return doc[static_cast<size_t>(q)] == doc[static_cast<size_t>(k)];
  };
  Tensors tensors = randomTensors(oracle, 4);
  Output expected = runForward(oracle, tensors);
  Output actual = runForward(fromSpec, tensors);
  CHECK(actual.o == expected.o);
  CHECK(actual.lse == expected.lse);
}

TEST_CASE("reference problems from specs check the captures against the declaration",
          "[mod-interpreter][reference]") {
  std::string text = kernelText("documents", "#attn.no_mask",
                                "#attn.capture<\"slopes\", f32, [q_heads]>, "
                                "#attn.capture<\"doc\", i32, [batch, seqlen_k]>",
                                "    mask_mod {\n"
                                "    ^bb0(%b: index, %h: index, %q: index, %kv: index, "
                                "%slopes: memref<?xf32>, %doc: memref<?x?xi32>):\n"
                                "      %dq = memref.load %doc[%b, %q] : memref<?x?xi32>\n"
                                "      %dk = memref.load %doc[%b, %kv] : memref<?x?xi32>\n"
                                "      %keep = arith.cmpi eq, %dq, %dk : i32\n"
                                "      attn.yield %keep : i1\n"
                                "    }\n");
  std::vector<float> slopes(2, 1.0f);
  std::vector<int32_t> doc(2 * 53, 0);
  HostCapture goodSlopes{slopes.data(), DType::F32, {2}};
  HostCapture goodDoc{doc.data(), DType::I32, {2, 53}};
  CHECK_NOTHROW(referenceProblemFromSpec(text, 2, 37, 53, {goodSlopes, goodDoc}));

  CHECK_THROWS_WITH(referenceProblemFromSpec(text, 2, 37, 53, {goodSlopes}),
                    Contains("declares 2 captures") && Contains("'doc'") &&
                        Contains("got 1"));
  CHECK_THROWS_WITH(referenceProblemFromSpec(text, 2, 37, 53),
                    Contains("'slopes', 'doc'") && Contains("got 0"));
  HostCapture floatDoc{slopes.data(), DType::F32, {2, 53}};
  CHECK_THROWS_WITH(referenceProblemFromSpec(text, 2, 37, 53, {goodSlopes, floatDoc}),
                    Contains("capture 'doc'") && Contains("expected i32, got f32"));
  HostCapture flatDoc{doc.data(), DType::I32, {2 * 53}};
  CHECK_THROWS_WITH(referenceProblemFromSpec(text, 2, 37, 53, {goodSlopes, flatDoc}),
                    Contains("capture 'doc'") && Contains("expected rank 2, got 1"));
  HostCapture shortDoc{doc.data(), DType::I32, {2, 52}};
  CHECK_THROWS_WITH(referenceProblemFromSpec(text, 2, 37, 53, {goodSlopes, shortDoc}),
                    Contains("capture 'doc'") && Contains("seqlen_k = 53"));
  HostCapture wideSlopes{slopes.data(), DType::F32, {3}};
  CHECK_THROWS_WITH(referenceProblemFromSpec(text, 2, 37, 53, {wideSlopes, goodDoc}),
                    Contains("capture 'slopes'") && Contains("q_heads = 2"));
  HostCapture nullDoc{nullptr, DType::I32, {2, 53}};
  CHECK_THROWS_WITH(referenceProblemFromSpec(text, 2, 37, 53, {goodSlopes, nullDoc}),
                    Contains("capture 'doc'") && Contains("null"));
  CHECK_THROWS_AS(referenceProblemFromSpec(text, 2, 37, 53, {goodSlopes}), Error);

  // A region the interpreter cannot run is named with its place in the spec.
  std::string atan = kernelText("atan", "#attn.no_mask", "",
                                "    score_mod {\n"
                                "    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):\n"
                                "      %r = math.atan %s : f32\n"
                                "      attn.yield %r : f32\n"
                                "    }\n");
  CHECK_THROWS_WITH(referenceProblemFromSpec(atan, 2, 37, 53),
                    Contains("'math.atan'") && Contains("spec:6:12"));

  // A spec without captures or regions reads as before.
  std::string plain = kernelText("plain", "#attn.causal<bottom_right>", "", "");
  reference::Problem p = referenceProblemFromSpec(plain, 2, 37, 53);
  CHECK(p.mask.kind == reference::MaskKind::Causal);
  CHECK_FALSE(p.maskMod);
  CHECK_FALSE(p.scoreMod);
  CHECK_THROWS_WITH(referenceProblemFromSpec(plain, 2, 37, 53, {goodSlopes}),
                    Contains("declares 0 captures"));
}
