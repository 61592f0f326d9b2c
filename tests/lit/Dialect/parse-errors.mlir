// Parse errors carry file:line:col locations.
// RUN: not attn-opt %s -split-input-file 2>&1 | FileCheck %s

attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf15> mask = #attn.no_mask normalizer = #attn.softmax
// CHECK: parse-errors.mlir:[[# @LINE - 1]]:99: error: unknown element_type 'bf15'; supported: bf16, f16

// -----

attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = 42> mask = #attn.no_mask normalizer = #attn.softmax
// CHECK: parse-errors.mlir:[[# @LINE - 1]]:99: error: expected an element_type (bf16 or f16)

// -----

attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
// CHECK: parse-errors.mlir:[[# @LINE - 1]]:39: error: #attn.problem is missing 'head_dim'

// -----

attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16, dtype = bf16> mask = #attn.no_mask normalizer = #attn.softmax
// CHECK: parse-errors.mlir:[[# @LINE - 1]]:105: error: unknown #attn.problem key 'dtype'; expected q_heads, kv_heads, head_dim, element_type or scale

// -----

attn.kernel @k problem = #attn.problem<q_heads = 16, q_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
// CHECK: parse-errors.mlir:[[# @LINE - 1]]:54: error: duplicate 'q_heads'

// -----

attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.causal<diagonal> normalizer = #attn.softmax
// CHECK: parse-errors.mlir:[[# @LINE - 1]]:125: error: expected ::mlir::attn::MaskAlignment to be one of: top_left, bottom_right

// -----

attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.sliding_window<right = 0> normalizer = #attn.softmax
// CHECK: parse-errors.mlir:[[# @LINE - 1]]:{{[0-9]+}}: error: struct is missing required parameter: left

// -----

attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> normalizer = #attn.softmax
// CHECK: parse-errors.mlir:[[# @LINE - 1]]:{{[0-9]+}}: error: custom op 'attn.kernel' expected 'mask'

// -----

attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax attributes {tile = #attn.tile<block_m = 128, block_n = 128>}
// CHECK: parse-errors.mlir:[[# @LINE - 1]]:{{[0-9]+}}: error: struct is missing required parameter: stages
