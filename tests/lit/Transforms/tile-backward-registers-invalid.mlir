// A backward plan may not ask for more registers than its launch allocates:
// 384 threads get 168 each (64512), so 32 + 2 x 240 (65536) would leave the
// consumers' setmaxnreg increase waiting forever.
// RUN: attn-opt --attn-tile="backward=true backward-tile-override=consumer_registers=240,producer_registers=32" %s -verify-diagnostics

// expected-error @+1 {{backward plan is illegal: register budget: 128 x (32 x 1 + 240 x 2) = 65536 registers per block, limit 64512 (what a launch of 384 threads allocates)}}
attn.kernel @k problem = #attn.problem<q_heads = 8, kv_heads = 8, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
