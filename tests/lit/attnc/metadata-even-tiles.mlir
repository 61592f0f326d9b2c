// Whether every work tile costs the same (no mask), which lets the runtime
// split a persistent grid's partial last round (ForwardTailSplit).
// RUN: attnc %s --kernel=plain --emit=metadata | FileCheck %s --check-prefix=PLAIN
// RUN: attnc %s --kernel=softcap --emit=metadata | FileCheck %s --check-prefix=SOFTCAP
// RUN: attnc %s --kernel=window --emit=metadata | FileCheck %s --check-prefix=WINDOW
// RUN: attnc %s --kernel=retention --emit=metadata | FileCheck %s --check-prefix=RETENTION

// PLAIN: even_work_tiles 1
attn.kernel @plain
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax

// A score_mod leaves the tiles' costs equal.
// SOFTCAP: even_work_tiles 1
attn.kernel @softcap
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %k: index):
      %cap = arith.constant 50.0 : f32
      %inverse = arith.constant 0.02 : f32
      %x = arith.mulf %s, %inverse : f32
      %t = math.tanh %x : f32
      %r = arith.mulf %t, %cap : f32
      attn.yield %r : f32
    }

// WINDOW: even_work_tiles 0
attn.kernel @window
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.sliding_window<left = 100, right = 0> normalizer = #attn.softmax

// RETENTION: even_work_tiles 0
attn.kernel @retention
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<top_left> normalizer = #attn.retention
