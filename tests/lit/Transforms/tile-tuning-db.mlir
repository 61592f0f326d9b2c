// attn-tile consults a tuning database (tuning-db, tuning-shape, arch) and
// falls back to its heuristic plan when the kernel has no usable record.
// The positive path needs the kernel's tuning hash; the unit test
// unit.tuning_compiler covers it.

// RUN: rm -rf %t && mkdir -p %t

// A missing database: the heuristic, silently (the shape's: 160-key tiles
// for this causal kernel at 8192 keys).
// RUN: attn-opt --attn-tile="tuning-db=%t/missing.tsv" %s 2>&1 | FileCheck %s --check-prefixes=CHECK,NARROW
// RUN: attn-opt --attn-tile="tuning-db=%t/missing.tsv tuning-shape=2,8192" %s 2>&1 | FileCheck %s --check-prefixes=CHECK,WIDE
// RUN: attn-opt --attn-tile="tuning-db=%t/missing.tsv tuning-shape=1,300,517 arch=sm_90a" %s 2>&1 | FileCheck %s --check-prefixes=CHECK,NARROW

// A database whose only well-formed record is another spec's (in this
// kernel's bucket, with a legal plan that differs from the heuristic's) and
// a malformed line: the heuristic, silently.
// RUN: printf '# tuning database 1: spec_hash arch bucket config milliseconds tflops device unix_seconds\n' > %t/other.tsv
// RUN: printf 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\tsm_90a\tbh32_q8192_k8192\tblock_m=128,block_n=64,stages=2,consumer_warpgroups=2,producer_warpgroups=1,consumer_registers=240,producer_registers=24,softmax_chains=1,persistent_blocks_per_sm=0\t1.5\t600\tNVIDIA H100\t1700000000\n' >> %t/other.tsv
// RUN: printf 'garbage line\n' >> %t/other.tsv
// RUN: attn-opt --attn-tile="tuning-db=%t/other.tsv tuning-shape=2,8192" %s 2>&1 | FileCheck %s --check-prefixes=CHECK,WIDE
// RUN: attn-opt --attn-tile="tuning-db=%t/other.tsv" %s 2>&1 | FileCheck %s --check-prefixes=CHECK,NARROW

// A tile override still applies over the heuristic.
// RUN: attn-opt --attn-tile="tuning-db=%t/other.tsv tile-override=stages=3" %s | FileCheck %s --check-prefix=OVERRIDE
// OVERRIDE: tile = #attn.tile<block_m = 128, block_n = 128, stages = 3, consumer_warpgroups = 2,

// CHECK-NOT:  warning
// CHECK-LABEL: attn.kernel @hd128
// NARROW:     tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, persistent_blocks_per_sm = 1>
// WIDE:       tile = #attn.tile<block_m = 128, block_n = 160, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, persistent_blocks_per_sm = 1>
// CHECK-NOT:  warning

// An unreadable database (a directory) is a warning on the kernel; the
// heuristic plan is used.
// RUN: attn-opt --attn-tile="tuning-db=%t" %s 2>&1 | FileCheck %s --check-prefix=UNREADABLE
// UNREADABLE: tile-tuning-db.mlir:[[# @LINE + 12]]:1: warning: tuning database '{{.*}}': cannot read: {{.*}}; using the heuristic plan
// UNREADABLE: tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, persistent_blocks_per_sm = 1>

// A malformed tuning-shape fails the pass at the kernel, with or without a
// database.
// RUN: not attn-opt --attn-tile="tuning-db=%t/other.tsv tuning-shape=abc" %s 2>&1 | FileCheck %s --check-prefix=BADSHAPE -DSHAPE=abc
// RUN: not attn-opt --attn-tile="tuning-shape=abc" %s 2>&1 | FileCheck %s --check-prefix=BADSHAPE -DSHAPE=abc
// RUN: not attn-opt --attn-tile="tuning-db=%t/missing.tsv tuning-shape=0,5" %s 2>&1 | FileCheck %s --check-prefix=BADSHAPE -DSHAPE=0,5
// RUN: not attn-opt --attn-tile="tuning-db=%t/missing.tsv tuning-shape=1,2,3,4" %s 2>&1 | FileCheck %s --check-prefix=BADSHAPE -DSHAPE=1,2,3,4
// BADSHAPE: tile-tuning-db.mlir:[[# @LINE + 3]]:1: error: 'attn.kernel' op invalid tuning-shape: expected 'B,S' or 'B,Sq,Sk' with positive integers, got '[[SHAPE]]'
// BADSHAPE-NOT: tile = #attn.tile

attn.kernel @hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = f16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.softmax
