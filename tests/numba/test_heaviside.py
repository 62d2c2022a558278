"""prims.heaviside fused: the CPU kernel against eager on every dtype's special values, the
CUDA kernel's source and PTX (no GPU needed), and the CUDA backend under the simulator."""
from __future__ import annotations

import pytest
import torch

import primtrace
from tests.numba import special_values as sv
from tests.numba.helpers import (execution, fused, fused_nodes, special_values_under_cuda_simulator,
                                 torch_nodes)


def heaviside(x, values):
    return torch.heaviside(x, values)


@pytest.mark.parametrize("dtype", sv.ALL, ids=sv.name_of)
def test_cpu_kernel_matches_eager(dtype):
    x, values, _ = sv.inputs(dtype)          # every special value against every other
    jf = fused(heaviside)
    assert sv.same(jf(x, values), torch.heaviside(x, values))
    trace = execution(jf)
    assert len(fused_nodes(trace)) == 1 and not torch_nodes(trace)
    assert "prims.heaviside" in str(primtrace.last_traces(jf)[2])


def test_in_a_chain_and_in_place():
    x, v = torch.randn(64), torch.randn(64)
    x[::5] = 0.0
    jf = fused(lambda a, b: torch.heaviside(a * 2, b).add_(1))
    assert sv.same(jf(x, v), torch.heaviside(x * 2, v) + 1)
    assert len(fused_nodes(execution(jf))) == 1


def test_cuda_kernel_source_and_ptx():
    jf = fused(heaviside)
    jf(torch.randn(8), torch.randn(8))
    source = primtrace.kernel_source(jf, device="cuda")
    assert "float32(1.0) if x0 > float32(0.0) else float32(0.0)" in source
    pytest.importorskip("numba.cuda")
    (ptx,) = primtrace.kernel_ptx(jf).values()
    assert ".entry" in ptx


def test_cuda_simulator_matches_eager():
    assert special_values_under_cuda_simulator(
        'tests.numba.test_heaviside', 'heaviside', 'torch.heaviside(a, b)', '') == []
