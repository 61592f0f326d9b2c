// Kernels without a backward kernel template, and illegal backward plans,
// are reported on the kernel by attn-tile's backward option.
// RUN: attn-opt --attn-tile=backward=true %s -split-input-file -verify-diagnostics

// expected-error @+1 {{has no backward: only the softmax normalizer has one (the linear family's is a later step)}}
attn.kernel @k problem = #attn.problem<q_heads = 8, kv_heads = 8, head_dim = 128, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention

// -----

// expected-error @+1 {{has no backward: the compiler does not differentiate score_mod yet}}
attn.kernel @k problem = #attn.problem<q_heads = 8, kv_heads = 8, head_dim = 128, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      attn.yield %s : f32
    }

// -----

// expected-error @+1 {{has no backward: a mask_mod's backward is not supported yet (built-in masks are)}}
attn.kernel @k problem = #attn.problem<q_heads = 8, kv_heads = 8, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %keep = arith.cmpi ule, %kv, %q : index
      attn.yield %keep : i1
    }
