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
"""
from __future__ import annotations

import numpy as np

from primtrace.executors.numba.vmath import coeffs as C
from primtrace.executors.numba.vmath.core import (F32, F64, bits_f32, bits_f64, copysign,
                                                  div_dd_f32, div_dd_f64, f32_bits, f64_bits, fabs,
                                                  ldexp_f32, ldexp_f64, two_prod_f32, two_prod_f64,
                                                  two_sum, vjit)
from primtrace.executors.numba.vmath.exp_log import exp_core_f64, exp_dd_f32, exp_dd_f64

_ERF32, _ERF64, _ERFC32, _ERFC64 = C.ERF_F32, C.ERF_F64, C.ERFC_F32, C.ERFC_F64
_K32D, _XMAX32 = F64(C.ERFC_MAP_F32[2]), F32(C.ERFC_MAP_F32[1])
_ERFC32D = _ERFC32.astype(np.float64)
_K64, _XMAX64 = F64(C.ERFC_MAP_F64[2]), F64(C.ERFC_MAP_F64[1])
_ERF_P0, _ERF_P1 = C.ERF_PIECE0_F32, C.ERF_PIECE1_F32
(_, _ERF_SPLIT, _ERF_M0), (_, _ERF_MAX32, _ERF_M1) = (
    tuple(F32(v) for v in piece) for piece in C.ERF_PIECES_F32)
_ERF_SMALL32 = F32(C.ERF_PIECES_F32[0][0])


@vjit
def erfc_tail_f32(a):
    """erfc(a) for 0.5 <= a (0 beyond the float32 underflow point, NaN for NaN)."""
    # t and H in float64: H's Horner partial sums are as large as H itself, so float32
    # evaluation would cost a ULP; 11 float64 multiply-adds are cheaper than
    # double-word float32 ones
    ad = F64(a)
    t = (ad - _K32D) / (ad + _K32D)
    P = _ERFC32D
    h = P[0] + t * (P[1] + t * (P[2] + t * (P[3] + t * (P[4] + t * (P[5] + t * (
        P[6] + t * (P[7] + t * (P[8] + t * (P[9] + t * P[10])))))))))
    hh = F32(h)
    hl = F32(h - F64(hh))
    ah = bits_f32(f32_bits(a) & np.int32(-4096))       # 12 bits: ah*ah exact
    al = a - ah
    ph, pl, k = exp_dd_f32(-(ah * ah), -((F32(2.0) * ah) * al + al * al))
    nh, ne = two_prod_f32(ph, hh)         # (ph + pl) * (hh + hl), double-word
    y = ldexp_f32(div_dd_f32(nh, ne + (pl * hh + ph * hl), a, F32(0.0)), k)
    return F32(0.0) if a > _XMAX32 else y


@vjit
def _erfc64_horner_to_p2(t):
    """Horner steps P[23] .. P[2] of erfc's float64 polynomial, written out (no inner loop);
    the callers finish the last two steps in their own precision."""
    P = _ERFC64
    h = P[23]
    h = P[22] + t * h
    h = P[21] + t * h
    h = P[20] + t * h
    h = P[19] + t * h
    h = P[18] + t * h
    h = P[17] + t * h
    h = P[16] + t * h
    h = P[15] + t * h
    h = P[14] + t * h
    h = P[13] + t * h
    h = P[12] + t * h
    h = P[11] + t * h
    h = P[10] + t * h
    h = P[9] + t * h
    h = P[8] + t * h
    h = P[7] + t * h
    h = P[6] + t * h
    h = P[5] + t * h
    h = P[4] + t * h
    h = P[3] + t * h
    h = P[2] + t * h
    return h


@vjit
def erfc_tail_f64(a):
    """float64 version of erfc_tail_f32: t's rounding error is carried to first order and
    the last two Horner steps are double-word."""
    nh, nl = two_sum(a, -_K64)           # a - K and a + K exactly
    dh, dl = two_sum(a, _K64)
    d = dh + dl
    t = (nh + nl) / d
    p, pe = two_prod_f64(t, dh)
    tl = (((nh - p) - pe) + (nl - t * dl)) / d   # t_exact = t + tl; H' * tl is added below
    P = _ERFC64
    h = _erfc64_horner_to_p2(t)
    # the last two steps in double-word arithmetic (their partial sums are ~H)
    uh, ue = two_prod_f64(t, h)
    sh, se = two_sum(P[1], uh)
    vh, ve = two_prod_f64(t, sh)
    hh, he = two_sum(P[0], vh)
    dH = P[1] + t * (F64(2.0) * P[2] + t * (F64(3.0) * P[3] + t * (F64(4.0) * P[4])))
    hl = he + ((ve + t * (se + ue)) + dH * tl)
    ah = bits_f64(f64_bits(a) & np.int64(-134217728))  # 26 bits: ah*ah exact
    al = a - ah
    ph, pl, k = exp_dd_f64(-(ah * ah), -((F64(2.0) * ah) * al + al * al))
    nh, ne = two_prod_f64(ph, hh)
    y = ldexp_f64(div_dd_f64(nh, ne + (pl * hh + ph * hl), a, F64(0.0)), k)
    return F64(0.0) if a > _XMAX64 else y


@vjit
def _erfc_rough_f64(a):
    """erfc(a) to a few float64 ULP for 0.84375 <= a, in plain arithmetic: all erf needs
    (a clamped to 6.5, where erf is 1; NaN -> 6.5, erf patches NaN)."""
    a = a if a < F64(6.5) else F64(6.5)
    t = (a - _K64) / (a + _K64)
    P = _ERFC64
    h = _erfc64_horner_to_p2(t)
    h = P[1] + t * h
    h = P[0] + t * h
    p, k = exp_core_f64(-(a * a))
    return ldexp_f64(p * (h / a), k)


@vjit
def _erf_small_f32(a):
    """erf(a) - a for |a| < 0.84375."""
    z = a * a
    P = _ERF32
    return a * (P[0] + z * (P[1] + z * (P[2] + z * (P[3] + z * (P[4] + z * (P[5] + z * P[6]))))))


@vjit
def _erf_small_f64(a):
    """erf(a) - a for |a| < 0.84375."""
    z = a * a
    P = _ERF64
    return a * (P[0] + z * (P[1] + z * (P[2] + z * (P[3] + z * (P[4] + z * (P[5] + z * (
        P[6] + z * (P[7] + z * (P[8] + z * (P[9] + z * (P[10] + z * P[11])))))))))))


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
def erf_f32(x):
    """erf, float32, all in float32 arithmetic (16 lanes; no exp, no division): the
    small-argument polynomial below 0.84375, two polynomial pieces up to 4, 1.0 beyond
    (erf rounds to 1 from 3.92; erf(4) = 1 - 1.5e-8 rounds to 1, so the clamp is exact)."""
    x = F32(x)
    a = fabs(x)
    ys = a + _erf_small_f32(a)
    yb = _erf_pieces_f32(_ERF_MAX32 if a > _ERF_MAX32 else a)    # NaN stays NaN
    return copysign(ys if a < _ERF_SMALL32 else yb, x)


@vjit
def erf_f64(x):
    """erf, float64."""
    x = F64(x)
    a = fabs(x)
    ys = a + _erf_small_f64(a)
    yb = F64(1.0) - _erfc_rough_f64(F64(0.84375) if a < F64(0.84375) else a)
    y = copysign(ys if a < F64(0.84375) else yb, x)
    return y if x == x else x


@vjit
def erfc_f32(x):
    """erfc, float32."""
    x = F32(x)
    a = fabs(x)
    er = _erf_small_f32(a)
    sp = (F32(1.0) - (a + er)) if a < F32(0.25) else (F32(0.5) - ((a - F32(0.5)) + er))
    sn = F32(1.0) + (a + er)
    tail = erfc_tail_f32(F32(0.5) if a < F32(0.5) else a)   # NaN stays NaN
    small = a < F32(0.5)
    pos = sp if small else tail
    neg = sn if small else F32(2.0) - tail
    return neg if x < F32(0.0) else pos


@vjit
def erfc_f64(x):
    """erfc, float64."""
    x = F64(x)
    a = fabs(x)
    er = _erf_small_f64(a)
    sp = (F64(1.0) - (a + er)) if a < F64(0.25) else (F64(0.5) - ((a - F64(0.5)) + er))
    sn = F64(1.0) + (a + er)
    tail = erfc_tail_f64(F64(0.5) if a < F64(0.5) else a)   # NaN stays NaN
    small = a < F64(0.5)
    pos = sp if small else tail
    neg = sn if small else F64(2.0) - tail
    return neg if x < F64(0.0) else pos
