// RUN: attn-opt --split-input-file --verify-diagnostics --attn-emit-cuda %s

// expected-error @below {{needs `tile` and `smem` plans: run attn-tile and attn-plan-smem first}}
attn.kernel @unplanned
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax

// -----

// expected-error @below {{has user regions that are not lowered: run attn-lower-mods first}}
attn.kernel @user_mask
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %keep = arith.cmpi ule, %kv, %q : index
      attn.yield %keep : i1
    }

// -----

// A mod function must be what attn-lower-mods generates: no verbatim C++.
emitc.func @attn_mask_mod_0(%b: !emitc.size_t, %h: !emitc.size_t, %q: !emitc.size_t, %kv: !emitc.size_t) -> i1 attributes {specifiers = ["__device__"]} {
  // expected-error @below {{is not allowed in a mod function}}
  emitc.verbatim "system(\"rm -rf /\");"
  %t = "emitc.constant"() <{value = true}> : () -> i1
  emitc.return %t : i1
}
attn.kernel @injected
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    attributes {mask_mod_fn = @attn_mask_mod_0}

// -----

// Nor a callee of its own choosing.
emitc.func @attn_score_mod_0(%s: f32, %b: !emitc.size_t, %h: !emitc.size_t, %q: !emitc.size_t, %kv: !emitc.size_t) -> f32 {
  // expected-error @below {{calls 'launch_missiles', which a mod function may not call}}
  %r = emitc.call_opaque "launch_missiles"(%s) : (f32) -> f32
  emitc.return %r : f32
}
attn.kernel @bad_callee
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    attributes {score_mod_fn = @attn_score_mod_0}

// -----

// Nor a name of its own choosing: names reach the C++ source.
// expected-error @below {{name 'evil' is not one attn-lower-mods generates}}
emitc.func @evil(%s: f32, %b: !emitc.size_t, %h: !emitc.size_t, %q: !emitc.size_t, %kv: !emitc.size_t) -> f32 {
  emitc.return %s : f32
}
attn.kernel @bad_name
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    attributes {score_mod_fn = @evil}

// -----

// Nor an opaque type that is not a capture.
// expected-error @below {{mod function argument type '!emitc.opaque<"int; evil()">' is not allowed}}
emitc.func @attn_score_mod_0(%s: f32, %b: !emitc.size_t, %h: !emitc.size_t, %q: !emitc.size_t, %kv: !emitc.size_t, %x: !emitc.opaque<"int; evil()">) -> f32 {
  emitc.return %s : f32
}
attn.kernel @bad_type
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    attributes {score_mod_fn = @attn_score_mod_0}

// -----

// A region function takes kv as f32 after kv (attn-lower-mods adds it).
// expected-error @below {{mod function must take 6 arguments, kv as f32 after kv, then captures, diagonal and row values}}
emitc.func @attn_score_mod_0(%s: f32, %b: !emitc.size_t, %h: !emitc.size_t, %q: !emitc.size_t, %kv: !emitc.size_t) -> f32 {
  emitc.return %s : f32
}
attn.kernel @no_key_float
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    attributes {score_mod_fn = @attn_score_mod_0}

// -----

// A result factor at or below 0 would move the softmax's row maximum.
emitc.func @attn_score_mod_0(%s: f32, %b: !emitc.size_t, %h: !emitc.size_t, %q: !emitc.size_t, %kv: !emitc.size_t, %kvf: f32) -> f32 {
  emitc.return %s : f32
}
// expected-error @below {{score_output_scale needs a score_mod function and a positive finite value}}
attn.kernel @negative_output_scale
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    attributes {score_mod_fn = @attn_score_mod_0, score_output_scale = -2.0 : f32}

// -----

emitc.func @attn_score_mod_0(%s: f32, %b: !emitc.size_t, %h: !emitc.size_t, %q: !emitc.size_t, %kv: !emitc.size_t, %kvf: f32) -> f32 {
  emitc.return %s : f32
}
// expected-error @below {{score_input_scale needs a score_mod function and a finite value}}
attn.kernel @infinite_input_scale
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    attributes {score_mod_fn = @attn_score_mod_0, score_input_scale = 0x7F800000 : f32}

// -----

// A score bound must be a positive finite value.
emitc.func @attn_score_mod_0(%s: f32, %b: !emitc.size_t, %h: !emitc.size_t, %q: !emitc.size_t, %kv: !emitc.size_t, %kvf: f32) -> f32 {
  emitc.return %s : f32
}
// expected-error @below {{score_bound needs a score_mod function and a positive finite value}}
attn.kernel @zero_score_bound
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    attributes {score_mod_fn = @attn_score_mod_0, score_bound = 0.0 : f32}


// -----

// Staged diagonal values are 32-bit words (f32 or i32).
emitc.func @attn_score_mod_0(%s: f32, %b: !emitc.size_t, %h: !emitc.size_t, %q: !emitc.size_t, %kv: !emitc.size_t, %kvf: f32, %d: i64) -> f32 {
  emitc.return %s : f32
}
// expected-error @below {{diagonal value type 'i64' is not f32 or i32}}
emitc.func @attn_score_mod_0_diag_0(%b: !emitc.size_t, %h: !emitc.size_t, %d: !emitc.size_t) -> i64 {
  %0 = "emitc.constant"() <{value = 0 : i64}> : () -> i64
  emitc.return %0 : i64
}
attn.kernel @wide_diagonal
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    attributes {score_mod_fn = @attn_score_mod_0, score_mod_diagonal_fns = [@attn_score_mod_0_diag_0]}

// -----

// Diagonal functions belong to a score_mod function.
emitc.func @attn_score_mod_0_diag_0(%b: !emitc.size_t, %h: !emitc.size_t, %d: !emitc.size_t) -> f32 {
  %0 = "emitc.constant"() <{value = 0.0 : f32}> : () -> f32
  emitc.return %0 : f32
}
// expected-error @below {{has score_mod diagonal functions but no score_mod function}}
attn.kernel @orphan_diagonal
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    attributes {score_mod_diagonal_fns = [@attn_score_mod_0_diag_0]}

// -----

// A row offset function belongs to a score_mod function.
emitc.func @attn_score_mod_0_offset_0(%b: !emitc.size_t, %h: !emitc.size_t, %q: !emitc.size_t) -> f32 {
  %0 = "emitc.constant"() <{value = 0.0 : f32}> : () -> f32
  emitc.return %0 : f32
}
// expected-error @below {{has a score_mod row offset function but no score_mod function}}
attn.kernel @orphan_offset
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    attributes {score_mod_row_offset_fn = @attn_score_mod_0_offset_0}

// -----

// The row offset adds to the f32 log-sum-exp: (b, h, q, captures...) -> f32.
emitc.func @attn_score_mod_0(%s: f32, %b: !emitc.size_t, %h: !emitc.size_t, %q: !emitc.size_t, %kv: !emitc.size_t, %kvf: f32) -> f32 {
  emitc.return %s : f32
}
// expected-error @below {{row offset function must take (b, h, q, captures...) and return one f32}}
emitc.func @attn_score_mod_0_offset_0(%b: !emitc.size_t, %h: !emitc.size_t, %q: !emitc.size_t) -> i32 {
  %0 = "emitc.constant"() <{value = 0 : i32}> : () -> i32
  emitc.return %0 : i32
}
attn.kernel @integer_offset
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    attributes {score_mod_fn = @attn_score_mod_0, score_mod_row_offset_fn = @attn_score_mod_0_offset_0}

// -----

// kv relative to an origin needs the row offset that adds the origin back.
emitc.func @attn_score_mod_0(%s: f32, %b: !emitc.size_t, %h: !emitc.size_t, %q: !emitc.size_t, %kv: !emitc.size_t, %kvf: f32) -> f32 {
  emitc.return %s : f32
}
// expected-error @below {{has score_mod_key_relative but no score_mod row offset function}}
attn.kernel @relative_without_offset
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    attributes {score_mod_fn = @attn_score_mod_0, score_mod_key_relative}

// -----

// f64 is for the row offset's inside only: a row value of f64 has no place
// in the kernel's row registers.
emitc.func @attn_score_mod_0(%s: f32, %b: !emitc.size_t, %h: !emitc.size_t, %q: !emitc.size_t, %kv: !emitc.size_t, %kvf: f32, %row: f32) -> f32 {
  emitc.return %s : f32
}
emitc.func @attn_score_mod_0_row_0(%b: !emitc.size_t, %h: !emitc.size_t, %q: !emitc.size_t) -> f32 {
  // expected-error @below {{result type 'f64' is not allowed in a mod function}}
  %0 = "emitc.constant"() <{value = 1.0 : f64}> : () -> f64
  %1 = emitc.cast %0 : f64 to f32
  emitc.return %1 : f32
}
attn.kernel @double_row
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    attributes {score_mod_fn = @attn_score_mod_0, score_mod_row_fns = [@attn_score_mod_0_row_0]}

// -----

// A mask_mod without a tile formula (here, a function the classifier never
// saw) takes stored key bits through shared memory: its plan must hold them.
emitc.func @attn_mask_mod_0(%b: !emitc.size_t, %h: !emitc.size_t, %q: !emitc.size_t, %kv: !emitc.size_t, %kvf: f32) -> i1 attributes {specifiers = ["__device__"]} {
  %t = "emitc.constant"() <{value = true}> : () -> i1
  emitc.return %t : i1
}
// expected-error @below {{shared-memory plan has no 'key_bits' buffer of 4096 bytes at a 16-byte aligned offset for the stored key bits of its mask_mod}}
attn.kernel @no_key_bits
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    attributes {mask_mod_fn = @attn_mask_mod_0,
                tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>,
                smem = #attn.smem_plan<total = 163920, buffers = [#attn.buffer<"q", offset = 0, size = 32768, align = 1024, swizzle = 128>, #attn.buffer<"k", offset = 32768, size = 65536, align = 1024, swizzle = 128, slots = 2>, #attn.buffer<"v", offset = 98304, size = 65536, align = 1024, swizzle = 128, slots = 2>, #attn.buffer<"o_staging", offset = 0, size = 32768, align = 1024, swizzle = 128, aliases = "q">, #attn.buffer<"barriers", offset = 163840, size = 80, align = 8, swizzle = 0, slots = 10>]>}
