"""Python numbers as eager sees them: its argument parser, its type promotion and its kernels.

A number argument is either an operand (it takes part in type promotion by its category,
see ``promotion``) or a parameter such as an activation's alpha, which eager's kernel reads
as ``Scalar.to<T>()``: rounded to the dtype, overflow checked (``scalar_to``). A runtime
number (a NumberProxy while tracing) has a ``python_type``; reading its value specializes
the trace on it.
"""
from __future__ import annotations

import math
import struct

import torch

from primtrace import dtypes

__all__ = []  # helpers, not refs


def python_type(value) -> type:
    """The Python type of a number, or of the number a NumberProxy stands for."""
    return getattr(value, "python_type", type(value))


def type_name(value) -> str:
    """The type eager names in its errors (a NumberProxy's number type)."""
    return python_type(value).__name__


def number_category(value) -> dtypes.Category:
    """The category (bool, integer, floating, complex) of a Python number or NumberProxy."""
    return dtypes.number_category(python_type(value))


def python_zero(dtype):
    """0 as the Python number type of `dtype` (False, 0, 0.0 or 0j): a scalar any prim takes."""
    return dtypes.python_type(dtype)(0)


def concrete(value):
    """The Python value of a number (reading a NumberProxy specializes the trace on it)."""
    return value.python_type(value) if hasattr(value, "python_type") else value


def _round_float(v: float, dtype) -> float:
    """`v` rounded to a float dtype, as c10 does: through float32, then to nearest even."""
    if dtype is torch.float64 or math.isnan(v):
        return v
    v = struct.unpack("<f", struct.pack("<f", v))[0]
    if dtype is torch.float16:
        return struct.unpack("<e", struct.pack("<e", v))[0]
    if dtype is torch.bfloat16:
        bits = struct.unpack("<I", struct.pack("<f", v))[0]
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return struct.unpack("<f", struct.pack("<I", bits))[0]
    return v


def scalar_to(value, dtype):
    """The number a kernel of `dtype` sees for a Python number: eager's ``Scalar.to<T>()``.

    Floats round to the dtype, and a finite value beyond its range raises; integers
    truncate toward zero, out-of-range values raise (an unsigned dtype takes negative
    Python ints down to -max and wraps them); a complex number needs a zero imaginary part.
    """
    if dtype is torch.float64 and python_type(value) in (bool, int, float):
        return value if isinstance(value, float) or hasattr(value, "python_type") else float(value)
    v = concrete(value)
    overflow = RuntimeError(f"value cannot be converted to type {dtypes.c_type_name(dtype)} "
                            "without overflow")
    if isinstance(v, complex):
        if v.imag != 0:
            raise overflow
        v = v.real
    if dtype.is_floating_point:
        v = float(v)
        if math.isfinite(v) and abs(v) > torch.finfo(dtype).max:
            raise overflow
        return _round_float(v, dtype)
    info = torch.iinfo(dtype)
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        low = -info.max if info.min == 0 else info.min
        if not low <= v <= info.max:
            raise overflow
        return v % (info.max + 1) if info.min == 0 else v
    if math.isnan(v) or v < info.min or v > float(info.max):
        raise overflow
    return (int(v) - info.min) % (info.max - info.min + 1) + info.min  # 2**63 wraps, as in C
