"""prims.differentiate_as fused: the CPU kernel returns the value on every dtype's special
values (the carrier matters to the backward only), the optimize pass drops it, so forward
kernels of relu and clamp chains compute what they did before (one kernel, no carrier), the
CUDA kernel's source and PTX (no GPU needed), and the CUDA backend under the simulator."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import primtrace
from primtrace import prims
from primtrace.executors.numba import NumbaFusionExecutor
from tests.numba import special_values as sv
from tests.numba.helpers import (check_against_eager, execution, fused, fused_nodes, torch_nodes,
                                 special_values_under_cuda_simulator)


def differentiate_as(value, carrier):
    return prims.differentiate_as(value, carrier)


def unoptimized(fn):
    """Through jit without the optimize pass, which would drop the prim before lowering."""
    return primtrace.jit(fn, executors=[NumbaFusionExecutor(cost_model=False)], optimize=False)


@pytest.mark.parametrize("dtype", sv.ALL, ids=sv.name_of)
def test_cpu_kernel_returns_the_value(dtype):
    value, carrier, _ = sv.inputs(dtype)       # every special value against every other
    jf = unoptimized(differentiate_as)
    assert sv.same(jf(value, carrier), value)
    trace = execution(jf)
    assert len(fused_nodes(trace)) == 1 and not torch_nodes(trace)
    assert "prims.differentiate_as" in str(primtrace.last_traces(jf)[2])


def chain(x, lo):
    return F.relu(x * 2).clamp(max=3) + torch.clamp(x, min=lo) + F.hardswish(x)


def test_forward_kernels_compute_no_carrier():
    """The refs state their gradients with differentiate_as; the optimized trace has none of
    it, nor the masks and carriers only it read: the prims the refs computed before."""
    x = torch.tensor([-4.0, -3.0, -0.0, 0.0, 1.5, 3.0, float("nan"), float("inf")] * 8)
    lo = torch.randn(64)
    jf = fused(chain)
    check_against_eager(jf, chain, x, lo)
    assert "differentiate_as" in str(primtrace.last_traces(jf)[1])      # the prims trace
    optimized = [n.symbol.name for n in primtrace.last_traces(jf)[2].nodes]
    assert optimized == ["mul", "maximum", "minimum", "maximum", "add", "add", "maximum",
                         "minimum", "mul", "div", "add"]
    assert len(fused_nodes(execution(jf))) == 1 and not torch_nodes(execution(jf))


def test_cuda_kernel_source_and_ptx():
    jf = unoptimized(differentiate_as)
    jf(torch.randn(8), torch.randn(8))
    source = primtrace.kernel_source(jf, device="cuda")
    assert "= x0  # differentiate_as" in source
    pytest.importorskip("numba.cuda")
    (ptx,) = primtrace.kernel_ptx(jf).values()
    assert ".entry" in ptx


def test_cuda_simulator_returns_the_value():
    assert special_values_under_cuda_simulator(
        'tests.numba.test_differentiate_as', 'differentiate_as', 'a', ', optimize=False') == []
