"""Vectorizable pow(x, y) (float32 and float64) with C99/torch special cases.

|x|**y = 2**(y * log2|x|). The product can reach +-1075, so log2|x| must be known to
about 2**-66 relative for the float64 result to stay near 1 ULP: log2_dd_f64 returns it as
a double-word value (s = f/(1+m) with its division residual; s**3, s**5 and the two
leading series terms as double-word products, so the plain-double rest is below 2**-17 of
the sum; the log2(e) scaling as a double-word product),
and exp2_core_f64 takes the double-word exponent. float32 pow evaluates the same formula
in float64 (one log2 and one exp2 at plain double precision give ~2**-45, far below a
float32 ULP): cheaper than float32 double-word arithmetic without FMA.

Signs and special values are selects on the float inputs (integer-ness of y is
rint(y) == y, oddness rint(y/2) != y/2, so no float->int conversion is needed).
"""
from __future__ import annotations

import numpy as np

from primtrace.executors.numba.vmath import coeffs as C
from primtrace.executors.numba.vmath.core import (F32, F64, LOG2E, bits_f64, f32_bits, f64_bits,
                                                  fabs, fast_two_sum, hi_lo, ldexp_f64, pow2i_f64,
                                                  rint, two_prod_f64, two_sum, vjit)
from primtrace.executors.numba.vmath.exp_log import exp2_core_f64, log_parts_f64

_LOG64, _EXP2_64 = C.LOG_F64, C.EXP2_F64
_SQRTH64 = np.int64(0x3FE6A09E667F3BCD)
_TWO54, _TWOM1022 = F64(2.0 ** 54), F64(2.0 ** -1022)
_LOG2EH, _LOG2EL = hi_lo(LOG2E, F64)
_LOG2E64 = _LOG2EH


@vjit
def log2_dd_f64(ax):
    """log2(ax) == h + l to about 2**-68 relative, for finite ax > 0."""
    sub = ax < _TWOM1022
    xs = ax * _TWO54 if sub else ax
    ix = f64_bits(xs) - _SQRTH64
    e = F64((ix >> 52) - (54 if sub else 0))
    m = bits_f64((ix & 0x000FFFFFFFFFFFFF) + _SQRTH64)
    f = m - F64(1.0)                               # exact
    dh, dl = two_sum(F64(1.0), m)                  # 1 + m exactly
    sh = f / dh
    p, pe = two_prod_f64(sh, dh)
    sl = (((f - p) - pe) - sh * dl) / dh           # s = f/(1+m) = sh + sl
    zh, zl = two_prod_f64(sh, sh)
    zl = zl + F64(2.0) * sh * sl                   # s**2 = zh + zl
    ch, cl = two_prod_f64(sh, zh)                  # s**3 = ch + cl
    cl = cl + (sh * zl + zh * sl)
    fh, fl = two_prod_f64(ch, zh)                  # s**5 = fh + fl
    fl = fl + (ch * zl + cl * zh)
    P = _LOG64
    d_h, d_l = two_prod_f64(ch, P[0])              # P0 s**3, double-word
    d_l = d_l + cl * P[0]
    g_h, g_l = two_prod_f64(fh, P[1])              # P1 s**5, double-word
    g_l = g_l + fl * P[1]
    q = P[2] + zh * (P[3] + zh * (P[4] + zh * (P[5] + zh * (P[6] + zh * P[7]))))
    # log(m) = 2s + P0 s**3 + P1 s**5 + s**7 Q(s*s), the last term below 2**-17 of the sum
    lh, e1 = fast_two_sum(F64(2.0) * sh, d_h)
    lh, e2 = fast_two_sum(lh, g_h)
    ll = (e1 + e2) + ((F64(2.0) * sl + d_l) + (g_l + fh * zh * q))
    qh, qe = two_prod_f64(lh, _LOG2EH)
    qe = qe + (lh * _LOG2EL + ll * _LOG2EH)
    h, l1 = fast_two_sum(e, qh)
    return fast_two_sum(h, l1 + qe)


def _make_special(F, sign_of):
    """pow's special cases for dtype F, given r = |x|**y from the main path (which is
    already right for finite x != 0 and for y = +-inf with |x| != 1), as four selects."""
    one, zero, half = F(1.0), F(0.0), F(0.5)
    inf, nan = F(np.inf), F(np.nan)

    @vjit
    def special(x, y, r):
        ax = fabs(x)
        yint = rint(y) == y                      # +-inf count as (even) integers
        yh = y * half
        yodd = yint & (rint(yh) != yh)
        # 0**y and inf**y: +inf when (base is 0) == (y < 0), else +0
        r = (inf if (ax == zero) == (y < zero) else zero) if (ax == zero) | (ax == inf) else r
        r = -r if (sign_of(x) < 0) & yodd else r          # odd powers keep x's sign (-0 too)
        bad = (x != x) | (y != y) | ((x < zero) & (ax < inf) & ~yint)
        r = nan if bad else r                             # NaN in, or (finite x < 0)**non-int
        unit = (y == zero) | (x == one) | ((ax == one) & (fabs(y) == inf))
        return one if unit else r                         # x**0, 1**y, (-1)**+-inf
    return special


_special_f32 = _make_special(F32, f32_bits)
_special_f64 = _make_special(F64, f64_bits)


@vjit
def pow_f64(x, y):
    """x**y, float64, C99 special cases."""
    x, y = F64(x), F64(y)
    ax = fabs(x)
    axs = ax if (ax > F64(0.0)) & (ax < F64(np.inf)) else F64(1.0)
    lh, ll = log2_dd_f64(axs)
    th, tl = two_prod_f64(y, lh)
    tl = tl + y * ll
    ok = fabs(th) < F64(1100.0)
    thc = th if ok else (F64(1100.0) if th > F64(0.0) else F64(-1100.0))
    p, k = exp2_core_f64(thc, tl if ok else F64(0.0))
    return _special_f64(x, y, ldexp_f64(p, k))


@vjit
def pow_f32(x, y):
    """x**y, float32, evaluated in float64 then rounded once."""
    x, y = F32(x), F32(y)
    ax = F64(fabs(x))
    axs = ax if (ax > F64(0.0)) & (ax < F64(np.inf)) else F64(1.0)
    e, f, hfsq, sR = log_parts_f64(axs)
    t = F64(y) * (e + (f - (hfsq - sR)) * _LOG2E64)
    t = t if t > F64(-200.0) else F64(-200.0)
    t = t if t < F64(200.0) else F64(200.0)
    kf = rint(t)
    r = t - kf                                       # exact
    P = _EXP2_64                                     # 2**r = 1 + r P(r), plain float64
    p = F64(1.0) + r * (P[0] + r * (P[1] + r * (P[2] + r * (P[3] + r * (P[4] + r * (
        P[5] + r * (P[6] + r * (P[7] + r * (P[8] + r * (P[9] + r * P[10]))))))))))
    return _special_f32(x, y, F32(p * pow2i_f64(np.int64(kf))))
