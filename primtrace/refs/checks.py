"""Errors eager raises before a kernel runs: the checks of ``@elementwise(checks=[...])``.

A check names what it reads (``refs.core``): the op's parameters (``input``, ``out``...),
``name`` (the op's), ``operands`` (the promoted values), ``computation`` and ``result`` (the
dtypes). It raises eager's error, with eager's exception type, or returns. The checks read
only metadata and Python numbers (reading a runtime number specializes a trace on its value,
which is what eager's value-dependent errors require). The helpers at the end raise the
same errors from refs written as plain functions.
"""
from __future__ import annotations

import torch

from primtrace import dtypes, prims
from primtrace.refs.core import is_tensor
from primtrace.refs.promotion import result_type

__all__ = []  # helpers, not refs


def not_implemented(kernel, dtype):
    """Eager's dispatch error: `kernel` has no version for `dtype`."""
    name = dtypes.scalar_type_name(dtype)
    return NotImplementedError(f'"{kernel}" not implemented for \'{name}\'')


# --- dtypes a kernel lacks ---------------------------------------------------------------------
def dispatch(kernel, accepted):
    """A check: `kernel` exists for the `accepted` input dtypes only."""
    def check(input):
        if input.dtype not in accepted:
            raise not_implemented(kernel, input.dtype)
    return check


def refuse(predicate, error_type, message):
    """A check: raise error_type(message) when `predicate(input dtype)` holds."""
    def check(input):
        if is_tensor(input) and predicate(input.dtype):
            raise error_type(message)
    return check


def no_low_precision(name, result):
    """Eager's CPU kernel has no float16/bfloat16 version of this op."""
    if result in (torch.float16, torch.bfloat16):
        raise not_implemented(f"{name}_cpu", result)


def without_complex32(kernel):
    """A check: eager has no ComplexHalf CPU kernel for this op (only add, sub, mul, eq, ne,
    where and addcmul have one), so a complex32 result is an error, not a complex64
    computation."""
    def check(operands):
        if result_type(*operands) is torch.complex32:
            raise NotImplementedError(f'"{kernel}" not implemented for \'ComplexHalf\'')
    check.__name__ = "without_complex32"
    return check


# --- argument combinations ---------------------------------------------------------------------
def not_both_numbers(name, operands):
    """Eager takes a Python number for either operand, not for all of them."""
    require_tensor(name, *operands)


# --- out= dtypes ---------------------------------------------------------------------------------
def boolean_out(name, out):
    """Eager refuses a non-bool out= (rather than casting the bool result to it)."""
    if is_tensor(out) and out.dtype is not torch.bool:
        raise RuntimeError(f"{name} does not support non-boolean outputs.")


def same_dtype_out(input, out):
    """out= must have the input's dtype exactly: these unary ops do not cast on store
    (TensorIterator's check_all_same_dtype), unlike the float ones (safe casting)."""
    if is_tensor(input) and is_tensor(out) and out.dtype != input.dtype:
        raise RuntimeError(f"Found dtype {dtypes.scalar_type_name(out.dtype)} but expected "
                           f"{dtypes.scalar_type_name(input.dtype)}")


def same_dtype_out_unless_complex(input, out):
    """abs: exact out= dtype for real inputs; |complex| is cast safely (to complex too)."""
    if not (is_tensor(input) and input.dtype.is_complex):
        same_dtype_out(input, out)


def input_dtype_out(input, out):
    """A unary kernel's out= must have the input's dtype exactly (bitwise_not's wording)."""
    if is_tensor(input):
        check_out_dtype(out, input.dtype)


def exact_out(message):
    """A check: out= must have the result dtype; `message` formats eager's error from the
    names of the {found} and {expected} dtypes."""
    def check(out, result):
        if is_tensor(out) and out.dtype != result:
            raise RuntimeError(message.format(found=dtypes.scalar_type_name(out.dtype),
                                              expected=dtypes.scalar_type_name(result)))
    check.__name__ = "exact_out"
    return check


# --- helpers for refs written as plain functions -------------------------------------------------
def tensor_argument(name, input):
    """Eager's TypeError for a non-tensor input."""
    if not is_tensor(input):
        raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, "
                        f"not {type(input).__name__}")


def require_tensor(op_name, *args):
    """Eager has no overload taking only numbers: at least one argument must be a tensor."""
    if not any(is_tensor(a) for a in args):
        kinds = ", ".join(type(a).__name__ for a in args)
        raise TypeError(f"{op_name}() received an invalid combination of arguments - got ({kinds})")


def check_fits(value, dtype):
    """Raise eager's error where a Python number does not convert to `dtype`. A runtime
    number (a NumberProxy while tracing) is checked at run time by a guard node, so the
    trace is not specialized on its value."""
    prims.check_fits(value, dtype)


def check_out_dtype(out, dtype):
    """For ops whose out= must have exactly the result dtype (no safe cast)."""
    if out is not None and out.dtype != dtype:
        raise RuntimeError(f"Expected out type to be {dtypes.scalar_type_name(dtype)} but got "
                           f"{dtypes.scalar_type_name(out.dtype)}")
