"""primtrace.kernel_source / kernel_ptx: a jitted function's fused kernels as Numba source,
numba.cuda source and sm_90 PTX, all without a GPU (the jit ran on CPU tensors)."""
import os
import subprocess
import sys
import warnings

import pytest
import torch

import primtrace

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def two_regions(a, b):
    y = torch.exp(a) * b
    s = y.sum(dim=0)   # not over the last dim, so no row kernel: torch runs it, 2 regions around
    return torch.sigmoid(s) + 1, y


@pytest.fixture(scope="module")
def jitted():
    jf = primtrace.jit(two_regions)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", primtrace.OpaqueOpWarning)
        jf(torch.randn(8, 4), torch.randn(8, 4))
    return jf


def _fused_names(jf):
    return [n.symbol.name for n in primtrace.last_trace(jf).nodes if n.symbol.kind == "fused"]


def test_kernel_ptx_has_one_entry_per_region(jitted):
    pytest.importorskip("numba.cuda")
    ptx = primtrace.kernel_ptx(jitted)
    assert list(ptx) == _fused_names(jitted) == ["numba_fusion_0", "numba_fusion_1"]
    for code in ptx.values():
        assert code.count(".entry") == 1 and ".target sm_90" in code
    assert ".target sm_80" in primtrace.kernel_ptx(jitted, cc=(8, 0))["numba_fusion_1"]


def test_kernel_source_for_cuda_is_the_grid_stride_kernel_of_each_region(jitted):
    source = primtrace.kernel_source(jitted, device="cuda")
    assert [line for line in source.splitlines() if line.startswith("# numba_fusion")] == [
        "# numba_fusion_0", "# numba_fusion_1"]
    assert source.count("from numba import cuda") == 2 and source.count("def kernel(") == 2
    assert "cuda.blockIdx.x" in source and "while i < n:" in source
    assert "cl.exp_float32" in source                       # libdevice math, not the CPU's


def test_kernel_source_for_cpu_is_what_the_execution_trace_runs(jitted):
    source = primtrace.kernel_source(jitted)
    assert source == primtrace.kernel_source(jitted, device="cpu")
    assert source.startswith("# numba_fusion_0\n") and "# numba_fusion_1\n" in source
    assert "def kernel_serial" in source and "cuda" not in source
    with pytest.raises(ValueError, match="device"):
        primtrace.kernel_source(jitted, device="tpu")


def test_nothing_fused_gives_nothing():
    jf = primtrace.jit(lambda a: a.amax(0))   # a max over leading dims: no kernel takes it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", primtrace.OpaqueOpWarning)
        jf(torch.randn(3, 2))
    assert primtrace.kernel_source(jf, device="cuda") == "" == primtrace.kernel_source(jf)
    with pytest.raises(RuntimeError, match="call it first"):
        primtrace.kernel_ptx(primtrace.jit(two_regions))


def test_import_primtrace_does_not_import_numba_cuda():
    code = ("import sys, primtrace; primtrace.kernel_ptx, primtrace.kernel_source; "
            "print(sorted(m for m in sys.modules if m.startswith('numba')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
