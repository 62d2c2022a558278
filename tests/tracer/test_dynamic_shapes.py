"""Automatic dynamic dims (primtrace/tracer/dynamic.py, primtrace/ir/size_guards.py).

A call that differs from a cached entry only in some dims' sizes traces once more with those
dims symbolic; later sizes reuse that trace while its guards hold. Every value is compared
with eager on every call; every guard a symbolic size adds is violated once, to show the call
compiles again instead of running a trace whose assumption fails.
"""
import os
import random
import sys

import warnings

import pytest
import torch

import primtrace

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))


def misses(jf) -> int:
    return primtrace.cache_info(jf).misses


def reasons(jf) -> list[str]:
    return [str(r) for r in primtrace.cache_info(jf).recompiles]


def run(jf, fn, *args, **tol):
    torch.testing.assert_close(jf(*args), fn(*args), **tol)


def symbolic(jf) -> bool:
    """Whether the last compile traced some input dim symbolic."""
    return any(n.symbol.name == "dim_size" for n in primtrace.last_traces(jf)[1].nodes)


# --- which dims, when ------------------------------------------------------------------------
def chain(x, y):
    return ((x * 2 + y).sin() - y.exp()).relu().sum(-1)


def test_static_first_symbolic_on_the_second_size():
    jf = primtrace.jit(chain)
    y = torch.randn(6)
    for n in (3, 3, 5, 1, 9, 2, 16, 3):
        run(jf, chain, torch.randn(n, 6), y)
    assert misses(jf) == 2 and symbolic(jf)
    assert primtrace.cache_info(jf).hits == 6


def test_dynamic_true_is_symbolic_from_the_first_call_and_false_never():
    jt = primtrace.jit(chain, dynamic=True)
    jn = primtrace.jit(chain, dynamic=False)
    y = torch.randn(6)
    for n in (4, 7, 1, 12):
        x = torch.randn(n, 6)
        run(jt, chain, x, y)
        run(jn, chain, x, y)
    assert misses(jt) == 1 and symbolic(jt)
    assert misses(jn) == 4 and not symbolic(jn)
    with pytest.raises(ValueError, match="dynamic"):
        primtrace.jit(chain, dynamic="yes")


@pytest.mark.parametrize("mark", ["primtrace", "dynamo"])
def test_mark_dynamic(mark):
    jf = primtrace.jit(chain)
    x = torch.randn(5, 6)
    if mark == "primtrace":
        primtrace.mark_dynamic(x, 0)
    else:
        torch._dynamo.mark_dynamic(x, 0)
    y = torch.randn(6)
    run(jf, chain, x, y)
    assert symbolic(jf)
    for n in (2, 8):
        run(jf, chain, torch.randn(n, 6), y)
    assert misses(jf) == 1


def test_size_zero_stays_specialized():
    jf = primtrace.jit(chain, dynamic=True)
    y = torch.randn(6)
    for n in (4, 0, 6, 0):
        run(jf, chain, torch.randn(n, 6), y)
    assert misses(jf) == 2


def test_only_sizes_differ_or_no_dynamic_trace():
    """Another dtype, rank or a non-contiguous layout is another trace, as before."""
    jf = primtrace.jit(chain)
    y = torch.randn(6)
    run(jf, chain, torch.randn(3, 6), y)
    run(jf, chain, torch.randn(4, 6).double(), y.double())
    run(jf, chain, torch.randn(6, 5).t(), y)
    assert misses(jf) == 3 and not symbolic(jf)


def test_an_inner_dim_is_static_unless_marked():
    """Automatic symbolic dims are outermost ones (a reduction over an inner symbolic dim
    would not fuse); a marked inner dim is symbolic (the outer strides become size
    polynomials) from size 2: size 1 stays specialized (its stride is free)."""
    def f(x):
        return x.sum(0) + x[1]
    jf, jm = primtrace.jit(f), primtrace.jit(f)
    for n in (3, 4, 5, 9, 1, 7):
        x = torch.randn(2, n)
        torch.testing.assert_close(jf(x), f(x))
        torch.testing.assert_close(jm(primtrace.mark_dynamic(x.clone(), 1)), f(x))
    assert misses(jf) == 6 and misses(jm) == 2


# --- programs --------------------------------------------------------------------------------
def test_mlp_over_batch_sizes():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8),
                              torch.nn.LayerNorm(8)).eval()
    jm = primtrace.jit(mlp)
    with torch.no_grad():
        for b in (4, 9, 1, 13, 2, 32):
            run(jm, mlp, torch.randn(b, 16))
    assert misses(jm) == 2 and symbolic(jm)


def test_gpt_block_over_batch_sizes():
    """W19 in small: examples/gpt.py's block over batch sizes 1..16 in random order."""
    from gpt import Block, Config
    torch.manual_seed(0)
    block = Block(Config(vocab=1, context=16, heads=2, width=32)).eval()
    jb = primtrace.jit(block)
    order = random.Random(0).choices(range(1, 17), k=24)
    with torch.no_grad():
        for b in order:
            run(jb, block, torch.randn(b, 16, 32), rtol=1e-4, atol=1e-5)
    assert misses(jb) <= 2 and symbolic(jb)


def test_transformer_encoder_layer_over_sequence_lengths():
    """Sequence-first (S, N, E): the length is the outermost dim, and an inner one of the
    attention's (N * heads, S, head size) views, whose strides are then size polynomials:
    one trace serves every length after the first, attention traced through its ref."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32,
                                             dropout=0.0).eval()
    jl = primtrace.jit(layer)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", primtrace.OpaqueOpWarning)
        for s in range(1, 33):
            run(jl, layer, torch.randn(s, 2, 16), rtol=1e-4, atol=1e-5)
    assert misses(jl) == 2


def test_reduction_with_keepdim():
    def f(x):
        return x.sum(0, keepdim=True) + x.mean(1, keepdim=True) * x.amax(-1, keepdim=True)
    jf = primtrace.jit(f, dynamic=True)
    for n in (3, 5, 1, 7):
        run(jf, f, torch.randn(n, 4))
    assert misses(jf) == 1


def test_views_keep_the_dim_symbolic():
    def f(x):
        a = x.view(-1)
        b = x.reshape(x.shape[0], -1)
        c = x.flatten(1)
        d = x.transpose(0, 1)
        e = x.view(x.shape[0] * 4, 2)
        return a[1:].sum() + b.sum(1).sum() + c.sum(), d * 2, e + 1
    jf = primtrace.jit(f, dynamic=True)
    for n in (3, 5, 1, 7):
        run(jf, f, torch.randn(n, 4, 2))
    assert misses(jf) == 1 and primtrace.cache_info(jf).recompiles == ()


def test_training_with_a_symbolic_batch():
    """Forward and backward traces take the symbolic batch (saved for the backward as an
    int); gradients equal eager's."""
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    jm = primtrace.jit(mlp)
    for b in (3, 5, 7, 2, 1, 4):
        x = torch.randn(b, 8)
        xs = [x.clone().requires_grad_() for _ in range(2)]
        grads = []
        for fn, xi in zip((jm, mlp), xs):
            fn(xi).square().sum().backward()
            grads.append([xi.grad, *(p.grad.clone() for p in mlp.parameters())])
            mlp.zero_grad()
        for got, expected in zip(*grads):
            torch.testing.assert_close(got, expected)
    assert misses(jm) == 2 and symbolic(jm)


# --- guards: each violated once compiles again, never runs a wrong trace -----------------------
def test_guard_python_control_flow():
    def f(x):
        if x.shape[0] > 8:
            return x * 2
        return x - 1
    jf = primtrace.jit(f, dynamic=True)
    for n in (3, 5, 12, 9, 8, 2):
        run(jf, f, torch.randn(n, 3))
    assert misses(jf) == 2
    assert "size guard failed: (x.size(0) > 8) is False" in reasons(jf)[0]


def test_guard_int_pins_the_dim():
    def f(x):
        return x * int(x.shape[0])
    jf = primtrace.jit(f, dynamic=True)
    for n in (3, 3, 5, 5, 3, 6):
        run(jf, f, torch.randn(n, 3))
    assert misses(jf) == 3   # 3 (symbolic, pinned by int()), then static 5 and 6
    assert "x.size(0) == 3 no longer holds" in reasons(jf)[0]


def test_arange_of_a_size_is_symbolic():
    """arange(n) and arange(start, n) over a symbolic size have a symbolic length; a bound
    that is not a size (a float, a step) reads it: the dim is pinned, one trace per size."""
    def f(x):
        n = x.shape[0]
        return x + torch.arange(n).unsqueeze(1) + torch.arange(1, n + 1).unsqueeze(1) * 2
    jf = primtrace.jit(f, dynamic=True)
    for n in (3, 5, 1, 4):
        run(jf, f, torch.randn(n, 2))
    assert misses(jf) == 1

    def g(x):
        return x + torch.arange(0, x.shape[0] * 2, 2).unsqueeze(1)
    jg = primtrace.jit(g, dynamic=True)
    for n in (3, 5, 3, 4):
        run(jg, g, torch.randn(n, 2))
    assert misses(jg) == 3


def test_factories_of_symbolic_sizes():
    """torch.zeros/ones/empty/full over a symbolic size reach the tracer with the size itself
    (tracer/factories.py; torch's argument parser would read it): one trace for every size.
    Outside a trace torch's own functions are back."""
    zeros = torch.zeros

    def f(x):
        n = x.shape[0]
        e = torch.empty(n, 4).fill_(1.5)
        return (x + torch.zeros(n, 1) + torch.ones((n, 4)) * 2 + torch.full((n, 1), 3.0)
                + torch.zeros(size=(n, 4), dtype=torch.float64) + e)
    jf = primtrace.jit(f, dynamic=True)
    for n in (3, 5, 1, 7):
        run(jf, f, torch.randn(n, 4))
    assert misses(jf) == 1 and symbolic(jf)
    assert torch.zeros is zeros

    def inner(x):   # a symbolic inner dim would make strides depend on it: traced static
        return x.t() + torch.zeros(4, x.shape[0])
    ji = primtrace.jit(inner, dynamic=True)
    for n in (3, 5):
        run(ji, inner, torch.randn(n, 4))


def test_slice_by_a_computed_size_is_symbolic():
    def f(x):
        return x[: x.shape[0] // 2] * 2
    jf = primtrace.jit(f, dynamic=True)
    for n in (4, 5, 8, 9, 1):
        run(jf, f, torch.randn(n, 3))
    assert misses(jf) == 1


def test_guard_broadcasting_two_symbolic_dims():
    def f(x, y):
        return x + y
    jf = primtrace.jit(f, dynamic=True)
    for m, n in ((3, 3), (5, 5), (5, 1), (4, 4), (1, 4), (6, 1)):
        run(jf, f, torch.randn(m, 3), torch.randn(n, 3))
    assert misses(jf) == 3
    assert "(y.size(0) == x.size(0)) is True" in reasons(jf)[0]
    assert "(y.size(0) == 1) is True" in reasons(jf)[1]
    with pytest.raises(RuntimeError, match="must match"):   # eager's error, at any size
        jf(torch.randn(4, 3), torch.randn(3, 3))


def test_guard_on_a_runtime_number():
    """A guard that compares a size with a Python number argument fixes that number."""
    def f(x, k):
        if x.shape[0] > k:
            return x * k
        return x
    jf = primtrace.jit(f, dynamic=True)
    for n, k in ((5, 3), (6, 3), (2, 3), (6, 7), (8, 7), (9, 7)):
        run(jf, f, torch.randn(n, 2), k)
    # (5, 3): x > 3 and k == 3; (2, 3): not x > 3; (6, 7): k == 7, not x > 7; (8, 7): x > 7
    assert misses(jf) == 4


def test_a_read_outside_a_compile_raises():
    """A hinted size read where no guard can be recorded is an error, not a silent value."""
    from primtrace.ir.proxy import Hint, SizeProxy
    n = SizeProxy("n", "n", 1, None)
    n.value = Hint("n", 4, lambda env: env["n"], (), ("n",))
    with pytest.raises(RuntimeError, match="outside of a jit compile"):
        int(n)


def test_sizes_passed_to_tensor_methods_are_not_read_first():
    """x.view(B, ...), x.expand(B, ...), new_zeros(x.shape) and new_full((B, 1)) take the
    symbol itself (torch's argument parser would read it as an int: a pinned dim)."""
    def f(x):
        b = x.shape[0]
        return x.view(b, 2, -1).sum(-1) + x.expand(b, 4)[:, :2] * 2
    jf = primtrace.jit(f, dynamic=True)
    for n in (3, 5, 1):
        run(jf, f, torch.randn(n, 4))
    assert misses(jf) == 1

    def g(x):
        return x.new_zeros(x.shape) + x.new_full((x.shape[0], 1), 3.0)
    jg = primtrace.jit(g, dynamic=True)
    for n in (3, 5, 3):
        run(jg, g, torch.randn(n, 4))
    assert misses(jg) == 1


def test_guard_contiguity_of_a_size_one_dim():
    """x[:, :1] is contiguous in eager only when x has one row: the trace's answer for a
    symbolic row count is guarded (size <= 1), so one row compiles again (it ran the other
    branch, silently, before the guard)."""
    def f(x):
        y = x[:, :1]
        return y * 2 if y.is_contiguous() else y + 1
    jf = primtrace.jit(f, dynamic=True)
    for n in (3, 5, 1, 4, 1):
        run(jf, f, torch.randn(n, 4))
    assert misses(jf) == 2
    assert "(x.size(0) <= 1) is False" in reasons(jf)[0]


def test_comparisons_the_sizes_bounds_decide_add_no_guard():
    """``4n > n + 1`` holds for every n >= 1 (3n - 1 > 0 at the least n): decided without a
    guard; ``n > 3`` needs one, and a call that violates it compiles again."""
    def f(x):
        n = x.shape[0]
        y = x * 2 if n * 4 > n + 1 else x
        return y + 1 if n > 3 else y - 1
    jf = primtrace.jit(f, dynamic=True)
    for n in (5, 7, 2, 9):
        run(jf, f, torch.randn(n, 3))
    texts = [g.text for e in jf._dynamic.entries for g in e.guards]
    assert texts and all("> 3" in t for t in texts), texts
    assert misses(jf) == 2
