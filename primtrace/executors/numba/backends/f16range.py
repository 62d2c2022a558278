"""Scalar functions for float32 registers known to hold float16 values (|x| <= 65504).

The op table (``ops.py``) names them as the f16-range variants of sin, cos, floor, ceil,
trunc and round: the planner calls one where the operand was loaded from, or converted
to, float16. CPU kernels call them as ``m.<name>_float32`` (``mathlib`` re-exports them).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

_INLINE = dict(forceinline=True, error_model="numpy", nogil=True)  # LLVM-level inlining


# --- sin and cos of float16 values (|x| <= 65504) ------------------------------------------------
# A kernel that computes sin of a float16 input (W2: sin(a_f16)) knows |x| <= 65504, so a
# Cody-Waite reduction in float64 is exact enough and the general Payne-Hanek reduction
# (~2/3 of vmath's sin cost) can be skipped. 0.5005 ULP in float32 over every float16
# value (tests/numba/test_mathlib.py checks all 65536).
_2_OVER_PI = np.float64(0.6366197723675814)
_PIO2_HI = np.float64(1.5707963267341256)       # 33 significant bits of pi/2
_PIO2_LO = np.float64(6.077100506506192e-11)    # pi/2 - _PIO2_HI
_SIN = tuple(np.float64(c) for c in (-1 / 6, 1 / 120, -1 / 5040, 1 / 362880, -1 / 39916800))
_COS = tuple(np.float64(c) for c in (-1 / 2, 1 / 24, -1 / 720, 1 / 40320, -1 / 3628800))


@njit(**_INLINE)
def _sincos_small(x, want_cos):
    d = np.float64(x)
    k = np.rint(d * _2_OVER_PI)
    r = (d - k * _PIO2_HI) - k * _PIO2_LO       # exact enough for |k| < 2**20
    z = r * r
    s = r + r * z * (_SIN[0] + z * (_SIN[1] + z * (_SIN[2] + z * (_SIN[3] + z * _SIN[4]))))
    c = np.float64(1.0) + z * (_COS[0] + z * (_COS[1] + z * (_COS[2] + z * (_COS[3] + z * _COS[4]))))
    q = (np.int64(k) + (1 if want_cos else 0)) & 3
    v = s if (q & 1) == 0 else c
    v = -v if (q & 2) != 0 else v
    v = d if (d == 0 and not want_cos) else v   # sin(-0.0) = -0.0 (the reduction gives +0.0)
    return np.float32(v if math.isfinite(d) else d - d)


@njit(**_INLINE)
def sin_f16range_float32(x):
    """sin of a float32 holding a float16 value (finite |x| <= 65504, or inf/nan)."""
    return _sincos_small(x, False)


@njit(**_INLINE)
def cos_f16range_float32(x):
    return _sincos_small(x, True)


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
