// Bad input: a non-zero exit and a diagnostic at file:line:col.
// RUN: not attnc %s 2>&1 | FileCheck %s --check-prefix=VERIFY
// RUN: not attnc %S/Inputs/syntax-error.mlir 2>&1 | FileCheck %s --check-prefix=SYNTAX
// RUN: not attnc %S/Inputs/two-kernels.mlir 2>&1 | FileCheck %s --check-prefix=TWO
// RUN: attnc %S/Inputs/two-kernels.mlir --kernel=second -o /dev/null
// RUN: not attnc %S/Inputs/two-kernels.mlir --kernel=third 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not attnc %S/Inputs/two-kernels.mlir --kernel=first --tile=block_m=96 2>&1 | FileCheck %s --check-prefix=TILE
// RUN: not attnc %S/Inputs/two-kernels.mlir --kernel=first --tile=block_n 2>&1 | FileCheck %s --check-prefix=MALFORMED
// RUN: not attnc %s --arch=sm_80 2>&1 | FileCheck %s --check-prefix=ARCH
// RUN: not attnc %S/does-not-exist.mlir 2>&1 | FileCheck %s --check-prefix=NOFILE

// VERIFY: errors.mlir:[[@LINE+2]]:{{[0-9]+}}: error: kv_heads (3) must divide q_heads (16)
attn.kernel @bad
    problem = #attn.problem<q_heads = 16, kv_heads = 3, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax

// SYNTAX: syntax-error.mlir:3:{{[0-9]+}}: error:
// TWO: the spec holds 2 kernels; choose one with --kernel=<name>
// MISSING: no attn.kernel named @third
// TILE: two-kernels.mlir:1:1: error: 'attn.kernel' op illegal tile plan for sm_90a
// MALFORMED: error:
// ARCH: attnc: error: unsupported --arch=sm_80
// NOFILE: attnc: {{.*}}does-not-exist.mlir
