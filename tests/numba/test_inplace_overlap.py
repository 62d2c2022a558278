"""In-place writes whose memory overlaps another operand of the fused kernel, against eager.

Proxies have no memory, so a launcher that stores into an input checks at run time
(``codegen.alias_check_lines``): a partial overlap with an operand of the in-place op is
eager's error; other overlaps that one kernel would get wrong (``y[1:] += y[:-1] * 2``
reads the old ``y[:-1]`` through a temporary in eager) run the region unfused, one torch
call at a time; the identical view (``x.add_(x)``) and disjoint views keep the kernel.
Each case runs through fused jit and eager: same exception type and message, or the same
values, bit for bit, of the results and of the mutated inputs. The CUDA backend runs the
same cases under Numba's simulator in a subprocess.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest
import torch

from primtrace.executors.numba import launch as codegen
from tests.numba.helpers import execution, fused, fused_nodes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _sq():
    return (torch.arange(16.0).reshape(4, 4) - 5,)


def _vec(n=10, dtype=torch.float32):
    return lambda: ((torch.arange(float(n)) - 3).to(dtype),)


def _write_twice(a, b, c):
    a.add_(c)
    b.mul_(c)


def _overlapping_arguments():
    x = torch.arange(6.0)
    return x[:-1], x[1:], torch.full((5,), 3.0)


def _read_after_write(a, b, c):
    a.add_(c)
    return b * c


def _same_tensor_twice():
    x = torch.arange(6.0) - 2
    return x, x, torch.full((6,), 3.0)


def _computed_then_written(x):
    y = x[:-1] * 2
    x[1:].add_(y)
    return y


def _strided():
    return ((torch.arange(24.0).reshape(3, 8) - 5)[:, ::2],)


def _disjoint_and_distinct():
    return torch.arange(8.0), torch.ones(8)


# name -> (function, inputs, expected path: "error" (eager's), "kernel" or "unfused")
CASES = {
    # eager refuses: an operand of the in-place op partially overlaps the written tensor
    "copy_ from the transpose": (lambda x: x.copy_(x.t()), _sq, "error"),
    "copy_ of overlapping slices": (lambda x: x[:5].copy_(x[3:8]), _vec(), "error"),
    "add_ of the transpose": (lambda x: x.add_(x.t()), _sq, "error"),
    "mul_ of the shifted view": (lambda x: x[1:].mul_(x[:-1]), _vec(), "error"),
    "mul_ of the shifted view, f16": (lambda x: x[1:].mul_(x[:-1]), _vec(10, torch.float16), "error"),
    "add_ of a broadcast row": (lambda x: x.add_(x[0]), _sq, "error"),
    "add_ of a 0-dim element": (lambda x: x.add_(x[0]), _vec(), "error"),
    "chained mul_ then add_": (lambda x: x[1:].mul_(2).add_(x[:-1]), _vec(), "error"),
    "add_ of an in-place result": (lambda x: x[1:].add_(x[:-1].mul_(2)), _vec(), "error"),
    "copy_ of an in-place result": (lambda x: x[:5].copy_(x[3:8].neg_()), _vec(), "error"),
    "clamp_ with an overlapping bound": (lambda x: x[1:].clamp_(min=x[:-1]), _vec(), "error"),
    "add_ into an expanded tensor": (lambda x: x[0].expand(4, 4).add_(1), _sq, "error"),
    # prims cannot tell these from ``c.copy_(a * b)`` / ``add_(other * 2)`` (which read a
    # temporary): the launcher runs the region unfused, one torch call at a time, and the
    # call raises eager's error
    "mul out= an overlapping input": (lambda x: torch.mul(x[:-1], x[1:], out=x[1:]), _vec(), "error"),
    "add_ with alpha of the shifted view": (lambda x: x[1:].add_(x[:-1], alpha=2), _vec(), "error"),
    # eager allows: the identical view, disjoint views, distinct tensors
    "add_ itself": (lambda x: x.add_(x), _sq, "kernel"),
    "mul_ itself": (lambda x: x.mul_(x), _sq, "kernel"),
    "add_ the identical view": (lambda x: x.add_(x[:]), _sq, "kernel"),
    "add_ a disjoint slice": (lambda x: x[:5].add_(x[5:]), _vec(), "kernel"),
    "add_ a distinct tensor": (lambda p, g: p.add_(g), _disjoint_and_distinct, "kernel"),
    # eager allows, one kernel would not: the region runs unfused
    "add_ a product of the shifted view": (lambda x: x[1:].add_(x[:-1] * 2), _vec(), "unfused"),
    "copy_ a sum of the shifted view": (lambda x: x[1:].copy_(x[:-1] + 1), _vec(), "unfused"),
    "a value of the shifted view, then add_": (_computed_then_written, _vec(), "unfused"),
    "add_ the interleaved view": (lambda x: x[::2].add_(x[1::2]), _vec(), "unfused"),
    "two writes into overlapping views": (_write_twice, _overlapping_arguments, "unfused"),
    "a read of an aliased argument after the write": (_read_after_write, _same_tensor_twice, "unfused"),
    # eager's overlap check cannot tell for a tensor that is not dense: its in-place kernel
    # reads x[0] while it rewrites it (x[1] times the new x[0]), as the torch call does
    "mul_ by a row of a strided tensor": (lambda x: x.mul_(x[0]), _strided, "unfused"),
}
def _outcome(fn, args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = fn(*args)
        except Exception as e:  # eager's verdict is the spec
            return "error", type(e), str(e)
    return "ok", out, args


def _same_values(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b) \
            and torch.equal(a.signbit(), b.signbit())
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same_values(x, y) for x, y in zip(a, b))
    return a == b


def check_case(name) -> list[str]:
    """Problems of one case through fused jit (the path taken included); [] when none."""
    fn, make, path = CASES[name]
    calls = []
    real_unfused = codegen.unfused

    def counting(region):
        run = real_unfused(region)

        def wrapped(*values):
            calls.append(1)
            return run(*values)
        return wrapped
    codegen.unfused = counting
    try:
        expected = _outcome(fn, make())
        jfn = fused(lambda *a: fn(*a))
        got = _outcome(jfn, make())
    finally:
        codegen.unfused = real_unfused
    problems = []
    if expected[0] == "error" or got[0] == "error":
        if expected != got:
            problems.append(f"{name}: eager {expected[:3] if expected[0] == 'error' else 'returned'}, "
                            f"ours {got if got[0] == 'error' else 'returned'}")
        if path != "error":
            problems.append(f"{name}: expected path {path}, eager raised")
        return problems
    if not _same_values(got[1:], expected[1:]):
        problems.append(f"{name}: values differ: ours {got[1:]}, eager {expected[1:]}")
    if not fused_nodes(execution(jfn)):
        problems.append(f"{name}: nothing was fused")
    took = "unfused" if calls else "kernel"
    if took != path:
        problems.append(f"{name}: took the {took} path, expected {path}")
    return problems


@pytest.mark.parametrize("name", list(CASES))
def test_overlapping_writes_match_eager(name):
    problems = check_case(name)
    assert not problems, "\n".join(problems)


def test_check_only_in_launchers_with_in_place_stores():
    """A launcher without in-place stores has no check; one with them compares addresses."""
    def f(p, g):
        return p * g, p.add_(g)
    jf = fused(f)
    jf(torch.ones(16), torch.ones(16))
    [node] = fused_nodes(execution(jf))
    assert "data_ptr()" in node.symbol.impl.source and "aliased(" in node.symbol.impl.source
    jg = fused(lambda p, g: p * g)
    jg(torch.ones(16), torch.ones(16))
    [node] = fused_nodes(execution(jg))
    assert "aliased(" not in node.symbol.impl.source


#: the simulator copies each array argument in and back out, so two views of one memory
#: clobber each other's writes there (a real GPU gets pointers): not a case for it
NOT_SIMULATED = {"add_ the identical view"}

SCRIPT = r'''
import json
from primtrace.executors.numba.backends import cuda as gpu
from tests.numba import test_inplace_overlap as t
assert gpu.simulator()
print(json.dumps([p for name in t.CASES if name not in t.NOT_SIMULATED for p in t.check_case(name)]))
'''


def test_cuda_launcher_under_the_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PRIMTRACE_NUMBA_BACKEND="cuda",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, cwd=ROOT, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    problems = json.loads(res.stdout.strip().splitlines()[-1])
    assert not problems, "\n".join(problems)
