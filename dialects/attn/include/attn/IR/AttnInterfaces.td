//===- AttnInterfaces.td - attn attribute interfaces -------*- tablegen -*-===//
//
// Masks and normalizers are open sets: new kinds (user-region masks, prefix-LM
// and document masks; linear attention, retention) are added as attributes
// implementing these interfaces, so the op and the passes need not change.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_IR_ATTNINTERFACES_TD
#define ATTN_IR_ATTNINTERFACES_TD

include "mlir/IR/OpBase.td"

def Attn_MaskAttrInterface : AttrInterface<"MaskAttrInterface"> {
  let cppNamespace = "::mlir::attn";
  let description = [{
    A mask decides which (query row, key row) pairs contribute to the
    attention output. Rows are numbered from 0 within one (batch, head);
    `seqlenQ`/`seqlenK` are the launch's Sq and Sk.
  }];
  let methods = [
    InterfaceMethod<
      /*desc=*/"Short stable name of the mask kind (e.g. \"causal\"); used in "
               "diagnostics, kernel names and the emitted code's comments.",
      /*retTy=*/"::llvm::StringRef", /*methodName=*/"getKindName">,
    InterfaceMethod<
      /*desc=*/"Returns true if key row `k` is visible to query row `q`.",
      /*retTy=*/"bool", /*methodName=*/"keeps",
      /*args=*/(ins "int64_t":$q, "int64_t":$k, "int64_t":$seqlenQ,
                    "int64_t":$seqlenK)>,
    InterfaceMethod<
      /*desc=*/"Returns the half-open key range [first, last) that can hold "
               "visible keys of query row `q`, clamped to [0, seqlenK) "
               "(first >= last when the row sees no key). Used to skip key "
               "blocks.",
      /*retTy=*/"std::pair<int64_t, int64_t>", /*methodName=*/"getKeyRange",
      /*args=*/(ins "int64_t":$q, "int64_t":$seqlenQ, "int64_t":$seqlenK)>,
    InterfaceMethod<
      /*desc=*/"Returns true if the mask keeps every pair (no masking code "
               "is needed).",
      /*retTy=*/"bool", /*methodName=*/"isTrivial", /*args=*/(ins),
      /*methodBody=*/"", /*defaultImplementation=*/"return false;">,
  ];
}

def Attn_NormalizerAttrInterface : AttrInterface<"NormalizerAttrInterface"> {
  let cppNamespace = "::mlir::attn";
  let description = [{
    The normalizer turns scores into weights over the visible keys: softmax,
    or the linear family (linear attention, retention) that carries a state
    instead.
  }];
  let methods = [
    InterfaceMethod<
      /*desc=*/"Short stable name of the normalizer (e.g. \"softmax\").",
      /*retTy=*/"::llvm::StringRef", /*methodName=*/"getKindName">,
    InterfaceMethod<
      /*desc=*/"Returns true for the (online) softmax normalizer, which "
               "produces a log-sum-exp per row.",
      /*retTy=*/"bool", /*methodName=*/"isSoftmax", /*args=*/(ins),
      /*methodBody=*/"", /*defaultImplementation=*/"return false;">,
    InterfaceMethod<
      /*desc=*/"Returns true for linear attention and retention, which run "
               "the chunkwise kernel and carry a state.",
      /*retTy=*/"bool", /*methodName=*/"isLinearFamily", /*args=*/(ins),
      /*methodBody=*/"", /*defaultImplementation=*/"return false;">,
  ];
}

#endif // ATTN_IR_ATTNINTERFACES_TD
