"""Host time of an attnc.attention call over the C++ launch it wraps.

Times, per call and without synchronizing inside the timed region, (1) the
library's launch alone (attnc_run_forward through ctypes with arguments
packed beforehand: attn::Kernel::run, its validation and parameter
encoding, plus the ctypes call) and (2) the whole Python call
(attnc.attention: spec lookup, torch.library dispatch, allocation of the
output and log-sum-exp, argument packing, the launch). Prints the medians
and their difference, the package's overhead. A small problem keeps the GPU
ahead of the host; the queue is drained every `--sync-every` calls, outside
the timed region.

    python benchmarks/overhead.py [--calls 3000]
"""

import argparse
import json
import statistics
import time

import torch

import attnc
from attnc import _lib, _ops


def median_ns(fn, calls, sync_every):
    samples = []
    for i in range(calls):
        if i % sync_every == 0:
            torch.cuda.synchronize()
        start = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - start)
    torch.cuda.synchronize()
    return statistics.median(samples)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--sync-every", type=int, default=50)
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args()

    q = torch.randn(1, 8, 128, 128, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    results = {"device": torch.cuda.get_device_name()}
    out = torch.empty_like(q)
    cases = {
        "causal": dict(causal=True),
        "causal, out=": dict(causal=True, out=out),
        "alibi score_mod": dict(score_mod=lambda s, b, h, qi, kv: s - slopes[h] * (qi - kv)),
    }
    slopes = torch.rand(8, device="cuda")
    for name, kwargs in cases.items():
        call = lambda: attnc.attention(q, k, v, **kwargs)
        call()
        spec_kwargs = {key: value for key, value in kwargs.items() if key != "out"}
        spec = attnc._spec.register(attnc.attention_spec(8, 8, 128, **spec_kwargs))
        kernel = _ops.kernel_for(spec)
        variant = attnc._spec.variant_for(kwargs.get("score_mod"), None) if "score_mod" in kwargs else None
        captures = variant.launch_captures(q.device) if variant else []
        o = _ops._empty_bhsd(1, 8, 128, 128, q)
        lse = torch.empty(1, 8, 128, device="cuda")
        packed, array = _ops.forward_args(q, k, v, o, lse, captures)
        stream = torch.cuda.current_stream().cuda_stream
        launch = lambda: kernel.run_forward(packed, stream)
        launch()
        for _ in range(200):
            call()
            launch()
        c_launch = median_ns(launch, args.calls, args.sync_every)
        python_call = median_ns(call, args.calls, args.sync_every)
        results[name] = {"c_launch_us": c_launch / 1e3, "python_call_us": python_call / 1e3,
                         "overhead_us": (python_call - c_launch) / 1e3}
        print(f"{name}: C launch {c_launch / 1e3:.1f} us, attnc.attention "
              f"{python_call / 1e3:.1f} us, overhead {(python_call - c_launch) / 1e3:.1f} us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
