// The backward's overrides are checked against its own constraints.
// RUN: attn-opt --attn-tile="backward=true backward-tile-override=block_m=72" %s -verify-diagnostics

// expected-error @+1 {{backward plan is illegal: WGMMA shape: a backward block_m (72) that is not a multiple of 64 computes dQ transposed: a multiple of 16, with two consumer warpgroups at head dim 128}}
attn.kernel @k problem = #attn.problem<q_heads = 8, kv_heads = 8, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
