// Whether a backward module's main kernel walks a step list that its
// step-list kernel writes first: a mask_mod's backward in one pass over the
// head dim. The built-in masks' walks need none, and neither does a
// kernel with passes (metadata-step-list-passes.mlir).
// RUN: attnc %s --kernel=masked --backward --emit=metadata | FileCheck %s --check-prefix=MASKED
// RUN: attnc %s --kernel=masked --backward --emit=cuda | FileCheck %s --check-prefix=MASKED-CUDA
// RUN: attnc %s --kernel=causal --backward --emit=metadata | FileCheck %s --check-prefix=CAUSAL
// RUN: attnc %s --kernel=causal --backward --emit=cuda | FileCheck %s --check-prefix=CAUSAL-CUDA
// RUN: attnc %s --kernel=masked --emit=metadata | FileCheck %s --check-prefix=FORWARD

// MASKED: backward 1
// MASKED-NEXT: step_list 1
// MASKED-CUDA: #define ATTN_PLAN_STEP_LIST 1
// MASKED-CUDA: attn_bwd_step_list_kernel
// FORWARD: step_list 0
attn.kernel @masked
    problem = #attn.problem<q_heads = 16, kv_heads = 4, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %global = arith.constant 64 : index
      %keep = arith.cmpi slt, %q, %global : index
      attn.yield %keep : i1
    }

// CAUSAL: backward 1
// CAUSAL-NEXT: step_list 0
// CAUSAL-CUDA: #define ATTN_PLAN_STEP_LIST 0
attn.kernel @causal
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right> normalizer = #attn.softmax
