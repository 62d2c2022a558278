"""Trace-to-trace rewrites of a prims trace.

Each pass takes a trace and returns a new one (the input is not modified). Passes never
change numerics unless asked: dead-code elimination, common subexpression elimination,
removal of the gradient carriers only a backward reads, of conversions to the same dtype,
and of round trips through a dtype that holds every value exactly (f16 -> f32 -> f16).
A round trip that rounds (f32 -> f16 -> f32) is part of eager's numerics and stays unless
``lossy=True`` (``jit(..., remove_lossy_round_trips=True)``).

Two rules keep rewrites safe around mutation and aliasing: a proxy that an in-place node
writes (``prims.copy_to``) is never replaced nor used as a replacement, and a returned value
is never replaced by an input or a view (the caller would get its own tensor back, or a
view of one, not a new one).
"""
from __future__ import annotations

import torch

from primtrace.ir.proxy import Proxy, TensorProxy
from primtrace.ir.symbol import SymbolKind
from primtrace.ir.trace import Node, Trace
from primtrace.ir.tree import proxies_in, tree_map

IMPURE_TAGS = frozenset({"inplace", "random"})


def is_pure(node: Node) -> bool:
    """A prim without side effects: may be removed when unused and merged with its twin."""
    return node.symbol.kind is SymbolKind.PRIM and not (node.symbol.tags & IMPURE_TAGS)


def may_raise(node: Node) -> bool:
    """A pure prim that raises on some values (eager's error even where the result is
    unused): an index out of bounds, an integer division by zero."""
    if "indexing" in node.symbol.tags:
        return True
    if node.symbol.name in ("div", "remainder", "fmod") and node.symbol.kind is SymbolKind.PRIM:
        out = node.outputs
        divisor = node.args[1] if len(node.args) > 1 else node.kwargs.get("b")
        return (isinstance(out, TensorProxy) and not out.dtype.is_floating_point
                and not out.dtype.is_complex and (isinstance(divisor, Proxy) or divisor == 0))
    return False


def mutated_proxy(node: Node):
    """The proxy a node writes into (copy_to's destination, an out= tensor), or None."""
    if "inplace" not in node.symbol.tags:
        return None
    target = node.kwargs.get("out") if "out" in node.kwargs else (node.args[0] if node.args else None)
    return target if isinstance(target, Proxy) else None


def _is_convert(node: Node) -> bool:
    return node.symbol.kind is SymbolKind.PRIM and node.symbol.name == "convert_element_type"


def _convert_parts(node: Node):
    args = list(node.args) + [node.kwargs[k] for k in ("a", "dtype") if k in node.kwargs]
    return args[0], args[1]


def _returned_storage(trace: Trace) -> set[str]:
    """Names of the returned values and of the values a returned view looks into: eager
    returns a view of a distinct tensor there too, so none of them may merge with another."""
    names = {p.name for p in proxies_in(trace.outputs)}
    for node in reversed(trace.nodes):
        if "view" in node.symbol.tags and any(p.name in names for p in node.output_proxies):
            names.update(p.name for p in node.inputs if isinstance(p, TensorProxy))
    return names


def _memory_roots(trace: Trace) -> dict[str, str]:
    """Proxy name -> the name of the value whose memory it is part of, for views and written
    versions: the tracer's ``alias_roots``, and the outputs of view prims (of any trace)."""
    roots = dict(trace.tags.get("alias_roots", {}))
    for node in trace.nodes:
        if "view" in node.symbol.tags and node.inputs:
            base = node.inputs[0].name
            for p in node.output_proxies:
                roots.setdefault(p.name, roots.get(base, base))
    return roots


class _Rewriter:
    """Walks a trace's nodes, substituting replaced proxies; knows what may be replaced."""

    def __init__(self, trace: Trace):
        self.trace = trace
        self.replace: dict[str, Proxy] = {}
        self.inputs = {p.name for p in trace.inputs}
        self.outputs = _returned_storage(trace)
        # values whose memory is another tensor's: views (and what the tracer noted as such)
        self.roots = _memory_roots(trace)
        self.views = set(self.roots)
        # memory some node writes into, directly or through a view (two zeros() each filled
        # through a slice are two buffers, not one)
        self.written = {self.roots.get(p.name, p.name)
                        for n in trace.nodes if (p := mutated_proxy(n)) is not None}

    def sub(self, obj):
        """`obj` with every replaced proxy substituted."""
        return tree_map(lambda x: self.replace.get(x.name, x) if isinstance(x, Proxy) else x, obj)

    def node(self, node: Node) -> Node:
        if not self.replace:
            return node
        args, kwargs = self.sub(node.args), self.sub(node.kwargs)
        if all(a is b for a, b in zip(args, node.args)) and all(
                kwargs[k] is node.kwargs[k] for k in kwargs):
            return node
        return node.replace(args=args, kwargs=kwargs)

    def may_replace(self, old: Proxy, new: Proxy) -> bool:
        """Never merge two returned values (eager returns distinct tensors) nor return an
        input, or a view (of an input, say: x[:, :2].float().bfloat16()), in place of a
        computed output."""
        if self.roots.get(old.name, old.name) in self.written or \
                self.roots.get(new.name, new.name) in self.written:
            return False
        return not (old.name in self.outputs and (
            new.name in self.inputs or new.name in self.outputs or new.name in self.views))

    def substitute(self, old: Proxy, new: Proxy) -> None:
        self.replace[old.name] = new
        if old.name in self.outputs:
            self.outputs.add(new.name)  # new is returned now: a later twin may not merge into it

    def result(self, nodes: list[Node]) -> Trace:
        new = self.trace.derive(nodes, self.trace.stage)
        new.outputs = self.sub(self.trace.outputs)
        return new


def dce(trace: Trace) -> Trace:
    """Dead-code elimination: drop pure nodes none of whose outputs is used or returned, but
    guards and nodes that may raise (eager raises for an unused x[i] out of bounds too)."""
    live = {p.name for p in proxies_in(trace.outputs)}
    kept = []
    for node in reversed(trace.nodes):
        if (not is_pure(node) or "guard" in node.symbol.tags or may_raise(node)
                or any(p.name in live for p in node.output_proxies)):
            kept.append(node)
            live.update(p.name for p in node.inputs)
    kept.reverse()
    return trace.derive(kept, trace.stage)


def _const_key(v):
    if isinstance(v, Proxy):
        return ("proxy", v.name)
    t = type(v)
    if t is float:
        return (float, repr(v))  # keeps 0.0 and -0.0 apart
    if t is tuple or t is list:
        return (t, tuple(_const_key(x) for x in v))
    if t is dict:
        return (dict, tuple((k, _const_key(x)) for k, x in v.items()))
    if isinstance(v, torch.Tensor):
        return ("tensor", id(v))
    try:
        hash(v)
    except TypeError:
        return ("id", id(v))
    return (t, v)


#: pure prims CSE leaves repeated: a broadcast is a free view inside the kernel that reads
#: it, and one shared by two kernels (RoPE's cos in every layer) would stay outside both as
#: a separate expand call, since a view never leaves a region
_NOT_SHARED = frozenset({"broadcast_in_dim"})


def cse(trace: Trace) -> Trace:
    """Common subexpression elimination: a pure node equal to an earlier one reuses its outputs
    (but broadcasts: see _NOT_SHARED)."""
    rw = _Rewriter(trace)
    seen: dict = {}
    kept = []
    for node in trace.nodes:
        node = rw.node(node)
        if is_pure(node) and not (node.symbol.kind is SymbolKind.PRIM
                                  and node.symbol.name in _NOT_SHARED):
            key = (id(node.symbol), _const_key(node.args), _const_key(node.kwargs),
                   node.grad_enabled)
            first = seen.get(key)
            if first is not None:
                pairs = list(zip(node.output_proxies, first.output_proxies))
                if all(rw.may_replace(old, new) for old, new in pairs):
                    for old, new in pairs:
                        rw.substitute(old, new)
                    continue
            else:
                seen[key] = node
        kept.append(node)
    return rw.result(kept)


def drop_unseen_writes(trace: Trace) -> Trace:
    """A write into a new intermediate that nothing else sees (``m += r`` on a matmul's
    result, an in-place activation) becomes the written value itself: its copy_to goes.

    Why: a write stays observable to the fusion partitioner (a region must output it), so
    ``mlp_output += attention_output`` kept Falcon's residual add out of the layer_norm
    kernel after it. Only where no one could tell: the destination is made by a pure prim
    in memory of its own (not a view, not an input, not a constant), no view of it exists
    (its only aliases are its own written versions), neither it nor the write's result is
    returned, the value has the destination's shape, dtype and strides and is memory of
    its own that nothing writes (not an input, not a view), and nothing requires grad.
    Reads of the destination before the write still read it, unwritten now."""
    rw = _Rewriter(trace)
    aliases: dict[str, set[str]] = {}
    for name, root in rw.roots.items():
        aliases.setdefault(root, set()).add(name)
    producer = {p.name: n for n in trace.nodes for p in n.output_proxies}
    versions = {n.outputs.name for n in trace.nodes
                if n.symbol.name == "copy_to" and isinstance(n.outputs, Proxy)}
    kept = []
    for node in trace.nodes:
        node = rw.node(node)
        if _unseen_write(node, rw, aliases, producer, versions):
            rw.replace[node.outputs.name] = node.args[1]
            continue
        kept.append(node)
    return rw.result(kept) if len(kept) < len(trace.nodes) else trace


def _unseen_write(node, rw, aliases, producer, versions) -> bool:
    if node.symbol.kind is not SymbolKind.PRIM or node.symbol.name != "copy_to" \
            or len(node.args) < 2 or node.kwargs:
        return False
    dst, src, out = node.args[0], node.args[1], node.outputs
    if not all(isinstance(p, TensorProxy) for p in (dst, src, out)):
        return False
    made = producer.get(dst.name)
    return (made is not None and is_pure(made) and "view" not in made.symbol.tags
            and made.symbol.name not in ("constant", "aliased")
            and rw.roots.get(dst.name, dst.name) == dst.name and dst.name not in rw.inputs
            and aliases.get(dst.name, set()) <= versions
            and dst.name not in rw.outputs and out.name not in rw.outputs
            and src.dtype == out.dtype and tuple(src.shape) == tuple(out.shape)
            and tuple(src.stride()) == tuple(out.stride())   # later views read its layout
            and not any(p.requires_grad for p in (dst, src, out))
            # the value stands for the written tensor from here on: memory of its own that
            # nothing writes (an input, or a value written later, would show through)
            and src.name not in rw.inputs and rw.roots.get(src.name, src.name) == src.name
            and src.name not in rw.written)


def remove_noop_converts(trace: Trace) -> Trace:
    """Drop convert_element_type to the dtype its input already has."""
    rw = _Rewriter(trace)
    kept = []
    for node in trace.nodes:
        node = rw.node(node)
        if _is_convert(node):
            src, dtype = _convert_parts(node)
            out = node.outputs
            if isinstance(src, TensorProxy) and src.dtype == dtype and rw.may_replace(out, src):
                rw.substitute(out, src)
                continue
        kept.append(node)
    return rw.result(kept)


_FLOAT_WIDENINGS = {
    torch.float16: (torch.float32, torch.float64),
    torch.bfloat16: (torch.float32, torch.float64),
    torch.float32: (torch.float64,),
}
_MANTISSA = {torch.float16: 11, torch.bfloat16: 8, torch.float32: 24, torch.float64: 53}
_COMPLEX_PART = {torch.complex64: torch.float32, torch.complex128: torch.float64}


def holds_exactly(src: torch.dtype, mid: torch.dtype) -> bool:
    """Whether every value of `src` survives a trip through `mid` unchanged."""
    if src == mid or src is torch.bool:
        return True
    if mid is torch.bool or src.is_complex and not mid.is_complex:
        return False
    if src.is_complex:
        return holds_exactly(_COMPLEX_PART.get(src, src), _COMPLEX_PART.get(mid, mid))
    if mid.is_complex:
        return holds_exactly(src, _COMPLEX_PART.get(mid, mid))
    if src.is_floating_point:
        return mid in _FLOAT_WIDENINGS.get(src, ())
    info = torch.iinfo(src)
    if mid.is_floating_point:
        return max(abs(info.min), info.max) <= 2 ** _MANTISSA.get(mid, 0)
    wide = torch.iinfo(mid)
    return wide.min <= info.min and info.max <= wide.max


def remove_round_trips(trace: Trace, *, lossy: bool = False) -> Trace:
    """Replace convert(convert(x, A), x.dtype) by x when A holds x's values exactly.

    With `lossy=True` the rounding through A is dropped too (f32 -> f16 -> f32 becomes the
    f32 value itself): faster and more precise than eager, but different numbers.
    """
    rw = _Rewriter(trace)
    converts: dict[str, Node] = {}
    kept = []
    for node in trace.nodes:
        node = rw.node(node)
        if _is_convert(node):
            src, dtype = _convert_parts(node)
            first = converts.get(src.name) if isinstance(src, Proxy) else None
            if first is not None:
                x = _convert_parts(first)[0]
                if (isinstance(x, TensorProxy) and x.dtype == dtype
                        and (lossy or holds_exactly(x.dtype, src.dtype))
                        and rw.may_replace(node.outputs, x)):
                    rw.substitute(node.outputs, x)
                    continue
            if isinstance(node.outputs, Proxy):
                converts[node.outputs.name] = node
        kept.append(node)
    return rw.result(kept)


def drop_gradient_carriers(trace: Trace) -> Trace:
    """Drop each ``prims.differentiate_as(value, carrier)``: the carrier says how the value
    differentiates (a ref's tie convention, docs/autodiff.md), which only a backward reads,
    so a forward computes what it did without it and DCE drops the carrier. The value's
    node takes over the result's name where it can (it makes the value alone, of the same
    layout), so the result is still the ref's output and the executors can give the whole
    call back to torch; else the value replaces the result. A trace to differentiate
    (``primtrace.autodiff.backward_trace``) is taken before this pass: after it, the refs'
    gradients would follow their prims' rules again."""
    rw = _Rewriter(trace)
    producer = {p.name: i for i, n in enumerate(trace.nodes) for p in n.output_proxies}
    takes_over: dict[int, Proxy] = {}   # node index -> the result whose name it now makes
    dropped = set()
    for node in trace.nodes:
        value, result = (node.args[0], node.outputs) if _is_gradient_carrier(node) else (0, 0)
        if not isinstance(value, TensorProxy):
            continue
        at = producer.get(value.name)
        maker = trace.nodes[at] if at is not None else None
        if (maker is not None and takes_over.get(at, maker.outputs) is value and is_pure(maker)
                and value.spec == result.spec and value.name not in rw.outputs
                and rw.roots.get(value.name, value.name) not in rw.written):
            takes_over[at], producer[result.name] = result, at
            for name, new in list(rw.replace.items()):   # a value renamed by an earlier one
                if new is value:
                    rw.replace[name] = result
            rw.replace[value.name] = result   # its other readers (carriers) read the result
        elif rw.may_replace(result, value):
            rw.substitute(result, rw.replace.get(value.name, value))
        else:
            continue
        dropped.add(id(node))
    kept = []
    for i, node in enumerate(trace.nodes):
        if id(node) not in dropped:
            node = rw.node(node)
            kept.append(node.replace(outputs=takes_over[i]) if i in takes_over else node)
    return rw.result(kept)


def _is_gradient_carrier(node: Node) -> bool:
    return node.symbol.kind is SymbolKind.PRIM and node.symbol.name == "differentiate_as"


def optimize(trace: Trace, *, remove_lossy_round_trips: bool = False,
             sink_selections: bool = True) -> Trace:
    """The default pipeline: gradient carriers and conversions first (they expose dead code
    and twins), then CSE, writes nothing else sees (drop_unseen_writes), selections sunk
    into the sums that reduce them
    (tracer/selections.py), values that depend on no input computed now
    (tracer/constant_folding.py), gathers at constant positions as slices
    (tracer/index_slices.py), DCE."""
    trace = drop_gradient_carriers(trace)
    trace = remove_noop_converts(trace)
    trace = remove_round_trips(trace, lossy=remove_lossy_round_trips)
    trace = cse(trace)
    trace = drop_unseen_writes(trace)
    if sink_selections and any(n.symbol.name == "mask_select" for n in trace.nodes):
        from primtrace.tracer import selections
        sunk = selections.sink_selections(trace)   # x[mask].sum(): where(mask, x, 0).sum()
        if sunk is not trace:
            trace = cse(sunk)
    from primtrace.tracer.constant_folding import fold_constants
    from primtrace.tracer.index_slices import gathers_as_slices
    trace = fold_constants(trace)
    trace = gathers_as_slices(trace)   # x[..., [-2], :]: a slice and a copy
    trace = dce(trace)
    trace.stage = "optimized"
    return trace


__all__ = ["dce", "cse", "drop_gradient_carriers", "drop_unseen_writes", "remove_noop_converts", "remove_round_trips", "optimize",
           "holds_exactly", "is_pure", "may_raise", "mutated_proxy"]
