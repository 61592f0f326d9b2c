//===- ModTranslator.cpp - a region into the mod interpreter's steps -----===//
//
// Numbers the region's values into slots, records its constants, and turns
// each operation into a step that knows its operand width, so that the
// interpreter looks up no type while evaluating.
//
//===----------------------------------------------------------------------===//

#include "ModProgram.h"

#include "attn/IR/AttnOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Location.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

#include <optional>
#include <stdexcept>
#include <string>

namespace attn {
namespace mod_program {

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

} // namespace

void translateRegion(mlir::Region &region, ModInterpreter::Program &program) {
  Translator(program).translate(region);
}

} // namespace mod_program
} // namespace attn
