"""The accumulation steps of fused row reductions (``row_kernel.py``), inlined by LLVM.

Why helpers: LLVM vectorizes a reduction loop only where reordering its steps is allowed.
A float ``acc + x`` may not be reordered, so ``add``/``mul`` are compiled with the
``reassoc`` flag alone; inlined, only these instructions carry it (the elementwise lines
of the kernel keep IEEE order, the vmath functions their own flags), and the loop
vectorizer then keeps several partial sums (more accurate than one running sum, too).
float max/min are LLVM's ``maximum``/``minimum`` (NaN propagates, as eager's amax/amin),
which the loop vectorizer reduces without fast-math flags. float64 sums of float64 values
are summed in blocks whose partial sums ``neumaier`` adds with a compensation term, so a
long row is as exact as eager's cascade sum.
"""
from __future__ import annotations

import math

from llvmlite import ir
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


fmax = _minmax_intrinsic("maximum")   # NaN-propagating, vectorizable max step
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


@njit(**_INLINE)
def variance(m2, n, correction):
    """Sum of squared deviations over max(n - correction, 0), as eager divides."""
    return m2 / max(n - correction, 0.0)
