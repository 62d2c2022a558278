"""What the forward saves for the backward: a min-cut, as AOTAutograd's default partitioner.

Why: ``backward_trace`` saves every forward value a rule reads: for gelu(layer_norm(x + r))
eight full-size intermediates, where x, r and two row statistics suffice if the backward
recomputes the elementwise prims in between. Those cost little to recompute (they join the
backward's fused kernel: a few instructions per element and the reads of their inputs);
each saved intermediate is memory held from the forward to the backward, and a write the
fused forward would not make. So :func:`partition` saves what is cheapest to hold among the
sets of values from which the backward can recompute what it reads.

The graph (torch/_functorch/partitioners.py, ``solve_min_cut``): each forward value v is an
edge ``(v, IN) -> (v, OUT)`` with the cost of holding it as capacity; edges from a producer
to its readers are infinite; the source feeds the forward inputs and every value that may
not be recomputed, every value the backward reads feeds the sink. The cut values are saved;
the backward first recomputes, in forward order, the nodes between them and what it reads.
Costs (``_capacity``): an intermediate's bytes (:func:`nbytes`), doubled where only fused
kernels hold it in the forward (saving it adds a write); a value the caller holds anyway
(``held``: by default the forward's inputs and outputs) adds no memory and costs 1/1024 of
its bytes. Recomputed (:func:`recomputable`): what fuses (elementwise prims of the fusion
executor's op table, conversions, views, reductions at most 4x smaller than their input);
never draws, matmuls, library calls, indexing, copies, writes or what reads memory a write
changes, nor a major operand of a backward node that does not fuse (it is materialized
there anyway), nor more than ``MAX_CHAIN`` prims deep. A Bernoulli draw (dropout's mask)
holds only 0 and 1: when the cut saves it as bool, the conversion is added to ``forward``
after the draw (no result changes) and the backward converts back. docs/autodiff.md
("What to save") gives the reasons and the bytes saved.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import networkx as nx
import torch

from primtrace import prims
from primtrace.autodiff.backward import Backward
from primtrace.ir.kinds import SymbolKind
from primtrace.ir.proxy import Proxy, TensorProxy
from primtrace.ir.trace import Node, Trace
from primtrace.ir.tree import proxies_in

#: recomputed prims (views not counted) allowed between a saved value and a recomputed one
MAX_CHAIN = 50
#: a forward input or output costs its bytes divided by this (held by the caller anyway)
HELD_DIVISOR = 1024
#: reductions that may be recomputed (if their result is not 4x smaller than their input)
REDUCTIONS = frozenset({"sum", "prod", "amax", "amin", "var"})
IN, OUT = 0, 1


def nbytes(p) -> int:
    """Bytes a saved value holds: numel x itemsize. A size that is a traced number counts
    its trace-time value (as AOTAutograd's ``optimization_hint``); a number, 8."""
    if not isinstance(p, TensorProxy):
        return 8
    return math.prod(_hint(s) for s in p.shape) * p.dtype.itemsize


def _hint(size) -> int:
    value = size if isinstance(size, int) else getattr(size, "value", None)
    if not isinstance(value, int):   # a data-dependent size: its bound (x[mask]'s: every row)
        value = getattr(size, "upper", None)
    return value if isinstance(value, int) else 4096


@functools.cache
def _fused_elementwise() -> frozenset | None:
    """The prims a fused kernel computes (the Numba op table; None without numba: all)."""
    try:
        from primtrace.executors.numba.ops import OPS
    except ImportError:
        return None
    return frozenset(OPS)


def fuses(node: Node) -> bool:
    """Whether `node` runs inside a fused kernel: an elementwise prim of the op table, a
    view, or a reduction (a row kernel's)."""
    sym = node.symbol
    if sym.kind is not SymbolKind.PRIM or sym.tags & {"random", "alias"}:
        return False
    if "elementwise" in sym.tags:
        fused = _fused_elementwise()
        return fused is None or sym.name in fused
    return _is_view(node) or sym.name in REDUCTIONS


def recomputable(node: Node) -> bool:
    """Whether the backward may run `node` again (see the module's docstring)."""
    if not fuses(node):
        return False
    if node.symbol.name in REDUCTIONS:
        return 4 * sum(nbytes(o) for o in node.output_proxies) >= nbytes(node.args[0])
    return True


def _is_view(node: Node) -> bool:
    return "view" in node.symbol.tags and node.symbol.name != "as_strided"


@dataclass
class _Step:
    """One forward computation as the cut sees it: `node` makes the values `outs` (keys:
    proxy names, or ``name#draw`` for a packed draw) from the values `ins`."""
    node: Node
    outs: list
    ins: list
    free: bool   # may be recomputed


def partition(forward: Trace, bw: Backward, *, policy: str = "min_cut", held=None) -> Backward:
    """`bw` (``backward_trace(forward)``) saving a min-cut of the forward values: its trace
    first recomputes, in forward order, the values it reads that are no longer saved
    (``tags["recomputed"]``). policy="save_all": `bw` unchanged. `held`: the forward values
    the caller holds anyway, whose saving adds no memory (default: every forward input and
    output; the parameters alone charge activations as AOTAutograd does). May add to
    `forward` the conversion of a Bernoulli draw to bool (no result changes) to save that."""
    if policy == "save_all" or not bw.saved:
        return bw
    if policy != "min_cut":
        raise ValueError(f"partition: policy must be 'min_cut' or 'save_all', got {policy!r}")
    nodes = forward.flat_nodes()
    steps, values, packs = _steps(forward, nodes)
    for p in bw.saved:
        values.setdefault(p.name, p)
    needed = [p.name for p in bw.saved]
    _ban(steps, nodes, bw.trace.nodes, needed)
    held = {p.name for p in proxies_in((forward.inputs, forward.outputs) if held is None else held)}
    graph = _graph(forward, steps, values, needed, held)
    _, (reachable, _) = nx.minimum_cut(graph, "source", "sink")
    cut = {k for k in values if (k, IN) in reachable and (k, OUT) not in reachable}
    chosen, todo = set(), set(needed) - cut
    for i in reversed(range(len(steps))):
        if todo & set(steps[i].outs):
            assert steps[i].free, f"partition: {steps[i].outs} cannot be recomputed"
            chosen.add(i)
            todo |= set(steps[i].ins) - cut
    wanted = set(needed) | {k for i in chosen for k in steps[i].ins}
    keep = (cut & wanted) | (todo - {k for s in steps for k in s.outs})
    recompute = [steps[i].node.replace() for i in sorted(chosen)]   # the forward keeps its own
    trace = _backward(bw, recompute, {values[k].name for k in keep})
    new, old = trace.tags["saved"], bw.saved
    if _saved_bytes(nodes, new, held)[0] > _saved_bytes(nodes, old, held)[0]:
        return bw
    for k in keep & packs.keys():
        draw, node = packs[k]
        _insert_after(forward.nodes, draw, node)
    return Backward(trace, new, bw.cotangents, bw.wrt)


def _steps(forward: Trace, nodes: list) -> tuple[list, dict, dict]:
    """The steps, each value's proxy by key, and the packed draws: key -> (draw, pack node)."""
    steps, values, packs = [], {p.name: p for p in forward.inputs}, {}
    for node in nodes:
        outs = node.output_proxies
        values.update((p.name, p) for p in outs)
        ins = [p.name for p in node.inputs]
        packed = _pack(node, nodes) if node.symbol.name == "bernoulli" else None
        if packed is None:
            steps.append(_Step(node, [p.name for p in outs], ins, recomputable(node)))
            continue
        [draw], (pack, unpack) = outs, packed
        raw, bits = f"{draw.name}#draw", pack.outputs.name
        values.update({raw: draw, bits: pack.outputs})
        steps += [_Step(node, [raw], ins, False), _Step(pack, [bits], [raw], True),
                  _Step(unpack, [draw.name], [bits], True)]
        if not any(n is pack for n in nodes):
            packs[bits] = (node, pack)
    return steps, values, packs


def _pack(node: Node, nodes: list):
    """(pack, unpack) nodes of a 0/1 draw wider than bool, or None. An existing conversion of
    the draw to bool (a second partition of the same forward) is reused."""
    draw = node.outputs
    if not isinstance(draw, TensorProxy) or draw.dtype == torch.bool:
        return None
    convert = prims.convert_element_type
    pack = next((n for n in nodes if n.symbol is convert and n.args[0] is draw
                 and n.args[1] == torch.bool), None)
    if pack is None:
        bits = TensorProxy(f"{draw.name}_bool", convert.meta(draw, torch.bool))
        pack = Node(convert, (draw, torch.bool), {}, bits, source=node.source,
                    grad_enabled=node.grad_enabled)
    if convert.meta(pack.outputs, draw.dtype) != draw.spec:
        return None
    return pack, Node(convert, (pack.outputs, draw.dtype), {}, draw, source=node.source,
                      grad_enabled=node.grad_enabled)


def _ban(steps: list, nodes: list, backward_nodes: list, needed: list) -> None:
    """Marks the steps that may not be recomputed beyond what their prims say."""
    touched = _storages(nodes)[1]
    producer = {k: s for s in steps for k in s.outs}
    for s in steps:   # reads or makes memory a write changes
        if any(p.name in touched for p in s.node.inputs + s.node.output_proxies):
            s.free = False
    made = {p.name: n for n in backward_nodes for p in n.output_proxies}
    for node in backward_nodes:   # a major operand of a backward node that is not fused
        if fuses(node):
            continue
        largest = max(map(nbytes, node.inputs), default=0)
        for p in (p for p in node.inputs if 4 * nbytes(p) >= largest):
            while p.name in made and _is_view(made[p.name]):   # through views, to a forward value
                p = made[p.name].args[0]
            s = producer.get(p.name)
            while s is not None and _is_view(s.node) and s.free:
                s = producer.get(s.ins[0]) if s.ins else None
            if s is not None:
                s.free = False
    depth = {}
    for s in steps:   # long chains of recomputation
        d = 0
        if s.free:
            d = max((depth.get(k, 0) for k in s.ins), default=0) + (not _is_view(s.node))
            if d > MAX_CHAIN:
                s.free, d = False, 0
        depth.update(dict.fromkeys(s.outs, d))


def _graph(forward: Trace, steps: list, values: dict, needed: list, held: set) -> nx.DiGraph:
    readers: dict = {}
    for s in steps:
        for k in s.ins:
            readers.setdefault(k, []).append(s)
    g = nx.DiGraph()   # an edge without a capacity is infinite
    for p in forward.inputs:
        g.add_edge("source", (p.name, IN))
        g.add_edge((p.name, IN), (p.name, OUT), capacity=_capacity(p, None, [], held))
    for s in steps:
        for k in s.outs:
            capacity = _capacity(values[k], s, readers.get(k, []), held)
            g.add_edge((k, IN), (k, OUT), **({} if capacity is None else {"capacity": capacity}))
            if not s.free:
                g.add_edge("source", (k, IN))
            for i in s.ins:
                g.add_edge((i, OUT), (k, IN))
    for k in needed:
        if (k, OUT) not in g:   # read by the backward, made by nothing we know: held
            g.add_edge("source", (k, IN))
            g.add_edge((k, IN), (k, OUT), capacity=1)
        g.add_edge((k, OUT), "sink")
    return g


def _capacity(p, step, readers, held):
    """What holding `p` costs (None: infinite, a view recomputed from its base)."""
    if p.name in held:
        return max(1, nbytes(p) // HELD_DIVISOR)
    if step is None:   # an input the caller may drop
        return max(1, nbytes(p))
    if step.free and _is_view(step.node):
        return None
    fused_only = fuses(step.node) and readers and all(fuses(r.node) for r in readers)
    return max(1, nbytes(p) * (2 if fused_only else 1))


def _backward(bw: Backward, recompute: list, keep: set) -> Trace:
    old = bw.trace
    trace = Trace(old.name)
    trace._counter = old._counter
    trace.nodes = recompute + list(old.nodes)
    made = {p.name for n in trace.nodes for p in n.output_proxies} | {
        g.name for _, g in bw.cotangents}
    saved, seen = [], set()
    for p in [p for n in trace.nodes for p in n.inputs] + proxies_in(old.outputs):
        if p.name not in made and p.name not in seen:
            seen.add(p.name)
            saved.append(p)
    assert {p.name for p in saved} <= keep, "partition: the backward reads a value not saved"
    trace.inputs = saved + [g for _, g in bw.cotangents]
    trace.input_structure = (tuple(trace.inputs), {})
    trace.outputs, trace.stage, trace.tags = old.outputs, "backward", dict(old.tags)
    recomputed = [p.name for n in recompute for p in n.output_proxies]
    trace.tags.update(saved=saved, recomputed=recomputed)
    if recompute:
        names = ", ".join(recomputed[:12]) + (", ..." if len(recomputed) > 12 else "")
        trace.tags["notes"] = [*old.tags.get("notes", ()), f"the first {len(recompute)} nodes "
                               f"recompute forward values from the saved ones: {names}"]
    return trace


def _storages(nodes: list) -> tuple[dict, set]:
    """(name -> the name of the value whose memory it is, names sharing memory a write
    changes): views, aliases and in-place results share their first argument's memory."""
    root: dict = {}

    def find(name):
        while root.get(name, name) != name:
            name = root[name]
        return name
    written = []
    for node in nodes:
        tags = node.symbol.tags
        if tags & {"view", "alias", "inplace"} and node.args and isinstance(node.args[0], Proxy):
            base = find(node.args[0].name)
            for p in node.output_proxies:
                root[find(p.name)] = base
            if "inplace" in tags:
                written.append(base)
    names = {p.name for n in nodes for p in n.inputs + n.output_proxies}
    roots = {name: find(name) for name in names}
    written = {find(w) for w in written}
    return roots, {name for name, r in roots.items() if r in written}


def _saved_bytes(nodes: list, saved, held: set) -> tuple[int, int]:
    """(bytes of the saved values' memory the caller does not hold, bytes of all of it):
    each piece of memory counted once (a view counts its base)."""
    roots = _storages(nodes)[0]
    by_name = {p.name: p for n in nodes for p in n.inputs + n.output_proxies}
    by_name.update((p.name, p) for p in saved)
    held_roots = {roots.get(h, h) for h in held}
    mine, total = 0, 0
    for r in {roots.get(p.name, p.name) for p in saved}:
        b = nbytes(by_name[r])
        total += b
        mine += 0 if r in held_roots else b
    return mine, total


def saved_bytes(forward: Trace, saved) -> tuple[int, int]:
    """(bytes of the saved values that are not forward inputs or outputs, bytes in all)."""
    held = {p.name for p in proxies_in((forward.inputs, forward.outputs))}
    return _saved_bytes(forward.flat_nodes(), saved, held)


def _insert_after(nodes: list, target: Node, new: Node) -> bool:
    for i, n in enumerate(nodes):
        if n is target:
            nodes.insert(i + 1, new)
            return True
        if n.subnodes and _insert_after(n.subnodes, target, new):
            return True
    return False
