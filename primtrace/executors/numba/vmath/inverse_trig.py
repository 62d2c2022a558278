"""Vectorizable atan, atan2, asin, acos (float32 and float64).

atan: |x| is reduced branch-free to |t| <= 7/16 around one of 0, 1/2, 1, 3/2, inf
(t = (a - c)/(1 + a*c), the numerators exact by Sterbenz), atan(t) = t + t**3 P(t*t)
minimax, plus atan(c) as a hi + lo pair. atan2 feeds |y|/|x| (both scaled by a power of
two so nothing underflows) to the same core, adds the ratio's rounding error (from an
exact product) times atan's derivative, and applies the quadrant and the C99 special
cases with selects. asin/acos: |x| <= 1/2 directly, else the half-angle identity
asin(a) = pi/2 - 2*asin(sqrt((1-a)/2)) with sqrt's rounding error recovered from a
masked copy (fdlibm's scheme).
"""
from __future__ import annotations

import numpy as np

from primtrace.executors.numba.vmath import coeffs as C
from primtrace.executors.numba.vmath.core import (F32, F64, PI, PI_2, PI_4, bits_f32, bits_f64,
                                                  copysign, f32_bits, f64_bits, fabs, hi_lo,
                                                  pow2i_f32, pow2i_f64, sqrt, two_prod_f32,
                                                  two_prod_f64, two_sum, vjit)

_ATAN_HALF = "0.463647609000806116214256231461214402028537054"
_ATAN_3_2 = "0.982793723247329067985710611014666014496877453"


def _atan_bases(dtype):
    his, los = zip(*(hi_lo(v, dtype) for v in ("0", _ATAN_HALF, PI_4, _ATAN_3_2, PI_2)))
    return tuple(his), tuple(los)


(_B0H32, _B1H32, _B2H32, _B3H32, _B4H32), (_B0L32, _B1L32, _B2L32, _B3L32, _B4L32) = \
    _atan_bases(F32)
(_B0H64, _B1H64, _B2H64, _B3H64, _B4H64), (_B0L64, _B1L64, _B2L64, _B3L64, _B4L64) = \
    _atan_bases(F64)
_PIH32, _PIL32 = hi_lo(PI, F32)
_PIH64, _PIL64 = hi_lo(PI, F64)
_PIO2H32, _PIO2L32 = hi_lo(PI_2, F32)
_PIO2H64, _PIO2L64 = hi_lo(PI_2, F64)
_PIO4H32, _PIO4H64 = hi_lo(PI_4, F32)[0], hi_lo(PI_4, F64)[0]
_ATAN32, _ATAN64, _ASIN32, _ASIN64 = C.ATAN_F32, C.ATAN_F64, C.ASIN_F32, C.ASIN_F64
_INF32, _INF64 = F32(np.inf), F64(np.inf)
_SAFE32, _SAFE64 = F32(2.0 ** -76), F64(2.0 ** -900)


@vjit
def atan_core_f32(a, corr):
    """atan(a + corr) == hi + lo for a >= 0 (inf and NaN included), corr a tiny
    correction already scaled by atan's derivative."""
    r1, r2 = a >= F32(0.4375), a >= F32(0.6875)
    r3, r4 = a >= F32(1.1875), a >= F32(2.4375)
    num = a
    den = F32(1.0)
    num = (F32(2.0) * a - F32(1.0)) if r1 else num
    den = (F32(2.0) + a) if r1 else den
    num = (a - F32(1.0)) if r2 else num
    den = (a + F32(1.0)) if r2 else den
    num = (a - F32(1.5)) if r3 else num
    den = (F32(1.0) + F32(1.5) * a) if r3 else den
    num = F32(-1.0) if r4 else num
    den = a if r4 else den
    bh = _B4H32 if r4 else (_B3H32 if r3 else (_B2H32 if r2 else (_B1H32 if r1 else _B0H32)))
    bl = _B4L32 if r4 else (_B3L32 if r3 else (_B2L32 if r2 else (_B1L32 if r1 else _B0L32)))
    t = num / den
    z = t * t
    P = _ATAN32
    p = t * z * (P[0] + z * (P[1] + z * (P[2] + z * (P[3] + z * (P[4] + z * P[5])))))
    return bh, (bl + (p + corr)) + t


@vjit
def atan_core_f64(a, corr):
    """float64 version of atan_core_f32."""
    r1, r2 = a >= F64(0.4375), a >= F64(0.6875)
    r3, r4 = a >= F64(1.1875), a >= F64(2.4375)
    num = a
    den = F64(1.0)
    num = (F64(2.0) * a - F64(1.0)) if r1 else num
    den = (F64(2.0) + a) if r1 else den
    num = (a - F64(1.0)) if r2 else num
    den = (a + F64(1.0)) if r2 else den
    num = (a - F64(1.5)) if r3 else num
    den = (F64(1.0) + F64(1.5) * a) if r3 else den
    num = F64(-1.0) if r4 else num
    den = a if r4 else den
    bh = _B4H64 if r4 else (_B3H64 if r3 else (_B2H64 if r2 else (_B1H64 if r1 else _B0H64)))
    bl = _B4L64 if r4 else (_B3L64 if r3 else (_B2L64 if r2 else (_B1L64 if r1 else _B0L64)))
    t = num / den
    z = t * t
    P = _ATAN64
    p = t * z * (P[0] + z * (P[1] + z * (P[2] + z * (P[3] + z * (P[4] + z * (
        P[5] + z * (P[6] + z * (P[7] + z * (P[8] + z * (P[9] + z * P[10]))))))))))
    return bh, (bl + (p + corr)) + t


@vjit
def atan_f32(x):
    """atan, float32."""
    x = F32(x)
    h, l = atan_core_f32(fabs(x), F32(0.0))
    return copysign(h + l, x)


@vjit
def atan_f64(x):
    """atan, float64."""
    x = F64(x)
    h, l = atan_core_f64(fabs(x), F64(0.0))
    return copysign(h + l, x)


@vjit
def atan2_f32(y, x):
    """atan2(y, x), float32, with C99's signed-zero and infinity cases."""
    y, x = F32(y), F32(x)
    ay, ax = fabs(y), fabs(x)
    # scale both by 2**-exponent(max) so the residual products below cannot underflow
    em = (f32_bits(ay if ay > ax else ax) >> 23) & 0xFF
    k = 127 - em
    k = k if k < 126 else 126
    k = k if k > -126 else -126
    sc = pow2i_f32(k)
    ay, ax = ay * sc, ax * sc
    a = ay / ax
    p, pe = two_prod_f32(a, ax)
    corr = (((ay - p) - pe) / ax) / (F32(1.0) + a * a)   # atan' * (rounding error of a)
    # exact residual only when nothing underflows (else a's own 0.5 ULP is the error)
    corr = corr if (ay >= _SAFE32) & (a >= _SAFE32) & (corr == corr) else F32(0.0)
    a = F32(0.0) if (ay == F32(0.0)) & (ax == F32(0.0)) else a     # (+-0, +-0)
    a = F32(1.0) if (ay == _INF32) & (ax == _INF32) else a         # (+-inf, +-inf)
    h, l = atan_core_f32(a, corr)
    r = h + l
    d, de = two_sum(_PIH32, -h)
    r = (d + ((_PIL32 - l) + de)) if f32_bits(x) < 0 else r    # x < 0 or x == -0.0
    r = copysign(r, y)
    return r if (x == x) & (y == y) else x + y


@vjit
def atan2_f64(y, x):
    """atan2(y, x), float64."""
    y, x = F64(y), F64(x)
    ay, ax = fabs(y), fabs(x)
    # scale both by 2**-exponent(max) so the residual products below cannot underflow
    em = (f64_bits(ay if ay > ax else ax) >> 52) & 0x7FF
    k = 1023 - em
    k = k if k < 1022 else 1022
    k = k if k > -1022 else -1022
    sc = pow2i_f64(k)
    ay, ax = ay * sc, ax * sc
    a = ay / ax
    p, pe = two_prod_f64(a, ax)
    corr = (((ay - p) - pe) / ax) / (F64(1.0) + a * a)   # atan' * (rounding error of a)
    # exact residual only when nothing underflows (else a's own 0.5 ULP is the error)
    corr = corr if (ay >= _SAFE64) & (a >= _SAFE64) & (corr == corr) else F64(0.0)
    a = F64(0.0) if (ay == F64(0.0)) & (ax == F64(0.0)) else a
    a = F64(1.0) if (ay == _INF64) & (ax == _INF64) else a
    h, l = atan_core_f64(a, corr)
    r = h + l
    d, de = two_sum(_PIH64, -h)
    r = (d + ((_PIL64 - l) + de)) if f64_bits(x) < 0 else r    # x < 0 or x == -0.0
    r = copysign(r, y)
    return r if (x == x) & (y == y) else x + y


@vjit
def _asin_parts_f32(x):
    """(a, big, t, w, c, p): a = |x|; t = a or sqrt((1-a)/2); asin(t) = t + p;
    w = t with its low 12 bits cleared and c ~ t - w to full precision."""
    a = fabs(x)
    big = a > F32(0.5)
    z = (F32(1.0) - a) * F32(0.5) if big else a * a
    t = sqrt(z) if big else a
    P = _ASIN32
    p = t * z * (P[0] + z * (P[1] + z * (P[2] + z * (P[3] + z * (P[4] + z * P[5])))))
    w = bits_f32(f32_bits(t) & np.int32(-4096))
    den = t + w
    c = (z - w * w) / (den if den != F32(0.0) else F32(1.0))
    return a, big, t, w, c, p


@vjit
def _asin_parts_f64(x):
    """float64 version of _asin_parts_f32 (w keeps the top 21 bits)."""
    a = fabs(x)
    big = a > F64(0.5)
    z = (F64(1.0) - a) * F64(0.5) if big else a * a
    t = sqrt(z) if big else a
    P = _ASIN64
    p = t * z * (P[0] + z * (P[1] + z * (P[2] + z * (P[3] + z * (P[4] + z * (P[5] + z * (
        P[6] + z * (P[7] + z * (P[8] + z * (P[9] + z * (P[10] + z * (P[11] + z * P[12]))))))))))))
    w = bits_f64(f64_bits(t) & np.int64(-4294967296))
    den = t + w
    c = (z - w * w) / (den if den != F64(0.0) else F64(1.0))
    return a, big, t, w, c, p


@vjit
def asin_f32(x):
    """asin, float32 (NaN outside [-1, 1])."""
    x = F32(x)
    a, big, t, w, c, p = _asin_parts_f32(x)
    yb = _PIO4H32 - ((F32(2.0) * p - (_PIO2L32 - F32(2.0) * c)) - (_PIO4H32 - F32(2.0) * w))
    return copysign(yb if big else a + p, x)


@vjit
def asin_f64(x):
    """asin, float64."""
    x = F64(x)
    a, big, t, w, c, p = _asin_parts_f64(x)
    yb = _PIO4H64 - ((F64(2.0) * p - (_PIO2L64 - F64(2.0) * c)) - (_PIO4H64 - F64(2.0) * w))
    return copysign(yb if big else a + p, x)


@vjit
def acos_f32(x):
    """acos, float32 (NaN outside [-1, 1])."""
    x = F32(x)
    a, big, t, w, c, p = _asin_parts_f32(x)
    ps = copysign(p, x)
    ys = _PIO2H32 - (x - (_PIO2L32 - ps))
    ypos = F32(2.0) * (w + (c + p))
    yneg = F32(2.0) * (_PIO2H32 - (t + (p - _PIO2L32)))
    return (yneg if x < F32(0.0) else ypos) if big else ys


@vjit
def acos_f64(x):
    """acos, float64."""
    x = F64(x)
    a, big, t, w, c, p = _asin_parts_f64(x)
    ps = copysign(p, x)
    ys = _PIO2H64 - (x - (_PIO2L64 - ps))
    ypos = F64(2.0) * (w + (c + p))
    yneg = F64(2.0) * (_PIO2H64 - (t + (p - _PIO2L64)))
    return (yneg if x < F64(0.0) else ypos) if big else ys
