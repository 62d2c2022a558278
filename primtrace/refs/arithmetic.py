"""Binary arithmetic refs: add, sub, mul, div and their relatives."""
from __future__ import annotations

from primtrace import dtypes, prims
from primtrace.refs.core import elementwise, is_tensor
from primtrace.refs.promotion import DEFAULT, INT_TO_FLOAT


def _check_alpha(alpha, operands, op_name):
    """Eager: alpha must fit the computation category (no float alpha on integers)."""
    dtype_of = [v.dtype for v in operands if is_tensor(v)]
    if not dtype_of or not isinstance(alpha, (bool, int, float, complex)):
        return
    category = max(dtypes.category(d) for d in dtype_of)
    if dtypes.number_category(alpha) > category:
        if category == dtypes.Category.BOOL and isinstance(alpha, bool):
            return
        if category <= dtypes.Category.INTEGER and dtypes.number_category(alpha) >= dtypes.Category.FLOATING:
            raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")
        if category == dtypes.Category.FLOATING and isinstance(alpha, complex):
            raise RuntimeError("For non-complex input tensors, argument alpha must not be a complex number.")
        if category == dtypes.Category.BOOL:
            raise RuntimeError("Boolean alpha only supported for Boolean results.")


@elementwise(DEFAULT, ("a", "b"), scalars="all")
def add(a, b, *, alpha=None):
    """a + alpha * b"""
    if alpha is not None and alpha != 1:
        _check_alpha(alpha, (a, b), "add")
        b = prims.mul(b, alpha)
    return prims.add(a, b)


@elementwise(DEFAULT, ("a", "b"), scalars="all")
def sub(a, b, *, alpha=None):
    """a - alpha * b"""
    if alpha is not None and alpha != 1:
        _check_alpha(alpha, (a, b), "sub")
        b = prims.mul(b, alpha)
    return prims.sub(a, b)


@elementwise(DEFAULT, ("a", "b"), scalars="all")
def mul(a, b):
    return prims.mul(a, b)


@elementwise(INT_TO_FLOAT, ("a", "b"), scalars="all")
def true_divide(a, b):
    return prims.div(a, b)
