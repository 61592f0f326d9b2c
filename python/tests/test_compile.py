"""The package over libattnc_c.so without a GPU: traced specs compile to PTX
with WGMMA and TMA, diagnostics name the spec's line, torch.compile keeps
the operators in one graph (meta tensors run the fake implementations)."""

import pytest
import torch

import attnc

pytestmark = pytest.mark.library


def test_traced_spec_compiles_to_wgmma_and_tma():
    bias = torch.zeros(8, 4095)
    text = attnc.attention_spec(8, 8, 128, score_mod=lambda s, b, h, q, kv: s + bias[h, q - kv],
                                causal=True)
    kernel = attnc.compile_spec(text)
    assert kernel.info["head_dim"] == 128 and kernel.info["num_captures"] == 1
    assert kernel.info["causal"] == 1
    ptx = kernel.ptx
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx


def test_every_catalogue_mod_passes_the_verifier():
    document = torch.zeros(2, 512, dtype=torch.int32)
    slopes = torch.ones(8)
    mods = [
        dict(score_mod=lambda s, b, h, q, kv: torch.tanh(s / 30) * 30),
        dict(score_mod=lambda s, b, h, q, kv: s - slopes[h] * (q - kv).abs()),
        dict(mask_mod=lambda b, h, q, kv: (document[b, q] == document[b, kv]) & (q >= kv)),
        dict(mask_mod=lambda b, h, q, kv: (kv < 128) | (q >= kv)),
        dict(mask_mod=lambda b, h, q, kv: q // 128 == kv // 128),
        dict(score_mod=lambda s, b, h, q, kv: torch.where(kv % 2 == 0, s, s * 0.5),
             mask_mod=lambda b, h, q, kv: (q - kv).abs() <= 64),
        dict(score_mod=lambda s, b, h, q, kv: s * torch.sigmoid(s) + torch.exp(-(q - kv) / 10)),
    ]
    for mod in mods:
        for dtype, head_dim in ((torch.bfloat16, 128), (torch.float16, 64)):
            text = attnc.attention_spec(8, 2, head_dim, dtype=dtype, **mod)
            kernel = attnc.compile_spec(text)
            assert kernel.info["q_heads"] == 8 and kernel.info["kv_heads"] == 2


def test_softcap_by_division_gets_the_product_kernel():
    # attn-lower-mods turns the division by the cap into the product the
    # kernel folds into its scale: both spellings give the same PTX.
    divided = attnc.attention_spec(8, 8, 128, causal=True,
                                   score_mod=lambda s, b, h, q, kv: torch.tanh(s / 50.0) * 50.0)
    multiplied = attnc.attention_spec(8, 8, 128, causal=True,
                                      score_mod=lambda s, b, h, q, kv: torch.tanh(s * 0.02) * 50.0)
    assert "arith.divf" in divided and "arith.divf" not in multiplied
    assert attnc.compile_spec(divided).ptx == attnc.compile_spec(multiplied).ptx


def test_backward_module_of_a_builtin_mask():
    text = attnc.attention_spec(8, 8, 64, causal=True)
    kernel = attnc.compile_spec(text, backward=True)
    assert kernel.info["backward"] == 1
    assert "wgmma.mma_async" in kernel.ptx


def test_backward_module_of_a_region_derives_its_product():
    text = attnc.attention_spec(8, 8, 64, score_mod=lambda s, b, h, q, kv: torch.tanh(s))
    kernel = attnc.compile_spec(text, backward=True)
    assert kernel.info["backward"] == 1
    assert "tanh.approx.f32" in kernel.ptx


def test_backward_of_a_score_rounded_to_an_index_is_an_error_not_a_kernel():
    table = torch.zeros(64)
    text = attnc.attention_spec(8, 8, 64,
                                score_mod=lambda s, b, h, q, kv: s + table[s.to(torch.int32)])
    with pytest.raises(attnc.AttncError, match="arith.fptosi"):
        attnc.compile_spec(text, backward=True)


def test_malformed_spec_names_its_line():
    text = attnc.attention_spec(8, 8, 128).replace("head_dim = 128", "head_dim = 96")
    with pytest.raises(attnc.AttncError, match=r"attnc\.spec:2:\d+"):
        attnc.compile_spec(text)


def test_linear_and_retention_specs_compile():
    from attnc import _spec
    for normalizer in ("#attn.linear<feature_map = elu_plus_one, normalize = true>",
                       "#attn.retention", "#attn.retention<gated>"):
        text = _spec.kernel_text("linear", _spec.problem_text(4, 4, 64, torch.bfloat16),
                                 "#attn.causal<top_left>", normalizer)
        assert attnc.compile_spec(text).info["linear_family"] == 1
