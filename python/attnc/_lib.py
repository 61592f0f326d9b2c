"""ctypes binding of libattnc_c.so (compiler/include/attn-c/Attnc.h).

The argument structs of the C API hold only 8-byte fields, so each is packed
here with one struct.pack call (a few hundred nanoseconds) rather than
field by field through ctypes.Structure. Layouts follow the header; the
library checks their sizes with static assertions, and this module checks
the C API version it was written for when it loads the library.
"""

import ctypes
import os
import struct
import threading

C_API_VERSION = 6

BF16, F16, F32, I32 = 0, 1, 2, 3

_TENSOR = "Q q q 4q 4q"  # data, dtype, rank, shape[4], strides[4]
_PACKED = "Q Q q q q"
_PAGED = "Q q q Q q"  # block_table, block_table_stride, max_pages, seqlens_k, max_seqlen_k
_FORWARD = "<" + " ".join([_TENSOR] * 4 + ["Q Q q", _PACKED, "Q Q Q Q Q", _PAGED, "q"])
_BACKWARD = "<" + " ".join([_TENSOR] * 5 + ["Q"] + [_TENSOR] * 3 +
                          [_PACKED, "Q Q q", "Q q Q q", "Q q q q"])
_LINEAR = "<" + " ".join([_TENSOR] * 4 + ["Q Q Q Q Q Q Q q"])
_LINEAR_BACKWARD = "<" + " ".join([_TENSOR] * 7 + ["Q Q Q Q Q Q Q", _TENSOR, "Q Q Q"])
_INFO = "<4q d 11q"

FORWARD_BYTES = struct.calcsize(_FORWARD)
BACKWARD_BYTES = struct.calcsize(_BACKWARD)
LINEAR_BYTES = struct.calcsize(_LINEAR)
LINEAR_BACKWARD_BYTES = struct.calcsize(_LINEAR_BACKWARD)
assert FORWARD_BYTES == 504 and BACKWARD_BYTES == 840 and LINEAR_BYTES == 416
assert LINEAR_BACKWARD_BYTES == 784
assert struct.calcsize(_INFO) == 128


class AttncError(RuntimeError):
    """An error the attnc library reported (a bad argument, a spec's
    diagnostics, a failed compile or launch)."""


def _library_path():
    explicit = os.environ.get("ATTNC_C_LIBRARY")
    if explicit:
        return explicit
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "lib", "libattnc_c.so")


class Library:
    """The loaded library with typed entry points."""

    def __init__(self, path):
        if not os.path.exists(path):
            raise AttncError(
                f"libattnc_c.so not found at {path}: install the package with pip "
                "(it builds the library), or set ATTNC_C_LIBRARY to its path")
        self.path = path
        lib = ctypes.CDLL(path)
        p, i32, u64 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_uint64
        pp = ctypes.POINTER(ctypes.c_void_p)
        sig = {
            "attnc_version": (ctypes.c_char_p, []),
            "attnc_c_api_version": (i32, []),
            "attnc_last_error": (ctypes.c_char_p, []),
            "attnc_compiler_create": (i32, [ctypes.c_char_p, ctypes.c_char_p, pp]),
            "attnc_compiler_destroy": (None, [p]),
            "attnc_compiler_stats": (i32, [p, ctypes.c_char_p]),
            "attnc_compile": (i32, [p, ctypes.c_char_p, ctypes.c_char_p, i32, pp]),
            "attnc_kernel_destroy": (None, [p]),
            "attnc_kernel_get_info": (i32, [p, ctypes.c_char_p]),
            "attnc_kernel_ptx": (p, [p, ctypes.POINTER(ctypes.c_size_t)]),
            "attnc_kernel_load": (i32, [p]),
            "attnc_run_forward": (i32, [p, ctypes.c_char_p, p]),
            "attnc_run_backward": (i32, [p, ctypes.c_char_p, p]),
            "attnc_run_linear": (i32, [p, ctypes.c_char_p, p]),
            "attnc_run_decode": (i32, [p, ctypes.c_char_p, p]),
            "attnc_run_linear_backward": (i32, [p, ctypes.c_char_p, p]),
            "attnc_forward_workspace_bytes": (i32, [p, ctypes.c_char_p, ctypes.POINTER(u64)]),
            "attnc_backward_workspace_bytes": (i32, [p, ctypes.c_char_p, ctypes.POINTER(u64)]),
            "attnc_linear_workspace_bytes": (i32, [p, ctypes.c_char_p, ctypes.POINTER(u64)]),
            "attnc_linear_backward_workspace_bytes": (i32, [p, ctypes.c_char_p,
                                                             ctypes.POINTER(u64)]),
            "attnc_build_tile_coverage": (i32, [p, ctypes.c_char_p, p, pp]),
            "attnc_build_tile_key_bits": (i32, [p, ctypes.c_char_p, p, pp]),
            "attnc_buffer_data": (p, [p]),
            "attnc_buffer_bytes": (u64, [p]),
            "attnc_buffer_destroy": (None, [p]),
        }
        for name, (restype, argtypes) in sig.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name[len("attnc_"):], fn)
        version = self.c_api_version()
        if version != C_API_VERSION:
            raise AttncError(f"{path} has C API version {version}; this package needs "
                             f"{C_API_VERSION} (reinstall the package)")
        self.version = self.version().decode()

    def check(self, status):
        if status != 0:
            raise AttncError(self.last_error().decode(errors="replace"))


_library = None
_library_lock = threading.Lock()


def library():
    """The library, loaded on first use."""
    global _library
    if _library is None:
        with _library_lock:
            if _library is None:
                _library = Library(_library_path())
    return _library


class Buffer:
    """Device memory the library allocated; exposes __cuda_array_interface__
    so torch.as_tensor views it without a copy (the view keeps it alive)."""

    def __init__(self, handle):
        lib = library()
        self._handle = handle
        self.data = lib.buffer_data(handle) or 0
        self.nbytes = int(lib.buffer_bytes(handle))

    @property
    def __cuda_array_interface__(self):
        return {"shape": (self.nbytes,), "typestr": "|u1", "data": (self.data, False),
                "version": 3, "strides": None}

    def __del__(self):
        if self._handle and _library is not None:
            _library.buffer_destroy(self._handle)
            self._handle = None


class Kernel:
    """A compiled kernel (attnc_kernel)."""

    def __init__(self, handle):
        self._handle = ctypes.c_void_p(handle)
        lib = library()
        raw = ctypes.create_string_buffer(128)
        lib.check(lib.kernel_get_info(self._handle, raw))
        fields = struct.unpack(_INFO, raw.raw)
        names = ("head_dim", "q_heads", "kv_heads", "dtype", "scale", "block_m", "block_n",
                 "threads_per_block", "shared_memory_bytes", "linear_family", "backward",
                 "causal", "normalize", "gated", "num_captures", "automatic_work_order")
        self.info = dict(zip(names, fields))

    @property
    def ptx(self):
        lib = library()
        size = ctypes.c_size_t()
        pointer = lib.kernel_ptx(self._handle, ctypes.byref(size))
        if not pointer:
            lib.check(1)
        return ctypes.string_at(pointer, size.value).decode()

    def load(self):
        lib = library()
        lib.check(lib.kernel_load(self._handle))

    def run_forward(self, packed_args, stream):
        lib = library()
        if lib.run_forward(self._handle, packed_args, stream):
            lib.check(1)

    def run_backward(self, packed_args, stream):
        lib = library()
        if lib.run_backward(self._handle, packed_args, stream):
            lib.check(1)

    def run_linear(self, packed_args, stream):
        lib = library()
        if lib.run_linear(self._handle, packed_args, stream):
            lib.check(1)

    def run_linear_backward(self, packed_args, stream):
        lib = library()
        if lib.run_linear_backward(self._handle, packed_args, stream):
            lib.check(1)

    def linear_backward_workspace_bytes(self, packed_args):
        lib = library()
        out = ctypes.c_uint64()
        lib.check(lib.linear_backward_workspace_bytes(self._handle, packed_args,
                                                      ctypes.byref(out)))
        return out.value

    def backward_workspace_bytes(self, packed_args):
        lib = library()
        out = ctypes.c_uint64()
        lib.check(lib.backward_workspace_bytes(self._handle, packed_args, ctypes.byref(out)))
        return out.value

    def linear_workspace_bytes(self, packed_args):
        lib = library()
        out = ctypes.c_uint64()
        lib.check(lib.linear_workspace_bytes(self._handle, packed_args, ctypes.byref(out)))
        return out.value

    def forward_workspace_bytes(self, packed_args):
        lib = library()
        out = ctypes.c_uint64()
        lib.check(lib.forward_workspace_bytes(self._handle, packed_args, ctypes.byref(out)))
        return out.value

    def build_tile_coverage(self, packed_args, stream):
        lib = library()
        out = ctypes.c_void_p()
        lib.check(lib.build_tile_coverage(self._handle, packed_args, stream, ctypes.byref(out)))
        return Buffer(out.value)

    def build_tile_key_bits(self, packed_args, stream):
        lib = library()
        out = ctypes.c_void_p()
        lib.check(lib.build_tile_key_bits(self._handle, packed_args, stream, ctypes.byref(out)))
        return Buffer(out.value)

    def __del__(self):
        if self._handle and _library is not None:
            _library.kernel_destroy(self._handle)
            self._handle = None


class Compiler:
    """attn::Compiler: compiles spec text, caching in memory and on disk."""

    def __init__(self, tuning_database=None, cache_dir=None):
        lib = library()
        out = ctypes.c_void_p()
        encode = lambda s: None if s is None else s.encode()
        lib.check(lib.compiler_create(encode(tuning_database), encode(cache_dir),
                                      ctypes.byref(out)))
        self._handle = out

    def compile(self, spec_text, buffer_name="spec", backward=False):
        lib = library()
        out = ctypes.c_void_p()
        lib.check(lib.compile(self._handle, spec_text.encode(), buffer_name.encode(),
                              1 if backward else 0, ctypes.byref(out)))
        return Kernel(out.value)

    def stats(self):
        lib = library()
        raw = ctypes.create_string_buffer(24)
        lib.check(lib.compiler_stats(self._handle, raw))
        return dict(zip(("memory_hits", "disk_hits", "compiles"), struct.unpack("<3Q", raw.raw)))

    def __del__(self):
        if self._handle and _library is not None:
            _library.compiler_destroy(self._handle)
            self._handle = None


_NO_TENSOR = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
_NO_PACKED = (0, 0, 0, 0, 0)
_NO_PAGED = (0, 0, 0, 0, 0)


def tensor_fields(pointer, dtype, shape, strides):
    """An attnc_tensor's 11 words for a rank-4 BSHD operand."""
    return (pointer, dtype, 4, *shape, *strides)


def capture_array(captures):
    """An attnc_tensor[] of contiguous captures: (pointer, dtype, shape)
    triples. Returns the ctypes buffer (keep it alive over the call)."""
    words = []
    for pointer, dtype, shape in captures:
        rank = len(shape)
        shape4 = tuple(shape) + (0,) * (4 - rank)
        strides = []
        running = 1
        for extent in reversed(shape):
            strides.append(running)
            running *= extent
        strides4 = tuple(reversed(strides)) + (0,) * (4 - rank)
        words.extend((pointer, dtype, rank, *shape4, *strides4))
    return ctypes.create_string_buffer(struct.pack("<" + "q" * len(words), *words), 88 * len(captures))


def pack_forward(q, k, v, o, lse, captures_pointer, num_captures, packed=None,
                 tile_coverage=0, tile_key_bits=0, work_order=0, workspace=0,
                 workspace_bytes=0, paged=None, key_splits=0):
    """key_splits as the C API's: 0 automatic, -1 the forward kernel, k >= 1
    that many splits of the keys; paged: the five fields of attnc_paged."""
    return struct.pack(_FORWARD, *q, *k, *v, *o, lse, captures_pointer, num_captures,
                       *(packed or _NO_PACKED), tile_coverage, tile_key_bits, work_order,
                       workspace, workspace_bytes, *(paged or _NO_PAGED), key_splits)


def pack_backward(q, k, v, o, d_o, lse, dq, dk, dv, packed=None, workspace=0,
                  workspace_bytes=0, deterministic=False, captures_pointer=0, num_captures=0,
                  grads_pointer=0, num_grads=0, tile_coverage=0, coverage_block_m=0,
                  coverage_block_n=0, capture_grad_atomics=False):
    return struct.pack(_BACKWARD, *q, *k, *v, *o, *d_o, lse, *dq, *dk, *dv,
                       *(packed or _NO_PACKED), workspace, workspace_bytes,
                       1 if deterministic else 0, captures_pointer, num_captures,
                       grads_pointer, num_grads, tile_coverage, coverage_block_m,
                       coverage_block_n, 1 if capture_grad_atomics else 0)


_NO_TENSOR = (0,) * 11


def pack_linear_backward(q, k, v, d_o, dq, dk, dv, log_decay=0, d_log_decay=0,
                         initial_state=0, d_final_state=0, d_initial_state=0, workspace=0,
                         workspace_bytes=0, o=None, initial_key_sum=0, d_final_key_sum=0,
                         d_initial_key_sum=0):
    """o and the key sums: normalized linear attention only."""
    return struct.pack(_LINEAR_BACKWARD, *q, *k, *v, *d_o, *dq, *dk, *dv, log_decay,
                       d_log_decay, initial_state, d_final_state, d_initial_state, workspace,
                       workspace_bytes, *(o or _NO_TENSOR), initial_key_sum, d_final_key_sum,
                       d_initial_key_sum)


def pack_linear(q, k, v, o, initial_state=0, final_state=0, initial_key_sum=0,
                final_key_sum=0, log_decay=0, workspace=0, workspace_bytes=0, segments=0):
    return struct.pack(_LINEAR, *q, *k, *v, *o, initial_state, final_state, initial_key_sum,
                       final_key_sum, log_decay, workspace, workspace_bytes, segments)
