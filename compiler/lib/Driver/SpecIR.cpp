//===- SpecIR.cpp - attn.kernel ops from C++ specs ------------------------===//

#include "attn/Compiler/SpecIR.h"

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
  }
  return mlir::attn::KernelOp::create(builder, loc, spec.name, problem, mask, normalizer);
}

} // namespace attn
