// attn-lower-mods rewrites a mask_mod's index arithmetic in 32 bits where
// integer range analysis proves it exact: batch and head are ints, q and kv
// at most attn_abi::kMaxRegionPosition = 2^30 + 256 (the runtime refuses
// sequences over 2^30 rows). What may leave the 32-bit range stays in 64
// bits (size_t / ptrdiff_t).
// RUN: attn-opt --attn-lower-mods %s | FileCheck %s

// Longformer's band and global tokens: kv + 256 and every compare in 32
// bits; q + 256 and q < 64 are row values.
// CHECK-LABEL: emitc.func @attn_mask_mod_0_row_0(
// CHECK-SAME:      -> i32
// CHECK:         add %{{.*}}, %{{.*}} : (ui32, ui32) -> ui32
// CHECK-LABEL: emitc.func @attn_mask_mod_0(
// CHECK-NOT:     ptrdiff_t
// CHECK:         add %{{.*}}, %{{.*}} : (ui32, ui32) -> ui32
// CHECK:         cmp lt, %{{.*}}, %{{.*}} : (i32, i32) -> i1
// CHECK:         cmp lt, %{{.*}}, %{{.*}} : (i32, i32) -> i1
// CHECK:         cmp lt, %{{.*}}, %{{.*}} : (i32, i32) -> i1
// CHECK:         return
attn.kernel @band
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %half_window = arith.constant 256 : index
      %global = arith.constant 64 : index
      %upper = arith.addi %q, %half_window : index
      %lower = arith.addi %kv, %half_window : index
      %below = arith.cmpi slt, %kv, %upper : index
      %above = arith.cmpi slt, %q, %lower : index
      %band = arith.andi %below, %above : i1
      %global_q = arith.cmpi slt, %q, %global : index
      %global_kv = arith.cmpi slt, %kv, %global : index
      %global_any = arith.ori %global_q, %global_kv : i1
      %keep = arith.ori %band, %global_any : i1
      attn.yield %keep : i1
    }

// The bound is exact: kv + 1073741567 reaches 2^31 - 1 at most and compares
// signed in 32 bits; kv + 1073741568 may reach 2^31, so its signed compare
// stays in 64 bits.
// CHECK-LABEL: emitc.func @attn_mask_mod_1(
// CHECK:         cmp lt, %{{.*}}, %{{.*}} : (i32, i32) -> i1
// CHECK:         cmp lt, %{{.*}}, %{{.*}} : (!emitc.ptrdiff_t, !emitc.ptrdiff_t) -> i1
// CHECK:         return
attn.kernel @edge
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %fits = arith.constant 1073741567 : index
      %over = arith.constant 1073741568 : index
      %a = arith.addi %kv, %fits : index
      %c = arith.addi %kv, %over : index
      %x = arith.cmpi slt, %q, %a : index
      %y = arith.cmpi slt, %q, %c : index
      %keep = arith.andi %x, %y : i1
      attn.yield %keep : i1
    }

// A product of positions may pass 2^31: it and the floor quotient of it stay
// in 64 bits (the device helper on ptrdiff_t); the head's parity, an int's
// remainder, narrows.
// CHECK-LABEL: emitc.func @attn_mask_mod_2_row_0(
// CHECK:         mul %{{.*}}, %{{.*}} : (!emitc.size_t, !emitc.size_t) -> !emitc.size_t
// CHECK:         call_opaque "attn_dev::floorDiv"(%{{.*}}, %{{.*}}) : (!emitc.ptrdiff_t, !emitc.ptrdiff_t) -> !emitc.ptrdiff_t
// CHECK-LABEL: emitc.func @attn_mask_mod_2_row_1(
// CHECK:         call_opaque "attn_dev::remainderUnsigned"(%{{.*}}, %{{.*}}) : (ui32, ui32) -> ui32
attn.kernel @wide
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %scale = arith.constant 4096 : index
      %block = arith.constant 4095 : index
      %two = arith.constant 2 : index
      %zero = arith.constant 0 : index
      %wide = arith.muli %q, %scale : index
      %quotient = arith.floordivsi %wide, %block : index
      %seen = arith.cmpi sle, %kv, %quotient : index
      %parity = arith.remui %h, %two : index
      %even = arith.cmpi eq, %parity, %zero : index
      %keep = arith.andi %seen, %even : i1
      attn.yield %keep : i1
    }
