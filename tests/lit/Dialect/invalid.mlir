// RUN: attn-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{unsupported head_dim 96; supported: 64, 128, 256}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 96, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax

// -----

// expected-error @+1 {{unsupported element_type 'f32'; supported: bf16, f16}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = f32> mask = #attn.no_mask normalizer = #attn.softmax

// -----

// expected-error @+1 {{q_heads must be > 0, got 0}}
attn.kernel @k problem = #attn.problem<q_heads = 0, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax

// -----

// A head count past int32 used to reach the launch metadata wrapped.
// expected-error @+1 {{q_heads must be at most 65535 (a grid dimension holds the heads), got 2147483648}}
attn.kernel @k problem = #attn.problem<q_heads = 2147483648, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax

// -----

// expected-error @+1 {{q_heads must be at most 65535 (a grid dimension holds the heads), got 65536}}
attn.kernel @k problem = #attn.problem<q_heads = 65536, kv_heads = 1, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax

// -----

// The largest head count verifies.
attn.kernel @most_heads problem = #attn.problem<q_heads = 65535, kv_heads = 1, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax

// -----

// A scale past f32's range would reach the kernel as inf.
// expected-error @+1 {{scale must be a normal f32 value (1.175494e-38 to 3.402823e+38), got 1.0e+300}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16, scale = 1.0e+300> mask = #attn.no_mask normalizer = #attn.softmax

// -----

// expected-error @+1 {{scale must be a normal f32 value (1.175494e-38 to 3.402823e+38), got 1.0e-40}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16, scale = 1.0e-40> mask = #attn.no_mask normalizer = #attn.softmax

// -----

// expected-error @+1 {{sliding window right extent must be at most 1073741824 (the longest sequence), got 9223372036854775807}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.sliding_window<left = 0, right = 9223372036854775807> normalizer = #attn.softmax

// -----

// A window as wide as the longest sequence verifies.
attn.kernel @widest_window problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.sliding_window<left = 1073741824, right = 0> normalizer = #attn.softmax

// -----

// expected-error @+1 {{kv_heads must be > 0, got -2}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = -2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax

// -----

// expected-error @+1 {{kv_heads (3) must divide q_heads (16)}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 3, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax

// -----

// expected-error @+1 {{scale must be positive and finite, got -1.0}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16, scale = -1.0> mask = #attn.no_mask normalizer = #attn.softmax

// -----

// expected-error @+1 {{scale must be positive and finite, got 0.0}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16, scale = 0.0> mask = #attn.no_mask normalizer = #attn.softmax

// -----

// 0x7FF0000000000000 is the bit pattern of +inf.
// expected-error @+1 {{scale must be positive and finite, got inf}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16, scale = 0x7FF0000000000000> mask = #attn.no_mask normalizer = #attn.softmax

// -----

// expected-error @+1 {{sliding window left extent must be >= 0, got -1}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.sliding_window<left = -1, right = 0> normalizer = #attn.softmax

// -----

// expected-error @+1 {{sliding window right extent must be >= 0, got -4}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.sliding_window<left = 16, right = -4, align = top_left> normalizer = #attn.softmax

// -----

// expected-error @+1 {{expected a mask attribute (MaskAttrInterface) for 'mask', got #attn.softmax}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.softmax normalizer = #attn.softmax

// -----

// expected-error @+1 {{expected a normalizer attribute (NormalizerAttrInterface) for 'normalizer', got #attn.no_mask}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.no_mask

// -----

// expected-error @+1 {{expected #attn.problem for 'problem', got #attn.causal<top_left>}}
attn.kernel @k problem = #attn.causal<top_left> mask = #attn.no_mask normalizer = #attn.softmax

// -----

// expected-error @+1 {{'mask_mod' region expects 4 arguments (batch, head, q_idx, kv_idx), got 3}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index):
      %true = arith.constant true
      attn.yield %true : i1
    }

// -----

attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    mask_mod {
    // expected-error @+1 {{'mask_mod' argument #2 (q_idx) must have type 'index', got 'i32'}}
    ^bb0(%b: index, %h: index, %q: i32, %kv: index):
      %true = arith.constant true
      attn.yield %true : i1
    }

// -----

attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %zero = arith.constant 0.0 : f32
      // expected-error @+1 {{'attn.yield' op in 'mask_mod' must yield a single 'i1', got ('f32')}}
      attn.yield %zero : f32
    }

// -----

attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      // expected-error @+1 {{'attn.yield' op in 'mask_mod' must yield a single 'i1', got ()}}
      attn.yield
    }

// -----

attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    score_mod {
    // expected-error @+1 {{'score_mod' argument #0 (score) must have type 'f32', got 'f16'}}
    ^bb0(%s: f16, %b: index, %h: index, %q: index, %kv: index):
      attn.yield %s : f16
    }

// -----

// expected-error @+1 {{'score_mod' region expects 5 arguments (score, batch, head, q_idx, kv_idx), got 4}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    score_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %zero = arith.constant 0.0 : f32
      attn.yield %zero : f32
    }

// -----

attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %keep = arith.cmpi ule, %kv, %q : index
      // expected-error @+1 {{'attn.yield' op in 'score_mod' must yield a single 'f32', got ('i1')}}
      attn.yield %keep : i1
    }

// -----

func.func @yield_outside() {
  // expected-error @+1 {{'attn.yield' op expects parent op 'attn.kernel'}}
  attn.yield
}

// -----

// expected-error @+1 {{shared-memory buffer 'q' offset 100 is not a multiple of its alignment 1024}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax attributes {buffer = #attn.buffer<"q", offset = 100, size = 1024, align = 1024, swizzle = 128>}

// -----

// expected-error @+1 {{shared-memory buffer 'k' ends at 8192, past the plan total 4096}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax attributes {smem = #attn.smem_plan<total = 4096, buffers = [#attn.buffer<"k", offset = 4096, size = 4096, align = 1024, swizzle = 128, slots = 2>]>}

// -----

// expected-error @+1 {{shared-memory buffer 'k' swizzle must be 0, 32, 64 or 128 bytes, got 96}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax attributes {buffer = #attn.buffer<"k", offset = 4096, size = 4096, align = 1024, swizzle = 96>}

// -----

// expected-error @+1 {{shared-memory plan buffers must be #attn.buffer attributes, got 42 : i64}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax attributes {smem = #attn.smem_plan<total = 4096, buffers = [42]>}

// -----

// expected-error @+1 {{'attn.kernel' op attribute 'tile' failed to satisfy constraint}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax attributes {tile = 3}
