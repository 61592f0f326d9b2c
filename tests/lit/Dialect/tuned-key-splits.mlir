// tuned_key_splits: the short-query path's measured split counts, four
// integers per shape bucket (batch x q_heads, seqlen_q, seqlen_k, splits),
// as attn-tile copies them from the tuning database.
// RUN: attn-opt %s -split-input-file -verify-diagnostics | FileCheck %s

// CHECK-LABEL: attn.kernel @listed
// CHECK: attributes {tuned_key_splits = array<i64: 32, 1, 32768, 12, 256, 16, 8192, 0>}
attn.kernel @listed problem = #attn.problem<q_heads = 32, kv_heads = 8, head_dim = 128, element_type = bf16> mask = #attn.causal<bottom_right> normalizer = #attn.softmax
    attributes {tuned_key_splits = array<i64: 32, 1, 32768, 12, 256, 16, 8192, 0>}

// -----

// expected-error @+1 {{tuned_key_splits must hold quadruples (batch x q_heads, seqlen_q, seqlen_k, splits); got 3 integers}}
attn.kernel @short problem = #attn.problem<q_heads = 32, kv_heads = 8, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    attributes {tuned_key_splits = array<i64: 32, 1, 32768>}

// -----

// expected-error @+1 {{tuned_key_splits entry 1: the bucket's sizes must be powers of two, got 32, 1, 30000}}
attn.kernel @not_a_bucket problem = #attn.problem<q_heads = 32, kv_heads = 8, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    attributes {tuned_key_splits = array<i64: 32, 1, 32768, 4, 32, 1, 30000, 4>}

// -----

// expected-error @+1 {{tuned_key_splits entry 0: query length 128 is beyond the short-query path's 64}}
attn.kernel @long_queries problem = #attn.problem<q_heads = 32, kv_heads = 8, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    attributes {tuned_key_splits = array<i64: 32, 128, 32768, 4>}

// -----

// expected-error @+1 {{tuned_key_splits entry 0: 1025 splits; expected 0 (the forward kernel) to 1024}}
attn.kernel @too_many problem = #attn.problem<q_heads = 32, kv_heads = 8, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    attributes {tuned_key_splits = array<i64: 32, 1, 32768, 1025>}

// -----

// expected-error @+1 {{tuned_key_splits entry 0: -1 splits; expected 0 (the forward kernel) to 1024}}
attn.kernel @negative problem = #attn.problem<q_heads = 32, kv_heads = 8, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    attributes {tuned_key_splits = array<i64: 32, 1, 32768, -1>}

// -----

// expected-error @+1 {{tuned_key_splits lists the bucket of entry 1 twice}}
attn.kernel @twice problem = #attn.problem<q_heads = 32, kv_heads = 8, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    attributes {tuned_key_splits = array<i64: 32, 1, 32768, 4, 32, 1, 32768, 8>}

// -----

// expected-error @+1 {{has tuned_key_splits, but only softmax kernels have the short-query path}}
attn.kernel @linear problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention
    attributes {tuned_key_splits = array<i64: 16, 1, 4096, 4>}
