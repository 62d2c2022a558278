"""Vectorizable atan, atan2, asin, acos (float32 and float64).

atan: |x| is reduced branch-free to |t| <= 7/16 around one of 0, 1/2, 1, 3/2, inf
(t = (a - c)/(1 + a*c), the numerators exact by Sterbenz), atan(t) = t + t**3 P(t*t)
minimax, plus atan(c) as a hi + lo pair. atan2 feeds |y|/|x| (both scaled by a power of
two so nothing underflows) to the same core, adds the ratio's rounding error (from an
exact product) times atan's derivative, and applies the quadrant and the C99 special
cases with selects. asin/acos: |x| <= 1/2 directly, else the half-angle identity
asin(a) = pi/2 - 2*asin(sqrt((1-a)/2)) with sqrt's rounding error recovered from a
masked copy (fdlibm's scheme).

Each function is written once, for both dtypes: ``functions(FLOAT32).atan`` is atan_f32.
"""
from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np

from primtrace.executors.numba.vmath.core import (PI, PI_2, PI_4, copysign, fabs, float_bits,
                                                  hi_lo, horner, sqrt, two_sum, vjit)

_ATAN_HALF = "0.463647609000806116214256231461214402028537054"
_ATAN_3_2 = "0.982793723247329067985710611014666014496877453"


def _constants(d):
    """atan/asin's constants for dtype d."""
    F = d.F
    bases_hi, bases_lo = zip(*(hi_lo(v, F) for v in ("0", _ATAN_HALF, PI_4, _ATAN_3_2, PI_2)))
    pih, pil = hi_lo(PI, F)
    pio2h, pio2l = hi_lo(PI_2, F)
    return d.with_(
        bases_hi=bases_hi, bases_lo=bases_lo,       # atan of 0, 1/2, 1, 3/2, inf: hi + lo
        atan_poly=horner(d.coeffs("ATAN")), asin_poly=horner(d.coeffs("ASIN")),
        pih=pih, pil=pil, pio2h=pio2h, pio2l=pio2l, pio4h=hi_lo(PI_4, F)[0],
        safe=F(d.pick(2.0 ** -76, 2.0 ** -900)),    # atan2's residual: nothing underflows
        w_mask=d.I(-(1 << d.pick(12, 32))))         # asin's w: t with low bits cleared


@functools.lru_cache(maxsize=None)
def functions(d):
    """atan, atan2, asin, acos and atan's core for dtype d (a core.Floats), by name."""
    K = _constants(d)
    F, bits_to, pow2i, two_prod = K.F, K.bits_to, K.pow2i, K.two_prod
    zero, half, one, one_half, two = F(0.0), F(0.5), F(1.0), F(1.5), F(2.0)
    inf = F(np.inf)
    (b0h, b1h, b2h, b3h, b4h), (b0l, b1l, b2l, b3l, b4l) = K.bases_hi, K.bases_lo
    atan_poly = K.atan_poly

    @vjit
    def atan_core(a, corr):
        """atan(a + corr) == hi + lo for a >= 0 (inf and NaN included), corr a tiny
        correction already scaled by atan's derivative."""
        r1, r2 = a >= F(0.4375), a >= F(0.6875)
        r3, r4 = a >= F(1.1875), a >= F(2.4375)
        num = a
        den = one
        num = (two * a - one) if r1 else num
        den = (two + a) if r1 else den
        num = (a - one) if r2 else num
        den = (a + one) if r2 else den
        num = (a - one_half) if r3 else num
        den = (one + one_half * a) if r3 else den
        num = -one if r4 else num
        den = a if r4 else den
        bh = b4h if r4 else (b3h if r3 else (b2h if r2 else (b1h if r1 else b0h)))
        bl = b4l if r4 else (b3l if r3 else (b2l if r2 else (b1l if r1 else b0l)))
        t = num / den
        z = t * t
        p = t * z * atan_poly(z)
        return bh, (bl + (p + corr)) + t

    @vjit
    def atan(x):
        """atan."""
        x = F(x)
        h, l = atan_core(fabs(x), zero)
        return copysign(h + l, x)

    mant, emask, bias, kmax = K.mant, 2 * K.bias + 1, K.bias, K.bias - 1
    safe, pih, pil = K.safe, K.pih, K.pil

    @vjit
    def atan2(y, x):
        """atan2(y, x), with C99's signed-zero and infinity cases."""
        y, x = F(y), F(x)
        ay, ax = fabs(y), fabs(x)
        # scale both by 2**-exponent(max) so the residual products below cannot underflow
        em = (float_bits(ay if ay > ax else ax) >> mant) & emask
        k = bias - em
        k = k if k < kmax else kmax
        k = k if k > -kmax else -kmax
        sc = pow2i(k)
        ay, ax = ay * sc, ax * sc
        a = ay / ax
        p, pe = two_prod(a, ax)
        corr = (((ay - p) - pe) / ax) / (one + a * a)     # atan' * (rounding error of a)
        # exact residual only when nothing underflows (else a's own 0.5 ULP is the error)
        corr = corr if (ay >= safe) & (a >= safe) & (corr == corr) else zero
        a = zero if (ay == zero) & (ax == zero) else a       # (+-0, +-0)
        a = one if (ay == inf) & (ax == inf) else a          # (+-inf, +-inf)
        h, l = atan_core(a, corr)
        r = h + l
        d, de = two_sum(pih, -h)
        r = (d + ((pil - l) + de)) if float_bits(x) < 0 else r    # x < 0 or x == -0.0
        r = copysign(r, y)
        return r if (x == x) & (y == y) else x + y

    asin_poly, w_mask = K.asin_poly, K.w_mask

    @vjit
    def asin_parts(x):
        """(a, big, t, w, c, p): a = |x|; t = a or sqrt((1-a)/2); asin(t) = t + p;
        w = t with its low bits cleared and c ~ t - w to full precision."""
        a = fabs(x)
        big = a > half
        z = (one - a) * half if big else a * a
        t = sqrt(z) if big else a
        p = t * z * asin_poly(z)
        w = bits_to(float_bits(t) & w_mask)
        den = t + w
        c = (z - w * w) / (den if den != zero else one)
        return a, big, t, w, c, p

    pio2h, pio2l, pio4h = K.pio2h, K.pio2l, K.pio4h

    @vjit
    def asin(x):
        """asin (NaN outside [-1, 1])."""
        x = F(x)
        a, big, t, w, c, p = asin_parts(x)
        yb = pio4h - ((two * p - (pio2l - two * c)) - (pio4h - two * w))
        return copysign(yb if big else a + p, x)

    @vjit
    def acos(x):
        """acos (NaN outside [-1, 1])."""
        x = F(x)
        a, big, t, w, c, p = asin_parts(x)
        ps = copysign(p, x)
        ys = pio2h - (x - (pio2l - ps))
        ypos = two * (w + (c + p))
        yneg = two * (pio2h - (t + (p - pio2l)))
        return (yneg if x < zero else ypos) if big else ys

    return SimpleNamespace(atan_core=atan_core, atan=atan, atan2=atan2, asin=asin, acos=acos)


#: Public functions of this module (vmath's VMATH entries).
NAMES = ("atan", "atan2", "asin", "acos")
