"""Scalar functions for float32 registers known to hold float16 values (|x| <= 65504).

The op table (``ops.py``) names them as the f16-range variants of floor, ceil, trunc and
round: the planner calls one where the operand was loaded from, or converted to, float16.
(sin and cos of such values take vmath's ``sin_near``/``cos_near``, the ``near`` variants.) CPU kernels call them as ``m.<name>_float32`` (``mathlib`` re-exports them).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

_INLINE = dict(forceinline=True, error_model="numpy", nogil=True)  # LLVM-level inlining


# --- rounding float16 values to integers -----------------------------------------------------
# llvm.floor/ceil/trunc/rint of an extended half, rounded back to half, is narrowed by LLVM
# to the half intrinsic, which x86 without AVX512-FP16 runs as a scalar libcall per element
# (torch.floor in float16 at 2**20: 403 us, eager 70 us). Rounding by the magic number
# 1.5 * 2**23 is not narrowed (the constant is no half) and stays vectorized; float16
# values of magnitude 1024 or more (and inf, nan) are integers already. The sign comes from
# x (floor(-0.0), ceil(-0.5) are -0.0).
_MAGIC = np.float32(12582912.0)
_ONE = np.float32(1.0)


@njit(**_INLINE)
def rint_f16range_float32(x):
    """Round half to even, of a float32 holding a float16 value."""
    r = (x + _MAGIC) - _MAGIC
    return math.copysign(r, x) if abs(x) < 1024 else x


@njit(**_INLINE)
def floor_f16range_float32(x):
    r = (x + _MAGIC) - _MAGIC
    r = r - _ONE if r > x else r
    return math.copysign(r, x) if abs(x) < 1024 else x


@njit(**_INLINE)
def ceil_f16range_float32(x):
    r = (x + _MAGIC) - _MAGIC
    r = r + _ONE if r < x else r
    return math.copysign(r, x) if abs(x) < 1024 else x


@njit(**_INLINE)
def trunc_f16range_float32(x):
    r = (x + _MAGIC) - _MAGIC
    r = r - math.copysign(_ONE, x) if abs(r) > abs(x) else r
    return math.copysign(r, x) if abs(x) < 1024 else x
