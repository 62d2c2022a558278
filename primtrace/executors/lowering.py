"""From an optimized trace to an execution trace: executors claim nodes, regions fuse.

Executors are asked in priority order. A fusion executor partitions the nodes nobody has
claimed yet; an operator executor claims the remaining nodes it implements. Every node
ends up with exactly one executor (``node.executor``), or lowering fails naming the node.
Fused regions become one node each, and the nodes are rescheduled in a topological order
of the contracted dependency graph that stays as close as possible to the original order.
"""
from __future__ import annotations

import networkx as nx

from primtrace.executors.base import (Executor, FusionExecutor, OperatorExecutor, Region,
                                      dependency_graph)
from primtrace.ir.symbol import Symbol
from primtrace.ir.trace import Node, Trace, proxies_in


class LoweringError(RuntimeError):
    """No executor claims a node, or a fusion executor returned an invalid region."""


def lower(trace: Trace, executors: list[Executor]) -> Trace:
    """The execution trace of `trace`: every node claimed by exactly one of `executors`."""
    nodes = list(trace.nodes)
    position = {id(n): i for i, n in enumerate(nodes)}
    owner: dict[int, Executor] = {}
    regions: list[tuple[FusionExecutor, Region]] = []
    notes: list[str] = list(trace.tags.get("notes", ()))  # what executors say they declined
    for ex in executors:
        if isinstance(ex, FusionExecutor):
            view = trace.derive(nodes, "partition")
            view.tags["claimed"] = frozenset(owner)
            view.tags["notes"] = notes
            for region in ex.partition(view):
                _check_region(trace, ex, region, position, owner)
                for n in region.nodes:
                    owner[id(n)] = ex
                regions.append((ex, region))
        elif isinstance(ex, OperatorExecutor):
            for n in nodes:
                if id(n) not in owner and ex.claims(n):
                    owner[id(n)] = ex
        else:
            raise TypeError(f"{ex!r} is neither an OperatorExecutor nor a FusionExecutor")
    for n in nodes:
        if id(n) not in owner:
            raise LoweringError(f"no executor claims {n.symbol.qualname} "
                                f"(executors: {[e.name for e in executors]})")

    # one unit per region or unfused node; schedule the units topologically
    unit_of: dict[int, int] = {}
    units: list[Node] = []
    counters: dict[str, int] = {}
    region_of = {id(n): k for k, (_, r) in enumerate(regions) for n in r.nodes}
    fused_unit: dict[int, int] = {}
    for i, n in enumerate(nodes):
        k = region_of.get(id(n))
        if k is None:
            unit_of[i] = len(units)
            units.append(n.replace(executor=owner[id(n)]))
        elif k in fused_unit:
            unit_of[i] = fused_unit[k]
        else:
            ex, region = regions[k]
            index = counters.get(ex.name, 0)
            counters[ex.name] = index + 1
            fused_unit[k] = unit_of[i] = len(units)
            units.append(_fused_node(ex, region, index))
    g = dependency_graph(trace)
    contracted = nx.DiGraph()
    contracted.add_nodes_from(range(len(units)))
    contracted.add_edges_from((unit_of[u], unit_of[v]) for u, v in g.edges
                              if unit_of[u] != unit_of[v])
    try:
        order = list(nx.lexicographical_topological_sort(contracted, key=lambda u: u))
    except nx.NetworkXUnfeasible:
        raise LoweringError("the fusion regions form a cycle with the rest of the trace "
                            "(a region both feeds and waits for a node outside it)") from None
    execution = trace.derive([units[u] for u in order], "execution")
    if notes:
        execution.tags["notes"] = notes
    return execution


def _fused_node(ex: FusionExecutor, region: Region, index: int) -> Node:
    sym = Symbol(f"{ex.name}_{index}", kind="fused", impl=ex.compile(region), module="",
                 doc=f"{len(region.nodes)} prims fused by {ex.name}")
    sym.show_subnodes = True
    sym.region = region
    sym.source = getattr(sym.impl, "source", None)  # generated code, where the executor has it
    return Node(sym, tuple(region.inputs), {}, tuple(region.outputs), list(region.nodes),
                region.nodes[0].source, ex)


def _check_region(trace, ex, region, position, owner) -> None:
    if not region.nodes:
        raise LoweringError(f"{ex.name} returned an empty region")
    for n in region.nodes:
        if id(n) not in position:
            raise LoweringError(f"{ex.name} returned a region with a node not in the trace: {n}")
        if id(n) in owner:
            raise LoweringError(f"{ex.name} claimed {n.symbol.qualname}, already claimed by "
                                f"{owner[id(n)].name}")
    expected = Region.from_nodes(trace, region.nodes)
    missing = {p.name for p in expected.outputs} - {p.name for p in region.outputs}
    if missing:
        raise LoweringError(f"{ex.name}'s region does not output {sorted(missing)}, which "
                            f"later nodes or the trace's result use")
    produced = {p.name for n in region.nodes for p in n.output_proxies}
    unknown = {p.name for p in proxies_in([n.inputs for n in region.nodes])} - produced - {
        p.name for p in region.inputs}
    if unknown:
        raise LoweringError(f"{ex.name}'s region reads {sorted(unknown)} without taking them "
                            f"as inputs")
