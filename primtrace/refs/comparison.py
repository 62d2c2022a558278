"""Comparison and logical refs: eq, ne, lt, le, gt, ge (and their long names), logical_and/
or/xor/not, isclose. Comparisons promote their operands (ALWAYS_BOOL) and return bool."""
from __future__ import annotations

import torch

from primtrace import dtypes, prims
from primtrace.refs import arithmetic
from primtrace.refs.binary import make_binary
from primtrace.refs.checks import without_complex32
from primtrace.refs.core import (broadcast, broadcast_shapes, elementwise, exports, is_tensor,
                                 maybe_convert, ref)
from primtrace.refs.promotion import ALWAYS_BOOL
from primtrace.refs.scalars import python_zero


def comparison(name, prim, aliases=()):
    """torch.<name>(input, other): a number may only be on the right (eq(2, t) is a TypeError)."""
    return make_binary(name, prim, ALWAYS_BOOL, ("other",), inplace=True, aliases=aliases,
                       doc=f"input {name} other, compared in the promoted dtype.")


eq, ne = comparison("eq", prims.eq), comparison("ne", prims.ne, ("not_equal",))
lt, le = comparison("lt", prims.lt, ("less",)), comparison("le", prims.le, ("less_equal",))
gt, ge = comparison("gt", prims.gt, ("greater",)), comparison("ge", prims.ge, ("greater_equal",))


def _truth(t):
    """Nonzero-ness as bool (nan is true, as in C)."""
    return t if t.dtype is torch.bool else prims.ne(t, python_zero(t.dtype))


def logical(name, prim):
    """torch.<name>(input, other): `prim` of the two truth values; eager takes no numbers here."""
    return make_binary(name, lambda a, b: prim(_truth(a), _truth(b)), ALWAYS_BOOL, (),
                       doc=f"{name}: both operands read as truth values (nonzero is True).",
                       complex32=False, inplace=True)


logical_and = logical("logical_and", prims.bitwise_and)
logical_or, logical_xor = logical("logical_or", prims.bitwise_or), logical("logical_xor", prims.ne)


@elementwise(ALWAYS_BOOL, ("input",), checks=[without_complex32("logical_not_cpu")], inplace=True)
def logical_not(input):
    """input == 0"""
    return prims.eq(input, python_zero(input.dtype))


@ref
def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|input - other| <= atol + rtol * |other| (or exactly equal, or both nan with
    equal_nan). Written as eager's sequence of tensor ops, each rounding to its dtype (a
    float16 input computes its error terms in float16), because the bool result must match
    exactly; integers are compared in the default float dtype."""
    if not (is_tensor(input) and is_tensor(other)):
        raise TypeError("isclose(): arguments 'input' and 'other' must be Tensors")
    if input.dtype != other.dtype:
        raise RuntimeError(f"{dtypes.scalar_type_name(input.dtype)} did not match {dtypes.scalar_type_name(other.dtype)}")
    if rtol < 0:
        raise RuntimeError(f"rtol must be greater than or equal to zero, but got {rtol}")
    if atol < 0:
        raise RuntimeError(f"atol must be greater than or equal to zero, but got {atol}")
    shape = broadcast_shapes(tuple(input.shape), tuple(other.shape))
    input, other = broadcast(input, shape), broadcast(other, shape)
    close = eq(input, other)
    if equal_nan and (input.dtype.is_floating_point or input.dtype.is_complex):
        close = prims.bitwise_or(close, prims.bitwise_and(prims.isnan(input), prims.isnan(other)))
    if rtol == 0 and atol == 0:
        return close
    if dtypes.is_integer(input.dtype):
        input, other = maybe_convert(input, dtypes.default_float()), maybe_convert(other, dtypes.default_float())
    allowed = arithmetic.add(prims.abs(arithmetic.mul(other, rtol)), atol)
    actual = prims.abs(arithmetic.sub(input, other))
    within = prims.bitwise_and(prims.isfinite(actual), le(actual, allowed))
    return prims.bitwise_or(close, within)


__all__ = exports(globals())
