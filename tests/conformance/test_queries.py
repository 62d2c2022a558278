"""Conformance of the refs that read values into Python: equal, allclose, item; and the
tracer's treatment of them (a DataDependentError naming the line, as before they had refs).

Results are compared by type and value (``True`` is not ``1``); eager's errors by kind.
"""
import math

import pytest
import torch

import primtrace
from primtrace import refs
from primtrace.tracer.capture import DataDependentError
from tests.conformance.harness import ALL_DTYPES, make_tensor, with_specials

SPECIAL = torch.tensor([math.nan, math.inf, -math.inf, -0.0, 0.0, 1.0])


def _pairs():
    """(input, other) pairs: equal and unequal values in every dtype and across dtypes, NaN,
    inf and signed zeros, other shapes, broadcasting, empty and 0-dim, non-tensors."""
    for dtype in ALL_DTYPES:
        a = make_tensor((3, 4), dtype, seed=1)
        yield a, a.clone()
        yield a, make_tensor((3, 4), dtype, seed=2)
        yield a, a.t().contiguous().t()
        if dtype.is_floating_point or dtype.is_complex:
            s = with_specials(make_tensor((2, 5), dtype, seed=3))
            yield s, s.clone()
            yield s, s + 1e-7
            yield s, s * (1 + 1e-3)
        for other in () if dtype.is_complex else (torch.int32, torch.float64, torch.bool):
            yield a, a.to(other)
        yield a, a.to(torch.complex128)
    yield SPECIAL, SPECIAL.clone()
    yield torch.tensor([0.0]), torch.tensor([-0.0])
    yield torch.tensor([1.0]), torch.tensor(1.0)
    yield torch.ones(2, 3), torch.ones(3)
    yield torch.ones(2, 3), torch.ones(3, 2)
    yield torch.ones(2), torch.ones(1)
    yield torch.ones(0), torch.ones(0)
    yield torch.ones(0, 3), torch.ones(3, 0)
    yield torch.tensor(2.5), torch.tensor(2.5)
    yield torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 1e-6])
    yield torch.tensor([1, 2]), torch.tensor([1, 3])
    yield torch.tensor([True, False]), torch.tensor([True, True])
    yield torch.ones(2), 1
    yield 1.0, torch.ones(2)
    yield torch.ones(2), None


PAIRS = list(_pairs())
ALLCLOSE_KWARGS = ({}, {"equal_nan": True}, {"rtol": 0, "atol": 0}, {"rtol": 1e-2},
                   {"atol": 1.5}, {"rtol": -1}, {"atol": -1e-3}, {"rtol": 0.5, "atol": 0.5})


def _outcome(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception as e:  # eager's verdict is the spec
        return e


def _check(ours, eager, what):
    if isinstance(eager, Exception):
        assert isinstance(ours, type(eager)), f"{what}: eager raised {eager!r}, ours {ours!r}"
    else:
        assert not isinstance(ours, Exception), f"{what}: ours raised {ours!r}"
        assert type(ours) is type(eager), f"{what}: ours {ours!r}, eager {eager!r}"
        nans = isinstance(eager, float) and math.isnan(eager) and math.isnan(ours)
        same = ours == eager or nans
        assert same, f"{what}: ours {ours!r}, eager {eager!r}"


def _describe(x):
    return f"{x.dtype}{list(x.shape)}" if isinstance(x, torch.Tensor) else repr(x)


def test_equal():
    for a, b in PAIRS:
        _check(_outcome(refs.equal, a, b), _outcome(torch.equal, a, b),
               f"equal({_describe(a)}, {_describe(b)})")


@pytest.mark.parametrize("kwargs", ALLCLOSE_KWARGS, ids=str)
def test_allclose(kwargs):
    for a, b in PAIRS:
        _check(_outcome(refs.allclose, a, b, **kwargs), _outcome(torch.allclose, a, b, **kwargs),
               f"allclose({_describe(a)}, {_describe(b)}, {kwargs})")


ITEM_INPUTS = [
    *(make_tensor((), dtype, seed=4) for dtype in ALL_DTYPES),
    *(make_tensor((1, 1), dtype, seed=5) for dtype in ALL_DTYPES),
    *(torch.tensor([v]) for v in (math.nan, math.inf, -0.0)),
    torch.ones(2), torch.ones(0), torch.ones(3, 4)[1:2, 2:3], 3, None,
]


def test_item():
    for x in ITEM_INPUTS:
        eager = _outcome(lambda t: t.item(), x) if isinstance(x, torch.Tensor) else TypeError()
        ours = _outcome(refs.item, x)
        _check(ours, eager, f"item({_describe(x)})")
        if isinstance(eager, float):  # -0.0 keeps its sign
            assert math.copysign(1, ours) == math.copysign(1, eager)


@pytest.mark.parametrize("fn", [
    lambda a, b: a + 1 if torch.equal(a, b) else a,
    lambda a, b: a + 1 if a.equal(b) else a,
    lambda a, b: a + 1 if torch.allclose(a, b) else a,
    lambda a, b: a * 2 if a.sum().item() > 0 else a,
], ids=["torch.equal", "Tensor.equal", "torch.allclose", "Tensor.item"])
def test_traced_reads_still_raise_data_dependent_errors(fn):
    """Traced, these return a number the trace computes when it runs; Python control flow
    on it cannot be recorded in a trace and raises, naming the user's line."""
    jfn = primtrace.jit(fn)
    with pytest.raises(DataDependentError, match="data-dependent control flow") as info:
        jfn(torch.ones(3), torch.ones(3))
    assert "test_queries.py" in str(info.value)  # it names the user's line
