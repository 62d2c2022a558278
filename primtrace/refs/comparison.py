"""Comparison and logical refs: eq, ne, lt, le, gt, ge (and their long names), logical_and/
or/xor/not, isclose. Comparisons promote their operands (ALWAYS_BOOL) and return bool."""
from __future__ import annotations

import torch

from primtrace import dtypes, prims
from primtrace.refs.arithmetic import add, mul, sub
from primtrace.refs.binary import make_binary
from primtrace.refs.binary_checks import python_zero, without_complex32
from primtrace.refs.core import (broadcast, broadcast_shapes, elementwise, inplace_variant, is_tensor,
                                 maybe_convert, ref)
from primtrace.refs.promotion import ALWAYS_BOOL

__all__ = ["eq", "ne", "lt", "le", "gt", "ge", "greater", "greater_equal", "less", "less_equal",
           "not_equal", "logical_and", "logical_or", "logical_xor", "logical_not", "isclose",
           "eq_", "ne_", "lt_", "le_", "gt_", "ge_", "greater_", "greater_equal_", "less_",
           "less_equal_", "not_equal_", "logical_and_", "logical_or_", "logical_xor_",
           "logical_not_"]

# name, prim, long name; a number may only be on the right (eq(2, t) is a TypeError)
_COMPARISONS = [
    ("eq", prims.eq, None), ("ne", prims.ne, "not_equal"),
    ("lt", prims.lt, "less"), ("le", prims.le, "less_equal"),
    ("gt", prims.gt, "greater"), ("ge", prims.ge, "greater_equal"),
]
for _name, _prim, _alias in _COMPARISONS:
    globals()[_name] = make_binary(_name, _prim, ALWAYS_BOOL, ("other",),
                                   doc=f"input {_name} other, compared in the promoted dtype.")
    globals()[_name + "_"] = inplace_variant(globals()[_name])
    if _alias:
        globals()[_alias], globals()[_alias + "_"] = globals()[_name], globals()[_name + "_"]


def _truth(t):
    """Nonzero-ness as bool (nan is true, as in C)."""
    return t if t.dtype is torch.bool else prims.ne(t, python_zero(t.dtype))


# name, prim combining the two truth values; eager takes no numbers here
_LOGICAL = [("logical_and", prims.bitwise_and), ("logical_or", prims.bitwise_or),
            ("logical_xor", prims.ne)]
for _name, _prim in _LOGICAL:
    globals()[_name] = make_binary(
        _name, (lambda p: lambda a, b: p(_truth(a), _truth(b)))(_prim), ALWAYS_BOOL, (),
        doc=f"{_name}: both operands read as truth values (nonzero is True).", complex32=False)
    globals()[_name + "_"] = inplace_variant(globals()[_name])


@without_complex32("logical_not_cpu")
@elementwise(ALWAYS_BOOL, ("input",))
def logical_not(input):
    """input == 0"""
    return prims.eq(input, python_zero(input.dtype))


logical_not_ = inplace_variant(logical_not)


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
    close = eq(input, other)  # noqa: F821  (generated above)
    if equal_nan and (input.dtype.is_floating_point or input.dtype.is_complex):
        close = prims.bitwise_or(close, prims.bitwise_and(prims.isnan(input), prims.isnan(other)))
    if rtol == 0 and atol == 0:
        return close
    if dtypes.is_integer(input.dtype):
        input, other = maybe_convert(input, dtypes.default_float()), maybe_convert(other, dtypes.default_float())
    allowed = add(prims.abs(mul(other, rtol)), atol)
    actual = prims.abs(sub(input, other))
    within = prims.bitwise_and(prims.isfinite(actual), le(actual, allowed))  # noqa: F821
    return prims.bitwise_or(close, within)
