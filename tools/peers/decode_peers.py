#!/usr/bin/env python3
"""Peer numbers for decode attention (Sq=1) and speculative verify (small Sq)
against a long bf16 KV cache: PyTorch SDPA and FlashInfer's paged kernels.

Tables (markdown on stdout, one row per point):
  * device-to-device copy bandwidth (2 GiB copy, bytes read + written / time);
  * decode: Sq=1, Hq=32, Hkv in {8, 1}, D=128 (Hkv=8) and D in {128, 256}
    (Hkv=1), batch in {1, 8, 64}, Sk in {4096, 32768, 131072};
  * verify: Sq in {4, 16, 64}, Hq=32, Hkv=8, D=128, batch 8,
    Sk in {8192, 32768}.
Effective bandwidth = bytes of K and V read once / time (TB/s = 1e12 B/s).
Times are medians of --repeats timed replays (CUDA events) after warm-up; by
default each timed replay is a CUDA graph of several calls, and the calls
rotate over enough copies of K/V (--rotate-mib) that K/V come from HBM, not
from the 50 MB L2. A cell tagged "loop" fell back to timing an eager loop.

K/V are stored as attnc stores them, [B, Sk, Hkv, D] (bf16). SDPA gets the
[B, Hkv, Sk, D] transposed view (--sdpa-bhsd gives it a contiguous copy) with
enable_gqa=True; the cell names the fastest of --sdpa-backends (the math
backend is left out by default: with GQA it expands K/V per query head).
FlashInfer reads the same memory as a paged NHD cache [pages, page, Hkv, D]
with pages in order (page sizes 16 and 64 are separate columns; --shuffle-pages
gives them in a random order). Its decode
cell is the faster of the CUDA-core kernel ("cc", group sizes 1,2,3,4,6,8
only) and the tensor-core one ("tc", the fa2 prefill kernel);
BatchDecodeWithPagedKVCacheWrapper, plan()/run() as in flashinfer 0.7.0.post1.
Verify: SDPA cannot align a causal mask bottom-right when Sq != Sk, so SDPA
and the FlashInfer p16/p64 columns run with NO mask (every query row sees all
of Sk); the extra "FI p64 causal" column is FlashInfer's causal mask, which
FlashInfer aligns bottom-right (the speculative-verify semantics).
"err[n]" cells point to the notes printed under the table.

FlashInfer on the (offline) GPU machine: carry the wheels in .whl-peers and
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \\
      --upgrade --target /tmp/site .whl-peers/*.whl && export PYTHONPATH=/tmp/site
It JIT-compiles its kernels with nvcc on first use (each module once per
machine; the first plan() of each is timed and listed under "JIT"). This
script sets, unless already set:
  CUDA_HOME                 /usr/local/cuda when nvcc is not on PATH
                            (flashinfer: $CUDA_HOME or $CUDA_PATH, else
                            `which nvcc`, else /usr/local/cuda; nvcc =
                            $FLASHINFER_NVCC or $CUDA_HOME/bin/nvcc)
  FLASHINFER_WORKSPACE_BASE /tmp/flashinfer-ws (JIT cache goes to
                            $FLASHINFER_WORKSPACE_BASE/.cache/flashinfer;
                            the default base is $HOME)
  MAX_JOBS                  CPU count (ninja -j for the JIT build)
  PATH                      + the python's bin dir / ninja.BIN_DIR, since the
                            JIT runs the `ninja` executable
Others that flashinfer reads: FLASHINFER_NVCC_THREADS (nvcc --threads, default
1), FLASHINFER_CUDA_ARCH_LIST (e.g. "9.0", default: the visible GPUs),
FLASHINFER_JIT_VERBOSE=1, FLASHINFER_LOGGING_LEVEL, CXX.
"""
import argparse
import math
import os
import shutil
import statistics
import sys
import time

GiB = 1 << 30
MiB = 1 << 20


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="reduced decode grid: batch {1,8}, Sk {4096,32768}")
    parser.add_argument("--no-flashinfer", action="store_true",
                        help="SDPA only (FlashInfer columns show '-')")
    parser.add_argument("--only", default="copy,decode,verify",
                        help="which tables, comma-separated (default: %(default)s)")
    parser.add_argument("--batches", help="decode batches (default 1,8,64; --quick 1,8)")
    parser.add_argument("--seqlens", help="decode Sk (default 4096,32768,131072; "
                        "--quick 4096,32768)")
    parser.add_argument("--verify-sq", default="4,16,64")
    parser.add_argument("--verify-seqlens", default="8192,32768")
    parser.add_argument("--verify-batch", type=int, default=8)
    parser.add_argument("--q-heads", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20,
                        help="timed replays per cell, median taken (at least 20 advised)")
    parser.add_argument("--no-graph", action="store_true",
                        help="time eager loops instead of CUDA graphs")
    parser.add_argument("--replay-ms", type=float, default=2.0,
                        help="aim for at least this much GPU time per timed replay")
    parser.add_argument("--rotate-mib", type=int, default=256,
                        help="rotate over copies of K/V totalling at least this (L2 is 50 MB)")
    parser.add_argument("--max-copies", type=int, default=128)
    parser.add_argument("--mem-fraction", type=float, default=0.4,
                        help="skip points whose K+V exceed this fraction of free memory")
    parser.add_argument("--sdpa-backends", default="flash,cudnn,efficient",
                        help="SDPA backends tried one by one, fastest shown "
                             "(flash, cudnn, efficient, math)")
    parser.add_argument("--sdpa-bhsd", action="store_true",
                        help="give SDPA a contiguous [B, Hkv, Sk, D] copy instead of the view")
    parser.add_argument("--fi-decode-variants", default="cc,tc",
                        help="FlashInfer decode kernels tried, fastest shown: cc (CUDA "
                             "cores), tc (tensor cores, fa2)")
    parser.add_argument("--fi-prefill-backends", default="fa2",
                        help="FlashInfer prefill backends for verify, fastest shown "
                             "(fa2, fa3: fa3 is a further, longer JIT build)")
    parser.add_argument("--page-sizes", default="16,64")
    parser.add_argument("--shuffle-pages", action="store_true",
                        help="give FlashInfer each copy's pages in a random order (as "
                             "attn-bench's shuffled columns); its output is then not "
                             "compared, since the pages no longer hold SDPA's sequence")
    parser.add_argument("--workspace-mib", type=int, default=256,
                        help="FlashInfer float workspace")
    parser.add_argument("--no-check", action="store_true",
                        help="skip comparing FlashInfer's output with SDPA's")
    parser.add_argument("--csv", help="also write all rows to this CSV file")
    args = parser.parse_args(argv)
    if args.batches is None:
        args.batches = "1,8" if args.quick else "1,8,64"
    if args.seqlens is None:
        args.seqlens = "4096,32768" if args.quick else "4096,32768,131072"
    for sk in ints(args.seqlens) + ints(args.verify_seqlens):
        for page in ints(args.page_sizes):
            if sk % page:
                parser.error(f"Sk={sk} is not a multiple of page size {page}")
    return args


def ints(text):
    return [int(x) for x in text.split(",") if x.strip()]


def page_order(args):
    """How FlashInfer's paged views order the pages (--shuffle-pages)."""
    return "shuffled" if args.shuffle_pages else "in order"


def names(text):
    return [x.strip() for x in text.split(",") if x.strip()]


# --------------------------------------------------------------------------
# environment for FlashInfer's JIT (before importing it)

def setup_flashinfer_env():
    notes = []
    if not (os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")):
        if shutil.which("nvcc") is None:
            for cand in ("/usr/local/cuda", "/usr/local/cuda-13.0", "/usr/local/cuda-13"):
                if os.path.exists(os.path.join(cand, "bin", "nvcc")):
                    os.environ["CUDA_HOME"] = cand
                    break
            else:
                notes.append("no nvcc on PATH nor in /usr/local/cuda: FlashInfer's JIT "
                             "will fail (set CUDA_HOME)")
    os.environ.setdefault("FLASHINFER_WORKSPACE_BASE", "/tmp/flashinfer-ws")
    os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 8))
    if shutil.which("ninja") is None:
        extra = [os.path.dirname(sys.executable)]
        try:
            import ninja  # the pip package ships the executable
            extra.insert(0, ninja.BIN_DIR)
        except Exception:
            pass
        os.environ["PATH"] = os.pathsep.join(extra + [os.environ.get("PATH", "")])
        if shutil.which("ninja") is None:
            notes.append("no `ninja` executable found: FlashInfer's JIT will fail")
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or \
        (os.path.dirname(os.path.dirname(shutil.which("nvcc"))) if shutil.which("nvcc")
         else "?")
    notes.append(f"JIT env: CUDA_HOME={cuda_home} "
                 f"FLASHINFER_WORKSPACE_BASE={os.environ['FLASHINFER_WORKSPACE_BASE']} "
                 f"MAX_JOBS={os.environ['MAX_JOBS']} ninja={shutil.which('ninja')}")
    return notes


# --------------------------------------------------------------------------
# timing

class Notes:
    """Numbered notes under a table; identical messages share a number."""

    def __init__(self):
        self.items = []

    def ref(self, msg):
        msg = " ".join(str(msg).split())[:400]
        if msg not in self.items:
            self.items.append(msg)
        return f"err[{self.items.index(msg) + 1}]"

    def flush(self):
        for i, msg in enumerate(self.items):
            print(f"  [{i + 1}] {msg}")
        self.items = []


def bench(torch, fns, warmup, repeats, use_graph, replay_ms):
    """Median ms per call of the callables in fns (called round robin; one
    per K/V copy). Returns (ms, method) with method 'graph' or 'loop'."""
    n = len(fns)
    for i in range(max(warmup, n)):
        fns[i % n]()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for f in fns:
        f()
    end.record()
    end.synchronize()
    est = max(start.elapsed_time(end) / n, 1e-4)
    inner = n * max(1, math.ceil(replay_ms / (est * n)))
    inner = min(inner, max(n, 256))
    if use_graph:
        graph = None
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for f in fns:
                    f()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for i in range(inner):
                    fns[i % n]()
            graph.replay()
            torch.cuda.synchronize()
            times = []
            for _ in range(repeats):
                start.record()
                graph.replay()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / inner)
            return statistics.median(times), "graph"
        except Exception as error:  # fall back to an eager loop
            print(f"# graph capture failed, timing an eager loop: {error}", file=sys.stderr)
            torch.cuda.synchronize()
        finally:
            del graph
    times = []
    for _ in range(repeats):
        start.record()
        for i in range(inner):
            fns[i % n]()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / inner)
    return statistics.median(times), "loop"


def tbps(nbytes, ms):
    return nbytes / (ms * 1e-3) / 1e12


def fmt_cell(result, notes):
    """(ms, TB/s) cells from a result: None (not run), str (error) or
    (ms, nbytes, tag, method)."""
    if result is None:
        return "-", "-"
    if isinstance(result, str):
        ref = notes.ref(result)
        return ref, ref
    ms, nbytes, tag, method = result
    suffix = (f" {tag}" if tag else "") + (" loop" if method == "loop" else "")
    return f"{ms:.4f}{suffix}", f"{tbps(nbytes, ms):.2f}"


def larger_error(a, b):
    """The larger of two max-error figures, either of which may be None."""
    return a if b is None else (b if a is None else max(a, b))


def best_of(results):
    """The fastest successful result, else the first error, else None."""
    good = [r for r in results if isinstance(r, tuple)]
    if good:
        return min(good, key=lambda r: r[0])
    errors = [r for r in results if isinstance(r, str)]
    return "; ".join(errors) if errors else None


# --------------------------------------------------------------------------
# peers

SDPA_NAMES = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION",
              "efficient": "EFFICIENT_ATTENTION", "math": "MATH"}


class Runner:
    def __init__(self, torch, args, fi, fi_error):
        self.torch = torch
        self.F = torch.nn.functional
        self.args = args
        self.fi = fi
        self.fi_error = fi_error
        self.jit_log = []
        self.seen_modules = set()
        self.wrappers = {}
        self.workspace = None
        self.rows = []

    # ---- generic helpers
    def time_fns(self, fns):
        a = self.args
        return bench(self.torch, fns, a.warmup, a.repeats, not a.no_graph, a.replay_ms)

    def first_plan(self, key, plan):
        """Runs plan(); the first time a module key is seen, times it (JIT)."""
        if key in self.seen_modules:
            plan()
            return
        t0 = time.time()
        try:
            plan()
        finally:
            self.torch.cuda.synchronize()
            self.seen_modules.add(key)
            line = f"{key}: first plan() {time.time() - t0:.1f} s (JIT build or cache load)"
            self.jit_log.append(line)
            print(f"# JIT {line}", file=sys.stderr, flush=True)

    def fi_workspace(self):
        if self.workspace is None:
            self.workspace = self.torch.zeros(self.args.workspace_mib * MiB,
                                              dtype=self.torch.uint8, device="cuda")
        return self.workspace

    def wrapper(self, kind, variant, page_size):
        key = (kind, variant, page_size)
        if key not in self.wrappers:
            fi = self.fi
            if kind == "decode":
                self.wrappers[key] = fi.BatchDecodeWithPagedKVCacheWrapper(
                    self.fi_workspace(), "NHD", use_tensor_cores=(variant == "tc"),
                    backend="fa2" if variant == "tc" else "auto")
            else:
                self.wrappers[key] = fi.BatchPrefillWithPagedKVCacheWrapper(
                    self.fi_workspace(), "NHD", backend=variant)
        return self.wrappers[key]

    # ---- SDPA
    def sdpa(self, qs, ks, vs, nbytes):
        """qs: [B, Hq, Sq, D]; ks/vs lists (one per copy) of [B, Hkv, Sk, D]."""
        torch, F = self.torch, self.F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        results, outs = [], {}
        for name in names(self.args.sdpa_backends):
            try:
                backend = getattr(SDPBackend, SDPA_NAMES[name])

                def make(k, v, backend=backend):
                    def run():
                        with sdpa_kernel([backend]):
                            return F.scaled_dot_product_attention(qs, k, v, enable_gqa=True)
                    return run
                fns = [make(k, v) for k, v in zip(ks, vs)]
                outs[name] = fns[0]()
                ms, method = self.time_fns(fns)
                results.append((ms, nbytes, name, method))
            except Exception as error:
                results.append(f"SDPA {name}: {type(error).__name__}: {error}")
            torch.cuda.synchronize()
        best = best_of(results)
        ref = outs.get(best[2]) if isinstance(best, tuple) else None
        return best, ref

    # ---- FlashInfer decode / prefill on the paged view of the same memory
    def paged_views(self, k_all, v_all, copies, batch, sk, hkv, d, page_size):
        pages = batch * sk // page_size
        kp = k_all.view(copies * pages, page_size, hkv, d)
        vp = v_all.view(copies * pages, page_size, hkv, d)
        torch = self.torch
        pps = sk // page_size
        indptr = torch.arange(batch + 1, dtype=torch.int32, device="cuda") * pps
        indices = torch.arange(pages, dtype=torch.int32, device="cuda")
        if self.args.shuffle_pages:
            generator = torch.Generator(device="cuda")
            generator.manual_seed(1)
            indices = torch.randperm(pages, generator=generator, device="cuda").to(torch.int32)
        last = torch.full((batch,), page_size, dtype=torch.int32, device="cuda")
        views = [(kp[c * pages:(c + 1) * pages], vp[c * pages:(c + 1) * pages])
                 for c in range(copies)]
        return views, indptr, indices, last

    def fi_decode(self, q, paged, hq, hkv, d, page_size, nbytes, ref):
        """q: [B, Hq, D]. Returns (best result, max |FI - ref|)."""
        torch = self.torch
        views, indptr, indices, last = paged
        results, err = [], None
        for variant in names(self.args.fi_decode_variants):
            if variant == "cc" and hq // hkv not in (1, 2, 3, 4, 6, 8):
                continue  # FlashInfer's CUDA-core decode has no such group size
            result, e = self.measure_wrapper(
                "decode", variant, page_size, f"fi decode {variant} D={d} group={hq // hkv}",
                f"FlashInfer decode {variant} p{page_size}",
                lambda w: w.plan(indptr, indices, last, hq, hkv, d, page_size,
                                 q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16),
                q, views, ref, nbytes)
            results.append(result)
            err = larger_error(err, e)
        return best_of(results), err

    def fi_prefill(self, q, qo_indptr, paged, hq, hkv, d, page_size, causal, nbytes, ref):
        """q: [B*Sq, Hq, D]. Returns (best result, max |FI - ref|)."""
        torch = self.torch
        views, indptr, indices, last = paged
        results, err = [], None
        for backend in names(self.args.fi_prefill_backends):
            result, e = self.measure_wrapper(
                "prefill", backend, page_size, f"fi prefill {backend} D={d}",
                f"FlashInfer prefill {backend} p{page_size} causal={causal}",
                lambda w: w.plan(qo_indptr, indptr, indices, last, hq, hkv, d, page_size,
                                 causal=causal, q_data_type=torch.bfloat16,
                                 kv_data_type=torch.bfloat16),
                q, views, ref, nbytes)
            results.append(result)
            err = larger_error(err, e)
        return best_of(results), err

    def measure_wrapper(self, kind, variant, page_size, jit_label, failure_label, plan, q,
                        views, ref, nbytes):
        """Plans a FlashInfer wrapper (its first plan() timed as the JIT's) and
        times w.run(q, kv) over the rotated views. Returns (the result, or an
        error text labelled failure_label; max |out - ref| or None)."""
        try:
            w = self.wrapper(kind, variant, page_size)
            self.first_plan(jit_label, lambda: plan(w))
            fns = [lambda kv=kv: w.run(q, kv) for kv in views]
            out = fns[0]()
            e = None
            if ref is not None and not self.args.no_check and not self.args.shuffle_pages:
                e = (out.float() - ref.reshape(out.shape).float()).abs().max().item()
            ms, method = self.time_fns(fns)
            return (ms, nbytes, variant, method), e
        except Exception as error:
            return f"{failure_label}: {type(error).__name__}: {error}", None
        finally:
            self.torch.cuda.synchronize()

    # ---- K/V allocation for one point
    def alloc_kv(self, batch, sk, hkv, d):
        """K/V [copies*B, Sk, Hkv, D] bf16, or a skip message."""
        torch, a = self.torch, self.args
        kv_bytes = 2 * batch * sk * hkv * d * 2
        copies = max(1, min(a.max_copies, math.ceil(a.rotate_mib * MiB / kv_bytes)))
        torch.cuda.empty_cache()
        free = torch.cuda.mem_get_info()[0]
        factor = 2 if a.sdpa_bhsd else 1
        if kv_bytes * factor > a.mem_fraction * free:
            return None, (f"skipped: K+V {kv_bytes * factor / GiB:.1f} GiB > "
                          f"{a.mem_fraction:.0%} of free {free / GiB:.1f} GiB")
        shape = (copies * batch, sk, hkv, d)
        k_all = torch.randn(shape, dtype=torch.bfloat16, device="cuda")
        v_all = torch.randn(shape, dtype=torch.bfloat16, device="cuda")
        return (k_all, v_all, copies, kv_bytes), None

    def sdpa_kv(self, k_all, v_all, copies, batch):
        """Per-copy [B, Hkv, Sk, D] views (or contiguous copies)."""
        ks, vs = [], []
        for c in range(copies):
            k = k_all[c * batch:(c + 1) * batch].transpose(1, 2)
            v = v_all[c * batch:(c + 1) * batch].transpose(1, 2)
            if self.args.sdpa_bhsd:
                k, v = k.contiguous(), v.contiguous()
            ks.append(k)
            vs.append(v)
        return ks, vs

    # ---- tables
    def copy_table(self):
        torch = self.torch
        n = 2 * GiB
        print("\n## Device-to-device copy\n")
        try:
            src = torch.empty(n, dtype=torch.uint8, device="cuda").random_(0, 255)
            dst = torch.empty_like(src)
            ms, method = bench(torch, [lambda: dst.copy_(src)], self.args.warmup,
                               max(20, self.args.repeats), False, 0.0)
            bw = tbps(2 * n, ms)
            print(f"2 GiB copy: {ms:.3f} ms, {bw:.3f} TB/s (read + written)")
            self.rows.append(dict(table="copy", copy_ms=f"{ms:.4f}", copy_tbps=f"{bw:.3f}"))
            del src, dst
        except Exception as error:
            print(f"copy failed: {error}")
        torch.cuda.empty_cache()

    def decode_table(self):
        torch, a = self.torch, self.args
        page_sizes = ints(a.page_sizes)
        hq = a.q_heads
        configs = [(8, 128), (1, 128), (1, 256)]
        notes = Notes()
        fi_cols = "".join(f" FI p{p} ms | FI p{p} TB/s |" for p in page_sizes)
        print(f"\n## Decode: Sq=1, Hq={hq}, bf16, K/V [B, Sk, Hkv, D], FlashInfer's pages "
              f"{page_order(a)}\n")
        print("| batch | Hkv | D | Sk | K+V MiB | SDPA ms | SDPA TB/s |" + fi_cols +
              " FI max err |")
        print("|---" * (8 + 2 * len(page_sizes)) + "|")
        for hkv, d in configs:
            for batch in ints(a.batches):
                for sk in ints(a.seqlens):
                    lead = f"| {batch} | {hkv} | {d} | {sk} |"
                    alloc, skip = self.alloc_kv(batch, sk, hkv, d)
                    if skip:
                        print(f"{lead} {skip} |", flush=True)
                        continue
                    k_all, v_all, copies, nbytes = alloc
                    row = dict(table="decode", batch=batch, hkv=hkv, d=d, sk=sk, sq=1,
                               pages=page_order(a))
                    q = torch.randn(batch, hq, d, dtype=torch.bfloat16, device="cuda")
                    ks, vs = self.sdpa_kv(k_all, v_all, copies, batch)
                    sdpa, ref = self.sdpa(q.unsqueeze(2), ks, vs, nbytes)
                    del ks, vs
                    cells = list(fmt_cell(sdpa, notes))
                    self.record(row, "sdpa", sdpa)
                    err = None
                    for p in page_sizes:
                        if self.fi is None:
                            res = None if a.no_flashinfer else self.fi_error
                        else:
                            paged = self.paged_views(k_all, v_all, copies, batch, sk, hkv,
                                                     d, p)
                            res, e = self.fi_decode(q, paged, hq, hkv, d, p, nbytes, ref)
                            del paged
                            if e is not None:
                                err = e if err is None else max(err, e)
                        cells += fmt_cell(res, notes)
                        self.record(row, f"fi_p{p}", res)
                    cells.append("-" if err is None else f"{err:.3g}")
                    print(f"{lead} {nbytes / MiB:.1f} | " + " | ".join(cells) + " |",
                          flush=True)
                    self.rows.append(row)
                    del k_all, v_all, q, ref
                    torch.cuda.empty_cache()
        notes.flush()

    def verify_table(self):
        torch, a = self.torch, self.args
        page_sizes = ints(a.page_sizes)
        hq, hkv, d, batch = a.q_heads, 8, 128, a.verify_batch
        notes = Notes()
        fi_cols = "".join(f" FI p{p} ms | FI p{p} TB/s |" for p in page_sizes)
        print(f"\n## Speculative verify: Hq={hq}, Hkv={hkv}, D={d}, batch {batch}, bf16; "
              "SDPA and FI p16/p64 without mask, 'FI p64 causal' = FlashInfer's "
              f"bottom-right causal mask; FlashInfer's pages "
              f"{page_order(a)}\n")
        print("| batch | Hkv | D | Sk | Sq | SDPA ms | SDPA TB/s |" + fi_cols +
              f" FI p{page_sizes[-1]} causal ms | FI max err |")
        print("|---" * (9 + 2 * len(page_sizes)) + "|")
        for sk in ints(a.verify_seqlens):
            alloc, skip = self.alloc_kv(batch, sk, hkv, d)
            if skip:
                print(f"| {batch} | {hkv} | {d} | {sk} | - | {skip} |", flush=True)
                continue
            k_all, v_all, copies, nbytes = alloc
            ks, vs = self.sdpa_kv(k_all, v_all, copies, batch)
            pageds = {}
            if self.fi is not None:
                pageds = {p: self.paged_views(k_all, v_all, copies, batch, sk, hkv, d, p)
                          for p in page_sizes}
            for sq in ints(a.verify_sq):
                row = dict(table="verify", batch=batch, hkv=hkv, d=d, sk=sk, sq=sq,
                           pages=page_order(a))
                q = torch.randn(batch * sq, hq, d, dtype=torch.bfloat16, device="cuda")
                q4 = q.view(batch, sq, hq, d).transpose(1, 2)  # [B, Hq, Sq, D]
                sdpa, ref = self.sdpa(q4, ks, vs, nbytes)
                if ref is not None:
                    ref = ref.transpose(1, 2).reshape(batch * sq, hq, d)
                cells = list(fmt_cell(sdpa, notes))
                self.record(row, "sdpa", sdpa)
                qo_indptr = torch.arange(batch + 1, dtype=torch.int32, device="cuda") * sq
                err = None
                for p in page_sizes:
                    if self.fi is None:
                        res = None if a.no_flashinfer else self.fi_error
                    else:
                        res, e = self.fi_prefill(q, qo_indptr, pageds[p], hq, hkv, d, p,
                                                 False, nbytes, ref)
                        if e is not None:
                            err = e if err is None else max(err, e)
                    cells += fmt_cell(res, notes)
                    self.record(row, f"fi_p{p}", res)
                p = page_sizes[-1]
                if self.fi is None:
                    res = None if a.no_flashinfer else self.fi_error
                else:
                    res, _ = self.fi_prefill(q, qo_indptr, pageds[p], hq, hkv, d, p, True,
                                             nbytes, None)
                cells.append(fmt_cell(res, notes)[0])
                self.record(row, f"fi_p{p}_causal", res)
                cells.append("-" if err is None else f"{err:.3g}")
                print(f"| {batch} | {hkv} | {d} | {sk} | {sq} | " + " | ".join(cells) + " |",
                      flush=True)
                self.rows.append(row)
                del q, q4, ref
            del ks, vs, pageds, k_all, v_all
            torch.cuda.empty_cache()
        notes.flush()

    def record(self, row, name, result):
        if isinstance(result, tuple):
            ms, nbytes, tag, method = result
            row[f"{name}_ms"] = f"{ms:.5f}"
            row[f"{name}_tbps"] = f"{tbps(nbytes, ms):.3f}"
            row[f"{name}_kernel"] = f"{tag}{'/loop' if method == 'loop' else ''}"


def main(argv=None):
    args = parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)
    try:
        import torch
    except Exception as error:
        print(f"skipped: no torch ({error})", file=sys.stderr)
        return 0
    if not torch.cuda.is_available():
        print("skipped: no CUDA device", file=sys.stderr)
        return 0
    env_notes = []
    fi, fi_error = None, None
    if not args.no_flashinfer:
        env_notes = setup_flashinfer_env()
        try:
            import flashinfer
            fi = flashinfer
        except Exception as error:
            fi_error = f"import flashinfer: {type(error).__name__}: {error}"
    props = torch.cuda.get_device_properties(0)
    print(f"# decode peers on {props.name} ({props.total_memory / GiB:.0f} GiB, "
          f"sm{props.major}{props.minor}), torch {torch.__version__} "
          f"(CUDA {torch.version.cuda}), flashinfer "
          f"{getattr(fi, '__version__', 'off' if args.no_flashinfer else 'n/a')}")
    print(f"# timing: median of {args.repeats} replays after {args.warmup} warm-up calls, "
          f"{'eager loops' if args.no_graph else 'CUDA graphs'}, K/V rotated over "
          f">= {args.rotate_mib} MiB of copies")
    for note in env_notes:
        print(f"# {note}")
    if fi_error:
        print(f"# FlashInfer unavailable: {fi_error}")
    runner = Runner(torch, args, fi, fi_error)
    t0 = time.time()
    with torch.no_grad():
        only = names(args.only)
        if "copy" in only:
            runner.copy_table()
        if "decode" in only:
            runner.decode_table()
        if "verify" in only:
            runner.verify_table()
    if runner.jit_log:
        print("\n## FlashInfer JIT (first plan() per module)\n")
        for line in runner.jit_log:
            print(f"- {line}")
    print(f"\n# total {time.time() - t0:.0f} s")
    if args.csv:
        keys = []
        for row in runner.rows:
            keys += [k for k in row if k not in keys]
        with open(args.csv, "w") as out:
            out.write(",".join(keys) + "\n")
            for row in runner.rows:
                out.write(",".join(str(row.get(k, "")) for k in keys) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
