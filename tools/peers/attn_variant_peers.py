#!/usr/bin/env python3
"""Measures attention variants (masks and score modifications) through
FlexAttention, the peer of attnc's variant kernels.

The variants are the ones of ../shared/PEERS.md, "Variants through
FlexAttention", plus a few more; each is a mask_mod (which blocks and elements
take part) and an optional score_mod (what is done to a score before the
softmax). Default shape: B = 2, H = 16, S = 8192, head dim 128, bf16 forward,
Sq = Sk, no GQA.

For each variant the script
  1. builds the BlockMask eagerly with create_block_mask (128 x 128 blocks,
     FlexAttention's default, shared by every batch and head) and times that
     on its own: attnc builds its counterpart at compile time for masks it can
     analyse, so the cost is reported apart from the attention time;
  2. compiles torch.compile(flex_attention) afresh for the variant;
  3. times the attention call alone: the median of --repeats runs (CUDA
     events) after --warmup runs, with attn_peers.py's median_ms.

Columns: ms (attention), block sparsity % (BlockMask.sparsity(): the share of
128 x 128 blocks that are skipped), block mask ms (median wall time of
create_block_mask, GPU synchronised, after one warm-up call).

Usage (on the GPU machine):
  python3 tools/peers/attn_variant_peers.py [--variants a,b,...] [--csv FILE]
      [--batch 2] [--seqlen 8192] [--heads 16] [--head-dim 128]
      [--warmup 5] [--repeats 20] [--seed 0]
"""
import argparse
import os
import random
import statistics
import sys
import time

# The block mask is cheap next to the compile; a few runs give a stable median.
BLOCK_MASK_WARMUP = 1
BLOCK_MASK_REPEATS = 5
# PEERS.md fixes the ALiBi slope as (h + 1) / 16 whatever the head count.
ALIBI_SLOPE_DIVISOR = 16.0


# --- mask_mods and score_mods ---------------------------------------------
# Written with Python operators only (no torch calls): FlexAttention passes
# index tensors, and the same functions then also run on plain ints, so the
# definitions can be checked where torch is not installed.

def causal(b, h, q, k):
    return q >= k


def sliding_window(window):
    def mask(b, h, q, k):
        return (q >= k) & (q - k < window)
    return mask


def longformer(half_window, globals_):
    # Window |q - k| < half_window (512 wide), and the first globals_ tokens
    # attend to and are attended by every token.
    def mask(b, h, q, k):
        return (abs(q - k) < half_window) | (q < globals_) | (k < globals_)
    return mask


def prefix_lm(prefix):
    def mask(b, h, q, k):
        return (k < prefix) | (q >= k)
    return mask


def chunked_local(chunk):
    def mask(b, h, q, k):
        return (q // chunk == k // chunk) & (q >= k)
    return mask


def same_document_causal(doc_ids):
    # doc_ids is captured: FlexAttention lifts it into the kernel as a buffer.
    def mask(b, h, q, k):
        return (doc_ids[q] == doc_ids[k]) & (q >= k)
    return mask


def alibi(score, b, h, q, k):
    return score - (h + 1) / ALIBI_SLOPE_DIVISOR * (q - k)


def softcap(cap):
    def score_mod(score, b, h, q, k):
        return (score / cap).tanh() * cap
    return score_mod


def relpos_bias(table, seqlen):
    # table is [H, 2S - 1]; entry S - 1 is distance 0.
    def score_mod(score, b, h, q, k):
        return score + table[h, q - k + seqlen - 1]
    return score_mod


# --- inputs the variants capture ------------------------------------------

def document_lengths(seqlen, seed):
    """Random document lengths (fixed seed) that add up to seqlen: each drawn
    from [S/32, S/4], the last one cut to fit."""
    rng = random.Random(seed)
    low, high = max(1, seqlen // 32), max(1, seqlen // 4)
    lengths = []
    while sum(lengths) < seqlen:
        lengths.append(min(rng.randint(low, high), seqlen - sum(lengths)))
    return lengths


def document_ids(lengths):
    return [doc for doc, length in enumerate(lengths) for _ in range(length)]


def doc_ids_tensor(args):
    import torch
    ids = document_ids(document_lengths(args.seqlen, args.seed))
    return torch.tensor(ids, dtype=torch.int32, device="cuda")


def relpos_table(args):
    import torch
    generator = torch.Generator(device="cuda").manual_seed(args.seed)
    return torch.randn(args.heads, 2 * args.seqlen - 1, generator=generator,
                       device="cuda", dtype=torch.float32)


# name -> function(args) -> (mask_mod, score_mod or None), in table order.
VARIANTS = {
    "causal": lambda args: (causal, None),
    "sliding_window_1024": lambda args: (sliding_window(1024), None),
    "alibi_causal": lambda args: (causal, alibi),
    "softcap50_causal": lambda args: (causal, softcap(50.0)),
    "longformer_w512_g64": lambda args: (longformer(256, 64), None),
    "prefix_lm_2048": lambda args: (prefix_lm(2048), None),
    "document_mask": lambda args: (same_document_causal(doc_ids_tensor(args)), None),
    "relpos_bias_causal": lambda args: (causal, relpos_bias(relpos_table(args), args.seqlen)),
    "chunked_local_1024": lambda args: (chunked_local(1024), None),
}


# --- command line and output (no torch) -----------------------------------

class HelpFormatter(argparse.RawDescriptionHelpFormatter,
                    argparse.ArgumentDefaultsHelpFormatter):
    """Keeps the docstring's layout and shows each option's default."""


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--batch", type=int, default=2, help="B")
    parser.add_argument("--seqlen", type=int, default=8192, help="S (queries and keys)")
    parser.add_argument("--heads", type=int, default=16, help="H (query and key/value)")
    parser.add_argument("--head-dim", type=int, default=128, help="D")
    parser.add_argument("--warmup", type=int, default=5, help="untimed runs per variant")
    parser.add_argument("--repeats", type=int, default=20, help="timed runs per variant")
    parser.add_argument("--seed", type=int, default=0,
                        help="seeds the inputs, the document lengths and the bias table")
    parser.add_argument("--variants", default="all",
                        help="comma-separated subset of: " + ", ".join(VARIANTS))
    parser.add_argument("--csv", help="also write the rows to this CSV file")
    args = parser.parse_args(argv)
    if args.variants == "all":
        args.variants = ",".join(VARIANTS)
    args.variants = [name.strip() for name in args.variants.split(",") if name.strip()]
    unknown = [name for name in args.variants if name not in VARIANTS]
    if unknown or not args.variants:
        parser.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    if min(args.batch, args.seqlen, args.heads, args.head_dim, args.repeats) < 1:
        parser.error("--batch, --seqlen, --heads, --head-dim and --repeats must be >= 1")
    return args


def table_header():
    return ["| variant | ms | block sparsity % | block mask ms |", "|---|---|---|---|"]


def table_row(name, ms, sparsity, mask_ms):
    return f"| {name} | {ms:.3f} | {sparsity:.1f} | {mask_ms:.2f} |"


def write_csv(path, args, rows):
    with open(path, "w") as out:
        out.write("variant,batch,seqlen,heads,head_dim,ms,block_sparsity_pct,block_mask_ms\n")
        for name, ms, sparsity, mask_ms in rows:
            out.write(f"{name},{args.batch},{args.seqlen},{args.heads},{args.head_dim},"
                      f"{ms:.4f},{sparsity:.2f},{mask_ms:.3f}\n")


# --- measurement (GPU) ----------------------------------------------------

def timed_block_mask(mask_mod, seqlen):
    """Builds the BlockMask (B and H broadcast) and returns it with the median
    creation time in ms; the first call pays one-off tracing and is not counted."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask

    def build():
        return create_block_mask(mask_mod, None, None, seqlen, seqlen, device="cuda")

    for _ in range(BLOCK_MASK_WARMUP):
        build()
    times = []
    for _ in range(BLOCK_MASK_REPEATS):
        torch.cuda.synchronize()
        start = time.perf_counter()
        block_mask = build()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return block_mask, statistics.median(times)


def measure(name, args, q, k, v, median_ms):
    """Returns (attention ms, block sparsity %, block mask ms) for one variant."""
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    mask_mod, score_mod = VARIANTS[name](args)
    block_mask, mask_ms = timed_block_mask(mask_mod, args.seqlen)
    # A fresh compile per variant: past dynamo's recompile limit FlexAttention
    # silently falls back to an unfused path that materializes the scores.
    torch._dynamo.reset()
    compiled = torch.compile(flex_attention, dynamic=False)

    def run():
        return compiled(q, k, v, score_mod=score_mod, block_mask=block_mask)

    run()  # the compile, kept out of the timing even with --warmup 0
    ms = median_ms(run, args.warmup, args.repeats)
    return ms, block_mask.sparsity(), mask_ms


def main(argv=None):
    args = parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("skipped: no CUDA device for the variant peers", file=sys.stderr)
        return 0
    # Same timing as the plain/causal peers; the path makes the import work
    # however this file was loaded.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from attn_peers import median_ms

    torch.manual_seed(args.seed)
    shape = (args.batch, args.heads, args.seqlen, args.head_dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    print(f"# FlexAttention variants on {torch.cuda.get_device_name()} (torch {torch.__version__}), "
          f"B={args.batch} H={args.heads} S={args.seqlen} D={args.head_dim}, bf16 forward, "
          f"median of {args.repeats} after {args.warmup}, 128 x 128 blocks")
    if "document_mask" in args.variants:
        print(f"# document lengths (seed {args.seed}): "
              + ",".join(map(str, document_lengths(args.seqlen, args.seed))))
    print("\n".join(table_header()), flush=True)
    rows = []
    for name in args.variants:
        try:
            ms, sparsity, mask_ms = measure(name, args, q, k, v, median_ms)
        except Exception as error:  # a variant this torch cannot run
            print(f"# {name}: {error}", file=sys.stderr)
            ms = sparsity = mask_ms = float("nan")
        rows.append((name, ms, sparsity, mask_ms))
        print(table_row(name, ms, sparsity, mask_ms), flush=True)
        torch.cuda.empty_cache()
    if args.csv:
        write_csv(args.csv, args, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
