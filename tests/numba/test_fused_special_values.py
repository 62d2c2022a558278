"""Every prim the Numba executor lowers, fused, against eager on special values (issue 8).

For each dtype the lowering supports, every (prim, dtype) of the lowering tables runs on
the cross product of the dtype's special values (+-0, +-inf, NaN, subnormals, integer
extremes, -1/0/1, ordinary values) in a few fused kernels, on the CPU backend here and on
the CUDA backend under Numba's simulator in a subprocess; ``special_values.py`` builds the
cases from the tables and states the comparison rule. Kernels are cached on disk, so a
second run costs seconds; a cold run compiles ~40 kernels (~30 s on the 2-core VM).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numba
import pytest
import torch

from primtrace import prims
from primtrace.executors.numba import ops as lowering
from primtrace.executors.numba.backends import cpu
from tests.numba import special_values as sv
from tests.numba.helpers import execution, fused, fused_nodes
from tests.numba.test_vmath import MIN_LANES32

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("dtype", sv.ALL, ids=sv.name_of)
def test_cpu_kernels_match_eager_on_special_values(dtype):
    problems, stats = sv.check_dtype(lowering.CPU, dtype, fused)
    assert not problems, "\n".join(problems[:20])
    assert stats["kernels"] == stats["groups"] >= 1
    assert all("runs kernel_" in s for s in stats["sources"])


def test_every_lowering_row_is_swept():
    """Each row of the tables that lowers for some dtype is reached by some case."""
    swept = {c.prim for d in sv.ALL for c in sv.cases(lowering.CPU, d)}
    for table, arity in ((lowering.UNARY, 1), (lowering.BINARY, 2)):
        for prim, cat in table:
            dtypes = [d for d in sv.ALL if lowering.category(d) == cat]
            if any(lowering.lowerable(lowering.CPU, prim, d, arity) for d in dtypes):
                assert prim in swept, f"{prim} ({cat}) is lowered but not swept"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16],
                         ids=sv.name_of)
def test_clamp_keeps_the_sign_of_zero(dtype):
    """The bug of issue 8: clamp through the fused minimum/maximum lost -0.0. Eager's
    clamp keeps the input on a tie with a bound, on its scalar and SIMD loops alike."""
    x = torch.tensor([-0.0, 0.0] * 20, dtype=dtype)

    def f(t):
        return (torch.clamp(t, max=0.0), torch.clamp(t, min=0.0), torch.clamp(t, min=-0.0),
                torch.clamp(t, max=-0.0), torch.clamp(t, -0.0, 0.0), torch.clamp(t, 0.0, -0.0))
    jf = fused(f)
    for ours, expected in zip(jf(x), f(x)):
        assert torch.equal(torch.signbit(ours), torch.signbit(expected))
        assert torch.equal(torch.signbit(1 / ours), torch.signbit(1 / expected))
    assert len(fused_nodes(execution(jf))) == 1


@pytest.mark.parametrize("dtype,lanes", [(torch.float32, MIN_LANES32), (torch.float64, MIN_LANES32 // 2),
                                         # int32 division has no vector instruction: LLVM
                                         # divides in double lanes (4 wide on AMD Zen 3)
                                         (torch.int32, MIN_LANES32 // 2)], ids=["float32", "float64", "int32"])
def test_fixed_lowerings_still_vectorize(dtype, lanes):
    """min/max with eager's tie rule, and integer division wrapping INT_MIN / -1, stay
    branch-free: the kernel loop is vector code."""
    def f(a, b):
        if dtype.is_floating_point:
            return prims.maximum(a, b), prims.minimum(a, b), prims.fmax(a, b), prims.fmin(a, b)
        return prims.div(a, b), prims.remainder(a, b)
    jf = fused(f)
    jf(torch.ones(64, dtype=dtype), torch.ones(64, dtype=dtype))
    (node,) = fused_nodes(execution(jf))
    cached = node.symbol.impl.kernel            # code loaded from the disk cache has no IR:
    kernel = numba.njit(**{**cpu.NJIT_OPTIONS, "cache": False})(cached.py_func)   # recompile
    kernel.compile(cached.signatures[0])
    ir = kernel.inspect_llvm(cached.signatures[0])
    elem = {torch.float32: "float", torch.float64: "double", torch.int32: "i32"}[dtype]
    found = [int(n) for n in re.findall(rf"<(\d+) x {elem}>", ir)]
    assert found and max(found) >= lanes, sorted(set(found))


SIM_SCRIPT = r'''
import json, warnings
warnings.simplefilter("ignore")
import primtrace
from primtrace.executors.numba import NumbaFusionExecutor
from primtrace.executors.numba.backends import cuda as gpu
from tests.numba import special_values as sv

assert gpu.simulator() and gpu.available()
ex = NumbaFusionExecutor()
assert ex.backend == "cuda"
report = {}
for dtype in sv.ALL:
    problems, stats = sv.check_dtype(gpu.BACKEND, dtype, lambda f: primtrace.jit(f, executors=[ex]))
    stats["cuda"] = sum("CUDA grid-stride" in s for s in stats.pop("sources"))
    report[sv.name_of(dtype)] = {"problems": problems, **stats}
print(json.dumps(report))
'''


def test_cuda_backend_matches_eager_on_special_values_under_the_simulator():
    """The CUDA backend's kernels (libdevice math replaced by Python's in the simulator)
    against eager CPU; float -> int conversions out of range are the GPU's own (skipped)."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PRIMTRACE_NUMBA_BACKEND="cuda",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-c", SIM_SCRIPT], env=env, capture_output=True,
                         text=True, cwd=ROOT, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    report = json.loads(res.stdout.strip().splitlines()[-1])
    assert set(report) == {sv.name_of(d) for d in sv.ALL}
    problems = [p for r in report.values() for p in r["problems"]]
    assert not problems, "\n".join(problems[:20])
    for name, r in report.items():
        assert r["cuda"] == r["kernels"] == r["groups"] >= 1, (name, r)
        assert r["cases"] >= 30, (name, r)
