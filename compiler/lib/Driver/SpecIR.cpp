//===- SpecIR.cpp - attn.kernel ops from C++ specs ------------------------===//

#include "attn/Compiler/SpecIR.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"

#include <unordered_map>

namespace attn {

namespace {
mlir::attn::MaskAlignment alignmentOf(CausalAlign align) {
  return align == CausalAlign::TopLeft ? mlir::attn::MaskAlignment::top_left
                                       : mlir::attn::MaskAlignment::bottom_right;
}

mlir::Type elementTypeOf(mlir::MLIRContext *context, DType dtype) {
  switch (dtype) {
  case DType::BF16:
    return mlir::BFloat16Type::get(context);
  case DType::F16:
    return mlir::Float16Type::get(context);
  case DType::F32:
    break;
  }
  // Rejected by the problem's verifier with its own message.
  return mlir::Float32Type::get(context);
}

mlir::attn::CaptureDimKind dimKindOf(CaptureExtent::Kind kind) {
  using K = CaptureExtent::Kind;
  using D = mlir::attn::CaptureDimKind;
  switch (kind) {
  case K::Fixed:
    return D::fixed;
  case K::Any:
    return D::any;
  case K::Batch:
    return D::batch;
  case K::QHeads:
    return D::q_heads;
  case K::KvHeads:
    return D::kv_heads;
  case K::SeqlenQ:
    return D::seqlen_q;
  case K::SeqlenK:
    return D::seqlen_k;
  }
  return D::any;
}

mlir::Type captureElementType(mlir::MLIRContext *context, DType dtype) {
  switch (dtype) {
  case DType::F32:
    return mlir::Float32Type::get(context);
  case DType::I32:
    return mlir::IntegerType::get(context, 32);
  case DType::BF16:
    return mlir::BFloat16Type::get(context);
  case DType::F16:
    return mlir::Float16Type::get(context);
  }
  return {};
}

/// The `captures` attribute, or null after a diagnostic.
mlir::ArrayAttr buildCaptures(mlir::MLIRContext *context, mlir::Location loc, const Spec &spec) {
  llvm::SmallVector<mlir::Attribute> captures;
  for (const Capture &capture : spec.captures) {
    llvm::SmallVector<mlir::attn::CaptureDimKind> kinds;
    llvm::SmallVector<int64_t> sizes;
    for (const CaptureExtent &extent : capture.extents()) {
      kinds.push_back(dimKindOf(extent.kind()));
      sizes.push_back(extent.kind() == CaptureExtent::Kind::Fixed ? extent.size() : 0);
    }
    auto attr = mlir::attn::CaptureAttr::getChecked([&] { return mlir::emitError(loc); }, context,
                                                    llvm::StringRef(capture.name()),
                                                    captureElementType(context, capture.dtype()),
                                                    llvm::ArrayRef(kinds), llvm::ArrayRef(sizes),
                                                    capture.requiresGrad());
    if (!attr)
      return nullptr;
    captures.push_back(attr);
  }
  return mlir::ArrayAttr::get(context, captures);
}

/// Lowers an expression DAG into arith / math / memref ops at the builder's
/// insertion point, each node once.
class ExprLowering {
public:
  ExprLowering(mlir::OpBuilder &builder, mlir::Location loc, const Spec &spec,
               mlir::Block &block, bool hasScore, const char *regionName)
      : builder(builder), loc(loc), spec(spec), block(block), regionName(regionName) {
    unsigned next = 0;
    if (hasScore)
      score = block.getArgument(next++);
    for (mlir::Value &index : indices)
      index = block.getArgument(next++);
    firstCapture = next;
  }

  /// The value of `root`, or null after a diagnostic.
  mlir::Value lower(const Expr &root) {
    // Operands before users, without recursion (expressions may be deep).
    std::vector<std::pair<Expr, bool>> pending{{root, false}};
    while (!pending.empty()) {
      auto [e, operandsDone] = pending.back();
      pending.pop_back();
      if (values.count(e.id()))
        continue;
      if (!operandsDone) {
        pending.push_back({e, true});
        for (const Expr &operand : e.operands())
          if (!values.count(operand.id()))
            pending.push_back({operand, false});
        continue;
      }
      mlir::Value value = lowerNode(e);
      if (!value)
        return nullptr;
      values.emplace(e.id(), value);
    }
    return values.at(root.id());
  }

private:
  mlir::Value operand(const Expr &e, unsigned i) { return values.at(e.operands()[i].id()); }

  mlir::Value lowerNode(const Expr &e) {
    using Op = Expr::Op;
    bool isF32 = !e.operands().empty() && e.operands()[0].type() == ExprType::F32;
    auto binary = [&](auto intOp, auto floatOp) -> mlir::Value {
      using IntOp = decltype(intOp);
      using FloatOp = decltype(floatOp);
      if (isF32)
        return FloatOp::create(builder, loc, operand(e, 0), operand(e, 1));
      return IntOp::create(builder, loc, operand(e, 0), operand(e, 1));
    };
    auto compare = [&](mlir::arith::CmpIPredicate intPredicate,
                       mlir::arith::CmpFPredicate floatPredicate) -> mlir::Value {
      if (isF32)
        return mlir::arith::CmpFOp::create(builder, loc, floatPredicate, operand(e, 0),
                                           operand(e, 1));
      return mlir::arith::CmpIOp::create(builder, loc, intPredicate, operand(e, 0), operand(e, 1));
    };
    using IP = mlir::arith::CmpIPredicate;
    using FP = mlir::arith::CmpFPredicate;
    switch (e.op()) {
    case Op::Batch:
      return indices[0];
    case Op::Head:
      return indices[1];
    case Op::QIdx:
      return indices[2];
    case Op::KvIdx:
      return indices[3];
    case Op::Score:
      if (!score) {
        mlir::emitError(loc) << regionName << ": the score is only known to score_mod";
        return nullptr;
      }
      return score;
    case Op::IndexConst:
      return mlir::arith::ConstantIndexOp::create(builder, loc, e.indexValue());
    case Op::BoolConst:
      return mlir::arith::ConstantIntOp::create(builder, loc, e.boolValue() ? 1 : 0, 1);
    case Op::F32Const:
      return mlir::arith::ConstantOp::create(
          builder, loc, builder.getF32FloatAttr(static_cast<float>(e.f32Value())));
    case Op::Load:
      return lowerLoad(e);
    case Op::Add:
      return binary(mlir::arith::AddIOp(), mlir::arith::AddFOp());
    case Op::Sub:
      return binary(mlir::arith::SubIOp(), mlir::arith::SubFOp());
    case Op::Mul:
      return binary(mlir::arith::MulIOp(), mlir::arith::MulFOp());
    case Op::Div:
      return binary(mlir::arith::FloorDivSIOp(), mlir::arith::DivFOp());
    case Op::Rem:
      return binary(mlir::arith::RemSIOp(), mlir::arith::RemFOp());
    case Op::Min:
      return binary(mlir::arith::MinSIOp(), mlir::arith::MinimumFOp());
    case Op::Max:
      return binary(mlir::arith::MaxSIOp(), mlir::arith::MaximumFOp());
    case Op::Neg:
      if (isF32)
        return mlir::arith::NegFOp::create(builder, loc, operand(e, 0));
      return mlir::arith::SubIOp::create(
          builder, loc, mlir::arith::ConstantIndexOp::create(builder, loc, 0), operand(e, 0));
    case Op::Abs:
      if (isF32)
        return mlir::math::AbsFOp::create(builder, loc, operand(e, 0));
      return mlir::math::AbsIOp::create(builder, loc, operand(e, 0));
    case Op::Eq:
      return compare(IP::eq, FP::OEQ);
    case Op::Ne:
      return compare(IP::ne, FP::UNE);
    case Op::Lt:
      return compare(IP::slt, FP::OLT);
    case Op::Le:
      return compare(IP::sle, FP::OLE);
    case Op::Gt:
      return compare(IP::sgt, FP::OGT);
    case Op::Ge:
      return compare(IP::sge, FP::OGE);
    case Op::And:
      return mlir::arith::AndIOp::create(builder, loc, operand(e, 0), operand(e, 1));
    case Op::Or:
      return mlir::arith::OrIOp::create(builder, loc, operand(e, 0), operand(e, 1));
    case Op::Not:
      return mlir::arith::XOrIOp::create(
          builder, loc, operand(e, 0), mlir::arith::ConstantIntOp::create(builder, loc, 1, 1));
    case Op::Select:
      return mlir::arith::SelectOp::create(builder, loc, operand(e, 0), operand(e, 1),
                                           operand(e, 2));
    case Op::Exp:
      return mlir::math::ExpOp::create(builder, loc, operand(e, 0));
    case Op::Log:
      return mlir::math::LogOp::create(builder, loc, operand(e, 0));
    case Op::Sqrt:
      return mlir::math::SqrtOp::create(builder, loc, operand(e, 0));
    case Op::Tanh:
      return mlir::math::TanhOp::create(builder, loc, operand(e, 0));
    case Op::ToF32: {
      mlir::Value wide = mlir::arith::IndexCastOp::create(builder, loc, builder.getI64Type(),
                                                          operand(e, 0));
      return mlir::arith::SIToFPOp::create(builder, loc, builder.getF32Type(), wide);
    }
    }
    return nullptr;
  }

  mlir::Value lowerLoad(const Expr &e) {
    for (auto [number, capture] : llvm::enumerate(spec.captures)) {
      if (capture.name() != e.captureName())
        continue;
      if (capture.dtype() != e.captureDType() || capture.extents().size() != e.operands().size()) {
        mlir::emitError(loc) << regionName << " reads capture '" << e.captureName() << "' as "
                             << dtypeName(e.captureDType()) << " of rank "
                             << e.operands().size() << ", but the spec declares "
                             << dtypeName(capture.dtype()) << " of rank "
                             << capture.extents().size();
        return nullptr;
      }
      llvm::SmallVector<mlir::Value> at;
      for (unsigned i = 0; i < e.operands().size(); ++i)
        at.push_back(operand(e, i));
      mlir::Value element = mlir::memref::LoadOp::create(
          builder, loc, block.getArgument(firstCapture + number), at);
      if (capture.dtype() == DType::F32)
        return element;
      return mlir::arith::IndexCastOp::create(builder, loc, builder.getIndexType(), element);
    }
    mlir::emitError(loc) << regionName << " reads capture '" << e.captureName()
                         << "', which the spec does not declare (SpecBuilder::capture)";
    return nullptr;
  }

  mlir::OpBuilder &builder;
  mlir::Location loc;
  const Spec &spec;
  mlir::Block &block;
  const char *regionName;
  mlir::Value score;
  mlir::Value indices[4];
  unsigned firstCapture = 0;
  std::unordered_map<const void *, mlir::Value> values;
};

/// Fills `region` with one block computing `root` and yielding it. Returns
/// failure after a diagnostic.
mlir::LogicalResult buildUserRegion(mlir::OpBuilder &builder, mlir::Location loc,
                                    const Spec &spec, mlir::ArrayAttr captures,
                                    mlir::Region &region, const Expr &root, bool hasScore,
                                    const char *regionName) {
  mlir::OpBuilder::InsertionGuard guard(builder);
  llvm::SmallVector<mlir::Type> types;
  if (hasScore)
    types.push_back(builder.getF32Type());
  types.append(4, builder.getIndexType());
  for (mlir::Attribute capture : captures)
    types.push_back(mlir::cast<mlir::attn::CaptureAttr>(capture).getRegionArgType());
  llvm::SmallVector<mlir::Location> locs(types.size(), loc);
  mlir::Block *block = builder.createBlock(&region, {}, types, locs);
  ExprLowering lowering(builder, loc, spec, *block, hasScore, regionName);
  mlir::Value result = lowering.lower(root);
  if (!result)
    return mlir::failure();
  mlir::attn::YieldOp::create(builder, loc, result);
  return mlir::success();
}
} // namespace

mlir::attn::KernelOp buildKernelOp(mlir::OpBuilder &builder, mlir::Location loc,
                                   const Spec &spec) {
  mlir::MLIRContext *context = builder.getContext();
  auto emitError = [&] { return mlir::emitError(loc); };

  mlir::FloatAttr scale;
  if (spec.scale)
    scale = builder.getF64FloatAttr(*spec.scale);
  auto problem = mlir::attn::ProblemAttr::getChecked(emitError, context, spec.qHeads, spec.kvHeads,
                                                     spec.headDim,
                                                     elementTypeOf(context, spec.dtype), scale);
  if (!problem)
    return nullptr;

  mlir::attn::MaskAttrInterface mask;
  switch (spec.mask.kind()) {
  case Mask::Kind::None:
    mask = mlir::attn::NoMaskAttr::get(context);
    break;
  case Mask::Kind::Causal:
    mask = mlir::attn::CausalAttr::get(context, alignmentOf(spec.mask.alignment()));
    break;
  case Mask::Kind::SlidingWindow:
    mask = mlir::attn::SlidingWindowAttr::getChecked(emitError, context, spec.mask.windowLeft(),
                                                     spec.mask.windowRight(),
                                                     alignmentOf(spec.mask.alignment()));
    break;
  }
  if (!mask)
    return nullptr;

  mlir::attn::NormalizerAttrInterface normalizer;
  switch (spec.normalizer.kind()) {
  case Normalizer::Kind::Softmax:
    normalizer = mlir::attn::SoftmaxAttr::get(context);
    break;
  case Normalizer::Kind::Linear: {
    mlir::attn::FeatureMapKind map = mlir::attn::FeatureMapKind::identity;
    if (spec.normalizer.featureMap() == FeatureMap::Relu)
      map = mlir::attn::FeatureMapKind::relu;
    else if (spec.normalizer.featureMap() == FeatureMap::EluPlusOne)
      map = mlir::attn::FeatureMapKind::elu_plus_one;
    normalizer = mlir::attn::LinearAttr::get(context, map, spec.normalizer.normalize());
    break;
  }
  case Normalizer::Kind::Retention: {
    const std::vector<double> &decays = spec.normalizer.decays();
    normalizer = mlir::attn::RetentionAttr::getChecked(
        emitError, context,
        decays.empty() ? mlir::DenseF64ArrayAttr() : mlir::DenseF64ArrayAttr::get(context, decays),
        spec.normalizer.gated());
    break;
  }
  }
  if (!normalizer)
    return nullptr;
  mlir::ArrayAttr captures = buildCaptures(context, loc, spec);
  if (!captures)
    return nullptr;

  auto op = mlir::attn::KernelOp::create(builder, loc, spec.name, problem, mask, normalizer);
  if (!spec.captures.empty())
    op.setCapturesAttr(captures);
  if ((spec.maskMod && mlir::failed(buildUserRegion(builder, loc, spec, captures, op.getMaskMod(),
                                                    *spec.maskMod, false, "mask_mod"))) ||
      (spec.scoreMod && mlir::failed(buildUserRegion(builder, loc, spec, captures,
                                                     op.getScoreMod(), *spec.scoreMod, true,
                                                     "score_mod")))) {
    op->erase();
    return nullptr;
  }
  return op;
}

} // namespace attn
