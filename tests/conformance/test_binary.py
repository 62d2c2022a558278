"""Conformance of the binary arithmetic and math refs (and their in-place variants)."""
import math

import pytest
import torch

from primtrace import refs
from tests.conformance.binary_helpers import inplace_spec, pairs, run_out_for, sample, tensor
from tests.conformance.harness import FLOAT_DTYPES, OpSpec, run_conformance

F, I = FLOAT_DTYPES, (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)
INF, NAN = math.inf, math.nan


def _division_samples(spec):
    """Zero divisors (integers raise, floats follow IEEE) and quotients near integers, where
    floor division's fmod-based algorithm differs from floor(a / b)."""
    a = [-0.25, 0.25, 7.0, -7.0, 1.0, -1.0, 0.0, -0.0, 1e-30, 3.0, 1e30, -1e30]
    b = [-0.001, 0.001, 0.1, 0.1, 3.0, 3.0, -3.0, 3.0, 7.0, 0.0, 3e-8, 7.0]
    yield from pairs(a, b, F, "floor edge")
    yield from pairs([INF, -INF, NAN, 1.0, -1.0, 0.0], [2.0, 2.0, 2.0, INF, INF, -0.0], F, "ieee")
    for dtype in I:
        yield sample(tensor([7, -7, 0, 1], dtype), tensor([2, 0, 3, -1], dtype), desc=f"zero divisor {dtype}")
    yield sample(tensor([-7, 7, -8, 8], torch.int64), tensor([2, -2, 2, -2], torch.int64), desc="signs")
    yield sample(tensor([-7.5, 7.5], torch.float32), -2, desc="number divisor")
    yield sample(-7, tensor([2, -3, 4], torch.int32), desc="number dividend")


def _division_extra(spec):
    for kwargs in spec.kwargs_variants:
        for s in _division_samples(spec):
            s.kwargs = dict(kwargs)
            yield s


def _pow_samples(spec):
    for dtype in (torch.bool, torch.int8, torch.uint8, torch.int64):
        x = tensor([0, 1, 1, 0], torch.bool).to(dtype)
        for exponent in (True, False, 0, 1, 2, -1, -2, 0.5, -0.5, 2.0, 1j):
            yield sample(x, exponent, desc=f"{dtype} ** {exponent!r}")
        yield sample(x, tensor([0, 1, 2, 3], dtype), desc=f"{dtype} ** tensor")
        yield sample(tensor([2, -1, 1, 0], torch.int64).to(dtype), tensor(-1, torch.int64),
                     desc=f"{dtype} ** 0-dim -1")
    for base in (1, 2, True, 1.0, 2.5, 1j, -1):
        yield sample(base, tensor([True, False], torch.bool), desc=f"{base!r} ** bool")
        yield sample(base, tensor([-2, 0, 3], torch.int64), desc=f"{base!r} ** int")
    for dtype in F + (torch.complex64, torch.complex128):
        x = tensor([NAN, INF, -INF, 0.0, -0.0, 2.0, -2.0, 0.5], torch.float64).to(dtype)
        for exponent in (0, 1, 2, 3, -1, -2, 0.5, -0.5, 1.5, NAN, INF, -INF):
            yield sample(x, exponent, desc=f"{dtype} ** {exponent!r}")


def _xlogy_samples(spec):
    yield from pairs([0.0, 0.0, 0.0, NAN, 1.0, -1.0, 2.0], [0.0, NAN, -1.0, 0.0, 0.0, INF, -2.0],
                     F, "xlogy special")
    yield sample(0, tensor([0.0, NAN, 2.0], torch.float32), desc="number x")
    yield sample(tensor([0, 1, 2], torch.int32), 0, desc="number y")


def _logaddexp_samples(spec):
    v = [INF, -INF, INF, -INF, NAN, 0.0, 1e30, -1e30, 0.0, -30.0]
    w = [INF, -INF, -INF, INF, 1.0, NAN, 1e30, 1e30, -30.0, 0.0]
    yield from pairs(v, w, F, "logaddexp special")
    c = [complex(INF, 1), complex(-INF, 1), complex(NAN, 0), complex(1, 2), complex(INF, 0)]
    d = [complex(INF, 2), complex(-INF, 3), complex(0, 0), complex(1, -2), complex(-INF, 0)]
    for dtype in (torch.complex64, torch.complex128):
        yield sample(tensor(c, dtype), tensor(d, dtype), desc=f"complex special {dtype}")


def _heaviside_samples(spec):
    yield from pairs([-1.0, 0.0, -0.0, 2.0, NAN, INF, -INF], [0.5, 0.5, 0.25, 0.5, 0.5, 0.5, 0.5],
                     F, "heaviside")
    yield from pairs([-1, 0, 2], [5, 7, 9], (torch.int64, torch.uint8), "heaviside")
    yield sample(tensor([1.0, 0.0], torch.float32), tensor([0.5], torch.float64), desc="dtypes differ")
    yield sample(tensor([1.0, 0.0], torch.float32), tensor(0.5, torch.float32), desc="0-dim values")


def _ldexp_samples(spec):
    yield sample(tensor([1.0, 3.0, -0.5], torch.float16), tensor([1, 20, -30], torch.int32), desc="f16 overflow")
    yield sample(tensor([1.0, 3.0], torch.complex64), tensor([3, -2], torch.int64), desc="complex")
    tiny, huge = 5e-324, 1.7e308
    x = [tiny, tiny, huge, huge, 0.0, -0.0, 1.5, 1.5, INF, NAN, -3.0, 1.0]
    e = [2097, 2098, -2098, -2099, 5000, -5000, 2**32 + 3, -(2**31) - 7, -5, 3, -1074, 1023]
    for dtype in F:
        yield sample(tensor(x, dtype), tensor(e, torch.int64), desc=f"{dtype} extreme exponents")
    yield sample(tensor([0.75, -2.0], torch.float32), tensor([True, False], torch.bool), desc="bool exponent")


def _frexp_samples(spec):
    """Powers of two and their neighbours (where log2 rounds), the extremes, subnormals."""
    for dtype in F:
        info = torch.finfo(dtype)
        low = int(math.log2(info.smallest_normal)) + int(math.log2(info.eps))  # the least subnormal
        high = int(math.log2(info.max))
        powers = torch.pow(2.0, torch.arange(low, high + 1, dtype=torch.float64)).to(dtype)
        for toward in (0.0, INF):
            yield sample(torch.nextafter(powers, torch.tensor(toward, dtype=dtype)), desc=f"{dtype} near 2**k")
        yield sample(torch.cat([powers, -powers]), desc=f"{dtype} 2**k")
        yield sample(tensor([info.max, -info.max, info.tiny, info.smallest_normal / 3, 0.0, -0.0,
                             INF, -INF, NAN], dtype), desc=f"{dtype} extremes")


def _igamma_samples(spec):
    yield from pairs([0.0, 0.5, 1.0, INF, NAN, 3.0, -1.0, 1e-30], [0.0, 0.5, INF, 1.0, 1.0, NAN, 2.0, 1e30],
                     F, "igamma edges")
    yield sample(tensor([1.0, 2.0], torch.float32), 2.0, desc="number other")


def _alpha_samples(spec):
    a32, i64, b8 = (tensor([1.5, -2.0], torch.float32), tensor([3, -4], torch.int64),
                    tensor([True, False], torch.bool))
    for alpha in (True, 2, 0.5, 1 - 2j, -1):
        for x, y in ((a32, a32), (i64, i64), (b8, b8), (i64, 2), (a32, 2.5), (b8, True)):
            yield sample(x, y, alpha=alpha, desc=f"alpha={alpha!r} {x.dtype}")


def _spec(name, ref, fn, **kw):
    kw.setdefault("arity", 2)
    return OpSpec(name, ref, fn, **kw)


BOTH = (0, 1)
DIVISIONS = ({}, {"rounding_mode": "trunc"}, {"rounding_mode": "floor"})

SPECS = [
    _spec("add", refs.add, torch.add, scalar_args=BOTH, kwargs_variants=({}, {"alpha": -3}),
          extra_samples=_alpha_samples),
    _spec("sub", refs.sub, torch.sub, scalar_args=BOTH, kwargs_variants=({}, {"alpha": 0.5}),
          extra_samples=_alpha_samples),
    _spec("subtract", refs.subtract, torch.subtract, dtypes=(torch.bool, torch.float32), scalar_args=BOTH),
    _spec("rsub", refs.rsub, torch.rsub, scalar_args=(1,), kwargs_variants=({}, {"alpha": 2}),
          supports_out=False),
    _spec("mul", refs.mul, torch.mul, scalar_args=BOTH),
    _spec("multiply", refs.multiply, torch.multiply, dtypes=(torch.bool, torch.float16), scalar_args=BOTH),
    _spec("div", refs.div, torch.div, scalar_args=BOTH, kwargs_variants=DIVISIONS, nonzero=(1,),
          extra_samples=_division_extra),
    _spec("divide", refs.divide, torch.divide, dtypes=(torch.int32, torch.float32),
          kwargs_variants=DIVISIONS, nonzero=(1,)),
    _spec("true_divide", refs.true_divide, torch.true_divide, scalar_args=BOTH, nonzero=(1,)),
    _spec("floor_divide", refs.floor_divide, torch.floor_divide, scalar_args=BOTH, nonzero=(1,),
          extra_samples=_division_samples),
    _spec("remainder", refs.remainder, torch.remainder, scalar_args=BOTH, nonzero=(1,),
          extra_samples=_division_samples),
    _spec("fmod", refs.fmod, torch.fmod, scalar_args=(1,), nonzero=(1,), extra_samples=_division_samples),
    _spec("pow", refs.pow, torch.pow, scalar_args=BOTH, domain=(-3.0, 3.0), extra_samples=_pow_samples),
    _spec("float_power", refs.float_power, torch.float_power, scalar_args=BOTH, domain=(-3.0, 3.0)),
    _spec("xlogy", refs.xlogy, torch.xlogy, scalar_args=BOTH, extra_samples=_xlogy_samples),
    _spec("logaddexp", refs.logaddexp, torch.logaddexp, domain=(-40.0, 40.0),
          extra_samples=_logaddexp_samples),
    _spec("logaddexp2", refs.logaddexp2, torch.logaddexp2, domain=(-40.0, 40.0),
          extra_samples=_logaddexp_samples),
    _spec("atan2", refs.atan2, torch.atan2),
    _spec("arctan2", refs.arctan2, torch.arctan2, dtypes=(torch.int64, torch.float32)),
    _spec("hypot", refs.hypot, torch.hypot),
    _spec("copysign", refs.copysign, torch.copysign, scalar_args=(1,)),
    _spec("nextafter", refs.nextafter, torch.nextafter),
    _spec("maximum", refs.maximum, torch.maximum),
    _spec("minimum", refs.minimum, torch.minimum),
    _spec("fmax", refs.fmax, torch.fmax),
    _spec("fmin", refs.fmin, torch.fmin),
    _spec("gcd", refs.gcd, torch.gcd, domain=(-50.0, 50.0)),
    _spec("lcm", refs.lcm, torch.lcm, domain=(-50.0, 50.0)),
    _spec("ldexp", refs.ldexp, torch.ldexp, domain=(-8.0, 8.0), extra_samples=_ldexp_samples),
    OpSpec("frexp", refs.frexp, torch.frexp, domain=(-1e3, 1e3), supports_out=False,
           extra_samples=_frexp_samples),
    _spec("igamma", refs.igamma, torch.igamma, domain=(0.0, 6.0), extra_samples=_igamma_samples),
    _spec("igammac", refs.igammac, torch.igammac, domain=(0.0, 6.0), extra_samples=_igamma_samples),
    _spec("heaviside", refs.heaviside, torch.heaviside, extra_samples=_heaviside_samples),
]

_INPLACE = [  # (out-of-place spec name, Tensor method)
    ("add", "add_"), ("sub", "sub_"), ("sub", "subtract_"), ("mul", "mul_"), ("mul", "multiply_"),
    ("div", "div_"), ("div", "divide_"), ("true_divide", "true_divide_"),
    ("floor_divide", "floor_divide_"), ("remainder", "remainder_"), ("fmod", "fmod_"),
    ("pow", "pow_"), ("float_power", "float_power_"), ("xlogy", "xlogy_"), ("atan2", "atan2_"),
    ("atan2", "arctan2_"), ("hypot", "hypot_"), ("copysign", "copysign_"),
    ("nextafter", "nextafter_"), ("gcd", "gcd_"), ("lcm", "lcm_"), ("ldexp", "ldexp_"),
    ("heaviside", "heaviside_"), ("igamma", "igamma_"), ("igammac", "igammac_"),
]
_BY_NAME = {s.name: s for s in SPECS}
INPLACE_SPECS = [inplace_spec(_BY_NAME[op], getattr(refs, method), method) for op, method in _INPLACE]


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_conformance(spec):
    run_conformance(spec)


@pytest.mark.parametrize("spec", [s for s in SPECS if s.supports_out], ids=str)
def test_out(spec):
    run_out_for(spec)


@pytest.mark.parametrize("spec", INPLACE_SPECS, ids=str)
def test_inplace(spec):
    run_conformance(spec)


def test_aliases_are_the_same_refs():
    assert refs.subtract is refs.sub and refs.multiply is refs.mul and refs.divide is refs.div
    assert refs.arctan2 is refs.atan2 and refs.arctan2_ is refs.atan2_


def test_floor_divide_is_not_floor_of_true_division():
    """The case that makes eager use fmod: floor(-0.25 / -0.001) is 250, a // b is 249."""
    a, b = torch.tensor([-0.25], dtype=torch.float64), torch.tensor([-0.001], dtype=torch.float64)
    assert torch.floor(a / b).item() == 250.0
    assert refs.floor_divide(a, b).item() == torch.floor_divide(a, b).item() == 249.0


def test_igamma_is_special_gammainc():
    from primtrace.refs import special
    assert special.gammainc is refs.igamma and special.gammaincc is refs.igammac


FREXP_OUTS = {  # name: (mantissa out, exponent out)
    "right": (torch.empty(3), torch.empty(3, dtype=torch.int32)),
    "resized": (torch.empty(0), torch.empty(5, dtype=torch.int32)),
    "int64 exponent": (torch.empty(3), torch.empty(3, dtype=torch.int64)),
    "float64 mantissa": (torch.empty(3, dtype=torch.float64), torch.empty(3, dtype=torch.int32)),
}


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", FREXP_OUTS)
def test_frexp_out(name):
    x = tensor([3.0, -0.375, 0.0], torch.float32)
    outs = {who: tuple(t.clone() for t in FREXP_OUTS[name]) for who in ("eager", "ref")}
    results = {}
    for who, fn in (("eager", torch.frexp), ("ref", refs.frexp)):
        try:
            results[who] = fn(x, out=outs[who])
        except RuntimeError as e:
            results[who] = str(e)
    if isinstance(results["eager"], str):
        assert results["ref"] == results["eager"]
        return
    assert all(r is o for r, o in zip(results["ref"], outs["ref"]))
    assert all(torch.equal(a, b) for a, b in zip(outs["ref"], outs["eager"]))
