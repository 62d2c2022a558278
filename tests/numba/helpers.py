"""Shared helpers for the Numba executor tests."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import torch

import primtrace
from primtrace.executors.numba import NumbaFusionExecutor
from tests.conformance.harness import compare_outputs


def fused(fn, **kw):
    """`fn` through jit with the Numba fusion executor first (torch after it), fusing every
    region it can (these tests check the kernels, not the cost model)."""
    return primtrace.jit(fn, executors=[NumbaFusionExecutor(**{"cost_model": False, **kw})])


def execution(jfn):
    return primtrace.last_trace(jfn)


def fused_nodes(trace):
    return [n for n in trace.nodes if n.symbol.kind == "fused"]


def torch_nodes(trace):
    """Unfused nodes that make tensors (number arithmetic nodes do not count)."""
    from primtrace.ir.proxy import TensorProxy
    return [n for n in trace.nodes if n.symbol.kind != "fused"
            and any(isinstance(p, TensorProxy) for p in n.output_proxies)]


def upcast(args):
    return [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]


def check_against_eager(jfn, fn, *args):
    """Run both; assert the jit result conforms to eager (the float64 at-least-as-accurate
    rule of the conformance harness). Returns the jit result."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
        got = jfn(*args)
    problem = compare_outputs(got, expected, lambda: fn(*upcast(args)))
    assert problem is None, problem
    return got


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def under_cuda_simulator(script: str, timeout: int = 600):
    """Run `script` in a subprocess with the CUDA backend under Numba's simulator (which must
    be chosen before numba.cuda is first imported); returns the JSON its last line prints."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PRIMTRACE_NUMBA_BACKEND="cuda",
               PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


_SPECIAL_VALUES = r'''
import json, torch, primtrace
from primtrace.executors.numba import NumbaFusionExecutor
from tests.numba import special_values as sv
from {module} import {fn} as fn
ex = NumbaFusionExecutor()
assert ex.backend == "cuda"
bad = []
for dtype in sv.ALL:
    a, b, _ = sv.inputs(dtype)
    jf = primtrace.jit(fn, executors=[ex]{options})
    if not sv.same(jf(a, b), {expected}):
        bad.append(str(dtype))
    if "CUDA grid-stride" not in primtrace.kernel_source(jf):
        bad.append(f"{{dtype}}: not fused")
print(json.dumps(bad))
'''


def special_values_under_cuda_simulator(module: str, fn: str, expected: str,
                                        options: str = "") -> list:
    """The dtypes (tests/numba/special_values.py) on which binary `module.fn`, fused by the
    CUDA backend under the simulator, differs from `expected` (an expression of its inputs
    a, b) or does not fuse."""
    return under_cuda_simulator(_SPECIAL_VALUES.format(module=module, fn=fn, expected=expected,
                                                       options=options))
