"""The accumulation steps of fused row reductions (``row_kernel.py``), inlined by LLVM.

Why helpers: LLVM vectorizes a reduction loop only where reordering its steps is allowed.
A float ``acc + x`` may not be reordered, so ``add``/``mul`` are compiled with the
``reassoc`` flag alone; inlined, only these instructions carry it (the elementwise lines
of the kernel keep IEEE order, the vmath functions their own flags), and the loop
vectorizer then keeps several partial sums (more accurate than one running sum, too).
float max/min run on integer keys (``max_key32`` ...: the float's bits made to sort as
signed integers, NaN the largest key for max and the smallest for min, so NaN wins as in
eager's amax/amin): an integer max reduction vectorizes with a one-cycle dependency chain,
where LLVM's NaN-propagating ``maximum`` costs five (0.7x the speed). Float sums are summed
in blocks: a block's partial sum in the values' register (float32 for float32 and half
values: a short reorderable sum, vectorized 16 wide), added into a float64 total, with
Neumaier's compensation where the values are float64; a long row ends up more exact than
eager's cascade sum.
"""
from __future__ import annotations

import math

from llvmlite import ir
import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

_REASSOC = dict(fastmath={"reassoc"}, forceinline=True, error_model="numpy", nogil=True)
_INLINE = dict(forceinline=True, error_model="numpy", nogil=True)


@njit(**_REASSOC)
def add(a, b):
    """a + b, reorderable: a vectorizable sum step."""
    return a + b


@njit(**_REASSOC)
def mul(a, b):
    """a * b, reorderable: a vectorizable product step."""
    return a * b


def _minmax_intrinsic(name):
    @intrinsic
    def fn(typingctx, a, b):
        if a not in (types.float32, types.float64) or b != a:
            return None

        def codegen(context, builder, signature, args):
            ty = args[0].type
            suffix = "f32" if ty == ir.FloatType() else "f64"
            fnty = ir.FunctionType(ty, [ty, ty])
            callee = cgutils.get_or_insert_function(builder.module, fnty, f"llvm.{name}.{suffix}")
            return builder.call(callee, args)
        return a(a, b), codegen
    return fn


fmax = _minmax_intrinsic("maximum")   # NaN-propagating max (vectorizable, slower than keys)
fmin = _minmax_intrinsic("minimum")


@njit(**_INLINE)
def imax(a, b):
    return a if a >= b else b


@njit(**_INLINE)
def imin(a, b):
    return a if a <= b else b


@njit(**_INLINE)
def neumaier(s, c, x):
    """(s + x, c + the rounding error of that sum): compensated float64 summation."""
    t = s + x
    if abs(s) >= abs(x):
        c += (s - t) + x
    else:
        c += (x - t) + s
    return t, c


@njit(**_INLINE)
def compensated(s, c):
    """The compensated sum's value (an infinite or NaN sum stays as it is: its error term
    is meaningless)."""
    return s + c if math.isfinite(s) else s


def _bitcast(src, dst, width):
    @intrinsic
    def fn(typingctx, x):
        if x != src:
            return None

        def codegen(context, builder, signature, args):
            target = ir.IntType(width) if isinstance(dst, types.Integer) else (
                ir.FloatType() if width == 32 else ir.DoubleType())
            return builder.bitcast(args[0], target)
        return dst(x), codegen
    return fn


_bits32 = _bitcast(types.float32, types.int32, 32)
_float32 = _bitcast(types.int32, types.float32, 32)
_bits64 = _bitcast(types.float64, types.int64, 64)
_float64 = _bitcast(types.int64, types.float64, 64)
_MAX32, _MIN32 = np.int32(2**31 - 1), np.int32(-2**31)
_MAX64, _MIN64 = np.int64(2**63 - 1), np.int64(-2**63)


@njit(**_INLINE)
def max_key32(v):
    b = _bits32(v)
    return _MAX32 if v != v else np.int32(b ^ ((b >> 31) & _MAX32))


@njit(**_INLINE)
def min_key32(v):
    b = _bits32(v)
    return _MIN32 if v != v else np.int32(b ^ ((b >> 31) & _MAX32))


@njit(**_INLINE)
def from_key32(k):
    """The float32 of a key (the NaN keys, MAX and MIN, give NaN)."""
    if k == _MAX32 or k == _MIN32:
        return np.float32(np.nan)
    return _float32(np.int32(k ^ ((k >> 31) & _MAX32)))


@njit(**_INLINE)
def max_key64(v):
    b = _bits64(v)
    return _MAX64 if v != v else np.int64(b ^ ((b >> 63) & _MAX64))


@njit(**_INLINE)
def min_key64(v):
    b = _bits64(v)
    return _MIN64 if v != v else np.int64(b ^ ((b >> 63) & _MAX64))


@njit(**_INLINE)
def from_key64(k):
    if k == _MAX64 or k == _MIN64:
        return np.float64(np.nan)
    return _float64(np.int64(k ^ ((k >> 63) & _MAX64)))
