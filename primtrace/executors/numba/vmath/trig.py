"""Vectorizable sin, cos, tan (float32 and float64) with a branch-free Payne-Hanek reduction.

Argument reduction: |x| < pi/4 is used as is. Otherwise x = M * 2**e (M the integer
significand) is multiplied, in integer arithmetic, by the window of bits of 2/pi that
matters for that exponent: the bits whose product with x is a multiple of 4 (whole turns)
are left out, and 96 (float32) / 192 (float64) bits after them are enough for any float
(worst-case cancellation is about 2**-30 / 2**-61 relative). 2/pi comes from Machin's
formula in Python integers at import. float32 cuts its window out of one 320-bit
constant with per-lane variable shifts and selects; float64 reads it from a per-exponent
table (2048 x 3 uint64, three gathers). Then a few 32x32->64 bit multiplies and shifts:
no branch, no loop, the same instructions for every lane. The fixed-point result gives
the quadrant q and r in [-pi/4, pi/4] as a hi + lo pair (float32: through one float64
multiply; float64: a double-word product with pi/2).

Inside one function there is no separate Cody-Waite path: in branch-free code every lane
pays for every path, so one reduction that is exact for all magnitudes is cheaper than two.
The small-argument twins at the end (``sin_near``, ``cos_near``, ``sin_half``,
``cos_half``) are separate functions: CPU kernels pick one per block of elements, or where
the argument is known to be a float16 value. (Gathers are slow
enough on AVX-512 parts to dominate a float32 sin, hence the shift version there.)

Kernels: sin(r) = r + r**3 S(r*r), cos(r) = 1 - r*r/2 + r**4 C(r*r) (minimax), with the
lo word folded in to first order; tan = sin/cos or -cos/sin by quadrant.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from primtrace.executors.numba.vmath import coeffs as C
from primtrace.executors.numba.vmath.core import (F32, F64, FLOAT64, HAS_FMA, PI_2, PI_4, U64,
                                                  bits_f32, bits_f64, fabs, fast_two_sum,
                                                  float_bits, fma, hi_lo, horner, two_sum, vjit)


def _arctan_inv(n, scale):
    """arctan(1/n) * scale in fixed point (alternating Taylor series)."""
    total, term, k, sign = 0, scale // n, 1, 1
    while term:
        total += sign * (term // k)
        term //= n * n
        k += 2
        sign = -sign
    return total


def two_over_pi_bits(nbits):
    """floor(2/pi * 2**nbits) (the last few bits may be off; callers use far fewer)."""
    guard = 64
    scale = 1 << (nbits + guard)
    pi_fx = 4 * (4 * _arctan_inv(5, scale) - _arctan_inv(239, scale))
    return (1 << (2 * (nbits + guard) + 1 - guard)) // pi_fx


def _windows(n_exp, bias_plus_mant, width, words, word_bits):
    """Per biased exponent E: the `width` bits of 2/pi starting at bit E - bias_plus_mant - 1
    (bit j has weight 2**-j), as `words` integers of `word_bits` each, most significant
    first."""
    top = n_exp - bias_plus_mant - 1 + width + 8
    bits = two_over_pi_bits(top)
    out = np.zeros((words, n_exp), np.uint64)
    for E in range(n_exp):
        shift = (E - bias_plus_mant - 1) + width - 1 - top   # floor(2/pi * 2**(j0+width-1))
        w = bits >> -shift if shift < 0 else bits << shift
        w &= (1 << width) - 1
        for i in range(words):
            out[i, E] = (w >> (word_bits * (words - 1 - i))) & ((1 << word_bits) - 1)
    return out


# float32: x = M * 2**(E-150); the 96-bit window starts at bit j0 = E-151 of 2/pi. Instead
# of a per-exponent table (three gathers, which cost more than the rest of sin on AVX-512
# parts), the window is cut out of one 320-bit constant with variable shifts: stream bit
# s holds bit s-31 of 2/pi (zeros before the point), as five uint64 words.
_Z32 = two_over_pi_bits(288)                 # floor(2/pi * 2**288): stream bits 0..319
_ZW = [np.uint64((_Z32 >> (64 * (4 - k))) & ((1 << 64) - 1)) for k in range(5)]
_Z0, _Z1, _Z2, _Z3, _Z4 = _ZW
# float64: x = M * 2**(E-1075); window starts at bit E-1076, 192 bits.
_W64 = _windows(2048, 1075, 192, 3, 64)
_T64_0, _T64_1, _T64_2 = (np.ascontiguousarray(_W64[i]) for i in range(3))

_M32 = U64(0xFFFFFFFF)
_HALF62, _MASK62 = U64(1 << 61), U64((1 << 62) - 1)
_S62 = U64(62)
_S32 = U64(32)
_SCALE32 = F64(float.fromhex("0x1.921fb54442d18p0") * 2.0 ** -62)   # pi/2 * 2**-62
_TWOM62, _TWO64, _TWOM126 = F64(2.0 ** -62), F64(2.0 ** 64), F64(2.0 ** -126)
_PIO2H64, _PIO2L64 = hi_lo(PI_2, F64)
_two_prod64 = FLOAT64.two_prod
_PIO4_32, _PIO4_64 = F32(float(hi_lo(PI_4, F32)[0])), hi_lo(PI_4, F64)[0]
_SIN32, _COS32 = (horner(P.astype(np.float64)) for P in (C.SIN_F32, C.COS_F32))
_SIN64, _COS64 = horner(C.SIN_F64), horner(C.COS_F64)


@vjit
def reduce_pio2_f32(x):
    """x = q*pi/2 + r, r as float64 (|r| <= pi/4, 2**-50 relative); q as int32 (only
    q & 3 matters)."""
    ix = float_bits(x)
    ia = ix & 0x7FFFFFFF
    E = ia >> 23
    M = U64((ia & 0x007FFFFF) | 0x00800000)
    p = E - 120                                      # stream index of bit j0 = E - 151
    p = p if p > 0 else 0                            # (|x| < 0.5 takes the small path)
    w = p >> 6
    sh = U64(p & 63)
    s0 = _Z0 if w == 0 else (_Z1 if w == 1 else _Z2)
    s1 = _Z1 if w == 0 else (_Z2 if w == 1 else _Z3)
    s2 = _Z2 if w == 0 else (_Z3 if w == 1 else _Z4)
    rs = U64(63) - sh                                # shifts stay below 64 (no poison)
    hi64 = (s0 << sh) | ((s1 >> U64(1)) >> rs)
    mid = (s1 << sh) | ((s2 >> U64(1)) >> rs)
    w0, w1, w2 = hi64 >> _S32, hi64 & _M32, mid >> _S32
    # bits 32..95 of the 120-bit M * window: 2 quadrant bits, 62 fraction bits
    t = ((M * w0) << _S32) + M * w1 + ((M * w2) >> _S32)
    t = t + _HALF62                                  # round to the nearest quadrant
    q = np.int32(t >> _S62)
    r = np.int64(t & _MASK62) - np.int64(1 << 61)
    rd = F64(r) * _SCALE32
    neg = ix < 0
    rd = -rd if neg else rd
    q = -q if neg else q
    small = fabs(x) < _PIO4_32
    return (F64(x) if small else rd), (0 if small else q)


@vjit
def reduce_pio2_f64(x):
    """float64 version: bits 64..191 of the 245-bit M * window, in 32-bit columns."""
    ix = float_bits(x)
    ia = ix & 0x7FFFFFFFFFFFFFFF
    E = ia >> 52
    M = U64((ia & 0x000FFFFFFFFFFFFF) | 0x0010000000000000)
    mh, ml = M >> _S32, M & _M32
    W0, W1, W2 = _T64_0[E], _T64_1[E], _T64_2[E]
    w0, w1, w2, w3, w4, w5 = W0 >> _S32, W0 & _M32, W1 >> _S32, W1 & _M32, W2 >> _S32, W2 & _M32
    a0, a1, a2, a3, a4, a5 = ml * w0, ml * w1, ml * w2, ml * w3, ml * w4, ml * w5
    b1, b2, b3, b4, b5 = mh * w1, mh * w2, mh * w3, mh * w4, mh * w5
    s1 = (a5 >> _S32) + (a4 & _M32) + (b5 & _M32)
    s2 = (a4 >> _S32) + (a3 & _M32) + (b5 >> _S32) + (b4 & _M32) + (s1 >> _S32)
    s3 = (a3 >> _S32) + (a2 & _M32) + (b4 >> _S32) + (b3 & _M32) + (s2 >> _S32)
    s4 = (a2 >> _S32) + (a1 & _M32) + (b3 >> _S32) + (b2 & _M32) + (s3 >> _S32)
    s5 = (a1 >> _S32) + (a0 & _M32) + (b2 >> _S32) + (b1 & _M32) + (s4 >> _S32)
    th = ((s5 << _S32) | (s4 & _M32)) + _HALF62      # binary point at bit 62 of th
    tl = ((s3 & _M32) << _S32) | (s2 & _M32)
    q = np.int64(th >> _S62)
    hs = np.int64(th & _MASK62) - np.int64(1 << 61)
    a = F64(hs)
    rem = hs - np.int64(a)
    h, l = two_sum(a * _TWOM62, (F64(rem) * _TWO64 + F64(tl)) * _TWOM126)
    p, e = _two_prod64(h, _PIO2H64)
    e = e + (h * _PIO2L64 + l * _PIO2H64)
    hi, lo = fast_two_sum(p, e)
    neg = ix < 0
    hi = -hi if neg else hi
    lo = -lo if neg else lo
    q = -q if neg else q
    small = fabs(x) < _PIO4_64
    return (x if small else hi), (F64(0.0) if small else lo), (0 if small else q)


# The reductions and the kernels are float32/float64 twins on purpose: float32 cuts its
# 2/pi window with shifts and runs the kernels in float64 (rounded once at the end),
# float64 gathers its window and runs double-word kernels.
@vjit
def _sincos_f32(x):
    """(sh, sl, ch, cl, q): sin and cos of the reduced argument in float64 for float32 x,
    with the float32 polynomials (2**-32 relative; the lo words are -0.0): rounded once to
    float32 they are off by 0.5 ULP plus 2**-8 at most, so near-halfway cases round as
    eager's do (float32 arithmetic: 0.76 ULP)."""
    r, q = reduce_pio2_f32(x)
    z = r * r
    s = r * (F64(1.0) + z * _SIN32(z))                       # sin(-0) = -0
    c = (F64(1.0) - F64(0.5) * z) + z * z * _COS32(z)
    return s, F64(-0.0), c, F64(-0.0), q


@vjit
def _sincos_f64(x):
    """(sh, sl, ch, cl, q): sin and cos of the reduced argument as double-word values."""
    h, l, q = reduce_pio2_f64(x)
    z = h * h
    sl = h * z * _SIN64(z) + l * (F64(1.0) - F64(0.5) * z)
    hz = F64(0.5) * z
    w = F64(1.0) - hz
    cl = ((F64(1.0) - w) - hz) + (z * z * _COS64(z) - h * l)
    return h, sl, w, cl, q


def _functions(F, sincos, tan_div, tiny):
    """sin, cos, tan for dtype F from its reduction + kernels ``sincos``, the division
    ``tan_div(nh, nl, dh, dl)`` of tan, and ``tiny``, below which sin x = tan x = x."""
    inf = F(np.inf)

    @vjit
    def sin(x):
        """sin; correct for every finite argument."""
        x = F(x)
        sh, sl, ch, cl, q = sincos(x)
        y = (ch + cl) if (q & 1) != 0 else (sh + sl)
        y = F(-y if (q & 2) != 0 else y)
        ax = fabs(x)
        y = x if ax < tiny else y
        return y if ax < inf else x - x

    @vjit
    def cos(x):
        """cos; correct for every finite argument."""
        x = F(x)
        sh, sl, ch, cl, q = sincos(x)
        y = (sh + sl) if (q & 1) != 0 else (ch + cl)
        y = F(-y if ((q + 1) & 2) != 0 else y)
        return y if fabs(x) < inf else x - x

    @vjit
    def tan(x):
        """tan: sin/cos of the reduced argument (-cos/sin in odd quadrants), rounded
        once."""
        x = F(x)
        sh, sl, ch, cl, q = sincos(x)
        odd = (q & 1) != 0
        y = F(tan_div(ch if odd else sh, cl if odd else sl, -sh if odd else ch,
                      -sl if odd else cl))
        ax = fabs(x)
        y = x if ax < tiny else y
        return y if ax < inf else x - x

    return SimpleNamespace(sin=sin, cos=cos, tan=tan)


_BY_DTYPE = {
    # float32: one float64 division of the kernels' values; the float64 kernels are
    # exact down to 0 (tiny = 0: no select)
    "f32": _functions(F32, _sincos_f32, vjit(lambda nh, nl, dh, dl: nh / dh), F32(0.0)),
    "f64": _functions(F64, _sincos_f64, FLOAT64.div_dd, F64(2.0 ** -27)),
}


def functions(d):
    """sin, cos, tan for dtype d (a core.Floats), by name."""
    return _BY_DTYPE[d.tag]


# --- float32 sin and cos near zero --------------------------------------------------------------
# For |x| < NEAR_LIMIT a float64 Cody-Waite reduction modulo pi is exact enough: x = k*pi + r
# with pi in three 33-bit pieces (k*piece exact for |k| < 2**20), r in [-pi/2, pi/2], and one
# odd polynomial (2**-35 relative) gives sin(r); cos(x) = -(-1)**k sin(x - (k + 1/2)*pi).
# 0.5004 ULP after the one rounding to float32, at half the cost of sin_f32 (no Payne-Hanek
# window, one polynomial instead of two). Kernels call them where the argument is known to
# be that small (float16 values), or per block behind a range check (backends/cpu.py).
NEAR_LIMIT = 2.0 ** 20


_PI_FIXED = 4 * (4 * _arctan_inv(5, 1 << 200) - _arctan_inv(239, 1 << 200))   # pi * 2**200


def _pi_pieces(F, bits):
    """pi as a sum of values of type F, the i-th rounded to bits[i] significant bits from
    what the ones before left (so a rest may be negative)."""
    rest, pieces = _PI_FIXED, []
    for b in bits:
        drop = abs(rest).bit_length() - b
        top = round(rest / (1 << drop)) << drop
        pieces.append(F(top / 2.0 ** 200))             # exact: at most b bits
        rest -= top
    return pieces


_PI1, _PI2, _PI3 = _pi_pieces(F64, (33, 33, 53))
_INV_PI = F64(1.0 / float.fromhex("0x1.921fb54442d18p1"))
_ROUND = F64(1.5 * 2.0 ** 52)   # y + _ROUND - _ROUND: y rounded to an integer, in t's low bits
_SIN_NEAR = horner(C.SIN_NEAR_F64)


@vjit
def _sin_reduced(xd, h):
    """sin(xd - h*pi) in float64, h a whole or half-whole float64 (|h| < 2**19). r*(1 + z*S)
    rather than r + r*z*S keeps sin(-0) = -0."""
    r = ((xd - h * _PI1) - h * _PI2) - h * _PI3
    z = r * r
    return r * (F64(1.0) + z * _SIN_NEAR(z))


@vjit
def _sign_of_odd(s, t):
    """s negated where the integer t - _ROUND holds is odd (its lowest bit, moved to the
    sign bit: an xor, no select)."""
    return bits_f64(float_bits(s) ^ (float_bits(t) << 63))


@vjit
def sin_near(x):
    """sin of a float32 with |x| < NEAR_LIMIT (or inf, nan: nan). k = rint(x/pi) by the
    magic number (x = -0 gets k = +0, which keeps r = -0)."""
    xd = F64(x)
    t = xd * _INV_PI + _ROUND
    k = t - _ROUND
    return F32(_sign_of_odd(_sin_reduced(xd, k), t))


@vjit
def cos_near(x):
    """cos of a float32 with |x| < NEAR_LIMIT (or inf, nan: nan): with k = rint(x/pi - 1/2),
    cos x = (-1)**(k+1) sin(x - (k + 1/2)*pi)."""
    xd = F64(x)
    t = (xd * _INV_PI - F64(0.5)) + _ROUND
    k = t - _ROUND
    return F32(_sign_of_odd(-_sin_reduced(xd, k + F64(0.5)), t))


# --- float32 sin and cos of float16 values, for a half result ------------------------------------
# sin(a) on a float16 tensor is rounded to float16: float32 arithmetic is then enough
# (~1.6 ULP in float32, the same float16 result as eager's on every one of the 65,536
# inputs: tests/numba/test_trig_near.py), and twice the lanes of sin_near's float64. With
# |x| <= 65504, k = rint(x/pi) < 2**15; three float32 pieces of pi are taken off by FMAs,
# whose products k*piece are exact inside. Without FMA they would not be: sin_near there.
_PI32_1, _PI32_2, _PI32_3 = _pi_pieces(F32, (24, 24, 24))
_INV_PI32, _HALF32 = F32(1.0 / float.fromhex("0x1.921fb54442d18p1")), F32(0.5)
_ROUND32 = F32(1.5 * 2.0 ** 23)
_SIN_HALF = horner(C.SIN_NEAR_F32)


@vjit
def _sin_reduced_f32(x, h):
    """sin(x - h*pi) in float32 for a float16 value x, h whole or half-whole."""
    r = fma(-h, _PI32_1, x)
    r = fma(-h, _PI32_2, r)
    r = fma(-h, _PI32_3, r)
    z = r * r
    return fma(r * z, _SIN_HALF(z), r)


@vjit
def _sign_of_odd_f32(s, t):
    return bits_f32(float_bits(s) ^ (float_bits(t) << 31))


@vjit
def _sin_half(x):
    """sin of a float32 holding a float16 value, for a result rounded to float16."""
    t = x * _INV_PI32 + _ROUND32
    s = _sign_of_odd_f32(_sin_reduced_f32(x, t - _ROUND32), t)
    return x if x == F32(0.0) else s          # sin(-0) = -0 (r*z*S + r gives +0)


@vjit
def _cos_half(x):
    """cos of a float32 holding a float16 value, for a result rounded to float16."""
    t = (x * _INV_PI32 - _HALF32) + _ROUND32
    return _sign_of_odd_f32(-_sin_reduced_f32(x, (t - _ROUND32) + _HALF32), t)


sin_half, cos_half = (_sin_half, _cos_half) if HAS_FMA else (sin_near, cos_near)


#: Public functions of this module (vmath's VMATH entries).
NAMES = ("sin", "cos", "tan")
#: float32-only functions: for small arguments, and for float16 values with a half result
#: (VMATH entries "sin_near", ..., "cos_half").
FLOAT32_ONLY = {"sin_near": sin_near, "cos_near": cos_near, "sin_half": sin_half,
                "cos_half": cos_half}
