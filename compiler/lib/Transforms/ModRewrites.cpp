//===- ModRewrites.cpp - rewrites of outlined user regions ----------------===//
//
// What attn-lower-mods does to an outlined mask_mod or score_mod before
// lowering it: 32-bit index arithmetic where range analysis proves it exact,
// divisions by constants as products, the score scalings the kernel applies
// for free, the bound of a score_mod's result, the values staged per
// diagonal, the row offset peeled off a softmax score_mod, and the values
// that depend on the row alone split off as functions of their own.
//
//===----------------------------------------------------------------------===//

#include "ModRewrites.h"

#include "attn/IR/AttnOps.h"
#include "attn/Transforms/Passes.h"
#include "attn_params.h"
#include "mlir/Analysis/DataFlow/DeadCodeAnalysis.h"
#include "mlir/Analysis/DataFlow/IntegerRangeAnalysis.h"
#include "mlir/Analysis/DataFlowFramework.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/IR/Dominance.h"
#include "mlir/Transforms/CSE.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include <cmath>
#include <limits>

#include <cmath>
#include <limits>

namespace mlir::attn {

using namespace mods;

namespace mods {

/// A free symbol name `<base>_<n>` in `table`, counting from `n`.
std::string freeName(SymbolTable &table, StringRef base, int n) {
  for (;; ++n) {
    std::string name = (base + "_" + Twine(n)).str();
    if (!table.lookup(name))
      return name;
  }
}


/// Integer range analysis of an outlined mask_mod that knows its position
/// arguments: batch and head are ints, q and kv positions no larger than
/// attn_abi::kMaxRegionPosition (the runtime bounds the sequences). Every
/// other entry value has the full range of its type.
class MaskArgumentRanges : public dataflow::IntegerRangeAnalysis {
public:
  MaskArgumentRanges(DataFlowSolver &solver, func::FuncOp mask)
      : IntegerRangeAnalysis(solver), entry(&mask.front()) {}

  void setToEntryState(dataflow::IntegerValueRangeLattice *lattice) override {
    auto arg = dyn_cast<BlockArgument>(lattice->getAnchor());
    if (!arg || arg.getOwner() != entry || arg.getArgNumber() > kKeyArgument ||
        !arg.getType().isIndex())
      return IntegerRangeAnalysis::setToEntryState(lattice);
    const unsigned width = IndexType::kInternalStorageBitWidth;
    const int64_t largest = arg.getArgNumber() < kQueryArgument
                                ? std::numeric_limits<int32_t>::max()
                                : attn_abi::kMaxRegionPosition;
    auto range = ConstantIntRanges::fromSigned(APInt(width, 0), APInt(width, largest));
    propagateIfChanged(lattice, lattice->join(IntegerValueRange(range)));
  }

private:
  static constexpr unsigned kQueryArgument = 2, kKeyArgument = 3; // after batch, head
  Block *entry;
};

/// Keeps the solver's states of erased ops from outliving them (a new op
/// may reuse their addresses) while the narrowing patterns rewrite.
struct ErasedOpStates : RewriterBase::Listener {
  explicit ErasedOpStates(DataFlowSolver &solver) : solver(solver) {}
  void notifyOperationErased(Operation *op) override {
    solver.eraseState(solver.getProgramPointAfter(op));
    for (Value result : op->getResults())
      solver.eraseState(result);
  }
  DataFlowSolver &solver;
};

/// How the 32-bit truncation of every integer value of `values` keeps it:
/// as a signed or an unsigned value (or both, for [0, 2^31)); nullopt if
/// some value has no range or fits neither way.
enum class Kept { Both, Signed, Unsigned };
std::optional<Kept> keptIn32Bits(DataFlowSolver &solver, ValueRange values) {
  bool signedFits = true, unsignedFits = true;
  for (Value value : values) {
    if (!value.getType().isIntOrIndex() || value.getType().isInteger(1))
      continue;
    auto *lattice = solver.lookupState<dataflow::IntegerValueRangeLattice>(value);
    if (!lattice || lattice->getValue().isUninitialized())
      return std::nullopt;
    const ConstantIntRanges &range = lattice->getValue().getValue();
    if (range.smin().getBitWidth() <= 32)
      continue;
    signedFits &= range.smin().isSignedIntN(32) && range.smax().isSignedIntN(32);
    unsignedFits &= range.umax().isIntN(32);
  }
  if (signedFits && unsignedFits)
    return Kept::Both;
  if (signedFits)
    return Kept::Signed;
  if (unsignedFits)
    return Kept::Unsigned;
  return std::nullopt;
}

/// Whether narrowing `op` to 32 bits keeps its result. MLIR's narrowing
/// patterns accept an op once all its values fit in 32 bits one way, and
/// keep a signed op (or compare) signed when the values only fit unsigned:
/// kv + 2^30 + 768 < q would compare 2^31 as negative. So a signed op needs
/// its values to fit signed, an unsigned one unsigned; ops on the low bits
/// alone (add, sub, mul, bitwise) and equality take either. Values all in
/// [0, 2^31) read the same either way, so any op narrows then (a shift
/// too: its lowering gives 0 for an amount of 32 or more, as a 64-bit
/// shift of such a value does).
bool narrowsExactly(DataFlowSolver &solver, Operation *op) {
  SmallVector<Value> values(op->getOperands());
  if (!isa<arith::CmpIOp>(op))
    llvm::append_range(values, op->getResults());
  std::optional<Kept> kept = keptIn32Bits(solver, values);
  if (!kept)
    return false;
  if (*kept == Kept::Both)
    return true;
  const bool keptSigned = *kept == Kept::Signed;
  if (auto compare = dyn_cast<arith::CmpIOp>(op)) {
    switch (compare.getPredicate()) {
    case arith::CmpIPredicate::eq:
    case arith::CmpIPredicate::ne:
      return true;
    case arith::CmpIPredicate::slt:
    case arith::CmpIPredicate::sle:
    case arith::CmpIPredicate::sgt:
    case arith::CmpIPredicate::sge:
      return keptSigned;
    default:
      return !keptSigned;
    }
  }
  if (isa<arith::AddIOp, arith::SubIOp, arith::MulIOp, arith::AndIOp, arith::OrIOp,
          arith::XOrIOp>(op))
    return true;
  if (isa<arith::DivSIOp, arith::RemSIOp, arith::FloorDivSIOp, arith::CeilDivSIOp,
          arith::MaxSIOp, arith::MinSIOp>(op))
    return keptSigned;
  if (isa<arith::DivUIOp, arith::RemUIOp, arith::CeilDivUIOp, arith::MaxUIOp, arith::MinUIOp>(op))
    return !keptSigned;
  return false; // shifts and anything else, with a negative value, stay in 64 bits
}

/// Rewrites the index arithmetic of an outlined mask_mod in 32 bits wherever
/// integer range analysis proves it exact (MLIR's range-narrowing patterns,
/// applied to the ops narrowsExactly admits): index lowers to 64-bit
/// size_t, and each per-pair add or compare in 64 bits is two or three
/// instructions on the GPU instead of one (Longformer's pair test took
/// about 16 instructions a pair in 64 bits). The patterns cast each use of
/// an argument on its own: CSE merges the casts, so that q in 32 bits
/// becomes one row value.
LogicalResult narrowMaskArithmetic(func::FuncOp mask) {
  DataFlowSolver solver;
  solver.load<dataflow::DeadCodeAnalysis>();
  solver.load<MaskArgumentRanges>(mask);
  if (failed(solver.initializeAndRun(mask)))
    return failure();
  SmallVector<Operation *> narrowable;
  mask.walk([&](Operation *op) {
    if (op->getDialect() && isa<arith::ArithDialect>(op->getDialect()) &&
        narrowsExactly(solver, op))
      narrowable.push_back(op);
  });
  ErasedOpStates listener(solver);
  RewritePatternSet patterns(mask.getContext());
  arith::populateIntRangeNarrowingPatterns(patterns, solver, /*bitwidthsSupported=*/{32});
  GreedyRewriteConfig config;
  config.setListener(&listener).setStrictness(GreedyRewriteStrictness::ExistingAndNewOps);
  if (failed(applyOpPatternsGreedily(narrowable, std::move(patterns), config)))
    return failure();
  IRRewriter rewriter(mask.getContext());
  DominanceInfo dominance;
  eliminateCommonSubExpressions(rewriter, dominance, mask);
  return success();
}

/// Whether `op` converts `key` to f32: (s|u)itofp of an index_cast(ui) of
/// it to i32 or i64. Positions are below 2^31, so every such chain gives
/// the same float.
bool convertsKeyToFloat(Operation *op, Value key) {
  if (!isa<arith::SIToFPOp, arith::UIToFPOp>(op) || !op->getResult(0).getType().isF32())
    return false;
  Operation *cast = op->getOperand(0).getDefiningOp();
  if (!isa_and_nonnull<arith::IndexCastOp, arith::IndexCastUIOp>(cast) ||
      cast->getOperand(0) != key)
    return false;
  unsigned width = cast->getResult(0).getType().getIntOrFloatBitWidth();
  return width == 32 || width == 64;
}


/// Rewrites each division by a finite, nonzero f32 constant as a
/// multiplication by its reciprocal (rounded to f32), so that `s / 50` and
/// `s * 0.02` give the same kernel: the scalings below then recognise it,
/// and a division costs a dozen instructions per pair. The product differs
/// from the quotient by at most one rounding of the reciprocal.
void divisionsByConstantsToProducts(func::FuncOp func) {
  SmallVector<arith::DivFOp> divisions;
  func.walk([&](arith::DivFOp division) { divisions.push_back(division); });
  for (arith::DivFOp division : divisions) {
    FloatAttr divisor;
    if (!matchPattern(division.getRhs(), m_Constant(&divisor)) || !divisor.getType().isF32())
      continue;
    const double value = divisor.getValueAsDouble();
    if (value == 0.0 || !std::isfinite(value))
      continue;
    const float reciprocal = static_cast<float>(1.0 / value);
    if (!std::isfinite(reciprocal) || reciprocal == 0.f)
      continue;
    OpBuilder builder(division);
    Value factor = arith::ConstantOp::create(builder, division.getLoc(),
                                             builder.getF32FloatAttr(reciprocal));
    Value product = arith::MulFOp::create(builder, division.getLoc(), division.getLhs(), factor);
    division.replaceAllUsesWith(product);
    division.erase();
  }
}

/// The finite f32 constant that `mul` multiplies `operand` by, if its other
/// operand is one.
std::optional<float> constantFactor(arith::MulFOp mul, Value operand) {
  Value other = mul.getLhs() == operand ? mul.getRhs() : mul.getLhs();
  FloatAttr factor;
  if (other == operand || !matchPattern(other, m_Constant(&factor)) || !factor.getType().isF32() ||
      !factor.getValue().isFinite())
    return std::nullopt;
  return factor.getValue().convertToFloat();
}

/// Takes out of an outlined score_mod the constant scalings the kernel
/// applies for free: a multiplication of the score by a constant that is the
/// score's only use (the kernel multiplies each raw score by the softmax
/// scale anyway, and now by the constant too), and a final multiplication by
/// a positive constant (the softmax multiplies the result by log2(e)
/// anyway, and a positive factor keeps the row maximum where it is). Returns
/// the two factors, 1 where there is none.
std::pair<float, float> peelScoreScales(func::FuncOp func) {
  Block &body = func.front();
  Value score = body.getArgument(0);
  float input = 1.f, output = 1.f;
  if (score.hasOneUse())
    if (auto mul = dyn_cast<arith::MulFOp>(*score.user_begin()))
      if (std::optional<float> factor = constantFactor(mul, score)) {
        mul.getResult().replaceAllUsesWith(score);
        mul.erase();
        input = *factor;
      }
  Operation *terminator = body.getTerminator();
  if (auto mul = terminator->getOperand(0).getDefiningOp<arith::MulFOp>())
    for (Value operand : {mul.getLhs(), mul.getRhs()})
      if (std::optional<float> factor = constantFactor(mul, operand); factor && *factor > 0.f) {
        terminator->setOperand(0, operand);
        output = *factor;
        break;
      }
  eraseDeadModOps(body);
  return {input, output};
}


} // namespace mods


std::optional<double> getScoreBound(Value value) {
  FloatAttr constant;
  if (matchPattern(value, m_Constant(&constant))) {
    const APFloat &number = constant.getValue();
    if (number.isInfinity() && number.isNegative())
      return 0.0;
    if (!number.isFinite())
      return std::nullopt;
    return std::abs(number.convertToDouble());
  }
  Operation *op = value.getDefiningOp();
  if (isa_and_nonnull<math::TanhOp>(op))
    return 1.0;
  if (auto mul = dyn_cast_or_null<arith::MulFOp>(op)) {
    for (Value operand : {mul.getLhs(), mul.getRhs()})
      if (std::optional<float> factor = constantFactor(mul, operand))
        if (std::optional<double> bound = getScoreBound(operand))
          return std::abs(double(*factor)) * *bound;
    return std::nullopt;
  }
  if (auto select = dyn_cast_or_null<arith::SelectOp>(op)) {
    std::optional<double> whenTrue = getScoreBound(select.getTrueValue());
    std::optional<double> whenFalse = getScoreBound(select.getFalseValue());
    if (whenTrue && whenFalse)
      return std::max(*whenTrue, *whenFalse);
  }
  return std::nullopt;
}

namespace mods {

/// Clones into a new function `name(args...)`, inserted before `func`, the
/// ops of `func` that `value` depends on, and returns it. `zeroIndex` (when
/// given, and not among `args`) becomes the index constant 0 there.
func::FuncOp outlineValue(func::FuncOp func, Value value, ArrayRef<Value> args, StringRef name,
                          Value zeroIndex = Value()) {
  Block &body = func.front();
  SetVector<Operation *> slice;
  SmallVector<Value> worklist{value};
  while (!worklist.empty()) {
    Operation *op = worklist.pop_back_val().getDefiningOp();
    if (op && slice.insert(op))
      llvm::append_range(worklist, op->getOperands());
  }
  OpBuilder builder(func);
  auto type = builder.getFunctionType(ValueRange(args).getTypes(), value.getType());
  auto outlined = func::FuncOp::create(builder, value.getLoc(), name, type);
  Block *entry = outlined.addEntryBlock();
  IRMapping mapping;
  mapping.map(args, entry->getArguments());
  builder.setInsertionPointToStart(entry);
  if (zeroIndex)
    mapping.map(zeroIndex, arith::ConstantIndexOp::create(builder, value.getLoc(), 0).getResult());
  for (Operation &op : body.without_terminator())
    if (slice.contains(&op))
      builder.clone(op, mapping);
  func::ReturnOp::create(builder, value.getLoc(), mapping.lookup(value));
  return outlined;
}

/// How a value of a score_mod body depends on q and kv. Index arithmetic
/// that is linear in them (addi, subi, muli by a constant) keeps the form
/// q * qFactor + kv * keyFactor + (what depends on neither); other values
/// are functions of b, h, the captures and d = q - kv alone (Diagonal), of
/// q alone (Row), or of more (Pair, as is anything of the score).
struct PositionForm {
  enum Kind { Linear, Row, Diagonal, Pair } kind = Pair;
  uint64_t qFactor = 0, keyFactor = 0; // Linear: modulo 2^64, like index
  static PositionForm linear(uint64_t q, uint64_t kv) { return {Linear, q, kv}; }
  static PositionForm of(Kind kind) { return {kind, 0, 0}; }
  /// A function of d (and of b, h, the captures) with the given q and kv.
  bool diagonal() const {
    return kind == Diagonal || (kind == Linear && qFactor + keyFactor == 0);
  }
  bool dependsOnKey() const {
    return kind == Diagonal || kind == Pair || (kind == Linear && keyFactor != 0);
  }
  bool dependsOnQuery() const {
    return kind == Row || kind == Pair || (kind == Linear && qFactor != 0);
  }
};

/// The form of `op`'s results from its operands' forms.
PositionForm positionFormOf(Operation *op, ArrayRef<PositionForm> operands) {
  auto linearOperands = [&] {
    return llvm::all_of(operands, [](const PositionForm &f) { return f.kind == PositionForm::Linear; });
  };
  if (op->getNumResults() == 1 && op->getResult(0).getType().isIndex() && linearOperands()) {
    if (isa<arith::ConstantOp>(op))
      return PositionForm::linear(0, 0);
    if (isa<arith::AddIOp>(op))
      return PositionForm::linear(operands[0].qFactor + operands[1].qFactor,
                                  operands[0].keyFactor + operands[1].keyFactor);
    if (isa<arith::SubIOp>(op))
      return PositionForm::linear(operands[0].qFactor - operands[1].qFactor,
                                  operands[0].keyFactor - operands[1].keyFactor);
    if (isa<arith::MulIOp>(op))
      for (unsigned i = 0; i < 2; ++i) {
        APInt factor;
        if (matchPattern(op->getOperand(i), m_ConstantInt(&factor))) {
          const PositionForm &other = operands[1 - i];
          uint64_t c = factor.getZExtValue();
          return PositionForm::linear(other.qFactor * c, other.keyFactor * c);
        }
      }
  }
  bool key = false, query = false, diagonal = true;
  for (const PositionForm &form : operands) {
    if (form.kind == PositionForm::Pair)
      return PositionForm::of(PositionForm::Pair);
    key |= form.dependsOnKey();
    query |= form.dependsOnQuery();
    diagonal &= form.diagonal();
  }
  if (!key)
    return query ? PositionForm::of(PositionForm::Row) : PositionForm::linear(0, 0);
  return PositionForm::of(diagonal ? PositionForm::Diagonal : PositionForm::Pair);
}

/// Whether `value`'s definition reads a capture, directly or through its
/// operands.
bool readsCapture(Value value) {
  return definedThrough(value, [](Operation *op) { return isa<memref::LoadOp>(op); });
}

} // namespace mods

bool definedThrough(Value value, function_ref<bool(Operation *)> test) {
  SmallVector<Value> worklist{value};
  DenseSet<Operation *> seen;
  while (!worklist.empty()) {
    Operation *op = worklist.pop_back_val().getDefiningOp();
    if (!op || !seen.insert(op).second)
      continue;
    if (test(op))
      return true;
    llvm::append_range(worklist, op->getOperands());
  }
  return false;
}

SmallVector<Value> findScoreDiagonals(Block &body) {
  DenseMap<Value, PositionForm> forms;
  auto formOf = [&](Value value) {
    auto it = forms.find(value);
    return it == forms.end() ? PositionForm::linear(0, 0) : it->second;
  };
  // Arguments: score, b, h, q, kv, captures (b, h and captures default to
  // depending on neither).
  forms[body.getArgument(0)] = PositionForm::of(PositionForm::Pair);
  forms[body.getArgument(3)] = PositionForm::linear(1, 0);
  forms[body.getArgument(4)] = PositionForm::linear(0, 1);
  for (Operation &op : body.without_terminator()) {
    SmallVector<PositionForm> operands;
    for (Value operand : op.getOperands())
      operands.push_back(formOf(operand));
    PositionForm form = positionFormOf(&op, operands);
    for (Value result : op.getResults())
      forms[result] = form;
  }
  SmallVector<Value> diagonals;
  for (Operation &op : body.without_terminator()) {
    if (op.getNumResults() != 1)
      continue;
    Value value = op.getResult(0);
    if (formOf(value).kind != PositionForm::Diagonal ||
        !(value.getType().isF32() || value.getType().isSignlessInteger(32)))
      continue;
    // Staged where the rest of the body stops being a function of d.
    bool feedsPair = llvm::any_of(value.getUsers(), [&](Operation *user) {
      return user->getNumResults() == 0 ||
             formOf(user->getResult(0)).kind != PositionForm::Diagonal;
    });
    if (feedsPair && readsCapture(value))
      diagonals.push_back(value);
  }
  return diagonals;
}

namespace mods {

/// Clones into a new function `name(batch, head, d, captures...)`, inserted
/// before `func`, the ops of `func` that the diagonal `value` depends on,
/// with q replaced by d and kv by 0: its index arithmetic is linear with
/// opposite factors of q and kv, so this computes the same value.
func::FuncOp outlineDiagonalValue(func::FuncOp func, Value value, StringRef name) {
  Block &body = func.front();
  SmallVector<Value> args{body.getArgument(1), body.getArgument(2), body.getArgument(3)};
  for (BlockArgument arg : body.getArguments().drop_front(5))
    if (isa<MemRefType>(arg.getType()))
      args.push_back(arg);
  return outlineValue(func, value, args, name, /*zeroIndex=*/body.getArgument(4));
}

/// Moves the first `count` staged values of an outlined score_mod into
/// diagonal functions `<name>_diag_<i>(batch, head, d, captures...)`;
/// `func` then takes each value as a trailing argument, which the kernel
/// reads from the key tile's staged window. Returns the functions in
/// argument order.
SmallVector<func::FuncOp> splitScoreDiagonals(func::FuncOp func, int count,
                                              SymbolTable &symbols) {
  Block &body = func.front();
  SmallVector<func::FuncOp> diagonals;
  SmallVector<Value> values = findScoreDiagonals(body);
  values.resize(std::min<size_t>(values.size(), count));
  // All are cloned before any is replaced: one may be computed from another.
  for (Value value : values) {
    func::FuncOp diagonal = outlineDiagonalValue(
        func, value,
        freeName(symbols, (func.getSymName() + "_diag").str(), static_cast<int>(diagonals.size())));
    symbols.insert(diagonal);
    diagonals.push_back(diagonal);
  }
  for (Value value : values) {
    unsigned index = body.getNumArguments();
    (void)func.insertArgument(index, value.getType(), DictionaryAttr(), value.getLoc());
    value.replaceAllUsesWith(body.getArgument(index));
  }
  eraseDeadModOps(body);
  return diagonals;
}

/// Adds to `dependents` (seeded with values) every value of `body` computed
/// from one of them, and returns the ops that compute them.
DenseSet<Operation *> addDependents(Block &body, DenseSet<Value> &dependents) {
  DenseSet<Operation *> ops;
  for (Operation &op : body.without_terminator())
    if (llvm::any_of(op.getOperands(), [&](Value v) { return dependents.contains(v); })) {
      ops.insert(&op);
      dependents.insert(op.getResults().begin(), op.getResults().end());
    }
  return ops;
}

/// One term of a score_mod result written as a sum: ±(factor ×) leaf.
struct SumTerm {
  Value leaf;
  Value factor; // null: none
  bool negative = false;
};

/// The most terms peelRowOffset splits a result into: a shared operand is
/// walked once per use, so sums of sums could double the count per level.
constexpr size_t kMaxSumTerms = 32;

/// Writes `value` as a sum of terms: through addf, subf and negf, and
/// through a multiplication of a sum by a `rowClass` value (distributed
/// once: ALiBi's slope * (q - kv)). Other values are leaves. Stops adding
/// past kMaxSumTerms (the caller then keeps the region).
void collectSumTerms(Value value, bool negative, Value factor,
                     function_ref<bool(Value)> rowClass, SmallVectorImpl<SumTerm> &terms) {
  if (terms.size() > kMaxSumTerms)
    return;
  Operation *op = value.getDefiningOp();
  if (auto add = dyn_cast_or_null<arith::AddFOp>(op)) {
    collectSumTerms(add.getLhs(), negative, factor, rowClass, terms);
    collectSumTerms(add.getRhs(), negative, factor, rowClass, terms);
    return;
  }
  if (auto sub = dyn_cast_or_null<arith::SubFOp>(op)) {
    collectSumTerms(sub.getLhs(), negative, factor, rowClass, terms);
    collectSumTerms(sub.getRhs(), !negative, factor, rowClass, terms);
    return;
  }
  if (auto neg = dyn_cast_or_null<arith::NegFOp>(op)) {
    collectSumTerms(neg.getOperand(), !negative, factor, rowClass, terms);
    return;
  }
  if (auto mul = dyn_cast_or_null<arith::MulFOp>(op); mul && !factor) {
    auto isSum = [](Value v) {
      return isa_and_nonnull<arith::AddFOp, arith::SubFOp, arith::NegFOp>(v.getDefiningOp());
    };
    for (auto [scale, sum] : {std::pair(mul.getLhs(), mul.getRhs()),
                              std::pair(mul.getRhs(), mul.getLhs())})
      if (rowClass(scale) && isSum(sum)) {
        collectSumTerms(sum, negative, scale, rowClass, terms);
        return;
      }
  }
  terms.push_back({value, factor, negative});
}

/// Rewrites the f32 arithmetic of `func` (constants, capture loads, integer
/// to float conversions, addf, subf, mulf, divf, negf) in f64 and
/// rounds the result to f32 once, when it has no other f32 op; returns
/// whether it did. The row offset adds products such as slope * q that
/// cancel against each other (-slope * q + slope * origin): in f32 each
/// would round relative to q.
bool widenToDouble(func::FuncOp func) {
  Block &body = func.front();
  auto isF32 = [](Value v) { return v.getType().isF32(); };
  for (Operation &op : body.without_terminator()) {
    bool f32Result = llvm::any_of(op.getResults(), isF32);
    bool f32Operand = llvm::any_of(op.getOperands(), isF32);
    if ((f32Result || f32Operand) &&
        !isa<arith::ConstantOp, memref::LoadOp, arith::SIToFPOp, arith::UIToFPOp,
             arith::AddFOp, arith::SubFOp, arith::MulFOp, arith::DivFOp, arith::NegFOp>(op))
      return false;
  }
  OpBuilder builder(func.getContext());
  Type f64 = builder.getF64Type();
  IRMapping wide;
  // f32 arguments widen at the entry.
  builder.setInsertionPointToStart(&body);
  for (BlockArgument arg : body.getArguments())
    if (isF32(arg))
      wide.map(Value(arg), arith::ExtFOp::create(builder, arg.getLoc(), f64, arg).getResult());
  for (Operation &op : llvm::make_early_inc_range(body.without_terminator())) {
    if (!llvm::any_of(op.getResults(), isF32))
      continue;
    builder.setInsertionPointAfter(&op);
    Location loc = op.getLoc();
    Value result = op.getResult(0), widened;
    if (auto constant = dyn_cast<arith::ConstantOp>(op))
      widened = arith::ConstantOp::create(
          builder, loc, builder.getF64FloatAttr(cast<FloatAttr>(constant.getValue()).getValueAsDouble()));
    else if (isa<memref::LoadOp>(op))
      widened = arith::ExtFOp::create(builder, loc, f64, result);
    else {
      // sitofp, uitofp, addf, subf, mulf, divf, negf: the same op with an
      // f64 result, on the widened operands.
      Operation *clone = builder.clone(op, wide);
      clone->getResult(0).setType(f64);
      widened = clone->getResult(0);
    }
    wide.map(result, widened);
  }
  Operation *terminator = body.getTerminator();
  builder.setInsertionPoint(terminator);
  Value result = terminator->getOperand(0);
  terminator->setOperand(
      0, arith::TruncFOp::create(builder, terminator->getLoc(), builder.getF32Type(),
                                 wide.lookup(result)));
  eraseDeadModOps(body);
  return true;
}

/// Takes out of an outlined score_mod (score, b, h, q, kv, ...) the terms
/// of its result that depend on neither the key nor the score, when the
/// result is the score plus terms: the softmax of a row is the same without
/// them, and they add to the row's log-sum-exp. Returns their sum as a new
/// function `name(b, h, q, captures...)`, inserted before `func`, or null
/// when there is none (or the result is not such a sum). The score's
/// remaining terms are summed in order after the score.
///
/// When every remaining term is kv as f32 times a row value (ALiBi keeps
/// s + slope * kv), the kernel may pass kv relative to an origin it picks
/// per work tile near the tile's diagonal (keyRelative): the terms then
/// stay as small as the distances were, and fp32 rounds them no worse than
/// the region did; the offset function takes the origin (an i32 key index)
/// last and adds the terms at the origin (slope * origin). It computes in
/// f64 where its ops allow (widenToDouble), since -slope * q and
/// slope * origin cancel.
RowOffset peelRowOffset(func::FuncOp func, StringRef name) {
  Block &body = func.front();
  Value score = body.getArgument(0), key = body.getArgument(4);
  DenseSet<Value> perKey{score, key};
  for (BlockArgument arg : body.getArguments().drop_front(5))
    if (!isa<MemRefType>(arg.getType()))
      perKey.insert(arg); // staged diagonal values
  addDependents(body, perKey);
  auto rowClass = [&](Value v) { return !perKey.contains(v); };
  DenseSet<Value> readsScore{score};
  addDependents(body, readsScore);

  Operation *terminator = body.getTerminator();
  SmallVector<SumTerm> terms;
  collectSumTerms(terminator->getOperand(0), false, Value(), rowClass, terms);
  if (terms.size() > kMaxSumTerms)
    return {};
  int scoreTerms = 0;
  SmallVector<SumTerm> keyTerms, rowTerms;
  for (const SumTerm &term : terms) {
    if (term.leaf == score) {
      if (term.factor || term.negative)
        return {}; // the score scaled or negated
      ++scoreTerms;
    } else if (rowClass(term.leaf)) {
      rowTerms.push_back(term);
    } else {
      keyTerms.push_back(term);
    }
  }
  if (scoreTerms != 1 || rowTerms.empty())
    return {};
  // Terms that read the score other than as the score itself (tanh(s),
  // s * s) keep the region as it is.
  if (llvm::any_of(keyTerms, [&](const SumTerm &term) { return readsScore.contains(term.leaf); }))
    return {};
  const bool keyRelative = !keyTerms.empty() && llvm::all_of(keyTerms, [&](const SumTerm &term) {
    Operation *op = term.leaf.getDefiningOp();
    return op && convertsKeyToFloat(op, key);
  });

  OpBuilder builder(terminator);
  Location loc = terminator->getLoc();
  // The origin the kernel measures kv from (an i32 key index), an argument
  // while the offset is built (removed again below), and its f32 value.
  Value origin, originFloat;
  if (keyRelative) {
    unsigned index = body.getNumArguments();
    (void)func.insertArgument(index, builder.getI32Type(), DictionaryAttr(), loc);
    origin = body.getArgument(index);
    originFloat = arith::SIToFPOp::create(builder, loc, builder.getF32Type(), origin);
  }
  auto termValue = [&](const SumTerm &term, Value leaf) -> Value {
    return term.factor ? arith::MulFOp::create(builder, loc, term.factor, leaf).getResult() : leaf;
  };
  auto accumulate = [&](Value sum, const SumTerm &term, Value leaf) -> Value {
    Value value = termValue(term, leaf);
    if (!sum)
      return term.negative ? arith::NegFOp::create(builder, loc, value).getResult() : value;
    return term.negative ? arith::SubFOp::create(builder, loc, sum, value).getResult()
                         : arith::AddFOp::create(builder, loc, sum, value).getResult();
  };
  Value row;
  for (const SumTerm &term : rowTerms)
    row = accumulate(row, term, term.leaf);
  if (keyRelative)
    for (const SumTerm &term : keyTerms)
      row = accumulate(row, term, originFloat);
  Value result = score;
  for (const SumTerm &term : keyTerms)
    result = accumulate(result, term, term.leaf);

  SmallVector<Value> rowArgs{body.getArgument(1), body.getArgument(2), body.getArgument(3)};
  for (BlockArgument arg : body.getArguments().drop_front(5))
    if (isa<MemRefType>(arg.getType()))
      rowArgs.push_back(arg);
  if (origin)
    rowArgs.push_back(origin);
  func::FuncOp offset = outlineValue(func, row, rowArgs, name);
  (void)widenToDouble(offset);
  terminator->setOperand(0, result);
  eraseDeadModOps(body);
  if (origin)
    (void)func.eraseArgument(body.getNumArguments() - 1);
  return {offset, keyRelative};
}

/// Splits an outlined region by what its values depend on, so that the
/// kernel computes each part as rarely as it can. Values that depend on
/// neither the key nor the score are the same for every key of a query row:
/// each one the rest uses becomes a row function `<name>_row_<i>(batch,
/// head, q, captures...)`, which the kernel calls once per row of a work
/// tile and holds in registers; `func` then takes those values as trailing
/// arguments. `func` also gains kv as f32 right after kv, which replaces the
/// region's conversions of kv: the kernel derives it for a whole tile with
/// one conversion and an add per key. `firstIndex` is the position of the
/// batch argument (1 after a score). Returns the row functions in argument
/// order.
SmallVector<func::FuncOp> splitRowInvariants(func::FuncOp func, unsigned firstIndex,
                                             SymbolTable &symbols) {
  Block &body = func.front();
  const unsigned keyIndex = firstIndex + 3, keyFloatIndex = firstIndex + 4;
  Value key = body.getArgument(keyIndex);
  (void)func.insertArgument(keyFloatIndex, Float32Type::get(func.getContext()), DictionaryAttr(),
                            func.getLoc());
  Value keyFloat = body.getArgument(keyFloatIndex);
  for (Operation &op : body.without_terminator())
    if (convertsKeyToFloat(&op, key))
      op.getResult(0).replaceAllUsesWith(keyFloat);

  DenseSet<Value> perKey{key, keyFloat};
  if (firstIndex > 0)
    perKey.insert(body.getArgument(0)); // the score
  // The staged diagonal values (splitScoreDiagonals) follow the captures.
  for (BlockArgument arg : body.getArguments().drop_front(keyFloatIndex + 1))
    if (!isa<MemRefType>(arg.getType()))
      perKey.insert(arg);
  DenseSet<Operation *> perKeyOps = addDependents(body, perKey);
  auto usedPerKey = [&](OpOperand &use) {
    return perKeyOps.contains(use.getOwner()) || use.getOwner()->hasTrait<OpTrait::IsTerminator>();
  };
  SetVector<Value> rowValues;
  for (Operation &op : body)
    for (OpOperand &use : op.getOpOperands()) {
      Value value = use.get();
      if (usedPerKey(use) && !perKey.contains(value) && value.getDefiningOp() &&
          !matchPattern(value, m_Constant()))
        rowValues.insert(value);
    }

  SmallVector<Value> rowArgs{body.getArgument(firstIndex), body.getArgument(firstIndex + 1),
                             body.getArgument(firstIndex + 2)};
  for (BlockArgument arg : body.getArguments().drop_front(keyFloatIndex + 1))
    if (isa<MemRefType>(arg.getType()))
      rowArgs.push_back(arg);
  SmallVector<func::FuncOp> rows;
  for (Value value : rowValues) {
    func::FuncOp row = outlineValue(func, value, rowArgs,
                                       freeName(symbols, (func.getSymName() + "_row").str(),
                                                static_cast<int>(rows.size())));
    symbols.insert(row);
    rows.push_back(row);
    unsigned index = body.getNumArguments();
    (void)func.insertArgument(index, value.getType(), DictionaryAttr(), value.getLoc());
    value.replaceUsesWithIf(body.getArgument(index), usedPerKey);
  }
  eraseDeadModOps(body);
  return rows;
}

} // namespace mods
} // namespace mlir::attn
