"""Proxies: the symbolic values a trace talks about.

A ``TensorProxy`` carries what a meta function needs (shape, dtype, device, strides) and
behaves enough like a ``torch.Tensor`` that plain PyTorch code runs on it: ``torch.*``
calls reach it through ``__torch_function__``, operators and methods through the
dispatcher that the tracer installs with :func:`set_dispatcher`.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Callable

import torch

from primtrace import dtypes
from primtrace.ir.strides import dense_strides, matches_dense

# The tracer installs the function that turns a torch-level call on proxies into refs.
_dispatcher: Callable | None = None


#: While a trace on a channels_last copy of an input runs (tracer/layout.py): the modules
#: outside primtrace that read a proxy's layout (strides, contiguity). None otherwise.
layout_readers: set[str] | None = None


def _note_layout_read() -> None:
    module = sys._getframe(2).f_globals.get("__name__", "")
    if not module.startswith("primtrace."):
        layout_readers.add(module)


def set_dispatcher(fn: Callable) -> None:
    global _dispatcher
    _dispatcher = fn


def _dispatch(func, args, kwargs=None):
    if _dispatcher is None:
        raise RuntimeError(f"{func} called on a proxy outside of primtrace tracing")
    return _dispatcher(func, args, kwargs or {})


_no_torch_function = torch._C.DisableTorchFunction


@dataclass(frozen=True)
class NumberSpec:
    """Metadata of a Python number computed in a trace: its type, and its trace-time value."""
    python_type: type
    value: object = None
    sources: tuple = ()
    bounds: tuple | None = None   # (lower, upper or None) of an int known only at run time


@dataclass(frozen=True)
class TensorSpec:
    """Metadata of a tensor: what a meta function computes and a proxy carries."""
    shape: tuple
    dtype: torch.dtype
    device: torch.device
    strides: tuple

    @staticmethod
    def of(t) -> "TensorSpec":
        return TensorSpec(tuple(t.shape), t.dtype, t.device, tuple(t.stride()))


class Unknown:
    """The trace-time value of a number known only when the trace runs (``t.item()``,
    ``torch.equal(a, b)``): it can be returned or computed with, not read."""
    __slots__ = ("what",)

    def __init__(self, what: str):
        self.what = what   # what computed it, for the error a read raises

    def __repr__(self):
        return f"<unknown until run: {self.what}>"


class Hint(Unknown):
    """The trace-time value of an int that is a runtime input all the same: a dim of an input
    tensor traced as a symbolic size (``jit(fn, dynamic=True)``), or arithmetic on such dims.

    Meta functions relate it symbolically (equal sizes, broadcasting, bounds); code that
    needs its value (``int(n)``, ``if n > 8:``) gets `hint`, the value of the call being
    traced, and the read adds a guard (:mod:`primtrace.ir.size_guards`) that later calls
    must pass to use the trace. `fn(env)` computes the value from the base dims' values
    (``env``: base name -> int) when a guard is checked; `numbers`: the runtime Python
    numbers it was computed with (a guard on it specializes them)."""
    __slots__ = ("hint", "fn", "numbers", "bases")

    def __init__(self, what: str, hint: int, fn: Callable, numbers: tuple = (),
                 bases: tuple = ()):
        super().__init__(what)
        self.hint, self.fn, self.numbers, self.bases = hint, fn, numbers, bases

    def __repr__(self):
        return f"<symbolic size {self.what} (hint {self.hint})>"


#: called with the Unknown a traced number holds when user code reads its value (the
#: tracer installs one that raises its DataDependentError at the user's line)
_unknown_read: Callable | None = None


def set_unknown_read(fn: Callable) -> None:
    global _unknown_read
    _unknown_read = fn


#: called with a traced tensor whose values a ref reads as Python numbers (a tensor argument
#: used as a size or an index: narrow's start); the tracer installs one that reads an input
#: tensor's values and guards them, and raises its DataDependentError for computed ones
_value_read: Callable | None = None


def set_value_read(fn: Callable) -> None:
    global _value_read
    _value_read = fn


def tensor_values(t, what: str):
    """``t.tolist()``, as eager reads a tensor argument that is a size or an index; for a
    traced tensor, what the tracer's reader gives (`what` names the read in its error)."""
    if isinstance(t, TensorProxy):
        if _value_read is None:
            raise RuntimeError(f"{what} reads a traced tensor's values outside of tracing")
        return _value_read(t, what)
    return t.tolist()


class Proxy:
    """A named symbolic value (subclasses store `name`)."""
    __slots__ = ()

    def __repr__(self):
        return self.name


class NumberProxy(Proxy):
    """A Python number that is a runtime input: its type is fixed, its value is not.

    The trace-time value is kept so that user code which *reads* it (control flow,
    shapes) can do so; reading it marks the proxy as specialized, which puts the value
    into the cache key.
    """
    __slots__ = ("name", "python_type", "value", "specialized", "sources")

    def __init__(self, name: str, python_type: type, value=None, sources: tuple = ()):
        self.name = name
        self.python_type = python_type
        self.value = value
        self.specialized = False
        self.sources = sources  # the number proxies this one was computed from

    def _read(self):
        """The trace-time value; reading it specializes this number and its sources (a
        symbolic size's read is a guard that it keeps this value)."""
        if isinstance(self.value, Hint):
            from primtrace.ir.size_guards import read_hint
            return read_hint(self)
        if isinstance(self.value, Unknown):
            if _unknown_read is not None:
                _unknown_read(self.value)
            raise RuntimeError(f"{self.value.what} is unknown until the trace runs")
        self.specialized = True
        for source in self.sources:
            source._read()
        return self.value

    def __bool__(self):
        if self.python_type is int and isinstance(self.value, Unknown):
            return self != 0   # a size's bounds may tell (n >= 1), else a guard or an error
        return bool(self._read())

    def __int__(self):
        return int(self._read())

    def __index__(self):
        return int(self._read())

    def __float__(self):
        return float(self._read())

    def __complex__(self):
        return complex(self._read())

    def __hash__(self):
        return id(self)

    def __format__(self, spec):
        return format(self._read(), spec)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        # lets torch.add(tensor, n) reach the tracer when n is a runtime number
        return _dispatch(func, args, kwargs)


class SizeProxy(NumberProxy):
    """An int known only when the trace runs, within known bounds: a data-dependent size
    (the number of True values ``x[mask]`` selects; an "unbacked" symbol in torch.compile's
    words), or arithmetic on such sizes (``n * 3``).

    The node that makes a tensor of such a size outputs the size too (``t3, n2 =
    prims.mask_select(x, m, 0)``), so the trace is valid for every count: nothing is
    specialized on it. A tensor's shape may hold one (``t3: "cpu f32[n2, 5]"``). Its value
    cannot be read while tracing; a comparison the bounds decide (``n >= 0``, ``n <=
    mask.numel()``, ``n == n``) is answered, any other reads the value and raises the
    tracer's DataDependentError.

    `expr` is its value as a polynomial with int coefficients of the sizes it was computed
    from: a sorted tuple of (monomial, coefficient), a monomial a sorted tuple of (base,
    power) (``4 * n - 1`` is ``(((), -1), ((("n0", 1),), 4))``; a size of its own is its own
    base). Arithmetic that gives the same polynomial gives the same proxy (``(n * 4) // 4`` is
    n, ``n - (n - 1)`` is 1), so shapes computed two ways compare equal; and layouts are
    computed on stand-in values of the bases (``primtrace.ir.strides``)."""
    __slots__ = ("lower", "upper", "expr", "below")

    def __init__(self, name: str, what: str, lower: int = 0, upper: int | None = None,
                 sources: tuple = (), expr=None):
        super().__init__(name, int, Unknown(what), sources)
        self.lower, self.upper = lower, upper
        self.expr = ((((name, 1),), 1),) if expr is None else expr
        self.below = ()   # names of the values it is known to be <= (min(k, n) <= n)


#: stand-in values of the bases of sizes known only at run time, for each of two runs
_PRIMES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71)


def polynomial(x) -> tuple:
    """The polynomial of an int known only at run time (see SizeProxy.expr)."""
    return x.expr if isinstance(x, SizeProxy) else ((((x.name, 1),), 1),)


def bases_of(x) -> list:
    """The names of the sizes a polynomial's value is computed from."""
    return [base for monomial, _ in polynomial(x) for base, _ in monomial]


def evaluate(x, value_of) -> int:
    """The value of `x` (an int, or an int known only at run time) where each base size b
    has the value value_of(b)."""
    if not isinstance(x, NumberProxy):
        return x
    total = 0
    for monomial, coef in polynomial(x):
        term = coef
        for base, power in monomial:
            term *= value_of(base) ** power
        total += term
    return total


def stand_in(x, run: int, bases: dict):
    """The value `x` (an int, or a size known only at run time) takes in stand-in run 0 or 1:
    each base size gets a distinct prime (`bases`: base name -> its index, shared by the
    values of one computation). Stand-ins are >= 2: a dim that may hold several elements."""
    def value_of(base):
        i = bases.setdefault(base, len(bases))
        return _PRIMES[(2 * i + run) % len(_PRIMES)]
    return evaluate(x, value_of)


def is_symbolic(x) -> bool:
    """Whether `x` is an int known only at run time (a size, or arithmetic on sizes)."""
    return isinstance(x, NumberProxy) and isinstance(x.value, Unknown) and x.python_type is int


def has_symbolic(shape) -> bool:
    """Whether a shape (or strides) holds an int known only at run time."""
    return any(isinstance(n, NumberProxy) for n in shape)


def symbolic_tensor(x) -> bool:
    """Whether `x` is a traced tensor whose shape holds a size known only at run time."""
    return isinstance(x, TensorProxy) and isinstance(x._shape, SymbolicShape)


def needs_value(size, why: str):
    """Raise the tracer's DataDependentError: `why` needs the value of `size`, an int known
    only when the trace runs (a data-dependent size)."""
    what = f"{size.value.what}, {why}" if isinstance(size, NumberProxy) and isinstance(
        size.value, Unknown) else why
    if _unknown_read is not None:
        _unknown_read(Unknown(what))
    raise RuntimeError(f"{what}: known only when the trace runs")


class SymbolicShape(tuple):
    """A traced tensor's shape that holds a size known only at run time (torch.Size takes
    ints only): a tuple, with torch.Size's ``numel``."""
    __slots__ = ()

    def numel(self):
        return math.prod(self)

    def __repr__(self):
        return f"torch.Size({list(self)})"

    # torch.Size's slices, sums and repeats are torch.Size: these stay shapes
    def __getitem__(self, i):
        got = tuple.__getitem__(self, i)
        return SymbolicShape(got) if isinstance(i, slice) else got

    def __add__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return SymbolicShape(tuple.__add__(self, other))

    def __radd__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return SymbolicShape(tuple.__add__(other, self))

    def __mul__(self, n):
        return SymbolicShape(tuple.__mul__(self, n))

    __rmul__ = __mul__


def _stand_in_shape(shape) -> tuple:
    """The shape of a proxy's storage: a size known only at run time stands as 0 (no Python
    code reads it; torch calls on the proxy reach the tracer, which reads `_shape`)."""
    return tuple(0 if isinstance(n, NumberProxy) else n for n in shape)


class TensorProxy(Proxy, torch.Tensor):
    """A symbolic tensor: shape, dtype, device, strides, requires_grad.

    It is a ``torch.Tensor`` subclass so that library code sees a tensor:
    ``isinstance(x, torch.Tensor)``, ``torch.is_tensor(x)`` and unbound calls such as
    ``torch.Tensor.cfloat(x)`` behave as on real tensors. Its storage is an empty ``meta``
    tensor with the same sizes and strides; metadata is answered here in Python, and every
    other torch call reaches the tracer through ``__torch_function__``.
    """

    @staticmethod
    def __new__(cls, name: str, spec: TensorSpec, requires_grad: bool = False):
        symbolic = has_symbolic(spec.shape)
        unbacked = [s for s in spec.strides if isinstance(s, NumberProxy)
                    and not isinstance(s.value, Hint)]
        if unbacked:   # (a symbolic input dim's strides are polynomials of hinted sizes)
            stride = unbacked[0]
            if _unknown_read is not None:   # the tracer raises its DataDependentError
                _unknown_read(Unknown(f"{stride.name}, a stride of a tensor of shape "
                                      f"{list(spec.shape)} (primtrace keeps strides "
                                      f"concrete: a size known only at run time must be the "
                                      f"outermost dim of the layout)"))
            raise RuntimeError(f"a stride of {name} depends on a size known only at run time")
        with _no_torch_function():  # the tracer's mode must not see this allocation
            storage = torch.empty_strided(_stand_in_shape(spec.shape) if symbolic
                                          else tuple(spec.shape), _stand_in_shape(spec.strides),
                                          dtype=spec.dtype, device="meta")
            self = torch.Tensor._make_subclass(cls, storage, False)
        d = self.__dict__
        d["_name"], d["_dtype"] = name, spec.dtype
        d["_shape"] = SymbolicShape(spec.shape) if symbolic else torch.Size(spec.shape)
        d["_device"], d["_strides"], d["_requires_grad"] = spec.device, tuple(spec.strides), requires_grad
        return self

    def __init__(self, *args, **kwargs):
        pass

    # --- metadata, answered without dispatch -------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def shape(self) -> torch.Size:
        return self._shape

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self.__dict__["_requires_grad"] = bool(value)

    @property
    def spec(self) -> TensorSpec:
        return TensorSpec(tuple(self._shape), self._dtype, self._device, self._strides)

    @property
    def ndim(self) -> int:
        return len(self._shape)

    def dim(self) -> int:
        return len(self._shape)

    def size(self, dim=None):
        return self._shape if dim is None else self._shape[dim]

    def stride(self, dim=None):
        if layout_readers is not None:
            _note_layout_read()
        return self._strides if dim is None else self._strides[dim]

    def storage_offset(self) -> int:
        return 0

    def numel(self) -> int:
        return math.prod(self._shape)

    def nelement(self) -> int:
        return self.numel()

    def element_size(self) -> int:
        return self._dtype.itemsize

    @property
    def itemsize(self) -> int:
        return self._dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.numel() * self._dtype.itemsize

    def is_contiguous(self, memory_format=torch.contiguous_format) -> bool:
        if layout_readers is not None:
            _note_layout_read()
        if memory_format is torch.channels_last and self.ndim == 4:
            return matches_dense(self._shape, self._strides, dense_strides(self._shape, (0, 2, 3, 1)))
        return matches_dense(self._shape, self._strides, dense_strides(self._shape))

    def is_floating_point(self) -> bool:
        return self._dtype.is_floating_point

    def is_complex(self) -> bool:
        return self._dtype.is_complex

    def get_device(self) -> int:
        return -1 if self._device.type == "cpu" else (self._device.index or 0)

    @property
    def is_cuda(self) -> bool:
        return self._device.type == "cuda"

    @property
    def is_cpu(self) -> bool:
        return self._device.type == "cpu"

    @property
    def is_meta(self) -> bool:
        return self._device.type == "meta"

    is_sparse = is_quantized = is_mkldnn = is_nested = False
    grad_fn = None

    @property
    def grad(self):
        """An input's ``.grad`` is state the tracer reads (None for computed values)."""
        return _dispatch(torch.Tensor.grad.__get__, (self,), {})

    @grad.setter
    def grad(self, value):
        raise RuntimeError(f"assigning {self._name}.grad inside a traced function is a Python "
                           f"side effect primtrace does not replay: do it outside")

    @property
    def is_leaf(self) -> bool:
        """As eager: a value that requires grad is a leaf only when it is an input that was
        one (the tracer marks inputs with `_leaf`)."""
        return self.__dict__.get("_leaf", not self._requires_grad)

    @property
    def layout(self):
        return torch.strided

    def __len__(self):
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __repr__(self):
        return f'{self._name}: "{self._device.type} {dtypes.short_name(self._dtype)}{list(self._shape)}"'

    __str__ = __repr__

    def __format__(self, spec):
        return repr(self)

    def __hash__(self):
        return id(self)

    def __reduce_ex__(self, protocol):
        raise TypeError(f"a primtrace proxy ({self._name}) cannot be pickled or deep-copied")

    # --- sizes torch's argument parser would read (__index__) before the tracer sees them:
    # a symbolic input dim (x.view(B, -1) with B = x.shape[0]) reaches the tracer as itself
    def view(self, *args, **kwargs):
        return _overridden(torch.Tensor.view, self, args, kwargs)

    def reshape(self, *args, **kwargs):
        return _overridden(torch.Tensor.reshape, self, args, kwargs)

    def expand(self, *args, **kwargs):
        return _overridden(torch.Tensor.expand, self, args, kwargs)

    def new_zeros(self, *args, **kwargs):
        return _overridden(torch.Tensor.new_zeros, self, args, kwargs)

    def new_ones(self, *args, **kwargs):
        return _overridden(torch.Tensor.new_ones, self, args, kwargs)

    def new_empty(self, *args, **kwargs):
        return _overridden(torch.Tensor.new_empty, self, args, kwargs)

    def new_full(self, *args, **kwargs):
        return _overridden(torch.Tensor.new_full, self, args, kwargs)

    # --- everything else is a torch call, handed to the tracer ---------------------------
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return _dispatch(func, args, kwargs)


def _overridden(method, self, args, kwargs):
    """``method(self, *args, **kwargs)`` through torch's function overrides (the tracer's
    mode, else the proxy's __torch_function__), its arguments not parsed into ints first."""
    return torch.overrides.handle_torch_function(method, (self,), self, *args, **kwargs)


def is_real_tensor(x) -> bool:
    """A torch.Tensor holding data (not a proxy)."""
    return isinstance(x, torch.Tensor) and not isinstance(x, TensorProxy)
