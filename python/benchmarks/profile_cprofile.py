"""cProfile of repeated attnc.attention calls (causal, then ALiBi with a
captured tensor): which Python functions and C calls hold the host time."""

import cProfile
import pstats

import torch

import attnc

q = torch.randn(1, 8, 128, 128, device="cuda", dtype=torch.bfloat16)
slopes = torch.rand(8, device="cuda")
cases = {"causal": dict(causal=True),
         "alibi": dict(score_mod=lambda s, b, h, qi, kv: s - slopes[h] * (qi - kv))}
for name, kwargs in cases.items():
    for _ in range(300):
        attnc.attention(q, q, q, **kwargs)
    torch.cuda.synchronize()
    profile = cProfile.Profile()
    profile.enable()
    for i in range(3000):
        attnc.attention(q, q, q, **kwargs)
        if i % 50 == 0:
            torch.cuda.synchronize()
    profile.disable()
    torch.cuda.synchronize()
    print(f"== {name}")
    pstats.Stats(profile).sort_stats("tottime").print_stats(10)
