// Float constants the C++ emitter spells with math.h macros (-INFINITY, NAN)
// compile with NVRTC, which has no math.h.
// RUN: attnc %s -o %t.ptx && FileCheck %s < %t.ptx
// CHECK: .entry attn_fwd_kernel
// CHECK: wgmma.mma_async
attn.kernel @special_constants
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %ninf = arith.constant 0xFF800000 : f32
      %nan = arith.constant 0x7FC00000 : f32
      %two = arith.constant 2 : index
      %zero = arith.constant 0 : index
      %parity = arith.remui %kv, %two : index
      %even = arith.cmpi eq, %parity, %zero : index
      %masked = arith.select %even, %s, %ninf : f32
      %is_nan = arith.cmpf uno, %masked, %masked : f32
      %r = arith.select %is_nan, %nan, %masked : f32
      attn.yield %r : f32
    }
