#!/usr/bin/env python3
"""Measures the peer attention implementations at the shapes attn-bench uses.

Peers: PyTorch SDPA with the cuDNN backend, SDPA with the flash backend
(FlashAttention-2), FlexAttention compiled with torch.compile, and, where the
flash-attn-4 wheels are installed, FlashAttention-4's CuTe DSL kernels
(`fa4`: flash_attn.cute.flash_attn_func, its sm90 forward and backward, on
(B, S, H, D) copies of the same tensors made outside the timing). The grid is
the one attn-bench prints (B*S = 16384, H*D = 2048, bf16 forward), so both
tables come from one run on the GPU machine.

TFLOP/s = 4*B*H*S*S*D / time, halved for causal; the time is the median of
--repeats timed runs (CUDA events) after --warmup runs. With --backward the
table is the backward's: 2.5 times those FLOPs over the time of forward and
backward from a random dO less the forward's (dQ, dK and dV), the way
attn-bench --backward-grid counts (its grid: --head-dims 64,128
--seqlens 1024,2048,4096,8192,16384).
"""
import argparse
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--head-dims", default="64,128,256")
    parser.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    parser.add_argument("--tokens", type=int, default=16384, help="B*S")
    parser.add_argument("--hidden", type=int, default=2048, help="H*D")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--peers", default="cudnn,flash,flex")
    parser.add_argument("--csv", help="also write the rows to this CSV file")
    parser.add_argument("--backward", action="store_true",
                        help="time the backward (dQ, dK, dV) instead of the forward")
    return parser.parse_args()


def timed_ms(fn):
    """One call of fn, timed with CUDA events, in milliseconds."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def median_ms(fn, warmup, repeats, max_seconds=None):
    """Median CUDA-event time of `repeats` calls after `warmup` (at least one
    with max_seconds). With max_seconds, fewer repeats (at least 3) where
    they would take longer, judged from one timed call."""
    for _ in range(max(1, warmup) if max_seconds else warmup):
        fn()
    torch.cuda.synchronize()
    if max_seconds:
        once = timed_ms(fn)
        repeats = max(3, min(repeats, int(max_seconds * 1e3 / max(once, 1e-3))))
    return statistics.median(timed_ms(fn) for _ in range(repeats))


def make_sdpa(backend, q, k, v, causal):
    def run():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


def make_flex(q, k, v, causal):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    # A fresh compile per shape: past dynamo's recompile limit FlexAttention
    # silently falls back to an unfused path that materializes the scores.
    torch._dynamo.reset()
    compiled = torch.compile(flex_attention, dynamic=False)
    block_mask = None
    if causal:
        def causal_mask(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx
        block_mask = create_block_mask(causal_mask, None, None, q.shape[2], k.shape[2])
    return lambda: compiled(q, k, v, block_mask=block_mask)


def make_fa4(q, k, v, causal):
    from flash_attn.cute import flash_attn_func

    # FA4 takes (B, S, H, D); the copies are leaves, so that the backward
    # timed is FA4's own, without a transpose's.
    q, k, v = (t.detach().transpose(1, 2).contiguous().requires_grad_(t.requires_grad)
               for t in (q, k, v))

    def run():
        out = flash_attn_func(q, k, v, causal=causal)
        return out[0] if isinstance(out, tuple) else out
    return run


def backward_ms(make, q, k, v, warmup, repeats):
    """The backward's time: forward and backward from a random dO, less the
    forward alone (both medians)."""
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    forward = make(q, k, v)
    grad = torch.randn_like(forward())

    def step():
        forward().backward(grad)

    def forward_only():
        with torch.no_grad():
            forward()
    return median_ms(step, warmup, repeats) - median_ms(forward_only, warmup, repeats)


def main():
    args = parse_args()
    if not torch.cuda.is_available():
        print("skipped: no CUDA device for the peers", file=sys.stderr)
        return 0
    peers = args.peers.split(",")
    rows = []
    direction = "backward" if args.backward else "forward"
    print(f"# peers on {torch.cuda.get_device_name()} (torch {torch.__version__}), bf16 {direction}")
    print("| head dim | seqlen | causal | " + " | ".join(peers) + " |")
    print("|---|---|---|" + "---|" * len(peers))
    for head_dim in map(int, args.head_dims.split(",")):
        for seqlen in map(int, args.seqlens.split(",")):
            batch = max(1, args.tokens // seqlen)
            heads = max(1, args.hidden // head_dim)
            shape = (batch, heads, seqlen, head_dim)
            q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            for causal in (False, True):
                flops = 4.0 * batch * heads * seqlen * seqlen * head_dim / (2 if causal else 1)
                figures = []
                for peer in peers:
                    try:
                        if peer == "cudnn":
                            make = lambda q, k, v: make_sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v,
                                                             causal)
                        elif peer == "flash":
                            make = lambda q, k, v: make_sdpa(SDPBackend.FLASH_ATTENTION, q, k, v,
                                                             causal)
                        elif peer == "flex":
                            make = lambda q, k, v: make_flex(q, k, v, causal)
                        elif peer == "fa4":
                            make = lambda q, k, v: make_fa4(q, k, v, causal)
                        else:
                            raise ValueError(f"unknown peer {peer}")
                        if args.backward:
                            ms = backward_ms(make, q, k, v, args.warmup, args.repeats)
                            figures.append(2.5 * flops / ms / 1e9)
                        else:
                            ms = median_ms(make(q, k, v), args.warmup, args.repeats)
                            figures.append(flops / ms / 1e9)
                    except Exception as error:  # a peer that cannot run this shape
                        print(f"# {peer} d={head_dim} s={seqlen} causal={causal}: {error}",
                              file=sys.stderr)
                        figures.append(float("nan"))
                rows.append((head_dim, seqlen, causal, figures))
                cells = " | ".join(f"{f:.1f}" for f in figures)
                print(f"| {head_dim} | {seqlen} | {'yes' if causal else 'no'} | {cells} |",
                      flush=True)
            del q, k, v
            torch.cuda.empty_cache()
    if args.csv:
        with open(args.csv, "w") as out:
            out.write("head_dim,seqlen,causal," + ",".join(peers) + "\n")
            for head_dim, seqlen, causal, figures in rows:
                out.write(f"{head_dim},{seqlen},{int(causal)}," +
                          ",".join(f"{f:.2f}" for f in figures) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
