// attn-tune reports a malformed spec with its location before it looks for
// a GPU (the same message on a machine with or without one).
// RUN: not attn-tune %s --plot=none --tuning-db=none 2>&1 | FileCheck %s
// CHECK: tune-invalid-spec.mlir:[[@LINE+2]]:{{[0-9]+}}: error: kv_heads (3) must divide q_heads (16)
// CHECK-NOT: needs an sm_90 GPU
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 3, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
