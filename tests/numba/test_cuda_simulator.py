"""The CUDA backend under Numba's CUDA simulator, in its own process.

``NUMBA_ENABLE_CUDASIM=1`` must be set before ``numba.cuda`` is first imported, so the
checks run in a subprocess. ``PRIMTRACE_NUMBA_BACKEND=cuda`` sends CPU tensors (standing in
for CUDA ones) through the CUDA code generator and launcher; the simulator receives NumPy
views of them. The same conformance samples as the CPU tests are used (fewer per op: the
simulator interprets every thread in Python).
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = r'''
import json, warnings
warnings.simplefilter("ignore")
import torch
import primtrace
from primtrace.executors.numba import NumbaFusionExecutor
from primtrace.executors.numba.backends import cuda as gpu
from tests.conformance import test_binary, test_unary, test_ternary
from tests.conformance.harness import check_sample, samples
from tests.numba.test_fusion import w2, _w2_inputs, adamw_step

assert gpu.simulator() and gpu.available()
ex = NumbaFusionExecutor()
assert ex.backend == "cuda"
report = {"failures": [], "checked": 0, "kernels": 0}

def run(name, fn, torch_fn, sample_list):
    jfn = primtrace.jit(fn, executors=[ex])
    for s in sample_list:
        report["checked"] += 1
        problem = check_sample(jfn, torch_fn, s)
        if problem:
            report["failures"].append(f"{name} [{s.desc}] {problem}")
        trace = primtrace.last_trace(jfn) if jfn._last else None
        if trace is not None:
            report["kernels"] += sum("CUDA grid-stride" in getattr(n.symbol.impl, "source", "")
                                     for n in trace.nodes if n.symbol.kind == "fused")

by_name = {s.name: s for m in (test_unary, test_binary, test_ternary) for s in m.SPECS}
for name in ["sin", "exp", "rsqrt", "floor", "abs", "sign", "isnan", "add", "mul", "div",
             "remainder", "maximum", "pow", "atan2", "where", "clamp"]:
    spec = by_name[name]
    all_samples = list(samples(spec))
    run(name, spec.torch_fn, spec.torch_fn, all_samples[::max(1, len(all_samples) // 6)])

from tests.conformance.harness import SampleInput
run("w2", w2, w2, [SampleInput(_w2_inputs(37), {}, "w2")])
x = torch.randint(-9, 9, (3, 4)); y = torch.randint(1, 4, (4,))
run("int div", lambda a, b: a // b + a % b, lambda a, b: a // b + a % b, [SampleInput((x, y), {}, "ints")])
try:
    primtrace.jit(lambda a, b: a // b, executors=[ex])(x, torch.zeros(4, dtype=torch.int64))
    report["failures"].append("integer division by zero did not raise")
except RuntimeError as e:
    assert "ZeroDivisionError" in str(e)
bf = torch.randn(5, 6).bfloat16()
run("bf16", lambda a, b: a * 3 + b, lambda a, b: a * 3 + b, [SampleInput((bf, bf.t().contiguous().t()), {}, "bf16")])
st = [torch.randn(40) for _ in range(4)]; st[3] = st[3].abs()
ref = [t.clone() for t in st]
adamw_step(*ref, 1e-3, 0.9, 0.999, 1e-8, 1e-2, 2)
primtrace.jit(adamw_step, executors=[ex])(*st, 1e-3, 0.9, 0.999, 1e-8, 1e-2, 2)
if not all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(st, ref)):
    report["failures"].append("adamw in place differs")
print(json.dumps(report))
'''


def test_cuda_backend_under_the_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PRIMTRACE_NUMBA_BACKEND="cuda",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, cwd=ROOT, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    report = json.loads(res.stdout.strip().splitlines()[-1])
    assert report["checked"] > 80 and report["kernels"] > 50
    assert not report["failures"], "\n".join(report["failures"][:10])
