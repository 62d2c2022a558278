"""Gathers at constant, evenly spaced positions run as a slice and a copy
(tracer/index_slices.py): eager's values, strides and errors, a new tensor every call."""
import pytest
import torch

import primtrace

GATHERS = {
    "falcon's kv head": lambda x: x[..., [-2], :],
    "every other": lambda x: x[:, [0, 2, 4]] * 2,
    "one row": lambda x: x[[1]] + 1,
    "of a permuted view": lambda x: x.permute(2, 0, 1)[[1, 3]],
    "a tensor index": lambda x: x[:, torch.tensor([1, 3, 5])],
    "then exp": lambda x: x.permute(2, 0, 1)[[1, 3]].exp(),
}
KEPT = {   # gathers that stay gathers
    "descending": lambda x: x.transpose(0, 2)[:, [3, 1]],
    "repeated": lambda x: x[:, [0, 0]],
    "uneven": lambda x: x[:, [0, 1, 3]],
    "two indices": lambda x: x[[0, 1], [2, 3]],
}


def names(jfn):
    return [n.symbol.name for n in primtrace.last_traces(jfn)[2].nodes]


@pytest.mark.parametrize("executors", [None, [primtrace.TORCH]], ids=["fusion", "torch"])
@pytest.mark.parametrize("case", [*GATHERS, *KEPT])
def test_like_eager(case, executors):
    fn = {**GATHERS, **KEPT}[case]
    jfn = primtrace.jit(fn, executors=executors)
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        x = torch.randn(6, 6, 5).to(dtype)
        got, want = jfn(x), fn(x)
        torch.testing.assert_close(got, want)
        assert got.stride() == want.stride()
        assert jfn(x).data_ptr() != got.data_ptr()   # a new tensor each call
    assert ("index" not in names(jfn)) == (case in GATHERS)


def test_out_of_bounds_raises_as_eager():
    fn = lambda x: x[:, [1, 6]]   # noqa: E731
    with pytest.raises(IndexError):
        fn(torch.randn(6, 6))
    with pytest.raises(IndexError):
        primtrace.jit(fn)(torch.randn(6, 6))


def test_gradients():
    x = torch.randn(4, 6, requires_grad=True)
    fn = lambda x: (x[:, [1, 3, 5]] * 3).sum()   # noqa: E731
    primtrace.jit(fn)(x).backward()
    want = x.detach().clone().requires_grad_()
    fn(want).backward()
    torch.testing.assert_close(x.grad, want.grad)
