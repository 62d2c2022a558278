"""Conformance of comparisons (eq ... ge and their long names), logical ops and isclose."""
import math

import pytest
import torch

from primtrace import refs
from tests.conformance.binary_helpers import inplace_spec, pairs, run_out_for, sample, tensor
from tests.conformance.harness import ALL_DTYPES, FLOAT_DTYPES, OpSpec, run_conformance

INF, NAN = math.inf, math.nan


def _compare_samples(spec):
    """Promotion decides the comparison: an int64 against a float number or float16 tensor
    compares after conversion; unsigned against negative numbers; nan and signed zeros."""
    big = tensor([2**53 + 1, 2**24 + 1, -3, 0], torch.int64)
    yield sample(big, float(2**53), desc="int64 vs float number")
    yield sample(big, tensor([2**53, 2**24, -3, 0], torch.float32), desc="int64 vs float32 tensor")
    yield sample(tensor([0, 200, 255], torch.uint8), -1, desc="uint8 vs -1")
    yield sample(tensor([0, 200, 255], torch.uint8), 255.0, desc="uint8 vs 255.0")
    yield sample(tensor([True, False], torch.bool), 0.5, desc="bool vs 0.5")
    yield from pairs([NAN, 0.0, -0.0, INF, -INF, 1.0], [NAN, -0.0, 0.0, INF, INF, NAN], FLOAT_DTYPES, "specials")
    yield sample(tensor([1 + 1j, 2], torch.complex64), 1 + 1j, desc="complex vs number")


def _logical_samples(spec):
    for dtype in ALL_DTYPES:
        if dtype.is_floating_point or dtype.is_complex:
            x = tensor([0.0, -0.0, NAN, 1e-30, 1.0], torch.float64).to(dtype)
        else:
            x = tensor([0, 1, 0, 1, 1], torch.int64).to(dtype)
        yield sample(x, x.flip(0), desc=f"{dtype} zeros and nan")
    yield sample(tensor([0.0, 1.0], torch.float32), 1, desc="number other")


def _isclose_samples(spec):
    a = [1.0, 1.0, NAN, NAN, INF, INF, -INF, 0.0, 1e-8, 100.0, 1.0]
    b = [1.0 + 1e-6, 1.1, NAN, 1.0, INF, -INF, -INF, -0.0, 0.0, 100.001, 1.001]
    for kwargs in ({}, {"equal_nan": True}, {"rtol": 0.0, "atol": 0.0}, {"rtol": 0.1}, {"atol": 0.01},
                   {"rtol": 0, "atol": 0, "equal_nan": True}):
        for s in pairs(a, b, FLOAT_DTYPES, f"isclose {kwargs}", **kwargs):
            yield s
        yield sample(tensor([1 + 1j, complex(NAN, 0), 2j], torch.complex64),
                     tensor([1 + 1.000001j, complex(NAN, 0), 2.1j], torch.complex64), desc=f"complex {kwargs}", **kwargs)
        yield sample(tensor([0, 100, 255, 7], torch.uint8), tensor([255, 101, 0, 7], torch.uint8),
                     desc=f"uint8 {kwargs}", **kwargs)
        yield sample(tensor([2**40, 5], torch.int64), tensor([2**40 + 1, 6], torch.int64), desc=f"int64 {kwargs}", **kwargs)
    yield sample(tensor([1.0], torch.float32), tensor([1.0], torch.float64), desc="dtypes differ")
    yield sample(tensor([1.0], torch.float32), tensor([1.0], torch.float32), rtol=-1.0, desc="negative rtol")
    yield sample(tensor([1.0], torch.float32), tensor([1.0], torch.float32), atol=-1.0, desc="negative atol")
    yield sample(tensor([1.0], torch.float32), 1.0, desc="number other")


def _spec(name, ref, fn, **kw):
    kw.setdefault("arity", 2)
    return OpSpec(name, ref, fn, **kw)


_COMPARISONS = [("eq", None), ("ne", "not_equal"), ("lt", "less"), ("le", "less_equal"),
                ("gt", "greater"), ("ge", "greater_equal")]
SPECS = []
for _name, _alias in _COMPARISONS:
    SPECS.append(_spec(_name, getattr(refs, _name), getattr(torch, _name), scalar_args=(0, 1),
                       extra_samples=_compare_samples))
    if _alias:
        SPECS.append(_spec(_alias, getattr(refs, _alias), getattr(torch, _alias), scalar_args=(1,),
                           dtypes=(torch.int32, torch.float16, torch.complex64)))
for _name in ("logical_and", "logical_or", "logical_xor"):
    SPECS.append(_spec(_name, getattr(refs, _name), getattr(torch, _name), scalar_args=(1,),
                       extra_samples=_logical_samples))  # eager refuses numbers: TypeError
SPECS += [
    _spec("logical_not", refs.logical_not, torch.logical_not, arity=1,
          extra_samples=lambda spec: (sample(s.args[0], desc=s.desc) for s in _logical_samples(spec))),
    _spec("isclose", refs.isclose, torch.isclose, scalar_args=(1,), supports_out=False,
          kwargs_variants=({}, {"rtol": 0.5, "atol": 0.1, "equal_nan": True}), extra_samples=_isclose_samples),
]
_BY_NAME = {s.name: s for s in SPECS}

INPLACE_SPECS = [
    inplace_spec(_BY_NAME[name], getattr(refs, name + "_"), name + "_")
    for name in ("eq", "ne", "lt", "le", "gt", "ge", "not_equal", "less", "less_equal", "greater",
                 "greater_equal", "logical_and", "logical_or", "logical_xor", "logical_not")
]


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_conformance(spec):
    run_conformance(spec)


@pytest.mark.parametrize("spec", [s for s in SPECS if s.supports_out], ids=str)
def test_out(spec):
    run_out_for(spec)


@pytest.mark.parametrize("spec", INPLACE_SPECS, ids=str)
def test_inplace(spec):
    run_conformance(spec)


def test_long_names_are_the_same_refs():
    assert refs.not_equal is refs.ne and refs.less is refs.lt and refs.greater_equal is refs.ge
    assert refs.less_equal_ is refs.le_
