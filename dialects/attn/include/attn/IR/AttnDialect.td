//===- AttnDialect.td - attn dialect definition ------------*- tablegen -*-===//
//
// The `attn` dialect describes one attention kernel per `attn.kernel` op: the
// problem (heads, head dimension, element type, scale), the mask and the
// normalizer, plus the plans that the planning passes attach (tile shape,
// shared-memory layout). Code generation reads the op and its plans.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_IR_ATTNDIALECT_TD
#define ATTN_IR_ATTNDIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Attn_Dialect : Dialect {
  let name = "attn";
  let cppNamespace = "::mlir::attn";
  let summary = "Attention kernels for NVIDIA Hopper (sm_90a)";
  let description = [{
    The `attn` dialect holds attention kernel specifications. A module holds
    `attn.kernel` symbols; each names its problem with `#attn.problem`, its
    mask with an attribute implementing `MaskAttrInterface` and its normalizer
    with an attribute implementing `NormalizerAttrInterface`. The planning
    passes (`attn-tile`, `attn-plan-smem`) record their decisions as
    `#attn.tile` and `#attn.smem_plan` attributes on the op.

    Index conventions used throughout: `Sq` and `Sk` are the query and key
    sequence lengths of one launch, `q` is a query row in `[0, Sq)` and `k` a
    key row in `[0, Sk)`.
  }];
  // The user regions hold arith, math and memref operations.
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::memref::MemRefDialect"];
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{
    void registerAttributes();
  }];
}

class Attn_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Attn_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

class Attn_Op<string mnemonic, list<Trait> traits = []>
    : Op<Attn_Dialect, mnemonic, traits>;

#endif // ATTN_IR_ATTNDIALECT_TD
