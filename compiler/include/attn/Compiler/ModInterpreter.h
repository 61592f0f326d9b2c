//===- ModInterpreter.h - CPU evaluation of user regions --------*- C++ -*-===//
//
// Evaluates the `mask_mod` and `score_mod` regions of an `attn.kernel` on the
// CPU, for the reference evaluator, and the functions derived from them (the
// regions as `func.func`, and their vector-Jacobian products, which add into
// the gradients of captures). The region is translated once into a flat list
// of steps over numbered value slots; an evaluation runs those steps without
// touching MLIR, so the oracle can afford one evaluation per (query, key) pair
// of a problem.
//
// Semantics follow the GPU lowering: f32 operations are evaluated in float,
// integer operations at the operation's bit width in two's complement
// (wrapping), `index` as 64 bits, a `memref.load` outside a capture's extents
// reads 0 and a `memref.atomic_rmw addf` outside them writes nothing. Where
// MLIR leaves a result undefined the interpreter picks a value instead of
// trapping: integer division or remainder by zero gives 0, the signed minimum
// divided by -1 wraps, shifts by the width or more give 0 (the sign for
// `shrsi`), and float-to-integer conversions saturate (NaN gives 0), as the
// GPU's conversions do.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_COMPILER_MODINTERPRETER_H
#define ATTN_COMPILER_MODINTERPRETER_H

#include "attn/runtime/DType.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace mlir {
class Region;
} // namespace mlir

namespace attn {

/// A captured buffer in host memory: contiguous, row-major, `dtype` F32 or
/// I32, rank 1..3. A capture the region updates with `memref.atomic_rmw` is
/// written through `data`: the caller passes writable memory.
struct HostCapture {
  const void *data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
};

/// A scalar bound to or produced by a region: an integer of `width` bits
/// (`index` is 64, `i1` is 1) held zero-extended in `bits`, or an f32.
struct ModValue {
  enum class Kind { Int, F32 };
  Kind kind = Kind::Int;
  unsigned width = 64;
  uint64_t bits = 0;
  float f32 = 0.0f;

  static ModValue index(int64_t value) { return integer(64, static_cast<uint64_t>(value)); }
  static ModValue integer(unsigned width, uint64_t value);
  static ModValue f(float value) {
    ModValue result;
    result.kind = Kind::F32;
    result.width = 32;
    result.f32 = value;
    return result;
  }
  /// The integer read as signed (sign-extended from its width).
  int64_t getSExt() const;
  uint64_t getZExt() const { return bits; }
  bool isTrue() const { return bits != 0; }
};

/// The program of one user region. Immutable once built, holds no reference
/// to MLIR, and evaluations use only the caller's stack and captures, so one
/// instance may be evaluated from any number of threads at once, except that
/// evaluations which write captures (`memref.atomic_rmw`) must not run
/// concurrently on the same buffers: their read-modify-writes are not atomic.
class ModInterpreter {
public:
  /// Translates `region`: one block ending in `attn.yield` or `func.return`
  /// of one value, so a kernel's region or the body of a `func.func`. Each
  /// block argument of type `index`, integer or f32 is a scalar and each
  /// `memref` argument a capture; scalars are bound in their order among the
  /// scalars and captures in theirs among the captures. `memref.atomic_rmw
  /// addf` adds an f32 into a capture and yields the element's old value
  /// (0 outside the extents). Throws std::invalid_argument naming the
  /// operation and its location for an operation or type it cannot evaluate.
  explicit ModInterpreter(mlir::Region &region);
  ~ModInterpreter();
  ModInterpreter(ModInterpreter &&) noexcept;
  ModInterpreter &operator=(ModInterpreter &&) noexcept;
  ModInterpreter(const ModInterpreter &) = delete;
  ModInterpreter &operator=(const ModInterpreter &) = delete;

  /// Evaluates with the scalar arguments and captures in block-argument
  /// order. Throws std::invalid_argument when they do not match the block's
  /// arguments (count, kind, width; capture dtype and rank).
  ModValue evaluate(const std::vector<ModValue> &scalars,
                    const std::vector<HostCapture> &captures) const;

  /// Fast paths for the two region signatures: `(batch, head, q_idx, kv_idx,
  /// captures...) -> i1` and `(score, batch, head, q_idx, kv_idx,
  /// captures...) -> f32`. Throw std::invalid_argument when the region has
  /// another signature or the captures do not match.
  bool evaluateMask(int64_t batch, int64_t head, int64_t qIdx, int64_t kvIdx,
                    const std::vector<HostCapture> &captures) const;
  float evaluateScore(float score, int64_t batch, int64_t head, int64_t qIdx,
                      int64_t kvIdx, const std::vector<HostCapture> &captures) const;

  /// Throws std::invalid_argument unless `captures` fit the region's
  /// capture arguments (count, dtype, rank, data for non-empty buffers).
  void checkCaptures(const std::vector<HostCapture> &captures) const;

  unsigned getNumScalarArguments() const;
  unsigned getNumCaptureArguments() const;
  /// Number of steps of the translated program (constants excluded).
  unsigned getNumSteps() const;

  struct Program;

private:
  std::unique_ptr<const Program> program;
};

} // namespace attn

#endif // ATTN_COMPILER_MODINTERPRETER_H
