//===- ClassifyBlocks.cpp - attn-classify-blocks: tile coverage of a mask -===//
//
// Expresses a mask_mod region as an and/or/not tree of affine inequalities
// over (batch, head, q_idx, kv_idx), so that the kernel can classify every
// (query tile, key tile) pair as empty, full or partial from the tile's
// corners.
//
//===----------------------------------------------------------------------===//

#include "attn/IR/AttnOps.h"
#include "attn/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/MathExtras.h"

#include <optional>

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNCLASSIFYBLOCKS
#include "attn/Transforms/Passes.h.inc"

namespace {

/// Whether |value| < limit, without negating (the minimum has no absolute
/// value).
bool magnitudeBelow(int64_t value, int64_t limit) { return value > -limit && value < limit; }

/// batch * b + head * h + q * q_idx + kv * kv_idx + c.
struct Affine {
  int64_t batch = 0, head = 0, q = 0, kv = 0, c = 0;
  /// Some coefficient overflowed 64 bits while the form was built (spec
  /// constants may be anything): the form is then not small.
  bool overflowed = false;

  Affine operator+(const Affine &o) const {
    Affine sum;
    sum.overflowed = overflowed || o.overflowed || llvm::AddOverflow(batch, o.batch, sum.batch) ||
                     llvm::AddOverflow(head, o.head, sum.head) ||
                     llvm::AddOverflow(q, o.q, sum.q) || llvm::AddOverflow(kv, o.kv, sum.kv) ||
                     llvm::AddOverflow(c, o.c, sum.c);
    return sum;
  }
  Affine scaled(int64_t factor) const {
    Affine product;
    product.overflowed =
        overflowed || llvm::MulOverflow(batch, factor, product.batch) ||
        llvm::MulOverflow(head, factor, product.head) || llvm::MulOverflow(q, factor, product.q) ||
        llvm::MulOverflow(kv, factor, product.kv) || llvm::MulOverflow(c, factor, product.c);
    return product;
  }
  bool isConstant() const { return batch == 0 && head == 0 && q == 0 && kv == 0; }
  /// Non-negative whenever every index is: no negative coefficient.
  bool isNonNegative() const { return batch >= 0 && head >= 0 && q >= 0 && kv >= 0 && c >= 0; }
  /// Coefficients too large to be trusted not to overflow in 64 bits over
  /// indices below 2^31.
  bool isSmall() const {
    const int64_t limit = int64_t(1) << 30;
    return !overflowed && magnitudeBelow(batch, limit) && magnitudeBelow(head, limit) &&
           magnitudeBelow(q, limit) && magnitudeBelow(kv, limit) &&
           magnitudeBelow(c, int64_t(1) << 60);
  }
};

/// coef * floor(dividend / divisor), dividend never negative, divisor > 1.
struct FloorDivTerm {
  int64_t coef;
  Affine dividend;
  int64_t divisor;
};

/// An affine part plus floor-quotient terms: what index arithmetic with
/// constant multipliers and divisors computes.
struct AffineForm {
  Affine affine;
  SmallVector<FloorDivTerm> terms;

  AffineForm() = default;
  explicit AffineForm(Affine affine) : affine(affine) {}

  AffineForm operator+(const AffineForm &o) const {
    AffineForm sum(affine + o.affine);
    sum.terms = terms;
    sum.terms.append(o.terms.begin(), o.terms.end());
    return sum;
  }
  AffineForm scaled(int64_t factor) const {
    AffineForm result(affine.scaled(factor));
    for (FloorDivTerm term : terms) {
      result.affine.overflowed |= llvm::MulOverflow(term.coef, factor, term.coef);
      result.terms.push_back(term);
    }
    return result;
  }
  AffineForm operator-(const AffineForm &o) const { return *this + o.scaled(-1); }
  bool isConstant() const { return affine.isConstant() && terms.empty(); }
  int64_t constant() const { return affine.c; }
  /// Dividends are never negative, so a term is non-negative iff its coef is.
  bool isNonNegative() const {
    return affine.isNonNegative() &&
           llvm::all_of(terms, [](const FloorDivTerm &t) { return t.coef >= 0; });
  }
  bool isSmall() const {
    // A sum reusing a value doubles its terms: bounded like the formulas.
    return affine.isSmall() && terms.size() <= 16 && llvm::all_of(terms, [](const FloorDivTerm &t) {
             return t.dividend.isSmall() && magnitudeBelow(t.coef, int64_t(1) << 30);
           });
  }
};

class MaskAnalysis {
public:
  MaskAnalysis(Block &block, MLIRContext *context) : context(context) {
    // The first four arguments are batch, head, q_idx, kv_idx.
    Affine unit[4];
    unit[0].batch = unit[1].head = unit[2].q = unit[3].kv = 1;
    for (int i = 0; i < 4; ++i)
      affine[block.getArgument(i)] = AffineForm(unit[i]);
  }

  /// The formula of an i1 value, or nullopt if it is not expressible or
  /// has more than kMaxFormulaTerms inequalities (counted with repetition:
  /// the kernel evaluates every one, and a region reusing values can double
  /// them at each step). Each value is analysed once.
  std::optional<Attribute> formulaOf(Value value) {
    auto known = formulas.find(value);
    if (known != formulas.end())
      return known->second;
    std::optional<Attribute> formula = computeFormula(value);
    if (formula && termCount(*formula) > kMaxFormulaTerms)
      formula = std::nullopt;
    formulas[value] = formula;
    return formula;
  }

  std::optional<Attribute> computeFormula(Value value) {
    Operation *op = value.getDefiningOp();
    if (!op)
      return std::nullopt;
    if (auto constant = dyn_cast<arith::ConstantOp>(op)) {
      auto boolean = dyn_cast<BoolAttr>(constant.getValue());
      if (!boolean) {
        auto integer = dyn_cast<IntegerAttr>(constant.getValue());
        if (!integer)
          return std::nullopt;
        return constantFormula(!integer.getValue().isZero());
      }
      return constantFormula(boolean.getValue());
    }
    if (auto cmp = dyn_cast<arith::CmpIOp>(op))
      return compareFormula(cmp);
    if (isa<arith::AndIOp, arith::OrIOp>(op)) {
      std::optional<Attribute> lhs = formulaOf(op->getOperand(0));
      std::optional<Attribute> rhs = formulaOf(op->getOperand(1));
      if (!lhs || !rhs)
        return std::nullopt;
      return combine(isa<arith::AndIOp>(op) ? TileFormulaKind::all_of : TileFormulaKind::any_of,
                     {*lhs, *rhs});
    }
    if (auto xorOp = dyn_cast<arith::XOrIOp>(op)) {
      // x ^ true is not x; x ^ false is x.
      for (int side = 0; side < 2; ++side) {
        std::optional<bool> constant = boolConstant(xorOp->getOperand(side));
        if (!constant)
          continue;
        std::optional<Attribute> other = formulaOf(xorOp->getOperand(1 - side));
        if (!other)
          return std::nullopt;
        return *constant ? combine(TileFormulaKind::none_of, {*other}) : *other;
      }
    }
    return std::nullopt;
  }

private:
  std::optional<bool> boolConstant(Value value) {
    auto constant = value.getDefiningOp<arith::ConstantOp>();
    if (!constant)
      return std::nullopt;
    if (auto boolean = dyn_cast<BoolAttr>(constant.getValue()))
      return boolean.getValue();
    if (auto integer = dyn_cast<IntegerAttr>(constant.getValue()))
      return !integer.getValue().isZero();
    return std::nullopt;
  }

  Attribute constantFormula(bool value) {
    return TileFormulaAttr::get(context, value ? TileFormulaKind::all_of : TileFormulaKind::any_of,
                                ArrayAttr::get(context, {}));
  }

  /// Inequalities in `formula`, counted with repetition (saturating).
  int64_t termCount(Attribute formula) {
    auto tree = dyn_cast<TileFormulaAttr>(formula);
    if (!tree)
      return 1;
    auto known = termCounts.find(formula);
    if (known != termCounts.end())
      return known->second;
    int64_t count = 0;
    for (Attribute term : tree.getTerms())
      count = std::min<int64_t>(count + termCount(term), kMaxFormulaTerms + 1);
    termCounts[formula] = count;
    return count;
  }

  Attribute combine(TileFormulaKind kind, ArrayRef<Attribute> terms) {
    return TileFormulaAttr::get(context, kind, ArrayAttr::get(context, terms));
  }

  /// form >= 0.
  Attribute atLeastZero(const AffineForm &form) {
    const Affine &a = form.affine;
    if (form.terms.empty())
      return AffineGeAttr::get(context, a.batch, a.head, a.q, a.kv, a.c);
    SmallVector<Attribute> terms;
    for (const FloorDivTerm &term : form.terms) {
      const Affine &d = term.dividend;
      terms.push_back(FloorDivTermAttr::get(context, term.coef, d.batch, d.head, d.q, d.kv, d.c,
                                            term.divisor));
    }
    return DivSumGeAttr::get(context, a.batch, a.head, a.q, a.kv, a.c,
                             ArrayAttr::get(context, terms));
  }

  /// The affine form of an index or i64 value. Narrower integers are not
  /// analysed: their arithmetic may wrap for long sequences, and the
  /// formula must equal the region exactly.
  std::optional<AffineForm> affineOf(Value value) {
    Type type = value.getType();
    if (!type.isIndex() && !type.isSignlessInteger(64))
      return std::nullopt;
    auto known = affine.find(value);
    if (known != affine.end())
      return known->second;
    std::optional<AffineForm> form = computeAffine(value);
    if (form && !form->isSmall())
      form = std::nullopt;
    // Failures too: a region reusing values would otherwise be re-analysed
    // once per path, exponentially many.
    affine[value] = form;
    return form;
  }

  std::optional<AffineForm> computeAffine(Value value) {
    Operation *op = value.getDefiningOp();
    if (!op)
      return std::nullopt;
    if (auto constant = dyn_cast<arith::ConstantOp>(op)) {
      auto integer = dyn_cast<IntegerAttr>(constant.getValue());
      if (!integer || integer.getType().isInteger(1))
        return std::nullopt;
      Affine constantForm;
      constantForm.c = integer.getValue().getSExtValue();
      return AffineForm(constantForm);
    }
    // index <-> i64 casts keep the value.
    if (isa<arith::IndexCastOp>(op))
      return affineOf(op->getOperand(0));
    if (isa<arith::AddIOp, arith::SubIOp, arith::MulIOp>(op)) {
      std::optional<AffineForm> lhs = affineOf(op->getOperand(0));
      std::optional<AffineForm> rhs = affineOf(op->getOperand(1));
      if (!lhs || !rhs)
        return std::nullopt;
      if (isa<arith::AddIOp>(op))
        return *lhs + *rhs;
      if (isa<arith::SubIOp>(op))
        return *lhs - *rhs;
      if (rhs->isConstant())
        return lhs->scaled(rhs->constant());
      if (lhs->isConstant())
        return rhs->scaled(lhs->constant());
      return std::nullopt;
    }
    // Division of a never-negative affine form by a positive constant: the
    // signed, unsigned and floor quotients then agree.
    if (isa<arith::DivUIOp, arith::DivSIOp, arith::FloorDivSIOp>(op)) {
      std::optional<AffineForm> lhs = affineOf(op->getOperand(0));
      std::optional<AffineForm> rhs = affineOf(op->getOperand(1));
      if (!lhs || !rhs || !rhs->isConstant() || rhs->constant() <= 0 || !lhs->terms.empty() ||
          !lhs->affine.isNonNegative())
        return std::nullopt;
      if (rhs->constant() == 1)
        return lhs;
      AffineForm quotient;
      quotient.terms.push_back(FloorDivTerm{1, lhs->affine, rhs->constant()});
      return quotient;
    }
    return std::nullopt;
  }

  std::optional<Attribute> compareFormula(arith::CmpIOp cmp) {
    std::optional<AffineForm> lhs = affineOf(cmp.getLhs());
    std::optional<AffineForm> rhs = affineOf(cmp.getRhs());
    if (!lhs || !rhs)
      return std::nullopt;
    using P = arith::CmpIPredicate;
    P predicate = cmp.getPredicate();
    // An unsigned comparison equals the signed one when neither side can be
    // negative.
    bool isUnsigned = predicate == P::ult || predicate == P::ule || predicate == P::ugt ||
                      predicate == P::uge;
    if (isUnsigned && !(lhs->isNonNegative() && rhs->isNonNegative()))
      return std::nullopt;
    Affine unit;
    unit.c = 1;
    AffineForm one(unit);
    AffineForm less = *rhs - *lhs - one; // lhs < rhs  <=> less >= 0
    AffineForm lessEq = *rhs - *lhs;     // lhs <= rhs
    AffineForm greater = *lhs - *rhs - one;
    AffineForm greaterEq = *lhs - *rhs;
    // Small coefficients keep the kernel's evaluation at tile corners (four
    // index terms and a constant) inside 64 bits.
    for (const AffineForm *form : {&less, &lessEq, &greater, &greaterEq})
      if (!form->isSmall())
        return std::nullopt;
    switch (predicate) {
    case P::slt:
    case P::ult:
      return atLeastZero(less);
    case P::sle:
    case P::ule:
      return atLeastZero(lessEq);
    case P::sgt:
    case P::ugt:
      return atLeastZero(greater);
    case P::sge:
    case P::uge:
      return atLeastZero(greaterEq);
    case P::eq:
      return combine(TileFormulaKind::all_of, {atLeastZero(lessEq), atLeastZero(greaterEq)});
    case P::ne:
      return combine(TileFormulaKind::any_of, {atLeastZero(less), atLeastZero(greater)});
    }
    return std::nullopt;
  }

  static constexpr int64_t kMaxFormulaTerms = 64;

  MLIRContext *context;
  llvm::DenseMap<Value, std::optional<AffineForm>> affine;
  llvm::DenseMap<Value, std::optional<Attribute>> formulas;
  llvm::DenseMap<Attribute, int64_t> termCounts;
};

struct ClassifyBlocksPass : impl::AttnClassifyBlocksBase<ClassifyBlocksPass> {
  void runOnOperation() override {
    getOperation()->walk([](KernelOp op) {
      // A lowered region keeps the formula derived from it.
      if (op.getMaskMod().empty() && op.getMaskModFnAttr())
        return;
      op.removeMaskTileFormulaAttr();
      if (TileFormulaAttr tree = classifyMaskMod(op))
        op.setMaskTileFormulaAttr(tree);
    });
  }
};

} // namespace

TileFormulaAttr classifyMaskMod(KernelOp op) {
  if (op.getMaskMod().empty())
    return {};
  Block &block = op.getMaskMod().front();
  auto yield = cast<YieldOp>(block.getTerminator());
  MaskAnalysis analysis(block, op.getContext());
  std::optional<Attribute> formula = analysis.formulaOf(yield.getValues().front());
  if (!formula)
    return {};
  // The op holds a tree: a single inequality becomes all_of of one term.
  auto tree = dyn_cast<TileFormulaAttr>(*formula);
  if (!tree)
    tree = TileFormulaAttr::get(op.getContext(), TileFormulaKind::all_of,
                                ArrayAttr::get(op.getContext(), {*formula}));
  return tree;
}
} // namespace mlir::attn
