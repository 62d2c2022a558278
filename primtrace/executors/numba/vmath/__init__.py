"""Vectorizable elementwise math for Numba kernels: one entry point for the fusion code
generator.

Numba lowers ``math.sin``/``math.exp``/... to scalar libm calls, which stop LLVM from
vectorizing the loop around them. The functions here use only arithmetic, compares,
selects and bit casts (see ``vmath.core``), are inlined into the caller by LLVM, and keep
the loop vectorizable. float32 variants compute in float32 (16 lanes with AVX-512), except
in float64 where float32 would need slower double-word arithmetic: the sin/cos/tan kernels
after the reduction (rounded once: 0.503 ULP), pow, the erfc tail.

``VMATH[(prim_name, dtype_name)]`` is the function to call for a prim on a dtype, e.g.
``VMATH["sin", "float32"]`` is ``sin_f32``. Binary prims (atan2, pow) take (a, b) in the
prim's argument order. Arguments are converted to the variant's dtype on entry. The
functions set their own fastmath flags (contract only), so a caller compiled with
``fastmath=True`` does not change their results. Each is compiled once per process on
first use (0.3-0.7 s); a kernel calling one pays about 0.1 s more LLVM time than with libm.
Accuracy per function and dtype: tests/numba/test_vmath.py (BOUND) and
benchmarks/vmath_accuracy.py.

Each function is written once for both dtypes (see ``vmath.core``): every module's
``functions(FLOAT32)`` / ``functions(FLOAT64)`` builds its float32 / float64 variants.

``exp_fast`` is no prim: a 1-ULP exp at ~60% of ``exp``'s cost (the SLEEF-style one eager
uses inside silu and sigmoid; torch.exp itself is MKL's 0.56 ULP, which ``exp`` matches),
for a lowering that knows the next rounding dominates (an exp feeding 1 + e).
"""
from __future__ import annotations

import functools
from types import SimpleNamespace

from primtrace.executors.numba.vmath import erf, exp_log, hyperbolic, inverse_trig, power, trig
from primtrace.executors.numba.vmath.core import DTYPES, sqrt, vjit


@functools.lru_cache(maxsize=None)
def _roots(d):
    """sqrt and rsqrt for dtype d (a core.Floats)."""
    F = d.F
    one = F(1.0)

    @vjit
    def sqrt_(x):
        """sqrt: llvm.sqrt, one vsqrtps/vsqrtpd instruction (correctly rounded, NaN below
        0)."""
        return sqrt(F(x))

    @vjit
    def rsqrt(x):
        """1/sqrt(x) as torch computes it: a correctly rounded sqrt, then a division."""
        return one / sqrt(F(x))
    return SimpleNamespace(sqrt=sqrt_, rsqrt=rsqrt)


_UNARY = ("exp", "exp_fast", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan",
          "tanh", "sigmoid", "erf", "erfc", "atan", "asin", "acos", "sinh", "cosh", "asinh",
          "acosh", "atanh", "sqrt", "rsqrt")
_BINARY = ("atan2", "pow")

#: prim name -> the functions(d) of the module that provides it
_BUILDER = {**{name: m.functions for m in (exp_log, trig, inverse_trig, hyperbolic, erf, power)
               for name in m.NAMES},
            "sqrt": _roots, "rsqrt": _roots}

#: (prim name, dtype name) -> njit function (float32 / float64 variants).
VMATH = {(name, d.name): getattr(_BUILDER[name](d), name)
         for name in _UNARY + _BINARY for d in DTYPES}

#: float32 sin and cos for |x| < trig.NEAR_LIMIT (the op table's ``near`` variants) and for
#: float16 values with a half result (``f16_half``)
VMATH.update({(name, "float32"): fn for name, fn in trig.FLOAT32_ONLY.items()})

#: Number of arguments per prim in VMATH.
ARITY = {**{n: 1 for n in (*_UNARY, *trig.FLOAT32_ONLY)}, **{n: 2 for n in _BINARY}}

# exp_f32, exp_f64, sin_f32, ...: the VMATH entries by name
globals().update({f"{name}_{d.tag}": VMATH[name, d.name]
                  for name in _UNARY + _BINARY for d in DTYPES})

__all__ = ["VMATH", "ARITY"] + [f"{n}_{s}" for n in _UNARY + _BINARY for s in ("f32", "f64")]
