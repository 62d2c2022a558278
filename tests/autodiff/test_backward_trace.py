"""Backward traces of prims against eager autograd.

A program is traced to prims (its inputs need no grad, so every op decomposes), its backward
trace is built from the prims' VJP rules, and the forward (returning the saved values) and
the backward run with the torch executor; the gradients must match torch.autograd.grad's for
the same random cotangents, in float64 and float32.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import primtrace
from primtrace.autodiff import backward_trace, forward_with_saved
from primtrace.executors import TORCH
from primtrace.executors.execution_trace import lower
from primtrace.executors.trace_to_python import compile_trace
from primtrace.ir.tree import proxies_in

pytestmark = pytest.mark.filterwarnings("ignore::primtrace.OpaqueOpWarning")   # opaque calls

TOLERANCE = {torch.float64: dict(rtol=1e-9, atol=1e-10), torch.float32: dict(rtol=2e-4, atol=2e-5)}
TOLERANCE.update({torch.complex128: TOLERANCE[torch.float64],
                  torch.complex64: TOLERANCE[torch.float32]})


def _run(trace, executors=(TORCH,)):
    return compile_trace(lower(trace, list(executors)))[0]


def _floating(x) -> bool:
    return isinstance(x, torch.Tensor) and (x.dtype.is_floating_point or x.dtype.is_complex)


def through_prims(fn, *args):
    """(outputs, gradients of the floating inputs) by the forward and backward traces."""
    forward = primtrace.trace(fn, stage="prims")(*args)
    bw = backward_trace(forward)
    outputs, saved = _run(forward_with_saved(forward, bw.saved))(*args)
    flat = list(outputs) if isinstance(outputs, tuple) else [outputs]
    torch.manual_seed(1)
    cotangents = [torch.randn_like(o) if _floating(o) else None for o in flat]
    by_name = {p.name: c for p, c in zip(proxies_in(forward.outputs), cotangents)}
    grads = _run(bw.trace)(*saved, *[by_name[out.name] for out, _ in bw.cotangents])
    return flat, cotangents, grads, bw


def check_against_eager(fn, *args):
    flat, cotangents, grads, bw = through_prims(fn, *args)
    leaves = [a.detach().clone().requires_grad_() if _floating(a) else a for a in args]
    expected_out = fn(*leaves)
    expected_flat = list(expected_out) if isinstance(expected_out, tuple) else [expected_out]
    pairs = [(o, c) for o, c in zip(expected_flat, cotangents) if _floating(o) and o.requires_grad]
    wanted = [leaf for leaf in leaves if _floating(leaf)]
    expected = torch.autograd.grad([o for o, _ in pairs], wanted, [c for _, c in pairs],
                                   allow_unused=True)
    dtype = next(a.dtype for a in args if _floating(a))
    for got, want in zip(flat, expected_flat):
        torch.testing.assert_close(got, want.detach(), **TOLERANCE[dtype])
    assert len(grads) == len(expected)
    for got, want in zip(grads, expected):
        if want is None:
            assert got is None
        else:
            torch.testing.assert_close(got, want, **TOLERANCE[dtype])
    return bw


# --- programs ------------------------------------------------------------------------------------
def layer_norm_gelu(x, r, w, b):
    return F.gelu(F.layer_norm(x + r, (x.shape[-1],), w, b))


def rms_norm(x, w):
    return F.rms_norm(x, (x.shape[-1],), w, eps=1e-6)


def cross_entropy(x, target):
    return F.cross_entropy(x, target)


def silu_gate(a, b):
    return F.silu(a) * b


def mlp(x, w1, b1, w2):
    return F.linear(F.relu(F.linear(x, w1, b1)), w2).sum()


def attention(q, k, v):
    scores = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)
    return scores @ v


def gpt_block(idx, targets, wte, wpe, ln1_w, ln1_b, w_qkv, b_qkv, w_proj, ln2_w, ln2_b, w_fc,
              w_out):
    """A GPT-2 block with tied embeddings and a cross-entropy loss."""
    (B, T), C, H = idx.shape, wte.shape[1], 2
    x = F.embedding(idx, wte) + wpe[:T]
    q, k, v = F.linear(F.layer_norm(x, (C,), ln1_w, ln1_b), w_qkv, b_qkv).split(C, dim=-1)
    q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    att = ((q @ k.transpose(-2, -1)) / (C // H) ** 0.5).masked_fill(~causal, float("-inf"))
    x = x + F.linear((att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C), w_proj)
    h = F.gelu(F.linear(F.layer_norm(x, (C,), ln2_w, ln2_b), w_fc), approximate="tanh")
    logits = (x + F.linear(h, w_out)) @ wte.T
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def _programs(dtype):
    def r(*shape):
        return torch.randn(*shape, dtype=dtype)

    def small(*shape):
        return r(*shape) * 0.3
    V, T, C = 11, 5, 8
    return [
        (layer_norm_gelu, (r(4, 8), r(4, 8), r(8), r(8))),
        (rms_norm, (r(3, 5, 8), r(8))),
        (cross_entropy, (r(6, 5), torch.tensor([1, 0, 4, 4, 2, 3]))),
        (silu_gate, (r(4, 8), r(4, 8))),
        (mlp, (r(4, 8), r(5, 8), r(5), r(3, 5))),
        (attention, (r(2, 4, 8), r(2, 6, 8), r(2, 6, 8))),
        (gpt_block, (torch.randint(0, V, (2, T)), torch.randint(0, V, (2, T)), small(V, C),
                     small(T, C), 1 + small(C), small(C), small(3 * C, C), small(3 * C),
                     small(C, C), 1 + small(C), small(C), small(4 * C, C), small(C, 4 * C))),
    ]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("index", range(7), ids=[f.__name__ for f, _ in _programs(torch.float64)])
def test_program(dtype, index):
    torch.manual_seed(index)
    fn, args = _programs(dtype)[index]
    check_against_eager(fn, *args)


def _layouts():
    d = torch.float64
    transposed = torch.randn(8, 4, dtype=d).T
    strided = torch.randn(4, 16, dtype=d)[:, ::2]
    expanded = torch.randn(4, 1, dtype=d).expand(4, 8)
    channels_last = torch.randn(2, 3, 6, 6, dtype=d).to(memory_format=torch.channels_last)
    return [
        ("views", lambda a: a.reshape(2, 16)[:, 1:].flip(1).T.contiguous().view(-1)[::3],
         (transposed,)),
        ("layer_norm", layer_norm_gelu, (transposed, strided, torch.randn(8, dtype=d),
                                         torch.randn(8, dtype=d))),
        ("expanded", lambda a, b: (a * b).softmax(0).cumsum(1), (expanded, strided)),
        ("channels_last", lambda a, w: F.avg_pool2d(F.conv2d(a, w, padding=1), 2).reshape(2, -1),
         (channels_last, torch.randn(4, 3, 3, 3, dtype=d))),
        ("cat_index", lambda a, b: torch.cat([a, b], 1)[torch.tensor([0, 3]), 2:],
         (transposed, strided)),
    ]


LAYOUTS = _layouts()


@pytest.mark.parametrize("name,fn,args", LAYOUTS, ids=[name for name, _, _ in LAYOUTS])
def test_input_layouts(name, fn, args):
    """Transposed, sliced, expanded and channels_last inputs: rules read shapes, not strides,
    and reshape copies where the cotangent's strides allow no view."""
    check_against_eager(fn, *args)


def test_cotangents_of_a_value_read_twice_are_summed_and_dead_branches_dropped():
    def f(x, y, unused):
        dead = torch.exp(x) * unused          # reaches no output
        return x * x + torch.sin(x), y.detach() * 2, dead.sum() * 0 + 1
    args = [torch.randn(3, 4, dtype=torch.float64) for _ in range(3)]
    bw = check_against_eager(lambda x, y, u: f(x, y, u)[:2], *args)
    names = [n.symbol.name for n in bw.trace.nodes]
    assert "exp" not in names and names.count("add") == 2   # x's three uses: two sums
    assert bw.trace.outputs[1:] == (None, None)   # y is detached; `unused` reaches no output


def test_what_runs_under_no_grad_passes_no_gradient():
    def f(x, y):
        with torch.no_grad():
            scale = (y * y).sum()
        return x * scale + y
    check_against_eager(f, torch.randn(3, dtype=torch.float64), torch.randn(3, dtype=torch.float64))


def test_results_torch_does_not_differentiate_pass_no_gradient():
    def f(x):
        return torch.special.bessel_j0(x) * x + torch.zeros_like(x) + (x > 0)
    check_against_eager(f, torch.randn(3, dtype=torch.float64))


def test_what_torch_cannot_differentiate_raises():
    from primtrace.prims.differentiation import NotDifferentiableError
    forward = primtrace.trace(torch.heaviside, stage="prims")(torch.randn(3), torch.randn(3))
    with pytest.raises(NotDifferentiableError, match="heaviside"):
        backward_trace(forward)


def test_tensors_a_rule_makes_and_writes_into_are_new_on_every_call():
    """x[i, i]'s cotangent is accumulated into zeros: made by a node, not a constant."""
    x, i = torch.randn(4, 3, dtype=torch.float64), torch.tensor([0, 2, 2])
    forward = primtrace.trace(lambda x, i: x[i, i], stage="prims")(x, i)
    bw = backward_trace(forward)
    assert "full" in [n.symbol.name for n in bw.trace.nodes]
    run = _run(bw.trace)
    g = torch.ones(3, dtype=torch.float64)
    first, second = run(*[i if p.name == "i" else g for p in bw.trace.inputs])[0], \
        run(*[i if p.name == "i" else g for p in bw.trace.inputs])[0]
    assert first is not second
    torch.testing.assert_close(first, second)
    assert first[2, 2] == 2 and first.sum() == 3


def test_the_backward_fuses():
    """silu(a) * b: the backward's elementwise prims are one Numba kernel."""
    from primtrace.executors.numba import NumbaFusionExecutor
    executors = (NumbaFusionExecutor(cost_model=False), TORCH)
    a, b, g = torch.randn(64, 32), torch.randn(64, 32), torch.randn(64, 32)
    forward = primtrace.trace(silu_gate, stage="prims")(a, b)
    bw = backward_trace(forward)
    _, saved = _run(forward_with_saved(forward, bw.saved), executors)(a, b)
    execution = lower(bw.trace, list(executors))
    assert [n.symbol.kind for n in execution.nodes] == ["fused"]
    leaves = a.clone().requires_grad_(), b.clone().requires_grad_()
    expected = torch.autograd.grad(silu_gate(*leaves), leaves, g)
    torch.testing.assert_close(compile_trace(execution)[0](*saved, g), expected)


def test_an_opaque_call_goes_through_torch_and_prints_as_python():
    def f(a, b):
        return torch.einsum("ij,jk->ik", a, b)
    bw = check_against_eager(f, torch.randn(2, 3, dtype=torch.float64),
                             torch.randn(3, 4, dtype=torch.float64))
    assert "prims.library_vjp(torch.einsum, g_" in str(bw.trace)


def test_a_trace_of_calls_kept_for_eager_autograd():
    """Inputs that require grad: the tracer keeps the torch calls (layer_norm's weight= a
    keyword); each goes through torch's autograd in the backward."""
    x, r, w, b = (torch.randn(*s, dtype=torch.float64, requires_grad=True)
                  for s in ((4, 8), (4, 8), (8,), (8,)))
    from primtrace.tracer.prims_stage import to_prims
    forward = to_prims(primtrace.trace(layer_norm_gelu)(x, r, w, b))   # jit's fallback's
    assert {n.symbol.kind for n in forward.nodes} == {"opaque"}
    bw = backward_trace(forward)
    with torch.no_grad():
        outputs, saved = _run(forward_with_saved(forward, bw.saved))(x, r, w, b)
    g = torch.randn_like(outputs)
    got = _run(bw.trace)(*saved, g)
    expected = torch.autograd.grad(layer_norm_gelu(x, r, w, b), (x, r, w, b), g)
    torch.testing.assert_close(got, expected, **TOLERANCE[torch.float64])


def test_a_library_kernel_computes_only_the_wanted_cotangents():
    """A frozen input: convolution_backward is asked for the weight's and bias's only."""
    x, w, b = torch.randn(2, 3, 6, 6), torch.randn(4, 3, 3, 3), torch.randn(4)
    forward = primtrace.trace(lambda x, w, b: F.conv2d(x, w, b), stage="prims")(x, w, b)
    bw = backward_trace(forward, wrt=forward.inputs[1:])
    [node] = [n for n in bw.trace.nodes if n.symbol.name == "convolution_backward"]
    assert node.args[-1] == (False, True, True) and bw.trace.outputs[0] is not None


def test_what_a_rule_reads_only_the_shape_of_is_not_saved():
    """gather's cotangent goes into zeros shaped like its input: the input is not saved."""
    forward = primtrace.trace(lambda x, i: torch.gather(x, 1, i), stage="prims")(
        torch.randn(4, 8), torch.tensor([[1], [0], [7], [7]]))
    assert [p.name for p in backward_trace(forward).saved] == ["i"]


def test_the_backward_is_a_trace_of_prims_the_executors_can_run():
    forward = primtrace.trace(silu_gate, stage="prims")(torch.randn(4, 8), torch.randn(4, 8))
    bw = backward_trace(forward)
    assert all(n.symbol.kind == "prim" for n in bw.trace.nodes)
    assert [p.name for p in bw.trace.inputs] == [p.name for p in bw.saved] + [
        g.name for _, g in bw.cotangents]
    assert "def silu_gate_backward(" in str(bw.trace)


# --- refs against eager autograd: each torch op as traced, on small conformance-like inputs ---
def _refs():
    def r(*shape, low=None):
        t = torch.randn(*shape, dtype=torch.float64)
        return t.abs() + low if low is not None else t
    index = torch.tensor([2, 0, 3, 3])
    return [
        ("sin", torch.sin, (r(3, 4),)), ("tanh", torch.tanh, (r(3, 4),)),
        ("log", torch.log, (r(3, 4, low=0.2),)), ("sqrt", torch.sqrt, (r(3, 4, low=0.2),)),
        ("pow", torch.pow, (r(3, 4, low=0.2), r(4))), ("div", torch.div, (r(3, 4), r(3, 1, low=0.5))),
        ("sigmoid", torch.sigmoid, (r(3, 4),)), ("erf", torch.erf, (r(3, 4),)),
        ("clamp", lambda x: torch.clamp(x, -0.5, 0.7), (r(3, 4),)),
        ("where", lambda x, y: torch.where(x > 0, x, y), (r(3, 4), r(3, 4))),
        ("softmax", lambda x: F.softmax(x, -1), (r(3, 4),)),
        ("log_softmax", lambda x: F.log_softmax(x, 0), (r(3, 4),)),
        ("logsumexp", lambda x: torch.logsumexp(x, 1), (r(3, 4),)),
        ("mean_var_std", lambda x: (x.mean(0), x.var(1), x.std()), (r(3, 4),)),
        ("prod_cumsum", lambda x: (x.prod(1), x.cumsum(0)), (r(3, 4),)),
        ("amax_max", lambda x: (x.amax(1), x.max(0).values), (r(3, 4),)),
        ("norm", lambda x: torch.linalg.vector_norm(x, dim=1), (r(3, 4),)),
        ("views", lambda x: x.T.reshape(2, 6)[1:, ::2].flip(0).unsqueeze(0).expand(2, 1, 3),
         (r(3, 4),)),
        ("cat_stack", lambda x, y: torch.cat([x, y.T], 0) + torch.stack([x, x]).sum(0).repeat(2, 1),
         (r(3, 4), r(4, 3))),
        ("narrow_split", lambda x: [t * (i + 1) for i, t in enumerate(x.split(2, 1))][1], (r(3, 4),)),
        ("pad", lambda x: F.pad(x, (1, 2, 0, 1), value=0.5), (r(3, 4),)),
        ("gather_index", lambda x, i: (x.gather(1, i[:3, None]), x[:, i]), (r(3, 4), index)),
        ("embedding", lambda w, i: F.embedding(i.view(2, 2) % 3, w), (r(3, 4), index)),
        ("matmul_linear", lambda x, w, b: F.linear(x, w, b) @ w, (r(2, 3, 4), r(4, 4), r(4))),
        ("conv2d", lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1), (r(2, 3, 7, 7), r(4, 3, 3, 3), r(4))),
        ("max_pool2d", lambda x: F.max_pool2d(x, 2), (r(2, 3, 6, 6),)),
        ("avg_pool2d", lambda x: F.adaptive_avg_pool2d(F.avg_pool2d(x, 2), 1), (r(2, 3, 6, 6),)),
        ("mse_nll", lambda x, y, i: F.mse_loss(x, y) + F.nll_loss(F.log_softmax(x, 1), i[:3]),
         (r(3, 4), r(3, 4), index)),
        ("silu_gelu_tanh", lambda x: F.gelu(F.silu(x), approximate="tanh"), (r(3, 4),)),
        ("setitem", _setitem, (r(4, 3), index[:2])),
        ("sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
         (r(2, 3, 5, 4), r(2, 3, 5, 4), r(2, 3, 5, 4))),
        ("complex", lambda z: (z * z.conj()).real + torch.view_as_real(z.exp()).sum(-1),
         (torch.randn(3, 4, dtype=torch.complex128),)),
        # opaque calls (no ref): torch's autograd over the call, run again (prims.library_vjp)
        ("opaque_calls", lambda a, b: torch.einsum("bij,bjk->bik", a, b).sort(1).values
         + F.binary_cross_entropy_with_logits(a @ b, b.sum(1, keepdim=True).sigmoid().expand(2, 3, 5)),
         (r(2, 3, 4), r(2, 4, 5))),
        ("group_norm", lambda x, w, b: F.group_norm(x, 2, w, b), (r(2, 4, 3), r(4), r(4))),
    ]


def _setitem(x, i):
    y = x.clone()
    y[i] = 0.5                       # index_put_ into a clone
    z = x * 3
    z[:, 1] = x[:, 2] * 2            # copy_to into a view, then aliased
    z[i, 1:] += y[i, :2]             # index_put_ into a view
    return y * 2 + z


REFS = _refs()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name,fn,args", REFS, ids=[name for name, _, _ in REFS])
def test_ref_gradients_match_eager(name, fn, args, dtype):
    def cast(a):
        if not _floating(a):
            return a
        return a.to(dtype if a.dtype.is_floating_point else dtype.to_complex())
    check_against_eager(fn, *[cast(a) for a in args])


def test_runtime_numbers_are_read_by_the_backward_not_specialized():
    def f(x, s):
        return (x.abs() + 1) ** s * s
    forward = primtrace.trace(f, stage="prims")(torch.randn(3), 1.5)
    bw = backward_trace(forward)
    assert [p.name for p in bw.saved][0] == "s" and not forward.inputs[1].specialized
    check_against_eager(f, torch.randn(3, dtype=torch.float64), 1.5)


@pytest.mark.parametrize("pieces", ["split", "chunk", "gaps"])
def test_the_pieces_of_a_split_join_as_a_cat(pieces):
    """The cotangents of a split's pieces sum as one cat (eager's split backward), not as a
    full-size pad per piece added up: the same values, -0.0 included."""
    x = torch.randn(4, 10, 12, requires_grad=True)

    def f(x):
        if pieces == "split":
            a, b, c = x.split(4, dim=2)
            return a * 2 + b.sin() * c
        if pieces == "chunk":
            a, b = x.chunk(2, dim=1)
            return a.exp() * b
        return x[:, 2:5].sum() + x[:, 7:].sin().sum() + x[:, 5:7].cos().sum()   # x[:, :2]: zeros

    out = f(x)
    g = torch.randn_like(out)
    if pieces == "split":
        g[0, 0, 0] = -0.0   # a's cotangent 2 * -0.0: -0.0 in eager's cat
    expected, = torch.autograd.grad(out, x, g)
    jitted = primtrace.jit(f, executors=[primtrace.TORCH])
    got, = torch.autograd.grad(jitted(x), x, g)
    assert torch.equal(got, expected) and torch.equal(got.signbit(), expected.signbit())
    names = [n.symbol.name for n in primtrace.last_trace(jitted).tags["backward"][-1].nodes]
    assert names.count("cat") == 1 and names.count("pad") == (pieces == "gaps")
