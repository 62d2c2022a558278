"""Calls of a jitted function under torch.autocast trace autocast's casts (as
``convert_element_type`` prims, tracer/autocast.py) and fuse, with and without grad: outputs,
gradients and parameters after optimizer steps match eager autocast by the float64 rule
(through bfloat16/float16, within twice eager's distance of a float64 run)."""
from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import primtrace

BF16 = dict(device_type="cpu", dtype=torch.bfloat16)


def _close(got, want, ref):
    """`got` is eager's (`want`) within bf16 tolerance, or at most twice as far from the
    float64 run `ref` as eager's is (root mean square, as torch._dynamo.utils.same's
    float64 check: two chains through bfloat16 round differently, either may end farther)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    g, w, r = got.detach().double(), want.detach().double(), ref.detach().double()
    if torch.allclose(g, w, rtol=1.6e-2, atol=1e-5):
        return
    rms = lambda t: t.pow(2).mean().sqrt().item()
    assert rms(g - r) <= 2 * rms(w - r) + 1e-6 * rms(r), (rms(g - r), rms(w - r))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16), nn.LayerNorm(16))

    def forward(self, x):
        return self.net(x)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 4, 3)
        self.fc = nn.Linear(4 * 6 * 6, 10)

    def forward(self, x):
        return self.fc(F.relu(self.c2(F.relu(self.c1(x)))).flatten(1))


def _gpt_block():
    import importlib.util
    import pathlib
    spec = importlib.util.spec_from_file_location(
        "gpt_example", pathlib.Path(__file__).parents[2] / "examples" / "gpt.py")
    gpt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpt)
    return gpt.Block(gpt.Config(vocab=1, context=8, heads=2, width=32))


def _programs():
    return {"mlp": (MLP, lambda: torch.randn(8, 16)),
            "gpt_block": (_gpt_block, lambda: torch.randn(2, 8, 32)),
            "conv": (ConvNet, lambda: torch.randn(2, 3, 8, 8))}


def _loss(out, target):
    """A cross-entropy over the output's last dim (fp32 under autocast) plus a plain term."""
    logits = out.reshape(-1, out.shape[-1])
    return F.cross_entropy(logits, target) + out.pow(2).mean() * 0.01


@pytest.mark.parametrize("name", ["mlp", "gpt_block", "conv"])
def test_training_steps_under_autocast_bf16(name):
    make, data = _programs()[name]
    torch.manual_seed(0)
    model = make()
    eager = copy.deepcopy(model)
    jm = primtrace.jit(model)
    jloss = primtrace.jit(_loss)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, eager)]
    classes = {"mlp": 16, "gpt_block": 32, "conv": 10}[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error", primtrace.AutocastWarning)
        for _ in range(3):
            x = data()
            target = torch.randint(0, classes, (x.numel() // x.shape[-1] if name != "conv"
                                                else x.shape[0],))
            ref = copy.deepcopy(eager).double()   # the float64 run, without autocast
            lr = _loss(ref(x.double()), target)
            lr.backward()
            with torch.autocast(**BF16):
                got = jm(x)
                want = eager(x)
                lg, lw = jloss(got, target), _loss(want, target)
            assert got.dtype == want.dtype   # the GPT block's residual stream stays float32
            _close(got, want, ref(x.double()))
            _close(lg, lw, lr)
            lg.backward()
            lw.backward()
            for p, e, r in zip(model.parameters(), eager.parameters(), ref.parameters()):
                assert p.grad.dtype == e.grad.dtype == torch.float32
                _close(p.grad, e.grad, r.grad)
            for o in opts:
                o.step()
                o.zero_grad()
            for p, e in zip(model.parameters(), eager.parameters()):
                torch.testing.assert_close(p, e, rtol=2e-2, atol=2e-3)
    assert primtrace.cache_info(jm).misses == 1   # one autocast entry served the later steps
    # no fallback: the autocast entry's trace has the casts and fused regions
    with torch.no_grad(), torch.autocast(**BF16):
        x = data()
        _close(jm(x), eager(x), copy.deepcopy(eager).double()(x.double()))
    assert primtrace.cache_info(jm).misses == 2


def _executed(jfn):
    return str(jfn._last[-1])


def test_casts_are_traced_and_fused():
    torch.manual_seed(0)
    model = MLP()
    jm = primtrace.jit(model)
    x = torch.randn(8, 16)
    with torch.no_grad(), torch.autocast(**BF16):
        got = jm(x)
        want = model(x)
    assert got.dtype is torch.bfloat16
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    text = str(jm._last[1])   # the prims trace
    assert "convert_element_type" in text and "bfloat16" in text
    assert "numba_fusion" in _executed(jm) or "fusion" in _executed(jm)


def test_autocast_state_is_part_of_the_key():
    """An entry traced outside autocast never serves a call inside it, and the reverse;
    switching back and forth, bf16 and fp16, is correct."""
    torch.manual_seed(0)
    model = MLP()
    jm = primtrace.jit(model)
    x = torch.randn(8, 16)
    with torch.no_grad():
        for _ in range(2):
            for dtype in (None, torch.bfloat16, torch.float16, None):
                if dtype is None:
                    got, want = jm(x), model(x)
                else:
                    with torch.autocast("cpu", dtype=dtype):
                        got, want = jm(x), model(x)
                assert got.dtype == want.dtype == (dtype or torch.float32)
                torch.testing.assert_close(got, want)
    info = primtrace.cache_info(jm)
    assert info.misses == 3
    assert [str(r).split("mismatch: ", 1)[1] for r in info.recompiles] == [
        "expected off, actual cpu bfloat16", "expected cpu bfloat16, actual cpu float16"]
    assert all("autocast mismatch" in str(r) for r in info.recompiles)


def test_nested_disabled_region_and_autocast_in_the_body():
    def f(x, w):
        y = x @ w                                   # cast under the caller's autocast
        with torch.autocast("cpu", enabled=False):
            z = y.float() @ w                      # float32
        with torch.autocast("cpu", dtype=torch.bfloat16):
            u = z @ w                              # the body's own autocast
        return y, z, u, torch.cat([y, z])         # promote: float32

    jf = primtrace.jit(f)
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    for outer in (True, False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=outer):
            got, want = jf(x, w), f(x, w)
        for g, e in zip(got, want):
            assert g.dtype == e.dtype
            torch.testing.assert_close(g, e, rtol=0, atol=0)


def test_fp32_list_op():
    """CPU autocast runs losses (here mse_loss, cross_entropy) in float32."""
    def f(x, w, t):
        y = x @ w
        return F.mse_loss(y, t), F.cross_entropy(y, t.argmax(1)), y

    jf = primtrace.jit(f)
    x, w, t = torch.randn(4, 5), torch.randn(5, 5, requires_grad=True), torch.randn(4, 5)
    with torch.autocast(**BF16):
        got, want = jf(x, w, t), f(x, w, t)
    for g, e in zip(got, want):
        assert g.dtype == e.dtype
        torch.testing.assert_close(g, e)
    gw = torch.autograd.grad(sum(g.float().sum() for g in got), w)[0]
    ew = torch.autograd.grad(sum(e.float().sum() for e in want), w)[0]
    torch.testing.assert_close(gw, ew, rtol=2e-2, atol=1e-2)


def test_unmodelled_call_runs_eagerly_with_a_reason():
    """einsum casts inside its decomposition (bmm): that call runs eagerly, said once."""
    f = lambda a, b: torch.einsum("ij,jk->ik", a, b) * 2
    jf = primtrace.jit(f)
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    with torch.autocast(**BF16), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got, want = jf(a, b), f(a, b)
        jf(a, b)
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert [w.category for w in caught] == [primtrace.AutocastWarning]
    assert "einsum" in str(caught[0].message)
    torch.testing.assert_close(jf(a, b), f(a, b))   # outside autocast it compiles


def test_explain_says_why_a_call_under_autocast_runs_eagerly():
    f = lambda a, b: torch.einsum("ij,jk->ik", a, b) * 2
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    with torch.autocast(**BF16), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        why = primtrace.explain(primtrace.jit(f), a, b)
        assert why.autocast is not None and "einsum" in str(why)
        assert primtrace.explain(primtrace.jit(lambda a, b: a @ b), a, b).autocast is None


def _op_cases():
    g = torch.Generator().manual_seed(0)
    r = lambda *shape: torch.randn(*shape, generator=g)
    a, b, t, B, C, M, P = r(4, 5), r(5, 6), r(4, 5), r(2, 3, 4), r(2, 4, 4), r(4, 6), r(1)
    W1, W2, labels = r(2, 3, 2), r(2, 2, 2, 2), t.argmax(1)
    return {   # per list of CPU autocast, and ops on none (computed in their inputs' dtypes)
        "matmul": lambda: a @ b, "mm": lambda: a.mm(b), "torch.mm": lambda: torch.mm(a, b), "bmm": lambda: torch.bmm(B, B.mT),
        "addmm": lambda: torch.addmm(M, a, b), "baddbmm": lambda: torch.baddbmm(C, B.mT, B),
        "conv1d": lambda: F.conv1d(B, W1), "conv_transpose2d": lambda: F.conv_transpose2d(B[None], W2),
        "prelu": lambda: F.prelu(a, P),
        "sdpa": lambda: F.scaled_dot_product_attention(B[None], B[None], B[None]),
        "mse_loss": lambda: F.mse_loss(a @ b[:, :5], t), "cross_entropy": lambda: F.cross_entropy(a, labels),
        "nll_loss": lambda: F.nll_loss(a.log_softmax(1), labels), "l1_loss": lambda: F.l1_loss(a, t),
        "kl_div (opaque)": lambda: F.kl_div((a @ b[:, :5]).log_softmax(1), t.softmax(1)),
        "bce_with_logits": lambda: F.binary_cross_entropy_with_logits(a @ b[:, :5], t.sigmoid()),
        "prod": lambda: torch.prod(a @ b, 1), "vector_norm": lambda: torch.linalg.vector_norm(a @ b),
        "linalg.inv": lambda: torch.linalg.inv((a @ b)[:, :4] + 4 * torch.eye(4)),
        "cat": lambda: torch.cat([a @ b[:, :5], t]), "stack": lambda: torch.stack([a @ b[:, :5], t]),
        "cat of bf16": lambda: torch.cat([a @ b, a @ b]),
        "softmax": lambda: (a @ b).softmax(1), "layer_norm": lambda: F.layer_norm(a @ b, (6,)),
        "mixed add": lambda: (a @ b) + M, "gelu": lambda: F.gelu(a @ b), "sum": lambda: (a @ b).sum(),
    }


@pytest.mark.parametrize("grad", [False, True])
def test_ops_of_each_autocast_list_match_eager(grad):
    """Each op as eager autocast computes it: dtype and values (bf16 results bit for bit
    where the op is torch's call on the cast arguments)."""
    for name, f in _op_cases().items():
        with torch.set_grad_enabled(grad), torch.autocast(**BF16), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            warnings.simplefilter("error", primtrace.AutocastWarning)
            want = f()
            got = primtrace.jit(lambda *_: f())()
        assert got.dtype == want.dtype, name
        torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=1e-2, msg=name)
