"""torch.compile(fullgraph=True) over attnc calls: no graph break, and
autograd through the compiled graph, on meta tensors (the operators' fake
implementations; no GPU or library needed)."""

import pytest
import torch
import torch._dynamo

import attnc

bias = torch.randn(8, 256)


def softcap(s, b, h, q, kv):
    return torch.tanh(s / 30) * 30


def relative_bias(s, b, h, q, kv):
    return s + bias[h, q - kv + 128]


def meta(*shape, grad=False):
    return torch.randn(*shape, dtype=torch.bfloat16, device="meta", requires_grad=grad)


def test_fullgraph_has_no_graph_break():
    variant = attnc.variant(score_mod=relative_bias)

    def model(q, k, v):
        a = attnc.attention(q, k, v, causal=True)
        b = attnc.attention(q, k, v, score_mod=softcap)
        c = attnc.attention(q, k, v, variant=variant)
        d = attnc.attention(q, k, v, mask_mod=lambda b, h, qi, kv: qi >= kv)
        return a + b + c + d

    q = meta(2, 8, 64, 128)
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model)(q, q, q)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    out = torch.compile(model, fullgraph=True, backend="eager")(q, q, q)
    assert out.shape == (2, 8, 64, 128)


def test_output_layout_matches_the_kernel():
    q = meta(2, 8, 64, 128)
    out, lse = torch.compile(lambda q: attnc.attention(q, q, q, return_lse=True),
                             fullgraph=True, backend="eager")(q)
    assert out.stride() == (64 * 8 * 128, 128, 8 * 128, 1)
    assert lse.shape == (2, 8, 64) and lse.dtype == torch.float32


def test_autograd_through_a_compiled_graph():
    q, k, v = meta(1, 8, 64, 64, grad=True), meta(1, 2, 64, 64, grad=True), meta(1, 2, 64, 64, grad=True)

    def loss(q, k, v):
        return attnc.attention(q, k, v, causal=True, enable_gqa=True).float().sum()

    torch.compile(loss, fullgraph=True, backend="aot_eager")(q, k, v).backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad.shape == v.shape


def test_mods_reading_globals_and_outer_closures_compile_without_a_break():
    def make(table):
        return lambda s, b, h, q, kv: s + table[h, kv]

    closure_mod = make(torch.randn(8, 64, device="meta"))

    def model(q):
        a = attnc.attention(q, q, q, score_mod=relative_bias)  # reads the global bias
        c = attnc.attention(q, q, q, score_mod=closure_mod)   # reads its closure
        return a + c

    q = meta(1, 8, 64, 128)
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model)(q)
    assert explanation.graph_break_count == 0
    graph = explanation.graphs[0]
    calls = [node for node in graph.graph.nodes if "attention_forward" in str(node.target)]
    assert len(calls) == 2
    # The captured tensors are inputs of the operator calls, not constants.
    for call in calls:
        assert len(call.args[3]) == 1


def test_mod_made_inside_compile_reading_a_local_tensor_is_refused():
    # Dynamo cannot hand such a closure to the constant tracing function; it
    # refuses the graph (the documented way out is attnc.variant, or the mod
    # defined outside the compiled function).
    q = meta(1, 8, 64, 128)

    def model(q, table):
        return attnc.attention(q, q, q, score_mod=lambda s, b, h, qi, kv: s + table[h, kv])

    with pytest.raises(Exception, match="closure"):
        torch.compile(model, fullgraph=True, backend="eager")(q, torch.randn(8, 64, device="meta"))


def test_operators_have_cuda_and_fake_kernels():
    from attnc import _ops
    for op in ("attention_forward", "attention_backward", "linear_forward", "linear_backward"):
        for key in ("CUDA", "CPU", "Meta"):
            assert torch._C._dispatch_has_kernel_for_dispatch_key(f"attnc::{op}", key), (op, key)
    assert callable(_ops._attention_forward_cuda)  # attention()'s eager path calls it
