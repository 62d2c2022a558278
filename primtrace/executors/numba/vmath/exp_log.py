"""Vectorizable exp, exp2, expm1, log, log2, log10, log1p (float32 and float64).

exp family: Cody-Waite reduction x = k*ln2 + r (ln2 split so k*ln2_hi is exact; r's
rounding error c is kept and scaled by e**r), a minimax polynomial for e**r on
|r| <= ln2/2, 1 + r + tail summed with one rounding (1 + r as an exact pair), and
reconstruction by exponent-field scaling. exp_f32 is 0.60 ULP (eager's MKL 0.56; exp(4),
exp(5) and sin of them round as eager's do, see tests/numba/test_vmath_eager.py);
exp_fast skips the c term and the exact pair: ~1 ULP at ~60% of the cost, as eager's
silu/sigmoid use inside.

log family: x = 2**e * m with m in [sqrt(1/2), sqrt(2)) taken from the bits (subnormals
pre-scaled by 2**23 / 2**54), f = m - 1, s = f/(2+f), and
log(1+f) = f - (f*f/2 - s*(f*f/2 + R(s*s))) with a minimax R; the e*ln2 term and the
log2/log10 scalings are split into hi + lo constants so the leading products are exact.

Special values (NaN, +-inf, 0, negative arguments, -0.0) are patched with selects at the
end; the inputs are clamped first so no float->int conversion sees inf (exp and exp_fast
let NaN through their clamps: it stays NaN through every later operation, saving the
final select).
"""
from __future__ import annotations

import numpy as np

from primtrace.executors.numba.vmath import coeffs as C
from primtrace.executors.numba.vmath.core import (F32, F64, LN2, LOG2E, LOG10_2, INV_LN10, bits_f32,
                                                  bits_f64, f32_bits, f64_bits, fast_two_sum, hi_lo,
                                                  ldexp_f32, ldexp_f64, pow2i_f32, pow2i_f64, rint,
                                                  two_prod_f64, two_sum, vjit)

_INF32, _NAN32 = F32(np.inf), F32(np.nan)
_INF64, _NAN64 = F64(np.inf), F64(np.nan)

_LOG2E32 = F32(float.fromhex("0x1.715476p+0"))
_L2H32, _L2L32 = hi_lo(LN2, F32, 16)
_LOG2E64 = F64(1.4426950408889634)
_L2H64, _L2L64 = hi_lo(LN2, F64, 42)
_LN2_64 = hi_lo(LN2, F64)[0]
_EXP32, _EXP64 = C.EXP_F32, C.EXP_F64
_EXP2_32, _EXP2_64 = C.EXP2_F32, C.EXP2_F64
_LOG32, _LOG64 = C.LOG_F32, C.LOG_F64


# ----------------------------------------------------------------------------------- exp
@vjit
def _reduce_ln2_f32(x, kf):
    """x - kf*ln2 as r + c: x - kf*L2H is exact, c is the rounding error of the second
    subtraction (kept so expm1 near its k boundaries stays under 1 ULP)."""
    rh = x - kf * _L2H32
    rl = kf * _L2L32
    r = rh - rl
    return r, (rh - r) - rl


@vjit
def _reduce_ln2_f64(x, kf):
    """float64 version of _reduce_ln2_f32."""
    rh = x - kf * _L2H64
    rl = kf * _L2L64
    r = rh - rl
    return r, (rh - r) - rl


@vjit
def _exp_poly_f32(r):
    """(e**r - 1 - r) / r**2 for |r| <= ln2/2."""
    P = _EXP32
    return P[0] + r * (P[1] + r * (P[2] + r * (P[3] + r * (P[4] + r * P[5]))))


@vjit
def _exp_poly_f64(r):
    """(e**r - 1 - r) / r**2 for |r| <= ln2/2."""
    P = _EXP64
    return P[0] + r * (P[1] + r * (P[2] + r * (P[3] + r * (P[4] + r * (P[5] + r * (
        P[6] + r * (P[7] + r * (P[8] + r * (P[9] + r * P[10])))))))))


@vjit
def _exp_parts_f32(x):
    """(r, tail, kf) with e**x = (1 + r + tail) * 2**kf for |x| <= 104 (NaN in, NaN out):
    tail = r*r*P(r) + c*(1 + r), c the rounding error of r (c alone: 0.1 ULP more)."""
    kf = rint(x * _LOG2E32)
    r, c = _reduce_ln2_f32(x, kf)
    return r, r * r * _exp_poly_f32(r) + (c + c * r), kf


@vjit
def exp_tail_f32(x):
    """(r, tail, k) with e**x = (1 + r + tail) * 2**k, |r| <= ln2/2 and tail the small
    rest; x clamped to [-104, 90] (NaN -> -104: callers patch NaN)."""
    x = x if x > F32(-104.0) else F32(-104.0)
    x = x if x < F32(90.0) else F32(90.0)
    r, tail, kf = _exp_parts_f32(x)
    return r, tail, np.int32(kf)


@vjit
def exp_core_dd_f32(x):
    """e**x == (ph + pl) * 2**k, ph + pl a double-word value (for sinh, cosh, sigmoid)."""
    r, tail, k = exp_tail_f32(x)
    ph, e = fast_two_sum(F32(1.0), r)
    return ph, e + tail, k


@vjit
def _exp_parts_f64(x):
    """float64 version of _exp_parts_f32 (|x| <= 746)."""
    kf = rint(x * _LOG2E64)
    r, c = _reduce_ln2_f64(x, kf)
    return r, r * r * _exp_poly_f64(r) + (c + c * r), kf


@vjit
def exp_tail_f64(x):
    """(r, tail, k) with e**x = (1 + r + tail) * 2**k, |r| <= ln2/2 and tail the small
    rest; x clamped to [-746, 712] (NaN -> -746: callers patch NaN)."""
    x = x if x > F64(-746.0) else F64(-746.0)
    x = x if x < F64(712.0) else F64(712.0)
    r, tail, kf = _exp_parts_f64(x)
    return r, tail, np.int64(kf)


@vjit
def exp_core_f64(x):
    """e**x == p * 2**k with p in [0.7, 1.42], one rounding (1 + r exactly as s + e)."""
    r, tail, k = exp_tail_f64(x)
    s, e = fast_two_sum(F64(1.0), r)
    return s + (e + tail), k


@vjit
def exp_core_dd_f64(x):
    """e**x == (ph + pl) * 2**k, ph + pl a double-word value (for sinh, cosh, sigmoid)."""
    r, tail, k = exp_tail_f64(x)
    ph, e = fast_two_sum(F64(1.0), r)
    return ph, e + tail, k


@vjit
def exp_dd_f32(x, xl):
    """e**(x + xl) == (ph + pl) * 2**k for x + xl an unevaluated sum with |xl| small and
    x - k*L2H exact (erfc's e**-a*a, where x = -(a_hi)**2 is exact)."""
    x = x if x > F32(-104.0) else F32(-104.0)
    kf = rint((x + xl) * _LOG2E32)
    rh = x - kf * _L2H32
    rl = xl - kf * _L2L32
    r = rh + rl
    c = (rh - r) + rl
    P = _EXP32
    q = P[0] + r * (P[1] + r * (P[2] + r * (P[3] + r * (P[4] + r * P[5]))))
    ph, e = fast_two_sum(F32(1.0), r)
    return ph, e + (r * r * q + c), np.int32(kf)


@vjit
def exp_dd_f64(x, xl):
    """float64 version of exp_dd_f32."""
    x = x if x > F64(-746.0) else F64(-746.0)
    kf = rint((x + xl) * _LOG2E64)
    rh = x - kf * _L2H64
    rl = xl - kf * _L2L64
    r = rh + rl
    c = (rh - r) + rl
    P = _EXP64
    q = P[0] + r * (P[1] + r * (P[2] + r * (P[3] + r * (P[4] + r * (P[5] + r * (
        P[6] + r * (P[7] + r * (P[8] + r * (P[9] + r * P[10])))))))))
    ph, e = fast_two_sum(F64(1.0), r)
    return ph, e + (r * r * q + c), np.int64(kf)


def _make_scale(F, I, pow2i, kmin):
    """p * 2**k for p in [0.7, 1.42] and k <= emax + 1, as p * 2**(k-1) * 2, whose last
    factor overflows to inf (no select); subnormal results (k < kmin) as
    p * 2**(k+63) * 2**-63, rounded twice there (<= 0.75 ULP)."""
    two, tiny = F(2.0), F(2.0 ** -63)
    up, down = I(63), I(-1)

    @vjit
    def scale(p, k):
        sub = k < kmin
        return (p * pow2i(k + (up if sub else down))) * (tiny if sub else two)
    return scale


_scale_f32 = _make_scale(F32, np.int32, pow2i_f32, -124)
_scale_f64 = _make_scale(F64, np.int64, pow2i_f64, -1020)


def _make_exp(F, I, parts, scale, lo, hi):
    """e**x for dtype F: x clamped to [lo, hi] with NaN passing through (so 2**(k-1) is
    finite and no final NaN select is needed), 1 + r + tail summed with one rounding
    (1 + r as s + e, exactly), then scaled by 2**k."""
    one = F(1.0)

    @vjit
    def exp(x):
        x = F(x)
        xc = hi if x > hi else x
        xc = lo if xc < lo else xc
        r, tail, kf = parts(xc)
        s = one + r
        return scale(s + ((r - (s - one)) + tail), I(kf))
    return exp


exp_f32 = _make_exp(F32, np.int32, _exp_parts_f32, _scale_f32, F32(-104.0), F32(89.0))
exp_f32.__doc__ = "e**x, float32 (0.59 ULP; 0.75 for subnormal results)."
exp_f64 = _make_exp(F64, np.int64, _exp_parts_f64, _scale_f64, F64(-746.0), F64(709.9))
exp_f64.__doc__ = "e**x, float64 (see exp_f32)."


def _make_exp_fast(F, I, scale, lo, hi, log2e, l2h, l2l, poly):
    """e**x within 1 ULP at about 60% of exp's cost: the SLEEF-style shortcut (no
    reduction-error term, 1 + (r + tail) rounded twice). What eager's silu and sigmoid
    use inside (torch.exp itself is MKL's, 0.56 ULP, which exp_f32 matches); for
    contexts where the next operation's rounding dominates anyway."""
    one = F(1.0)

    @vjit
    def exp_fast(x):
        x = F(x)
        xc = hi if x > hi else x                      # NaN passes
        xc = lo if xc < lo else xc
        kf = rint(xc * log2e)
        r = (xc - kf * l2h) - kf * l2l
        return scale(one + (r + r * r * poly(r)), I(kf))
    return exp_fast


exp_fast_f32 = _make_exp_fast(F32, np.int32, _scale_f32, F32(-104.0), F32(89.0), _LOG2E32,
                              _L2H32, _L2L32, _exp_poly_f32)
exp_fast_f64 = _make_exp_fast(F64, np.int64, _scale_f64, F64(-746.0), F64(709.9), _LOG2E64,
                              _L2H64, _L2L64, _exp_poly_f64)


@vjit
def exp2_f32(x):
    """2**x, float32: k = rint(x) and r = x - k are exact, so integer x gives exact
    powers of two."""
    x = F32(x)
    xc = x if x > F32(-152.0) else F32(-152.0)
    xc = xc if xc < F32(130.0) else F32(130.0)
    kf = rint(xc)
    r = xc - kf
    P = _EXP2_32
    p = F32(1.0) + r * (P[0] + r * (P[1] + r * (P[2] + r * (P[3] + r * (P[4] + r * P[5])))))
    y = ldexp_f32(p, np.int32(kf))
    return y if x == x else x


@vjit
def exp2_core_f64(h, l):
    """2**(h + l) for |h| <= 1100 as (p, k), h + l an unevaluated sum (used by pow); the
    r*c0 term is an exact product so p carries one rounding."""
    kf = rint(h)
    rh = h - kf                  # exact
    r = rh + l
    c = (rh - r) + l             # rounding error of r, carried to first order
    P = _EXP2_64
    q = P[1] + r * (P[2] + r * (P[3] + r * (P[4] + r * (P[5] + r * (P[6] + r * (
        P[7] + r * (P[8] + r * (P[9] + r * P[10]))))))))
    ph, pe = two_prod_f64(r, P[0])          # the leading term exactly
    s, e = fast_two_sum(F64(1.0), ph)
    return s + (e + (pe + (r * r * q + c * _LN2_64))), np.int64(kf)


@vjit
def exp2_f64(x):
    """2**x, float64."""
    x = F64(x)
    xc = x if x > F64(-1080.0) else F64(-1080.0)
    xc = xc if xc < F64(1030.0) else F64(1030.0)
    p, k = exp2_core_f64(xc, F64(0.0))
    y = ldexp_f64(p, k)
    return y if x == x else x


@vjit
def expm1_core_f32(x):
    """e**x - 1 == hi + lo for finite x (lo is 0 once k > 24, where -1 no longer matters)."""
    xc = x if x > F32(-18.0) else F32(-18.0)
    r, tail, k = exp_tail_f32(xc)
    t = pow2i_f32(k if k < 64 else 64)
    s, err = two_sum(t - F32(1.0), t * r)
    hi, lo = fast_two_sum(s, err + t * tail)
    big = ldexp_f32(F32(1.0) + (r + (tail - pow2i_f32(-(k if k < 126 else 126)))), k)
    return (big if k > 24 else hi), (F32(0.0) if k > 24 else lo)


@vjit
def expm1_f32(x):
    """e**x - 1, float32: with t = 2**k, (t - 1) + t*expm1(r) where t - 1 and t*r are
    exact and summed with an error-free two_sum; for k > 24 the -1 is folded in as
    -2**-k before exp's scaling."""
    x = F32(x)
    hi, lo = expm1_core_f32(x)
    y = hi + lo
    y = x if x == F32(0.0) else y     # keeps -0.0
    return y if x == x else x


@vjit
def expm1_core_f64(x):
    """e**x - 1 == hi + lo for finite x (lo is 0 once k > 53, where -1 no longer matters)."""
    xc = x if x > F64(-40.0) else F64(-40.0)
    r, tail, k = exp_tail_f64(xc)
    t = pow2i_f64(k if k < 512 else 512)
    s, err = two_sum(t - F64(1.0), t * r)
    hi, lo = fast_two_sum(s, err + t * tail)
    big = ldexp_f64(F64(1.0) + (r + (tail - pow2i_f64(-(k if k < 1022 else 1022)))), k)
    return (big if k > 53 else hi), (F64(0.0) if k > 53 else lo)


@vjit
def expm1_f64(x):
    """e**x - 1, float64 (see expm1_f32)."""
    x = F64(x)
    hi, lo = expm1_core_f64(x)
    y = hi + lo
    y = x if x == F64(0.0) else y
    return y if x == x else x


# ----------------------------------------------------------------------------------- log
_SQRTH32 = np.int32(0x3F3504F3)              # bits of float32(sqrt(1/2))
_SQRTH64 = np.int64(0x3FE6A09E667F3BCD)      # bits of float64(sqrt(1/2))
_TWO23, _TWOM126 = F32(2.0 ** 23), F32(2.0 ** -126)
_TWO54, _TWOM1022 = F64(2.0 ** 54), F64(2.0 ** -1022)


@vjit
def log_parts_f32(x):
    """For finite x > 0: (e, f, s, hfsq, sR) with log(x) = e*ln2 + f - (hfsq - s*(hfsq+R)).

    e is returned as float32; sR = s*(hfsq + R)."""
    sub = x < _TWOM126
    xs = x * _TWO23 if sub else x
    ix = f32_bits(xs) - _SQRTH32
    e = (ix >> 23) - (23 if sub else 0)
    m = bits_f32((ix & 0x007FFFFF) + _SQRTH32)
    f = m - F32(1.0)
    s = f / (F32(2.0) + f)
    z = s * s
    P = _LOG32
    R = z * (P[0] + z * (P[1] + z * P[2]))
    hfsq = F32(0.5) * f * f
    return F32(e), f, hfsq, s * (hfsq + R)


@vjit
def log_parts_f64(x):
    """float64 version of log_parts_f32."""
    sub = x < _TWOM1022
    xs = x * _TWO54 if sub else x
    ix = f64_bits(xs) - _SQRTH64
    e = (ix >> 52) - (54 if sub else 0)
    m = bits_f64((ix & 0x000FFFFFFFFFFFFF) + _SQRTH64)
    f = m - F64(1.0)
    s = f / (F64(2.0) + f)
    z = s * s
    P = _LOG64
    R = z * (P[0] + z * (P[1] + z * (P[2] + z * (P[3] + z * (P[4] + z * (
        P[5] + z * (P[6] + z * P[7])))))))
    hfsq = F64(0.5) * f * f
    return F64(e), f, hfsq, s * (hfsq + R)


@vjit
def _log_special_f32(x, y):
    y = _NAN32 if x < F32(0.0) else y
    y = -_INF32 if x == F32(0.0) else y
    y = x if x == _INF32 else y
    return y if x == x else x


@vjit
def _log_special_f64(x, y):
    y = _NAN64 if x < F64(0.0) else y
    y = -_INF64 if x == F64(0.0) else y
    y = x if x == _INF64 else y
    return y if x == x else x


@vjit
def log_f32(x):
    """Natural log, float32."""
    x = F32(x)
    e, f, hfsq, sR = log_parts_f32(x)
    y = e * _L2H32 + (f - (hfsq - (sR + e * _L2L32)))
    return _log_special_f32(x, y)


@vjit
def log_f64(x):
    """Natural log, float64."""
    x = F64(x)
    e, f, hfsq, sR = log_parts_f64(x)
    y = e * _L2H64 + (f - (hfsq - (sR + e * _L2L64)))
    return _log_special_f64(x, y)


# log2/log10: hi = f - hfsq with its low bits cleared, so hi times the 12/21-bit head of
# the scale constant is exact; the rest is carried in lo and summed last.
_IVLN2H32, _IVLN2L32 = hi_lo(LOG2E, F32, 12)
_IVLN10H32, _IVLN10L32 = hi_lo(INV_LN10, F32, 12)
_LG2H32, _LG2L32 = hi_lo(LOG10_2, F32, 12)
_IVLN2H64, _IVLN2L64 = hi_lo(LOG2E, F64, 21)
_IVLN10H64, _IVLN10L64 = hi_lo(INV_LN10, F64, 21)
_LG2H64, _LG2L64 = hi_lo(LOG10_2, F64, 21)


@vjit
def _log_hilo_f32(f, hfsq, sR):
    hi = bits_f32(f32_bits(f - hfsq) & np.int32(-4096))
    lo = ((f - hi) - hfsq) + sR
    return hi, lo


@vjit
def _log_hilo_f64(f, hfsq, sR):
    hi = bits_f64(f64_bits(f - hfsq) & np.int64(-4294967296))
    lo = ((f - hi) - hfsq) + sR
    return hi, lo


@vjit
def log2_f32(x):
    """log2, float32 (exact at powers of two)."""
    x = F32(x)
    e, f, hfsq, sR = log_parts_f32(x)
    hi, lo = _log_hilo_f32(f, hfsq, sR)
    vhi = hi * _IVLN2H32
    vlo = (lo + hi) * _IVLN2L32 + lo * _IVLN2H32
    w = e + vhi
    vlo = vlo + ((e - w) + vhi)
    return _log_special_f32(x, vlo + w)


@vjit
def log2_f64(x):
    """log2, float64."""
    x = F64(x)
    e, f, hfsq, sR = log_parts_f64(x)
    hi, lo = _log_hilo_f64(f, hfsq, sR)
    vhi = hi * _IVLN2H64
    vlo = (lo + hi) * _IVLN2L64 + lo * _IVLN2H64
    w = e + vhi
    vlo = vlo + ((e - w) + vhi)
    return _log_special_f64(x, vlo + w)


@vjit
def log10_f32(x):
    """log10, float32."""
    x = F32(x)
    e, f, hfsq, sR = log_parts_f32(x)
    hi, lo = _log_hilo_f32(f, hfsq, sR)
    vhi = hi * _IVLN10H32
    vlo = e * _LG2L32 + (lo + hi) * _IVLN10L32 + lo * _IVLN10H32
    y2 = e * _LG2H32
    w = y2 + vhi
    vlo = vlo + ((y2 - w) + vhi)
    return _log_special_f32(x, vlo + w)


@vjit
def log10_f64(x):
    """log10, float64."""
    x = F64(x)
    e, f, hfsq, sR = log_parts_f64(x)
    hi, lo = _log_hilo_f64(f, hfsq, sR)
    vhi = hi * _IVLN10H64
    vlo = e * _LG2L64 + (lo + hi) * _IVLN10L64 + lo * _IVLN10H64
    y2 = e * _LG2H64
    w = y2 + vhi
    vlo = vlo + ((y2 - w) + vhi)
    return _log_special_f64(x, vlo + w)


def _make_log1p(F, parts, l2h, l2l):
    """log(1 + x + xl) + extra for dtype F, xl and extra small (the low word of a
    double-word argument, a correction of the caller's): log(u) for u = fl(1 + x) plus
    the first-order term (1 + x - u + xl)/u, whose leading part is computed exactly, and
    extra, all before the one final rounding."""
    zero, one, two, inf, nan = F(0.0), F(1.0), F(2.0), F(np.inf), F(np.nan)

    @vjit
    def log1p_dd(x, xl, extra):
        u = one + x
        c = (one - (u - x)) if u >= two else (x - (u - one))
        c = (c + xl) / u + extra
        us = u if u > zero else one
        e, f, hfsq, sR = parts(us)
        y = e * l2h + (f - (hfsq - (sR + (e * l2l + c))))
        y = nan if x < -one else y
        y = -inf if x == -one else y
        y = x if x == inf else y
        y = x if x == zero else y
        return y if x == x else x
    return log1p_dd


log1p_dd_f32 = _make_log1p(F32, log_parts_f32, _L2H32, _L2L32)
log1p_dd_f64 = _make_log1p(F64, log_parts_f64, _L2H64, _L2L64)


@vjit
def log1p_f32(x):
    """log(1 + x), float32."""
    return log1p_dd_f32(F32(x), F32(-0.0), F32(-0.0))


@vjit
def log1p_f64(x):
    """log(1 + x), float64."""
    return log1p_dd_f64(F64(x), F64(-0.0), F64(-0.0))
