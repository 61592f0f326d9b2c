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


def test_paged_fields_reach_the_library_where_the_header_puts_them():
    # The library's own checks read each packed field: a paged call with no
    # pages per row, then one whose key bound exceeds its pages, then
    # key_splits below -1. Nothing reaches the driver.
    from attnc import _lib
    kernel = attnc.compile_spec(attnc.attention_spec(16, 4, 128, causal=True))

    def tensor(address, shape):
        strides = (shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3], 1)
        return (address, _lib.BF16, 4, *shape, *strides)

    def run(paged, key_splits=0):
        args = _lib.pack_forward(
            tensor(0x10000000, (1, 4, 16, 128)), tensor(0x20000000, (8, 16, 4, 128)),
            tensor(0x30000000, (8, 16, 4, 128)), tensor(0x40000000, (1, 4, 16, 128)),
            0x50000000, 0, 0, paged=paged, key_splits=key_splits)
        with pytest.raises(_lib.AttncError) as error:
            kernel.run_forward(args, None)
        return str(error.value)

    assert run((0x70000000, 4, 0, 0x70001000, 0)).startswith(
        "paged.maxPages: must be positive, got 0")
    assert run((0x70000000, 4, 4, 0x70001000, 65)).startswith(
        "paged.maxSeqlenK: 65 is outside [0, paged.maxPages x page size = 64]")
    assert run((0x70000000, 4, 4, 0x70001000, 64), key_splits=-2).startswith(
        "key_splits: must be 0 (automatic), -1 (the forward kernel) or a split count, got -2")


def test_paged_attention_names_each_bad_argument_before_any_launch():
    q = torch.zeros(2, 8, 1, 128, dtype=torch.bfloat16)
    pool = torch.zeros(6, 16, 2, 128, dtype=torch.bfloat16)
    table = torch.zeros(2, 3, dtype=torch.int32)
    lengths = torch.tensor([40, 7], dtype=torch.int32)

    def message(**changes):
        args = dict(query=q, key_cache=pool, value_cache=pool, block_table=table,
                    seqlens_k=lengths)
        args.update(changes)
        with pytest.raises((TypeError, ValueError)) as error:
            attnc.paged_attention(**args)
        return str(error.value)

    assert message(value_cache=pool[:5]).startswith("key_cache, value_cache: expected two")
    assert message(key_cache=pool.half(), value_cache=pool.half()).startswith(
        "key_cache, value_cache: dtypes torch.float16")
    assert message(key_cache=torch.zeros(6, 16, 3, 128, dtype=torch.bfloat16),
                   value_cache=torch.zeros(6, 16, 3, 128, dtype=torch.bfloat16)).startswith(
        "key_cache: 3 kv heads do not divide query's 8")
    assert message(block_table=table.long()).startswith("block_table: expected int32")
    assert message(block_table=table[:1]).startswith("block_table: expected int32 (batch = 2")
    assert message(block_table=torch.zeros(3, 2, dtype=torch.int32).t()).startswith(
        "block_table: expected int32 (batch = 2, max_pages) with contiguous rows")
    assert message(seqlens_k=lengths[:1]).startswith("seqlens_k: expected contiguous int32 (2,)")
    assert message(key_splits=0).startswith("key_splits: expected None or a split count >= 1")
    # Every argument valid: the CPU tensors are refused last.
    assert message().startswith("query: paged_attention runs on CUDA tensors")
