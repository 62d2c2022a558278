"""float16 / bfloat16 <-> float32 conversions on uint16 bit patterns, for Numba CPU code.

Numba's CPU target has no float16 and NumPy has no bfloat16, so fused kernels read and
write these dtypes as 16-bit integers (``tensor.view(torch.int16).numpy().view(np.uint16)``)
and convert in registers. Everything is integer arithmetic, compares and selects on
32-bit lanes (no branches, no tables), so loops over uint16 arrays vectorize.

Rounding is to nearest, ties to even, as torch's ``.to(torch.float16/bfloat16)``:
overflow goes to +-inf, float16 subnormals are produced exactly, NaN stays NaN (quiet;
the payload is kept where it fits). The float16 decode never materializes a float32
subnormal, so it stays exact even with denormals-are-zero set (torch.set_flush_denormal).
"""
from __future__ import annotations

import numpy as np

from primtrace.executors.numba.vmath_core import F32, bits_f32, f32_bits, rint, vjit

_TWOM24 = F32(2.0 ** -24)
_TWO24 = F32(2.0 ** 24)


@vjit
def f16_bits_to_f32(h):
    """IEEE binary16 bit pattern (uint16/int16, low 16 bits used) -> float32, exact."""
    h = np.int32(h) & 0xFFFF
    sign = (h & 0x8000) << 16
    em = h & 0x7FFF
    normal = (em << 13) + (112 << 23)                 # rebias exponent 15 -> 127
    special = (em << 13) | 0x7F800000                 # inf / NaN (payload kept)
    bits = special if em >= 0x7C00 else normal
    sub = F32(em) * _TWOM24                           # subnormal: mantissa * 2**-24
    bits = f32_bits(sub) if em < 0x0400 else bits
    return bits_f32(bits | sign)


@vjit
def f32_to_f16_bits(x):
    """float32 -> IEEE binary16 bit pattern as uint16, round to nearest even."""
    x = F32(x)
    u = f32_bits(x)
    sign = (u >> 16) & 0x8000
    a = u & 0x7FFFFFFF
    # normal: drop 13 mantissa bits with round-half-even; a carry may bump the exponent
    hn = (a - (112 << 23) + 0x0FFF + ((a >> 13) & 1)) >> 13
    # subnormal (|x| < 2**-14): the value in units of 2**-24, rounded by rint
    hs = np.int32(rint(bits_f32(a) * _TWO24))
    h = hs if a < 0x38800000 else hn
    h = 0x7C00 if a >= 0x477FF000 else h              # >= 65520 rounds to inf
    h = (0x7E00 | ((a >> 13) & 0x03FF)) if a > 0x7F800000 else h   # NaN, quiet
    return np.uint16(h | sign)


@vjit
def bf16_bits_to_f32(b):
    """bfloat16 bit pattern -> float32, exact (the top half of a float32)."""
    return bits_f32((np.int32(b) & 0xFFFF) << 16)


@vjit
def f32_to_bf16_bits(x):
    """float32 -> bfloat16 bit pattern as uint16, round to nearest even (overflow to inf
    through the carry, as torch does)."""
    x = F32(x)
    u = np.int64(f32_bits(x)) & 0xFFFFFFFF
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = ((u >> 16) | 0x0040) & 0xFFFF
    return np.uint16(nan if (u & 0x7FFFFFFF) > 0x7F800000 else r)
