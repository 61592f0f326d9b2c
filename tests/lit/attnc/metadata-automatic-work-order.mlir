// Whether Kernel::run orders a kernel's work tiles by itself: only softmax
// kernels with a mask_mod, whose tiles' costs the default order does not
// foresee.
// RUN: attnc %s --kernel=masked --emit=metadata | FileCheck %s --check-prefix=MASKED
// RUN: attnc %s --kernel=causal --emit=metadata | FileCheck %s --check-prefix=CAUSAL
// RUN: attnc %s --kernel=scored --emit=metadata | FileCheck %s --check-prefix=SCORED
// RUN: attnc %s --kernel=retention --emit=metadata | FileCheck %s --check-prefix=RETENTION

// MASKED: automatic_work_order 1
attn.kernel @masked
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %global = arith.constant 64 : index
      %keep = arith.cmpi slt, %q, %global : index
      attn.yield %keep : i1
    }

// The built-in masks keep the default order, which starts causal's longest
// tiles first.
// CAUSAL: automatic_work_order 0
attn.kernel @causal
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right> normalizer = #attn.softmax

// A score_mod leaves the tiles' costs as the mask makes them.
// SCORED: automatic_work_order 0
attn.kernel @scored
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right> normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %k: index):
      %half = arith.constant 0.5 : f32
      %r = arith.mulf %s, %half : f32
      attn.yield %r : f32
    }

// RETENTION: automatic_work_order 0
attn.kernel @retention
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<top_left> normalizer = #attn.retention
