"""The torch.library operators behind attnc.attention and the linear family.

Each operator takes tensors and the key of a spec (attnc._spec.register; a
constant string under torch.compile), compiles the spec through the JIT on
first use (cached by its key here, and by its planned IR in memory and on
disk by the library)
and launches on the current CUDA stream. Fake implementations give the
shapes and strides to torch.compile; register_autograd connects the
forward to the backward kernel.

Layouts: q, k, v arrive as (B, H, S, D) views of any strides with a
contiguous head dim; the kernels read them as BSHD views with the same
memory. Outputs are allocated (B, S, H, D)-contiguous and returned as
(B, H, S, D) views (transpose(1, 2)), the layout the kernels write fastest.
"""

import ctypes
import threading

import torch

from . import _lib, _spec

_DTYPES = {torch.bfloat16: _lib.BF16, torch.float16: _lib.F16, torch.float32: _lib.F32,
           torch.int32: _lib.I32}

_compiler = None
_kernels = {}
_kernels_lock = threading.Lock()


def compiler():
    """The process's JIT compiler (created on first use)."""
    global _compiler
    if _compiler is None:
        with _kernels_lock:
            if _compiler is None:
                _compiler = _lib.Compiler()
    return _compiler


def kernel_for(spec, backward=False):
    """The compiled kernel of a spec key (forward, or its backward module)."""
    key = (spec, backward)
    kernel = _kernels.get(key)
    if kernel is None:
        kernel = compiler().compile(_spec.text_of(spec), "attnc.spec", backward)
        with _kernels_lock:
            kernel = _kernels.setdefault(key, kernel)
    return kernel


def _element_dtype(t, name):
    """The C API's dtype of an attention operand (bfloat16, float16)."""
    dtype = _DTYPES.get(t.dtype)
    if dtype is None or dtype == _lib.I32:
        raise TypeError(f"{name}: dtype {t.dtype} is not supported (bfloat16, float16)")
    return dtype


def bshd_fields(t, name):
    """attnc_tensor words of a (B, H, S, D) tensor read as BSHD."""
    dtype = _element_dtype(t, name)
    try:
        b, h, s, d = t.shape
        sb, sh, ss, sd = t.stride()
    except ValueError:
        raise ValueError(f"{name}: expected a 4-D (batch, heads, seq, head_dim) tensor, got "
                         f"shape {tuple(t.shape)}") from None
    return (t.data_ptr(), dtype, 4, b, s, h, d, sb, ss, sh, sd)


_capture_arrays = {}


def capture_fields(captures):
    """An attnc_tensor[] for contiguous f32/i32 captures (and the buffer),
    kept for the next call with the same buffers."""
    if not captures:
        return None, 0
    key = tuple((t.data_ptr(), t.dtype, t.shape) for t in captures)
    found = _capture_arrays.get(key)
    if found is not None:
        return found, len(captures)
    entries = []
    for i, t in enumerate(captures):
        dtype = _DTYPES.get(t.dtype)
        if dtype not in (_lib.F32, _lib.I32):
            raise TypeError(f"captures[{i}]: dtype {t.dtype}; expected float32 or int32")
        entries.append((t.data_ptr(), dtype, tuple(t.shape)))
    array = _lib.capture_array(entries)
    if len(_capture_arrays) > 256:
        _capture_arrays.clear()
    _capture_arrays[key] = array
    return array, len(entries)


def _stream(t):
    # The raw handle without building a torch.cuda.Stream object (a few
    # microseconds a call).
    return torch._C._cuda_getCurrentRawStream(t.device.index)


def _empty_bhsd(b, h, s, d, like):
    return like.new_empty((b, s, h, d)).transpose(1, 2)


def _gradient_like(t):
    """An empty gradient of t's layout where its head dim is contiguous. For
    a dense t autograd then keeps it as t.grad as it is, where it would copy
    a gradient whose strides differ from t's (3 tensors a training step); a
    t with gaps (a slice of a packed qkv) gets a dense gradient, which
    autograd still copies into the contiguous layout it wants."""
    gradient = torch.empty_like(t)
    return gradient if gradient.stride(-1) == 1 else _empty_bhsd(*t.shape, t)


def _address(array):
    return ctypes.addressof(array) if array is not None else 0


# Softmax attention ---------------------------------------------------------

torch.library.define(
    "attnc::attention_forward",
    "(Tensor q, Tensor k, Tensor v, Tensor[] captures, str spec, Tensor? tile_coverage, "
    "Tensor? tile_key_bits) -> (Tensor, Tensor)")
torch.library.define(
    "attnc::attention_backward",
    "(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
    "Tensor[] captures, str spec, bool deterministic, bool capture_grad_atomics, "
    "Tensor? tile_coverage) "
    "-> (Tensor, Tensor, Tensor, Tensor[])")


def forward_args(q, k, v, o, lse, captures, tile_coverage=None, tile_key_bits=None,
                 workspace=None, packed_captures=None):
    array, count = packed_captures or capture_fields(captures)
    args = _lib.pack_forward(
        bshd_fields(q, "q"), bshd_fields(k, "k"), bshd_fields(v, "v"), bshd_fields(o, "out"),
        lse.data_ptr(), _address(array), count,
        tile_coverage=tile_coverage.data_ptr() if tile_coverage is not None else 0,
        tile_key_bits=tile_key_bits.data_ptr() if tile_key_bits is not None else 0,
        workspace=workspace.data_ptr() if workspace is not None else 0,
        workspace_bytes=workspace.numel() if workspace is not None else 0)
    return args, array


_forward_workspace = {}


def _workspace_for(cache, key, bytes_of, device):
    """The forward's workspace for a call: its size kept per shape key
    (bytes_of() asks the library on a miss), the buffer new each call."""
    workspace_bytes = cache.get(key)
    if workspace_bytes is None:
        workspace_bytes = bytes_of()
        if len(cache) > 1024:
            cache.clear()
        cache[key] = workspace_bytes
    return (torch.empty(workspace_bytes, dtype=torch.uint8, device=device)
            if workspace_bytes else None)


def _attention_forward_cuda(q, k, v, captures, spec, tile_coverage, tile_key_bits):
    return forward_eager(q, k, v, captures, spec, tile_coverage, tile_key_bits, want_lse=True)


_scratch_lse = {}


def forward_eager(q, k, v, captures, spec, tile_coverage, tile_key_bits, want_lse, out=None,
                  packed_captures=None):
    """The forward's implementation: the operator's CUDA kernel
    (want_lse=True), and attention()'s path when nothing records the call
    (no autograd, no torch.compile, no dispatch mode), without the
    dispatcher, into `out` when given, and with a reused scratch buffer for
    the log-sum-exp the caller does not want (the kernel only writes it, so
    calls on any stream may share it)."""
    kernel = kernel_for(spec)
    b, h, s, d = q.shape
    o = out if out is not None else _empty_bhsd(b, h, s, d, q)
    if want_lse:
        lse = q.new_empty((b, h, s), dtype=torch.float32)
    else:
        count = b * h * s
        device = q.device.index
        lse = _scratch_lse.get(device)
        if lse is None or lse.numel() < count:
            lse = q.new_empty((max(count, 1 << 16),), dtype=torch.float32)
            _scratch_lse[device] = lse
    # The tail split's workspace depends on the device's multiprocessors.
    shape_key = (spec, b, s, k.shape[2], q.device.index)
    workspace = _workspace_for(
        _forward_workspace, shape_key,
        lambda: kernel.forward_workspace_bytes(
            forward_args(q, k, v, o, lse, captures, tile_coverage, tile_key_bits)[0]),
        q.device)
    args, array = forward_args(q, k, v, o, lse, captures, tile_coverage, tile_key_bits,
                               workspace, packed_captures)
    kernel.run_forward(args, _stream(q))
    return o, (lse if want_lse else None)


# Paged KV caches (serving: forward only) -----------------------------------

def _pool_fields(t, name):
    """attnc_tensor words of a [num_pages, page_size, kv_heads, head_dim]
    page pool, which the library reads as BSHD (pages as the batch)."""
    dtype = _element_dtype(t, name)
    if t.dim() != 4:
        raise ValueError(f"{name}: expected a 4-D (num_pages, page_size, kv_heads, head_dim) "
                         f"tensor, got shape {tuple(t.shape)}")
    return (t.data_ptr(), dtype, 4, *t.shape, *t.stride())


_paged_workspace = {}


def paged_forward(q, key_cache, value_cache, block_table, seqlens_k, max_seqlen_k, captures,
                  spec, key_splits):
    """The forward over a paged cache: o (B, Hq, Sq, D) and the natural-log
    log-sum-exp (B, Hq, Sq)."""
    kernel = kernel_for(spec)
    b, h, s, d = q.shape
    o = _empty_bhsd(b, h, s, d, q)
    lse = q.new_empty((b, h, s), dtype=torch.float32)
    array, count = capture_fields(captures)
    paged = (block_table.data_ptr(), block_table.stride(0), block_table.shape[1],
             seqlens_k.data_ptr(), max_seqlen_k)

    def pack(workspace):
        return _lib.pack_forward(
            bshd_fields(q, "query"), _pool_fields(key_cache, "key_cache"),
            _pool_fields(value_cache, "value_cache"), bshd_fields(o, "out"), lse.data_ptr(),
            _address(array), count,
            workspace=workspace.data_ptr() if workspace is not None else 0,
            workspace_bytes=workspace.numel() if workspace is not None else 0, paged=paged,
            key_splits=key_splits)

    # The split pieces' workspace depends on the shapes and the device.
    shape_key = (spec, b, s, block_table.shape[1], key_cache.shape[1], max_seqlen_k, key_splits,
                 q.device.index)
    workspace = _workspace_for(_paged_workspace, shape_key,
                               lambda: kernel.forward_workspace_bytes(pack(None)), q.device)
    kernel.run_forward(pack(workspace), _stream(q))
    return o, lse


@torch.library.register_fake("attnc::attention_forward")
def _attention_forward_fake(q, k, v, captures, spec, tile_coverage, tile_key_bits):
    b, h, s, d = q.shape
    return _empty_bhsd(b, h, s, d, q), q.new_empty((b, h, s), dtype=torch.float32)


def _dense_head_dim(t):
    return t if t.stride(-1) == 1 and t.data_ptr() % 16 == 0 else t.contiguous()


def _capture_gradients(captures, spec):
    """Empty f32 gradients of the captures the spec declares with `grad`."""
    return [torch.empty(captures[i].shape, dtype=torch.float32, device=captures[i].device)
            for i in _spec.learnable_captures(spec)]


def _attention_backward_cuda(grad_out, q, k, v, out, lse, captures, spec, deterministic,
                             capture_grad_atomics, tile_coverage):
    kernel = kernel_for(spec, backward=True)
    grad_out = _dense_head_dim(grad_out)
    dq, dk, dv = _gradient_like(q), _gradient_like(k), _gradient_like(v)
    capture_grads = _capture_gradients(captures, spec)
    fields = [bshd_fields(t, n) for t, n in ((q, "q"), (k, "k"), (v, "v"), (out, "out"),
                                              (grad_out, "grad_out"))]
    grads = [bshd_fields(t, n) for t, n in ((dq, "dq"), (dk, "dk"), (dv, "dv"))]
    capture_array, capture_count = capture_fields(captures)
    grad_array, grad_count = capture_fields(capture_grads)
    buffers = dict(deterministic=deterministic, captures_pointer=_address(capture_array),
                   num_captures=capture_count, grads_pointer=_address(grad_array),
                   num_grads=grad_count, capture_grad_atomics=capture_grad_atomics)
    if tile_coverage is not None:
        # The forward kernel's coverage, over that kernel's tiles.
        info = kernel_for(spec).info
        buffers.update(tile_coverage=tile_coverage.data_ptr(),
                       coverage_block_m=info["block_m"], coverage_block_n=info["block_n"])
    probe = _lib.pack_backward(*fields, lse.data_ptr(), *grads, **buffers)
    workspace_bytes = kernel.backward_workspace_bytes(probe)
    workspace = torch.empty(workspace_bytes, dtype=torch.uint8, device=q.device)
    args = _lib.pack_backward(*fields, lse.data_ptr(), *grads, workspace=workspace.data_ptr(),
                              workspace_bytes=workspace_bytes, **buffers)
    kernel.run_backward(args, _stream(q))
    return dq, dk, dv, capture_grads


@torch.library.register_fake("attnc::attention_backward")
def _attention_backward_fake(grad_out, q, k, v, out, lse, captures, spec, deterministic,
                             capture_grad_atomics, tile_coverage):
    return (_gradient_like(q), _gradient_like(k), _gradient_like(v),
            [c.new_empty(c.shape, dtype=torch.float32)
             for c in (captures[i] for i in _spec.learnable_captures(spec))])


def _setup_context(ctx, inputs, output):
    q, k, v, captures, spec, tile_coverage, _ = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, tile_coverage, *captures)
    ctx.spec = spec
    ctx.capture_count = len(captures)
    ctx.set_materialize_grads(False)


class _BackwardOptions:
    """The backward kernels' options (attnc.deterministic_backward,
    attnc.capture_grad_atomics). Process-wide, not per thread: autograd runs
    CUDA backward functions on its own device threads, which would not see
    a thread-local value set around loss.backward()."""
    deterministic = False
    capture_grad_atomics = False


def deterministic_enabled():
    return _BackwardOptions.deterministic


def capture_grad_atomics_enabled():
    return _BackwardOptions.capture_grad_atomics


def _backward(ctx, grad_out, grad_lse):
    if grad_lse is not None:
        raise NotImplementedError(
            "attnc.attention: a gradient through the returned log-sum-exp is not supported "
            "by the backward kernels yet; use the lse without differentiating it (detach it)")
    q, k, v, o, lse, tile_coverage, *captures = ctx.saved_tensors
    if grad_out is None:
        grad_out = torch.zeros_like(o)
    dq, dk, dv, learned = torch.ops.attnc.attention_backward(
        grad_out, q, k, v, o, lse, captures, ctx.spec, deterministic_enabled(),
        capture_grad_atomics_enabled(), tile_coverage)
    capture_grads = [None] * ctx.capture_count
    for index, gradient in zip(_spec.learnable_captures(ctx.spec), learned):
        capture = captures[index]
        capture_grads[index] = gradient.to(capture.dtype).reshape(capture.shape)
    return dq, dk, dv, capture_grads, None, None, None


torch.library.register_autograd("attnc::attention_forward", _backward,
                                setup_context=_setup_context)


# Linear attention and retention -------------------------------------------

torch.library.define(
    "attnc::linear_forward",
    "(Tensor q, Tensor k, Tensor v, Tensor? initial_state, Tensor? initial_key_sum, "
    "Tensor? log_decay, str spec, bool normalize) -> (Tensor, Tensor, Tensor)")


_linear_workspace = {}


def _linear_forward_cuda(q, k, v, initial_state, initial_key_sum, log_decay, spec, normalize):
    kernel = kernel_for(spec)
    b, h, s, d = q.shape
    o = _empty_bhsd(b, h, s, d, q)
    state = torch.empty((b, h, d, d), dtype=torch.float32, device=q.device)
    key_sum = torch.empty((b, h, d) if normalize else (0,), dtype=torch.float32,
                          device=q.device)
    pointer = lambda t: t.data_ptr() if t is not None else 0
    fields = (bshd_fields(q, "q"), bshd_fields(k, "k"), bshd_fields(v, "v"),
              bshd_fields(o, "out"))
    states = dict(initial_state=pointer(initial_state), final_state=state.data_ptr(),
                  initial_key_sum=pointer(initial_key_sum),
                  final_key_sum=key_sum.data_ptr() if normalize else 0,
                  log_decay=pointer(log_decay))
    # The workspace lets the runtime split the sequence over more blocks
    # when batch x heads alone leave multiprocessors idle.
    shape_key = (spec, b, s, q.device.index)
    workspace_bytes = _linear_workspace.get(shape_key)
    if workspace_bytes is None:
        workspace_bytes = kernel.linear_workspace_bytes(_lib.pack_linear(*fields, **states))
        _linear_workspace[shape_key] = workspace_bytes
    workspace = (torch.empty(workspace_bytes, dtype=torch.uint8, device=q.device)
                 if workspace_bytes else None)
    args = _lib.pack_linear(*fields, **states,
                            workspace=workspace.data_ptr() if workspace is not None else 0,
                            workspace_bytes=workspace_bytes)
    kernel.run_linear(args, _stream(q))
    return o, state, key_sum


@torch.library.register_fake("attnc::linear_forward")
def _linear_forward_fake(q, k, v, initial_state, initial_key_sum, log_decay, spec, normalize):
    b, h, s, d = q.shape
    return (_empty_bhsd(b, h, s, d, q), q.new_empty((b, h, d, d), dtype=torch.float32),
            q.new_empty((b, h, d) if normalize else (0,), dtype=torch.float32))


torch.library.define(
    "attnc::linear_backward",
    "(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor? initial_state, Tensor? log_decay, "
    "Tensor grad_state, str spec, Tensor? out, Tensor? initial_key_sum, "
    "Tensor? grad_key_sum) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")


def _linear_backward_cuda(grad_out, q, k, v, initial_state, log_decay, grad_state, spec, out,
                          initial_key_sum, grad_key_sum):
    """out, initial_key_sum and grad_key_sum: normalized linear attention's
    (out not None), whose last result is the initial key sum's gradient."""
    kernel = kernel_for(spec, backward=True)
    grad_out = _dense_head_dim(grad_out)
    dq, dk, dv = _gradient_like(q), _gradient_like(k), _gradient_like(v)
    b, h, _, d = q.shape
    d_initial_state = torch.empty((b, h, d, d), dtype=torch.float32, device=q.device)
    d_log_decay = torch.empty_like(log_decay) if log_decay is not None else q.new_empty(
        (0,), dtype=torch.float32)
    pointer = lambda t: t.data_ptr() if t is not None else 0
    fields = [bshd_fields(t, n) for t, n in ((q, "q"), (k, "k"), (v, "v"),
                                              (grad_out, "grad_out"), (dq, "dq"), (dk, "dk"),
                                              (dv, "dv"))]
    grad_state = grad_state.contiguous()
    buffers = dict(log_decay=pointer(log_decay),
                   d_log_decay=d_log_decay.data_ptr() if log_decay is not None else 0,
                   initial_state=pointer(initial_state), d_final_state=grad_state.data_ptr(),
                   d_initial_state=d_initial_state.data_ptr())
    normalize = out is not None
    d_initial_key_sum = q.new_empty((b, h, d) if normalize else (0,), dtype=torch.float32)
    if normalize:
        if grad_key_sum is not None:
            grad_key_sum = grad_key_sum.contiguous()
        buffers.update(o=bshd_fields(_dense_head_dim(out), "out"),
                       initial_key_sum=pointer(initial_key_sum),
                       d_final_key_sum=pointer(grad_key_sum),
                       d_initial_key_sum=d_initial_key_sum.data_ptr())
    workspace_bytes = kernel.linear_backward_workspace_bytes(
        _lib.pack_linear_backward(*fields, **buffers))
    workspace = torch.empty(max(workspace_bytes, 1), dtype=torch.uint8, device=q.device)
    args = _lib.pack_linear_backward(*fields, **buffers, workspace=workspace.data_ptr(),
                                     workspace_bytes=workspace_bytes)
    kernel.run_linear_backward(args, _stream(q))
    return dq, dk, dv, d_initial_state, d_log_decay, d_initial_key_sum


@torch.library.register_fake("attnc::linear_backward")
def _linear_backward_fake(grad_out, q, k, v, initial_state, log_decay, grad_state, spec, out,
                          initial_key_sum, grad_key_sum):
    b, h, _, d = q.shape
    return (_gradient_like(q), _gradient_like(k), _gradient_like(v),
            q.new_empty((b, h, d, d), dtype=torch.float32),
            torch.empty_like(log_decay) if log_decay is not None else q.new_empty(
                (0,), dtype=torch.float32),
            q.new_empty((b, h, d) if out is not None else (0,), dtype=torch.float32))


def _linear_setup_context(ctx, inputs, output):
    q, k, v, initial_state, initial_key_sum, log_decay, spec, normalize = inputs
    # The normalized backward reads the forward's output (its denominators'
    # gradient is -(dO . o) / den).
    out = output[0] if normalize else None
    ctx.save_for_backward(q, k, v, initial_state, log_decay, out, initial_key_sum)
    ctx.spec = spec
    ctx.normalize = normalize


def _linear_backward(ctx, grad_out, grad_state, grad_key_sum):
    q, k, v, initial_state, log_decay, out, initial_key_sum = ctx.saved_tensors
    b, h, s, d = q.shape
    if grad_out is None:
        grad_out = _empty_bhsd(b, h, s, d, q).zero_()
    if grad_state is None:
        grad_state = q.new_zeros((b, h, d, d), dtype=torch.float32)
    dq, dk, dv, d_initial_state, d_log_decay, d_initial_key_sum = (
        torch.ops.attnc.linear_backward(grad_out, q, k, v, initial_state, log_decay, grad_state,
                                        ctx.spec, out, initial_key_sum,
                                        grad_key_sum if ctx.normalize else None))
    return (dq, dk, dv, d_initial_state if initial_state is not None else None,
            d_initial_key_sum if initial_key_sum is not None else None,
            d_log_decay if log_decay is not None else None, None, None)


torch.library.register_autograd("attnc::linear_forward", _linear_backward,
                                setup_context=_linear_setup_context)


def _not_on_cuda(name, argument):
    def reject(q, *args):
        raise ValueError(f"{argument}: attnc runs on CUDA tensors of an sm_90 GPU; got a tensor on "
                         f"{q.device} ({name})")
    return reject


for _op, _argument in (("attention_forward", "q"), ("attention_backward", "grad_out"),
                      ("linear_forward", "q"), ("linear_backward", "grad_out")):
    torch.library.impl(f"attnc::{_op}", "CPU")(_not_on_cuda(_op, _argument))


# torch.library.impl used as a decorator does not return the function, and
# attention() calls the forward's implementation directly on its eager path.
for _op, _implementation in (("attention_forward", _attention_forward_cuda),
                             ("attention_backward", _attention_backward_cuda),
                             ("linear_forward", _linear_forward_cuda),
                             ("linear_backward", _linear_backward_cuda)):
    torch.library.impl(f"attnc::{_op}", "CUDA")(_implementation)
