"""Tracing of FlexAttention-style mods into `mask_mod` / `score_mod` regions.

A mod is called once with symbolic values (Value) in place of the score and
the indices. Python operators on them and the torch functions they reach
(through __torch_function__: torch.where, torch.tanh, a captured tensor
indexed by them, ...) append MLIR operations to a Region; the value the mod
returns becomes the region's attn.yield. Every value has one of three
types, as in the C++ builder (compiler/include/attn/Compiler/Expr.h): index
(positions, integer constants, reads of integer tensors), i1 (comparisons,
reads of bool tensors) and f32 (the score, float constants, reads of float
tensors). Mixed operands follow torch's promotion: bool < index < f32.

Tensors the mod reads become the spec's captures, in order of first use:
floating tensors as f32, integer and bool tensors as i32, 0-d tensors as
one-element buffers. Their extents are left open (`?`): the launch passes
the actual sizes and a read outside them gives 0 (not Python's wrap-around
of negative indices).

What cannot be compiled raises TraceError naming the mod's source line and
the construct: Python control flow on a traced value (`if`, `and`, `or`,
`not`, builtin min/max), a torch function without a lowering, slicing, an
index that is not an integer.
"""

import math
import os
import struct
import sys

import torch

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class TraceError(TypeError):
    """A construct of a mod that attnc cannot compile."""


def _user_location():
    """file:line of the innermost frame outside this package (the mod's)."""
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_PACKAGE_DIR) and "/torch/" not in path:
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


def _fail(message):
    raise TraceError(f"{_user_location()}: {message}")


def _f32_literal(value):
    value = struct.unpack("<f", struct.pack("<f", value))[0] if math.isfinite(value) else value
    if math.isnan(value):
        return "0x7FC00000"
    if math.isinf(value):
        return "0x7F800000" if value > 0 else "0xFF800000"
    return f"{value:.9e}"


class Capture:
    """A tensor a mod reads: its position among the spec's captures."""

    def __init__(self, number, tensor):
        self.number = number
        self.tensor = tensor
        self.rank = max(tensor.dim(), 1)
        if tensor.dim() > 3:
            _fail(f"a captured tensor has {tensor.dim()} dimensions; attnc reads "
                  "tensors of 1 to 3 (reshape it)")
        if tensor.dtype.is_floating_point:
            self.element = "f32"
            self.kind = "f32"
        elif tensor.dtype == torch.bool:
            self.element = "i32"
            self.kind = "i1"
        elif tensor.dtype.is_complex:
            _fail("a captured tensor is complex; attnc reads float, integer and bool tensors")
        else:
            self.element = "i32"
            self.kind = "index"

    @property
    def memref(self):
        return f"memref<{'?x' * self.rank}{self.element}>"

    @property
    def learnable(self):
        """A float tensor that requires grad: the backward writes its gradient."""
        return self.element == "f32" and self.tensor.requires_grad

    def declaration(self):
        dims = ", ".join(["?"] * self.rank)
        grad = ", grad" if self.learnable else ""
        return f'#attn.capture<"c{self.number}", {self.element}, [{dims}]{grad}>'


class Region:
    """The operations of one region being traced, in SSA form, with equal
    operations emitted once."""

    def __init__(self, tracer, kind):
        self.tracer = tracer
        self.kind = kind  # "score_mod" or "mask_mod"
        self.lines = []
        self.memo = {}
        self.count = 0

    def emit(self, text, type_, key=None):
        key = key or (text, type_)
        found = self.memo.get(key)
        if found is not None:
            return found
        name = f"%{self.count}"
        self.count += 1
        self.lines.append(f"{name} = {text}")
        value = Value(self, name, type_)
        self.memo[key] = value
        return value

    # Constants ------------------------------------------------------------

    def constant(self, value, type_):
        if type_ == "i1":
            return self.emit(f"arith.constant {'true' if value else 'false'}", "i1")
        if type_ == "index":
            return self.emit(f"arith.constant {int(value)} : index", "index")
        return self.emit(f"arith.constant {_f32_literal(float(value))} : f32", "f32")

    def lift(self, operand):
        """A Value for a mod's operand: a Value, a Python number, or a tensor
        (read as a capture: 0-d, or one element)."""
        if isinstance(operand, Value):
            if operand.region is not self:
                _fail("a value traced in one mod is used in another")
            return operand
        if isinstance(operand, bool):
            return self.constant(operand, "i1")
        if isinstance(operand, int):
            if not -(1 << 63) <= operand < (1 << 63):
                _fail(f"the integer constant {operand} does not fit in 64 bits")
            return self.constant(operand, "index")
        if isinstance(operand, float):
            return self.constant(operand, "f32")
        if isinstance(operand, torch.Tensor):
            if operand.numel() != 1:
                _fail(f"a tensor of shape {tuple(operand.shape)} is used as a value; index it "
                      "with the mod's arguments (bias[h, q_idx - kv_idx])")
            capture = self.tracer.capture(operand)
            return self.load(capture, [self.constant(0, "index")] * capture.rank)
        _fail(f"a value of type {type(operand).__name__} cannot be used in a mod")

    # Conversions ----------------------------------------------------------

    def to_f32(self, value):
        if value.type == "f32":
            return value
        if value.type == "i1":
            return self.select(value, self.constant(1.0, "f32"), self.constant(0.0, "f32"))
        wide = self.emit(f"arith.index_cast {value.name} : index to i64", "i64")
        return self.emit(f"arith.sitofp {wide.name} : i64 to f32", "f32")

    def to_index(self, value):
        if value.type == "index":
            return value
        if value.type == "i1":
            return self.select(value, self.constant(1, "index"), self.constant(0, "index"))
        wide = self.emit(f"arith.fptosi {value.name} : f32 to i64", "i64")
        return self.emit(f"arith.index_cast {wide.name} : i64 to index", "index")

    def to_bool(self, value):
        if value.type == "i1":
            return value
        return self.compare("ne", value, self.constant(0, value.type))

    def convert(self, value, type_):
        return {"f32": self.to_f32, "index": self.to_index, "i1": self.to_bool}[type_](value)

    def promote(self, *operands, least="i1"):
        """The common type of the operands (at least `least`) and the operands
        converted to it; Python numbers become constants of that type."""
        order = ["i1", "index", "f32"]
        types_ = [least]
        for o in operands:
            if isinstance(o, Value):
                types_.append(o.type)
            elif isinstance(o, bool):
                types_.append("i1")
            elif isinstance(o, int):
                types_.append("index")
            elif isinstance(o, float):
                types_.append("f32")
            else:
                types_.append(self.lift(o).type)
        type_ = max(types_, key=order.index)
        converted = []
        for o in operands:
            if isinstance(o, (bool, int, float)) and not isinstance(o, Value):
                if type_ != "f32" and isinstance(o, float):
                    _fail(f"the float constant {o} in an integer operation")
                converted.append(self.constant(o, type_))
            else:
                converted.append(self.convert(self.lift(o), type_))
        return type_, converted

    # Operations -----------------------------------------------------------

    def arith(self, op, a, b):
        """+, -, *, min, max over promoted operands (bools count as index)."""
        type_, (x, y) = self.promote(a, b, least="index")
        names = {"add": ("arith.addi", "arith.addf"), "sub": ("arith.subi", "arith.subf"),
                 "mul": ("arith.muli", "arith.mulf"), "min": ("arith.minsi", "arith.minimumf"),
                 "max": ("arith.maxsi", "arith.maximumf")}[op]
        name = names[1] if type_ == "f32" else names[0]
        return self.emit(f"{name} {x.name}, {y.name} : {type_}", type_)

    def true_divide(self, a, b):
        # attn-lower-mods turns a division by a constant into a product.
        _, (x, y) = self.promote(a, b, least="f32")
        return self.emit(f"arith.divf {x.name}, {y.name} : f32", "f32")

    def floor_divide(self, a, b):
        type_, (x, y) = self.promote(a, b, least="index")
        if type_ == "index":
            return self.emit(f"arith.floordivsi {x.name}, {y.name} : index", "index")
        quotient = self.emit(f"arith.divf {x.name}, {y.name} : f32", "f32")
        return self.emit(f"math.floor {quotient.name} : f32", "f32")

    def remainder(self, a, b, python=True):
        """a % b: Python's (and torch.remainder's) sign of the divisor, or
        C's sign of the dividend (torch.fmod) when python is False."""
        type_, (x, y) = self.promote(a, b, least="index")
        op = "arith.remsi" if type_ == "index" else "arith.remf"
        rem = self.emit(f"{op} {x.name}, {y.name} : {type_}", type_)
        if not python:
            return rem
        zero = self.constant(0, type_)
        nonzero = self.compare("ne", rem, zero)
        differs = self.logical("xor", self.compare("lt", rem, zero), self.compare("lt", y, zero))
        fix = self.logical("and", nonzero, differs)
        return self.select(fix, self.arith("add", rem, y), rem)

    def negate(self, a):
        x = self.lift(a)
        if x.type == "f32":
            return self.emit(f"arith.negf {x.name} : f32", "f32")
        return self.arith("sub", 0, x)

    def absolute(self, a):
        x = self.lift(a)
        if x.type == "f32":
            return self.emit(f"math.absf {x.name} : f32", "f32")
        x = self.to_index(x)
        return self.emit(f"math.absi {x.name} : index", "index")

    def compare(self, predicate, a, b):
        type_, (x, y) = self.promote(a, b, least="index")
        if type_ == "f32":
            fp = {"eq": "oeq", "ne": "une", "lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge"}
            return self.emit(f"arith.cmpf {fp[predicate]}, {x.name}, {y.name} : f32", "i1")
        ip = {"eq": "eq", "ne": "ne", "lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge"}
        return self.emit(f"arith.cmpi {ip[predicate]}, {x.name}, {y.name} : index", "i1")

    def logical(self, op, a, b):
        """&, |, ^: on bools, or bitwise on integers."""
        type_, (x, y) = self.promote(a, b)
        if type_ == "f32":
            _fail(f"bitwise {op} of float values")
        name = {"and": "arith.andi", "or": "arith.ori", "xor": "arith.xori"}[op]
        return self.emit(f"{name} {x.name}, {y.name} : {type_}", type_)

    def invert(self, a):
        x = self.lift(a)
        if x.type == "f32":
            _fail("~ of a float value")
        ones = self.constant(True, "i1") if x.type == "i1" else self.constant(-1, "index")
        return self.emit(f"arith.xori {x.name}, {ones.name} : {x.type}", x.type)

    def select(self, condition, a, b):
        c = self.to_bool(self.lift(condition))
        type_, (x, y) = self.promote(a, b)
        return self.emit(f"arith.select {c.name}, {x.name}, {y.name} : {type_}", type_)

    def unary_math(self, name, a):
        x = self.to_f32(self.lift(a))
        return self.emit(f"math.{name} {x.name} : f32", "f32")

    def power(self, a, b):
        if isinstance(b, int) and not isinstance(b, bool) and 1 <= b <= 4:
            result = self.lift(a)
            for _ in range(b - 1):
                result = self.arith("mul", result, a)
            return result
        _, (x, y) = self.promote(a, b, least="f32")
        return self.emit(f"math.powf {x.name}, {y.name} : f32", "f32")

    def load(self, capture, indices):
        if len(indices) != capture.rank:
            _fail(f"a captured tensor of rank {capture.rank} is indexed with {len(indices)} "
                  "indices; attnc reads one element per access (give one index per dimension)")
        names = []
        for index in indices:
            if isinstance(index, slice) or index is Ellipsis or index is None:
                _fail("slicing a captured tensor (':', '...', None); index every dimension "
                      "with the mod's arguments")
            if isinstance(index, int) and not isinstance(index, bool) and index < 0:
                _fail(f"the negative constant index {index}; attnc does not wrap negative "
                      "indices (reads outside a captured tensor give 0)")
            value = self.lift(index)
            if value.type == "f32":
                _fail("a float value indexes a captured tensor; convert it with .long()")
            names.append(self.to_index(value).name)
        argument = self.tracer.capture_argument(capture)
        loaded = self.emit(f"memref.load {argument}[{', '.join(names)}] : {capture.memref}",
                           capture.element)
        if capture.kind == "f32":
            return loaded
        index = self.emit(f"arith.index_cast {loaded.name} : i32 to index", "index")
        if capture.kind == "i1":
            return self.compare("ne", index, self.constant(0, "index"))
        return index


def _operand_region(args):
    for arg in args:
        if isinstance(arg, Value):
            return arg.region
        if isinstance(arg, (tuple, list)):
            region = _operand_region(arg)
            if region is not None:
                return region
    return None


def _type_of_dtype(dtype):
    if dtype is None:
        return None
    if dtype.is_floating_point:
        return "f32"
    if dtype == torch.bool:
        return "i1"
    return "index"


class Value:
    """A traced value of a region: its SSA name and type."""

    __slots__ = ("region", "name", "type")

    def __init__(self, region, name, type_):
        self.region = region
        self.name = name
        self.type = type_

    def __repr__(self):
        return f"attnc traced {self.type} {self.name}"

    # Python operators -----------------------------------------------------
    def __add__(self, other): return self.region.arith("add", self, other)
    def __radd__(self, other): return self.region.arith("add", other, self)
    def __sub__(self, other): return self.region.arith("sub", self, other)
    def __rsub__(self, other): return self.region.arith("sub", other, self)
    def __mul__(self, other): return self.region.arith("mul", self, other)
    def __rmul__(self, other): return self.region.arith("mul", other, self)
    def __truediv__(self, other): return self.region.true_divide(self, other)
    def __rtruediv__(self, other): return self.region.true_divide(other, self)
    def __floordiv__(self, other): return self.region.floor_divide(self, other)
    def __rfloordiv__(self, other): return self.region.floor_divide(other, self)
    def __mod__(self, other): return self.region.remainder(self, other)
    def __rmod__(self, other): return self.region.remainder(other, self)
    def __pow__(self, other): return self.region.power(self, other)
    def __rpow__(self, other): return self.region.power(other, self)
    def __neg__(self): return self.region.negate(self)
    def __pos__(self): return self
    def __abs__(self): return self.region.absolute(self)
    def __invert__(self): return self.region.invert(self)
    def __and__(self, other): return self.region.logical("and", self, other)
    def __rand__(self, other): return self.region.logical("and", other, self)
    def __or__(self, other): return self.region.logical("or", self, other)
    def __ror__(self, other): return self.region.logical("or", other, self)
    def __xor__(self, other): return self.region.logical("xor", self, other)
    def __rxor__(self, other): return self.region.logical("xor", other, self)
    def __eq__(self, other): return self.region.compare("eq", self, other)
    def __ne__(self, other): return self.region.compare("ne", self, other)
    def __lt__(self, other): return self.region.compare("lt", self, other)
    def __le__(self, other): return self.region.compare("le", self, other)
    def __gt__(self, other): return self.region.compare("gt", self, other)
    def __ge__(self, other): return self.region.compare("ge", self, other)
    __hash__ = None

    def __bool__(self):
        _fail("Python control flow on a traced value (`if`, `and`, `or`, `not`, a chained "
              "comparison or builtin min/max): it is decided once, not per element; use "
              "torch.where, &, |, ~ or torch.minimum/torch.maximum")

    def __index__(self):
        _fail("a traced value used where Python needs a plain integer (list indexing, "
              "range, a shape); index a tensor instead")

    def __int__(self):
        _fail("int() of a traced value; use .long()")

    def __float__(self):
        _fail("float() of a traced value; use .float()")

    def __getitem__(self, index):
        _fail("indexing a traced value")

    def __iter__(self):
        _fail("iterating over a traced value")

    # Tensor methods FlexAttention mods use --------------------------------
    def float(self): return self.region.to_f32(self)
    def long(self): return self.region.to_index(self)
    def int(self): return self.region.to_index(self)
    def bool(self): return self.region.to_bool(self)
    def abs(self): return self.region.absolute(self)
    def exp(self): return self.region.unary_math("exp", self)
    def log(self): return self.region.unary_math("log", self)
    def tanh(self): return self.region.unary_math("tanh", self)
    def sqrt(self): return self.region.unary_math("sqrt", self)
    def sigmoid(self): return _sigmoid(self.region, self)

    def clamp(self, min=None, max=None):
        return _clamp(self.region, self, min, max)

    def to(self, *args, **kwargs):
        dtype = kwargs.get("dtype")
        for arg in args:
            if isinstance(arg, torch.dtype):
                dtype = arg
        if dtype is None:
            return self
        return self.region.convert(self, _type_of_dtype(dtype))

    def type_as(self, other):
        other = self.region.lift(other)
        return self.region.convert(self, other.type)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        region = _operand_region(args) or _operand_region(list(kwargs.values()))
        handler = _TORCH_FUNCTIONS.get(func)
        if handler is None:
            name = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
            module = getattr(func, "__module__", None) or "torch"
            if module.startswith("torch._C") or name.startswith("TensorBase."):
                module = "torch.Tensor"
            _fail(f"{module}.{name.split('.')[-1]} is not supported in a mod; supported: "
                  f"{', '.join(sorted(_SUPPORTED_NAMES))}")
        return handler(region, *args, **kwargs)


def _sigmoid(region, x):
    one = region.constant(1.0, "f32")
    exponential = region.unary_math("exp", region.negate(region.to_f32(region.lift(x))))
    return region.true_divide(one, region.arith("add", one, exponential))


def _clamp(region, x, min=None, max=None):
    result = region.lift(x)
    if min is not None:
        result = region.arith("max", result, min)
    if max is not None:
        result = region.arith("min", result, max)
    return result


def _where(region, condition, a, b):
    return region.select(condition, a, b)


def _getitem(region, tensor, index):
    if not isinstance(tensor, torch.Tensor):
        _fail("indexing a traced value")
    indices = list(index) if isinstance(index, tuple) else [index]
    capture = region.tracer.capture(tensor)
    return region.load(capture, indices)


def _div(region, a, b, rounding_mode=None):
    if rounding_mode is None:
        return region.true_divide(a, b)
    if rounding_mode == "floor":
        return region.floor_divide(a, b)
    if rounding_mode == "trunc":
        type_, (x, y) = region.promote(a, b, least="index")
        if type_ == "index":
            return region.emit(f"arith.divsi {x.name}, {y.name} : index", "index")
        quotient = region.true_divide(x, y)
        return region.select(region.compare("lt", quotient, 0.0),
                             region.unary_math("ceil", quotient),
                             region.unary_math("floor", quotient))
    _fail(f"rounding_mode={rounding_mode!r}")


def _full_like(region, x, value, dtype=None, **_):
    x = region.lift(x)
    type_ = _type_of_dtype(dtype) or x.type
    return region.constant(value, type_)


def _to(region, x, *args, **kwargs):
    return Value.to(region.lift(x), *args, **kwargs)


def _method(name):
    return lambda region, x, *args, **kwargs: getattr(region.lift(x), name)(*args, **kwargs)


def _build_table():
    table = {}

    def add(names, handler):
        for name in names:
            for owner in (torch, torch.Tensor):
                fn = getattr(owner, name, None)
                if fn is not None:
                    table[fn] = handler

    add(["add", "__add__", "__radd__"], lambda r, a, b, alpha=1: r.arith("add", a, b if alpha == 1 else r.arith("mul", b, alpha)))
    add(["sub", "subtract", "__sub__", "__rsub__"], lambda r, a, b, alpha=1: r.arith("sub", a, b if alpha == 1 else r.arith("mul", b, alpha)))
    add(["mul", "multiply", "__mul__", "__rmul__"], lambda r, a, b: r.arith("mul", a, b))
    add(["div", "divide", "true_divide", "__truediv__"], _div)
    add(["floor_divide", "__floordiv__"], lambda r, a, b: r.floor_divide(a, b))
    add(["remainder", "__mod__"], lambda r, a, b: r.remainder(a, b))
    add(["fmod"], lambda r, a, b: r.remainder(a, b, python=False))
    add(["minimum", "min"], lambda r, a, b: r.arith("min", a, b))
    add(["maximum", "max"], lambda r, a, b: r.arith("max", a, b))
    add(["neg", "negative", "__neg__"], lambda r, a: r.negate(a))
    add(["abs", "absolute", "__abs__"], lambda r, a: r.absolute(a))
    add(["where"], _where)
    add(["clamp", "clip"], _clamp)
    add(["sigmoid"], _sigmoid)
    add(["pow", "__pow__"], lambda r, a, b: r.power(a, b))
    add(["rsqrt"], lambda r, a: r.unary_math("rsqrt", a))
    for name in ("exp", "exp2", "log", "log2", "log1p", "sqrt", "tanh", "sin", "cos", "erf",
                 "floor", "ceil"):
        add([name], (lambda n: lambda r, a: r.unary_math(n, a))(name))
    for name, predicate in (("eq", "eq"), ("ne", "ne"), ("lt", "lt"), ("le", "le"),
                            ("gt", "gt"), ("ge", "ge"), ("__eq__", "eq"), ("__ne__", "ne"),
                            ("__lt__", "lt"), ("__le__", "le"), ("__gt__", "gt"),
                            ("__ge__", "ge"), ("greater", "gt"), ("less", "lt"),
                            ("greater_equal", "ge"), ("less_equal", "le"),
                            ("not_equal", "ne")):
        add([name], (lambda p: lambda r, a, b: r.compare(p, a, b))(predicate))
    add(["bitwise_and", "__and__", "__rand__"], lambda r, a, b: r.logical("and", a, b))
    add(["logical_and"], lambda r, a, b: r.logical("and", r.to_bool(r.lift(a)), r.to_bool(r.lift(b))))
    add(["bitwise_or", "__or__", "__ror__"], lambda r, a, b: r.logical("or", a, b))
    add(["logical_or"], lambda r, a, b: r.logical("or", r.to_bool(r.lift(a)), r.to_bool(r.lift(b))))
    add(["bitwise_xor", "__xor__", "__rxor__"], lambda r, a, b: r.logical("xor", a, b))
    add(["logical_xor"], lambda r, a, b: r.logical("xor", r.to_bool(r.lift(a)), r.to_bool(r.lift(b))))
    add(["bitwise_not", "__invert__"], lambda r, a: r.invert(a))
    add(["logical_not"], lambda r, a: r.invert(r.to_bool(r.lift(a))))
    add(["full_like"], _full_like)
    add(["zeros_like"], lambda r, x, dtype=None, **k: _full_like(r, x, 0, dtype))
    add(["ones_like"], lambda r, x, dtype=None, **k: _full_like(r, x, 1, dtype))
    add(["to"], _to)
    add(["type_as"], lambda r, x, other: r.lift(x).type_as(other))
    for name in ("float", "long", "int", "bool"):
        add([name], _method(name))
    table[torch.Tensor.__getitem__] = _getitem
    return table


_TORCH_FUNCTIONS = _build_table()
_SUPPORTED_NAMES = {getattr(f, "__name__", "") for f in _TORCH_FUNCTIONS
                    if not getattr(f, "__name__", "_").startswith("_")}


class Tracer:
    """Traces a spec's mods, sharing their captures."""

    def __init__(self):
        self.captures = []
        self._by_tensor = {}

    def capture(self, tensor):
        found = self._by_tensor.get(id(tensor))
        if found is not None:
            return found
        capture = Capture(len(self.captures), tensor)
        self.captures.append(capture)
        self._by_tensor[id(tensor)] = capture
        return capture

    def capture_argument(self, capture):
        return f"%c{capture.number}"

    def trace(self, kind, mod):
        region = Region(self, kind)
        if kind == "score_mod":
            args = [Value(region, "%score", "f32")]
        else:
            args = []
        args += [Value(region, name, "index") for name in ("%b", "%h", "%q_idx", "%kv_idx")]
        result = mod(*args)
        if result is None:
            _fail(f"the {kind} returned None")
        value = region.lift(result)
        value = region.to_f32(value) if kind == "score_mod" else region.to_bool(value)
        return region, value

    def region_text(self, region, result, indent="    "):
        """The region, captures being every capture traced so far."""
        head = "%score: f32, " if region.kind == "score_mod" else ""
        arguments = head + "%b: index, %h: index, %q_idx: index, %kv_idx: index"
        for capture in self.captures:
            arguments += f", %c{capture.number}: {capture.memref}"
        body = [f"{indent}^bb0({arguments}):"]
        body += [f"{indent}  {line}" for line in region.lines]
        body.append(f"{indent}  attn.yield {result.name} : {result.type}")
        return f"{indent}{region.kind} {{\n" + "\n".join(body) + f"\n{indent}}}"
