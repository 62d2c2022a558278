"""+-0 ties of maximum/minimum: the first operand, at every size, in every path.

TensorIterator's SIMD loop returns the second operand of torch.maximum/minimum on a tie, its
scalar loop the first, so eager's sign of zero depended on the tensor's size. prims keep
the first operand (the fused kernels' rule), so refs on real tensors, the torch executor
and the Numba kernels agree, and clamp/relu keep the input's zero as torch.clamp does.
"""
from __future__ import annotations

import math

import pytest
import torch

import primtrace
from primtrace import prims, refs

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
SIZES = [1, 7, 64, 1000]   # 64 and 1000 take TensorIterator's SIMD loop


def _zeros(n, dtype, sign):
    return torch.full((n,), -0.0 if sign else 0.0, dtype=dtype)


def _bits_equal(a, b):
    return torch.equal(a.signbit(), b.signbit()) and torch.equal(a.isnan(), b.isnan()) and \
        bool(((a == b) | a.isnan()).all())


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("n", SIZES)
def test_ties_give_the_first_operand(dtype, n):
    neg, pos = _zeros(n, dtype, True), _zeros(n, dtype, False)
    for prim in (prims.maximum, prims.minimum):
        assert prim(neg, pos).signbit().all() and not prim(pos, neg).signbit().any()


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("n", SIZES)
def test_clamp_and_relu_keep_the_input_zero_like_torch(dtype, n):
    x = torch.tensor([-0.0, 0.0] * (n // 2 + 1), dtype=dtype)[:n]
    calls = [(refs.clamp, torch.clamp, dict(min=0.0)), (refs.clamp, torch.clamp, dict(max=-0.0)),
             (refs.clamp, torch.clamp, dict(min=-0.0, max=0.0)),
             (refs.clamp_min, torch.clamp_min, dict(min=0.0)),
             (refs.clamp_max, torch.clamp_max, dict(max=0.0)),
             (refs.nn.functional.relu, torch.relu, {}),
             (refs.nn.functional.hardtanh, torch.nn.functional.hardtanh,
              dict(min_val=0.0, max_val=0.0))]
    for ours, theirs, kw in calls:
        got, expected = ours(x, **kw), theirs(x, **kw)
        assert _bits_equal(got, expected), (ours, kw, got[:4], expected[:4])


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_nan_of_either_operand_propagates_and_values_match(name):
    v = [math.nan, 1.0, math.nan, -math.inf, math.inf, 2.0, -3.0, 5.0]
    w = [1.0, math.nan, math.nan, math.inf, -math.inf, 2.0, 4.0, -5.0]
    for dtype in FLOATS:
        a, b = torch.tensor(v, dtype=dtype), torch.tensor(w, dtype=dtype)
        prim, eager = getattr(prims, name), getattr(torch, name)
        assert _bits_equal(prim(a, b).abs(), eager(a, b).abs())
        assert _bits_equal(prim(b, a).abs(), eager(b, a).abs())
    ints = torch.tensor([-3, 0, 7]), torch.tensor([2, 0, -9])
    assert torch.equal(getattr(prims, name)(*ints), getattr(torch, name)(*ints))


def test_maximum_stays_differentiable():
    """The gradient of a tie goes to the first operand, as torch.clamp's goes to the input."""
    x = torch.tensor([-1.0, 0.0, 2.0], requires_grad=True)
    y = torch.tensor([0.0, 0.0, 1.0], requires_grad=True)
    prims.maximum(x, y).sum().backward()
    assert x.grad.tolist() == [0.0, 1.0, 1.0] and y.grad.tolist() == [1.0, 0.0, 0.0]
    x.grad = None
    refs.clamp(x, min=0.0).sum().backward()
    z = x.detach().clone().requires_grad_()
    torch.clamp(z, min=0.0).sum().backward()
    assert torch.equal(x.grad, z.grad)


@pytest.mark.parametrize("n", [7, 64])
def test_torch_executor_and_fused_kernels_agree_with_torch_clamp(n):
    from primtrace.executors.numba import NumbaFusionExecutor
    x = torch.tensor([-0.0, 0.0] * n)

    def f(t):
        return torch.clamp(t, min=0.0), torch.clamp(t, max=-0.0), torch.relu(t)
    expected = f(x)
    for executors in ([primtrace.TORCH], [NumbaFusionExecutor()]):
        for got, want in zip(primtrace.jit(f, executors=executors)(x), expected):
            assert _bits_equal(got, want), executors
