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


# --- random chains ---------------------------------------------------------------------------
_UNARY = ["torch.sin({})", "torch.exp({}).clamp(max=50)", "F.gelu({})", "torch.tanh({})",
          "({}).abs()", "({}) * 3 - 1", "torch.sigmoid({})", "F.silu({})"]
_BINARY = ["({}) + ({})", "({}) * ({})", "torch.maximum({}, {})", "torch.where(({}) > 0, {}, 0.5)"]
_ROWS = ["torch.softmax({}, -1)", "F.layer_norm({}, ({}.shape[-1],))",
         "(({}) - ({}).mean(-1, keepdim=True))", "torch.log_softmax({}, -1)"]


def _chain(rng):
    lines, last = ["def f(x, y, w):"], "x"
    for i in range(rng.randint(2, 5)):
        kind = rng.random()
        if kind < 0.4:
            expr = rng.choice(_UNARY).format(last)
        elif kind < 0.75:
            expr = rng.choice(_BINARY).format(last, rng.choice(["y", "w", "x", last]))
        else:
            form = rng.choice(_ROWS)
            expr = form.format(*[last] * form.count("{}"))
        lines.append(f"    v{i} = {expr}")
        last = f"v{i}"
    lines.append(f"    return {last}, v0")
    return "\n".join(lines)


@pytest.mark.parametrize("seed", range(12))
def test_random_chains_over_symbolic_sizes(seed):
    """Random elementwise and row chains, one symbolic trace over batch sizes 3, 1, 6, 40:
    each call's outputs are the static trace's bit for bit (the same kernel, sizes read at
    run time), and in float32/float64 conform to eager's (the float64 rule of the
    conformance harness)."""
    import random

    from tests.conformance.harness import compare_outputs
    rng = random.Random(seed)
    src = _chain(rng)
    env = {"torch": torch, "F": F}
    exec(src, env)
    fn = env["f"]
    dtype = rng.choice([torch.float32, torch.float64, torch.bfloat16])
    rows_of_y = rng.choice([1, 3])
    symbolic = _jit(fn, False)
    static = primtrace.jit(fn, executors=[NumbaFusionExecutor(cost_model=False)], dynamic=False)
    for n in (3, 1, 6, 40):
        g = torch.Generator().manual_seed(n)
        args = [torch.randn(n, 3, 8, generator=g).to(dtype),
                torch.randn(n, rows_of_y, 8, generator=g).to(dtype),
                torch.randn(8, generator=g).to(dtype)]
        got = symbolic(*args)
        for a, b in zip(got, static(*args)):
            assert torch.equal(a.nan_to_num(), b.nan_to_num()), src
        if dtype is not torch.bfloat16:
            problem = compare_outputs(got, fn(*args), lambda: fn(*[a.double() for a in args]))
            assert problem is None, f"{problem}\n{src}"
    assert len(symbolic._dynamic.entries) == 1
