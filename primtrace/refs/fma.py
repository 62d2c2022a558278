"""a * b + c rounded once, written in prims: what eager's CPU kernels compute where the
compiler contracts ``c + a * b`` into a fused multiply-add (linspace's AVX2/AVX-512 kernels).

There is no fma prim, so the exact value is carried in pieces (error-free transformations:
Knuth's TwoSum, Dekker's TwoProduct) and rounded once at the end; a sum that lands exactly
halfway between two results is decided by the sign of the part left over. Valid for finite
operands whose product does not overflow; the callers fall back to ``c + a * b`` otherwise
(where inf and nan come out as from an fma).
"""
from __future__ import annotations

import torch

from primtrace import prims

_SPLIT = 134217729.0  # 2**27 + 1: Veltkamp's constant for float64
_BIG = 2.0 ** 996     # above this the split's product overflows: scale first


def two_sum(a, b):
    """(s, e) with s = fl(a + b) and a + b = s + e exactly (any order of magnitude)."""
    s = prims.add(a, b)
    bb = prims.sub(s, a)
    e = prims.add(prims.sub(a, prims.sub(s, bb)), prims.sub(b, bb))
    return s, e


def _split(a):
    """(hi, lo), a = hi + lo, each with at most 26 significant bits (float64)."""
    big = prims.gt(prims.abs(a), _BIG)
    scaled = prims.where(big, prims.mul(a, 2.0 ** -28), a)
    c = prims.mul(scaled, _SPLIT)
    hi = prims.sub(c, prims.sub(c, scaled))
    lo = prims.sub(scaled, hi)
    return (prims.where(big, prims.mul(hi, 2.0 ** 28), hi),
            prims.where(big, prims.mul(lo, 2.0 ** 28), lo))


def two_product(a, b):
    """(p, e) with p = fl(a * b) and a * b = p + e exactly (float64)."""
    p = prims.mul(a, b)
    ah, al = _split(a)
    bh, bl = _split(b)
    e = prims.add(prims.add(prims.add(prims.sub(prims.mul(ah, bh), p), prims.mul(ah, bl)),
                            prims.mul(al, bh)), prims.mul(al, bl))
    return p, e


def _decide_ties(r, d, rest, representable):
    """`r`, the rounding of u = r + d, corrected to the rounding of u + rest where u lies
    exactly halfway (r + 2d is then a neighbour of r) and `rest` pushes it over."""
    other = prims.add(r, prims.add(d, d))
    same_sign = prims.eq(prims.gt(rest, 0), prims.gt(d, 0))
    over = prims.bitwise_and(prims.bitwise_and(prims.ne(d, 0), prims.ne(rest, 0)), same_sign)
    return prims.where(prims.bitwise_and(over, representable(r, d, other)), other, r)


def _f64_neighbour(r, d, other):
    return prims.eq(prims.sub(other, r), prims.add(d, d))  # r + 2d is a float64: u is a tie


def fma(a, b, c):
    """round(a * b + c) in a, b and c's dtype, float32 or float64 (tensors of one dtype)."""
    naive = prims.add(c, prims.mul(a, b))
    if a.dtype is torch.float32:
        exact = _fma_f32(a, b, c)
    else:
        p, p_err = two_product(a, b)
        s, s_err = two_sum(c, p)
        t, t_err = two_sum(s_err, p_err)
        r, d = two_sum(s, t)  # a * b + c = r + d + t_err exactly
        exact = _decide_ties(r, d, t_err, _f64_neighbour)
    # inf/nan (from any operand or an overflow) come out as an fma gives them; an exact zero
    # (a * b = -c exactly, so the naive sum is exact too) keeps its sign (-0.0 + -0.0)
    usable = prims.bitwise_and(prims.isfinite(naive), prims.ne(exact, 0))
    return prims.where(usable, exact, naive)


def _fma_f32(a, b, c):
    """float32: the product is exact in float64, the sum is s + e (TwoSum), rounded once."""
    wide = torch.float64
    a64, b64, c64 = (prims.convert_element_type(x, wide) for x in (a, b, c))
    s, e = two_sum(c64, prims.mul(a64, b64))
    r = prims.convert_element_type(s, torch.float32)
    r64 = prims.convert_element_type(r, wide)
    d = prims.sub(s, r64)  # s = r + d exactly

    def f32_neighbour(r, d, other):
        return prims.eq(prims.convert_element_type(
            prims.convert_element_type(other, torch.float32), wide), other)
    return prims.convert_element_type(_decide_ties(r64, d, e, f32_neighbour), torch.float32)
