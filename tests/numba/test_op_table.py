"""The op table (ops.py): one row per prim, read by can_fuse, the planner and both backends;
a row naming a function that does not exist fails when the table is imported."""
from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from primtrace.executors.numba import kernel_cache, ops, plan
from primtrace.executors.numba.ops import VMATH, F16RANGE, Fn, Libdevice, Op, OpTableError, libm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_table_checks_at_import():
    ops.check()                                   # what the import ran
    assert set(ops.OPS) == {row.prim for row in ops.ROWS}
    assert all(fn.name in ops.FUNCTIONS for row in ops.ROWS for fn in row.functions)


@pytest.mark.parametrize("row, missing", [
    (Op("exp", 1, fn=Fn("no_such_fn", 1, VMATH)), "vmath has no no_such_fn"),
    (Op("exp", 1, fn=Fn("exp", 1, libm("math.no_such_fn"))), "Numba cannot call"),
    (Op("floor", 1, fn=Fn("floor", 1, VMATH), f16_range=Fn("floor_nowhere", 1, F16RANGE, regs=("float32",))),
     "f16range.py has no floor_nowhere_float32"),
    (Op("sin", 1, fn=Fn("sin", 1, VMATH), near=Fn("sin_nowhere", 1, VMATH, regs=("float32",))),
     "vmath has no sin_nowhere for float32"),
    (Op("no_such_prim", 1, f=lambda em, d, a: a), "no_such_prim: no such prim"),
])
def test_a_row_naming_a_missing_function_fails(row, missing):
    with pytest.raises(OpTableError, match=missing):
        ops.check((row,))


def test_a_missing_runtime_loop_fails():
    with pytest.raises(OpTableError, match="runtime.py has no pow_nowhere"):
        ops.check((), helpers={"pow_nowhere"})


def test_a_missing_libdevice_name_fails():
    row = Op("exp", 1, fn=Fn("exp", 1, VMATH, Libdevice("expf", "exp_nowhere", lambda x: x)))
    with pytest.raises(OpTableError, match="libdevice has no exp_nowhere"):
        ops.check_libdevice(SimpleNamespace(expf=None), (row,))
    ops.check_libdevice(SimpleNamespace(expf=None, exp_nowhere=None), (row,))


def test_importing_the_table_fails_on_a_missing_function():
    """The check runs at import: with a vmath function gone, (re)importing ops fails."""
    code = ("import importlib\n"
            "from primtrace.executors.numba import ops, vmath\n"
            "del vmath.VMATH[('tanh', 'float32')]\n"
            "importlib.reload(ops)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode != 0
    assert "OpTableError" in r.stderr and "vmath has no tanh for float32" in r.stderr


def test_structural_rows_are_the_planners():
    """Each structural row has the planner method of its name; keyword order is the row's."""
    for row in ops.ROWS:
        if row.structural:
            assert callable(getattr(plan._Analyzer, row.prim)) and row.params
        else:
            assert row.params is None and row.arity in (1, 2)


def test_views_follow_the_rows():
    assert ops.F16_RANGE["round"] == "rint_f16range" and ops.HALF_RESULT == {"exp": "exp_fast"}
    assert ("pow_scalar", "f") in ops.BINARY and ("floor_f16range", "f") in ops.UNARY
    assert ops.NEAR == {"sin": "sin_near", "cos": "cos_near"} and ("sin_near", "f") in ops.UNARY
    assert ops.F16_HALF == {"sin": "sin_half", "cos": "cos_half"} and ("cos_half", "f") in ops.UNARY
    assert ops.lowerable(ops.CPU, "lgamma", torch.float64, 1)
    assert not ops.lowerable(ops.CPU, "erfinv", torch.float32, 1)      # no row: torch runs it


def test_the_kernel_cache_key_covers_the_table_and_the_libraries_kernels_call():
    files = {os.path.relpath(p, os.path.dirname(kernel_cache.__file__))
             for p in kernel_cache.kernel_library_files()}
    assert {"ops.py", "backends/mathlib.py", "backends/runtime.py", "backends/libdevice.py",
            "backends/halfbits.py", "backends/f16range.py", "vmath/__init__.py"} <= files
