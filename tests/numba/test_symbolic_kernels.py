"""Fused kernels over symbolic sizes (automatic dynamic dims, symbolic_sizes.py): one trace
and one kernel serve every size of a dim; each call's values, strides and grads are eager's."""
import warnings

import pytest
import torch
import torch.nn.functional as F

import primtrace
from primtrace.executors.numba import NumbaFusionExecutor

SIZES = (5, 1, 7, 300, 2, 1500)


def _fused_names(jfn):
    return [n.symbol.name for n in primtrace.last_trace(jfn).nodes if n.symbol.kind == "fused"]


def _jit(fn, cost_model):
    return primtrace.jit(fn, executors=[NumbaFusionExecutor(cost_model=cost_model)],
                         dynamic=True)


@pytest.mark.parametrize("cost_model", [False, True])
@pytest.mark.parametrize("name,fn,inputs", [
    ("elementwise", lambda x, b: F.gelu(x + b) * 2 - x,
     lambda n: (torch.randn(n, 64), torch.randn(64))),
    ("layer_norm", lambda x, r, w, b: F.gelu(F.layer_norm(x + r, (32,), w, b)),
     lambda n: (torch.randn(n, 4, 32), torch.randn(n, 4, 32), torch.randn(32), torch.randn(32))),
    ("softmax", lambda x: torch.softmax(x * 0.5, -1) + 1,
     lambda n: (torch.randn(n, 3, 40),)),
    ("half", lambda x, y: (x * 2 + y).sigmoid(),
     lambda n: (torch.randn(n, 16).bfloat16(), torch.randn(n, 16).bfloat16())),
    ("transposed input", lambda x: x.exp() + 1,
     lambda n: (torch.randn(16, n).t(),)),
])
def test_one_trace_serves_every_size(name, fn, inputs, cost_model):
    jfn = _jit(fn, cost_model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in SIZES:
            args = inputs(n)
            got, expected = jfn(*args), fn(*args)
            torch.testing.assert_close(got, expected)
            assert got.stride() == expected.stride()
    assert len(jfn._dynamic.entries) == 1
    if not cost_model and name != "transposed input":
        assert _fused_names(jfn), primtrace.last_trace(jfn)


def test_a_training_step_over_symbolic_batch_sizes():
    lin = torch.nn.Linear(32, 32)

    def fn(x, w, b):
        return F.gelu(F.layer_norm(lin(x), (32,), w, b)).sum(-1)

    jfn = _jit(fn, False)
    for n in SIZES:
        x, w, b = torch.randn(n, 32), torch.randn(32), torch.randn(32)
        leaves = [t.clone().requires_grad_() for t in (x, w, b)]
        eager = [t.clone().requires_grad_() for t in (x, w, b)]
        jfn(*leaves).square().mean().backward()
        fn(*eager).square().mean().backward()
        for a, e in zip(leaves, eager):
            torch.testing.assert_close(a.grad, e.grad, rtol=1e-4, atol=1e-5)


def test_a_size_broadcast_at_its_hint_stays_with_torch():
    """y's rows are 1 at the traced call and broadcast against x's: no kernel relies on it
    (a guard decides), and later calls with both sizes equal get eager's values."""
    fn = lambda x, y: x * y + 1   # noqa: E731
    jfn = _jit(fn, False)
    for n, m in ((4, 1), (3, 1), (5, 5), (6, 6)):
        x, y = torch.randn(n, 8), torch.randn(m, 8)
        torch.testing.assert_close(jfn(x, y), fn(x, y))
