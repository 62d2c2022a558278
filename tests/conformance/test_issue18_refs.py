"""Regressions of issue 18: refs (called on real tensors) and ``primtrace.jit`` against eager
for reductions that aliased their input, var_mean's infinite means, output strides,
meshgrid of 0-dim inputs, writes into expanded tensors, empty matmuls and argument forms."""
from __future__ import annotations

import itertools
import os
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
    "nansum": (lambda x: torch.nansum(x, 0), lambda x: refs.nansum(x, 0)),
    "nansum_empty_dims": (lambda x: x.nansum(()), lambda x: refs.nansum(x, ())),
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


# --- 5: output strides are eager's (refs, and jit's executed results) --------------------------
RF = refs.nn.functional


def _layouts():
    g = torch.Generator().manual_seed(5)
    r = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
    return {
        "contiguous": r(2, 3, 4, 5),
        "transposed": r(5, 4, 3, 2).permute(3, 2, 1, 0),
        "channels_last": r(2, 3, 4, 5).to(memory_format=torch.channels_last),
        "sliced": r(4, 3, 8, 10)[::2, :, ::2, ::2],
        "expanded": r(1, 3, 1, 5).expand(2, 3, 4, 5),
        "inner_transposed": r(2, 3, 5, 4).transpose(-1, -2),
        "permuted": r(2, 4, 3, 5).transpose(1, 2),
        "size_one": r(2, 3, 1, 5).transpose(0, 2),
    }


_BOOL = lambda x: torch.ones(x.shape, dtype=torch.bool)  # noqa: E731
_C0 = torch.tensor(0.5)
_STRIDE_OPS = {
    # name: (eager, ref or None)
    "neg": (torch.neg, refs.neg),
    "exp": (torch.exp, refs.exp),
    "abs": (torch.abs, refs.abs),
    "sign": (torch.sign, refs.sign),
    "logical_not": (torch.logical_not, refs.logical_not),
    "sigmoid": (torch.sigmoid, refs.sigmoid),
    "nan_to_num": (torch.nan_to_num, refs.nan_to_num),
    "add_number": (lambda x: x + 1, lambda x: refs.add(x, 1)),
    "add_0dim": (lambda x: x + _C0, lambda x: refs.add(x, _C0)),
    "0dim_add": (lambda x: _C0 + x, lambda x: refs.add(_C0, x)),
    "add_contiguous": (lambda x: x + torch.ones(x.shape), lambda x: refs.add(x, torch.ones(x.shape))),
    "contiguous_add": (lambda x: torch.ones(x.shape) + x, lambda x: refs.add(torch.ones(x.shape), x)),
    "add_broadcast": (lambda x: x + torch.ones(5), lambda x: refs.add(x, torch.ones(5))),
    "mul_self": (lambda x: x * x, lambda x: refs.mul(x, x)),
    "floor_divide_broadcast": (lambda x: torch.floor_divide(x, torch.full((5,), 0.5)),
                               lambda x: refs.floor_divide(x, torch.full((5,), 0.5))),
    "xlogy_broadcast": (lambda x: torch.xlogy(x, torch.full((5,), 0.5)),
                        lambda x: refs.xlogy(x, torch.full((5,), 0.5))),
    "full_like_0dim_value": (lambda x: torch.full_like(x, _C0), lambda x: refs.full_like(x, _C0)),
    "eq": (lambda x: x == _C0, lambda x: refs.eq(x, _C0)),
    "pow": (lambda x: x ** 2, lambda x: refs.pow(x, 2)),
    "where": (lambda x: torch.where(x > 0, x, 0.0), lambda x: refs.where(refs.gt(x, 0), x, 0.0)),
    "where_contiguous_condition": (lambda x: torch.where(_BOOL(x), x, _C0),
                                   lambda x: refs.where(_BOOL(x), x, _C0)),
    "masked_fill": (lambda x: x.masked_fill(x > 0, 0.0),
                    lambda x: refs.masked_fill(x, refs.gt(x, 0), 0.0)),
    "masked_fill_0dim": (lambda x: x.masked_fill(x > 0, _C0),
                         lambda x: refs.masked_fill(x, refs.gt(x, 0), _C0)),
    "masked_fill_broadcast_mask": (lambda x: x.masked_fill(torch.ones(5, dtype=torch.bool), 0.0),
                                   lambda x: refs.masked_fill(x, torch.ones(5, dtype=torch.bool), 0.0)),
    "clamp": (lambda x: x.clamp(-1, 1), lambda x: refs.clamp(x, -1, 1)),
    "clamp_tensors": (lambda x: x.clamp(torch.zeros(5), torch.ones(5)),
                      lambda x: refs.clamp(x, torch.zeros(5), torch.ones(5))),
    "lerp": (lambda x: torch.lerp(x, _C0, 0.5), lambda x: refs.lerp(x, _C0, 0.5)),
    "addcmul": (lambda x: torch.addcmul(x, x, _C0), lambda x: refs.addcmul(x, x, _C0)),
    "to_float64": (lambda x: x.to(torch.float64), lambda x: refs.to(x, torch.float64)),
    "int": (lambda x: x.int(), None),
    "bool": (lambda x: x.bool(), None),
    "softmax": (lambda x: F.softmax(x, 1), lambda x: RF.softmax(x, 1)),
    "softmax_last": (lambda x: torch.softmax(x, -1), lambda x: RF.softmax(x, -1)),
    "log_softmax": (lambda x: F.log_softmax(x, 1), lambda x: RF.log_softmax(x, 1)),
    "softmin": (lambda x: F.softmin(x, 1), lambda x: RF.softmin(x, 1)),
    "layer_norm": (lambda x: F.layer_norm(x, (5,)), lambda x: RF.layer_norm(x, (5,))),
    "rms_norm": (lambda x: F.rms_norm(x, (5,)), lambda x: RF.rms_norm(x, (5,))),
    "batch_norm_eval": (lambda x: F.batch_norm(x, torch.zeros(3), torch.ones(3), torch.ones(3),
                                               torch.zeros(3)),
                        lambda x: RF.batch_norm(x, torch.zeros(3), torch.ones(3), torch.ones(3),
                                                torch.zeros(3))),
    "batch_norm_train": (lambda x: F.batch_norm(x, None, None, training=True),
                         lambda x: RF.batch_norm(x, None, None, training=True)),
    "group_norm": (lambda x: F.group_norm(x, 3), lambda x: RF.group_norm(x, 3)),
    "dropout_eval": (lambda x: F.dropout(x, 0.5, training=False),
                     lambda x: RF.dropout(x, 0.5, training=False)),
    "relu": (F.relu, RF.relu),
    "gelu": (F.gelu, RF.gelu),
    "hardtanh": (F.hardtanh, RF.hardtanh),
    "threshold": (lambda x: F.threshold(x, 0.1, 2.0), lambda x: RF.threshold(x, 0.1, 2.0)),
    "sum_keepdim": (lambda x: x.sum(1, keepdim=True), lambda x: refs.sum(x, 1, keepdim=True)),
    "cumsum": (lambda x: x.cumsum(1), lambda x: refs.cumsum(x, 1)),
    "clone": (torch.clone, refs.clone),
    "zeros_like": (torch.zeros_like, refs.zeros_like),
    "full_like": (lambda x: torch.full_like(x, 2.0), lambda x: refs.full_like(x, 2.0)),
}


@pytest.mark.parametrize("name", sorted(_STRIDE_OPS))
def test_output_strides_match_eager(name):
    torch_fn, ref_fn = _STRIDE_OPS[name]
    jitted = primtrace.jit(torch_fn)
    for layout, x in _layouts().items():
        expected = torch_fn(x)
        if ref_fn is not None:
            assert ref_fn(x).stride() == expected.stride(), layout
        got = jitted(x)
        assert got.stride() == expected.stride(), layout
        torch.testing.assert_close(got, expected)


@pytest.mark.skipif(not os.environ.get("PRIMTRACE_SLOW"), reason="slow: PRIMTRACE_SLOW=1")
def test_every_torch_ref_returns_eagers_strides():
    """Every ref named like a torch function, on one tensor, a tensor and a 0-dim tensor, two
    tensors or a broadcast one, over the layouts: where eager and the ref both run, the
    strides are eager's."""
    from primtrace.ir.symbol import Symbol
    names = [n for n in dir(refs) if isinstance(getattr(refs, n), Symbol)
             and not n.endswith("_") and hasattr(torch, n)]
    bad = set()
    for name in names:
        torch_fn, ref_fn = getattr(torch, name), getattr(refs, name)
        for layout, x in _layouts().items():
            x = x.abs() + 0.1
            for args in ((x,), (x, _C0), (_C0, x), (x, x), (x, torch.ones(5))):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    expected, got = (_raised_or_result(f, args) for f in (torch_fn, ref_fn))
                if (isinstance(expected, torch.Tensor) and isinstance(got, torch.Tensor)
                        and expected.numel() > 1 and got.shape == expected.shape
                        and got.stride() != expected.stride()):
                    bad.add((name, layout, len(args)))
    assert not bad, sorted(bad)


@pytest.mark.parametrize("name", ["softmax", "layer_norm", "batch_norm_train", "masked_fill"])
def test_0dim_and_1dim_strides(name):
    torch_fn, ref_fn = _STRIDE_OPS[name]
    for x in (torch.randn(2, 3)[:, ::2], torch.randn(3, 2).t(), torch.randn(5, 3, 4)[::2]):
        expected = torch_fn(x) if name != "layer_norm" else F.layer_norm(x, x.shape[-1:])
        got = ref_fn(x) if name != "layer_norm" else RF.layer_norm(x, x.shape[-1:])
        assert got.stride() == expected.stride()


def test_masked_fill_result_is_contiguous_so_reshape_copies():
    def fn(a):
        b = a.masked_fill(a > 0, 0.0)
        b.t().reshape(-1).add_(100)
        return b
    a = torch.arange(6.0).view(3, 2).t()
    got, expected = _both(fn, a)
    assert torch.equal(got, expected) and torch.equal(expected, torch.zeros(2, 3))
    got, expected = _both(lambda a: a.masked_fill(a > 0, 0.0).view(-1), a)
    assert torch.equal(got, expected)
    assert refs.masked_fill(a, a > 0, 0.0).is_contiguous()


def test_batch_norm_traced_strides_are_the_executed_ones():
    x = torch.randn(5, 4, 2, 5).transpose(-1, -2)
    for fn in (lambda x: F.batch_norm(x, None, None, training=True).view(1, 2, 10, 10),
               lambda x: F.batch_norm(x, torch.zeros(4), torch.ones(4)).view(1, 2, 10, 10)):
        got, expected = _both(fn, x)
        torch.testing.assert_close(got, expected)


# --- 7: meshgrid of 0-dim and 1-dim inputs ---------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid_0dim_and_1dim_inputs(n, indexing):
    for kinds in itertools.product((0, 1), repeat=n):
        tensors = [torch.tensor(10.0 * i) if k == 0 else torch.arange(2.0 + i) + 10 * i
                   for i, k in enumerate(kinds)]
        expected = torch.meshgrid(*tensors, indexing=indexing)
        fn = lambda *ts: torch.meshgrid(*ts, indexing=indexing)  # noqa: E731
        for got in (refs.meshgrid(*tensors, indexing=indexing), primtrace.jit(fn)(*tensors),
                    refs.meshgrid(tensors, indexing=indexing)):
            assert len(got) == len(expected)
            for g, e in zip(got, expected):
                assert g.shape == e.shape and g.stride() == e.stride(), (kinds, g.shape, e.shape)
                assert torch.equal(g, e)


# --- 13: in-place writes into expanded (self-overlapping) tensors ----------------------------
_MASK = torch.tensor([[True, False, False], [False, False, True]])
_WRITES = {
    "masked_fill_": lambda x: x.masked_fill_(_MASK, 7.0),
    "masked_fill_0dim": lambda x: x.masked_fill_(_MASK, torch.tensor(7.0)),
    "masked_fill_broadcast": lambda x: x.masked_fill_(torch.tensor([False, True, False]), -1.0),
    "index_fill_": lambda x: x.index_fill_(1, torch.tensor([0, -1]), 7.0),
    "index_fill_expanded_dim": lambda x: x.index_fill_(0, torch.tensor([1]), 7.0),
    "index_fill_0dim_value": lambda x: x.index_fill_(1, torch.tensor([2]), torch.tensor(7.0)),
    "tril_": lambda x: x.tril_(),
    "triu_": lambda x: x.triu_(1),
    "fill_": lambda x: x.fill_(7.0),
    "zero_": lambda x: x.zero_(),
    "add_": lambda x: x.add_(1.0),
    "mul_": lambda x: x.mul_(2.0),
    "clamp_": lambda x: x.clamp_(0, 1),
    "copy_": lambda x: x.copy_(torch.ones(2, 3)),
    "index_copy_": lambda x: x.index_copy_(1, torch.tensor([0]), torch.ones(2, 1)),
    "index_add_": lambda x: x.index_add_(1, torch.tensor([0]), torch.ones(2, 1)),
    "scatter_": lambda x: x.scatter_(1, torch.tensor([[0], [0]]), 1.0),
    "masked_scatter_": lambda x: x.masked_scatter_(_MASK, torch.ones(6)),
}
_REF_WRITES = {
    "masked_fill_": lambda x: refs.masked_fill_(x, _MASK, 7.0),
    "masked_fill_0dim": lambda x: refs.masked_fill_(x, _MASK, torch.tensor(7.0)),
    "masked_fill_broadcast": lambda x: refs.masked_fill_(x, torch.tensor([False, True, False]), -1.0),
    "index_fill_": lambda x: refs.index_fill_(x, 1, torch.tensor([0, -1]), 7.0),
    "index_fill_expanded_dim": lambda x: refs.index_fill_(x, 0, torch.tensor([1]), 7.0),
    "index_fill_0dim_value": lambda x: refs.index_fill_(x, 1, torch.tensor([2]), torch.tensor(7.0)),
    "tril_": lambda x: refs.tril_(x),
    "triu_": lambda x: refs.triu_(x, 1),
    "add_": lambda x: refs.add_(x, 1.0),
}


def _outcome(fn, x):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn(x)
    except Exception as e:  # noqa: BLE001 - the error is the outcome compared
        return type(e), str(e).split(".")[0]
    return x.clone()


@pytest.mark.parametrize("name", sorted(_WRITES))
@pytest.mark.parametrize("make", [lambda: (torch.arange(3.0) + 1).expand(2, 3),
                                  lambda: torch.tensor([[1.0], [2.0]]).expand(2, 3)],
                         ids=["rows", "columns"])
def test_inplace_write_into_expanded_matches_eager(name, make):
    expected = _outcome(_WRITES[name], make())

    def traced(x):
        _WRITES[name](x)
        return x
    runs = [primtrace.jit(traced)] + ([_REF_WRITES[name]] if name in _REF_WRITES else [])
    for fn in runs:
        got = _outcome(fn, make())
        if isinstance(expected, tuple):
            assert got == expected
        else:
            assert isinstance(got, torch.Tensor) and torch.equal(got, expected), (got, expected)


def test_masked_fill_on_expanded_warns_as_eager():
    for fn in (lambda x: x.masked_fill_(_MASK, 1.0), lambda x: refs.masked_fill_(x, _MASK, 1.0)):
        with pytest.warns(UserWarning, match="masked_fill_ on expanded tensors is deprecated"):
            fn(torch.zeros(1, 3).expand(2, 3))


def test_index_fill_tensor_value():
    for x in (torch.arange(6.0).view(2, 3), torch.arange(6.0).view(3, 2).t(), torch.tensor(3.0),
              torch.arange(6).view(2, 3)):
        index = torch.tensor([0]) if x.ndim == 0 else torch.tensor([1, -1])
        for dim in ((0, -1) if x.ndim else (0,)):
            for value in (torch.tensor(7.5), torch.tensor(-1), 2):
                expected = x.index_fill(dim, index, value)
                jitted = primtrace.jit(lambda x, v, d=dim: x.index_fill(d, index, v))
                got_jit = jitted(x, value) if torch.is_tensor(value) else primtrace.jit(
                    lambda x, d=dim: x.index_fill(d, index, value))(x)
                for got in (refs.index_fill(x, dim, index, value), got_jit):
                    assert got.dtype == expected.dtype and got.stride() == expected.stride()
                    assert torch.equal(got, expected)
                y, z = x.clone(), x.clone()
                y.index_fill_(dim, index, value)
                refs.index_fill_(z, dim, index, value)
                assert torch.equal(y, z)


# --- 14: empty matmuls and attention -------------------------------------------------------------
def _outcome_of(fn, *args):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(*args)
    except Exception as e:  # noqa: BLE001 - the error kind is the outcome compared
        return type(e)


def _ones(*shape, dtype=torch.float32):
    return torch.ones(*shape, dtype=dtype)


_PRODUCTS = {
    "mm": (torch.mm, refs.mm, lambda b, m, k, n, d1, d2: (_ones(m, k, dtype=d1), _ones(k, n, dtype=d2))),
    "matmul_2d": (torch.matmul, refs.matmul,
                  lambda b, m, k, n, d1, d2: (_ones(m, k, dtype=d1), _ones(k, n, dtype=d2))),
    "matmul_3d": (torch.matmul, refs.matmul,
                  lambda b, m, k, n, d1, d2: (_ones(b, m, k, dtype=d1), _ones(b, k, n, dtype=d2))),
    "matmul_2d_3d": (torch.matmul, refs.matmul,
                     lambda b, m, k, n, d1, d2: (_ones(m, k, dtype=d1), _ones(b, k, n, dtype=d2))),
    "matmul_3d_2d": (torch.matmul, refs.matmul,
                     lambda b, m, k, n, d1, d2: (_ones(b, m, k, dtype=d1), _ones(k, n, dtype=d2))),
    "matmul_3d_1d": (torch.matmul, refs.matmul,
                     lambda b, m, k, n, d1, d2: (_ones(b, m, k, dtype=d1), _ones(k, dtype=d2))),
    "bmm": (torch.bmm, refs.bmm,
            lambda b, m, k, n, d1, d2: (_ones(b, m, k, dtype=d1), _ones(b, k, n, dtype=d2))),
    "addmm": (torch.addmm, refs.addmm, lambda b, m, k, n, d1, d2: (
        _ones(m, n, dtype=d1), _ones(m, k, dtype=d1), _ones(k, n, dtype=d2))),
    "baddbmm": (lambda *a: torch.baddbmm(*a, beta=2), lambda *a: refs.baddbmm(*a, beta=2),
                lambda b, m, k, n, d1, d2: (_ones(b, m, n, dtype=d1), _ones(b, m, k, dtype=d1),
                                            _ones(b, k, n, dtype=d2))),
    "addbmm": (lambda *a: torch.addbmm(*a, beta=2), lambda *a: refs.addbmm(*a, beta=2),
               lambda b, m, k, n, d1, d2: (_ones(m, n, dtype=d1), _ones(b, m, k, dtype=d1),
                                           _ones(b, k, n, dtype=d2))),
    "addbmm_self_like_batch2": (lambda *a: torch.addbmm(*a, beta=2), lambda *a: refs.addbmm(*a, beta=2),
                                lambda b, m, k, n, d1, d2: (_ones(m, n, dtype=d2), _ones(b, m, k, dtype=d1),
                                                            _ones(b, k, n, dtype=d2))),
    "linear": (F.linear, RF.linear,
               lambda b, m, k, n, d1, d2: (_ones(m, k, dtype=d1), _ones(n, k, dtype=d2))),
    "linear_bias": (F.linear, RF.linear, lambda b, m, k, n, d1, d2: (
        _ones(b, m, k, dtype=d1), _ones(n, k, dtype=d1), _ones(n, dtype=d2))),
}


@pytest.mark.parametrize("name", sorted(_PRODUCTS))
def test_empty_products_with_mixed_dtypes_match_eager(name):
    torch_fn, ref_fn, make = _PRODUCTS[name]
    f16, f32, f64, i64 = torch.float16, torch.float32, torch.float64, torch.int64
    jitted = primtrace.jit(torch_fn)
    for sizes in ((2, 2, 3, 4), (0, 2, 3, 4), (2, 0, 3, 4), (2, 2, 0, 4), (2, 2, 3, 0), (0, 0, 0, 0)):
        for d1, d2 in ((f32, f32), (f32, f64), (f16, f32), (i64, f32)):
            args = make(*sizes, d1, d2)
            expected = _outcome_of(torch_fn, *args)
            for got in (_outcome_of(ref_fn, *args), _outcome_of(jitted, *args)):
                if isinstance(expected, type):
                    assert got is expected, (sizes, d1, d2, got)
                else:
                    assert isinstance(got, torch.Tensor), (sizes, d1, d2, got)
                    assert got.dtype == expected.dtype and got.shape == expected.shape
                    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("shapes", [((2, 3, 0), (2, 3, 0), (2, 3, 0)), ((2, 3, 0), (2, 5, 0), (2, 5, 4)),
                                    ((1, 2, 3, 0), (1, 2, 5, 0), (1, 2, 5, 4)),
                                    ((2, 0, 4), (2, 5, 4), (2, 5, 4)), ((2, 3, 4), (2, 0, 4), (2, 0, 4))])
def test_attention_with_empty_dims(shapes):
    g = torch.Generator().manual_seed(14)
    q, k, v = (torch.randn(*s, generator=g) for s in shapes)
    expected = F.scaled_dot_product_attention(q, k, v)
    for got in (RF.scaled_dot_product_attention(q, k, v),
                primtrace.jit(F.scaled_dot_product_attention)(q, k, v)):
        assert got.shape == expected.shape and got.dtype == expected.dtype
        torch.testing.assert_close(got, expected, equal_nan=True)


# --- 16: argument forms eager accepts ----------------------------------------------------------
def _same_result(got, expected):
    if isinstance(expected, (tuple, list)):
        assert type(got) is type(expected) or isinstance(got, tuple), (type(got), type(expected))
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            _same_result(g, e)
        return
    assert got.dtype == expected.dtype and got.shape == expected.shape, (got, expected)
    assert got.stride() == expected.stride() or got.numel() == 0, (got.stride(), expected.stride())
    torch.testing.assert_close(got, expected, equal_nan=True)


_X = torch.arange(12.0).view(3, 4)
_FORMS = [
    # (name, eager call, ref call, args): the ref result must equal eager's; jit runs the eager call
    ("flip_dims_keyword", lambda x: torch.flip(x, dims=(0,)), lambda x: refs.flip(x, dims=(0,)), (_X,)),
    ("flip_dims_keyword_list", lambda x: torch.flip(x, dims=[0, 1]),
     lambda x: refs.flip(x, dims=[0, 1]), (_X,)),
    ("flip_method", lambda x: x.flip(1), lambda x: refs.flip(x, 1), (_X,)),
    ("T", lambda x: x.T, lambda x: refs.T(x), (_X,)),
    ("mT", lambda x: x.mT, lambda x: refs.mT(x), (torch.zeros(2, 3, 4),)),
    ("softmax_dtype", lambda x: torch.softmax(x, 1, dtype=torch.float64),
     lambda x: refs.softmax(x, 1, dtype=torch.float64), (_X,)),
    ("softmax_dtype_positional", lambda x: torch.softmax(x, 1, torch.float64),
     lambda x: refs.softmax(x, 1, torch.float64), (_X,)),
    ("softmax_int_input_dtype", lambda x: torch.softmax(x, 0, dtype=torch.float32),
     lambda x: refs.softmax(x, 0, dtype=torch.float32), (torch.arange(4),)),
    ("log_softmax_dtype", lambda x: torch.log_softmax(x, 1, dtype=torch.float64),
     lambda x: refs.log_softmax(x, 1, dtype=torch.float64), (_X,)),
    ("F_softmax_dtype", lambda x: F.softmax(x, dim=1, dtype=torch.float64),
     lambda x: RF.softmax(x, dim=1, dtype=torch.float64), (_X,)),
    ("special_log_softmax_dtype", lambda x: torch.special.log_softmax(x, 1, dtype=torch.float64),
     lambda x: refs.special.log_softmax(x, 1, dtype=torch.float64), (_X,)),
    ("index_fill_tensor_value", lambda x, v: x.index_fill(1, torch.tensor([1, 3]), v),
     lambda x, v: refs.index_fill(x, 1, torch.tensor([1, 3]), v), (_X, torch.tensor(-1.0))),
    ("matrix_norm_nuc", lambda x: torch.linalg.matrix_norm(x, ord="nuc"),
     lambda x: refs.linalg.matrix_norm(x, ord="nuc"), (_X,)),
    ("matrix_norm_2", lambda x: torch.linalg.matrix_norm(x, ord=2),
     lambda x: refs.linalg.matrix_norm(x, ord=2), (_X,)),
    ("matrix_norm_-2_keepdim_dims", lambda x: torch.linalg.matrix_norm(x, -2, (0, 2), True),
     lambda x: refs.linalg.matrix_norm(x, -2, (0, 2), True), (torch.randn(3, 2, 4),)),
    ("matrix_norm_nuc_float64", lambda x: torch.linalg.matrix_norm(x, "nuc", dtype=torch.float64),
     lambda x: refs.linalg.matrix_norm(x, "nuc", dtype=torch.float64), (_X,)),
    ("matrix_norm_nuc_half", lambda x: torch.linalg.matrix_norm(x, "nuc"),
     lambda x: refs.linalg.matrix_norm(x, "nuc"), (_X.half(),)),
    ("linalg_norm_nuc", lambda x: torch.linalg.norm(x, "nuc"), lambda x: refs.linalg.norm(x, "nuc"), (_X,)),
    ("linalg_norm_2_dim", lambda x: torch.linalg.norm(x, 2, (1, 2)),
     lambda x: refs.linalg.norm(x, 2, (1, 2)), (torch.randn(2, 3, 4),)),
    ("norm_nuc", lambda x: torch.norm(x, p="nuc"), lambda x: refs.norm(x, p="nuc"), (_X,)),
    ("norm_nuc_dim", lambda x: torch.norm(x, p="nuc", dim=(0, 2), keepdim=True),
     lambda x: refs.norm(x, p="nuc", dim=(0, 2), keepdim=True), (torch.randn(3, 2, 4),)),
    ("svdvals", torch.linalg.svdvals, refs.linalg.svdvals, (torch.randn(2, 3, 4, dtype=torch.float64),)),
    ("svdvals_complex", torch.linalg.svdvals, refs.linalg.svdvals, (torch.randn(4, 3, dtype=torch.complex128),)),
    ("svdvals_empty", torch.linalg.svdvals, refs.linalg.svdvals, (torch.randn(2, 0, 3),)),
    ("svd", lambda x: torch.linalg.svd(x), lambda x: refs.linalg.svd(x), (torch.randn(2, 3, 4, dtype=torch.float64),)),
    ("svd_reduced", lambda x: torch.linalg.svd(x, full_matrices=False),
     lambda x: refs.linalg.svd(x, full_matrices=False), (torch.randn(5, 3, dtype=torch.float64).t(),)),
]


def _raised_or_result(fn, args):
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - the error kind is compared
        return type(e)


@pytest.mark.parametrize("name", [row[0] for row in _FORMS])
def test_argument_forms_match_eager(name):
    _, torch_fn, ref_fn, args = next(row for row in _FORMS if row[0] == name)
    expected = _raised_or_result(torch_fn, args)
    for got in (_raised_or_result(ref_fn, args), _raised_or_result(primtrace.jit(torch_fn), args)):
        if isinstance(expected, type):
            assert got is expected, got
        else:
            _same_result(got, expected)


def test_svd_result_is_eagers_named_tuple():
    x = torch.randn(3, 4, dtype=torch.float64)
    for got in (refs.linalg.svd(x), primtrace.jit(torch.linalg.svd)(x)):
        u, s, vh = got.U, got.S, got.Vh
        torch.testing.assert_close(u @ torch.diag(s) @ vh[:3], x)


def test_narrow_with_a_0dim_tensor_start():
    for start in (torch.tensor(1), torch.tensor(-2)):
        for dim in (0, 1):
            expected = torch.narrow(_X, dim, start, 2)
            got = refs.narrow(_X, dim, start, 2)
            _same_result(got, expected)
            assert got._base is _X or got.untyped_storage().data_ptr() == _X.untyped_storage().data_ptr()
    for bad in (torch.tensor(1.0), torch.tensor(True), torch.tensor([1])):
        with pytest.raises(RuntimeError, match="start must be an 0-dim integral Tensor"):
            refs.narrow(_X, 0, bad, 2)
    # traced, an input start's value is read and guarded (test_opinfo_last.py); a computed
    # one is data: a clear data-dependent error (eager reads it with item())
    _same_result(primtrace.jit(lambda x, s: torch.narrow(x, 0, s, 2))(_X, torch.tensor(1)),
                 torch.narrow(_X, 0, torch.tensor(1), 2))
    with pytest.raises(primtrace.tracer.capture.DataDependentError):
        primtrace.jit(lambda x, s: torch.narrow(x, 0, s * 1, 2))(_X, torch.tensor(1))


def test_tensor_split_with_a_tensor_of_indices():
    for indices in (torch.tensor([1, 3]), torch.tensor(2), torch.tensor([], dtype=torch.long),
                    torch.tensor([3, 1, -1])):
        expected = torch.tensor_split(_X, indices, 1)
        _same_result(refs.tensor_split(_X, indices, 1), expected)
    for fn in (torch.hsplit, refs.hsplit):  # its parser takes no tensor
        with pytest.raises(TypeError):
            fn(_X, torch.tensor([1, 3]))
    with pytest.raises(RuntimeError, match="dtype of long"):
        refs.tensor_split(_X, torch.tensor([1.0]), 1)
    with pytest.raises(RuntimeError, match="zero-dimensional or one-dimensional"):
        refs.tensor_split(_X, torch.tensor([[1]]), 1)
    got = primtrace.jit(lambda x, i: torch.tensor_split(x, i, 1))(_X, torch.tensor([1, 3]))
    for g, e in zip(got, torch.tensor_split(_X, torch.tensor([1, 3]), 1), strict=True):
        _same_result(g, e)
    with pytest.raises(primtrace.tracer.capture.DataDependentError):
        primtrace.jit(lambda x, i: torch.tensor_split(x, i + 0, 1))(_X, torch.tensor([1, 3]))


def test_take_along_dim_without_dim_takes_a_multi_dim_index():
    x = torch.arange(12.0).view(3, 4)
    cases = [(x, torch.tensor([[0, 5], [11, 3]])), (x, torch.tensor([[0, 5], [11, 3]]).view(2, 1, 2)),
             (x, torch.tensor(3)), (torch.tensor(2.0), torch.tensor([0, 0])),
             (x[:, ::2], torch.tensor([[0, 1]])),
             (x.t(), torch.tensor([1])), (x, torch.tensor([[0, 5], [11, 3]]).t())]  # eager: view errors
    jitted = primtrace.jit(lambda a, i: torch.take_along_dim(a, i))
    for a, i in cases:
        expected = _raised_or_result(lambda a, i: torch.take_along_dim(a, i), (a, i))
        for got in (_raised_or_result(refs.take_along_dim, (a, i)), _raised_or_result(jitted, (a, i))):
            if isinstance(expected, type):
                assert got is expected
            else:
                _same_result(got, expected)


@pytest.mark.parametrize("op", ["index_add", "index_copy"])
def test_index_add_and_copy_of_0dim_tensors(op):
    selfs = (torch.tensor(5.0), torch.zeros(3), torch.zeros(2, 3))
    sources = (torch.tensor(2.0), torch.tensor([2.0]), torch.tensor([2.0, 3.0]), torch.ones(2, 1),
               torch.ones(2, 3))
    indices = (torch.tensor(0), torch.tensor([0]), torch.tensor([-1]), torch.tensor([0, 0]),
               torch.tensor([2]), torch.tensor([[0]]))
    jitted = primtrace.jit(lambda s, i, src: getattr(s, op)(0, i, src))
    for s, src, i in itertools.product(selfs, sources, indices):
        expected = _raised_or_result(lambda *a: getattr(a[0], op)(0, a[1], a[2]), (s, i, src))
        ref_fn = getattr(refs, op)
        for got in (_raised_or_result(lambda *a: ref_fn(a[0], 0, a[1], a[2]), (s, i, src)),
                    _raised_or_result(jitted, (s, i, src))):
            if isinstance(expected, type):
                assert got is expected, (s.shape, src.shape, i)
            else:
                assert torch.equal(got, expected) and got.shape == expected.shape
    x = torch.tensor(5.0)
    getattr(refs, op + "_")(x, 0, torch.tensor([0]), torch.tensor(2.0))
    assert x.item() == (7.0 if op == "index_add" else 2.0)
