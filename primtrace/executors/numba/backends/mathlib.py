"""The one place that picks the scalar math functions CPU kernels call.

Transcendental prims use the vectorizable, branch-free functions of ``vmath`` when it
provides them (Numba compiles ``math.sin`` to one libm call per element, which LLVM cannot
vectorize: ~4x slower than torch's SLEEF on f32); otherwise libm through ``math``/``numpy``.
Half-precision conversions: float16 in hardware where the CPU has F16C (``runtime``),
else ``halfbits``' integer code; bfloat16 always in ``halfbits``' integer IR. All round to
nearest even and keep NaN and infinities, as torch does.

Generated kernels refer to these as ``m.<prim>_<dtype>`` (``m.sin_float32``) and
``m.f16_to_f32``; :func:`math_name` says whether a name exists.
"""
from __future__ import annotations

import functools
import math
import os

import numpy as np
from numba import njit
from numba.core.registry import CPUDispatcher

from primtrace.executors.numba import kernel_cache
from primtrace.executors.numba.backends import halfbits
from primtrace.executors.numba.backends import runtime as rt

_INLINE = dict(forceinline=True, error_model="numpy", nogil=True)  # LLVM-level inlining


def _as_inlinable(fn):
    fn = fn if isinstance(fn, CPUDispatcher) else njit(**_INLINE)(fn)
    return _cached(fn)


def _cached(fn):
    """Let Numba keep the helper's compiled code (with its bitcode, for inlining) on disk.

    Why: the vmath functions take ~0.5 s each to compile; cached, a new kernel in a new
    process inlines them from disk, so its first call costs only the kernel's own compile.
    Numba's own cache would key each helper by its file's timestamp only, and miss changes
    in the modules it calls (vmath's, halfbits, runtime): ours lives under
    ``<primtrace cache>/helpers/<fingerprint of all helper sources>``."""
    if isinstance(fn, CPUDispatcher):
        _TO_CACHE.append(fn)       # set up at the end of the module (needs fingerprint())
    return fn


_TO_CACHE: list = []


def _enable_helper_caches():
    for fn in _TO_CACHE:
        if type(getattr(fn, "_cache", None)).__name__ == "NullCache":
            try:
                fn._cache = _helper_cache_class()(fn.py_func)
            except Exception:      # no usable directory: compile per process, as before
                pass


_HELPER_CACHE = None


def _helper_cache_class():
    """A Numba FunctionCache whose files live in a directory named by the fingerprint
    (built on first use: Numba's caching module is internal, keep its import lazy)."""
    global _HELPER_CACHE
    if _HELPER_CACHE is not None:
        return _HELPER_CACHE
    from numba.core.caching import CompileResultCacheImpl, FunctionCache, _CacheLocator

    class HelperLocator(_CacheLocator):
        def __init__(self, py_file):
            self._py_file = py_file

        def get_cache_path(self):
            return os.path.join(kernel_cache.cache_dir(), "helpers", kernel_cache.helpers_fingerprint())

        def get_source_stamp(self):
            return kernel_cache.helpers_fingerprint()

        def get_disambiguator(self):
            return os.path.splitext(os.path.basename(self._py_file))[0]

        @classmethod
        def from_function(cls, py_func, py_file):
            return cls(py_file)

    class HelperCacheImpl(CompileResultCacheImpl):
        _locator_classes = [HelperLocator]

    class HelperCache(FunctionCache):
        _impl_class = HelperCacheImpl

        def _index_key(self, sig, codegen):
            # Numba hashes a pickle of the closure, where a jitted function or intrinsic
            # stands with a per-process id: a helper a factory made would never be found
            # again. The fingerprint covers the sources, so the closure's stable shape is
            # enough to tell apart the helpers one factory made.
            key = super()._index_key(sig, codegen)
            try:
                return key[:2] + ((key[2][0], _closure_key(self._py_func)),)
            except Exception:      # something unpicklable: Numba's own key
                return key

    _HELPER_CACHE = HelperCache
    return HelperCache


def _closure_key(fn) -> str:
    """A hash of what fn's closure holds that is the same in every process: a jitted
    function or intrinsic (Numba pickles those with a random id) stands for its Python
    function, which stands for its name, code and, recursively, its own closure."""
    import hashlib
    import pickle
    import types

    def stable(v, depth=0):
        v = getattr(v, "py_func", None) or getattr(v, "_defn", None) or v   # jit, intrinsic
        if isinstance(v, types.FunctionType) and depth < 32:
            return ("fn", v.__module__, v.__qualname__, v.__code__.co_code,
                    tuple(stable(c.cell_contents, depth + 1) for c in v.__closure__ or ()))
        return v

    return hashlib.sha256(pickle.dumps(stable(fn))).hexdigest()


# The conversions kernels call (m.f16_to_f32, ...): float32 in registers, 16-bit patterns
# in memory; all intrinsics (LLVM IR, inlined). Encoders and roundings take float32 (a
# float64 is rounded to float32 first, as torch converts float64 through float32).
# bfloat16 has no instruction worth using (AVX512-BF16's vcvtneps2bf16 flushes subnormals):
# halfbits' integer IR, on 32-bit lanes.
HARDWARE_F16 = rt.HARDWARE_F16
if HARDWARE_F16:
    rt.provide_truncdfhf2()
    f16_to_f32, f32_to_f16, round_f16 = rt.f16_to_f32_hw, rt.f32_to_f16_hw, rt.round_f16_hw
else:
    f16_to_f32, f32_to_f16 = halfbits.f16_bits_to_f32, halfbits.f32_to_f16_bits
    round_f16 = halfbits.round_f16
#: float16 loads of a tensor strided along the inner loop, in integer code: such a load is
#: scalar (x86 has no 16-bit gather), and F16C's scalar load (vpinsrw into a register,
#: then vcvtph2ps) can merge into the register the previous element's conversion wrote,
#: chaining each iteration to the last (a.t() + b in float16 at 2**20: 3.8 ms with F16C
#: for every load, 1.9 ms with this for the strided one; eager 1.7 ms)
f16_to_f32_strided = halfbits.f16_bits_to_f32
bf16_to_f32, f32_to_bf16 = halfbits.bf16_bits_to_f32, halfbits.f32_to_bf16_bits
round_bf16 = halfbits.round_bf16


# --- sin and cos of float16 values (|x| <= 65504) ------------------------------------------------
# A kernel that computes sin of a float16 input (W2: sin(a_f16)) knows |x| <= 65504, so a
# Cody-Waite reduction in float64 is exact enough and the general Payne-Hanek reduction
# (~2/3 of vmath's sin cost) can be skipped. 0.5005 ULP in float32 over every float16
# value (tests/numba/test_fusion.py checks all 65536); belongs with vmath, kept here until
# it moves there.
_2_OVER_PI = np.float64(0.6366197723675814)
_PIO2_HI = np.float64(1.5707963267341256)       # 33 significant bits of pi/2
_PIO2_LO = np.float64(6.077100506506192e-11)    # pi/2 - _PIO2_HI
_SIN = tuple(np.float64(c) for c in (-1 / 6, 1 / 120, -1 / 5040, 1 / 362880, -1 / 39916800))
_COS = tuple(np.float64(c) for c in (-1 / 2, 1 / 24, -1 / 720, 1 / 40320, -1 / 3628800))


@njit(**_INLINE)
def _sincos_small(x, want_cos):
    d = np.float64(x)
    k = np.rint(d * _2_OVER_PI)
    r = (d - k * _PIO2_HI) - k * _PIO2_LO       # exact enough for |k| < 2**20
    z = r * r
    s = r + r * z * (_SIN[0] + z * (_SIN[1] + z * (_SIN[2] + z * (_SIN[3] + z * _SIN[4]))))
    c = np.float64(1.0) + z * (_COS[0] + z * (_COS[1] + z * (_COS[2] + z * (_COS[3] + z * _COS[4]))))
    q = (np.int64(k) + (1 if want_cos else 0)) & 3
    v = s if (q & 1) == 0 else c
    v = -v if (q & 2) != 0 else v
    v = d if (d == 0 and not want_cos) else v   # sin(-0.0) = -0.0 (the reduction gives +0.0)
    return np.float32(v if math.isfinite(d) else d - d)


@njit(**_INLINE)
def sin_f16range_float32(x):
    """sin of a float32 holding a float16 value (finite |x| <= 65504, or inf/nan)."""
    return _sincos_small(x, False)


@njit(**_INLINE)
def cos_f16range_float32(x):
    return _sincos_small(x, True)


sin_f16range_float32 = _cached(sin_f16range_float32)
cos_f16range_float32 = _cached(cos_f16range_float32)


# --- rounding float16 values to integers -----------------------------------------------------
# llvm.floor/ceil/trunc/rint of an extended half, rounded back to half, is narrowed by LLVM
# to the half intrinsic, which x86 without AVX512-FP16 runs as a scalar libcall per element
# (torch.floor in float16 at 2**20: 403 us, eager 70 us). Rounding by the magic number
# 1.5 * 2**23 is not narrowed (the constant is no half) and stays vectorized; float16
# values of magnitude 1024 or more (and inf, nan) are integers already. The sign comes from
# x (floor(-0.0), ceil(-0.5) are -0.0).
_MAGIC = np.float32(12582912.0)
_ONE = np.float32(1.0)


@njit(**_INLINE)
def rint_f16range_float32(x):
    """Round half to even, of a float32 holding a float16 value."""
    r = (x + _MAGIC) - _MAGIC
    return math.copysign(r, x) if abs(x) < 1024 else x


@njit(**_INLINE)
def floor_f16range_float32(x):
    r = (x + _MAGIC) - _MAGIC
    r = r - _ONE if r > x else r
    return math.copysign(r, x) if abs(x) < 1024 else x


@njit(**_INLINE)
def ceil_f16range_float32(x):
    r = (x + _MAGIC) - _MAGIC
    r = r + _ONE if r < x else r
    return math.copysign(r, x) if abs(x) < 1024 else x


@njit(**_INLINE)
def trunc_f16range_float32(x):
    r = (x + _MAGIC) - _MAGIC
    r = r - math.copysign(_ONE, x) if abs(r) > abs(x) else r
    return math.copysign(r, x) if abs(x) < 1024 else x


# --- transcendental functions -------------------------------------------------------------------
# libm spellings Numba supports; a vmath entry for the same (prim, dtype) wins.
_LIBM_UNARY = {
    "exp": "math.exp", "exp2": "np.exp2", "expm1": "math.expm1", "log": "math.log",
    "log1p": "math.log1p", "log2": "math.log2", "log10": "math.log10", "sin": "math.sin",
    "cos": "math.cos", "tan": "math.tan", "asin": "math.asin", "acos": "math.acos",
    "atan": "math.atan", "sinh": "math.sinh", "cosh": "math.cosh", "tanh": "math.tanh",
    "asinh": "math.asinh", "acosh": "math.acosh", "atanh": "math.atanh", "erf": "math.erf",
    "erfc": "math.erfc", "lgamma": "math.lgamma",
}
_LIBM_BINARY = {"atan2": "math.atan2", "hypot": "math.hypot", "pow": "{a} ** {b}"}

try:  # the vmath engineer's table: (prim, "float32"|"float64") -> numba-inlinable function
    from primtrace.executors.numba.vmath import VMATH as _VMATH
except ImportError:  # pragma: no cover - until vmath.py lands
    _VMATH = {}


def _libm(prim: str, dtype: str):
    """A numba function computing `prim` with libm in `dtype` (float32 or float64)."""
    cast = "np.float32" if dtype == "float32" else "np.float64"
    if prim in _LIBM_UNARY:
        src = f"def {prim}_{dtype}(a):\n    return {cast}({_LIBM_UNARY[prim]}(a))\n"
    elif prim == "sigmoid":
        src = (f"def {prim}_{dtype}(a):\n    one = {cast}(1)\n"
               f"    return one / (one + {cast}(math.exp(-a)))\n")
    else:
        body = _LIBM_BINARY[prim]
        expr = body.format(a="a", b="b") if "{" in body else f"{body}(a, b)"
        src = f"def {prim}_{dtype}(a, b):\n    return {cast}({expr})\n"
    namespace = {"math": math, "np": np, "__name__": __name__}   # importable: Numba's disk
    # cache rebuilds each function's environment by importing its module
    exec(compile(src, f"<primtrace mathlib {prim}_{dtype}>", "exec"), namespace)
    return njit(**_INLINE)(namespace[f"{prim}_{dtype}"])   # no source file: not cached


#: prim names with a scalar function per float dtype
MATH_PRIMS = frozenset(_LIBM_UNARY) | frozenset(_LIBM_BINARY) | {"sigmoid"}

for _prim in sorted(MATH_PRIMS):
    for _dtype in ("float32", "float64"):
        _fn = _VMATH.get((_prim, _dtype))
        globals()[f"{_prim}_{_dtype}"] = _as_inlinable(_fn) if _fn is not None else _libm(_prim, _dtype)
for (_prim, _dtype), _fn in _VMATH.items():  # functions vmath offers beyond the libm list
    globals().setdefault(f"{_prim}_{_dtype}", _as_inlinable(_fn))


def math_name(prim: str, dtype: str) -> str | None:
    """The attribute of this module computing `prim` in `dtype`, or None."""
    name = f"{prim}_{dtype}"
    return name if name in globals() else None


def uses_vmath(prim: str, dtype: str) -> bool:
    return (prim, dtype) in _VMATH


@functools.lru_cache(maxsize=None)
def fingerprint() -> str:
    """What the compiled kernels depend on besides their own source (for the disk cache)."""
    import hashlib
    import os
    h = hashlib.sha256()
    here = os.path.dirname(__file__)
    names = [f for f in os.listdir(here) if f.startswith(("halfbits", "mathlib", "runtime"))]
    names += [f"vmath/{f}" for f in os.listdir(os.path.join(here, "vmath"))]   # the package
    for fname in sorted(f for f in names if f.endswith(".py")):
        with open(os.path.join(here, fname), "rb") as f:
            h.update(fname.encode() + f.read())
    return h.hexdigest()[:16]


_enable_helper_caches()
