// Head dim 256 in one consumer walks its query blocks once per 128 columns
// (two passes): its backward tests the mask_mod per step and walks no step
// list.
// RUN: attnc %s --backward --tile=consumer_warpgroups=1 --emit=metadata | FileCheck %s

// CHECK: backward 1
// CHECK-NEXT: step_list 0
attn.kernel @passes
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 256, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %keep = arith.cmpi sge, %q, %kv : index
      attn.yield %keep : i1
    }
