"""Creation refs: full, zeros, ones, empty, their *_like and Tensor.new_* forms,
scalar_tensor, tensor (of Python numbers) and arange.

A new tensor is one prim: ``prims.full`` (contiguous), ``prims.full_like`` (the memory
order of another tensor: eager's ``preserve_format``) or ``prims.full_strided``
(channels_last); arange is ``prims.iota`` scaled in eager's accumulation dtype. What the refs
spell out is eager's dtype inference, its size parsing and its checks. A fill value that is
a runtime number while tracing stays one: its overflow check is a guard node
(``prims.check_fits``), not a read of its value.

What a trace cannot express is declined (``@ref(declines=...)``): the tracer then leaves the call
to torch as an opaque node. That is ``requires_grad=True`` (an autograd leaf), pinned
memory, non-strided layouts and another device than the input's. linspace, logspace, eye
and the other range factories are in refs/ranges.py.
"""
from __future__ import annotations

import contextlib
import math
import operator
import warnings

import torch

from primtrace import dtypes, prims
from primtrace.ir.size_guards import hinted
from primtrace.ir.strides import contiguous_strides, dense_strides
from primtrace.ir.trace import current_trace
from primtrace.refs.core import exports, is_number, is_tensor, maybe_convert, ref

#: the value each factory fills with (empty's values are undefined: zeros are as good as any)
FILLS = {"zeros": 0, "ones": 1, "empty": 0}


# --- arguments shared by the factories ---------------------------------------------------------
def _python_type(x) -> type:
    return getattr(x, "python_type", type(x))


def _dim(name, s) -> int:
    t = _python_type(s)
    if issubclass(t, (bool, float, complex)) or not hasattr(s, "__index__"):
        raise TypeError(f"{name}(): argument 'size' must be tuple of ints, but found element "
                        f"of type {t.__name__}")
    if hinted(s):   # a symbolic input dim (or arithmetic on one): the new tensor's too
        return s
    return operator.index(s)  # a runtime int is read here: the shape is part of the trace


def check_fits(value, dtype):
    """Eager's checked conversion of a number to `dtype` ("value cannot be converted to type
    uint8_t without overflow"): now for a Python number, by a guard node for a runtime one."""
    if hasattr(value, "python_type"):
        prims.check_fits(value, dtype)
    else:
        prims.check_fits.impl(value, dtype)


def shape_of(name: str, size: tuple, *, varargs: bool = True) -> tuple:
    """The shape from torch's size arguments: ints as varargs or one sequence of ints."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):  # torch.Size is a tuple
        size = size[0]
    elif not varargs:
        raise TypeError(f"{name}(): argument 'size' (position 1) must be tuple of ints, not "
                        f"{_python_type(size[0]).__name__ if size else 'None'}")
    shape = tuple(_dim(name, s) for s in size)
    for s in shape:
        if s < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {s}: {list(shape)}")
    return shape


def _varargs_size(name, sizes, size):
    """zeros(2, 3), zeros((2, 3)) and zeros(size=(2, 3)) are the same call."""
    if size is not None:
        if sizes:
            raise TypeError(f"{name}() got multiple values for argument 'size'")
        sizes = (size,)
    if not sizes:
        raise TypeError(f'{name}() missing 1 required positional arguments: "size"')
    return shape_of(name, sizes)


def fill_dtype(value) -> torch.dtype:
    """The dtype torch.full infers from a fill value: bool, int64, or the default (complex)
    float dtype; a 0-dim tensor counts by its category, as the number it holds would."""
    category = (dtypes.category(value.dtype) if is_tensor(value)
                else dtypes.number_category(_python_type(value)))
    return (torch.bool, torch.int64, dtypes.default_float(), dtypes.default_complex())[category]


def _untraceable(layout=None, pin_memory=False, requires_grad=False, **_):
    """Why a call makes something no prim makes (None if it does not): the tracer then
    leaves the call to torch."""
    if layout is not None and layout is not torch.strided:
        return f"layout={layout}"
    if pin_memory:
        return "pin_memory=True"
    if requires_grad:
        return "requires_grad=True (an autograd leaf)"
    return None


def _declines(*args, **kwargs) -> bool:
    return _untraceable(**kwargs) is not None


#: dtype=float and friends: eager reads a Python type as the dtype of its values
PYTHON_DTYPES = {bool: torch.bool, int: torch.int64, float: torch.float64, complex: torch.complex128}


def as_dtype(name, dtype):
    """dtype= as eager reads it: None, a torch.dtype or a Python number type."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, type) and dtype in PYTHON_DTYPES:
        return PYTHON_DTYPES[dtype]
    raise TypeError(f"{name}(): argument 'dtype' must be torch.dtype, not {type(dtype).__name__}")


def check_options(name, dtype=None, **options):
    """The dtype (normalized), after refusing what no prim makes."""
    reason = _untraceable(**options)
    if reason is not None:
        raise NotImplementedError(f"primtrace: {name} with {reason} has no ref; torch makes it")
    return as_dtype(name, dtype)


def device_of(device) -> torch.device:
    return torch.get_default_device() if device is None else torch.device(device)


def _check_out_dtype(dtype, out):
    if dtype is not None and dtype != out.dtype:
        raise RuntimeError(f"dtype {dtypes.scalar_type_name(dtype)} does not match dtype of out "
                           f"parameter ({dtypes.scalar_type_name(out.dtype)})")


#: the dimension order (outermost first) of the channels-last memory formats
CHANNELS_LAST_ORDERS = {torch.channels_last: (0, 2, 3, 1), torch.channels_last_3d: (0, 2, 3, 4, 1)}


def format_strides(shape, memory_format) -> tuple:
    """The strides of a new tensor of `shape` in contiguous_format or channels_last(_3d)."""
    order = CHANNELS_LAST_ORDERS.get(memory_format)
    if order is None:
        return contiguous_strides(shape)
    if len(shape) != len(order):
        raise RuntimeError(f"required rank {len(order)} tensor to use {str(memory_format)[6:]} format")
    return dense_strides(shape, order)


@contextlib.contextmanager
def as_nodes():
    """While tracing, the prims called inside record nodes even without proxy arguments: the
    tensor they make is new on every call, never a trace-time constant that a later in-place
    op would write into."""
    trace = current_trace()
    if trace is None or trace.record_constants:
        yield
        return
    trace.record_constants = True
    try:
        yield
    finally:
        trace.record_constants = False


def filled(shape, value, dtype, device):
    """A new contiguous tensor of `shape` holding `value` (a number or a 0-dim tensor)."""
    if is_tensor(value):
        if value.ndim != 0:
            raise TypeError("full(): argument 'fill_value' (position 2) must be Number, not Tensor")
        # eager reads the number out of the tensor; a trace keeps it a tensor: broadcast, copy
        scalar = maybe_convert(value, dtype)
        return prims.clone(prims.broadcast_in_dim(scalar, tuple(shape), ()))
    if not is_number(value):
        raise TypeError(f"full(): argument 'fill_value' (position 2) must be Number, not "
                        f"{type(value).__name__}")
    check_fits(value, dtype)
    with as_nodes():
        return prims.full(tuple(shape), value, dtype=dtype, device=device)


def _write_out(out, shape, value):
    """out= of full/zeros/ones: out keeps its dtype, takes `shape` (resized silently, as
    eager's full_out does) and its elements are set to `value`."""
    if tuple(out.shape) != tuple(shape):
        out = prims.resize(out, tuple(shape))
    return prims.copy_to(out, filled(shape, value, out.dtype, out.device))


# --- full, zeros, ones, empty -------------------------------------------------------------------
@ref(declines=_declines)
def full(size, fill_value, *, out=None, dtype=None, layout=None, device=None, pin_memory=False,
         requires_grad=False):
    """A new tensor of `size` filled with `fill_value`; without dtype=, the value's Python type
    decides it (True -> bool, 3 -> int64, 2.5 -> the default dtype, 1j -> complex)."""
    dtype = check_options("full", dtype, layout=layout, pin_memory=pin_memory,
                          requires_grad=requires_grad)
    shape = shape_of("full", (size,), varargs=False)
    if out is not None:
        _check_out_dtype(dtype, out)
        return _write_out(out, shape, fill_value)
    return filled(shape, fill_value, dtype or fill_dtype(fill_value), device_of(device))


def _filled_factory(name, value):
    def factory(*sizes, size=None, out=None, dtype=None, layout=None, device=None,
                pin_memory=False, requires_grad=False):
        dtype = check_options(name, dtype, layout=layout, pin_memory=pin_memory,
                              requires_grad=requires_grad)
        shape = _varargs_size(name, sizes, size)
        if out is not None:
            _check_out_dtype(dtype, out)
            if name == "empty":  # eager only resizes out; its values stay (undefined)
                return out if tuple(out.shape) == shape else prims.resize(out, shape)
            return _write_out(out, shape, value)
        return filled(shape, value, dtype or dtypes.default_float(), device_of(device))
    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = (f"torch.{name}(*size): full(size, {value}) in the default dtype"
                       + (" (values undefined in eager)." if name == "empty" else "."))
    return ref(factory, declines=_declines)


zeros, ones, empty = (_filled_factory(name, FILLS[name]) for name in ("zeros", "ones", "empty"))


@ref(declines=_declines)
def scalar_tensor(s, *, dtype=None, layout=None, device=None, pin_memory=None, requires_grad=False):
    """A 0-dim tensor holding `s`, in the default dtype whatever the number's type. A half
    type is filled through float32: only float32's range is checked (7e4 becomes inf)."""
    dtype = check_options("scalar_tensor", dtype, layout=layout, pin_memory=pin_memory,
                          requires_grad=requires_grad) or dtypes.default_float()
    return maybe_convert(filled((), s, dtypes.opmath(dtype), device_of(device)), dtype)


def _python_data(data) -> bool:
    """Whether `data` is Python numbers, in nested lists and tuples (no proxy, no tensor or
    array, whose values could change after tracing)."""
    if isinstance(data, (list, tuple)):
        return all(_python_data(x) for x in data)
    return type(data) in (bool, int, float, complex)


def _tensor_declines(data, *, dtype=None, device=None, requires_grad=False, pin_memory=False,
                     **kwargs) -> bool:
    return kwargs != {} or not _python_data(data) or _declines(requires_grad=requires_grad,
                                                              pin_memory=pin_memory)


@ref(declines=_tensor_declines)
def tensor(data, *, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """A new tensor of Python numbers (a constant of the trace). Eager builds it once while
    tracing (its dtype inference and errors are eager's); every call gets a new copy, as
    eager makes a new tensor each time. Data holding tensors, arrays or traced numbers is
    declined: torch builds it."""
    check_options("tensor", dtype, requires_grad=requires_grad, pin_memory=pin_memory)
    trace = current_trace()
    if trace is not None:
        trace.bypass += 1   # eager's own call, not a node
    try:
        value = torch.tensor(data, dtype=as_dtype("tensor", dtype), device=device)
    finally:
        if trace is not None:
            trace.bypass -= 1
    if value.numel() == 0 or value.ndim == 0:
        return filled(tuple(value.shape), value.item() if value.numel() else 0, value.dtype,
                      value.device)
    with as_nodes():
        return prims.clone(value)


# --- *_like: the shape, dtype, device and memory order of another tensor -----------------------
def like(name, input, value, dtype, memory_format):
    """A new tensor shaped like `input` holding `value`; preserve_format keeps input's memory
    order (a transposed input gives a transposed result), the other formats their own."""
    if not is_tensor(input):
        raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    dtype, shape = dtype or input.dtype, tuple(input.shape)
    if memory_format is None or memory_format is torch.preserve_format:
        if input.is_contiguous():
            return filled(shape, value, dtype, input.device)
        if is_tensor(value):  # its number is data: written into a tensor of input's order
            if value.ndim != 0:
                raise TypeError("full(): argument 'fill_value' (position 2) must be Number, "
                                "not Tensor")
            return prims.copy_to(prims.full_like(input, dtypes.python_type(dtype)(0), dtype=dtype),
                                 prims.broadcast_in_dim(maybe_convert(value, dtype), shape, ()))
        check_fits(value, dtype)
        return prims.full_like(input, value, dtype=dtype)
    return new_in_format(shape, memory_format, value, dtype, input.device)


def new_in_format(shape, memory_format, value, dtype, device):
    """A new tensor of `shape` laid out in contiguous_format or channels_last(_3d)."""
    strides = format_strides(shape, memory_format)
    if strides == contiguous_strides(shape) or is_tensor(value):
        return filled(shape, value, dtype, device)
    check_fits(value, dtype)
    with as_nodes():
        return prims.full_strided(shape, strides, value, dtype=dtype, device=device)


def _check_device(name, input, device):
    if device is not None and is_tensor(input) and torch.device(device) != input.device:
        raise NotImplementedError(f"primtrace: {name} onto another device has no ref; torch makes it")


def _like_declines(input, *args, device=None, **kwargs) -> bool:
    other_device = device is not None and is_tensor(input) and torch.device(device) != input.device
    return other_device or _untraceable(**kwargs) is not None


@ref(declines=_like_declines)
def full_like(input, fill_value, *, dtype=None, layout=None, device=None, pin_memory=False,
              requires_grad=False, memory_format=torch.preserve_format):
    """full with input's shape, dtype (unless dtype=) and memory order; the value converts to
    that dtype (full_like(int_tensor, 2.5) holds 2)."""
    dtype = check_options("full_like", dtype, layout=layout, pin_memory=pin_memory,
                          requires_grad=requires_grad, memory_format=memory_format)
    _check_device("full_like", input, device)
    return like("full_like", input, fill_value, dtype, memory_format)


def _like_factory(name, value):
    def factory(input, *, dtype=None, layout=None, device=None, pin_memory=False,
                requires_grad=False, memory_format=torch.preserve_format):
        dtype = check_options(name, dtype, layout=layout, pin_memory=pin_memory,
                              requires_grad=requires_grad, memory_format=memory_format)
        _check_device(name, input, device)
        return like(name, input, value, dtype, memory_format)
    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = f"full_like(input, {value})."
    return ref(factory, declines=_like_declines)


zeros_like, ones_like, empty_like = (_like_factory(f"{name}_like", FILLS[name])
                                     for name in ("zeros", "ones", "empty"))


# --- Tensor.new_*: self's dtype and device, a new contiguous shape ------------------------------
@ref(declines=_declines)
def new_full(self, size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=False,
             requires_grad=False):
    """Tensor.new_full: full(size, fill_value) with self's dtype and device by default."""
    dtype = check_options("new_full", dtype, layout=layout, pin_memory=pin_memory,
                          requires_grad=requires_grad)
    shape = shape_of("new_full", (size,), varargs=False)
    return filled(shape, fill_value, dtype or self.dtype, device_of(device or self.device))


def _new_factory(name, value):
    def factory(self, *sizes, size=None, dtype=None, layout=None, device=None, pin_memory=False,
                requires_grad=False):
        dtype = check_options(name, dtype, layout=layout, pin_memory=pin_memory,
                              requires_grad=requires_grad)
        shape = _varargs_size(name, sizes, size)
        return filled(shape, value, dtype or self.dtype, device_of(device or self.device))
    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = f"Tensor.{name}(*size): new_full(size, {value})."
    return ref(factory, declines=_declines)


new_zeros, new_ones, new_empty = (_new_factory(f"new_{name}", FILLS[name])
                                  for name in ("zeros", "ones", "empty"))


# --- arange -----------------------------------------------------------------------------------
#: the dtype eager accumulates start + step * i in (at::acc_type on CPU)
def _accumulation_dtype(dtype):
    if dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    return torch.float64 if dtype.is_floating_point else torch.int64


def _as_real(name, x):
    """A number's value for arange (a runtime number is read: the length depends on it)."""
    if is_tensor(x):
        raise NotImplementedError(f"primtrace: {name} with tensor bounds reads their values; "
                                  "torch makes it")
    if not is_number(x):
        raise TypeError(f"{name}(): argument 'end' must be Number, not {type(x).__name__}")
    value = _python_type(x)(x)
    if isinstance(value, complex):
        if value.imag != 0:
            raise RuntimeError("value cannot be converted to type double without overflow")
        value = value.real
    return value


def _to_accumulation(value, acc):
    """Scalar::to<acc>(): a checked conversion (an integer type truncates)."""
    check_fits(value, acc)
    return int(value) if acc is torch.int64 else float(value)


def _wrap64(n: int) -> int:
    return (n + 2**63) % 2**64 - 2**63


def arange_length(start, end, step, dtype) -> int:
    """Eager's element count: in int64 arithmetic for int64 results, ceil((end - start) / step)
    in double for the others, after its checks of the bounds."""
    d_start, d_end, d_step = float(start), float(end), float(step)
    if d_step == 0:
        raise RuntimeError("step must be nonzero")
    if not (math.isfinite(d_start) and math.isfinite(d_end)):
        raise RuntimeError(f"unsupported range: {d_start:g} -> {d_end:g}")
    if not ((d_step > 0 and d_end >= d_start) or (d_step < 0 and d_end <= d_start)):
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    if dtype is torch.int64:
        x_start, x_end, x_step = (_to_accumulation(v, torch.int64) for v in (start, end, step))
        if x_step == 0:
            raise ValueError("step must be nonzero")  # a float step truncated to 0
        sign = (x_step > 0) - (x_step < 0)
        numerator = _wrap64(_wrap64(_wrap64(x_end - x_start) + x_step) - sign)  # C int64
        size = abs(numerator) // abs(x_step) * (1 if (numerator < 0) == (x_step < 0) else -1)
    else:
        quotient = (d_end - d_start) / d_step
        size = math.ceil(quotient) if math.isfinite(quotient) else quotient
    if not 0 <= size <= float(2**63 - 1):
        raise RuntimeError("invalid size, possible overflow?")
    return int(size)


def _symbolic_arange(start, end, device):
    """arange(start, end) over a symbolic size (an input dim, or arithmetic on it): int64
    start, start + 1, ..., its length end - start symbolic too, so the trace serves every
    size (torch.arange(x.shape[0]) in a dynamic trace)."""
    if end < start:   # guarded on the sizes, as eager's check of the bounds
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    values = prims.iota(end - start, start=0, step=1, dtype=torch.int64, device=device)
    return values if type(start) is int and start == 0 else prims.add(values, start)


def _positions(shape, device):
    """Each element's row-major position in `shape`: 0, 1, 2, ... for one dimension."""
    if len(shape) == 1:
        return prims.iota(shape[0], start=0, step=1, dtype=torch.int64, device=device)
    total = prims.full(tuple(shape), 0, dtype=torch.int64, device=device)
    for d, (n, stride) in enumerate(zip(shape, contiguous_strides(shape))):
        axis = prims.iota(n, start=0, step=stride, dtype=torch.int64, device=device)
        total = prims.add(total, prims.broadcast_in_dim(axis, tuple(shape), (d,)))
    return total


@ref(declines=_declines)
def arange(start=None, end=None, step=1, *, out=None, dtype=None, layout=None, device=None,
           pin_memory=False, requires_grad=False):
    """start, start + step, ... below end (above it for a negative step).

    Without dtype=, int64 if every bound is an int (or bool), else the default dtype. The
    values are start + step * i computed in eager's accumulation dtype (int64 for integer
    results, with start and step truncated first; float64 for float32/64; float32 for the
    half types) and rounded once to the result dtype.
    """
    dtype = check_options("arange", dtype, layout=layout, pin_memory=pin_memory,
                          requires_grad=requires_grad)
    if end is None:  # arange(end)
        if start is None:
            raise TypeError("arange() missing 1 required positional argument: 'end'")
        start, end = 0, start
    start = 0 if start is None else start
    if hinted(end) and dtype in (None, torch.int64) and out is None and type(step) is int and \
            step == 1 and (type(start) is int or hinted(start)):
        return _symbolic_arange(start, end, device_of(device))
    start, end, step = (_as_real("arange", x) for x in (start, end, step))
    if out is not None:
        _check_out_dtype(dtype, out)
        dtype = out.dtype
    elif dtype is None:
        integral = all(isinstance(x, int) for x in (start, end, step))  # bool is an int
        dtype = torch.int64 if integral else dtypes.default_float()
    if dtype is torch.bool or dtype.is_complex:
        raise NotImplementedError(f"\"arange_cpu\" not implemented for '{dtypes.scalar_type_name(dtype)}'")
    length = arange_length(start, end, step, dtype)
    acc = _accumulation_dtype(dtype)
    x_start, x_step = _to_accumulation(start, acc), _to_accumulation(step, acc)
    shape, device = (length,), device_of(device)
    if out is not None:
        device = out.device
        if out.numel() != length:
            if out.numel() != 0:
                warnings.warn(
                    f"The number of elements in the out tensor of shape {list(out.shape)} is "
                    f"{out.numel()} which does not match the computed number of elements {length}. "
                    f"Note that this may occur as a result of rounding error. The out tensor will "
                    f"be resized to a tensor of shape ({length},).", UserWarning, stacklevel=3)
            out = prims.resize(out, shape)
        shape = tuple(out.shape)  # a matching out keeps its shape, filled in row-major order
    with as_nodes():
        values = maybe_convert(_positions(shape, device), acc)
        if x_step != 1:
            values = prims.mul(values, x_step)
        if x_start != 0 or (acc.is_floating_point and x_step < 0):  # 0.0 + -0.0 is 0.0
            values = prims.add(values, x_start)
        values = maybe_convert(values, dtype)
    return values if out is None else prims.copy_to(out, values)


__all__ = exports(globals())
