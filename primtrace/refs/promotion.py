"""PyTorch's type promotion for elementwise ops.

``elementwise_dtypes(*args, type_promotion_kind=...)`` returns the (computation dtype,
result dtype) pair eager PyTorch uses. The promoted dtype follows TensorIterator's three
tiers: dimensioned tensors, then 0-dim tensors, then Python numbers (which contribute only
their category; a float number means the default dtype).
tests/conformance/test_promotion_grid.py checks every pair of dtypes and kinds against eager.
"""
from __future__ import annotations

import enum
import numbers

import torch

from primtrace import dtypes
from primtrace.dtypes import Category


class Kind(enum.Enum):
    """How the promoted dtype R becomes (computation, result) dtypes."""
    DEFAULT = "default"                    # (opmath(R), R)
    NO_OPMATH = "no_opmath"                # (R, R)
    INT_TO_FLOAT = "int_to_float"          # bool/int R -> default float
    COMPLEX_TO_FLOAT = "complex_to_float"  # (opmath(R), real(R))
    BOOL_TO_LONG = "bool_to_long"          # bool R -> int64
    ALWAYS_BOOL = "always_bool"            # (opmath(R), bool)


DEFAULT, NO_OPMATH, INT_TO_FLOAT = Kind.DEFAULT, Kind.NO_OPMATH, Kind.INT_TO_FLOAT
COMPLEX_TO_FLOAT, BOOL_TO_LONG, ALWAYS_BOOL = Kind.COMPLEX_TO_FLOAT, Kind.BOOL_TO_LONG, Kind.ALWAYS_BOOL


def _is_tensor(x) -> bool:
    return hasattr(x, "dtype") and hasattr(x, "shape")


def _number_dtype(x) -> torch.dtype:
    """The dtype a Python number stands for when it takes part in promotion."""
    cat = dtypes.number_category(getattr(x, "python_type", type(x)))
    return {Category.BOOL: torch.bool, Category.INTEGER: torch.int64,
            Category.FLOATING: dtypes.default_float(),
            Category.COMPLEX: dtypes.default_complex()}[cat]


def _promote(current, dtype):
    return dtype if current is None else dtypes.promote_types(current, dtype)


def _combine(higher, lower):
    """Merge a tier with the tier below it: the lower tier only adds a higher category."""
    if higher is None:
        return lower
    if lower is None:
        return higher
    if higher.is_complex:
        return higher
    if lower.is_complex:
        return dtypes.to_complex(higher) if higher.is_floating_point else lower
    if higher.is_floating_point:
        return higher
    if higher is torch.bool or lower.is_floating_point:
        return dtypes.promote_types(higher, lower)
    return higher


def result_type(*args) -> torch.dtype:
    """The promoted dtype R of tensors and numbers (None arguments are skipped)."""
    dimensioned = zero_dim = wrapped = None
    for x in args:
        if x is None:
            continue
        if _is_tensor(x):
            if len(x.shape) > 0:
                dimensioned = _promote(dimensioned, x.dtype)
            else:
                zero_dim = _promote(zero_dim, x.dtype)
        elif isinstance(x, numbers.Number) or hasattr(x, "python_type"):
            wrapped = _promote(wrapped, _number_dtype(x))
        else:
            raise TypeError(f"unexpected argument of type {type(x).__name__} in type promotion")
    result = _combine(dimensioned, _combine(zero_dim, wrapped))
    if result is None:
        raise ValueError("type promotion needs at least one tensor or number")
    return result


def elementwise_dtypes(*args, type_promotion_kind: Kind) -> tuple[torch.dtype, torch.dtype]:
    """(computation dtype, result dtype) of an elementwise op on `args`."""
    r = result_type(*args)
    kind = type_promotion_kind
    if kind is Kind.DEFAULT:
        return dtypes.opmath(r), r
    if kind is Kind.NO_OPMATH:
        return r, r
    if kind is Kind.INT_TO_FLOAT:
        if dtypes.is_integer(r):
            r = dtypes.default_float()
        return dtypes.opmath(r), r
    if kind is Kind.COMPLEX_TO_FLOAT:
        return dtypes.opmath(r), dtypes.to_real(r)
    if kind is Kind.BOOL_TO_LONG:
        return (torch.int64, torch.int64) if r is torch.bool else (dtypes.opmath(r), r)
    if kind is Kind.ALWAYS_BOOL:
        return dtypes.opmath(r), torch.bool
    raise ValueError(f"unknown type promotion kind {kind!r}")
