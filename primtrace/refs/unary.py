"""Unary elementwise refs: float math, signs, rounding, classification, complex parts.

Most ops are rows of a table: a promotion kind, then the prim of the same name. The
others are a few lines of prims each, where eager does something particular: integers
come back as copies (ceil, nan_to_num), bool is refused (neg), a composite formula
(sinc, logit, mvlgamma). Everything eager checks before running a kernel is checked here
first, with eager's exception type.
"""
from __future__ import annotations

import math
import operator

import torch

from primtrace import dtypes, prims
from primtrace.refs.checks import (boolean_out, not_implemented, refuse, same_dtype_out,
                                   same_dtype_out_unless_complex, tensor_argument)
from primtrace.refs.core import elementwise, exports, is_tensor, ref, with_gradient
from primtrace.refs.out import copy_to_self
from primtrace.refs.promotion import (ALWAYS_BOOL, BOOL_TO_LONG, COMPLEX_TO_FLOAT, DEFAULT,
                                      INT_TO_FLOAT, NO_OPMATH)
from primtrace.refs.scalars import python_type, type_name

_PI = math.pi
_PI_180 = 0.017453292519943295   # M_PI_180 in ATen
_180_PI = 57.29577951308232      # M_180_PI in ATen


# --- one prim after promotion: the table ------------------------------------------------------
def unary_ref(name, prim, kind=INT_TO_FLOAT, **options):
    """torch.<name>(input, *, out=None): `kind` promotion, then `prim`; `options` for
    elementwise (checks, aliases, module)."""
    def body(input):
        return prim(input)
    body.__name__ = body.__qualname__ = name
    body.__doc__ = f"{prim.qualname} after {kind.name} promotion."
    return elementwise(kind, ("input",), **options)(body)


# INT_TO_FLOAT: bool and integer inputs compute in the default float dtype, float16 and
# bfloat16 in float32 (rounded once at the end). The prims refuse what eager refuses
# (erf, lgamma, ... on complex: NotImplementedError).
FLOAT_MATH = ("sqrt", "rsqrt", "reciprocal", "exp", "exp2", "expm1", "log", "log1p", "log2",
              "log10", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh",
              "asinh", "acosh", "atanh", "sigmoid", "erf", "erfc", "erfinv", "lgamma", "digamma",
              "i0")
#: torch's other (NumPy's) names for some of them
ALIASES = {"asin": ("arcsin",), "acos": ("arccos",), "atan": ("arctan",), "asinh": ("arcsinh",),
           "acosh": ("arccosh",), "atanh": ("arctanh",)}
globals().update((name, unary_ref(name, getattr(prims, name), aliases=ALIASES.get(name, ())))
                 for name in FLOAT_MATH)
abs = unary_ref("abs", prims.abs, COMPLEX_TO_FLOAT, checks=[same_dtype_out_unless_complex],
                aliases=("absolute",))


# --- signs --------------------------------------------------------------------------------------
# checks=[...] lists the refusals eager makes before it looks at out=, with their exception type.
def is_bool(dtype):
    return dtype is torch.bool


def is_complex(dtype):
    return dtype.is_complex


refuse_complex_sign = refuse(is_complex, NotImplementedError,
                             "Unlike NumPy, torch.sign is not intended to support complex numbers. "
                             "Please use torch.sgn instead.")
refuse_bool_negation = refuse(is_bool, RuntimeError, "Negation, the `-` operator, on a bool "
                              "tensor is not supported. If you are trying to invert a mask, use "
                              "the `~` or `logical_not()` operator instead.")


@elementwise(DEFAULT, ("input",), checks=[refuse_bool_negation, same_dtype_out],
             aliases=("negative",))
def neg(input):
    """-input"""
    return prims.neg(input)


@ref
def positive(input):
    """input itself (no copy, no out=); eager refuses bool."""
    tensor_argument("positive", input)
    if input.dtype is torch.bool:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return input


@elementwise(DEFAULT, ("input",), checks=[refuse_complex_sign, same_dtype_out])
def sign(input):
    """-1, 0 or 1 (bool stays bool)."""
    return prims.sign(input)


@elementwise(DEFAULT, ("input",), checks=[same_dtype_out])
def sgn(input):
    """sign for real inputs; z / |z| (0 at 0) for complex."""
    return prims.sgn(input) if input.dtype.is_complex else prims.sign(input)


@elementwise(ALWAYS_BOOL, ("input",), checks=[
    refuse(is_complex, NotImplementedError, "signbit is not implemented for complex tensors."),
    boolean_out])
def signbit(input):
    """Whether the sign bit is set (true for -0.0 and negative NaN)."""
    return prims.signbit(input)


@elementwise(BOOL_TO_LONG, ("input",))
def square(input):
    """input * input; bool squares as int64."""
    return prims.mul(input, input)


# --- rounding -----------------------------------------------------------------------------------
def refuse_complex_rounding(name):
    return refuse(is_complex, NotImplementedError, f"{name} is not supported for complex inputs")


def rounding_ref(name, prim, aliases=()):
    """torch.<name>(input, *, out=None): the prim on floats; integers round to themselves
    (a copy); eager has no bool kernel."""
    def body(input):
        if input.dtype is torch.bool:
            raise not_implemented(f"{name}_vml_cpu", input.dtype)
        return prim(input) if input.dtype.is_floating_point else prims.clone(input)
    body.__name__ = body.__qualname__ = name
    body.__doc__ = rounding_ref.__doc__.replace("torch.<name>", f"torch.{name}")
    return elementwise(DEFAULT, ("input",), checks=[refuse_complex_rounding(name), same_dtype_out],
                       aliases=aliases)(body)


ceil, floor = rounding_ref("ceil", prims.ceil), rounding_ref("floor", prims.floor)
trunc = rounding_ref("trunc", prims.trunc, aliases=("fix",))


def round_decimals(x, decimals):
    """Round half to even at 10**-decimals, as eager: scale, round, unscale (in opmath)."""
    if decimals == 0:
        return prims.round(x)
    if decimals > 0:
        scale = 10.0 ** decimals
        return prims.div(prims.round(prims.mul(x, scale)), scale)
    scale = 10.0 ** -decimals
    return prims.mul(prims.round(prims.div(x, scale)), scale)


@elementwise(DEFAULT, ("input",), checks=[refuse_complex_rounding("round"), same_dtype_out])
def round(input, *, decimals=None):
    """Half to even. Integers come back as a copy, but only without `decimals`: eager
    refuses round(integer, decimals=0), hence None as the default."""
    if decimals is None and input.dtype is not torch.bool and not input.dtype.is_floating_point:
        return prims.clone(input)
    if not input.dtype.is_floating_point:
        raise not_implemented("round_cpu" if decimals is not None else "round_vml_cpu", input.dtype)
    return round_decimals(input, decimals or 0)


@elementwise(DEFAULT, ("input",), checks=[same_dtype_out])
def frac(input):
    """input - trunc(input), floats only."""
    if not input.dtype.is_floating_point:
        raise not_implemented("frac_cpu", input.dtype)
    return prims.sub(input, prims.trunc(input))


# --- classification -------------------------------------------------------------------------------
def _everywhere(answer, input):
    """A bool tensor shaped like input, all `answer` (input's values are not read)."""
    return prims.full_like(input, answer, dtype=torch.bool)


def classify_ref(name, prim, integer_answer):
    """torch.<name>(input) (no out=): the prim on floats/complex; bool and integers hold no
    NaN or infinity, so for them the answer is the same everywhere."""
    def body(input):
        if dtypes.is_integer(input.dtype):
            return _everywhere(integer_answer, input)
        return prim(input)
    body.__name__ = body.__qualname__ = name
    body.__doc__ = f"{prim.qualname}; {integer_answer} for every bool/integer element."
    return elementwise(ALWAYS_BOOL, ("input",), writes=None)(body)


isfinite = classify_ref("isfinite", prims.isfinite, True)
isnan, isinf = classify_ref("isnan", prims.isnan, False), classify_ref("isinf", prims.isinf, False)


def infinity_ref(name, infinity):
    """torch.isposinf/isneginf: input == +-inf; refuses complex inputs and non-bool out=."""
    def body(input):
        if dtypes.is_integer(input.dtype):
            return _everywhere(False, input)
        return prims.eq(input, infinity)
    body.__name__ = body.__qualname__ = name
    body.__doc__ = f"input == {infinity}; False for bool/integers."
    return elementwise(ALWAYS_BOOL, ("input",), checks=[
        refuse(is_complex, RuntimeError, f"{name} does not support complex inputs."),
        boolean_out])(body)


isposinf, isneginf = infinity_ref("isposinf", math.inf), infinity_ref("isneginf", -math.inf)


@ref
def isreal(input):
    """imag == 0 for complex (a NaN imaginary part is not real); True otherwise. No out=."""
    tensor_argument("isreal", input)
    if input.dtype.is_complex:
        return prims.eq(prims.imag(input), 0)
    return _everywhere(True, input)


# --- complex parts ------------------------------------------------------------------------------
def _part(input, which):
    """Component `which` (0 real, 1 imaginary) of a complex tensor, a view as eager's (of a
    conjugate view too)."""
    return (prims.real_view, prims.imag_view)[which](input)


@ref
def real(input):
    """The real part (a view of input, as eager's), or input itself when it is real."""
    tensor_argument("real", input)
    return _part(input, 0) if input.dtype.is_complex else input


@ref
def imag(input):
    """The imaginary part (a view of input, as eager's); refused for real tensors."""
    tensor_argument("imag", input)
    if not input.dtype.is_complex:
        raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")
    return _part(input, 1)


@ref
def conj(input):
    """The conjugate as eager's lazy view (the conjugate bit: same memory), or input itself
    if real."""
    tensor_argument("conj", input)
    return prims.conj_view(input) if input.dtype.is_complex else input


@elementwise(NO_OPMATH, ("input",), checks=[same_dtype_out])
def conj_physical(input):
    """The conjugate, materialized; a real input is returned as is."""
    return prims.conj(input) if input.dtype.is_complex else input


# angle's two promotion kinds are two refs, printed as refs.unary.complex_angle/real_angle
def complex_angle(input):
    """arg(z) = atan2(imag, real), a real result."""
    return prims.atan2(prims.imag(input), prims.real(input))


def real_angle(input):
    """pi where negative, else 0; NaN stays NaN. No gradient (eager's is zeros, at NaN too)."""
    return with_gradient(
        prims.where(prims.lt(input, 0), _PI, prims.where(prims.isnan(input), input, 0)))


_complex_angle = elementwise(COMPLEX_TO_FLOAT, ("input",), name="angle", module="refs.unary")(
    complex_angle)
_real_angle = elementwise(INT_TO_FLOAT, ("input",), name="angle", module="refs.unary")(real_angle)


@ref
def angle(input, *, out=None):
    """atan2(imag, real) for complex (a real result); for real inputs pi where negative,
    else 0, NaN kept; integers become the default float (two promotion kinds, two refs)."""
    tensor_argument("angle", input)
    return (_complex_angle if input.dtype.is_complex else _real_angle)(input, out=out)


# --- composites -------------------------------------------------------------------------------
def angle_units_ref(name, factor):
    """torch.deg2rad/rad2deg: input * factor; not for complex."""
    def body(input):
        if input.dtype.is_complex:
            raise RuntimeError(f"{name} is not supported for complex tensors.")
        return prims.mul(input, factor)
    body.__name__ = body.__qualname__ = name
    body.__doc__ = f"input * {factor}; complex is refused."
    return elementwise(INT_TO_FLOAT, ("input",))(body)


deg2rad, rad2deg = angle_units_ref("deg2rad", _PI_180), angle_units_ref("rad2deg", _180_PI)


@elementwise(INT_TO_FLOAT, ("input",))
def sinc(input):
    """sin(pi x) / (pi x), 1 at 0; complex too. The quotient reads 1 at 0, where it is not
    taken: its zero cotangent times its derivative there (0 / 0) would make a NaN gradient
    where eager's is 0."""
    zero = prims.eq(input, 0)
    product = prims.mul(prims.where(zero, 1, input), _PI)
    return prims.where(zero, 1, prims.div(prims.sin(product), product))


@elementwise(INT_TO_FLOAT, ("input",))
def logit(input, eps=None):
    """log(x / (1 - x)); with eps >= 0, x is first clamped to [eps, 1 - eps] (NaN kept).
    Differentiated as eager's logit_backward, g / (x * (1 - x)): g * inf at 0 and 1 and NaN
    outside [0, 1] without eps (the chain rule through the quotient gave NaN at 0 and 1,
    numbers outside), 0 outside [eps, 1 - eps] with it (NaN stays NaN)."""
    if input.dtype.is_complex:
        raise not_implemented("logit_cpu", input.dtype)
    x = input
    clamps = eps is not None and eps >= 0
    if clamps:
        # eager computes 1 - eps after rounding eps to the dtype: rarely, a last-bit difference
        low, high = eps, 1 - eps
        x = prims.where(prims.lt(input, low), low, prims.where(prims.gt(input, high), high, input))
    value = prims.log(prims.div(x, prims.sub(1, x)))

    def slope(x, divisor):
        """A carrier whose gradient is g / divisor (not differentiated itself)."""
        return prims.div(x, with_gradient(divisor))
    if clamps:
        def pieces():
            inside = prims.bitwise_not(prims.bitwise_or(prims.lt(input, low),
                                                        prims.gt(input, high)))   # NaN too
            xs = prims.where(inside, input, 0.5)   # a finite slope where the cotangent is 0
            return [(inside, slope(xs, prims.mul(xs, prims.sub(1, xs))))]
        return with_gradient(value, pieces)
    # NaN outside [0, 1]; g * inf at 0 (-0.0 too) and 1
    divisor = prims.where(prims.eq(input, 0), 0.0, prims.mul(input, prims.sub(1, input)))
    outside = prims.bitwise_or(prims.lt(input, 0), prims.gt(input, 1))
    return prims.differentiate_as(value, slope(input, prims.where(outside, math.nan, divisor)))


def _nan_to_num_real(x, nan, posinf, neginf):
    info = torch.finfo(x.dtype)
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf
    x = prims.where(prims.isnan(x), nan, x)
    x = prims.where(prims.eq(x, float("inf")), posinf, x)
    return prims.where(prims.eq(x, float("-inf")), neginf, x)


def _nan_to_num_out(input, out):
    if is_tensor(input) and is_tensor(out) and out.dtype != input.dtype:
        raise RuntimeError(f"nan_to_num: dtype of out: {dtypes.scalar_type_name(out.dtype)} should be "
                           f"same as input: {dtypes.scalar_type_name(input.dtype)}")


@elementwise(NO_OPMATH, ("input",), checks=[_nan_to_num_out])
def nan_to_num(input, nan=0.0, posinf=None, neginf=None):
    """NaN -> nan, +inf -> posinf, -inf -> neginf (default: the dtype's largest finite
    values), all cast to the input's dtype (so NO_OPMATH: float16 replacements round to
    float16); complex: each part on its own; bool and integers: a copy."""
    if dtypes.is_integer(input.dtype):
        return prims.clone(input)
    if input.dtype.is_complex:
        return prims.complex(_nan_to_num_real(prims.real(input), nan, posinf, neginf),
                             _nan_to_num_real(prims.imag(input), nan, posinf, neginf))
    return _nan_to_num_real(input, nan, posinf, neginf)


def _int_argument(op_name, pname, position, value):
    """Eager's parser for an int parameter (a runtime int is read: it picks the kernel)."""
    if python_type(value) is not int:
        raise TypeError(f"{op_name}(): argument '{pname}' (position {position}) must be int, "
                        f"not {type_name(value)}")


def _check_polygamma(n):
    _int_argument("polygamma", "n", 1, n)
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")


@elementwise(INT_TO_FLOAT, ("input",), checks=[_check_polygamma])
def polygamma(n, input):
    """The n-th derivative of digamma; n is a Python int >= 0 (a runtime int is specialized
    on its value: it picks the kernel)."""
    return prims.polygamma(input, operator.index(n))


def _check_mvlgamma(input, p):
    if input.dtype is torch.bool:
        raise RuntimeError("The input tensor may not be a boolean tensor.")
    _int_argument("mvlgamma", "p", 2, p)
    if p < 1:
        raise RuntimeError("p has to be greater than or equal to 1")


@elementwise(INT_TO_FLOAT, ("input",), checks=[_check_mvlgamma])
def mvlgamma(input, p):
    """Multivariate log-gamma: the sum over j < p of lgamma(x - j/2), plus p(p-1)/4 log(pi).

    Eager sums the p terms with its reduction kernel, in an order that depends on the CPU's
    vector width, so no fixed order reproduces it bit for bit. We compute in float64 (for
    float32 and the half types alike) and round once: the nearest float32 (or half) to the
    float64 result, so at least as close to it as eager's.
    """
    x = prims.convert_element_type(input, torch.float64) if input.dtype is torch.float32 else input
    total = prims.lgamma(prims.add(x, 0.0))   # -0.0 as +0.0: eager's derivative (its arange
    # of offsets added to x) is digamma(+0) = -inf there, lgamma's own digamma(-0) = +inf
    for j in range(1, operator.index(p)):  # a runtime p is specialized: it makes the trace
        total = prims.add(total, prims.lgamma(prims.sub(x, j / 2)))
    return prims.add(total, p * (p - 1) / 4 * math.log(math.pi))


# --- in-place variants that inplace_variant(op) would get wrong -------------------------------
# (the tracer makes the others, x.sin_() and co., from the out-of-place refs)
@ref(aliases=("absolute_",))
def abs_(input):
    """abs written back into input; eager refuses complex input (|z| is real)."""
    tensor_argument("abs_", input)
    if input.dtype.is_complex:
        raise RuntimeError("In-place abs is not supported for complex tensors.")
    return copy_to_self(input, abs(input), (input,))


@ref
def polygamma_(input, n):
    """Tensor.polygamma_(n): self comes first here, unlike torch.polygamma(n, input)."""
    tensor_argument("polygamma_", input)
    return copy_to_self(input, polygamma(n, input), (input,))


__all__ = exports(globals())
