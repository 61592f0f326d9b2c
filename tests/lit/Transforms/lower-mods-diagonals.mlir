// Values of score_mod that read a capture and depend on q and kv only
// through d = q - kv get a `score_diagonals` buffer in the shared-memory
// plan (per consumer warpgroup, two windows of block_n + 64 words per value
// where they fit, else one), and
// attn-lower-mods moves them into functions of (b, h, d, captures...) with q
// replaced by d and kv by 0; the score function takes their values after the
// captures. Other reads stay per pair (or per row).
// RUN: attn-opt --attn-plan --attn-lower-mods %s | FileCheck %s

// A relative-position table: bias[h, q - kv + 8191].
// CHECK-LABEL: emitc.func @attn_score_mod_0_diag_0(
// CHECK-SAME:      %{{.*}}: !emitc.size_t, %[[H:.*]]: !emitc.size_t, %[[D:.*]]: !emitc.size_t, %[[BIAS:.*]]: !emitc.opaque<"attn_dev::Capture<float, 2>">) -> f32
// CHECK:         %[[OFFSET:.*]] = "emitc.constant"() <{value = 8191 : {{.*}}}>
// CHECK:         %[[COLUMN:.*]] = add %[[D]], %[[OFFSET]]
// CHECK:         %[[VALUE:.*]] = call_opaque "attn_dev::loadCapture"(%[[BIAS]], %[[H]], %[[COLUMN]])
// CHECK:         return %[[VALUE]] : f32
// CHECK-LABEL: emitc.func @attn_score_mod_0(
// CHECK-SAME:      %[[S:[^:]*]]: f32, %{{.*}}: !emitc.size_t, %{{.*}}: !emitc.size_t, %{{.*}}: !emitc.size_t, %{{.*}}: !emitc.size_t, %{{.*}}: f32, %{{.*}}: !emitc.opaque<"attn_dev::Capture<float, 2>">, %[[STAGED:.*]]: f32) -> f32
// CHECK-NOT:     loadCapture
// CHECK:         %[[SUM:.*]] = add %[[S]], %[[STAGED]]
// CHECK-NEXT:    return %[[SUM]]
// CHECK-LABEL: attn.kernel @relpos
// CHECK:           score_mod_diagonal_fns = [@attn_score_mod_0_diag_0], score_mod_fn = @attn_score_mod_0
// CHECK-SAME:      #attn.buffer<"score_diagonals", offset = {{[0-9]+}}, size = 3072, align = 16, swizzle = 0>
attn.kernel @relpos
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right> normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [q_heads, ?]>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?x?xf32>):
      %offset = arith.constant 8191 : index
      %shifted = arith.addi %q, %offset : index
      %column = arith.subi %shifted, %kv : index
      %value = memref.load %bias[%h, %column] : memref<?x?xf32>
      %biased = arith.addf %s, %value : f32
      attn.yield %biased : f32
    }

// Two staged values, in the body's order: a table read scaled by a per-head
// factor (staged after the scaling, which is a function of d too), and a
// read through a bucket table (the i32 bucket and its bias are one value).
// The factors of q and kv may be any opposite pair: 3 (q - kv) here.
// CHECK-LABEL: emitc.func @attn_score_mod_1_diag_0(
// CHECK-SAME:      %{{.*}}: !emitc.size_t, %[[H:.*]]: !emitc.size_t, %[[D:.*]]: !emitc.size_t, %[[BIAS:[^:]*]]: !emitc.opaque<"attn_dev::Capture<float, 2>">, %[[SCALE:[^:]*]]: !emitc.opaque<"attn_dev::Capture<float, 1>">, %{{.*}}: !emitc.opaque<"attn_dev::Capture<int, 1>">, %{{.*}}: !emitc.opaque<"attn_dev::Capture<float, 1>">) -> f32
// CHECK-DAG:     call_opaque "attn_dev::loadCapture"(%[[BIAS]], %[[H]], %{{.*}})
// CHECK-DAG:     call_opaque "attn_dev::loadCapture"(%[[SCALE]], %[[H]])
// CHECK:         mul
// CHECK-LABEL: emitc.func @attn_score_mod_1_diag_1(
// CHECK-SAME:      %{{[^:]*}}: !emitc.size_t, %{{[^:]*}}: !emitc.size_t, %[[D:[^:]*]]: !emitc.size_t, %{{.*}}: !emitc.opaque<"attn_dev::Capture<float, 2>">, %{{.*}}: !emitc.opaque<"attn_dev::Capture<float, 1>">, %[[BUCKET:[^:]*]]: !emitc.opaque<"attn_dev::Capture<int, 1>">, %[[BUCKETBIAS:[^:]*]]: !emitc.opaque<"attn_dev::Capture<float, 1>">) -> f32
// CHECK:         %[[THREE:.*]] = "emitc.constant"() <{value = 3 : {{.*}}}>
// CHECK:         mul %[[D]], %[[THREE]]
// CHECK:         call_opaque "attn_dev::loadCapture"(%[[BUCKET]], %{{.*}})
// CHECK:         call_opaque "attn_dev::loadCapture"(%[[BUCKETBIAS]], %{{.*}})
// CHECK-LABEL: emitc.func @attn_score_mod_1(
// CHECK-SAME:      %[[S:[^:]*]]: f32, {{.*}}, %[[FIRST:[^:]*]]: f32, %[[SECOND:[^:]*]]: f32) -> f32
// CHECK-NOT:     loadCapture
// CHECK:         add %[[S]], %[[FIRST]]
// CHECK:         add %{{.*}}, %[[SECOND]]
// CHECK-LABEL: attn.kernel @two_tables
// CHECK:           score_mod_diagonal_fns = [@attn_score_mod_1_diag_0, @attn_score_mod_1_diag_1]
// CHECK-SAME:      #attn.buffer<"score_diagonals", offset = {{[0-9]+}}, size = 6144, align = 16, swizzle = 0, slots = 2>
attn.kernel @two_tables
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [q_heads, ?]>, #attn.capture<"scale", f32, [q_heads]>,
                #attn.capture<"bucket", i32, [?]>, #attn.capture<"bucket_bias", f32, [?]>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?x?xf32>,
         %scale: memref<?xf32>, %bucket: memref<?xi32>, %bucketBias: memref<?xf32>):
      %c3 = arith.constant 3 : index
      %q3 = arith.muli %q, %c3 : index
      %kv3 = arith.muli %c3, %kv : index
      %distance = arith.subi %q3, %kv3 : index
      %value = memref.load %bias[%h, %distance] : memref<?x?xf32>
      %factor = memref.load %scale[%h] : memref<?xf32>
      %scaled = arith.mulf %value, %factor : f32
      %first = arith.addf %s, %scaled : f32
      %b32 = memref.load %bucket[%distance] : memref<?xi32>
      %bucketIndex = arith.index_cast %b32 : i32 to index
      %bucketValue = memref.load %bucketBias[%bucketIndex] : memref<?xf32>
      %second = arith.addf %first, %bucketValue : f32
      attn.yield %second : f32
    }

// Not staged: q - 2 kv is no function of q - kv, bias[h, q] is a row value
// (a term of the sum that moves the whole row: the row offset), and
// f32(q - kv) reads no capture.
// CHECK-LABEL: emitc.func @attn_score_mod_2_offset_0(
// CHECK:         call_opaque "attn_dev::loadCapture"
// CHECK-LABEL: emitc.func @attn_score_mod_2(
// CHECK:         call_opaque "attn_dev::loadCapture"
// CHECK-LABEL: attn.kernel @not_diagonal
// CHECK:         score_mod_row_offset_fn = @attn_score_mod_2_offset_0
// CHECK-NOT:     score_mod_diagonal_fns
// CHECK-NOT:     score_diagonals
// CHECK:         emitc.func @attn_score_mod_3(
attn.kernel @not_diagonal
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [q_heads, ?]>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?x?xf32>):
      %c2 = arith.constant 2 : index
      %kv2 = arith.muli %kv, %c2 : index
      %skewed = arith.subi %q, %kv2 : index
      %a = memref.load %bias[%h, %skewed] : memref<?x?xf32>
      %r = memref.load %bias[%h, %q] : memref<?x?xf32>
      %distance = arith.subi %q, %kv : index
      %d32 = arith.index_cast %distance : index to i32
      %df = arith.sitofp %d32 : i32 to f32
      %sum = arith.addf %a, %r : f32
      %sum2 = arith.addf %sum, %df : f32
      %out = arith.addf %s, %sum2 : f32
      attn.yield %out : f32
    }

// Head dim 256 (128 x 80 tiles, two stages) leaves room for the windows of
// one value (2 x 144 words), not of two: both tables are read per pair.
// CHECK:         call_opaque "attn_dev::loadCapture"
// CHECK-LABEL: attn.kernel @relpos_hd256
// CHECK-NOT:     score_mod_diagonal_fns
// CHECK-NOT:     score_diagonals
attn.kernel @relpos_hd256
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 256, element_type = bf16>
    mask = #attn.causal<bottom_right> normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [q_heads, ?]>, #attn.capture<"bucket", i32, [?]>,
                #attn.capture<"bucket_bias", f32, [?]>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?x?xf32>,
         %bucket: memref<?xi32>, %bucketBias: memref<?xf32>):
      %distance = arith.subi %q, %kv : index
      %value = memref.load %bias[%h, %distance] : memref<?x?xf32>
      %first = arith.addf %s, %value : f32
      %b32 = memref.load %bucket[%distance] : memref<?xi32>
      %bucketIndex = arith.index_cast %b32 : i32 to index
      %bucketValue = memref.load %bucketBias[%bucketIndex] : memref<?xf32>
      %second = arith.addf %first, %bucketValue : f32
      attn.yield %second : f32
    }

// CHECK-LABEL: attn.kernel @relpos_hd256_one_table
// CHECK:           score_mod_diagonal_fns = [@attn_score_mod_{{[0-9]+}}_diag_0]
// CHECK-SAME:      #attn.buffer<"score_diagonals", offset = {{[0-9]+}}, size = 1152, align = 16, swizzle = 0>
attn.kernel @relpos_hd256_one_table
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 256, element_type = bf16>
    mask = #attn.causal<bottom_right> normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [q_heads, ?]>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?x?xf32>):
      %column = arith.subi %q, %kv : index
      %value = memref.load %bias[%h, %column] : memref<?x?xf32>
      %biased = arith.addf %s, %value : f32
      attn.yield %biased : f32
    }

// A single consumer takes two windows too (2 x 192 words).
// CHECK-LABEL: attn.kernel @relpos_one_consumer
// CHECK:           #attn.buffer<"score_diagonals", offset = {{[0-9]+}}, size = 1536, align = 16, swizzle = 0>
// CHECK-SAME:      consumer_warpgroups = 1
attn.kernel @relpos_one_consumer
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right> normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [q_heads, ?]>]
    attributes {tile = #attn.tile<block_m = 64, block_n = 128, stages = 2, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?x?xf32>):
      %column = arith.subi %q, %kv : index
      %value = memref.load %bias[%h, %column] : memref<?x?xf32>
      %biased = arith.addf %s, %value : f32
      attn.yield %biased : f32
    }
