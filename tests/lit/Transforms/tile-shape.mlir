// attn-tile's heuristic with a known shape (tuning-shape, no database): an
// unmasked kernel of head dim 128 without a score_mod takes 128 x 160 tiles
// with one softmax chain from a key length of 2048; shorter keys, other
// head dims, masked kernels and score_mods keep the shape-free plan. A
// causal kernel of head dim 64 with at most 1024 keys takes 128 x 128
// tiles and three stages (two chains up to 512 keys); one of head dim 128
// with at least 8192 keys (with a score_mod too) 128 x 160 tiles, one
// chain, or 128 x 144 with four where a score_mod stages diagonals
// (mask_mods: tile-mask-mod.mlir). Kernels masked by
// a built-in mask alone (causal, sliding window) take a persistent grid
// below 16384 keys (and when the length is unknown).
// RUN: attn-opt --attn-tile="tuning-shape=2,8192" %s | FileCheck %s --check-prefixes=COMMON,WIDE,CAUSAL,CAUSAL-WIDE,WINDOW
// RUN: attn-opt --attn-tile="tuning-shape=1,300,2048" %s | FileCheck %s --check-prefixes=COMMON,WIDE,CAUSAL,CAUSAL-NARROW,WINDOW
// RUN: attn-opt --attn-tile="tuning-shape=1,4096,2047" %s | FileCheck %s --check-prefixes=COMMON,NARROW,CAUSAL,CAUSAL-NARROW,WINDOW
// RUN: attn-opt --attn-tile="tuning-shape=1,8191" %s | FileCheck %s --check-prefixes=COMMON,WIDE,CAUSAL,CAUSAL-NARROW,WINDOW
// RUN: attn-opt --attn-tile="tuning-shape=16,1024" %s | FileCheck %s --check-prefixes=COMMON,NARROW,MEDIUM,CAUSAL-NARROW,WINDOW
// RUN: attn-opt --attn-tile="tuning-shape=1,1025" %s | FileCheck %s --check-prefixes=COMMON,NARROW,CAUSAL,CAUSAL-NARROW,WINDOW
// RUN: attn-opt --attn-tile="tuning-shape=32,512" %s | FileCheck %s --check-prefixes=COMMON,NARROW,SHORT,CAUSAL-NARROW,WINDOW
// RUN: attn-opt --attn-tile="tuning-shape=4,4096,300" %s | FileCheck %s --check-prefixes=COMMON,NARROW,SHORT,CAUSAL-NARROW,WINDOW
// RUN: attn-opt --attn-tile %s | FileCheck %s --check-prefixes=COMMON,NARROW,CAUSAL,CAUSAL-NARROW,WINDOW
// RUN: attn-opt --attn-tile="tuning-shape=1,16384" %s | FileCheck %s --check-prefixes=COMMON,WIDE,LONG

// WIDE-LABEL: attn.kernel @full_hd128
// WIDE:       tile = #attn.tile<block_m = 128, block_n = 160, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, persistent_blocks_per_sm = 1>
// NARROW-LABEL: attn.kernel @full_hd128
// NARROW:     tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, persistent_blocks_per_sm = 1>
attn.kernel @full_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax

// COMMON-LABEL: attn.kernel @causal_hd128
// CAUSAL-NARROW: tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, persistent_blocks_per_sm = 1>
// CAUSAL-WIDE:   tile = #attn.tile<block_m = 128, block_n = 160, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, persistent_blocks_per_sm = 1>
// LONG:          tile = #attn.tile<block_m = 128, block_n = 160, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>
attn.kernel @causal_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 4, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.softmax

// COMMON-LABEL: attn.kernel @full_hd64
// COMMON:     tile = #attn.tile<block_m = 192, block_n = 128, stages = 2, consumer_warpgroups = 3, producer_warpgroups = 1, consumer_registers = 160, producer_registers = 24, persistent_blocks_per_sm = 1>
attn.kernel @full_hd64
    problem = #attn.problem<q_heads = 32, kv_heads = 32, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax

// COMMON-LABEL: attn.kernel @full_hd256
// COMMON:     tile = #attn.tile<block_m = 128, block_n = 80, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, persistent_blocks_per_sm = 1>
attn.kernel @full_hd256
    problem = #attn.problem<q_heads = 8, kv_heads = 8, head_dim = 256, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax

// A bf16 kernel whose bounded score_mod lets the softmax run on a fixed base
// (soft-capping) takes 192 x 64 tiles, three consumers, four stages and two
// chains at any length; so it does once attn-lower-mods has moved the
// region into a function and recorded score_bound and score_output_scale.
// RUN: attn-opt --attn-lower-mods %s | attn-opt --attn-tile | FileCheck %s --check-prefix=LOWERED
// COMMON-LABEL: attn.kernel @softcap_hd128
// COMMON:     tile = #attn.tile<block_m = 192, block_n = 64, stages = 4, consumer_warpgroups = 3, producer_warpgroups = 1, consumer_registers = 160, producer_registers = 24, softmax_chains = 2, persistent_blocks_per_sm = 1>
// LOWERED-LABEL: attn.kernel @softcap_hd128
// LOWERED:    score_bound = 1.000000e+00 : f32
// LOWERED-SAME: score_output_scale = 5.000000e+01 : f32
// LOWERED-SAME: tile = #attn.tile<block_m = 192, block_n = 64, stages = 4, consumer_warpgroups = 3, producer_warpgroups = 1, consumer_registers = 160, producer_registers = 24, softmax_chains = 2, persistent_blocks_per_sm = 1>
attn.kernel @softcap_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %inverse = arith.constant 0.02 : f32
      %cap = arith.constant 50.0 : f32
      %scaled = arith.mulf %s, %inverse : f32
      %squashed = math.tanh %scaled : f32
      %capped = arith.mulf %squashed, %cap : f32
      attn.yield %capped : f32
    }

// In f16 (which keeps the running maximum), or beyond a range of 2^80, a
// score_mod keeps the plan of 128 keys (not measured with 160; a staged
// diagonal would not fit beside 160-key stages).
// COMMON-LABEL: attn.kernel @softcap_f16_hd128
// COMMON:     tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, softmax_chains = 4, persistent_blocks_per_sm = 1>
// LOWERED-LABEL: attn.kernel @softcap_f16_hd128
// LOWERED:    tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, softmax_chains = 4, persistent_blocks_per_sm = 1>
attn.kernel @softcap_f16_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = f16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %inverse = arith.constant 0.02 : f32
      %scaled = arith.mulf %s, %inverse : f32
      %squashed = math.tanh %scaled : f32
      attn.yield %squashed : f32
    }
// COMMON-LABEL: attn.kernel @wide_cap_hd128
// COMMON:     tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, softmax_chains = 4, persistent_blocks_per_sm = 1>
// LOWERED-LABEL: attn.kernel @wide_cap_hd128
// LOWERED:    score_bound = 1.000000e+00 : f32
// LOWERED-SAME: score_output_scale = 1.000000e+02 : f32
// LOWERED-SAME: tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, softmax_chains = 4, persistent_blocks_per_sm = 1>
attn.kernel @wide_cap_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %inverse = arith.constant 0.01 : f32
      %cap = arith.constant 100.0 : f32
      %scaled = arith.mulf %s, %inverse : f32
      %squashed = math.tanh %scaled : f32
      %capped = arith.mulf %squashed, %cap : f32
      attn.yield %capped : f32
    }

// A causal kernel with an unbounded score_mod (a distance bias) takes the
// causal plan: 160-key tiles with one chain from 8192 keys.
// COMMON-LABEL: attn.kernel @causal_bias_hd128
// CAUSAL-NARROW: tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, softmax_chains = 4, persistent_blocks_per_sm = 1>
// CAUSAL-WIDE:   tile = #attn.tile<block_m = 128, block_n = 160, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, persistent_blocks_per_sm = 1>
// LONG:          tile = #attn.tile<block_m = 128, block_n = 160, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>
attn.kernel @causal_bias_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %slope = arith.constant 0.0625 : f32
      %qi = arith.index_cast %q : index to i64
      %ki = arith.index_cast %kv : index to i64
      %d = arith.subi %ki, %qi : i64
      %df = arith.sitofp %d : i64 to f32
      %bias = arith.mulf %df, %slope : f32
      %biased = arith.addf %s, %bias : f32
      attn.yield %biased : f32
    }

// CAUSAL-LABEL: attn.kernel @causal_hd64
// CAUSAL:       tile = #attn.tile<block_m = 192, block_n = 128, stages = 2, consumer_warpgroups = 3, producer_warpgroups = 1, consumer_registers = 160, producer_registers = 24, persistent_blocks_per_sm = 1>}
// LONG-LABEL:   attn.kernel @causal_hd64
// LONG:         tile = #attn.tile<block_m = 192, block_n = 128, stages = 2, consumer_warpgroups = 3, producer_warpgroups = 1, consumer_registers = 160, producer_registers = 24>}
// SHORT-LABEL:  attn.kernel @causal_hd64
// SHORT:        tile = #attn.tile<block_m = 128, block_n = 128, stages = 3, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, softmax_chains = 2, persistent_blocks_per_sm = 1>}
// MEDIUM-LABEL: attn.kernel @causal_hd64
// MEDIUM:       tile = #attn.tile<block_m = 128, block_n = 128, stages = 3, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, persistent_blocks_per_sm = 1>}
attn.kernel @causal_hd64
    problem = #attn.problem<q_heads = 32, kv_heads = 32, head_dim = 64, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.softmax

// A window keeps the tiles and stages at 512 keys; its grid is persistent
// below 16384 keys.
// COMMON-LABEL: attn.kernel @window_hd64
// WINDOW:       tile = #attn.tile<block_m = 192, block_n = 128, stages = 2, consumer_warpgroups = 3, producer_warpgroups = 1, consumer_registers = 160, producer_registers = 24, persistent_blocks_per_sm = 1>}
// LONG:         tile = #attn.tile<block_m = 192, block_n = 128, stages = 2, consumer_warpgroups = 3, producer_warpgroups = 1, consumer_registers = 160, producer_registers = 24>}
attn.kernel @window_hd64
    problem = #attn.problem<q_heads = 32, kv_heads = 32, head_dim = 64, element_type = bf16>
    mask = #attn.sliding_window<left = 256, right = 0>
    normalizer = #attn.softmax

// Staged score_mod diagonals (a table read by q - kv) under the causal mask
// take 160-key tiles with two chains from 8192 keys; diagonals that compute
// a logarithm (T5's buckets) 144-key tiles with four.
// COMMON-LABEL: attn.kernel @relative_table_hd128
// CAUSAL-WIDE:  tile = #attn.tile<block_m = 128, block_n = 160, stages = 2
// CAUSAL-WIDE-SAME: softmax_chains = 2, persistent_blocks_per_sm = 1>
attn.kernel @relative_table_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [q_heads, ?]>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?x?xf32>):
      %distance = arith.subi %q, %kv : index
      %value = memref.load %bias[%h, %distance] : memref<?x?xf32>
      %biased = arith.addf %s, %value : f32
      attn.yield %biased : f32
    }

// COMMON-LABEL: attn.kernel @log_buckets_hd128
// CAUSAL-WIDE:  tile = #attn.tile<block_m = 128, block_n = 144, stages = 2
// CAUSAL-WIDE-SAME: softmax_chains = 4, persistent_blocks_per_sm = 1>
attn.kernel @log_buckets_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [q_heads, 32]>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?x?xf32>):
      %one = arith.constant 1.0 : f32
      %last = arith.constant 31 : i32
      %distance = arith.subi %q, %kv : index
      %distance_i = arith.index_cast %distance : index to i32
      %distance_f = arith.sitofp %distance_i : i32 to f32
      %shifted = arith.addf %distance_f, %one : f32
      %log = math.log %shifted : f32
      %bucket_i = arith.fptosi %log : f32 to i32
      %capped = arith.minsi %bucket_i, %last : i32
      %bucket = arith.index_cast %capped : i32 to index
      %value = memref.load %bias[%h, %bucket] : memref<?x?xf32>
      %biased = arith.addf %s, %value : f32
      attn.yield %biased : f32
    }

// A table indexed by |q - kv| or a distance divided by a constant computes
// no transcendental: 160 keys and two chains.
// COMMON-LABEL: attn.kernel @symmetric_table_hd128
// CAUSAL-WIDE:  tile = #attn.tile<block_m = 128, block_n = 160, stages = 2
// CAUSAL-WIDE-SAME: softmax_chains = 2, persistent_blocks_per_sm = 1>
attn.kernel @symmetric_table_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [q_heads, ?]>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?x?xf32>):
      %eight = arith.constant 8.0 : f32
      %distance = arith.subi %q, %kv : index
      %distance_i = arith.index_cast %distance : index to i32
      %magnitude = math.absi %distance_i : i32
      %row = arith.index_cast %magnitude : i32 to index
      %value = memref.load %bias[%h, %row] : memref<?x?xf32>
      %scaled = arith.divf %value, %eight : f32
      %biased = arith.addf %s, %scaled : f32
      attn.yield %biased : f32
    }
