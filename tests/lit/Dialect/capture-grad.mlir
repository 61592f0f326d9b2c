// A capture's trailing `grad` (the backward computes its gradient) prints
// stably and re-parses; only f32 captures take it.
// RUN: attn-opt %s -split-input-file -verify-diagnostics | FileCheck %s
// RUN: attn-opt %s -split-input-file -verify-diagnostics | attn-opt -split-input-file | FileCheck %s
// RUN: attn-opt %s -split-input-file -verify-diagnostics -mlir-print-op-generic | attn-opt -split-input-file | FileCheck %s

// CHECK-LABEL: attn.kernel @learnable
// CHECK:           captures = [#attn.capture<"slopes", f32, [q_heads], grad>, #attn.capture<"document", i32, [batch, seqlen_k]>, #attn.capture<"table", f32, [q_heads, 32]>, #attn.capture<"bias", f32, [kv_heads, ?, 3], grad>]{{$}}
// CHECK-NEXT:      score_mod {
attn.kernel @learnable
    problem = #attn.problem<q_heads = 4, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    captures = [#attn.capture<"slopes", f32, [q_heads], grad>,
                #attn.capture<"document", i32, [batch, seqlen_k]>,
                #attn.capture<"table", f32, [q_heads, 32]>,
                #attn.capture<"bias", f32, [kv_heads, ?, 3], grad>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %slopes: memref<?xf32>, %doc: memref<?x?xi32>, %table: memref<?x?xf32>, %bias: memref<?x?x?xf32>):
      %slope = memref.load %slopes[%h] : memref<?xf32>
      %r = arith.mulf %s, %slope : f32
      attn.yield %r : f32
    }

// -----

// expected-error @+1 {{capture 'document': only an f32 capture has a gradient, got 'i32'}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax captures = [#attn.capture<"document", i32, [batch, seqlen_k], grad>]

// -----

// expected-error @+1 {{expected 'grad'}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax captures = [#attn.capture<"x", f32, [4], learnable>]
