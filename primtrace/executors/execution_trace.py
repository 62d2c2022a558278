"""From an optimized trace to an execution trace: executors claim nodes, regions fuse.

Executors are asked in priority order. A fusion executor partitions the nodes nobody has
claimed yet; an operator executor claims the remaining nodes it implements. Every node
ends up with exactly one executor (``node.executor``), or lowering fails naming the node.
Fused regions become one node each, and the nodes are rescheduled in a topological order
of the contracted dependency graph that stays as close as possible to the original order.
A region that is exactly the prims of one torch call, which its executor declines to fuse
(``fuse_single_call``), is replaced by that call, which torch runs with its own kernel; so
is, before partitioning, every call a fusion executor would fuse only in part (``fuse_call``).
"""
from __future__ import annotations

import networkx as nx

from primtrace.executors.base import (Executor, FusionExecutor, OperatorExecutor, Region,
                                      dependency_graph)
from primtrace.executors.buffer_reuse import dying_inputs
from primtrace.ir.symbol import Symbol, SymbolKind
from primtrace.ir.trace import Node, Trace
from primtrace.ir.tree import proxies_in
from primtrace.tracer.opaque import torch_call_node
from primtrace.tracer.passes import is_pure, mutated_proxy


class LoweringError(RuntimeError):
    """No executor claims a node, or a fusion executor returned an invalid region."""


def lower(trace: Trace, executors: list[Executor], put_back: bool = True) -> Trace:
    """The execution trace of `trace`: every node claimed by exactly one of `executors`.

    `put_back=False` compiles every region, even one torch call an executor declines to
    fuse: lowering falls back to it where a call put back would close a cycle (the call
    reads its own arguments, which the prims may not: a twin CSE made, say)."""
    nodes = list(trace.nodes)
    position = {id(n): i for i, n in enumerate(nodes)}
    owner: dict[int, Executor] = {}
    regions: list[tuple[FusionExecutor, Region]] = []
    notes: list[str] = list(trace.tags.get("notes", ()))  # what executors say they declined
    effect_free: set[int] = set()   # calls put in place of pure prims (dependency_graph)
    hidden: set[str] = set()        # values made inside a region that it does not output
    for ex in executors:
        if isinstance(ex, FusionExecutor):
            nodes = _calls_kept_whole(trace, nodes, ex, owner, effect_free, hidden)
            position = {id(n): i for i, n in enumerate(nodes)}
            view = trace.derive(nodes, "partition")
            view.tags["claimed"] = frozenset(owner)
            view.tags["effect_free"] = frozenset(effect_free)
            view.tags["notes"] = notes
            for region in ex.partition(view):
                # against the nodes as they are now: a call kept whole no longer reads
                # its prims' values (after CSE, a value another call's prims made)
                _check_region(view, ex, region, position, owner)
                call = single_call(region, nodes, trace.inputs, hidden)
                if put_back and call is not None:
                    region.dying = dying_inputs(region, nodes, trace)
                if put_back and call is not None and not ex.fuse_single_call(region):
                    _note_effect_free(call, region.nodes, effect_free)
                    nodes = _replace(nodes, region.nodes, call)
                    position = {id(n): i for i, n in enumerate(nodes)}
                    continue
                for n in region.nodes:
                    owner[id(n)] = ex
                regions.append((ex, region))
                hidden |= {p.name for n in region.nodes for p in n.output_proxies} - {
                    p.name for p in region.outputs}
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
    units: list = []
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
            units.append((ex, region, index))   # compiled once the schedule exists
    lowering = trace.derive(nodes, "lowering")  # with any calls put back
    lowering.tags["effect_free"] = frozenset(effect_free)
    g = dependency_graph(lowering)
    contracted = nx.DiGraph()
    contracted.add_nodes_from(range(len(units)))
    contracted.add_edges_from((unit_of[u], unit_of[v]) for u, v in g.edges
                              if unit_of[u] != unit_of[v])
    try:
        order = list(nx.lexicographical_topological_sort(contracted, key=lambda u: u))
    except nx.NetworkXUnfeasible:
        if put_back:
            return lower(trace, executors, put_back=False)
        raise LoweringError("the fusion regions form a cycle with the rest of the trace "
                            "(a region both feeds and waits for a node outside it)") from None
    units = [_fused_node(*u) if isinstance(u, tuple) else u for u in units]
    execution = trace.derive([units[u] for u in order], "execution")
    if notes:
        execution.tags["notes"] = notes
    return execution


def single_call(region: Region, nodes: list[Node], inputs, hidden=frozenset()) -> Node | None:
    """The node running the one torch call whose prims `region` holds, or None.

    The region must hold every remaining prim of that call, in consecutive positions, and
    produce exactly the call's results; the call's arguments must still exist (a pass may
    have replaced one by a twin) outside the fused regions formed so far (`hidden`: values
    a region makes and keeps in registers; the prims may read a twin of such an argument,
    as ``v0 / v5`` reads the float32 conversion of int32 ``v0`` another call made)."""
    origin = region.nodes[0].origin
    if origin is None or origin.call is None or any(n.origin is not origin for n in region.nodes):
        return None
    inside = {id(n) for n in region.nodes}
    at = [i for i, n in enumerate(nodes) if id(n) in inside]
    if at != list(range(at[0], at[0] + len(at))) or any(
            n.origin is origin and id(n) not in inside for n in nodes):
        return None
    if {p.name for p in region.outputs} != {p.name for p in proxies_in(origin.outputs)}:
        return None
    available = {p.name for n in nodes[:at[0]] for p in n.output_proxies}
    available.update(p.name for p in inputs)
    # in the prims' grad mode: a Function's forward clears theirs (it runs without grad),
    # while the ref node keeps the mode it was recorded in
    call = torch_call_node(origin).replace(grad_enabled=region.nodes[0].grad_enabled)
    if any(p.name not in available or p.name in hidden for p in call.inputs):
        return None
    return call


def _note_effect_free(call: Node, prims: list[Node], effect_free: set) -> None:
    """Record `call` as free of side effects when the prims it replaces are (a call torch
    runs for its result only must not be ordered against in-place writes and opaque calls,
    which its prims were not)."""
    if mutated_proxy(call) is None and all(is_pure(n) for n in prims):
        effect_free.add(id(call))


def _calls_kept_whole(trace: Trace, nodes: list[Node], ex: FusionExecutor,
                      owner: dict, effect_free: set, hidden: set) -> list[Node]:
    """`nodes` where each torch call `ex` would not fuse whole (``ex.fuse_call``) is that
    call again: its prims one by one would cost more than the call and be no more exact.

    A call whose prim CSE shares with later calls (the float32 copy of a bfloat16 input
    three linears convert) is not whole until those calls are put back: so again, until
    a round puts back none (three bfloat16 q/k/v linears: the first ran as a float32
    matmul of weights converted on every call, 1.35x eager at 256 x 512)."""
    groups: dict[int, list[Node]] = {}
    for n in nodes:
        if n.origin is not None and n.origin.call is not None and id(n) not in owner:
            groups.setdefault(id(n.origin), []).append(n)
    waiting = [group for group in groups.values() if not ex.fuse_call(group)]
    while waiting:
        left = []
        for group in waiting:
            region = Region.from_nodes(trace.derive(nodes, "partition"), group)
            call = single_call(region, nodes, trace.inputs, hidden)
            if call is None:
                left.append(group)
            else:
                _note_effect_free(call, group, effect_free)
                nodes = _replace(nodes, group, call)
        if len(left) == len(waiting):
            break
        waiting = left
    return nodes


def _replace(nodes: list[Node], old: list[Node], new: Node) -> list[Node]:
    """`nodes` with the consecutive nodes `old` replaced by `new`."""
    inside = {id(n) for n in old}
    first = next(i for i, n in enumerate(nodes) if id(n) in inside)
    return nodes[:first] + [new] + [n for n in nodes[first:] if id(n) not in inside]


def _fused_node(ex: FusionExecutor, region: Region, index: int) -> Node:
    impl = ex.compile(region)
    sym = Symbol(f"{ex.name}_{index}", kind=SymbolKind.FUSED, impl=impl, module="",
                 doc=f"{len(region.nodes)} prims fused by {ex.name}", region=region,
                 source=getattr(impl, "source", None))   # generated code, where it is kept
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
