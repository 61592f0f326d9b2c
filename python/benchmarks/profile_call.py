"""Where the host time of an attnc.attention call goes, piece by piece
(medians of timed calls; see overhead.py for the method)."""

import statistics
import time

import torch

import attnc
from attnc import _ops


def median_us(fn, calls=2000):
    samples = []
    for i in range(calls):
        if i % 50 == 0:
            torch.cuda.synchronize()
        start = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - start)
    torch.cuda.synchronize()
    return statistics.median(samples) / 1e3


q = torch.randn(1, 8, 128, 128, device="cuda", dtype=torch.bfloat16)
spec = attnc._spec.register(attnc.attention_spec(8, 8, 128, causal=True))
attnc.attention(q, q, q, causal=True)
o = _ops._empty_bhsd(1, 8, 128, 128, q)
lse = torch.empty(1, 8, 128, device="cuda")
kernel = _ops.kernel_for(spec)
packed, _ = _ops.forward_args(q, q, q, o, lse, [])
stream = torch.cuda.current_stream().cuda_stream
pieces = {
    "attnc.attention": lambda: attnc.attention(q, q, q, causal=True),
    "torch.ops dispatch + impl": lambda: torch.ops.attnc.attention_forward(q, q, q, [], spec, None, None),
    "impl called directly": lambda: _ops._attention_forward_cuda(q, q, q, [], spec, None, None),
    "current_stream": lambda: torch.cuda.current_stream(q.device).cuda_stream,
    "raw stream": lambda: torch._C._cuda_getCurrentRawStream(q.device.index),
    "two empties": lambda: (_ops._empty_bhsd(1, 8, 128, 128, q), torch.empty((1, 8, 128), device=q.device)),
    "forward_args": lambda: _ops.forward_args(q, q, q, o, lse, []),
    "run_forward (ctypes)": lambda: kernel.run_forward(packed, stream),
}


def no_grad_call():
    with torch.no_grad():
        attnc.attention(q, q, q, causal=True)


pieces["attnc.attention under no_grad"] = no_grad_call
for name, fn in pieces.items():
    fn()
    print(f"{name:28s} {median_us(fn):6.1f} us")
