"""Conformance of softmax, log_softmax, softmin, layer_norm, rms_norm and the regression
losses (primtrace.refs.nn.softmax_norms, primtrace.refs.nn.losses, exported by
refs.nn.functional) against eager: every dtype (eager's refusals with its error types),
contiguous, transposed, sliced and expanded inputs, 0-dim and empty inputs, NaN/inf, negative
dims, ``dtype=``; tests/tracer/test_jit_conformance.py runs these SPECS through
``primtrace.jit``. Below: the mapping of torch's names, tracing to prims, jit with the
default executors, and eager's gradients through jit.
"""
import warnings

import pytest
import torch
import torch.nn.functional as F

import primtrace
from primtrace.ir.proxy import TensorSpec
from primtrace.ir.trace import Trace, tracing
from primtrace.refs.nn import functional as RF
from primtrace.tracer import mapping
from tests.conformance.harness import (ALL_DTYPES, FLOAT_DTYPES, OpSpec, SampleInput, check_sample,
                                       make_tensor, run_conformance, with_specials)

SOFTMAX_KWARGS = ({"dim": 1}, {"dim": -1}, {"dim": 0}, {"dim": -2},
                  {"dim": 1, "dtype": torch.float64}, {"dim": 0, "dtype": torch.float32},
                  {"dim": -1, "dtype": torch.float16}, {"dim": 1, "dtype": torch.int64},
                  {"dim": 2}, {"dim": 1.0})


def _softmax_samples(spec):
    """3-d inputs (a permuted one), long rows, rows of -inf, a 0-dim input with dim 0/-1."""
    for dtype in FLOAT_DTYPES:
        base = make_tensor((4, 5, 6), dtype, seed=3, domain=(-30.0, 30.0))
        for dim in (0, 1, 2, -1):
            yield SampleInput((base,), {"dim": dim}, f"{dtype} 3-d dim={dim}")
            yield SampleInput((base.permute(2, 0, 1),), {"dim": dim}, f"{dtype} permuted dim={dim}")
        long = make_tensor((2, 1000), dtype, seed=4, domain=(-10.0, 10.0))
        yield SampleInput((long,), {"dim": -1}, f"{dtype} long rows")
        inf = torch.full((2, 3), -float("inf"), dtype=dtype)
        inf[1, 0] = 0
        yield SampleInput((inf,), {"dim": 1}, f"{dtype} -inf rows")
        plus = make_tensor((2, 3), dtype, seed=6)
        plus[0, 1] = float("inf")
        yield SampleInput((plus,), {"dim": 1}, f"{dtype} +inf")
        yield SampleInput((with_specials(make_tensor((3, 4), dtype, seed=2)),), {"dim": 0},
                          f"{dtype} specials dim=0")
        for dim in (0, -1):
            yield SampleInput((make_tensor((), dtype, seed=1),), {"dim": dim}, f"{dtype} 0-dim {dim}")
        yield SampleInput((torch.empty(0, 3, dtype=dtype),), {"dim": 0}, f"{dtype} empty dim 0")
    yield SampleInput((make_tensor((3, 4), torch.int32, seed=1),), {"dim": 1, "dtype": torch.float32},
                      "int32 dtype=float32")
    yield SampleInput((make_tensor((3, 4), torch.bfloat16, seed=1),), {"dim": 1, "dtype": torch.float64},
                      "bfloat16 dtype=float64")


NORM_SHAPES = ((4,), (3, 4), [4], torch.Size([4]), (5,), (), 4)


def _norm_samples(spec, bias=True):
    for dtype in FLOAT_DTYPES:
        x = make_tensor((2, 3, 4), dtype, seed=1)
        w = make_tensor((4,), dtype, seed=2)
        b = make_tensor((4,), dtype, seed=3)
        w2 = make_tensor((3, 4), dtype, seed=4)
        for shape in NORM_SHAPES:
            yield SampleInput((x, shape), {}, f"{dtype} shape={shape}")
        yield SampleInput((x, (4,), w), {}, f"{dtype} weight")
        yield SampleInput((x.transpose(0, 1), (2, 4), make_tensor((2, 4), dtype, seed=5)), {},
                          f"{dtype} transposed weight")
        yield SampleInput((x, (3, 4), w2), {"eps": 1e-2}, f"{dtype} 2 dims weight eps")
        yield SampleInput((x, (4,), w2), {}, f"{dtype} weight of another shape")
        yield SampleInput((x[..., ::2], (2,)), {}, f"{dtype} sliced")
        yield SampleInput((make_tensor((1, 4), dtype, seed=6).expand(3, 4), (4,), w), {},
                          f"{dtype} expanded")
        yield SampleInput((with_specials(make_tensor((3, 4), dtype, seed=7)), (4,)), {},
                          f"{dtype} specials")
        yield SampleInput((torch.full((2, 4), 3.0, dtype=dtype), (4,)), {}, f"{dtype} constant rows")
        yield SampleInput((torch.empty(0, 4, dtype=dtype), (4,), w), {}, f"{dtype} empty")
        yield SampleInput((make_tensor((4,), dtype, seed=8), (4,)), {}, f"{dtype} 1-d")
        yield SampleInput((make_tensor((), dtype, seed=8), (1,)), {}, f"{dtype} 0-dim")
        yield SampleInput((make_tensor((2, 1000), dtype, seed=9, domain=(90.0, 110.0)), (1000,)),
                          {}, f"{dtype} long rows, large mean")
        if bias:
            yield SampleInput((x, (4,), w, b), {}, f"{dtype} weight bias")
            yield SampleInput((x, (4,), None, b), {}, f"{dtype} bias")
            yield SampleInput((x, (4,), w, make_tensor((3,), dtype, seed=3)), {},
                              f"{dtype} bias of another shape")
        if dtype in (torch.float16, torch.bfloat16):  # eager's mixed path: float32 parameters
            yield SampleInput((x, (4,), w.float()) + ((b.float(),) if bias else ()), {},
                              f"{dtype} float32 parameters")
        if dtype is torch.float32:
            yield SampleInput((x, (4,), w.double()), {}, "float32 float64 weight")
    for dtype in (torch.int64, torch.bool) + ((torch.complex64,) if bias else ()):
        yield SampleInput((make_tensor((2, 4), dtype, seed=1), (4,)), {}, f"{dtype} refused")
    yield SampleInput((make_tensor((4,), torch.float32, seed=1), (3, 4)), {}, "too few dims")


def _softmax_spec(name, variants=SOFTMAX_KWARGS, **kw):
    return OpSpec(name, getattr(RF, name), getattr(F, name), supports_out=False,
                  kwargs_variants=variants, extra_samples=_softmax_samples, **kw)


def _norm_spec(name, samples, **kw):
    return OpSpec(name, getattr(RF, name), getattr(F, name), supports_out=False,
                  kwargs_variants=(), extra_samples=samples, **kw)


LOSS_KWARGS = ({}, {"reduction": "sum"}, {"reduction": "none"}, {"reduction": "mean"},
               {"reduction": "bad"})


def _loss_samples(spec):
    for dtype in FLOAT_DTYPES:
        x = make_tensor((4, 5), dtype, seed=1)
        y = make_tensor((4, 5), dtype, seed=2)
        for reduction in ("mean", "sum", "none"):
            kw = {"reduction": reduction}
            yield SampleInput((x, y.t().contiguous().t()), kw, f"{dtype} {reduction}")
            yield SampleInput((x.t(), y.t()), kw, f"{dtype} transposed {reduction}")
            yield SampleInput((x, y[0]), kw, f"{dtype} broadcast target {reduction}")
            yield SampleInput((x[:1], y), kw, f"{dtype} broadcast input {reduction}")
            yield SampleInput((torch.empty(0, 5, dtype=dtype), torch.empty(0, 5, dtype=dtype)), kw,
                              f"{dtype} empty {reduction}")
            yield SampleInput((make_tensor((10000,), dtype, seed=3), make_tensor((10000,), dtype, seed=4)),
                              kw, f"{dtype} long {reduction}")
        yield SampleInput((x, make_tensor((3,), dtype, seed=5)), {}, f"{dtype} not broadcastable")
        yield SampleInput((x, y), {"reduction": "bad"}, f"{dtype} bad reduction")
        yield SampleInput((x, 2.0), {}, f"{dtype} number target")
    x = make_tensor((3, 4), torch.float32, seed=1)
    for other in (torch.float64, torch.float16, torch.bfloat16, torch.int64):
        y = make_tensor((3, 4), other, seed=2)
        yield SampleInput((x, y), {}, f"float32 with {other}")
        yield SampleInput((y, x), {"reduction": "none"}, f"{other} with float32")
    yield SampleInput((make_tensor((3, 4), torch.float16, seed=1), make_tensor((3, 4), torch.bfloat16, seed=2)),
                      {}, "float16 with bfloat16")


REAL_DTYPES = tuple(d for d in ALL_DTYPES if not d.is_complex)  # complex losses: declined


def _loss_spec(name, variants=LOSS_KWARGS, **kw):
    return OpSpec(name, getattr(RF, name), getattr(F, name), arity=2, supports_out=False,
                  kwargs_variants=variants, extra_samples=_loss_samples, dtypes=REAL_DTYPES, **kw)


SPECS = [
    _softmax_spec("softmax"),
    # integer inputs with dtype=float16 have no float64 reference in the harness (it upcasts
    # only float inputs): test_log_softmax_of_integers_in_float16 compares with float64
    _softmax_spec("log_softmax", tuple(k for k in SOFTMAX_KWARGS if k.get("dtype") is not torch.float16)),
    _softmax_spec("softmin"),
    _norm_spec("layer_norm", _norm_samples),
    _norm_spec("rms_norm", lambda spec: _norm_samples(spec, bias=False)),
    _loss_spec("mse_loss"),
    _loss_spec("l1_loss"),
    _loss_spec("smooth_l1_loss", LOSS_KWARGS + ({"beta": 0.5}, {"beta": 0.0}, {"beta": 2},
                                                {"beta": -1.0}, {"reduction": "none", "beta": 0.0})),
    _loss_spec("huber_loss", LOSS_KWARGS + ({"delta": 0.5}, {"delta": 3}, {"delta": 0.0},
                                            {"reduction": "none", "delta": 2.0})),
]
NAMES = [s.name for s in SPECS]


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_conformance(spec):
    run_conformance(spec)


def test_log_softmax_of_integers_in_float16():
    """Eager's float16 log_softmax rounds more than ours: ours is at least as close to the
    float64 result (integers converted to float16 are exact in float64)."""
    for dtype in (torch.int8, torch.int16, torch.uint8, torch.int64):
        for dim in (0, 1, -1):
            x = make_tensor((5, 7), dtype, seed=3)
            exact = F.log_softmax(x.to(torch.float16).double(), dim)
            ours = RF.log_softmax(x, dim, dtype=torch.float16)
            eager = F.log_softmax(x, dim, dtype=torch.float16)
            assert ours.dtype == eager.dtype == torch.float16
            assert ((ours.double() - exact).abs() <= (eager.double() - exact).abs()
                    + 1e-12).all(), (dtype, dim)


def test_torch_names_map_to_the_refs():
    for func, name in ((torch.softmax, "softmax"), (torch.log_softmax, "log_softmax"),
                       (torch.Tensor.softmax, "softmax"), (torch.Tensor.log_softmax, "log_softmax"),
                       *((getattr(F, n), n) for n in NAMES), (torch.layer_norm, "layer_norm"),
                       (torch.rms_norm, "rms_norm")):
        assert mapping.resolve(func).ref is getattr(RF, name), func


def test_torch_softmax_takes_dtype_third():
    x = make_tensor((3, 4), torch.float32, seed=1)
    for fn, ref in ((torch.softmax, RF.softmax), (torch.log_softmax, RF.log_softmax)):
        expected = fn(x, 1, torch.float64)
        got = ref(x, 1, torch.float64)
        assert got.dtype == expected.dtype and torch.allclose(got, expected)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_traces_to_prims(name, dtype):
    x = make_tensor((2, 3), dtype, seed=1)
    args = (x, 1) if "softm" in name else (x, (3,)) if "norm" in name else (x, x.flip(0))
    expected = getattr(F, name)(*args)
    trace = Trace(name)
    proxy = trace.tensor(TensorSpec.of(x))
    proxied = (proxy, *args[1:]) if "loss" not in name else (proxy, trace.tensor(TensorSpec.of(x)))
    with tracing(trace):
        out = getattr(RF, name)(*proxied)
    assert (tuple(out.shape), out.dtype) == (tuple(expected.shape), expected.dtype)
    assert {node.symbol.module for node in trace.flat_nodes()} <= {"prims", "refs",
                                                                   "refs.nn.functional"}


def test_dim_none_is_left_to_torch():
    x = make_tensor((3, 4), torch.float32, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = F.softmax(x)
        got = primtrace.jit(lambda t: F.softmax(t))(x)
    assert torch.equal(got, expected)
    assert RF.softmax.declines(x) and not RF.softmax.declines(x, 1)


def test_broadcasting_warning_as_eager():
    x, y = make_tensor((3, 4), torch.float32, seed=1), make_tensor((4,), torch.float32, seed=2)
    for name in ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"):
        with pytest.warns(UserWarning, match="different to the input size"):
            getattr(RF, name)(x, y)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            getattr(RF, name)(x, x.flip(0))


def test_complex_rms_norm_is_left_to_torch():
    x = make_tensor((2, 4), torch.complex64, seed=1)
    assert RF.rms_norm.declines(x, (4,))
    assert torch.allclose(primtrace.jit(lambda t: F.rms_norm(t, (4,)))(x), F.rms_norm(x, (4,)))


def test_complex_losses_are_left_to_torch():
    x = make_tensor((2, 4), torch.complex64, seed=1)
    y = make_tensor((2, 4), torch.complex64, seed=2)
    for name in ("mse_loss", "huber_loss", "smooth_l1_loss"):
        assert getattr(RF, name).declines(x, y), name
    # l1_loss has a ref for complex: |input - target| is real (test_opinfo_fixes)
    assert not RF.l1_loss.declines(x, y)


def test_legacy_and_weighted_losses_are_left_to_torch():
    x, y = make_tensor((3, 4), torch.float32, seed=1), make_tensor((3, 4), torch.float32, seed=2)
    w = make_tensor((3, 4), torch.float32, seed=3, domain=(0.5, 2.0))
    assert RF.mse_loss.declines(x, y, weight=w) and RF.mse_loss.declines(x, y, size_average=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fn in (lambda a, b: F.mse_loss(a, b, weight=w), lambda a, b: F.l1_loss(a, b, reduce=False),
                   lambda a, b: F.huber_loss(a, b, weight=w)):
            assert torch.allclose(primtrace.jit(fn)(x, y), fn(x, y))


# --- jit with the default executors, and gradients --------------------------------------------
def _program(x, target, w, b):
    h = F.layer_norm(x, (x.shape[-1],), w, b)
    h = F.rms_norm(h, (x.shape[-1],), w)
    p = F.softmax(h, dim=-1) + F.log_softmax(h, -2).exp() + F.softmin(h, 0, dtype=torch.float64).float()
    return (F.mse_loss(p, target) + F.l1_loss(p, target, reduction="sum")
            + F.smooth_l1_loss(p, target, beta=0.5) + F.huber_loss(p, target, delta=0.3)
            + torch.softmax(h, 1).sum() + h.log_softmax(-1).mean())


def _args(dtype):
    return (make_tensor((4, 6), dtype, seed=1), make_tensor((4, 6), dtype, seed=2, domain=(0.0, 1.0)),
            make_tensor((6,), dtype, seed=3), make_tensor((6,), dtype, seed=4))


# one ref each, through the default executors (fusion first)
ONE_EACH = {
    "softmax": lambda x, t, w, b: F.softmax(x, -1) * 2,
    "torch.softmax dim 0": lambda x, t, w, b: torch.softmax(x + 1, 0),
    "Tensor.log_softmax": lambda x, t, w, b: x.log_softmax(-1),
    "softmin dtype": lambda x, t, w, b: F.softmin(x, 0, dtype=torch.float64),
    "layer_norm": lambda x, t, w, b: F.layer_norm(x, (6,), w, b),
    "rms_norm": lambda x, t, w, b: F.rms_norm(x, (6,), w),
    "mse_loss": lambda x, t, w, b: F.mse_loss(x, t),
    "l1_loss sum": lambda x, t, w, b: F.l1_loss(x, t, reduction="sum"),
    "smooth_l1_loss": lambda x, t, w, b: F.smooth_l1_loss(x, t, beta=0.5, reduction="none"),
    "huber_loss": lambda x, t, w, b: F.huber_loss(x, t, delta=0.3),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("name", list(ONE_EACH))
def test_jit_default_executors(name, dtype):
    fn = ONE_EACH[name]
    jfn = primtrace.jit(fn)
    for _ in range(2):  # traced, then cached
        problem = check_sample(jfn, fn, SampleInput(_args(dtype), {}, str(dtype)))
        assert problem is None, problem


@pytest.mark.parametrize("executors", [None, [primtrace.TORCH]], ids=["default", "torch"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_jit_program(dtype, executors):
    jfn = primtrace.jit(_program, executors=executors)
    for _ in range(2):
        problem = check_sample(jfn, _program, SampleInput(_args(dtype), {}, str(dtype)))
        assert problem is None, problem


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gradients_through_jit_are_eagers(dtype):
    def make():
        return [make_tensor((4, 6), dtype, seed=1).requires_grad_(),
                make_tensor((4, 6), dtype, seed=2, domain=(0.0, 1.0)),
                make_tensor((6,), dtype, seed=3).requires_grad_(),
                make_tensor((6,), dtype, seed=4).requires_grad_()]
    ours, eager = make(), make()
    jfn = primtrace.jit(_program)  # default executors: the calls needing autograd run in torch
    loss = jfn(*ours)
    loss.backward()
    expected = _program(*eager)
    expected.backward()
    assert torch.allclose(loss, expected)
    for a, b in zip(ours, eager):
        if b.grad is not None:
            assert torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-6)


def test_default_executors_mse_plus_l1():
    """Two refs whose nested prims repeat (prims.sub(x, t)): once a LoweringError (0c11d28)."""
    x, t = make_tensor((4, 6), torch.float32, seed=1), make_tensor((4, 6), torch.float32, seed=2)

    def fn(a, b):
        return F.mse_loss(a, b) + F.l1_loss(a, b, reduction="sum")
    assert torch.allclose(primtrace.jit(fn)(x, t), fn(x, t))


@pytest.mark.parametrize("value", [20.085536923187668, 7.3, -1e4 / 3])
def test_layer_norm_of_a_constant_row_is_exactly_zero(value):
    """A row of equal values has a zero variance, so rstd is 1/sqrt(eps): the mean must be
    that value exactly, as eager's Welford mean is, or an ulp of it becomes ~1e-3 (found by a
    random program: 6e-4 where eager gives 0). Fused (a residual add before it), alone, and
    prim by prim."""
    x, w = torch.full((3, 6), value), torch.randn(6)
    fused = primtrace.jit(lambda x, w: F.layer_norm(x + 0.0, (6,), w) * 1)
    alone = primtrace.jit(lambda x, w: F.layer_norm(x, (6,), w))
    prims_only = primtrace.jit(lambda x, w: F.layer_norm(x, (6,), w), executors=[])
    assert torch.equal(F.layer_norm(x, (6,), w), torch.zeros(3, 6))
    for jf in (fused, alone, prims_only):
        assert torch.equal(jf(x, w), torch.zeros(3, 6))


def test_exact_means_take_a_batch_known_only_at_run_time():
    """batch_norm's exact mean divides by a count that is a size of the trace (dynamic=True):
    one trace serves every batch, running statistics as eager's."""
    def f(x, w, b, rm, rv):
        return F.batch_norm(x, rm, rv, w, b, training=True)
    jf = primtrace.jit(f, dynamic=True)
    for n in (4, 6, 9):
        x, w, b = torch.full((n, 3, 5), 2.5), torch.randn(3), torch.randn(3)
        ours, eager = (torch.zeros(3), torch.ones(3)), (torch.zeros(3), torch.ones(3))
        torch.testing.assert_close(jf(x, w, b, *ours), f(x, w, b, *eager))
        torch.testing.assert_close(ours, eager)
    assert primtrace.cache_info(jf).misses == 1
