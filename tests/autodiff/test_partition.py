"""partition: what the forward saves for the backward (a min-cut), against saving everything.

Each program is traced to prims, its backward built, and partitioned with policy "min_cut"
and "save_all"; both forwards (returning their saved values) and backwards run with the
torch executor under the same seed. The gradients must be those of the unpartitioned
backward (exactly, in float64) and eager autograd's, and the saved bytes never more.
"""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import primtrace
from primtrace.autodiff import backward_trace, forward_with_saved
from primtrace.autodiff.partition import MAX_CHAIN, nbytes, partition, saved_bytes
from primtrace.ir.tree import proxies_in
from tests.autodiff.test_backward_trace import (REFS, TOLERANCE, _floating, _run, attention,
                                                gpt_block, layer_norm_gelu, mlp, rms_norm)

pytestmark = pytest.mark.filterwarnings("ignore::primtrace.OpaqueOpWarning")
TOLERANCE = {**TOLERANCE, torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}


# --- the training workloads of benchmarks/training.py (W13-W17) and more -----------------------
def w13(x, r, w, b):
    return layer_norm_gelu(x, r, w, b)


def w14(x, w):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return (h * w).to(torch.bfloat16)


def w15(logits, target):
    return F.cross_entropy(logits, target)


def w16(a, b):
    return F.silu(a) * b


def w17(x):
    return F.gelu(F.dropout(x, 0.1))


def uniform_mask(x, w):
    return x * (torch.rand_like(x) > 0.5) * w + x.sin()


def normal_noise(x, w):
    return torch.tanh(x + torch.randn_like(x) * 0.1) * w


def dropout_mlp(x, w1, w2):
    return F.linear(F.dropout(F.silu(F.linear(x, w1)), 0.2), w2).sum()


def int_bool(x, i):
    """Bool and integer intermediates: a mask, an argmax, index arithmetic."""
    m = x > 0.1
    k = x.argmax(-1)
    j = (i * 3 + 1) % x.shape[-1]
    y = torch.where(m, x.sin(), x.cos() * 2) + x.gather(1, k[:, None]) * x.gather(1, j[:, None])
    return y * m.float().sum(-1, keepdim=True)


def returns_intermediates(x, w):
    h = torch.tanh(x * w)
    y = h.exp() * x
    return y, h, y.sum(-1)


R, C = 16, 64


def _programs(dtype):
    def r(*shape):
        return torch.randn(*shape, dtype=dtype)

    def small(*shape):
        return r(*shape) * 0.3
    V, T, D = 11, 5, 8
    return {
        "w13_layer_norm_gelu": (w13, (r(R, C), r(R, C), r(C), r(C))),
        "w14_rms_norm_bf16": (w14, (torch.randn(R, C).bfloat16(), torch.randn(C))),
        "rms_norm": (rms_norm, (r(3, 5, C), r(C))),
        "w15_cross_entropy": (w15, (r(R, C), torch.randint(0, C, (R,)))),
        "w16_silu_gate": (w16, (r(R, C), r(R, C))),
        "w17_dropout_gelu": (w17, (r(R, C),)),
        "uniform_mask": (uniform_mask, (r(R, C), r(C))),
        "normal_noise": (normal_noise, (r(R, C), r(C))),
        "dropout_mlp": (dropout_mlp, (r(R, C), small(32, C), small(8, 32))),
        "mlp": (mlp, (r(4, 8), r(5, 8), r(5), r(3, 5))),
        "attention": (attention, (r(2, 4, 8), r(2, 6, 8), r(2, 6, 8))),
        "gpt_block": (gpt_block, (torch.randint(0, V, (2, T)), torch.randint(0, V, (2, T)),
                                  small(V, D), small(T, D), 1 + small(D), small(D),
                                  small(3 * D, D), small(3 * D), small(D, D), 1 + small(D),
                                  small(D), small(4 * D, D), small(D, 4 * D))),
        "int_bool": (int_bool, (r(R, C), torch.randint(0, 100, (R,)))),
        "returns_intermediates": (returns_intermediates, (r(R, C), r(C))),
    }


NAMES = list(_programs(torch.float64))
RANDOM = {"w17_dropout_gelu", "uniform_mask", "normal_noise", "dropout_mlp"}


def run(fn, args, policy):
    """(forward, partitioned Backward, outputs, cotangents, gradients), the forward run under
    seed 0 and the backward under another seed (a redraw there would draw other numbers)."""
    forward = primtrace.trace(fn, stage="prims")(*args)
    bw = partition(forward, backward_trace(forward), policy=policy)
    torch.manual_seed(0)
    outputs, saved = _run(forward_with_saved(forward, bw.saved))(*args)
    flat = list(outputs) if isinstance(outputs, tuple) else [outputs]
    torch.manual_seed(1)
    cotangents = [torch.randn_like(o) if _floating(o) else None for o in flat]
    by_name = {p.name: c for p, c in zip(proxies_in(forward.outputs), cotangents)}
    torch.manual_seed(12345)
    grads = _run(bw.trace)(*saved, *[by_name[out.name] for out, _ in bw.cotangents])
    return forward, bw, flat, cotangents, grads


def eager_grads(fn, args, cotangents):
    leaves = [a.detach().clone().requires_grad_() if _floating(a) else a for a in args]
    torch.manual_seed(0)
    out = fn(*leaves)
    flat = list(out) if isinstance(out, tuple) else [out]
    pairs = [(o, c) for o, c in zip(flat, cotangents) if _floating(o) and o.requires_grad]
    wanted = [leaf for leaf in leaves if _floating(leaf)]
    return flat, torch.autograd.grad([o for o, _ in pairs], wanted, [c for _, c in pairs],
                                     allow_unused=True)


def _dtypes(name):
    return [torch.bfloat16] if name == "w14_rms_norm_bf16" else [torch.float64, torch.float32]


@pytest.mark.parametrize("name,dtype", [(n, d) for n in NAMES for d in _dtypes(n)],
                         ids=[f"{n}-{str(d)[6:]}" for n in NAMES for d in _dtypes(n)])
def test_partitioned_gradients(name, dtype):
    """The same gradients as the unpartitioned backward and as eager, from fewer bytes."""
    torch.manual_seed(NAMES.index(name))
    fn, args = _programs(torch.float64 if dtype == torch.bfloat16 else dtype)[name]
    forward, bw, outputs, cotangents, grads = run(fn, args, "min_cut")
    _, all_bw, all_outputs, _, all_grads = run(fn, args, "save_all")
    for got, want in zip(outputs + list(grads), all_outputs + list(all_grads)):
        assert (got is None) == (want is None)
        if dtype == torch.float64 and want is not None:
            assert torch.equal(got, want)
        elif want is not None:
            torch.testing.assert_close(got, want, **TOLERANCE[dtype])
    expected_out, expected = eager_grads(fn, args, cotangents)
    for got, want in zip(outputs, expected_out):
        torch.testing.assert_close(got, want.detach(), **TOLERANCE[dtype])
    assert len(grads) == len(expected)
    for got, want in zip(grads, expected):
        assert (got is None) == (want is None)
        if want is not None:
            torch.testing.assert_close(got, want, **TOLERANCE[dtype])
    # the bytes saving holds beyond the caller's tensors (the forward's inputs and outputs,
    # which it may save in place of intermediates: normal_noise saves its draw and x, not
    # tanh's result, which only a fused kernel would otherwise hold)
    assert saved_bytes(forward, bw.saved)[0] <= saved_bytes(forward, all_bw.saved)[0]
    assert [p.name for p in bw.trace.tags["saved"]] == [p.name for p in bw.saved]
    assert [p.name for p in bw.trace.inputs] == [p.name for p in bw.saved] + [
        g.name for _, g in bw.cotangents]


@pytest.mark.parametrize("name", sorted(RANDOM))
def test_random_draws_are_saved_never_redrawn(name):
    """(test_partitioned_gradients runs these backwards under another seed than their
    forwards, and matches eager's gradients under the forward's seed.)"""
    fn, args = _programs(torch.float64)[name]
    forward = primtrace.trace(fn, stage="prims")(*args)
    bw = partition(forward, backward_trace(forward))
    draws = [n.outputs.name for n in forward.flat_nodes() if "random" in n.symbol.tags]
    assert draws and not [n for n in bw.trace.nodes if "random" in n.symbol.tags]
    saved = {p.name for p in bw.saved}
    recomputed = set(bw.trace.tags["recomputed"])
    for d in draws:   # what the backward reads of a draw comes from the forward's, saved
        assert d not in recomputed or f"{d}_bool" in saved   # dropout's 0/1 draw, as bool


def test_dropout_mask_is_saved_as_bool():
    forward = primtrace.trace(w17, stage="prims")(torch.randn(R, C))
    bw = partition(forward, backward_trace(forward))
    [draw] = [n.outputs for n in forward.flat_nodes() if n.symbol.name == "bernoulli"]
    assert [(p.name, p.dtype) for p in bw.saved] == [(f"{draw.name}_bool", torch.bool),
                                                     ("x", torch.float32)]
    assert saved_bytes(forward, bw.saved) == (R * C, R * C * 5)
    again = partition(forward, backward_trace(forward))   # the packing node is added once
    assert [p.name for p in again.saved] == [p.name for p in bw.saved]
    assert sum(n.symbol.name == "convert_element_type" and n.args[0] is draw
               for n in forward.flat_nodes()) == 1


#: what torch.compile (2.13, CPU) saves for backward beside the inputs, measured with
#: saved_tensors_hooks at (64-128, 1024-8192): formulas of the shapes (rows R, columns C)
COMPILE_INTERMEDIATES = {
    "w13_layer_norm_gelu": R * C * 4 + R * 4,   # x + r, rstd
    "w14_rms_norm_bf16": R * 4,                 # rstd
    "w15_cross_entropy": 2 * R * 4 + 4,         # amax, logsumexp, the count of targets
    "w16_silu_gate": 0,
    "w17_dropout_gelu": R * C,                  # the mask, as bool
}


@pytest.mark.parametrize("name", sorted(COMPILE_INTERMEDIATES))
def test_saved_intermediates_within_a_quarter_of_torch_compile(name):
    fn, args = _programs(torch.float32)[name]
    forward = primtrace.trace(fn, stage="prims")(*args)
    bw = partition(forward, backward_trace(forward))
    mine, _ = saved_bytes(forward, bw.saved)
    assert mine <= 1.25 * COMPILE_INTERMEDIATES[name]


def test_activations_charged_as_aotautograd_does():
    """held= the parameters only: x and r cost their bytes, so W13 saves x + r (one tensor)
    instead, as torch.compile does."""
    fn, args = _programs(torch.float32)["w13_layer_norm_gelu"]
    forward = primtrace.trace(fn, stage="prims")(*args)
    bw = partition(forward, backward_trace(forward), held=forward.inputs[2:])
    assert [p.name for p in bw.saved if p.ndim == 2] == ["t0"]
    assert saved_bytes(forward, bw.saved)[0] <= 1.25 * COMPILE_INTERMEDIATES["w13_layer_norm_gelu"]


def test_both_traces_print_with_the_recomputation_visible(capsys):
    x, r, w, b = _programs(torch.float32)["w13_layer_norm_gelu"][1]
    forward = primtrace.trace(w13, stage="prims")(x, r, w, b)
    bw = partition(forward, backward_trace(forward))
    text = f"{forward_with_saved(forward, bw.saved)}\n{bw.trace}"
    print(text)
    assert [p.name for p in bw.saved][:2] == ["x", "r"]
    assert re.search(r"# note: the first \d+ nodes recompute forward values from the saved ones: t0, ", text)
    assert "t0 = prims.add(x, r)" in str(bw.trace)
    lines = str(bw.trace).splitlines()
    first_rule = next(i for i, line in enumerate(lines) if "(g_t" in line)   # the old backward
    assert lines.index('  t0 = prims.add(x, r)  # t0: "cpu f32[16, 64]"') < first_rule


def test_save_all_returns_the_backward_unchanged():
    forward = primtrace.trace(w16, stage="prims")(torch.randn(4, 8), torch.randn(4, 8))
    bw = backward_trace(forward)
    assert partition(forward, bw, policy="save_all") is bw
    with pytest.raises(ValueError, match="policy"):
        partition(forward, bw, policy="everything")


def test_matmul_results_and_operands_are_not_recomputed():
    """gpt_block: a matmul or a row statistic runs once; what a backward matmul reads is
    saved (it would be materialized in the backward anyway), not recomputed."""
    fn, args = _programs(torch.float64)["gpt_block"]
    forward = primtrace.trace(fn, stage="prims")(*args)
    bw = partition(forward, backward_trace(forward))
    recomputed = set(bw.trace.tags["recomputed"])
    kinds = {n.symbol.name for n in forward.flat_nodes()
             if any(p.name in recomputed for p in n.output_proxies)}
    assert kinds and not kinds & {"matmul", "amax", "sum", "var", "gather", "index_select"}
    for node in bw.trace.nodes:
        if node.symbol.name == "matmul":
            assert not {p.name for p in node.inputs} & recomputed


def test_a_long_chain_is_cut():
    def chain(x):
        for i in range(2 * MAX_CHAIN + 10):
            x = torch.sin(x) * 1.01
        return x
    forward = primtrace.trace(chain, stage="prims")(torch.randn(8, dtype=torch.float64))
    bw = partition(forward, backward_trace(forward))
    assert len(bw.saved) >= 3   # x and a value every MAX_CHAIN prims
    producer = {p.name: n for n in forward.flat_nodes() for p in n.output_proxies}
    saved = {p.name for p in bw.saved}

    def depth(name):
        return 0 if name in saved or name not in producer else 1 + max(
            map(depth, (p.name for p in producer[name].inputs)), default=0)
    assert max(depth(n) for n in bw.trace.tags["recomputed"]) <= MAX_CHAIN


def test_in_place_writes_are_not_recomputed():
    from tests.autodiff.test_backward_trace import _setitem
    x, i = torch.randn(4, 3, dtype=torch.float64), torch.tensor([2, 0])
    forward, bw, _, cotangents, grads = run(_setitem, (x, i), "min_cut")
    assert not {n.symbol.name for n in bw.trace.nodes[:len(bw.trace.tags["recomputed"])]} & {
        "copy_to", "index_put_", "aliased"}
    _, expected = eager_grads(_setitem, (x, i), cotangents)
    torch.testing.assert_close(grads[0], expected[0], **TOLERANCE[torch.float64])


def test_bytes_come_from_one_helper():
    forward = primtrace.trace(w14, stage="prims")(torch.randn(4, 8).bfloat16(), torch.randn(8))
    assert nbytes(forward.inputs[0]) == 4 * 8 * 2 and nbytes(forward.inputs[1]) == 8 * 4


@pytest.mark.parametrize("name,fn,args", REFS, ids=[name for name, _, _ in REFS])
def test_refs_partitioned_as_unpartitioned(name, fn, args):
    """test_backward_trace's refs (convolution, pooling, writes, complex, opaque calls...):
    the same values from the partitioned backward, in float64."""
    _, bw, outputs, _, grads = run(fn, args, "min_cut")
    _, _, all_outputs, _, all_grads = run(fn, args, "save_all")
    for got, want in zip(outputs + list(grads), all_outputs + list(all_grads)):
        assert (got is None) == (want is None)
        if want is not None:
            assert torch.equal(got, want)
