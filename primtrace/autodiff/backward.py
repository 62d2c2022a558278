"""The backward trace of a forward trace of prims, from each prim's VJP rule.

The forward nodes are walked in reverse; each node some cotangent reaches has its rule
(``primtrace.prims.VJP_RULES``) called on its own proxies while the backward trace records,
so the backward is a trace of prims like any other (the executors run and fuse it). The
cotangents of a value read by several nodes are summed; nodes on no path from a
differentiated input to an output are skipped, what the rules made but no gradient needs is
dropped, and what two rules compute alike is computed once (CSE).

The backward trace reads forward values by their proxies: those are its first inputs
(``tags["saved"]``, in the order it first reads them), then one cotangent per differentiable
output some gradient depends on (``tags["cotangents"]``; a value returned twice has one,
which the caller sums). An opaque torch call on the way (an op without a ref) is
differentiated by torch's autograd over the call, run again (``prims.library_vjp``).
:func:`forward_with_saved` gives the forward trace that also
returns them. ``partition.partition`` chooses fewer values to save (a min-cut) and makes the
backward recompute the rest; the torch.autograd.Function glue is left to the caller.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch

from primtrace import prims
from primtrace.autodiff.writes import aliased_vjp
from primtrace.ir.kinds import SymbolKind
from primtrace.ir.proxy import Proxy, TensorProxy
from primtrace.ir.strides import contiguous_strides
from primtrace.ir.trace import Node, Trace, current_trace, tracing
from primtrace.ir.tree import proxies_in, tree_flatten
from primtrace.prims.differentiation import (NotDifferentiable, NotDifferentiableError, vjp,
                                             zeros_like)
from primtrace.tracer.passes import cse

#: opaque torch calls whose result carries no gradient (a trace keeps them as calls)
STOP_GRADIENT = frozenset({"detach"})


class Backward(NamedTuple):
    """The backward trace and what its inputs and outputs stand for."""
    trace: Trace            # (*saved, *cotangents) -> one gradient (or None) per wrt
    saved: list             # forward proxies the backward reads
    cotangents: list        # (forward output, its cotangent input proxy), per distinct output
    wrt: list               # the forward inputs differentiated, in the gradients' order


def differentiable(p) -> bool:
    return isinstance(p, TensorProxy) and (p.dtype.is_floating_point or p.dtype.is_complex)


def backward_trace(forward: Trace, wrt=None) -> Backward:
    """The backward of `forward` (a prims trace) for the gradients of the inputs `wrt`
    (proxies among forward.inputs; default: every floating and complex tensor input)."""
    nodes = forward.flat_nodes()
    wrt = [p for p in forward.inputs if differentiable(p)] if wrt is None else list(wrt)
    outputs = [p for p in proxies_in(forward.outputs) if differentiable(p)]
    active = _active(nodes, wrt, outputs)
    trace = Trace(f"{forward.name}_backward")
    trace._counter = forward._counter   # fresh names never clash with the forward's
    cotangent: dict[str, Proxy] = {}
    pairs = []
    for out in outputs:
        if out.name in active and out.name not in cotangent:
            cotangent[out.name] = trace.tensor(_cotangent_spec(out), name=f"g_{out.name}")
            pairs.append((out, cotangent[out.name]))
    producer = {p.name: node for node in nodes for p in node.output_proxies}
    trace.record_constants = True   # a rule's zeros are made per call, not once: some are written
    zeros: dict[str, object] = {}   # cotangents known to be zeros -> the call they are in
    with tracing(trace):
        for node in reversed(nodes):
            _pull_back(node, active, cotangent, producer, zeros)
        for p in _connected(nodes, wrt, outputs, active):   # eager's graph reaches it: zeros, not None
            if p.name not in cotangent:
                cotangent[p.name] = zeros_like(p)
    trace.record_constants = False
    _producers.clear()
    trace.outputs = tuple(cotangent.get(p.name) for p in wrt)
    trace = cse(trace)   # rules of neighbouring nodes recompute the same values (-g, 1 - y^2)
    trace.nodes = _live(trace.nodes, proxies_in(trace.outputs))
    grads = list(trace.outputs)
    made = {p.name for n in trace.nodes for p in n.output_proxies} | {
        g.name for _, g in pairs}
    saved, seen = [], set()
    for n in trace.nodes:
        for p in n.inputs:
            if p.name not in made and p.name not in seen:
                seen.add(p.name)
                saved.append(p)
    saved += [g for g in grads if g is not None and g.name not in made and g.name not in seen]
    trace.inputs = saved + [g for _, g in pairs]
    trace.input_structure = (tuple(trace.inputs), {})
    trace.stage = "backward"
    trace.tags.update(saved=saved, cotangents=pairs)
    return Backward(trace, saved, pairs, wrt)


def _cotangent_spec(out: TensorProxy):
    """The cotangent's spec: the output's, but dense where the output's memory overlaps (an
    expanded input returned as is): a cotangent's elements are independent."""
    spec = out.spec
    if any(stride == 0 and size > 1 for size, stride in zip(spec.shape, spec.strides)):
        return dataclasses.replace(spec, strides=contiguous_strides(spec.shape))
    return spec


def forward_with_saved(forward: Trace, saved) -> Trace:
    """`forward` returning ``(its outputs, tuple of the saved values)``.

    A saved value whose memory a later node of the forward writes in place (``x.clone()``
    then ``mul_(y)``: the backward of y reads the clone's values before the write) is saved
    as a copy made where it is computed, as eager saves ``original_self``: the backward
    reads it under the same name."""
    nodes = forward.flat_nodes()
    copies = _stale(nodes, forward.inputs, saved)
    if copies:
        made = {p.name: i for i, n in enumerate(nodes) for p in n.output_proxies}
        at: dict[int, list] = {}
        for p in copies:
            at.setdefault(made.get(p.name, -1), []).append(p)
        out, replaced = [], {}
        scratch = Trace("copies")
        scratch._counter = forward._counter   # fresh names never clash with the forward's
        with tracing(scratch):
            for i in range(-1, len(nodes)):
                if i >= 0:
                    out.append(nodes[i])
                for p in at.get(i, ()):
                    before = len(scratch.nodes)
                    replaced[p.name] = prims.clone(p)
                    out += [n.replace(source=nodes[i].source if i >= 0 else None)
                            for n in scratch.nodes[before:]]
        nodes = out
        saved = [replaced.get(p.name, p) for p in saved]
    trace = forward.derive(nodes, "forward")
    trace.outputs = (forward.outputs, tuple(saved))
    trace.tags.pop("output_rebuild", None)
    return trace


def _stale(nodes, inputs, saved) -> list:
    """The saved tensors whose memory (their own, their base's, a view's of it) a node after
    the one computing them writes in place."""
    root: dict[str, str] = {}

    def find(name):
        while root.get(name, name) != name:
            name = root[name]
        return name
    position = {p.name: -1 for p in inputs}
    last_write: dict[str, int] = {}
    for i, node in enumerate(nodes):
        tags = node.symbol.tags
        for p in node.output_proxies:
            position.setdefault(p.name, i)
        if tags & {"view", "alias", "inplace"} and node.args and isinstance(node.args[0], Proxy):
            base = find(node.args[0].name)
            for p in node.output_proxies:
                root[find(p.name)] = base
            if "inplace" in tags:
                last_write[base] = i
    stale = []
    for p in saved:
        if not isinstance(p, TensorProxy) or p.name not in position:
            continue
        written = max((i for r, i in last_write.items() if find(r) == find(p.name)), default=-2)
        if written > position[p.name]:
            stale.append(p)
    return stale


def _active(nodes, wrt, outputs) -> set[str]:
    """Names of the values on a path from a differentiated input to an output."""
    reached = {p.name for p in wrt}
    for node in nodes:
        if stops_gradient(node):
            continue
        if any(p.name in reached for p in node.inputs):
            reached.update(p.name for p in node.output_proxies if differentiable(p))
    needed = {p.name for p in outputs}
    for node in reversed(nodes):
        if any(p.name in needed for p in node.output_proxies):
            needed.update(p.name for p in node.inputs)
    return reached & needed


def _connected(nodes, wrt, outputs, active) -> list:
    """The inputs of `wrt` that a node through which gradients flow reads to make a value on
    the way to an output: eager's autograd graph reaches them, so their gradient is a tensor
    (zeros where every rule on the way says none: copysign's sign operand), never None."""
    names = {p.name for p in wrt}
    flowing = {p.name for p in outputs}   # what reaches an output through such nodes alone
    read = set()
    for node in reversed(nodes):
        if stops_gradient(node) or not any(p.name in active and p.name in flowing
                                           for p in node.output_proxies):
            continue
        flowing.update(p.name for p in node.inputs)
        read.update(p.name for p in node.inputs if p.name in names)
    return [p for p in wrt if p.name in read]


def stops_gradient(node: Node) -> bool:
    """No gradient flows through `node`, as in eager: it ran under torch.no_grad(), it is a
    detach, or its prim's mark says its result is not differentiable (bool, a new tensor)."""
    if node.grad_enabled is False:
        return True
    if node.symbol.kind is SymbolKind.OPAQUE:
        return node.symbol.name in STOP_GRADIENT
    rule = prims.VJP_RULES.get(node.symbol.name)
    return isinstance(rule, NotDifferentiable) and rule.stops


def _pull_back(node: Node, active: set, cotangent: dict, producer: dict, zeros: dict) -> None:
    """Add the cotangents of `node`'s inputs, from those of its outputs, by its rule.

    Zeros a rule knows to be zeros (floor's, trunc's: ``Zero`` entries) pass through the
    other prims of the same torch call without their rules: eager's formula for the call
    (``div(rounding_mode="trunc")``, ``floor_divide``) gives zeros, where the chain rule
    would give 0 * (1 / b), NaN at b = 0. Across calls the rules run, as eager's do."""
    outs = node.outputs
    flat = tree_flatten(outs)
    gs = [cotangent.get(p.name) if isinstance(p, Proxy) else None for p in flat]
    if all(g is None for g in gs) or not any(isinstance(p, Proxy) and p.name in active
                                             for p in node.inputs):
        return
    origin = node.origin
    if origin is not None and all(g is None or zeros.get(p.name) is origin
                                  for p, g in zip(flat, gs)):
        for a in node.inputs:
            if a.name in active and a.name not in cotangent and differentiable(a):
                cotangent[a.name] = zeros_like(a)
                zeros[a.name] = origin
        return
    g = tuple(gs) if isinstance(outs, (tuple, list)) else gs[0]
    try:
        if node.symbol.kind is not SymbolKind.PRIM:
            grads = _opaque_vjp(node, g, active, cotangent)
        elif node.symbol.name == "aliased":
            grads = aliased_vjp(node, g, producer, wants_base=node.args[0].name in active)
        elif _widens(node) and isinstance(g, TensorProxy) and g.dtype in _HALF:
            wide = _rounded_from(g)
            grads = _widened_vjp(node, wide if wide is not None
                                 else prims.convert_element_type(g, torch.float32))
        else:
            grads = vjp(node.symbol, g, outs, node.args, node.kwargs,
                        wanted=[any(p.name in active for p in proxies_in(a)) for a in node.args])
    except NotDifferentiableError as e:
        raise NotDifferentiableError(f"{e} (in {_where(node)})") from None
    zero = getattr(prims.VJP_RULES.get(node.symbol.name), "zero", False) \
        and node.symbol.kind is SymbolKind.PRIM and origin is not None
    for arg, grad in zip(node.args, grads):
        listed = isinstance(arg, (list, tuple)) and isinstance(grad, (list, tuple))
        for a, gr in zip(arg, grad) if listed else [(arg, grad)]:   # cat's list of tensors
            if not (isinstance(a, Proxy) and a.name in active):
                continue
            if isinstance(gr, NotDifferentiable) and gr.stops:
                continue
            if isinstance(gr, NotDifferentiable):
                raise NotDifferentiableError(f"prims.{node.symbol.name} does not differentiate "
                                             f"{a.name}: {gr.reason} (in {_where(node)})")
            if gr is None:
                continue
            if zero:
                if a.name not in cotangent:
                    cotangent[a.name] = gr
                    zeros[a.name] = origin
                continue
            if zeros.pop(a.name, None) is not None:   # a known zero gives way
                del cotangent[a.name]
            _accumulate(cotangent, a, gr)


def _opaque_vjp(node: Node, g, active: set, cotangent: dict) -> tuple:
    """An opaque torch call (no ref, so no prims and no rule): torch's autograd over the call,
    run again by prims.library_vjp. Returns the positional arguments' cotangents; keyword
    arguments' (layer_norm's weight=) are added here."""
    if "inplace" in node.symbol.tags:
        raise NotDifferentiableError(f"{node.symbol.qualname}: an opaque call that writes in "
                                     f"place")
    wrt = [i for i, a in enumerate(node.args) if isinstance(a, Proxy) and a.name in active]
    wrt += [(i, j) for i, a in enumerate(node.args) if isinstance(a, (list, tuple))
            for j, x in enumerate(a) if isinstance(x, Proxy) and x.name in active]   # gru's weights
    wrt += [k for k, a in node.kwargs.items() if isinstance(a, Proxy) and a.name in active]
    grads = dict(zip(wrt, prims.library_vjp(node.symbol, g, tuple(node.args), tuple(wrt),
                                            node.kwargs)))
    for k in wrt:
        if type(k) is str:
            _accumulate(cotangent, node.kwargs[k], grads[k])
    return tuple([grads.get((i, j)) for j in range(len(a))]
                 if isinstance(a, (list, tuple)) else grads.get(i)
                 for i, a in enumerate(node.args))


def _accumulate(cotangent: dict, p: Proxy, grad) -> None:
    """Sum the cotangents of a value read by several nodes. Two float16/bfloat16 cotangents
    that rules computed in float32 and rounded are summed in float32 and rounded once (the
    sum often cancels: std_mean's two parts lost 24 bfloat16 ulps rounded apart)."""
    before = cotangent.get(p.name)
    if before is None:
        cotangent[p.name] = grad
        return
    joined = _joined_pads(before, grad)
    if joined is not None:
        cotangent[p.name] = joined
        return
    wide = _rounded_from(before), _rounded_from(grad)
    if wide[0] is not None and wide[1] is not None and wide[0].dtype == wide[1].dtype:
        cotangent[p.name] = prims.convert_element_type(prims.add(*wide), grad.dtype)
    else:
        cotangent[p.name] = prims.add(before, grad)


_HALF = (torch.float16, torch.bfloat16)
#: prims whose rule sums the cotangent (over the dims they broadcast along)
_SUMMING = frozenset({"broadcast_in_dim", "expand"})


def _widens(node: Node) -> bool:
    """Whether `node`'s rule runs in float32 when its cotangent is float16/bfloat16: a
    broadcast (its rule sums) or an elementwise prim (as the refs compute a half dtype's
    forward in float32 and round once)."""
    sym = node.symbol
    return sym.kind is SymbolKind.PRIM and (sym.name in _SUMMING or (
        "elementwise" in sym.tags and sym.name != "convert_element_type"
        and not sym.tags & {"random", "inplace", "creation"}))


def _widened_vjp(node: Node, wide_g):
    """`node`'s rule on float32 copies of its half operands, result and cotangent (the float32
    value a rule rounded to make it, where one did), each cotangent rounded once to its
    operand's dtype: chains of rules then round once, not at every prim (inner's float16
    gradient was summed 2 ulps off, softsign's two parts 3, renorm's products 4)."""
    def up(x):
        return prims.convert_element_type(x, torch.float32) \
            if isinstance(x, TensorProxy) and x.dtype in _HALF else x
    args = tuple(up(a) for a in node.args)
    grads = vjp(node.symbol, wide_g, up(node.outputs), args, node.kwargs)
    return tuple(prims.convert_element_type(gr, a.dtype)
                 if isinstance(gr, TensorProxy) and isinstance(a, TensorProxy)
                 and gr.dtype != a.dtype else gr for gr, a in zip(grads, node.args))
_producers: dict = {}   # id(trace) -> (trace, {name: node}, nodes seen)


def _producer(x):
    """The node of the backward being recorded that made tensor `x`, or None."""
    trace = current_trace()
    if trace is None or not isinstance(x, TensorProxy):
        return None
    entry = _producers.get(id(trace))
    if entry is None or entry[0] is not trace:
        _producers.clear()   # one backward at a time: forget the last one's
        entry = _producers[id(trace)] = (trace, {}, [0])
    _, made, seen = entry
    for node in trace.nodes[seen[0]:]:
        made.update((q.name, node) for q in node.output_proxies)
    seen[0] = len(trace.nodes)
    return made.get(x.name)


def _zero_pad(x):
    """(a, config) of `x` = pad(a, 0, config) without interior padding, or None."""
    node = _producer(x)
    if node is None or node.symbol is not prims.pad or node.args[1] != 0 or \
            any(c[2] for c in node.args[2]):
        return None
    return node.args[0], tuple(tuple(c) for c in node.args[2])


def _joined_pads(before, grad):
    """pad(a) + pad(b) as pad(cat([a, b])) where they pad zeros around adjacent ranges of one
    dim (the cotangents of a split's or chunk's pieces, summed): one copy instead of a
    full-size pad per piece and their sums, and eager's values (its split backward is a
    cat: a -0.0 stays -0.0, where -0.0 + 0 gives 0). None where that does not hold."""
    pieces = _zero_pad(before), _zero_pad(grad)
    if None in pieces or before.dtype != grad.dtype:
        return None
    (a, ca), (b, cb) = sorted(pieces, key=lambda piece: [c[0] for c in piece[1]])
    dims = [d for d in range(len(ca)) if ca[d] != cb[d]]
    if len(dims) != 1 or ca[dims[0]][0] + a.shape[dims[0]] != cb[dims[0]][0]:
        return None
    d = dims[0]
    joined = prims.cat([*_cat_inputs(a, d), *_cat_inputs(b, d)], d)
    config = tuple((ca[d][0], cb[d][1], 0) if e == d else ca[e] for e in range(len(ca)))
    if all(low == 0 and high == 0 for low, high, _ in config):
        return joined
    return prims.pad(joined, 0, config)


def _cat_inputs(x, dim) -> list:
    """The pieces a cat along `dim` made `x` from (an earlier join), else [x]."""
    node = _producer(x)
    if node is not None and node.symbol is prims.cat and node.args[1] == dim:
        return list(node.args[0])
    return [x]


def _rounded_from(x):
    """The float32 value the backward being recorded rounded to make `x` (a float16 or
    bfloat16 tensor made by convert_element_type), or None."""
    if not isinstance(x, TensorProxy) or x.dtype not in _HALF:
        return None
    node = _producer(x)
    if node is None or node.symbol is not prims.convert_element_type:
        return None
    source = node.args[0]
    return source if isinstance(source, TensorProxy) and source.dtype == torch.float32 else None


def _live(nodes, outputs) -> list[Node]:
    """The nodes some output needs (a rule's cotangent of an argument nobody differentiates
    goes). Every node of a backward is free of effects outside it: in-place prims write only
    into tensors the backward made."""
    live = {p.name for p in outputs}
    kept = []
    for node in reversed(nodes):
        if any(p.name in live for p in node.output_proxies):
            kept.append(node)
            live.update(p.name for p in node.inputs)
    return kept[::-1]


def _where(node: Node) -> str:
    return f"{node.symbol.qualname} -> {', '.join(p.name for p in node.output_proxies)}" + (
        f"  # {node.source}" if node.source else "")
