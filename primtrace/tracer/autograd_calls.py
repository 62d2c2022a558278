"""Calls that reach into autograd's graph while a function is traced.

Hooks on tensors (``register_hook``, ``retain_grad``, ``register_post_accumulate_grad_hook``)
and custom ``torch.autograd.Function``s change what a backward computes. A trace of the
forward cannot express them, so they are recorded as opaque calls that run as they are,
and a call that needs gradients through one of them is not differentiated by primtrace:
it runs op by op with torch's autograd (:mod:`primtrace.autodiff.function` asks
:func:`needs_torch_autograd`). Without gradients they run as in eager (a hook on a tensor
that does not require grad raises eager's error when the trace runs).
"""
from __future__ import annotations

import contextlib
from collections import OrderedDict
import threading

import torch
from torch.utils.hooks import RemovableHandle

from primtrace.ir.proxy import TensorProxy
from primtrace.ir.trace import Node, current_trace
from primtrace.ir.tree import tree_flatten

#: tensor methods that attach to autograd's graph
GRAPH_METHODS = frozenset({torch.Tensor.register_hook, torch.Tensor.retain_grad,
                           torch.Tensor.register_post_accumulate_grad_hook})
_Function = torch.autograd.Function
_original_apply = _Function.__dict__["apply"]
_lock = threading.Lock()
_users = 0


def record_graph_call(trace, symbol, args, kwargs):
    """Record ``x.register_hook(fn)`` (or another of GRAPH_METHODS) as a node that runs it;
    what it returns in the traced code is a handle whose ``remove`` does nothing (the real
    handle belongs to each call's tensor, which the call drops)."""
    trace.record(Node(symbol, tuple(args), dict(kwargs), None, source=trace.source_line))
    return RemovableHandle(OrderedDict()) if symbol.torch_function is not torch.Tensor.retain_grad else None


def needs_torch_autograd(node: Node) -> str | None:
    """Why `node` must run with torch's autograd, or None."""
    func = getattr(node.symbol, "torch_function", None)
    from primtrace.tracer.backward_hooks import autograd_reason   # (it imports this module's peers)
    reason = autograd_reason(func)
    if reason is not None:
        return reason
    if func in GRAPH_METHODS:
        return f"{func.__name__} on {node.args[0].name} (autograd runs the hook)"
    if getattr(func, "__name__", None) == "apply" and isinstance(getattr(func, "__self__", None),
                                                                 type):
        return f"the custom autograd.Function {func.__self__.__qualname__}"
    return None


@contextlib.contextmanager
def custom_functions(record):
    """While any thread traces, ``SomeFunction.apply(proxy, ...)`` is handed to
    ``record(bound apply, args, kwargs)`` (an opaque node) instead of running its forward
    on proxies, which would trace the forward and lose its backward."""
    global _users

    def apply(cls, *args, **kwargs):
        if current_trace() is not None and any(isinstance(x, TensorProxy)
                                               for x in tree_flatten((args, kwargs))):
            return record(_original_apply.__get__(None, cls), args, kwargs)
        return _original_apply.__func__(cls, *args, **kwargs)

    with _lock:
        if _users == 0:
            _Function.apply = classmethod(apply)
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                _Function.apply = _original_apply
