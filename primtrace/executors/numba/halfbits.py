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
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

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


# --- bfloat16: LLVM IR on 32-bit lanes --------------------------------------------------------
# Written as IR, not Python: Numba computes int32 arithmetic in 64 bits, and the vectorized
# loop then ran on 64-bit lanes (half the width, plus packing). The builders below emit
# the same code for the CPU intrinsics here and the CUDA ones in gpulib.
def _i32(value):
    return ir.Constant(ir.IntType(32), value)


def bf16_decode_ir(builder, bits):
    """IR: i16 bfloat16 bits -> float (the top half of a float32, exact)."""
    wide = builder.zext(bits, ir.IntType(32))
    return builder.bitcast(builder.shl(wide, _i32(16)), ir.FloatType())


def _bf16_rne(builder, x):
    """(float32 bits rounded to bfloat16's 16 top bits, low bits still there; NaN test)."""
    u = builder.bitcast(x, ir.IntType(32))
    lsb = builder.and_(builder.lshr(u, _i32(16)), _i32(1))
    rounded = builder.add(builder.add(u, _i32(0x7FFF)), lsb)    # overflow carries to inf
    return u, rounded, builder.fcmp_unordered("uno", x, x)


def bf16_encode_ir(builder, x):
    """IR: float -> i16 bfloat16 bits, round to nearest even; NaN stays NaN (quiet, sign
    and the payload's top bits kept)."""
    u, rounded, isnan = _bf16_rne(builder, x)
    nan = builder.or_(builder.lshr(u, _i32(16)), _i32(0x40))
    bits = builder.select(isnan, nan, builder.lshr(rounded, _i32(16)))
    return builder.trunc(bits, ir.IntType(16))


def bf16_round_ir(builder, x):
    """IR: float rounded to the nearest bfloat16 value, kept in float (NaN quieted)."""
    u, rounded, isnan = _bf16_rne(builder, x)
    nan = builder.or_(u, _i32(0x400000))
    bits = builder.select(isnan, nan, rounded)
    return builder.bitcast(builder.and_(bits, _i32(-65536)), ir.FloatType())


def _float_in(builder, value):
    """A float64 argument is rounded to float32 first (torch's float64 -> bfloat16)."""
    return builder.fptrunc(value, ir.FloatType()) if value.type != ir.FloatType() else value


@intrinsic
def bf16_bits_to_f32(typingctx, bits):
    """bfloat16 bit pattern (uint16/int16) -> float32, exact."""
    if not isinstance(bits, types.Integer) or bits.bitwidth != 16:
        return None
    return types.float32(bits), lambda context, builder, sig, args: bf16_decode_ir(builder, args[0])


@intrinsic
def f32_to_bf16_bits(typingctx, x):
    """float32 -> bfloat16 bit pattern as uint16, round to nearest even (overflow to inf
    through the carry, as torch does)."""
    if x not in (types.float32, types.float64):
        return None
    return types.uint16(x), lambda context, builder, sig, args: bf16_encode_ir(
        builder, _float_in(builder, args[0]))


@intrinsic
def round_bf16(typingctx, x):
    """float32 -> the nearest bfloat16 value as float32 (encode + decode in one step)."""
    if x not in (types.float32, types.float64):
        return None
    return types.float32(x), lambda context, builder, sig, args: bf16_round_ir(
        builder, _float_in(builder, args[0]))
