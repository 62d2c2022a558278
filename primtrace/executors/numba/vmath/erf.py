"""Vectorizable erf and erfc (float32 and float64).

Small |x|: erf(a) = a + a*E(a*a), minimax on [0, 0.84375]; below 1/2 erfc = 1 - erf,
written 1 - (a + aE) below 1/4 and 0.5 - ((a - 0.5) + aE) above, so the big subtraction
is exact (above 1/2, E's alternating terms would cost erfc a ULP).

Tail (a >= 1/2 for erfc, 0.84375 for erf): erfc(a) = e**(-a*a) * H(t) / a with
t = (a - K)/(a + K) and H = a * erfcx(a) one minimax polynomial in t over the whole tail
(H is flat, 0.31 .. 0.56, so Horner is well conditioned). e**(-a*a) comes from an exact
split of a*a (a = ah + al with ah's low bits cleared: -ah*ah exact, the rest a small
second word) as a double-word value; H comes as hi + lo (float32: evaluated in float64;
float64: double-word last steps, t's rounding carried to first order); the product and
the division by a are double-word, so the tail has about one rounding.
float64 erf(a) = 1 - erfc(a) above 0.84375 with a cheaper tail (plain float64, no
double-word steps), since erfc's error is scaled by erfc/erf <= 0.3 there;
erfc(-a) = 2 - erfc(a).

float32 erf above 0.84375 is pure float32 polynomial arithmetic (gelu's cost is erf's):
erf is within 2**-27 of polynomials on [0.84375, 2.2) and [2.2, 4], evaluated as one
Horner chain with per-piece coefficients (selects are cheaper than a second chain), ending
in d0 + t*Q(t) with d0 = erf(m) exact to ~2**-40 (so 1 - erfc's extra rounding is gone);
erf rounds to 1 beyond 3.92. 0.77 ULP, ~4x faster than the float64 tail it replaces.

erf and erfc are written once, for both dtypes, over the parts that differ: H (float32
evaluates it in float64) and erf above 0.84375 (float32's pieces, float64's 1 - erfc).
"""
from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np

from primtrace.executors.numba.vmath import coeffs as C
from primtrace.executors.numba.vmath import exp_log
from primtrace.executors.numba.vmath.core import (F32, F64, FLOAT64, copysign, fabs, horner,
                                                  two_sum, vjit)

# ------------------------------------------------------------------ float32/float64 parts
# H = a * erfcx(a) as hh + hl, and erf above 0.84375: float32 and float64 twins on purpose
# (float32 evaluates H in float64, float64 in double-word steps; float32 erf is its own
# polynomial pieces, float64 erf is 1 - erfc).
_K32D = F64(C.ERFC_MAP_F32[2])
_ERFC32D = horner(C.ERFC_F32.astype(np.float64))
_K64 = F64(C.ERFC_MAP_F64[2])
_ERFC64 = C.ERFC_F64
_ERFC64_FULL, _ERFC64_FROM2 = horner(_ERFC64), horner(_ERFC64[2:])
_ERF_P0, _ERF_P1 = C.ERF_PIECE0_F32, C.ERF_PIECE1_F32
(_, _ERF_SPLIT, _ERF_M0), (_, _ERF_MAX32, _ERF_M1) = (
    tuple(F32(v) for v in piece) for piece in C.ERF_PIECES_F32)
_two_prod64 = FLOAT64.two_prod


@vjit
def _erfc_h_f32(a):
    """H(t(a)) == hh + hl for float32 a >= 0.5."""
    # t and H in float64: H's Horner partial sums are as large as H itself, so float32
    # evaluation would cost a ULP; 11 float64 multiply-adds are cheaper than
    # double-word float32 ones
    ad = F64(a)
    t = (ad - _K32D) / (ad + _K32D)
    h = _ERFC32D(t)
    hh = F32(h)
    return hh, F32(h - F64(hh))


@vjit
def _erfc_h_f64(a):
    """H(t(a)) == hh + hl for float64 a >= 0.5: t's rounding error is carried to first
    order and the last two Horner steps are double-word."""
    nh, nl = two_sum(a, -_K64)           # a - K and a + K exactly
    dh, dl = two_sum(a, _K64)
    d = dh + dl
    t = (nh + nl) / d
    p, pe = _two_prod64(t, dh)
    tl = (((nh - p) - pe) + (nl - t * dl)) / d   # t_exact = t + tl; H' * tl is added below
    P = _ERFC64
    h = _ERFC64_FROM2(t)
    # the last two steps in double-word arithmetic (their partial sums are ~H)
    uh, ue = _two_prod64(t, h)
    sh, se = two_sum(P[1], uh)
    vh, ve = _two_prod64(t, sh)
    hh, he = two_sum(P[0], vh)
    dH = P[1] + t * (F64(2.0) * P[2] + t * (F64(3.0) * P[3] + t * (F64(4.0) * P[4])))
    return hh, he + ((ve + t * (se + ue)) + dH * tl)


@vjit
def _erf_pieces_f32(a):
    """erf(a) for 0.84375 <= a <= 4: one Horner chain whose coefficients are selected per
    piece, d0 + t*Q(t) with t = a - m; the last step is one FMA onto d0 = erf(m), which
    is (nearly) exact in float32, so the result carries about one rounding."""
    s = a < _ERF_SPLIT
    t = a - (_ERF_M0 if s else _ERF_M1)
    P, Q = _ERF_P0, _ERF_P1
    h = P[9] if s else Q[9]
    h = (P[8] if s else Q[8]) + t * h
    h = (P[7] if s else Q[7]) + t * h
    h = (P[6] if s else Q[6]) + t * h
    h = (P[5] if s else Q[5]) + t * h
    h = (P[4] if s else Q[4]) + t * h
    h = (P[3] if s else Q[3]) + t * h
    h = (P[2] if s else Q[2]) + t * h
    h = (P[1] if s else Q[1]) + t * h
    return (P[0] if s else Q[0]) + t * h


@vjit
def _erf_big_f32(a):
    """erf(a) for a >= 0.84375 (any a: the caller selects), all in float32 arithmetic
    (16 lanes; no exp, no division): two polynomial pieces up to 4, 1.0 beyond (erf
    rounds to 1 from 3.92; erf(4) = 1 - 1.5e-8 rounds to 1, so the clamp is exact). NaN
    stays NaN."""
    return _erf_pieces_f32(_ERF_MAX32 if a > _ERF_MAX32 else a)


_exp_core64, _ldexp64 = exp_log.functions(FLOAT64).exp_core, FLOAT64.ldexp


@vjit
def _erfc_rough_f64(a):
    """erfc(a) to a few float64 ULP for 0.84375 <= a, in plain arithmetic: all erf needs
    (a clamped to 6.5, where erf is 1; NaN -> 6.5, erf patches NaN)."""
    a = a if a < F64(6.5) else F64(6.5)
    t = (a - _K64) / (a + _K64)
    h = _ERFC64_FULL(t)
    p, k = _exp_core64(-(a * a))
    return _ldexp64(p * (h / a), k)


@vjit
def _erf_big_f64(a):
    """erf(a) = 1 - erfc(a) for a >= 0.84375 (any a: the caller selects), with a cheaper
    erfc (plain float64, no double-word steps), since erfc's error is scaled by
    erfc/erf <= 0.3 there."""
    return F64(1.0) - _erfc_rough_f64(F64(0.84375) if a < F64(0.84375) else a)


# --------------------------------------------------------------------------- per dtype
@functools.lru_cache(maxsize=None)
def functions(d):
    """erf, erfc and erfc's tail for dtype d (a core.Floats), by name."""
    F, split, two_prod, div_dd, ldexp = d.F, d.split, d.two_prod, d.div_dd, d.ldexp
    zero, quarter, half, one, two = F(0.0), F(0.25), F(0.5), F(1.0), F(2.0)
    erfc_h, erf_big = d.pick((_erfc_h_f32, _erf_big_f32), (_erfc_h_f64, _erf_big_f64))
    # erf's NaN: float32's pieces let it through, float64's clamp does not
    erf_nan = d.pick(vjit(lambda x, y: y), vjit(lambda x, y: y if x == x else x))
    xmax = F(d.pick(C.ERFC_MAP_F32, C.ERFC_MAP_F64)[1])     # erfc underflows beyond
    small = F(0.84375)                                       # erf's polynomial below
    erf_poly, exp_dd = horner(d.coeffs("ERF")), exp_log.functions(d).exp_dd

    @vjit
    def erf_small(a):
        """erf(a) - a for |a| < 0.84375."""
        return a * erf_poly(a * a)

    @vjit
    def erfc_tail(a):
        """erfc(a) for 0.5 <= a (0 beyond the underflow point, NaN for NaN)."""
        hh, hl = erfc_h(a)
        ah, al = split(a)                      # ah*ah exact
        ph, pl, k = exp_dd(-(ah * ah), -((two * ah) * al + al * al))
        nh, ne = two_prod(ph, hh)              # (ph + pl) * (hh + hl), double-word
        y = ldexp(div_dd(nh, ne + (pl * hh + ph * hl), a, zero), k)
        return zero if a > xmax else y

    @vjit
    def erf(x):
        """erf."""
        x = F(x)
        a = fabs(x)
        ys = a + erf_small(a)
        yb = erf_big(a)                        # every lane computes both: no branch
        return erf_nan(x, copysign(ys if a < small else yb, x))

    @vjit
    def erfc(x):
        """erfc."""
        x = F(x)
        a = fabs(x)
        er = erf_small(a)
        sp = (one - (a + er)) if a < quarter else (half - ((a - half) + er))
        sn = one + (a + er)
        tail = erfc_tail(half if a < half else a)   # NaN stays NaN
        is_small = a < half
        pos = sp if is_small else tail
        neg = sn if is_small else two - tail
        return neg if x < zero else pos

    return SimpleNamespace(erf=erf, erfc=erfc, erfc_tail=erfc_tail)


#: Public functions of this module (vmath's VMATH entries).
NAMES = ("erf", "erfc")
