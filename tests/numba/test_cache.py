"""Kernels are cached in memory by their source and on disk across processes."""
import json
import os
import subprocess
import sys

import torch

from primtrace.executors.numba import cache
from tests.numba.helpers import execution, fused, fused_nodes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = r'''
import json, time
import torch
import primtrace
from primtrace.executors.numba import NumbaFusionExecutor, cache
from tests.numba.test_fusion import w2, _w2_inputs
jf = primtrace.jit(w2, executors=[NumbaFusionExecutor()])
t = time.perf_counter()
jf(*_w2_inputs(64))
elapsed = time.perf_counter() - t
(node,) = [n for n in primtrace.last_trace(jf).nodes if n.symbol.kind == "fused"]
stats = node.symbol.impl.kernel.stats
print(json.dumps({"hits": sum(stats.cache_hits.values()), "misses": sum(stats.cache_misses.values()),
                  "dir": cache.cache_dir(), "seconds": elapsed}))
'''


def test_second_process_loads_the_kernel_instead_of_compiling(tmp_path):
    env = dict(os.environ, PRIMTRACE_CACHE_DIR=str(tmp_path),
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    runs = []
    for _ in range(2):
        res = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                             text=True, cwd=ROOT, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["dir"] == second["dir"] == str(tmp_path)          # the variable is honoured
    assert (first["misses"], first["hits"]) == (1, 0)               # compiled, then stored
    assert (second["misses"], second["hits"]) == (0, 1)             # loaded, not compiled
    kernels = list((tmp_path / "kernels").glob("pt_cpu_*.py"))
    assert len(kernels) == 1 and (tmp_path / "kernels" / "__pycache__").is_dir()


def test_same_structure_shares_one_compiled_kernel_in_memory():
    def f(x, y):
        return torch.exp(x) * y - 1

    def g(u, v):                       # other names, same prims and dtypes
        return torch.exp(u) * v - 1

    before = cache.stats["compiles"]
    a = fused(f)
    a(torch.randn(10), torch.randn(10))
    b = fused(g)
    b(torch.randn(33), torch.randn(33))    # another size: sizes are arguments
    ka = fused_nodes(execution(a))[0].symbol.impl
    kb = fused_nodes(execution(b))[0].symbol.impl
    assert ka.kernel is kb.kernel
    assert cache.stats["compiles"] - before <= 1


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path / "x"))
    assert cache.cache_dir() == str(tmp_path / "x")
    monkeypatch.delenv(cache.ENV_VAR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == str(tmp_path / "xdg" / "primtrace")
