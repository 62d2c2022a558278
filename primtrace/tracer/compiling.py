"""``torch.compiler.is_compiling()`` says True while primtrace traces.

Library code asks that question to keep value-reading checks out of graphs: transformers'
mask utilities test ``padding_mask.all()`` in a Python ``if`` unless it is true (a
DataDependentError under tracing). ``torch._dynamo.is_compiling()`` and
``torch._utils.is_compiling()`` call it too. The answer is ``torch.compiler``'s global flag,
which Dynamo sets for a whole compile session, for every thread; here the function is
replaced, only while some thread traces, by one that also says True in the tracing threads
(a per-thread count), so the other threads keep the true answer. The original is put back
when the last trace ends. Code that imported the function itself (``from torch.compiler
import is_compiling``) is not reached.

``torch.compiler.is_dynamo_compiling()`` and ``is_exporting()`` stay False: code behind them
uses Dynamo's or export's own APIs.
"""
from __future__ import annotations

import contextlib
import functools
import threading

import torch

_lock = threading.Lock()
_local = threading.local()
_active = 0          # traces in progress, all threads
_original = None     # torch.compiler.is_compiling while replaced


def tracing_here() -> bool:
    """Whether this thread is tracing."""
    return getattr(_local, "depth", 0) > 0


def _install() -> None:
    global _original
    original = torch.compiler.is_compiling

    @functools.wraps(original)
    def is_compiling() -> bool:
        # the original first: Dynamo tracing this function folds it to True and stops there
        return original() or getattr(_local, "depth", 0) > 0

    _original = original
    is_compiling.__primtrace__ = True
    torch.compiler.is_compiling = is_compiling


def _uninstall() -> None:
    global _original
    if getattr(torch.compiler.is_compiling, "__primtrace__", False):
        torch.compiler.is_compiling = _original   # unless someone replaced it since
    _original = None


@contextlib.contextmanager
def compiling():
    """While inside, ``torch.compiler.is_compiling()`` is True in this thread."""
    global _active
    with _lock:
        if _active == 0:
            _install()
        _active += 1
    _local.depth = getattr(_local, "depth", 0) + 1
    try:
        yield
    finally:
        _local.depth -= 1
        with _lock:
            _active -= 1
            if _active == 0:
                _uninstall()
