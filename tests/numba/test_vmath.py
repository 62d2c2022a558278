"""Accuracy, special values and vectorization of primtrace.executors.numba.vmath.

Accuracy is measured in ULPs of the result dtype against a more precise reference: float32
functions against NumPy float64 (glibc, < 1 float64 ULP), float64 functions against NumPy
long double (x87 80-bit, 11 more bits; erf/erfc from a long double series and continued
fraction). Inputs are a
dense sweep of each function's interesting range, random bit patterns over all finite
floats (subnormals and huge values included) and function-specific families; special
values (+-0, +-inf, NaN, subnormals, overflow thresholds) must come out exactly right.
"""
from __future__ import annotations

import re
import zlib

import numpy as np
import pytest
from numba import njit
from llvmlite import binding as llvm

from primtrace.executors.numba.vmath import ARITY, VMATH

F32, F64, LD = np.float32, np.float64, np.longdouble
LD_EXTENDED = np.finfo(LD).nmant >= 63          # x87 / quad long double

#: Asserted max ULP error per function: (float32, float64). Measured on this machine
#: (AMD EPYC, AVX-512, FMA contraction on) are at most 0.1 to 0.3 below these.
BOUND = {
    "exp": (1.0, 1.0), "exp_fast": (1.0, 1.0), "exp2": (1.0, 1.0), "expm1": (1.0, 1.0), "log": (1.0, 1.0),
    "log2": (1.0, 1.0), "log10": (1.0, 1.0), "log1p": (1.0, 1.0), "sin": (1.0, 1.0),
    "cos": (1.0, 1.0), "tan": (1.0, 1.5), "tanh": (1.0, 1.0), "sigmoid": (2.5, 1.0),
    "erf": (1.0, 1.0), "erfc": (1.0, 1.0), "atan": (1.0, 1.0), "asin": (1.0, 1.0),
    "acos": (1.0, 1.0), "sinh": (1.0, 1.0), "cosh": (1.0, 1.0), "sqrt": (0.5, 0.5),
    "rsqrt": (1.5, 1.5), "atan2": (1.5, 1.5), "pow": (1.0, 1.0),
    "asinh": (1.5, 1.5), "acosh": (1.0, 1.0), "atanh": (1.0, 1.0),
}
# rsqrt is 1/sqrt(x) with two roundings, as torch computes it (test_sqrt_rsqrt_bitwise);
# float32 sigmoid rounds e**-|x| before dividing, as eager does (eager: 2.5 ULP)
if not LD_EXTENDED:  # reference no better than float64: allow its own error
    BOUND = {k: (a, b + 1.0) for k, (a, b) in BOUND.items()}

_LOOPS = {}


def loop_for(name, dtype):
    """Serial njit loop applying VMATH[name, dtype] elementwise (compiled once)."""
    key = (name, dtype)
    if key not in _LOOPS:
        fn = VMATH[name, dtype]
        if ARITY[name] == 1:
            @njit
            def loop(x, out):
                for i in range(x.size):
                    out[i] = fn(x[i])
        else:
            @njit
            def loop(x, y, out):
                for i in range(x.size):
                    out[i] = fn(x[i], y[i])
        _LOOPS[key] = loop
    return _LOOPS[key]


def run(name, dtype, *args):
    args = [np.ascontiguousarray(a, dtype=dtype) for a in args]
    out = np.empty_like(args[0])
    loop_for(name, np.dtype(dtype).name)(*args, out)
    return out


# ---------------------------------------------------------------------------- references
_SQRTPI = LD("1.77245385090551602729816748334114518")


def _exp_neg_sq_ld(a):
    """e**(-a*a) in long double from an exact split of a*a (a holds float64 values)."""
    ah = a.astype(F64)
    ah = (ah.view(np.int64) & np.int64(-134217728)).view(F64).astype(LD)
    al = a - ah
    return np.exp(-(ah * ah)) * np.exp(-(2 * ah * al + al * al))


def erf_erfc_ld(x):
    """(erf, erfc) in long double: the positive-term series
    erf(a) = 2a/sqrt(pi) e**-a*a sum (2a*a)**n / (2n+1)!! below 1, the continued fraction
    erfc(a) = e**-a*a / (sqrt(pi) (a + (1/2)/(a + 1/(a + (3/2)/(a + ...))))) above
    (both checked against mpmath to 2e-19 while writing this)."""
    a = np.abs(x.astype(LD))
    a = np.where(np.isfinite(a), a, 1)
    small = a < 1
    s = np.where(small, a, 0)
    t, acc, s2 = np.ones_like(s), np.ones_like(s), 2 * s * s
    for n in range(1, 120):
        t = t * s2 / (2 * n + 1)
        acc = acc + t
    erf_s = 2 * s / _SQRTPI * _exp_neg_sq_ld(s) * acc
    b = np.where(small, 1, a)
    f = b.copy()
    for k in range(400, 0, -1):
        f = b + LD(k) / 2 / f
    erfc_b = _exp_neg_sq_ld(b) / (_SQRTPI * f)
    erfc_pos = np.where(small, 1 - erf_s, erfc_b)
    erf_pos = np.where(small, erf_s, 1 - erfc_b)
    erf = np.copysign(erf_pos, x)                 # erf(-0.0) = -0.0
    erfc = np.where(x < 0, 2 - erfc_pos, erfc_pos)
    inf = np.isinf(x)
    erf = np.where(inf, np.sign(x), erf)
    erfc = np.where(inf, 1 - np.sign(x), erfc)
    nan = np.isnan(x)
    return np.where(nan, x, erf), np.where(nan, x, erfc)


def _erf64(name):
    import torch
    fn = getattr(torch.special, name)
    return lambda x: fn(torch.from_numpy(np.asarray(x, F64))).numpy()


REF = {
    "exp": np.exp, "exp_fast": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log2": np.log2,
    "log10": np.log10, "log1p": np.log1p, "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "tanh": np.tanh, "atan": np.arctan, "asin": np.arcsin, "acos": np.arccos,
    "sinh": np.sinh, "cosh": np.cosh, "sqrt": np.sqrt, "atan2": np.arctan2,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "pow": np.power, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "rsqrt": lambda x: 1 / np.sqrt(x),
}


def reference(name, dtype, *args):
    """Exact-enough result: float64 for float32 inputs, long double for float64."""
    with np.errstate(all="ignore"):
        if dtype == F32:
            if name in ("erf", "erfc"):
                return _erf64(name)(args[0].astype(F64))
            return REF[name](*(a.astype(F64) for a in args))
        if name in ("erf", "erfc"):
            return erf_erfc_ld(args[0])[0 if name == "erf" else 1]
        return REF[name](*(a.astype(LD) for a in args))


def ulp_error(y, ref, dtype):
    """|y - ref| in units of the dtype's ULP at the rounded reference (the binade the
    result lands in); NaN and infinities must match exactly."""
    fi = np.finfo(dtype)
    wide = LD if dtype == F64 else F64
    ref = np.asarray(ref, wide)
    with np.errstate(all="ignore"):
        rounded = ref.astype(dtype)
        e = np.frexp(rounded)[1].astype(np.int64) - 1
        e = np.maximum(np.where(rounded == 0, fi.minexp, e), fi.minexp)
        # scale before narrowing: a float64 difference of subnormals would be quantized
        err = np.abs(np.ldexp(y.astype(wide) - ref, fi.nmant - e).astype(F64))
    yn, rn = np.isnan(y), np.isnan(rounded)
    err[yn & rn] = 0
    err[yn ^ rn] = np.inf
    special = (np.isinf(rounded) | np.isinf(y)) & ~yn & ~rn
    err[special] = np.where(y == rounded, 0, np.inf)[special]
    return err


# ------------------------------------------------------------------------------- inputs
def all_bits(dtype, n, rng, sign=True):
    """Uniform over bit patterns of finite floats: every binade equally likely."""
    if dtype == F32:
        x = rng.integers(0, 0x7F800000, n, dtype=np.uint32).view(F32)
    else:
        x = rng.integers(0, 0x7FF0000000000000, n, dtype=np.uint64).view(F64)
    if sign:
        x = np.where(rng.random(n) < 0.5, -x, x)
    return x


#: Dense sweep range per function: (float32 range, float64 range).
RANGE = {
    "exp": ((-105, 90), (-746, 710)), "exp_fast": ((-105, 90), (-746, 710)), "exp2": ((-152, 130), (-1080, 1030)),
    "expm1": ((-20, 90), (-40, 710)), "log": ((0, 4), (0, 4)), "log2": ((0, 4), (0, 4)),
    "log10": ((0, 4), (0, 4)), "log1p": ((-1, 3), (-1, 3)), "sin": ((-20, 20), (-20, 20)),
    "cos": ((-20, 20), (-20, 20)), "tan": ((-20, 20), (-20, 20)), "tanh": ((-12, 12), (-25, 25)),
    "sigmoid": ((-110, 90), (-750, 710)), "erf": ((-6, 6), (-7, 7)),
    "erfc": ((-6, 11), (-7, 28)), "atan": ((-8, 8), (-8, 8)), "asin": ((-1, 1), (-1, 1)),
    "acos": ((-1, 1), (-1, 1)), "sinh": ((-92, 92), (-712, 712)),
    "cosh": ((-92, 92), (-712, 712)), "sqrt": ((0, 4), (0, 4)), "rsqrt": ((0, 4), (0, 4)),
    "asinh": ((-10, 10), (-10, 10)), "acosh": ((1, 10), (1, 10)), "atanh": ((-1, 1), (-1, 1)),
}


def unary_inputs(name, dtype, rng):
    n = 1 << 20 if dtype == F32 else 1 << 17
    if name in ("erf", "erfc") and dtype == F64:
        n = 1 << 15                          # the long double erf reference is slow-ish
    lo, hi = RANGE[name][0 if dtype == F32 else 1]
    parts = [np.linspace(lo, hi, n), rng.uniform(lo, hi, n // 2), all_bits(dtype, n // 2, rng)]
    if name in ("sin", "cos", "tan"):
        parts.append(rng.uniform(-1e5, 1e5, n // 2))
    if name in ("asin", "acos"):
        parts.append(1 - rng.random(n // 4) ** 6)
    if name == "log1p":
        parts.append(-rng.random(n // 4) * 2.0 ** -rng.integers(0, 60, n // 4))
    return np.concatenate([np.asarray(p).astype(dtype) for p in parts])


def binary_inputs(name, dtype, rng):
    n = 1 << 19 if dtype == F32 else 1 << 16
    if name == "atan2":
        mag = lambda: rng.standard_normal(n) * np.exp(rng.uniform(-8, 8, n))  # noqa: E731
        y = np.concatenate([mag(), all_bits(dtype, n, rng)])
        x = np.concatenate([mag(), all_bits(dtype, n, rng)])
        return y.astype(dtype), x.astype(dtype)
    big = 80 if dtype == F32 else 700
    x1 = np.exp(rng.uniform(-5, 5, n)); y1 = rng.uniform(-30, 30, n)
    x2 = np.exp(rng.uniform(-big, big, n))
    y2 = rng.uniform(-1, 1, n) * big / np.abs(np.log(x2))                      # near range ends
    x3 = 1 + rng.uniform(-1e-3, 1e-3, n); y3 = rng.uniform(-1e5, 1e5, n)       # x near 1
    x4 = -np.exp(rng.uniform(-3, 3, n)); y4 = rng.integers(-40, 40, n)         # x < 0
    x = np.concatenate([x1, x2, x3, x4]).astype(dtype)
    y = np.concatenate([y1, y2, y3, y4]).astype(dtype)
    return x, y


CASES = [(n, d) for n in BOUND for d in ("float32", "float64")]


@pytest.mark.parametrize("name,dtype", CASES)
def test_accuracy(name, dtype):
    dt = np.dtype(dtype).type
    rng = np.random.default_rng(zlib.crc32(f"{name}-{dtype}".encode()))
    args = unary_inputs(name, dt, rng) if ARITY[name] == 1 else binary_inputs(name, dt, rng)
    if ARITY[name] == 1:
        args = (args,)
    y = run(name, dt, *args)
    err = ulp_error(y, reference(name, dt, *args), dt)
    i = int(np.argmax(err))
    bound = BOUND[name][0 if dt == F32 else 1]
    at = ", ".join(repr(a[i]) for a in args)
    assert err[i] <= bound, f"{name}({at}) = {y[i]!r}: {err[i]:.3f} ULP > {bound}"


# ------------------------------------------------------------------------ special values
def specials(dtype):
    fi = np.finfo(dtype)
    vals = [0.0, -0.0, np.inf, -np.inf, np.nan, fi.smallest_subnormal, -fi.smallest_subnormal,
            fi.smallest_normal, -fi.smallest_normal, fi.max, -fi.max, 1.0, -1.0, 0.5, -0.5,
            2.0, -2.0, 1e-30, -1e-30, 3 * fi.smallest_subnormal]
    thresholds = ([88.72283, 88.72284, 89.41599, -87.33655, -103.97208, -104.0, 127.99999,
                   128.0, -149.0, -150.0, 10.0553, 10.06, 3.92, -17.33, 9.1, 1e30, 2.0 ** 24]
                  if dtype == F32 else
                  [709.782712893384, 709.7827128933841, 710.4758600739439, -708.3964185322641,
                   -745.1332191019411, -745.14, 1023.9999999999999, 1024.0, -1074.0, -1075.0,
                   26.55, 27.3, 5.93, -37.43, 19.1, 1e300, 2.0 ** 53])
    vals += thresholds + [-v for v in thresholds]
    return np.array(vals, dtype=dtype)


def _check_exact(name, dt, args, y, ref):
    """Where the reference is representable (0, inf, NaN, 1, ...), demand it bit for bit
    (sign of zero included); elsewhere the ULP bound."""
    with np.errstate(all="ignore"):
        rounded = np.asarray(ref, LD).astype(dt)
        exact = np.isnan(rounded) | (rounded.astype(LD) == np.asarray(ref, LD))
    bad = []
    for i in np.flatnonzero(exact):
        r, v = rounded[i], y[i]
        ok = (np.isnan(r) and np.isnan(v)) or (r == v and np.signbit(r) == np.signbit(v))
        if not ok:
            bad.append(f"{name}({', '.join(repr(a[i]) for a in args)}) = {v!r}, want {r!r}")
    err = ulp_error(y, ref, dt)
    bound = BOUND[name][0 if dt == F32 else 1]
    bad += [f"{name}({', '.join(repr(a[i]) for a in args)}) = {y[i]!r}: {err[i]:.2f} ULP"
            for i in np.flatnonzero(~exact & (err > bound))]
    assert not bad, "\n".join(bad[:20])


@pytest.mark.parametrize("name,dtype", [(n, d) for n, d in CASES if ARITY[n] == 1])
def test_special_values_unary(name, dtype):
    dt = np.dtype(dtype).type
    x = specials(dt)
    _check_exact(name, dt, (x,), run(name, dt, x), reference(name, dt, x))


@pytest.mark.parametrize("name,dtype", [(n, d) for n, d in CASES if ARITY[n] == 2])
def test_special_values_binary(name, dtype):
    """The C99 tables: atan2 on signed zeros and infinities, pow's 1**y, x**0, (-x)**int,
    0**negative, inf**y, (-1)**inf, NaN handling."""
    dt = np.dtype(dtype).type
    fi = np.finfo(dt)
    grid = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0,
                     3.0, -3.0, 2.5, -2.5, fi.smallest_subnormal, -fi.max, fi.max, 1e10,
                     -1e10, 0.75, -1.25], dtype=dt)
    a, b = (g.ravel() for g in np.meshgrid(grid, grid))
    _check_exact(name, dt, (a, b), run(name, dt, a, b), reference(name, dt, a, b))


def test_huge_trig_arguments_exact_reduction():
    """Payne-Hanek: every float32 binade up to FLT_MAX and float64 ones up to DBL_MAX."""
    rng = np.random.default_rng(7)
    e32 = np.arange(-1, 128)
    x32 = (np.ldexp(1 + rng.random((e32.size, 64)), e32[:, None])).astype(F32).ravel()
    x32 = x32[np.isfinite(x32)]
    e64 = np.arange(-1, 1024, 7)
    x64 = np.ldexp(1 + rng.random((e64.size, 16)), e64[:, None]).ravel()
    x64 = x64[np.isfinite(x64)]
    for name in ("sin", "cos", "tan"):
        for dt, x in ((F32, x32), (F64, x64)):
            err = ulp_error(run(name, dt, x), reference(name, dt, x), dt)
            assert err.max() <= BOUND[name][0 if dt == F32 else 1], (name, dt, x[err.argmax()])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sqrt_rsqrt_bitwise(dtype):
    """sqrt is correctly rounded (np.sqrt is); rsqrt is exactly fl(1/fl(sqrt(x))), the
    formula torch's CPU kernel uses (torch's own sqrt is not correctly rounded on this
    machine, so bit parity with torch is not asserted)."""
    dt = np.dtype(dtype).type
    x = np.concatenate([all_bits(dt, 1 << 16, np.random.default_rng(3)), specials(dt)])
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(run("sqrt", dt, x), np.sqrt(x))
        np.testing.assert_array_equal(run("rsqrt", dt, x), dt(1) / np.sqrt(x))


def test_two_over_pi_bits():
    """The Payne-Hanek tables come from 2/pi computed with Machin's formula; check its
    first 160 bits against the published expansion."""
    from primtrace.executors.numba.vmath.trig import two_over_pi_bits
    assert two_over_pi_bits(160) == 0xA2F9836E4E441529FC2757D1F534DDC0DB629599


# ------------------------------------------------------------------------- vectorization
def _loop_body(ir):
    """The LLVM IR of the compiled loop itself (not its Python/cfunc wrappers)."""
    for m in re.finditer(r'^define [^@]*@"?([\w.$]+)"?\(.*?^}', ir, re.S | re.M):
        if not m.group(1).startswith(("_ZN7cpython", "cfunc")) and "loop" in m.group(1):
            return m.group(0)
    raise AssertionError("loop function not found in the IR")


_FEATURES = llvm.get_host_cpu_features()
MIN_LANES32 = 8 if _FEATURES.get("avx2") else 4

#: float32 functions that intentionally take a float64 step (documented in their modules).
F64_STEPS = {"sin", "cos", "tan", "pow", "erfc"}


@pytest.mark.parametrize("name,dtype", CASES)
def test_loop_vectorizes(name, dtype):
    """The loop calling the function compiles to vector code with no call left in it but
    LLVM intrinsics (a scalar libm call would block vectorization)."""
    dt = np.dtype(dtype).type
    x = np.ones(64, dt)
    run(name, dt, *([x] * ARITY[name]))
    loop = loop_for(name, dtype)
    body = _loop_body(loop.inspect_llvm(loop.signatures[0]))
    calls = {c for c in re.findall(r'call [^@]*@"?([\w.$]+)', body) if not c.startswith("llvm.")}
    assert not calls, f"non-intrinsic calls left in the loop: {sorted(calls)}"
    elem = "float" if dt == F32 else "double"
    lanes = [int(n) for n in re.findall(rf"<(\d+) x {elem}>", body)]
    want = MIN_LANES32 if dt == F32 else MIN_LANES32 // 2
    assert lanes and max(lanes) >= want, f"no <{want}+ x {elem}> vectors: {sorted(set(lanes))}"
    if dt == F32 and name not in F64_STEPS:
        assert "double" not in body, "float32 variant computes in float64"


@pytest.mark.parametrize("name", ["sin", "exp", "pow"])
def test_prange_loop_vectorizes(name):
    """The parallel form the fusion code generator emits: the parfor body (a separate
    gufunc in the IR) is vector code without calls."""
    from numba import prange
    fn = VMATH[name, "float32"]
    if ARITY[name] == 1:
        @njit(parallel=True)
        def loop(x, out):
            for i in prange(x.size):
                out[i] = fn(x[i])
        args = (np.ones(64, F32),)
    else:
        @njit(parallel=True)
        def loop(x, y, out):
            for i in prange(x.size):
                out[i] = fn(x[i], y[i])
        args = (np.ones(64, F32), np.ones(64, F32))
    loop(*args, np.empty(64, F32))
    ir = loop.inspect_llvm(loop.signatures[0])
    bodies = {m.group(1): m.group(0) for m in re.finditer(r'^define [^@]*@"?([\w.$]+)"?\(.*?^}',
                                                          ir, re.S | re.M)
              if "numba_parfor_gufunc" in m.group(1)}
    # LLVM may inline the parfor body into its __gufunc__ wrapper (seen on AMD Zen 3)
    body = next((b for n, b in bodies.items() if not n.startswith("__gufunc")), None) or next(
        b for n, b in bodies.items() if n.startswith("__gufunc"))
    calls = {c for c in re.findall(r'call [^@]*@"?([\w.$]+)', body) if not c.startswith("llvm.")}
    assert not calls, sorted(calls)
    lanes = [int(n) for n in re.findall(r"<(\d+) x float>", body)]
    assert lanes and max(lanes) >= MIN_LANES32


@pytest.mark.parametrize("name", ["exp", "log1p", "sin", "erfc", "tanh"])
def test_fastmath_caller_does_not_change_results(name):
    """The functions carry their own fast-math flags (contract only): a kernel compiled with
    fastmath=True still gets NaN, inf, -0.0 and the compensated sums right."""
    fn = VMATH[name, "float32"]

    @njit(fastmath=True)
    def loop(x, out):
        for i in range(x.size):
            out[i] = fn(x[i])
    x = np.concatenate([specials(F32), np.linspace(-30, 30, 4001).astype(F32)])
    out = np.empty_like(x)
    loop(x, out)
    np.testing.assert_array_equal(out.view(np.uint32), run(name, F32, x).view(np.uint32))
