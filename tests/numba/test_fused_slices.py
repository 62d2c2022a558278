"""Slices and cats inside fused kernels, against eager.

A slice is a load at an offset (its steps in the strides); a cat splits the kernel's loop
where one operand ends and the next begins (``plan.py``: one part per box of the loop).
Each program runs through the fused jit and eager: values bit for bit or by the harness's
float64 rule, output strides, and the inputs unchanged; the kernel count says what fused.
"""
from __future__ import annotations

import random

import pytest
import torch

from primtrace.executors.numba import plan as kernel_plan
from tests.numba.helpers import check_against_eager, execution, fused, fused_nodes, torch_nodes


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope(q, cos, sin):
    return q * cos + rotate_half(q) * sin


def partial_rope(q, cos, sin):
    """GPT-NeoX / Phi: rotary on the first half of the head dim, the rest passed through."""
    r = q.shape[-1] // 2
    rot, rest = q[..., :r], q[..., r:]
    return torch.cat((rope(rot, cos[..., :r], sin[..., :r]), rest), dim=-1)


def _rope_inputs(dtype=torch.float32, transposed=True):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 16, 4, 32, generator=g).to(dtype)
    q = q.transpose(1, 2) if transposed else q.reshape(2, 4, 16, 32)
    cos = torch.randn(2, 1, 16, 32, generator=g).to(dtype)
    sin = torch.randn(2, 1, 16, 32, generator=g).to(dtype)
    return q, cos, sin


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("fn", [rope, partial_rope])
def test_rotary_embedding_is_one_kernel(fn, dtype):
    args = _rope_inputs(dtype)
    jfn = fused(fn)
    got = check_against_eager(jfn, fn, *args)
    assert got.stride() == fn(*args).stride()
    trace = execution(jfn)
    assert len(fused_nodes(trace)) == 1, trace
    assert not [n for n in torch_nodes(trace) if n.symbol.name in ("cat", "neg", "__neg__")]


def test_a_returned_cat_is_written_by_the_kernel_in_eager_layout():
    """channels_last operands give a channels_last cat (eager's rule), row-major otherwise."""
    def f(a, b):
        return torch.cat((a * 2, b + 1), dim=1)
    a = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    b = torch.randn(2, 5, 4, 5).to(memory_format=torch.channels_last)
    for x, y in ((a, b), (a.contiguous(), b.contiguous()), (a, b.contiguous())):
        jfn = fused(f)
        got = check_against_eager(jfn, f, x, y)
        assert got.stride() == f(x, y).stride()
        assert len(fused_nodes(execution(jfn))) == 1


CASES = {
    "three operands, one empty": (lambda a, b, c: torch.cat((a, c[:, :0], b.exp(), c), 1) * 3,
                                  [(4, 5), (4, 2), (4, 3)]),
    "a cat along the outer dim": (lambda a, b: torch.cat((a, b), 0).sin(), [(3, 8), (5, 8)]),
    "a stepped slice of a cat": (lambda a, b: torch.cat((a, b), -1)[..., 1::3] + 1,
                                 [(4, 7), (4, 6)]),
    "a cat of cats": (lambda a, b: torch.cat((torch.cat((a, b), 1), torch.cat((b, a), 1)), 0) * a.sum(),
                      [(3, 4), (3, 4)]),
    "cats along two dims": (lambda a, b: torch.cat((torch.cat((a, b), 0), torch.cat((b, a), 0)), 1) - 1,
                            [(2, 3), (2, 3)]),
    "a broadcast cat": (lambda a, b, c: torch.cat((a, b), 0) * c, [(1, 1), (2, 1), (3, 6)]),
    "one index of a slice": (lambda a, b: a[:, 2:3] * b, [(4, 6), (4, 5)]),
    "slices of a computed value": (lambda a: (a.exp()[1:, ::2] + a[:-1, 1::2]).neg(), [(5, 8)]),
    "a transposed operand": (lambda a, b: torch.cat((a.t(), b), 1).abs(), [(6, 4), (4, 3)]),
    "a slice of a broadcast": (lambda a, b: (a + b)[1:3, 2:] * 2, [(1, 7), (4, 1)]),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_slices_and_cats_match_eager(name, dtype):
    fn, shapes = CASES[name]
    g = torch.Generator().manual_seed(1)
    args = [(torch.randn(s, generator=g) * 4).to(dtype) for s in shapes]
    try:
        expected = fn(*args)
    except RuntimeError:
        pytest.skip("eager refuses this dtype")
    before = [a.clone() for a in args]
    jfn = fused(fn)
    got = check_against_eager(jfn, fn, *args)
    assert got.stride() == expected.stride()
    assert all(torch.equal(a, b) for a, b in zip(args, before))


def test_a_slice_written_in_place_stays_a_view():
    """x[1:3].mul_(y[::2]): the written slice is torch's view, the read one fuses."""
    def f(x, y):
        x[1:3].mul_(y[::2] + 1)
        return x
    x, y = torch.randn(5, 3), torch.randn(4, 3)
    jfn = fused(f)
    got = jfn(x.clone(), y)
    assert torch.equal(got, f(x.clone(), y))


def test_a_slice_view_returned_is_a_view():
    def f(x):
        y = x * 2
        return y[:, 1:], y[:, :1] + 1
    x = torch.randn(3, 4)
    jfn = fused(f)
    a, b = jfn(x)
    ea, eb = f(x)
    assert torch.equal(a, ea) and torch.equal(b, eb)
    assert a.stride() == ea.stride() and a._base is not None


def test_too_many_parts_leave_the_cat_to_torch():
    """A cat of more operands than MAX_PARTS: the rest still fuses around it."""
    def f(*xs):
        return torch.cat([x * 2 for x in xs], 0).exp()
    xs = [torch.randn(1, 4) for _ in range(kernel_plan.MAX_PARTS + 1)]
    jfn = fused(f)
    check_against_eager(jfn, f, *xs)
    trace = execution(jfn)
    assert any(n.symbol.name == "cat" for n in torch_nodes(trace)), trace
    assert fused_nodes(trace)


def _random_program(rng: random.Random):
    """A chain of elementwise ops, slices and cats over a few (n, m) tensors."""
    n, m = rng.randint(1, 5), rng.randint(1, 9)
    nargs = rng.randint(1, 3)

    def program(*args):
        values = [a for a in args]
        for _ in range(4):
            a = rng_choice[0].choice(values)
            kind = rng_choice[0].choice(["unary", "binary", "slicecat", "cat0", "stepped", "row"])
            if kind == "unary":
                values.append(torch.tanh(a) if a.is_floating_point() else -a)
            elif kind == "binary":
                values.append(a * rng_choice[0].choice(values) + 1)
            elif kind == "slicecat":
                k = rng_choice[0].randint(0, a.shape[1])
                values.append(torch.cat((a[:, k:], a[:, :k] * 2), 1))
            elif kind == "cat0":
                k = rng_choice[0].randint(0, a.shape[0])
                values.append(torch.cat((a[k:], a[:k].neg()), 0))
            elif kind == "stepped":   # even columns, then odd ones
                values.append(torch.cat((a[:, ::2], a[:, 1::2]), 1))
            else:                     # a broadcast row of a slice
                k = rng_choice[0].randint(0, a.shape[0] - 1)
                values.append(a - a[k:k + 1])
        return values[-1] + values[0]
    seed = rng.randrange(1 << 30)
    rng_choice = [random.Random(seed)]

    def run(*args):
        rng_choice[0] = random.Random(seed)
        return program(*args)
    return run, [(n, m)] * nargs


@pytest.mark.parametrize("seed", range(40))
def test_random_slice_and_cat_programs(seed):
    rng = random.Random(seed)
    fn, shapes = _random_program(rng)
    dtype = rng.choice([torch.float32, torch.float16, torch.bfloat16, torch.int32])
    g = torch.Generator().manual_seed(seed)
    args = [(torch.randn(s, generator=g) * 3).to(dtype) for s in shapes]
    if rng.random() < 0.5:
        args = [a.t().contiguous().t() for a in args]   # column-major operands
    jfn = fused(fn)
    got = check_against_eager(jfn, fn, *args)
    assert got.stride() == fn(*args).stride()


def test_a_copy_into_channels_last_fuses_with_its_reader():
    """x.contiguous(memory_format=channels_last) * 2: the new tensor the copy fills
    (prims.full_strided) is the kernel's store, in the copy's layout."""
    def f(x):
        return x.contiguous(memory_format=torch.channels_last) * 2
    x = torch.randn(2, 3, 4, 5)
    jfn = fused(f)
    got = jfn(x)
    assert torch.equal(got, f(x)) and got.stride() == f(x).stride()
    trace = execution(jfn)
    assert len(fused_nodes(trace)) == 1 and not torch_nodes(trace), trace
