//===- Passes.td - attn planning passes --------------------*- tablegen -*-===//

#ifndef ATTN_TRANSFORMS_PASSES_TD
#define ATTN_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def AttnTile : Pass<"attn-tile"> {
  let summary = "Choose the sm_90a tile plan of each attn.kernel";
  let description = [{
    Records `tile = #attn.tile<...>` on every `attn.kernel` nested under the
    pass's operation. The default plan depends on the head dimension: one
    64-row WGMMA slice of Q per consumer warpgroup, one producer warpgroup
    issuing TMA at 24 registers, 2 stages:

    | head_dim | block_m | block_n | consumers (registers) | softmax_chains |
    |----------|---------|---------|-----------------------|----------------|
    | 64       | 192     | 128     | 3 (160)               | 1              |
    | 128      | 128     | 128     | 2 (240)               | 1 (4)          |
    | 256      | 128     | 80      | 2 (240)               | 1 (4)          |

    with four chains at head dim 128 for a `score_mod`, a `mask_mod` or a
    sliding window, and at head dim 256 for a `score_mod`; and
    `persistent_blocks_per_sm = 1` when every work tile costs the same
    (no mask, no `mask_mod`) or a built-in mask alone (causal, or a sliding
    window below head dim 256, no `mask_mod`) shapes the tiles and the key
    length is below 16384 or unknown, and for a `mask_mod` that
    `attn-classify-blocks` proves beside the causal mask; 0 (a block per
    work tile) otherwise. A bf16
    kernel of head dim 128 whose softmax runs on a fixed base (a bounded
    `score_mod` such as soft-capping, whose scores span at most 2^80 after
    exponentiation) takes 192 x 64 tiles, three consumers (160 registers),
    four stages and two chains instead, at any length.

    A `score_mod` whose values the producer warps stage per diagonal
    (`score_diagonals`) gives them more registers, which the diagonal fill
    needs: beside two consumers that fit in 232 registers (head dim 128),
    232 and 40; beside three consumers (head dim 64), 160 and 32.

    With `tuning-shape`, a kernel of head dim 128 with no mask and no
    `score_mod` whose key length is 2048 or more takes 160-key tiles and one
    softmax chain (128 x 160); shorter or unknown lengths, masks and other
    score_mods keep the table's plan. With the causal mask alone (no other
    mask): head dim 128 from 8192 keys takes 128 x 160 and one chain, with
    or without a `score_mod` (a bounded one takes the plan above; staged
    diagonals take two chains, or 128 x 144 and four chains where they
    compute a transcendental, as T5's buckets); without a `score_mod`, head
    dim 64 up to 1024 keys takes 128 x 128 tiles (two consumers) and three
    stages, with two chains up to 512 keys. A `mask_mod` keeping the causal
    half-plane (prefix-LM) is planned as the causal mask from 8192 keys
    (128 x 160, two chains, persistent), and any `mask_mod` up to 1024 keys
    takes the persistent grid. docs/tuning.md gives the measurements.

    With `tuning-db`, the tuning database's record for the kernel (its
    tuning hash, the target `arch`, and the shape bucket nearest
    `tuning-shape`, or the largest bucket when no shape is given) replaces
    the heuristic. A record that no longer parses or is illegal is reported
    as a warning and the heuristic is used.

    A kernel that already has a `tile` keeps it unless `tile-override` is
    given. `tile-override` is a comma-separated `key=value` list over
    `block_m`, `block_n`, `stages`, `consumer_warpgroups`,
    `producer_warpgroups`, `consumer_registers`, `producer_registers`,
    `softmax_chains`, `persistent_blocks_per_sm`; the missing keys come from
    the tuned or default plan, and `consumer_warpgroups` follows `block_m`
    (and vice versa) when only one is given.

    Every plan is checked against the sm_90a constraints (WGMMA shapes,
    pipeline depth, warpgroups, register budget, shared-memory capacity,
    schedule); a violation is reported on the kernel and fails the pass.

    With `backward`, the pass also records the backward kernel's plan as
    `backward_tile` (a softmax kernel with built-in masks; any other is
    reported): `block_n` keys a block, one 64-key slice per consumer
    warpgroup, `block_m` query rows a step, `stages` of the (Q, dO) ring:

    | head_dim | block_m | block_n | consumers (registers) | stages |
    |----------|---------|---------|-----------------------|--------|
    | 64       | 128     | 128     | 2 (240)               | 2      |
    | 128      | 64      | 128     | 2 (240)               | 2      |
    | 256      | 64      | 64      | 1 (256; producer 40)  | 1      |

    (head dim 256 walks the query blocks twice, 128 columns of dK and dV
    each time)

    or the tuning database's backward record (`attn-tune --backward`; the
    same `tuning-db`, `tuning-shape` and `arch`), under
    `backward-tile-override` (whose `block_n` and `consumer_warpgroups`
    follow each other), checked against the backward's constraints.

    Given a `tuning-db`, a softmax kernel also gets `tuned_key_splits`: every
    split count of its short-query path that the database holds for the
    spec and `arch` (`attn-tune` at a query length up to 64, or first-use
    tuning), whatever `tuning-shape` is; a record that does not parse is
    reported and left out, of two records of one bucket the faster is
    listed, and without records the attribute is removed.
  }];
  let options = [
    Option<"tileOverride", "tile-override", "std::string", /*default=*/"\"\"",
           "Comma-separated key=value tile settings that replace the "
           "heuristic's (e.g. block_m=64,block_n=64,stages=2)">,
    Option<"tuningDatabase", "tuning-db", "std::string", /*default=*/"\"\"",
           "Tuning database to consult (empty: none)">,
    Option<"tuningShape", "tuning-shape", "std::string", /*default=*/"\"\"",
           "B,S or B,Sq,Sk: the shape the kernel is planned for (the "
           "heuristic's key length; the database's bucket)">,
    Option<"arch", "arch", "std::string", /*default=*/"\"sm_90a\"",
           "Target architecture of the database lookup">,
    Option<"backward", "backward", "bool", /*default=*/"false",
           "Also plan the backward kernel (backward_tile)">,
    Option<"backwardTileOverride", "backward-tile-override", "std::string",
           /*default=*/"\"\"",
           "Comma-separated key=value settings over the backward plan">,
  ];
  let dependentDialects = ["::mlir::attn::AttnDialect"];
}

def AttnPlanSmem : Pass<"attn-plan-smem"> {
  let summary = "Lay out the shared memory of each planned attn.kernel";
  let description = [{
    Requires the `tile` plan (run `attn-tile` first) and records
    `smem = #attn.smem_plan<...>`. Buffers, in allocation order:

    * `q`: `block_m x head_dim` elements, live during the main loop;
    * `k`, `v`: rings of `stages` slots of `block_n x head_dim` elements;
    * `o_staging`: `block_m x head_dim` elements. In a persistent plan
      (`persistent_blocks_per_sm` > 0) where it fits beside the others it
      lives as long as `q`: the block stores one work tile's O while the
      next tile's Q arrives. Otherwise it lives in the epilogue only and
      reuses the bytes of `q` (Q's last use is the last QKᵀ), and a next Q
      load waits for the store;
    * `key_bits`, for a `mask_mod` that `attn-classify-blocks` cannot
      classify (its tiles come from a run-time coverage): per stage, a
      partial key tile's stored key bits, `block_m x 4` words of 32 bits
      (64 past 128 keys a tile), which the producer copies in beside the K
      tile, live during the main loop;
    * `barriers`: 8-byte mbarriers, two for Q and four per stage, ordered
      q_full, q_empty, k_full[s], v_full[s], k_empty[s], v_empty[s].

    Tiles (and each ring slot) are 1024-byte aligned with a 128-byte swizzle.
    Buffers are placed first-fit by offset; buffers whose lifetimes do not
    overlap may share bytes (recorded with `aliases`). The pass fails when
    the layout plus 1024 bytes of base-alignment slack exceeds the 232448
    bytes of shared memory a block may use on sm_90a.

    A kernel with a `backward_tile` plan also gets `backward_smem`, every
    buffer live for the whole kernel: `k`, `v` (`block_n x head_dim`);
    `q`, `do` (rings of `stages` slots of `block_m x head_dim`); `lse`,
    `delta` (`stages x block_m` fp32); `ds` (two `block_n x block_m` tiles
    of dSᵀ); `dq_staging` (a `block_m x head_dim` fp32 piece per consumer
    and buffer, two buffers where they fit, else one); `dq_turns` (an int32
    per buffer); `diagonal_sums` where the derived backward adds a learnable
    capture's gradient by diagonal (`attn.per_diagonal`, so
    `attn-differentiate-mods` runs first) and it fits: each consumer warp's
    sums by diagonal, two steps' rows, and a float per consumer thread,
    taken ahead of a second dQ staging buffer; `barriers` (kv_full, full and
    empty per stage, dq_full and dq_empty per consumer and buffer).
  }];
  let dependentDialects = ["::mlir::attn::AttnDialect"];
}

def AttnEmitCuda : Pass<"attn-emit-cuda"> {
  let summary = "Instantiate the sm_90a kernel template for each planned attn.kernel";
  let description = [{
    Requires the `tile` and `smem` plans. Inlines the kernel template and its
    device library from `templates/` into one CUDA C++ translation unit, with
    the problem, the mask policy, the tile plan and every shared-memory offset
    as compile-time constants (namespace `attn_plan`), and the WGMMA wrappers
    for the plan's shapes. The unit is attached to the op as the string
    attribute `attn.cuda_source`; NVRTC compiles it to PTX.

    User regions must have been lowered (`attn-lower-mods`): the EmitC
    functions named by `mask_mod_fn` / `score_mod_fn` are checked (only the
    operations, callees and types that pass creates are accepted, so nothing
    from a spec reaches the source as text) and translated with MLIR's C++
    emitter into the unit, ahead of the template. `mask_tile_formula`
    becomes the kernel's per-tile coverage test. A normalizer other than
    softmax is rejected with a diagnostic.
  }];
  let dependentDialects = ["::mlir::attn::AttnDialect"];
}

def AttnClassifyBlocks : Pass<"attn-classify-blocks"> {
  let summary = "Prove which (query tile, key tile) pairs a mask_mod keeps";
  let description = [{
    For each `attn.kernel` with a `mask_mod` region, tries to express the
    yielded predicate as and/or/not combinations of affine inequalities over
    `batch`, `head`, `q_idx` and `kv_idx` (integer constants, `addi`, `subi`,
    `muli` by a constant, `index_cast`, `cmpi`, `andi`, `ori`, `xori` with
    true, boolean constants) on index or i64 values, and of floor quotients
    of never-negative affine forms by positive constants (`divui`, `divsi`,
    `floordivsi`), recorded as `#attn.div_sum_ge` and bounded per tile by
    interval arithmetic. On success it records the result
    as `mask_tile_formula = #attn.tile_formula<...>`. An affine function
    takes its extremes over a tile at the tile's corners, so the kernel
    classifies any tile of any sequence length exactly per inequality:
    tiles no pair of which is kept are never loaded, tiles whose every
    pair is kept skip the per-element mask. (Combinations are decided
    conservatively: a tile may be reported partial although it is empty.)

    Unsigned comparisons are accepted when both sides are non-negative for
    every non-negative index. A mask the pass cannot express (it reads a
    captured buffer, uses remainders, ...) gets no formula: every tile in the
    built-in mask's range is visited and masked per element.
  }];
  let dependentDialects = ["::mlir::attn::AttnDialect"];
}

def AttnDifferentiateMods : Pass<"attn-differentiate-mods", "::mlir::ModuleOp"> {
  let summary = "Derive the backward's functions from mask_mod and score_mod";
  let description = [{
    Prepares the user regions of each softmax `attn.kernel` for its
    backward. It copies `mask_mod` into `func.func @attn_mask_mod_full_N`
    and `score_mod` into `func.func @attn_score_mod_full_N` (whole: the
    backward evaluates a pair at a time, without the forward's split into
    row and diagonal functions), and derives from `score_mod` its
    vector-Jacobian product

    ```mlir
    func.func @attn_score_mod_vjp_N(%dy: f32, %s: f32, %b: index, %h: index,
        %q: index, %kv: index, <captures>..., <gradients>...) -> f32
    ```

    which returns dy * d score_mod / d s and adds dy * d score_mod / d v,
    with `memref.atomic_rmw addf`, into the gradient buffer of every value v
    read from a capture declared with `grad` (one `memref` argument per such
    capture, in declaration order, shaped as the capture), at the indices
    of the read. The kernel passes dy = dS', the gradient of the modified
    score. The names go to the kernel's `backward_mask_mod_fn`,
    `backward_score_mod_fn` and `backward_score_mod_vjp_fn`, which
    `attn-lower-mods` lowers to EmitC with the forward's functions.

    The derivative is reverse-mode over the region's single block: the
    function recomputes the region, then walks it backwards, accumulating
    each value's adjoint. Only values that depend on the score or on a
    learnable capture carry one. Derivatives: `arith.addf`, `subf`, `mulf`,
    `divf`, `negf`, `remf` (d/da = 1, d/db = -trunc(a / b)), `select` (to
    the chosen operand), `maximumf`, `minimumf`, `maxnumf`, `minnumf` (to
    the chosen operand; the first on a tie); `math.absf` (sign, 0 at 0),
    `exp`, `exp2`, `expm1`, `log`, `log2`, `log1p`, `sqrt`, `rsqrt`, `tanh`
    (1 - tanh^2 of the kernel's own tanh), `sin`, `cos`, `erf`, `powf` (the
    exponent's derivative only where the base is positive), `fma`,
    `copysign` (to the magnitude); `floor`, `ceil` and `round` have
    derivative 0, as comparisons do. Index and integer arithmetic carries
    no gradient. A value that carries one and reaches a float-to-integer
    conversion or a bitcast is an error at that operation: the gradient
    would silently be 0 through it. So is any other operation such a value
    reaches.

    A gradient buffer's only addition is marked by how its element varies
    over the pairs (q, kv) of one (batch, head), which the backward kernel
    exploits: `attn.step_invariant` where it does not (a per-head slope),
    `attn.per_diagonal` where only through q - kv (a relative-position or
    bucketed table). Index arithmetic from q and kv (`arith.addi`, `subi`,
    `muli` by a constant) is tracked as q a + kv b plus what the pair does
    not change, a function of q - kv where a = -b; any other operation
    varies as its most varying operand. `attn-lower-mods` lowers marked
    additions to `attn_dev::accumulateStepGradient` and
    `attn_dev::accumulateDiagonalGradient`.

    Kernels whose normalizer is not the softmax (linear attention and
    retention have no regions to differentiate) and kernels without user
    regions are left alone.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::func::FuncDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::memref::MemRefDialect"];
}

def AttnLowerMods : Pass<"attn-lower-mods", "::mlir::ModuleOp"> {
  let summary = "Lower mask_mod and score_mod regions to EmitC functions";
  let description = [{
    Moves each user region of an `attn.kernel` into an `emitc.func` in the
    module, named `attn_mask_mod_N` or `attn_score_mod_N` (N counts kernels;
    names from the spec never reach C++), with `__device__` and
    `__forceinline__` specifiers, and records its symbol in the kernel's
    `mask_mod_fn` / `score_mod_fn`. The conversion uses MLIR's arith, func
    and size_t type conversions to EmitC; `index` becomes `size_t`. math
    operations on f32 become calls to CUDA's single-precision functions
    (`math.tanh` uses the hardware's `tanh.approx.f32`, relative error about
    2^-11, below the bf16/f16 output precision); `memref.load` of a capture
    becomes `attn_dev::loadCapture`, which reads 0 outside the extents.
    The integer operations C has no operator for (`arith.floordivsi`,
    `arith.ceildivsi`, `math.absi`), and the truncating divisions
    (`arith.divsi`, `arith.remsi` on the operands viewed as signed: index
    values are `size_t`, whose `/` would divide unsigned; `arith.divui`,
    `arith.remui` as unsigned), call device helpers with the CPU
    interpreter's rules where MLIR or C leaves the result open (a zero
    divisor gives 0, the minimum by -1 wraps); `arith.remf`
    calls `fmodf`. Operations without a conversion are reported at their
    location. A division by a finite, nonzero f32 constant first becomes a
    multiplication by its reciprocal (rounded to f32), so `s / 50` and
    `s * 0.02` lower alike.

    A `mask_mod` is evaluated per pair, and 64-bit integer adds and
    compares take two or three GPU instructions each, so its index
    arithmetic first goes to 32 bits wherever integer range analysis proves
    that exact (MLIR's range-narrowing patterns). The analysis knows the
    region's arguments: batch and head are ints, q and kv at most
    `attn_abi::kMaxRegionPosition` (2^30 + 256: the runtime refuses
    sequences over `kMaxSeqlen` = 2^30 rows, and the kernel evaluates at
    most a tile past the end). An operation whose values all lie in
    [0, 2^31) narrows; otherwise a signed operation or compare narrows only
    when its values fit in 32 bits signed, an unsigned one only when they
    fit unsigned, and adds, subtractions, products and bitwise operations
    take either. Everything else stays in 64 bits.

    The kernel evaluates a region for every (query, key) pair it tests, so
    the pass splits each region by what its values depend on. A value that
    depends on neither the key nor the score (a slope read by head, the
    query's document, the query's position as f32) and that the rest uses
    becomes a row function `<name>_row_<i>(b, h, q, captures...)`, listed
    in `mask_mod_row_fns` / `score_mod_row_fns`; the kernel calls it once per
    query row of a work tile and passes the value to the region function as
    a trailing argument. The region function also takes kv as f32 right
    after kv, in place of the region's conversions of kv to f32
    (`(s|u)itofp` of `index_cast(ui)` to i32 or i64): the kernel converts
    once per tile and adds each key's column offset, exact below 2^24.

    Before that it takes two constant scalings out of `score_mod`, which the
    kernel applies without a per-pair instruction: a multiplication of the
    score by a finite constant that is the score's only use becomes
    `score_input_scale` (the kernel already multiplies each raw score by the
    softmax scale), and a final multiplication by a positive finite constant
    becomes `score_output_scale` (the softmax already multiplies each score
    by log2(e) before its exponential, and a positive factor keeps the row
    maximum). Soft-capping, `cap * tanh(s / cap)`, keeps only its `tanh`.

    Then it bounds what remains: a `tanh` (1), finite constants, constant
    multiples of bounded values and selections between bounded values and
    -inf give `score_bound`. The kernel runs the softmax of a bounded
    score_mod against a fixed base, with no running row maximum and no
    rescaling of the output, where the bound leaves room for it.

    The backward's functions (`attn-differentiate-mods`) lower whole, but
    for the staged values of `backward_score_mod_fn`: its values that read a
    capture and depend on q and kv only through d = q - kv (at most two,
    as the forward's) become functions `<name>_diag_<i>(b, h, d,
    captures...)` named in `backward_score_mod_diagonal_fns`, whatever the
    shared-memory plan. Each warp of the backward evaluates a step's
    diagonals once and hands the values to its pairs through shuffles
    (`templates/bwd/score_diagonals.cuh`), so a relative-position table or
    T5's buckets cost a shuffle per diagonal of a thread instead of a
    capture read (and T5's logarithm) per pair. The vector-Jacobian
    product keeps its own reads.
  }];
  let dependentDialects = ["::mlir::attn::AttnDialect",
                           "::mlir::emitc::EmitCDialect",
                           "::mlir::func::FuncDialect"];
}

#endif // ATTN_TRANSFORMS_PASSES_TD
