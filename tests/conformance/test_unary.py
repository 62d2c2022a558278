"""Conformance of the unary refs (primtrace.refs.unary) against eager torch."""
import pytest
import torch

from primtrace import refs
from primtrace.ir.proxy import TensorProxy, TensorSpec, is_real_tensor
from primtrace.ir.trace import Trace, tracing
from primtrace.ir.tree import tree_flatten
from primtrace.refs.core import inplace_variant
from primtrace.refs.unary import FLOAT_MATH
from tests.conformance.harness import (ALL_DTYPES, OpSpec, make_tensor, run_conformance,
                                       run_out_conformance)


def spec(name, torch_fn=None, **kw):
    return OpSpec(name, getattr(refs, name), torch_fn or getattr(torch, name), **kw)


DOMAINS = {"erfinv": (-1.2, 1.2), "acosh": (0.5, 5.0), "lgamma": (-3.0, 8.0),
           "digamma": (-3.0, 8.0), "i0": (-20.0, 20.0), "exp": (-20.0, 20.0),
           "sinh": (-12.0, 12.0), "cosh": (-12.0, 12.0)}
ALIASES = ("arcsin", "arccos", "arctan", "arcsinh", "arccosh", "arctanh", "absolute", "negative",
           "fix")
NO_OUT = dict(supports_out=False)

SPECS = [
    *(spec(name, domain=DOMAINS.get(name, (-5.0, 5.0))) for name in FLOAT_MATH),
    *(spec(name) for name in ALIASES),
    spec("abs"), spec("neg"), spec("positive", **NO_OUT), spec("sign"), spec("sgn"),
    spec("signbit"), spec("square"),
    spec("ceil"), spec("floor"), spec("trunc"), spec("frac", domain=(-50.0, 50.0)),
    spec("round", domain=(-50.0, 50.0),
         kwargs_variants=({}, {"decimals": 0}, {"decimals": 2}, {"decimals": -1})),
    spec("isfinite", **NO_OUT), spec("isnan", **NO_OUT), spec("isinf", **NO_OUT),
    spec("isposinf"), spec("isneginf"), spec("isreal", **NO_OUT),
    spec("real", **NO_OUT), spec("imag", **NO_OUT), spec("conj", **NO_OUT), spec("conj_physical"),
    spec("angle"), spec("deg2rad", domain=(-400.0, 400.0)), spec("rad2deg"),
    spec("sinc"),
    spec("logit", domain=(-0.2, 1.2),
         kwargs_variants=({}, {"eps": 1e-6}, {"eps": 0.25}, {"eps": 0.7}, {"eps": -1.0})),
    spec("nan_to_num", kwargs_variants=({}, {"nan": 1.5, "posinf": 100.0, "neginf": -1e6},
                                        {"nan": 3}, {"posinf": 1e6}, {"neginf": 2.0})),
    *(spec("polygamma", fixed_args={0: n}, domain=(-3.0, 6.0)) for n in (0, 1, 2, 3)),
    spec("polygamma", fixed_args={0: -1}),    # eager: RuntimeError, negative n
    spec("polygamma", fixed_args={0: 1.0}),   # eager: TypeError, n must be an int
    *(spec("mvlgamma", fixed_args={1: p}, domain=(0.0, 8.0)) for p in (1, 2, 5)),
    spec("mvlgamma", fixed_args={1: 0}),      # eager: RuntimeError, p < 1
]


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_conformance(spec):
    run_conformance(spec)


@pytest.mark.parametrize("spec", [s for s in SPECS if s.supports_out], ids=str)
def test_out_conformance(spec):
    run_out_conformance(spec)


@pytest.mark.parametrize("name", ["sin", "sqrt", "angle", "deg2rad", "sinc", "mvlgamma"])
def test_integers_follow_the_default_dtype(name):
    args = (torch.tensor([1, 2, 3]),) + ((2,) if name == "mvlgamma" else ())
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        ours, eager = getattr(refs, name)(*args), getattr(torch, name)(*args)
    finally:
        torch.set_default_dtype(previous)
    assert ours.dtype == eager.dtype == torch.float64
    torch.testing.assert_close(ours, eager)


def test_round_without_decimals_copies_integers():
    x = torch.tensor([1, -2, 3])
    for op in (refs.round, refs.ceil, refs.floor, refs.trunc, refs.nan_to_num):
        y = op(x)
        assert torch.equal(y, x) and y.data_ptr() != x.data_ptr()
    assert refs.positive(x) is x and refs.real(x) is x and refs.conj(x) is x


def test_no_out_where_eager_has_none():
    x = torch.tensor([1.0, float("nan")])
    for name in ("isnan", "isfinite", "isinf"):
        with pytest.raises(TypeError):
            getattr(refs, name)(x, out=torch.empty(2, dtype=torch.bool))


def check_traces_like_eager(spec):
    """On proxies a ref reads only metadata: its output's dtype and shape are eager's."""
    checked = 0
    for dtype in ALL_DTYPES:
        tensors = iter([make_tensor((3, 4), dtype, seed=p, domain=spec.domain)
                        for p in range(spec.arity)])
        args = tuple(spec.fixed_args[p] if p in spec.fixed_args else next(tensors)
                     for p in range(spec.arity + len(spec.fixed_args)))
        kwargs = spec.kwargs_variants[-1]
        try:
            expected = spec.torch_fn(*args, **kwargs)
        except Exception:
            continue  # eager's errors are the conformance tests' business
        trace = Trace()
        with tracing(trace):
            proxies = tuple(trace.tensor(TensorSpec.of(a)) if isinstance(a, torch.Tensor) else a
                            for a in args)
            out = spec.ref(*proxies, **kwargs)
        assert isinstance(out, TensorProxy), f"{dtype}: {out!r}"
        assert (out.dtype, tuple(out.shape)) == (expected.dtype, tuple(expected.shape)), dtype
        assert trace.nodes, "nothing was recorded"
        constants = [a for node in trace.flat_nodes()
                     for a in tree_flatten((node.args, node.kwargs)) if is_real_tensor(a)]
        assert not constants, f"{dtype}: tensors computed at trace time: {constants}"
        checked += 1
    if spec.name not in EAGER_ALWAYS_RAISES:
        assert checked > 0


EAGER_ALWAYS_RAISES = {"polygamma", "mvlgamma"}  # the specs with a bad n or p


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_traces_like_eager(spec):
    check_traces_like_eager(spec)


# In-place: refs.abs_ and refs.polygamma_ are written out; the tracer makes the others with
# inplace_variant (which must then be right for these refs: eager's cast rules on write-back).
def _inplace(name, *args):
    variant = getattr(refs, name + "_", None) or inplace_variant(getattr(refs, name))
    return OpSpec(name + "_", lambda x, **k: variant(x.clone(), *args, **k),
                  lambda x, **k: getattr(x.clone(), name + "_")(*args, **k), supports_out=False)


INPLACE_SPECS = [
    _inplace("abs"), _inplace("absolute"), _inplace("polygamma", 1), _inplace("mvlgamma", 2),
    *(_inplace(name) for name in ("sin", "sqrt", "neg", "sign", "sgn", "square", "ceil", "frac",
                                  "conj_physical", "deg2rad", "sinc", "logit", "nan_to_num")),
    OpSpec("round_", lambda x: inplace_variant(refs.round)(x.clone(), decimals=1),
           lambda x: x.clone().round_(decimals=1), supports_out=False),
]


@pytest.mark.parametrize("spec", INPLACE_SPECS, ids=str)
def test_inplace_conformance(spec):
    run_conformance(spec)
