"""torch.nn.functional's elementwise activations, written in prims.

``refs.nn.functional.<name>`` has the signature of ``torch.nn.functional.<name>``
(``inplace=`` included: the input is then written and returned). Each body is eager's CPU
formula, computed in the opmath dtype (float for float16/bfloat16) and rounded once; the
elementwise decorator (``refs.core``) does what they share, in eager's order: F's Python
checks, argument parsing, the checks before dispatch (an ``out=`` of another dtype, a dtype
the CPU kernel lacks), number parameters converted as eager's kernels convert them
(``numbers``), then ``inplace=True`` or ``out=``; ``inplace=True`` in the decorator makes
F's ``<op>_`` function.
"""
from __future__ import annotations

import functools
import math

import torch

from primtrace import dtypes, prims
from primtrace.refs.checks import dispatch, exact_out
from primtrace.refs.core import (COMPUTATION, INPUT, RAW, elementwise, exports, is_tensor,
                                 maybe_convert, ref, to_tensor, with_gradient)
from primtrace.refs.promotion import DEFAULT, INT_TO_FLOAT, elementwise_dtypes
from primtrace.refs.scalars import concrete, scalar_to, type_name

MODULE = "refs.nn.functional"
FLOATS = dtypes.FLOATS
REALS = (*dtypes.INTEGERS, *dtypes.FLOATS)
STRUCTURED_OUT = exact_out("Found dtype {found} but expected {expected}")

#: an activation: one tensor operand, `input`, printed as refs.nn.functional.<name>
activation = functools.partial(elementwise, promote=("input",), module=MODULE)


def constant(value, like):
    """A 0-dim tensor of `like`'s dtype holding `value` (maximum/minimum take no numbers)."""
    return to_tensor(value, like.dtype, like.device)


def clamp_dtypes(bool_message):
    """relu and hardtanh are clamps: bool has its own error, complex has clamp's."""
    def check(input):
        if input.dtype is torch.bool:
            raise RuntimeError(bool_message)
        if input.dtype.is_complex:
            raise NotImplementedError("clamp is not supported for complex types")
    return check


def method_of_input(method):
    """F calls ``input.<method>()``: anything but a tensor raises AttributeError first."""
    def check(input):
        if not is_tensor(input):
            raise AttributeError(f"'{type_name(input)}' object has no attribute '{method}'")
    return check


# --- clamps: relu, relu6, hardtanh -------------------------------------------------------------
@activation(DEFAULT, checks=[clamp_dtypes("Boolean inputs not supported for relu")],
            writes="input", inplace=True)
def relu(input):
    """max(x, 0), NaN kept (eager's clamp_min); differentiated as eager's threshold_backward:
    no gradient where x <= 0 (at 0 too), the whole gradient elsewhere (NaN included)."""
    x = input
    return with_gradient(prims.maximum(x, constant(0, x)), lambda: [(_not(prims.le(x, 0)), x)])


def _not(mask):
    return prims.bitwise_not(mask)


def _clamp(x, low, high):
    """min(max(x, low), high): NaN stays NaN; low > high gives high, as eager's clamp."""
    return prims.minimum(prims.maximum(x, constant(low, x)), constant(high, x))


def _between(x, low, high):
    """low < x < high, or x NaN: where hardtanh (and relu6) pass their gradient, as eager's
    hardtanh_backward (none where x <= low or x >= high)."""
    return _not(prims.bitwise_or(prims.le(x, constant(low, x)), prims.ge(x, constant(high, x))))


def _hardtanh_limit(value, dtype):
    """hardtanh's legacy rule: limits never promote; integer inputs truncate them to int64
    first, and uint8 refuses negative ones."""
    if dtypes.is_integer(dtype):
        value = scalar_to(value, torch.int64)
        if dtype is torch.uint8 and value < 0:
            raise RuntimeError("cannot do hardtanh on an unsigned type with negative limits")
    return scalar_to(value, dtype)


def _min_not_above_max(input, min_val, max_val):
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")


# hardtanh_ is the C++ op: min_val > max_val is not checked, everything clamps to max_val
@activation(DEFAULT, prechecks=[_min_not_above_max],
            numbers={"min_val": _hardtanh_limit, "max_val": _hardtanh_limit},
            checks=[clamp_dtypes("Bool inputs not supported for hardtanh")], writes="input",
            inplace=True)
def hardtanh(input, min_val=-1.0, max_val=1.0):
    """clamp(x, min_val, max_val), the limits in the input's dtype; the gradient passes
    strictly between them (and at NaN), as eager's hardtanh_backward."""
    x = input
    return with_gradient(_clamp(x, min_val, max_val),
                         lambda: [(_between(x, min_val, max_val), x)])


@activation(DEFAULT, checks=[clamp_dtypes("Bool inputs not supported for hardtanh")],
            writes="input")
def relu6(input):
    """hardtanh(x, 0, 6)."""
    return with_gradient(_clamp(input, 0, 6), lambda: [(_between(input, 0, 6), input)])


# --- piecewise linear: leaky_relu, rrelu, threshold ------------------------------------------
@activation(DEFAULT, numbers={"negative_slope": COMPUTATION},
            checks=[dispatch("leaky_relu_cpu", FLOATS)], writes="input", inplace=True)
def leaky_relu(input, negative_slope=0.01):
    """x > 0 ? x : x * negative_slope."""
    return prims.where(prims.gt(input, 0), input, prims.mul(input, negative_slope))


def _real(value) -> float:
    """A number parameter as the double eager's checks compare (a NumberProxy is read)."""
    return scalar_to(concrete(value), torch.float64)


def _lower_not_above_upper(input, lower, upper, training):
    if _real(lower) > _real(upper):
        raise RuntimeError("Lower bound should be less than or equal to the upper bound")


def _deterministic(training):
    if training:
        raise NotImplementedError("primtrace: rrelu(training=True) draws a random slope per "
                                  "element; only training=False has a ref")


@activation(DEFAULT, numbers={"lower": RAW, "upper": RAW},
            checks=[_lower_not_above_upper, dispatch("leaky_relu_cpu", FLOATS), _deterministic],
            writes="input", inplace=True)
def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False):
    """Evaluation mode: leaky_relu with the mean slope (lower + upper) / 2."""
    slope = scalar_to((_real(lower) + _real(upper)) / 2, input.dtype)
    return leaky_relu.body(input, slope)


@activation(DEFAULT, numbers={"threshold": COMPUTATION, "value": INPUT},
            checks=[dispatch("threshold_cpu", REALS)], writes="input", inplace=True)
def threshold(input, threshold, value):
    """x <= threshold ? value : x; value is rounded to the input's dtype."""
    return prims.where(prims.le(input, threshold), value, input)


# --- exponential: elu, selu, celu ------------------------------------------------------------
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _elu(x, negcoef, poscoef=1.0, negiptcoef=1.0):
    """eager's elu kernel: x <= 0 ? expm1(x * negiptcoef) * negcoef : x * poscoef. The
    exponential reads x only where it is taken (0 elsewhere): at inf or NaN its zero
    cotangent would make a NaN gradient (0 * exp(inf)) where eager's is g * poscoef."""
    negative = prims.le(x, 0)
    xn = prims.where(negative, x, 0)
    inner = xn if negiptcoef == 1.0 else prims.mul(xn, negiptcoef)
    positive = x if poscoef == 1.0 else prims.mul(x, poscoef)
    return prims.where(negative, prims.mul(prims.expm1(inner), negcoef), positive)


@activation(DEFAULT, numbers={"alpha": COMPUTATION}, checks=[dispatch("elu_cpu", FLOATS)],
            writes="input", inplace=True)
def elu(input, alpha=1.0):
    """x > 0 ? x : alpha * (exp(x) - 1), with expm1."""
    return _elu(input, alpha)


@activation(DEFAULT, checks=[dispatch("elu_cpu", FLOATS)], writes="input", inplace=True)
def selu(input):
    """scale * elu(x, alpha) with the self-normalizing constants."""
    negcoef = scalar_to(scalar_to(SELU_ALPHA, input.dtype) * scalar_to(SELU_SCALE, input.dtype),
                        input.dtype)
    return _elu(input, negcoef, scalar_to(SELU_SCALE, input.dtype))


def _alpha_not_zero(input, alpha):
    if _real(alpha) == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")


@activation(DEFAULT, numbers={"alpha": RAW},
            checks=[_alpha_not_zero, dispatch("elu_cpu", FLOATS)], writes="input", inplace=True)
def celu(input, alpha=1.0):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)): elu with input scale 1 / alpha."""
    inverse = scalar_to(1.0 / _real(alpha), input.dtype)
    return _elu(input, scalar_to(alpha, input.dtype), 1.0, inverse)


# --- smooth: gelu, silu, mish, softplus, logsigmoid ------------------------------------------
SQRT1_2 = math.sqrt(0.5)                                   # M_SQRT1_2
GELU_BETA = math.sqrt(2.0) * (2.0 / math.sqrt(math.pi)) * 0.5   # M_SQRT2 * M_2_SQRTPI * 0.5
GELU_KAPPA = 0.044715


def _approximate_known(input, approximate):
    if not isinstance(approximate, str):
        raise TypeError(f"gelu(): argument 'approximate' must be str, not {type(approximate).__name__}")
    if approximate not in ("none", "tanh"):
        raise RuntimeError("approximate argument must be either none or tanh.")


@activation(DEFAULT,
            checks=[_approximate_known, STRUCTURED_OUT, dispatch("GeluKernelImpl", FLOATS)])
def gelu(input, *, approximate="none"):
    """x * Phi(x): 0.5 * x * (1 + erf(x / sqrt(2))), or with tanh:
    0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3)))."""
    x = input
    if approximate == "tanh":
        cube = prims.mul(prims.mul(x, x), x)
        inner = prims.mul(prims.add(x, prims.mul(cube, GELU_KAPPA)), GELU_BETA)
        return prims.mul(prims.mul(x, 0.5), prims.add(prims.tanh(inner), 1))
    return prims.mul(prims.mul(x, 0.5), prims.add(prims.erf(prims.mul(x, SQRT1_2)), 1))


@activation(DEFAULT, checks=[dispatch("silu_cpu", (*FLOATS, *dtypes.COMPLEXES))],
            writes="input")
def silu(input):
    """x * sigmoid(x), as eager computes it: x / (1 + exp(-x)). Where exp(-x) overflows (x
    finite) the quotient is x / inf, computed so: exp's gradient there would be
    0 * inf = NaN (eager's is 0)."""
    if input.dtype.is_complex:
        return prims.div(input, prims.add(prims.exp(prims.neg(input)), 1))
    overflows = prims.bitwise_and(prims.gt(prims.neg(input), math.log(torch.finfo(input.dtype).max)),
                                  prims.ne(input, -math.inf))   # -inf: NaN, as eager's
    safe = prims.where(overflows, 0, input)
    quotient = prims.div(input, prims.add(prims.exp(prims.neg(safe)), 1))
    return prims.where(overflows, prims.div(input, math.inf), quotient)


@activation(DEFAULT, checks=[dispatch("mish_cpu", FLOATS)], writes="input")
def mish(input):
    """x * tanh(softplus(x)), softplus as log1p(exp(x)) (no threshold). Above 20 (finite) tanh
    of it is 1 in float32 and float64, so the exponential is computed at 20 there: the same
    values, and no 0 * exp(overflow) = NaN in the gradient."""
    capped = prims.where(prims.bitwise_and(prims.gt(input, 20), prims.ne(input, math.inf)), 20,
                         input)   # inf: NaN, as eager's
    return prims.mul(input, prims.tanh(prims.log1p(prims.exp(capped))))


@activation(DEFAULT, numbers={"beta": COMPUTATION, "threshold": COMPUTATION},
            checks=[STRUCTURED_OUT, dispatch("softplus_cpu", FLOATS)])
def softplus(input, beta=1, threshold=20):
    """log(1 + exp(beta * x)) / beta, reverting to x where beta * x > threshold."""
    scaled = prims.mul(input, beta)
    linear = prims.gt(scaled, threshold)
    # the exponential reads 0 where the result is x: exp(inf)'s zero cotangent would be NaN
    smooth = prims.div(prims.log1p(prims.exp(prims.where(linear, 0, scaled))), beta)
    value = prims.where(linear, input, smooth)
    if beta != 0:
        return value
    # beta == 0: the value is log(2) / 0, and eager's gradient g * sigmoid(x * 0), g / 2 (NaN
    # where x is not finite); the chain rule through the division by 0 gives 0 * inf = NaN
    half = prims.add(prims.mul(input, 0), 0.5)
    return with_gradient(value, lambda: [(linear, input),
                                         (prims.bitwise_not(linear), prims.mul(input, half))])


@activation(DEFAULT, name="log_sigmoid", checks=[  # F.logsigmoid is the C++ log_sigmoid
    dispatch("log_sigmoid_cpu", FLOATS),
    exact_out("expected scalar type {expected} but found {found}")])
def logsigmoid(input):
    """log(sigmoid(x)), stable for large |x|: min(x, 0) - log1p(exp(-|x|))."""
    return prims.sub(prims.minimum(input, constant(0, input)),
                     prims.log1p(prims.exp(prims.neg(prims.abs(input)))))


# --- hard: hardsigmoid, hardswish --------------------------------------------------------------
#: eager's hardsigmoid_backward multiplies by 1.0f / 6.0f, a float32 constant in every dtype
ONE_SIXTH_F32 = float(torch.tensor(1 / 6, dtype=torch.float32))


def _hard_middle(x):
    """-3 < x < 3, where hardsigmoid and hardswish are not flat (eager's backward kernels
    compare x, not x + 3: they differ where x + 3 rounds to 6)."""
    return prims.bitwise_and(prims.gt(x, -3), prims.lt(x, 3))


@activation(DEFAULT, checks=[dispatch("hardsigmoid_cpu", FLOATS)], writes="input")
def hardsigmoid(input):
    """min(max(x + 3, 0), 6) / 6; differentiated as eager: g * (1.0f / 6) where -3 < x < 3,
    0 elsewhere (NaN included)."""
    x = input
    return with_gradient(prims.div(_clamp(prims.add(x, 3), 0, 6), 6),
                         lambda: [(_hard_middle(x), prims.mul(x, ONE_SIXTH_F32))])


@activation(DEFAULT, checks=[dispatch("hardswish_cpu", FLOATS)], writes="input")
def hardswish(input):
    """x * min(max(x + 3, 0), 6) / 6; differentiated as eager: 0 where x <= -3,
    g * (x / 3 + 0.5) where x < 3, g elsewhere (NaN included)."""
    x = input

    def pieces():
        middle = _hard_middle(x)
        xm = prims.where(middle, x, 0)   # finite where the slope's zero cotangent arrives
        slope = with_gradient(prims.add(prims.div(xm, 3), 0.5))   # a factor: not differentiated
        return [(middle, prims.mul(xm, slope)), (_not(prims.lt(x, 3)), x)]
    return with_gradient(prims.div(prims.mul(x, _clamp(prims.add(x, 3), 0, 6)), 6), pieces)


# --- shrinkage: softshrink, hardshrink, tanhshrink -------------------------------------------
def _lambd_in_range(input, lambd):
    dtype = input.dtype
    high, value = torch.finfo(dtype).max, _real(lambd)
    if not 0 <= value <= high:
        found = int(value) if isinstance(concrete(lambd), (bool, int)) else f"{value:g}"
        raise RuntimeError(f"lambda must be in range [0, {high:g}] for input dtype "
                           f"{dtypes.scalar_type_name(dtype)}, but found {found}")


@activation(DEFAULT, numbers={"lambd": COMPUTATION},
            checks=[dispatch("softshrink_check", FLOATS), _lambd_in_range, STRUCTURED_OUT])
def softshrink(input, lambd=0.5):
    """x - lambd above lambd, x + lambd below -lambd, else 0 (x * 0: NaN stays NaN)."""
    x = input
    inner = prims.where(prims.lt(x, -lambd), prims.add(x, lambd), prims.mul(x, 0))
    # eager's softshrink_backward: 0 where -lambd <= x <= lambd, g elsewhere (NaN included)
    return with_gradient(prims.where(prims.gt(x, lambd), prims.sub(x, lambd), inner), lambda: [
        (_not(prims.bitwise_and(prims.ge(x, -lambd), prims.le(x, lambd))), x)])


@activation(DEFAULT, numbers={"lambd": INPUT},
            checks=[STRUCTURED_OUT, dispatch("hardshrink_cpu", FLOATS)])
def hardshrink(input, lambd=0.5):
    """0 where -lambd <= x <= lambd, else x; lambd is rounded to the input's dtype."""
    inside = prims.bitwise_and(prims.ge(input, -lambd), prims.le(input, lambd))
    return prims.where(inside, 0, input)


def _no_bool_subtraction(input):
    if input.dtype is torch.bool:
        raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported. "
                           "If you are trying to invert a mask, use the `~` or `logical_not()` "
                           "operator instead.")


@activation(INT_TO_FLOAT, prechecks=[method_of_input("tanh")], checks=[_no_bool_subtraction],
            writes=None)
def tanhshrink(input):
    """x - tanh(x) (eager: input - input.tanh(), two kernels; here rounded once)."""
    return prims.sub(input, prims.tanh(input))


# --- softsign, tanh, sigmoid: F's one-line Python definitions ----------------------------------
@ref(module=MODULE, promote=("input",), type_promotion_kind=INT_TO_FLOAT)
def softsign(input):
    """input / (input.abs() + 1), as F writes it: |input| + 1 is computed and rounded in
    the input's dtype (integers wrap: softsign(int8 -128) = -128 / -127), then a true
    division in the promoted float dtype."""
    if not is_tensor(input):
        raise AttributeError(f"'{type_name(input)}' object has no attribute 'abs'")
    if input.dtype is torch.bool:
        raise NotImplementedError("\"abs_cpu\" not implemented for 'Bool'")
    denominator = prims.add(prims.abs(input), 1)
    computation, result = elementwise_dtypes(input, denominator, type_promotion_kind=INT_TO_FLOAT)
    quotient = prims.div(maybe_convert(input, computation), maybe_convert(denominator, computation))
    return maybe_convert(quotient, result)


# Tensor.tanh and Tensor.sigmoid take every dtype (bool and integers as floats)
@activation(INT_TO_FLOAT, prechecks=[method_of_input("tanh")], writes=None)
def tanh(input):
    """input.tanh()."""
    return prims.tanh(input)


@activation(INT_TO_FLOAT, prechecks=[method_of_input("sigmoid")], writes=None)
def sigmoid(input):
    """input.sigmoid()."""
    return prims.sigmoid(input)


# --- prelu: a learned slope per channel --------------------------------------------------------
def _prelu_slope(input, weight):
    """Eager's checks, in its order; then weight along input's channel dimension (dim 1;
    dim 0 of a 1-d input), or a 0-dim weight as is."""
    for position, (pname, x) in enumerate((("input", input), ("weight", weight))):
        if not is_tensor(x):
            raise TypeError(f"prelu(): argument '{pname}' (position {position + 1}) must be "
                            f"Tensor, not {type_name(x)}")
    if input.dtype != weight.dtype:
        raise RuntimeError(f"prelu: Type promoting not supported. Got "
                           f"{dtypes.scalar_type_name(input.dtype)} and {dtypes.scalar_type_name(weight.dtype)}")
    if weight.numel() != 1:
        if input.ndim == 0:
            raise RuntimeError("Not allow zero-dim input tensor.")
        channels = input.shape[1] if input.ndim > 1 else 1
        if weight.numel() != channels:
            raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found "
                               f"parameter numbers = {weight.numel()} and channel size = {channels}.")
    if weight.ndim > 1:
        raise RuntimeError(f"prelu: Expected `weight` to be a scalar or 1D tensor, but got: "
                           f"ndim = {weight.ndim}")
    dispatch("prelu_cpu", FLOATS)(input)
    if weight.ndim == 0:
        return weight
    if input.ndim == 0:  # a one-element weight, as a 0-dim view
        return prims.squeeze(weight, (0,))
    return prims.broadcast_in_dim(weight, tuple(input.shape), (1 if input.ndim > 1 else 0,))


@ref(module=MODULE)
def prelu(input, weight):
    """x where x > 0, else weight * x, with one weight per channel (dim 1 of input); input
    and weight must share a float dtype (no promotion)."""
    slope = _prelu_slope(input, weight)
    dtype = dtypes.opmath(input.dtype)
    x, slope = maybe_convert(input, dtype), maybe_convert(slope, dtype)
    return maybe_convert(prims.where(prims.gt(x, 0), x, prims.mul(slope, x)), input.dtype)


# --- over the reductions: softmax and the norms, the regression losses -------------------------
from primtrace.refs.nn.classification import *  # noqa: E402,F401,F403
from primtrace.refs.nn.composites import *  # noqa: E402,F401,F403
from primtrace.refs.nn.attention import *  # noqa: E402,F401,F403  (multi-head attention)
from primtrace.refs.nn.losses import huber_loss, l1_loss, mse_loss, smooth_l1_loss  # noqa: E402
from primtrace.refs.nn.softmax_norms import (layer_norm, log_softmax, rms_norm, softmax,  # noqa: E402
                                             softmin)
from primtrace.refs.nn.convolution import *  # noqa: E402,F401,F403  (convolution and pooling)
from primtrace.refs.nn.shuffles import *  # noqa: E402,F401,F403  (pixel and channel shuffles)

__all__ = exports(globals(), MODULE)
