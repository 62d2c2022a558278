"""Buffer reuse (executors/buffer_reuse.py): a torch call left in the execution trace writes
into an operand that dies there only where nothing can see the write; values are eager's."""
import pytest
import torch
import torch.nn.functional as F

import primtrace
from primtrace.executors.numba import NumbaFusionExecutor
from tests.numba.helpers import check_against_eager


def calls(fn, *args):
    """(result, eager's result, the execution trace's call names) under the cost model."""
    jfn = primtrace.jit(fn, executors=[NumbaFusionExecutor()])
    got = jfn(*args)
    return got, fn(*args), [n.symbol.qualname for n in primtrace.last_trace(jfn).nodes]


def inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(64, 96, generator=g), torch.randn(384, 96, generator=g),
            torch.randn(384, generator=g), torch.randn(96, 384, generator=g))


def mlp(x, w1, b, w2):
    """W10's MLP with its residual: linear, GELU, linear, add (each a torch call)."""
    return F.linear(F.gelu(F.linear(x, w1, b)), w2) + x


GELU_, ADD_ = "torch.nn.functional.gelu_", "torch.Tensor.add_"


def test_gelu_and_residual_add_write_into_the_dead_matmul_outputs():
    """At 24K float32 elements the GELU fuses (cost.GELU_INTO_DEAD): its kernel takes the
    matmul output's memory; the residual add is torch's add_ into the second one."""
    got, expected, names = calls(mlp, *inputs())
    assert names == ["torch.nn.functional.linear", "numba_fusion_0",
                     "torch.nn.functional.linear", ADD_], names
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)   # ulps, through a matmul

    def hidden(x, w1, b, w2):
        return F.gelu(F.linear(x, w1, b))
    jfn = primtrace.jit(hidden, executors=[NumbaFusionExecutor()])
    check_against_eager(jfn, hidden, *inputs())   # our erf: at least as close to float64
    assert any(map(_takes_input, _launchers(jfn)))


def test_a_larger_gelu_stays_eagers_and_writes_in_place():
    """Above cost.GELU_INTO_DEAD's size eager's GELU kernel is as fast: it runs as gelu_ into
    the dead matmul output."""
    g = torch.Generator().manual_seed(0)
    x, w1 = torch.randn(256, 96, generator=g), torch.randn(384, 96, generator=g)
    got, expected, names = calls(lambda x, w1: F.gelu(F.linear(x, w1)), x, w1)
    assert GELU_ in names, names
    assert torch.equal(got, expected)


def _read_again(x, w1, b, w2):
    t = F.linear(x, w1, b)
    return F.linear(F.gelu(t), w2) + F.linear(t, w2)


@pytest.mark.parametrize("fn, call", [
    (lambda x, w1, b, w2: F.gelu(x), GELU_),                                  # a trace input
    (lambda x, w1, b, w2: F.gelu(x.view(96, 64)), GELU_),                    # an input's view
    (lambda x, w1, b, w2: (lambda t: (t, F.gelu(t)))(F.linear(x, w1)), GELU_),   # returned
    (_read_again, GELU_),                                                     # read again later
    (lambda x, w1, b, w2: (lambda t: (F.gelu(t), t[:, :4]))(F.linear(x, w1)), GELU_),  # a view
    (lambda x, w1, b, w2: F.linear(x[:1], w2 @ w1) + x, ADD_),              # broadcast larger
])
def test_no_reuse_where_the_write_could_be_seen(fn, call):
    args = inputs()
    before = [a.clone() for a in args]
    got, expected, names = calls(fn, *args)
    assert call not in names
    for g, e in zip(got if isinstance(got, tuple) else (got,),
                    expected if isinstance(expected, tuple) else (expected,)):
        assert torch.equal(g, e)
    assert all(torch.equal(a, b) for a, b in zip(args, before))


def test_the_add_after_a_gelu_that_keeps_its_input_still_reuses():
    _, _, names = calls(_read_again, *inputs())
    assert GELU_ not in names and ADD_ in names


def test_training_forward_reuses_buffers_inside_its_autograd_function():
    """The forward of a call that needs grad runs inside one autograd.Function, where no
    intermediate has a grad_fn: reusing a dead buffer is safe, and gradients are eager's."""
    x, w1, b, w2 = inputs()
    w1.requires_grad_()
    jfn = primtrace.jit(mlp, executors=[NumbaFusionExecutor()])
    got = jfn(x, w1, b, w2)
    assert "backward" in primtrace.last_trace(jfn).tags
    got.sum().backward()
    grad, w1.grad = w1.grad, None
    mlp(x, w1, b, w2).sum().backward()
    torch.testing.assert_close(grad, w1.grad, rtol=1e-4, atol=1e-4)   # fused sums


def test_w10_block_values_unchanged_and_trace_shows_the_in_place_calls():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
    from gpt import Block, Config
    torch.manual_seed(0)
    block = Block(Config(vocab=1, context=16, heads=2, width=32)).eval()
    x = torch.randn(2, 16, 32)
    with torch.no_grad():
        jfn = primtrace.jit(block, executors=[NumbaFusionExecutor()])
        got, again = jfn(x), jfn(x)
        names = [n.symbol.qualname for n in primtrace.last_trace(jfn).nodes]
        torch.testing.assert_close(got, block(x), rtol=1e-5, atol=1e-6)
    assert torch.equal(got, again)
    assert names[-1] == ADD_   # the GELU's kernel (4K elements) takes the dead matmul output
    assert any(map(_takes_input, _launchers(jfn)))


def test_a_call_with_out_is_left_as_written():
    """torch.add(t, b, out=z) already writes z: it is not turned into t.add_(...)."""
    def f(x, w1, b, w2, z):
        return torch.add(F.linear(x, w1), b, out=z)   # one call: left to torch
    args = inputs()
    z, z_eager = torch.empty(64, 384), torch.empty(64, 384)
    jfn = primtrace.jit(f, executors=[NumbaFusionExecutor()])
    got = jfn(*args, z)
    assert torch.equal(got, f(*args, z_eager)) and torch.equal(z, z_eager)
    names = [n.symbol.qualname for n in primtrace.last_trace(jfn).nodes]
    assert "torch.add" in names and "torch.Tensor.add_" not in names, names


# --- a fused kernel's new output written into a dead operand ---------------------------------
def _launchers(jfn, stage: str = "forward") -> list[str]:
    trace = primtrace.last_trace(jfn)
    if stage == "backward":
        trace = trace.tags["backward"][-1]
    return [n.symbol.impl.launcher for n in trace.nodes if hasattr(n.symbol.impl, "launcher")]


def _unfused(fn, *args):
    return primtrace.jit(fn, executors=[])(*args)


def _takes_input(launcher: str) -> bool:
    import re
    return re.search(r"^\s+o\d+ = i\d+$", launcher, re.M) is not None


def _square(seed: int) -> torch.Tensor:
    return torch.randn(48, 48, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("fn, reuses", [
    (lambda x, w: torch.exp(x @ w) * 2 + 1, True),                        # elementwise
    (lambda x, w: torch.sin(x @ w) * 2 + 1, False),    # redoes blocks far from 0: reads again
    (lambda x, w: F.layer_norm(x @ w, (48,)) * 2, True),                   # row kernel, passes
    (lambda x, w: torch.softmax((x @ w) * 0.5, -1), True),                 # three passes
    (lambda x, w: (lambda y: (y, y.sum(0)))(torch.tanh(x @ w) * 2), True),  # + a column sum
    (lambda x, w: (lambda t: torch.tanh(t) * 2 + t.sum(0))(x @ w), False),  # read by a sum too
    (lambda x, w: (lambda t: torch.sin(t) + t.t())(x @ w), False),         # read transposed
    (lambda x, w: (lambda t: torch.sin(t[:, :1]) + torch.cos(t))(x @ w), False),  # broadcast
    (lambda x, w: (lambda t: (torch.sin(t) * 2, t))(x @ w), False),         # returned
])
def test_a_fused_output_takes_a_dead_operands_memory_only_where_it_is_read_in_step(fn, reuses):
    args = (_square(1), _square(2))
    with torch.no_grad():
        jfn = primtrace.jit(fn, executors=[NumbaFusionExecutor()])
        got = jfn(*args)
        expected = _unfused(fn, *args)
    for g, e in zip(got if isinstance(got, tuple) else (got,),
                    expected if isinstance(expected, tuple) else (expected,)):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)
    assert any(map(_takes_input, _launchers(jfn))) == reuses, _launchers(jfn)
    _assert_one_pointer_per_reused_buffer(jfn)


def _assert_one_pointer_per_reused_buffer(jfn):
    """A kernel writing into a dead operand stores through that operand's own pointer and
    offsets: given a second pointer to the same memory, the compiler cannot prove the two
    apart and runs its loop's scalar version (a float32 tanh at 16K elements: 2.2x)."""
    import re
    for node in primtrace.last_trace(jfn).nodes:
        impl = node.symbol.impl
        for k, j in re.findall(r"^\s+o(\d+) = i(\d+)$", getattr(impl, "launcher", ""), re.M):
            kernel = impl.source[impl.source.index('"""primtrace fused kernel'):]
            assert f"out{k}_addr" not in kernel and f"out{k}[" not in kernel, impl.source


def test_no_reuse_where_a_column_loop_reads_the_operand_again_after_the_stores():
    """bfloat16: the column sum's addend is not the stored value, so the loop after the
    row's stores recomputes it from the operand, which must still hold its values."""
    def fn(x, w):
        y = torch.tanh(x @ w) * 2
        return y, y.sum(0)
    args = (_square(1).bfloat16(), _square(2).bfloat16())
    with torch.no_grad():
        jfn = primtrace.jit(fn, executors=[NumbaFusionExecutor()])
        got = jfn(*args)
        expected = _unfused(fn, *args)
    assert not any(map(_takes_input, _launchers(jfn)))
    assert all(torch.equal(g, e) for g, e in zip(got, expected))


def test_gelu_backward_takes_the_dead_matmul_output_and_grads_are_eagers():
    """W11's backward: the GELU's input gradient is written into the matmul output it is
    computed from."""
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
    x = torch.randn(16, 32, requires_grad=True)
    jm = primtrace.jit(mlp, executors=[NumbaFusionExecutor()])
    for _ in range(2):
        jm(x).square().mean().backward()
    got = [p.grad.clone() for p in (x, *mlp.parameters())]
    for p in (x, *mlp.parameters()):
        p.grad = None
    mlp(x).square().mean().backward()
    for g, p in zip(got, (x, *mlp.parameters())):
        torch.testing.assert_close(g / 2, p.grad, rtol=1e-5, atol=1e-7)
    assert any(map(_takes_input, _launchers(jm, "backward")))
    _assert_one_pointer_per_reused_buffer(jm)


def test_a_one_tensor_cat_of_a_dead_fresh_tensor_is_that_tensor():
    """A KV cache's first update, torch.cat([torch.tensor([]), k]) (a 1-d empty tensor is
    skipped), traced as prims.cat of k alone: a copy of a value that dies there is not
    needed (values and layout as eager's). (A cat read by a kernel fuses into it instead.)"""
    def f(x, w1, b, w2):
        k = x @ w1.t()                          # fresh, contiguous like the cat's result
        cache = torch.cat([torch.tensor([]), k], dim=1)
        return cache, torch.cat([torch.tensor([]), x.t()], dim=1)   # a view: copied
    args = inputs()
    with torch.no_grad():
        got, expected, names = calls(f, *args)
    assert sum("cat_of_dead_operand" in n for n in names) == 1, names
    assert sum(n.endswith(".cat") for n in names) == 1, names     # x.t(): not fresh, copied
    for g, e in zip(got, expected):   # the fused tanh: within an ulp of eager's
        torch.testing.assert_close(g, e)
        assert g.stride() == e.stride()


def test_a_gelu_after_a_convolution_writes_into_its_dead_output():
    """A convolution's result is new memory too (Whisper's conv stem): the GELU after it
    writes there, as a kernel at 25K elements, as eager's gelu_ at 100K."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(128, 80, 3, generator=g) * 0.1
    for length, fused in [(200, True), (800, False)]:
        x = torch.randn(1, 80, length, generator=g)

        def stem(x, w):
            return F.gelu(F.conv1d(x, w, padding=1))
        with torch.no_grad():
            jfn = primtrace.jit(stem, executors=[NumbaFusionExecutor()])
            got = jfn(x, w)
            names = [n.symbol.qualname for n in primtrace.last_trace(jfn).nodes]
        torch.testing.assert_close(got, stem(x, w))
        if fused:
            assert any(map(_takes_input, _launchers(jfn))), names
        else:
            assert GELU_ in names, names
