// Kernels without a backward kernel template, and illegal backward plans,
// are reported on the kernel by attn-tile's backward option.
// RUN: attn-opt --attn-tile=backward=true %s -split-input-file -verify-diagnostics

// expected-error @+1 {{has no backward: only the softmax normalizer has one (the linear family's is a later step)}}
attn.kernel @k problem = #attn.problem<q_heads = 8, kv_heads = 8, head_dim = 128, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention

