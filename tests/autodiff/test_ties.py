"""Gradients at ties and special values against eager autograd (issue 19).

A ref's prims may differentiate otherwise than eager does at a tie (relu at 0 is maximum's
tie, whose rule splits it in halves; eager's relu gives 0), at NaN and at infinities. Each
ref here goes through its prims trace, the backward trace and the torch executor
(``through_prims``) on inputs holding exact ties (x == a bound, 0, -0.0), NaN, +-inf and
bounds min > max, in float32 and float64, and its gradients must equal eager's:

- exactly (every value, NaN where eager has NaN) for the refs whose eager gradient is g, a
  constant times g, or 0 (``EXACT``);
- for the others, exactly where eager's gradient is 0, NaN or infinite, and close elsewhere
  (the chain rule through the prims rounds differently from eager's fused backward kernels:
  silu, elu, softplus), ``SMOOTH``.

Eager runs on stride-2 views: TensorIterator's scalar loop, the C++ op as written (the
project's convention, tests/numba/special_values.py); a few SIMD loops differ at NaN.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tests.autodiff.test_backward_trace import _floating, through_prims

pytestmark = pytest.mark.filterwarnings("ignore::primtrace.OpaqueOpWarning")

DTYPES = [torch.float32, torch.float64]
CLOSE = {torch.float32: 1e-6, torch.float64: 1e-14}   # absolute, where eager's is not 0 or inf
INF, NAN = math.inf, math.nan


def special(dtype, *extra):
    """Ties of every ref below (0, -0.0, +-1, +-3, 6, 20, the lambdas 0.5 and 1, the
    thresholds), the floats next to +-3, NaN and +-inf."""
    values = [-INF, -7.0, -6.0, -3.0, -2.0, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0, 3.0, 6.0, 7.0,
              20.0, 21.0, INF, NAN, 1e-30, -1e-30, *extra]
    x = torch.tensor(values, dtype=dtype)
    near = torch.tensor([3.0, -3.0], dtype=dtype)
    return torch.cat([x, torch.nextafter(near, torch.zeros_like(near))])


def partner(x):
    """A second operand with ties, NaN against numbers and numbers against NaN."""
    y = x.flip(0).clone()
    y[::3] = x[::3]
    return y


def strided(t):
    """`t` as a view with stride 2: eager's kernels then take TensorIterator's scalar loop,
    the C++ op as written (their SIMD loops differ at NaN for a few: elu's backward gives
    NaN where the scalar loop gives g * scale, so the gradient depends on the size)."""
    return torch.stack([t, t], -1)[..., 0] if t.ndim else t


def eager_gradients(fn, args, cotangents):
    leaves = [a.detach().clone().requires_grad_() if _floating(a) else a for a in args]
    out = fn(*[strided(leaf) if _floating(leaf) else leaf for leaf in leaves])
    flat = list(out) if isinstance(out, tuple) else [out]
    pairs = [(o, c) for o, c in zip(flat, cotangents) if _floating(o) and o.requires_grad]
    wanted = [leaf for leaf in leaves if _floating(leaf)]
    grads = torch.autograd.grad([o for o, _ in pairs], wanted, [c for _, c in pairs],
                                allow_unused=True)
    return flat, [g if g is not None else torch.zeros_like(w) for g, w in zip(grads, wanted)]


def assert_same_values(got, want, exact, what):
    """NaN, infinities and zeros where `want` has them; equal elsewhere (within a few ulps
    unless `exact`)."""
    assert got.shape == want.shape and got.dtype == want.dtype, what
    assert torch.equal(got.isnan(), want.isnan()), f"{what}: NaN at {got}, eager {want}"
    special = want.isinf() | (want == 0)
    assert torch.equal(got[special], want[special]), f"{what}: {got} != eager {want}"
    if exact:
        assert torch.equal(got.nan_to_num(), want.nan_to_num()), f"{what}: {got} != eager {want}"
    else:
        # the tails lose digits to cancellation, against cotangents ~1: elu's expm1' =
        # expm1(x) + 1 where eager's backward takes exp(x), gelu's 1 + tanh
        torch.testing.assert_close(got, want, rtol=2048 * torch.finfo(want.dtype).eps,
                                   atol=CLOSE[want.dtype], equal_nan=True, msg=what)


def check(fn, *args, exact=True):
    flat, cotangents, grads, _ = through_prims(fn, *args)
    expected_flat, expected = eager_gradients(fn, args, cotangents)
    for got, want in zip(flat, expected_flat):   # the forward (the sign of a zero aside:
        if _floating(want):                      # softshrink's -0.0 is eager's 0.0)
            assert_same_values(got, want.detach(), exact, "the result")
    grads = [g if g is not None else torch.zeros_like(w) for g, w in zip(grads, expected)]
    assert len(grads) == len(expected)
    for i, (got, want) in enumerate(zip(grads, expected)):
        assert_same_values(got, want, exact, f"gradient of argument {i}")


def clamp_bounds(x):
    """Tensor bounds: ties with x, NaN, min > max, min == max."""
    n = x.numel()
    low = torch.full_like(x, -1.0)
    high = torch.full_like(x, 2.0)
    low[::4], high[1::4] = x[::4], x[1::4]              # x == min, x == max
    low[2::7], high[3::7] = NAN, NAN
    low[5::6], high[5::6] = 2.0, -1.0                    # min > max
    high[6::9] = low[6::9]                               # min == max
    assert low.shape == (n,)
    return low, high


# --- the refs: (name, fn, arguments from x) ----------------------------------------------------
def _unary(fn):
    return lambda x: (fn, (x,))


EXACT = {
    "relu": _unary(F.relu), "torch.relu": _unary(torch.relu), "relu6": _unary(F.relu6),
    "hardtanh": _unary(F.hardtanh), "hardtanh(-2, 3)": _unary(lambda x: F.hardtanh(x, -2.0, 3.0)),
    "hardtanh(0.5, 0.5)": _unary(lambda x: F.hardtanh(x, 0.5, 0.5)),
    "clamp(-1, 2)": _unary(lambda x: torch.clamp(x, -1, 2)),
    "clamp(2, -1)": _unary(lambda x: torch.clamp(x, 2, -1)),
    "clamp(2, 2)": _unary(lambda x: torch.clamp(x, 2.0, 2.0)),
    "clamp(min=0)": _unary(lambda x: torch.clamp(x, min=0)),
    "clamp(min=-0.0)": _unary(lambda x: torch.clamp(x, min=-0.0)),
    "clamp(max=0)": _unary(lambda x: x.clamp(max=0.0)),
    "clamp(max=inf)": _unary(lambda x: torch.clamp(x, max=INF)),
    "clamp(min=nan)": _unary(lambda x: torch.clamp(x, min=NAN)),
    "clamp_min": _unary(lambda x: torch.clamp_min(x, 1.0)),
    "clamp_max": _unary(lambda x: torch.clamp_max(x, -1.0)),
    "clip": _unary(lambda x: x.clip(-3, 3)),
    "clamp(tensors)": lambda x: (torch.clamp, (x, *clamp_bounds(x))),
    "clamp(min=tensor)": lambda x: (lambda x, m: torch.clamp(x, min=m), (x, clamp_bounds(x)[0])),
    "clamp(max=tensor)": lambda x: (lambda x, m: torch.clamp(x, max=m), (x, clamp_bounds(x)[1])),
    "clamp_min(tensor)": lambda x: (torch.clamp_min, (x, partner(x))),
    "clamp_max(tensor)": lambda x: (torch.clamp_max, (x, partner(x))),
    "clamp(0-dim tensors)": lambda x: (torch.clamp, (x, x.new_tensor(-1.0), x.new_tensor(2.0))),
    "clamp(broadcast)": lambda x: (torch.clamp, (x.view(1, -1).expand(3, -1),
                                                 x.new_tensor([[-1.0], [0.0], [NAN]]), x[:1])),
    "hardsigmoid": _unary(F.hardsigmoid), "hardswish": _unary(F.hardswish),
    "leaky_relu": _unary(F.leaky_relu), "leaky_relu(-2)": _unary(lambda x: F.leaky_relu(x, -2.0)),
    "rrelu(eval)": _unary(F.rrelu),
    "threshold(1, 5)": _unary(lambda x: F.threshold(x, 1.0, 5.0)),
    "softshrink": _unary(F.softshrink), "softshrink(1)": _unary(lambda x: F.softshrink(x, 1.0)),
    "hardshrink": _unary(F.hardshrink), "hardshrink(1)": _unary(lambda x: F.hardshrink(x, 1.0)),
    "abs": _unary(torch.abs), "sgn": _unary(torch.sgn), "nan_to_num": _unary(torch.nan_to_num),
    "where": lambda x: (lambda x, y: torch.where(x > 0, x, y), (x, partner(x))),
    "maximum": lambda x: (torch.maximum, (x, partner(x))),
    "minimum": lambda x: (torch.minimum, (x, partner(x))),
    "max(x, y)": lambda x: (torch.max, (x, partner(x))),
    "min(x, y)": lambda x: (torch.min, (x, partner(x))),
    "fmax": lambda x: (torch.fmax, (x, partner(x))),
    "fmin": lambda x: (torch.fmin, (x, partner(x))),
    "margin_ranking_loss": lambda x: (lambda a, b: F.margin_ranking_loss(
        a, b, torch.ones_like(a), reduction="none"), (x, partner(x))),
    "hinge_embedding_loss": lambda x: (lambda a: F.hinge_embedding_loss(
        a, -torch.ones_like(a), reduction="none"), (x,)),
    "angle": _unary(torch.angle),
}

SMOOTH = {
    "elu": _unary(F.elu), "elu(2)": _unary(lambda x: F.elu(x, 2.0)),
    "celu(0.5)": _unary(lambda x: F.celu(x, 0.5)), "selu": _unary(F.selu),
    "softplus": _unary(F.softplus), "softplus(2, 2)": _unary(lambda x: F.softplus(x, 2, 2)),
    "logsigmoid": _unary(F.logsigmoid), "silu": _unary(F.silu), "mish": _unary(F.mish),
    "gelu": _unary(F.gelu), "gelu(tanh)": _unary(lambda x: F.gelu(x, approximate="tanh")),
    "sinc": _unary(torch.sinc), "logit": _unary(torch.logit),
    "logit(eps)": _unary(lambda x: torch.logit(x, eps=0.25)),
    "atan2": lambda x: (torch.atan2, (x, partner(x))),
    "smooth_l1_loss": lambda x: (lambda a, b: F.smooth_l1_loss(a, b, reduction="none"),
                                 (x, partner(x))),
    "huber_loss": lambda x: (lambda a, b: F.huber_loss(a, b, reduction="none", delta=2.0),
                             (x, partner(x))),
    "glu": lambda x: (lambda a, b: F.glu(torch.stack([a, b]), 0), (x, partner(x))),
}


def _rows(x):
    """Rows with ties, zeros of both signs, NaN and infinities, for the reductions."""
    rows = torch.tensor([[3.0, 4.0, 4.0, 0.0], [1.0, NAN, 2.0, NAN], [0.0, -0.0, 0.0, -0.0],
                         [INF, 1.0, INF, 0.0], [-2.0, 2.0, 1.0, -2.0], [0.0, 0.0, 0.0, 0.0]],
                        dtype=x.dtype)
    return rows


REDUCTIONS = {
    "amax": lambda m: m.amax(1), "amin": lambda m: m.amin(0),
    "max(dim)": lambda m: m.max(1).values, "min(dim)": lambda m: m.min(0).values,
    "max(dim, keepdim)": lambda m: m.max(1, keepdim=True).values,
    "max()": lambda m: m.max(), "min()": lambda m: m.min(), "max() without NaN": lambda m: m[2:].max(),
    "vector_norm(inf)": lambda m: torch.linalg.vector_norm(m, INF, 1),
    "vector_norm(-inf)": lambda m: torch.linalg.vector_norm(m, -INF, 1),
    "vector_norm(inf, all)": lambda m: torch.linalg.vector_norm(m[2:], INF),
    "matrix_norm(inf)": lambda m: torch.linalg.matrix_norm(m.view(2, 3, 4)[:, :, :3], INF),
}
SMOOTH_REDUCTIONS = {
    "vector_norm(2)": lambda m: torch.linalg.vector_norm(m, 2, 1),
    "vector_norm(3)": lambda m: torch.linalg.vector_norm(m.abs(), 3, 1),
    "cosine_similarity": lambda m: F.cosine_similarity(m, m.flip(0), dim=1),
    "logsumexp": lambda m: torch.logsumexp(m, 1),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(EXACT))
def test_piecewise_linear_refs_match_eager_exactly(name, dtype):
    fn, args = EXACT[name](special(dtype))
    check(fn, *args)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(SMOOTH))
def test_smooth_refs_match_eager_at_their_special_values(name, dtype):
    fn, args = SMOOTH[name](special(dtype, 0.25, 0.75))
    check(fn, *args, exact=False)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reductions_share_or_pick_as_eager(name, dtype):
    check(REDUCTIONS[name], _rows(torch.empty(0, dtype=dtype)))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(SMOOTH_REDUCTIONS))
def test_norms_at_zero_match_eager(name, dtype):
    rows = _rows(torch.empty(0, dtype=dtype))
    rows = rows[[0, 2, 4, 5]]          # finite rows, zero rows among them
    check(SMOOTH_REDUCTIONS[name], rows, exact=False)


def test_clamp_gradient_to_its_bounds():
    """Eager's clamp_backward_min_max, written out: x where min <= x <= max; min where
    x < min < max; max where x > max or max < min; none of them at NaN."""
    x = torch.tensor([0.0, 1.0, 1.5, 2.0, 3.0, 0.0, 3.0, 1.0, 1.0, 3.0, NAN, 1.0, 1.0],
                     dtype=torch.float64)
    low = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 1.0, NAN, NAN, 1.0, 2.0, 1.0],
                       dtype=torch.float64)
    high = torch.tensor([2.0, 2.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, NAN],
                        dtype=torch.float64)
    _, (g,), (gx, glow, ghigh), _ = through_prims(torch.clamp, x, low, high)
    want_x = [0, 1, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0]
    want_low = [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]    # not at x < min == max (index 11)
    want_high = [0, 0, 0, 0, 1, 1, 1, 0, 0, 1, 0, 0, 0]
    for got, want in ((gx, want_x), (glow, want_low), (ghigh, want_high)):
        assert torch.equal(got, torch.where(torch.tensor(want, dtype=torch.bool), g, 0.0))
