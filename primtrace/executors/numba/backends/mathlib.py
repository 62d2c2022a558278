"""The one place that picks the scalar math functions CPU kernels call.

Transcendental prims use the vectorizable, branch-free functions of ``vmath`` when it
provides them (Numba compiles ``math.sin`` to one libm call per element, which LLVM cannot
vectorize: ~4x slower than torch's SLEEF on f32); otherwise libm through ``math``/``numpy``.
Half-precision conversions: float16 in hardware where the CPU has F16C (``runtime``),
else ``halfbits``' integer code; bfloat16 always in ``halfbits``' integer IR. All round to
nearest even and keep NaN and infinities, as torch does.

Which function each prim calls is the op table's (``ops.py``): this module defines
``<name>_<reg>`` for every function a row names with a vmath, libm or f16-range source.
Generated kernels refer to these as ``m.<name>_<reg>`` (``m.sin_float32``) and
``m.f16_to_f32``.
"""
from __future__ import annotations

import math
import os

import numpy as np
from numba import njit
from numba.core.registry import CPUDispatcher

from primtrace.executors.numba import kernel_cache, ops
from primtrace.executors.numba.backends import f16range, halfbits
from primtrace.executors.numba.backends import runtime as rt
from primtrace.executors.numba.vmath import VMATH

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


# --- the op table's CPU functions ----------------------------------------------------------------
def _libm(fn: ops.Fn, reg: str):
    """A Numba function computing `fn` with its libm spelling in `reg` (float32/float64)."""
    cast = "np.float32" if reg == "float32" else "np.float64"
    args = ", ".join("ab"[:fn.arity])
    src = f"def {fn.name}_{reg}({args}):\n    return {cast}({fn.cpu.spelling}({args}))\n"
    namespace = {"math": math, "np": np, "__name__": __name__}   # importable: Numba's disk
    # cache rebuilds each function's environment by importing its module
    exec(compile(src, f"<primtrace mathlib {fn.name}_{reg}>", "exec"), namespace)
    return njit(**_INLINE)(namespace[f"{fn.name}_{reg}"])   # no source file: not cached


for _fn in ops.FUNCTIONS.values():
    if _fn.cpu is None or _fn.cpu.kind == "inline":
        continue
    for _reg in _fn.regs:
        _name = f"{_fn.name}_{_reg}"
        if _fn.cpu.kind == "vmath":
            globals()[_name] = _as_inlinable(VMATH[(_fn.name, _reg)])
        elif _fn.cpu.kind == "libm":
            globals()[_name] = _libm(_fn, _reg)
        else:
            globals()[_name] = _cached(getattr(f16range, _name))

#: prim names with a vmath or libm function per float dtype (what special-value tests call math)
MATH_PRIMS = frozenset(row.fn.name for row in ops.ROWS
                       if row.fn is not None and row.fn.cpu.kind in ("vmath", "libm"))


_enable_helper_caches()
