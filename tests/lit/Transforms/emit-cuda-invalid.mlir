// RUN: attn-opt --split-input-file --verify-diagnostics --attn-emit-cuda %s

// expected-error @below {{needs `tile` and `smem` plans: run attn-tile and attn-plan-smem first}}
attn.kernel @unplanned
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax

// -----

// expected-error @below {{has user regions that are not lowered: run attn-lower-mods first}}
attn.kernel @user_mask
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %keep = arith.cmpi ule, %kv, %q : index
      attn.yield %keep : i1
    }
