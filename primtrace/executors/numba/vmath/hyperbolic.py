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

Each function is written once, for both dtypes (float32 sigmoid excepted, see there):
``functions(FLOAT32).sinh`` is sinh_f32.
"""
from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np

from primtrace.executors.numba.vmath import exp_log
from primtrace.executors.numba.vmath.core import (F32, copysign, fabs, horner, residual, sqrt,
                                                  two_sum, vjit)


def _constants(d):
    """The hyperbolics' constants for dtype d."""
    F = d.F
    return d.with_(
        sinh_poly=horner(d.coeffs("SINH")), tanh_poly=horner(d.coeffs("TANH")),
        tanh_amax=F(d.pick(9.1, 19.1)),             # tanh rounds to 1 beyond
        sigmoid_amax=F(746.0), sigmoid_emin=-1022, sigmoid_ksub=-1000,   # float64 only
        ln2=F(0.6931471805599453),
        big=F(d.pick(2.0 ** 30, 2.0 ** 500)),       # a*a would lose range above
        tiny=F(d.pick(2.0 ** -12, 2.0 ** -28)))     # asinh, atanh(x) = x below


def _exp_based(K, e):
    """sinh, cosh, tanh, sigmoid for the dtype of K (e: exp_log's functions for it)."""
    F, I, ldexp, pow2i = K.F, K.I, K.ldexp, K.pow2i
    zero, quarter, half, one, two = F(0.0), F(0.25), F(0.5), F(1.0), F(2.0)
    exp_core_dd, parts = e.exp_core_dd, e.exp_parts

    @vjit
    def half_exp(a):
        """e**a / 2 == hh + hl (double-word) without intermediate overflow."""
        ph, pl, k = exp_core_dd(a)
        return ldexp(ph, k - 1), ldexp(pl, k - 1)

    sinh_poly = K.sinh_poly

    @vjit
    def sinh(x):
        """sinh."""
        x = F(x)
        a = fabs(x)
        z = a * a
        ys = a + a * z * sinh_poly(z)
        hh, hl = half_exp(a)
        yb = hh + (hl - quarter / (hh + hl))
        y = copysign(ys if a < one else yb, x)
        return y if x == x else x

    @vjit
    def cosh(x):
        """cosh."""
        x = F(x)
        hh, hl = half_exp(fabs(x))
        y = hh + (hl + quarter / (hh + hl))
        return y if x == x else x

    tanh_poly, amax = K.tanh_poly, K.tanh_amax

    @vjit
    def tanh(x):
        """tanh: the odd polynomial below 0.55; above, 1 - q with q = 2/(E + 1),
        E = e**2a as a double-word value from the exp kernel (E >= 3, q <= 1/2): one
        division, corrected by its exact residual times 1/(E + 1) = q/2 (no second
        division, no double-word division), so 1 - q is the one rounding that counts.
        tanh rounds to 1 beyond amax (E stays finite there)."""
        x = F(x)
        a = fabs(x)
        ys = a + a * (a * a) * tanh_poly(a * a)
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

    if K.F is F32:
        # float32 rounds e**-|x| before dividing, as eager does (a different algorithm)
        exp_fast = e.exp_fast

        @vjit
        def sigmoid(x):
            """1/(1 + e**-x), float32, at eager's cost and accuracy (2.4 ULP; eager
            2.5): v = e/(1 + e) with e = e**-|x|, then 1 - v for x >= 0 (v <= 1/2, its
            error halved). Rounding e before dividing is what costs (up to 1 ULP of v
            where e and v sit at opposite ends of their binades), so e itself is the cheap
            ~1 ULP one. 0.8 ULP needs e as hi + lo and a corrected quotient, 1.7x the time
            (the float64 algorithm)."""
            x = F(x)
            e = exp_fast(-fabs(x))                                   # NaN passes
            v = e / (one + e)
            return one - v if x >= zero else v
    else:
        sigmoid = _sigmoid_dd(K, parts)
    return dict(sinh=sinh, cosh=cosh, tanh=tanh, sigmoid=sigmoid)


def _sigmoid_dd(K, parts):
    """1/(1 + e**-x) for dtype F in its own precision. With e = e**-|x| = (p + pl) * 2**k
    from the exp kernel and d = 1 + e as dh + dl (exact), q = 1/dh is corrected by the
    exact residual: y = N/d = N q (1 + rho), N = 1 for x >= 0 and e for x < 0 (so
    nothing cancels or overflows), summed with one rounding before the final 2**k (twice
    for subnormal results). e's own rounding in d costs at most 0.13 ULP."""
    F, I, pow2i = K.F, K.I, K.pow2i
    zero, one, tiny = F(0.0), F(1.0), F(2.0 ** -63)
    up, none, kmin = I(63), I(0), I(K.sigmoid_emin)
    amax, ksub = K.sigmoid_amax, K.sigmoid_ksub

    @vjit
    def sigmoid(x):
        """1/(1 + e**-x) (float64: 0.74 ULP)."""
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


def _inverse(K, e):
    """asinh, acosh, atanh for the dtype of K (e: exp_log's functions for it).

    All through log1p of a double-word argument uh + ul (so small arguments keep their
    precision; ul enters log1p's correction term before its one final rounding):
    asinh(a) = log1p(a + a*a/(1 + sqrt(1 + a*a))), acosh(x) = log1p(t + sqrt(t*t + 2t))
    with t = x - 1 (exact near 1) and the square root carried to double-word, atanh(a) =
    log1p(2a/(1 - a))/2 with the quotient's residual. Above 2**30 / 2**500, where a*a
    would lose range, log(2a) = log1p(a) + ln2 (1/a is below half an ULP there)."""
    F, two_prod = K.F, K.two_prod
    zero, half, one, two, nan = F(0.0), F(0.5), F(1.0), F(2.0), F(np.nan)
    ln2, big, tiny, log1p_dd = K.ln2, K.big, K.tiny, e.log1p_dd

    @vjit
    def log1p_dd2(uh, ul):
        return log1p_dd(uh, ul, F(-0.0))

    @vjit
    def asinh(x):
        """asinh."""
        x = F(x)
        a = fabs(x)
        isbig = a > big
        uh, ul = two_sum(a, a * a / (one + sqrt(one + a * a)))
        y = log1p_dd2(a if isbig else uh, zero if isbig else ul)
        y = copysign(y + (ln2 if isbig else zero), x)
        return x if a < tiny else y

    @vjit
    def acosh_arg(t):
        """t + sqrt(t*t + 2t) as a double-word value."""
        t2h, t2l = two_prod(t, t)
        wh, we = two_sum(two * t, t2h)
        wl = we + t2l
        sh = sqrt(wh)
        p, pe = two_prod(sh, sh)
        sl = (((wh - p) - pe) + wl) / (two * sh)
        sl = sl if sh > zero else zero
        uh, ue = two_sum(t, sh)
        return uh, ue + sl

    @vjit
    def acosh(x):
        """acosh (NaN below 1)."""
        x = F(x)
        isbig = x > big
        uh, ul = acosh_arg(one if isbig else x - one)
        y = log1p_dd2(x if isbig else uh, zero if isbig else ul)
        y = y + (ln2 if isbig else zero)
        return y if x >= one else nan + x

    k0, k1, k2 = F(0.99137803), F(-0.81832586), F(0.33304448)    # ~1/(1 + a) on [0, 1]

    @vjit
    def atanh(x):
        """atanh(a) = log1p(t)/2, t = 2a/(1 - a), t as t0 + rho/(1 - a) (1 - a as hi + lo,
        rho the quotient's exact residual); log1p then adds rho/(1 - a)/(1 + t) =
        rho/(1 + a) (1/(1 + a) to 1.2%, plenty for a last-bit term) before its one
        rounding: log1p's own error is all that is left (+-inf at +-1, NaN beyond)."""
        x = F(x)
        a = fabs(x)
        dh, dl = two_sum(one, -a)
        t = (a + a) / dh
        rho = residual(t, dh, a + a) - t * dl
        y = log1p_dd(t, -F(0.0), rho * (k0 + a * (k1 + a * k2)))
        y = copysign(half * y, x)
        return x if a < tiny else y

    return dict(asinh=asinh, acosh=acosh, atanh=atanh)


@functools.lru_cache(maxsize=None)
def functions(d):
    """sinh, cosh, tanh, sigmoid, asinh, acosh, atanh for dtype d (a core.Floats)."""
    K, e = _constants(d), exp_log.functions(d)
    return SimpleNamespace(**_exp_based(K, e), **_inverse(K, e))


#: Public functions of this module (vmath's VMATH entries).
NAMES = ("sinh", "cosh", "tanh", "sigmoid", "asinh", "acosh", "atanh")
