"""Numba's thread pool is started with a passive wait policy without touching the process's
environment or the user's explicit choices (each case in a fresh process: the pool starts
once per process)."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = r'''
import json, os
import torch
import numba
from primtrace.executors.numba.backends import threads as nthreading
from primtrace.executors.numba.backends import cpu
from tests.numba.helpers import fused, execution, fused_nodes
cpu.PARALLEL_WORK = cpu.MIN_PARALLEL_ELEMENTS = 0
jf = fused(lambda a: a * 2 + 1)
x = torch.randn(1000)
assert torch.equal(jf(x), x * 2 + 1)
impl = fused_nodes(execution(jf))[0].symbol.impl
print(json.dumps({"layer": numba.threading_layer(), "variant": impl.variant,
                  "policy": os.environ.get("OMP_WAIT_POLICY"), "chosen": nthreading.chosen}))
'''


def _run(**env_changes):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for k in ("OMP_WAIT_POLICY", "NUMBA_THREADING_LAYER"):
        env.pop(k, None)
    env.update(env_changes)
    res = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_parallel_kernels_use_omp_and_leave_the_environment_alone():
    out = _run()
    assert out["variant"] == "kernel_parallel"
    assert out["layer"] == out["chosen"] == "omp"
    assert out["policy"] is None                 # set only while Numba's libgomp loaded


def test_user_choices_win():
    out = _run(OMP_WAIT_POLICY="ACTIVE", NUMBA_THREADING_LAYER="workqueue")
    assert out["layer"] == "workqueue" and out["policy"] == "ACTIVE"
