"""Argument checks eager makes before a binary/ternary op runs (shared by arithmetic,
binary, ternary, comparison and bitwise refs).

Eager validates some arguments before (or instead of) type promotion: ``sub`` refuses
bool operands, ``pow`` refuses integers to negative integer powers, ``where``/``clamp``/
``masked_fill`` convert a Python number to the op's dtype with c10's *checked* conversion
("value cannot be converted to type int8_t without overflow"). These checks only read
metadata and Python numbers (reading a number specializes a trace on its value, which is
what eager's value-dependent errors require).
"""
from __future__ import annotations

import functools
import inspect

import torch

from primtrace import dtypes, prims
from primtrace.dtypes import Category
from primtrace.refs.core import is_number, is_tensor
from primtrace.refs.promotion import result_type

__all__ = []  # helpers, not refs

def checked(check):
    """Run `check(*args, **kwargs)` on the raw arguments before the ref (eager's up-front
    argument checks), without adding a node to a trace; `out=` is passed on only to a
    check that has an `out` parameter."""
    wants_out = "out" in inspect.signature(check).parameters

    def decorate(sym):
        run = sym.fn

        @functools.wraps(run)
        def checked_run(*args, **kwargs):
            check(*args, **{k: v for k, v in kwargs.items() if k != "out" or wants_out})
            return run(*args, **kwargs)
        sym.fn = checked_run
        return sym
    return decorate


def number_category(x) -> Category:
    """Category of a Python number or NumberProxy."""
    return dtypes.number_category(getattr(x, "python_type", type(x)))


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


def python_zero(dtype):
    """0 as the Python number type of `dtype` (False, 0, 0.0 or 0j): a scalar any prim takes."""
    return dtypes.python_type(dtype)(0)


def without_complex32(kernel):
    """Eager has no ComplexHalf CPU kernel for this op (only add, sub, mul, eq, ne, where and
    addcmul have one), so a complex32 result is an error, not a complex64 computation."""
    def decorate(sym):
        signature = inspect.signature(sym.body)

        def check(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            operands = [bound.arguments[p] for p in sym.promote if p in bound.arguments]
            if all(is_tensor(x) or is_number(x) or x is None for x in operands) and \
                    result_type(*operands) is torch.complex32:
                raise NotImplementedError(f'"{kernel}" not implemented for \'ComplexHalf\'')
        return checked(check)(sym)
    return decorate


def exact_add(x, y):
    """x + y as C++ computes it inside a kernel. For complex operands torch.add computes
    x + 1 * y, where 1 * inf makes a nan imaginary part, so add part by part instead."""
    if not x.dtype.is_complex:
        return prims.add(x, y)
    return prims.complex(prims.add(prims.real(x), prims.real(y)), prims.add(prims.imag(x), prims.imag(y)))


def exact_sub(x, y):
    """x - y as C++ computes it inside a kernel (see exact_add)."""
    if not x.dtype.is_complex:
        return prims.sub(x, y)
    return prims.complex(prims.sub(prims.real(x), prims.real(y)), prims.sub(prims.imag(x), prims.imag(y)))


def check_out_dtype(out, dtype):
    """For ops whose out= must have exactly the result dtype (no safe cast)."""
    if out is not None and out.dtype != dtype:
        raise RuntimeError(f"Expected out type to be {dtypes.scalar_type_name(dtype)} but got "
                           f"{dtypes.scalar_type_name(out.dtype)}")
