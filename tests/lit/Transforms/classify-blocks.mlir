// attn-classify-blocks records the affine formula a mask_mod computes, or
// nothing when the mask is not affine in the indices.
// RUN: attn-opt --attn-classify-blocks %s | FileCheck %s
// Run again once attn-lower-mods has replaced the regions by functions, it
// keeps the formulas it derived from them.
// RUN: attn-opt --attn-classify-blocks --attn-lower-mods --attn-classify-blocks %s | FileCheck %s --check-prefix=AGAIN
// AGAIN-LABEL: attn.kernel @prefix_lm
// AGAIN: mask_tile_formula = #attn.tile_formula<any_of, [#attn.affine_ge<kv = -1, c = 2047>, #attn.affine_ge<q = 1, kv = -1>]>

// prefix-LM: kv < 2048 or kv <= q.
// CHECK-LABEL: attn.kernel @prefix_lm
// CHECK: mask_tile_formula = #attn.tile_formula<any_of, [#attn.affine_ge<kv = -1, c = 2047>, #attn.affine_ge<q = 1, kv = -1>]>
attn.kernel @prefix_lm
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %prefix = arith.constant 2048 : index
      %in_prefix = arith.cmpi slt, %kv, %prefix : index
      %causal = arith.cmpi sle, %kv, %q : index
      %keep = arith.ori %in_prefix, %causal : i1
      attn.yield %keep : i1
    }

// A band |q - kv| < 256 through i64 arithmetic, a head-dependent term, and
// "not" as xor with true; eq becomes two inequalities.
// CHECK-LABEL: attn.kernel @band
// CHECK: mask_tile_formula = #attn.tile_formula<all_of, [#attn.affine_ge<q = -1, kv = 1, c = 255>, #attn.tile_formula<none_of, [#attn.tile_formula<all_of, [#attn.affine_ge<head = 2, q = -1>, #attn.affine_ge<head = -2, q = 1>]>]>]>
attn.kernel @band
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %qi = arith.index_cast %q : index to i64
      %kvi = arith.index_cast %kv : index to i64
      %c256 = arith.constant 256 : i64
      %two = arith.constant 2 : index
      %true = arith.constant true
      %distance = arith.subi %qi, %kvi : i64
      %near = arith.cmpi slt, %distance, %c256 : i64
      %twice_h = arith.muli %h, %two : index
      %on_head_diagonal = arith.cmpi eq, %q, %twice_h : index
      %off = arith.xori %on_head_diagonal, %true : i1
      %keep = arith.andi %near, %off : i1
      attn.yield %keep : i1
    }

// An unsigned comparison of q - kv (negative for kv > q) is not the signed
// one: no formula.
// CHECK-LABEL: attn.kernel @unsigned_difference
// CHECK-NOT: mask_tile_formula
// CHECK: mask_mod
attn.kernel @unsigned_difference
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %c8 = arith.constant 8 : index
      %d = arith.subi %q, %kv : index
      %keep = arith.cmpi ult, %d, %c8 : index
      attn.yield %keep : i1
    }

// i32 arithmetic may wrap for long sequences: not analysed.
// CHECK-LABEL: attn.kernel @narrow
// CHECK-NOT: mask_tile_formula
// CHECK: mask_mod
attn.kernel @narrow
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %qi = arith.index_cast %q : index to i32
      %kvi = arith.index_cast %kv : index to i32
      %keep = arith.cmpi sle, %kvi, %qi : i32
      attn.yield %keep : i1
    }

// Reading a captured buffer: decided per element at run time.
// CHECK-LABEL: attn.kernel @document
// CHECK-NOT: mask_tile_formula
// CHECK: mask_mod
attn.kernel @document
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    captures = [#attn.capture<"document", i32, [batch, seqlen_k]>]
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index, %doc: memref<?x?xi32>):
      %dq = memref.load %doc[%b, %q] : memref<?x?xi32>
      %dk = memref.load %doc[%b, %kv] : memref<?x?xi32>
      %same = arith.cmpi eq, %dq, %dk : i32
      attn.yield %same : i1
    }

// A single inequality is recorded as all_of of one term.
// CHECK-LABEL: attn.kernel @late_rows
// CHECK: mask_tile_formula = #attn.tile_formula<all_of, [#attn.affine_ge<q = 1, c = -300>]>
attn.kernel @late_rows
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %first = arith.constant 300 : index
      %keep = arith.cmpi sge, %q, %first : index
      attn.yield %keep : i1
    }

// Division of a never-negative form by a positive constant: chunked local
// attention, q / 1024 == kv / 1024, becomes two div_sum_ge inequalities.
// CHECK-LABEL: attn.kernel @chunked
// CHECK: mask_tile_formula = #attn.tile_formula<all_of, [#attn.div_sum_ge<terms = [#attn.floordiv<kv = 1, divisor = 1024>, #attn.floordiv<coef = -1, q = 1, divisor = 1024>]>, #attn.div_sum_ge<terms = [#attn.floordiv<q = 1, divisor = 1024>, #attn.floordiv<coef = -1, kv = 1, divisor = 1024>]>]>
attn.kernel @chunked
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %chunk = arith.constant 1024 : index
      %q_chunk = arith.divui %q, %chunk : index
      %kv_chunk = arith.divsi %kv, %chunk : index
      %same = arith.cmpi eq, %q_chunk, %kv_chunk : index
      attn.yield %same : i1
    }

// A signed quotient of a form that may be negative truncates, unlike floor:
// not analysed.
// CHECK-LABEL: attn.kernel @signed_quotient
// CHECK-NOT: mask_tile_formula
// CHECK: mask_mod
attn.kernel @signed_quotient
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %c64 = arith.constant 64 : index
      %zero = arith.constant 0 : index
      %d = arith.subi %q, %kv : index
      %block = arith.divsi %d, %c64 : index
      %keep = arith.cmpi sge, %block, %zero : index
      attn.yield %keep : i1
    }
