"""Gradients through jit: outputs require grad exactly when eager's do, gradients are
eager's (ties included: relu at exactly 0), grad mode switches inside the traced code are
replayed, and forward and backward fuse (tests/autodiff/test_jit_training.py has more)."""
import warnings

import pytest
import torch
import torch.nn.functional as F

import primtrace


def _numba_first():
    from primtrace.executors.numba import NumbaFusionExecutor
    return [NumbaFusionExecutor(), primtrace.TORCH]


@pytest.fixture(params=["torch", "numba"])
def executors(request):
    return [primtrace.TORCH] if request.param == "torch" else _numba_first()


def _grads(fn, *args):
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    out = fn(*args)
    outs = out if isinstance(out, tuple) else (out,)
    losses = [(o.float() * (i + 1)).sum() for i, o in enumerate(outs) if o.requires_grad]
    return outs, torch.autograd.grad(sum(losses), leaves) if leaves and losses else ()


def test_outputs_require_grad_like_eager_and_grads_are_eagers(executors):
    def f(x, w, b):
        h = torch.relu(x @ w + b)          # relu at exactly 0: eager's gradient is 0 there
        return h * torch.sigmoid(h), (h > 0), h.detach() + 1
    x = torch.randn(4, 3)
    x[0] = 0.0
    w = torch.randn(3, 5, requires_grad=True)
    b = torch.zeros(5, requires_grad=True)
    jf = primtrace.jit(f, executors=executors)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (got, got_grads), (exp, exp_grads) = _grads(jf, x, w, b), _grads(f, x, w, b)
    assert [o.requires_grad for o in got] == [o.requires_grad for o in exp] == [True, False, False]
    for g, e in zip((*got, *got_grads), (*exp, *exp_grads)):
        torch.testing.assert_close(g, e)   # fused kernels may round differently


def test_forward_and_backward_fuse():
    def f(x, w):
        mask = (x.abs() > 0.5) & (x < 2)     # no grad: fusible
        return torch.where(mask, torch.sin(x) * w, 0.0)
    x, w = torch.randn(64), torch.randn(64, requires_grad=True)
    jf = primtrace.jit(f, executors=_numba_first())
    got = jf(x, w)
    torch.testing.assert_close(got, f(x, w))   # the fused sin may round differently
    assert got.requires_grad
    execution = primtrace.last_trace(jf)
    fused = [n for n in execution.nodes if n.symbol.kind == "fused"]
    assert fused and {s.symbol.name for n in fused for s in n.subnodes} >= {"abs", "gt", "lt",
                                                                             "sin", "mul"}
    backward = execution.tags["backward"][-1]
    assert any(n.symbol.kind == "fused" for n in backward.nodes)
    (gw,) = torch.autograd.grad(got.sum(), w)
    torch.testing.assert_close(gw, torch.where((x.abs() > 0.5) & (x < 2), x.sin(), 0.0))
    with torch.no_grad():            # inference: everything fuses
        jf(x, w)
    assert all(n.symbol.kind == "fused" for n in primtrace.last_trace(jf).nodes)


def test_grad_mode_switches_inside_the_function_are_replayed(executors):
    def f(x):
        y = x * 2
        with torch.no_grad():
            z = y * 3                  # does not require grad in eager
            with torch.enable_grad():
                u = y * 4              # does
        return y, z, u
    x = torch.randn(3, requires_grad=True)
    jf = primtrace.jit(f, executors=executors)
    got, exp = jf(x), f(x)
    assert [t.requires_grad for t in got] == [t.requires_grad for t in exp] == [True, False, True]
    assert torch.is_grad_enabled()
    with torch.no_grad():
        got, exp = jf(x), f(x)
    assert [t.requires_grad for t in got] == [t.requires_grad for t in exp] == [False] * 3
    with torch.no_grad():
        jf = primtrace.jit(lambda x: _enable_grad_mul(x), executors=executors)
        got, exp = jf(x), _enable_grad_mul(x)
    assert got.requires_grad and exp.requires_grad


def _enable_grad_mul(x):
    with torch.enable_grad():
        return x * 4


def test_inplace_updates_under_no_grad_keep_the_parameter_a_leaf_that_requires_grad(executors):
    def sgd(p, g, lr):
        with torch.no_grad():
            p.sub_(g * lr)
    p, g = torch.randn(5, requires_grad=True), torch.randn(5)
    q = p.detach().clone().requires_grad_()
    primtrace.jit(sgd, executors=executors)(p, g, 0.1)
    sgd(q, g, 0.1)
    assert p.requires_grad and p.is_leaf
    torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_opaque_outputs_get_the_layout_the_trace_assumed():
    """sdpa on transposed views: the meta kernel returns a contiguous (B, H, T, D) tensor, the
    CPU kernel a (B, T, H, D)-ordered one; the fused copy that follows used to read the
    wrong elements (off by 1.9)."""
    def f(q, k, v):
        q, k, v = (t.view(2, 32, 4, 32).transpose(1, 2) for t in (q, k, v))
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).contiguous() * 2
    args = [torch.randn(2, 32, 128) for _ in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jf = primtrace.jit(f, executors=_numba_first())
        got = jf(*args)
    torch.testing.assert_close(got, f(*args))
    assert "stride()" in primtrace.last_trace(jf).tags["python"]


def test_a_call_that_returns_its_input_unchanged_does_not_replace_the_op_before_it(executors):
    def f(x, w):
        y = torch.sin(x * w)
        return y.float() * 2, y.to(torch.float32)     # float32 already: no node of their own
    x, w = torch.randn(5), torch.randn(5, requires_grad=True)
    (got, got_grads), (exp, exp_grads) = _grads(primtrace.jit(f, executors=executors), x, w), \
        _grads(f, x, w)
    for g, e in zip((*got, *got_grads), (*exp, *exp_grads)):
        torch.testing.assert_close(g, e)
