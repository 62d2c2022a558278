"""Refs that read tensor values into Python: equal, allclose, item.

Each computes in prims and then reads the one value it answers with, as eager does. That
read is why the tracer never calls them on proxies: ``tracer/mapping.DATA_DEPENDENT`` names
them, and a traced ``torch.equal(a, b)`` raises DataDependentError before any ref is looked up
(their values decide Python control flow, which a trace cannot record).
"""
from __future__ import annotations

from primtrace import prims
from primtrace.refs import comparison, reductions
from primtrace.refs.core import exports, is_tensor, ref
from primtrace.refs.scalars import type_name


def _tensors(name, input, other):
    for position, (pname, x) in enumerate((("input", input), ("other", other)), 1):
        if not is_tensor(x):
            raise TypeError(f"{name}(): argument '{pname}' (position {position}) must be Tensor, "
                            f"not {type_name(x)}")


def _read(t):
    """The Python value of a one-element tensor (a read of data: eager only)."""
    return t.item()


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
    return bool(_read(reductions.all(comparison.eq(input, other))))


@ref
def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """isclose(...).all(): one dtype for both, shapes that broadcast, eager's tolerance checks."""
    _tensors("allclose", input, other)
    return bool(_read(reductions.all(comparison.isclose(input, other, rtol, atol, equal_nan))))


@ref
def item(input):
    """The value of a one-element tensor as a Python bool, int, float or complex."""
    if not is_tensor(input):
        raise TypeError(f"item(): argument 'input' must be Tensor, not {type_name(input)}")
    if input.numel() != 1:
        raise RuntimeError(f"a Tensor with {input.numel()} elements cannot be converted to Scalar")
    return _read(prims.clone(input) if input.ndim == 0 else input)


__all__ = exports(globals())
