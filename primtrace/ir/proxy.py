"""Proxies: the symbolic values a trace talks about.

A ``TensorProxy`` carries what a meta function needs (shape, dtype, device, strides) and
behaves enough like a ``torch.Tensor`` that plain PyTorch code runs on it: ``torch.*``
calls reach it through ``__torch_function__``, operators and methods through the
dispatcher that the tracer installs with :func:`set_dispatcher`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from primtrace import dtypes

# The tracer installs the function that turns a torch-level call on proxies into refs.
_dispatcher: Callable | None = None


def set_dispatcher(fn: Callable) -> None:
    global _dispatcher
    _dispatcher = fn


def _dispatch(func, args, kwargs=None):
    if _dispatcher is None:
        raise RuntimeError(f"{func} called on a proxy outside of primtrace tracing")
    return _dispatcher(func, args, kwargs or {})


def contiguous_strides(shape) -> tuple[int, ...]:
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= max(size, 1)
    return tuple(reversed(strides))


@dataclass(frozen=True)
class NumberSpec:
    """Metadata of a Python number computed in a trace: its type, and its trace-time value."""
    python_type: type
    value: object = None
    sources: tuple = ()


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


class Proxy:
    """A named symbolic value."""
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self):
        return self.name


class NumberProxy(Proxy):
    """A Python number that is a runtime input: its type is fixed, its value is not.

    The trace-time value is kept so that user code which *reads* it (control flow,
    shapes) can do so; reading it marks the proxy as specialized, which puts the value
    into the cache key.
    """
    __slots__ = ("python_type", "value", "specialized", "sources")

    def __init__(self, name: str, python_type: type, value=None, sources: tuple = ()):
        super().__init__(name)
        self.python_type = python_type
        self.value = value
        self.specialized = False
        self.sources = sources  # the number proxies this one was computed from

    def _read(self):
        """The trace-time value; reading it specializes this number and its sources."""
        self.specialized = True
        for source in self.sources:
            source._read()
        return self.value

    def __bool__(self):
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


class TensorProxy(Proxy):
    """A symbolic tensor: shape, dtype, device, strides, requires_grad."""
    __slots__ = ("shape", "dtype", "device", "_strides", "requires_grad")

    def __init__(self, name: str, spec: TensorSpec, requires_grad: bool = False):
        super().__init__(name)
        self.shape = torch.Size(spec.shape)
        self.dtype = spec.dtype
        self.device = spec.device
        self._strides = tuple(spec.strides)
        self.requires_grad = requires_grad

    # --- metadata, answered without dispatch -------------------------------------------
    @property
    def spec(self) -> TensorSpec:
        return TensorSpec(tuple(self.shape), self.dtype, self.device, self._strides)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self) -> int:
        return len(self.shape)

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def stride(self, dim=None):
        return self._strides if dim is None else self._strides[dim]

    def numel(self) -> int:
        return math.prod(self.shape)

    def nelement(self) -> int:
        return self.numel()

    def element_size(self) -> int:
        return self.dtype.itemsize

    def is_contiguous(self, memory_format=torch.contiguous_format) -> bool:
        if memory_format is torch.channels_last and self.ndim == 4:
            n, c, h, w = self.shape
            return self._strides == _permuted_strides(self.shape, (0, 2, 3, 1))
        return _is_dense_like(self.shape, self._strides, contiguous_strides(self.shape))

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def is_complex(self) -> bool:
        return self.dtype.is_complex

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def layout(self):
        return torch.strided

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self):
        return f'{self.name}: "{self.device.type} {dtypes.short_name(self.dtype)}{list(self.shape)}"'

    def __hash__(self):
        return id(self)

    # --- everything else is a torch call, handed to the tracer ---------------------------
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return _dispatch(func, args, kwargs)

    def __getattr__(self, name):
        attr = getattr(torch.Tensor, name, None)
        if attr is None:
            raise AttributeError(f"'TensorProxy' object has no attribute '{name}'")
        if callable(attr):
            return lambda *args, **kwargs: _dispatch(attr, (self, *args), kwargs)
        # a property of Tensor, such as .T, .mT, .real, .imag
        return _dispatch(attr.__get__, (self,), {})

    def __setitem__(self, key, value):
        _dispatch(torch.Tensor.__setitem__, (self, key, value), {})

    def __bool__(self):
        return _dispatch(torch.Tensor.__bool__, (self,), {})

    def __float__(self):
        return _dispatch(torch.Tensor.__float__, (self,), {})

    def __int__(self):
        return _dispatch(torch.Tensor.__int__, (self,), {})

    def __index__(self):
        return _dispatch(torch.Tensor.__index__, (self,), {})

    def __iter__(self):
        return _dispatch(torch.Tensor.__iter__, (self,), {})


def _permuted_strides(shape, order):
    """Dense strides for `shape` laid out in memory in dimension order `order` (outer first)."""
    strides, acc = [0] * len(shape), 1
    for d in reversed(order):
        strides[d] = acc
        acc *= max(shape[d], 1)
    return tuple(strides)


def _is_dense_like(shape, strides, expected) -> bool:
    return all(size <= 1 or s == e for size, s, e in zip(shape, strides, expected))


# Operators on tensor proxies: each is the torch.Tensor dunder, dispatched.
_OPERATORS = (
    "add radd sub rsub mul rmul truediv rtruediv floordiv rfloordiv mod rmod pow rpow "
    "matmul rmatmul and rand or ror xor rxor lshift rlshift rshift rrshift "
    "iadd isub imul itruediv ifloordiv imod ipow iand ior ixor ilshift irshift "
    "eq ne lt le gt ge neg pos abs invert getitem"
).split()


def _make_operator(name):
    dunder = f"__{name}__"
    func = getattr(torch.Tensor, dunder)

    def op(self, *args):
        return _dispatch(func, (self, *args), {})
    op.__name__ = dunder
    return op


for _name in _OPERATORS:
    setattr(TensorProxy, f"__{_name}__", _make_operator(_name))
