"""The executor API: how a backend claims nodes of a trace and runs them.

This is the only way executors plug into ``primtrace.jit``, ours included. ``jit(fn,
executors=[...])`` takes executors in priority order and always appends the torch executor,
which runs every prim and opaque node, so every node of an execution trace is claimed by
exactly one executor.

Two kinds:

* :class:`OperatorExecutor` claims single nodes by symbol name, optionally only when a
  checker accepts the node's arguments, and gives the callable that runs the node.
* :class:`FusionExecutor` claims *regions*: groups of fusible prim nodes that it compiles
  into one callable. The jit replaces each region by one node named
  ``f"{executor.name}_{i}"`` (kind ``"fused"``) whose subnodes are the region's nodes.

Executors see traces and prims, never refs.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Callable

import networkx as nx

from primtrace.ir.proxy import Proxy
from primtrace.ir.symbol import SymbolKind
from primtrace.ir.trace import Node, Trace
from primtrace.ir.tree import proxies_in
from primtrace.tracer.passes import is_pure, mutated_proxy


class Executor:
    """Something that runs trace nodes. `name` appears in execution traces and fused nodes."""
    name: str = "executor"

    def __repr__(self):
        return f"<{type(self).__name__} {self.name!r}>"


class OperatorExecutor(Executor):
    """Claims nodes one at a time by symbol, with an optional checker.

    ``register(prims.add, impl)`` (or ``register("add", impl)``) claims every ``prims.add``
    node; ``register("torch.cumsum", impl)`` claims an opaque node by its printed name.
    ``checker(*node.args, **node.kwargs)`` sees the node's proxies (shape, dtype, device,
    strides) and constants and returns whether this executor should run it. The impl is
    called at run time with the node's argument values in the same positions.
    """

    def __init__(self, name: str):
        self.name = name
        self._table: dict[str, list[tuple[Callable, Callable | None]]] = {}

    def register(self, prim_or_name, impl: Callable, checker: Callable | None = None):
        """Claim nodes of `prim_or_name` when `checker` (if given) accepts them; returns impl."""
        name = prim_or_name if isinstance(prim_or_name, str) else prim_or_name.name
        self._table.setdefault(name, []).append((impl, checker))
        return impl

    def _entry(self, node: Node):
        sym = node.symbol
        entries = self._table.get(sym.qualname) or (
            self._table.get(sym.name) if sym.kind is SymbolKind.PRIM else None)
        for impl, checker in entries or ():
            if checker is None or checker(*node.args, **node.kwargs):
                return impl
        return None

    def claims(self, node: Node) -> bool:
        """Whether this executor runs `node` (its symbol is registered and the checker agrees)."""
        return self._entry(node) is not None

    def implementation(self, node: Node) -> Callable:
        """The callable that runs `node`, called with the node's args/kwargs values."""
        impl = self._entry(node)
        if impl is None:
            raise KeyError(f"{self.name} does not implement {node.symbol.qualname}")
        return impl


@dataclass
class Region:
    """A group of prim nodes one fusion executor runs as one callable.

    `nodes` are in topological order; `inputs` are the proxies the nodes read that are
    produced outside the region, in order of first use; `outputs` are the proxies produced
    inside that are used after the region or returned by the trace. `dying` names the
    inputs that die in it in memory of their own (a matmul's result read by nothing else):
    lowering fills it before asking ``fuse_single_call``, as a kernel may write its output
    there (``executors/buffer_reuse.py``) and allocate nothing.
    """
    nodes: list[Node]
    inputs: list[Proxy] = field(default_factory=list)
    outputs: list[Proxy] = field(default_factory=list)
    dying: frozenset = field(default=frozenset(), kw_only=True)

    @classmethod
    def from_nodes(cls, trace: Trace, nodes: list[Node]) -> "Region":
        """A region of `nodes` with inputs and outputs computed from `trace`."""
        inside = {id(n) for n in nodes}
        produced: dict[str, Proxy] = {}
        inputs: dict[str, Proxy] = {}
        for n in nodes:
            for p in n.inputs:
                if p.name not in produced and p.name not in inputs:
                    inputs[p.name] = p
            for p in n.output_proxies:
                produced[p.name] = p
        used_after = {p.name for p in proxies_in(trace.outputs)}
        for n in trace.nodes:
            if id(n) not in inside:
                used_after.update(p.name for p in n.inputs)
        outputs = [p for name, p in produced.items() if name in used_after]
        return cls(list(nodes), list(inputs.values()), outputs)


def dependency_graph(trace: Trace) -> nx.DiGraph:
    """The trace's dependencies as a DiGraph over node indices (attribute ``node``).

    Besides dataflow (edge attribute ``proxy``) it has ordering edges (``order=True``): a
    read of a tensor before an in-place write to it, or to a view sharing its memory (the
    tracer's ``trace.tags["alias_roots"]``), comes before the write, and nodes with side
    effects keep their relative order. Any schedule of this graph is a valid one.

    A torch call that lowering put in place of a ref's prims, all pure, has no side effects
    either: ``trace.tags["effect_free"]`` holds such nodes' ids (lowering must schedule the
    call as freely as the partition scheduled its prims, or regions can form a cycle).
    """
    g = nx.DiGraph()
    producer: dict[str, int] = {}
    readers: dict[str, list[int]] = {}   # memory (an alias root's name) -> its readers
    roots = trace.tags.get("alias_roots", {})
    last_effect = None
    effect_free = trace.tags.get("effect_free", ())
    for i, node in enumerate(trace.nodes):
        g.add_node(i, node=node)
        for p in node.inputs:
            if p.name in producer:
                g.add_edge(producer[p.name], i, proxy=p)
        written = mutated_proxy(node)
        if written is not None:
            for r in readers.get(roots.get(written.name, written.name), ()):
                if r != i:
                    g.add_edge(r, i, order=True)
        if not is_pure(node) and node.symbol.kind is not SymbolKind.FUSED \
                and id(node) not in effect_free:
            if last_effect is not None:
                g.add_edge(last_effect, i, order=True)
            last_effect = i
        for p in node.inputs:
            readers.setdefault(roots.get(p.name, p.name), []).append(i)
        for p in node.output_proxies:
            producer.setdefault(p.name, i)
    return g


class FusionExecutor(Executor, abc.ABC):
    """Claims regions of fusible prims and compiles each into one callable.

    Subclasses implement :meth:`can_fuse` and :meth:`compile`; :meth:`partition` has a
    default. The trace given to ``partition`` lists in ``trace.tags["claimed"]`` the ids of
    nodes a higher-priority executor already took: a region must not contain them. A
    partition may append one-line reasons for what it declined to ``trace.tags["notes"]``;
    the execution trace prints them in its header.
    """
    #: regions with fewer nodes are left to the operator executors
    min_region_size: int = 1

    @abc.abstractmethod
    def can_fuse(self, node: Node) -> bool:
        """Whether `node` may go into one of this executor's regions."""

    def fuse_call(self, nodes: list[Node]) -> bool:
        """`nodes` are the prims (and number nodes) of one torch call: whether they may join
        regions. If not, lowering runs the call itself instead, before partitioning (an
        executor that would fuse a call only in part can leave the rest to one torch call
        rather than to its prims one by one). By default, yes."""
        return True

    def fuse_single_call(self, region: Region) -> bool:
        """`region` holds exactly the prims of one torch call (``F.gelu(x)``): whether to
        compile it, or to let torch run that call with its own kernel (lowering then
        replaces the prims by the call). Fusing one op saves no memory traffic, so an
        executor may say no where its kernel would be slower than torch's."""
        return True

    @abc.abstractmethod
    def compile(self, region: Region) -> Callable:
        """A callable taking the region's input values positionally and returning a tuple of
        its output values (in ``region.outputs`` order)."""

    def partition(self, trace: Trace) -> list[Region]:
        """Maximal regions by producer-consumer merging on the dependency graph.

        Two groups joined by a dataflow edge merge unless some path leaves one and reaches
        the other through a node outside both (the merged group would then both feed and
        wait for that node). Groups need not be consecutive in the trace.
        """
        g = dependency_graph(trace)
        claimed = trace.tags.get("claimed", ())
        fusible = {i for i, n in enumerate(trace.nodes)
                   if n.symbol.kind is SymbolKind.PRIM and id(n) not in claimed and self.can_fuse(n)}
        group = {i: i for i in fusible}
        members = {i: {i} for i in fusible}
        for v in range(len(trace.nodes)):
            if v not in fusible:
                continue
            for u in sorted(g.predecessors(v)):
                a, b = group.get(u), group[v]
                if a is None or a == b or creates_cycle(g, group, members, a, b):
                    continue
                if len(members[a]) < len(members[b]):
                    a, b = b, a
                for i in members[b]:
                    group[i] = a
                members[a] |= members.pop(b)
        regions = [Region.from_nodes(trace, [trace.nodes[i] for i in sorted(m)])
                   for m in members.values() if len(m) >= self.min_region_size]
        regions.sort(key=lambda r: trace.nodes.index(r.nodes[0]))
        return regions


def creates_cycle(g: nx.DiGraph, group: dict, members: dict, a, b) -> bool:
    """Whether merging groups `a` and `b` puts a node outside both on a path between them.

    `g` is :func:`dependency_graph`'s graph, `group` maps a node index to its group id and
    `members` a group id to its node indices. Works for any two groups (producer-consumer
    or horizontal merges): fusion executors with their own partition use it too.
    """
    union = members[a] | members[b]
    stack = [s for i in union for s in g.successors(i) if s not in union]
    seen = set(stack)
    while stack:
        x = stack.pop()
        if x in union:
            return True
        nxt = list(g.successors(x))
        if x in group:  # a group is one node: entering it anywhere allows leaving anywhere
            nxt += [s for m in members[group[x]] for s in g.successors(m)]
        for s in nxt:
            if s in union:
                return True
            if s not in seen:
                seen.add(s)
                stack.append(s)
    return False

