//===- AttnAttrs.td - attn attributes ----------------------*- tablegen -*-===//
//
// Problem, mask, normalizer and plan attributes of the attn dialect.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_IR_ATTNATTRS_TD
#define ATTN_IR_ATTNATTRS_TD

include "attn/IR/AttnDialect.td"
include "attn/IR/AttnInterfaces.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def Attn_MaskAlignment : I32EnumAttr<"MaskAlignment",
    "how the diagonal of a causal or windowed mask is anchored", [
      I32EnumAttrCase<"top_left", 0>,
      I32EnumAttrCase<"bottom_right", 1>,
    ]> {
  let cppNamespace = "::mlir::attn";
  let genSpecializedAttr = 0;
}


def Attn_FeatureMapKind : I32EnumAttr<"FeatureMapKind",
    "the feature map of linear attention, applied to queries and keys", [
      I32EnumAttrCase<"identity", 0>,
      I32EnumAttrCase<"relu", 1>,
      I32EnumAttrCase<"elu_plus_one", 2>,
    ]> {
  let cppNamespace = "::mlir::attn";
  let genSpecializedAttr = 0;
}

def Attn_CaptureDimKind : I32EnumAttr<"CaptureDimKind",
    "what an extent of a captured buffer is tied to", [
      I32EnumAttrCase<"fixed", 0>,
      I32EnumAttrCase<"any", 1, "?">,
      I32EnumAttrCase<"batch", 2>,
      I32EnumAttrCase<"q_heads", 3>,
      I32EnumAttrCase<"kv_heads", 4>,
      I32EnumAttrCase<"seqlen_q", 5>,
      I32EnumAttrCase<"seqlen_k", 6>,
    ]> {
  let cppNamespace = "::mlir::attn";
  let genSpecializedAttr = 0;
}

def Attn_TileFormulaKind : I32EnumAttr<"TileFormulaKind",
    "how a tile formula combines its terms", [
      I32EnumAttrCase<"all_of", 0>,
      I32EnumAttrCase<"any_of", 1>,
      I32EnumAttrCase<"none_of", 2>,
    ]> {
  let cppNamespace = "::mlir::attn";
  let genSpecializedAttr = 0;
}

//===----------------------------------------------------------------------===//
// Problem
//===----------------------------------------------------------------------===//

def Attn_ProblemAttr : Attn_Attr<"Problem", "problem"> {
  let summary = "shape-independent description of an attention problem";
  let description = [{
    The sizes fixed at compile time: `q_heads` query heads sharing
    `kv_heads` key/value heads (grouped-query attention; `kv_heads` divides
    `q_heads`, query head `h` reads key/value head `h / (q_heads / kv_heads)`),
    the head dimension (64, 128 or 256) and the element type of Q, K, V and O
    (`bf16` or `f16`; accumulation is always f32). Batch and sequence lengths
    are runtime values.

    `scale` multiplies QKᵀ before normalization. It is optional: when absent
    the scale is `1/sqrt(head_dim)`. When present it must be positive and
    finite.

    ```mlir
    #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128,
                  element_type = bf16, scale = 0.0883883461>
    ```
  }];
  let parameters = (ins
    "int64_t":$q_heads,
    "int64_t":$kv_heads,
    "int64_t":$head_dim,
    "::mlir::Type":$element_type,
    OptionalParameter<"::mlir::FloatAttr",
                      "f64 softmax scale; null means 1/sqrt(head_dim)">:$scale
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The scale applied to QKᵀ: `scale` if given, else 1/sqrt(head_dim).
    double getEffectiveScale() const;
    /// Bytes per element of Q/K/V/O (2 for bf16 and f16).
    int64_t getElementBytes() const;
    /// Query heads per key/value head.
    int64_t getGroupSize() const { return getQHeads() / getKvHeads(); }
  }];
}

//===----------------------------------------------------------------------===//
// Masks
//===----------------------------------------------------------------------===//

def Attn_NoMaskAttr : Attn_Attr<"NoMask", "no_mask",
    [DeclareAttrInterfaceMethods<Attn_MaskAttrInterface, ["isTrivial"]>]> {
  let summary = "every query row sees every key row";
  let description = [{
    ```mlir
    #attn.no_mask
    ```
  }];
}

def Attn_CausalAttr : Attn_Attr<"Causal", "causal",
    [DeclareAttrInterfaceMethods<Attn_MaskAttrInterface>]> {
  let summary = "causal mask";
  let description = [{
    Query row `q` sees key row `k` iff `k <= q + shift`, where
    `shift = Sk - Sq` for `bottom_right` alignment (the last query row sees
    every key: decoding with a KV cache) and `shift = 0` for `top_left`
    (the diagonal starts at the first key). With `bottom_right` and
    `Sq > Sk` the first `Sq - Sk` query rows see no key; their output is 0 and
    their log-sum-exp is -inf.

    ```mlir
    #attn.causal<bottom_right>
    #attn.causal<top_left>
    ```
  }];
  let parameters = (ins EnumParameter<Attn_MaskAlignment>:$alignment);
  let assemblyFormat = "`<` $alignment `>`";
}

def Attn_SlidingWindowAttr : Attn_Attr<"SlidingWindow", "sliding_window",
    [DeclareAttrInterfaceMethods<Attn_MaskAttrInterface>]> {
  let summary = "local (banded) attention";
  let description = [{
    Query row `q` sees key row `k` iff
    `q + shift - left <= k <= q + shift + right`, with `shift` as for
    `#attn.causal` (`Sk - Sq` for `bottom_right`, 0 for `top_left`). `left`
    and `right` are extents in key rows, both `>= 0`; `right = 0` gives a
    causal sliding window. `align` defaults to `bottom_right` and is then
    omitted when printing.

    ```mlir
    #attn.sliding_window<left = 256, right = 0>
    #attn.sliding_window<left = 128, right = 128, align = top_left>
    ```
  }];
  let parameters = (ins
    "int64_t":$left,
    "int64_t":$right,
    DefaultValuedParameter<"::mlir::attn::MaskAlignment",
                           "::mlir::attn::MaskAlignment::bottom_right",
                           "diagonal anchor">:$align
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

//===----------------------------------------------------------------------===//
// Normalizers
//===----------------------------------------------------------------------===//

def Attn_SoftmaxAttr : Attn_Attr<"Softmax", "softmax",
    [DeclareAttrInterfaceMethods<Attn_NormalizerAttrInterface, ["isSoftmax"]>]> {
  let summary = "softmax over the visible keys of each query row";
  let description = [{
    `O[q] = sum_k softmax_k(scale * Q[q]·K[k]) V[k]` over the keys kept by the
    mask, computed online (flash attention). The kernel also writes the
    natural-log log-sum-exp of the scaled scores per row.

    ```mlir
    #attn.softmax
    ```
  }];
}


def Attn_LinearAttr : Attn_Attr<"Linear", "linear",
    [DeclareAttrInterfaceMethods<Attn_NormalizerAttrInterface, ["isLinearFamily"]>]> {
  let summary = "linear attention: a feature map in place of the softmax";
  let description = [{
    With φ the feature map (`identity`, `relu` or `elu_plus_one`, φ(x) =
    x + 1 for x > 0 and eˣ otherwise), applied to each element of q and k:

    `O[i] = scale · Σ_j φ(Q[i])·φ(K[j]) V[j]` over `j <= i` with
    `#attn.causal`, over every `j` with `#attn.no_mask`. With
    `normalize = true` each row is divided by `scale · Σ_j φ(Q[i])·φ(K[j])`
    (0 where that is 0). The kernel carries the state `S = Σ_j φ(K[j]) V[j]ᵀ`
    (head_dim × head_dim, fp32), and the key sum `z = Σ_j φ(K[j])` when
    normalizing, in from an optional initial state and out as the final
    state.

    ```mlir
    #attn.linear
    #attn.linear<feature_map = elu_plus_one, normalize = true>
    ```
  }];
  let parameters = (ins
    DefaultValuedParameter<"::mlir::attn::FeatureMapKind",
                           "::mlir::attn::FeatureMapKind::identity",
                           "feature map">:$feature_map,
    DefaultValuedParameter<"bool", "false", "divide by the key sum">:$normalize
  );
  let assemblyFormat = "(`<` struct(params)^ `>`)?";
}

def Attn_RetentionAttr : Attn_Attr<"Retention", "retention",
    [DeclareAttrInterfaceMethods<Attn_NormalizerAttrInterface, ["isLinearFamily"]>]> {
  let summary = "retention: causal linear attention with a decay";
  let description = [{
    `O[i] = scale · Σ_{j <= i} decay(i, j) Q[i]·K[j] V[j]`, where
    `decay(i, j) = γ^(i-j)` with a fixed decay per query head, or
    `exp(g[j+1] + ... + g[i])` with `gated`, `g` being a per-token,
    per-head log-decay (`<= 0`, a `[batch, seqlen, q_heads]` fp32 tensor
    passed at launch). The state recurrence is `S_t = γ S_{t-1} + K[t] V[t]ᵀ`
    (`exp(g[t])` in place of γ when gated). The decay defaults to RetNet's
    multi-scale `γ_h = 1 - 2^(-5-h)`; `decay = [...]` gives one γ in (0, 1]
    per query head. Needs `#attn.causal`.

    ```mlir
    #attn.retention
    #attn.retention<decay = [0.96875, 0.984375]>
    #attn.retention<gated>
    ```
  }];
  let parameters = (ins
    OptionalParameter<"::mlir::DenseF64ArrayAttr", "fixed decay per query head">:$decay,
    "bool":$gated
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// γ of query head `head`: the explicit list or the multi-scale default.
    double getGamma(int64_t head) const;
    /// The explicit decay list (empty for the multi-scale default).
    ::llvm::ArrayRef<double> getDecayList() const {
      return getDecay() ? getDecay().asArrayRef() : ::llvm::ArrayRef<double>();
    }
  }];
}

//===----------------------------------------------------------------------===//
// Captured buffers
//===----------------------------------------------------------------------===//

def Attn_CaptureAttr : Attn_Attr<"Capture", "capture"> {
  let summary = "a device buffer read by the user regions";
  let description = [{
    Declares a buffer passed at launch that `mask_mod` and `score_mod` read
    with `memref.load` (per-head slopes, bias tables, document ids). The
    name identifies it in runtime errors; the element type is `f32` or `i32`;
    the shape has one to three extents, each an integer, `?` (any length,
    taken from the buffer at launch) or one of the launch sizes `batch`,
    `q_heads`, `kv_heads`, `seqlen_q`, `seqlen_k`. The buffer is contiguous
    and row-major. Every user region takes one `memref` argument per capture,
    in declaration order, with the capture's rank (all extents dynamic) and
    element type. A read outside the extents yields 0.

    A trailing `grad` marks an `f32` capture as learnable: the backward of
    the spec takes a gradient buffer of the capture's shape and writes into
    it the sum, over every pair the forward keeps, of dS * d score_mod /
    d value for each value of the capture `score_mod` read (dS being the
    gradient of the modified score); `attn-differentiate-mods` derives it.

    ```mlir
    #attn.capture<"slopes", f32, [q_heads]>
    #attn.capture<"bias", f32, [16, ?]>
    #attn.capture<"table", f32, [q_heads, 32], grad>
    ```
  }];
  let parameters = (ins
    StringRefParameter<"identifier naming the buffer">:$name,
    "::mlir::Type":$element_type,
    ArrayRefParameter<"::mlir::attn::CaptureDimKind", "extent kinds">:$dim_kinds,
    ArrayRefParameter<"int64_t", "sizes of the fixed extents (0 elsewhere)">:$dim_sizes,
    DefaultValuedParameter<"bool", "false", "whether the backward computes its gradient">:$requires_grad
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    int64_t getRank() const { return getDimKinds().size(); }
    /// The region argument type: a dynamically shaped memref of the rank.
    ::mlir::MemRefType getRegionArgType() const;
    static constexpr int64_t kMaxCaptures = 4;
    static constexpr int64_t kMaxRank = 3;
  }];
}

//===----------------------------------------------------------------------===//
// Tile formulas (attn-classify-blocks)
//===----------------------------------------------------------------------===//

def Attn_AffineGeAttr : Attn_Attr<"AffineGe", "affine_ge"> {
  let summary = "an affine inequality over the mask's index variables";
  let description = [{
    Holds when `batch * b + head * h + q * q_idx + kv * kv_idx + c >= 0`.
    Zero coefficients are omitted when printing. Over a tile (a box of
    q_idx and kv_idx values, batch and head fixed) the left side takes its
    extremes at the box's corners, so the tile is decided from four values.

    ```mlir
    #attn.affine_ge<q = 1, kv = -1>           // kv_idx <= q_idx
    #attn.affine_ge<kv = -1, c = 2047>        // kv_idx < 2048
    ```
  }];
  let parameters = (ins
    DefaultValuedParameter<"int64_t", "0">:$batch,
    DefaultValuedParameter<"int64_t", "0">:$head,
    DefaultValuedParameter<"int64_t", "0">:$q,
    DefaultValuedParameter<"int64_t", "0">:$kv,
    DefaultValuedParameter<"int64_t", "0">:$c
  );
  let assemblyFormat = "`<` struct(params) `>`";
}

def Attn_FloorDivTermAttr : Attn_Attr<"FloorDivTerm", "floordiv"> {
  let summary = "a multiple of the floor quotient of an affine form";
  let description = [{
    `coef * floor((batch * b + head * h + q * q_idx + kv * kv_idx + c) /
    divisor)`, with `divisor > 0` and a dividend that is never negative (so
    floor, truncating and unsigned division agree). Floor is monotone, so
    over a tile the term's extremes come from the dividend's.

    ```mlir
    #attn.floordiv<coef = -1, kv = 1, divisor = 1024>   // -(kv_idx / 1024)
    ```
  }];
  let parameters = (ins
    DefaultValuedParameter<"int64_t", "1">:$coef,
    DefaultValuedParameter<"int64_t", "0">:$batch,
    DefaultValuedParameter<"int64_t", "0">:$head,
    DefaultValuedParameter<"int64_t", "0">:$q,
    DefaultValuedParameter<"int64_t", "0">:$kv,
    DefaultValuedParameter<"int64_t", "0">:$c,
    "int64_t":$divisor
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Attn_DivSumGeAttr : Attn_Attr<"DivSumGe", "div_sum_ge"> {
  let summary = "an inequality over affine forms and floor quotients";
  let description = [{
    Holds when `batch * b + head * h + q * q_idx + kv * kv_idx + c + sum(terms)
    >= 0`, each term an `#attn.floordiv`. Over a tile the kernel bounds each
    part separately (interval arithmetic): sound, and exact when the parts
    depend on different indices, as in `q_idx / C == kv_idx / C`.

    ```mlir
    #attn.div_sum_ge<terms = [#attn.floordiv<q = 1, divisor = 1024>,
                              #attn.floordiv<coef = -1, kv = 1, divisor = 1024>]>
    ```
  }];
  let parameters = (ins
    DefaultValuedParameter<"int64_t", "0">:$batch,
    DefaultValuedParameter<"int64_t", "0">:$head,
    DefaultValuedParameter<"int64_t", "0">:$q,
    DefaultValuedParameter<"int64_t", "0">:$kv,
    DefaultValuedParameter<"int64_t", "0">:$c,
    "::mlir::ArrayAttr":$terms
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Attn_TileFormulaAttr : Attn_Attr<"TileFormula", "tile_formula"> {
  let summary = "a mask as a combination of affine inequalities";
  let description = [{
    What `attn-classify-blocks` proves a `mask_mod` region computes:
    `all_of` (and), `any_of` (or) or `none_of` (nor) of its terms, each an
    `#attn.affine_ge`, an `#attn.div_sum_ge` or a nested `#attn.tile_formula`. `all_of` with no
    term is true, `any_of` with none is false. Evaluated over a tile in
    three values (every pair kept, none kept, some kept), it tells the
    kernel which key tiles to skip and which need no per-element mask.

    ```mlir
    // prefix-LM: kv_idx <= q_idx or kv_idx < 2048
    #attn.tile_formula<any_of, [#attn.affine_ge<q = 1, kv = -1>,
                                #attn.affine_ge<kv = -1, c = 2047>]>
    ```
  }];
  let parameters = (ins
    EnumParameter<Attn_TileFormulaKind>:$kind,
    "::mlir::ArrayAttr":$terms
  );
  let assemblyFormat = "`<` $kind `,` $terms `>`";
  let genVerifyDecl = 1;
}

//===----------------------------------------------------------------------===//
// Plans
//===----------------------------------------------------------------------===//

def Attn_TilePlanAttr : Attn_Attr<"TilePlan", "tile"> {
  let summary = "CTA tile and warp specialization chosen by attn-tile";
  let description = [{
    One CTA computes `block_m` query rows of one (batch, head) and walks the
    keys `block_n` rows at a time through a `stages`-deep shared-memory ring.
    It has `producer_warpgroups` warpgroups issuing TMA loads and
    `consumer_warpgroups` warpgroups issuing WGMMA, each consumer owning a
    64-row slice of the Q tile (so `block_m = 64 * consumer_warpgroups`).
    `*_registers` are the per-thread register counts set with `setmaxnreg`.
    Threads per CTA: `128 * (consumer_warpgroups + producer_warpgroups)`.

    Two schedule choices follow, omitted when they have their defaults:
    `softmax_chains` (1, 2 or 4, default 1) independent partial results per
    row in the softmax's max and sum reductions, and
    `persistent_blocks_per_sm` (default 0): 0 launches one block per work
    tile, 1 a persistent grid of one block per SM that walks the tiles.

    ```mlir
    #attn.tile<block_m = 128, block_n = 128, stages = 2,
               consumer_warpgroups = 2, producer_warpgroups = 1,
               consumer_registers = 240, producer_registers = 24,
               softmax_chains = 4, persistent_blocks_per_sm = 1>
    ```
  }];
  let parameters = (ins
    "int64_t":$block_m,
    "int64_t":$block_n,
    "int64_t":$stages,
    "int64_t":$consumer_warpgroups,
    "int64_t":$producer_warpgroups,
    "int64_t":$consumer_registers,
    "int64_t":$producer_registers,
    DefaultValuedParameter<"int64_t", "1">:$softmax_chains,
    DefaultValuedParameter<"int64_t", "0">:$persistent_blocks_per_sm
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let extraClassDeclaration = [{
    /// 128 threads per warpgroup, consumers and producers together.
    int64_t getThreadsPerBlock() const {
      return 128 * (getConsumerWarpgroups() + getProducerWarpgroups());
    }
  }];
}

def Attn_SmemBufferAttr : Attn_Attr<"SmemBuffer", "buffer"> {
  let summary = "one buffer of a shared-memory plan";
  let description = [{
    A named byte range `[offset, offset + size)` of the CTA's dynamic shared
    memory, relative to its 1024-byte aligned base. `align` is the alignment
    of `offset` (and of each slot); `swizzle` is the TMA/WGMMA swizzle span in
    bytes (128, or 0 for none). A ring buffer holds `slots` equal slots of
    `size / slots` bytes each (slot `i` starts at `offset + i * size / slots`);
    `slots` is omitted when 1. `aliases` names an earlier buffer whose bytes
    this one reuses because their lifetimes do not overlap (omitted when
    empty).

    ```mlir
    #attn.buffer<"k", offset = 32768, size = 65536, align = 1024,
                 swizzle = 128, slots = 2>
    #attn.buffer<"o_staging", offset = 0, size = 32768, align = 1024,
                 swizzle = 128, aliases = "q">
    ```
  }];
  let parameters = (ins
    StringRefParameter<"buffer name">:$name,
    "int64_t":$offset,
    "int64_t":$size,
    "int64_t":$align,
    "int64_t":$swizzle,
    DefaultValuedParameter<"int64_t", "1", "number of equal slots">:$slots,
    StringRefParameter<"name of the buffer whose space is reused", "\"\"">:$aliases
  );
  let assemblyFormat = [{
    `<` $name `,` struct($offset, $size, $align, $swizzle, $slots, $aliases) `>`
  }];
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// One past the last byte.
    int64_t getEnd() const { return getOffset() + getSize(); }
    /// Bytes between consecutive slots of a ring buffer.
    int64_t getSlotStride() const { return getSize() / getSlots(); }
    /// Byte offset of slot `i`.
    int64_t getSlotOffset(int64_t i) const {
      return getOffset() + i * getSlotStride();
    }
  }];
}

def Attn_SmemPlanAttr : Attn_Attr<"SmemPlan", "smem_plan"> {
  let summary = "shared-memory layout chosen by attn-plan-smem";
  let description = [{
    `total` is the size in bytes of the layout (the end of its last buffer),
    relative to a 1024-byte aligned base. `buffers` lists the buffers in
    allocation order; buffers with disjoint lifetimes may overlap (see
    `aliases`).

    ```mlir
    #attn.smem_plan<total = 163896, buffers = [
        #attn.buffer<"q", offset = 0, size = 32768, align = 1024, swizzle = 128>,
        ...]>
    ```
  }];
  let parameters = (ins
    "int64_t":$total,
    "::mlir::ArrayAttr":$buffers
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The buffer named `name`, or null.
    SmemBufferAttr lookupBuffer(::llvm::StringRef name) const;
    /// The buffers, in allocation order.
    ::llvm::SmallVector<SmemBufferAttr> getBufferList() const;
    /// Dynamic shared memory to request at launch: the layout plus 1024 bytes
    /// of slack, because the dynamic window's base is only 16-byte aligned
    /// and the kernel rounds it up to 1024.
    int64_t getLaunchBytes() const { return getTotal() + kBaseAlignSlack; }
    static constexpr int64_t kBaseAlignSlack = 1024;
  }];
}

#endif // ATTN_IR_ATTNATTRS_TD
