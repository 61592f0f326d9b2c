// A tile plan already on the op is checked against the sm_90a constraints;
// each violation names the constraint.
// RUN: attn-opt --attn-tile %s -split-input-file -verify-diagnostics

// One consumer warpgroup computes 64 rows, so block_m 128 needs two.
// expected-error @+1 {{illegal tile plan for sm_90a: WGMMA shape: block_m (128) must equal 64 x consumer_warpgroups (64)}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}

// -----

// block_n is the N of the QK^T WGMMA: a multiple of 16.
// expected-error @+1 {{illegal tile plan for sm_90a: WGMMA shape: block_n (72) must be a multiple of 16 in [16, 256] (the N of the QK^T WGMMA)}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_n = 72, block_m = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}

// -----

// ... and at most 256.
// expected-error @+1 {{illegal tile plan for sm_90a: WGMMA shape: block_n (272) must be a multiple of 16 in [16, 256] (the N of the QK^T WGMMA)}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_m = 128, block_n = 272, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}

// -----

// expected-error @+1 {{illegal tile plan for sm_90a: pipeline: stages (9) must be in [1, 8]}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_m = 128, block_n = 128, stages = 9, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}

// -----

// expected-error @+1 {{illegal tile plan for sm_90a: pipeline: stages (0) must be in [1, 8]}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_m = 128, block_n = 128, stages = 0, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}

// -----

// expected-error @+1 {{illegal tile plan for sm_90a: warpgroups: consumer_warpgroups (4) must be in [1, 3]}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_m = 256, block_n = 64, stages = 2, consumer_warpgroups = 4, producer_warpgroups = 1, consumer_registers = 120, producer_registers = 24>}

// -----

// expected-error @+1 {{illegal tile plan for sm_90a: warpgroups: producer_warpgroups (2) must be 1}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 2, consumer_registers = 232, producer_registers = 24>}

// -----

// setmaxnreg takes multiples of 8 in [24, 256].
// expected-error @+1 {{illegal tile plan for sm_90a: register budget: consumer_registers (244) must be a multiple of 8 in [24, 256] (setmaxnreg)}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 244, producer_registers = 24>}

// -----

// expected-error @+1 {{illegal tile plan for sm_90a: register budget: producer_registers (16) must be a multiple of 8 in [24, 256] (setmaxnreg)}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 16>}

// -----

// Three consumer warpgroups at 240 registers: 128 x (24 + 3 x 240) = 95232 > 65536.
// expected-error @+1 {{illegal tile plan for sm_90a: register budget: 128 x (24 x 1 + 240 x 3) = 95232 registers per block, limit 65536 (what a launch of 512 threads allocates)}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_m = 192, block_n = 64, stages = 2, consumer_warpgroups = 3, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}

// -----

// 128 x (32 + 2 x 240) = 65536 fits the register file, but a launch of 384
// threads allocates 168 registers each, 64512 in all: setmaxnreg cannot
// hand out more than that.
// expected-error @+1 {{illegal tile plan for sm_90a: register budget: 128 x (32 x 1 + 240 x 2) = 65536 registers per block, limit 64512 (what a launch of 384 threads allocates)}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 32>}

// -----

// Accumulators: 256/2 (O) + 128/2 (S) + 128/4 (P) + 32 + (256-128)/8 = 272 > 240.
// expected-error @+1 {{illegal tile plan for sm_90a: register budget: head_dim 256 with block_n 128 needs ~272 registers per consumer thread, budget 240}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 256, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}

// -----

// 128 + 48 + 24 + 32 + 16 = 248 > 240: ptxas spills this plan.
// expected-error @+1 {{illegal tile plan for sm_90a: register budget: head_dim 256 with block_n 96 needs ~248 registers per consumer thread, budget 240}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 256, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_m = 128, block_n = 96, stages = 1, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}

// -----

// Three consumer warpgroups at 160 registers cannot hold head_dim 128 x block_n 128
// (64 + 64 + 32 + 32 = 192).
// expected-error @+1 {{illegal tile plan for sm_90a: register budget: head_dim 128 with block_n 128 needs ~192 registers per consumer thread, budget 160}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_m = 192, block_n = 128, stages = 2, consumer_warpgroups = 3, producer_warpgroups = 1, consumer_registers = 160, producer_registers = 24>}

// -----

// Shared memory: Q 128x128x2 = 32768, 4 stages x (K + V) = 4 x 65536 = 262144,
// 18 barriers = 144, slack 1024: 296080 > 232448.
// expected-error @+1 {{illegal tile plan for sm_90a: shared-memory capacity: block_m 128, block_n 128, stages 4, head_dim 128 needs 296080 bytes, limit 232448}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_m = 128, block_n = 128, stages = 4, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}

// -----

// head_dim 256, 3 stages: 65536 + 3 x 65536 + 112 + 1024 = 263280 > 232448.
// expected-error @+1 {{illegal tile plan for sm_90a: shared-memory capacity: block_m 128, block_n 64, stages 3, head_dim 256 needs 263280 bytes, limit 232448}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 256, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_m = 128, block_n = 64, stages = 3, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
