// The backward's overrides are checked against its own constraints.
// RUN: attn-opt --attn-tile="backward=true backward-tile-override=block_m=96" %s -verify-diagnostics

// expected-error @+1 {{backward plan is illegal: WGMMA shape: backward block_m (96) must be 64 or 128 (64 per consumer warpgroup)}}
attn.kernel @k problem = #attn.problem<q_heads = 8, kv_heads = 8, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
