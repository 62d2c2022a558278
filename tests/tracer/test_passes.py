"""The trace passes: DCE, CSE, gradient carriers, no-op conversions, round trips (value-preserving
vs lossy)."""
import pytest
import torch
import torch.nn.functional as F

import primtrace
from primtrace import prims
from primtrace.ir import TensorSpec, Trace, tracing
from primtrace.tracer import passes


def names(trace):
    return [n.symbol.name for n in trace.nodes]


def prims_trace(fn, *args):
    return primtrace.trace(fn, stage="prims")(*args)


def build(specs, body):
    """A trace of prims written by hand: `body(*inputs)` returns the outputs."""
    t = Trace("hand")
    t.inputs = [t.tensor(TensorSpec.of(torch.empty(4, dtype=d)), name=n) for n, d in specs]
    with tracing(t):
        t.outputs = body(*t.inputs)
    return t


def test_dce_drops_unused_pure_nodes_and_keeps_writes():
    def f(a, b):
        unused = a * 3  # noqa: F841
        b.add_(1)       # a write is kept although its result is not returned
        return a + 1
    trace = passes.dce(prims_trace(f, torch.randn(4), torch.randn(4)))
    assert names(trace) == ["add", "copy_to", "add"]


def test_cse_merges_equal_pure_nodes():
    f = lambda a, b: (a + b) * (a + b) - (a + b) * 2  # noqa: E731
    trace = passes.cse(prims_trace(f, torch.randn(4), torch.randn(4)))
    assert names(trace).count("add") == 1
    assert names(trace) == ["add", "mul", "mul", "sub"]
    a, b = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(primtrace.jit(f)(a, b), f(a, b))


def test_cse_keeps_different_constants_apart():
    t = build([("a", torch.float32)], lambda a: prims.add(
        prims.add(prims.mul(a, 0.0), prims.mul(a, -0.0)), prims.mul(a, 0.0)))
    assert names(passes.cse(t)) == ["mul", "mul", "add", "add"]  # 0.0 and -0.0 differ, the twin goes


def test_cse_leaves_repeated_broadcasts_to_the_kernels_reading_them():
    """Each layer's `q * cos` broadcasts the shared cos: CSE keeps both broadcasts, so each
    fuses into its own kernel instead of one expand call outside both."""
    def f(q, k, cos):
        q = torch.tanh(q * cos)
        return torch.tanh(q * cos) + k * cos
    args = torch.randn(2, 3, 4), torch.randn(2, 3, 4), torch.randn(3, 4)
    assert names(passes.cse(prims_trace(f, *args))).count("broadcast_in_dim") == 3
    from primtrace.executors.numba import NumbaFusionExecutor
    jf = primtrace.jit(f, executors=[NumbaFusionExecutor(cost_model=False)])
    torch.testing.assert_close(jf(*args), f(*args))
    assert "broadcast_in_dim" not in names(primtrace.last_trace(jf))


def test_cse_never_returns_one_tensor_for_two_outputs():
    """Eager returns distinct tensors for (x + 1, x + 1): merging them would alias outputs."""
    def f(x):
        return x + 1, x + 1, torch.zeros(3), torch.zeros(3)
    jf = primtrace.jit(f)
    a, b, c, d = jf(torch.ones(3))
    assert a is not b and c is not d
    a.add_(1)
    assert b.tolist() == [2.0, 2.0, 2.0]


def test_cse_does_not_merge_reads_around_a_write():
    def f(a):
        before = a * 2
        a.add_(1)
        return before, a * 2
    a = torch.randn(4)
    expected = f(a.clone())
    got = primtrace.jit(f)(a)
    torch.testing.assert_close(got, expected)


def _two_buffers_filled_through_slices(x, y):
    a = torch.zeros(2, 8, 4)
    b = torch.zeros(2, 8, 4)
    a[:, :5] = x
    b[:, :5] = y
    return a + 0, b + 0


def _two_buffers_written_through_views(x, y):
    a, b = torch.full((6,), 2.0), torch.full((6,), 2.0)
    a.view(2, 3)[0].mul_(x)
    b[3:].add_(y)
    return a * 1, b * 1


def _same_empty_twice(x, y):
    a = torch.ones(3, 4).t()
    b = torch.ones(3, 4).t()
    a.copy_(x.t().t())
    return a.sum(0), b.sum(0) + y.sum(0)


@pytest.mark.parametrize("fn", [_two_buffers_filled_through_slices,
                                _two_buffers_written_through_views, _same_empty_twice],
                         ids=lambda f: f.__name__.strip("_"))
def test_cse_keeps_equal_buffers_apart_when_one_is_written(fn):
    """Two equal factory calls are two buffers once either is written into, directly or
    through a view: merged, the second write landed in the first one's values (a silent
    wrong result, found on two zeros() filled through slices)."""
    shapes = {"_two_buffers_filled_through_slices": ((2, 5, 4), (2, 5, 4)),
              "_two_buffers_written_through_views": ((3,), (3,)),
              "_same_empty_twice": ((4, 3), (3,))}[fn.__name__]
    x, y = (torch.randint(-4, 5, s).float() for s in shapes)
    for jf in (primtrace.jit(fn), primtrace.jit(fn, executors=[])):
        for g, e in zip(jf(x, y), fn(x, y)):
            assert torch.equal(g, e)


def test_cse_still_merges_equal_buffers_nothing_writes():
    def f(x):
        return x + torch.zeros(4), x * torch.zeros(4)
    assert names(passes.cse(prims_trace(f, torch.randn(4)))).count("full") == 1


def test_gradient_carriers_go_and_their_nodes_with_dce():
    """differentiate_as(value, carrier) goes, the value's node making its result (the ref's
    output keeps its name); what only the carrier read dies with DCE."""
    def body(a):
        value = prims.maximum(a, prims.full((), 0.0, dtype=a.dtype, device=a.device))
        carrier = prims.where(prims.gt(value, 0), a, 0)    # the carrier reads the value too
        return prims.mul(prims.differentiate_as(value, carrier), 2)
    t = build([("a", torch.float32)], body)
    dropped = passes.drop_gradient_carriers(t)
    assert names(dropped) == ["maximum", "gt", "where", "mul"]
    result = t.nodes[3].outputs
    assert dropped.nodes[0].outputs is result
    assert dropped.nodes[1].args[0] is result and dropped.nodes[3].args[0] is result
    assert names(passes.optimize(t)) == ["maximum", "mul"]


def test_gradient_carriers_of_gradient_carriers_go():
    def body(a):
        inner = prims.differentiate_as(prims.neg(a), a)
        return prims.differentiate_as(inner, prims.exp(a))
    t = build([("a", torch.float32)], body)
    optimized = passes.optimize(t)
    assert names(optimized) == ["neg"] and optimized.nodes[0].outputs is t.outputs


def test_a_gradient_carrier_of_another_layout_is_replaced_by_its_value():
    """The result is a new dense tensor: where the value is not (a broadcast view), the
    value's node cannot make it, and the value replaces it."""
    def body(a):
        value = prims.broadcast_in_dim(prims.neg(a), (3, 4), (1,))
        return prims.mul(prims.differentiate_as(value, prims.exp(value)), 2)
    t = build([("a", torch.float32)], body)
    optimized = passes.optimize(t)
    assert names(optimized) == ["neg", "broadcast_in_dim", "mul"]
    assert optimized.nodes[2].args[0] is t.nodes[1].outputs


@pytest.mark.parametrize("fn", [torch.relu, lambda x: x.clamp(-1, 1), lambda x: x.max(1)],
                         ids=["relu", "clamp", "max(dim)"])
def test_a_call_given_back_to_torch_is_still_the_call(fn):
    """The value's node takes the name of the ref's result: the prims left of one call are
    still that call, which the cost model gives back to torch whole (small, float32)."""
    from primtrace.executors.numba import NumbaFusionExecutor
    jf = primtrace.jit(fn, executors=[NumbaFusionExecutor(), primtrace.TORCH])   # the defaults
    x = torch.randn(64, 64)
    torch.testing.assert_close(jf(x), fn(x))
    assert [n.symbol.kind for n in primtrace.last_trace(jf).nodes] == ["opaque"]


def test_noop_conversions_go():
    t = build([("a", torch.float32)],
              lambda a: prims.add(prims.convert_element_type(a, torch.float32), 1.0))
    out = passes.remove_noop_converts(t)
    assert names(out) == ["add"] and out.nodes[0].args[0] is t.inputs[0]


def test_value_preserving_round_trip_goes():
    def body(a):
        back = prims.convert_element_type(prims.convert_element_type(a, torch.float32),
                                          torch.float16)
        return prims.add(back, back)
    t = build([("a", torch.float16)], body)
    out = passes.optimize(t)
    assert names(out) == ["add"] and out.nodes[0].args == (t.inputs[0], t.inputs[0])


def test_lossy_round_trip_stays_unless_asked():
    def body(a):
        rounded = prims.convert_element_type(prims.convert_element_type(a, torch.float16),
                                             torch.float32)
        return prims.mul(rounded, 3.0)
    t = build([("a", torch.float32)], body)
    assert names(passes.optimize(t)) == ["convert_element_type", "convert_element_type", "mul"]
    assert names(passes.optimize(t, remove_lossy_round_trips=True)) == ["mul"]


def test_lossy_option_through_jit_changes_only_what_it_says():
    def f(a, b):
        return torch.sin(a) * b  # sin's f16 result is rounded, then promoted for mul
    a = torch.linspace(-3, 3, 101, dtype=torch.float16)
    b = torch.full((101,), 1.001)
    exact, fast = primtrace.jit(f), primtrace.jit(f, remove_lossy_round_trips=True)
    torch.testing.assert_close(exact(a, b), f(a, b), rtol=0, atol=0)
    assert names(primtrace.last_traces(exact)[2]).count("convert_element_type") == 3
    fast_result = fast(a, b)
    assert names(primtrace.last_traces(fast)[2]).count("convert_element_type") == 1
    reference = torch.sin(a.double()) * b.double()
    assert (fast_result.double() - reference).abs().max() < (f(a, b).double() - reference).abs().max()


def test_a_returned_value_is_never_replaced_by_an_input():
    t = build([("a", torch.float16)],
              lambda a: prims.convert_element_type(prims.convert_element_type(a, torch.float32),
                                                   torch.float16))
    out = passes.optimize(t)
    assert out.outputs is not t.inputs[0]  # the caller must get a new tensor, as in eager
    assert names(out) == ["convert_element_type", "convert_element_type"]


def test_a_written_tensor_is_not_replaced():
    def body(a):
        same = prims.convert_element_type(a, torch.float32)
        doubled = prims.mul(same, 2.0)
        written = prims.copy_to(a, doubled)
        return prims.add(same, written)
    t = build([("a", torch.float32)], body)
    out = passes.remove_noop_converts(t)
    assert names(out)[0] == "convert_element_type"  # `same` must keep the value before the write


@pytest.mark.parametrize("src, mid, exact", [
    (torch.float16, torch.float32, True), (torch.bfloat16, torch.float64, True),
    (torch.float32, torch.float16, False), (torch.float16, torch.bfloat16, False),
    (torch.int8, torch.float16, True), (torch.int32, torch.float32, False),
    (torch.int32, torch.float64, True), (torch.int64, torch.float64, False),
    (torch.uint8, torch.int8, False), (torch.uint8, torch.int16, True),
    (torch.bool, torch.float16, True), (torch.float32, torch.bool, False),
    (torch.float32, torch.complex64, True), (torch.complex128, torch.complex64, False),
    (torch.float32, torch.int64, False),
])
def test_holds_exactly(src, mid, exact):
    assert passes.holds_exactly(src, mid) is exact
    if exact and not mid.is_complex:  # check the claim on the extreme values
        if src.is_floating_point:
            info = torch.finfo(src)
            values = torch.tensor([info.max, info.min, info.tiny, info.eps, -0.0], dtype=src)
        elif src is torch.bool:
            values = torch.tensor([True, False])
        else:
            info = torch.iinfo(src)
            values = torch.tensor([info.max, info.min, info.max - 1], dtype=src)
        assert torch.equal(values.to(mid).to(src), values)


def _residual_after_inplace_add(x, w, r):
    m = x @ w
    m += r                       # Falcon's mlp_output += attention_output
    return F.layer_norm(m + x, (4,))


def _read_before_the_write(x, w, r):
    m = x @ w
    before = m * 2
    m.add_(r)
    return before, m * 1


def _view_of_the_written_value(x, w, r):
    m = x @ w
    row = m[0]
    m.mul_(r)
    return row * 1, m * 1


def _written_value_returned(x, w, r):
    m = x @ w
    m.sub_(r)
    return m


def _write_into_an_input(x, w, r):
    x.add_(r)
    return x @ w


def _value_written_later(x, w, r):
    m, s = x @ w, r * 2
    m.copy_(s)
    s.add_(1)                   # m must keep the values before this write
    return m * 1, s * 1


def _input_as_the_value(x, w, r):
    m = x @ w
    m.copy_(r)                  # m may not become r itself: r is the caller's tensor
    return m.fill_(0.5), r * 1


@pytest.mark.parametrize("fn, dropped", [(_residual_after_inplace_add, True),
                                        (_read_before_the_write, True),
                                        (_view_of_the_written_value, False),
                                        (_written_value_returned, False),
                                        (_write_into_an_input, False),
                                        (_value_written_later, False),
                                        (_input_as_the_value, False)],
                         ids=lambda v: v.__name__.strip("_") if callable(v) else str(v))
def test_writes_nothing_else_sees_become_their_values(fn, dropped):
    """An in-place write into a new intermediate that no view, output or input shares is its
    value itself (the copy_to goes, so the fusion partitioner is free to fuse past it);
    every other write stays, and every result and input matches eager."""
    args = [torch.randn(4, 4), torch.randn(4, 4), torch.randn(4, 4)]
    eager_args = [a.clone() for a in args]
    jf = primtrace.jit(fn)
    got, want = jf(*args), fn(*eager_args)
    for g, e in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        torch.testing.assert_close(g, e)
        assert g.stride() == e.stride()
    for a, e in zip(args, eager_args):
        assert torch.equal(a, e)
    assert ("copy_to" not in names(primtrace.last_traces(jf)[2])) == dropped
