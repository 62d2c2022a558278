"""Errors eager raises before any kernel runs, as checks stacked on the unary/special refs.

``@precheck(check, ...)`` above ``@elementwise(...)`` runs each ``check(ref, arguments)``
(the arguments as passed, before promotion) in order, so the refusals an op makes up
front read at the top of its definition: a dtype its CPU kernel lacks, an out= dtype it
will not cast to, an argument combination its signature does not accept. The ref stays
one Symbol: one node in a trace.
"""
from __future__ import annotations

import functools
import inspect

import torch

from primtrace import dtypes
from primtrace.refs.core import is_tensor
from primtrace.refs.promotion import elementwise_dtypes

__all__ = ["precheck", "result_dtype", "no_low_precision", "no_out", "boolean_out",
           "same_dtype_out", "same_dtype_out_unless_complex", "refuse", "not_both_numbers",
           "not_implemented", "tensor_argument"]


def precheck(*checks):
    def decorate(sym):
        run = sym.fn
        signature = inspect.signature(run)

        @functools.wraps(run)
        def checked(*args, **kwargs):
            arguments = signature.bind(*args, **kwargs).arguments
            for check in checks:
                check(sym, arguments)
            return run(*args, **kwargs)
        sym.fn = sym.__wrapped__ = checked
        return sym
    return decorate


def result_dtype(sym, arguments):
    """The result dtype `sym` will produce for these arguments (None without a tensor)."""
    operands = [arguments[p] for p in sym.promote if p in arguments]
    if not any(is_tensor(o) for o in operands):
        return None
    return elementwise_dtypes(*operands, type_promotion_kind=sym.type_promotion_kind)[1]


def not_implemented(kernel, dtype):
    return NotImplementedError(f'"{kernel}" not implemented for \'{dtypes.scalar_type_name(dtype)}\'')


def no_low_precision(sym, arguments):
    """Eager's CPU kernel has no float16/bfloat16 version of this op."""
    dtype = result_dtype(sym, arguments)
    if dtype in (torch.float16, torch.bfloat16):
        raise not_implemented(f"{sym.name}_cpu", dtype)


def no_out(sym, arguments):
    """The torch function has no out= parameter."""
    if "out" in arguments:
        raise TypeError(f"{sym.name}() got an unexpected keyword argument 'out'")


def boolean_out(sym, arguments):
    """Eager refuses a non-bool out= (rather than casting the bool result to it)."""
    out = arguments.get("out")
    if is_tensor(out) and out.dtype is not torch.bool:
        raise RuntimeError(f"{sym.name} does not support non-boolean outputs.")


def same_dtype_out(sym, arguments):
    """out= must have the input's dtype exactly: these unary ops do not cast on store
    (TensorIterator's check_all_same_dtype), unlike the float ones (safe casting)."""
    input, out = arguments.get("input"), arguments.get("out")
    if is_tensor(input) and is_tensor(out) and out.dtype != input.dtype:
        raise RuntimeError(f"Found dtype {dtypes.scalar_type_name(out.dtype)} but expected "
                           f"{dtypes.scalar_type_name(input.dtype)}")


def same_dtype_out_unless_complex(sym, arguments):
    """abs: exact out= dtype for real inputs; |complex| is cast safely (to complex too)."""
    input = arguments.get("input")
    if not (is_tensor(input) and input.dtype.is_complex):
        same_dtype_out(sym, arguments)


def refuse(predicate, error_type, message):
    """A check: raise error_type(message) when `predicate(input dtype)` holds."""
    def check(sym, arguments):
        input = arguments.get("input")
        if is_tensor(input) and predicate(input.dtype):
            raise error_type(message)
    return check


def not_both_numbers(sym, arguments):
    """Eager takes a Python number for either argument, not for both."""
    if not any(is_tensor(arguments.get(p)) for p in sym.promote):
        got = ", ".join(type(arguments.get(p)).__name__ for p in sym.promote)
        raise TypeError(f"{sym.name}() received an invalid combination of arguments - got "
                        f"({got}), but expected at least one Tensor")


def tensor_argument(name, input):
    """For refs that are not @elementwise: eager's TypeError for a non-tensor input."""
    if not is_tensor(input):
        raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, "
                        f"not {type(input).__name__}")
