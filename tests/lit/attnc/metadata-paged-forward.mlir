// The forward kernel reads paged KV caches only when compiled for them
// (--paged-kv): the emitted plan's kPagedKv, and the launch metadata that
// tells the runtime it may send paged calls there.
// RUN: attnc %s --emit=metadata | FileCheck %s --check-prefix=DEFAULT
// RUN: attnc %s --paged-kv --emit=metadata | FileCheck %s --check-prefix=PAGED
// RUN: attnc %s --emit=cuda | FileCheck %s --check-prefix=DEFAULT-CUDA
// RUN: attnc %s --paged-kv --emit=cuda | FileCheck %s --check-prefix=PAGED-CUDA

// DEFAULT: paged_forward 0
// PAGED: paged_forward 1
// DEFAULT-CUDA: constexpr bool kPagedKv = false;
// PAGED-CUDA: constexpr bool kPagedKv = true;
attn.kernel @serve
    problem = #attn.problem<q_heads = 32, kv_heads = 8, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right> normalizer = #attn.softmax
