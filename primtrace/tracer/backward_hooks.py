"""Module backward hooks (``register_full_backward_hook``, ``register_full_backward_pre_hook``,
and their global twins) on a module called while tracing.

Eager's ``Module._call_impl`` makes a ``torch.utils.hooks.BackwardHook`` per call and runs its
``setup_input_hook`` on the arguments and ``setup_output_hook`` on the result: each passes
the call's tensors through ``BackwardHookFunction`` and registers a hook on that node of
autograd's graph, which calls the user's hooks with grad_input and grad_output. A trace has
no graph to hook; so each setup becomes one node of the trace that does it when the trace
runs, on that call's tensors, with a BackwardHook made for that call (the output node finds
its input node's hook in a per-thread slot). Nodes that attach to the graph need torch's
autograd: a call that needs gradients then runs op by op with it
(:func:`~primtrace.tracer.autograd_calls.needs_torch_autograd` names the hook), and the
user's hooks see eager's values.
"""
from __future__ import annotations

import threading

import torch
from torch.utils.hooks import BackwardHook

from primtrace.ir.proxy import TensorProxy
from primtrace.ir.symbol import Symbol, SymbolKind
from primtrace.ir.trace import Node, current_trace

_original_input = BackwardHook.setup_input_hook
_original_output = BackwardHook.setup_output_hook


class HookedCall:
    """One traced call site of a module with backward hooks: what its two nodes run."""

    def __init__(self, module, user_hooks, user_pre_hooks):
        self.module, self.user_hooks, self.user_pre_hooks = module, user_hooks, user_pre_hooks
        self.local = threading.local()
        self.reason = f"a module backward hook on {type(module).__name__} (autograd runs the hook)"

    def inputs(self, *args):
        """setup_input_hook of a BackwardHook made for this call; the tensors it returns."""
        hook = BackwardHook(self.module, self.user_hooks, self.user_pre_hooks)
        self.local.hook = hook
        return _tensors(hook.setup_input_hook(args))

    def outputs(self, *result):
        """setup_output_hook of this call's BackwardHook (made by `inputs`)."""
        hook = getattr(self.local, "hook", None)
        self.local.hook = None
        if hook is None:
            hook = BackwardHook(self.module, self.user_hooks, self.user_pre_hooks)
        return _tensors(hook.setup_output_hook(result))


def _tensors(values) -> tuple:
    return tuple(v for v in values if isinstance(v, torch.Tensor))


def _record(trace, site: HookedCall, run, args: tuple) -> tuple:
    """A node running ``run(*args)`` whose outputs alias the tensor arguments (eager's
    BackwardHookFunction returns views of its inputs); `args` with those outputs in."""
    args = tuple(trace.latest(a) if isinstance(a, TensorProxy) else a for a in args)
    outputs = tuple(trace.tensor(a.spec, requires_grad=a.requires_grad)
                    for a in args if isinstance(a, TensorProxy))
    symbol = Symbol(f"{run.__name__}_backward_hooks", kind=SymbolKind.OPAQUE, impl=run,
                    module=type(site.module).__name__, doc=site.reason, torch_function=run)
    trace.record(Node(symbol, args, {}, outputs, source=trace.source_line))
    new = iter(outputs)
    result = []
    for a in args:
        if isinstance(a, TensorProxy):
            out = next(new)
            if hasattr(trace, "note_alias"):
                trace.note_alias(a, out)
            a = out
        result.append(a)
    return tuple(result)


def _traced(args) -> bool:
    return current_trace() is not None and any(isinstance(a, TensorProxy) for a in args)


def setup_input_hook(self, args):
    if not _traced(args):
        return _original_input(self, args)
    site = self._primtrace_site = HookedCall(self.module, self.user_hooks, self.user_pre_hooks)
    new = _record(current_trace(), site, site.inputs, tuple(args))
    return new if type(args) is tuple else type(args)(*new)


def setup_output_hook(self, result):
    site = getattr(self, "_primtrace_site", None)
    values = result if isinstance(result, tuple) else (result,)
    if site is None or not _traced(values):
        return _original_output(self, result)
    new = _record(current_trace(), site, site.outputs, tuple(values))
    if not isinstance(result, tuple):
        return new[0]
    return new if type(result) is tuple else type(result)(*new)


def autograd_reason(func) -> str | None:
    """Why a node running `func` needs torch's autograd (one of HookedCall's), or None."""
    site = getattr(func, "__self__", None)
    return site.reason if isinstance(site, HookedCall) else None
