"""When the Numba executor leaves a region to torch: one torch call whose kernel would not
beat torch's own runs as that call (values exactly eager's); everything that saves a
memory pass, mixes dtypes, writes a huge-page-sized output or computes faster math fuses."""
import pytest
import torch
import torch.nn.functional as F

import primtrace
from primtrace.executors.numba import NumbaFusionExecutor, cpu


def run(fn, *args, **kw):
    jfn = primtrace.jit(fn, executors=[NumbaFusionExecutor(**kw)])
    got = jfn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    return got, [n.symbol.qualname for n in primtrace.last_trace(jfn).nodes]


@pytest.mark.parametrize("fn, dtype, call", [
    (lambda a: a * 1.5, torch.float16, "torch.Tensor.mul"),
    (lambda a: a * 1.5, torch.bfloat16, "torch.Tensor.mul"),
    (F.gelu, torch.float32, "torch.nn.functional.gelu"),
    (torch.sigmoid, torch.float32, "torch.sigmoid"),
    (lambda a: torch.clamp(a, -1, 1), torch.float32, "torch.clamp"),
    (lambda a: a.add_(1), torch.float32, "torch.Tensor.add_"),
])
def test_one_torch_call_below_the_huge_page_size_runs_as_that_call(fn, dtype, call):
    a = torch.randn(4096).to(dtype)
    got, nodes = run(fn, a)
    assert nodes == [call]
    torch.testing.assert_close(got, fn(a.clone()), rtol=0, atol=0)   # torch's own kernel


@pytest.mark.parametrize("fn, args", [
    (lambda a, b: a + b, (torch.randn(64).half(), torch.randn(64))),            # two dtypes
    (lambda a, b: F.gelu(a + b), (torch.randn(64), torch.randn(64))),          # two calls
    (torch.exp, (torch.randn(64),)),                                           # faster math
    (lambda a: a * 1.5, (torch.randn(cpu.HUGE_OUTPUT_BYTES // 4),)),           # huge pages
])
def test_what_saves_work_still_fuses(fn, args):
    got, nodes = run(fn, *args)
    assert nodes == ["numba_fusion_0"]
    torch.testing.assert_close(got, fn(*args))


def test_without_the_cost_model_every_region_fuses():
    got, nodes = run(lambda a: a * 1.5, torch.randn(64).half(), cost_model=False)
    assert nodes == ["numba_fusion_0"]
