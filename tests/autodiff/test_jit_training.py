"""primtrace.jit on calls that need gradients: the fused forward and backward against eager
autograd (values, gradients, which outputs require grad, saved values, random draws, state
after each step), the fallbacks to torch's autograd, and double backward."""
from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import primtrace

pytestmark = pytest.mark.filterwarnings("ignore::primtrace.OpaqueOpWarning")


def _backward_trace(jfn):
    return primtrace.last_traces(jfn)[-1].tags["backward"][-1]


def layer_norm_gelu(x, r, w, b):
    return F.gelu(F.layer_norm(x + r, (x.shape[-1],), w, b))


def test_fused_forward_and_backward_match_eager():
    torch.manual_seed(0)
    x, r = torch.randn(64, 32, requires_grad=True), torch.randn(64, 32)
    w, b = torch.randn(32, requires_grad=True), torch.randn(32, requires_grad=True)
    jf = primtrace.jit(layer_norm_gelu)
    g = torch.randn(64, 32)
    got = jf(x, r, w, b)
    want = layer_norm_gelu(x, r, w, b)
    torch.testing.assert_close(got, want)
    assert got.requires_grad and type(got.grad_fn).__name__ == "_TracedFunctionBackward"
    for a, e in zip(torch.autograd.grad(got, (x, w, b), g), torch.autograd.grad(want, (x, w, b), g)):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-5)
    forward, backward = primtrace.last_trace(jf), _backward_trace(jf)
    assert any(n.symbol.kind.name == "FUSED" for n in forward.nodes)
    assert any(n.symbol.kind.name == "FUSED" for n in backward.nodes)
    assert "note: the first" in str(backward)   # the min-cut recomputes cheap values


def test_outputs_require_grad_as_eager():
    def f(x):
        y = x.sin() * 2
        return y, y.argmax(), x.detach() * 2, torch.zeros(3), y.sum(), (y > 0).float()
    x = torch.randn(5, 4, requires_grad=True)
    got, want = primtrace.jit(f)(x), f(x)
    assert [getattr(o, "requires_grad", None) for o in got] == \
        [getattr(o, "requires_grad", None) for o in want]


def test_saved_values_are_freed_and_backward_twice_raises_as_eager():
    x = torch.randn(5, requires_grad=True)
    y = primtrace.jit(lambda x: (x.exp() * x).sum())(x)
    y.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()


def test_saved_tensor_hooks_see_what_is_saved():
    packed = []

    def pack(t):
        packed.append(t.numel() * t.element_size())
        return t
    x = torch.randn(100, 10, requires_grad=True)
    jf = primtrace.jit(lambda x: (x.tanh() * 3).sum())
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = jf(x)
    y.backward()
    assert packed and sum(packed) <= 100 * 10 * 4   # one f32 tensor: tanh's input or result
    torch.testing.assert_close(x.grad, 3 * (1 - x.detach().tanh() ** 2))


def test_dropout_backward_uses_the_forward_mask():
    xx = torch.randn(1000, requires_grad=True)
    y = primtrace.jit(lambda x: F.dropout(x, 0.5) * 3)(xx)
    y.sum().backward()
    assert torch.equal(xx.grad != 0, y != 0)
    assert torch.all(xx.grad[xx.grad != 0] == 6)


def test_training_loop_with_batch_norm_and_relu_matches_eager():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.0),
                          nn.Linear(16, 3))
    eager = copy.deepcopy(model)
    jm = primtrace.jit(model)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, eager)]
    data = [(torch.randn(32, 6), torch.randint(0, 3, (32,))) for _ in range(5)]
    for x, t in data:
        for m, opt in zip((jm, eager), opts):
            opt.zero_grad()
            F.cross_entropy(m(x), t).backward()
            opt.step()
    for p, q in zip(model.state_dict().values(), eager.state_dict().values()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    assert primtrace.last_traces(jm)[1].tags.get("fallback") is None
    model.eval(), eager.eval()
    x = torch.randn(4, 6)
    torch.testing.assert_close(jm(x), eager(x), rtol=1e-4, atol=1e-5)


def test_running_statistics_updated_in_training_do_not_require_grad():
    """batch_norm's running statistics are updated outside autograd in eager: a value read
    from them afterwards requires no grad though the batch's statistics do (random program
    104240 returned softmax(running_mean) requiring grad)."""
    def f(x, w, running_mean, running_var):
        h = x @ w.t()
        F.batch_norm(h, running_mean, running_var, training=True, momentum=0.3)
        return torch.softmax(running_mean, -1), running_var * 2

    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(3, 4, generator=g), torch.randn(2, 4, generator=g).requires_grad_()
    stats = [torch.zeros(2), torch.ones(2)]
    eager_stats = [t.clone() for t in stats]
    got, expected = primtrace.jit(f)(x, w, *stats), f(x, w, *eager_stats)
    for a, b in zip(got, expected):
        assert a.requires_grad == b.requires_grad == False   # noqa: E712
        torch.testing.assert_close(a, b)
    for a, b in zip(stats, eager_stats):
        assert not a.requires_grad
        torch.testing.assert_close(a, b)


def test_frozen_parameters_get_no_gradient():
    lin = nn.Linear(4, 4)
    lin.weight.requires_grad_(False)
    primtrace.jit(lin)(torch.randn(2, 4)).sum().backward()
    assert lin.weight.grad is None and lin.bias.grad is not None


def test_non_contiguous_cotangent():
    x = torch.randn(6, 4, requires_grad=True)
    y = primtrace.jit(lambda x: x.exp())(x)
    g = torch.randn(4, 6).t()
    (gx,) = torch.autograd.grad(y, x, g)
    torch.testing.assert_close(gx, g * x.detach().exp())


def test_double_backward_replays_with_the_same_draws():
    def f(x, w):
        return (F.dropout(torch.tanh(x @ w), 0.3) ** 2).sum()
    x, w = torch.randn(8, 4, requires_grad=True), torch.randn(4, 5, requires_grad=True)
    results = []
    for fn in (primtrace.jit(f), f):
        torch.manual_seed(3)
        y = fn(x, w)
        (g,) = torch.autograd.grad(y, x, create_graph=True)
        results.append(torch.autograd.grad((g ** 2).sum() + y, (x, w)))
    for a, e in zip(*results):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-5)


def test_double_backward_after_the_input_changed_raises():
    x = torch.randn(3, requires_grad=True)
    h = torch.randn(3)
    y = primtrace.jit(lambda x, h: (x * h).sin().sum())(x, h)
    (g,) = torch.autograd.grad(y, x, create_graph=True)
    h.add_(1)
    with pytest.raises(RuntimeError, match="modified"):
        g.sum().backward()


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        return g * 100


def _hooked(x):
    y = x * 2
    y.register_hook(lambda g: g * 10)
    return y.sum()


def _retained(x):
    y = x * 2
    y.retain_grad()
    return y.sum(), y


@pytest.mark.parametrize("fn, reason", [
    (_hooked, "register_hook"),
    (_retained, "retain_grad"),
    (lambda x: Square.apply(x).sum(), "custom autograd.Function Square"),
])
def test_autograd_graph_calls_fall_back_and_match_eager(fn, reason):
    x = torch.randn(3, requires_grad=True)
    grads = []
    for f in (primtrace.jit(fn), fn):
        x.grad = None
        out = f(x)
        (out[0] if isinstance(out, tuple) else out).backward()
        grads.append(x.grad.clone())
        if fn is _retained:
            torch.testing.assert_close(out[1].grad, torch.ones(3))
    torch.testing.assert_close(*grads)
    assert reason in str(primtrace.explain(fn, x))
    assert reason in str(primtrace.trace(fn, stage="execution")(x))


def test_in_place_write_into_a_leaf_raises_as_eager():
    def f(x):
        x.add_(1)
        return x * 2
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        primtrace.jit(f)(torch.randn(3, requires_grad=True))


def test_save_all_option():
    x = torch.randn(16, 8, requires_grad=True)
    grads = []
    for saved in ("min_cut", "save_all"):
        x.grad = None
        primtrace.jit(layer_norm_gelu, saved=saved)(x, x, torch.ones(8), torch.zeros(8)).sum().backward()
        grads.append(x.grad.clone())
    torch.testing.assert_close(*grads)
    with pytest.raises(ValueError, match="saved must be"):
        primtrace.jit(layer_norm_gelu, saved="some")


def test_no_output_needs_grad_runs_one_plain_trace():
    x = torch.randn(4, requires_grad=True)
    jf = primtrace.jit(lambda x: x.argmax() + 1)
    assert not jf(x).requires_grad
    assert "backward" not in primtrace.last_trace(jf).tags


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_dtypes(dtype):
    torch.manual_seed(0)
    x = torch.randn(32, 16, dtype=dtype, requires_grad=True)
    w = torch.randn(16, dtype=dtype, requires_grad=True)

    def f(x, w):
        return (F.silu(x) * w).softmax(-1).log().mean()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.autograd.grad(primtrace.jit(f)(x, w), (x, w))
    want = torch.autograd.grad(f(x, w), (x, w))
    tol = dict(rtol=2e-2, atol=2e-3) if dtype in (torch.float16, torch.bfloat16) else {}
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, **tol)


def test_grad_mode_is_unchanged_after_a_call():
    x = torch.randn(4, requires_grad=True)
    for fn in (lambda x: x.argmax() + 1, lambda x: x.sin(), _hooked):
        primtrace.jit(fn)(x)
        assert torch.is_grad_enabled()


def test_no_grad_block_inside_a_call_that_needs_none():
    def f(x):
        with torch.no_grad():
            y = x * 2
        return y, x.argmax()
    x = torch.randn(4, requires_grad=True)
    got, want = primtrace.jit(f)(x), f(x)
    assert [o.requires_grad for o in got] == [o.requires_grad for o in want]


def test_a_saved_value_written_in_place_later_is_copied_first():
    """eager raises (a value needed for gradient was modified); primtrace saves a copy made
    before the write, so the backward reads what the forward read."""
    def f(x):
        y = x.exp()
        y.clamp_(0, 1.5)
        return (y * x).sum()

    def g(x):
        y = x * 3
        z = y.sin()
        y.mul_(2)
        return (z + y).sum()
    x = torch.randn(5, 4, requires_grad=True)
    xd, e = x.detach(), x.detach().exp()
    (gf,) = torch.autograd.grad(primtrace.jit(f)(x), x)
    torch.testing.assert_close(gf, e.clamp(0, 1.5) + xd * e * (e <= 1.5))
    (gg,) = torch.autograd.grad(primtrace.jit(g)(x), x)
    torch.testing.assert_close(gg, 3 * (3 * xd).cos() + 6)


def test_relu_inplace_module_matches_eager():
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(inplace=True), nn.Linear(8, 2), nn.Sigmoid())
    x = torch.randn(5, 4, requires_grad=True)
    got = torch.autograd.grad(primtrace.jit(m)(x).sum(), [x, *m.parameters()])
    want = torch.autograd.grad(m(x).sum(), [x, *m.parameters()])
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e)


def test_double_backward_of_a_call_that_writes_state_raises():
    bn = nn.BatchNorm1d(4)
    jm = primtrace.jit(bn)
    x = torch.randn(8, 4, requires_grad=True)
    with pytest.raises(RuntimeError, match="writes into its inputs or state"):
        torch.autograd.grad(jm(x).pow(2).sum(), x, create_graph=True)


@pytest.mark.parametrize("method", ["mul_", "div_", "pow_", "atan2_", "remainder_"])
def test_a_saved_value_written_in_place_later_is_saved_as_a_copy(method):
    """x.clone().mul_(y): y's gradient reads the clone's values before the write (eager saves
    original self); the forward saves a copy made before the write, not the written buffer."""
    def f(x, y):
        return getattr(x.clone(), method)(y)
    x, y = torch.rand(3, 4) + 0.5, torch.rand(3, 4) + 0.5
    g = torch.randn(3, 4)
    grads = []
    for fn in (primtrace.jit(f), f):
        leaves = x.clone().requires_grad_(), y.clone().requires_grad_()
        grads.append(torch.autograd.grad(fn(*leaves), leaves, g))
    for a, e in zip(*grads):
        torch.testing.assert_close(a, e)


def test_an_expanded_input_returned_as_is_takes_a_dense_cotangent():
    x = torch.randn(1, 4).expand(3, 4).detach().requires_grad_()
    y = primtrace.jit(lambda x: x.to(torch.float32))(x)
    g = torch.randn(3, 4)
    torch.testing.assert_close(torch.autograd.grad(y, x, g)[0], g)


def test_an_input_eager_reaches_gets_zeros_not_none():
    """Eager's graph reaches copysign's sign operand (its gradient is zeros) but not what only
    a comparison reads (None)."""
    def f(x, s, m):
        return torch.copysign(x, s) * (m > 0).float()
    leaves = [torch.randn(3, requires_grad=True) for _ in range(3)]
    got = torch.autograd.grad(primtrace.jit(f)(*leaves).sum(), leaves, allow_unused=True)
    want = torch.autograd.grad(f(*leaves).sum(), leaves, allow_unused=True)
    assert got[2] is None and want[2] is None
    torch.testing.assert_close(got[:2], want[:2])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_backward_rounds_once(dtype):
    """The rules of half-dtype elementwise prims and broadcasts run in float32 and round
    once: w's gradient is sum(g * x) over the rows in float32, rounded (not each product
    rounded, then summed in the half dtype)."""
    torch.manual_seed(0)
    x = torch.randn(64, 8, dtype=dtype)
    w = torch.randn(8, dtype=dtype, requires_grad=True)
    g = torch.randn(64, 8, dtype=dtype)
    (got,) = torch.autograd.grad(primtrace.jit(lambda x, w: x * w)(x, w), w, g)
    assert torch.equal(got, (g.float() * x.float()).sum(0).to(dtype))
def test_create_graph_keeps_eager_tie_conventions():
    """The replay runs prims with torch's autograd: differentiate_as's torch implementation
    follows its rule (relu at exactly 0 gives 0, not half)."""
    x = torch.tensor([-1.0, 0.0, 2.0], requires_grad=True)

    def f(x):
        return torch.relu(x).pow(2).sum() + torch.relu(x).sum()
    results = []
    for fn in (primtrace.jit(f), f):
        (g,) = torch.autograd.grad(fn(x), x, create_graph=True)
        results.append((g.detach(), torch.autograd.grad(g.sum(), x)[0]))
    for a, e in zip(*results):
        torch.testing.assert_close(a, e)


@pytest.mark.parametrize("call", [
    lambda w, ids: F.embedding(ids, w, padding_idx=0),
    lambda w, ids: F.embedding(ids, w, padding_idx=-1),
    lambda w, ids: torch.embedding(w, ids, 2),
    lambda w, ids: torch.embedding(w, ids),
    lambda w, ids: F.embedding(ids, w, scale_grad_by_freq=True),
], ids=["padding_idx", "negative padding_idx", "torch.embedding padding_idx", "no padding",
        "scale_grad_by_freq"])
def test_embedding_gradient_skips_the_padding_row(call):
    """The rows read at padding_idx carry no gradient (the padding row's stays 0: the fused
    backward gave it the cotangents of its reads); scale_grad_by_freq runs torch's op."""
    torch.manual_seed(0)
    w = torch.randn(5, 3, requires_grad=True)
    ids = torch.tensor([[0, 1, 1], [2, 0, 4], [4, 4, 2]])
    grads = []
    for fn in (primtrace.jit(lambda w, ids: call(w, ids).sin().sum()),
               lambda w, ids: call(w, ids).sin().sum()):
        grads.append(torch.autograd.grad(fn(w, ids), w)[0])
    torch.testing.assert_close(*grads)


def test_a_result_that_is_an_input_is_the_input():
    """``return x`` (or ``x.contiguous()``, a parameter) gives the caller the input itself,
    as eager does, not the view autograd makes of a Function's output that is an input."""
    x, w = torch.randn(3, 4, requires_grad=True), torch.randn(4, requires_grad=True)
    for f in (lambda x, w: (x, x * w), lambda x, w: (x.contiguous(), w * 2),
              lambda x, w: (w, x.to(torch.float32) * w)):
        got, want = primtrace.jit(f)(x, w), f(x, w)
        assert [a is b for a, b in zip(got, want)] == [True, False]
        assert type(got[1].grad_fn).__name__ == "_TracedFunctionBackward"
        gots = torch.autograd.grad([(t * (i + 1.5)).sin().sum() for i, t in enumerate(got)], (x, w))
        wants = torch.autograd.grad([(t * (i + 1.5)).sin().sum() for i, t in enumerate(want)], (x, w))
        torch.testing.assert_close(gots, wants)


@pytest.mark.parametrize("grad", [True, False])
def test_calls_under_autocast_are_traced_with_its_casts(grad):
    """A call under autocast is traced with autocast's casts (tests/autodiff/test_jit_autocast.py
    has more): eager's dtypes, values and gradients, without a warning. Before autocast was
    modelled, a call without grad computed in float32 (values off by ~1), and a fused entry
    compiled outside autocast served calls under it. Each autocast state has its entry."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 6), nn.GELU(), nn.LayerNorm(6), nn.Linear(6, 2))
    eager = copy.deepcopy(model)
    x = torch.randn(4, 6)
    jm = primtrace.jit(model)
    with torch.set_grad_enabled(grad):
        jm(x)   # compiled outside autocast: its entry must not serve the calls below
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16), warnings.catch_warnings(
                    record=True) as caught:
                warnings.simplefilter("always")
                got, want = jm(x), eager(x)
            assert got.dtype == want.dtype == torch.bfloat16
            torch.testing.assert_close(got, want)
            assert [w.category for w in caught] == []
        if grad:
            got.float().pow(2).sum().backward()
            want.float().pow(2).sum().backward()
            for p, e in zip(model.parameters(), eager.parameters()):
                torch.testing.assert_close(p.grad, e.grad, rtol=2e-2, atol=1e-3)
        assert primtrace.cache_info(jm).misses == 2
        torch.testing.assert_close(jm(x), eager(x))   # outside autocast: the compiled entry
        assert primtrace.cache_info(jm).hits >= 2


def test_autocast_warning_is_said_once_per_function():
    """A call whose casts are not modelled (einsum casts inside its decomposition) runs
    eagerly under autocast, said once."""
    jfn = primtrace.jit(lambda a, b: torch.einsum("ij,jk->ik", a, b))
    with torch.autocast("cpu", dtype=torch.bfloat16), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jfn(torch.ones(2, 2), torch.ones(2, 2))
        jfn(torch.ones(2, 2), torch.ones(2, 2))
    assert [w.category for w in caught] == [primtrace.AutocastWarning]

@pytest.mark.parametrize("foreach", [None, False, True])
def test_clip_grad_norm_inside_jit_matches_eager(foreach):
    """torch's C++ grouping of tensors by device and dtype is done in Python on traced
    tensors (it read them as meta): the gradients are clipped in place as eager's."""
    torch.manual_seed(0)
    first, second = torch.nn.Linear(4, 8), torch.nn.Linear(8, 2).double()
    model = torch.nn.ModuleList([first, second])   # parameters of two dtypes: two groups
    second(first(torch.randn(5, 4)).double()).square().sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]

    def clip():
        return torch.nn.utils.clip_grad_norm_(list(model.parameters()), 0.5, foreach=foreach)
    want = clip()
    clipped = [p.grad.clone() for p in model.parameters()]
    jitted = primtrace.jit(clip)
    for _ in range(2):
        for p, g in zip(model.parameters(), grads):
            p.grad = g.clone()
        torch.testing.assert_close(jitted(), want)
        for p, g in zip(model.parameters(), clipped):
            torch.testing.assert_close(p.grad, g)
