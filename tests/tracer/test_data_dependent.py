"""Data-dependent output sizes (issue 20): x[mask], masked_select, nonzero, argwhere,
where(condition), unique, repeat_interleave with a tensor of counts, bincount and x[mask] = v
trace, with the count a size known only at run time: one compile serves every count (none
selected, all, some), and results match eager in values, dtypes and shapes. What follows a
selection takes the symbolic size (elementwise ops, reductions, views, losses; ops without a
ref for it run as torch's call); a sum of a selection is computed without it
(tracer/selections.py), within the float64 rule of tests/conformance/harness.py; what
cannot take it raises a DataDependentError naming the op. Gradients are eager's."""
import warnings

import pytest
import torch
import torch.nn.functional as F

import primtrace
from primtrace.tracer import DataDependentError
from tests.conformance.harness import values_match


@pytest.fixture(autouse=True, params=["numba", "torch"])
def executors(request, monkeypatch, torch_executor_by_default):
    """Every test with the default executors (fusion first: what follows a selection does
    not fuse, a sum sunk into it does) and with the torch executor alone."""
    import sys
    from primtrace.executors.numba import NumbaFusionExecutor
    chosen = ([NumbaFusionExecutor(), primtrace.TORCH] if request.param == "numba"
              else [primtrace.TORCH])
    monkeypatch.setattr(sys.modules["primtrace.jit"], "default_executors", lambda: chosen)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield request.param


def masks(shape, seed=0):
    """None selected, all, some (two different counts), one."""
    g = torch.Generator().manual_seed(seed)
    one = torch.zeros(shape, dtype=torch.bool)
    one.view(-1)[0] = True
    return [torch.zeros(shape, dtype=torch.bool), torch.ones(shape, dtype=torch.bool),
            torch.rand(shape, generator=g) < 0.5, torch.rand(shape, generator=g) < 0.3, one]


def assert_same(got, expected, reference=None):
    """Eager's values (exactly, or within the float64 rule), dtypes and shapes."""
    if isinstance(expected, (tuple, list)):
        assert type(got) is type(expected) and len(got) == len(expected)
        for g, e, r in zip(got, expected, reference or [None] * len(expected)):
            assert_same(g, e, r)
        return
    if isinstance(expected, float):   # a sum's item(): its order may differ
        assert type(got) is float and abs(got - expected) <= 1e-5 * max(1.0, abs(expected))
        return
    if not isinstance(expected, torch.Tensor):
        assert got == expected and type(got) is type(expected)
        return
    assert (got.shape, got.dtype, got.device) == (expected.shape, expected.dtype, expected.device)
    mismatch = values_match(got, expected, reference)
    assert mismatch is None, mismatch


def float64_reference(fn, *args):
    """fn on float64 copies of the floating inputs (None where it does not take them)."""
    up = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
          for a in args]
    try:
        return fn(*up)
    except RuntimeError:
        return None


def check(fn, inputs_for, *, compiles=1, reference=False):
    """`fn` through jit against eager on every input set; one compile for all."""
    jfn = primtrace.jit(fn)
    for args in inputs_for:
        expected = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
        ref = float64_reference(fn, *args) if reference else None
        assert_same(jfn(*args), expected, ref)
    assert primtrace.cache_info(jfn).misses == compiles
    return jfn


X = torch.randn(12, 5, generator=torch.Generator().manual_seed(1))
Y = torch.randn(12, 5, generator=torch.Generator().manual_seed(2))
TARGET = torch.randint(0, 5, (12,), generator=torch.Generator().manual_seed(3))


# --- the ops -------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [
    lambda x, m: x[m],
    lambda x, m: x[m, :],
    lambda x, m: x[m, 1:3],
    lambda x, m: x[..., 2][m],
    lambda x, m: torch.masked_select(x, m[:, None]),
    lambda x, m: x.masked_select(m[:, None]),
], ids=["x[m]", "x[m,:]", "x[m,1:3]", "x[...,2][m]", "masked_select", "Tensor.masked_select"])
def test_boolean_mask_selections(fn):
    check(fn, [(X, m) for m in masks(12)])


def test_masks_over_several_leading_dims_and_all_dims():
    x = torch.randn(3, 4, 5)
    check(lambda x, m: x[m], [(x, m) for m in masks((3, 4))])
    check(lambda x, m: x[m], [(x, m) for m in masks((3, 4, 5))])
    check(lambda x, m: torch.masked_select(x, m), [(x, m) for m in masks((4, 5))])
    check(lambda x, m: torch.masked_select(x, m), [(x[0, 0, 0], m) for m in masks((4,))])


def test_selection_layout_is_eagers():
    jfn = primtrace.jit(lambda x, m: x[m])
    for x in (X, X.t().contiguous().t()):
        for m in masks(12):
            got, expected = jfn(x, m), x[m]
            assert got.stride() == expected.stride() and got.is_contiguous()


@pytest.mark.parametrize("fn", [
    lambda m: torch.nonzero(m),
    lambda m: m.nonzero(),
    lambda m: torch.nonzero(m, as_tuple=True),
    lambda m: torch.argwhere(m),
    lambda m: torch.where(m),
    lambda m: torch.nonzero(m.float() * 2),
], ids=["nonzero", "Tensor.nonzero", "as_tuple", "argwhere", "where(condition)", "float"])
@pytest.mark.parametrize("shape", [(12,), (3, 4), (2, 3, 2)])
def test_nonzero_argwhere_where(fn, shape):
    check(fn, [(m,) for m in masks(shape)])


def test_nonzero_of_a_0d_tensor():
    check(lambda m: torch.nonzero(m), [(torch.tensor(True),), (torch.tensor(False),)])
    check(lambda m: torch.where(m), [(torch.tensor(True),), (torch.tensor(False),)])


def test_indexing_by_computed_indices():
    check(lambda x, m: x[m.nonzero().squeeze(1)], [(X, m) for m in masks(12)])
    check(lambda x, m: x[torch.where(m)[0]], [(X, m) for m in masks(12)])
    check(lambda x, m: x.index_select(0, m.nonzero()[:, 0]), [(X, m) for m in masks(12)])
    rows_and_cols = [(X, m) for m in masks((12, 5))]
    check(lambda x, m: x[torch.where(m)], rows_and_cols)


@pytest.mark.parametrize("kwargs", [
    {}, {"sorted": False}, {"return_inverse": True}, {"return_counts": True},
    {"return_inverse": True, "return_counts": True}, {"dim": 0}, {"dim": 0, "return_counts": True},
])
def test_unique(kwargs):
    g = torch.Generator().manual_seed(4)
    inputs = [torch.randint(0, high, (6, 3), generator=g) for high in (1, 2, 4, 50)]
    inputs.append(inputs[-1].float() / 2)
    check(lambda x: torch.unique(x, **kwargs), [(x,) for x in inputs[:4]])
    check(lambda x: x.unique(**kwargs), [(x,) for x in inputs[4:]])


def test_unique_consecutive():
    g = torch.Generator().manual_seed(5)
    inputs = [torch.randint(0, high, (10,), generator=g).sort().values for high in (1, 3, 9)]
    check(lambda x: torch.unique_consecutive(x, return_inverse=True, return_counts=True),
          [(x,) for x in inputs])


def test_repeat_interleave_with_a_tensor_of_counts():
    counts = [torch.tensor([0, 0, 0, 0]), torch.tensor([1, 2, 0, 3]), torch.tensor([5, 5, 5, 5])]
    x = torch.randn(4, 3)
    check(lambda x, r: torch.repeat_interleave(x, r, dim=0), [(x, r) for r in counts])
    check(lambda x, r: x.repeat_interleave(r, 0) * 2, [(x, r) for r in counts])
    check(lambda x, r: torch.repeat_interleave(x[:, 0], r), [(x, r) for r in counts])
    check(lambda r: torch.repeat_interleave(r), [(r,) for r in counts])
    check(lambda r: torch.repeat_interleave(r.int()), [(r,) for r in counts])
    check(lambda x, r: torch.repeat_interleave(x, r[:1], dim=0), [(x, r) for r in counts])
    check(lambda x, r: torch.repeat_interleave(x, r[1], dim=0), [(x, r) for r in counts])
    check(lambda r: torch.repeat_interleave(r, output_size=12),
          [(torch.tensor([3, 3, 3, 3]),), (torch.tensor([12, 0, 0, 0]),)])


def test_repeat_interleave_errors_are_eagers():
    jfn = primtrace.jit(lambda x, r: torch.repeat_interleave(x, r, dim=0))
    x = torch.randn(4, 3)
    with pytest.raises(RuntimeError, match="repeats must have the same size"):
        jfn(x, torch.tensor([1, 2]))
    jfn(x, torch.tensor([1, 2, 3, 4]))
    with pytest.raises(RuntimeError, match="repeats can not be negative"):
        jfn(x, torch.tensor([1, -2, 3, 4]))   # data: raised when the trace runs


def test_bincount():
    g = torch.Generator().manual_seed(6)
    values = [torch.tensor([], dtype=torch.long), torch.zeros(5, dtype=torch.long),
              torch.randint(0, 9, (5,), generator=g)]
    check(lambda v: torch.bincount(v), [(v,) for v in values[1:]])
    check(lambda v: torch.bincount(v, minlength=7), [(v,) for v in values[1:]])
    check(lambda v: v.bincount(minlength=3), [(values[0],)])
    for dtype in (torch.float32, torch.float64, torch.int64):
        w = torch.arange(5).to(dtype)
        check(lambda v, w: torch.bincount(v, w), [(v, w) for v in values[1:]])
    with pytest.raises(RuntimeError, match="non-negative"):
        primtrace.jit(lambda v: torch.bincount(v))(torch.tensor([1, -1]))


@pytest.mark.parametrize("fn", [
    lambda x, m: x.__setitem__(m, 0.0),
    lambda x, m: x.__setitem__(m, torch.tensor(7)),       # 0-dim: converted, as masked_fill_
    lambda x, m: x.__setitem__(m, torch.arange(5.0)),     # a row for every selected row
    lambda x, m: x.__setitem__(m, x[m] * 2),              # the selected rows, in order
    lambda x, m: x.__setitem__((m, slice(1, 3)), -1.0),
], ids=["number", "0-dim", "row", "rows", "mask-and-slice"])
def test_boolean_mask_setitem(fn):
    jfn = primtrace.jit(fn)
    for m in masks(12):
        x, y = X.clone(), X.clone()
        jfn(x, m)
        fn(y, m)
        assert torch.equal(x, y)
    assert primtrace.cache_info(jfn).misses == 1


def test_masked_inplace_add_and_setitem_errors():
    def f(x, m):
        x[m] += 1
        return x
    check(f, [(X.clone(), m) for m in masks(12)])
    jfn = primtrace.jit(lambda x, m, v: x.__setitem__(m, v))
    with pytest.raises(RuntimeError, match="shape mismatch"):   # data: when the trace runs
        jfn(X.clone(), masks(12)[2], torch.ones(20, 5))
    with pytest.raises(RuntimeError, match="dtypes match"):
        jfn(X.clone(), masks(12)[2], torch.ones(1, 5, dtype=torch.float64))
    with pytest.raises(IndexError, match="shape of the mask"):
        primtrace.jit(lambda x, m: x[m])(X, torch.ones(5, dtype=torch.bool))


# --- what follows a selection --------------------------------------------------------------------
@pytest.mark.parametrize("fn", [
    lambda x, m: x[m].sum(),
    lambda x, m: x[m].mean(),
    lambda x, m: x[m].sum(0),
    lambda x, m: x[m].mean(0),
    lambda x, m: (x[m] * 2 + 1).exp().sum(1),
    lambda x, m: x[m].std(),
    lambda x, m: x[m].var(1),
    lambda x, m: x[m].norm(dim=1),
    lambda x, m: x[m].softmax(1),
    lambda x, m: x[m].log_softmax(0),
    lambda x, m: x[m].amax(1),
    lambda x, m: x[m].sort(1).values,
    lambda x, m: x[m].cumsum(0),
    lambda x, m: x[m].t() @ x[m],
    lambda x, m: F.linear(x[m], x[:3]),
    lambda x, m: F.layer_norm(x[m], (5,)),
    lambda x, m: x[m].reshape(-1),
    lambda x, m: x[m].view(-1, 5)[:, ::2].flatten(),
    lambda x, m: x[m].unsqueeze(1).expand(-1, 2, -1),
    lambda x, m: torch.cat([x[m], x[m] + 1]),
    lambda x, m: torch.stack([x[m][:, 0], x[m][:, 1]], 1),
    lambda x, m: (x[m][:, 2] - x[m][:, 0]) * (x[m][:, 3] - x[m][:, 1]),
    lambda x, m: x[m][x[m][:, 0] > 0],
    lambda x, m: x[m][:3],
    lambda x, m: x[m][1:],
    lambda x, m: x[m].to(torch.float64).clone(),
    lambda x, m: torch.where(x[m] > 0, x[m], 0.0).sum(0),
    lambda x, m: (x[m] > 0).float().mean(),
    lambda x, m: x[m].shape[0],
    lambda x, m: (x[m].numel(), x[m].size(0) * 2),
    lambda x, m: x[m].sum().item(),
], ids=lambda fn: None)
def test_ops_after_a_selection(fn):
    check(fn, [(X, m) for m in masks(12)], reference=True)


def test_selections_by_one_mask_share_their_count():
    def f(x, y, m):
        a, b = x[m], y[m]
        return a * b + y.view(3, 4, 5)[m.view(3, 4)].view(-1, 5)   # a view of m: its count
    jfn = check(f, [(X, Y, m) for m in masks(12)])
    trace = primtrace.last_traces(jfn)[0]
    counts = {n.outputs.shape[0] for n in trace.nodes if isinstance(n.outputs, torch.Tensor)
              and n.outputs.ndim and not isinstance(n.outputs.shape[0], int)}
    assert len(counts) == 1   # x[m], y[m] and the selection by a view of m: the same size


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_masked_losses(reduction):
    check(lambda x, t, m: F.cross_entropy(x[m], t[m], reduction=reduction),
          [(X, TARGET, m) for m in masks(12)], reference=True)
    check(lambda x, y, m: F.mse_loss(x[m], y[m], reduction=reduction),
          [(X, Y, m) for m in masks(12)], reference=True)
    check(lambda x, y, m: F.binary_cross_entropy_with_logits(x[m], (y[m] > 0).float(),
                                                             reduction=reduction),
          [(X, Y, m) for m in masks(12)], reference=True)


def test_masked_cross_entropy_variants():
    target = torch.where(torch.arange(12) % 4 == 0, -100, TARGET)
    cases = [
        lambda x, t, m: F.cross_entropy(x[m], t[m]),
        lambda x, t, m: F.cross_entropy(x[m], t[m], label_smoothing=0.1),
        lambda x, t, m: F.cross_entropy(x[m], t[m], weight=torch.arange(1.0, 6.0)),
        lambda x, t, m: F.nll_loss(x[m].log_softmax(-1), t[m]),
        lambda x, t, m: F.cross_entropy(x.view(3, 4, 5)[m.view(3, 4)], t.view(3, 4)[m.view(3, 4)]),
    ]
    for fn in cases:
        check(fn, [(X, t, m) for m in masks(12) for t in (TARGET, target)], reference=True)


def test_mask_weighted_loss_needs_no_selection():
    def f(x, y, m):
        loss = (x - y).pow(2).sum(-1)
        return (loss * m).sum() / m.sum()
    check(f, [(X, Y, m) for m in masks(12)], reference=True)


def test_out_of_range_targets_of_dropped_rows_raise_nothing():
    target = TARGET.clone()
    target[::2] = 99                      # out of range, but never selected
    keep = torch.arange(12) % 2 == 1
    jfn = check(lambda x, t, m: F.cross_entropy(x[m], t[m]), [(X, target, keep)])
    with pytest.raises(IndexError, match="out of bounds"):
        jfn(X, target, torch.ones(12, dtype=torch.bool))   # selected: eager's error


def test_a_sum_of_a_selection_is_computed_without_it(executors):
    g = torch.Generator().manual_seed(7)
    x, target = torch.randn(256, 64, generator=g), torch.randint(0, 64, (256,), generator=g)
    jfn = check(lambda x, t, m: F.cross_entropy(x[m], t[m]),
                [(x, target, m) for m in masks(256)], reference=True)
    execution = primtrace.last_trace(jfn)
    names = {n.symbol.name for n in execution.nodes} | {
        s.symbol.name for n in execution.nodes for s in n.subnodes}
    assert "mask_select" not in names and "amax" in names   # every row's loss
    if executors == "numba":   # in one row kernel
        assert any(n.symbol.kind == "fused" and "amax" in {s.symbol.name for s in n.subnodes}
                   for n in execution.nodes)
    jmean = check(lambda x, m: x[m].mean(), [(X, m) for m in masks(12)], reference=True)
    assert [n.symbol.name for n in primtrace.last_trace(jmean).nodes][:1] == ["mask_count"]
    kept = primtrace.jit(lambda x, m: x[m].mean(), sink_selections=False)
    kept(X, masks(12)[2])
    assert _selects(primtrace.last_trace(kept))


def _selects(trace) -> bool:
    """Whether `trace` computes a boolean selection: its prim, or eager's indexing call
    (where the calls around it run whole, the selection does too)."""
    return "mask_select" in str(trace) or "torch.Tensor.__getitem__" in str(trace)


def test_a_selection_used_otherwise_is_kept():
    jfn = check(lambda x, m: (x[m].sum(), x[m].amax(0)), [(X, m) for m in masks(12)[1:]],
                reference=True)
    assert _selects(primtrace.last_trace(jfn))
    def written(x, m):
        s = x[m]
        x.zero_()                       # the selection reads x before the write
        return s.sum()
    check(written, [(X.clone(), m) for m in masks(12)])


def test_empty_selections_raise_as_eager_when_the_trace_runs():
    jfn = primtrace.jit(lambda x, m: x[m].amax())
    none = torch.zeros(12, dtype=torch.bool)
    assert_same(jfn(X, masks(12)[2]), X[masks(12)[2]].amax())
    with pytest.raises((RuntimeError, IndexError)):
        X[none].amax()
    with pytest.raises((RuntimeError, IndexError)):
        jfn(X, none)
    first = primtrace.jit(lambda x, m: x[m][0])
    assert_same(first(X, masks(12)[2]), X[masks(12)[2]][0])
    with pytest.raises(IndexError):
        first(X, none)


@pytest.mark.parametrize("fn, op", [
    (lambda x, m: len(x[m]), "value of n"),
    (lambda x, m: x[m] + 1 if x[m].shape[0] > 2 else x[m], "value of n"),
    (lambda x, m: x[m].unsqueeze(0), "unsqueeze"),
    (lambda x, m: x[m] + x[:3], "broadcast"),
    (lambda x, m: x[:, m[:5]], "lay out"),
    (lambda x, m: x[m] + x[m[[0] * 12]], "broadcast"),
])
def test_what_cannot_take_a_data_dependent_size_raises_clearly(fn, op):
    with pytest.raises(DataDependentError, match=op) as info:
        primtrace.jit(fn)(X, masks(12)[2])
    assert "test_data_dependent.py" in str(info.value)   # the user's line


def test_trace_shows_the_count():
    trace = primtrace.trace(lambda x, m: x[m].sum(1))(X, masks(12)[2])
    text = str(trace)
    assert 't1, n0 = prims.mask_select(x, m, 0, None)' in text
    assert '"cpu f32[n0, 5]"' in text and '"cpu f32[n0]"' in text


# --- gradients -----------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [
    lambda x, t, m: F.cross_entropy(x[m], t[m]),
    lambda x, t, m: (x[m] ** 2).mean(),
    lambda x, t, m: torch.masked_select(x, m[:, None]).sum(),
    lambda x, t, m: x[m].softmax(1)[:, 0].sum(),
    lambda x, t, m: x[m].amax(1).sum(),
    lambda x, t, m: torch.repeat_interleave(x, m.long() * 2, dim=0).pow(2).sum(),
    lambda x, t, m: (lambda y: (y.__setitem__(m, x[m] * 3), (y * y).sum())[1])(x * 1),
    lambda x, t, m: (lambda y: (y.__setitem__(m, 0.0), (y * y).sum())[1])(x * 1),
], ids=["cross_entropy", "mean", "masked_select", "softmax", "amax", "repeat_interleave",
        "setitem-rows", "setitem-number"])
def test_gradients_are_eagers(fn):
    jfn = primtrace.jit(fn)
    for m in masks(12):
        x, xe = X.clone().requires_grad_(), X.clone().requires_grad_()
        got, expected = jfn(x, TARGET, m), fn(xe, TARGET, m)
        assert_same(got.detach(), expected.detach())
        got.backward()
        expected.backward()
        assert_same(x.grad, xe.grad)
    assert primtrace.cache_info(jfn).misses == 1


def test_training_differentiates_selections_with_primtraces_rules():
    jfn = primtrace.jit(lambda x, t, m: F.cross_entropy(x[m], t[m]))
    x = X.clone().requires_grad_()
    jfn(x, TARGET, masks(12)[2]).backward()
    forward = primtrace.last_traces(jfn)[1]
    assert "fallback" not in forward.tags
    backward = str(primtrace.last_trace(jfn).tags["backward"][0])
    assert "prims.mask_put" in backward   # the cotangent written back at the selected rows


def test_a_selection_whose_derivative_torch_lacks_falls_back_to_torch():
    def f(x, m):
        return torch.unique(x[m] * 0 + 1).sum() + x[m].sum()
    jfn = primtrace.jit(f)
    x = X.clone().requires_grad_()
    out = jfn(x, masks(12)[2])
    assert "unique" in primtrace.last_traces(jfn)[1].tags["fallback"]
    assert_same(out.detach(), f(X, masks(12)[2]))
    with pytest.raises(RuntimeError, match="not implemented"):
        out.backward()   # eager's own error: unique has no derivative


def test_the_count_of_a_selection_is_defined_in_the_autograd_fallback():
    def f(x, y, m):
        s = x[m]
        return s.sum(), s.shape[0], y[m] * 2, torch.unique(x * 1)
    jfn = primtrace.jit(f)
    for m in masks(12):
        x, xe = X.clone().requires_grad_(), X.clone().requires_grad_()
        got, expected = jfn(x, Y, m), f(xe, Y, m)
        assert got[1] == expected[1] and torch.equal(got[2], expected[2])
        got[0].backward()
        expected[0].backward()
        assert torch.equal(x.grad, xe.grad)


@pytest.mark.parametrize("value", [True, False])
def test_a_zero_dim_mask_masks_a_new_dim(value):
    """x[torch.tensor(True)] is x with a new dim of size 1, x[torch.tensor(False)] of size 0,
    reads and writes, 0-dim x included (the conformance samples found them raising)."""
    m = torch.tensor(value)

    def write(x, v):
        x = x.clone()
        x[m] = v
        return x

    def read(x):
        return x[m].sum(), x[m], x[m, 1:]
    for x in (torch.randn(3, 4), torch.randn(())):
        for v in (5.0, torch.tensor(2.0)):
            assert torch.equal(primtrace.jit(write)(x, v), write(x, v))
    x = torch.randn(3, 4)
    for a, b in zip(primtrace.jit(read)(x), read(x)):
        assert a.shape == b.shape and a.stride() == b.stride() and torch.equal(a, b)


@pytest.mark.parametrize("rows, cols", [(512, 300), (6, 4000)])
def test_a_masked_loss_skips_the_rows_the_mask_drops(rows, cols, executors):
    """``F.cross_entropy(logits[mask], target[mask])``: one row kernel computes each row's
    loss where the mask keeps it and ends the rows it drops before their passes (a NaN
    there is never read, as eager never selects it); every fraction matches eager."""
    def loss(logits, target, mask):
        return F.cross_entropy(logits[mask], target[mask])
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(rows, cols, generator=g)
    target = torch.randint(0, cols, (rows,), generator=g)
    jitted = primtrace.jit(loss)
    for fraction in (0.0, 0.1, 0.5, 1.0):
        mask = torch.rand(rows, generator=g) < fraction
        dropped = logits.clone()
        dropped[~mask] = float("nan")
        got, want = jitted(dropped, target, mask), loss(dropped, target, mask)
        torch.testing.assert_close(got, want, equal_nan=True)
    assert ("continue" in primtrace.kernel_source(jitted)) == (executors == "numba")
    assert primtrace.cache_info(jitted).misses == 1
