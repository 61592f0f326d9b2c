// A backward plan written in the spec (not by attn-tile) is checked before
// attn-plan-smem lays it out.
// RUN: attn-opt --attn-tile --attn-plan-smem %s -verify-diagnostics

// expected-error @+1 {{backward plan is illegal: pipeline: backward stages must be 1 to 4, got 0}}
attn.kernel @k problem = #attn.problem<q_heads = 8, kv_heads = 8, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    attributes {backward_tile = #attn.tile<block_m = 64, block_n = 128, stages = 0, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
