"""Elementwise prims, generated from tables.

Each row names a prim, the torch function that implements it on real tensors, the dtype
categories it accepts, its result dtype ("same", "bool", or "real" for complex -> real),
and its derivative (``prims.differentiation``). The prims do no promotion and no
broadcasting: see ``prims.meta``.
"""
from __future__ import annotations

import math

import torch

from primtrace.dtypes import Category
from primtrace.prims.differentiation import (BOOL_RESULT, INTEGER_ONLY, NO_TORCH_DERIVATIVE, P,
                                             TORCH_RAISES, VJP, ZERO, as_tensor_like, conjugated,
                                             elementwise_rule, is_tensor, times_conj, to_complex,
                                             zeros_like)
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


class _DifferentiatedAs(torch.autograd.Function):
    """torch's autograd over the prim (eager refs, a double backward's replay) as its rule:
    the gradient goes to the carrier alone."""

    @staticmethod
    def forward(ctx, value, carrier):
        ctx.carrier_is_tensor = isinstance(carrier, torch.Tensor)
        like = value if isinstance(value, torch.Tensor) else carrier
        return torch.where(torch.ones((), dtype=torch.bool, device=like.device), value, carrier)

    @staticmethod
    def backward(ctx, g):
        return None, (g if ctx.carrier_is_tensor else None)


def _differentiate_as(value, carrier):
    """`value`, as a new tensor laid out as the elementwise result of both operands (the
    meta's strides); `carrier` only matters to the backward (see differentiate_as)."""
    return _DifferentiatedAs.apply(value, carrier)


# --- derivatives the tables name (the chain rule's factor, or a whole VJP rule) ---------------
def _near_zero(a, formula):
    """i1's and i1e's derivative as torch computes it: `formula` at a safe input where
    |a| > eps, 1/2 elsewhere (tiny, zero and NaN inputs: the limit at 0)."""
    eps = torch.finfo(a.dtype).eps
    normal = P.gt(P.abs(a), eps)
    return P.where(normal, formula(P.where(normal, a, eps)), 0.5)


def _at_zero(a, value, elsewhere):
    """`value` where a == 0, `elsewhere` elsewhere (a removable singularity: i1'(0) = 1/2)."""
    return P.where(P.eq(a, 0), value, elsewhere)


def _t(x, like):
    """A number operand as a 0-dim tensor (a partial that computes with it)."""
    return as_tensor_like(x, like)


def _atan2_vjp(g, y, a, b):
    """torch's atan2 derivative: g * b * r and g * -a * r, r = 1 / (a^2 + b^2) but 0 where
    a^2 + b^2 is 0 (at the origin, or where the squares underflow): zeros there, not NaN."""
    like = a if is_tensor(a) else b
    a_, b_ = _t(a, like), _t(b, like)
    squares = P.add(P.mul(a_, a_), P.mul(b_, b_))
    r = P.where(P.eq(squares, 0), 0, P.reciprocal(squares))
    return (P.mul(P.mul(g, b_), r) if is_tensor(a) else None,
            P.mul(P.mul(g, P.neg(a_)), r) if is_tensor(b) else None)


def _igamma_dx(a, x, y):
    """d/dx of the regularized lower incomplete gamma: x^(a-1) e^-x / Gamma(a)."""
    a = _t(a, x)
    return P.exp(P.sub(P.sub(P.mul(P.sub(a, 1), P.log(x)), x), P.lgamma(a)))


def _abs_vjp(g, y, a):
    """|a|' is sign(a) (0 at 0, as eager); a complex a gets g * a/|a| (torch's convention)."""
    if a.dtype.is_complex:
        return (P.mul(to_complex(g, a), P.sgn(a)),)
    return (P.mul(g, P.sign(a)),)


def _sgn_vjp(g, y, a):
    """sgn(z) = z/|z| is not holomorphic: (g - conj(g) sgn^2) / (2|z|), 0 at z = 0."""
    magnitude = to_complex(P.abs(a), a)
    grad = P.div(P.sub(g, P.mul(P.conj(g), P.mul(y, y))), P.mul(magnitude, 2))
    return (P.where(P.eq(magnitude, 0), 0, grad),)


def _div_vjp(g, y, a, b):
    return (P.div(g, conjugated(b, g)) if is_tensor(a) else None,
            P.neg(P.div(P.mul(g, conjugated(y)), conjugated(b))) if is_tensor(b) else None)


def _pow_vjp(g, y, a, b):
    """torch's pow derivatives: none to `a` where b == 0, none to `b` where a == 0 and b >= 0
    (0 ** b is 0 or 1 there, not exp(b log 0))."""
    grad_a = grad_b = None
    if is_tensor(a):
        if type(b) in (int, float) and b - 1 == 1:   # x ** 2: a.pow(1) is a copy of a in eager
            d = P.mul(b, a)
        else:
            d = P.mul(b, P.pow(a, P.sub(b, 1) if is_tensor(b) else b - 1))
        grad_a = times_conj(g, d)
        if not isinstance(b, (int, float)) or b == 0:   # a tensor, a traced number, or 0
            grad_a = P.where(P.eq(_t(b, a), 0), 0, grad_a)
    if is_tensor(b):
        a_ = _t(a, b)
        grad_b = times_conj(g, P.mul(y, P.log(a_)))
        if not b.dtype.is_complex:
            grad_b = P.where(P.bitwise_and(P.eq(a_, 0), P.ge(b, 0)), 0, grad_b)
    return grad_a, grad_b


def _acosh_derivative(a, y):
    """torch's (a^2 - 1)^(-1/2): finite where a < -1 (acosh is NaN there), +inf at -1 and 1
    ((a - 1)(a + 1) is -0 at -1); complex: 1 / (sqrt(a - 1) sqrt(a + 1)), the principal
    branch's derivative."""
    if a.dtype.is_complex:
        return P.mul(P.rsqrt(P.sub(a, 1)), P.rsqrt(P.add(a, 1)))
    return P.rsqrt(P.sub(P.mul(a, a), 1))


def _floor_divide(a, b):
    """a // b as eager's div(rounding_mode="floor") computes it for floats (remainder's
    derivative in b is -(a // b), and floor(a / b) is off by one where a / b rounds up to an
    integer): (a - fmod(a, b)) / b, the remainder's sign and the rounding corrected; the true
    quotient where b is 0."""
    like = a if is_tensor(a) else b
    a, b = _t(a, like), _t(b, like)
    mod = P.fmod(a, b)
    div = P.div(P.sub(a, mod), b)
    wrong_sign = P.bitwise_and(P.ne(mod, 0), P.ne(P.lt(b, 0), P.lt(mod, 0)))
    div = P.where(wrong_sign, P.sub(div, 1), div)
    floor = P.floor(div)
    floor = P.where(P.gt(P.sub(div, floor), 0.5), P.add(floor, 1), floor)
    true_quotient = P.div(a, b)
    floor = P.where(P.ne(div, 0), floor, P.copysign(P.full((), 0, dtype=div.dtype,
                                                           device=div.device), true_quotient))
    return P.where(P.eq(b, 0), true_quotient, floor)


def _nextafter_vjp(g, y, a, b):
    """g to `a` but where a == b (the result is b there), as torch's; none to `b`."""
    if not is_tensor(a):
        return None, None
    return P.where(P.eq(_t(a, g), _t(b, g)), 0, g), None


def _extremum_vjp(loses):
    """maximum/minimum as torch.maximum differentiates: a tie splits g in halves, the losing
    operand gets none, and a NaN on either side gives both the whole g (neither loses)."""
    def rule(g, y, a, b):
        a, b = _t(a, g), _t(b, g)
        tie = P.eq(a, b)
        half = P.mul(g, 0.5)
        return (P.where(tie, half, P.where(getattr(P, loses)(a, b), 0, g)),
                P.where(tie, half, P.where(getattr(P, loses)(b, a), 0, g)))
    return rule


def _differentiate_as_vjp(g, y, value, carrier):
    """The value's gradient is the carrier's: g goes to `carrier`, none to `value`."""
    return None, g


def _fextremum_vjp(keeps):
    """fmax/fmin as torch differentiates them: g goes to `a` where it is kept (a >= b, or b is
    NaN; ties too), else to `b`."""
    def rule(g, y, a, b):
        first = P.bitwise_or(getattr(P, keeps)(a, b), P.isnan(b))
        return P.where(first, g, 0), P.where(first, 0, g)
    return rule


# name, torch implementation, accepted categories, result dtype, derivative: the factor f'
# of the chain rule g * conj(f') as a function of the operands and the result (a unary
# prim's (a, y), a binary prim's pair of partials (a, b, y), None for none), ZERO, a whole
# VJP rule, or a NotDifferentiable mark (primtrace.prims.differentiation)
UNARY = [
    ("abs", torch.abs, NUMERIC, "real", VJP(_abs_vjp)),
    ("neg", torch.neg, NUMERIC, "same", VJP(lambda g, y, a: (P.neg(g),))),
    ("sign", torch.sign, REAL, "same", ZERO),
    ("sgn", torch.sgn, COMPLEX, "same", VJP(_sgn_vjp)),
    ("signbit", torch.signbit, REAL, "bool", BOOL_RESULT),
    ("reciprocal", torch.reciprocal, FLOAT_COMPLEX, "same", lambda a, y: P.neg(P.mul(y, y))),
    # g / (2 conj(y)), as torch's: complex infinities and zeros divide as its do
    ("sqrt", torch.sqrt, FLOAT_COMPLEX, "same",
     VJP(lambda g, y, a: (P.div(g, P.mul(conjugated(y), 2)),))),
    ("rsqrt", torch.rsqrt, FLOAT_COMPLEX, "same", lambda a, y: P.mul(P.mul(y, P.mul(y, y)), -0.5)),
    ("exp", torch.exp, FLOAT_COMPLEX, "same", lambda a, y: y),
    ("exp2", torch.exp2, FLOAT_COMPLEX, "same", lambda a, y: P.mul(y, math.log(2))),
    # exp(a), not y + 1: that cancels to 0 below -37 (elu(alpha=1e300)'s gradient at -100)
    ("expm1", torch.expm1, FLOAT_COMPLEX, "same", lambda a, y: P.exp(a)),
    # log, log2, log10: g / a (as torch's), not g * (1 / a): 1 / a overflows for the smallest
    # denormals where the quotient does not
    ("log", torch.log, FLOAT_COMPLEX, "same", VJP(lambda g, y, a: (P.div(g, conjugated(a)),))),
    ("log1p", torch.log1p, FLOAT_COMPLEX, "same", lambda a, y: P.reciprocal(P.add(a, 1))),
    ("log2", torch.log2, FLOAT_COMPLEX, "same",
     VJP(lambda g, y, a: (P.div(g, conjugated(P.mul(a, math.log(2)))),))),
    ("log10", torch.log10, FLOAT_COMPLEX, "same",
     VJP(lambda g, y, a: (P.div(g, conjugated(P.mul(a, math.log(10)))),))),
    ("sin", torch.sin, FLOAT_COMPLEX, "same", lambda a, y: P.cos(a)),
    ("cos", torch.cos, FLOAT_COMPLEX, "same", lambda a, y: P.neg(P.sin(a))),
    ("tan", torch.tan, FLOAT_COMPLEX, "same", lambda a, y: P.add(P.mul(y, y), 1)),
    ("asin", torch.asin, FLOAT_COMPLEX, "same", lambda a, y: P.rsqrt(P.sub(1, P.mul(a, a)))),
    ("acos", torch.acos, FLOAT_COMPLEX, "same", lambda a, y: P.neg(P.rsqrt(P.sub(1, P.mul(a, a))))),
    ("atan", torch.atan, FLOAT_COMPLEX, "same", lambda a, y: P.reciprocal(P.add(P.mul(a, a), 1))),
    ("sinh", torch.sinh, FLOAT_COMPLEX, "same", lambda a, y: P.cosh(a)),
    ("cosh", torch.cosh, FLOAT_COMPLEX, "same", lambda a, y: P.sinh(a)),
    ("tanh", torch.tanh, FLOAT_COMPLEX, "same", lambda a, y: P.sub(1, P.mul(y, y))),
    ("asinh", torch.asinh, FLOAT_COMPLEX, "same", lambda a, y: P.rsqrt(P.add(P.mul(a, a), 1))),
    ("acosh", torch.acosh, FLOAT_COMPLEX, "same", _acosh_derivative),
    ("atanh", torch.atanh, FLOAT_COMPLEX, "same", lambda a, y: P.reciprocal(P.sub(1, P.mul(a, a)))),
    ("sigmoid", torch.sigmoid, FLOAT_COMPLEX, "same", lambda a, y: P.mul(y, P.sub(1, y))),
    ("erf", torch.erf, FLOATING, "same",
     lambda a, y: P.mul(P.exp(P.neg(P.mul(a, a))), 2 / math.sqrt(math.pi))),
    ("erfc", torch.erfc, FLOATING, "same",
     lambda a, y: P.mul(P.exp(P.neg(P.mul(a, a))), -2 / math.sqrt(math.pi))),
    ("erfinv", torch.erfinv, FLOATING, "same",
     lambda a, y: P.mul(P.exp(P.mul(y, y)), math.sqrt(math.pi) / 2)),
    ("erfcx", torch.special.erfcx, FLOATING, "same",
     lambda a, y: P.sub(P.mul(P.mul(a, y), 2), 2 / math.sqrt(math.pi))),
    ("lgamma", torch.lgamma, FLOATING, "same", lambda a, y: P.digamma(a)),
    ("digamma", torch.digamma, FLOATING, "same", lambda a, y: P.polygamma(a, 1)),
    ("i0", torch.i0, FLOATING, "same", lambda a, y: P.i1(a)),
    ("i0e", torch.special.i0e, FLOATING, "same", lambda a, y: P.sub(P.i1e(a), P.mul(P.sign(a), y))),
    ("i1", torch.special.i1, FLOATING, "same",
     lambda a, y: _near_zero(a, lambda s: P.sub(P.i0(s), P.div(y, s)))),
    ("i1e", torch.special.i1e, FLOATING, "same",
     lambda a, y: _near_zero(a, lambda s: P.sub(P.i0e(s),
                                                 P.mul(y, P.add(P.sign(a), P.reciprocal(s)))))),
    ("ndtri", torch.special.ndtri, FLOATING, "same",
     lambda a, y: P.mul(P.exp(P.mul(P.mul(y, y), 0.5)), math.sqrt(2 * math.pi))),
    ("log_ndtr", torch.special.log_ndtr, FLOATING, "same",
     lambda a, y: P.div(P.exp(P.sub(P.mul(P.mul(a, a), -0.5), y)), math.sqrt(2 * math.pi))),
    ("bessel_j0", torch.special.bessel_j0, FLOATING, "same", NO_TORCH_DERIVATIVE),
    ("bessel_j1", torch.special.bessel_j1, FLOATING, "same", NO_TORCH_DERIVATIVE),
    ("bessel_y0", torch.special.bessel_y0, FLOATING, "same", NO_TORCH_DERIVATIVE),
    ("bessel_y1", torch.special.bessel_y1, FLOATING, "same", NO_TORCH_DERIVATIVE),
    ("modified_bessel_i0", torch.special.modified_bessel_i0, FLOATING, "same", NO_TORCH_DERIVATIVE),
    ("modified_bessel_i1", torch.special.modified_bessel_i1, FLOATING, "same", NO_TORCH_DERIVATIVE),
    ("modified_bessel_k0", torch.special.modified_bessel_k0, FLOATING, "same", NO_TORCH_DERIVATIVE),
    ("modified_bessel_k1", torch.special.modified_bessel_k1, FLOATING, "same", NO_TORCH_DERIVATIVE),
    ("scaled_modified_bessel_k0", torch.special.scaled_modified_bessel_k0, FLOATING, "same",
     NO_TORCH_DERIVATIVE),
    ("scaled_modified_bessel_k1", torch.special.scaled_modified_bessel_k1, FLOATING, "same",
     NO_TORCH_DERIVATIVE),
    ("spherical_bessel_j0", torch.special.spherical_bessel_j0, FLOATING, "same",
     NO_TORCH_DERIVATIVE),
    ("airy_ai", torch.special.airy_ai, FLOATING, "same", NO_TORCH_DERIVATIVE),
    ("ceil", torch.ceil, FLOATING, "same", ZERO),
    ("floor", torch.floor, FLOATING, "same", ZERO),
    ("round", torch.round, FLOATING, "same", ZERO),
    ("trunc", torch.trunc, FLOATING, "same", ZERO),
    ("isfinite", torch.isfinite, FLOAT_COMPLEX, "bool", BOOL_RESULT),
    ("isnan", torch.isnan, FLOAT_COMPLEX, "bool", BOOL_RESULT),
    ("isinf", torch.isinf, FLOAT_COMPLEX, "bool", BOOL_RESULT),
    ("bitwise_not", torch.bitwise_not, INTEGRAL, "same", INTEGER_ONLY),
    ("real", lambda a: torch.real(a).clone(), COMPLEX, "real",
     VJP(lambda g, y, a: (to_complex(g, a),))),
    ("imag", lambda a: torch.imag(a).clone(), COMPLEX, "real",
     VJP(lambda g, y, a: (P.complex(zeros_like(g), g),))),
    ("conj", torch.conj_physical, COMPLEX, "same", VJP(lambda g, y, a: (P.conj(g),))),
    # a copy: what ceil/nan_to_num/... return for integers
    ("clone", torch.clone, ANY, "same", VJP(lambda g, y, a: (g,))),
]

BINARY = [
    ("add", torch.add, ANY, "same", VJP(lambda g, y, a, b: (g, g))),
    ("sub", torch.sub, NUMERIC, "same", VJP(lambda g, y, a, b: (g, P.neg(g)))),
    ("mul", torch.mul, ANY, "same", (lambda a, b, y: b, lambda a, b, y: a)),
    ("div", _int_div, NUMERIC, "same", VJP(_div_vjp)),
    ("remainder", torch.remainder, REAL_NUMERIC, "same",
     (lambda a, b, y: 1, lambda a, b, y: P.neg(_floor_divide(a, b)))),
    ("fmod", torch.fmod, REAL_NUMERIC, "same",
     (lambda a, b, y: 1, lambda a, b, y: P.neg(P.trunc(P.div(a, b))))),
    ("pow", torch.pow, NUMERIC, "same", VJP(_pow_vjp)),
    ("atan2", torch.atan2, FLOATING, "same", VJP(_atan2_vjp)),
    ("hypot", torch.hypot, FLOATING, "same",
     (lambda a, b, y: P.div(a, y), lambda a, b, y: P.div(b, y))),
    ("copysign", torch.copysign, FLOATING, "same",
     (lambda a, b, y: _at_zero(a, 0, P.div(y, a)), None)),
    ("nextafter", torch.nextafter, FLOATING, "same", VJP(_nextafter_vjp)),
    ("heaviside", torch.heaviside, REAL, "same", TORCH_RAISES),
    ("maximum", _maximum, REAL, "same", VJP(_extremum_vjp("lt"))),
    ("minimum", _minimum, REAL, "same", VJP(_extremum_vjp("gt"))),
    ("fmax", torch.fmax, REAL, "same", VJP(_fextremum_vjp("ge"))),
    ("fmin", torch.fmin, REAL, "same", VJP(_fextremum_vjp("le"))),
    # `value`, differentiated as `carrier`: how a ref states eager's derivative where its
    # prims' would differ (relu at 0, clamp at a bound); optimize() drops it (see below)
    ("differentiate_as", _differentiate_as, ANY, "same", VJP(_differentiate_as_vjp)),
    ("bitwise_and", torch.bitwise_and, INTEGRAL, "same", INTEGER_ONLY),
    ("bitwise_or", torch.bitwise_or, INTEGRAL, "same", INTEGER_ONLY),
    ("bitwise_xor", torch.bitwise_xor, INTEGRAL, "same", INTEGER_ONLY),
    ("shift_left", torch.bitwise_left_shift, frozenset({I}), "same", INTEGER_ONLY),
    ("shift_right", torch.bitwise_right_shift, frozenset({I}), "same", INTEGER_ONLY),
    ("eq", torch.eq, ANY, "bool", BOOL_RESULT),
    ("ne", torch.ne, ANY, "bool", BOOL_RESULT),
    ("lt", torch.lt, REAL, "bool", BOOL_RESULT),
    ("le", torch.le, REAL, "bool", BOOL_RESULT),
    ("gt", torch.gt, REAL, "bool", BOOL_RESULT),
    ("ge", torch.ge, REAL, "bool", BOOL_RESULT),
    ("gcd", torch.gcd, frozenset({I}), "same", INTEGER_ONLY),
    ("lcm", torch.lcm, frozenset({I}), "same", INTEGER_ONLY),
    ("zeta", torch.special.zeta, FLOATING, "same",
     (TORCH_RAISES, lambda x, q, y: P.mul(P.neg(_t(x, q)), P.zeta(P.add(_t(x, q), 1), q)))),
    ("igamma", torch.igamma, FLOATING, "same", (TORCH_RAISES, _igamma_dx)),
    ("igammac", torch.igammac, FLOATING, "same",
     (TORCH_RAISES, lambda a, x, y: P.neg(_igamma_dx(a, x, y)))),
    ("xlog1py", torch.special.xlog1py, FLOATING, "same",
     (lambda a, b, y: P.log1p(_t(b, a)), lambda a, b, y: P.div(a, P.add(b, 1)))),
    ("chebyshev_polynomial_t", torch.special.chebyshev_polynomial_t, FLOATING, "same",
     NO_TORCH_DERIVATIVE),
    ("chebyshev_polynomial_u", torch.special.chebyshev_polynomial_u, FLOATING, "same",
     NO_TORCH_DERIVATIVE),
    ("chebyshev_polynomial_v", torch.special.chebyshev_polynomial_v, FLOATING, "same",
     NO_TORCH_DERIVATIVE),
    ("chebyshev_polynomial_w", torch.special.chebyshev_polynomial_w, FLOATING, "same",
     NO_TORCH_DERIVATIVE),
    ("hermite_polynomial_h", torch.special.hermite_polynomial_h, FLOATING, "same",
     NO_TORCH_DERIVATIVE),
    ("hermite_polynomial_he", torch.special.hermite_polynomial_he, FLOATING, "same",
     NO_TORCH_DERIVATIVE),
    ("laguerre_polynomial_l", torch.special.laguerre_polynomial_l, FLOATING, "same",
     NO_TORCH_DERIVATIVE),
    ("legendre_polynomial_p", torch.special.legendre_polynomial_p, FLOATING, "same",
     NO_TORCH_DERIVATIVE),
    ("shifted_chebyshev_polynomial_t", torch.special.shifted_chebyshev_polynomial_t, FLOATING, "same",
     NO_TORCH_DERIVATIVE),
    ("shifted_chebyshev_polynomial_u", torch.special.shifted_chebyshev_polynomial_u, FLOATING, "same",
     NO_TORCH_DERIVATIVE),
    ("shifted_chebyshev_polynomial_v", torch.special.shifted_chebyshev_polynomial_v, FLOATING, "same",
     NO_TORCH_DERIVATIVE),
    ("shifted_chebyshev_polynomial_w", torch.special.shifted_chebyshev_polynomial_w, FLOATING, "same",
     NO_TORCH_DERIVATIVE),
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
DERIVATIVES = {}  # name -> VJP rule or NotDifferentiable mark
for _arity, _table in ((1, UNARY), (2, BINARY)):
    for _name, _impl, _allowed, _result, _derivative in _table:
        PRIMS[_name] = _make(_name, _impl, _allowed, _result)
        ARITY[_name] = _arity
        DERIVATIVES[_name] = elementwise_rule(_derivative, _arity)

globals().update(PRIMS)
__all__ = list(PRIMS)
