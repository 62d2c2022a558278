"""Work on a small value broadcast along the innermost dim in memory runs in its own kernel
(executor.recomputed_per_element): batch_norm's per-channel scale over a channels_last
tensor, squeeze-excitation's sigmoid. Values as eager's; along an outer dim (row-major) or
below RECOMPUTE_MIN_ELEMENTS the work stays in the one kernel."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.numba.helpers import check_against_eager, execution, fused, fused_nodes

C = 32
G = torch.Generator().manual_seed(0)
W, B, MEAN = (torch.randn(C, generator=G) for _ in range(3))
VAR = torch.rand(C, generator=G) + 0.5


def bn_silu(x, s):
    params = [t.to(x.dtype) if x.dtype == torch.float64 else t for t in (MEAN, VAR, W, B)]
    return F.silu(F.batch_norm(x, *params, False, 0.1, 1e-5))


def squeeze_excite(x, s):
    return x * torch.sigmoid(s)


def prims_of(jfn) -> list[set[str]]:
    return [{sub.symbol.name for sub in n.subnodes} for n in fused_nodes(execution(jfn))]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("layout", ["channels_last", "row-major"])
@pytest.mark.parametrize("fn", [bn_silu, squeeze_excite], ids=["bn_silu", "squeeze_excite"])
def test_split_only_where_the_kernel_would_recompute(fn, layout, dtype):
    x = torch.randn(1, C, 48, 48, generator=G).to(dtype)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    s = torch.randn(1, C, 1, 1, generator=G).to(dtype)
    jfn = fused(fn)
    got = check_against_eager(jfn, fn, x, s)
    assert got.stride() == fn(x, s).stride()
    math = "sqrt" if fn is bn_silu else "sigmoid"
    big = [p for p in prims_of(jfn) if "broadcast_in_dim" in p]
    assert len(big) == 1, prims_of(jfn)
    assert any(math in p for p in big) == (layout == "row-major"), prims_of(jfn)


def test_small_tensors_keep_one_kernel():
    x = torch.randn(1, C, 8, 8, generator=G).contiguous(memory_format=torch.channels_last)
    jfn = fused(bn_silu)
    check_against_eager(jfn, bn_silu, x, None)
    assert len(fused_nodes(execution(jfn))) == 1
