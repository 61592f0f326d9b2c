//===- Passes.td - attn planning passes --------------------*- tablegen -*-===//

#ifndef ATTN_TRANSFORMS_PASSES_TD
#define ATTN_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def AttnTile : Pass<"attn-tile"> {
  let summary = "Choose the sm_90a tile plan of each attn.kernel";
  let description = [{
    Records `tile = #attn.tile<...>` on every `attn.kernel` nested under the
    pass's operation. The default plan depends on the head dimension: one
    64-row WGMMA slice of Q per consumer warpgroup (two consumer
    warpgroups, so `block_m = 128`) and one producer warpgroup issuing TMA:

    | head_dim | block_m | block_n | stages |
    |----------|---------|---------|--------|
    | 64       | 128     | 128     | 3      |
    | 128      | 128     | 128     | 2      |
    | 256      | 128     | 64      | 2      |

    with `producer_registers = 24` and `consumer_registers = 240` (160 with
    three consumer warpgroups).

    A kernel that already has a `tile` keeps it unless `tile-override` is
    given. `tile-override` is a comma-separated `key=value` list over
    `block_m`, `block_n`, `stages`, `consumer_warpgroups`,
    `producer_warpgroups`, `consumer_registers`, `producer_registers`; the
    missing keys come from the default plan, and `consumer_warpgroups`
    follows `block_m` (and vice versa) when only one is given.

    Every plan is checked against the sm_90a constraints (WGMMA shapes,
    pipeline depth, warpgroups, register budget, shared-memory capacity); a
    violation is reported on the kernel and fails the pass.
  }];
  let options = [
    Option<"tileOverride", "tile-override", "std::string", /*default=*/"\"\"",
           "Comma-separated key=value tile settings that replace the "
           "heuristic's (e.g. block_m=64,block_n=64,stages=2)">,
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
    * `o_staging`: `block_m x head_dim` elements. When it fits beside the
      others it lives as long as `q`: the persistent kernel stores one work
      tile's O while the next tile's Q arrives. Otherwise it lives in the
      epilogue only and reuses the bytes of `q` (Q's last use is the last
      QKᵀ), and the next Q load waits for the store;
    * `barriers`: 8-byte mbarriers, two for Q and four per stage, ordered
      q_full, q_empty, k_full[s], v_full[s], k_empty[s], v_empty[s].

    Tiles (and each ring slot) are 1024-byte aligned with a 128-byte swizzle.
    Buffers are placed first-fit by offset; buffers whose lifetimes do not
    overlap may share bytes (recorded with `aliases`). The pass fails when
    the layout plus 1024 bytes of base-alignment slack exceeds the 232448
    bytes of shared memory a block may use on sm_90a.
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

    Kernels with user `mask_mod`/`score_mod` regions or a normalizer other
    than softmax are rejected with a diagnostic until their lowering lands.
  }];
  let dependentDialects = ["::mlir::attn::AttnDialect"];
}

#endif // ATTN_TRANSFORMS_PASSES_TD
