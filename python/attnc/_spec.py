"""Spec text: the `attn.kernel` op a Python call compiles.

attention() and the linear family describe their kernel here as MLIR text;
the library's verifier checks it like any spec (diagnostics carry
attnc.spec:line:col). Mods are traced once per (mod, closure values) and
their regions cached; a spec's text is cached by everything it depends on,
so a repeated call builds nothing.
"""

import hashlib
import math
import re
import types

import torch

from ._trace import Tracer, _f32_literal

_ELEMENT_TYPES = {torch.bfloat16: "bf16", torch.float16: "f16"}


def element_type(dtype, name="q"):
    found = _ELEMENT_TYPES.get(dtype)
    if found is None:
        raise TypeError(f"{name}: dtype {dtype} is not supported (torch.bfloat16, torch.float16)")
    return found


def problem_text(q_heads, kv_heads, head_dim, dtype, scale=None):
    text = (f"#attn.problem<q_heads = {q_heads}, kv_heads = {kv_heads}, head_dim = {head_dim}, "
            f"element_type = {element_type(dtype)}")
    if scale is not None:
        scale = float(scale)
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"scale: {scale} must be positive and finite")
        text += f", scale = {_f32_literal(scale)}"
    return text + ">"


def mask_text(causal=False, window=None, align="bottom_right"):
    if align not in ("bottom_right", "top_left"):
        raise ValueError(f"align: {align!r}; expected 'bottom_right' or 'top_left'")
    if window is not None:
        left, right = window
        for name, value in (("window[0]", left), ("window[1]", right)):
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name}: {value!r}; expected an integer >= 0")
        suffix = "" if align == "bottom_right" else ", align = top_left"
        return f"#attn.sliding_window<left = {left}, right = {right}{suffix}>"
    if causal:
        return f"#attn.causal<{align}>"
    return "#attn.no_mask"


class Variant:
    """A traced score_mod and/or mask_mod: their regions and the tensors they
    read. Build it once (attnc.variant) and pass it to attention() to keep
    tracing out of a torch.compile region."""

    def __init__(self, score_mod=None, mask_mod=None):
        tracer = Tracer()
        self.score_mod = score_mod
        self.mask_mod = mask_mod
        regions = []
        self.causal_top_left = False
        if mask_mod is not None:
            region, result = tracer.trace("mask_mod", mask_mod)
            if _is_causal_top_left(region, result):
                self.causal_top_left = True
            else:
                regions.append((region, result))
        if score_mod is not None:
            regions.append(tracer.trace("score_mod", score_mod))
        self.capture_tensors = [c.tensor for c in tracer.captures]
        self.captures_text = ", ".join(c.declaration() for c in tracer.captures)
        self.regions_text = "\n".join(tracer.region_text(r, v) for r, v in regions)
        self._pack = None

    def launch_captures(self, device):
        """The captures as the kernel reads them (launch_captures)."""
        return launch_captures(self.capture_tensors, device)

    def launch_pack(self, device, pack):
        """launch_captures and their packed attnc_tensor array (`pack`:
        _ops.capture_fields), kept while every capture is used as it is
        (no conversion, so no copy to go stale) and keeps its memory and
        shape: a repeated call then checks pointers only."""
        state = tuple((t.data_ptr(), t.shape) for t in self.capture_tensors)
        cached = self._pack
        if cached is not None and cached[0] == state and cached[1] == device:
            return cached[2], cached[3]
        captures = launch_captures(self.capture_tensors, device)
        packed = pack(captures)
        if all(c is t for c, t in zip(captures, self.capture_tensors)):
            self._pack = (state, device, captures, packed)
        return captures, packed

    def capture_recipe(self):
        """Where each captured tensor lives, for torch.compile: ("score" or
        "mask", "cell", closure index) or (..., "global", name), found by
        identity in the mods' closures and globals; None when one is
        elsewhere (an attribute, a tensor made inside the mod)."""
        recipe = []
        for t in self.capture_tensors:
            found = None
            for which, fn in (("score", self.score_mod), ("mask", self.mask_mod)):
                if found is None and isinstance(fn, types.FunctionType):
                    found = _locate(fn, t, which)
            if found is None:
                return None
            recipe.append(found)
        return tuple(recipe)


def _locate(fn, tensor, which):
    for index, cell in enumerate(fn.__closure__ or ()):
        try:
            if cell.cell_contents is tensor:
                return (which, "cell", index)
        except ValueError:
            pass
    for name in fn.__code__.co_names:
        if fn.__globals__.get(name) is tensor:
            return (which, "global", name)
    return None


def fetch_captures(score_mod, mask_mod, recipe):
    """The tensors a capture recipe names (traceable by torch.compile)."""
    tensors = []
    for which, kind, where in recipe:
        fn = score_mod if which == "score" else mask_mod
        tensors.append(fn.__closure__[where].cell_contents if kind == "cell"
                       else fn.__globals__[where])
    return tensors


def launch_captures(tensors, device):
    """Captured tensors as the kernel reads them: contiguous float32 or int32
    on `device`, a 0-d tensor as one element; tensors already so pass as
    they are (no copy, no new tensor)."""
    out = []
    for t in tensors:
        if (t.dtype in (torch.float32, torch.int32) and t.dim() > 0 and t.device == device
                and t.is_contiguous()):
            out.append(t)
            continue
        # A learnable tensor's conversion stays in the graph: its gradient
        # flows back through it.
        if not t.requires_grad:
            t = t.detach()
        if t.dim() == 0:
            t = t.reshape(1)
        t = t.to(device=device, dtype=torch.float32 if t.is_floating_point() else torch.int32)
        out.append(t.contiguous())
    return out


def _is_causal_top_left(region, result):
    """Whether a traced mask_mod is exactly q_idx >= kv_idx (FlexAttention's
    causal mask): it then becomes the built-in #attn.causal<top_left>, whose
    tiles are skipped by position and which has a backward."""
    return (len(region.lines) == 1 and result.type == "i1" and region.lines[0] in (
        f"{result.name} = arith.cmpi sge, %q_idx, %kv_idx : index",
        f"{result.name} = arith.cmpi sle, %kv_idx, %q_idx : index"))


def _closure_key(fn):
    """What a mod's trace depends on besides its code: the values in its
    closure and the module globals its code names (tensors by identity)."""
    if fn is None:
        return None
    if not isinstance(fn, types.FunctionType):
        return (id(fn),)
    # The code, not the function object: a mod defined inside a model's
    # forward is a new function each call, with the same trace.
    parts = [fn.__code__, tuple(_value_key(value) for value in fn.__defaults__ or ())]
    for cell in fn.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:
            value = None
        parts.append(_value_key(value))
    for name in fn.__code__.co_names:
        if name in fn.__globals__:
            parts.append(_value_key(fn.__globals__[name]))
    return tuple(parts)


def _value_key(value):
    if isinstance(value, (int, float, bool, str, type(None))):
        return (type(value), value)
    # Whether a captured tensor requires grad decides its declaration.
    if isinstance(value, torch.Tensor):
        return ("tensor", id(value), value.requires_grad)
    return ("id", id(value))


_variants = {}


def variant_for(score_mod, mask_mod):
    """The traced Variant of two mods, cached by their code and closures."""
    key = (_closure_key(score_mod), _closure_key(mask_mod))
    found = _variants.get(key)
    if found is None:
        found = Variant(score_mod, mask_mod)
        if len(_variants) > 4096:
            _variants.clear()
        _variants[key] = found
    return found


def kernel_text(name, problem, mask, normalizer="#attn.softmax", captures="", regions=""):
    lines = [f"attn.kernel @{name}", f"    problem = {problem}", f"    mask = {mask}",
             f"    normalizer = {normalizer}"]
    if captures:
        lines.append(f"    captures = [{captures}]")
    if regions:
        lines.append(regions)
    return "\n".join(lines) + "\n"


_texts_by_key = {}


def register(text):
    """A short key for spec text, the operators' `spec` argument. Graphs
    that torch.compile generates carry the key as a constant; the text
    stays here (multi-line strings do not survive Inductor's code
    generation). Every call that builds a spec registers it, so a key in a
    graph of this process always resolves."""
    kind = "attnc-mods-" if ("score_mod {" in text or "mask_mod {" in text) else "attnc-"
    key = kind + hashlib.sha256(text.encode()).hexdigest()[:32]
    _texts_by_key[key] = text
    return key


def has_regions(key):
    """Whether the spec of a key has a score_mod or mask_mod region (told by
    the key itself, so torch.compile can trace the test)."""
    return key.startswith("attnc-mods-")


_learnable = {}


def learnable_captures(key):
    """The positions of the captures a spec declares with `grad` (the
    backward returns their gradients), in declaration order."""
    found = _learnable.get(key)
    if found is None:
        declarations = re.findall(r"#attn\.capture<[^>]*>", text_of(key))
        found = tuple(i for i, d in enumerate(declarations) if d.endswith(", grad>"))
        _learnable[key] = found
    return found


def text_of(key):
    text = _texts_by_key.get(key)
    if text is None:
        raise KeyError(f"spec: the key {key!r} names no spec built in this process")
    return text
