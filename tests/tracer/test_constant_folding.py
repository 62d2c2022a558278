"""Values that depend on no input are computed once, when compiling (tracer/constant_folding.py),
and every call still returns eager's values, with constants nobody can change."""
import pytest
import torch

import primtrace


def constants(jfn) -> int:
    return sum(n.symbol.name == "constant" for n in primtrace.last_traces(jfn)[-1].nodes)


@pytest.fixture(params=["torch", "fusion"])
def executors(request):
    return [primtrace.TORCH] if request.param == "torch" else None


def check(fn, *args, executors=None, calls=3):
    jfn = primtrace.jit(fn, executors=executors)
    for k in range(calls):
        call_args = [a + k if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                     for a in args]
        want, got = fn(*call_args), jfn(*call_args)
        for w, g in zip(want if isinstance(want, tuple) else (want,),
                        got if isinstance(got, tuple) else (got,), strict=True):
            torch.testing.assert_close(g, w)
            assert g.stride() == w.stride()
    return jfn


def causal(x):
    i = torch.arange(x.shape[-1])
    mask = i[:, None] >= i[None, :]
    return x.masked_fill(~mask, float("-inf")).softmax(-1)


def window_mask(x):   # Swin's shifted-window mask: slice assignments into zeros
    m = torch.zeros(6, 6)
    count = 0
    for h in (slice(0, 2), slice(2, 4), slice(4, 6)):
        for w in (slice(0, 3), slice(3, 6)):
            m[h, w] = count
            count += 1
    w = m.view(3, 2, 2, 3).permute(0, 2, 1, 3).reshape(-1)[::6]
    bias = (w.unsqueeze(1) - w.unsqueeze(0)).ne(0).float() * -100.0
    return x + bias


def position_buckets(x):   # T5's relative positions: logs, divisions, clamps
    n = x.shape[-1]
    rel = torch.arange(n)[None, :] - torch.arange(n)[:, None]
    big = (torch.log(rel.abs().float().clamp(min=1)) / 2.0 * 4).long().clamp(max=7)
    return x * torch.where(rel.abs() < 4, rel.abs(), big)


@pytest.mark.parametrize("fn", [causal, window_mask, position_buckets])
def test_input_independent_values_fold_and_match_eager(fn, executors):
    jfn = check(fn, torch.randn(2, 6, 6), executors=executors)
    assert constants(jfn) >= 1
    names = {n.symbol.name for n in primtrace.last_traces(jfn)[-1].nodes}
    assert not names & {"iota", "full", "copy_to"}


def test_a_returned_value_is_new_on_every_call(executors):
    def fn(x):
        return x + 1, torch.arange(4.0), torch.ones(3).view(3, 1)

    jfn = check(fn, torch.randn(4), executors=executors)
    a, b = jfn(torch.randn(4))[1:], jfn(torch.randn(4))[1:]
    a[0].add_(100)
    a[1].add_(100)
    assert torch.equal(b[0], torch.arange(4.0)) and torch.equal(b[1], torch.ones(3, 1))


def test_memory_an_input_writes_into_is_not_folded(executors):
    def fn(x, i):
        m = torch.zeros(5)
        m[i] = x.sum()       # written with inputs: made again each call
        return m * 2

    jfn = check(fn, torch.randn(3), torch.tensor(2), executors=executors)
    assert torch.equal(jfn(torch.ones(3), torch.tensor(0)), torch.tensor([6.0, 0, 0, 0, 0]))


def test_reads_before_a_folded_write_see_the_old_values(executors):
    def fn(x):
        m = torch.zeros(4)
        early = x + m        # reads m before the write below
        m[1] = 5.0
        return early, x * m

    check(fn, torch.randn(4), executors=executors)


def test_random_values_are_drawn_on_every_call():
    jfn = primtrace.jit(lambda x: x + torch.rand(4))
    assert not torch.equal(jfn(torch.zeros(4)), jfn(torch.zeros(4)))


def test_large_values_are_computed_on_every_call():
    jfn = check(lambda x: x + torch.ones(1024, 1025) * 2, torch.randn(1025))
    assert constants(jfn) == 0


def test_symbolic_sizes_do_not_fold():
    def fn(x):   # a mask of the symbolic size: made on every call
        return x + torch.arange(x.shape[0])[:, None]

    jfn = primtrace.jit(fn, dynamic=True)
    for n in (5, 7, 9):
        x = torch.randn(n, 3)
        torch.testing.assert_close(jfn(x), fn(x))
    assert "x_dim0" in str(primtrace.last_trace(jfn)) and constants(jfn) == 0


def test_constants_are_never_a_buffer_written_into(executors):
    def fn(x):
        m = torch.arange(16.0).view(4, 4)
        y = x @ x
        return torch.nn.functional.gelu(m + y) + m

    check(fn, torch.randn(4, 4), executors=executors, calls=4)


def test_gradients_flow_around_constants():
    x = torch.randn(2, 6, 6, requires_grad=True)
    jfn = primtrace.jit(window_mask)
    jfn(x).square().sum().backward()
    want = x.detach().clone().requires_grad_()
    window_mask(want).square().sum().backward()
    torch.testing.assert_close(x.grad, want.grad)


def test_writes_through_a_view_of_a_constant_are_not_folded_away(executors):
    def fn(x):
        m = torch.zeros(2, 4)
        row = m.view(8)[2:6].view(4)   # views of the would-be constant
        row.add_(x)                    # written with the input
        return m + 1

    jfn = check(fn, torch.randn(4), executors=executors)
    assert constants(jfn) == 0


def test_reads_between_several_folded_writes(executors):
    def fn(x):
        m = torch.zeros(4)
        a = x + m
        m[0] = 1.0
        b = x * m
        m[1:3] = 2.0
        m[3] = 3.0
        return a, b, x - m

    check(fn, torch.randn(4), executors=executors)
