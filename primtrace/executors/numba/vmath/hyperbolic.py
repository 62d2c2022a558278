"""Vectorizable sinh, cosh, tanh, sigmoid, asinh, acosh, atanh (float32 and float64),
built on the exp/expm1/log1p kernels of ``vmath.exp_log``.

The exp and expm1 values come as double-word (hi + lo) sums, so the one rounding that
counts is the last one.

sinh: odd minimax polynomial for |x| < 1; above, e**|x| as (ph + pl) * 2**k so that
h = e/2 = (ph + pl) * 2**(k-1) does not overflow where sinh is still finite, and
sinh = h - 1/(4h). cosh = h + 1/(4h) everywhere (no cancellation).
tanh: odd polynomial for |x| < 0.55, else 1 - 2/(e**2|x| + 1) with a corrected quotient.
sigmoid: with e = exp(-|x|) in (0, 1], 1/(1+e) for x >= 0 and e/(1+e) for x < 0, so
neither side overflows or cancels (float32: plain float32, as eager; float64: double-word
exp and a one-step corrected division).
"""
from __future__ import annotations

from primtrace.executors.numba.vmath import coeffs as C
import numpy as np

from primtrace.executors.numba.vmath.core import (F32, F64, copysign, fabs, ldexp_f32, ldexp_f64,
                                                  pow2i_f32, pow2i_f64, residual, sqrt,
                                                  two_prod_f32, two_prod_f64, two_sum, vjit)
from primtrace.executors.numba.vmath.exp_log import (_exp_parts_f32, _exp_parts_f64,
                                                     exp_core_dd_f32, exp_core_dd_f64, exp_fast_f32,
                                                     log1p_dd_f32, log1p_dd_f64)

_SINH32, _SINH64, _TANH32, _TANH64 = C.SINH_F32, C.SINH_F64, C.TANH_F32, C.TANH_F64


@vjit
def _half_exp_f32(a):
    """e**a / 2 == hh + hl (double-word) without intermediate overflow (a <= 90)."""
    ph, pl, k = exp_core_dd_f32(a)
    return ldexp_f32(ph, k - 1), ldexp_f32(pl, k - 1)


@vjit
def _half_exp_f64(a):
    """e**a / 2 == hh + hl without intermediate overflow (a <= 712)."""
    ph, pl, k = exp_core_dd_f64(a)
    return ldexp_f64(ph, k - 1), ldexp_f64(pl, k - 1)


@vjit
def sinh_f32(x):
    """sinh, float32."""
    x = F32(x)
    a = fabs(x)
    z = a * a
    P = _SINH32
    ys = a + a * z * (P[0] + z * (P[1] + z * (P[2] + z * P[3])))
    hh, hl = _half_exp_f32(a)
    yb = hh + (hl - F32(0.25) / (hh + hl))
    y = copysign(ys if a < F32(1.0) else yb, x)
    return y if x == x else x


@vjit
def sinh_f64(x):
    """sinh, float64."""
    x = F64(x)
    a = fabs(x)
    z = a * a
    P = _SINH64
    ys = a + a * z * (P[0] + z * (P[1] + z * (P[2] + z * (P[3] + z * (P[4] + z * (
        P[5] + z * (P[6] + z * P[7])))))))
    hh, hl = _half_exp_f64(a)
    yb = hh + (hl - F64(0.25) / (hh + hl))
    y = copysign(ys if a < F64(1.0) else yb, x)
    return y if x == x else x


@vjit
def cosh_f32(x):
    """cosh, float32."""
    x = F32(x)
    hh, hl = _half_exp_f32(fabs(x))
    y = hh + (hl + F32(0.25) / (hh + hl))
    return y if x == x else x


@vjit
def cosh_f64(x):
    """cosh, float64."""
    x = F64(x)
    hh, hl = _half_exp_f64(fabs(x))
    y = hh + (hl + F64(0.25) / (hh + hl))
    return y if x == x else x


@vjit
def _tanh_poly_f32(a, z):
    P = _TANH32
    return a + a * z * (P[0] + z * (P[1] + z * (P[2] + z * (P[3] + z * (P[4] + z * P[5])))))


@vjit
def _tanh_poly_f64(a, z):
    P = _TANH64
    return a + a * z * (P[0] + z * (P[1] + z * (P[2] + z * (P[3] + z * (P[4] + z * (P[5] + z * (
        P[6] + z * (P[7] + z * (P[8] + z * (P[9] + z * (P[10] + z * (P[11] + z * (
            P[12] + z * P[13])))))))))))))


def _make_tanh(F, I, parts, pow2i, poly, amax):
    """tanh for dtype F: the odd polynomial below 0.55; above, 1 - q with q = 2/(E + 1),
    E = e**2a as a double-word value from the exp kernel (E >= 3, q <= 1/2): one
    division, corrected by its exact residual times 1/(E + 1) = q/2 (no second division,
    no double-word division), so 1 - q is the one rounding that counts. tanh rounds to 1
    beyond amax (E stays finite there)."""
    one, half, two = F(1.0), F(0.5), F(2.0)

    @vjit
    def tanh(x):
        x = F(x)
        a = fabs(x)
        ys = poly(a, a * a)
        r, tail, kf = parts(two * (amax if a > amax else a))     # NaN passes
        s = one + r
        lo = (r - (s - one)) + tail
        p = s + lo
        sc = pow2i(I(kf))
        eh, el = p * sc, ((s - p) + lo) * sc
        dh = eh + one
        dl = ((eh - dh) + one) + el                 # E + 1 == dh + dl
        q = two / dh
        dq = (residual(q, dh, two) - q * dl) * (half * q)      # 2/(E + 1) == q + dq
        u = one - q
        yb = u + (((one - u) - q) - dq)             # q <= 1/2: one rounding
        return copysign(ys if a < F(0.55) else yb, x)
    return tanh


tanh_f32 = _make_tanh(F32, np.int32, _exp_parts_f32, pow2i_f32, _tanh_poly_f32, F32(9.1))
tanh_f32.__doc__ = "tanh, float32."
tanh_f64 = _make_tanh(F64, np.int64, _exp_parts_f64, pow2i_f64, _tanh_poly_f64, F64(19.1))
tanh_f64.__doc__ = "tanh, float64."


def _make_sigmoid(F, I, parts, pow2i, amax, emin, ksub):
    """1/(1 + e**-x) for dtype F in its own precision. With e = e**-|x| = (p + pl) * 2**k
    from the exp kernel and d = 1 + e as dh + dl (exact), q = 1/dh is corrected by the
    exact residual: y = N/d = N q (1 + rho), N = 1 for x >= 0 and e for x < 0 (so
    nothing cancels or overflows), summed with one rounding before the final 2**k (twice
    for subnormal results). e's own rounding in d costs at most 0.13 ULP."""
    zero, one, tiny = F(0.0), F(1.0), F(2.0 ** -63)
    up, none, kmin = I(63), I(0), I(emin)

    @vjit
    def sigmoid(x):
        x = F(x)
        a = fabs(x)
        a = amax if a > amax else a                 # NaN passes (NaN out, no select)
        r, tail, kf = parts(-a)
        s = one + r
        lo = (r - (s - one)) + tail
        p = s + lo
        pl = (s - p) + lo
        k = I(kf)
        e = p * pow2i(k if k > kmin else kmin)      # below 2**emin, 1 + e == 1 anyway
        dh = one + e
        dl = (one - dh) + e
        q = one / dh
        rho = residual(q, dh, one) - q * dl
        neg = x < zero
        nh = p if neg else one
        y = nh * q + (nh * (q * rho) + (pl if neg else zero) * q)
        kk = k if neg else none
        sub = kk < ksub
        return (y * pow2i(kk + (up if sub else none))) * (tiny if sub else one)
    return sigmoid


sigmoid_f64 = _make_sigmoid(F64, np.int64, _exp_parts_f64, pow2i_f64, F64(746.0), -1022, -1000)


@vjit
def sigmoid_f32(x):
    """1/(1 + e**-x), float32, at eager's cost and accuracy (2.4 ULP; eager 2.5): v =
    e/(1 + e) with e = e**-|x|, then 1 - v for x >= 0 (v <= 1/2, its error halved).
    Rounding e before dividing is what costs (up to 1 ULP of v where e and v sit at
    opposite ends of their binades), so e itself is the cheap ~1 ULP one. 0.8 ULP needs
    e as hi + lo and a corrected quotient, 1.7x the time (see _make_sigmoid)."""
    x = F32(x)
    e = exp_fast_f32(-fabs(x))                                   # NaN passes
    v = e / (F32(1.0) + e)
    return F32(1.0) - v if x >= F32(0.0) else v


# Inverse hyperbolics, all through log1p of a double-word argument uh + ul (so small
# arguments keep their precision; ul enters log1p's correction term before its one final
# rounding): asinh(a) = log1p(a + a*a/(1 + sqrt(1 + a*a))), acosh(x) =
# log1p(t + sqrt(t*t + 2t)) with t = x - 1 (exact near 1) and the square root carried to
# double-word, atanh(a) = log1p(2a/(1 - a))/2 with the quotient's residual. Above
# 2**30 / 2**500, where a*a would lose range, log(2a) = log1p(a) + ln2 (1/a is below half
# an ULP there).
_LN2_32, _LN2_64 = F32(0.6931471805599453), F64(0.6931471805599453)
_BIG32, _BIG64 = F32(2.0 ** 30), F64(2.0 ** 500)
_TINY32, _TINY64 = F32(2.0 ** -12), F64(2.0 ** -28)


@vjit
def _log1p_dd_f32(uh, ul):
    return log1p_dd_f32(uh, ul, F32(-0.0))


@vjit
def _log1p_dd_f64(uh, ul):
    return log1p_dd_f64(uh, ul, F64(-0.0))


@vjit
def asinh_f32(x):
    """asinh, float32."""
    x = F32(x)
    a = fabs(x)
    big = a > _BIG32
    uh, ul = two_sum(a, a * a / (F32(1.0) + sqrt(F32(1.0) + a * a)))
    y = _log1p_dd_f32(a if big else uh, F32(0.0) if big else ul)
    y = copysign(y + (_LN2_32 if big else F32(0.0)), x)
    return x if a < _TINY32 else y


@vjit
def asinh_f64(x):
    """asinh, float64."""
    x = F64(x)
    a = fabs(x)
    big = a > _BIG64
    uh, ul = two_sum(a, a * a / (F64(1.0) + sqrt(F64(1.0) + a * a)))
    y = _log1p_dd_f64(a if big else uh, F64(0.0) if big else ul)
    y = copysign(y + (_LN2_64 if big else F64(0.0)), x)
    return x if a < _TINY64 else y


@vjit
def _acosh_arg_f32(t):
    """t + sqrt(t*t + 2t) as a double-word value."""
    t2h, t2l = two_prod_f32(t, t)
    wh, we = two_sum(F32(2.0) * t, t2h)
    wl = we + t2l
    sh = sqrt(wh)
    p, pe = two_prod_f32(sh, sh)
    sl = (((wh - p) - pe) + wl) / (F32(2.0) * sh)
    sl = sl if sh > F32(0.0) else F32(0.0)
    uh, ue = two_sum(t, sh)
    return uh, ue + sl


@vjit
def _acosh_arg_f64(t):
    """t + sqrt(t*t + 2t) as a double-word value."""
    t2h, t2l = two_prod_f64(t, t)
    wh, we = two_sum(F64(2.0) * t, t2h)
    wl = we + t2l
    sh = sqrt(wh)
    p, pe = two_prod_f64(sh, sh)
    sl = (((wh - p) - pe) + wl) / (F64(2.0) * sh)
    sl = sl if sh > F64(0.0) else F64(0.0)
    uh, ue = two_sum(t, sh)
    return uh, ue + sl


@vjit
def acosh_f32(x):
    """acosh, float32 (NaN below 1)."""
    x = F32(x)
    big = x > _BIG32
    uh, ul = _acosh_arg_f32(F32(1.0) if big else x - F32(1.0))
    y = _log1p_dd_f32(x if big else uh, F32(0.0) if big else ul)
    y = y + (_LN2_32 if big else F32(0.0))
    return y if x >= F32(1.0) else F32(np.nan) + x


@vjit
def acosh_f64(x):
    """acosh, float64 (NaN below 1)."""
    x = F64(x)
    big = x > _BIG64
    uh, ul = _acosh_arg_f64(F64(1.0) if big else x - F64(1.0))
    y = _log1p_dd_f64(x if big else uh, F64(0.0) if big else ul)
    y = y + (_LN2_64 if big else F64(0.0))
    return y if x >= F64(1.0) else F64(np.nan) + x


def _make_atanh(F, two_sum_, log1p_dd, tiny):
    """atanh(a) = log1p(t)/2, t = 2a/(1 - a), t as t0 + rho/(1 - a) (1 - a as hi + lo,
    rho the quotient's exact residual); log1p then adds rho/(1 - a)/(1 + t) =
    rho/(1 + a) (1/(1 + a) to 1.2%, plenty for a last-bit term) before its one
    rounding: log1p's own error is all that is left (+-inf at +-1, NaN beyond)."""
    one, half = F(1.0), F(0.5)
    k0, k1, k2 = F(0.99137803), F(-0.81832586), F(0.33304448)    # ~1/(1 + a) on [0, 1]

    @vjit
    def atanh(x):
        x = F(x)
        a = fabs(x)
        dh, dl = two_sum_(one, -a)
        t = (a + a) / dh
        rho = residual(t, dh, a + a) - t * dl
        y = log1p_dd(t, -F(0.0), rho * (k0 + a * (k1 + a * k2)))
        y = copysign(half * y, x)
        return x if a < tiny else y
    return atanh


atanh_f32 = _make_atanh(F32, two_sum, log1p_dd_f32, _TINY32)
atanh_f32.__doc__ = "atanh, float32."
atanh_f64 = _make_atanh(F64, two_sum, log1p_dd_f64, _TINY64)
atanh_f64.__doc__ = "atanh, float64."
