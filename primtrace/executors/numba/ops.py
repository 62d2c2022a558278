"""The Numba executor's op table: one row per prim it compiles, for both backends.

A row (:class:`Op`) says everything the executor knows about one prim:

- ``f``, ``i``, ``b``: the prim as a scalar expression on float (half-like included:
  computed in float32, rounded by the caller), integer and bool registers, a function
  ``(em, dtype, *registers) -> expression`` (``em``: an ``registers.Emitter``); a category
  without one is not fusible. Semantics follow eager CPU PyTorch (C truncating division,
  x86 float -> int results, NaN-propagating maximum, ...).
- ``fn``: the math function the float lowering calls, where it is one (:class:`Fn`): on the
  CPU a vmath function, a libm call wrapped by ``backends/mathlib.py`` or a call written
  inline; on CUDA a libdevice function (or an expression of other functions).
- ``f16_range``: a cheaper function for operands holding float16 values (|x| <= 65504);
  ``near``: a cheaper float32 function exact for small arguments only (|x| <
  ``vmath.trig.NEAR_LIMIT``): called on float16 values, and elsewhere by CPU kernels per
  block of elements, behind a range check that redoes the block with ``fn`` (cpu.py);
  ``half_result``: one whose extra error the rounding of a half result hides; ``f16_half``:
  the same for float16 operands only (sin, cos: float32 arithmetic for |x| <= 65504);
  ``scalar_exponent``: the lowering where the second operand is a Python number.
- structural rows (``convert_element_type``, ``broadcast_in_dim``, ``where``, ``full``,
  ``full_strided``, ``copy_to``, ``slice``, ``cat``): the planner's method of the same name computes them;
  ``params`` orders their keyword arguments, ``fusible`` checks a node's arguments,
  ``work=False`` marks a view, fill or copy that alone is no reason for a kernel,
  ``cpu_only`` a row only CPU elementwise kernels plan (loads at offsets, split loops).

``can_fuse`` (executor.py), the planner (plan.py), ``backends/mathlib.py`` (the CPU
functions), ``backends/libdevice.py`` (the CUDA functions) and both backends' spellings
(:class:`Backend`) read only this table. :func:`check` runs at import and fails on a row
that names a function which does not exist (libdevice names: when ``libdevice`` is
imported, i.e. when CUDA is used). Anything without a row runs in the torch executor.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from primtrace.executors.numba.registers import (DTYPES, Emitter, cast, category, const, is_float,
                                                 supported)
from primtrace.ir.proxy import TensorProxy

Lowering = Callable[..., "str | None"]


class OpTableError(ImportError):
    """A row of the op table names something that does not exist."""


# --- what a row names ------------------------------------------------------------------------
@dataclass(frozen=True)
class Cpu:
    """Where a CPU kernel's function comes from. ``vmath``: ``vmath.VMATH[name, reg]``;
    ``f16range``: ``backends/f16range.py``; ``libm``: ``spelling`` (a call Numba supports)
    wrapped by mathlib; all three are called as ``m.<name>_<reg>``. ``inline``: ``spelling``
    is written into the kernel (``math.sqrt(x)``)."""
    kind: str
    spelling: str = ""


VMATH = Cpu("vmath")
F16RANGE = Cpu("f16range")


def libm(spelling: str) -> Cpu:
    return Cpu("libm", spelling)


def inline(spelling: str) -> Cpu:
    return Cpu("inline", spelling)


@dataclass(frozen=True)
class Libdevice:
    """A CUDA kernel's function, called as ``cl.<name>_<reg>``: libdevice's float32 and
    float64 names on a GPU; under the simulator ``py`` on float64 Python numbers, or ``np``
    where ``py`` raises (math's domain errors: NumPy returns nan or inf as C does)."""
    f32: str
    f64: str
    py: Callable
    np: Callable | None = None


@dataclass(frozen=True)
class Fn:
    """A scalar math function kernels call by name, and how each backend provides it.
    ``cuda`` may also be a function ``(backend, dtype, args) -> expression``."""
    name: str
    arity: int = 1
    cpu: Cpu | None = None
    cuda: Libdevice | Callable | None = None
    regs: tuple = ("float32", "float64")    # register types it exists for


@dataclass(frozen=True)
class Op:
    """One prim's row: see the module docstring."""
    prim: str
    arity: int = 0
    f: Lowering | None = None
    i: Lowering | None = None
    b: Lowering | None = None
    fn: Fn | None = None
    f16_range: Fn | None = None
    near: Fn | None = None
    half_result: Fn | None = None
    f16_half: Fn | None = None
    scalar_exponent: Lowering | None = None
    structural: bool = False
    params: tuple | None = None
    fusible: Callable | None = None
    work: bool = True
    cpu_only: bool = False
    functions: tuple = field(init=False, default=())

    def __post_init__(self):
        if self.fn is not None and self.f is None:
            object.__setattr__(self, "f", call(self.fn.name))
        object.__setattr__(self, "functions", tuple(
            f for f in (self.fn, self.f16_range, self.near, self.half_result, self.f16_half)
            if f is not None))


def call(fn: str) -> Lowering:
    """The lowering calling math function `fn` on its operands."""
    return lambda em, d, *args: em.backend.lib(fn, d, list(args))


def math_op(prim: str, cpu: Cpu, cuda, arity: int = 1, name: str | None = None, **row) -> Op:
    """A row whose float lowering is one call of a math function (named `name`, else the
    prim's name)."""
    return Op(prim, arity, fn=Fn(name or prim, arity, cpu, cuda), **row)


#: CPU runtime loops rows call (``rt.<name>``); CUDA has none: integer pow, gcd, lcm stay in torch
RUNTIME_HELPERS: set = set()


def _runtime(name: str) -> str:
    RUNTIME_HELPERS.add(name)
    return name


# --- expressions ------------------------------------------------------------------------------
def infix(op):
    return lambda em, d, a, b: f"{a} {op} {b}"


def int_infix(op):
    return lambda em, d, a, b: cast(d, f"{a} {op} {b}")


def _same(x) -> dict:
    return dict(f=x, i=x, b=x)


def _identity(em, d, a):
    return a


def _nonzero_divisor(em, d, b) -> str:
    """A temporary holding `b`, or 1 where `b` is 0, which the kernel counts (eager raises)."""
    divisor = em.temp(f"{b} if {b} != 0 else {const(d, 1)}")
    em.flag_zero_division(b)
    return divisor


def _int_div(em, d, a, b):
    divisor = _nonzero_divisor(em, d, b)
    # C truncation from Python's floor division; x // -1 is negation, wrapping (INT_MIN
    # stays INT_MIN, as eager gives) instead of trapping
    q = em.temp(f"-{a} if {divisor} == -1 else {a} // {divisor}")
    return cast(d, f"{q} if {divisor} == -1 else ({q} + 1 if ({q} < 0 and {q} * {divisor} != {a}) else {q})")


def _int_remainder(em, d, a, b):
    divisor = _nonzero_divisor(em, d, b)
    return cast(d, f"0 if {divisor} == -1 else {a} % {divisor}")


def _int_fmod(em, d, a, b):
    divisor = _nonzero_divisor(em, d, b)
    r = em.temp(f"0 if {divisor} == -1 else {a} % {divisor}")
    return cast(d, f"{r} - {divisor} if ({r} != 0 and ({r} < 0) != ({a} < 0)) else {r}")


def _float_remainder(em, d, a, b):
    r = em.temp(em.backend.lib("fmod", d, [a, b]))
    return f"{r} + {b} if ({r} != 0 and ({b} < 0) != ({r} < 0)) else {r}"


def _shift_left(em, d, a, b):
    bits = DTYPES[d].bits
    return cast(d, f"0 if ({b} < 0 or {b} >= {bits}) else int64({a}) << int64({b})")


def _shift_right(em, d, a, b):
    bits = DTYPES[d].bits
    return cast(d, f"(-1 if {a} < 0 else 0) if ({b} < 0 or {b} >= {bits}) else int64({a}) >> int64({b})")


def _c_int(d) -> str:
    """The type C computes `d` arithmetic in (integer promotion): where eager's products wrap."""
    return "int64" if DTYPES[d].bits > 32 else "int32"


_GCD = _runtime("gcd_int")


def _gcd(em, d, a, b):
    """eager's calc_gcd: Euclid on abs() taken in the dtype's own width, so abs(INT_MIN)
    stays negative and a gcd with INT_MIN can be negative, as eager's is."""
    fn = em.backend.int_helper(_GCD)
    if fn is None:
        return None
    return cast(d, f"{fn}({cast(d, f'abs({a})')}, {cast(d, f'abs({b})')})")


def _lcm(em, d, a, b):
    """eager's abs(a / gcd * b), the product wrapping in C's promoted type before abs
    (a / gcd is exact; a gcd of -1 negates without trapping on INT_MIN)."""
    g = _gcd(em, d, a, b)
    if g is None:
        return None
    g = em.temp(g)
    q = em.temp(f"int64(0) - int64({a}) if {g} == -1 else int64({a}) // int64({g} if {g} != 0 else 1)")
    c = _c_int(d)
    return cast(d, f"0 if {g} == 0 else abs({c}({q} * int64({b})))")


def _int_helper(name):
    name = _runtime(name)

    def lower(em, d, a, b):
        fn = em.backend.int_helper(name)
        return None if fn is None else cast(d, f"{fn}({a}, {b})")
    return lower


#: exponents torch.pow(tensor, number) special-cases, per dtype (pow_tensor_scalar_kernel:
#: sqrt, rsqrt and reciprocal kernels, then x*x, x*x*x, 1/(x*x) for float32/64); float16
#: always calls std::pow (so pow(-0.0, 0.5) is +0.0 there, -0.0 through sqrt)
POW_SPECIAL = {torch.float32: (0.5, -0.5, -1.0, 2.0, 3.0, -2.0),
               torch.float64: (0.5, -0.5, -1.0, 2.0, 3.0, -2.0),
               torch.bfloat16: (0.5, -0.5, -1.0)}


def _rsqrt(em, d, a):
    return f"{const(d, 1)} / {em.backend.lib('sqrt', d, [a])}"


def _pow_scalar(em, d, a, b):
    """pow with a loop-invariant exponent, as torch.pow(tensor, scalar): the exponents of
    POW_SPECIAL take their special kernels (whose NaN/inf/-0.0 results and roundings
    differ from pow's)."""
    pow_ = em.backend.lib("pow", d, [a, b])
    sqrt = em.backend.lib("sqrt", d, [a])
    if pow_ is None or sqrt is None:
        return None
    one = const(d, 1)
    special = {0.5: sqrt, -0.5: _rsqrt(em, d, a), -1.0: f"{one} / {a}",
               2.0: f"{a} * {a}", 3.0: f"{a} * {a} * {a}", -2.0: f"{one} / ({a} * {a})"}
    expr = pow_
    for value in reversed(POW_SPECIAL.get(d, ())):
        expr = f"({special[value]} if {b} == {const(d, value)} else {expr})"
    return expr


# Float min/max: NaN-propagating (maximum, minimum) or NaN-ignoring (fmax, fmin); a tie
# (+0 vs -0) gives the first operand, as eager's std::max/std::min and glibc's fmax do, so
# that clamp(x, min, max) = minimum(maximum(x, min), max) keeps x's zero as eager's clamp does.
# Only the first operand is tested for NaN: the bound of a clamp is loop-invariant, and a
# NaN test of it lets NVVM unswitch the loop into a copy that skips the loads feeding x.
def _maximum(em, d, a, b):
    if is_float(d):
        return f"{a} if ({a} >= {b} or {a} != {a}) else {b}"
    return f"{a} | {b}" if d is torch.bool else f"max({a}, {b})"


def _minimum(em, d, a, b):
    if is_float(d):
        return f"{a} if ({a} <= {b} or {a} != {a}) else {b}"
    return f"{a} & {b}" if d is torch.bool else f"min({a}, {b})"


def _fmax(em, d, a, b):
    if is_float(d):
        return f"{b} if ({a} < {b} or {a} != {a}) else {a}"
    return _maximum(em, d, a, b)


def _fmin(em, d, a, b):
    if is_float(d):
        return f"{b} if ({b} < {a} or {a} != {a}) else {a}"
    return _minimum(em, d, a, b)


def _xlog1py(em, d, x, y):
    log1p = em.backend.lib("log1p", d, [y])
    if log1p is None:
        return None
    return f"{y} if {y} != {y} else ({const(d, 0)} if {x} == 0 else {x} * {log1p})"


def _heaviside(em, d, x, v):
    """eager's `x == 0 ? v : (x > 0)`: 0 for x < 0 and nan, `v` for +-0, 1 for x > 0."""
    zero = const(d, 0)
    return f"{v} if {x} == {zero} else ({const(d, 1)} if {x} > {zero} else {zero})"


def _sign(em, d, a):
    return cast(d, f"int64({a} > 0) - int64({a} < 0)")


def _sigmoid_cuda(backend, d, args):
    one = const(d, 1)
    return f"{one} / ({one} + {backend.lib('exp', d, [f'-{args[0]}'])})"


def _convert_fusible(args) -> bool:
    return isinstance(args[0], TensorProxy) and supported(args[1])


def _copy_fusible(args) -> bool:
    return all(isinstance(a, TensorProxy) for a in args)


def _static_ints(values) -> bool:
    return isinstance(values, (tuple, list)) and all(type(v) is int for v in values)


def _slice_fusible(args) -> bool:
    """A slice with sizes known now: a load at an offset, with its steps in the strides."""
    a, starts, stops, steps = args
    return isinstance(a, TensorProxy) and all(map(_static_ints, (starts, stops, steps)))


def _cat_fusible(args) -> bool:
    """A cat whose operands' sizes along `dim` are known now: the kernel's iteration space
    splits where one operand ends and the next begins (plan.py's parts)."""
    tensors, dim = args
    return (isinstance(tensors, (tuple, list)) and len(tensors) > 0 and type(dim) is int
            and all(isinstance(t, TensorProxy) and type(t.shape[dim]) is int for t in tensors))


def _f16(name: str) -> Fn:
    """The f16-range variant `name` (backends/f16range.py, float32 registers only)."""
    return Fn(name, 1, F16RANGE, None, ("float32",))


def _near(name: str) -> Fn:
    """A float32-only vmath variant `name` (CPU only): small-argument or float16-operand."""
    return Fn(name, 1, VMATH, None, ("float32",))


def _ld(f32, f64, py, np_=None) -> Libdevice:
    return Libdevice(f32, f64, py, np_)


# --- the table --------------------------------------------------------------------------------
ROWS = (
    # structural: the planner's methods of the same name (plan.py)
    Op("convert_element_type", structural=True, params=("a", "dtype"), fusible=_convert_fusible),
    Op("broadcast_in_dim", structural=True, params=("a", "shape", "broadcast_dimensions"), work=False),
    Op("full", structural=True, params=("shape", "fill_value", "dtype", "device"), work=False),
    Op("full_strided", structural=True, params=("shape", "strides", "fill_value", "dtype", "device"),
       work=False),
    Op("where", structural=True, params=("pred", "a", "b")),
    Op("copy_to", structural=True, params=("dst", "src"), fusible=_copy_fusible),
    Op("slice", structural=True, params=("a", "starts", "stops", "steps"), fusible=_slice_fusible,
       work=False, cpu_only=True),
    Op("cat", structural=True, params=("tensors", "dim"), fusible=_cat_fusible, work=False,
       cpu_only=True),
    # arithmetic
    Op("add", 2, f=infix("+"), i=int_infix("+"), b=infix("|")),
    Op("sub", 2, f=infix("-"), i=int_infix("-")),
    Op("mul", 2, f=infix("*"), i=int_infix("*"), b=infix("&")),
    Op("div", 2, f=infix("/"), i=_int_div),
    Op("remainder", 2, f=_float_remainder, i=_int_remainder),
    math_op("fmod", inline("np.fmod"), _ld("fmodf", "fmod", math.fmod, np.fmod), 2, i=_int_fmod),
    math_op("pow", VMATH, _ld("powf", "pow", math.pow, np.power), 2, i=_int_helper("pow_int"),
            scalar_exponent=_pow_scalar),
    Op("abs", 1, f=lambda em, d, a: f"abs({a})", i=lambda em, d, a: cast(d, f"abs({a})")),
    Op("neg", 1, f=lambda em, d, a: f"-{a}", i=lambda em, d, a: cast(d, f"-{a}")),
    Op("sign", 1, f=_sign, i=_sign, b=_identity),
    Op("signbit", 1, f=lambda em, d, a: f"math.copysign({const(d, 1)}, {a}) < 0",
       i=lambda em, d, a: f"{a} < 0", b=lambda em, d, a: "False"),
    Op("reciprocal", 1, f=lambda em, d, a: f"{const(d, 1)} / {a}"),
    math_op("sqrt", inline("math.sqrt"), _ld("sqrtf", "sqrt", math.sqrt, np.sqrt)),
    Op("rsqrt", 1, f=_rsqrt),
    Op("clone", 1, **_same(_identity)),
    # the value; the carrier is read by the backward only (optimize() drops the prim)
    Op("differentiate_as", 2, **_same(lambda em, d, value, carrier: value)),
    # min/max
    Op("maximum", 2, **_same(_maximum)),
    Op("minimum", 2, **_same(_minimum)),
    Op("fmax", 2, **_same(_fmax)),
    Op("fmin", 2, **_same(_fmin)),
    # comparisons and float classes
    Op("eq", 2, **_same(infix("=="))),
    Op("ne", 2, **_same(infix("!="))),
    Op("lt", 2, **_same(infix("<"))),
    Op("le", 2, **_same(infix("<="))),
    Op("gt", 2, **_same(infix(">"))),
    Op("ge", 2, **_same(infix(">="))),
    Op("isfinite", 1, f=lambda em, d, a: f"math.isfinite({a})"),
    Op("isnan", 1, f=lambda em, d, a: f"{a} != {a}"),
    Op("isinf", 1, f=lambda em, d, a: f"math.isinf({a})"),
    Op("heaviside", 2, **_same(_heaviside)),
    # bits and integers
    Op("bitwise_not", 1, i=lambda em, d, a: cast(d, f"~{a}"), b=lambda em, d, a: f"not {a}"),
    Op("bitwise_and", 2, i=int_infix("&"), b=infix("&")),
    Op("bitwise_or", 2, i=int_infix("|"), b=infix("|")),
    Op("bitwise_xor", 2, i=int_infix("^"), b=infix("!=")),
    Op("shift_left", 2, i=_shift_left),
    Op("shift_right", 2, i=_shift_right),
    Op("gcd", 2, i=_gcd),
    Op("lcm", 2, i=_lcm),
    # rounding: f16-range variants round float16 values without a libcall per element
    math_op("ceil", inline("np.ceil"), _ld("ceilf", "ceil", np.ceil), f16_range=_f16("ceil_f16range")),
    math_op("floor", inline("np.floor"), _ld("floorf", "floor", np.floor), f16_range=_f16("floor_f16range")),
    math_op("trunc", inline("np.trunc"), _ld("truncf", "trunc", np.trunc), f16_range=_f16("trunc_f16range")),
    math_op("round", inline("np.rint"), _ld("rintf", "rint", np.rint), name="rint",
            f16_range=_f16("rint_f16range")),
    math_op("copysign", inline("math.copysign"), _ld("copysignf", "copysign", math.copysign), 2),
    # exponentials and logarithms
    math_op("exp", VMATH, _ld("expf", "exp", math.exp, np.exp),
            # 1 ULP in float32 at 60% of exp's cost: rounded to either half dtype it equals
            # exp and eager on all 65,536 inputs (tests/numba/test_half_vectorized.py)
            half_result=Fn("exp_fast", 1, VMATH)),
    math_op("exp2", VMATH, _ld("exp2f", "exp2", lambda x: 2.0 ** x)),
    math_op("expm1", VMATH, _ld("expm1f", "expm1", math.expm1, np.expm1)),
    math_op("log", VMATH, _ld("logf", "log", math.log, np.log)),
    math_op("log1p", VMATH, _ld("log1pf", "log1p", math.log1p, np.log1p)),
    math_op("log2", VMATH, _ld("log2f", "log2", math.log2, np.log2)),
    math_op("log10", VMATH, _ld("log10f", "log10", math.log10, np.log10)),
    math_op("sigmoid", VMATH, _sigmoid_cuda),
    Op("xlog1py", 2, f=_xlog1py),
    # trigonometric and hyperbolic
    math_op("sin", VMATH, _ld("sinf", "sin", math.sin, np.sin), near=_near("sin_near"),
            f16_half=_near("sin_half")),
    math_op("cos", VMATH, _ld("cosf", "cos", math.cos, np.cos), near=_near("cos_near"),
            f16_half=_near("cos_half")),
    math_op("tan", VMATH, _ld("tanf", "tan", math.tan, np.tan)),
    math_op("asin", VMATH, _ld("asinf", "asin", math.asin, np.arcsin)),
    math_op("acos", VMATH, _ld("acosf", "acos", math.acos, np.arccos)),
    math_op("atan", VMATH, _ld("atanf", "atan", math.atan, np.arctan)),
    math_op("atan2", VMATH, _ld("atan2f", "atan2", math.atan2, np.arctan2), 2),
    math_op("hypot", libm("math.hypot"), _ld("hypotf", "hypot", math.hypot, np.hypot), 2),
    math_op("sinh", VMATH, _ld("sinhf", "sinh", math.sinh, np.sinh)),
    math_op("cosh", VMATH, _ld("coshf", "cosh", math.cosh, np.cosh)),
    math_op("tanh", VMATH, _ld("tanhf", "tanh", math.tanh, np.tanh)),
    math_op("asinh", VMATH, _ld("asinhf", "asinh", math.asinh, np.arcsinh)),
    math_op("acosh", VMATH, _ld("acoshf", "acosh", math.acosh, np.arccosh)),
    math_op("atanh", VMATH, _ld("atanhf", "atanh", math.atanh, np.arctanh)),
    # special functions
    math_op("erf", VMATH, _ld("erff", "erf", math.erf)),
    math_op("erfc", VMATH, _ld("erfcf", "erfc", math.erfc)),
    math_op("lgamma", libm("math.lgamma"), _ld("lgammaf", "lgamma", math.lgamma, lambda x: np.float64(np.inf))),
)

# --- views of the table -----------------------------------------------------------------------
#: prim name -> row
OPS = {row.prim: row for row in ROWS}
#: math function name -> Fn (the rows' functions and their variants)
FUNCTIONS = {fn.name: fn for row in ROWS for fn in row.functions}
#: (prim or variant name, category) -> lowering, by arity
UNARY: dict = {}
BINARY: dict = {}
for _row in ROWS:
    if _row.structural:
        continue
    _table = UNARY if _row.arity == 1 else BINARY
    for _cat in "fib":
        if getattr(_row, _cat) is not None:
            _table[(_row.prim, _cat)] = getattr(_row, _cat)
    if _row.scalar_exponent is not None:
        _table[(f"{_row.prim}_scalar", "f")] = _row.scalar_exponent
    for _fn in (_row.f16_range, _row.near, _row.half_result, _row.f16_half):
        if _fn is not None:
            _table[(_fn.name, "f")] = call(_fn.name)
del _row, _table, _cat, _fn
#: prim -> variant for operands known to hold float16 values (the planner tracks them)
F16_RANGE = {row.prim: row.f16_range.name for row in ROWS if row.f16_range is not None}
#: prim -> small-argument variant (float16 values, or CPU blocks behind a range check)
NEAR = {row.prim: row.near.name for row in ROWS if row.near is not None}
#: prim -> variant for half values whose result is rounded to float16/bfloat16 next
HALF_RESULT = {row.prim: row.half_result.name for row in ROWS if row.half_result is not None}
#: prim -> variant for float16 values whose result is rounded to a half dtype next
F16_HALF = {row.prim: row.f16_half.name for row in ROWS if row.f16_half is not None}


def find(prim: str, dtype, arity: int):
    """The lowering of `prim` (or of a variant's name) on operands of `dtype`, or None."""
    if dtype not in DTYPES:
        return None
    table = UNARY if arity == 1 else BINARY if arity == 2 else {}
    return table.get((prim, category(dtype)))


def lower(em: Emitter, prim: str, dtype, out_dtype, args: list[str],
          round_half: bool = True) -> str | None:
    """The expression of `prim` on registers `args` of `dtype`; None when not lowerable.

    Half-like dtypes compute in float32 and round the result to their dtype (exact for
    + - * / sqrt, which are correctly rounded in f32 first: 24 >= 2 * 11 + 2 bits);
    ``round_half=False`` leaves the rounding to the caller (the planner, which may fold it
    into a store's conversion)."""
    fn = find(prim, dtype, len(args))
    if fn is None:
        return None
    expr = fn(em, dtype, *args)
    if expr is None:
        return None
    if round_half and DTYPES[out_dtype].kind == "h":
        return em.backend.round_half(out_dtype, expr)
    return expr


def lowerable(backend: "Backend", prim: str, dtype, arity: int) -> bool:
    """Whether `backend` lowers `prim` on `dtype` (tried on placeholder registers)."""
    if find(prim, dtype, arity) is None:
        return False
    em = Emitter(backend, lambda expr: "tmp", lambda divisor: None)
    try:
        return lower(em, prim, dtype, dtype, ["a", "b"][:arity]) is not None
    except Exception:
        return False


# --- spellings ----------------------------------------------------------------------------------
class Backend:
    """How a target spells what the lowerings ask for: calls of the table's math functions,
    loads, stores, half roundings, float -> int, runtime loops. These are the CPU's
    (``m.`` is backends/mathlib.py, ``rt.`` backends/runtime.py); backends/cuda.py
    overrides them."""
    name = "cpu"

    def lib(self, fn: str, dtype, args: list[str]) -> str | None:
        """A call of the table's math function `fn` on float registers of `dtype`; None
        where this backend has none."""
        f = FUNCTIONS.get(fn)
        return None if f is None else self.call(f, DTYPES[dtype].reg, dtype, list(args))

    def call(self, fn: Fn, reg: str, dtype, args: list[str]) -> str | None:
        cpu = fn.cpu
        if cpu is None:
            return None
        if cpu.kind == "inline":
            return f"{cpu.spelling}({', '.join(args)})"
        return f"m.{fn.name}_{reg}({', '.join(args)})" if reg in fn.regs else None

    #: per dtype (others: the value itself), a load of element ``{}`` into its register, the
    #: load of a tensor strided along the inner loop (a scalar load, see
    #: mathlib.f16_to_f32_strided), the element stored for register ``{}``, and a float32
    #: register rounded to the half dtype (kept in float32)
    LOAD = {torch.bool: "{} != 0", torch.float16: "m.f16_to_f32({})", torch.bfloat16: "m.bf16_to_f32({})"}
    STRIDED_LOAD = {torch.float16: "m.f16_to_f32_strided({})"}
    STORE = {torch.bool: "uint8({})", torch.float16: "m.f32_to_f16({})", torch.bfloat16: "m.f32_to_bf16({})"}
    ROUND = {torch.float16: "m.round_f16({})", torch.bfloat16: "m.round_bf16({})"}

    def load(self, dtype, ref: str, strided: bool = False) -> str:
        """Register value of the element `ref` (e.g. ``in0[i]``) of a `dtype` tensor;
        `strided`: the tensor is not contiguous along the inner loop."""
        spelling = self.STRIDED_LOAD.get(dtype) if strided else None
        return (spelling or self.LOAD.get(dtype, "{}")).format(ref)

    def store(self, dtype, value: str) -> str:
        """The element to store for a register value."""
        return self.STORE.get(dtype, "{}").format(value)

    def round_half(self, dtype, value: str) -> str:
        """A float32 value rounded to the half dtype, kept in float32."""
        return self.ROUND[dtype].format(value)

    def float_to_int(self, dst, value: str) -> str:
        """float -> integer as eager on x86: out-of-range and NaN give INT_MIN of int32/int64
        (narrower types wrap from the int32 result)."""
        if dst is torch.int64:
            return f"rt.f2i64({value})"
        if dst is torch.int32:
            return f"rt.f2i32({value})"
        return f"{DTYPES[dst].reg}(rt.f2i32({value}))"

    def int_helper(self, name: str) -> str | None:
        """A runtime loop (RUNTIME_HELPERS: integer pow, gcd) as ``rt.<name>``."""
        return f"rt.{name}"


CPU = Backend()


# --- the check at import ------------------------------------------------------------------------
def _spelled(spelling: str) -> bool:
    module, _, attr = spelling.partition(".")
    return callable(getattr({"math": math, "np": np}.get(module), attr, None))


def check(rows=ROWS, helpers=None) -> None:
    """Raise OpTableError naming every row that names something missing: a prim that does
    not exist, a vmath, f16-range or runtime function that is not there, a libm or inline
    spelling Numba cannot call, a structural row without its planner method (checked in
    plan.py), two functions of one name."""
    from primtrace import prims
    from primtrace.executors.numba.backends import f16range, runtime
    from primtrace.executors.numba.vmath import VMATH as vmath
    from primtrace.ir.symbol import Symbol
    problems, seen = [], {}
    for row in rows:
        if not isinstance(getattr(prims, row.prim, None), Symbol):
            problems.append(f"{row.prim}: no such prim")
        if not row.structural and row.arity not in (1, 2):
            problems.append(f"{row.prim}: elementwise rows take 1 or 2 operands")
        for fn in row.functions:
            if seen.setdefault(fn.name, fn) is not fn:
                problems.append(f"{row.prim}: a second function named {fn.name}")
            cpu = fn.cpu
            if cpu is None:
                pass
            elif cpu.kind == "vmath":
                problems += [f"{row.prim}: vmath has no {fn.name} for {reg}" for reg in fn.regs
                             if (fn.name, reg) not in vmath]
            elif cpu.kind == "f16range":
                problems += [f"{row.prim}: backends/f16range.py has no {fn.name}_{reg}"
                             for reg in fn.regs if not hasattr(f16range, f"{fn.name}_{reg}")]
            elif cpu.kind not in ("libm", "inline") or not _spelled(cpu.spelling):
                problems.append(f"{row.prim}: {fn.name} on the CPU is {cpu}, which Numba cannot call")
            if isinstance(fn.cuda, Libdevice) and not callable(fn.cuda.py):
                problems.append(f"{row.prim}: {fn.name} has no Python stand-in for the simulator")
    for name in sorted(RUNTIME_HELPERS if helpers is None else helpers):
        if not hasattr(runtime, name):
            problems.append(f"backends/runtime.py has no {name}")
    if problems:
        raise OpTableError("op table: " + "; ".join(problems))


def check_libdevice(libdevice, rows=ROWS) -> None:
    """Raise OpTableError for a libdevice name the rows give that `libdevice` (numba.cuda's
    module) does not have; called when backends/libdevice.py is imported on a GPU path."""
    missing = [f"{row.prim}: libdevice has no {name}" for row in rows for fn in row.functions
               if isinstance(fn.cuda, Libdevice) for name in (fn.cuda.f32, fn.cuda.f64)
               if not hasattr(libdevice, name)]
    if missing:
        raise OpTableError("op table: " + "; ".join(missing))


check()
