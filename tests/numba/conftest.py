"""tests/numba checks the kernels themselves: `jit` here fuses every region it can, even one
torch call that the cost model would leave to torch (`cost_model=False`); the cost model
has its own tests (test_cost_model.py)."""
import sys

import pytest

import primtrace
from primtrace.executors.numba import NumbaFusionExecutor

_ALWAYS_FUSE = NumbaFusionExecutor(cost_model=False)


@pytest.fixture(autouse=True)
def fuse_every_region(monkeypatch):
    monkeypatch.setattr(sys.modules["primtrace.jit"], "default_executors",
                        lambda: [_ALWAYS_FUSE, primtrace.TORCH])
    yield
