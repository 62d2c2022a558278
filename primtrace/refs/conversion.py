"""Conversion refs: Tensor.to, type_as, the dtype methods (x.float(), x.half(), ...), clone
and contiguous.

A dtype change is ``prims.convert_element_type``, which keeps the input's memory order
(eager's preserve_format). When nothing would change eager returns the input itself, not a
copy, and so do these refs: ``x.to(x.dtype) is x``, ``x.float() is x`` for a float32 x. A
copy in another memory format is a new tensor of that layout written with
``prims.copy_to``, which is how eager makes it.

Device changes are declined (``@ref(declines=...)``): the tracer leaves them to torch as opaque
nodes.

The dtype methods are named ``float``, ``int``, ``bool``...: they are made from a table at
the end of the module, and the code above uses ``builtins.`` for the Python types.
"""
from __future__ import annotations

import builtins

import torch

from primtrace import dtypes, prims
from primtrace.refs.core import exports, is_tensor, maybe_convert, ref
from primtrace.ir.strides import dense_strides
from primtrace.refs.creation import (CHANNELS_LAST_ORDERS, PYTHON_DTYPES, as_dtype, format_strides,
                                     new_in_format)

#: Tensor method -> the dtype it converts to (x.float() is x.to(torch.float32))
DTYPE_METHODS = {
    "float": torch.float32, "double": torch.float64, "half": torch.float16,
    "bfloat16": torch.bfloat16, "int": torch.int32, "long": torch.int64, "short": torch.int16,
    "char": torch.int8, "byte": torch.uint8, "bool": torch.bool, "chalf": torch.complex32,
    "cfloat": torch.complex64, "cdouble": torch.complex128,
}


# --- layouts ------------------------------------------------------------------------------------
def is_laid_out(t, memory_format) -> builtins.bool:
    """t.is_contiguous(memory_format=...): dense in that format's dimension order (the
    strides of size-1 dimensions do not matter)."""
    order = (tuple(range(t.ndim)) if memory_format is torch.contiguous_format
             else CHANNELS_LAST_ORDERS.get(memory_format))
    if order is None or len(order) != t.ndim:
        return False
    expected = dense_strides(tuple(t.shape), order)
    return all(s == e or n <= 1 for n, s, e in zip(t.shape, t.stride(), expected))


def suggest_memory_format(t):
    """Eager's Tensor.suggest_memory_format(): channels_last(_3d) for a tensor laid out so,
    contiguous_format for everything else (a transposed matrix included)."""
    for memory_format in CHANNELS_LAST_ORDERS:
        if is_laid_out(t, memory_format) and not is_laid_out(t, torch.contiguous_format):
            return memory_format
    return torch.contiguous_format


def copy_as(input, dtype, memory_format):
    """A new tensor holding input's values as `dtype`. preserve_format keeps input's memory
    order (its exact strides when it is dense); another format makes a tensor with that
    format's exact strides (those of size-1 dims too, as eager's empty_like) and copies input
    into it."""
    if memory_format is torch.preserve_format or \
            tuple(input.stride()) == format_strides(tuple(input.shape), memory_format):
        return (prims.convert_element_type(input, dtype) if input.dtype != dtype
                else prims.clone(input))
    new = new_in_format(tuple(input.shape), memory_format, dtypes.python_type(dtype)(0), dtype,
                        input.device)
    return prims.copy_to(new, maybe_convert(input, dtype))


def allocated_as_eager(result, memory_format):
    """`result`, a new tensor, with the exact strides of a new tensor in `memory_format`
    (copied into one where it has others): for refs whose eager kernel allocates its output
    in a fixed format (softmax, layer_norm: contiguous; batch_norm: the input's suggested
    one) rather than by TensorIterator's rules, which the elementwise prims follow."""
    shape = tuple(result.shape)
    if tuple(result.stride()) == format_strides(shape, memory_format):
        return result
    new = new_in_format(shape, memory_format, dtypes.python_type(result.dtype)(0), result.dtype,
                        result.device)
    return prims.copy_to(new, result)


def _require_tensor(name, x, argument="input"):
    if not is_tensor(x):
        raise TypeError(f"{name}(): argument '{argument}' (position 1) must be Tensor, not "
                        f"{type(x).__name__}")


# --- Tensor.to ----------------------------------------------------------------------------------
def _to_dtype(dtype, non_blocking=False, copy=False):
    return None, dtype, copy


def _to_device(device=None, dtype=None, non_blocking=False, copy=False):
    return device, dtype, copy


def _to_other(other, non_blocking=False, copy=False):
    return other.device, other.dtype, copy


def to_arguments(args, kwargs):
    """(device, dtype, copy, memory_format) from Tensor.to's three overloads:
    to(dtype, ...), to(device=None, dtype=None, ...) and to(other, ...)."""
    kwargs = dict(kwargs)
    memory_format = kwargs.pop("memory_format", None) or torch.preserve_format
    first = args[0] if args else None
    is_dtype = isinstance(first, torch.dtype) or (isinstance(first, type) and first in PYTHON_DTYPES)
    overload = _to_dtype if is_dtype else _to_other if is_tensor(first) else _to_device
    try:
        device, dtype, copy = overload(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"to() received an invalid combination of arguments: {e}") from None
    dtype = as_dtype("to", dtype)
    if device is not None and not isinstance(device, (str, torch.device)):
        raise NotImplementedError(f"primtrace: to({device!r}) has no ref; torch handles it")
    return None if device is None else torch.device(device), dtype, copy, memory_format


def _same_device(device, input) -> builtins.bool:
    return device is None or (device.type == input.device.type
                              and device.index in (None, input.device.index))


def _to_declines(input, *args, **kwargs) -> builtins.bool:
    try:
        device = to_arguments(args, kwargs)[0]
    except NotImplementedError:
        return True
    except TypeError:
        return False  # the ref raises eager's error
    return not _same_device(device, input)


@ref(declines=_to_declines)
def to(input, *args, **kwargs):
    """Tensor.to(dtype), to(device, dtype), to(other): a converted copy, or input itself when
    dtype, device and (unless preserve_format) memory format already match and copy=False."""
    _require_tensor("to", input, "self")
    device, dtype, copy, memory_format = to_arguments(args, kwargs)
    if not _same_device(device, input):
        raise NotImplementedError("primtrace: a device change has no ref; torch makes it")
    dtype = dtype or input.dtype
    if dtype == input.dtype and not copy and (memory_format is torch.preserve_format
                                              or suggest_memory_format(input) is memory_format):
        return input
    return copy_as(input, dtype, memory_format)


def _type_as_declines(input, other) -> builtins.bool:
    return is_tensor(input) and is_tensor(other) and other.device != input.device


@ref(declines=_type_as_declines)
def type_as(input, other):
    """input.to(other.dtype), on input's device (other's device change is declined)."""
    _require_tensor("type_as", input, "self")
    _require_tensor("type_as", other, "other")
    if other.device != input.device:
        raise NotImplementedError("primtrace: type_as across devices has no ref; torch makes it")
    return to(input, other.dtype)


# --- clone, contiguous --------------------------------------------------------------------------
@ref
def clone(input, *, memory_format=torch.preserve_format):
    """A copy: same dtype, same strides for a dense input (preserve_format), row-major with
    contiguous_format."""
    _require_tensor("clone", input)
    return copy_as(input, input.dtype, memory_format)


@ref
def contiguous(input, memory_format=torch.contiguous_format):
    """input itself if it is laid out in `memory_format` already, else a copy that is."""
    _require_tensor("contiguous", input, "self")
    if is_laid_out(input, memory_format):
        return input
    return copy_as(input, input.dtype, memory_format)


# --- x.float(), x.half(), ...: a table (these names shadow builtins from here on) ---------------
def _dtype_method(name, dtype):
    def method(input, memory_format=torch.preserve_format):
        return to(input, dtype, memory_format=memory_format)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Tensor.{name}(): input.to({dtype}) (input itself if already {dtype})."
    return ref(method)


globals().update({name: _dtype_method(name, dtype) for name, dtype in DTYPE_METHODS.items()})

__all__ = exports(globals())
