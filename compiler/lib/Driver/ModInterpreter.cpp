//===- ModInterpreter.cpp - CPU evaluation of user regions ----------------===//
//
// The region is translated into steps over value slots laid out as
// [scalar arguments | constants | step results]. An evaluation copies the
// constants into a slot array on the stack, binds the arguments and runs the
// steps through one switch; each step knows its operand width, so no type is
// looked up while evaluating.
//
//===----------------------------------------------------------------------===//

#include "attn/Compiler/ModInterpreter.h"

#include "attn/IR/AttnOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/Region.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>

namespace attn {

namespace {

uint64_t widthMask(unsigned width) {
  return width >= 64 ? ~uint64_t(0) : (uint64_t(1) << width) - 1;
}

int64_t signExtend(uint64_t bits, unsigned width) {
  unsigned shift = 64 - width;
  return static_cast<int64_t>(bits << shift) >> shift;
}

} // namespace

ModValue ModValue::integer(unsigned width, uint64_t value) {
  ModValue result;
  result.kind = Kind::Int;
  result.width = width;
  result.bits = value & widthMask(width);
  return result;
}

int64_t ModValue::getSExt() const { return signExtend(bits, width); }

namespace {

enum class Opcode : uint8_t {
  // Integer, operands and result of `width` bits.
  AddI, SubI, MulI, DivSI, DivUI, RemSI, RemUI, FloorDivSI, CeilDivSI,
  MaxSI, MinSI, MaxUI, MinUI, AndI, OrI, XOrI, ShLI, ShRSI, ShRUI, AbsI,
  CmpI,
  // Casts from `width` bits to `resultWidth` bits. Sign extension also
  // truncates and zero extension masks, which covers index_cast, extsi,
  // trunci (SExtOrTrunc) and index_castui, extui (ZExtOrTrunc).
  SExtOrTrunc, ZExtOrTrunc, SIToFP, UIToFP, FPToSI, FPToUI,
  // f32.
  AddF, SubF, MulF, DivF, RemF, NegF, MaximumF, MinimumF, MaxNumF, MinNumF,
  CmpF, AbsF, Exp, Exp2, ExpM1, Log, Log2, Log1p, Sqrt, Rsqrt, Tanh, Sin, Cos,
  Floor, Ceil, Round, PowF, Erf, Fma, CopySign,
  // Either kind.
  Select, Load,
  // Adds an f32 into a capture's element; the result is the element's old
  // value.
  AtomicAddF,
};

union Slot {
  uint64_t i;
  float f;
};

/// One operation. `width` is the operands' integer width, `mask` keeps the
/// result's bits when it is an integer. `aux` holds the predicate of a
/// comparison, or the capture index of a load or an atomic add (whose `rank`
/// index operands lead `operands`; an atomic add's value is the last one).
struct Step {
  Opcode op;
  uint8_t width = 0;
  uint8_t aux = 0;
  uint8_t rank = 0;
  uint32_t result = 0;
  uint32_t operands[4] = {0, 0, 0, 0};
  uint64_t mask = 0;
};

/// Where an atomic add keeps its value: after the indices of a rank-3
/// capture.
constexpr unsigned kAtomicValueOperand = 3;

// Result slots carry this tag until the constants are counted.
constexpr uint32_t kResultTag = 1u << 30;

enum class ScalarKind { Int, F32 };

struct ScalarType {
  ScalarKind kind;
  unsigned width;
};

struct CaptureArg {
  DType dtype;
  unsigned rank;
};

} // namespace

struct ModInterpreter::Program {
  std::vector<ScalarType> scalarArgs;
  std::vector<CaptureArg> captureArgs;
  /// Constant slots, stored after the scalar arguments.
  std::vector<Slot> constants;
  std::vector<Step> steps;
  unsigned numSlots = 0;
  unsigned yieldSlot = 0;
  ScalarType yieldType{ScalarKind::Int, 1};
  bool isMaskSignature = false;
  bool isScoreSignature = false;
};

namespace {

std::string describeLocation(mlir::Location loc) {
  if (auto fileLoc = loc->findInstanceOf<mlir::FileLineColLoc>())
    return fmt::format("{}:{}:{}", fileLoc.getFilename().getValue().str(), fileLoc.getLine(),
                       fileLoc.getColumn());
  std::string text;
  llvm::raw_string_ostream stream(text);
  loc.print(stream);
  return stream.str();
}

[[noreturn]] void reject(mlir::Operation *op, const std::string &why) {
  throw std::invalid_argument("mod interpreter: '" + op->getName().getStringRef().str() +
                              "' at " + describeLocation(op->getLoc()) + " " + why);
}

std::string typeText(mlir::Type type) {
  std::string text;
  llvm::raw_string_ostream stream(text);
  type.print(stream);
  return stream.str();
}

/// index is 64 bits; integers of 1 to 64 bits and f32 are the other scalars.
bool classify(mlir::Type type, ScalarType &result) {
  if (type.isIndex()) {
    result = {ScalarKind::Int, 64};
    return true;
  }
  if (auto integer = mlir::dyn_cast<mlir::IntegerType>(type)) {
    if (integer.getWidth() < 1 || integer.getWidth() > 64)
      return false;
    result = {ScalarKind::Int, integer.getWidth()};
    return true;
  }
  if (type.isF32()) {
    result = {ScalarKind::F32, 32};
    return true;
  }
  return false;
}

/// Translates one region; owns the value-to-slot numbering while it runs.
class Translator {
public:
  explicit Translator(ModInterpreter::Program &program) : program(program) {}

  void translate(mlir::Region &region);

private:
  ScalarType scalarOf(mlir::Operation *op, mlir::Type type) {
    ScalarType result;
    if (!classify(type, result))
      reject(op, "uses type " + typeText(type) +
                     "; the interpreter evaluates index, i1..i64 and f32 scalars");
    return result;
  }

  uint32_t slotOf(mlir::Operation *op, mlir::Value value) {
    auto it = slots.find(value);
    if (it == slots.end())
      reject(op, "uses a value defined outside its region");
    return it->second;
  }

  void translateOp(mlir::Operation *op);
  void addConstant(mlir::arith::ConstantOp op);
  void addLoad(mlir::memref::LoadOp op);
  void addAtomicAdd(mlir::memref::AtomicRMWOp op);
  /// The capture `op` accesses through `memref`, and its `indices` as the
  /// leading operands of `step`.
  unsigned captureAccess(mlir::Operation *op, mlir::Value memref,
                         mlir::ValueRange indices, Step &step);

  ModInterpreter::Program &program;
  llvm::DenseMap<mlir::Value, uint32_t> slots;
  llvm::DenseMap<mlir::Value, unsigned> captureOf;
  /// Result slots are numbered after the constants, which are only known at
  /// the end; until then steps name result n as `kResultTag + n`.
  std::vector<mlir::Value> results;
};

/// The opcode of an operation whose operands and result all have one type,
/// and whether that type is an integer (otherwise f32).
struct UniformOp {
  Opcode opcode;
  unsigned numOperands;
  bool integer;
};

std::optional<UniformOp> uniformOpcode(llvm::StringRef name) {
  using O = Opcode;
  return llvm::StringSwitch<std::optional<UniformOp>>(name)
      .Case("arith.addi", UniformOp{O::AddI, 2, true})
      .Case("arith.subi", UniformOp{O::SubI, 2, true})
      .Case("arith.muli", UniformOp{O::MulI, 2, true})
      .Case("arith.divsi", UniformOp{O::DivSI, 2, true})
      .Case("arith.divui", UniformOp{O::DivUI, 2, true})
      .Case("arith.remsi", UniformOp{O::RemSI, 2, true})
      .Case("arith.remui", UniformOp{O::RemUI, 2, true})
      .Case("arith.floordivsi", UniformOp{O::FloorDivSI, 2, true})
      .Case("arith.ceildivsi", UniformOp{O::CeilDivSI, 2, true})
      .Case("arith.maxsi", UniformOp{O::MaxSI, 2, true})
      .Case("arith.minsi", UniformOp{O::MinSI, 2, true})
      .Case("arith.maxui", UniformOp{O::MaxUI, 2, true})
      .Case("arith.minui", UniformOp{O::MinUI, 2, true})
      .Case("arith.andi", UniformOp{O::AndI, 2, true})
      .Case("arith.ori", UniformOp{O::OrI, 2, true})
      .Case("arith.xori", UniformOp{O::XOrI, 2, true})
      .Case("arith.shli", UniformOp{O::ShLI, 2, true})
      .Case("arith.shrsi", UniformOp{O::ShRSI, 2, true})
      .Case("arith.shrui", UniformOp{O::ShRUI, 2, true})
      .Case("math.absi", UniformOp{O::AbsI, 1, true})
      .Case("arith.addf", UniformOp{O::AddF, 2, false})
      .Case("arith.subf", UniformOp{O::SubF, 2, false})
      .Case("arith.mulf", UniformOp{O::MulF, 2, false})
      .Case("arith.divf", UniformOp{O::DivF, 2, false})
      .Case("arith.remf", UniformOp{O::RemF, 2, false})
      .Case("arith.negf", UniformOp{O::NegF, 1, false})
      .Case("arith.maximumf", UniformOp{O::MaximumF, 2, false})
      .Case("arith.minimumf", UniformOp{O::MinimumF, 2, false})
      .Case("arith.maxnumf", UniformOp{O::MaxNumF, 2, false})
      .Case("arith.minnumf", UniformOp{O::MinNumF, 2, false})
      .Case("math.absf", UniformOp{O::AbsF, 1, false})
      .Case("math.exp", UniformOp{O::Exp, 1, false})
      .Case("math.exp2", UniformOp{O::Exp2, 1, false})
      .Case("math.expm1", UniformOp{O::ExpM1, 1, false})
      .Case("math.log", UniformOp{O::Log, 1, false})
      .Case("math.log2", UniformOp{O::Log2, 1, false})
      .Case("math.log1p", UniformOp{O::Log1p, 1, false})
      .Case("math.sqrt", UniformOp{O::Sqrt, 1, false})
      .Case("math.rsqrt", UniformOp{O::Rsqrt, 1, false})
      .Case("math.tanh", UniformOp{O::Tanh, 1, false})
      .Case("math.sin", UniformOp{O::Sin, 1, false})
      .Case("math.cos", UniformOp{O::Cos, 1, false})
      .Case("math.floor", UniformOp{O::Floor, 1, false})
      .Case("math.ceil", UniformOp{O::Ceil, 1, false})
      .Case("math.round", UniformOp{O::Round, 1, false})
      .Case("math.powf", UniformOp{O::PowF, 2, false})
      .Case("math.erf", UniformOp{O::Erf, 1, false})
      .Case("math.fma", UniformOp{O::Fma, 3, false})
      .Case("math.copysign", UniformOp{O::CopySign, 2, false})
      .Default(std::nullopt);
}

/// Casts: source kind, result kind, opcode.
struct CastOp {
  Opcode opcode;
  ScalarKind from, to;
};

std::optional<CastOp> castOpcode(llvm::StringRef name) {
  using O = Opcode;
  constexpr ScalarKind I = ScalarKind::Int, F = ScalarKind::F32;
  return llvm::StringSwitch<std::optional<CastOp>>(name)
      .Case("arith.index_cast", CastOp{O::SExtOrTrunc, I, I})
      .Case("arith.extsi", CastOp{O::SExtOrTrunc, I, I})
      .Case("arith.trunci", CastOp{O::SExtOrTrunc, I, I})
      .Case("arith.index_castui", CastOp{O::ZExtOrTrunc, I, I})
      .Case("arith.extui", CastOp{O::ZExtOrTrunc, I, I})
      .Case("arith.sitofp", CastOp{O::SIToFP, I, F})
      .Case("arith.uitofp", CastOp{O::UIToFP, I, F})
      .Case("arith.fptosi", CastOp{O::FPToSI, F, I})
      .Case("arith.fptoui", CastOp{O::FPToUI, F, I})
      .Default(std::nullopt);
}

void Translator::translate(mlir::Region &region) {
  if (!region.hasOneBlock())
    throw std::invalid_argument("mod interpreter: the region must have exactly one block");
  mlir::Block &block = region.front();

  // Scalars take the first slots; captures are referred to by position.
  for (mlir::BlockArgument arg : block.getArguments()) {
    if (auto memref = mlir::dyn_cast<mlir::MemRefType>(arg.getType())) {
      mlir::Type element = memref.getElementType();
      DType dtype;
      if (element.isF32())
        dtype = DType::F32;
      else if (element.isSignlessInteger(32))
        dtype = DType::I32;
      else
        throw std::invalid_argument(fmt::format(
            "mod interpreter: capture argument #{} at {} has type {}; captures hold f32 or i32",
            arg.getArgNumber(), describeLocation(arg.getLoc()), typeText(memref)));
      if (memref.getRank() < 1 || memref.getRank() > 3)
        throw std::invalid_argument(fmt::format(
            "mod interpreter: capture argument #{} at {} has rank {}; captures have rank 1 to 3",
            arg.getArgNumber(), describeLocation(arg.getLoc()), memref.getRank()));
      captureOf[arg] = program.captureArgs.size();
      program.captureArgs.push_back({dtype, static_cast<unsigned>(memref.getRank())});
      continue;
    }
    ScalarType scalar;
    if (!classify(arg.getType(), scalar))
      throw std::invalid_argument(fmt::format(
          "mod interpreter: argument #{} at {} has type {}; arguments are index, i1..i64, f32 "
          "or memrefs",
          arg.getArgNumber(), describeLocation(arg.getLoc()), typeText(arg.getType())));
    slots[arg] = program.scalarArgs.size();
    program.scalarArgs.push_back(scalar);
  }

  // attn.yield ends the kernel's regions, func.return the functions derived
  // from them.
  mlir::Operation *terminator = block.empty() ? nullptr : &block.back();
  if (!mlir::isa_and_present<mlir::attn::YieldOp, mlir::func::ReturnOp>(terminator))
    throw std::invalid_argument(
        "mod interpreter: the region must end with 'attn.yield' or 'func.return'");
  for (mlir::Operation &op : block.without_terminator())
    translateOp(&op);
  if (terminator->getNumOperands() != 1)
    reject(terminator, "must produce exactly one value");
  mlir::Value yielded = terminator->getOperand(0);
  program.yieldType = scalarOf(terminator, yielded.getType());

  // Now that every constant is known, move the results after them.
  const uint32_t resultBase = program.scalarArgs.size() + program.constants.size();
  auto relocate = [&](uint32_t slot) {
    return slot >= kResultTag ? slot - kResultTag + resultBase : slot;
  };
  for (Step &step : program.steps) {
    step.result = relocate(step.result);
    for (uint32_t &operand : step.operands)
      operand = relocate(operand);
  }
  program.yieldSlot = relocate(slotOf(terminator, yielded));
  program.numSlots = resultBase + results.size();

  const ScalarType index{ScalarKind::Int, 64};
  auto isIndex = [&](const ScalarType &type) {
    return type.kind == index.kind && type.width == index.width;
  };
  const auto &args = program.scalarArgs;
  program.isMaskSignature = args.size() == 4 && llvm::all_of(args, isIndex) &&
                            program.yieldType.kind == ScalarKind::Int &&
                            program.yieldType.width == 1;
  program.isScoreSignature = args.size() == 5 && args[0].kind == ScalarKind::F32 &&
                             std::all_of(args.begin() + 1, args.end(), isIndex) &&
                             program.yieldType.kind == ScalarKind::F32;
}

void Translator::addConstant(mlir::arith::ConstantOp op) {
  ScalarType type = scalarOf(op, op.getType());
  Slot slot;
  slot.i = 0;
  if (type.kind == ScalarKind::Int) {
    auto attr = mlir::dyn_cast<mlir::IntegerAttr>(op.getValue());
    if (!attr)
      reject(op, "has a value that is not an integer");
    slot.i = attr.getValue().getZExtValue() & widthMask(type.width);
  } else {
    auto attr = mlir::dyn_cast<mlir::FloatAttr>(op.getValue());
    if (!attr)
      reject(op, "has a value that is not a float");
    slot.f = attr.getValue().convertToFloat();
  }
  slots[op.getResult()] = program.scalarArgs.size() + program.constants.size();
  program.constants.push_back(slot);
}

unsigned Translator::captureAccess(mlir::Operation *op, mlir::Value memref,
                                   mlir::ValueRange indices, Step &step) {
  auto it = captureOf.find(memref);
  if (it == captureOf.end())
    reject(op, "must access a capture argument of the region");
  const CaptureArg &capture = program.captureArgs[it->second];
  if (indices.size() != capture.rank)
    reject(op, fmt::format("has {} indices for a capture of rank {}", indices.size(),
                           capture.rank));
  step.aux = it->second;
  step.rank = capture.rank;
  for (auto [position, index] : llvm::enumerate(indices)) {
    ScalarType type = scalarOf(op, index.getType());
    if (type.kind != ScalarKind::Int || type.width != 64)
      reject(op, "needs index operands");
    step.operands[position] = slotOf(op, index);
  }
  return it->second;
}

void Translator::addLoad(mlir::memref::LoadOp op) {
  Step step;
  step.op = Opcode::Load;
  step.mask = widthMask(32);
  captureAccess(op, op.getMemRef(), op.getIndices(), step);
  step.result = kResultTag + results.size();
  slots[op.getResult()] = step.result;
  results.push_back(op.getResult());
  program.steps.push_back(step);
}

void Translator::translateOp(mlir::Operation *op) {
  if (op->getNumRegions() != 0)
    reject(op, "has regions; user regions are straight-line code");
  if (auto constant = mlir::dyn_cast<mlir::arith::ConstantOp>(op))
    return addConstant(constant);
  if (auto load = mlir::dyn_cast<mlir::memref::LoadOp>(op))
    return addLoad(load);
  if (auto atomic = mlir::dyn_cast<mlir::memref::AtomicRMWOp>(op))
    return addAtomicAdd(atomic);
  if (op->getNumResults() != 1)
    reject(op, "is not supported by the mod interpreter");

  Step step;
  llvm::StringRef name = op->getName().getStringRef();
  ScalarType resultType = scalarOf(op, op->getResult(0).getType());
  auto operandType = [&](unsigned i) { return scalarOf(op, op->getOperand(i).getType()); };
  auto expectKind = [&](ScalarType type, ScalarKind kind) {
    if (type.kind != kind)
      reject(op, kind == ScalarKind::Int ? "needs integer operands and results"
                                         : "needs f32 operands and results");
  };

  if (std::optional<UniformOp> uniform = uniformOpcode(name)) {
    if (op->getNumOperands() != uniform->numOperands)
      reject(op, "has an unexpected number of operands");
    ScalarKind kind = uniform->integer ? ScalarKind::Int : ScalarKind::F32;
    expectKind(resultType, kind);
    for (unsigned i = 0; i < uniform->numOperands; ++i) {
      ScalarType type = operandType(i);
      expectKind(type, kind);
      if (type.width != resultType.width)
        reject(op, "mixes operand widths");
    }
    step.op = uniform->opcode;
    step.width = resultType.width;
  } else if (std::optional<CastOp> cast = castOpcode(name)) {
    if (op->getNumOperands() != 1)
      reject(op, "has an unexpected number of operands");
    ScalarType from = operandType(0);
    expectKind(from, cast->from);
    expectKind(resultType, cast->to);
    step.op = cast->opcode;
    step.width = from.width;
  } else if (auto cmpi = mlir::dyn_cast<mlir::arith::CmpIOp>(op)) {
    ScalarType type = operandType(0);
    expectKind(type, ScalarKind::Int);
    step.op = Opcode::CmpI;
    step.width = type.width;
    step.aux = static_cast<uint8_t>(cmpi.getPredicate());
  } else if (auto cmpf = mlir::dyn_cast<mlir::arith::CmpFOp>(op)) {
    expectKind(operandType(0), ScalarKind::F32);
    step.op = Opcode::CmpF;
    step.aux = static_cast<uint8_t>(cmpf.getPredicate());
  } else if (auto select = mlir::dyn_cast<mlir::arith::SelectOp>(op)) {
    ScalarType condition = operandType(0);
    if (condition.kind != ScalarKind::Int || condition.width != 1)
      reject(op, "needs an i1 condition");
    step.op = Opcode::Select;
    step.width = resultType.width;
  } else {
    reject(op, "is not supported by the mod interpreter; user regions are evaluated with "
               "arith and math operations on index, integer and f32 values, "
               "memref.load of captures and memref.atomic_rmw addf into them");
  }
  step.mask = widthMask(resultType.width);
  for (unsigned i = 0; i < op->getNumOperands(); ++i)
    step.operands[i] = slotOf(op, op->getOperand(i));
  step.result = kResultTag + results.size();
  slots[op->getResult(0)] = step.result;
  results.push_back(op->getResult(0));
  program.steps.push_back(step);
}

void Translator::addAtomicAdd(mlir::memref::AtomicRMWOp op) {
  if (op.getKind() != mlir::arith::AtomicRMWKind::addf)
    reject(op, "has kind '" + mlir::arith::stringifyAtomicRMWKind(op.getKind()).str() +
                   "'; the interpreter evaluates only 'addf'");
  Step step;
  step.op = Opcode::AtomicAddF;
  step.mask = widthMask(32);
  unsigned capture = captureAccess(op, op.getMemref(), op.getIndices(), step);
  if (program.captureArgs[capture].dtype != DType::F32 ||
      scalarOf(op, op.getValue().getType()).kind != ScalarKind::F32)
    reject(op, "needs an f32 value and an f32 capture");
  step.operands[kAtomicValueOperand] = slotOf(op, op.getValue());
  step.result = kResultTag + results.size();
  slots[op.getResult()] = step.result;
  results.push_back(op.getResult());
  program.steps.push_back(step);
}

//===----------------------------------------------------------------------===//
// Evaluation
//===----------------------------------------------------------------------===//

bool compareInt(mlir::arith::CmpIPredicate predicate, uint64_t a, uint64_t b,
                unsigned width) {
  using P = mlir::arith::CmpIPredicate;
  int64_t sa = signExtend(a, width), sb = signExtend(b, width);
  switch (predicate) {
  case P::eq:
    return a == b;
  case P::ne:
    return a != b;
  case P::slt:
    return sa < sb;
  case P::sle:
    return sa <= sb;
  case P::sgt:
    return sa > sb;
  case P::sge:
    return sa >= sb;
  case P::ult:
    return a < b;
  case P::ule:
    return a <= b;
  case P::ugt:
    return a > b;
  case P::uge:
    return a >= b;
  }
  return false;
}

bool compareFloat(mlir::arith::CmpFPredicate predicate, float a, float b) {
  using P = mlir::arith::CmpFPredicate;
  const bool unordered = std::isnan(a) || std::isnan(b);
  switch (predicate) {
  case P::AlwaysFalse:
    return false;
  case P::OEQ:
    return !unordered && a == b;
  case P::OGT:
    return !unordered && a > b;
  case P::OGE:
    return !unordered && a >= b;
  case P::OLT:
    return !unordered && a < b;
  case P::OLE:
    return !unordered && a <= b;
  case P::ONE:
    return !unordered && a != b;
  case P::ORD:
    return !unordered;
  case P::UEQ:
    return unordered || a == b;
  case P::UGT:
    return unordered || a > b;
  case P::UGE:
    return unordered || a >= b;
  case P::ULT:
    return unordered || a < b;
  case P::ULE:
    return unordered || a <= b;
  case P::UNE:
    return unordered || a != b;
  case P::UNO:
    return unordered;
  case P::AlwaysTrue:
    return true;
  }
  return false;
}

/// IEEE maximum/minimum: NaN if either is NaN, and -0 < +0.
float maximumF(float a, float b) {
  if (std::isnan(a) || std::isnan(b))
    return std::numeric_limits<float>::quiet_NaN();
  if (a == b)
    return std::signbit(a) ? b : a;
  return a > b ? a : b;
}

float minimumF(float a, float b) {
  if (std::isnan(a) || std::isnan(b))
    return std::numeric_limits<float>::quiet_NaN();
  if (a == b)
    return std::signbit(a) ? a : b;
  return a < b ? a : b;
}

/// Saturating conversions to the integer whose bits `mask` keeps, as the
/// GPU's cvt.rzi does; NaN gives 0. The limits are exact in double.
uint64_t floatToSigned(float value, uint64_t mask) {
  if (std::isnan(value))
    return 0;
  const uint64_t signedMax = mask >> 1;
  const double limit = static_cast<double>(signedMax) + 1.0;
  if (value >= limit)
    return signedMax;
  if (value <= -limit)
    return signedMax + 1; // the signed minimum's bits
  return static_cast<uint64_t>(static_cast<int64_t>(value)) & mask;
}

uint64_t floatToUnsigned(float value, uint64_t mask) {
  if (std::isnan(value) || value <= 0.0f)
    return 0;
  if (value >= static_cast<double>(mask) + 1.0)
    return mask;
  return static_cast<uint64_t>(value);
}

/// The four bytes of the element a load or atomic add accesses, row-major;
/// null outside the extents.
const char *captureElement(const HostCapture &capture, const Step &step, const Slot *slots) {
  int64_t offset = 0;
  for (unsigned d = 0; d < step.rank; ++d) {
    const int64_t index = static_cast<int64_t>(slots[step.operands[d]].i);
    const int64_t extent = capture.shape[d];
    if (index < 0 || index >= extent)
      return nullptr;
    offset = offset * extent + index;
  }
  return static_cast<const char *>(capture.data) + offset * 4;
}

/// The bits of an f32 or i32 element; 0 (both 0.0f and 0) outside the
/// extents.
uint32_t loadCapture(const HostCapture &capture, const Step &step, const Slot *slots) {
  uint32_t bits = 0;
  if (const char *element = captureElement(capture, step, slots))
    std::memcpy(&bits, element, 4);
  return bits;
}

/// Adds `value` into an f32 element and returns its old value; outside the
/// extents nothing is written and the old value reads 0, as a load's.
float atomicAddCapture(const HostCapture &capture, const Step &step, const Slot *slots,
                       float value) {
  const char *element = captureElement(capture, step, slots);
  if (!element)
    return 0.0f;
  // HostCapture's data is const for the regions that only read; one that
  // adds into a capture is given writable memory (see HostCapture).
  char *writable = const_cast<char *>(element);
  float old;
  std::memcpy(&old, writable, 4);
  const float sum = old + value;
  std::memcpy(writable, &sum, 4);
  return old;
}

void run(const ModInterpreter::Program &program, Slot *slots,
         const std::vector<HostCapture> &captures) {
  using namespace mlir::arith;
  for (const Step &step : program.steps) {
    const Slot &a = slots[step.operands[0]];
    const Slot &b = slots[step.operands[1]];
    const Slot &c = slots[step.operands[2]];
    Slot &r = slots[step.result];
    const unsigned w = step.width;
    const uint64_t mask = step.mask;
    switch (step.op) {
    case Opcode::AddI:
      r.i = (a.i + b.i) & mask;
      break;
    case Opcode::SubI:
      r.i = (a.i - b.i) & mask;
      break;
    case Opcode::MulI:
      r.i = (a.i * b.i) & mask;
      break;
    case Opcode::DivSI: {
      int64_t x = signExtend(a.i, w), y = signExtend(b.i, w);
      // By zero: 0; the minimum by -1 (only overflows C++ at 64 bits): wraps.
      r.i = y == 0 ? 0 : y == -1 ? (0 - a.i) & mask : static_cast<uint64_t>(x / y) & mask;
      break;
    }
    case Opcode::DivUI:
      r.i = b.i == 0 ? 0 : a.i / b.i;
      break;
    case Opcode::RemSI: {
      int64_t x = signExtend(a.i, w), y = signExtend(b.i, w);
      r.i = (y == 0 || y == -1) ? 0 : static_cast<uint64_t>(x % y) & mask;
      break;
    }
    case Opcode::RemUI:
      r.i = b.i == 0 ? 0 : a.i % b.i;
      break;
    case Opcode::FloorDivSI:
    case Opcode::CeilDivSI: {
      int64_t x = signExtend(a.i, w), y = signExtend(b.i, w);
      if (y == 0) {
        r.i = 0;
      } else if (y == -1) {
        r.i = (0 - a.i) & mask; // Exact, so floor and ceil agree.
      } else {
        int64_t q = x / y;
        bool inexact = x % y != 0;
        bool negative = (x < 0) != (y < 0);
        if (inexact && step.op == Opcode::FloorDivSI && negative)
          --q;
        if (inexact && step.op == Opcode::CeilDivSI && !negative)
          ++q;
        r.i = static_cast<uint64_t>(q) & mask;
      }
      break;
    }
    case Opcode::MaxSI:
      r.i = signExtend(a.i, w) >= signExtend(b.i, w) ? a.i : b.i;
      break;
    case Opcode::MinSI:
      r.i = signExtend(a.i, w) <= signExtend(b.i, w) ? a.i : b.i;
      break;
    case Opcode::MaxUI:
      r.i = a.i >= b.i ? a.i : b.i;
      break;
    case Opcode::MinUI:
      r.i = a.i <= b.i ? a.i : b.i;
      break;
    case Opcode::AndI:
      r.i = a.i & b.i;
      break;
    case Opcode::OrI:
      r.i = a.i | b.i;
      break;
    case Opcode::XOrI:
      r.i = a.i ^ b.i;
      break;
    // Shift amounts are unsigned; from the width on, the GPU's shifts clamp.
    case Opcode::ShLI:
      r.i = b.i >= w ? 0 : (a.i << b.i) & mask;
      break;
    case Opcode::ShRUI:
      r.i = b.i >= w ? 0 : a.i >> b.i;
      break;
    case Opcode::ShRSI:
      r.i = static_cast<uint64_t>(signExtend(a.i, w) >> (b.i >= w ? w - 1 : b.i)) & mask;
      break;
    case Opcode::AbsI:
      r.i = signExtend(a.i, w) < 0 ? (0 - a.i) & mask : a.i;
      break;
    case Opcode::CmpI:
      r.i = compareInt(static_cast<CmpIPredicate>(step.aux), a.i, b.i, w);
      break;
    case Opcode::SExtOrTrunc:
      r.i = static_cast<uint64_t>(signExtend(a.i, w)) & mask;
      break;
    case Opcode::ZExtOrTrunc:
      r.i = a.i & mask;
      break;
    case Opcode::SIToFP:
      r.f = static_cast<float>(signExtend(a.i, w));
      break;
    case Opcode::UIToFP:
      r.f = static_cast<float>(a.i);
      break;
    case Opcode::FPToSI:
      r.i = floatToSigned(a.f, mask);
      break;
    case Opcode::FPToUI:
      r.i = floatToUnsigned(a.f, mask);
      break;
    case Opcode::AddF:
      r.f = a.f + b.f;
      break;
    case Opcode::SubF:
      r.f = a.f - b.f;
      break;
    case Opcode::MulF:
      r.f = a.f * b.f;
      break;
    case Opcode::DivF:
      r.f = a.f / b.f;
      break;
    case Opcode::RemF:
      r.f = std::fmod(a.f, b.f);
      break;
    case Opcode::NegF:
      r.f = -a.f;
      break;
    case Opcode::MaximumF:
      r.f = maximumF(a.f, b.f);
      break;
    case Opcode::MinimumF:
      r.f = minimumF(a.f, b.f);
      break;
    case Opcode::MaxNumF:
      r.f = std::fmax(a.f, b.f);
      break;
    case Opcode::MinNumF:
      r.f = std::fmin(a.f, b.f);
      break;
    case Opcode::CmpF:
      r.i = compareFloat(static_cast<CmpFPredicate>(step.aux), a.f, b.f);
      break;
    case Opcode::AbsF:
      r.f = std::fabs(a.f);
      break;
    case Opcode::Exp:
      r.f = std::exp(a.f);
      break;
    case Opcode::Exp2:
      r.f = std::exp2(a.f);
      break;
    case Opcode::ExpM1:
      r.f = std::expm1(a.f);
      break;
    case Opcode::Log:
      r.f = std::log(a.f);
      break;
    case Opcode::Log2:
      r.f = std::log2(a.f);
      break;
    case Opcode::Log1p:
      r.f = std::log1p(a.f);
      break;
    case Opcode::Sqrt:
      r.f = std::sqrt(a.f);
      break;
    case Opcode::Rsqrt:
      r.f = 1.0f / std::sqrt(a.f);
      break;
    case Opcode::Tanh:
      r.f = std::tanh(a.f);
      break;
    case Opcode::Sin:
      r.f = std::sin(a.f);
      break;
    case Opcode::Cos:
      r.f = std::cos(a.f);
      break;
    case Opcode::Floor:
      r.f = std::floor(a.f);
      break;
    case Opcode::Ceil:
      r.f = std::ceil(a.f);
      break;
    case Opcode::Round:
      r.f = std::round(a.f); // Halves away from zero, as math.round.
      break;
    case Opcode::PowF:
      r.f = std::pow(a.f, b.f);
      break;
    case Opcode::Erf:
      r.f = std::erf(a.f);
      break;
    case Opcode::Fma:
      r.f = std::fma(a.f, b.f, c.f);
      break;
    case Opcode::CopySign:
      r.f = std::copysign(a.f, b.f);
      break;
    case Opcode::Select:
      r = (a.i & 1) ? b : c;
      break;
    case Opcode::Load: {
      uint32_t bits = loadCapture(captures[step.aux], step, slots);
      if (program.captureArgs[step.aux].dtype == DType::F32)
        std::memcpy(&r.f, &bits, 4);
      else
        r.i = bits;
      break;
    }
    case Opcode::AtomicAddF:
      r.f = atomicAddCapture(captures[step.aux], step, slots,
                             slots[step.operands[kAtomicValueOperand]].f);
      break;
    }
  }
}

/// Stack room for typical regions; larger ones use the heap.
constexpr unsigned kStackSlots = 128;

} // namespace

ModInterpreter::ModInterpreter(mlir::Region &region) {
  auto built = std::make_unique<Program>();
  Translator(*built).translate(region);
  program = std::move(built);
}

ModInterpreter::~ModInterpreter() = default;
ModInterpreter::ModInterpreter(ModInterpreter &&) noexcept = default;
ModInterpreter &ModInterpreter::operator=(ModInterpreter &&) noexcept = default;

unsigned ModInterpreter::getNumScalarArguments() const { return program->scalarArgs.size(); }
unsigned ModInterpreter::getNumCaptureArguments() const { return program->captureArgs.size(); }
unsigned ModInterpreter::getNumSteps() const { return program->steps.size(); }

void ModInterpreter::checkCaptures(const std::vector<HostCapture> &captures) const {
  // Runs before every evaluation: messages are only built on failure.
  const std::vector<CaptureArg> &expected = program->captureArgs;
  if (captures.size() != expected.size())
    throw std::invalid_argument(fmt::format("mod interpreter: the region takes {} captures, got {}",
                                            expected.size(), captures.size()));
  auto fail = [](size_t i, const std::string &what) {
    throw std::invalid_argument(fmt::format("mod interpreter: capture #{} {}", i, what));
  };
  for (size_t i = 0; i < captures.size(); ++i) {
    const HostCapture &capture = captures[i];
    if (capture.dtype != expected[i].dtype)
      fail(i, std::string("must be ") + dtypeName(expected[i].dtype) + ", got " +
                  dtypeName(capture.dtype));
    if (capture.shape.size() != expected[i].rank)
      fail(i, fmt::format("must have rank {}, got {}", expected[i].rank, capture.shape.size()));
    bool empty = false;
    for (int64_t extent : capture.shape) {
      if (extent < 0)
        fail(i, "has a negative extent");
      empty |= extent == 0;
    }
    if (!empty && !capture.data)
      fail(i, "has no data");
  }
}

namespace {

/// Runs with the scalars bound by `bind(slots)`, returning the yield slot.
template <typename Bind>
Slot evaluateWith(const ModInterpreter::Program &program,
                  const std::vector<HostCapture> &captures, Bind bind) {
  Slot stack[kStackSlots];
  std::vector<Slot> heap;
  Slot *slots = stack;
  if (program.numSlots > kStackSlots) {
    heap.resize(program.numSlots);
    slots = heap.data();
  }
  bind(slots);
  if (!program.constants.empty())
    std::memcpy(slots + program.scalarArgs.size(), program.constants.data(),
                program.constants.size() * sizeof(Slot));
  run(program, slots, captures);
  return slots[program.yieldSlot];
}

} // namespace

ModValue ModInterpreter::evaluate(const std::vector<ModValue> &scalars,
                                  const std::vector<HostCapture> &captures) const {
  checkCaptures(captures);
  const std::vector<ScalarType> &expected = program->scalarArgs;
  if (scalars.size() != expected.size())
    throw std::invalid_argument(
        fmt::format("mod interpreter: the region takes {} scalar arguments, got {}",
                    expected.size(), scalars.size()));
  for (size_t i = 0; i < scalars.size(); ++i) {
    const bool isFloat = scalars[i].kind == ModValue::Kind::F32;
    if (isFloat != (expected[i].kind == ScalarKind::F32) ||
        (!isFloat && scalars[i].width != expected[i].width))
      throw std::invalid_argument(
          fmt::format("mod interpreter: scalar argument #{} has the wrong type", i));
  }
  Slot result = evaluateWith(*program, captures, [&](Slot *slots) {
    for (size_t i = 0; i < scalars.size(); ++i) {
      if (expected[i].kind == ScalarKind::F32)
        slots[i].f = scalars[i].f32;
      else
        slots[i].i = scalars[i].bits & widthMask(expected[i].width);
    }
  });
  if (program->yieldType.kind == ScalarKind::F32)
    return ModValue::f(result.f);
  return ModValue::integer(program->yieldType.width, result.i);
}

bool ModInterpreter::evaluateMask(int64_t batch, int64_t head, int64_t qIdx, int64_t kvIdx,
                                  const std::vector<HostCapture> &captures) const {
  if (!program->isMaskSignature)
    throw std::invalid_argument(
        "mod interpreter: the region is not a mask_mod (index x4, captures -> i1)");
  checkCaptures(captures);
  Slot result = evaluateWith(*program, captures, [&](Slot *slots) {
    slots[0].i = static_cast<uint64_t>(batch);
    slots[1].i = static_cast<uint64_t>(head);
    slots[2].i = static_cast<uint64_t>(qIdx);
    slots[3].i = static_cast<uint64_t>(kvIdx);
  });
  return (result.i & 1) != 0;
}

float ModInterpreter::evaluateScore(float score, int64_t batch, int64_t head, int64_t qIdx,
                                    int64_t kvIdx,
                                    const std::vector<HostCapture> &captures) const {
  if (!program->isScoreSignature)
    throw std::invalid_argument(
        "mod interpreter: the region is not a score_mod (f32, index x4, captures -> f32)");
  checkCaptures(captures);
  Slot result = evaluateWith(*program, captures, [&](Slot *slots) {
    slots[0].f = score;
    slots[1].i = static_cast<uint64_t>(batch);
    slots[2].i = static_cast<uint64_t>(head);
    slots[3].i = static_cast<uint64_t>(qIdx);
    slots[4].i = static_cast<uint64_t>(kvIdx);
  });
  return result.f;
}

} // namespace attn
