#!/usr/bin/env python3
"""Measures the peer linear-attention and retention kernels.

Peers are flash-linear-attention's Triton kernels (PyPI `fla-core`, import
name `fla`), with causal softmax SDPA (cuDNN backend) at the same shape as the
comparison:

  retention   fla.ops.retention.chunk_retention: fixed multi-scale decay,
              gamma_h = 1 - 2^(-5-h) for head h = 0..H-1
  simple_gla  fla.ops.simple_gla.chunk_simple_gla: one log-space gate per
              token and head, g = logsigmoid(randn) of shape [B, S, H], fp32
  linear      fla.ops.linear_attn.chunk_linear_attn, normalize=False (no
              feature map: q and k are taken as already featured)
  linear_normalized: the same with normalize=True (divided by q . the
              running key sum); not run unless named in --peers
  softmax     causal SDPA, cuDNN backend
  fused_retention, fused_simple_gla, fused_linear: fla's fused_chunk_*
              variants of the above (not run unless named in --peers)

fla's semantics (fla-core 0.6.0): q, k, v, o are [B, S, H, D] (head_first is
gone); the state is S_t = exp(g_t) S_{t-1} + k_t^T v_t, o_t = scale q_t S_t,
scale defaulting to 1/sqrt(D); the final state is fp32 [B, H, K, V].

Each fla kernel runs with output_final_state=True and no initial state. bf16,
B*S = --tokens (B = max(1, tokens // S)), H = --hidden // D. The time is the
median of CUDA-event-timed runs after --warmup runs (the first of which also
runs Triton's autotuning). TB/s counts the bytes of q, k, v and o only
(4*B*S*H*D*2); the state and the gate are not counted. vs_softmax is
softmax_ms / this_ms (above 1: faster than softmax attention).

--backward times fla's backward instead: the gradients of q, k, v (and g)
from a fixed dO through torch.autograd.grad on a forward kept with
retain_graph (the forward is not timed); TB/s then counts q, k, v, dO read
and dq, dk, dv written (7*B*S*H*D*2 bytes), and softmax is cuDNN's backward.

--check compares chunk_retention, chunk_simple_gla and chunk_linear_attn with
a pure-torch recurrence (S=100, D=64, fp32, with a random initial state) and
prints the largest errors, so that the layout, scale and decay used above are
known to be fla's.
"""
import argparse
import importlib
import os
import sys

import torch
import torch.nn.functional as F

from attn_peers import median_ms


DEFAULT_PEERS = "retention,simple_gla,linear,softmax"
FLA_PEERS = {
    # peer name: (module, function, uses a per-token gate)
    "retention": ("fla.ops.retention", "chunk_retention", False),
    "simple_gla": ("fla.ops.simple_gla", "chunk_simple_gla", True),
    "linear": ("fla.ops.linear_attn", "chunk_linear_attn", False),
    "fused_retention": ("fla.ops.retention", "fused_chunk_retention", False),
    "fused_simple_gla": ("fla.ops.simple_gla", "fused_chunk_simple_gla", True),
    "fused_linear": ("fla.ops.linear_attn", "fused_chunk_linear_attn", False),
    "linear_normalized": ("fla.ops.linear_attn", "chunk_linear_attn", False),
}
COLUMNS = ("kernel", "B", "S", "H", "D", "ms", "TB/s", "vs_softmax")


def parse_args():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--head-dims", default="128")
    parser.add_argument("--seqlens", default="2048,4096,8192,16384,32768,65536")
    parser.add_argument("--tokens", type=int, default=16384, help="B*S")
    parser.add_argument("--hidden", type=int, default=2048, help="H*D")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--max-seconds", type=float, default=5.0,
                        help="fewer repeats (at least 3) where one measurement would take longer")
    parser.add_argument("--peers", default=DEFAULT_PEERS,
                        help="comma-separated, of: " + ",".join(list(FLA_PEERS) + ["softmax"]))
    parser.add_argument("--tma", action="store_true",
                        help="set FLA_USE_TMA=1 before importing fla (its TMA paths on Hopper)")
    parser.add_argument("--check", action="store_true",
                        help="only compare fla with a pure-torch recurrence and exit")
    parser.add_argument("--backward", action="store_true",
                        help="time the backward (gradients of q, k, v and g) instead")
    parser.add_argument("--csv", help="also write the rows to this CSV file")
    return parser.parse_args()


def fla_function(peer):
    module_name, function_name, _ = FLA_PEERS[peer]
    return getattr(importlib.import_module(module_name), function_name)


def make_fla(peer, q, k, v, g):
    fn = fla_function(peer)
    gated = FLA_PEERS[peer][2]
    if gated:
        return lambda: fn(q, k, v, g=g, output_final_state=True)
    if "linear" in peer:
        normalize = peer == "linear_normalized"
        return lambda: fn(q, k, v, output_final_state=True, normalize=normalize)
    return lambda: fn(q, k, v, output_final_state=True)


def backward_of(forward, inputs):
    """A callable that runs the backward of forward() (whose first output is
    o) from a fixed random dO, the forward's graph kept between calls."""
    out = forward()
    o = out[0] if isinstance(out, tuple) else out
    grad = torch.randn_like(o)
    return lambda: torch.autograd.grad(o, inputs, grad, retain_graph=True)


def make_softmax(q, k, v):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    # SDPA takes [B, H, S, D]; the transposed views of the [B, S, H, D] tensors
    # keep the head dim contiguous, which cuDNN reads without a copy.
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))

    def run():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
    return run


# ---------------------------------------------------------------- check mode

def recurrent_reference(q, k, v, log_decay, scale, initial_state):
    """S_t = exp(log_decay_t) S_{t-1} + k_t^T v_t;  o_t = scale q_t S_t.

    q, k: [B, T, H, K]; v: [B, T, H, V]; log_decay: [B, T, H] (or None);
    initial_state: [B, H, K, V]. Returns o [B, T, H, V] and the final state.
    """
    B, T, H, K = q.shape
    state = initial_state.clone() if initial_state is not None else q.new_zeros(B, H, K, v.shape[-1])
    out = torch.empty_like(v)
    for t in range(T):
        if log_decay is not None:
            state = state * log_decay[:, t].exp()[:, :, None, None]
        state = state + k[:, t, :, :, None] * v[:, t, :, None, :]
        out[:, t] = scale * torch.einsum("bhk,bhkv->bhv", q[:, t], state)
    return out, state


def run_check():
    torch.manual_seed(0)
    B, T, H, D = 2, 100, 4, 64
    dev = "cuda"
    q = torch.randn(B, T, H, D, device=dev) * 0.5
    k = torch.randn(B, T, H, D, device=dev) * 0.5
    v = torch.randn(B, T, H, D, device=dev)
    h0 = torch.randn(B, H, D, D, device=dev) * 0.1
    g = F.logsigmoid(torch.randn(B, T, H, device=dev) + 3.0)  # mostly near 0: long memory
    scale = D ** -0.5
    heads = torch.arange(H, dtype=torch.float, device=dev)
    retention_decay = torch.log(1 - 2.0 ** (-5.0 - heads)).expand(B, T, H)

    cases = [
        # name, peer, kwargs for fla, log decay of the reference
        ("chunk_retention", "retention", {}, retention_decay),
        ("chunk_simple_gla", "simple_gla", {"g": g}, g),
        ("chunk_linear_attn", "linear", {"normalize": False}, None),
    ]
    failed = False
    print(f"# check: B={B} S={T} H={H} D={D} fp32, scale left to fla's default "
          f"(expected 1/sqrt(D) = {scale:.5f}), random fp32 initial state [B,H,K,V]")
    for name, peer, kwargs, log_decay in cases:
        try:
            fn = fla_function(peer)
            o, ht = fn(q, k, v, initial_state=h0, output_final_state=True, **kwargs)
            torch.cuda.synchronize()
            ref_o, ref_h = recurrent_reference(q, k, v, log_decay, scale, h0)
            err_o = (o.float() - ref_o).abs().max().item()
            err_h = (ht.float() - ref_h).abs().max().item()
            rel_o = err_o / ref_o.abs().max().item()
            rel_h = err_h / ref_h.abs().max().item()
            ok = rel_o < 1e-2 and rel_h < 1e-2
            failed |= not ok
            print(f"{name}: o {tuple(o.shape)} {o.dtype}, final state {tuple(ht.shape)} {ht.dtype}; "
                  f"max |err| o {err_o:.3e} (rel {rel_o:.1e}), state {err_h:.3e} (rel {rel_h:.1e}) "
                  f"{'ok' if ok else 'MISMATCH'}")
            if peer == "retention" and not ok:
                # Tell a wrong decay from a wrong scale or layout.
                for label, alt in (("no decay", None), ("scale 1", "scale1")):
                    if alt == "scale1":
                        alt_o, _ = recurrent_reference(q, k, v, log_decay, 1.0, h0)
                    else:
                        alt_o, _ = recurrent_reference(q, k, v, None, scale, h0)
                    print(f"  vs reference with {label}: max |err| "
                          f"{(o.float() - alt_o).abs().max().item():.3e}")
        except Exception as error:
            failed = True
            print(f"{name}: failed: {type(error).__name__}: {error}")
    return 1 if failed else 0


# ---------------------------------------------------------------- benchmark

def main():
    args = parse_args()
    if args.tma:
        os.environ["FLA_USE_TMA"] = "1"
    if args.check and "TRITON_F32_DEFAULT" not in os.environ:
        # fp32 dots in full precision for the comparison (TF32 otherwise).
        os.environ["TRITON_F32_DEFAULT"] = "ieee"
    if not torch.cuda.is_available():
        print("skipped: no CUDA device for the linear-attention peers", file=sys.stderr)
        return 0
    try:
        import fla
        fla_version = getattr(fla, "__version__", "?")
    except Exception as error:
        print(f"skipped: flash-linear-attention (fla-core) is not importable: "
              f"{type(error).__name__}: {error}. Install the wheel carried in .whl/ with "
              f"`python3 -m pip install --no-index --no-deps --target /tmp/site .whl/*.whl` "
              f"and PYTHONPATH=/tmp/site", file=sys.stderr)
        return 0
    if args.check:
        return run_check()

    peers = [p for p in args.peers.split(",") if p]
    for peer in peers:
        if peer != "softmax" and peer not in FLA_PEERS:
            print(f"unknown peer {peer}", file=sys.stderr)
            return 2
    # softmax first, so each fla row has its ratio
    order = (["softmax"] if "softmax" in peers else []) + [p for p in peers if p != "softmax"]

    print(f"# linear-attention peers on {torch.cuda.get_device_name()} (torch {torch.__version__}, "
          f"fla {fla_version}{', FLA_USE_TMA=1' if args.tma else ''}), bf16 "
          f"{'backward' if args.backward else 'forward'}, output_final_state=True; TB/s counts "
          f"{'q, k, v, dO, dq, dk, dv' if args.backward else 'q, k, v, o'}")
    print("| " + " | ".join(COLUMNS) + " |")
    print("|---|" + "---:|" * (len(COLUMNS) - 1))
    rows = []
    for head_dim in map(int, args.head_dims.split(",")):
        for seqlen in map(int, args.seqlens.split(",")):
            batch = max(1, args.tokens // seqlen)
            heads = max(1, args.hidden // head_dim)
            shape = (batch, seqlen, heads, head_dim)
            nbytes = (7.0 if args.backward else 4.0) * batch * seqlen * heads * head_dim * 2
            try:
                q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16,
                                       requires_grad=args.backward) for _ in range(3))
                # per-token, per-head log-space forget gate, as in fla's examples
                g = F.logsigmoid(torch.randn(batch, seqlen, heads, device="cuda", dtype=torch.float))
                g.requires_grad_(args.backward)
            except Exception as error:
                print(f"# B={batch} S={seqlen} H={heads} D={head_dim}: inputs: {error}",
                      file=sys.stderr)
                continue
            softmax_ms = float("nan")
            for peer in order:
                try:
                    if peer == "softmax":
                        fn = make_softmax(q, k, v)
                    else:
                        fn = make_fla(peer, q, k, v, g)
                    if args.backward:
                        gated = peer != "softmax" and FLA_PEERS[peer][2]
                        fn = backward_of(fn, (q, k, v, g) if gated else (q, k, v))
                    ms = median_ms(fn, args.warmup, args.repeats, args.max_seconds)
                except Exception as error:  # a peer that cannot run this shape
                    print(f"# {peer} B={batch} S={seqlen} H={heads} D={head_dim}: "
                          f"{type(error).__name__}: {error}", file=sys.stderr)
                    ms = float("nan")
                if peer == "softmax":
                    softmax_ms = ms
                tbps = nbytes / ms / 1e9
                ratio = softmax_ms / ms
                row = (peer, batch, seqlen, heads, head_dim, ms, tbps, ratio)
                rows.append(row)
                print(f"| {peer} | {batch} | {seqlen} | {heads} | {head_dim} | {ms:.3f} | "
                      f"{tbps:.2f} | {ratio:.2f} |", flush=True)
                torch.cuda.empty_cache()
            del q, k, v, g
            torch.cuda.empty_cache()
    if args.csv:
        with open(args.csv, "w") as out:
            out.write("kernel,B,S,H,D,ms,TBps,vs_softmax\n")
            for peer, batch, seqlen, heads, head_dim, ms, tbps, ratio in rows:
                out.write(f"{peer},{batch},{seqlen},{heads},{head_dim},"
                          f"{ms:.4f},{tbps:.3f},{ratio:.3f}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
