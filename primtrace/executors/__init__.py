"""Executors: what runs the nodes of a trace. See :mod:`primtrace.executors.base` for the API.

``default_executors()`` is the priority list ``jit`` uses when given none; the torch
executor is appended after any list, so it need not be in it.
"""
from primtrace.executors.base import (Executor, FusionExecutor, OperatorExecutor, Region,
                                      creates_cycle, dependency_graph)
from primtrace.executors.torch_executor import TORCH, TorchExecutor


def default_executors() -> list[Executor]:
    """The executors ``jit`` uses by default, in priority order: Numba fusion, then torch.

    The Numba executor is imported here, on first use, so ``import primtrace`` does not
    import numba; one instance is shared so its kernel cache is too.
    """
    global _NUMBA
    if _NUMBA is None:
        from primtrace.executors.numba import NumbaFusionExecutor
        _NUMBA = NumbaFusionExecutor()
    return [_NUMBA, TORCH]


_NUMBA = None


__all__ = ["Executor", "OperatorExecutor", "FusionExecutor", "Region", "TorchExecutor", "TORCH",
           "default_executors", "dependency_graph", "creates_cycle"]
