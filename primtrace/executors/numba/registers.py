"""How a kernel holds values: the register type of each dtype, typed constants, conversions.

A value in a kernel lives in a *register type*: its own dtype, except float16/bfloat16,
which live in float32 holding a value exactly representable in the half type (so a
conversion f16 -> f32 costs nothing and f32 -> f16 is one rounding, done in registers).
Every lowering (``ops.py``) returns an expression of the output's register type; integer
results are cast back to their dtype because Numba computes small integers in 64 bits (the
cast wraps, as C does). A dtype not in ``DTYPES`` is not fusible.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch


@dataclass(frozen=True)
class DType:
    """How a torch dtype is stored and held in registers by a kernel."""
    torch: torch.dtype
    reg: str          # register type (numpy scalar type name)
    storage: str      # element type in memory (CPU pointer type)
    kind: str         # "b" bool, "i" signed, "u" unsigned, "f" float, "h" half-like float
    bits: int


DTYPES = {d.torch: d for d in (
    DType(torch.bool, "bool_", "uint8", "b", 8),
    DType(torch.uint8, "uint8", "uint8", "u", 8),
    DType(torch.int8, "int8", "int8", "i", 8),
    DType(torch.int16, "int16", "int16", "i", 16),
    DType(torch.int32, "int32", "int32", "i", 32),
    DType(torch.int64, "int64", "int64", "i", 64),
    DType(torch.float16, "float32", "uint16", "h", 16),
    DType(torch.bfloat16, "float32", "uint16", "h", 16),
    DType(torch.float32, "float32", "float32", "f", 32),
    DType(torch.float64, "float64", "float64", "f", 64),
)}

#: the dtype a Python number stands for before conversion to an operand dtype
NUMBER_DTYPE = {bool: torch.bool, int: torch.int64, float: torch.float64}


def supported(dtype) -> bool:
    return dtype in DTYPES


def is_float(dtype) -> bool:
    return DTYPES[dtype].kind in "fh"


def category(dtype) -> str:
    """The lowering category of a dtype: "f" float (half-like included: computed in float32,
    rounded by the caller), "i" integer (signed and unsigned), "b" bool."""
    k = DTYPES[dtype].kind
    return "f" if k in "fh" else "b" if k == "b" else "i"


def const(dtype, value) -> str:
    """A typed constant: ``float32(1.0)``."""
    d = DTYPES[dtype]
    if d.kind == "b":
        return "True" if value else "False"
    if d.kind in "fh":
        return f"{d.reg}({float(value)!r})"
    return f"{d.reg}({int(value)})"


def cast(dtype, expr: str) -> str:
    return f"{DTYPES[dtype].reg}({expr})"


class Emitter:
    """What a lowering may use: the backend's spellings, typed temporaries and an error counter."""

    def __init__(self, backend, new_temp: Callable[[str], str],
                 flag_zero_division: Callable[[str], None]):
        self.backend = backend                    # an ops.Backend
        self.temp = new_temp                      # expr -> name of a new variable
        self.flag_zero_division = flag_zero_division  # divisor expr


# --- convert_element_type -----------------------------------------------------------------------
def convert(em: Emitter, value: str, src, dst) -> str:
    """A register of `src` converted to `dst` as torch does (f64/int -> f16 via f32)."""
    if src is dst:
        return value
    s, d = DTYPES[src], DTYPES[dst]
    if s.kind == "h" and dst is torch.float32:
        return value                      # the register already is float32
    if d.kind == "b":
        return f"{value} != {const(src, 0)}"
    if s.kind == "b":
        return f"{const(dst, 1)} if {value} else {const(dst, 0)}"
    if d.kind in "iu":
        if s.kind in "iu":
            return cast(dst, value)
        return em.backend.float_to_int(dst, value)
    if d.kind == "f":
        return cast(dst, value)
    return em.backend.round_half(dst, half_source(value, src, dst))


def half_source(value: str, src, dst) -> str | None:
    """The float32 register a conversion from `src` to half dtype `dst` rounds, or None
    when the conversion does not round (same dtype, bool, not to a half dtype). Through
    float32: torch converts float64 and int64 to float16/bfloat16 rounding twice too."""
    if DTYPES[dst].kind != "h" or src is dst or DTYPES[src].kind == "b":
        return None
    return value if DTYPES[src].reg == "float32" else f"float32({value})"
