"""Accuracy and speed of primtrace's vectorizable math (primtrace.executors.numba.vmath).

For every function: the max ULP error on float32 and float64 over the same sweeps the tests
use (dense range, random bit patterns, function-specific families; see
tests/numba/test_vmath.py), eager's (torch's op: MKL VML or SLEEF) on the same inputs, and
the time of one pass over 2**24 float32 elements three ways, all in this run: a parallel
Numba loop calling the vmath function, the same loop calling Numba's math.* (scalar libm
calls), and torch's vectorized op (out= given, so no allocation is timed on either side),
interleaved, best of 7. Timing inputs are uniform over typical ranges (TIME_RANGE;
(-10, 10) unless listed). Ratios are against torch. On a shared machine, set
NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1 for stabler ratios.

    .venv/bin/python benchmarks/vmath_accuracy.py [name ...]
"""
from __future__ import annotations

import math
import os
import sys
import time

import numpy as np
import torch
from numba import njit, prange

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from primtrace.executors.numba.vmath import ARITY, VMATH  # noqa: E402
from tests.numba.test_vmath import (BOUND, binary_inputs, reference,  # noqa: E402
                                    ulp_error, unary_inputs, run)

F32 = np.float32
N = 1 << 24

# Numba's own (libm) version of each function, float32 in, float32 out.
_ONE = F32(1.0)
LIBM = {
    "exp": lambda x: math.exp(x), "exp_fast": lambda x: math.exp(x),
    "exp2": lambda x: np.exp2(x),
    "expm1": lambda x: math.expm1(x), "log": lambda x: math.log(x),
    "log2": lambda x: math.log2(x), "log10": lambda x: math.log10(x),
    "log1p": lambda x: math.log1p(x), "sin": lambda x: math.sin(x),
    "cos": lambda x: math.cos(x), "tan": lambda x: math.tan(x),
    "tanh": lambda x: math.tanh(x), "sigmoid": lambda x: _ONE / (_ONE + math.exp(-x)),
    "erf": lambda x: math.erf(x), "erfc": lambda x: math.erfc(x),
    "atan": lambda x: math.atan(x), "asin": lambda x: math.asin(x),
    "acos": lambda x: math.acos(x), "sinh": lambda x: math.sinh(x),
    "cosh": lambda x: math.cosh(x), "sqrt": lambda x: math.sqrt(x),
    "rsqrt": lambda x: _ONE / math.sqrt(x), "atan2": lambda y, x: math.atan2(y, x),
    "asinh": lambda x: math.asinh(x), "acosh": lambda x: math.acosh(x),
    "atanh": lambda x: math.atanh(x),
    "pow": lambda x, y: math.pow(x, y),
}
TORCH = {
    "exp": torch.exp, "exp_fast": torch.exp, "exp2": torch.exp2, "expm1": torch.expm1, "log": torch.log,
    "log2": torch.log2, "log10": torch.log10, "log1p": torch.log1p, "sin": torch.sin,
    "cos": torch.cos, "tan": torch.tan, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
    "erf": torch.erf, "erfc": torch.erfc, "atan": torch.atan, "asin": torch.asin,
    "acos": torch.acos, "sinh": torch.sinh, "cosh": torch.cosh, "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt, "atan2": torch.atan2, "pow": torch.pow, "asinh": torch.asinh,
    "acosh": torch.acosh, "atanh": torch.atanh,
}


def parallel_loop(fn, nargs):
    """A prange loop over fn (what the fusion code generator emits, minus the fusion)."""
    if nargs == 1:
        @njit(parallel=True)
        def loop(x, out):
            for i in prange(x.size):
                out[i] = fn(x[i])
    else:
        @njit(parallel=True)
        def loop(x, y, out):
            for i in prange(x.size):
                out[i] = fn(x[i], y[i])
    return loop


def best_ms(fns, reps=7):
    """Best-of-reps time of each function in ms, the functions interleaved so that load
    from other processes on a shared machine hits all of them alike."""
    for f in fns:
        f()
    best = [math.inf] * len(fns)
    for _ in range(reps):
        for j, f in enumerate(fns):
            t = time.perf_counter()
            f()
            best[j] = min(best[j], time.perf_counter() - t)
    return [b * 1e3 for b in best]


#: Timing inputs: typical values (uniform), not the accuracy sweeps' full domains (whose
#: subnormal results would time the hardware's subnormal handling, not the functions).
TIME_RANGE = {"log": (0.01, 100), "log2": (0.01, 100), "log10": (0.01, 100),
              "log1p": (-0.9, 100), "sqrt": (0.01, 100), "rsqrt": (0.01, 100),
              "asin": (-1, 1), "acos": (-1, 1), "atanh": (-0.99, 0.99), "acosh": (1, 100),
              "erf": (-5, 5), "erfc": (-5, 5)}


def timing_inputs(name, rng):
    if name == "pow":
        return rng.uniform(0.1, 10, N).astype(F32), rng.uniform(-5, 5, N).astype(F32)
    if name == "atan2":
        return rng.standard_normal(N).astype(F32), rng.standard_normal(N).astype(F32)
    lo, hi = TIME_RANGE.get(name, (-10, 10))
    return (rng.uniform(lo, hi, N).astype(F32),)


def max_ulp(name, dtype):
    """(ours, eager's) max ULP error on the same inputs (eager: torch's op on the tensor)."""
    dt = np.dtype(dtype).type
    rng = np.random.default_rng(1)
    args = unary_inputs(name, dt, rng) if ARITY[name] == 1 else binary_inputs(name, dt, rng)
    args = (args,) if ARITY[name] == 1 else args
    ref = reference(name, dt, *args)
    with np.errstate(all="ignore"):
        eager = TORCH[name](*(torch.from_numpy(a) for a in args)).numpy()
    return (float(ulp_error(run(name, dt, *args), ref, dt).max()),
            float(ulp_error(eager, ref, dt).max()))


def main(names):
    rng = np.random.default_rng(0)
    print(f"numba threads: {os.environ.get('NUMBA_NUM_THREADS', 'default')}, "
          f"torch threads: {torch.get_num_threads()}, N = 2**24 float32")
    head = (f"{'function':9s} {'ulp f32':>7s} {'ulp f64':>7s} {'eager f32':>9s} {'eager f64':>9s} "
            f"{'bound':>9s} {'vmath ms':>9s} {'libm ms':>8s} {'torch ms':>8s} "
            f"{'vmath/torch':>11s} {'libm/torch':>10s}")
    print(head)
    print("-" * len(head))
    for name in names:
        (u32, e32), (u64, e64) = max_ulp(name, "float32"), max_ulp(name, "float64")
        args = timing_inputs(name, rng)
        out = np.empty_like(args[0])
        vm = parallel_loop(VMATH[name, "float32"], ARITY[name])
        lm = parallel_loop(njit(LIBM[name]), ARITY[name])
        targs = [torch.from_numpy(a) for a in args]
        tout = torch.from_numpy(out)
        t_vm, t_lm, t_th = best_ms([lambda: vm(*args, out), lambda: lm(*args, out),
                                    lambda: TORCH[name](*targs, out=tout)])
        b = BOUND[name]
        print(f"{name:9s} {u32:7.3f} {u64:7.3f} {e32:9.3g} {e64:9.3g} "
              f"{b[0]:4.1f}/{b[1]:<4.1f} {t_vm:9.2f} "
              f"{t_lm:8.2f} {t_th:8.2f} {t_vm / t_th:11.2f} {t_lm / t_th:10.2f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or [n for n in BOUND])
