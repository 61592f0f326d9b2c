// attn-tile's heuristic for mask_mod kernels at known shapes: the grid
// (persistent or the hardware's dispatch) and, for a mask_mod that keeps
// the causal half-plane, the causal mask's wide tiles.
// RUN: attn-opt --attn-tile="tuning-shape=2,8192" %s | FileCheck %s --check-prefixes=CHECK,LONG
// RUN: attn-opt --attn-tile="tuning-shape=8,1024" %s | FileCheck %s --check-prefixes=CHECK,SHORT
// RUN: attn-opt --attn-tile %s | FileCheck %s --check-prefixes=CHECK,UNKNOWN
// RUN: attn-opt --attn-tile="tuning-shape=1,16384" %s | FileCheck %s --check-prefixes=CHECK,HUGE

// kv <= q or kv < 2048 keeps the causal half-plane: planned as the causal
// mask from 8192 keys (128 x 160, two chains, persistent); up to 1024 keys
// persistent, as every mask_mod there.
// CHECK-LABEL: attn.kernel @prefix_lm
// LONG:    tile = #attn.tile<block_m = 128, block_n = 160, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, softmax_chains = 2, persistent_blocks_per_sm = 1>}
// SHORT:   tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, softmax_chains = 4, persistent_blocks_per_sm = 1>}
// UNKNOWN: tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, softmax_chains = 4>}
// From 16384 keys, as the causal mask, one block per work tile.
// HUGE:    tile = #attn.tile<block_m = 128, block_n = 160, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, softmax_chains = 2>}
attn.kernel @prefix_lm
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %prefix = arith.constant 2048 : index
      %causal = arith.cmpi uge, %q, %kv : index
      %in_prefix = arith.cmpi ult, %kv, %prefix : index
      %keep = arith.ori %causal, %in_prefix : i1
      attn.yield %keep : i1
    }

// A prefix and a first token seen by every row (an any_of nested in an
// any_of) still keeps the causal half-plane.
// CHECK-LABEL: attn.kernel @prefix_lm_with_first_token
// LONG:    tile = #attn.tile<block_m = 128, block_n = 160, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, softmax_chains = 2, persistent_blocks_per_sm = 1>}
attn.kernel @prefix_lm_with_first_token
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %zero = arith.constant 0 : index
      %prefix = arith.constant 2048 : index
      %causal = arith.cmpi uge, %q, %kv : index
      %in_prefix = arith.cmpi ult, %kv, %prefix : index
      %first = arith.cmpi eq, %kv, %zero : index
      %seen = arith.ori %causal, %in_prefix : i1
      %keep = arith.ori %seen, %first : i1
      attn.yield %keep : i1
    }

// The same mask_mod under a sliding window: the window decides the tiles,
// and it is planned as one (four chains, 128 keys).
// CHECK-LABEL: attn.kernel @prefix_lm_in_window
// LONG:    tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, softmax_chains = 4>}
attn.kernel @prefix_lm_in_window
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.sliding_window<left = 256, right = 0>
    normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %prefix = arith.constant 2048 : index
      %causal = arith.cmpi uge, %q, %kv : index
      %in_prefix = arith.cmpi ult, %kv, %prefix : index
      %keep = arith.ori %causal, %in_prefix : i1
      attn.yield %keep : i1
    }

// A band around the diagonal keeps no half-plane: one block per work tile
// from 8192 keys and when the length is unknown.
// CHECK-LABEL: attn.kernel @band
// LONG:    tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, softmax_chains = 4>}
// SHORT:   tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, softmax_chains = 4, persistent_blocks_per_sm = 1>}
// UNKNOWN: tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, softmax_chains = 4>}
attn.kernel @band
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %width = arith.constant 256 : index
      %ahead = arith.addi %q, %width : index
      %behind = arith.addi %kv, %width : index
      %before = arith.cmpi ule, %kv, %ahead : index
      %after = arith.cmpi ule, %q, %behind : index
      %keep = arith.andi %before, %after : i1
      attn.yield %keep : i1
    }

// Chunks of 1024 keys under the causal mask, classified: persistent below
// 16384 keys, as the causal mask (each work tile visits at most eight key
// tiles).
// CHECK-LABEL: attn.kernel @chunked_local
// LONG:    tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, softmax_chains = 4, persistent_blocks_per_sm = 1>}
// HUGE:    tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, softmax_chains = 4>}
// UNKNOWN: tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, softmax_chains = 4, persistent_blocks_per_sm = 1>}
attn.kernel @chunked_local
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %chunk = arith.constant 1024 : index
      %q_chunk = arith.divui %q, %chunk : index
      %kv_chunk = arith.divui %kv, %chunk : index
      %same = arith.cmpi eq, %q_chunk, %kv_chunk : index
      attn.yield %same : i1
    }

// Document ids read from a buffer (stored key bits) under the causal mask:
// persistent only up to 1024 keys.
// CHECK-LABEL: attn.kernel @document
// LONG:    tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, softmax_chains = 4>}
// SHORT:   tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, softmax_chains = 4, persistent_blocks_per_sm = 1>}
// UNKNOWN: tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, softmax_chains = 4>}
attn.kernel @document
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.softmax
    captures = [#attn.capture<"document", i32, [batch, seqlen_k]>]
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index, %document: memref<?x?xi32>):
      %dq = memref.load %document[%b, %q] : memref<?x?xi32>
      %dk = memref.load %document[%b, %kv] : memref<?x?xi32>
      %same = arith.cmpi eq, %dq, %dk : i32
      attn.yield %same : i1
    }
