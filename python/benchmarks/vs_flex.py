"""attnc.attention against FlexAttention (torch.compile) and SDPA from
Python, on the same tensors and the same GPU: the forward of common
variants, a training step (forward + backward) of each of them and of two
with learnable captured tensors (ALiBi's slopes, a relative-position
table), and the causal training step beside SDPA's.
Medians of --repeats timed runs (CUDA events) after warm-up; TFLOP/s count
4·B·H·Sq·Sk·D per forward (halved for causal), 2.5× that for a backward.

    python benchmarks/vs_flex.py [--seqlen 8192] [--batch 2] [--heads 16]
        [--variants "document causal,softcap"] [--no-sdpa-step]

--variants keeps the named variants of both tables (Flex compiles each
afresh, about half a minute apiece); --no-sdpa-step leaves out the causal
training step beside SDPA's.
"""

import argparse
import json
import math
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import attnc


def timed_ms(fn, repeats, warmup=5):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seqlen", type=int, default=8192)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json")
    parser.add_argument("--variants", help="comma-separated names of the variants to run")
    parser.add_argument("--no-sdpa-step", action="store_true")
    args = parser.parse_args()
    b, h, s, d = args.batch, args.heads, args.seqlen, args.head_dim
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    slopes = torch.tensor([2.0 ** -(8 * (i + 1) / h) for i in range(h)], device="cuda")
    document = torch.sort(torch.randint(0, 8, (b, s), device="cuda"), dim=1).values

    def causal(b_, h_, qi, kv):
        return qi >= kv

    def document_causal(b_, h_, qi, kv):
        return (document[b_, qi] == document[b_, kv]) & (qi >= kv)

    def alibi(score, b_, h_, qi, kv):
        return score - slopes[h_] * (qi - kv)

    def softcap(score, b_, h_, qi, kv):
        return torch.tanh(score / 30) * 30

    # One compiled FlexAttention per variant, forward and training: more than
    # dynamo's default number of recompilations of one function, past which
    # Flex would silently run unfused.
    torch._dynamo.config.cache_size_limit = 64
    torch._dynamo.config.accumulated_cache_size_limit = 512
    flex = torch.compile(flex_attention, dynamic=False)
    variants = {
        "causal": (None, causal),
        "alibi causal": (alibi, causal),
        "softcap causal": (softcap, causal),
        "document causal": (None, document_causal),
        "softcap": (softcap, None),
    }
    chosen = set(args.variants.split(",")) if args.variants else None

    def keep(table):
        return {name: value for name, value in table.items() if chosen is None or name in chosen}

    device = torch.cuda.get_device_name()
    results = {"device": device, "shape": [b, h, s, d], "forward": {}, "training": {}}
    print(f"{device}: B={b} H={h} S={s} D={d} bf16, forward ms (TFLOP/s)")
    for name, (score_mod, mask_mod) in keep(variants).items():
        block_mask = (create_block_mask(mask_mod, b if mask_mod is document_causal else None,
                                        None, s, s) if mask_mod is not None else None)
        flex_ms = timed_ms(lambda: flex(q, k, v, score_mod=score_mod, block_mask=block_mask),
                           args.repeats)
        attnc_block = (attnc.create_block_mask(mask_mod, b, None, s, s)
                       if mask_mod is not None else None)
        attnc_ms = timed_ms(lambda: attnc.attention(q, k, v, score_mod=score_mod,
                                                    block_mask=attnc_block), args.repeats)
        flops = 4 * b * h * s * s * d * (0.5 if mask_mod is not None else 1.0)
        results["forward"][name] = {"attnc_ms": attnc_ms, "flex_ms": flex_ms}
        print(f"  {name:16s} attnc {attnc_ms:7.3f} ({flops / attnc_ms / 1e9:6.1f})  "
              f"flex {flex_ms:7.3f} ({flops / flex_ms / 1e9:6.1f})  "
              f"flex/attnc {flex_ms / attnc_ms:5.2f}")

    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    grad = torch.randn_like(q)
    causal_block = create_block_mask(causal, None, None, s, s)
    learned_slopes = slopes.clone().requires_grad_()
    table = (torch.randn(h, 2 * s - 1, device="cuda") * 0.1).requires_grad_()

    def step(fn, learned=()):
        def run():
            for t in (qg, kg, vg, *learned):
                t.grad = None
            fn().backward(grad)
        return run

    def learned_alibi(score, b_, h_, qi, kv):
        return score - learned_slopes[h_] * (qi - kv)

    def learned_relpos(score, b_, h_, qi, kv):
        return score + table[h_, qi - kv + s - 1]

    # T5's buckets (docs/examples/t5_bias_hd128.mlir): exact below 16
    # positions, logarithmic up to 128, the last bucket beyond.
    buckets = (torch.randn(h, 32, device="cuda") * 0.5).requires_grad_()

    def learned_t5(score, b_, h_, qi, kv):
        distance = qi - kv
        far = (torch.log(distance.float() / 16) * (16 / math.log(8))).long() + 16
        bucket = torch.where(distance < 16, distance, torch.clamp(far, max=31))
        return score + buckets[h_, bucket]

    trained = dict(variants)
    trained["learned alibi causal"] = (learned_alibi, causal)
    trained["learned relpos causal"] = (learned_relpos, causal)
    trained["learned t5 causal"] = (learned_t5, causal)
    learned = {"learned alibi causal": (learned_slopes,), "learned relpos causal": (table,),
               "learned t5 causal": (buckets,)}
    results["variant_training"] = {}
    print("training step (forward + backward) ms: attnc, flex, flex/attnc")
    for name, (score_mod, mask_mod) in keep(trained).items():
        block_mask = (create_block_mask(mask_mod, b if mask_mod is document_causal else None,
                                        None, s, s) if mask_mod is not None else None)
        attnc_block = (attnc.create_block_mask(mask_mod, b, None, s, s)
                       if mask_mod is not None else None)
        extra = learned.get(name, ())
        attnc_ms = timed_ms(step(lambda: attnc.attention(qg, kg, vg, score_mod=score_mod,
                                                         block_mask=attnc_block), extra),
                            args.repeats)
        try:
            flex_ms = timed_ms(step(lambda: flex(qg, kg, vg, score_mod=score_mod,
                                                 block_mask=block_mask), extra), args.repeats)
        except Exception as error:  # Inductor may fail to fit its kernel
            reason = str(error).strip().splitlines()[-1][:120]
            results["variant_training"][name] = {"attnc_ms": attnc_ms, "flex_error": reason}
            print(f"  {name:22s} attnc {attnc_ms:7.3f}  flex failed: {reason}")
            continue
        results["variant_training"][name] = {"attnc_ms": attnc_ms, "flex_ms": flex_ms}
        print(f"  {name:22s} attnc {attnc_ms:7.3f}  flex {flex_ms:7.3f}  "
              f"flex/attnc {flex_ms / attnc_ms:5.2f}")

    if args.no_sdpa_step:
        steps = {}
    else:
        steps = {
            "attnc": step(lambda: attnc.attention(qg, kg, vg, causal=True)),
            "flex": step(lambda: flex(qg, kg, vg, block_mask=causal_block)),
            "sdpa": step(lambda: F.scaled_dot_product_attention(qg, kg, vg, is_causal=True)),
        }
    flops = 4 * b * h * s * s * d * 0.5 * 3.5
    print("causal training step (forward + backward) ms (TFLOP/s)")
    for name, fn in steps.items():
        ms = timed_ms(fn, args.repeats)
        results["training"][name] = ms
        print(f"  {name:6s} {ms:7.3f} ({flops / ms / 1e9:6.1f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
