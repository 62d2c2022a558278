"""Factories over symbolic sizes: ``torch.zeros(x.shape[0], 4)`` in a dynamic trace.

torch's argument parser reads an ``int`` size argument (``__index__``) before any override
sees the call, so a symbolic size handed to ``torch.zeros`` would be read, a guard pinning
the dim to one value (static from then on). While a trace records, the factories named here
are wrappers that hand a call with such a size straight to the tracer (its ref keeps the size
symbolic: ``refs.creation``); every other call goes to torch's function unchanged. Code that
bound a factory before tracing (``from torch import zeros``) still pins the dim: correct,
one trace per size.
"""
from __future__ import annotations

import contextlib
import functools
import threading

import torch

from primtrace.ir.size_guards import hinted
from primtrace.ir.tree import tree_flatten

NAMES = ("zeros", "ones", "empty", "full")

_lock = threading.Lock()
_active = 0          # traces recording (threads may trace at once): wrappers stay until 0
_originals: dict = {}


def _wrap(original, dispatch):
    @functools.wraps(original)
    def factory(*args, **kwargs):
        if any(hinted(x) for x in tree_flatten((args, kwargs.get("size")))):
            return dispatch(original, args, kwargs)
        return original(*args, **kwargs)
    factory.__wrapped_factory__ = original
    return factory


@contextlib.contextmanager
def symbolic_factories(dispatch):
    """While the block runs, ``torch.<NAMES>`` give a call with a symbolic size to
    `dispatch` (the tracer's)."""
    global _active
    with _lock:
        if _active == 0:
            for name in NAMES:
                original = getattr(torch, name)
                _originals[name] = original
                setattr(torch, name, _wrap(original, dispatch))
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0:
                for name, original in _originals.items():
                    setattr(torch, name, original)
                _originals.clear()
