"""Binary math refs: atan2, hypot, copysign, nextafter, maximum/minimum, fmax/fmin, gcd, lcm,
igamma, igammac (one ``make_binary`` line each: promotion kind + one prim), heaviside (its
prim after eager's dtype checks), and the composites xlogy, logaddexp, logaddexp2, ldexp
(with its inverse frexp) written in prims.
"""
from __future__ import annotations

import math

import torch

from primtrace import dtypes, prims
from primtrace.refs import arithmetic
from primtrace.refs.checks import not_both_numbers, without_complex32
from primtrace.refs.core import iterator_layout
from primtrace.refs.core import (broadcast, broadcast_shapes, elementwise, exact_add, exact_sub,
                                 exports, is_tensor, maybe_convert, ref, to_tensor,
                                 with_gradient)
from primtrace.refs.out import copy_to_out
from primtrace.refs.promotion import DEFAULT, INT_TO_FLOAT, NO_OPMATH


def make_binary(name, prim, kind, scalars=(), doc=None, complex32=True, checks=(), **options):
    """A ref `name(input, other)` = `prim` on the promoted, broadcast operands.

    `scalars` names the parameters eager lets be Python numbers (a TypeError for the others
    before any dtype error); `complex32=False` where eager has no ComplexHalf kernel;
    `checks` and `options` for elementwise (inplace, aliases).
    """
    def body(input, other):
        return prim(input, other)
    body.__name__, body.__qualname__ = name, name
    body.__doc__ = doc or f"{name}(input, other): prims.{prim.name} after {kind.value} promotion."
    first = [not_both_numbers] if len(scalars) == 2 else []  # either side, but not both
    if not complex32:
        first.append(without_complex32(f"{name}_cpu"))
    return elementwise(kind, ("input", "other"), scalars=tuple(scalars), checks=[*first, *checks],
                       **options)(body)


def _not_complex(name, computation):
    """maximum/minimum/fmax/fmin: eager refuses complex tensors with a RuntimeError."""
    if computation.is_complex:
        raise RuntimeError(f"{name} not implemented for complex tensors.")


# one prim after `kind` promotion; ("other",): the operands that may be Python numbers
atan2 = make_binary("atan2", prims.atan2, INT_TO_FLOAT, inplace=True, aliases=("arctan2",))
hypot = make_binary("hypot", prims.hypot, DEFAULT, inplace=True)
copysign = make_binary("copysign", prims.copysign, INT_TO_FLOAT, ("other",), inplace=True)
nextafter = make_binary("nextafter", prims.nextafter, NO_OPMATH, inplace=True)
# NaN-propagating, then NaN-ignoring
maximum = make_binary("maximum", prims.maximum, DEFAULT, checks=[_not_complex])
minimum = make_binary("minimum", prims.minimum, DEFAULT, checks=[_not_complex])
fmax = make_binary("fmax", prims.fmax, DEFAULT, checks=[_not_complex])
fmin = make_binary("fmin", prims.fmin, DEFAULT, checks=[_not_complex])
gcd = make_binary("gcd", prims.gcd, DEFAULT, inplace=True)
lcm = make_binary("lcm", prims.lcm, DEFAULT, inplace=True)
# torch.special.gammainc(c): DEFAULT, as eager has no integer kernel to promote to
igamma = make_binary("igamma", prims.igamma, DEFAULT, inplace=True)
igammac = make_binary("igammac", prims.igammac, DEFAULT, inplace=True)


def _as_tensors(a, b):
    like = a if is_tensor(a) else b
    return tuple(x if is_tensor(x) else to_tensor(x, like.dtype, like.device) for x in (a, b))


def _no_complex_kernel(name, t):
    if t.dtype.is_complex:
        raise NotImplementedError(f'"{name}_cpu" not implemented for \'{dtypes.scalar_type_name(t.dtype)}\'')


@elementwise(INT_TO_FLOAT, ("input", "other"), scalars="all",
             checks=[not_both_numbers, without_complex32("xlogy_cpu")], inplace=True)
def xlogy(input, other):
    """x * log(y), defined as 0 where x == 0 (even for y == 0) and nan where y is nan."""
    x, y = _as_tensors(input, other)
    _no_complex_kernel("xlogy", x)
    product = prims.where(prims.eq(x, 0), 0.0, prims.mul(x, prims.log(y)))
    value = prims.where(prims.isnan(y), math.nan, product)

    def pieces():
        # eager's rule: g * log(y) to x but 0 where x == 0 and y <= 0, g * x / y to y (the
        # zero branch stopped x's: log(2) where x is 0); each product reads safe operands
        # where the other piece holds (0 * log(0) would be NaN)
        edge = prims.bitwise_and(prims.eq(x, 0), prims.le(y, 0))
        inside = prims.mul(x, prims.log(prims.where(edge, 1, y)))
        at_edge = prims.mul(with_gradient(prims.where(edge, x, 0)),
                            prims.log(prims.where(edge, y, 1)))
        return [(prims.bitwise_not(edge), inside), (edge, at_edge)]
    return iterator_layout(with_gradient(value, pieces), x, y)


@elementwise(DEFAULT, ("input", "other"), scalars=(), checks=[without_complex32("logaddexp_cpu")])
def logaddexp(input, other):
    """log(exp(a) + exp(b)) without overflow: max + log1p(exp(-|a - b|)); equal infinities
    return themselves (their difference would be nan)."""
    a, b = input, other
    if a.dtype.is_complex:
        return _logaddexp_complex(a, b)
    same_infinity = prims.bitwise_and(prims.isinf(a), prims.eq(a, b))
    larger = prims.maximum(a, b)
    result = prims.add(larger, prims.log1p(prims.exp(prims.neg(prims.abs(prims.sub(a, b))))))
    return prims.where(same_infinity, a, result)


def _logaddexp_complex(a, b):
    """Eager's complex helper: order by real part (b first on ties), nan anywhere makes
    nan + nan j, equal infinite real parts are handled apart, else log1p(exp(min - max)) + max."""
    a_first = prims.lt(prims.real(a), prims.real(b))
    low, high = prims.where(a_first, a, b), prims.where(a_first, b, a)
    low_re, high_re = prims.real(low), prims.real(high)
    general = exact_add(prims.log1p(prims.exp(exact_sub(low, high))), high)
    infinite = prims.where(prims.lt(low_re, 0), low,
                           prims.log(exact_add(prims.exp(low), prims.exp(high))))
    same_infinity = prims.bitwise_and(prims.isinf(low_re), prims.eq(low_re, high_re))
    result = prims.where(same_infinity, infinite, general)
    any_nan = prims.bitwise_or(prims.isnan(a), prims.isnan(b))
    return prims.where(any_nan, complex(math.nan, math.nan), result)


@elementwise(DEFAULT, ("input", "other"), scalars=())
def logaddexp2(input, other):
    """log2(2**a + 2**b) = max + log1p(2**-|a - b|) / ln 2."""
    a, b = input, other
    _no_complex_kernel("logaddexp2", a)
    same_infinity = prims.bitwise_and(prims.isinf(a), prims.eq(a, b))
    larger = prims.maximum(a, b)
    log1p_term = prims.log1p(prims.exp2(prims.neg(prims.abs(prims.sub(a, b)))))
    result = prims.add(larger, prims.mul(log1p_term, 1.0 / math.log(2.0)))
    return prims.where(same_infinity, a, result)


@ref(inplace=True)
def ldexp(input, other, *, out=None):
    """input * 2 ** other. A float input with an integer exponent is scaled exactly, as C's
    ldexp(double, int) then rounded once to input's dtype; other cases multiply by a power
    of two computed like eager's _pow2 (in float32 for integer and float32 inputs, else in
    input's dtype, promoted with other)."""
    if not (is_tensor(input) and is_tensor(other)):
        raise TypeError("ldexp(): arguments 'input' and 'other' must be Tensors")
    if out is not None and dtypes.is_integer(out.dtype):
        raise RuntimeError(f"ldexp can't be cast to the desired output type {dtypes.scalar_type_name(out.dtype)}")
    if (dtypes.is_integer(other.dtype) and input.dtype.is_floating_point
            and (out is None or out.dtype == input.dtype)):
        if other.dtype is torch.bool:
            raise NotImplementedError('"ldexp_cpu_exp" not implemented for \'Bool\'')
        result = _scale_by_power_of_two(input, other)
        return result if out is None else copy_to_out(out, result, (input, other))
    if dtypes.is_integer(input.dtype) or input.dtype is torch.float32:
        power = arithmetic.pow(2.0, other)
    else:
        power = arithmetic.pow(to_tensor(2.0, input.dtype, input.device), other)
    return arithmetic.mul(input, power, out=out)


def _scale_by_power_of_two(x, e):
    """x * 2**e computed in float64 and rounded once to x's dtype. e goes through int32 (the
    int of std::ldexp) and is clamped to +-2100, beyond which every finite float64 over- or
    underflows anyway; the power is applied in three exact factors 2**k, |k| <= 702."""
    dtype = x.dtype
    shape = broadcast_shapes(tuple(x.shape), tuple(e.shape))
    x = broadcast(prims.convert_element_type(x, torch.float64), shape)
    e = prims.convert_element_type(prims.convert_element_type(e, torch.int32), torch.float64)
    limit = to_tensor(2100.0, torch.float64, e.device)
    e = broadcast(prims.minimum(prims.maximum(e, prims.neg(limit)), limit), shape)
    third = prims.pow(2.0, prims.trunc(prims.div(e, 3.0)))
    rest = prims.pow(2.0, prims.sub(e, prims.mul(prims.trunc(prims.div(e, 3.0)), 2.0)))
    return prims.convert_element_type(prims.mul(prims.mul(prims.mul(x, third), third), rest), dtype)


def _frexp_check(input, out=None):
    if not is_tensor(input):
        raise TypeError(f"frexp(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    if not input.dtype.is_floating_point:
        raise RuntimeError("torch.frexp() only supports floating-point dtypes")
    if out is not None:
        mantissa, exponent = out
        if mantissa.dtype != input.dtype:
            raise RuntimeError(f"torch.frexp() expects mantissa to have dtype "
                               f"{dtypes.type_meta_name(input.dtype)} but got {dtypes.type_meta_name(mantissa.dtype)}")
        if exponent.dtype != torch.int32:
            raise RuntimeError(f"torch.frexp() expects exponent to have int dtype but got "
                               f"{dtypes.type_meta_name(exponent.dtype)}")


@ref
def frexp(input, *, out=None):
    """(mantissa, exponent): input = mantissa * 2**exponent with |mantissa| in [0.5, 1), an
    int32 exponent; 0, infinities and NaN are their own mantissa, with exponent 0.

    In float64 (which holds every half and float32 value as a normal number): the exponent
    is floor(log2|x|) + 1, moved by one where log2 rounded across a power of two (then the
    scaled value lands outside [0.5, 1)); the mantissa is x scaled exactly, as ldexp scales,
    so it is exact in input's dtype."""
    _frexp_check(input, out)
    x = maybe_convert(input, torch.float64)
    regular = prims.bitwise_and(prims.isfinite(x), prims.ne(x, 0))
    guess = prims.where(regular, prims.add(prims.floor(prims.log2(prims.abs(x))), 1), 0.0)
    scaled = _scale_by_power_of_two(x, prims.neg(guess))
    high = prims.bitwise_and(prims.ge(prims.abs(scaled), 1), regular)
    low = prims.bitwise_and(prims.lt(prims.abs(scaled), 0.5), regular)
    mantissa = prims.where(high, prims.mul(scaled, 0.5),
                           prims.where(low, prims.mul(scaled, 2), scaled))
    exponent = prims.where(high, prims.add(guess, 1), prims.where(low, prims.sub(guess, 1), guess))
    result = (maybe_convert(mantissa, input.dtype), prims.convert_element_type(exponent, torch.int32))
    if out is not None:
        result = tuple(copy_to_out(o, r, (input,)) for o, r in zip(out, result))
    return torch.return_types.frexp(result)


def _heaviside_check(input, values, out):
    if input.dtype.is_complex or values.dtype.is_complex:
        raise RuntimeError("heaviside is not yet implemented for complex tensors.")
    if input.dtype != values.dtype or (out is not None and out.dtype != input.dtype):
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes.")


@elementwise(DEFAULT, ("input", "values"), scalars=(), checks=[_heaviside_check], inplace=True)
def heaviside(input, values):
    """0 for x < 0 (and nan), `values` where x == 0, 1 for x > 0: prims.heaviside."""
    return prims.heaviside(input, values)


__all__ = exports(globals())
