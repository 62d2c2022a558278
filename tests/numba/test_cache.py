"""Kernels are cached in memory by their source and on disk across processes."""
import json
import os
import subprocess
import sys

import pytest
import torch

import primtrace
from primtrace.executors.numba import kernel_cache as cache
from tests.numba.helpers import execution, fused, fused_nodes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = r'''
import json, time
import torch
import primtrace
from primtrace.executors.numba import NumbaFusionExecutor
from primtrace.executors.numba import kernel_cache as cache
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


# --- the bound on the disk cache ---------------------------------------------------------------
def _kernel(kernels, stem, size, used):
    """A fake cached kernel: its .py and two __pycache__ files, last used at time `used`."""
    files = [kernels / f"{stem}.py", kernels / "__pycache__" / f"{stem}.kernel_serial-13.py311.nbi",
             kernels / "__pycache__" / f"{stem}.kernel_serial-13.py311.1.nbc"]
    for f, n in zip(files, (1000, 1000, size)):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"x" * n)
        os.utime(f, (used, used))
    return files


def test_bound_evicts_least_recently_used_kernels_whole(monkeypatch, tmp_path):
    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path))
    kernels = tmp_path / "kernels"
    groups = {f"pt_cpu_{i:024x}": _kernel(kernels, f"pt_cpu_{i:024x}", 100_000, 1e9 + i)
              for i in range(10)}
    stale = tmp_path / "helpers" / "0123456789abcdef"           # helpers of an older fingerprint
    stale.mkdir(parents=True)
    (stale / "mathlib.exp-1.py311.1.nbc").write_bytes(b"x" * 50_000)
    os.utime(stale / "mathlib.exp-1.py311.1.nbc", (1e9 - 1, 1e9 - 1))
    size_of = sum(cache._disk_size(os.stat(f)) for f in groups["pt_cpu_" + "0" * 24])
    limit = 6 * size_of
    total, count = cache.enforce_bound(str(kernels), limit)
    assert total <= cache.LOW_WATER * limit and count == 4      # 10 * size -> <= 4.8 * size
    assert not stale.exists()                                   # the oldest group went first
    for i, (stem, files) in enumerate(groups.items()):
        assert all(f.exists() for f in files) == (i >= 6), stem   # whole kernels, oldest first
    assert cache.enforce_bound(str(kernels), limit) == (total, 4)  # under the bound: no-op


def test_loading_from_disk_marks_the_kernel_used_without_touching_its_mtime(monkeypatch, tmp_path):
    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path))
    source = "def kernel():\n    return 42\n"
    key, module = cache.load_module(source, "test-mark")
    path = module.__file__
    os.utime(path, (1e9, 1e9))
    cache._modules.pop(key)                                    # as a new process would: from disk
    key2, module2 = cache.load_module(source, "test-mark")
    st = os.stat(path)
    assert key2 == key and module2.kernel() == 42
    assert st.st_mtime == 1e9 and st.st_atime > 1e9 + 1e6      # Numba's index keys on the mtime


def test_writes_keep_the_cache_under_the_bound_and_clear_empties_it(monkeypatch, tmp_path):
    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path))
    monkeypatch.setenv(cache.MAX_ENV_VAR, "0.5")               # 512 KiB
    monkeypatch.setattr(cache, "_budget", {"dir": None, "estimate": 0, "per_kernel": 64 * 1024})
    for i in range(40):                                        # 40 kernels of ~40 KiB each
        key, _ = cache.load_module(f"PAD = {'0' * 40_000!r}\nN = {i}\n", "test-bound")
        cache._modules.pop(key)
        usage, _ = cache.disk_usage()
        assert usage <= cache.max_bytes() + 64 * 1024, (i, usage)  # one estimate's slack
    assert len(list((tmp_path / "kernels").glob("pt_test-bound_*.py"))) < 40
    assert primtrace.clear_kernel_cache() > 0
    assert cache.disk_usage() == (0, 0)
    key, module = cache.load_module("N = 1\n", "test-bound")   # and the cache works again
    cache._modules.pop(key)
    assert module.N == 1 and cache.disk_usage()[1] == 1


def test_cache_bound_from_the_environment(monkeypatch):
    monkeypatch.delenv(cache.MAX_ENV_VAR, raising=False)
    assert cache.max_bytes() == cache.DEFAULT_MAX_MB * 2**20
    monkeypatch.setenv(cache.MAX_ENV_VAR, "16")
    assert cache.max_bytes() == 16 * 2**20
    monkeypatch.setenv(cache.MAX_ENV_VAR, "lots")
    with pytest.warns(RuntimeWarning, match=cache.MAX_ENV_VAR):
        assert cache.max_bytes() == cache.DEFAULT_MAX_MB * 2**20
