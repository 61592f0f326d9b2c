"""attnc against an fp32 PyTorch reference on an sm_90 GPU, over the kinds of
cases FlexAttention's tests cover: score_mod families (identity, scaling,
relative position, ALiBi, soft-capping, trigonometric, head and batch
offsets, captured tables), mask_mod families (causal, prefix LM, sliding
window, document masks, chunks, fully masked rows, bool tables), shapes that
are not tile multiples, Sq != Sk, GQA and MQA, both 16-bit types, head dims
64/128/256, strided inputs, the log-sum-exp, block masks, the backward,
torch.compile and CUDA graphs. The reference evaluates the same Python mods
on broadcast index tensors, as FlexAttention's eager path does."""

import math

import pytest
import torch

import attnc

pytestmark = pytest.mark.gpu

DEVICE = "cuda"


def reference(q, k, v, score_mod=None, mask_mod=None, scale=None, causal=False,
              align="bottom_right", window=None):
    """Output (fp32) and natural-log LSE of attention with the mods applied
    to broadcast (b, h, q_idx, kv_idx) index tensors."""
    b_, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    qf = q.float()
    kf = k.float().repeat_interleave(hq // hkv, dim=1)
    vf = v.float().repeat_interleave(hq // hkv, dim=1)
    scale = scale if scale is not None else 1.0 / math.sqrt(d)
    s = (qf @ kf.transpose(-1, -2)) * scale
    b = torch.arange(b_, device=q.device).view(-1, 1, 1, 1)
    h = torch.arange(hq, device=q.device).view(1, -1, 1, 1)
    qi = torch.arange(sq, device=q.device).view(1, 1, -1, 1)
    kv = torch.arange(sk, device=q.device).view(1, 1, 1, -1)
    if score_mod is not None:
        s = score_mod(s, b, h, qi, kv).float().expand(b_, hq, sq, sk)
    keep = torch.ones((b_, hq, sq, sk), dtype=torch.bool, device=q.device)
    if mask_mod is not None:
        keep = keep & mask_mod(b, h, qi, kv)
    shift = sk - sq if align == "bottom_right" else 0
    if causal:
        keep = keep & (kv <= qi + shift)
    if window is not None:
        keep = keep & (kv >= qi + shift - window[0]) & (kv <= qi + shift + window[1])
    s = s.masked_fill(~keep, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.unsqueeze(-1)).nan_to_num(0.0)
    return p @ vf, lse


def rand(*shape, dtype=torch.bfloat16, scale=1.0):
    return (torch.randn(*shape, device=DEVICE) * scale).to(dtype)


def check(out, expected, dtype, what=""):
    tolerance = 2e-2 if dtype == torch.bfloat16 else 4e-3
    error = (out.float() - expected).abs().max().item()
    assert error <= tolerance, f"{what}: max |error| {error} > {tolerance}"


def check_input_gradients(inputs, references, what=""):
    """q, k and v's gradients against those of their fp32 references."""
    for name, got, want in zip(("dq", "dk", "dv"), (t.grad for t in inputs),
                               (t.grad for t in references)):
        error = (got.float() - want).abs().max().item()
        scale = want.abs().max().item()
        assert error <= 0.02 * scale + 2e-2, f"{what}{name}: max |error| {error} (max {scale})"


TABLE = 8192
bias_table = None


def _tables():
    global bias_table
    if bias_table is None:
        torch.manual_seed(7)
        bias_table = {
            "rel": torch.randn(16, 2 * TABLE + 1, device=DEVICE),
            "slopes": torch.tensor([2.0 ** -(i + 1) for i in range(16)], device=DEVICE),
            "head": torch.randn(16, device=DEVICE),
            "batch": torch.randn(4, device=DEVICE),
            "doc": torch.sort(torch.randint(0, 5, (4, 2048), device=DEVICE), dim=1).values,
            "keep": torch.rand(2048, device=DEVICE) > 0.3,
            "temperature": torch.tensor(0.7, device=DEVICE),
        }
    return bias_table


def score_mods():
    t = _tables()
    return {
        "identity": lambda s, b, h, q, kv: s,
        "times_two": lambda s, b, h, q, kv: s * 2,
        "squared": lambda s, b, h, q, kv: s * s,
        "relative": lambda s, b, h, q, kv: s + (q - kv) / 64,
        "alibi": lambda s, b, h, q, kv: s - t["slopes"][h] * (q - kv).abs(),
        "softcap": lambda s, b, h, q, kv: torch.tanh(s / 20) * 20,
        "trig": lambda s, b, h, q, kv: torch.sin(s) + torch.cos(s * 0.5),
        "head_offset": lambda s, b, h, q, kv: s + t["head"][h],
        "batch_head": lambda s, b, h, q, kv: s * t["batch"][b] + t["head"][h],
        "rel_bias_table": lambda s, b, h, q, kv: s + t["rel"][h, q - kv + TABLE],
        "checkerboard": lambda s, b, h, q, kv: torch.where((q + kv) % 2 == 0, s + 1.0, s - 1.0),
        "temperature": lambda s, b, h, q, kv: s * t["temperature"],
        "exp_decay": lambda s, b, h, q, kv: s + torch.exp(-(q - kv).abs().float() / 32),
    }


def mask_mods():
    t = _tables()
    return {
        "causal": lambda b, h, q, kv: q >= kv,
        "prefix_lm": lambda b, h, q, kv: (kv < 100) | (q >= kv),
        "sliding_window": lambda b, h, q, kv: (q >= kv) & (q - kv < 96),
        "document": lambda b, h, q, kv: t["doc"][b, q] == t["doc"][b, kv],
        "document_causal": lambda b, h, q, kv: (t["doc"][b, q] == t["doc"][b, kv]) & (q >= kv),
        "chunked": lambda b, h, q, kv: q // 128 == kv // 128,
        "rows_fully_masked": lambda b, h, q, kv: (q % 5 != 0) & (kv <= q + 3),
        "bool_table": lambda b, h, q, kv: t["keep"][kv],
        "head_dependent": lambda b, h, q, kv: (h % 2 == 0) | (q >= kv),
    }


SCORE_MODS = ["identity", "times_two", "squared", "relative", "alibi", "softcap", "trig",
              "head_offset", "batch_head", "rel_bias_table", "checkerboard", "temperature",
              "exp_decay"]
MASK_MODS = ["causal", "prefix_lm", "sliding_window", "document", "document_causal", "chunked",
             "rows_fully_masked", "bool_table", "head_dependent"]


@pytest.mark.parametrize("name", SCORE_MODS)
def test_score_mod(name):
    assert sorted(score_mods()) == sorted(SCORE_MODS)
    mod = score_mods()[name]
    q, k, v = rand(2, 8, 300, 128), rand(2, 8, 517, 128), rand(2, 8, 517, 128)
    out, lse = attnc.attention(q, k, v, score_mod=mod, return_lse=True)
    expected, expected_lse = reference(q, k, v, score_mod=mod)
    check(out, expected, q.dtype, name)
    assert torch.allclose(lse, expected_lse, atol=5e-2, rtol=1e-3), name


@pytest.mark.parametrize("name", MASK_MODS)
def test_mask_mod(name):
    assert sorted(mask_mods()) == sorted(MASK_MODS)
    mod = mask_mods()[name]
    q, k, v = rand(2, 8, 1000, 64), rand(2, 8, 1000, 64), rand(2, 8, 1000, 64)
    out = attnc.attention(q, k, v, mask_mod=mod)
    expected, _ = reference(q, k, v, mask_mod=mod)
    check(out, expected, q.dtype, name)


@pytest.mark.parametrize("shape", [
    (1, 8, 8, 128, 128, 128), (2, 8, 2, 127, 333, 64), (2, 4, 1, 1000, 1000, 128),
    (1, 4, 4, 200, 300, 256), (3, 2, 2, 1, 77, 64), (1, 16, 4, 700, 129, 128)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_shapes_dtypes_and_gqa(shape, dtype):
    b, hq, hkv, sq, sk, d = shape
    q, k, v = rand(b, hq, sq, d, dtype=dtype), rand(b, hkv, sk, d, dtype=dtype), rand(
        b, hkv, sk, d, dtype=dtype)
    mod = score_mods()["alibi"]
    out = attnc.attention(q, k, v, score_mod=mod, enable_gqa=hq != hkv)
    expected, _ = reference(q, k, v, score_mod=mod)
    check(out, expected, dtype, str(shape))


@pytest.mark.parametrize("sq", [1, 48, 64])
def test_verification_rows_with_gqa_and_their_backward(sq):
    # Up to 64 query rows over a GQA cache: the forward kernel takes two
    # query heads a work tile (or the short-query path at one row); the
    # backward reads the log-sum-exp those tiles wrote.
    b, hq, hkv, sk, d = 2, 8, 2, 1000, 128
    q = rand(b, hq, sq, d).requires_grad_()
    k, v = (rand(b, hkv, sk, d).requires_grad_() for _ in range(2))
    with torch.no_grad():
        _, lse = attnc.attention(q, k, v, causal=True, enable_gqa=True, return_lse=True)
    out = attnc.attention(q, k, v, causal=True, enable_gqa=True)
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    expected, expected_lse = reference(q32, k32, v32, causal=True)
    check(out, expected, q.dtype, f"Sq {sq}")
    assert torch.allclose(lse, expected_lse.detach(), atol=5e-2)
    grad = rand(b, hq, sq, d)
    out.backward(grad)
    expected.backward(grad.float())
    check_input_gradients((q, k, v), (q32, k32, v32), f"Sq {sq} ")


@pytest.mark.parametrize("align", ["bottom_right", "top_left"])
@pytest.mark.parametrize("mask", ["causal", "window"])
def test_builtin_masks_with_unequal_lengths(align, mask):
    q, k, v = rand(2, 4, 333, 128), rand(2, 4, 500, 128), rand(2, 4, 500, 128)
    kwargs = dict(causal=True) if mask == "causal" else dict(window=(64, 16))
    out, lse = attnc.attention(q, k, v, align=align, return_lse=True, **kwargs)
    expected, expected_lse = reference(q, k, v, align=align, **kwargs)
    check(out, expected, q.dtype, f"{mask} {align}")
    finite = torch.isfinite(expected_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    assert torch.allclose(lse[finite], expected_lse[finite], atol=5e-2)


def test_fully_masked_rows_are_zero_with_minus_inf_lse():
    q, k, v = rand(1, 2, 256, 64), rand(1, 2, 100, 64), rand(1, 2, 100, 64)
    out, lse = attnc.attention(q, k, v, causal=True, align="bottom_right", return_lse=True)
    assert torch.all(out[:, :, :156] == 0) and torch.all(lse[:, :, :156] == -math.inf)
    assert not torch.isnan(out).any()


def test_out_argument_and_lse_after_calls_without_it():
    q, k, v = rand(2, 8, 300, 128), rand(2, 8, 300, 128), rand(2, 8, 300, 128)
    expected = attnc.attention(q, k, v, causal=True)
    buffer = torch.empty_like(q)
    assert attnc.attention(q, k, v, causal=True, out=buffer) is buffer
    assert torch.equal(buffer, expected)
    _, lse = attnc.attention(q, k, v, causal=True, return_lse=True)
    _, expected_lse = reference(q, k, v, causal=True)
    assert torch.allclose(lse, expected_lse, atol=5e-2)


def test_strided_inputs_from_a_packed_qkv():
    b, s, h, d = 2, 257, 8, 128
    qkv = rand(b, s, 3, h, d)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    assert not q.is_contiguous()
    out = attnc.attention(q, k, v, causal=True)
    expected, _ = reference(q, k, v, causal=True)
    check(out, expected, q.dtype, "packed qkv")


def test_block_mask_is_built_once_and_reused():
    mod = mask_mods()["document_causal"]
    q, k, v = rand(2, 8, 2048, 128), rand(2, 8, 2048, 128), rand(2, 8, 2048, 128)
    block_mask = attnc.create_block_mask(mod, 2, None, 2048, 2048)
    out = attnc.attention(q, k, v, block_mask=block_mask)
    assert len(block_mask._buffers) == 1
    out2 = attnc.attention(q, k, v, block_mask=block_mask)
    assert len(block_mask._buffers) == 1
    expected, _ = reference(q, k, v, mask_mod=mod)
    check(out, expected, q.dtype, "block mask")
    assert torch.equal(out, out2)
    with pytest.raises(ValueError, match="block_mask: built for Q_LEN"):
        attnc.attention(q[:, :, :1024], k, v, block_mask=block_mask)


def test_captured_tensor_changes_are_seen():
    table = torch.zeros(8, device=DEVICE)
    mod = lambda s, b, h, q, kv: s + table[h]
    q, k, v = rand(1, 8, 128, 64), rand(1, 8, 128, 64), rand(1, 8, 128, 64)
    first = attnc.attention(q, k, v, score_mod=mod)
    table.fill_(3.0)  # the same shift for every key: the softmax does not change
    second = attnc.attention(q, k, v, score_mod=mod)
    check(second, first.float(), q.dtype, "shifted")
    table[1::2] = 0.0
    _, lse = attnc.attention(q, k, v, score_mod=mod, return_lse=True)
    _, expected_lse = reference(q, k, v, score_mod=mod)
    assert torch.allclose(lse, expected_lse, atol=5e-2)


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("gqa", [1, 4])
def test_backward_matches_fp32_autograd(head_dim, gqa):
    b, hq, sq, sk = 2, 8, 333, 333
    hkv = hq // gqa
    q = rand(b, hq, sq, head_dim).requires_grad_()
    k = rand(b, hkv, sk, head_dim).requires_grad_()
    v = rand(b, hkv, sk, head_dim).requires_grad_()
    grad = rand(b, hq, sq, head_dim)
    out = attnc.attention(q, k, v, causal=True, enable_gqa=gqa > 1)
    out.backward(grad)
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    expected, _ = reference(q32, k32, v32, causal=True)
    expected.backward(grad.float())
    check_input_gradients((q, k, v), (q32, k32, v32))


def test_gradients_keep_the_inputs_layout():
    # Autograd keeps a gradient of its tensor's strides as it is; one of
    # other strides it would copy.
    q = rand(2, 4, 200, 64).requires_grad_()
    k, v = (rand(2, 4, 300, 64).transpose(1, 2).contiguous().transpose(1, 2).requires_grad_()
            for _ in range(2))
    attnc.attention(q, k, v).backward(rand(2, 4, 200, 64))
    for t in (q, k, v):
        assert t.grad.stride() == t.stride()


def _gradients_against_reference(q, k, v, grad, tolerance=0.02, **mods):
    """Backpropagates `grad` through attnc and through the fp32 reference
    with the same mods, and compares dq, dk and dv."""
    attnc.attention(q, k, v, **mods).backward(grad)
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    expected, _ = reference(q32, k32, v32, **mods)
    expected.backward(grad.float())
    for name, got, want in (("dq", q.grad, q32.grad), ("dk", k.grad, k32.grad),
                            ("dv", v.grad, v32.grad)):
        error = (got.float() - want).abs().max().item()
        scale = want.abs().max().item()
        assert error <= tolerance * scale + 2e-2, f"{name}: max |error| {error} (max {scale})"


@pytest.mark.parametrize("name", SCORE_MODS)
def test_backward_through_score_mod(name):
    q = rand(2, 4, 300, 64).requires_grad_()
    k, v = (rand(2, 4, 517, 64).requires_grad_() for _ in range(2))
    _gradients_against_reference(q, k, v, rand(2, 4, 300, 64), score_mod=score_mods()[name])


@pytest.mark.parametrize("name", MASK_MODS)
def test_backward_through_mask_mod(name):
    q, k, v = (rand(2, 4, 700, 64).requires_grad_() for _ in range(3))
    _gradients_against_reference(q, k, v, rand(2, 4, 700, 64), mask_mod=mask_mods()[name])


@pytest.mark.parametrize("name", ["document", "document_causal", "bool_table"])
def test_backward_with_a_block_mask_skips_what_it_marks_empty(name):
    # The block mask's tile coverage goes to the backward as well.
    mod = mask_mods()[name]
    q, k, v = (rand(2, 4, 1500, 64).requires_grad_() for _ in range(3))
    block_mask = attnc.create_block_mask(mod, 2, None, 1500, 1500)
    grad = rand(2, 4, 1500, 64)
    attnc.attention(q, k, v, block_mask=block_mask).backward(grad)
    got = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    _gradients_against_reference(q, k, v, grad, mask_mod=mod)
    for with_mask, without in zip(got, (q.grad, k.grad, v.grad)):
        assert (with_mask.float() - without.float()).abs().max().item() < 2e-2


def test_learnable_captured_tensors_get_their_gradients():
    # Gentle slopes and a small table keep every row's attention spread, so
    # the capture gradients are not the near-cancelling sums a row that
    # attends to one key gives (there the output's rounding dominates).
    torch.manual_seed(3)
    slopes = (torch.rand(4, device=DEVICE) * 0.05).requires_grad_()
    table = (torch.randn(4, 2 * 512 + 1, device=DEVICE) * 0.5).requires_grad_()
    slopes32, table32 = (t.detach().clone().requires_grad_() for t in (slopes, table))
    q, k, v = (rand(2, 4, 400, 64) for _ in range(3))
    grad = rand(2, 4, 400, 64)

    def mods(s, t):
        return lambda x, b, h, qi, kv: x - s[h] * (qi - kv).abs() + t[h, qi - kv + 512]

    attnc.attention(q, k, v, score_mod=mods(slopes, table), causal=True).backward(grad)
    expected, _ = reference(q.float(), k.float(), v.float(), score_mod=mods(slopes32, table32),
                            causal=True)
    expected.backward(grad.float())
    for name, got, want in (("slopes", slopes.grad, slopes32.grad),
                            ("table", table.grad, table32.grad)):
        assert got is not None and got.dtype == want.dtype and got.shape == want.shape, name
        error = ((got - want).norm() / want.norm()).item()
        assert error < 3e-2, f"{name}: relative L2 error {error}"


def _learnable_slope_grads(runs, **options):
    torch.manual_seed(5)
    slopes = (torch.rand(8, device=DEVICE) * 0.05).requires_grad_()
    q, k, v = (rand(2, 8, 1000, 128) for _ in range(3))
    grad = rand(2, 8, 1000, 128)
    results = []
    for _ in range(runs):
        slopes.grad = None
        attnc.attention(q, k, v, causal=True,
                        score_mod=lambda x, b, h, qi, kv: x - slopes[h] * (qi - kv)).backward(grad)
        results.append(slopes.grad.clone())
    return results


def test_capture_gradients_are_the_same_bits_on_every_run():
    first, *later = _learnable_slope_grads(20)
    for other in later:
        assert torch.equal(first, other)
    # Float atomics on request: the same values to rounding.
    with attnc.capture_grad_atomics():
        atomic = _learnable_slope_grads(1)[0]
    assert ((atomic - first).norm() / first.norm()).item() < 1e-4


def test_backward_options_reach_autograd_threads(monkeypatch):
    # Autograd runs CUDA backward functions on its own threads: the options
    # set around .backward() must still reach the launch.
    seen = []
    pack = attnc._lib.pack_backward

    def spy(*args, **kwargs):
        seen.append((kwargs.get("deterministic"), kwargs.get("capture_grad_atomics")))
        return pack(*args, **kwargs)

    monkeypatch.setattr(attnc._lib, "pack_backward", spy)
    q, k, v = (rand(1, 4, 256, 64).requires_grad_() for _ in range(3))
    out = attnc.attention(q, k, v, causal=True)
    with attnc.deterministic_backward():
        out.sum().backward()
    assert seen and all(options == (True, False) for options in seen)
    seen.clear()
    out = attnc.attention(q, k, v, causal=True)
    with attnc.capture_grad_atomics():
        out.sum().backward()
    assert seen and all(options == (False, True) for options in seen)


def test_causal_mask_mod_trains_through_the_builtin_mask():
    q, k, v = (rand(1, 4, 256, 64).requires_grad_() for _ in range(3))
    attnc.attention(q, k, v, mask_mod=lambda b, h, qi, kv: qi >= kv).sum().backward()
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    reference(q32, k32, v32, causal=True, align="top_left")[0].sum().backward()
    assert (q.grad.float() - q32.grad).abs().max().item() < 5e-2


def test_deterministic_backward_is_bitwise_repeatable():
    q, k, v = (rand(2, 8, 1024, 128).requires_grad_() for _ in range(3))
    grad = rand(2, 8, 1024, 128)
    grads = []
    with attnc.deterministic_backward():
        for _ in range(3):
            for t in (q, k, v):
                t.grad = None
            attnc.attention(q, k, v, causal=True).backward(grad)
            grads.append([t.grad.clone() for t in (q, k, v)])
    for later in grads[1:]:
        for a, b in zip(grads[0], later):
            assert torch.equal(a, b)


def test_torch_compile_fullgraph_matches_eager():
    variant = attnc.variant(score_mod=score_mods()["rel_bias_table"])

    def model(q, k, v):
        a = attnc.attention(q, k, v, causal=True)
        c = attnc.attention(q, k, v, variant=variant)
        d = attnc.attention(q, k, v, score_mod=lambda s, b, h, qi, kv: torch.tanh(s / 20) * 20)
        return a, c, d

    q, k, v = rand(2, 8, 256, 128), rand(2, 8, 256, 128), rand(2, 8, 256, 128)
    compiled = torch.compile(model, fullgraph=True)
    for got, expected in zip(compiled(q, k, v), model(q, k, v)):
        assert torch.equal(got, expected)


def test_torch_compile_training_step():
    q, k, v = (rand(1, 8, 512, 64).requires_grad_() for _ in range(3))

    def step(q, k, v):
        return attnc.attention(q, k, v, causal=True).float().square().mean()

    torch.compile(step, fullgraph=True)(q, k, v).backward()
    expected = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    step(q, k, v).backward()
    for a, b in zip(expected, (q.grad, k.grad, v.grad)):
        assert (a.float() - b.float()).abs().max().item() < 1e-2


def test_cuda_graph_capture_and_replay():
    q, k, v = rand(2, 8, 512, 128), rand(2, 8, 512, 128), rand(2, 8, 512, 128)
    mod = score_mods()["alibi"]
    eager = attnc.attention(q, k, v, score_mod=mod, causal=True)  # compiles and loads
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = attnc.attention(q, k, v, score_mod=mod, causal=True)
    q.copy_(rand(2, 8, 512, 128))
    graph.replay()
    torch.cuda.synchronize()
    expected = attnc.attention(q, k, v, score_mod=mod, causal=True)
    assert torch.equal(captured, expected) and not torch.equal(captured, eager)


def test_cuda_graph_capture_of_decode_steps():
    # One query row over 8192 keys takes the short-query path with its keys
    # split, the combine a dependent launch of the split kernel; captured in
    # a graph, contiguous and over pages of 64 rows, and replayed on new
    # queries.
    torch.manual_seed(7)
    hq, hkv, d, sk, page_size = 32, 8, 128, 8192, 64
    k, v = rand(1, hkv, sk, d), rand(1, hkv, sk, d)
    pages = sk // page_size
    order = torch.randperm(pages, dtype=torch.int32)
    key_cache = torch.empty(pages, page_size, hkv, d, dtype=torch.bfloat16, device=DEVICE)
    value_cache = torch.empty_like(key_cache)
    key_cache[order.long()] = k[0].permute(1, 0, 2).reshape(pages, page_size, hkv, d)
    value_cache[order.long()] = v[0].permute(1, 0, 2).reshape(pages, page_size, hkv, d)
    table = order.view(1, pages).to(DEVICE)
    lengths = torch.tensor([sk], dtype=torch.int32, device=DEVICE)
    q = rand(1, hq, 1, d)

    def step():
        return (attnc.attention(q, k, v, causal=True, enable_gqa=True),
                attnc.paged_attention(q, key_cache, value_cache, table, lengths, causal=True))

    eager = step()  # compiles and loads
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    q.copy_(rand(1, hq, 1, d))
    graph.replay()
    torch.cuda.synchronize()
    expected, _ = reference(q, k, v, causal=True)
    for got, before in zip(captured, eager):
        check(got, expected, torch.bfloat16, "replayed decode step")
        assert not torch.equal(got, before)


def linear_reference(q, k, v, phi, scale, normalize=False, decay=None):
    qf, kf, vf = phi(q.float()), phi(k.float()), v.float()
    sq = q.shape[2]
    weights = qf @ kf.transpose(-1, -2) * scale
    i = torch.arange(sq, device=q.device)
    causal = (i.view(-1, 1) >= i.view(1, -1))
    if decay is not None:
        distance = (i.view(-1, 1) - i.view(1, -1)).clamp(min=0).float()
        weights = weights * decay.view(1, -1, 1, 1) ** distance
    weights = weights * causal
    out = weights @ vf
    if normalize:
        out = out / weights.sum(-1, keepdim=True)
    return out


def test_linear_attention_elu_and_state_carry():
    q, k, v = rand(2, 4, 512, 64, scale=0.3), rand(2, 4, 512, 64, scale=0.3), rand(2, 4, 512, 64)
    phi = lambda x: torch.where(x > 0, x + 1, torch.exp(x))
    out, state = attnc.linear_attention(q, k, v, feature_map="elu+1", return_state=True)
    expected = linear_reference(q, k, v, phi, 1 / 8)
    assert (out.float() - expected).abs().max().item() <= 0.02 * expected.abs().max().item()
    first, mid = attnc.linear_attention(q[:, :, :256], k[:, :, :256], v[:, :, :256],
                                        return_state=True)
    second = attnc.linear_attention(q[:, :, 256:], k[:, :, 256:], v[:, :, 256:],
                                    initial_state=mid)
    joined = torch.cat([first, second], dim=2)
    assert (joined.float() - out.float()).abs().max().item() <= 0.01 * out.abs().max().item()


def test_retention_with_listed_decays():
    q, k, v = rand(1, 2, 300, 64), rand(1, 2, 300, 64), rand(1, 2, 300, 64)
    decays = [0.9, 0.99]
    out = attnc.retention(q, k, v, decay=decays)
    expected = linear_reference(q, k, v, lambda x: x, 1 / 8,
                                decay=torch.tensor(decays, device=DEVICE))
    assert (out.float() - expected).abs().max().item() <= 0.02 * expected.abs().max().item()


def linear_reference_with_state(q, k, v, phi, scale, log_decay=None, initial_state=None):
    """Causal linear attention / retention in float64 with autograd: out and
    the final state, from per-token log-decays (B, H, S) and an initial state
    (B, H, D, D); k and v may have fewer heads (GQA)."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    qf, kf = phi(q), phi(k)
    b, h, s, d = q.shape
    cum = (log_decay.cumsum(-1) if log_decay is not None
           else torch.zeros(b, h, s, dtype=q.dtype, device=q.device))
    i = torch.arange(s, device=q.device)
    causal = i.view(-1, 1) >= i.view(1, -1)
    exponent = torch.where(causal, cum[..., :, None] - cum[..., None, :],
                           torch.full((), float("-inf"), dtype=q.dtype, device=q.device))
    out = ((qf @ kf.transpose(-1, -2)) * exponent.exp() * scale) @ v
    final = ((cum[..., -1:] - cum).exp()[..., None] * kf).transpose(-1, -2) @ v
    if initial_state is not None:
        out = out + scale * cum.exp()[..., None] * (qf @ initial_state)
        final = final + cum[..., -1].exp()[..., None, None] * initial_state
    return out, final


def _relative_error(actual, expected):
    return ((actual.double() - expected).norm() / expected.norm()).item()


def test_retention_backward_with_gate_and_state():
    torch.manual_seed(7)
    b, h, hkv, s, d = 2, 4, 2, 300, 64
    q, k, v = rand(b, h, s, d, scale=0.5), rand(b, hkv, s, d, scale=0.5), rand(b, hkv, s, d)
    g = torch.nn.functional.logsigmoid(torch.randn(b, h, s, device=DEVICE) + 3)
    state0 = torch.randn(b, h, d, d, device=DEVICE) * 0.1
    inputs = [t.clone().requires_grad_() for t in (q, k, v, g, state0)]
    out, state = attnc.retention(inputs[0], inputs[1], inputs[2], log_decay=inputs[3],
                                 initial_state=inputs[4], return_state=True)
    grad_out, grad_state = torch.randn_like(out), torch.randn_like(state) * 0.1
    torch.autograd.backward((out, state), (grad_out, grad_state))

    reference = [t.double().requires_grad_() for t in (q, k, v, g, state0)]
    ref_out, ref_state = linear_reference_with_state(
        reference[0], reference[1], reference[2], lambda x: x, d ** -0.5,
        log_decay=reference[3], initial_state=reference[4])
    torch.autograd.backward((ref_out, ref_state), (grad_out.double(), grad_state.double()))
    assert _relative_error(out, ref_out.detach()) < 2e-2
    for name, got, want, tolerance in zip(("dq", "dk", "dv", "dg", "dstate0"), inputs, reference,
                                          (2e-2, 2e-2, 2e-2, 8e-2, 2e-2)):
        error = _relative_error(got.grad, want.grad)
        assert error < tolerance, (name, error)


def test_linear_attention_backward_relu_and_listed_decays():
    torch.manual_seed(8)
    q, k, v = rand(1, 2, 200, 128, scale=0.5), rand(1, 2, 200, 128, scale=0.5), rand(1, 2, 200, 128)
    phi = torch.relu
    inputs = [t.clone().requires_grad_() for t in (q, k, v)]
    out = attnc.linear_attention(*inputs, feature_map="relu")
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    reference = [t.double().requires_grad_() for t in (q, k, v)]
    ref_out, _ = linear_reference_with_state(*reference, phi, 128 ** -0.5)
    ref_out.backward(grad_out.double())
    for got, want in zip(inputs, reference):
        assert _relative_error(got.grad, want.grad) < 2e-2

    decays = [0.9, 0.99]
    inputs = [t.clone().requires_grad_() for t in (q, k, v)]
    out = attnc.retention(*inputs, decay=decays)
    out.backward(grad_out)
    reference = [t.double().requires_grad_() for t in (q, k, v)]
    log_decay = torch.tensor(decays, dtype=torch.float64, device=DEVICE).log()
    ref_out, _ = linear_reference_with_state(
        *reference, lambda x: x, 128 ** -0.5, log_decay=log_decay.view(1, 2, 1).expand(1, 2, 200))
    ref_out.backward(grad_out.double())
    for got, want in zip(inputs, reference):
        assert _relative_error(got.grad, want.grad) < 2e-2


def test_normalized_linear_attention_backward_with_key_sums():
    # elu+1 features, GQA, an initial state and key sum, and gradients
    # arriving at the output, the final state and the final key sum.
    torch.manual_seed(9)
    b, h, hkv, s, d = 2, 4, 2, 300, 64
    q, k, v = rand(b, h, s, d, scale=0.5), rand(b, hkv, s, d, scale=0.5), rand(b, hkv, s, d)
    state0 = torch.randn(b, h, d, d, device=DEVICE) * 0.1
    key_sum0 = torch.rand(b, h, d, device=DEVICE) * 4
    inputs = [t.clone().requires_grad_() for t in (q, k, v, state0, key_sum0)]
    out, state, key_sum = attnc.linear_attention(
        inputs[0], inputs[1], inputs[2], normalize=True, initial_state=inputs[3],
        initial_key_sum=inputs[4], return_state=True)
    grads = (torch.randn_like(out), torch.randn_like(state) * 0.1, torch.randn_like(key_sum) * 0.1)
    torch.autograd.backward((out, state, key_sum), grads)

    phi = lambda x: torch.where(x > 0, x + 1, torch.exp(x))
    reference = [t.double().requires_grad_() for t in (q, k, v, state0, key_sum0)]
    scale = d ** -0.5
    scaled_num, ref_state = linear_reference_with_state(
        reference[0], reference[1], reference[2], phi, scale, initial_state=reference[3])
    running = reference[4][:, :, None, :] + phi(reference[1]).repeat_interleave(h // hkv,
                                                                                1).cumsum(2)
    ref_out = scaled_num / (scale * (phi(reference[0]) * running).sum(-1, keepdim=True))
    torch.autograd.backward((ref_out, ref_state, running[:, :, -1]),
                            tuple(g.double() for g in grads))
    assert _relative_error(out, ref_out.detach()) < 2e-2
    for name, got, want in zip(("dq", "dk", "dv", "dstate0", "dkeysum0"), inputs, reference):
        error = _relative_error(got.grad, want.grad)
        assert error < 2e-2, (name, error)


def test_bad_runtime_argument_is_named():
    q = rand(1, 8, 128, 128)
    misaligned = torch.empty(1 * 8 * 128 * 128 + 1, dtype=torch.bfloat16,
                             device=DEVICE)[1:].view(1, 8, 128, 128)
    with pytest.raises(attnc.AttncError, match=r"^k: "):
        attnc.attention(q, misaligned, q)


@pytest.mark.parametrize("page_size,sq,causal,softcap", [(16, 1, False, False), (64, 4, True, False),
                                                         (256, 1, True, True)])
def test_paged_attention_matches_each_sequence_with_shuffled_pages(page_size, sq, causal, softcap):
    # Three sequences of different key lengths in one pool, their pages in
    # a random order; each compared with the reference over its own keys.
    torch.manual_seed(page_size + sq)
    hq, hkv, d = 8, 2, 128
    lengths = [700, 1, 333]
    max_pages = max((n + page_size - 1) // page_size for n in lengths)
    pages = len(lengths) * max_pages + 3
    order = torch.randperm(pages).tolist()
    key_cache = rand(pages, page_size, hkv, d)
    value_cache = rand(pages, page_size, hkv, d)
    table = torch.zeros(len(lengths), max_pages, dtype=torch.int32)
    for b in range(len(lengths)):
        for j in range(max_pages):
            table[b, j] = order[b * max_pages + j]
    table = table.to(DEVICE)
    q = rand(len(lengths), hq, sq, d)
    score_mod = (lambda s, b, h, qi, kv: torch.tanh(s / 30) * 30) if softcap else None
    with torch.no_grad():
        out, lse = attnc.paged_attention(
            q, key_cache, value_cache, table, torch.tensor(lengths, dtype=torch.int32,
                                                           device=DEVICE),
            score_mod=score_mod, causal=causal, return_lse=True)
    for b, n in enumerate(lengths):
        rows = torch.arange(n, device=DEVICE)
        page_of = table[b].long()[rows // page_size]
        k = key_cache[page_of, rows % page_size].permute(1, 0, 2).unsqueeze(0)
        v = value_cache[page_of, rows % page_size].permute(1, 0, 2).unsqueeze(0)
        expected, expected_lse = reference(q[b:b + 1], k, v, score_mod=score_mod, causal=causal)
        check(out[b:b + 1], expected, torch.bfloat16, f"sequence {b}")
        finite = expected_lse.isfinite()
        assert torch.allclose(lse[b:b + 1][finite], expected_lse[finite], atol=2e-2)
