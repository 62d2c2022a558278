"""Buffer reuse: an elementwise torch call writes its result into an operand that dies there.

Why: on the CPU a fresh output costs page faults on first write whenever the allocator has
given the memory back (large blocks are unmapped when freed). In the GPT-2 block (W10) the
GELU's new 6 MiB output cost 1536 faults a forward and the GELU 1.4 ms, 0.18 ms written into
the dead matmul output, as torch.compile writes it. An execution trace
knows every value's last use, so where a torch call's first operand is a fresh intermediate
read by nothing else, the call is replaced by its in-place form (``F.gelu(t)`` ->
``gelu_(t)``, ``add(a, b)`` -> ``a.add_(b)``): the same kernel, the same values, no new
buffer.

A fused kernel's new output takes a dead operand's memory the same way (``o0 = i2`` in
its launcher) where the kernel reads that operand only at the element it writes
(``numba/launch.py``: ``same_index_inputs``): W11's backward writes the GELU's input
gradient into the matmul output it is computed from (a 64 MiB buffer: ~14 ms of page
faults a step, and 64 MiB less at the peak).

Only when nothing can observe the write: the operand is not a trace input, not returned,
read by no other node (so no view of it exists), made by a call that always returns new
memory (a matmul, a call of this table, a fused kernel without in-place stores), with the
result's shape, dtype and strides, and nothing needs autograd. The same holds for a
``prims.cat`` of one tensor (a copy): its result is then that tensor.
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from primtrace.ir.proxy import TensorProxy
from primtrace.ir.symbol import Symbol, SymbolKind
from primtrace.ir.trace import Node, Trace
from primtrace.ir.tree import proxies_in

#: elementwise calls and their in-place forms (same arguments, same kernel)
IN_PLACE = {
    F.gelu: torch._C._nn.gelu_,
    **{f: getattr(torch.Tensor, name + "_")
       for name in ("add", "sub", "mul", "div")
       for f in (getattr(torch, name), getattr(torch.Tensor, name))},
}
#: calls whose tensor result is always new memory
FRESH = {F.linear, torch.matmul, torch.Tensor.matmul, torch.mm, torch.bmm, torch.addmm,
         F.conv1d, F.conv2d, F.conv3d, torch.conv1d, torch.conv2d, torch.conv3d, *IN_PLACE}
#: prims whose torch implementation always returns new memory
FRESH_PRIMS = {"matmul", "convolution"}


class _Lifetimes:
    """Which nodes read each value, which node made it, and what the trace keeps (its inputs
    and outputs): what decides whether a value dies at a node."""

    def __init__(self, nodes: list[Node], trace: Trace):
        self.readers: dict[str, set[int]] = {}
        self.producer: dict[str, Node] = {}
        for i, node in enumerate(nodes):
            for p in node.inputs:
                self.readers.setdefault(p.name, set()).add(i)
            for p in node.output_proxies:
                self.producer.setdefault(p.name, node)
        self.kept = {p.name for p in trace.inputs} | {p.name for p in proxies_in(trace.outputs)}

    def dies_within(self, p, positions: set[int]) -> bool:
        """Whether `p` is read only by the nodes at `positions`, is not kept, and was made by
        its producer in memory of its own: memory an output there may take."""
        readers = self.readers.get(p.name)
        return (p.name not in self.kept and bool(readers) and readers <= positions
                and _fresh(self.producer.get(p.name), p))


def reuse_buffers(trace: Trace) -> Trace:
    """`trace` (an execution trace) with the calls above made in place where allowed."""
    life = _Lifetimes(trace.nodes, trace)
    nodes = list(trace.nodes)
    changed = False
    autograd = trace.tags.get("grad_enabled") is not False   # False: it runs inside a Function

    def dead(p, i: int) -> bool:
        return life.dies_within(p, {i})

    for i, node in enumerate(nodes):
        if node.symbol.kind is SymbolKind.FUSED:
            into = _dead_inputs_for_outputs(node, lambda p: dead(p, i), autograd)
            if into:
                impl = node.symbol.impl.writing_into(into)
                nodes[i] = node.replace(symbol=dataclasses.replace(
                    node.symbol, impl=impl, source=impl.source))
                changed = True
            continue
        if _copy_of_one(node, autograd):   # a one-tensor cat: the copy is not needed
            if dead(node.args[0][0], i) and _same_layout(node.args[0][0], node.outputs):
                nodes[i] = node.replace(symbol=_SOLE_CAT)
                changed = True
            continue
        target = _dead_operand(node, autograd)
        if target is None or not dead(target, i):
            continue
        nodes[i] = node.replace(symbol=in_place_symbol(node.symbol))
        changed = True
    return trace.derive(nodes, trace.stage) if changed else trace


_symbols: dict = {}
#: ``prims.cat([t], d)`` of a dead fresh `t` laid out as the result: `t` itself (a KV cache's
#: first update, ``torch.cat([empty, k])`` traced as a cat of `k` alone)
_SOLE_CAT = Symbol("cat_of_dead_operand", kind=SymbolKind.OPAQUE,
                   impl=lambda tensors, dim: tensors[0], module="prims",
                   doc="prims.cat of one tensor that dies there: that tensor, not a copy")


def _copy_of_one(node: Node, autograd: bool) -> bool:
    """Whether `node` is a prims.cat of one tensor (a copy) with nothing needing grad."""
    if node.symbol.kind is not SymbolKind.PRIM or node.symbol.name != "cat" or not node.args:
        return False
    tensors = node.args[0]
    if not (isinstance(tensors, (list, tuple)) and len(tensors) == 1
            and isinstance(tensors[0], TensorProxy) and isinstance(node.outputs, TensorProxy)):
        return False
    return not (autograd and any(getattr(p, "requires_grad", False)
                                 for p in (tensors[0], node.outputs)))


def in_place_symbol(call: Symbol) -> Symbol:
    """The symbol of `call` written into its first operand: it prints as ``gelu_`` and keeps
    the call's torch_function (the op whose ref gives its values)."""
    sym = _symbols.get(call)
    if sym is None:
        sym = _symbols[call] = Symbol(
            call.name + "_", kind=SymbolKind.OPAQUE, impl=IN_PLACE[call.torch_function],
            module=call.module, tags=frozenset({"inplace"}), torch_function=call.torch_function,
            doc=f"torch's {call.name}, its result written into its first operand (dead there)")
    return sym


def _dead_operand(node: Node, autograd: bool = True):
    """The first operand of a table call whose result it could hold, or None."""
    if (node.symbol.kind is not SymbolKind.OPAQUE or "inplace" in node.symbol.tags
            or node.symbol.torch_function not in IN_PLACE or not node.args
            or node.kwargs.get("out") is not None):   # add(t, b, out=z) writes z already
        return None
    a, out = node.args[0], node.outputs
    if not (isinstance(a, TensorProxy) and isinstance(out, TensorProxy)):
        return None
    if autograd and any(getattr(p, "requires_grad", False) for p in (*node.inputs, out)):
        return None
    return a if _same_layout(a, out) else None


def _dead_inputs_for_outputs(node: Node, dead, autograd: bool) -> dict[int, int]:
    """Fused `node`'s new outputs -> the operands (positions) whose memory they take: dead
    ones its kernel reads only where it writes that output, each given once."""
    reusable = getattr(node.symbol.impl, "reusable", None)
    if not reusable or (autograd and any(
            getattr(p, "requires_grad", False) for p in (*node.inputs, *node.output_proxies))):
        return {}
    into, taken = {}, set()
    for k, candidates in reusable.items():
        out = node.output_proxies[k]
        if not isinstance(out, TensorProxy):
            continue
        for j in candidates:
            a = node.args[j]
            if (j not in taken and isinstance(a, TensorProxy) and _same_layout(a, out)
                    and dead(a)):
                into[k] = j
                taken.add(j)
                break
    return into


def dying_inputs(region, nodes: list[Node], trace: Trace) -> frozenset:
    """The names of `region`'s tensor inputs that die in it in memory of their own (read by
    no node outside it, not a trace input or output, made fresh by their producer), laid
    out as one of its outputs: where its kernel's output may go (Region.dying)."""
    inside = {id(n) for n in region.nodes}
    positions = {i for i, n in enumerate(nodes) if id(n) in inside}
    life = _Lifetimes(nodes, trace)
    return frozenset(
        p.name for p in region.inputs if isinstance(p, TensorProxy)
        and any(isinstance(o, TensorProxy) and _same_layout(p, o) for o in region.outputs)
        and life.dies_within(p, positions))


def _same_layout(a: TensorProxy, out: TensorProxy) -> bool:
    """Whether `out` fits exactly in `a`'s memory: shape (symbolic sizes: the same proxy),
    dtype, device and strides."""
    return (len(a.shape) == len(out.shape) and all(
        m is n or (type(m) is int and type(n) is int and m == n)
        for m, n in zip(a.shape, out.shape)) and a.dtype == out.dtype
            and a.device == out.device and tuple(a.stride()) == tuple(out.stride()))


def _fresh(node: Node | None, p) -> bool:
    """Whether `node` made `p` in memory of its own (not a view, not an input written)."""
    if node is None:
        return False
    if node.symbol.kind is SymbolKind.FUSED:
        inner = [n for n in node.subnodes if p.name in {q.name for q in n.output_proxies}]
        return (not any("inplace" in n.symbol.tags for n in node.subnodes)
                and bool(inner) and "view" not in inner[0].symbol.tags)
    if node.symbol.kind is SymbolKind.PRIM:
        return node.symbol.name in FRESH_PRIMS
    return (node.symbol.kind is SymbolKind.OPAQUE and "inplace" not in node.symbol.tags
            and node.symbol.torch_function in FRESH)
