//===- ModProgram.h - the mod interpreter's program -------------*- C++ -*-===//
//
// What ModTranslator.cpp builds from a region and ModInterpreter.cpp runs:
// steps over value slots laid out as [scalar arguments | constants | step
// results]. Internal to the interpreter.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_DRIVER_MODPROGRAM_H
#define ATTN_DRIVER_MODPROGRAM_H

#include "attn/Compiler/ModInterpreter.h"

#include "mlir/IR/Region.h"

#include <cstdint>
#include <vector>

namespace attn {
namespace mod_program {

inline uint64_t widthMask(unsigned width) {
  return width >= 64 ? ~uint64_t(0) : (uint64_t(1) << width) - 1;
}

inline int64_t signExtend(uint64_t bits, unsigned width) {
  unsigned shift = 64 - width;
  return static_cast<int64_t>(bits << shift) >> shift;
}


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


/// Translates `region` into `program` (ModTranslator.cpp); throws
/// std::invalid_argument naming the first operation it cannot evaluate.
void translateRegion(mlir::Region &region, ModInterpreter::Program &program);

} // namespace mod_program

struct ModInterpreter::Program {
  std::vector<mod_program::ScalarType> scalarArgs;
  std::vector<mod_program::CaptureArg> captureArgs;
  /// Constant slots, stored after the scalar arguments.
  std::vector<mod_program::Slot> constants;
  std::vector<mod_program::Step> steps;
  unsigned numSlots = 0;
  unsigned yieldSlot = 0;
  mod_program::ScalarType yieldType{mod_program::ScalarKind::Int, 1};
  bool isMaskSignature = false;
  bool isScoreSignature = false;
};

} // namespace attn

#endif // ATTN_DRIVER_MODPROGRAM_H
