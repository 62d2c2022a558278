"""Scalar functions CUDA kernels call as ``cl.<name>``: libdevice on a GPU, Python under
the CUDA simulator (whose libdevice functions are stubs that return None).

Bit casts and math go through libdevice names rather than Numba device functions: a call
to a device function makes Numba ask the current device for its compute capability, so
kernels could not be compiled to PTX (``compile_ptx``) on a machine without a GPU.
Imported only by CUDA kernels (and ``backends/cuda.py``), i.e. only when CUDA is used.
Which functions exist, and their libdevice names, is the op table's (``ops.py``).
"""
from __future__ import annotations

import numpy as np
from numba import config

from primtrace.executors.numba import ops

SIMULATOR = bool(config.ENABLE_CUDASIM)
#: the op table's functions with a libdevice name (cl.<name>_float32 / cl.<name>_float64)
_MATH = {fn.name: fn.cuda for fn in ops.FUNCTIONS.values() if isinstance(fn.cuda, ops.Libdevice)}


def _python(fn, fallback, cast):
    """The simulator's stand-in: `fn` on float64 Python numbers, `fallback` where it raises
    (math's domain and range errors, where C returns nan or inf)."""
    def f(*args):
        try:
            return cast(fn(*[float(a) for a in args]))
        except (ValueError, OverflowError, ZeroDivisionError):
            with np.errstate(all="ignore"):
                return cast(fallback(*[np.float64(a) for a in args]))
    return f


# bfloat16 <-> float32 (bfloat16 travels as int16: torch does not export it to Numba). On a
# GPU: halfbits' IR, the code the CPU kernels run (and its exhaustive tests check), as
# intrinsics: 32-bit integer ops and one select, no branch, no call (a device function
# would make Numba ask a GPU for its compute capability, so PTX could not be compiled
# without one). Under the simulator: the same arithmetic in NumPy.
def _bf16_intrinsics():
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    from primtrace.executors.numba.backends import halfbits as hb
    return (hb.conversion("bf16_to_f32", hb.bf16_decode_ir, "bits", "float32", intrinsic, types),
            hb.conversion("f32_to_bf16", hb.bf16_encode_ir, "float", "int16", intrinsic, types),
            hb.conversion("round_bf16", hb.bf16_round_ir, "float", "float32", intrinsic, types))


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
    for _name, _ld in _MATH.items():
        _fallback = _ld.np or (lambda *a, _py=_ld.py: np.float64(_py(*a)))
        globals()[f"{_name}_float32"] = _python(_ld.py, _fallback, np.float32)
        globals()[f"{_name}_float64"] = _python(_ld.py, _fallback, np.float64)

    def float_as_int(x):
        return np.float32(x).view(np.int32)

    def int_as_float(x):
        return np.int32(x).view(np.float32)
    bf16_to_f32, f32_to_bf16, round_bf16 = _bf16_to_f32_sim, _f32_to_bf16_sim, _round_bf16_sim
else:
    from numba.cuda import libdevice as _libdevice
    ops.check_libdevice(_libdevice)        # a row naming a missing function fails here
    for _name, _ld in _MATH.items():
        globals()[f"{_name}_float32"] = getattr(_libdevice, _ld.f32)
        globals()[f"{_name}_float64"] = getattr(_libdevice, _ld.f64)
    float_as_int = _libdevice.float_as_int
    int_as_float = _libdevice.int_as_float
    bf16_to_f32, f32_to_bf16, round_bf16 = _bf16_intrinsics()
