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

``exp_fast`` is no prim: a 1-ULP exp at ~60% of ``exp``'s cost (the SLEEF-style one eager
uses inside silu and sigmoid; torch.exp itself is MKL's 0.56 ULP, which ``exp`` matches),
for a lowering that knows the next rounding dominates (an exp feeding 1 + e).
"""
from __future__ import annotations

from primtrace.executors.numba.vmath.inverse_trig import (acos_f32, acos_f64, asin_f32, asin_f64,
                                                          atan2_f32, atan2_f64, atan_f32, atan_f64)
from primtrace.executors.numba.vmath.core import F32, F64, sqrt, vjit
from primtrace.executors.numba.vmath.erf import erf_f32, erf_f64, erfc_f32, erfc_f64
from primtrace.executors.numba.vmath.exp_log import (exp2_f32, exp2_f64, exp_f32, exp_f64,
                                                     exp_fast_f32, exp_fast_f64, expm1_f32,
                                                     expm1_f64, log1p_f32, log1p_f64, log2_f32,
                                                     log2_f64, log10_f32, log10_f64, log_f32,
                                                     log_f64)
from primtrace.executors.numba.vmath.hyperbolic import (acosh_f32, acosh_f64, asinh_f32, asinh_f64,
                                                        atanh_f32, atanh_f64, cosh_f32, cosh_f64,
                                                        sigmoid_f32, sigmoid_f64, sinh_f32,
                                                        sinh_f64, tanh_f32, tanh_f64)
from primtrace.executors.numba.vmath.power import pow_f32, pow_f64
from primtrace.executors.numba.vmath.trig import (cos_f32, cos_f64, sin_f32, sin_f64, tan_f32,
                                                  tan_f64)


@vjit
def sqrt_f32(x):
    """sqrt: llvm.sqrt, one vsqrtps instruction (correctly rounded, NaN below 0)."""
    return sqrt(F32(x))


@vjit
def sqrt_f64(x):
    """sqrt, float64 (vsqrtpd)."""
    return sqrt(F64(x))


@vjit
def rsqrt_f32(x):
    """1/sqrt(x) as torch computes it: a correctly rounded sqrt, then a division."""
    return F32(1.0) / sqrt(F32(x))


@vjit
def rsqrt_f64(x):
    """1/sqrt(x), float64."""
    return F64(1.0) / sqrt(F64(x))


_UNARY = ("exp", "exp_fast", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan",
          "tanh", "sigmoid", "erf", "erfc", "atan", "asin", "acos", "sinh", "cosh", "asinh",
          "acosh", "atanh", "sqrt", "rsqrt")
_BINARY = ("atan2", "pow")

#: (prim name, dtype name) -> njit function (float32 / float64 variants).
VMATH = {(name, dt): globals()[f"{name}_{suffix}"]
         for name in _UNARY + _BINARY
         for dt, suffix in (("float32", "f32"), ("float64", "f64"))}

#: Number of arguments per prim in VMATH.
ARITY = {**{n: 1 for n in _UNARY}, **{n: 2 for n in _BINARY}}

__all__ = ["VMATH", "ARITY"] + [f"{n}_{s}" for n in _UNARY + _BINARY for s in ("f32", "f64")]
