"""Conformance of the reduction refs (primtrace.refs.reductions) against eager torch.

Each spec runs the harness's samples (every dtype; contiguous, transposed, sliced and
expanded (3, 4) inputs; 0-dim; empty (0, 3); NaN/inf and integer extremes) under each
`dim`/`keepdim`/`dtype=` variant; eager's errors (a dim out of range for the 0-dim sample,
amax over the empty dim) must be raised with the same type. tests/tracer/test_jit_conformance.py
runs the same specs through ``primtrace.jit``.
"""
import warnings

import pytest
import torch

import primtrace
from primtrace import prims, refs
from primtrace.executors.numba import NumbaFusionExecutor
from primtrace.ir.proxy import TensorSpec
from primtrace.ir.trace import Trace, tracing
from tests.conformance.harness import (ALL_DTYPES, OpSpec, SampleInput, check_sample,
                                       make_tensor, run_conformance, with_specials)

DIMS = ({}, {"dim": 1}, {"dim": -1}, {"dim": 0, "keepdim": True}, {"dim": (0, 1)},
        {"dim": (-1, 0), "keepdim": True}, {"dim": None}, {"dim": None, "keepdim": True},
        {"dim": ()}, {"dim": [1]}, {"dim": (0, 0)}, {"dim": 2}, {"dim": 1.0})
SUM_DTYPES = ({"dtype": torch.float64}, {"dtype": torch.int32}, {"dtype": torch.float16},
              {"dim": 1, "dtype": torch.int64}, {"dim": 0, "keepdim": True, "dtype": torch.bool},
              {"dtype": torch.complex64})
MEAN_DTYPES = ({"dtype": torch.float64}, {"dtype": torch.float32}, {"dim": 1, "dtype": torch.float16},
               {"dtype": torch.int64}, {"dtype": torch.complex128}, {"dtype": torch.bfloat16})
PROD_DIMS = ({}, {"dim": 1}, {"dim": -2}, {"dim": 0, "keepdim": True}, {"dim": -1, "keepdim": True},
             {"dim": 2}, {"dim": (0,)}, {"dim": None}, {"dtype": torch.float64},
             {"dim": 1, "dtype": torch.int16}, {"dtype": torch.float32})
LOGICAL_DIMS = DIMS
COUNT_DIMS = ({}, {"dim": 1}, {"dim": -1}, {"dim": (0, 1)}, {"dim": ()}, {"dim": None},
              {"dim": (1, -1)}, {"dim": 2}, {"dim": 0, "keepdim": True})
VAR_DIMS = ({}, {"dim": 1}, {"dim": -1, "keepdim": True}, {"dim": (0, 1)}, {"dim": None},
            {"dim": ()}, {"dim": 1, "correction": 0}, {"dim": 0, "correction": 2.5},
            {"dim": 1, "unbiased": False}, {"unbiased": False}, {"dim": 0, "correction": 5},
            {"dim": 1, "unbiased": True, "correction": 0}, {"dim": 2}, {"dim": (1, 1)})


def spec(name, variants, **kw):
    return OpSpec(name, getattr(refs, name), getattr(torch, name), supports_out=False,
                  kwargs_variants=variants, **kw)


def _bigger_samples(spec):
    """3-d inputs (a permuted one), a long float sum, and an empty input of 3 dims."""
    for dtype in (torch.float32, torch.float64, torch.int32, torch.bool, torch.bfloat16):
        base = make_tensor((4, 5, 6), dtype, seed=3)
        for kwargs in ({"dim": (0, 2)}, {"dim": 1, "keepdim": True}, {"dim": -1}, {}):
            yield SampleInput((base,), dict(kwargs), f"{dtype} 3-d {kwargs}")
            yield SampleInput((base.permute(2, 0, 1),), dict(kwargs), f"{dtype} 3-d permuted {kwargs}")
    empty = torch.empty(2, 0, 3)
    for kwargs in ({"dim": 1}, {"dim": (0, 2)}, {"dim": 2, "keepdim": True}):
        yield SampleInput((empty,), dict(kwargs), f"empty 3-d {kwargs}")
    long = make_tensor((100_000,), torch.float32, seed=5, domain=(0.0, 1.0))
    yield SampleInput((long,), {}, "float32 long")
    yield SampleInput((with_specials(make_tensor((3, 4), torch.float32, seed=2)),),
                      {"dim": 1}, "float32 specials dim=1")


SPECS = [
    spec("sum", DIMS + SUM_DTYPES, extra_samples=_bigger_samples),
    spec("mean", DIMS + MEAN_DTYPES, extra_samples=_bigger_samples),
    spec("prod", PROD_DIMS, domain=(-2.0, 2.0)),
    spec("amax", DIMS, extra_samples=_bigger_samples),
    spec("amin", DIMS, extra_samples=_bigger_samples),
    spec("all", LOGICAL_DIMS, extra_samples=_bigger_samples),
    spec("any", LOGICAL_DIMS, extra_samples=_bigger_samples),
    spec("count_nonzero", COUNT_DIMS, extra_samples=_bigger_samples),
    *(spec(name, VAR_DIMS, extra_samples=_bigger_samples)
      for name in ("var", "std", "var_mean", "std_mean")),
]


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_conformance(spec):
    run_conformance(spec)


METHODS = [("sum", (1,), {"keepdim": True}), ("mean", (-1,), {}), ("prod", (0,), {}),
           ("amax", ((0, 1),), {}), ("amin", (), {}), ("all", (), {}), ("any", (1,), {}),
           ("count_nonzero", (), {"dim": 0}), ("sum", (), {"dtype": torch.float64}),
           ("var", (1,), {}), ("std", (), {"correction": 0})]


@pytest.mark.parametrize("name,args,kwargs", METHODS, ids=[m[0] for m in METHODS])
def test_methods_through_jit_record_prims(name, args, kwargs):
    """x.<name>(...) under primtrace.jit with the default executors: eager's result, and the
    trace holds the ref and its reduction prim, no opaque call."""
    x = make_tensor((3, 4), torch.float32, seed=1)

    def f(x):
        return getattr(x * 2, name)(*args, **kwargs)
    jf = primtrace.jit(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error", primtrace.OpaqueOpWarning)
        got = jf(x)
    assert check_sample(jf, f, SampleInput((x,), {}, name)) is None
    expected = f(x)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    acquisition = primtrace.last_traces(jf)[0]
    assert [n.symbol.kind for n in acquisition.nodes] == ["ref", "ref"]
    recorded = [n.symbol.name for n in acquisition.flat_nodes() if n.symbol.kind == "prim"]
    assert {"sum", "prod", "amax", "amin", "var"} & set(recorded), recorded


def test_reduction_prims_fuse_only_over_trailing_dims():
    """The Numba executor's row kernels take reductions over the last dims (with their
    elementwise neighbours), and float sums over the leading dims (column sums); others run
    in torch."""
    fusion = NumbaFusionExecutor(cost_model=False)
    for op, dim, fusible in ((refs.sum, 1, True), (refs.sum, 0, True), (refs.amax, 1, True),
                             (refs.amax, 0, False), (refs.prod, 0, False)):
        trace = Trace()
        with tracing(trace):
            x = trace.tensor(TensorSpec.of(torch.ones(3, 4)))
            op(refs.exp(x), dim)
        names = {n.symbol.name: fusion.can_fuse(n) for n in trace.flat_nodes()}
        assert names == {"exp": True, op.__name__: fusible}, names
    for name in ("sum", "prod", "amax", "amin", "var"):
        assert "elementwise" not in getattr(prims, name).tags


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name", ["var", "std", "var_mean", "std_mean"])
def test_var_positional_unbiased(name):
    x = make_tensor((3, 4), torch.float32, seed=6)
    for args in ((False,), (True,), (1, False), (1, True, True), ((0, 1), False, True)):
        sample = SampleInput((x, *args), {}, f"{name}{args}")
        assert check_sample(getattr(refs, name), getattr(torch, name), sample) is None, args
        assert check_sample(primtrace.jit(getattr(torch, name)), getattr(torch, name), sample) is None


def test_jit_sum_and_mean_keep_grads():
    x = make_tensor((4, 5), torch.float32, seed=4).requires_grad_()
    x2 = x.detach().clone().requires_grad_()

    def f(x):
        return ((x.sum(0) * x.mean(-1, keepdim=True)).square().mean() + x.amax() - x.prod(1).sum()
            + x.var(1).sum() + x.std())
    jf = primtrace.jit(f)
    jf(x).backward()
    f(x2).backward()
    torch.testing.assert_close(x.grad, x2.grad)


def test_prims_contract():
    x = torch.arange(6.0).reshape(2, 3)
    assert torch.equal(prims.sum(x, (1,)), x.sum(1))
    assert torch.equal(prims.sum(x, ()), x)
    assert prims.sum(x.int(), (0, 1)).dtype is torch.int32  # no promotion in the prim
    assert torch.equal(prims.prod(torch.arange(1.0, 25).reshape(2, 3, 4), (0, 2)),
                       torch.arange(1.0, 25).reshape(2, 3, 4).prod(2).prod(0))
    torch.testing.assert_close(prims.var(x, (1,), correction=0), x.var(1, correction=0))
    assert prims.var(x.cfloat(), (0,), correction=1).dtype is torch.float32
    for bad in ((1, 0), (0, 0), (2,), [0], (-1,)):
        with pytest.raises(prims.PrimContractError):
            prims.sum(x, bad)
    with pytest.raises(IndexError):
        prims.amax(torch.empty(0, 3), (0,))
    with pytest.raises(NotImplementedError):
        prims.amin(x.cfloat(), (0,))
    trace = Trace()
    with tracing(trace):
        p = trace.tensor(TensorSpec.of(x.t()))
        y = prims.amax(p, (0,))
    assert tuple(y.shape) == (2,) and y.stride() == (1,) and y.dtype is torch.float32


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_trace_metadata_is_eagers(dtype):
    """On proxies the refs give eager's dtype and shape."""
    x = make_tensor((3, 4), dtype, seed=0)
    for name, kwargs in (("sum", {"dim": 1, "keepdim": True}), ("prod", {}), ("mean", {"dim": 0}),
                         ("amax", {"dim": -1}), ("all", {"dim": 0}), ("any", {}),
                         ("count_nonzero", {"dim": 1})):
        try:
            expected = getattr(torch, name)(x, **kwargs)
        except Exception:
            continue
        trace = Trace()
        with tracing(trace):
            out = getattr(refs, name)(trace.tensor(TensorSpec.of(x)), **kwargs)
        assert (out.dtype, tuple(out.shape)) == (expected.dtype, tuple(expected.shape)), name


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_default_executors_conform(spec):
    """Every 7th sample through jit with the default executors (Numba fusion first: it fuses
    the elementwise prims around the reductions, which torch runs)."""
    from tests.conformance.harness import samples
    jfn = primtrace.jit(spec.torch_fn)
    failures = []
    for sample in list(samples(spec))[::7]:
        problem = check_sample(jfn, spec.torch_fn, sample, spec.rtol_scale)
        if problem:
            failures.append(f"[{sample.desc}] {problem}")
    assert not failures, "\n".join(failures[:5])
