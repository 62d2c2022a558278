"""Attention in training as ``prims.sdpa_flash`` (torch's fused CPU kernel, saving its output
and log-sum-exp) and ``prims.sdpa_flash_backward``: the rule by the dot-product identity in
float64, and jitted training steps equal to eager's bit for bit (the same kernels), also when
an ``sdpa_kernel`` context makes eager pick another kernel after the trace was made."""
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import primtrace
from primtrace import prims
from primtrace.ir.strides import dense_strides
from primtrace.prims.differentiation import vjp


def _rand(*shape, dtype=torch.float64, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@pytest.mark.parametrize("is_causal", [False, True])
def test_rule_by_the_dot_product_identity(is_causal):
    q, k, v = (_rand(2, 3, 5, 4, seed=s) for s in range(3))
    strides = dense_strides((2, 3, 5, 4))
    u = [_rand(2, 3, 5, 4, seed=10 + s) for s in range(3)]   # tangents of q, k, v
    g = _rand(2, 3, 5, 4, seed=20)

    def out(q, k, v):
        return prims.sdpa_flash.impl(q, k, v, is_causal, None, strides)[0]
    eps = 1e-6
    ju = (out(*[x + eps * t for x, t in zip((q, k, v), u)])
          - out(*[x - eps * t for x, t in zip((q, k, v), u)])) / (2 * eps)
    y = prims.sdpa_flash.impl(q, k, v, is_causal, None, strides)
    grads = vjp(prims.sdpa_flash, (g, None), y, (q, k, v, is_causal, None, strides), {})
    lhs = float((g * ju).sum())
    rhs = sum(float((t * gr).sum()) for t, gr in zip(u, grads[:3]))
    assert abs(lhs - rhs) <= 1e-6 * abs(lhs)


def _step(fn, q, k, v, g):
    out = fn(q, k, v)
    return out, torch.autograd.grad(out, (q, k, v), g)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("is_causal", [False, True])
def test_training_equals_eager_bit_for_bit(dtype, is_causal):
    q = _rand(2, 16, 3, 8, dtype=dtype, seed=1).transpose(1, 2).requires_grad_()  # (B, H, L, D) view
    k, v = (_rand(2, 3, 16, 8, dtype=dtype, seed=s).requires_grad_() for s in (2, 3))
    g = _rand(2, 16, 3, 8, dtype=dtype, seed=4)

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=0.3).transpose(1, 2) * 2

    jitted = primtrace.jit(f, executors=[primtrace.TORCH])
    expected, got = _step(f, q, k, v, g), _step(jitted, q, k, v, g)
    assert torch.equal(got[0], expected[0])
    assert all(torch.equal(a, b) for a, b in zip(got[1], expected[1]))
    forward = primtrace.last_trace(jitted)
    names = {n.symbol.name for n in forward.nodes} | {
        n.symbol.name for n in forward.tags["backward"][-1].nodes}
    assert {"sdpa_flash", "sdpa_flash_backward"} <= names and "library_vjp" not in names


@pytest.mark.parametrize("forward_in, backward_in", [
    (SDPBackend.MATH, SDPBackend.MATH), (SDPBackend.FLASH_ATTENTION, SDPBackend.FLASH_ATTENTION),
    (SDPBackend.MATH, SDPBackend.FLASH_ATTENTION), (None, SDPBackend.MATH)])
def test_the_backward_follows_the_forwards_kernel(forward_in, backward_in):
    """An sdpa_kernel context that makes eager pick another kernel after the trace was made,
    around the forward, the backward or both: eager's autograd differentiates the kernel its
    forward ran, and so does primtrace."""
    q, k, v = (_rand(2, 3, 16, 8, dtype=torch.float32, seed=s).requires_grad_() for s in range(3))
    g = _rand(2, 3, 16, 8, dtype=torch.float32, seed=5)

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).sin()

    jitted = primtrace.jit(f, executors=[primtrace.TORCH])
    _step(jitted, q, k, v, g)   # traced with the fused kernel
    results = []
    for fn in (f, jitted):
        with sdpa_kernel(forward_in) if forward_in else torch.enable_grad():
            out = fn(q, k, v)
        with sdpa_kernel(backward_in):
            results.append((out, torch.autograd.grad(out, (q, k, v), g)))
    (expected, expected_grads), (got, grads) = results
    assert torch.equal(got, expected)
    assert all(torch.equal(a, b) for a, b in zip(grads, expected_grads))
