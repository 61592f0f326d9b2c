// RUN: attn-opt --attn-plan-smem %s -split-input-file -verify-diagnostics

// expected-error @+1 {{'attn.kernel' op has no 'tile' plan; run attn-tile first}}
attn.kernel @untiled problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax

// -----

// A tile given by hand (attn-plan-smem does not re-check it) whose layout
// overflows: q 32768 + k 4 x 32768 + v 4 x 32768 = 294912 (O staging then
// reuses Q's bytes), then 18 barriers = 144 bytes: layout 295056, plus 1024
// of base-alignment slack = 296080.
// expected-error @+1 {{shared-memory capacity: the plan needs 296080 bytes (layout 295056 + 1024 base-alignment slack), limit 232448}}
attn.kernel @deep problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_m = 128, block_n = 128, stages = 4, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
