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

For the same time, torch's C++ grouping of tensors by device and dtype
(``torch._C._group_tensors_by_device_and_dtype``: ``clip_grad_norm_``, foreach optimizers)
groups traced tensors in Python, by the devices and dtypes they stand for (the C++ one
reads their storage's ``meta`` device).
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


def _group_by_device_and_dtype(tensorlistlist, with_indices: bool = False):
    """torch._C._group_tensors_by_device_and_dtype in Python, on the tensors' own device and
    dtype attributes: {(device, dtype): (lists of the tensors in that group, their indices
    or None)}, grouped by the first list's tensors."""
    if not tracing_here():
        return _original_grouping(tensorlistlist, with_indices)
    groups: dict = {}
    for i, t in enumerate(tensorlistlist[0]):
        lists, indices = groups.setdefault((t.device, t.dtype),
                                           ([[] for _ in tensorlistlist], []))
        for j, tensors in enumerate(tensorlistlist):
            if tensors:   # (an empty list stays empty in every group)
                lists[j].append(tensors[i])
        indices.append(i)
    return {k: (lists, indices if with_indices else None) for k, (lists, indices) in groups.items()}


_original_grouping = torch._C._group_tensors_by_device_and_dtype


def _install() -> None:
    global _original
    torch._C._group_tensors_by_device_and_dtype = _group_by_device_and_dtype
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
    torch._C._group_tensors_by_device_and_dtype = _original_grouping
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
