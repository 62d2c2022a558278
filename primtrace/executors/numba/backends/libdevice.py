"""Scalar functions CUDA kernels call as ``cl.<name>``: libdevice on a GPU, Python under
the CUDA simulator (whose libdevice functions are stubs that return None).

Bit casts and math go through libdevice names rather than Numba device functions: a call
to a device function makes Numba ask the current device for its compute capability, so
kernels could not be compiled to PTX (``compile_ptx``) on a machine without a GPU.
Imported only by CUDA kernels (and ``backends/cuda.py``), i.e. only when CUDA is used.
"""
from __future__ import annotations

import math

import numpy as np
from numba import config

SIMULATOR = bool(config.ENABLE_CUDASIM)

# prim -> (libdevice float32 name, libdevice float64 name, Python fallback)
_MATH = {
    "exp": ("expf", "exp", math.exp), "exp2": ("exp2f", "exp2", lambda x: 2.0 ** x),
    "expm1": ("expm1f", "expm1", math.expm1), "log": ("logf", "log", math.log),
    "log1p": ("log1pf", "log1p", math.log1p), "log2": ("log2f", "log2", math.log2),
    "log10": ("log10f", "log10", math.log10), "sin": ("sinf", "sin", math.sin),
    "cos": ("cosf", "cos", math.cos), "tan": ("tanf", "tan", math.tan),
    "asin": ("asinf", "asin", math.asin), "acos": ("acosf", "acos", math.acos),
    "atan": ("atanf", "atan", math.atan), "sinh": ("sinhf", "sinh", math.sinh),
    "cosh": ("coshf", "cosh", math.cosh), "tanh": ("tanhf", "tanh", math.tanh),
    "asinh": ("asinhf", "asinh", math.asinh), "acosh": ("acoshf", "acosh", math.acosh),
    "atanh": ("atanhf", "atanh", math.atanh), "erf": ("erff", "erf", math.erf),
    "erfc": ("erfcf", "erfc", math.erfc), "lgamma": ("lgammaf", "lgamma", math.lgamma),
    "atan2": ("atan2f", "atan2", math.atan2), "hypot": ("hypotf", "hypot", math.hypot),
    "pow": ("powf", "pow", math.pow), "fmod": ("fmodf", "fmod", math.fmod),
    "sqrt": ("sqrtf", "sqrt", math.sqrt),
    "ceil": ("ceilf", "ceil", np.ceil), "floor": ("floorf", "floor", np.floor),
    "trunc": ("truncf", "trunc", np.trunc), "rint": ("rintf", "rint", np.rint),
    "copysign": ("copysignf", "copysign", math.copysign),
}
MATH_PRIMS = frozenset(_MATH)


def _python(fn, cast):
    def f(*args):
        try:
            return cast(fn(*[float(a) for a in args]))
        except (ValueError, OverflowError, ZeroDivisionError):
            with np.errstate(all="ignore"):   # math raises where C returns nan/inf
                return cast(_numpy_equivalent(fn)(*[np.float64(a) for a in args]))
    return f


def _numpy_equivalent(fn):
    table = {math.exp: np.exp, math.expm1: np.expm1, math.log: np.log, math.log1p: np.log1p,
             math.log2: np.log2, math.log10: np.log10, math.sin: np.sin, math.cos: np.cos,
             math.tan: np.tan, math.asin: np.arcsin, math.acos: np.arccos, math.atan: np.arctan,
             math.sinh: np.sinh, math.cosh: np.cosh, math.tanh: np.tanh, math.asinh: np.arcsinh,
             math.acosh: np.arccosh, math.atanh: np.arctanh, math.fmod: np.fmod,
             math.atan2: np.arctan2, math.hypot: np.hypot, math.pow: np.power,
             math.sqrt: np.sqrt}
    if fn in table:
        return table[fn]
    if fn is math.lgamma:
        return lambda x: np.float64(np.inf)
    return lambda *a: np.float64(fn(*a))


# bfloat16 <-> float32 (bfloat16 travels as int16: torch does not export it to Numba). On a
# GPU: halfbits' IR, the code the CPU kernels run (and its exhaustive tests check), as
# intrinsics: 32-bit integer ops and one select, no branch, no call (a device function
# would make Numba ask a GPU for its compute capability, so PTX could not be compiled
# without one). Under the simulator: the same arithmetic in NumPy.
def _bf16_intrinsics():
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    from primtrace.executors.numba.backends import halfbits as hb

    def float_in(builder, value):
        return builder.fptrunc(value, hb.ir.FloatType()) if value.type != hb.ir.FloatType() else value

    @intrinsic
    def bf16_to_f32(typingctx, bits):
        if not isinstance(bits, types.Integer) or bits.bitwidth != 16:
            return None
        return types.float32(bits), lambda ctx, builder, sig, args: hb.bf16_decode_ir(builder, args[0])

    @intrinsic
    def f32_to_bf16(typingctx, x):
        if x not in (types.float32, types.float64):
            return None
        return types.int16(x), lambda ctx, builder, sig, args: hb.bf16_encode_ir(
            builder, float_in(builder, args[0]))

    @intrinsic
    def round_bf16(typingctx, x):
        if x not in (types.float32, types.float64):
            return None
        return types.float32(x), lambda ctx, builder, sig, args: hb.bf16_round_ir(
            builder, float_in(builder, args[0]))
    return bf16_to_f32, f32_to_bf16, round_bf16


def _bf16_rne(x):
    """(float32 bits as a Python int, rounded with their low half still there)."""
    u = int(np.float32(x).view(np.uint32))
    return u, (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFFFFFF


def _bf16_to_f32_sim(bits):
    return np.uint32((int(bits) & 0xFFFF) << 16).view(np.float32)


def _f32_to_bf16_sim(x):
    u, rounded = _bf16_rne(x)
    bits = ((u >> 16) | 0x40) if np.isnan(np.float32(x)) else rounded >> 16
    return np.uint16(bits).view(np.int16)


def _round_bf16_sim(x):
    u, rounded = _bf16_rne(x)
    bits = (u | 0x400000) if np.isnan(np.float32(x)) else rounded
    return np.uint32(bits & 0xFFFF0000).view(np.float32)


if SIMULATOR:
    for _prim, (_f32, _f64, _py) in _MATH.items():
        globals()[f"{_prim}_float32"] = _python(_py, np.float32)
        globals()[f"{_prim}_float64"] = _python(_py, np.float64)

    def float_as_int(x):
        return np.float32(x).view(np.int32)

    def int_as_float(x):
        return np.int32(x).view(np.float32)
    bf16_to_f32, f32_to_bf16, round_bf16 = _bf16_to_f32_sim, _f32_to_bf16_sim, _round_bf16_sim
else:
    from numba.cuda import libdevice as _libdevice
    for _prim, (_f32, _f64, _py) in _MATH.items():
        globals()[f"{_prim}_float32"] = getattr(_libdevice, _f32)
        globals()[f"{_prim}_float64"] = getattr(_libdevice, _f64)
    float_as_int = _libdevice.float_as_int
    int_as_float = _libdevice.int_as_float
    bf16_to_f32, f32_to_bf16, round_bf16 = _bf16_intrinsics()
