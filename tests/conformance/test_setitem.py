"""Tensor.__setitem__ (refs.__setitem__) against eager: basic items (a copy into a view),
integer tensors and lists (index_put into the view), numbers and tensors as values, on
several layouts, eagerly on real tensors and through jit; the written tensor, the values
read back and eager's errors."""
from __future__ import annotations

import warnings

import pytest
import torch

import primtrace
from primtrace import refs


def _layouts(dtype):
    base = torch.arange(60, dtype=torch.float64).reshape(4, 5, 3).to(dtype)
    yield "contiguous", base.clone()
    yield "transposed", base.clone().transpose(0, 2).contiguous().transpose(0, 2)
    yield "sliced", torch.zeros(6, 5, 3, dtype=dtype)[1:5].copy_(base)


I = torch.tensor
CASES = [   # (index, value of x's dtype or not: a function of x)
    (slice(0, 2), lambda x: 1.0),
    ((Ellipsis, 1), lambda x: torch.arange(5, dtype=x.dtype)),
    ((0, slice(None), 2), lambda x: torch.ones(1, 1, 5, dtype=torch.float64)),   # leading 1s
    (I([0, 2, -1]), lambda x: torch.arange(15, dtype=x.dtype).reshape(5, 3)),
    ((slice(None), I([1, -1])), lambda x: 7),
    ((I([0, 1]), slice(None), I([2, 0])), lambda x: torch.arange(5, dtype=x.dtype)),
    ((I([[0], [3]]), I([1, 2])), lambda x: torch.zeros(2, 2, 3, dtype=x.dtype)),
    ((1, Ellipsis, [0, 2]), lambda x: torch.ones((), dtype=x.dtype)),
    ([3, 0], lambda x: -1),
    ((None, I([0, 0])), lambda x: torch.arange(30, dtype=x.dtype).reshape(2, 5, 3)),
    (I([1], dtype=torch.int32), lambda x: 2),
]
ERRORS = [
    (I([9]), lambda x: 1.0, IndexError),
    ((slice(None), I([-6])), lambda x: 1.0, IndexError),
    (I([0.5]), lambda x: 1.0, IndexError),
    ((I([0, 1]), I([0, 1, 2])), lambda x: 1.0, IndexError),
    (I([0, 1]), lambda x: torch.ones(4, dtype=x.dtype), RuntimeError),        # shape mismatch
    (I([0, 1]), lambda x: torch.ones(5, 3, dtype=torch.float64), RuntimeError),  # dtype
    (slice(0, 2), lambda x: torch.ones(4), RuntimeError),
    (0, lambda x: 1e300, RuntimeError),   # overflow into float32
    ((0, 0, 0, 0), lambda x: 1.0, IndexError),
    (I([0]), lambda x: "a", TypeError),
]


def _set(x, index, value):
    x[index] = value


def _jit_set(index):
    def fn(x, value):
        x[index] = value
        return x * 2
    return fn


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_setitem_matches_eager(case, dtype):
    index, make_value = CASES[case]
    for desc, x in _layouts(dtype):
        value = make_value(x)
        expected = x.clone()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _set(expected, index, value)
            got = x.clone()
            refs.__setitem__(got, index, value)   # the ref on real tensors
            assert torch.equal(got, expected), desc
            fn = _jit_set(index)
            jit_x, eager_x = x.clone(), x.clone()
            out = primtrace.jit(fn)(jit_x, value)
            assert torch.equal(out, fn(eager_x, value)) and torch.equal(jit_x, eager_x), desc
            assert jit_x.stride() == x.stride()
    assert primtrace.explain(_jit_set(index), x.clone(), value).opaque == []


def test_setitem_writes_through_a_view_of_an_input():
    rows = torch.tensor([0, -1])

    def fn(x, v):
        y = x.t()[1:]
        y[rows, 1:3] = v
        y[..., 0] = 5.0
        return y.sum()
    x, v = torch.randn(4, 5), torch.randn(2)
    jx, ex = x.clone(), x.clone()
    torch.testing.assert_close(primtrace.jit(fn)(jx, v), fn(ex, v))
    assert torch.equal(jx, ex)


@pytest.mark.parametrize("case", range(len(ERRORS)))
def test_setitem_errors_are_eagers(case):
    index, make_value, kind = ERRORS[case]
    x = torch.zeros(4, 5, 3)
    value = make_value(x)
    with pytest.raises(kind) as eager:
        _set(x.clone(), index, value)
    with pytest.raises(kind, match=str(eager.value).splitlines()[0][:40].replace("[", ".").replace("]", ".").replace("(", ".").replace(")", ".")):
        primtrace.jit(_jit_set(index))(x.clone(), value)


def _overlapping_value(x):
    x[[1, 2]] = x[0:2]   # the value overlaps the written memory: eager's RuntimeError
    return x


def _into_expanded(x):
    y = x.expand(3, 4)
    y[[0, 1]] = torch.arange(4.0)   # eager writes the shared row (and warns)
    return x * 1


@pytest.mark.parametrize("fn", [_overlapping_value, _into_expanded])
def test_setitem_writes_memory_as_eager(fn):
    """index_put_ runs in place on the view, as eager: its overlap checks, expanded memory."""
    x = torch.randn(1, 4) if fn is _into_expanded else torch.randn(4)
    jx, ex = x.clone(), x.clone()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            expected, error = fn(ex), None
        except RuntimeError as e:
            expected, error = None, e
        if error is not None:
            with pytest.raises(RuntimeError, match="unsupported operation"):
                primtrace.jit(fn)(jx)
            return
        torch.testing.assert_close(primtrace.jit(fn)(jx), expected)
    assert torch.equal(jx, ex)
