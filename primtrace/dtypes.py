"""Dtype categories and the promotion lattice, in one place.

Uses torch's public dtype utilities (``torch.promote_types``, ``dtype.is_floating_point``)
for the pairwise lattice; the category logic that PyTorch applies on top of it (dimensioned
vs 0-dim vs Python numbers) lives in ``primtrace.refs.promotion``.
"""
from __future__ import annotations

import enum
import numbers

import torch


class Category(enum.IntEnum):
    BOOL = 0
    INTEGER = 1
    FLOATING = 2
    COMPLEX = 3


#: The dtypes that take part in type promotion, in lattice order.
PROMOTABLE = (
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64,
    torch.complex32, torch.complex64, torch.complex128,
)

#: The dtypes primtrace computes with (complex32 is storage-only in torch's CPU kernels).
ALL = tuple(d for d in PROMOTABLE if d is not torch.complex32)
INTEGERS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
COMPLEXES = (torch.complex64, torch.complex128)
LOW_PRECISION = (torch.float16, torch.bfloat16, torch.complex32)

#: how each dtype is spelled: in printed traces ("f32"), as eager's messages name its scalar
#: type ("Float"), as the C++ type of its kernels ("int64_t", in overflow messages), and as
#: the typeid names other eager messages use ("long int")
_NAMES = {
    torch.bool: ("b8", "Bool", "bool", "bool"),
    torch.uint8: ("u8", "Byte", "uint8_t", "unsigned char"),
    torch.int8: ("i8", "Char", "int8_t", "signed char"),
    torch.int16: ("i16", "Short", "int16_t", "short int"),
    torch.int32: ("i32", "Int", "int", "int"),
    torch.int64: ("i64", "Long", "int64_t", "long int"),
    torch.float16: ("f16", "Half", "c10::Half", "c10::Half"),
    torch.bfloat16: ("bf16", "BFloat16", "c10::BFloat16", "c10::BFloat16"),
    torch.float32: ("f32", "Float", "float", "float"),
    torch.float64: ("f64", "Double", "double", "double"),
    torch.complex32: ("c32", "ComplexHalf", "c10::complex<c10::Half>", None),
    torch.complex64: ("c64", "ComplexFloat", "c10::complex<float>", "c10::complex<float>"),
    torch.complex128: ("c128", "ComplexDouble", "c10::complex<double>", "c10::complex<double>"),
}


def _name(dtype, i: int, default: str) -> str:
    names = _NAMES.get(dtype)
    return (names[i] if names is not None else None) or default


def short_name(dtype: torch.dtype) -> str:
    """'f32' for torch.float32: the spelling used in printed traces."""
    return _name(dtype, 0, str(dtype).replace("torch.", ""))


def scalar_type_name(dtype: torch.dtype) -> str:
    """'Float' for torch.float32: how eager's messages name a dtype."""
    return _name(dtype, 1, str(dtype))


def c_type_name(dtype: torch.dtype) -> str:
    """'int64_t' for torch.int64: the C++ type in eager's overflow messages."""
    return _name(dtype, 2, str(dtype))


def type_meta_name(dtype: torch.dtype) -> str:
    """'long int' for torch.int64: the typeid name some eager messages use."""
    return _name(dtype, 3, str(dtype))


def category(dtype: torch.dtype) -> Category:
    if dtype is torch.bool:
        return Category.BOOL
    if dtype.is_complex:
        return Category.COMPLEX
    if dtype.is_floating_point:
        return Category.FLOATING
    return Category.INTEGER


def number_category(value) -> Category:
    """Category of a Python number (or of a number's Python type)."""
    typ = value if isinstance(value, type) else type(value)
    if issubclass(typ, bool):
        return Category.BOOL
    if issubclass(typ, numbers.Integral):
        return Category.INTEGER
    if issubclass(typ, numbers.Real):
        return Category.FLOATING
    if issubclass(typ, numbers.Complex):
        return Category.COMPLEX
    raise TypeError(f"expected a Python number, got {typ.__name__}")


def is_integer(dtype) -> bool:
    return category(dtype) in (Category.BOOL, Category.INTEGER)


def promote_types(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    """Pairwise promotion; raises eager's RuntimeError for uint16/32/64 and float8."""
    return torch.promote_types(a, b)


def to_complex(dtype: torch.dtype) -> torch.dtype:
    return {torch.float16: torch.complex32, torch.bfloat16: torch.complex64,
            torch.float32: torch.complex64, torch.float64: torch.complex128}.get(dtype, dtype)


def to_real(dtype: torch.dtype) -> torch.dtype:
    return {torch.complex32: torch.float16, torch.complex64: torch.float32,
            torch.complex128: torch.float64}.get(dtype, dtype)


def opmath(dtype: torch.dtype) -> torch.dtype:
    """The dtype eager computes in: f16/bf16 in f32, complex32 in complex64."""
    return {torch.float16: torch.float32, torch.bfloat16: torch.float32,
            torch.complex32: torch.complex64}.get(dtype, dtype)


def default_float() -> torch.dtype:
    return torch.get_default_dtype()


def default_complex() -> torch.dtype:
    return to_complex(torch.get_default_dtype())


def can_cast(src: torch.dtype, dst: torch.dtype) -> bool:
    """Eager's safe-cast rule for out= and in-place results (no downgrade of category)."""
    return torch.can_cast(src, dst)


def python_type(dtype: torch.dtype) -> type:
    """The Python number type whose values a tensor of `dtype` holds."""
    return (bool, int, float, complex)[category(dtype)]
