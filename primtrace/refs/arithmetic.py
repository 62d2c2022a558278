"""Binary arithmetic refs: add, sub, mul, the three divisions, remainder, fmod, pow.

Each ref is its promotion kind (in the decorator) plus the few prims that make the op; the
argument checks eager makes up front are the decorator's ``checks``. In-place variants
(``add_``...) compute out of place and write back into self with eager's checks.
"""
from __future__ import annotations

import torch

from primtrace import dtypes, prims
from primtrace.refs.checks import not_both_numbers, require_tensor, without_complex32
from primtrace.refs.core import (elementwise, exports, is_number, is_tensor, iterator_layout,
                                 maybe_convert, ref, to_tensor)
from primtrace.refs.out import copy_to_self
from primtrace.refs.promotion import DEFAULT, INT_TO_FLOAT
from primtrace.refs.scalars import number_category

Cat = dtypes.Category


# --- add, sub, mul ---------------------------------------------------------------------------
def _scaled(b, alpha, like):
    """alpha * b in the computation dtype; eager's alpha_check decides what alpha may be."""
    category, alpha_category = dtypes.category(like.dtype), number_category(alpha)
    if alpha_category == Cat.BOOL and category != Cat.BOOL:
        raise RuntimeError("Boolean alpha only supported for Boolean results.")
    if category <= Cat.INTEGER and alpha_category >= Cat.FLOATING:
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")
    if category == Cat.FLOATING and alpha_category == Cat.COMPLEX:
        raise RuntimeError("For non-complex input tensors, argument alpha must not be a complex number.")
    if category == Cat.BOOL:
        alpha = bool(alpha)  # eager casts an integer alpha to the bool computation type
    if is_number(b):
        b = to_tensor(b, like.dtype, like.device)
    return prims.mul(b, alpha)


@elementwise(DEFAULT, ("input", "other"), scalars="all", inplace=True)
def add(input, other, *, alpha=None):
    """input + alpha * other"""
    if alpha is not None:
        other = _scaled(other, alpha, input if is_tensor(input) else other)
    return prims.add(input, other)


def _no_bool(input, other):
    """Eager's sub_check: `-` on bool is an error, even when promotion would give an integer."""
    bools = [x for x in (input, other)
             if (x.dtype is torch.bool if is_tensor(x) else number_category(x) == Cat.BOOL)]
    if len(bools) == 2:
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported. "
                           "Use the `^` or `logical_xor()` operator instead.")
    if bools:
        raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported. "
                           "If you are trying to invert a mask, use the `~` or `logical_not()` "
                           "operator instead.")


@elementwise(DEFAULT, ("input", "other"), scalars="all", checks=[_no_bool], inplace=True,
             aliases=("subtract",))
def sub(input, other, *, alpha=None):
    """input - alpha * other"""
    if alpha is not None:
        other = _scaled(other, alpha, input if is_tensor(input) else other)
    return prims.sub(input, other)


@ref
def rsub(input, other, *, alpha=1):
    """other - alpha * input (eager has no out= and needs `input` to be a tensor)."""
    require_tensor("rsub", input)
    return sub(other, input, alpha=alpha)


@elementwise(DEFAULT, ("input", "other"), scalars="all", inplace=True, aliases=("multiply",))
def mul(input, other):
    return prims.mul(input, other)


# --- division --------------------------------------------------------------------------------
@elementwise(INT_TO_FLOAT, ("input", "other"), scalars="all", checks=[without_complex32("div_cpu")],
             inplace=True)
def true_divide(input, other):
    """input / other; integers divide as floats (the default dtype)."""
    return prims.div(input, other)


@elementwise(DEFAULT, ("input", "other"), scalars="all")
def trunc_divide(input, other):
    """div(rounding_mode="trunc"): C division on integers, trunc(a / b) on floats."""
    quotient = prims.div(input, other)
    dtype = (input if is_tensor(input) else other).dtype
    return quotient if dtypes.is_integer(dtype) else prims.trunc(quotient)


def _as_tensors(a, b):
    """Numbers become 0-dim tensors of the other operand's (computation) dtype."""
    like = a if is_tensor(a) else b
    return tuple(x if is_tensor(x) else to_tensor(x, like.dtype, like.device) for x in (a, b))


@elementwise(DEFAULT, ("input", "other"), scalars="all", inplace=True)
def floor_divide(input, other):
    """Python's a // b (div(rounding_mode="floor")).

    Integers: truncate, then step down where the signs differ and the division is inexact
    (uint8 cannot differ). Floats: eager's algorithm, which divides a - fmod(a, b) (exact in
    binary) and corrects the sign of the remainder and the rounding of the quotient; a zero
    divisor gives the true quotient (+-inf or nan) as IEEE division does.
    """
    a, b = _as_tensors(input, other)
    if dtypes.is_integer(a.dtype):
        quotient = prims.div(a, b)
        if a.dtype is torch.uint8:
            return quotient
        inexact = prims.ne(prims.fmod(a, b), 0)
        signs_differ = prims.ne(prims.lt(a, 0), prims.lt(b, 0))
        step = prims.convert_element_type(prims.bitwise_and(inexact, signs_differ), a.dtype)
        return prims.sub(quotient, step)
    mod = prims.fmod(a, b)
    div = prims.div(prims.sub(a, mod), b)
    wrong_sign = prims.bitwise_and(prims.ne(mod, 0), prims.ne(prims.lt(b, 0), prims.lt(mod, 0)))
    div = prims.where(wrong_sign, prims.sub(div, 1), div)
    floor = prims.floor(div)
    floor = prims.where(prims.gt(prims.sub(div, floor), 0.5), prims.add(floor, 1), floor)
    true_quotient = prims.div(a, b)
    zero = to_tensor(0.0, a.dtype, a.device)
    floor = prims.where(prims.ne(div, 0), floor, prims.copysign(zero, true_quotient))
    # trunc changes no value (each is an integer, +-inf or nan); its zero derivative makes the
    # gradient zeros, as eager's formula (through the true quotient it was g / 0 where b is 0)
    return iterator_layout(prims.trunc(prims.where(prims.eq(b, 0), true_quotient, floor)), a, b)


@ref(inplace=True, aliases=("divide",))
def div(input, other, *, rounding_mode=None, out=None):
    """true_divide, trunc_divide or floor_divide: the rounding mode also picks the promotion
    kind (int / int is float only without rounding)."""
    if rounding_mode is None:
        return true_divide(input, other, out=out)
    if rounding_mode == "trunc":
        return trunc_divide(input, other, out=out)
    if rounding_mode == "floor":
        return floor_divide(input, other, out=out)
    raise RuntimeError("div expected rounding_mode to be one of None, 'trunc', or 'floor' but "
                       f"found '{rounding_mode}'")


@elementwise(DEFAULT, ("input", "other"), scalars="all", checks=[not_both_numbers], inplace=True)
def remainder(input, other):
    """Python's a % b: the result takes the divisor's sign."""
    return prims.remainder(input, other)


@elementwise(DEFAULT, ("input", "other"), inplace=True)
def fmod(input, other):
    """C's fmod: the result takes the dividend's sign."""
    return prims.fmod(input, other)


# --- powers ----------------------------------------------------------------------------------
def _no_negative_integer_power(input, exponent):
    if (is_tensor(input) and is_number(exponent) and dtypes.is_integer(input.dtype)
            and number_category(exponent) <= Cat.INTEGER and exponent < 0):
        raise RuntimeError("Integers to negative integer powers are not allowed.")


@elementwise(DEFAULT, ("input", "exponent"), scalars="all", name="pow",
             checks=[not_both_numbers, _no_negative_integer_power, without_complex32("pow")])
def _pow(input, exponent):
    """pow's kernel: a bool result only comes from a bool tensor to a bool number, where
    eager's x ** 1 and x ** 0 shortcuts give the answer (there is no bool pow kernel)."""
    if is_number(exponent) and input.dtype is torch.bool:
        return prims.clone(input) if exponent else prims.full(
            tuple(input.shape), True, dtype=torch.bool, device=input.device)
    return prims.pow(input, exponent)


@ref(inplace=True, promote=_pow.promote, type_promotion_kind=_pow.type_promotion_kind)
def pow(input, exponent, *, out=None):
    """input ** exponent, in the promoted dtype (not BOOL_TO_LONG: eager's pow(bool, True)
    stays bool and bool ** bool tensors are an error, so plain promotion is what it does).

    A bool result only comes from a bool tensor to a bool number, where eager's x ** 1 and
    x ** 0 shortcuts give the answer (there is no bool pow kernel).
    """
    # float16 ** number: eager's kernel rounds the exponent to half and calls std::pow, without
    # the sqrt/rsqrt shortcuts the float32 kernel takes (which differ at -inf and -0), so the
    # number goes in as a 0-dim float16 tensor, which promotes the same way
    if (is_tensor(input) and input.dtype is torch.float16 and is_number(exponent)
            and number_category(exponent) <= Cat.FLOATING):
        exponent = to_tensor(exponent, torch.float16, input.device)
    return _pow.fn(input, exponent, out=out)  # its steps inline: one node, as pow is one op


def _float_power_dtype(input, exponent):
    complex_ = any((x.dtype.is_complex if is_tensor(x) else number_category(x) == Cat.COMPLEX)
                   for x in (input, exponent))
    return torch.complex128 if complex_ else torch.float64


@ref
def float_power(input, exponent, *, out=None):
    """pow computed in float64 (complex128 if either side is complex), whatever the inputs;
    eager also requires out= to have exactly that dtype."""
    require_tensor("float_power", input, exponent)
    dtype = _float_power_dtype(input, exponent)
    if out is not None and out.dtype != dtype:
        raise RuntimeError(f"the output given to float_power has dtype {dtypes.scalar_type_name(out.dtype)} "
                           f"but the operation's result requires dtype {dtypes.scalar_type_name(dtype)}")
    input, exponent = (maybe_convert(x, dtype) if is_tensor(x) else x for x in (input, exponent))
    return pow(input, exponent, out=out)


@ref
def float_power_(self, exponent):
    """In-place float_power: self must already be float64 (complex128)."""
    dtype = _float_power_dtype(self, exponent)
    if self.dtype != dtype:
        raise RuntimeError(f"the base given to float_power_ has dtype {dtypes.scalar_type_name(self.dtype)} "
                           f"but the operation's result requires dtype {dtypes.scalar_type_name(dtype)}")
    return copy_to_self(self, float_power(self, exponent), (self, exponent))


__all__ = exports(globals())
