"""Guards: prims that check a runtime Python number (or a 0-dim tensor's value, which eager
reads with ``item()``) and raise eager's error, or do nothing.

Eager refuses a number that does not convert to the kernel's dtype ("value cannot be
converted to type int8_t without overflow"). In a trace the number is a runtime input, so
the check is a node that runs at call time rather than a read that would specialize the
trace on the value. Guards have no outputs; passes keep them.
"""
from __future__ import annotations

import math

import torch

from primtrace import dtypes
from primtrace.ir.symbol import Symbol, SymbolKind
from primtrace.prims.differentiation import GUARD




def number_overflows(value, dtype) -> bool:
    """c10::overflows<dtype>(value): would converting the Python number overflow?

    Complex -> real overflows when the imaginary part is nonzero; floats -> integers when
    out of range or nan (inf never does for float types); negative integers wrap into
    unsigned types down to -max (so -1 is a valid uint8, 255).
    """
    if dtype is torch.bool or isinstance(value, bool):
        return False
    if isinstance(value, complex):
        if not dtype.is_complex and value.imag != 0:
            return True
        return number_overflows(value.real, dtype) or number_overflows(value.imag, dtype)
    real = dtypes.to_real(dtype)
    if real.is_floating_point:
        if isinstance(value, float) and (math.isinf(value) or math.isnan(value)):
            return False
        info = torch.finfo(real)
        return value < info.min or value > info.max
    info = torch.iinfo(real)
    if isinstance(value, float) and math.isnan(value):
        return True
    if info.min == 0 and isinstance(value, int):
        return value > info.max or -value > info.max
    return value < info.min or value > info.max


def _check_fits(value, dtype):
    if number_overflows(value, dtype):
        raise RuntimeError(f"value cannot be converted to type {dtypes.c_type_name(dtype)} "
                           f"without overflow")


check_fits = Symbol("check_fits", kind=SymbolKind.PRIM, meta=lambda value, dtype: None, impl=_check_fits,
                    tags=frozenset({"guard"}), module="prims",
                    doc="Raise eager's overflow error if the number does not convert to dtype.")


def item_may_overflow(value_dtype, dtype) -> bool:
    """Could some value of `value_dtype`, read as a number, overflow `dtype` (by
    :func:`number_overflows`)? False when every value converts (no check is needed)."""
    if dtype is torch.bool or value_dtype is torch.bool or value_dtype == dtype:
        return False
    if value_dtype.is_complex or value_dtype.is_floating_point:
        if value_dtype.is_complex and not dtype.is_complex:
            return True
        real = dtypes.to_real(dtype)
        return not real.is_floating_point or \
            torch.finfo(real).max < torch.finfo(dtypes.to_real(value_dtype)).max
    info = torch.iinfo(value_dtype)
    return number_overflows(info.min, dtype) or number_overflows(info.max, dtype)


def _check_item_fits(value, dtype):
    _check_fits(value.item(), dtype)


check_item_fits = Symbol(
    "check_item_fits", kind=SymbolKind.PRIM, meta=lambda value, dtype: None,
    impl=_check_item_fits, tags=frozenset({"guard"}), module="prims",
    doc="Raise eager's overflow error if a 0-dim tensor's value (read with item(), as eager "
        "reads a masked_fill value) does not convert to dtype.")


DERIVATIVES = {"check_fits": GUARD, "check_item_fits": GUARD}
