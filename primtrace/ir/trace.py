"""Nodes and traces: the graph IR.

A ``Trace`` is an ordered list of ``Node``s over proxies. A node records one call of a
symbol; a ref-level node keeps the prim nodes it decomposed into as ``subnodes``, so the
same trace can be printed at the torch level with its decomposition nested underneath, or
flattened to prims.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Any

from primtrace.ir.proxy import NumberProxy, Proxy, TensorProxy, TensorSpec
from primtrace.ir.tree import proxies_in


@dataclass(eq=False)
class Node:
    """One call: ``outputs = symbol(*args, **kwargs)``."""
    symbol: Any
    args: tuple
    kwargs: dict
    outputs: Any
    subnodes: list = field(default_factory=list)
    source: str | None = None  # the user's line that produced this node
    executor: Any = None       # set in the execution trace: the executor that runs this node
    grad_enabled: bool | None = None  # torch's grad mode when recorded (None: the trace's)
    call: tuple | None = None  # a ref node's torch-level call: (torch function, args, kwargs)
    origin: Any = None         # a prim's ref-level node (the torch call it decomposes)

    def replace(self, **changes) -> "Node":
        """A copy with some fields changed (passes and lowering keep the rest as is)."""
        return dataclasses.replace(self, **changes)

    @property
    def inputs(self) -> list[Proxy]:
        return proxies_in((self.args, self.kwargs))

    @property
    def output_proxies(self) -> list[Proxy]:
        return proxies_in(self.outputs)

    def flat(self) -> list["Node"]:
        """The leaves (prims, opaque calls) this node decomposes into."""
        if self.symbol.is_leaf:
            return [self]
        return [leaf for sub in self.subnodes for leaf in sub.flat()]

    def __repr__(self):
        return f"Node({self.symbol.name}, out={self.outputs})"


class Trace:
    """An ordered list of nodes with inputs and outputs; prints as Python."""

    def __init__(self, name: str = "fn"):
        self.name = name
        self.inputs: list[Proxy] = []      # flat list of proxy inputs, in call order
        self.input_structure: Any = None   # (args, kwargs) with proxies in place of values
        self.nodes: list[Node] = []
        self.outputs: Any = None
        self.stage: str = ""
        self.tags: dict = {}               # free-form facts passes and executors attach
        self._counter = itertools.count()
        self._scopes: list[list[Node]] = [self.nodes]

    #: The user's source line for new nodes (a tracer may compute it from the stack).
    source_line: str | None = None
    #: While true, symbols record nodes even when no proxy is among their arguments
    #: (the tracer sets it for factories such as ``torch.ones`` so they run per call).
    record_constants: bool = False
    #: > 0 while the tracer runs torch on meta tensors (calls then are not recorded)
    bypass: int = 0
    #: what the traced function reads besides its arguments (the tracer's StateRecorder)
    state: Any = None

    def latest(self, p):
        """The value `p` stands for now (the tracer tracks in-place writes; a plain trace
        has none)."""
        return p

    def resolve_args(self, args, kwargs):
        """`args` and `kwargs` with each proxy replaced by its latest value."""
        return args, kwargs

    # --- building -----------------------------------------------------------------------
    def fresh_name(self, prefix: str = "t") -> str:
        return f"{prefix}{next(self._counter)}"

    def tensor(self, spec: TensorSpec, name: str | None = None, requires_grad=False) -> TensorProxy:
        return TensorProxy(name or self.fresh_name(), spec, requires_grad)

    def number(self, python_type: type, value=None, name: str | None = None) -> NumberProxy:
        return NumberProxy(name or self.fresh_name("n"), python_type, value)

    def record(self, node: Node) -> Node:
        self._scopes[-1].append(node)
        return node

    @contextlib.contextmanager
    def scope(self, node: Node):
        """Collect the nodes recorded inside as ``node.subnodes``."""
        self._scopes.append(node.subnodes)
        try:
            yield node
        finally:
            self._scopes.pop()

    @property
    def depth(self) -> int:
        """How many ref-level nodes are being recorded around this point (0: top level)."""
        return len(self._scopes) - 1

    def derive(self, nodes: list[Node], stage: str) -> "Trace":
        """A new trace with the same signature and outputs and the given nodes."""
        new = Trace(self.name)
        new.inputs, new.input_structure, new.outputs = self.inputs, self.input_structure, self.outputs
        new.nodes, new.stage, new.tags = list(nodes), stage, dict(self.tags)
        new._counter = self._counter
        return new

    def recorded_leaves(self):
        """Every leaf node recorded so far, those of ref nodes still being recorded too."""
        for scope in self._scopes:   # an open scope's node is not in its parent's list yet
            for node in scope:
                yield from node.flat()

    # --- views ----------------------------------------------------------------------------
    def flat_nodes(self) -> list[Node]:
        return [leaf for node in self.nodes for leaf in node.flat()]

    def graph(self):
        """A networkx.DiGraph of the dataflow: node indices, edges carry the proxy."""
        import networkx as nx
        g = nx.DiGraph()
        producer = {}
        for i, node in enumerate(self.nodes):
            g.add_node(i, node=node)
            for p in node.inputs:
                if p.name in producer:
                    g.add_edge(producer[p.name], i, proxy=p)
            for p in node.output_proxies:
                producer[p.name] = i
        return g

    def draw(self, path, **options):
        """Write a picture of the dataflow graph (.png/.svg/.pdf); see primtrace.ir.draw.draw."""
        from primtrace.ir.draw import draw
        return draw(self, path, **options)

    def __str__(self):
        from primtrace.ir.printer import format_trace
        return format_trace(self)

    def __repr__(self):
        return f"<Trace {self.name} stage={self.stage!r} nodes={len(self.nodes)}>"


_current: contextvars.ContextVar[Trace | None] = contextvars.ContextVar("primtrace_trace", default=None)


def current_trace() -> Trace | None:
    return _current.get()


def is_tracing() -> bool:
    return _current.get() is not None


@contextlib.contextmanager
def tracing(trace: Trace):
    token = _current.set(trace)
    try:
        yield trace
    finally:
        _current.reset(token)
