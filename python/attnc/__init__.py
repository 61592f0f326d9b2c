"""attnc from PyTorch: attention variants compiled to Hopper kernels.

    import attnc
    out = attnc.attention(q, k, v, score_mod=lambda s, b, h, q_idx, kv_idx: s + bias[h, q_idx - kv_idx])

Tensors follow FlexAttention's conventions: q (B, Hq, Sq, D), k and v
(B, Hkv, Sk, D), bfloat16 or float16 on an sm_90 GPU. Mods are ordinary
Python over torch ops; attnc traces them into the spec's `score_mod` /
`mask_mod` regions (docs/guide/python.md lists what traces), compiles the
spec once through the JIT and caches it. The operators are registered with
torch.library, so torch.compile keeps them in its graph and autograd runs
attnc's backward kernels.
"""

import contextlib

import torch

from . import _lib, _ops, _spec
from ._lib import AttncError
from ._spec import Variant
from ._trace import TraceError

__all__ = ["attention", "paged_attention", "create_block_mask", "BlockMask", "Variant", "variant",
           "linear_attention", "retention", "attention_spec", "compile_spec",
           "deterministic_backward", "capture_grad_atomics", "AttncError", "TraceError", "library_version"]


def library_version():
    """The version of the loaded libattnc_c.so."""
    return _lib.library().version


def variant(score_mod=None, mask_mod=None):
    """Traces mods once into a Variant, to pass as attention(variant=...)
    (keeps the tracing out of torch.compile regions)."""
    return _spec.Variant(score_mod, mask_mod)


class BlockMask:
    """A mask_mod with the tile coverage attnc builds for it once: which
    (query block, key tile) pairs are empty, full or partial, and the key
    bits of the partial ones. attention(block_mask=...) builds them on its
    first call for each kernel and shape and reuses them after; they reflect
    the captured tensors' values at that call (build a new BlockMask when
    they change), like FlexAttention's create_block_mask."""

    def __init__(self, mask_mod, B, H, Q_LEN, KV_LEN):
        self.mask_mod = mask_mod
        self.shape = (B, H, Q_LEN, KV_LEN)
        self._buffers = {}

    def _check(self, b, hq, sq, sk):
        B, H, Q_LEN, KV_LEN = self.shape
        for name, expected, got in (("B", B, b), ("H", H, hq), ("Q_LEN", Q_LEN, sq),
                                    ("KV_LEN", KV_LEN, sk)):
            if expected is not None and expected != got:
                raise ValueError(f"block_mask: built for {name} = {expected}, used with {got}")

    def _coverage(self, spec, kernel, q, k, v, captures):
        key = (spec, q.shape[0], q.shape[2], k.shape[2])
        found = self._buffers.get(key)
        if found is None:
            o = _ops._empty_bhsd(*q.shape, q)
            lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
            stream = _ops._stream(q)
            args, array = _ops.forward_args(q, k, v, o, lse, captures)
            coverage = torch.as_tensor(kernel.build_tile_coverage(args, stream), device=q.device)
            args, array = _ops.forward_args(q, k, v, o, lse, captures, tile_coverage=coverage)
            key_bits = torch.as_tensor(kernel.build_tile_key_bits(args, stream), device=q.device)
            found = (coverage, key_bits)
            self._buffers[key] = found
        return found


def create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device="cuda"):
    """FlexAttention's create_block_mask: a BlockMask for mask_mod at these
    sizes (None leaves a size free). attnc builds the coverage on the first
    attention() call that uses it, when the kernel's tiles are known."""
    del device  # the coverage lives where the attention call runs
    return BlockMask(mask_mod, B, H, Q_LEN, KV_LEN)


def _check_operands(q, k, v, enable_gqa):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    q_shape, k_shape = q.shape, k.shape
    for name, shape in (("q", q_shape), ("k", k_shape)):
        if len(shape) != 4:
            raise ValueError(f"{name}: expected (batch, heads, seq, head_dim), got shape "
                             f"{tuple(shape)}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"k, v: dtypes {k.dtype}, {v.dtype} differ from q's {q.dtype}")
    if k_shape != v.shape:
        raise ValueError(f"v: shape {tuple(v.shape)} differs from k's {tuple(k_shape)}")
    if q_shape[0] != k_shape[0] or q_shape[3] != k_shape[3]:
        raise ValueError(f"k: shape {tuple(k_shape)} does not match q's {tuple(q_shape)} in "
                         "batch and head_dim")
    hq, hkv = q_shape[1], k_shape[1]
    if hq != hkv and not enable_gqa:
        raise ValueError(f"k: {hkv} heads for q's {hq}; pass enable_gqa=True for "
                         "grouped-query attention")
    if hq % hkv:
        raise ValueError(f"k: {hkv} heads do not divide q's {hq}")
    device = q.get_device()
    if k.get_device() != device or v.get_device() != device:
        raise ValueError(f"k, v: devices {k.device}, {v.device} differ from q's {q.device}")


_spec_texts = {}


def attention_spec(q_heads, kv_heads, head_dim, dtype=torch.bfloat16, score_mod=None,
                   mask_mod=None, scale=None, causal=False, window=None, align="bottom_right",
                   variant=None):
    """The MLIR spec text attention() compiles for these settings (the
    `attn.kernel` op, as `attnc spec.mlir` reads it)."""
    return _spec.text_of(_spec_and_variant(q_heads, kv_heads, head_dim, dtype, score_mod,
                                           mask_mod, scale, causal, window, align, variant)[0])


def _spec_and_variant(q_heads, kv_heads, head_dim, dtype, score_mod, mask_mod, scale, causal,
                      window, align, variant):
    if variant is not None and (score_mod is not None or mask_mod is not None):
        raise ValueError("variant: pass either variant or score_mod/mask_mod, not both")
    if variant is None and (score_mod is not None or mask_mod is not None):
        if torch.compiler.is_compiling():
            # Under torch.compile the mods are traced when the graph is
            # built (a constant result: the spec key and where the captured
            # tensors live); the tensors are then read from the mods'
            # closures and globals in traced code, so they are graph inputs.
            spec, recipe = _spec_text_of_mods(q_heads, kv_heads, head_dim, dtype, score_mod,
                                              mask_mod, scale, causal, window, align)
            return spec, None, _spec.fetch_captures(score_mod, mask_mod, recipe)
        variant = _spec.variant_for(score_mod, mask_mod)
    if variant is None:
        return _spec_text(q_heads, kv_heads, head_dim, dtype, scale, causal, window, align,
                          "", "", False), None, []
    return (_spec_text(q_heads, kv_heads, head_dim, dtype, scale, causal, window, align,
                       variant.captures_text, variant.regions_text, variant.causal_top_left),
            variant, variant.capture_tensors)


@torch.compiler.assume_constant_result
def _spec_text(q_heads, kv_heads, head_dim, dtype, scale, causal, window, align, captures_text,
               regions_text, causal_top_left):
    key = (q_heads, kv_heads, head_dim, dtype, scale, causal, window, align, captures_text,
           regions_text, causal_top_left)
    found = _spec_texts.get(key)
    if found is not None:
        return found
    if causal_top_left:
        if window is not None or (causal and align != "top_left"):
            raise ValueError("mask_mod: q_idx >= kv_idx (causal, top-left) combined with "
                             "another built-in mask; give one of them")
        causal, align = True, "top_left"
    text = _spec.kernel_text(
        "attention", _spec.problem_text(q_heads, kv_heads, head_dim, dtype, scale),
        _spec.mask_text(causal, window, align), captures=captures_text, regions=regions_text)
    if len(_spec_texts) > 4096:
        _spec_texts.clear()
    spec_key = _spec.register(text)
    _spec_texts[key] = spec_key
    return spec_key


@torch.compiler.assume_constant_result
def _spec_text_of_mods(q_heads, kv_heads, head_dim, dtype, score_mod, mask_mod, scale, causal,
                       window, align):
    variant = _spec.variant_for(score_mod, mask_mod)
    recipe = variant.capture_recipe()
    if recipe is None:
        raise TraceError(
            "a mod inside torch.compile reads a tensor that is neither in its closure nor a "
            "module global (an attribute, or a tensor made in the compiled region); trace it "
            "outside with v = attnc.variant(score_mod=..., mask_mod=...) and call "
            "attnc.attention(q, k, v, variant=v)")
    return (_spec_text(q_heads, kv_heads, head_dim, dtype, scale, causal, window, align,
                       variant.captures_text, variant.regions_text, variant.causal_top_left),
            recipe)


def attention(query, key, value, score_mod=None, mask_mod=None, block_mask=None, scale=None,
              enable_gqa=False, return_lse=False, causal=False, window=None,
              align="bottom_right", variant=None, out=None):
    """Softmax attention of (B, H, S, D) tensors, FlexAttention's signature.

    score_mod(score, b, h, q_idx, kv_idx) -> new score and mask_mod(b, h,
    q_idx, kv_idx) -> keep are traced into the spec (block_mask carries a
    mask_mod too). causal (with align 'bottom_right' or 'top_left') and
    window=(left, right) are the built-in masks: their tiles are skipped by
    position and they have a backward. Returns the output (B, Hq, Sq, D),
    and with return_lse the natural-log log-sum-exp (B, Hq, Sq) float32
    (-inf for a row that keeps no key). `out`, a (B, Hq, Sq, D) tensor of
    q's dtype with a contiguous head dim, receives the output instead of a
    new tensor (written in place outside autograd; copied into otherwise).
    """
    _check_operands(query, key, value, enable_gqa)
    if block_mask is not None:
        if mask_mod is not None:
            raise ValueError("mask_mod: give it through block_mask or directly, not both")
        mask_mod = block_mask.mask_mod
        block_mask._check(query.shape[0], query.shape[1], query.shape[2], key.shape[2])
    b, hq, sq, d = query.shape
    spec, var, capture_tensors = _spec_and_variant(hq, key.shape[1], d, query.dtype,
                                                   score_mod, mask_mod, scale, causal, window,
                                                   align, variant)
    packed_captures = None
    if not capture_tensors:
        captures = []
    elif var is not None and not torch.compiler.is_compiling():
        captures, packed_captures = var.launch_pack(query.device, _ops.capture_fields)
    else:
        captures = _spec.launch_captures(capture_tensors, query.device)
    has_regions = _spec.has_regions(spec)
    coverage = key_bits = None
    if block_mask is not None and has_regions and query.is_cuda:
        kernel = _ops.kernel_for(spec)
        coverage, key_bits = block_mask._coverage(spec, kernel, query, key, value, captures)
    if _eager_without_autograd(query, key, value, *capture_tensors):
        # The operator's CUDA implementation directly: the dispatcher and the
        # autograd wrapper would add tens of microseconds to a call that
        # records nothing (no grad, no torch.compile, no dispatch mode).
        result, lse = _ops.forward_eager(query, key, value, captures, spec, coverage, key_bits,
                                         return_lse, out, packed_captures)
    else:
        result, lse = torch.ops.attnc.attention_forward(query, key, value, captures, spec,
                                                        coverage, key_bits)
        if out is not None:
            out.copy_(result)
            result = out
    return (result, lse) if return_lse else result


def paged_attention(query, key_cache, value_cache, block_table, seqlens_k, max_seqlen_k=None,
                    score_mod=None, mask_mod=None, scale=None, causal=False, window=None,
                    align="bottom_right", variant=None, return_lse=False, key_splits=None):
    """Softmax attention of query (B, Hq, Sq, D) over a paged KV cache, for
    serving (decode, speculative verification, chunked prefill): forward
    only, no autograd.

    key_cache and value_cache are page pools (num_pages, page_size, Hkv, D)
    (the vLLM / FlashInfer layout, head dim contiguous), q's dtype, on q's
    device. Sequence b's key j lies in page block_table[b, j // page_size],
    row j % page_size; block_table is int32 (B, max_pages) with contiguous
    rows, seqlens_k int32 (B,) the key lengths, each at most max_seqlen_k
    (default max_pages * page_size). Pages may come in any order. Masks,
    mods and scale as attention()'s; a causal mask aligns each row by its
    sequence's key length. key_splits: None lets attnc choose how many
    splits of the keys run in parallel, k >= 1 asks for k. Returns the
    output (B, Hq, Sq, D) and with return_lse the natural-log log-sum-exp.
    """
    for name, t in (("query", query), ("key_cache", key_cache), ("value_cache", value_cache),
                    ("block_table", block_table), ("seqlens_k", seqlens_k)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if query.dim() != 4:
        raise ValueError(f"query: expected (batch, heads, seq, head_dim), got shape "
                         f"{tuple(query.shape)}")
    if key_cache.dim() != 4 or key_cache.shape != value_cache.shape:
        raise ValueError(f"key_cache, value_cache: expected two (num_pages, page_size, kv_heads, "
                         f"head_dim) pools of one shape, got {tuple(key_cache.shape)} and "
                         f"{tuple(value_cache.shape)}")
    if key_cache.dtype != query.dtype or value_cache.dtype != query.dtype:
        raise TypeError(f"key_cache, value_cache: dtypes {key_cache.dtype}, {value_cache.dtype} "
                        f"differ from query's {query.dtype}")
    b, hq, sq, d = query.shape
    pages, page_size, hkv, pool_d = key_cache.shape
    if pool_d != d:
        raise ValueError(f"key_cache: head_dim {pool_d} differs from query's {d}")
    if hkv == 0 or hq % hkv:
        raise ValueError(f"key_cache: {hkv} kv heads do not divide query's {hq}")
    if block_table.dtype != torch.int32 or block_table.dim() != 2 or \
            block_table.shape[0] != b or block_table.stride(1) != 1:
        raise ValueError(f"block_table: expected int32 (batch = {b}, max_pages) with contiguous "
                         f"rows, got {block_table.dtype} {tuple(block_table.shape)} strides "
                         f"{block_table.stride()}")
    if seqlens_k.dtype != torch.int32 or tuple(seqlens_k.shape) != (b,) or \
            not seqlens_k.is_contiguous():
        raise ValueError(f"seqlens_k: expected contiguous int32 ({b},), got {seqlens_k.dtype} "
                         f"{tuple(seqlens_k.shape)}")
    if max_seqlen_k is None:
        max_seqlen_k = block_table.shape[1] * page_size
    if key_splits is not None and (isinstance(key_splits, bool) or not isinstance(key_splits, int)
                                   or key_splits < 1):
        raise ValueError(f"key_splits: expected None or a split count >= 1, got {key_splits!r}")
    device = query.device
    for name, t in (("key_cache", key_cache), ("value_cache", value_cache),
                    ("block_table", block_table), ("seqlens_k", seqlens_k)):
        if t.device != device:
            raise ValueError(f"{name}: device {t.device} differs from query's {device}")
    if not query.is_cuda:
        raise ValueError(f"query: paged_attention runs on CUDA tensors, got {device}")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (query, key_cache, value_cache)):
        raise NotImplementedError("paged_attention has no backward: call it under "
                                  "torch.no_grad() or with tensors that do not require grad")
    spec, _, capture_tensors = _spec_and_variant(hq, hkv, d, query.dtype, score_mod, mask_mod,
                                                 scale, causal, window, align, variant)
    captures = _spec.launch_captures(capture_tensors, device) if capture_tensors else []
    result, lse = _ops.paged_forward(query, key_cache, value_cache, block_table, seqlens_k,
                                     int(max_seqlen_k), captures, spec,
                                     0 if key_splits is None else key_splits)
    return (result, lse) if return_lse else result


def _eager_without_autograd(*tensors):
    if torch.compiler.is_compiling() or not tensors[0].is_cuda:
        return False
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False
    return (torch._C._len_torch_dispatch_stack() == 0
            and not torch._C._is_torch_function_mode_enabled())


@contextlib.contextmanager
def _backward_option(name, enabled):
    previous = getattr(_ops._BackwardOptions, name)
    setattr(_ops._BackwardOptions, name, enabled)
    try:
        yield
    finally:
        setattr(_ops._BackwardOptions, name, previous)


def deterministic_backward(enabled=True):
    """Backward calls inside run the deterministic kernels: dq, dk and dv
    are bitwise identical from run to run (docs/guide/backward.md). The
    setting is process-wide (autograd runs backward functions on its own
    threads)."""
    return _backward_option("deterministic", enabled)


def capture_grad_atomics(enabled=True):
    """Backward calls inside sum the gradients of learnable captures with
    float atomics instead of exactly: their last bits then vary from run to
    run, and deterministic_backward refuses it (docs/guide/backward.md).
    Process-wide, as deterministic_backward."""
    return _backward_option("capture_grad_atomics", enabled)


_FEATURE_MAPS = {"identity": "identity", "relu": "relu", "elu+1": "elu_plus_one",
                 "elu_plus_one": "elu_plus_one"}


def _linear_call(q, k, v, normalizer, normalize, initial_state, initial_key_sum, log_decay,
                 return_state, scale):
    _check_operands(q, k, v, enable_gqa=True)
    if q.shape[2] != k.shape[2]:
        raise ValueError(f"k: sequence length {k.shape[2]} differs from q's {q.shape[2]}")
    spec = _spec.register(_spec.kernel_text(
        "linear", _spec.problem_text(q.shape[1], k.shape[1], q.shape[3], q.dtype, scale),
        "#attn.causal<top_left>", normalizer))
    b, h, s, d = q.shape
    for name, t, shape in (("initial_state", initial_state, (b, h, d, d)),
                           ("initial_key_sum", initial_key_sum, (b, h, d))):
        if t is not None and (tuple(t.shape) != shape or t.dtype != torch.float32):
            raise ValueError(f"{name}: expected float32 of shape {shape}, got {t.dtype} "
                             f"{tuple(t.shape)}")
    state = initial_state.contiguous() if initial_state is not None else None
    key_sum = initial_key_sum.contiguous() if initial_key_sum is not None else None
    out, final_state, final_key_sum = torch.ops.attnc.linear_forward(
        q, k, v, state, key_sum, log_decay, spec, normalize)
    if not return_state:
        return out
    return (out, final_state, final_key_sum) if normalize else (out, final_state)


def linear_attention(q, k, v, feature_map="elu+1", normalize=False, initial_state=None,
                     initial_key_sum=None, return_state=False, scale=None):
    """Causal linear attention (chunkwise on tensor cores) of (B, H, S, D)
    tensors with a feature map ('identity', 'relu', 'elu+1'), times scale
    (default 1/sqrt(D)), divided by the running key sum when normalize. The state is (B, Hq, D, D) float32 (key
    dim, then value dim), the key sum (B, Hq, D). Returns the output, and
    with return_state the final state (and key sum)."""
    found = _FEATURE_MAPS.get(feature_map)
    if found is None:
        raise ValueError(f"feature_map: {feature_map!r}; expected one of "
                         f"{sorted(_FEATURE_MAPS)}")
    normalizer = (f"#attn.linear<feature_map = {found}, "
                  f"normalize = {'true' if normalize else 'false'}>")
    return _linear_call(q, k, v, normalizer, normalize, initial_state, initial_key_sum, None,
                        return_state, scale)


def retention(q, k, v, decay=None, log_decay=None, initial_state=None, return_state=False,
              scale=None):
    """Retention (RetNet) of (B, H, S, D) tensors: one decay per query head
    (a list of floats in (0, 1]; None: the multi-scale 1 - 2^(-5-h)), or a
    per-token log_decay (B, Hq, S) float32 <= 0 (gated retention, GLA).
    Returns the output, and with return_state the final (B, Hq, D, D) state."""
    if decay is not None and log_decay is not None:
        raise ValueError("decay, log_decay: give one of them")
    if log_decay is not None:
        b, h, s = q.shape[0], q.shape[1], q.shape[2]
        if tuple(log_decay.shape) != (b, h, s):
            raise ValueError(f"log_decay: expected shape {(b, h, s)}, got "
                             f"{tuple(log_decay.shape)}")
        normalizer = "#attn.retention<gated>"
        log_decay = log_decay.to(torch.float32).transpose(1, 2).contiguous()
    elif decay is not None:
        decays = [float(x) for x in decay]
        if len(decays) != q.shape[1]:
            raise ValueError(f"decay: {len(decays)} values for {q.shape[1]} query heads")
        normalizer = f"#attn.retention<decay = [{', '.join(repr(x) for x in decays)}]>"
    else:
        normalizer = "#attn.retention"
    return _linear_call(q, k, v, normalizer, False, initial_state, None, log_decay,
                        return_state, scale)


def compile_spec(spec_text, backward=False):
    """Compiles MLIR spec text (works without a GPU): the kernel's .ptx and
    .info (its plan). Raises AttncError with the diagnostics."""
    return _ops.compiler().compile(spec_text, "attnc.spec", backward)
