"""Tiled kernels with math: strided operands go through row buffers (cpu.staged_operands).

A kernel that reads or writes an operand strided along its inner dim walks it in tiles; with
math per element, each row's strided loads are gathered into a buffer first and its strided
stores scattered after, so the loop computing the values vectorizes. Values and strides
against eager (the harness's float64 rule), in each dtype the buffers hold and those they
do not.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.numba.helpers import check_against_eager, execution, fused, fused_nodes

CL = torch.channels_last
CASES = {
    "silu, channels_last to row-major": (lambda x: F.silu(x).contiguous(), "cl"),
    "silu, row-major to channels_last": (lambda x: F.silu(x).contiguous(memory_format=CL), "rm"),
    "exp of a transpose plus itself": (lambda x: torch.exp(x.transpose(-1, -2)) + x, "sq"),
    "tanh of two layouts": (lambda x: torch.tanh(x.contiguous(memory_format=CL) * x), "rm"),
}


def _input(kind, dtype):
    g = torch.Generator().manual_seed(0)
    if kind == "sq":
        return torch.randn(2, 150, 150, generator=g).to(dtype)
    x = torch.randn(2, 24, 20, 21, generator=g).to(dtype)
    return x.contiguous(memory_format=CL) if kind == "cl" else x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", list(CASES))
def test_staged_tiles_match_eager(name, dtype):
    fn, kind = CASES[name]
    x = _input(kind, dtype)
    jfn = fused(fn)
    got = check_against_eager(jfn, fn, x)
    assert got.stride() == fn(x).stride()
    sources = [n.symbol.source for n in fused_nodes(execution(jfn))]
    assert sources and any("_buf[" in s for s in sources), sources


def test_arithmetic_alone_is_not_staged():
    """Without math the strided loop is already as fast as eager's copy: no buffers."""
    fn = lambda x: (x * 2).contiguous()   # noqa: E731
    x = _input("cl", torch.float32)
    jfn = fused(fn)
    check_against_eager(jfn, fn, x)
    assert not any("_buf[" in n.symbol.source for n in fused_nodes(execution(jfn)))
