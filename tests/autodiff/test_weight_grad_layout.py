"""A linear layer's weight gradient leaves the backward in the weight's layout, as eager's
does (g^T @ x, not (x^T @ g)^T): autograd then copies no transposed result into the
weight's layout (the copy cost W11's step a transposed 16 MiB copy per weight)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import primtrace


def _grads_as_received(model, x):
    """The gradients each parameter's hook receives (before autograd accumulates them),
    then the accumulated .grad's."""
    seen = {}
    handles = [p.register_hook(lambda g, n=n: seen.setdefault(n, g))
               for n, p in model.named_parameters()]
    try:
        model(x).pow(2).mean().backward()
    finally:
        for h in handles:
            h.remove()
    return seen


@pytest.mark.parametrize("shape", [(6, 8), (2, 3, 8)])
def test_weight_grad_has_the_weights_layout_without_a_copy(shape):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8)).double()
    x = torch.randn(*shape, dtype=torch.float64)
    want = _grads_as_received(model, x)
    eager_grads = {n: p.grad for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    jitted = primtrace.jit(model)
    got = _grads_as_received(jitted, x)
    for n, p in model.named_parameters():
        torch.testing.assert_close(got[n], want[n])
        assert got[n].stride() == want[n].stride() == p.stride(), n
        torch.testing.assert_close(p.grad, eager_grads[n])
        assert p.grad.stride() == eager_grads[n].stride(), n
