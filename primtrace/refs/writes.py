"""Writes into an existing tensor: Tensor.copy_, fill_ and zero_; and torch.fill, which is
fill_ on a new tensor laid out like its input.

Each converts a value to self's dtype, broadcasts it to self's shape and writes it with one
``prims.copy_to``. Traced, the write is a node like any other: the Numba executor fuses it
into the kernel that computes the value, so ``m.copy_(beta1 * m + (1 - beta1) * g)`` is one
loop that stores into m.

What eager checks differs between them. copy_ runs a TensorIterator: self may not overlap
itself (an expanded self) nor partially overlap the source, and the source must broadcast
to self's shape. fill_ with a number checks only that the number converts to self's dtype
without overflow, and writes even an expanded self; fill_ with a 0-dim tensor is copy_.
"""
from __future__ import annotations

import warnings

import torch

from primtrace import prims
from primtrace.ir.proxy import TensorProxy, is_real_tensor
from primtrace.ir.trace import current_trace
from primtrace.refs.core import (broadcast, broadcast_shapes, exports, is_number, is_tensor,
                                 maybe_convert, ref)
from primtrace.refs.creation import PYTHON_DTYPES, as_nodes, filled, like
from primtrace.refs.out import check_overlap

COMPLEX_TO_REAL = "Casting complex values to real discards the imaginary part"


def _require_self(name, self):
    if not is_tensor(self):
        raise TypeError(f"descriptor '{name}' for 'torch._C.TensorBase' objects doesn't apply to "
                        f"a '{type(self).__name__}' object")


def cast_like_copy(value, dtype):
    """`value` in `dtype` as eager's copy kernel casts it: complex to real keeps the real part
    (and warns, as eager does), complex to bool is z != 0; the rest is convert_element_type."""
    if value.dtype.is_complex and not dtype.is_complex:
        warnings.warn(COMPLEX_TO_REAL, UserWarning, stacklevel=4)
        if dtype is torch.bool:
            return prims.ne(value, 0)
        value = prims.real(value)
    return maybe_convert(value, dtype)


def _wrapped_number(value, device):
    """A Python number as eager's argument parser wraps it for a Tensor parameter: a 0-dim
    bool, int64, float64 or complex128 tensor (then cast without an overflow check)."""
    python_type = getattr(value, "python_type", type(value))
    if python_type is int and not hasattr(value, "python_type") and not -2**63 <= value < 2**63:
        raise OverflowError("int too big to convert")
    with as_nodes():
        return prims.full((), value, dtype=PYTHON_DTYPES[python_type], device=device)


def _same_data(self, other) -> bool:
    """Eager's early exit: other is self, or a view of exactly the same elements (traced:
    views of one tensor at the same offset, ``x[None][0:1] = x`` of an expanded x)."""
    if other is self:
        return True
    if not (is_tensor(self) and is_tensor(other) and self.dtype == other.dtype
            and self.shape == other.shape and self.stride() == other.stride()):
        return False
    if isinstance(self, TensorProxy) and isinstance(other, TensorProxy):
        trace = current_trace()
        if trace is None:
            return False
        producers = {p.name: n for n in trace.recorded_leaves() for p in n.output_proxies}
        return _memory_position(self, producers) == _memory_position(other, producers)
    return (is_real_tensor(self) and is_real_tensor(other)
            and self.data_ptr() == other.data_ptr() and self.is_conj() == other.is_conj()
            and self.is_neg() == other.is_neg())


#: view prims whose result starts where their input does
_SAME_START = frozenset({"reshape_view", "permute", "squeeze", "unsqueeze", "expand",
                         "broadcast_in_dim", "unfold", "aliased", "copy_to"})


def _memory_position(p, producers) -> tuple:
    """(the name of the tensor whose memory `p` is, p's first element's byte offset in it),
    through the view prims (and writes, whose result is their destination) that made p."""
    offset = 0
    while (node := producers.get(p.name)) is not None and node.args \
            and isinstance(node.args[0], TensorProxy):
        a, name = node.args[0], node.symbol.name
        if name == "slice":
            offset += sum(b * s for b, s in zip(node.args[1], a.stride())) * a.element_size()
        elif name == "diagonal":
            at, dim1, dim2 = node.args[1:4]
            offset += (at * a.stride()[dim2] if at >= 0 else -at * a.stride()[dim1]) * a.element_size()
        elif name not in _SAME_START:
            break
        p = a
    return p.name, offset


def _across_devices(self, other) -> bool:
    """A transfer between devices (a 0-dim CPU source is a scalar, as for every prim)."""
    return other.device != self.device and not (other.ndim == 0 and other.device.type == "cpu")


def _copy_declines(self, other, non_blocking=False) -> bool:
    return is_tensor(self) and is_tensor(other) and _across_devices(self, other)


@ref(declines=_copy_declines)
def copy_(self, other, non_blocking=False):
    """Write `other` into self, cast to self's dtype (any pair of dtypes) and broadcast to
    self's shape; returns self. A Python number is a wrapped scalar (cast without an overflow
    check: copy_(300) into uint8 is 44). non_blocking is accepted: nothing here is
    asynchronous. (Eager's parser names the source `other`, not `src`.)"""
    _require_self("copy_", self)
    if is_number(other):
        other = _wrapped_number(other, self.device)
    elif not is_tensor(other):
        raise TypeError(f"copy_(): argument 'other' (position 1) must be Tensor, not "
                        f"{type(other).__name__}")
    if _across_devices(self, other):
        raise NotImplementedError("primtrace: copy_ across devices has no ref; torch makes it")
    if _same_data(self, other):
        return self
    check_overlap(self, (other,))
    shape = broadcast_shapes(tuple(self.shape), tuple(other.shape))
    if shape != tuple(self.shape):
        raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast "
                           f"shape {list(shape)}")
    return prims.copy_to(self, broadcast(cast_like_copy(other, self.dtype), shape))


def _fill_value(name, value):
    """fill_'s value: a number, or a 0-dim tensor."""
    if is_tensor(value):
        if value.ndim != 0:
            raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with "
                               f"{value.ndim} dimensions.")
    elif not is_number(value):
        raise TypeError(f"{name}() received an invalid combination of arguments - got "
                        f"({type(value).__name__}), but expected one of:\n * (Tensor value)\n"
                        f" * (Number value)\n")


def _aliases(a, b) -> bool:
    return (is_real_tensor(a) and is_real_tensor(b)
            and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())


def _fill_declines(self, value) -> bool:
    return is_tensor(self) and is_tensor(value) and _across_devices(self, value)


@ref(declines=_fill_declines)
def fill_(self, value):
    """Set every element of self to `value`; returns self. A number must convert to self's
    dtype without overflow (300 into uint8 is an error, 2.7 into int32 is 2); a 0-dim tensor
    is copied as copy_ copies it (a view of self is cloned first, as eager does)."""
    _require_self("fill_", self)
    _fill_value("fill_", value)
    if is_tensor(value):
        return copy_(self, prims.clone(value) if _aliases(self, value) else value)
    return prims.copy_to(self, filled((), value, self.dtype, self.device))


@ref
def zero_(self):
    """Set every element of self to 0; returns self."""
    _require_self("zero_", self)
    return prims.copy_to(self, filled((), 0, self.dtype, self.device))


@ref
def fill(input, value):
    """torch.fill: a new tensor with input's shape, dtype and memory order (eager's
    empty_like), every element `value` as fill_ writes it."""
    if not is_tensor(input):
        raise TypeError(f"fill(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    _fill_value("fill", value)
    if is_tensor(value):
        new = like("fill", input, 0, None, None)
        filled = prims.copy_to(new, cast_like_copy(value, input.dtype))
    else:
        filled = like("fill", input, value, None, None)
    if not (input.dtype.is_floating_point or input.dtype.is_complex):
        return filled
    # eager's result requires grad as input does (its gradient is zeros): the values are
    # chosen from input's, every one the filled value
    everywhere = prims.full(tuple(input.shape), True, dtype=torch.bool, device=input.device)
    return prims.where(everywhere, filled, input)


__all__ = exports(globals())
