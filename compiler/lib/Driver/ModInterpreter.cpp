//===- ModInterpreter.cpp - CPU evaluation of user regions ----------------===//
//
// The region is translated into steps over value slots laid out as
// [scalar arguments | constants | step results]. An evaluation copies the
// constants into a slot array on the stack, binds the arguments and runs the
// steps through one switch; each step knows its operand width, so no type is
// looked up while evaluating.
//
//===----------------------------------------------------------------------===//

#include "ModProgram.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace attn {

using namespace mod_program;

ModValue ModValue::integer(unsigned width, uint64_t value) {
  ModValue result;
  result.kind = Kind::Int;
  result.width = width;
  result.bits = value & widthMask(width);
  return result;
}

int64_t ModValue::getSExt() const { return signExtend(bits, width); }

namespace {

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
  translateRegion(region, *built);
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
