//===- AttnOps.td - attn operations ------------------------*- tablegen -*-===//

#ifndef ATTN_IR_ATTNOPS_TD
#define ATTN_IR_ATTNOPS_TD

include "attn/IR/AttnDialect.td"
include "attn/IR/AttnAttrs.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Attn_KernelOp : Attn_Op<"kernel", [
    Symbol, IsolatedFromAbove]> {
  let summary = "a forward attention kernel";
  let description = [{
    Declares one attention kernel, named by its symbol: for each (batch,
    query head) it computes `O = normalize(scale * Q Kᵀ, mask) V` and, for
    softmax, the per-row log-sum-exp.

    ```mlir
    attn.kernel @causal_hd128
        problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128,
                                element_type = bf16, scale = 0.0883883461>
        mask = #attn.causal<bottom_right>
        normalizer = #attn.softmax
    ```

    The planning passes add `tile` (`#attn.tile`) and `smem`
    (`#attn.smem_plan`) attributes, printed in the trailing
    `attributes {...}` dictionary; asked for the backward (`attn-tile`'s
    `backward` option), they add its plan as `backward_tile` and
    `backward_smem` (a softmax kernel with built-in masks only). Given a
    tuning database that holds split counts of the spec's short-query path
    (`attn-tune` at a query length up to 64), `attn-tile` also lists them in
    `tuned_key_splits`, four integers per shape bucket: batch x query heads,
    query length and key length (each a power of two), then the split count
    (0: the forward kernel). A launch on a contiguous KV cache in a listed
    bucket that leaves the choice to the runtime takes that count (a paged
    one keeps the runtime's):

    ```mlir
    attributes {tuned_key_splits = array<i64: 256, 1, 32768, 4>, ...}
    ```

    Two optional single-block regions are reserved for user code; each is
    printed only when non-empty and must end in `attn.yield`:

    * `mask_mod`: arguments `(batch, head, q_idx, kv_idx)`, all `index`;
      yields an `i1`, true to keep the pair. It further restricts `mask`.
      The indices are positions in the sequences, not shifted by the mask's
      alignment.
    * `score_mod`: arguments `(score: f32, batch, head, q_idx, kv_idx:
      index)`; yields the modified `f32` score (after scaling, before
      masking and normalization).

    Both take, after those, one `memref` argument per entry of the optional
    `captures` list (`#attn.capture`), read with `memref.load`. The bodies
    use `arith` and `math` operations on `index`, integer and `f32` values;
    a score region yielding -inf masks the pair.

    `attn-classify-blocks` adds `mask_tile_formula` when it can prove what
    `mask_mod` computes; `attn-lower-mods` moves the regions into EmitC
    functions beside the kernel and names them in `mask_mod_fn` and
    `score_mod_fn`; the parts of a region that do not depend on the key
    (nor on the score) become functions of their own, computed once per
    query row, named in `mask_mod_row_fns` and `score_mod_row_fns`. It also
    takes out of `score_mod` a multiplication of the score by a constant
    (`score_input_scale`: the kernel multiplies the raw score by it together
    with the softmax scale) and a final multiplication by a positive
    constant (`score_output_scale`: the softmax folds it into its exponent).
    When what remains of `score_mod` is bounded (a `tanh`, constant
    multiples of bounded values, selections between them and -inf), it
    records the bound in `score_bound`: every result is -inf or within
    [-score_bound, score_bound], before `score_output_scale`. Where the
    shared-memory plan has a `score_diagonals` buffer, the values of
    `score_mod` that read a capture and depend on q and kv only through
    d = q - kv (a relative-position table) become functions of (b, h, d),
    named in `score_mod_diagonal_fns`: the kernel stages them per key tile
    instead of reading the capture per pair. When `score_mod` yields the
    score plus terms of which some depend on neither the key nor the score
    (ALiBi's `s - slope * (q - kv)` is `s + slope * kv - slope * q`), those
    terms move to a function of (b, h, q, captures...) named in
    `score_mod_row_offset_fn`: the softmax of a row does not change when
    every score of the row moves by the same amount, so the kernel adds
    the offset (times `score_output_scale`) to the row's log-sum-exp only.
    When the terms left per pair are kv (as f32) times row values,
    `score_mod_key_relative` lets the kernel pass kv relative to an origin
    it chooses per work tile, which the offset function takes last.

    For the backward, `attn-differentiate-mods` copies the regions whole
    into functions named in `backward_mask_mod_fn` and
    `backward_score_mod_fn`, and derives from `score_mod` its
    vector-Jacobian product, named in `backward_score_mod_vjp_fn`;
    `attn-lower-mods` lowers them with the others. It splits the staged
    values of `backward_score_mod_fn` (the forward's kind: capture reads
    that depend on q and kv only through d = q - kv) into functions of
    (b, h, d), named in `backward_score_mod_diagonal_fns`: each warp of the
    backward evaluates a step's diagonals once and passes the values to
    its pairs through shuffles.

    ```mlir
    attn.kernel @k problem = #attn.problem<...> mask = #attn.no_mask
        normalizer = #attn.softmax
        captures = [#attn.capture<"doc", i32, [batch, seqlen_k]>]
        mask_mod {
        ^bb0(%b: index, %h: index, %q: index, %kv: index,
             %doc: memref<?x?xi32>):
          %dq = memref.load %doc[%b, %q] : memref<?x?xi32>
          %dk = memref.load %doc[%b, %kv] : memref<?x?xi32>
          %keep = arith.cmpi eq, %dq, %dk : i32
          attn.yield %keep : i1
        }
    ```
  }];

  let arguments = (ins
    SymbolNameAttr:$sym_name,
    Attn_ProblemAttr:$problem,
    Attn_MaskAttrInterface:$mask,
    Attn_NormalizerAttrInterface:$normalizer,
    OptionalAttr<TypedArrayAttrBase<Attn_CaptureAttr, "captured buffers">>:$captures,
    OptionalAttr<Attn_TilePlanAttr>:$tile,
    OptionalAttr<Attn_SmemPlanAttr>:$smem,
    OptionalAttr<Attn_TilePlanAttr>:$backward_tile,
    OptionalAttr<Attn_SmemPlanAttr>:$backward_smem,
    OptionalAttr<Attn_TileFormulaAttr>:$mask_tile_formula,
    OptionalAttr<FlatSymbolRefAttr>:$mask_mod_fn,
    OptionalAttr<FlatSymbolRefAttr>:$score_mod_fn,
    OptionalAttr<FlatSymbolRefArrayAttr>:$mask_mod_row_fns,
    OptionalAttr<FlatSymbolRefArrayAttr>:$score_mod_row_fns,
    OptionalAttr<FlatSymbolRefArrayAttr>:$score_mod_diagonal_fns,
    OptionalAttr<FlatSymbolRefAttr>:$score_mod_row_offset_fn,
    UnitAttr:$score_mod_key_relative,
    OptionalAttr<F32Attr>:$score_input_scale,
    OptionalAttr<F32Attr>:$score_output_scale,
    OptionalAttr<F32Attr>:$score_bound,
    OptionalAttr<FlatSymbolRefAttr>:$backward_mask_mod_fn,
    OptionalAttr<FlatSymbolRefAttr>:$backward_score_mod_fn,
    OptionalAttr<FlatSymbolRefArrayAttr>:$backward_score_mod_diagonal_fns,
    OptionalAttr<FlatSymbolRefAttr>:$backward_score_mod_vjp_fn,
    OptionalAttr<DenseI64ArrayAttr>:$tuned_key_splits
  );
  let regions = (region MaxSizedRegion<1>:$mask_mod,
                        MaxSizedRegion<1>:$score_mod);

  let builders = [
    OpBuilder<(ins "::llvm::StringRef":$name, "ProblemAttr":$problem,
                   "MaskAttrInterface":$mask,
                   "NormalizerAttrInterface":$normalizer)>
  ];

  let hasCustomAssemblyFormat = 1;
  let hasRegionVerifier = 1;

  let extraClassDeclaration = [{
    /// The scale applied to QKᵀ: the problem's `scale`, or 1/sqrt(head_dim).
    double getSoftmaxScale() { return getProblem().getEffectiveScale(); }

    /// Expected block arguments of the user regions.
    static constexpr unsigned kMaskModNumArgs = 4;
    static constexpr unsigned kScoreModNumArgs = 5;

    /// The declared captures (empty when there is no `captures` list).
    ::llvm::SmallVector<CaptureAttr> getCaptureList();
  }];
}

def Attn_YieldOp : Attn_Op<"yield", [
    Pure, Terminator, ReturnLike, HasParent<"KernelOp">]> {
  let summary = "terminator of the user regions of attn.kernel";
  let description = [{
    Yields the value computed by a `mask_mod` (`i1`) or `score_mod` (`f32`)
    region.

    ```mlir
    attn.yield %keep : i1
    ```
  }];
  let arguments = (ins Variadic<AnyType>:$values);
  let assemblyFormat = "attr-dict ($values^ `:` type($values))?";
}

#endif // ATTN_IR_ATTNOPS_TD
