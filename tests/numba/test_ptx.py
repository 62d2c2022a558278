"""The CUDA kernels compiled to PTX for sm_90 (no GPU needed) and read back.

Per region: one ``.entry``; per element one global load per tensor input and one global
store per output (Numba emits ``ld.global``/``st.global`` or generic ``ld.``/``st.``; the
parameter loads ``ld.param`` are not memory traffic); no intermediate stored, no local
memory. NVVM may unroll the grid-stride loop (k copies of the body, remainder included), so
the counts are checked per copy: stores = k * outputs, loads = k * per-element inputs +
the hoisted stride-0 loads. The one exception is libdevice's sin/cos/tan: their Payne-Hanek path for huge
arguments (|x| > 105615) keeps a 7-word array in local memory, as CUDA's own sinf does.
"""
import re

import pytest
import torch

import primtrace
from primtrace.executors.numba import NumbaFusionExecutor
from primtrace.executors.numba.backends import cuda as gpu
from tests.numba.test_fusion import _w2_inputs, adamw_step, w2

pytest.importorskip("numba.cuda")

_EXECUTOR = NumbaFusionExecutor(backend="cuda")
_TRIG = {"sin", "cos", "tan"}


def _regions(fn, *args):
    trace = primtrace.trace(fn, stage="optimized")(*args)
    return _EXECUTOR.partition(trace)


def _memory_ops(ptx: str, op: str) -> list[str]:
    """Global/generic loads or stores (not param, local, shared or const state spaces)."""
    found = re.findall(rf"^\s*(?:@%p\d+\s+)?{op}\.(\S+)", ptx, re.M)
    return [f for f in found if not f.startswith(("param", "local", "shared", "const"))]


CASES = {
    "W1 add(f16, f32)": (torch.add, (torch.randn(8).half(), torch.randn(8))),
    "W2 chain": (w2, _w2_inputs(8)),
    "W3 sin(i64)": (torch.sin, (torch.randint(-9, 9, (8,)),)),
    "bf16 in, f16 out": (lambda a, b: (a * 3 + b).half(), (torch.randn(8).bfloat16(), torch.randn(8))),
    "broadcast and strided": (lambda a, b, c: a * b - c, (torch.randn(3, 1), torch.randn(1, 4),
                                                          torch.randn(4, 3).t())),
    "0-dim and number": (lambda a, s, n: (a + s) * n, (torch.randn(6), torch.tensor(2.0), 3)),
    "integer division": (lambda a, b: a // b + a % b, (torch.randint(1, 9, (8,)), torch.randint(1, 9, (8,)))),
    "compare, where, bool out": (lambda a, b: (torch.where(a > b, a, b), a != b),
                                 (torch.randn(8), torch.randn(8))),
    "AdamW in place": (adamw_step, tuple(torch.rand(16) for _ in range(4)) + (1e-3, 0.9, 0.999, 1e-8, 1e-2, 2)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_ptx_of_each_region(name):
    fn, args = CASES[name]
    regions = _regions(fn, *args)
    assert regions
    for region in regions:
        plan = gpu.analyze(region)
        ptx = gpu.ptx(region, cc=(9, 0))
        assert ptx.count(".entry") == 1
        loads, stores = _memory_ops(ptx, "ld"), _memory_ops(ptx, "st")
        flag = 1 if plan.zero_division else 0          # err[0] = 1, once, after the loop
        copies, rest = divmod(len(stores) - flag, len(plan.stores))
        assert rest == 0 and 1 <= copies <= 16, (stores, [s.name for s in plan.stores])
        hoisted = sum(1 for ld in plan.loads if not any(ld.strides))
        assert len(loads) == copies * (len(plan.loads) - hoisted) + hoisted, (
            loads, [ld.name for ld in plan.loads])
        uses_trig = any(n.symbol.name in _TRIG for n in region.nodes)
        if not uses_trig:
            assert ".local" not in ptx
        else:   # only libdevice's slow-path array, never our values
            assert len(re.findall(r"^\s*st\.local", ptx, re.M)) <= 7


def test_in_place_region_reads_and_writes_each_tensor_once():
    fn, args = CASES["AdamW in place"]
    (region,) = _regions(fn, *args)
    plan = gpu.analyze(region)
    assert len(plan.loads) == 4 and len(plan.stores) == 3      # p, g, m, v read; p, m, v written
    assert all(s.shares is not None for s in plan.stores)
