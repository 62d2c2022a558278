"""Training where the fusion executor fuses nothing (on a GPU, the cost model leaves small
and reducing prims to torch): jit runs the calls the code made with torch's autograd, not
their prims one torch call each (W13's step on an H200 was 3.4x eager before)."""
import torch
import torch.nn.functional as F

import primtrace
from primtrace.executors.numba import NumbaFusionExecutor


class FusesNothing(NumbaFusionExecutor):
    def can_fuse(self, node):
        return False


def _step(fn, inputs):
    leaves = [t.clone().requires_grad_() for t in inputs]
    out = fn(*leaves)
    out.pow(2).mean().backward()
    return out, [t.grad for t in leaves]


def test_nothing_fused_runs_the_calls_with_torchs_autograd():
    def fn(x, w, b):
        return F.gelu(F.layer_norm(x * 2, (8,), w, b))

    inputs = [torch.randn(5, 8), torch.randn(8), torch.randn(8)]
    jfn = primtrace.jit(fn, executors=[FusesNothing()])
    for _ in range(2):
        got, grads = _step(jfn, inputs)
    expected, expected_grads = _step(fn, inputs)
    torch.testing.assert_close(got, expected)
    for g, e in zip(grads, expected_grads):
        torch.testing.assert_close(g, e)
    traces = primtrace.last_traces(jfn)
    assert any(t.tags.get("unfused_training") for t in traces)
    calls = [n.symbol.name for n in primtrace.last_trace(jfn).nodes]
    assert "layer_norm" in calls and "gelu" in calls, calls
    assert "backward" not in primtrace.last_trace(jfn).tags


def test_a_fused_region_keeps_the_fused_backward():
    def fn(x, w, b):
        return F.gelu(F.layer_norm(x * 2, (64,), w, b))

    inputs = [torch.randn(64, 64), torch.randn(64), torch.randn(64)]
    jfn = primtrace.jit(fn, executors=[NumbaFusionExecutor(cost_model=False)])
    _step(jfn, inputs)
    assert "backward" in primtrace.last_trace(jfn).tags
    assert not any(t.tags.get("unfused_training") for t in primtrace.last_traces(jfn))
