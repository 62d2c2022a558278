"""Symbols: named operations that run eagerly on tensors and record nodes on proxies.

One class serves prims (a meta function plus a torch implementation) and refs (a Python
function written in prims): on real tensors a symbol just runs; inside a trace, with a
proxy among its arguments, it records a node, so trace-time and run-time take the same
code path.
"""
from __future__ import annotations

from typing import Callable

import torch

from primtrace.ir.proxy import NumberSpec, Proxy, TensorSpec
from primtrace.ir.trace import Node, current_trace, tree_flatten


def has_proxy(args, kwargs=None) -> bool:
    return any(isinstance(leaf, Proxy) for leaf in tree_flatten((args, kwargs or {})))


def _to_proxies(trace, out, requires_grad: bool = False):
    if isinstance(out, TensorSpec):
        differentiable = out.dtype.is_floating_point or out.dtype.is_complex
        return trace.tensor(out, requires_grad=requires_grad and differentiable)
    if isinstance(out, NumberSpec):
        proxy = trace.number(out.python_type, out.value)
        proxy.sources = out.sources
        return proxy
    if isinstance(out, (tuple, list)):
        return type(out)(_to_proxies(trace, o, requires_grad) for o in out)
    return out


def _requires_grad(sym, args, kwargs) -> bool:
    """Eager's rule for a prim's result: it requires grad when grad mode is on and an input
    does; an in-place prim's result is its destination, which keeps its own flag."""
    flags = [leaf.requires_grad is True for leaf in tree_flatten((args, kwargs))
             if isinstance(leaf, torch.Tensor)]
    inplace = "inplace" in sym.tags and flags and flags[0] and isinstance(args[0], torch.Tensor)
    return bool(inplace) or (torch.is_grad_enabled() and any(flags))


class Symbol:
    """A named operation.

    kind "prim": ``meta`` computes output specs (and validates the contract), ``impl``
    runs on torch tensors. kind "ref": ``fn`` is the decomposition, run as is. kind
    "opaque": a torch function primtrace has no ref for, recorded as a leaf.
    """

    def __init__(self, name: str, *, kind: str, fn: Callable | None = None,
                 meta: Callable | None = None, impl: Callable | None = None,
                 tags: frozenset = frozenset(), module: str = "prims", doc: str | None = None):
        self.name, self.kind, self.fn, self.meta, self.impl = name, kind, fn, meta, impl
        self.tags, self.module = frozenset(tags), module
        self.__name__ = name
        self.__doc__ = doc or (fn.__doc__ if fn is not None else None)
        self.__wrapped__ = fn

    @property
    def is_leaf(self) -> bool:
        """A leaf runs as one unit in an executor (prims and opaque torch calls)."""
        return self.kind != "ref"

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}" if self.module else self.name

    def __call__(self, *args, **kwargs):
        trace = current_trace()
        if trace is not None and (trace.record_constants or has_proxy(args, kwargs)):
            return self._record(trace, args, kwargs)
        if self.kind == "ref":
            return self.fn(*args, **kwargs)
        if self.meta is not None:
            self.meta(*args, **kwargs)  # the contract check is the same code as in a trace
        return self.impl(*args, **kwargs)

    def _record(self, trace, args, kwargs):
        resolve = getattr(trace, "resolve_args", None)
        if resolve is not None:  # the tracer's view of mutated values (x.add_(y) then x)
            args, kwargs = resolve(args, kwargs)
        node = Node(self, args, kwargs, None, source=getattr(trace, "source_line", None))
        if self.kind == "ref":
            with trace.scope(node):
                node.outputs = self.fn(*args, **kwargs)
        else:
            node.outputs = _to_proxies(trace, self.meta(*args, **kwargs),
                                       _requires_grad(self, args, kwargs))
        trace.record(node)
        return node.outputs

    def __repr__(self):
        return f"<{self.kind} {self.qualname}>"

    def __reduce__(self):
        return (_lookup, (self.module, self.name))


def _lookup(module, name):
    import importlib
    return getattr(importlib.import_module(f"primtrace.{module}"), name)
