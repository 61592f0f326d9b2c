"""Tracing of mods into regions (no GPU): each mod of FlexAttention's usual
families against the MLIR written out by hand, and what cannot be traced
against its error."""

import math
import re

import pytest
import torch

import attnc


def spec(**kwargs):
    args = dict(q_heads=8, kv_heads=8, head_dim=128)
    args.update(kwargs)
    return attnc.attention_spec(**args)


def ops(text, region):
    """The operation lines of one region, without SSA names."""
    body = text.split(f"{region} {{", 1)[1].split("\n    }", 1)[0]
    lines = [line.strip() for line in body.splitlines() if line.strip() and "^bb0" not in line]
    return [re.sub(r"^%\d+ = ", "", line) for line in lines]


def test_no_mod_is_the_plain_kernel():
    text = spec(causal=True)
    assert "mask = #attn.causal<bottom_right>" in text
    assert "score_mod" not in text and "mask_mod" not in text and "captures" not in text


def test_builtin_masks_and_problem():
    text = spec(q_heads=16, kv_heads=2, head_dim=64, dtype=torch.float16, scale=0.125,
                window=(255, 0), align="top_left")
    assert ("problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 64, "
            "element_type = f16, scale = 1.250000000e-01>") in text
    assert "mask = #attn.sliding_window<left = 255, right = 0, align = top_left>" in text


def test_softcap():
    # The division stays as written; attn-lower-mods makes it a product.
    text = spec(score_mod=lambda s, b, h, q, kv: torch.tanh(s / 30.0) * 30.0)
    assert ops(text, "score_mod") == [
        "arith.constant 3.000000000e+01 : f32",
        "arith.divf %score, %0 : f32",
        "math.tanh %1 : f32",
        "arith.mulf %2, %0 : f32",
        "attn.yield %3 : f32",
    ]


def test_division_by_a_value_stays_a_division():
    text = spec(score_mod=lambda s, b, h, q, kv: s / (kv + 1))
    assert any(line.startswith("arith.divf %score") for line in ops(text, "score_mod"))


def test_integer_constant_in_float_arithmetic_is_a_float_constant():
    text = spec(score_mod=lambda s, b, h, q, kv: s * 2)
    assert ops(text, "score_mod") == ["arith.constant 2.000000000e+00 : f32",
                                      "arith.mulf %score, %0 : f32", "attn.yield %1 : f32"]


def test_relative_position_converts_the_distance():
    text = spec(score_mod=lambda s, b, h, q, kv: s + (q - kv))
    assert ops(text, "score_mod") == [
        "arith.subi %q_idx, %kv_idx : index",
        "arith.index_cast %0 : index to i64",
        "arith.sitofp %1 : i64 to f32",
        "arith.addf %score, %2 : f32",
        "attn.yield %3 : f32",
    ]


def test_alibi_reads_a_captured_slope_per_head():
    slopes = torch.tensor([2.0 ** -(i + 1) for i in range(8)])
    text = spec(score_mod=lambda s, b, h, q, kv: s - slopes[h] * (q - kv))
    assert 'captures = [#attn.capture<"c0", f32, [?]>]' in text
    assert "%c0: memref<?xf32>" in text
    assert "memref.load %c0[%h] : memref<?xf32>" in ops(text, "score_mod")


def test_bias_table_indexed_by_head_and_distance():
    bias = torch.zeros(8, 4095)
    text = spec(score_mod=lambda s, b, h, q, kv: s + bias[h, q - kv + 2047])
    assert ops(text, "score_mod") == [
        "arith.subi %q_idx, %kv_idx : index",
        "arith.constant 2047 : index",
        "arith.addi %0, %1 : index",
        "memref.load %c0[%h, %2] : memref<?x?xf32>",
        "arith.addf %score, %3 : f32",
        "attn.yield %4 : f32",
    ]


def test_document_mask_reads_integer_ids():
    document = torch.zeros(2, 1000, dtype=torch.int64)

    def same_document(b, h, q, kv):
        return document[b, q] == document[b, kv]

    text = spec(mask_mod=same_document)
    assert 'captures = [#attn.capture<"c0", i32, [?, ?]>]' in text
    assert ops(text, "mask_mod") == [
        "memref.load %c0[%b, %q_idx] : memref<?x?xi32>",
        "arith.index_cast %0 : i32 to index",
        "memref.load %c0[%b, %kv_idx] : memref<?x?xi32>",
        "arith.index_cast %2 : i32 to index",
        "arith.cmpi eq, %1, %3 : index",
        "attn.yield %4 : i1",
    ]


def test_bool_capture_reads_as_i1():
    keep = torch.ones(1000, dtype=torch.bool)
    text = spec(mask_mod=lambda b, h, q, kv: keep[kv])
    assert ops(text, "mask_mod")[-3:] == ["arith.constant 0 : index",
                                          "arith.cmpi ne, %1, %2 : index",
                                          "attn.yield %3 : i1"]


def test_causal_mask_mod_becomes_the_builtin_causal():
    for mod in (lambda b, h, q, kv: q >= kv, lambda b, h, q, kv: kv <= q):
        text = spec(mask_mod=mod)
        assert "mask = #attn.causal<top_left>" in text and "mask_mod" not in text


def test_prefix_lm_and_sliding_window_stay_regions():
    text = spec(mask_mod=lambda b, h, q, kv: (kv <= 255) | (q >= kv))
    assert ops(text, "mask_mod") == [
        "arith.constant 255 : index",
        "arith.cmpi sle, %kv_idx, %0 : index",
        "arith.cmpi sge, %q_idx, %kv_idx : index",
        "arith.ori %1, %2 : i1",
        "attn.yield %3 : i1",
    ]
    text = spec(mask_mod=lambda b, h, q, kv: (q >= kv) & (q - kv <= 127))
    assert "arith.andi" in text and "mask = #attn.no_mask" in text


def test_where_selects_and_promotes():
    text = spec(score_mod=lambda s, b, h, q, kv: torch.where(q >= kv, s, -float("inf")))
    assert ops(text, "score_mod") == [
        "arith.cmpi sge, %q_idx, %kv_idx : index",
        "arith.constant 0xFF800000 : f32",
        "arith.select %0, %score, %1 : f32",
        "attn.yield %2 : f32",
    ]


def test_python_modulo_follows_the_divisor_sign():
    text = spec(mask_mod=lambda b, h, q, kv: kv % 2 == 0)
    lines = ops(text, "mask_mod")
    assert "arith.remsi %kv_idx, %0 : index" in lines
    assert any(line.startswith("arith.select") for line in lines)


def test_floor_and_true_division():
    text = spec(mask_mod=lambda b, h, q, kv: q // 64 == kv // 64)
    assert "arith.floordivsi %q_idx, %0 : index" in ops(text, "mask_mod")
    text = spec(score_mod=lambda s, b, h, q, kv: s + q / 4)
    assert any(line.startswith("arith.divf") for line in ops(text, "score_mod"))


def test_methods_and_clamp():
    text = spec(score_mod=lambda s, b, h, q, kv: s + (q - kv).abs().float().clamp(max=8.0))
    lines = ops(text, "score_mod")
    assert "math.absi %0 : index" in lines
    assert any(line.startswith("arith.minimumf") for line in lines)


def test_zero_dim_tensor_is_a_one_element_capture():
    temperature = torch.tensor(0.5)
    text = spec(score_mod=lambda s, b, h, q, kv: s * temperature)
    assert 'captures = [#attn.capture<"c0", f32, [?]>]' in text
    assert "memref.load %c0[%0] : memref<?xf32>" in ops(text, "score_mod")


def test_both_mods_share_the_captures():
    bias = torch.zeros(8, 64)
    document = torch.zeros(64, dtype=torch.int32)
    text = spec(score_mod=lambda s, b, h, q, kv: s + bias[h, kv],
                mask_mod=lambda b, h, q, kv: document[q] == document[kv])
    arguments = "%c0: memref<?xi32>, %c1: memref<?x?xf32>"
    assert text.count(arguments) == 2


def test_equal_operations_are_emitted_once():
    text = spec(score_mod=lambda s, b, h, q, kv: s + (q - kv) * (q - kv))
    assert ops(text, "score_mod").count("arith.subi %q_idx, %kv_idx : index") == 1


def test_trace_is_cached_per_mod():
    calls = []

    def mod(s, b, h, q, kv):
        calls.append(1)
        return s * 2

    first = spec(score_mod=mod)
    second = spec(score_mod=mod)
    assert first == second and len(calls) == 1


def test_a_mod_made_again_each_call_is_traced_once():
    calls = []
    table = torch.zeros(8)

    def make():
        def mod(s, b, h, q, kv):
            calls.append(1)
            return s + table[h]
        return mod

    assert spec(score_mod=make()) == spec(score_mod=make())
    assert len(calls) == 1


def test_closure_scalar_change_retraces():
    def make(cap):
        return lambda s, b, h, q, kv: torch.tanh(s / cap) * cap

    assert spec(score_mod=make(20.0)) != spec(score_mod=make(50.0))


def error_of(**kwargs):
    with pytest.raises(attnc.TraceError) as info:
        spec(**kwargs)
    return str(info.value)


def test_python_if_names_the_line():
    def branching(s, b, h, q, kv):
        if q > kv:  # the line the error names
            return s
        return s * 2

    message = error_of(score_mod=branching)
    line = branching.__code__.co_firstlineno + 1
    assert f"test_trace.py:{line}:" in message and "torch.where" in message


def test_unsupported_function_is_named():
    assert "torch.sinh is not supported" in error_of(
        score_mod=lambda s, b, h, q, kv: torch.sinh(s))


def test_slicing_and_partial_indexing_are_refused():
    bias = torch.zeros(8, 64)
    assert "one index per dimension" in error_of(
        score_mod=lambda s, b, h, q, kv: s + bias[h].sum())
    assert "negative constant index" in error_of(
        score_mod=lambda s, b, h, q, kv: s + bias[h, -1])


def test_float_index_and_builtin_min_are_refused():
    bias = torch.zeros(64)
    assert "float value indexes" in error_of(score_mod=lambda s, b, h, q, kv: bias[s])
    assert "builtin min/max" in error_of(score_mod=lambda s, b, h, q, kv: min(s, 1.0))


def test_score_in_mask_mod_and_wrong_arity():
    with pytest.raises(TypeError):
        spec(mask_mod=lambda b, h, q: q > 0)


def test_argument_errors_name_the_argument():
    q = torch.zeros(1, 4, 16, 64, dtype=torch.bfloat16)
    k = torch.zeros(1, 2, 16, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="enable_gqa=True"):
        attnc.attention(q, k, k)
    with pytest.raises(ValueError, match=r"^q: expected \(batch, heads, seq, head_dim\)"):
        attnc.attention(q[0], k, k)
    with pytest.raises(TypeError, match=r"^k, v: dtypes"):
        attnc.attention(q, k.half(), k.half(), enable_gqa=True)
    with pytest.raises(TypeError, match=r"^q: dtype torch.float32 is not supported"):
        attnc.attention(q.float(), k.float(), k.float(), enable_gqa=True)
    with pytest.raises(ValueError, match=r"^scale: "):
        attnc.attention(q, k, k, enable_gqa=True, scale=-1.0)
    with pytest.raises(ValueError, match=r"^q: attnc runs on CUDA tensors"):
        attnc.attention(q, k, k, enable_gqa=True)


def test_a_captured_tensor_that_requires_grad_is_declared_learnable():
    from attnc import _spec
    bias = torch.zeros(2, 16, requires_grad=True)
    ids = torch.zeros(16, dtype=torch.int32)
    variant = attnc.variant(score_mod=lambda s, b, h, qi, kv: s + bias[h, kv] + ids[kv])
    assert '#attn.capture<"c0", f32, [?, ?], grad>' in variant.captures_text
    assert '#attn.capture<"c1", i32, [?]>' in variant.captures_text
    key = _spec.register(_spec.kernel_text("k", "p", "m", captures=variant.captures_text))
    assert _spec.learnable_captures(key) == (0,)
    # The same tensor without requires_grad is another variant, not learnable.
    frozen = bias.detach()
    plain = attnc.variant(score_mod=lambda s, b, h, qi, kv: s + frozen[h, kv])
    assert ", grad>" not in plain.captures_text


def test_launch_pack_is_kept_only_for_captures_used_as_they_are():
    from attnc import _ops
    slopes = torch.zeros(8)
    variant = attnc.variant(score_mod=lambda s, b, h, q, kv: s + slopes[h])
    first = variant.launch_pack(slopes.device, _ops.capture_fields)
    assert first[0][0] is slopes
    slopes.fill_(1.0)  # the same memory: the kernel reads the new values
    second = variant.launch_pack(slopes.device, _ops.capture_fields)
    assert second[0] is first[0] and second[1] is first[1]
    ids = torch.zeros(8, dtype=torch.int64)  # converted to int32: a copy each call
    converted = attnc.variant(mask_mod=lambda b, h, q, kv: ids[q] == ids[kv])
    a = converted.launch_pack(ids.device, _ops.capture_fields)
    ids[0] = 5
    b = converted.launch_pack(ids.device, _ops.capture_fields)
    assert a[0][0] is not b[0][0] and int(b[0][0][0]) == 5
