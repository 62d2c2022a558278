"""Elementwise prims, generated from tables.

Each row names a prim, the torch function that implements it on real tensors, the dtype
categories it accepts, and its result dtype ("same", "bool", or "real" for complex ->
real). The prims do no promotion and no broadcasting: see ``prims.meta``.
"""
from __future__ import annotations

import torch

from primtrace.dtypes import Category
from primtrace.ir.symbol import Symbol, SymbolKind
from primtrace.prims.meta import elementwise_meta

B, I, F, C = Category.BOOL, Category.INTEGER, Category.FLOATING, Category.COMPLEX
ANY = frozenset({B, I, F, C})
NUMERIC = frozenset({I, F, C})           # no bool
REAL = frozenset({B, I, F})
REAL_NUMERIC = frozenset({I, F})
FLOATING = frozenset({F})
FLOAT_COMPLEX = frozenset({F, C})
INTEGRAL = frozenset({B, I})
COMPLEX = frozenset({C})


def _int_div(a, b):
    """prims.div: true division on floats, C-style truncation on integers."""
    t = a if isinstance(a, torch.Tensor) else b
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return torch.div(a, b)
    return torch.div(a, b, rounding_mode="trunc")


def _maximum(a, b):
    """torch.maximum, but a +-0 tie gives the first operand at every size for floats.

    Why: TensorIterator's SIMD loop returns the second operand on a tie, its scalar loop
    the first, so eager's result depended on the tensor's size; the fused kernels return
    the first, which is also what torch.clamp keeps (clamp(-0.0, min=0.0) is -0.0). NaN in
    either operand propagates, as torch.maximum's; torch.where keeps it differentiable
    (a tie's gradient goes to the first operand, as clamp's does)."""
    if a.dtype.is_floating_point:
        return torch.where((a >= b) | a.isnan(), a, b)
    return torch.maximum(a, b)


def _minimum(a, b):
    """torch.minimum with the first operand on +-0 ties for floats (see _maximum)."""
    if a.dtype.is_floating_point:
        return torch.where((a <= b) | a.isnan(), a, b)
    return torch.minimum(a, b)


# name, torch implementation, accepted categories, result dtype
UNARY = [
    ("abs", torch.abs, NUMERIC, "real"),
    ("neg", torch.neg, NUMERIC, "same"),
    ("sign", torch.sign, REAL, "same"),
    ("sgn", torch.sgn, COMPLEX, "same"),
    ("signbit", torch.signbit, REAL, "bool"),
    ("reciprocal", torch.reciprocal, FLOAT_COMPLEX, "same"),
    ("sqrt", torch.sqrt, FLOAT_COMPLEX, "same"),
    ("rsqrt", torch.rsqrt, FLOAT_COMPLEX, "same"),
    ("exp", torch.exp, FLOAT_COMPLEX, "same"),
    ("exp2", torch.exp2, FLOAT_COMPLEX, "same"),
    ("expm1", torch.expm1, FLOAT_COMPLEX, "same"),
    ("log", torch.log, FLOAT_COMPLEX, "same"),
    ("log1p", torch.log1p, FLOAT_COMPLEX, "same"),
    ("log2", torch.log2, FLOAT_COMPLEX, "same"),
    ("log10", torch.log10, FLOAT_COMPLEX, "same"),
    ("sin", torch.sin, FLOAT_COMPLEX, "same"),
    ("cos", torch.cos, FLOAT_COMPLEX, "same"),
    ("tan", torch.tan, FLOAT_COMPLEX, "same"),
    ("asin", torch.asin, FLOAT_COMPLEX, "same"),
    ("acos", torch.acos, FLOAT_COMPLEX, "same"),
    ("atan", torch.atan, FLOAT_COMPLEX, "same"),
    ("sinh", torch.sinh, FLOAT_COMPLEX, "same"),
    ("cosh", torch.cosh, FLOAT_COMPLEX, "same"),
    ("tanh", torch.tanh, FLOAT_COMPLEX, "same"),
    ("asinh", torch.asinh, FLOAT_COMPLEX, "same"),
    ("acosh", torch.acosh, FLOAT_COMPLEX, "same"),
    ("atanh", torch.atanh, FLOAT_COMPLEX, "same"),
    ("sigmoid", torch.sigmoid, FLOAT_COMPLEX, "same"),
    ("erf", torch.erf, FLOATING, "same"),
    ("erfc", torch.erfc, FLOATING, "same"),
    ("erfinv", torch.erfinv, FLOATING, "same"),
    ("erfcx", torch.special.erfcx, FLOATING, "same"),
    ("lgamma", torch.lgamma, FLOATING, "same"),
    ("digamma", torch.digamma, FLOATING, "same"),
    ("i0", torch.i0, FLOATING, "same"),
    ("i0e", torch.special.i0e, FLOATING, "same"),
    ("i1", torch.special.i1, FLOATING, "same"),
    ("i1e", torch.special.i1e, FLOATING, "same"),
    ("ndtri", torch.special.ndtri, FLOATING, "same"),
    ("log_ndtr", torch.special.log_ndtr, FLOATING, "same"),
    ("bessel_j0", torch.special.bessel_j0, FLOATING, "same"),
    ("bessel_j1", torch.special.bessel_j1, FLOATING, "same"),
    ("bessel_y0", torch.special.bessel_y0, FLOATING, "same"),
    ("bessel_y1", torch.special.bessel_y1, FLOATING, "same"),
    ("modified_bessel_i0", torch.special.modified_bessel_i0, FLOATING, "same"),
    ("modified_bessel_i1", torch.special.modified_bessel_i1, FLOATING, "same"),
    ("modified_bessel_k0", torch.special.modified_bessel_k0, FLOATING, "same"),
    ("modified_bessel_k1", torch.special.modified_bessel_k1, FLOATING, "same"),
    ("scaled_modified_bessel_k0", torch.special.scaled_modified_bessel_k0, FLOATING, "same"),
    ("scaled_modified_bessel_k1", torch.special.scaled_modified_bessel_k1, FLOATING, "same"),
    ("spherical_bessel_j0", torch.special.spherical_bessel_j0, FLOATING, "same"),
    ("airy_ai", torch.special.airy_ai, FLOATING, "same"),
    ("ceil", torch.ceil, FLOATING, "same"),
    ("floor", torch.floor, FLOATING, "same"),
    ("round", torch.round, FLOATING, "same"),
    ("trunc", torch.trunc, FLOATING, "same"),
    ("isfinite", torch.isfinite, FLOAT_COMPLEX, "bool"),
    ("isnan", torch.isnan, FLOAT_COMPLEX, "bool"),
    ("isinf", torch.isinf, FLOAT_COMPLEX, "bool"),
    ("bitwise_not", torch.bitwise_not, INTEGRAL, "same"),
    ("real", lambda a: torch.real(a).clone(), COMPLEX, "real"),
    ("imag", lambda a: torch.imag(a).clone(), COMPLEX, "real"),
    ("conj", torch.conj_physical, COMPLEX, "same"),
    ("clone", torch.clone, ANY, "same"),  # a copy: what ceil/nan_to_num/... return for integers
]

BINARY = [
    ("add", torch.add, ANY, "same"),
    ("sub", torch.sub, NUMERIC, "same"),
    ("mul", torch.mul, ANY, "same"),
    ("div", _int_div, NUMERIC, "same"),
    ("remainder", torch.remainder, REAL_NUMERIC, "same"),
    ("fmod", torch.fmod, REAL_NUMERIC, "same"),
    ("pow", torch.pow, NUMERIC, "same"),
    ("atan2", torch.atan2, FLOATING, "same"),
    ("hypot", torch.hypot, FLOATING, "same"),
    ("copysign", torch.copysign, FLOATING, "same"),
    ("nextafter", torch.nextafter, FLOATING, "same"),
    ("heaviside", torch.heaviside, REAL, "same"),
    ("maximum", _maximum, REAL, "same"),
    ("minimum", _minimum, REAL, "same"),
    ("fmax", torch.fmax, REAL, "same"),
    ("fmin", torch.fmin, REAL, "same"),
    ("bitwise_and", torch.bitwise_and, INTEGRAL, "same"),
    ("bitwise_or", torch.bitwise_or, INTEGRAL, "same"),
    ("bitwise_xor", torch.bitwise_xor, INTEGRAL, "same"),
    ("shift_left", torch.bitwise_left_shift, frozenset({I}), "same"),
    ("shift_right", torch.bitwise_right_shift, frozenset({I}), "same"),
    ("eq", torch.eq, ANY, "bool"),
    ("ne", torch.ne, ANY, "bool"),
    ("lt", torch.lt, REAL, "bool"),
    ("le", torch.le, REAL, "bool"),
    ("gt", torch.gt, REAL, "bool"),
    ("ge", torch.ge, REAL, "bool"),
    ("gcd", torch.gcd, frozenset({I}), "same"),
    ("lcm", torch.lcm, frozenset({I}), "same"),
    ("zeta", torch.special.zeta, FLOATING, "same"),
    ("igamma", torch.igamma, FLOATING, "same"),
    ("igammac", torch.igammac, FLOATING, "same"),
    ("xlog1py", torch.special.xlog1py, FLOATING, "same"),
    ("chebyshev_polynomial_t", torch.special.chebyshev_polynomial_t, FLOATING, "same"),
    ("chebyshev_polynomial_u", torch.special.chebyshev_polynomial_u, FLOATING, "same"),
    ("chebyshev_polynomial_v", torch.special.chebyshev_polynomial_v, FLOATING, "same"),
    ("chebyshev_polynomial_w", torch.special.chebyshev_polynomial_w, FLOATING, "same"),
    ("hermite_polynomial_h", torch.special.hermite_polynomial_h, FLOATING, "same"),
    ("hermite_polynomial_he", torch.special.hermite_polynomial_he, FLOATING, "same"),
    ("laguerre_polynomial_l", torch.special.laguerre_polynomial_l, FLOATING, "same"),
    ("legendre_polynomial_p", torch.special.legendre_polynomial_p, FLOATING, "same"),
    ("shifted_chebyshev_polynomial_t", torch.special.shifted_chebyshev_polynomial_t, FLOATING, "same"),
    ("shifted_chebyshev_polynomial_u", torch.special.shifted_chebyshev_polynomial_u, FLOATING, "same"),
    ("shifted_chebyshev_polynomial_v", torch.special.shifted_chebyshev_polynomial_v, FLOATING, "same"),
    ("shifted_chebyshev_polynomial_w", torch.special.shifted_chebyshev_polynomial_w, FLOATING, "same"),
]

TERNARY = []  # where is defined in prims.structural: its predicate is bool, not the data dtype

ARITY = {}


def _make(name, impl, allowed, result):
    def meta(*args):
        return elementwise_meta(name, args, allowed, result)
    return Symbol(name, kind=SymbolKind.PRIM, meta=meta, impl=impl,
                  tags=frozenset({"elementwise"}), module="prims",
                  doc=f"Elementwise {name}; operands share shape and dtype.")


PRIMS = {}
for _arity, _table in ((1, UNARY), (2, BINARY)):
    for _name, _impl, _allowed, _result in _table:
        PRIMS[_name] = _make(_name, _impl, _allowed, _result)
        ARITY[_name] = _arity

globals().update(PRIMS)
__all__ = list(PRIMS)
