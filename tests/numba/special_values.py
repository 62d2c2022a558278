"""Special-value sweeps of every prim the Numba executor lowers, fused, against eager.

Shared by ``test_fused_special_values.py`` (CPU kernels in process, the CUDA backend under
the simulator in a subprocess). The cases come from the lowering tables themselves
(``lowering.UNARY``, ``lowering.BINARY``, plus ``convert_element_type`` to every dtype and
``where``), so a row added later is swept without touching this file; a table name no
prim call reaches makes ``cases()`` fail.

All cases of one dtype run in one jitted function, fused into one kernel (compiling is
what costs): unary prims on ``a``, binary ones on ``(a, b)``, the cross product of the
dtype's special values; integer division-like prims (those whose lowering flags a zero
divisor) each get a divisor input of their own, so that a second call can put zeros
under one prim at a time and check that it raises as eager does.

What "as eager" means: integer and bool results exactly; floats bitwise (NaN payloads
aside) for every prim whose lowering is plain arithmetic; for prims lowered to a math
function (vmath, libm, libdevice) NaN-ness and infinities exactly, zeros with eager's sign,
other values at least as close to float64 as eager's (the conformance harness's rule).
Eager is taken on stride-2 views, i.e. TensorIterator's scalar loop (the C++ op as
written): its SIMD loop differs for a few (prim, dtype)s (see ``SIMD_LOOP_TOO``).
"""
from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass
from typing import Callable

import torch

from primtrace import prims
from primtrace.executors.numba import ops as lowering
from primtrace.executors.numba.backends import mathlib
from primtrace.executors.numba.ops import DTYPES, Emitter
from tests.conformance.harness import values_match

ALL = tuple(DTYPES)
INTS = tuple(d for d in ALL if DTYPES[d].kind in "iu")
FLOATS = tuple(d for d in ALL if DTYPES[d].kind in "fh")
HALF = (torch.float16, torch.bfloat16)
#: exponents of torch.pow(tensor, number): every special case, and ordinary ones
POW_EXPONENTS = {"f": (0.5, -0.5, -1.0, 2.0, 3.0, -2.0, 0.0, 1.0, 1.5, -3.0, 0.25),
                 "i": (0, 1, 2, 3, 5)}


def name_of(dtype) -> str:
    return str(dtype).replace("torch.", "")


# --- special values --------------------------------------------------------------------------
def specials(dtype) -> torch.Tensor:
    """The values every prim sees for `dtype` (distinct bit patterns)."""
    if dtype is torch.bool:
        return torch.tensor([False, True])
    if dtype in INTS:
        info, bits = torch.iinfo(dtype), DTYPES[dtype].bits
        vals = [info.min, info.min + 1, -100, -7, -2, -1, 0, 1, 2, 3, 7, bits - 1, bits,
                100, info.max - 1, info.max]
        return torch.tensor(sorted({v for v in vals if info.min <= v <= info.max})).to(dtype)
    fi = torch.finfo(dtype)
    sub = fi.smallest_normal * fi.eps      # the smallest subnormal
    vals = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0,
            1.5, -2.5, 0.75, 0.1, 100.5, -300.0, 88.75, -104.0, 710.0, 1e10, -3e9, 2.0 ** 31,
            2.0 ** 63, -1.5 * 2.0 ** 63, fi.max, -fi.max, fi.smallest_normal,
            -fi.smallest_normal, fi.smallest_normal - sub, sub, -sub, 1.0 + fi.eps, -1.0 - fi.eps]
    t = torch.tensor(vals, dtype=torch.float64).to(dtype)
    seen, keep = set(), []
    for i, k in enumerate(bits_of(t).tolist()):
        if k not in seen:
            seen.add(k)
            keep.append(i)
    return t[keep]


def bits_of(t):
    return t.view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def same(got, want) -> bool:
    """Equal values, NaN where `want` has NaN, the sign of zero kept."""
    if not want.is_floating_point():
        return torch.equal(got, want)
    return (torch.equal(got.isnan(), want.isnan())
            and torch.equal(torch.nan_to_num(got), torch.nan_to_num(want))
            and torch.equal(got.signbit(), want.signbit()))


def inputs(dtype):
    """(a, b, c): the cross product of the specials, and a bool pattern for where."""
    s = specials(dtype)
    n = s.numel()
    return s.repeat_interleave(n), s.repeat(n), torch.arange(n * n) % 3 == 1


def no_zeros(t):
    return torch.where(t == 0, torch.ones_like(t), t)


# --- where eager is not the reference ------------------------------------------------------------
def _has_min(a, b, ours=None):
    m = torch.iinfo(a.dtype).min
    return (a == m) | (b == m)


#: (prim, dtype) -> where eager dies of SIGFPE (C++ signed overflow in a division): not
#: compared. (INT_MIN / -1 in div is handled in `eager`: its wrapped result is known.)
EAGER_TRAPS = {("lcm", torch.int32): _has_min, ("lcm", torch.int64): _has_min}


def _log1p_of_subnormal(a, b, ours):
    """eager's float32/64 log1p gives +0.0 for the smallest subnormals (wrong sign for
    negative ones); ours gives log1p(x) = x, the correctly rounded result."""
    fi = torch.finfo(a.dtype)
    return (a != 0) & (a.abs() < fi.smallest_normal) & (bits_of(ours) == bits_of(a))


def _zero_tie(a, b, ours):
    """C leaves the sign of fmax/fmin(+0, -0) unspecified: torch's bfloat16 loop returns the
    second operand, its other dtypes (and our kernels, like std::max) the first."""
    return (a == 0) & (b == 0) & (ours == 0)


#: (prim, dtype) -> (a, b, ours) -> where ours is accepted though it differs from eager
EAGER_DEFECTS = {("log1p", torch.float32): _log1p_of_subnormal,
                 ("log1p", torch.float64): _log1p_of_subnormal,
                 ("fmax", torch.bfloat16): _zero_tie, ("fmin", torch.bfloat16): _zero_tie}
#: (prim, dtype) where eager's SIMD loop result is accepted too: torch's vectorized rsqrt
#: of a half type rounds 1/sqrt(x) once (as our kernels do), its scalar loop rounds
#: sqrt(x) to the half type first.
SIMD_LOOP_TOO = {("rsqrt", torch.float16), ("rsqrt", torch.bfloat16)}


def _float_to_int_out_of_range(dst):
    """Where a float -> `dst` conversion is out of range or NaN: eager CUDA converts those
    with the GPU's (saturating) instruction, not as eager CPU does."""
    info = torch.iinfo(dst)

    def mask(a, b, ours=None):
        x = a.double()
        return x.isnan() | (x < info.min) | (x >= info.max + 1)
    return mask


# --- cases from the tables ---------------------------------------------------------------------
@dataclass
class Case:
    """One prim call in the batch of a dtype."""
    label: str                          # "maximum float32", "convert float32->int8", ...
    prim: str
    call: Callable                      # (a, b, c, divisors by prim) -> tensor
    exact: bool = True                  # bitwise equal to eager (else the float64 rule)
    divides: bool = False               # flags integer division by zero
    ref: Callable | None = None         # float64 reference (inexact cases)
    skip: Callable | None = None        # (a, b) -> where not compared (eager undefined)
    allow: Callable | None = None       # (a, b, ours) -> where ours is accepted anyway
    simd_too: bool = False              # eager's SIMD loop result accepted too
    arity: int = 1                      # 1: a function of a; 2: of (a, b)


def _probe(backend, prim, dtype, arity):
    """(expression, divisors flagged) of the lowering on placeholder registers."""
    flagged = []
    em = Emitter(backend, lambda expr: expr, flagged.append)
    return lowering.find(prim, dtype, arity)(em, dtype, *["a", "b"][:arity]), flagged


#: the scalar math functions lowerings call (vmath, libm or libdevice, by backend)
_MATH_FUNCTIONS = re.compile(r"\b(%s)_float(32|64)\(" % "|".join(
    sorted(mathlib.MATH_PRIMS | {"sigmoid"} | set(lowering.F16_RANGE.values())
           | set(lowering.NEAR.values()) | set(lowering.F16_HALF.values()))))


def _calls_math(backend, prim, dtype, arity) -> bool:
    """Whether the lowering calls a transcendental math function (the float64 rule)."""
    return bool(_MATH_FUNCTIONS.search(_probe(backend, prim, dtype, arity)[0]))


def _up(t):
    return t.double() if t.is_floating_point() else t


def cases(backend, dtype) -> list[Case]:
    """Every (prim, `dtype`) `backend` lowers, as calls on the batch inputs."""
    out = []
    for table, arity in ((lowering.UNARY, 1), (lowering.BINARY, 2)):
        for prim, cat in table:
            if cat == lowering.category(dtype) and lowering.lowerable(backend, prim, dtype, arity):
                out += _row_cases(backend, dtype, prim, arity)
    name = name_of(dtype)
    for dst in ALL:
        skip = None
        if backend.name == "cuda" and dtype in FLOATS and dst in INTS:
            skip = _float_to_int_out_of_range(dst)
        out.append(Case(f"convert {name}->{name_of(dst)}", "convert_element_type",
                        lambda a, b, c, d, dst=dst: prims.convert_element_type(a, dst), skip=skip))
    out.append(Case(f"where {name}", "where", lambda a, b, c, d: prims.where(c, a, b), arity=2))
    return out


def _row_cases(backend, dtype, prim, arity) -> list[Case]:
    """The calls reaching one table row on `dtype`."""
    name = name_of(dtype)
    f16range = {v: k for k, v in {**lowering.F16_RANGE, **lowering.NEAR}.items()}
    if prim in f16range:               # floor (sin) of a float16 value converted to float32
        if dtype is not torch.float16 or not lowering.lowerable(backend, prim, torch.float32, 1):
            return []
        fn = prims.ALL_PRIMS[f16range[prim]]
        return [Case(f"{prim} float16->float32", prim,
                     lambda a, b, c, d: fn(prims.convert_element_type(a, torch.float32)),
                     exact=False, ref=lambda a, b, c, d: fn(a.double()))]
    half_result = {v: k for k, v in {**lowering.HALF_RESULT, **lowering.F16_HALF}.items()}
    if prim in half_result:            # exp (sin) of a half (float16) value, rounded to its dtype
        halves = (torch.float16,) if prim in lowering.F16_HALF.values() else (torch.float16, torch.bfloat16)
        if dtype not in halves or not lowering.lowerable(backend, prim, torch.float32, 1):
            return []
        fn = prims.ALL_PRIMS[half_result[prim]]
        # f16_half variants give eager's float16 sin(a) on every input, but not always its
        # float32 sin rounded to float16 (sin(300) in float32 is a float16 tie): there they
        # are closer to the float64 result (tests/numba/test_trig_near.py checks all inputs)
        exact = prim not in lowering.F16_HALF.values()
        return [Case(f"{prim} {name}->float32->{name}", prim,
                     lambda a, b, c, d: prims.convert_element_type(
                         fn(prims.convert_element_type(a, torch.float32)), a.dtype),
                     exact=exact, ref=None if exact else lambda a, b, c, d: fn(a.double()))]
    if prim == "pow_scalar":           # torch.pow(tensor, number)
        return [Case(f"pow {name} ** {e}", prim, lambda a, b, c, d, e=e: prims.pow(a, e),
                     exact=False, ref=lambda a, b, c, d, e=e: prims.pow(_up(a), e))
                for e in POW_EXPONENTS["f"]]
    if prim not in prims.ALL_PRIMS:
        raise AssertionError(f"lowering {prim!r} is reached by no prim call: teach "
                             "tests/numba/special_values.py how to reach it")
    fn = prims.ALL_PRIMS[prim]
    divides = bool(_probe(backend, prim, dtype, arity)[1])
    if arity == 1:
        call, ref = (lambda a, b, c, d: fn(a)), (lambda a, b, c, d: fn(_up(a)))
    elif divides:                      # a divisor of its own (zeros under one prim at a time)
        call, ref = (lambda a, b, c, d: fn(a, d[prim])), None
    else:
        call, ref = (lambda a, b, c, d: fn(a, b)), (lambda a, b, c, d: fn(_up(a), _up(b)))
    out = [Case(f"{prim} {name}", prim, call, exact=not _calls_math(backend, prim, dtype, arity),
                divides=divides, ref=ref, arity=arity, skip=EAGER_TRAPS.get((prim, dtype)),
                allow=EAGER_DEFECTS.get((prim, dtype)), simd_too=(prim, dtype) in SIMD_LOOP_TOO)]
    if prim == "pow" and lowering.category(dtype) == "i":   # integer tensor ** number
        out += [Case(f"pow {name} ** {e}", prim, lambda a, b, c, d, e=e: prims.pow(a, e))
                for e in POW_EXPONENTS["i"]]
    return out


def batch_fn(case_list):
    """One function computing every case (traced, one region): (fn, divided prims)."""
    divided = [c.prim for c in case_list if c.divides]

    def special_values(a, b, c, *divisors):
        d = dict(zip(divided, divisors))
        return tuple(case.call(a, b, c, d) for case in case_list)
    return special_values, divided


# --- eager and the comparison ------------------------------------------------------------------
def strided(t):
    """The same values as a stride-2 view: eager then runs TensorIterator's scalar loop."""
    u = torch.empty(t.numel() * 2, dtype=t.dtype)
    u[::2] = t
    return u[::2]


def untrapped(a, divisor):
    """`divisor` with 1 for -1 under INT_MIN: INT_MIN / -1 traps (SIGFPE) in eager int32/int64
    division; its wrapped quotient (INT_MIN) and remainder (0) are those of INT_MIN / 1."""
    if a.dtype not in INTS:
        return divisor
    trap = (a == torch.iinfo(a.dtype).min) & (divisor == -1)
    return torch.where(trap, torch.ones_like(divisor), divisor)


def eager(case_list, a, b, c, divisors, scalar_loop=True):
    """Eager results of every case (the exception where eager raised)."""
    f = strided if scalar_loop else (lambda t: t)
    d = {k: f(untrapped(a, v)) for k, v in divisors.items()}
    results = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for case in case_list:
            x, y = a, b
            if case.skip is not None:    # keep eager away from its traps
                x, y = (torch.where(case.skip(a, b), torch.ones_like(t), t) for t in (a, b))
            try:
                results.append(case.call(f(x), f(y), f(c), d))
            except Exception as e:       # noqa: BLE001 - eager's verdict is the spec
                results.append(e)
    return results


def differs(ours, expected, case: Case, reference=None):
    """Bool mask of the elements where `ours` is not `expected` under the rule of `case`."""
    if not ours.is_floating_point():
        return ours != expected
    o, e = ours.double(), expected.double()
    bad = ~(o.isnan() & e.isnan()) & (bits_of(ours) != bits_of(expected))
    if case.exact:
        return bad
    # NaN-ness and infinities exactly, zeros with eager's sign, other values at least as
    # close to float64 as eager's (or within the harness's tolerance)
    strict = o.isnan() | e.isnan() | o.isinf() | e.isinf()
    zero = (o == 0) | (e == 0)
    loose = bad & ~strict
    bad = bad & strict | zero & (torch.signbit(o) != torch.signbit(e))
    for i in loose.nonzero().flatten().tolist():
        ref = reference[i:i + 1] if reference is not None else None
        if values_match(ours[i:i + 1], expected[i:i + 1], ref) is not None:
            bad[i] = True
    return bad


def mismatches(case, ours, scalar, simd, a, b, reference=None):
    """Mask of the elements where `ours` fails against eager (scalar loop; SIMD loop too
    where listed), outside eager's traps and known defects."""
    bad = differs(ours, scalar, case, reference)
    if case.simd_too:
        bad &= differs(ours, simd, case, reference)
    if case.skip is not None:
        bad &= ~case.skip(a, b)
    if case.allow is not None:
        bad &= ~case.allow(a, b, ours)
    return bad


# --- one dtype, end to end ------------------------------------------------------------------------
#: math-calling cases per kernel: LLVM's time grows faster than linearly with the size of
#: the loop body (38 float64 math cases: ~10 s in one kernel, ~3 s in chunks of 8)
MATH_PER_KERNEL = 8


def groups(case_list) -> list[list[Case]]:
    """The kernels a dtype's cases are compiled in: every exact case in one, the cases
    calling math functions in chunks."""
    exact = [c for c in case_list if c.exact]
    math_cases = [c for c in case_list if not c.exact]
    chunks = [math_cases[i:i + MATH_PER_KERNEL] for i in range(0, len(math_cases), MATH_PER_KERNEL)]
    return [g for g in [exact, *chunks] if g]


def fused_sources(trace) -> tuple[list[str], list[str]]:
    """(sources of the fused kernels, names of the prims left to torch) of an execution trace."""
    from primtrace.ir.proxy import TensorProxy
    fused = [getattr(n.symbol.impl, "source", "") for n in trace.nodes if n.symbol.kind == "fused"]
    rest = [n.symbol.name for n in trace.nodes if n.symbol.kind != "fused"
            and any(isinstance(p, TensorProxy) for p in n.output_proxies)]
    return fused, rest


def check_dtype(backend, dtype, make_jit, case_filter=None) -> tuple[list[str], dict]:
    """Run every case of `dtype` fused (``make_jit(fn)`` jits with the executor under test)
    and against eager; returns (problems, stats)."""
    case_list = [c for c in cases(backend, dtype) if case_filter is None or case_filter(c)]
    problems, sources = [], []
    for group in groups(case_list):
        problems += _check_group(group, dtype, make_jit, sources)
    stats = {"cases": len(case_list), "elements": inputs(dtype)[0].numel(),
             "kernels": len(sources), "groups": len(groups(case_list)), "sources": sources}
    return problems, stats


def _check_group(case_list, dtype, make_jit, sources) -> list[str]:
    import primtrace
    a, b, c = inputs(dtype)
    fn, divided = batch_fn(case_list)
    safe = {p: no_zeros(b) for p in divided}
    jfn = make_jit(fn)
    problems = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = jfn(a, b, c, *safe.values())
    fused, left = fused_sources(primtrace.last_trace(jfn))
    sources += fused
    if len(fused) != 1 or left:
        problems.append(f"{name_of(dtype)}: {len(fused)} fused kernels, left to torch: {left}")
    scalar = eager(case_list, a, b, c, safe, scalar_loop=True)
    simd = eager(case_list, a, b, c, safe, scalar_loop=False)
    for case, ours, exp, exp_simd in zip(case_list, got, scalar, simd):
        if isinstance(exp, Exception):
            problems.append(f"{case.label}: eager raised {exp!r}")
            continue
        if ours.dtype != exp.dtype or ours.shape != exp.shape:
            problems.append(f"{case.label}: {ours.dtype}{list(ours.shape)}, eager {exp.dtype}{list(exp.shape)}")
            continue
        ref = case.ref(a, b, c, safe) if case.ref is not None and not case.exact else None
        bad = mismatches(case, ours, exp, exp_simd, a, b, ref).nonzero().flatten().tolist()
        if bad:
            def show(i):
                args = (a[i].item(),) if case.arity == 1 else (a[i].item(), b[i].item())
                return f"{args} -> {ours[i].item()!r} (eager {exp[i].item()!r})"
            problems.append(f"{case.label}: {len(bad)} of {a.numel()} differ: "
                            + ", ".join(show(i) for i in bad[:4]))
    for p in divided:   # zeros under one divisor at a time: raises as eager does
        divisors = {**safe, p: untrapped(a, b)}
        case = next(c for c in case_list if c.prim == p)
        try:
            case.call(a, b, c, divisors)
            problems.append(f"{case.label}: eager did not raise on a zero divisor")
        except RuntimeError:
            pass
        try:
            jfn(a, b, c, *divisors.values())
            problems.append(f"{case.label}: a zero divisor did not raise")
        except RuntimeError as e:
            if "ZeroDivisionError" not in str(e):
                problems.append(f"{case.label}: raised {e!r}, eager RuntimeError('ZeroDivisionError')")
    return problems
