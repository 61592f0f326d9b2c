//===- EmitCuda.cpp - attn-emit-cuda: template instantiation -------------===//
//
// Instantiates the sm_90a forward kernel template for every planned
// attn.kernel and attaches the resulting translation unit to the op.
//
//===----------------------------------------------------------------------===//

#include "attn/Compiler/KernelConfig.h"
#include "attn/IR/AttnOps.h"
#include "attn/Transforms/Passes.h"

#include "mlir/IR/BuiltinOps.h"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNEMITCUDA
#include "attn/Transforms/Passes.h.inc"

namespace {
::attn::codegen::MaskPolicy maskPolicyFor(Attribute mask) {
  ::attn::codegen::MaskPolicy policy;
  if (auto causal = dyn_cast<CausalAttr>(mask)) {
    policy.kind = ::attn::codegen::MaskPolicyKind::Causal;
    policy.bottomRight = causal.getAlignment() == MaskAlignment::bottom_right;
  } else if (auto window = dyn_cast<SlidingWindowAttr>(mask)) {
    policy.kind = ::attn::codegen::MaskPolicyKind::SlidingWindow;
    policy.bottomRight = window.getAlign() == MaskAlignment::bottom_right;
    policy.windowLeft = window.getLeft();
    policy.windowRight = window.getRight();
  }
  return policy;
}
} // namespace

FailureOr<::attn::codegen::ForwardKernelConfig> buildForwardKernelConfig(KernelOp op) {
  if (!op.getMaskMod().empty() || !op.getScoreMod().empty())
    return op.emitOpError("user mask_mod/score_mod regions cannot be lowered yet; "
                          "express the mask with a mask attribute");
  if (!isa<SoftmaxAttr>(op.getNormalizer()))
    return op.emitOpError("only the softmax normalizer has a kernel template");
  Attribute mask = op.getMask();
  if (!isa<NoMaskAttr, CausalAttr, SlidingWindowAttr>(mask))
    return op.emitOpError("mask ") << mask << " has no kernel template";
  auto tile = op.getTileAttr();
  auto smem = op.getSmemAttr();
  if (!tile || !smem)
    return op.emitOpError("needs `tile` and `smem` plans: run attn-tile and attn-plan-smem first");

  ::attn::codegen::ForwardKernelConfig config;
  config.kernelName = op.getSymName().str();
  ProblemAttr problem = op.getProblem();
  config.element = problem.getElementType().isBF16() ? ::attn::codegen::ElementKind::BF16
                                                     : ::attn::codegen::ElementKind::F16;
  config.headDim = problem.getHeadDim();
  config.tile = getTileConfig(tile);
  config.mask = maskPolicyFor(mask);

  struct Slot {
    const char *name;
    int64_t *offset;
  } slots[] = {{"q", &config.smem.q},
               {"k", &config.smem.k},
               {"v", &config.smem.v},
               {"o_staging", &config.smem.oStaging},
               {"barriers", &config.smem.barriers}};
  for (Slot slot : slots) {
    SmemBufferAttr buffer = smem.lookupBuffer(slot.name);
    if (!buffer)
      return op.emitOpError("shared-memory plan has no '") << slot.name << "' buffer";
    *slot.offset = buffer.getOffset();
  }
  config.smem.total = smem.getTotal();
  return config;
}

namespace {
struct EmitCudaPass : impl::AttnEmitCudaBase<EmitCudaPass> {
  void runOnOperation() override {
    WalkResult result = getOperation()->walk([](KernelOp op) {
      FailureOr<::attn::codegen::ForwardKernelConfig> config = buildForwardKernelConfig(op);
      if (failed(config))
        return WalkResult::interrupt();
      op->setAttr(kCudaSourceAttrName,
                  StringAttr::get(op.getContext(), ::attn::codegen::emitForwardKernelSource(*config)));
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace

} // namespace mlir::attn
