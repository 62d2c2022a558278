"""The random refs (refs.random) and the dropouts in training against eager.

Same numbers as eager under one seed (``torch.manual_seed``), on the CPU: rand, randn, rand_like,
randn_like, normal (numbers and tensors), bernoulli(input, p), the in-place fills uniform_,
normal_, bernoulli_, exponential_, cauchy_, geometric_, log_normal_ on dense tensors, and
dropout, alpha_dropout, feature_alpha_dropout and feature_dropout in training, called
directly and through ``primtrace.jit``. Distributions are also checked by their sample
mean and variance, and shapes, dtypes and devices by eager's.
"""
import math

import pytest
import torch
import torch.nn.functional as F

import primtrace
from primtrace import refs
from primtrace.refs.nn import functional as RF


def _same_draws(ours, eager, seed=7):
    torch.manual_seed(seed)
    a = ours()
    torch.manual_seed(seed)
    b = eager()
    return a, b


FACTORIES = {
    "rand": (lambda: refs.rand(4, 40), lambda: torch.rand(4, 40)),
    "rand float64": (lambda: refs.rand((3, 5), dtype=torch.float64), lambda: torch.rand((3, 5), dtype=torch.float64)),
    "randn": (lambda: refs.randn(40, 3), lambda: torch.randn(40, 3)),
    "randn float16": (lambda: refs.randn(5, dtype=torch.float16), lambda: torch.randn(5, dtype=torch.float16)),
    "randn complex64": (lambda: refs.randn(64, dtype=torch.complex64), lambda: torch.randn(64, dtype=torch.complex64)),
    "randn 0-d": (lambda: refs.randn(()), lambda: torch.randn(())),
    "rand_like transposed": (lambda: refs.rand_like(torch.empty(40, 5).t()), lambda: torch.rand_like(torch.empty(40, 5).t())),
    "randn_like bfloat16": (lambda: refs.randn_like(torch.empty(6, 7, dtype=torch.bfloat16)),
                            lambda: torch.randn_like(torch.empty(6, 7, dtype=torch.bfloat16))),
    "normal numbers": (lambda: refs.normal(2.0, 3.0, (50,)), lambda: torch.normal(2.0, 3.0, (50,))),
    "normal tensors": (lambda: refs.normal(torch.arange(20.0), torch.ones(3, 20)),
                       lambda: torch.normal(torch.arange(20.0), torch.ones(3, 20))),
    "normal tensor mean": (lambda: refs.normal(torch.zeros(30), 2.0), lambda: torch.normal(torch.zeros(30), 2.0)),
    "bernoulli p": (lambda: refs.bernoulli(torch.empty(40, 5).t(), 0.3), lambda: torch.bernoulli(torch.empty(40, 5).t(), 0.3)),
}


@pytest.mark.parametrize("name", list(FACTORIES))
def test_factories_draw_eagers_numbers(name):
    ours, eager = FACTORIES[name]
    a, b = _same_draws(ours, eager)
    assert (a.shape, a.dtype, a.device, a.stride()) == (b.shape, b.dtype, b.device, b.stride())
    assert torch.equal(a, b)


FILLS = [("uniform_", (2.0, 5.0)), ("normal_", (1.0, 2.0)), ("normal_", ()), ("bernoulli_", (0.3,)),
         ("exponential_", (2.0,)), ("cauchy_", ()), ("geometric_", (0.3,)), ("log_normal_", (0.0, 0.5))]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("name,args", FILLS, ids=[f"{n}{a}" for n, a in FILLS])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_fills_draw_eagers_numbers(name, args, layout, dtype):
    base = torch.zeros(5, 40, dtype=dtype)
    base = base.t() if layout == "transposed" else base
    ours, eager = base.clone(), base.clone()
    a, b = _same_draws(lambda: getattr(refs, name)(ours, *args), lambda: getattr(eager, name)(*args))
    assert a is ours and torch.equal(ours, eager)


STATISTICS = [  # (draw 20000 values, expected mean, expected variance)
    (lambda: refs.rand(20000), 0.5, 1 / 12),
    (lambda: refs.randn(20000), 0.0, 1.0),
    (lambda: refs.normal(2.0, 3.0, (20000,)), 2.0, 9.0),
    (lambda: refs.uniform_(torch.empty(20000), -1.0, 3.0), 1.0, 16 / 12),
    (lambda: refs.bernoulli_(torch.empty(20000), 0.3), 0.3, 0.21),
    (lambda: refs.exponential_(torch.empty(20000), 2.0), 0.5, 0.25),
    (lambda: refs.geometric_(torch.empty(20000), 0.5), 2.0, 2.0),
    (lambda: refs.log_normal_(torch.empty(20000), 0.0, 0.25), math.exp(0.03125),
     (math.exp(0.0625) - 1) * math.exp(0.0625)),
]


@pytest.mark.parametrize("case", range(len(STATISTICS)))
def test_distributions(case):
    draw, mean, var = STATISTICS[case]
    torch.manual_seed(case)
    x = draw().double()
    assert abs(x.mean().item() - mean) < 4 * math.sqrt(var / x.numel()) + 1e-9
    assert abs(x.var().item() - var) < 0.06 * var


def test_cauchy_median():
    torch.manual_seed(0)
    x = refs.cauchy_(torch.empty(20000), 1.0, 2.0)
    assert abs(x.median().item() - 1.0) < 0.1
    assert abs((x - 1).abs().median().item() - 2.0) < 0.15


def test_generator_and_probability_tensors_are_left_to_torch():
    g = torch.Generator().manual_seed(0)
    assert refs.rand.declines(3, generator=g)
    assert refs.bernoulli.declines(torch.rand(3))
    jfn = primtrace.jit(lambda p: torch.bernoulli(p) + torch.rand(3, generator=g))
    assert jfn(torch.full((3,), 1.0)).shape == (3,)


DROPOUTS = {
    "dropout": (lambda x: RF.dropout(x, 0.3), lambda x: F.dropout(x, 0.3)),
    "dropout inplace": (lambda x: RF.dropout(x.clone(), 0.3, inplace=True),
                        lambda x: F.dropout(x.clone(), 0.3, inplace=True)),
    "alpha_dropout": (lambda x: RF.alpha_dropout(x, 0.2, True), lambda x: F.alpha_dropout(x, 0.2, True)),
    "feature_alpha_dropout": (lambda x: RF.feature_alpha_dropout(x, 0.4, True),
                              lambda x: F.feature_alpha_dropout(x, 0.4, True)),
    "dropout2d": (lambda x: refs.feature_dropout(x, 0.5, True), lambda x: F.dropout2d(x, 0.5)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(DROPOUTS))
def test_dropouts_in_training_draw_eagers_mask(name, dtype):
    ours, eager = DROPOUTS[name]
    x = torch.randn(4, 6, 5, dtype=dtype).transpose(0, 2)
    a, b = _same_draws(lambda: ours(x), lambda: eager(x))
    assert a.dtype == b.dtype and torch.equal(a, b)
    jfn = primtrace.jit(eager)
    for _ in range(2):  # traced, then cached: each call draws anew
        a, b = _same_draws(lambda: jfn(x), lambda: eager(x), seed=11)
        assert torch.equal(a, b)


def test_dropout_statistics():
    torch.manual_seed(0)
    x = torch.ones(20000)
    y = RF.dropout(x, 0.25)
    kept = (y != 0).double().mean().item()
    assert abs(kept - 0.75) < 0.02 and torch.all((y == 0) | (y == 1 / 0.75))
    z = RF.alpha_dropout(torch.randn(20000), 0.25, True)  # SELU statistics kept
    assert abs(z.mean().item()) < 0.05 and abs(z.var().item() - 1.0) < 0.06


def test_eval_dropout_returns_input_itself():
    x = torch.randn(3)
    assert RF.dropout(x, 0.5, training=False) is x
    assert RF.alpha_dropout(x, 0.5) is x


def test_jit_random_factories_draw_per_call():
    jfn = primtrace.jit(lambda x: x + torch.rand(3, 4) + torch.randn_like(x))
    x = torch.zeros(3, 4)
    a, b = _same_draws(lambda: jfn(x), lambda: x + torch.rand(3, 4) + torch.randn_like(x))
    assert torch.equal(a, b)
    assert not torch.equal(jfn(x), jfn(x))
    trace = primtrace.trace(lambda x: x + torch.rand(3, 4), stage="prims")(x)
    assert {"uniform", "add"} <= {n.symbol.name for n in trace.flat_nodes()}


@pytest.mark.parametrize("name, kwargs", [("exponential", {}), ("cauchy", {"median": 1.0}),
                                          ("geometric", {"p": 0.3}), ("log_normal", {"std": 0.5})])
def test_functional_fills_draw_what_the_in_place_method_draws(name, kwargs):
    """PyTorch's reference list has functional cauchy, exponential...: a new tensor like the
    input, of the draws Tensor.<name>_ would write (the input is not touched)."""
    x = torch.randn(3, 4).t()
    before = x.clone()
    torch.manual_seed(7)
    expected = getattr(torch.Tensor, name + "_")(x.clone(), **kwargs)
    torch.manual_seed(7)
    got = getattr(refs, name)(x, **kwargs)
    assert torch.equal(got, expected) and got.stride() == expected.stride()
    assert torch.equal(x, before)


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sdpa_dropout_draws_eagers_mask(is_causal, dtype):
    """scaled_dot_product_attention with dropout_p on the CPU is eager's math path: the weights
    dropped with F.dropout's draws (values to rounding: eager scales q and k, the ref the
    scores), directly and through jit (where the same torch calls run: exact)."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=g, dtype=dtype) for _ in range(3))
    fn = lambda q, k, v: F.scaled_dot_product_attention(  # noqa: E731
        q, k, v, dropout_p=0.3, is_causal=is_causal)
    ours, eager = _same_draws(lambda: RF.scaled_dot_product_attention(
        q, k, v, dropout_p=0.3, is_causal=is_causal), lambda: fn(q, k, v))
    torch.testing.assert_close(ours, eager)
    jfn = primtrace.jit(fn)
    jfn(q, k, v)
    jitted, eager = _same_draws(lambda: jfn(q, k, v), lambda: fn(q, k, v))
    torch.testing.assert_close(jitted, eager)
    assert primtrace.explain(fn, q, k, v).opaque == []
