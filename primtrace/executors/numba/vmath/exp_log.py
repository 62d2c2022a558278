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

Each function is written once, for both dtypes: ``functions(FLOAT32).exp`` is exp_f32.
"""
from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np

from primtrace.executors.numba.vmath.core import (F32, INV_LN10, LN2, LOG2E, LOG10_2,
                                                  fast_two_sum, float_bits, hi_lo, horner,
                                                  rint, two_sum, vjit)


def _constants(d):
    """exp/log's constants for dtype d: coefficients, split constants, clamp bounds."""
    F, pick = d.F, d.pick
    exp2_coeffs = d.coeffs("EXP2")
    # log2/log10: hi = f - hfsq with its low bits cleared, so hi times the 12/21-bit head
    # of the scale constant is exact; the rest is carried in lo and summed last
    head = pick(12, 21)
    l2h, l2l = hi_lo(LN2, F, pick(16, 42))
    ivln2h, ivln2l = hi_lo(LOG2E, F, head)
    ivln10h, ivln10l = hi_lo(INV_LN10, F, head)
    lg2h, lg2l = hi_lo(LOG10_2, F, head)
    return d.with_(
        log2e=hi_lo(LOG2E, F)[0], ln2=hi_lo(LN2, F)[0], l2h=l2h, l2l=l2l,
        exp_poly=horner(d.coeffs("EXP")), exp2_poly=horner(exp2_coeffs),
        exp2_c0=exp2_coeffs[0], exp2_tail_poly=horner(exp2_coeffs[1:]),
        log_poly=horner(d.coeffs("LOG")),
        exp_lo=F(pick(-104.0, -746.0)), exp_hi=F(pick(89.0, 709.9)),   # exp's clamps
        tail_hi=F(pick(90.0, 712.0)),                                    # exp_tail's
        scale_kmin=pick(-124, -1020),               # scale: subnormal results below this
        exp2_lo=F(pick(-152.0, -1080.0)), exp2_hi=F(pick(130.0, 1030.0)),
        expm1_lo=F(pick(-18.0, -40.0)),             # expm1 is -1 below
        expm1_tmax=pick(64, 512), expm1_kmax=pick(126, 1022),
        expm1_kbig=d.mant + 1,                      # beyond, -1 no longer matters
        sqrth=d.I(pick(0x3F3504F3, 0x3FE6A09E667F3BCD)),   # bits of sqrt(1/2)
        mant_mask=(1 << d.mant) - 1,
        sub_bits=pick(23, 54),                      # subnormals pre-scaled by 2**sub_bits
        hilo_mask=d.I(-(1 << pick(12, 32))),
        ivln2h=ivln2h, ivln2l=ivln2l, ivln10h=ivln10h, ivln10l=ivln10l, lg2h=lg2h, lg2l=lg2l)


def _exp_kernels(K):
    """The reductions and double-word kernels the exp functions (and sinh, cosh, tanh,
    sigmoid, erfc, pow) are built from, for the dtype of K."""
    F, I, pow2i = K.F, K.I, K.pow2i
    one, lo, tail_hi = F(1.0), K.exp_lo, K.tail_hi
    log2e, l2h, l2l, ln2, exp_poly = K.log2e, K.l2h, K.l2l, K.ln2, K.exp_poly
    c0, tail_poly, two_prod = K.exp2_c0, K.exp2_tail_poly, K.two_prod

    @vjit
    def reduce_ln2(x, kf):
        """x - kf*ln2 as r + c: x - kf*L2H is exact, c is the rounding error of the second
        subtraction (kept so expm1 near its k boundaries stays under 1 ULP)."""
        rh = x - kf * l2h
        rl = kf * l2l
        r = rh - rl
        return r, (rh - r) - rl

    @vjit
    def exp_parts(x):
        """(r, tail, kf) with e**x = (1 + r + tail) * 2**kf for |x| <= -lo (NaN in, NaN
        out): tail = r*r*P(r) + c*(1 + r), c the rounding error of r (c alone: 0.1 ULP
        more)."""
        kf = rint(x * log2e)
        r, c = reduce_ln2(x, kf)
        return r, r * r * exp_poly(r) + (c + c * r), kf

    @vjit
    def exp_tail(x):
        """(r, tail, k) with e**x = (1 + r + tail) * 2**k, |r| <= ln2/2 and tail the small
        rest; x clamped to [lo, tail_hi] (NaN -> lo: callers patch NaN)."""
        x = x if x > lo else lo
        x = x if x < tail_hi else tail_hi
        r, tail, kf = exp_parts(x)
        return r, tail, I(kf)

    @vjit
    def exp_core(x):
        """e**x == p * 2**k with p in [0.7, 1.42], one rounding (1 + r exactly as s + e)."""
        r, tail, k = exp_tail(x)
        s, e = fast_two_sum(one, r)
        return s + (e + tail), k

    @vjit
    def exp_core_dd(x):
        """e**x == (ph + pl) * 2**k, ph + pl a double-word value (for sinh, cosh)."""
        r, tail, k = exp_tail(x)
        ph, e = fast_two_sum(one, r)
        return ph, e + tail, k

    @vjit
    def exp_dd(x, xl):
        """e**(x + xl) == (ph + pl) * 2**k for x + xl an unevaluated sum with |xl| small
        and x - k*L2H exact (erfc's e**-a*a, where x = -(a_hi)**2 is exact)."""
        x = x if x > lo else lo
        kf = rint((x + xl) * log2e)
        rh = x - kf * l2h
        rl = xl - kf * l2l
        r = rh + rl
        c = (rh - r) + rl
        q = exp_poly(r)
        ph, e = fast_two_sum(one, r)
        return ph, e + (r * r * q + c), I(kf)

    @vjit
    def exp2_core(h, l):
        """2**(h + l) as (p, k), h + l an unevaluated sum (float64: |h| <= 1100, for
        pow); the r*c0 term is an exact product so p carries one rounding."""
        kf = rint(h)
        rh = h - kf                  # exact
        r = rh + l
        c = (rh - r) + l             # rounding error of r, carried to first order
        q = tail_poly(r)
        ph, pe = two_prod(r, c0)                # the leading term exactly
        s, e = fast_two_sum(one, ph)
        return s + (e + (pe + (r * r * q + c * ln2))), I(kf)

    kmin, two, tiny = K.scale_kmin, F(2.0), F(2.0 ** -63)
    up, down = I(63), I(-1)

    @vjit
    def scale(p, k):
        """p * 2**k for p in [0.7, 1.42] and k <= emax + 1, as p * 2**(k-1) * 2, whose
        last factor overflows to inf (no select); subnormal results (k < kmin) as
        p * 2**(k+63) * 2**-63, rounded twice there (<= 0.75 ULP)."""
        sub = k < kmin
        return (p * pow2i(k + (up if sub else down))) * (tiny if sub else two)

    return dict(reduce_ln2=reduce_ln2, exp_parts=exp_parts, exp_tail=exp_tail,
                exp_core=exp_core, exp_core_dd=exp_core_dd, exp_dd=exp_dd,
                exp2_core=exp2_core, scale=scale)


def _exp_functions(K, kern):
    """exp, exp_fast, exp2, expm1 for the dtype of K."""
    F, I, pow2i, ldexp = K.F, K.I, K.pow2i, K.ldexp
    zero, one = F(0.0), F(1.0)
    lo, hi, log2e, l2h, l2l, poly = K.exp_lo, K.exp_hi, K.log2e, K.l2h, K.l2l, K.exp_poly
    parts, scale, exp_tail, exp2_core = (kern["exp_parts"], kern["scale"], kern["exp_tail"],
                                         kern["exp2_core"])

    @vjit
    def exp(x):
        """e**x: x clamped to [lo, hi] with NaN passing through (so 2**(k-1) is finite and
        no final NaN select is needed), 1 + r + tail summed with one rounding (1 + r as
        s + e, exactly), then scaled by 2**k. float32: 0.59 ULP; 0.75 for subnormal
        results."""
        x = F(x)
        xc = hi if x > hi else x
        xc = lo if xc < lo else xc
        r, tail, kf = parts(xc)
        s = one + r
        return scale(s + ((r - (s - one)) + tail), I(kf))

    @vjit
    def exp_fast(x):
        """e**x within 1 ULP at about 60% of exp's cost: the SLEEF-style shortcut (no
        reduction-error term, 1 + (r + tail) rounded twice). What eager's silu and sigmoid
        use inside (torch.exp itself is MKL's, 0.56 ULP, which exp_f32 matches); for
        contexts where the next operation's rounding dominates anyway."""
        x = F(x)
        xc = hi if x > hi else x                      # NaN passes
        xc = lo if xc < lo else xc
        kf = rint(xc * log2e)
        r = (xc - kf * l2h) - kf * l2l
        return scale(one + (r + r * r * poly(r)), I(kf))

    if K.F is F32:
        # float32: a plain polynomial is within 1 ULP (float64 needs exp2_core's
        # double-word sum), and rint(x), x - rint(x) are exact, so integer x gives exact
        # powers of two
        exp2_poly = K.exp2_poly

        @vjit
        def exp2_parts(h):
            kf = rint(h)
            r = h - kf
            return one + r * exp2_poly(r), I(kf)
    else:
        @vjit
        def exp2_parts(h):
            return exp2_core(h, zero)

    exp2_lo, exp2_hi = K.exp2_lo, K.exp2_hi

    @vjit
    def exp2(x):
        """2**x."""
        x = F(x)
        xc = x if x > exp2_lo else exp2_lo
        xc = xc if xc < exp2_hi else exp2_hi
        p, k = exp2_parts(xc)
        y = ldexp(p, k)
        return y if x == x else x

    m1_lo, tmax, kmax, kbig = K.expm1_lo, K.expm1_tmax, K.expm1_kmax, K.expm1_kbig

    @vjit
    def expm1_core(x):
        """e**x - 1 == hi + lo for finite x (lo is 0 once k > kbig, where -1 no longer
        matters)."""
        xc = x if x > m1_lo else m1_lo
        r, tail, k = exp_tail(xc)
        t = pow2i(k if k < tmax else tmax)
        s, err = two_sum(t - one, t * r)
        hi, lo = fast_two_sum(s, err + t * tail)
        big = ldexp(one + (r + (tail - pow2i(-(k if k < kmax else kmax)))), k)
        return (big if k > kbig else hi), (zero if k > kbig else lo)

    @vjit
    def expm1(x):
        """e**x - 1: with t = 2**k, (t - 1) + t*expm1(r) where t - 1 and t*r are exact and
        summed with an error-free two_sum; for k > kbig the -1 is folded in as -2**-k
        before exp's scaling."""
        x = F(x)
        hi, lo = expm1_core(x)
        y = hi + lo
        y = x if x == zero else y     # keeps -0.0
        return y if x == x else x

    return dict(exp=exp, exp_fast=exp_fast, exp2=exp2, expm1=expm1)


def _log_functions(K):
    """log, log2, log10, log1p and their kernels for the dtype of K."""
    F, bits_to = K.F, K.bits_to
    zero, half, one, two = F(0.0), F(0.5), F(1.0), F(2.0)
    inf, nan = F(np.inf), F(np.nan)
    tiny, presc, sub_bits = F(2.0 ** K.emin), F(2.0 ** K.sub_bits), K.sub_bits
    sqrth, mant, mant_mask, poly = K.sqrth, K.mant, K.mant_mask, K.log_poly

    @vjit
    def log_parts(x):
        """For finite x > 0: (e, f, hfsq, sR) with log(x) = e*ln2 + f - (hfsq - sR),
        e as a float, sR = s*(hfsq + R)."""
        sub = x < tiny
        xs = x * presc if sub else x
        ix = float_bits(xs) - sqrth
        e = (ix >> mant) - (sub_bits if sub else 0)
        m = bits_to((ix & mant_mask) + sqrth)
        f = m - one
        s = f / (two + f)
        z = s * s
        R = z * poly(z)
        hfsq = half * f * f
        return F(e), f, hfsq, s * (hfsq + R)

    @vjit
    def log_special(x, y):
        y = nan if x < zero else y
        y = -inf if x == zero else y
        y = x if x == inf else y
        return y if x == x else x

    l2h, l2l = K.l2h, K.l2l

    @vjit
    def log(x):
        """Natural log."""
        x = F(x)
        e, f, hfsq, sR = log_parts(x)
        y = e * l2h + (f - (hfsq - (sR + e * l2l)))
        return log_special(x, y)

    hilo_mask = K.hilo_mask

    @vjit
    def log_hilo(f, hfsq, sR):
        hi = bits_to(float_bits(f - hfsq) & hilo_mask)
        lo = ((f - hi) - hfsq) + sR
        return hi, lo

    def log_b(doc, ivh, ivl, e_head, e_low):
        """log_b(x) = e*log_b(2) + (hi + lo)/ln(b): e_head(e) + e_low(e, v) + lo*ivh is
        the first sum (e_head(e) = e, exact, for b = 2), summed with hi*ivh last."""
        @vjit
        def log_b(x):
            x = F(x)
            e, f, hfsq, sR = log_parts(x)
            hi, lo = log_hilo(f, hfsq, sR)
            vhi = hi * ivh
            vlo = e_low(e, (lo + hi) * ivl) + lo * ivh
            y2 = e_head(e)
            w = y2 + vhi
            vlo = vlo + ((y2 - w) + vhi)
            return log_special(x, vlo + w)
        log_b.__doc__ = doc
        return log_b

    lg2h, lg2l = K.lg2h, K.lg2l
    log2 = log_b("log2 (exact at powers of two).", K.ivln2h, K.ivln2l,
                 vjit(lambda e: e), vjit(lambda e, v: v))
    log10 = log_b("log10.", K.ivln10h, K.ivln10l,
                  vjit(lambda e: e * lg2h), vjit(lambda e, v: e * lg2l + v))

    @vjit
    def log1p_dd(x, xl, extra):
        """log(1 + x + xl) + extra, xl and extra small (the low word of a double-word
        argument, a correction of the caller's): log(u) for u = fl(1 + x) plus the
        first-order term (1 + x - u + xl)/u, whose leading part is computed exactly, and
        extra, all before the one final rounding."""
        u = one + x
        c = (one - (u - x)) if u >= two else (x - (u - one))
        c = (c + xl) / u + extra
        us = u if u > zero else one
        e, f, hfsq, sR = log_parts(us)
        y = e * l2h + (f - (hfsq - (sR + (e * l2l + c))))
        y = nan if x < -one else y
        y = -inf if x == -one else y
        y = x if x == inf else y
        y = x if x == zero else y
        return y if x == x else x

    @vjit
    def log1p(x):
        """log(1 + x)."""
        return log1p_dd(F(x), F(-0.0), F(-0.0))

    return dict(log_parts=log_parts, log=log, log2=log2, log10=log10, log1p_dd=log1p_dd,
                log1p=log1p)


@functools.lru_cache(maxsize=None)
def functions(d):
    """The exp/log functions and kernels for dtype d (a core.Floats), by name."""
    K = _constants(d)
    kern = _exp_kernels(K)
    return SimpleNamespace(**kern, **_exp_functions(K, kern), **_log_functions(K))


#: Public functions of this module (vmath's VMATH entries).
NAMES = ("exp", "exp_fast", "exp2", "expm1", "log", "log2", "log10", "log1p")
