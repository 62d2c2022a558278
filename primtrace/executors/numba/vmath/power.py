"""Vectorizable pow(x, y) (float32 and float64) with C99/torch special cases.

|x|**y = 2**(y * log2|x|). The product can reach +-1075, so log2|x| must be known to
about 2**-66 relative for the float64 result to stay near 1 ULP: log2_dd_f64 returns it as
a double-word value (s = f/(1+m) with its division residual; s**3, s**5 and the two
leading series terms as double-word products, so the plain-double rest is below 2**-17 of
the sum; the log2(e) scaling as a double-word product), and exp_log's exp2_core takes the
double-word exponent. float32 pow evaluates the same formula in float64 (one log2 and one
exp2 at plain double precision give ~2**-45, far below a float32 ULP): cheaper than
float32 double-word arithmetic without FMA.

Signs and special values are selects on the float inputs (integer-ness of y is
rint(y) == y, oddness rint(y/2) != y/2, so no float->int conversion is needed), written
once for both dtypes.
"""
from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np

from primtrace.executors.numba.vmath import coeffs as C
from primtrace.executors.numba.vmath import exp_log
from primtrace.executors.numba.vmath.core import (F32, F64, FLOAT64, LOG2E, fabs, fast_two_sum,
                                                  float_bits, hi_lo, horner, rint, two_sum,
                                                  vjit)

_LOG64, _LOG_FROM2 = C.LOG_F64, horner(C.LOG_F64[2:])
_EXP2_64 = horner(C.EXP2_F64)
_SQRTH64 = np.int64(0x3FE6A09E667F3BCD)
_TWO54, _TWOM1022 = F64(2.0 ** 54), F64(2.0 ** -1022)
_LOG2EH, _LOG2EL = hi_lo(LOG2E, F64)
_LOG2E64 = _LOG2EH
_bits_f64, _two_prod64 = FLOAT64.bits_to, FLOAT64.two_prod
_ldexp64, _pow2i64 = FLOAT64.ldexp, FLOAT64.pow2i
_exp64 = exp_log.functions(FLOAT64)
_exp2_core64, _log_parts64 = _exp64.exp2_core, _exp64.log_parts


@vjit
def log2_dd_f64(ax):
    """log2(ax) == h + l to about 2**-68 relative, for finite ax > 0."""
    sub = ax < _TWOM1022
    xs = ax * _TWO54 if sub else ax
    ix = float_bits(xs) - _SQRTH64
    e = F64((ix >> 52) - (54 if sub else 0))
    m = _bits_f64((ix & 0x000FFFFFFFFFFFFF) + _SQRTH64)
    f = m - F64(1.0)                               # exact
    dh, dl = two_sum(F64(1.0), m)                  # 1 + m exactly
    sh = f / dh
    p, pe = _two_prod64(sh, dh)
    sl = (((f - p) - pe) - sh * dl) / dh           # s = f/(1+m) = sh + sl
    zh, zl = _two_prod64(sh, sh)
    zl = zl + F64(2.0) * sh * sl                   # s**2 = zh + zl
    ch, cl = _two_prod64(sh, zh)                   # s**3 = ch + cl
    cl = cl + (sh * zl + zh * sl)
    fh, fl = _two_prod64(ch, zh)                   # s**5 = fh + fl
    fl = fl + (ch * zl + cl * zh)
    P = _LOG64
    d_h, d_l = _two_prod64(ch, P[0])               # P0 s**3, double-word
    d_l = d_l + cl * P[0]
    g_h, g_l = _two_prod64(fh, P[1])               # P1 s**5, double-word
    g_l = g_l + fl * P[1]
    q = _LOG_FROM2(zh)
    # log(m) = 2s + P0 s**3 + P1 s**5 + s**7 Q(s*s), the last term below 2**-17 of the sum
    lh, e1 = fast_two_sum(F64(2.0) * sh, d_h)
    lh, e2 = fast_two_sum(lh, g_h)
    ll = (e1 + e2) + ((F64(2.0) * sl + d_l) + (g_l + fh * zh * q))
    qh, qe = _two_prod64(lh, _LOG2EH)
    qe = qe + (lh * _LOG2EL + ll * _LOG2EH)
    h, l1 = fast_two_sum(e, qh)
    return fast_two_sum(h, l1 + qe)


# |x|**y for finite x != 0 and any y (special() patches the rest): float32 and float64
# twins on purpose, float32 evaluates it in float64 and rounds once.
@vjit
def _abs_pow_f64(x, y):
    """|x|**y, float64: y * log2|x| as a double-word product, then exp2 of it."""
    ax = fabs(x)
    axs = ax if (ax > F64(0.0)) & (ax < F64(np.inf)) else F64(1.0)
    lh, ll = log2_dd_f64(axs)
    th, tl = _two_prod64(y, lh)
    tl = tl + y * ll
    ok = fabs(th) < F64(1100.0)
    thc = th if ok else (F64(1100.0) if th > F64(0.0) else F64(-1100.0))
    p, k = _exp2_core64(thc, tl if ok else F64(0.0))
    return _ldexp64(p, k)


@vjit
def _abs_pow_f32(x, y):
    """|x|**y, float32: evaluated in plain float64 then rounded once."""
    ax = F64(fabs(x))
    axs = ax if (ax > F64(0.0)) & (ax < F64(np.inf)) else F64(1.0)
    e, f, hfsq, sR = _log_parts64(axs)
    t = F64(y) * (e + (f - (hfsq - sR)) * _LOG2E64)
    t = t if t > F64(-200.0) else F64(-200.0)
    t = t if t < F64(200.0) else F64(200.0)
    kf = rint(t)
    r = t - kf                                       # exact
    p = F64(1.0) + r * _EXP2_64(r)                   # 2**r = 1 + r P(r), plain float64
    return F32(p * _pow2i64(np.int64(kf)))


@functools.lru_cache(maxsize=None)
def functions(d):
    """pow for dtype d (a core.Floats), in a namespace."""
    F = d.F
    one, zero, half = F(1.0), F(0.0), F(0.5)
    inf, nan = F(np.inf), F(np.nan)
    abs_pow = d.pick(_abs_pow_f32, _abs_pow_f64)

    @vjit
    def special(x, y, r):
        """pow's special cases, given r = |x|**y from the main path (which is already
        right for finite x != 0 and for y = +-inf with |x| != 1), as four selects."""
        ax = fabs(x)
        yint = rint(y) == y                      # +-inf count as (even) integers
        yh = y * half
        yodd = yint & (rint(yh) != yh)
        # 0**y and inf**y: +inf when (base is 0) == (y < 0), else +0
        r = (inf if (ax == zero) == (y < zero) else zero) if (ax == zero) | (ax == inf) else r
        r = -r if (float_bits(x) < 0) & yodd else r       # odd powers keep x's sign (-0 too)
        bad = (x != x) | (y != y) | ((x < zero) & (ax < inf) & ~yint)
        r = nan if bad else r                             # NaN in, or (finite x < 0)**non-int
        unit = (y == zero) | (x == one) | ((ax == one) & (fabs(y) == inf))
        return one if unit else r                         # x**0, 1**y, (-1)**+-inf

    @vjit
    def pow(x, y):
        """x**y, C99 special cases."""
        x, y = F(x), F(y)
        return special(x, y, abs_pow(x, y))

    return SimpleNamespace(pow=pow)


#: Public functions of this module (vmath's VMATH entries).
NAMES = ("pow",)
