"""Symbols: named operations that run eagerly on tensors and record nodes on proxies.

One class serves prims (a meta function plus a torch implementation) and refs (a Python
function written in prims): on real tensors a symbol just runs; inside a trace, with a
proxy among its arguments, it records a node, so trace-time and run-time take the same
code path.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from primtrace.ir.kinds import SymbolKind
from primtrace.ir.proxy import Hint, NumberSpec, Proxy, SizeProxy, TensorSpec
from primtrace.ir.trace import Node, current_trace
from primtrace.ir.tree import tree_flatten


def has_proxy(args, kwargs=None) -> bool:
    return any(isinstance(leaf, Proxy) for leaf in tree_flatten((args, kwargs or {})))


def _to_proxies(trace, out, requires_grad: bool = False):
    if isinstance(out, TensorSpec):
        differentiable = out.dtype.is_floating_point or out.dtype.is_complex
        return trace.tensor(out, requires_grad=requires_grad and differentiable)
    if isinstance(out, NumberSpec):
        if out.bounds is not None:   # an int known only at run time, within bounds
            size = SizeProxy(trace.fresh_name("n"), out.value.what, *out.bounds,
                             sources=out.sources)
            if isinstance(out.value, Hint):   # arithmetic on symbolic input dims
                size.value = out.value
            return size
        proxy = trace.number(out.python_type, out.value)
        proxy.sources = out.sources
        return proxy
    if isinstance(out, (tuple, list)):
        return type(out)(_to_proxies(trace, o, requires_grad) for o in out)
    return out


def recording() -> tuple:
    """The symbols whose nodes the current trace is recording now, outermost (the
    torch-level ref) first, innermost (a prim's meta function) last: what an error raised
    inside names."""
    trace = current_trace()
    return tuple(getattr(trace, "_recording", ()))


def _requires_grad(sym, args, kwargs) -> bool:
    """Eager's rule for a prim's result: it requires grad when grad mode is on and an input
    does; an in-place prim's result is its destination, which keeps its own flag."""
    flags = [leaf.requires_grad is True for leaf in tree_flatten((args, kwargs))
             if isinstance(leaf, torch.Tensor)]
    inplace = "inplace" in sym.tags and flags and flags[0] and isinstance(args[0], torch.Tensor)
    return bool(inplace) or (torch.is_grad_enabled() and any(flags))


@dataclass(eq=False, repr=False, kw_only=True)
class Symbol:
    """A named operation; see :class:`SymbolKind`. Every fact a pass, executor or the tracer
    reads about a symbol is a field here (set when it is made)."""
    name: str = field(kw_only=False)
    kind: SymbolKind
    fn: Callable | None = None      # REF: the decomposition, run as is
    meta: Callable | None = None    # PRIM: computes output specs and checks the contract
    impl: Callable | None = None    # PRIM, OPAQUE: runs on tensors; FUSED: the compiled region
    tags: frozenset = frozenset()   # "elementwise", "inplace", "random", "guard", "number"...
    module: str = "prims"           # where it prints from: prims.add, refs.add, torch.cumsum
    doc: str | None = None
    # elementwise refs
    promote: tuple = ()             # the parameters type promotion reads
    type_promotion_kind: Any = None
    body: Callable | None = None    # the op-specific part under the elementwise decorator
    declines: Callable | None = None  # (*args, **kwargs) -> True for calls left to torch
    # refs: the names a ref module exports for it beside its own (refs.core.exports)
    inplace_ref: Symbol | None = None  # the ref writing the result into the first argument
    aliases: tuple = ()             # torch's other names for it (sub: "subtract")
    # opaque calls
    torch_function: Callable | None = None
    # fused regions
    region: Any = None              # the executors.Region it runs
    source: str | None = None       # the generated code, where the executor has it

    def __post_init__(self):
        self.kind, self.tags = SymbolKind(self.kind), frozenset(self.tags)
        self.__name__ = self.name
        self.__doc__ = self.doc or (self.fn.__doc__ if self.fn is not None else None)
        self.__wrapped__ = self.fn

    @property
    def is_leaf(self) -> bool:
        """A leaf runs as one unit in an executor (prims, opaque torch calls, regions)."""
        return self.kind is not SymbolKind.REF

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}" if self.module else self.name

    def __call__(self, *args, **kwargs):
        trace = current_trace()
        if trace is not None and (trace.record_constants or has_proxy(args, kwargs)):
            return self._record(trace, args, kwargs)
        if self.kind is SymbolKind.REF:
            return self.fn(*args, **kwargs)
        if self.meta is not None:
            self.meta(*args, **kwargs)  # the contract check is the same code as in a trace
        return self.impl(*args, **kwargs)

    def _record(self, trace, args, kwargs):
        args, kwargs = trace.resolve_args(args, kwargs)  # x.add_(y) then x: the new version
        node = Node(self, args, kwargs, None, source=trace.source_line)
        stack = trace.__dict__.setdefault("_recording", [])
        stack.append(self)
        try:
            if self.kind is SymbolKind.REF:
                with trace.scope(node):
                    node.outputs = self.fn(*args, **kwargs)
            else:
                node.outputs = _to_proxies(trace, self.meta(*args, **kwargs),
                                           _requires_grad(self, args, kwargs))
        finally:
            stack.pop()
        trace.record(node)
        return node.outputs

    def __repr__(self):
        return f"<{self.kind} {self.qualname}>"

    def __reduce__(self):
        return (_lookup, (self.module, self.name))


def _lookup(module, name):
    import importlib
    return getattr(importlib.import_module(f"primtrace.{module}"), name)
