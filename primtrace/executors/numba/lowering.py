"""Prims as scalar Python expressions in generated kernel source, per dtype and backend.

A value in a kernel lives in a *register type*: its own dtype, except float16/bfloat16,
which live in float32 holding a value exactly representable in the half type (so a
conversion f16 -> f32 costs nothing and f32 -> f16 is one rounding, done in registers).
Every lowering returns an expression of the output's register type; integer results are
cast back to their dtype because Numba computes small integers in 64 bits (the cast wraps,
as C does). Semantics follow eager CPU PyTorch (C truncating division, x86 float -> int
results, NaN-propagating maximum, ...). Anything not in these tables is not fusible and runs
in the torch executor.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from primtrace.executors.numba.backends import mathlib


@dataclass(frozen=True)
class DType:
    """How a torch dtype is stored and held in registers by a kernel."""
    torch: torch.dtype
    reg: str          # register type (numpy scalar type name)
    storage: str      # element type in memory (CPU pointer type)
    kind: str         # "b" bool, "i" signed, "u" unsigned, "f" float, "h" half-like float
    bits: int


DTYPES = {d.torch: d for d in (
    DType(torch.bool, "bool_", "uint8", "b", 8),
    DType(torch.uint8, "uint8", "uint8", "u", 8),
    DType(torch.int8, "int8", "int8", "i", 8),
    DType(torch.int16, "int16", "int16", "i", 16),
    DType(torch.int32, "int32", "int32", "i", 32),
    DType(torch.int64, "int64", "int64", "i", 64),
    DType(torch.float16, "float32", "uint16", "h", 16),
    DType(torch.bfloat16, "float32", "uint16", "h", 16),
    DType(torch.float32, "float32", "float32", "f", 32),
    DType(torch.float64, "float64", "float64", "f", 64),
)}

#: the dtype a Python number stands for before conversion to an operand dtype
NUMBER_DTYPE = {bool: torch.bool, int: torch.int64, float: torch.float64}


def supported(dtype) -> bool:
    return dtype in DTYPES


def is_float(dtype) -> bool:
    return DTYPES[dtype].kind in "fh"


class Backend:
    """Spellings that differ between targets; the CPU backend is the default."""
    name = "cpu"
    _LIB = {"sqrt": "math.sqrt", "ceil": "np.ceil", "floor": "np.floor", "trunc": "np.trunc",
            "rint": "np.rint", "fmod": "np.fmod", "copysign": "math.copysign"}

    def lib(self, fn: str, dtype, args: list[str]) -> str | None:
        """A call of library function `fn` (a transcendental prim's name, or sqrt, ceil,
        floor, trunc, rint, fmod, copysign) on float registers of `dtype`; None if absent."""
        reg = DTYPES[dtype].reg
        if fn in self._LIB:
            return f"{self._LIB[fn]}({', '.join(args)})"
        name = mathlib.math_name(fn, reg)
        return f"m.{name}({', '.join(args)})" if name else None

    def load(self, dtype, ref: str, strided: bool = False) -> str:
        """Register value of the element `ref` (e.g. ``in0[i]``) of a `dtype` tensor;
        `strided`: the tensor is not contiguous along the inner loop (a scalar load, see
        mathlib.f16_to_f32_strided)."""
        if dtype is torch.bool:
            return f"{ref} != 0"
        if dtype is torch.float16:
            return f"m.f16_to_f32_strided({ref})" if strided else f"m.f16_to_f32({ref})"
        if dtype is torch.bfloat16:
            return f"m.bf16_to_f32({ref})"
        return ref

    def store(self, dtype, value: str) -> str:
        """The element to store for a register value."""
        if dtype is torch.bool:
            return f"uint8({value})"
        if dtype is torch.float16:
            return f"m.f32_to_f16({value})"
        if dtype is torch.bfloat16:
            return f"m.f32_to_bf16({value})"
        return value

    def round_half(self, dtype, value: str) -> str:
        """A float32 value rounded to the half dtype, kept in float32."""
        return f"m.round_f16({value})" if dtype is torch.float16 else f"m.round_bf16({value})"

    def float_to_int(self, dst, value: str) -> str:
        """float -> integer as eager on x86: out-of-range and NaN give INT_MIN of int32/int64
        (narrower types wrap from the int32 result)."""
        if dst is torch.int64:
            return f"rt.f2i64({value})"
        if dst is torch.int32:
            return f"rt.f2i32({value})"
        return f"{DTYPES[dst].reg}(rt.f2i32({value}))"

    def int_helper(self, name: str) -> str | None:
        """Loops (pow, gcd, lcm) live in runtime helpers on the CPU."""
        return f"rt.{name}"


CPU = Backend()


class Emitter:
    """What a lowering may use: typed temporaries and an error counter."""

    def __init__(self, backend: Backend, new_temp: Callable[[str], str],
                 flag_zero_division: Callable[[str], None]):
        self.backend = backend
        self.temp = new_temp                      # expr -> name of a new variable
        self.flag_zero_division = flag_zero_division  # divisor expr


def const(dtype, value) -> str:
    """A typed constant: ``float32(1.0)``."""
    d = DTYPES[dtype]
    if d.kind == "b":
        return "True" if value else "False"
    if d.kind in "fh":
        return f"{d.reg}({float(value)!r})"
    return f"{d.reg}({int(value)})"


def cast(dtype, expr: str) -> str:
    return f"{DTYPES[dtype].reg}({expr})"


# --- convert_element_type -----------------------------------------------------------------------
def convert(em: Emitter, value: str, src, dst) -> str:
    """A register of `src` converted to `dst` as torch does (f64/int -> f16 via f32)."""
    if src is dst:
        return value
    s, d = DTYPES[src], DTYPES[dst]
    if s.kind == "h" and dst is torch.float32:
        return value                      # the register already is float32
    if d.kind == "b":
        return f"{value} != {const(src, 0)}"
    if s.kind == "b":
        return f"{const(dst, 1)} if {value} else {const(dst, 0)}"
    if d.kind in "iu":
        if s.kind in "iu":
            return cast(dst, value)
        return em.backend.float_to_int(dst, value)
    if d.kind == "f":
        return cast(dst, value)
    return em.backend.round_half(dst, half_source(value, src, dst))


def half_source(value: str, src, dst) -> str | None:
    """The float32 register a conversion from `src` to half dtype `dst` rounds, or None
    when the conversion does not round (same dtype, bool, not to a half dtype). Through
    float32: torch converts float64 and int64 to float16/bfloat16 rounding twice too."""
    if DTYPES[dst].kind != "h" or src is dst or DTYPES[src].kind == "b":
        return None
    return value if DTYPES[src].reg == "float32" else f"float32({value})"


# --- elementwise prims ---------------------------------------------------------------------------
def _float_binary(op):
    return lambda em, d, a, b: f"{a} {op} {b}"


def _int_binary(op):
    return lambda em, d, a, b: cast(d, f"{a} {op} {b}")


def _compare(op):
    return lambda em, d, a, b: f"{a} {op} {b}"


def _int_div(em, d, a, b):
    divisor = em.temp(f"{b} if {b} != 0 else {const(d, 1)}")
    em.flag_zero_division(b)
    # C truncation from Python's floor division; x // -1 is negation, wrapping (INT_MIN
    # stays INT_MIN, as eager gives) instead of trapping
    q = em.temp(f"-{a} if {divisor} == -1 else {a} // {divisor}")
    return cast(d, f"{q} if {divisor} == -1 else ({q} + 1 if ({q} < 0 and {q} * {divisor} != {a}) else {q})")


def _int_remainder(em, d, a, b):
    divisor = em.temp(f"{b} if {b} != 0 else {const(d, 1)}")
    em.flag_zero_division(b)
    return cast(d, f"0 if {divisor} == -1 else {a} % {divisor}")


def _int_fmod(em, d, a, b):
    divisor = em.temp(f"{b} if {b} != 0 else {const(d, 1)}")
    em.flag_zero_division(b)
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


def _gcd(em, d, a, b):
    """eager's calc_gcd: Euclid on abs() taken in the dtype's own width, so abs(INT_MIN)
    stays negative and a gcd with INT_MIN can be negative, as eager's is."""
    fn = em.backend.int_helper("gcd_int")
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
    def lower(em, d, a, b):
        fn = em.backend.int_helper(name)
        return None if fn is None else cast(d, f"{fn}({a}, {b})")
    return lower


def _lib(fn):
    return lambda em, d, *args: em.backend.lib(fn, d, list(args))


#: exponents torch.pow(tensor, number) special-cases, per dtype (pow_tensor_scalar_kernel:
#: sqrt, rsqrt and reciprocal kernels, then x*x, x*x*x, 1/(x*x) for float32/64); float16
#: always calls std::pow (so pow(-0.0, 0.5) is +0.0 there, -0.0 through sqrt)
POW_SPECIAL = {torch.float32: (0.5, -0.5, -1.0, 2.0, 3.0, -2.0),
               torch.float64: (0.5, -0.5, -1.0, 2.0, 3.0, -2.0),
               torch.bfloat16: (0.5, -0.5, -1.0)}


def _pow_scalar(em, d, a, b):
    """pow with a loop-invariant exponent, as torch.pow(tensor, scalar): the exponents of
    POW_SPECIAL take their special kernels (whose NaN/inf/-0.0 results and roundings
    differ from pow's)."""
    pow_ = em.backend.lib("pow", d, [a, b])
    sqrt = em.backend.lib("sqrt", d, [a])
    if pow_ is None or sqrt is None:
        return None
    one = const(d, 1)
    special = {0.5: sqrt, -0.5: UNARY[("rsqrt", "f")](em, d, a), -1.0: f"{one} / {a}",
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


# (prim, category) -> lowering(em, operand dtype, *operand registers) -> expression | None.
# Categories: "f" float (incl. half-like: computed in float32, rounded by the caller),
# "i" integer (signed and unsigned), "b" bool.
BINARY = {
    ("add", "f"): _float_binary("+"), ("add", "i"): _int_binary("+"),
    ("add", "b"): lambda em, d, a, b: f"{a} | {b}",
    ("sub", "f"): _float_binary("-"), ("sub", "i"): _int_binary("-"),
    ("mul", "f"): _float_binary("*"), ("mul", "i"): _int_binary("*"),
    ("mul", "b"): lambda em, d, a, b: f"{a} & {b}",
    ("div", "f"): _float_binary("/"), ("div", "i"): _int_div,
    ("remainder", "f"): _float_remainder, ("remainder", "i"): _int_remainder,
    ("fmod", "f"): _lib("fmod"), ("fmod", "i"): _int_fmod,
    ("pow", "f"): _lib("pow"), ("pow", "i"): _int_helper("pow_int"),
    ("pow_scalar", "f"): _pow_scalar,
    ("atan2", "f"): _lib("atan2"), ("hypot", "f"): _lib("hypot"),
    ("copysign", "f"): _lib("copysign"),
    ("maximum", "f"): _maximum, ("maximum", "i"): _maximum, ("maximum", "b"): _maximum,
    ("minimum", "f"): _minimum, ("minimum", "i"): _minimum, ("minimum", "b"): _minimum,
    ("fmax", "f"): _fmax, ("fmax", "i"): _fmax, ("fmax", "b"): _fmax,
    ("fmin", "f"): _fmin, ("fmin", "i"): _fmin, ("fmin", "b"): _fmin,
    ("bitwise_and", "i"): _int_binary("&"), ("bitwise_and", "b"): lambda em, d, a, b: f"{a} & {b}",
    ("bitwise_or", "i"): _int_binary("|"), ("bitwise_or", "b"): lambda em, d, a, b: f"{a} | {b}",
    ("bitwise_xor", "i"): _int_binary("^"), ("bitwise_xor", "b"): lambda em, d, a, b: f"{a} != {b}",
    ("shift_left", "i"): _shift_left, ("shift_right", "i"): _shift_right,
    ("gcd", "i"): _gcd, ("lcm", "i"): _lcm,
    ("xlog1py", "f"): _xlog1py,
}
for _op, _sym in (("eq", "=="), ("ne", "!="), ("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">=")):
    for _cat in "fib":
        BINARY[(_op, _cat)] = _compare(_sym)

UNARY = {
    ("abs", "f"): lambda em, d, a: f"abs({a})", ("abs", "i"): lambda em, d, a: cast(d, f"abs({a})"),
    ("neg", "f"): lambda em, d, a: f"-{a}", ("neg", "i"): lambda em, d, a: cast(d, f"-{a}"),
    ("sign", "f"): lambda em, d, a: cast(d, f"int64({a} > 0) - int64({a} < 0)"),
    ("sign", "i"): lambda em, d, a: cast(d, f"int64({a} > 0) - int64({a} < 0)"),
    ("sign", "b"): lambda em, d, a: a,
    ("signbit", "f"): lambda em, d, a: f"math.copysign({const(d, 1)}, {a}) < 0",
    ("signbit", "i"): lambda em, d, a: f"{a} < 0", ("signbit", "b"): lambda em, d, a: "False",
    ("reciprocal", "f"): lambda em, d, a: f"{const(d, 1)} / {a}",
    ("sqrt", "f"): _lib("sqrt"),
    ("rsqrt", "f"): lambda em, d, a: f"{const(d, 1)} / {em.backend.lib('sqrt', d, [a])}",
    ("ceil", "f"): _lib("ceil"), ("floor", "f"): _lib("floor"),
    ("trunc", "f"): _lib("trunc"), ("round", "f"): _lib("rint"),
    ("isfinite", "f"): lambda em, d, a: f"math.isfinite({a})",
    ("isnan", "f"): lambda em, d, a: f"{a} != {a}",
    ("isinf", "f"): lambda em, d, a: f"math.isinf({a})",
    ("bitwise_not", "i"): lambda em, d, a: cast(d, f"~{a}"), ("bitwise_not", "b"): lambda em, d, a: f"not {a}",
    ("clone", "f"): lambda em, d, a: a, ("clone", "i"): lambda em, d, a: a, ("clone", "b"): lambda em, d, a: a,
}
for _prim in sorted(mathlib.MATH_PRIMS - {"pow", "atan2", "hypot"}):
    UNARY[(_prim, "f")] = _lib(_prim)
#: variants for operands known to hold float16 values (codegen tracks them)
F16_RANGE = {"sin": "sin_f16range", "cos": "cos_f16range", "floor": "floor_f16range",
             "ceil": "ceil_f16range", "trunc": "trunc_f16range", "round": "rint_f16range"}
#: variants for half values whose result is rounded to float16/bfloat16 next, which hides their
#: extra error (exp_fast: 1 ULP in float32 at 60% of exp's cost; rounded to either half
#: dtype it equals exp and eager on all 65,536 inputs, tests/numba/test_half_vectorized.py)
HALF_RESULT = {"exp": "exp_fast"}
for _prim in (*F16_RANGE.values(), *HALF_RESULT.values()):
    UNARY[(_prim, "f")] = _lib(_prim)


def category(dtype) -> str:
    k = DTYPES[dtype].kind
    return "f" if k in "fh" else "b" if k == "b" else "i"


def find(prim: str, dtype, arity: int):
    """The lowering of `prim` on operands of `dtype`, or None."""
    if dtype not in DTYPES:
        return None
    table = UNARY if arity == 1 else BINARY if arity == 2 else {}
    return table.get((prim, category(dtype)))


def lower(em: Emitter, prim: str, dtype, out_dtype, args: list[str],
          round_half: bool = True) -> str | None:
    """The expression of `prim` on registers `args` of `dtype`; None when not lowerable.

    Half-like dtypes compute in float32 and round the result to their dtype (exact for
    + - * / sqrt, which are correctly rounded in f32 first: 24 >= 2 * 11 + 2 bits);
    ``round_half=False`` leaves the rounding to the caller (codegen, which may fold it
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


def lowerable(backend: Backend, prim: str, dtype, arity: int) -> bool:
    """Whether `backend` lowers `prim` on `dtype` (tried on placeholder registers)."""
    if find(prim, dtype, arity) is None:
        return False
    em = Emitter(backend, lambda expr: "tmp", lambda divisor: None)
    try:
        return lower(em, prim, dtype, dtype, ["a", "b"][:arity]) is not None
    except Exception:
        return False
