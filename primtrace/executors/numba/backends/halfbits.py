"""float16 / bfloat16 <-> float32 conversions in integer code, as LLVM IR for Numba kernels.

Numba's CPU target has no float16 and NumPy has no bfloat16, so fused kernels read and
write these dtypes as 16-bit integers and convert in registers. Everything here is integer
arithmetic, compares, selects and a float add or multiply on 32-bit lanes: no branch, no
table, no call, so loops over uint16 arrays vectorize. Written as IR, not Python: Numba
computes int32 arithmetic in 64 bits, and the vectorized loop then ran on 64-bit lanes
(half the width, plus packing). The builders emit the same code for the CPU intrinsics
here and for the CUDA ones in ``libdevice.py`` (bfloat16).

Rounding is to nearest, ties to even, as torch's ``.to(torch.float16/bfloat16)``:
overflow goes to +-inf, subnormals are produced exactly, NaN stays NaN (quiet, sign kept;
the payload's top bits are kept, as F16C's vcvtps2ph/vcvtph2ps keep them). The float16
decode never materializes a float32 subnormal, so it stays exact with denormals-are-zero
set (torch.set_flush_denormal). A float64 argument is rounded to float32 first, as torch
converts float64 (through float32, rounding twice).
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

_FLOAT = ir.FloatType()


def _i32(value):
    return ir.Constant(ir.IntType(32), value)


def _f32(value):
    return ir.Constant(_FLOAT, value)


def _select_u(builder, op, a, bound, then, otherwise):
    """`then` where unsigned `a op bound`, else `otherwise`."""
    return builder.select(builder.icmp_unsigned(op, a, _i32(bound)), then, otherwise)


# --- float16 (software: where the CPU has no F16C, and for strided loads, see
# mathlib.f16_to_f32_strided) -------------------------------------------------------------------
def f16_decode_ir(builder, bits):
    """IR: i16 float16 bits -> float, exact (the FP16 library's float arithmetic: normal
    values rebiased by a multiply by 2**-112, which also quiets a NaN as F16C does;
    subnormals as 0.5 + m * 2**-24 - 0.5)."""
    w = builder.shl(builder.zext(bits, ir.IntType(32)), _i32(16))
    sign = builder.and_(w, _i32(-2147483648))
    two_w = builder.add(w, w)
    normal = builder.bitcast(builder.add(builder.lshr(two_w, _i32(4)), _i32(0xE0 << 23)), _FLOAT)
    normal = builder.fmul(normal, _f32(2.0 ** -112))
    subnormal = builder.bitcast(builder.or_(builder.lshr(two_w, _i32(17)), _i32(126 << 23)), _FLOAT)
    subnormal = builder.fsub(subnormal, _f32(0.5))
    out = _select_u(builder, "<", two_w, 1 << 27, builder.bitcast(subnormal, ir.IntType(32)),
                    builder.bitcast(normal, ir.IntType(32)))
    return builder.bitcast(builder.or_(out, sign), _FLOAT)


def f16_encode_ir(builder, x):
    """IR: float -> i16 float16 bits, round to nearest even."""
    u = builder.bitcast(x, ir.IntType(32))
    sign = builder.and_(builder.lshr(u, _i32(16)), _i32(0x8000))
    a = builder.and_(u, _i32(0x7FFFFFFF))
    # normal: drop 13 mantissa bits with round-half-even; a carry may bump the exponent
    odd = builder.and_(builder.lshr(a, _i32(13)), _i32(1))
    hn = builder.lshr(builder.add(builder.add(a, _i32(0x0FFF - (112 << 23))), odd), _i32(13))
    # subnormal (|x| < 2**-14): |x| in units of 2**-24 (< 1024), rounded to an integer by
    # the float add of 2**23, whose low mantissa bits then hold it
    units = builder.fmul(builder.bitcast(a, _FLOAT), _f32(2.0 ** 24))
    hs = builder.and_(builder.bitcast(builder.fadd(units, _f32(2.0 ** 23)), ir.IntType(32)),
                      _i32(0x7FFFFF))
    h = _select_u(builder, "<", a, 0x38800000, hs, hn)
    h = _select_u(builder, ">=", a, 0x477FF000, _i32(0x7C00), h)      # >= 65520 rounds to inf
    nan = builder.or_(builder.and_(builder.lshr(a, _i32(13)), _i32(0x03FF)), _i32(0x7E00))
    h = _select_u(builder, ">", a, 0x7F800000, nan, h)                # NaN, quiet
    return builder.trunc(builder.or_(h, sign), ir.IntType(16))


def f16_round_ir(builder, x):
    """IR: float rounded to the nearest float16 value, kept in float (an f16 register).

    In float arithmetic, not through the bits: adding and subtracting 2**(e + 13) (e the
    exponent of x, at least -14; signed like x) leaves x on float16's grid for that binade,
    rounded by the FPU to nearest even; beyond 65504 is infinity; the sign of zero and NaN
    are kept. ~2x cheaper than encode + decode; identical to torch's ``x.half().float()``
    on all 2**32 float32 inputs (checked exhaustively)."""
    b = builder.bitcast(x, ir.IntType(32))
    sign = builder.and_(b, _i32(-2147483648))
    e = builder.and_(b, _i32(0x7F800000))
    e = _select_u(builder, "<", e, (127 - 14) << 23, _i32((127 - 14) << 23), e)   # f16 subnormals
    e = _select_u(builder, ">", e, (127 + 16) << 23, _i32((127 + 16) << 23), e)   # inf, NaN
    magic = builder.bitcast(builder.or_(builder.add(e, _i32(13 << 23)), sign), _FLOAT)
    r = builder.fsub(builder.fadd(x, magic), magic)
    magnitude = builder.and_(builder.bitcast(r, ir.IntType(32)), _i32(0x7FFFFFFF))
    r = builder.bitcast(builder.or_(magnitude, sign), _FLOAT)
    overflow = builder.fcmp_ordered(">", builder.bitcast(magnitude, _FLOAT), _f32(65504.0))
    inf = builder.bitcast(builder.or_(sign, _i32(0x7F800000)), _FLOAT)
    return builder.select(overflow, inf, r)


# --- bfloat16 ------------------------------------------------------------------------------------
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
    """A float64 argument is rounded to float32 first (torch's float64 -> float16/bfloat16)."""
    return builder.fptrunc(value, _FLOAT) if value.type != _FLOAT else value


def conversion(name: str, ir_builder, takes: str, returns: str, intrinsic=intrinsic, types=types):
    """An intrinsic `name` emitting `ir_builder`'s IR on its one argument: ``takes`` "bits"
    (a 16-bit integer pattern) or "float" (float32, or float64 rounded to float32 first);
    ``returns`` the Numba type's name. `intrinsic` and `types` are the target's (the CUDA
    backend passes numba.cuda's)."""
    result = getattr(types, returns)

    def typer(typingctx, x):
        if takes == "bits":
            if not isinstance(x, types.Integer) or x.bitwidth != 16:
                return None
        elif x not in (types.float32, types.float64):
            return None

        def codegen(context, builder, sig, args):
            value = args[0] if takes == "bits" else _float_in(builder, args[0])
            return ir_builder(builder, value)
        return result(x), codegen
    typer.__name__ = typer.__qualname__ = name
    return intrinsic(typer)


#: float16 bit pattern (uint16/int16) -> float32, exact
f16_bits_to_f32 = conversion("f16_bits_to_f32", f16_decode_ir, "bits", "float32")
#: float32 -> float16 bit pattern as uint16, round to nearest even
f32_to_f16_bits = conversion("f32_to_f16_bits", f16_encode_ir, "float", "uint16")
#: float32 -> the nearest float16 value as float32
round_f16 = conversion("round_f16", f16_round_ir, "float", "float32")
#: bfloat16 bit pattern (uint16/int16) -> float32, exact
bf16_bits_to_f32 = conversion("bf16_bits_to_f32", bf16_decode_ir, "bits", "float32")
#: float32 -> bfloat16 bit pattern as uint16, round to nearest even (overflow to inf through
#: the carry, as torch does)
f32_to_bf16_bits = conversion("f32_to_bf16_bits", bf16_encode_ir, "float", "uint16")
#: float32 -> the nearest bfloat16 value as float32 (encode + decode in one step)
round_bf16 = conversion("round_bf16", bf16_round_ir, "float", "float32")
