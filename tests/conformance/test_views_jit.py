"""Writes through views under ``primtrace.jit``: eager's results, inputs mutated as eager
mutates them, returned views still views of the inputs, through the default executors, the
Numba fusion executor without its cost model (every region fused) and torch.compile."""
from __future__ import annotations

import warnings

import pytest
import torch

import primtrace
from primtrace.executors.numba import NumbaFusionExecutor


def _view_add(x, v):
    y = x.view(-1)
    y.add_(1)
    return x


def _t_mul(x, v):
    x.t().mul_(2)
    return x * 3


def _slice_zero(x, v):
    x[1:].zero_()
    return x + 1


def _select_copy(x, v):
    x.select(0, 1).copy_(v[0])
    return x


def _squeeze_fill(x, v):
    x.unsqueeze(0).squeeze(0).fill_(3)
    return x


def _read_before_write(x, v):
    z = x.t() * 2          # reads x before the write: must see the old values
    x.add_(1)
    return z + x


def _view_read_after(x, v):
    y = x.t()
    x.add_(1)              # y shares x's memory: reading y sees the write
    return y * 2


def _write_then_view(x, v):
    x.t().add_(v).t()
    return x.reshape(2, 8) * 1


def _disjoint_writes(x, v):
    x[:, 1:].mul_(2)
    x[0].add_(x[1] * 1)
    return x.amax(0)   # exact (a fused column sum rounds once from float64: not eager's bits)


def _chained_views(x, v):
    y = x[1:, ::2].unsqueeze(0).transpose(1, 2)
    y.sub_(v[:3, 1:3].t().unsqueeze(0))
    return x.flatten()


def _iterate(x, v):
    for row in x:          # Tensor.__iter__: unbind
        row.mul_(2)
    return x


def _chunk_writes(x, v):
    a, b = x.chunk(2, dim=1)
    a.copy_(b)
    return x


def _getitem_setitem(x, v):
    x[1:3, ::2] = v[:2, :2]
    return x[None, ..., 1] + 1


def _advanced_setitem(x, v):
    x.t()[[0, -1], 1:3] = v[:2, :2] * 2   # index_put into a view of the input
    x[:, [1]] += 1
    return x[[2, 0]] + x[:, [3, -1]].sum()


def _returns_views(x, v):
    return x.t(), x[1], x.view(16), x.reshape(2, 8), x.split(2)


CASES = [_view_add, _t_mul, _slice_zero, _select_copy, _squeeze_fill, _read_before_write,
         _view_read_after, _write_then_view, _disjoint_writes, _chained_views, _iterate,
         _chunk_writes, _getitem_setitem, _advanced_setitem, _returns_views]
EXECUTORS = {"default": None, "fused": [NumbaFusionExecutor(cost_model=False)], "torch": []}


def _leaves(obj):
    return [obj] if isinstance(obj, torch.Tensor) else [x for o in obj for x in _leaves(o)]


def _same(ours, eager, x_ours, x_eager):
    for o, e in zip(_leaves(ours), _leaves(eager)):
        assert o.shape == e.shape and o.stride() == e.stride() and o.dtype == e.dtype
        assert torch.equal(o, e)
        shares = o.untyped_storage().data_ptr() == x_ours.untyped_storage().data_ptr()
        assert shares == (e.untyped_storage().data_ptr() == x_eager.untyped_storage().data_ptr())
    assert torch.equal(x_ours, x_eager)


@pytest.mark.parametrize("executors", list(EXECUTORS), ids=list(EXECUTORS))
@pytest.mark.parametrize("fn", CASES, ids=[f.__name__.strip("_") for f in CASES])
def test_writes_through_views(fn, executors):
    torch.manual_seed(0)
    x, v = torch.randn(4, 4), torch.randn(4, 4)
    jitted = primtrace.jit(fn, executors=EXECUTORS[executors])
    for _ in range(2):   # the compiled call, then the cached one
        x_eager, x_ours = x.clone(), x.clone()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _same(jitted(x_ours, v), fn(x_eager, v), x_ours, x_eager)


class Accumulator(torch.nn.Module):
    """Module code that writes into a buffer through a view of it."""

    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.zeros(2, 3, 4))

    def forward(self, x):
        out = self.buf.view(6, 4)
        out.add_(x)
        self.buf[0].mul_(0.5)
        return self.buf.sum(), out.t()


def test_module_buffer_written_through_a_view():
    eager, ours = Accumulator(), Accumulator()
    jitted = primtrace.jit(ours)
    for i in range(3):
        x = torch.randn(6, 4) + i
        e, o = eager(x), jitted(x)
        torch.testing.assert_close(o[0], e[0])
        assert torch.equal(o[1], e[1]) and o[1].stride() == e[1].stride()
        assert o[1].untyped_storage().data_ptr() == ours.buf.untyped_storage().data_ptr()
        assert torch.equal(ours.buf, eager.buf)


def test_torch_compile_backend_writes_through_views():
    torch._dynamo.reset()

    def fn(x, v):
        x.t()[1:].mul_(2)
        y = x.view(-1)
        y.add_(v.reshape(-1))
        return x * 1, y[::3]
    x, v = torch.randn(4, 4), torch.randn(4, 4)
    x_eager, x_ours = x.clone(), x.clone()
    expected = fn(x_eager, v)
    got = torch.compile(fn, backend="primtrace")(x_ours, v)
    for g, e in zip(got, expected):
        assert torch.equal(g, e) and g.stride() == e.stride()
    assert torch.equal(x_ours, x_eager)


def test_gradients_flow_through_view_refs():
    """Results that need autograd run as the torch calls: eager's gradients."""
    def fn(w, x):
        h = (w * x).reshape(2, 8).t()
        parts = h.split(4)
        return torch.cat([parts[1], parts[0]], 1).unsqueeze(0).expand(3, 4, 4).sum()
    w = torch.randn(4, 4, requires_grad=True)
    x = torch.randn(4, 4)
    fn(w, x).backward()
    expected, w.grad = w.grad, None
    primtrace.jit(fn)(w, x).backward()
    torch.testing.assert_close(w.grad, expected)


def test_metadata_inplace_and_dtype_views_stay_torch_calls():
    def fn(x):
        y = x.clone()
        y.unsqueeze_(0)
        z = x.view(torch.int32)
        return y + 1, z
    x = torch.randn(3, 4)
    got, expected = primtrace.jit(fn)(x), fn(x)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])


def test_view_error_through_jit():
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        primtrace.jit(lambda x: x.t().view(-1))(torch.randn(3, 4))


def test_cached_call_with_other_size1_strides_keeps_views():
    """Contiguous inputs share a cache key whatever the strides of their size-1 dims; a view
    of the second must still be a view (the layout check does not copy it)."""
    def fn(x):
        y = x.permute(1, 0, 2)
        y.mul_(2)
        return y, y * 1
    jitted = primtrace.jit(fn)
    a = torch.randn(3, 1, 4)
    b = torch.randn(12).as_strided((3, 1, 4), (4, 1, 1))
    assert b.is_contiguous() and a.stride() != b.stride()
    for x in (a, b):
        x_eager = x.clone()
        got, expected = jitted(x), fn(x_eager)
        assert torch.equal(got[1], expected[1]) and torch.equal(x, x_eager)
        assert got[0].untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


def test_view_prims_stay_out_of_fused_regions():
    """Views run in the torch executor (metadata only); kernels read their results. A slice
    that only a kernel reads is a load at an offset inside it, and a cat splits its loop
    (tests/numba/test_fused_slices.py)."""
    from primtrace.prims import views
    def fn(x, v):
        y = (x * 2).t()[1:].unsqueeze(0).expand(2, 3, 4)
        return torch.cat([y + v[1:], y], 0).flip(1) * 3
    jitted = primtrace.jit(fn, executors=[NumbaFusionExecutor(cost_model=False)])
    x, v = torch.randn(4, 4), torch.randn(4, 4)
    assert torch.equal(jitted(x, v), fn(x, v))
    nodes = primtrace.last_trace(jitted).nodes
    fused = [n for n in nodes if n.subnodes]
    kept = set(views.PRIMS) - {"slice", "cat"}
    assert fused and not any(s.symbol.name in kept for n in fused for s in n.subnodes)
