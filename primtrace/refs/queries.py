"""Refs that read tensor values into Python: equal, allclose, item.

Each computes in prims and then reads the one value it answers with, as eager does, with
``prims.item``: on tensors that is the read itself; in a trace it is a number the trace
computes when it runs, so a traced function can return ``t.item()`` or
``torch.equal(a, b)``. Its value is unknown while tracing: Python control flow on it
(``if torch.equal(a, b):``) raises DataDependentError.
"""
from __future__ import annotations

from primtrace import prims
from primtrace.ir.proxy import NumberProxy, Unknown
from primtrace.refs import comparison, reductions
from primtrace.refs.core import exports, is_tensor, ref
from primtrace.refs.scalars import type_name


def _tensors(name, input, other):
    for position, (pname, x) in enumerate((("input", input), ("other", other)), 1):
        if not is_tensor(x):
            raise TypeError(f"{name}(): argument '{pname}' (position {position}) must be Tensor, "
                            f"not {type_name(x)}")


def _read(t, what: str):
    """The Python value of a one-element tensor (a runtime number in a trace)."""
    value = prims.item(t)
    if isinstance(value, NumberProxy):
        value.value = Unknown(what)   # what a read of it names
    return value


@ref
def equal(input, other):
    """Same shape and equal values (after promotion; nan is unequal, -0.0 == 0.0)."""
    _tensors("equal", input, other)
    if input.device != other.device:
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least "
                           f"two devices, {input.device} and {other.device}!")
    if tuple(input.shape) != tuple(other.shape):
        return False
    if input.numel() == 0:
        return True
    return _read(reductions.all(comparison.eq(input, other)), "torch.equal's result")


@ref
def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """isclose(...).all(): one dtype for both, shapes that broadcast, eager's tolerance checks."""
    _tensors("allclose", input, other)
    return _read(reductions.all(comparison.isclose(input, other, rtol, atol, equal_nan)),
                 "torch.allclose's result")


@ref
def item(input):
    """The value of a one-element tensor as a Python bool, int, float or complex."""
    if not is_tensor(input):
        raise TypeError(f"item(): argument 'input' must be Tensor, not {type_name(input)}")
    if input.numel() != 1:
        raise RuntimeError(f"a Tensor with {input.numel()} elements cannot be converted to Scalar")
    return _read(input, "tensor.item()")


__all__ = exports(globals())
