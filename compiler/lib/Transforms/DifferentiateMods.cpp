//===- DifferentiateMods.cpp - attn-differentiate-mods ---------------------===//
//
// Copies the user regions of each softmax attn.kernel into whole functions
// for the backward, and derives score_mod's vector-Jacobian product by
// reverse-mode differentiation of its single block.
//
//===----------------------------------------------------------------------===//

#include "attn/IR/AttnOps.h"
#include "attn/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/TypeSwitch.h"



namespace mlir::attn {
#define GEN_PASS_DEF_ATTNDIFFERENTIATEMODS
#include "attn/Transforms/Passes.h.inc"

namespace {

constexpr double kLn2 = 0.69314718055994530942;
constexpr double kTwoOverSqrtPi = 1.12837916709551257390;

/// A free symbol name `<base>_<n>` in `table`, counting from `n`.
std::string freeSymbol(SymbolTable &table, StringRef base, int n) {
  for (;; ++n) {
    std::string name = (base + "_" + Twine(n)).str();
    if (!table.lookup(name))
      return name;
  }
}

/// A func.func named `name` before `kernel` taking `leading` f32 arguments
/// (none, or dy) then the region's, then `trailing`, returning `results`;
/// its entry block maps the region's arguments in `mapping`.
func::FuncOp createFunction(KernelOp kernel, Block &body, StringRef name, unsigned leading,
                            TypeRange trailing, TypeRange results, IRMapping &mapping) {
  OpBuilder builder(kernel);
  SmallVector<Type> inputs(leading, builder.getF32Type());
  llvm::append_range(inputs, body.getArgumentTypes());
  llvm::append_range(inputs, trailing);
  auto func = func::FuncOp::create(builder, kernel.getLoc(), name,
                                   builder.getFunctionType(inputs, results));
  SmallVector<Location> locations(inputs.size(), kernel.getLoc());
  for (auto [index, argument] : llvm::enumerate(body.getArguments()))
    locations[leading + index] = argument.getLoc();
  Block *entry = builder.createBlock(&func.getBody(), {}, inputs, locations);
  for (auto [index, argument] : llvm::enumerate(body.getArguments()))
    mapping.map(argument, entry->getArgument(leading + index));
  return func;
}

/// Copies `body` (ending in attn.yield) into a func.func named `name`.
func::FuncOp copyRegion(KernelOp kernel, Block &body, StringRef name) {
  IRMapping mapping;
  auto yield = cast<YieldOp>(body.getTerminator());
  func::FuncOp func = createFunction(kernel, body, name, 0, {}, yield.getValues().getTypes(),
                                     mapping);
  OpBuilder builder = OpBuilder::atBlockEnd(&func.front());
  for (Operation &op : body.without_terminator())
    builder.clone(op, mapping);
  SmallVector<Value> results;
  for (Value value : yield.getValues())
    results.push_back(mapping.lookup(value));
  func::ReturnOp::create(builder, yield.getLoc(), results);
  return func;
}

/// How a region value varies over the pairs (q, kv) of one (batch, head),
/// which is what one step of the backward holds fixed.
struct PairDependence {
  enum Kind { Invariant, Diagonal, Pair } kind = Invariant;
  /// Integer values of at most 64 bits built by addition, subtraction and
  /// multiplication by a constant from q and kv: q qCoefficient + kv
  /// kvCoefficient + an invariant, all modulo 2^64 (truncation to the
  /// value's width keeps what follows). Such a value is a function of
  /// q - kv where the coefficients cancel.
  bool affine = false;
  uint64_t qCoefficient = 0, kvCoefficient = 0;

  static PairDependence of(Kind kind) { return {kind, false, 0, 0}; }
  static PairDependence linear(uint64_t q, uint64_t kv) {
    if (q == 0 && kv == 0)
      return of(Invariant);
    return {q + kv == 0 ? Diagonal : Pair, true, q, kv};
  }
};

/// The dependence of every value of the score_mod region `body` on the pair:
/// the score varies with the pair, the batch, the head and the captures'
/// contents do not, q and kv are the affine seeds. An operation other than
/// affine index arithmetic depends on the pair as its most varying operand
/// does (a function of q - kv stays one).
DenseMap<Value, PairDependence> pairDependences(Block &body) {
  DenseMap<Value, PairDependence> dependence;
  dependence[body.getArgument(0)] = PairDependence::of(PairDependence::Pair);
  dependence[body.getArgument(3)] = PairDependence::linear(1, 0);
  dependence[body.getArgument(4)] = PairDependence::linear(0, 1);
  auto lookup = [&](Value v) { return dependence.lookup(v); }; // default: invariant
  for (Operation &op : body.without_terminator()) {
    if (op.getNumRegions() != 0) {
      for (Value result : op.getResults())
        dependence[result] = PairDependence::of(PairDependence::Pair);
      continue;
    }
    // Every result varies as the most varying operand, unless it is affine.
    PairDependence::Kind kind = PairDependence::Invariant;
    for (Value operand : op.getOperands())
      kind = std::max(kind, lookup(operand).kind);
    for (Value result : op.getResults())
      dependence[result] = PairDependence::of(kind);
    if (op.getNumResults() != 1 || kind == PairDependence::Invariant)
      continue;
    Value result = op.getResult(0);
    auto intType = dyn_cast<IntegerType>(result.getType());
    if (!result.getType().isIndex() && !(intType && intType.getWidth() <= 64))
      continue;
    auto affineOperand = [&](unsigned index, PairDependence &out) {
      out = lookup(op.getOperand(index));
      return out.affine || out.kind == PairDependence::Invariant;
    };
    PairDependence a, b;
    if (isa<arith::AddIOp, arith::SubIOp>(op) && affineOperand(0, a) && affineOperand(1, b)) {
      const uint64_t sign = isa<arith::SubIOp>(op) ? ~uint64_t(0) : 1;
      dependence[result] = PairDependence::linear(a.qCoefficient + sign * b.qCoefficient,
                                                  a.kvCoefficient + sign * b.kvCoefficient);
      continue;
    }
    if (isa<arith::MulIOp>(op)) {
      APInt factor;
      for (unsigned index : {0u, 1u})
        if (matchPattern(op.getOperand(1 - index), m_ConstantInt(&factor)) &&
            affineOperand(index, a)) {
          // Modulo 2^64, as the coefficients (an i64 -1 is 2^64 - 1).
          const uint64_t k = factor.sextOrTrunc(64).getZExtValue();
          dependence[result] = PairDependence::linear(a.qCoefficient * k, a.kvCoefficient * k);
          break;
        }
    }
  }
  return dependence;
}

/// Builds score_mod's vector-Jacobian product into a function whose entry
/// block holds the arguments (dy, the region's, the gradient buffers).
class ScoreModVjp {
public:
  ScoreModVjp(Block &body, ArrayRef<CaptureAttr> captures, func::FuncOp func,
              IRMapping &primal)
      : body(body), primal(primal), builder(OpBuilder::atBlockEnd(&func.front())),
        dependence(pairDependences(body)) {
    Block &entry = func.front();
    dy = entry.getArgument(0);
    // The region's capture arguments follow its five scalars; the gradient
    // buffers follow the region's arguments, one per learnable capture.
    const unsigned firstCapture = KernelOp::kScoreModNumArgs;
    unsigned nextGradient = 1 + body.getNumArguments();
    for (auto [index, capture] : llvm::enumerate(captures))
      if (capture.getRequiresGrad())
        gradientOf[body.getArgument(firstCapture + index)] = entry.getArgument(nextGradient++);
  }

  /// Emits the recomputation, the reverse sweep and the return of the
  /// score's adjoint; a located error for what has no derivative.
  LogicalResult build() {
    for (Operation &op : body.without_terminator())
      builder.clone(op, primal);
    markActive();
    if (failed(checkIntegerConversions()))
      return failure();
    Value result = cast<YieldOp>(body.getTerminator()).getValues()[0];
    if (active.contains(result))
      adjoints[result] = dy;
    for (Operation &op : llvm::reverse(body.without_terminator()))
      if (failed(propagate(op)))
        return failure();
    Value score = body.getArgument(0);
    Value gradient = adjoints.lookup(score);
    if (!gradient)
      gradient = constant(0.0);
    func::ReturnOp::create(builder, body.getTerminator()->getLoc(), gradient);
    markAdditionElements();
    // What the sweep did not need: the recomputed result, contributions
    // built before knowing they were unused, reads of values whose
    // derivative is constant.
    eraseDeadModOps(*builder.getInsertionBlock());
    return success();
  }

private:
  Block &body;
  IRMapping &primal;
  OpBuilder builder;
  Value dy;
  Location loc() const { return builder.getInsertionBlock()->getParentOp()->getLoc(); }
  /// Region values that depend on the score or on a learnable capture.
  DenseSet<Value> active;
  /// The adjoint (in the function) of each active region value reached so far.
  DenseMap<Value, Value> adjoints;
  /// The gradient buffer (in the function) of each learnable capture argument.
  DenseMap<Value, Value> gradientOf;
  /// How each region value varies over the pairs of a (batch, head).
  DenseMap<Value, PairDependence> dependence;
  /// The additions into gradient buffers, and how each one's element
  /// varies over the pairs of a (batch, head).
  SmallVector<std::pair<memref::AtomicRMWOp, PairDependence::Kind>> additions;

  /// Marks the addition of a gradient buffer that has only one by how its
  /// element varies: `attn.step_invariant` (not with the pair: the backward
  /// sums it in a register over a step, one (batch, head), without testing
  /// each pair's element) or `attn.per_diagonal` (only through q - kv: the
  /// backward sums the pairs of each diagonal first).
  /// Per diagonal only where the kernel learns one capture: the backward
  /// keeps one set of diagonal sums (kDiagonalGradient).
  void markAdditionElements() {
    DenseMap<Value, int> additionsInto;
    for (auto &[addition, kind] : additions)
      ++additionsInto[addition.getMemref()];
    for (auto &[addition, kind] : additions) {
      if (additionsInto[addition.getMemref()] != 1 || kind == PairDependence::Pair ||
          (kind == PairDependence::Diagonal && gradientOf.size() != 1))
        continue;
      addition->setAttr(kind == PairDependence::Invariant ? kStepInvariantAttr
                                                          : kPerDiagonalAttr,
                        builder.getUnitAttr());
    }
  }

  void markActive() {
    active.insert(body.getArgument(0));
    for (Operation &op : body.without_terminator()) {
      if (auto load = dyn_cast<memref::LoadOp>(op)) {
        if (gradientOf.count(load.getMemref()))
          active.insert(load.getResult());
        continue;
      }
      // Only floats carry a gradient: a comparison's result does not. Floats
      // of any width do, so that a detour through f64 (which has no
      // derivative here) is an error rather than a gradient of 0.
      if (llvm::any_of(op.getOperands(), [&](Value v) { return active.contains(v); }))
        for (Value result : op.getResults())
          if (isa<FloatType>(result.getType()))
            active.insert(result);
    }
  }

  /// A gradient-carrying value converted to an integer that is used: the
  /// derivative through it would be silently 0.
  LogicalResult checkIntegerConversions() {
    for (Operation &op : body.without_terminator()) {
      if (!isa<arith::FPToSIOp, arith::FPToUIOp, arith::BitcastOp>(op) ||
          !active.contains(op.getOperand(0)) || op.getResult(0).use_empty() ||
          op.getResult(0).getType().isF32())
        continue;
      return op.emitOpError()
             << "in 'score_mod' turns a value that carries the gradient of the score (or of a "
                "learnable capture) into an integer, through which the derivative would be "
                "silently 0: the backward cannot be derived";
    }
    return success();
  }

  Value constant(double value) {
    return arith::ConstantOp::create(builder, loc(), builder.getF32FloatAttr(float(value)));
  }
  Value mul(Value a, Value b) { return arith::MulFOp::create(builder, loc(), a, b); }
  Value div(Value a, Value b) { return arith::DivFOp::create(builder, loc(), a, b); }
  Value add(Value a, Value b) { return arith::AddFOp::create(builder, loc(), a, b); }
  Value sub(Value a, Value b) { return arith::SubFOp::create(builder, loc(), a, b); }
  Value neg(Value a) { return arith::NegFOp::create(builder, loc(), a); }
  Value select(Value condition, Value a, Value b) {
    return arith::SelectOp::create(builder, loc(), condition, a, b);
  }
  Value compare(arith::CmpFPredicate predicate, Value a, Value b) {
    return arith::CmpFOp::create(builder, loc(), predicate, a, b);
  }
  /// `g` where `condition` holds, else 0.
  Value where(Value condition, Value g) { return select(condition, g, constant(0.0)); }

  /// Adds `contribution` to the adjoint of region value `value` if it is active.
  void accumulate(Value value, Value contribution) {
    if (!active.contains(value))
      return;
    Value &adjoint = adjoints[value];
    adjoint = adjoint ? add(adjoint, contribution) : contribution;
  }

  /// The adjoint contributions of `op` (whose result has adjoint g) to its
  /// operands; the operands and result as the function computes them.
  LogicalResult propagate(Operation &op) {
    // No operation with several results has a derivative (math.sincos).
    if (op.getNumResults() != 1) {
      if (llvm::none_of(op.getResults(), [&](Value v) { return adjoints.count(v); }))
        return success();
      return op.emitOpError() << "in 'score_mod' has no derivative for the backward";
    }
    Value result = op.getResult(0);
    if (!active.contains(result))
      return success();
    Value g = adjoints.lookup(result);
    if (!g) // active, but the score_mod result does not depend on it
      return success();
    auto in = [&](unsigned index) { return primal.lookup(op.getOperand(index)); };
    Value y = primal.lookup(result);
    // Adds the contribution `make` builds to operand `index`'s adjoint,
    // built only for an operand that carries a gradient.
    auto to = [&](unsigned index, function_ref<Value()> make) {
      if (active.contains(op.getOperand(index)))
        accumulate(op.getOperand(index), make());
    };
    using P = arith::CmpFPredicate;
    return TypeSwitch<Operation *, LogicalResult>(&op)
        .Case([&](memref::LoadOp load) {
          Value gradient = gradientOf.lookup(load.getMemref());
          SmallVector<Value> indices;
          for (Value index : load.getIndices())
            indices.push_back(primal.lookup(index));
          auto addition = memref::AtomicRMWOp::create(
              builder, load.getLoc(), arith::AtomicRMWKind::addf, g, gradient, indices);
          PairDependence::Kind kind = PairDependence::Invariant;
          for (Value index : load.getIndices())
            kind = std::max(kind, dependence.lookup(index).kind);
          additions.emplace_back(addition, kind);
          return success();
        })
        .Case([&](arith::AddFOp) {
          to(0, [&] { return g; });
          to(1, [&] { return g; });
          return success();
        })
        .Case([&](arith::SubFOp) {
          to(0, [&] { return g; });
          to(1, [&] { return neg(g); });
          return success();
        })
        .Case([&](arith::MulFOp) {
          to(0, [&] { return mul(g, in(1)); });
          to(1, [&] { return mul(g, in(0)); });
          return success();
        })
        .Case([&](arith::DivFOp) {
          Value quotientGradient = div(g, in(1));
          to(0, [&] { return quotientGradient; });
          to(1, [&] { return neg(mul(quotientGradient, y)); });
          return success();
        })
        .Case([&](arith::NegFOp) {
          to(0, [&] { return neg(g); });
          return success();
        })
        .Case([&](arith::RemFOp) {
          // y = a - trunc(a / b) b.
          to(0, [&] { return g; });
          to(1, [&] { return neg(mul(g, div(sub(in(0), y), in(1)))); });
          return success();
        })
        .Case([&](arith::SelectOp) {
          to(1, [&] { return where(in(0), g); });
          to(2, [&] { return select(in(0), constant(0.0), g); });
          return success();
        })
        .Case<arith::MaximumFOp, arith::MaxNumFOp>([&](Operation *) {
          Value first = compare(P::OGE, in(0), in(1));
          to(0, [&] { return where(first, g); });
          to(1, [&] { return select(first, constant(0.0), g); });
          return success();
        })
        .Case<arith::MinimumFOp, arith::MinNumFOp>([&](Operation *) {
          Value first = compare(P::OLE, in(0), in(1));
          to(0, [&] { return where(first, g); });
          to(1, [&] { return select(first, constant(0.0), g); });
          return success();
        })
        .Case([&](math::AbsFOp) {
          Value positive = compare(P::OGT, in(0), constant(0.0));
          Value negative = compare(P::OLT, in(0), constant(0.0));
          to(0, [&] { return select(positive, g, where(negative, neg(g))); });
          return success();
        })
        .Case([&](math::ExpOp) {
          to(0, [&] { return mul(g, y); });
          return success();
        })
        .Case([&](math::Exp2Op) {
          to(0, [&] { return mul(g, mul(y, constant(kLn2))); });
          return success();
        })
        .Case([&](math::ExpM1Op) {
          to(0, [&] { return mul(g, add(y, constant(1.0))); });
          return success();
        })
        .Case([&](math::LogOp) {
          to(0, [&] { return div(g, in(0)); });
          return success();
        })
        .Case([&](math::Log2Op) {
          to(0, [&] { return div(g, mul(in(0), constant(kLn2))); });
          return success();
        })
        .Case([&](math::Log1pOp) {
          to(0, [&] { return div(g, add(in(0), constant(1.0))); });
          return success();
        })
        .Case([&](math::SqrtOp) {
          to(0, [&] { return div(mul(g, constant(0.5)), y); });
          return success();
        })
        .Case([&](math::RsqrtOp) {
          // d x^(-1/2) = -x^(-3/2) / 2 = -y / (2 x).
          to(0, [&] { return div(mul(g, mul(y, constant(-0.5))), in(0)); });
          return success();
        })
        .Case([&](math::TanhOp) {
          to(0, [&] { return mul(g, sub(constant(1.0), mul(y, y))); });
          return success();
        })
        .Case([&](math::SinOp) {
          to(0, [&] { return mul(g, math::CosOp::create(builder, loc(), in(0))); });
          return success();
        })
        .Case([&](math::CosOp) {
          to(0, [&] { return neg(mul(g, math::SinOp::create(builder, loc(), in(0)))); });
          return success();
        })
        .Case([&](math::ErfOp) {
          Value square = mul(in(0), in(0));
          Value gauss = math::ExpOp::create(builder, loc(), neg(square));
          to(0, [&] { return mul(g, mul(gauss, constant(kTwoOverSqrtPi))); });
          return success();
        })
        .Case([&](math::PowFOp) {
          // d/da = b a^(b-1); d/db = y log a, for a > 0 only (0 elsewhere).
          Value lowered = math::PowFOp::create(builder, loc(), in(0), sub(in(1), constant(1.0)));
          to(0, [&] { return mul(g, mul(in(1), lowered)); });
          if (active.contains(op.getOperand(1))) {
            Value positive = compare(P::OGT, in(0), constant(0.0));
            Value safeBase = select(positive, in(0), constant(1.0));
            Value logBase = math::LogOp::create(builder, loc(), safeBase);
            to(1, [&] { return where(positive, mul(g, mul(y, logBase))); });
          }
          return success();
        })
        .Case([&](math::FmaOp) {
          to(0, [&] { return mul(g, in(1)); });
          to(1, [&] { return mul(g, in(0)); });
          to(2, [&] { return g; });
          return success();
        })
        .Case([&](math::CopySignOp) {
          // y = |a| sign(b): dy/da = sign(a) sign(b), read from y and a.
          Value one = constant(1.0);
          Value signs = mul(math::CopySignOp::create(builder, loc(), one, in(0)),
                            math::CopySignOp::create(builder, loc(), one, y));
          to(0, [&] { return mul(g, signs); });
          return success();
        })
        .Case<math::FloorOp, math::CeilOp, math::RoundOp>(
            [&](Operation *) { return success(); })
        .Default([&](Operation *other) {
          return other->emitOpError()
                 << "in 'score_mod' has no derivative for the backward";
        });
  }
};

struct DifferentiateModsPass : impl::AttnDifferentiateModsBase<DifferentiateModsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *context = &getContext();
    SymbolTable symbols(module);
    int index = 0;
    for (KernelOp kernel : llvm::to_vector(module.getOps<KernelOp>())) {
      const int number = index++;
      if (!isa<SoftmaxAttr>(kernel.getNormalizer()))
        continue;
      if (!kernel.getMaskMod().empty()) {
        func::FuncOp mask = copyRegion(kernel, kernel.getMaskMod().front(),
                                       freeSymbol(symbols, "attn_mask_mod_full", number));
        symbols.insert(mask);
        kernel.setBackwardMaskModFnAttr(FlatSymbolRefAttr::get(context, mask.getSymName()));
      }
      if (kernel.getScoreMod().empty())
        continue;
      Block &body = kernel.getScoreMod().front();
      func::FuncOp score =
          copyRegion(kernel, body, freeSymbol(symbols, "attn_score_mod_full", number));
      symbols.insert(score);
      kernel.setBackwardScoreModFnAttr(FlatSymbolRefAttr::get(context, score.getSymName()));

      SmallVector<CaptureAttr> captures = kernel.getCaptureList();
      SmallVector<Type> gradients;
      for (CaptureAttr capture : captures)
        if (capture.getRequiresGrad())
          gradients.push_back(capture.getRegionArgType());
      IRMapping primal;
      OpBuilder builder(context);
      func::FuncOp vjp = createFunction(kernel, body,
                                        freeSymbol(symbols, "attn_score_mod_vjp", number), 1,
                                        gradients, {builder.getF32Type()}, primal);
      symbols.insert(vjp);
      if (failed(ScoreModVjp(body, captures, vjp, primal).build()))
        return signalPassFailure();
      kernel.setBackwardScoreModVjpFnAttr(FlatSymbolRefAttr::get(context, vjp.getSymName()));
    }
  }
};

} // namespace
} // namespace mlir::attn
