"""Regressions of issue 18: refs (called on real tensors) and ``primtrace.jit`` against eager
for reductions that aliased their input, var_mean's infinite means, output strides,
meshgrid of 0-dim inputs, writes into expanded tensors, empty matmuls and argument forms."""
from __future__ import annotations

import itertools
import warnings

import pytest
import torch
import torch.nn.functional as F

import primtrace
from primtrace import refs

INF, NAN = float("inf"), float("nan")


def _same_values(got, expected):
    assert got.dtype == expected.dtype and got.shape == expected.shape, (got, expected)
    assert torch.equal(got.isnan(), expected.isnan()), (got, expected)
    assert torch.equal(got.isposinf(), expected.isposinf()), (got, expected)
    assert torch.equal(got.isneginf(), expected.isneginf()), (got, expected)
    torch.testing.assert_close(got, expected, equal_nan=True)


def _both(fn, *args, **kwargs):
    """fn's result run by primtrace.jit and by eager."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return primtrace.jit(fn)(*args, **kwargs), fn(*args, **kwargs)


# --- 3: a reduction's result never aliases its input --------------------------------------------
_REDUCTIONS = {
    "logsumexp": (lambda x: torch.logsumexp(x, 0), lambda x: refs.logsumexp(x, 0)),
    "special.logsumexp": (lambda x: torch.special.logsumexp(x, 0), None),
    "sum": (lambda x: torch.sum(x, 0), lambda x: refs.sum(x, 0)),
    "sum_all": (lambda x: torch.sum(x), lambda x: refs.sum(x)),
    "sum_empty_dims": (lambda x: torch.sum(x, ()), lambda x: refs.sum(x, ())),
    "amax": (lambda x: torch.amax(x, 0), lambda x: refs.amax(x, 0)),
    "amin": (lambda x: torch.amin(x, 0), lambda x: refs.amin(x, 0)),
    "mean": (lambda x: torch.mean(x, 0), lambda x: refs.mean(x, 0)),
    "prod": (lambda x: torch.prod(x, 0), lambda x: refs.prod(x, 0)),
    "prod_all": (lambda x: torch.prod(x), lambda x: refs.prod(x)),
    "var": (lambda x: torch.var(x, 0, correction=0), lambda x: refs.var(x, 0, correction=0)),
    "std": (lambda x: torch.std(x, 0, correction=0), lambda x: refs.std(x, 0, correction=0)),
    "var_mean": (lambda x: torch.var_mean(x, 0, correction=0),
                 lambda x: refs.var_mean(x, 0, correction=0)),
    "std_mean": (lambda x: torch.std_mean(x, 0, correction=0),
                 lambda x: refs.std_mean(x, 0, correction=0)),
    "norm": (lambda x: torch.norm(x, dim=0), lambda x: refs.norm(x, dim=0)),
    "vector_norm_1": (lambda x: torch.linalg.vector_norm(x, 1, 0),
                      lambda x: refs.linalg.vector_norm(x, 1, 0)),
    "vector_norm_inf": (lambda x: torch.linalg.vector_norm(x, INF, 0),
                        lambda x: refs.linalg.vector_norm(x, INF, 0)),
    "softmax": (lambda x: torch.softmax(x, 0), lambda x: refs.nn.functional.softmax(x, 0)),
    "log_softmax": (lambda x: torch.log_softmax(x, 0),
                    lambda x: refs.nn.functional.log_softmax(x, 0)),
    "softmin": (lambda x: F.softmin(x, 0), None),
    "normalize": (lambda x: F.normalize(x, dim=0), None),
    "max": (lambda x: torch.max(x), None),
    "max_dim": (lambda x: torch.max(x, 0), None),
    "min_dim": (lambda x: torch.min(x, 0), None),
    "argmax": (lambda x: torch.argmax(x, 0), lambda x: refs.argmax(x, 0)),
    "nansum": (lambda x: torch.nansum(x, 0), None),
    "nanmean": (lambda x: torch.nanmean(x, 0), None),
    "all": (lambda x: torch.all(x, 0), lambda x: refs.all(x, 0)),
    "any": (lambda x: torch.any(x, 0), lambda x: refs.any(x, 0)),
    "count_nonzero": (lambda x: torch.count_nonzero(x, 0), lambda x: refs.count_nonzero(x, 0)),
    "cumsum": (lambda x: torch.cumsum(x, 0), lambda x: refs.cumsum(x, 0)),
    "cumprod": (lambda x: torch.cumprod(x, 0), lambda x: refs.cumprod(x, 0)),
    "logcumsumexp": (lambda x: torch.logcumsumexp(x, 0), None),
    "cummax": (lambda x: torch.cummax(x, 0), None),
    "median": (lambda x: torch.median(x, 0), None),
    "sort": (lambda x: torch.sort(x, 0), None),
    "topk": (lambda x: torch.topk(x, 1, 0), None),
    "aminmax": (lambda x: torch.aminmax(x, dim=0), None),
}


def _storages(out):
    outs = out if isinstance(out, tuple) else (out,)
    return {t.untyped_storage().data_ptr() for t in outs if isinstance(t, torch.Tensor)}


@pytest.mark.parametrize("name", sorted(_REDUCTIONS))
@pytest.mark.parametrize("shape", [(), (1,), (1, 1)])
def test_reduction_result_never_aliases_input(name, shape):
    torch_fn, ref_fn = _REDUCTIONS[name]
    x = torch.full(shape, 2.0)
    eager = torch_fn(x)
    assert x.untyped_storage().data_ptr() not in _storages(eager)
    runs = [("jit", primtrace.jit(torch_fn))] + ([("ref", ref_fn)] if ref_fn else [])
    for how, fn in runs:
        x = torch.full(shape, 2.0)
        out = fn(x)
        assert x.untyped_storage().data_ptr() not in _storages(out), how
        first = out[0] if isinstance(out, tuple) else out
        expected = eager[0] if isinstance(eager, tuple) else eager
        before = first.clone()
        x.add_(1)
        assert torch.equal(first, before), how  # writes to x do not reach the result
        torch.testing.assert_close(first, expected)


def test_logsumexp_of_0dim_is_a_new_tensor():
    for fn in (lambda x: x.logsumexp(0), lambda x: refs.logsumexp(x, 0),
               primtrace.jit(lambda x: x.logsumexp(0))):
        x = torch.tensor(1.5)
        y = fn(x)
        x.add_(1)
        assert y.item() == 1.5
        y.mul_(0)
        assert x.item() == 2.5


# --- 4: var_mean/std_mean means with infinities (eager's Welford running mean) -----------------
_SPECIALS = (1.0, 2.0, INF, -INF, NAN)


def _special_tensors():
    g = torch.Generator().manual_seed(18)
    yield torch.tensor([[1.0, -INF], [1.0, 2.0]])
    yield torch.tensor([[INF, 1.0], [1.0, INF]])
    for shape in ((2, 3), (3, 2, 2), (4,)):
        for i in range(12):
            idx = torch.randint(0, len(_SPECIALS), shape, generator=g)
            x = torch.tensor(_SPECIALS)[idx]
            yield x if i % 2 or x.ndim < 2 else x.transpose(0, -1)


@pytest.mark.parametrize("name", ["var_mean", "std_mean", "var", "std", "mean"])
def test_var_mean_infinities_match_eager(name):
    torch_fn, ref_fn = getattr(torch, name), getattr(refs, name)
    jitted = {}
    for x in _special_tensors():
        for dim in (None, 0, -1, (0, -1)) if x.ndim > 1 else (None, 0):
            kwargs = {} if dim is None else {"dim": dim}
            expected = torch_fn(x, **kwargs)
            fn = jitted.setdefault(dim, primtrace.jit(lambda x, kw=kwargs: torch_fn(x, **kw)))
            for got in (ref_fn(x, **kwargs), fn(x)):
                for g, e in zip(*(t if isinstance(t, tuple) else (t,) for t in (got, expected))):
                    _same_values(g, e)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64, torch.complex64])
def test_var_mean_infinities_dtypes(dtype):
    x = torch.tensor([[1.0, -INF], [1.0, 2.0], [INF, 1.0]]).to(dtype)
    if dtype.is_complex:
        x = torch.complex(x.real, x.real.flip(0)).to(dtype)
    for dim in (None, 1):
        expected = torch.var_mean(x, dim)
        for got in (refs.var_mean(x, dim), primtrace.jit(lambda x: torch.var_mean(x, dim))(x)):
            for g, e in zip(got, expected):
                if e.is_complex():
                    g, e = torch.view_as_real(g), torch.view_as_real(e)
                _same_values(g, e)
