"""Binary arithmetic refs: add, sub, mul, div and their relatives."""
from __future__ import annotations

from primtrace import dtypes, prims
from primtrace.refs.core import elementwise, is_number, is_tensor
from primtrace.refs.promotion import DEFAULT, INT_TO_FLOAT

__all__ = ["add", "sub", "mul", "true_divide"]


def _scaled(b, alpha, like):
    """alpha * b in the computation dtype; alpha must fit the computation category."""
    category = dtypes.category(like.dtype)
    alpha_category = dtypes.number_category(alpha)
    if category <= dtypes.Category.INTEGER and alpha_category >= dtypes.Category.FLOATING:
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")
    if category == dtypes.Category.FLOATING and alpha_category == dtypes.Category.COMPLEX:
        raise RuntimeError("For non-complex input tensors, argument alpha must not be a complex number.")
    if category == dtypes.Category.BOOL:
        alpha = bool(alpha)  # eager casts an integer alpha to the bool computation type
    if is_number(b):
        b = prims.full((), b, dtype=like.dtype, device=like.device)
    return prims.mul(b, alpha)


@elementwise(DEFAULT, ("a", "b"), scalars="all")
def add(a, b, *, alpha=None):
    """a + alpha * b"""
    if alpha is not None:
        b = _scaled(b, alpha, a if is_tensor(a) else b)
    return prims.add(a, b)


@elementwise(DEFAULT, ("a", "b"), scalars="all")
def sub(a, b, *, alpha=None):
    """a - alpha * b"""
    if alpha is not None:
        b = _scaled(b, alpha, a if is_tensor(a) else b)
    return prims.sub(a, b)


@elementwise(DEFAULT, ("a", "b"), scalars="all")
def mul(a, b):
    return prims.mul(a, b)


@elementwise(INT_TO_FLOAT, ("a", "b"), scalars="all")
def true_divide(a, b):
    return prims.div(a, b)
