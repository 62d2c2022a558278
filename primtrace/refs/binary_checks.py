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
import math

import torch

from primtrace import dtypes, prims
from primtrace.dtypes import Category
from primtrace.prims.meta import torch_dtype_name
from primtrace.refs.core import is_number, is_tensor
from primtrace.refs.promotion import result_type

__all__ = []  # helpers, not refs

_C_NAMES = {
    torch.bool: "bool", torch.uint8: "uint8_t", torch.int8: "int8_t", torch.int16: "int16_t",
    torch.int32: "int", torch.int64: "int64_t", torch.float16: "c10::Half",
    torch.bfloat16: "c10::BFloat16", torch.float32: "float", torch.float64: "double",
    torch.complex32: "c10::complex<c10::Half>", torch.complex64: "c10::complex<float>",
    torch.complex128: "c10::complex<double>",
}


_TYPE_META_NAMES = {
    torch.bool: "bool", torch.uint8: "unsigned char", torch.int8: "signed char",
    torch.int16: "short int", torch.int32: "int", torch.int64: "long int",
    torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16", torch.float32: "float",
    torch.float64: "double", torch.complex64: "c10::complex<float>",
    torch.complex128: "c10::complex<double>",
}


def type_meta_name(dtype) -> str:
    """How some eager messages spell a dtype (the C++ type: 'float', 'long int')."""
    return _TYPE_META_NAMES.get(dtype, str(dtype))


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


def _value(x):
    return x._read() if hasattr(x, "_read") else x  # a NumberProxy: specialize on its value


def overflows(value, dtype) -> bool:
    """c10::overflows<dtype>(value): would converting the Python number overflow?

    Complex -> real overflows when the imaginary part is nonzero; floats -> integers when
    out of range or nan (inf never does for float types); negative integers wrap into
    unsigned types down to -max (so -1 is a valid uint8, 255).
    """
    value = _value(value)
    if dtype is torch.bool or isinstance(value, bool):
        return False
    if isinstance(value, complex):
        if not dtype.is_complex and value.imag != 0:
            return True
        return overflows(value.real, dtype) or overflows(value.imag, dtype)
    real = dtypes.to_real(dtype)
    if real.is_floating_point:
        if isinstance(value, float) and (math.isinf(value) or math.isnan(value)):
            return False
        info = torch.finfo(real)
        return value < info.min or value > info.max
    info = torch.iinfo(real)
    if isinstance(value, float) and math.isnan(value):
        return True
    if info.min == 0 and isinstance(value, int):
        return value > info.max or -value > info.max
    return value < info.min or value > info.max


def check_fits(value, dtype):
    """Raise eager's error where a Python number does not convert to `dtype`."""
    if overflows(value, dtype):
        raise RuntimeError(f"value cannot be converted to type {_C_NAMES.get(dtype, dtype)} "
                           f"without overflow")


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
        raise RuntimeError(f"Expected out type to be {torch_dtype_name(dtype)} but got "
                           f"{torch_dtype_name(out.dtype)}")
