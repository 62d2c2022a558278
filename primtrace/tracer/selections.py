"""Selections sunk into reductions: ``x[mask]`` that a sum reduces is never materialized.

``F.cross_entropy(logits[mask], target[mask])`` selects the rows a mask keeps (a copy of
their values, of a size known only at run time), computes each row's loss, and sums them.
Each row's loss reads that row only, so the same loss computed on every row, summed where
the mask is True, is the same sum: ``sum(where(mask, loss(logits, target), 0))``. That
version has only concrete shapes, so it fuses (one row kernel over the logits, no copy of
the selection), and a sum of selected rows needs no selection at all
(``x[mask].sum()``: ``where(mask, x, 0).sum()``).

The pass follows the values a selection by one mask makes (``prims.mask_select``, all
selections by that mask, which share one count) through the prims that treat each selected
row alone, computing them on every row instead ("lifted"):

- elementwise prims (but those that may raise on some values: integer division), where,
  conversions; broadcasts of lifted values, or of tensors without the selected dim;
- reductions, squeeze, unsqueeze, slices over other dims; gather along another dim (the
  index of a row the mask drops is replaced by 0, a valid one);
- the guard of a loss's targets (check_targets, only where the mask keeps a row).

A sum over the selected dim is where it ends: its lifted form sums ``where(mask, x, 0)``
(sum order changes: float rounding may differ from eager's, within the conformance tests'
float64 rule). If every use of every value the selections make is lifted or such a sum,
and none is returned, the selections go: their count, where still read (a mean's divisor),
is counted from the mask (``prims.mask_count``). Otherwise the trace is left as it was.

The lifted prims compute rows the mask drops: more work when it keeps few rows (a loss
over 10% of the rows computes all of them; measured in benchmarks/masked_loss.py). Random
prims, in-place prims and values that need grad are never lifted.
"""
from __future__ import annotations

from primtrace.ir.proxy import Proxy, TensorProxy
from primtrace.ir.trace import Node, Trace, tracing
from primtrace.ir.tree import proxies_in
from primtrace.tracer.passes import may_raise

#: elementwise-tagged prims that are not pointwise functions of their tensor operands
_NOT_POINTWISE = frozenset({"broadcast_in_dim", "full", "full_like", "full_strided", "iota"})
_REDUCTIONS = frozenset({"sum", "prod", "amax", "amin", "var"})


class _Refused(Exception):
    """A value of the selection reaches a prim the pass cannot lift."""


class _Group:
    """The selections by one mask (one count `n`) and what is known of the values lifted."""

    def __init__(self, mask, dim: int, n):
        self.mask, self.dim, self.n = mask, dim, n
        self.k = mask.ndim
        self.pos: dict[str, int] = {}        # selected value -> position of the count dim
        self.sources: list[Node] = []        # the mask_select nodes
        self.lifted: dict[int, str] = {}     # id(node) -> how it lifts
        self.sinks = 0

    def full_shape(self, shape, p) -> tuple:
        """The shape on every row: the count dim at p replaced by the mask's dims."""
        return (*shape[:p], *self.mask.shape, *shape[p + 1:])

    def full_dim(self, d, p) -> int:
        """A dim (other than p) of a selected value, in its lifted value."""
        return d if d < p else d + self.k - 1

    def covered(self, p) -> tuple:
        return tuple(range(p, p + self.k))


def _position(group: _Group, t) -> int | None:
    """The position of the count dim in selected value `t` (None: not one of the group's)."""
    return group.pos.get(t.name) if isinstance(t, TensorProxy) else None


def _selects(node: Node) -> bool:
    return node.symbol.name == "mask_select" and node.symbol.kind == "prim"


def _groups(trace: Trace) -> list[_Group]:
    groups: dict[int, _Group] = {}
    for node in trace.nodes:
        if not _selects(node):
            continue
        a, mask, dim, size = (*node.args, None)[:4]
        t, n = node.outputs
        count = size if size is not None else n
        group = groups.setdefault(id(count), _Group(mask, dim, count))
        if group.mask.name != mask.name or group.dim != dim:
            group.pos = None   # the same count by another mask: not this pass's
            continue
        if group.pos is not None:
            group.pos[t.name] = dim
            group.sources.append(node)
    return [g for g in groups.values() if g.pos is not None]


def _classify(group: _Group, node: Node) -> str | None:
    """How `node`, which reads a value of the group, lifts (None: it does not)."""
    sym = node.symbol
    if sym.kind != "prim" or sym.tags & {"random", "inplace"}:
        return None
    if any(getattr(p, "requires_grad", False) for p in node.output_proxies):
        return None
    name = sym.name
    tensors = [a for a in node.args if isinstance(a, TensorProxy)]
    positions = {_position(group, t) for t in tensors if t.ndim}
    if name == "broadcast_in_dim":
        a, shape, dims = node.args
        p = _position(group, a)
        q = _out_position(group, node)
        if q is None:
            return None
        if p is not None:
            return "broadcast" if dims[p] == q else None
        # a tensor without the count dim broadcast along it: no dim of a maps to q
        return "broadcast" if q not in dims and not any(
            isinstance(n, Proxy) for n in a.shape) else None
    if "elementwise" in sym.tags and name not in _NOT_POINTWISE:
        if len(positions) != 1 or None in positions or may_raise(node):
            return None
        shapes = {tuple(t.shape) for t in tensors if t.ndim}
        return "pointwise" if len(shapes) == 1 else None
    if len(tensors) != 1 and name not in ("gather", "check_targets"):
        return None
    if name in _REDUCTIONS:
        p = _position(group, node.args[0])
        dims = node.args[1]
        if p is None:
            return None
        if p not in dims:
            return "reduce"
        return "sink" if name == "sum" else None
    if name in ("squeeze", "unsqueeze"):
        p = _position(group, node.args[0])
        if name == "squeeze" and p in node.args[1]:
            return None
        return "view" if p is not None else None
    if name == "slice":
        a, starts, stops, steps = node.args
        p = _position(group, a)
        if p is None or not (type(starts[p]) is int and starts[p] == 0
                             and stops[p] is group.n and steps[p] == 1):
            return None
        return "slice" if not any(isinstance(v, Proxy) for i, v in enumerate(
            (*starts, *stops)) if i % a.ndim != p) else None
    if name == "gather":
        a, dim, index = node.args
        p, q = _position(group, a), _position(group, index)
        size = a.shape[dim]
        if p is None or p != q or dim == p or not isinstance(size, int) or size < 1:
            return None
        return "gather"
    if name == "check_targets":
        target = node.args[0]
        if _position(group, target) is None or len(node.args) > 3:
            return None
        return "targets"
    return None


def _out_position(group: _Group, node: Node) -> int | None:
    """The position of the count in a node's tensor output (None: it has none there)."""
    out = node.outputs
    if not isinstance(out, TensorProxy):
        return None
    at = [i for i, n in enumerate(out.shape) if n is group.n]
    return at[0] if len(at) == 1 else None


def _plan(trace: Trace, group: _Group, returned: set) -> bool:
    """Classify the nodes that read the group's values; True when every use lifts."""
    for node in trace.nodes:
        if _selects(node) and node in group.sources:
            continue
        reads = [p for p in node.inputs if isinstance(p, TensorProxy) and p.name in group.pos]
        if not reads:
            continue
        how = _classify(group, node)
        if how is None:
            return False
        group.lifted[id(node)] = how
        if how == "sink":
            group.sinks += 1
            continue
        if how == "targets":
            continue
        out = node.outputs
        if not isinstance(out, TensorProxy):
            return False
        q = _out_position(group, node)
        if q is None:
            return False
        group.pos[out.name] = q
    if any(name in returned for name in group.pos):
        return False
    return group.sinks > 0


def _written_roots(trace: Trace) -> set:
    """The memory (alias roots) the trace writes in place: a lifted prim runs where the
    value it replaces did, after the selection, so it must not read memory written between."""
    from primtrace.tracer.passes import mutated_proxy
    roots = trace.tags.get("alias_roots", {})
    return {roots.get(p.name, p.name) for n in trace.nodes
            if (p := mutated_proxy(n)) is not None}


def sink_selections(trace: Trace) -> Trace:
    """`trace` with each group of selections whose every use lifts replaced by the lifted
    computation (see the module docstring); unchanged where none does."""
    from primtrace.tracer.passes import _returned_storage
    returned = _returned_storage(trace)
    written = _written_roots(trace)
    roots = trace.tags.get("alias_roots", {})
    for group in _groups(trace):
        read = [group.mask, *(s.args[0] for s in group.sources)]
        if any(roots.get(t.name, t.name) in written for t in read):
            continue   # the mask or a selected tensor is written in place somewhere
        if not _plan(trace, group, returned):
            continue
        trace = _rewrite(trace, group)
    return trace


def _rewrite(trace: Trace, group: _Group) -> Trace:
    from primtrace import prims
    recorder = Trace(trace.name)
    recorder._counter = trace._counter    # fresh names never clash with the trace's
    full: dict[str, TensorProxy] = {}     # selected value -> its lifted value
    count_read = any(group.n.name in {p.name for p in n.inputs} for n in trace.nodes
                     if id(n) not in group.lifted and not _selects(n)) or any(
        isinstance(p, Proxy) and p.name == group.n.name for p in proxies_in(trace.outputs))
    mask_cache: dict = {}

    def mask_for(shape, p):
        key = (tuple(shape), p)
        if tuple(shape) == tuple(group.mask.shape):
            return group.mask
        if key not in mask_cache:
            mask_cache[key] = prims.broadcast_in_dim(group.mask, tuple(shape), group.covered(p))
        return mask_cache[key]

    def arg(x):
        return full.get(x.name, x) if isinstance(x, TensorProxy) else x

    def shape_of(shape, p):
        return group.full_shape(tuple(shape), p)

    nodes: list[Node] = []
    for node in trace.nodes:
        if node in group.sources:
            if count_read and node is group.sources[0]:
                nodes.append(Node(prims.mask_count, (group.mask,), {}, group.n,
                                  source=node.source, grad_enabled=node.grad_enabled))
            full[node.outputs[0].name] = node.args[0]
            continue
        how = group.lifted.get(id(node))
        if how is None:
            nodes.append(node)
            continue
        recorder.nodes.clear()
        with tracing(recorder):
            out = _lift(prims, group, node, how, arg, shape_of, mask_for)
        made = list(recorder.nodes)
        for n in made:
            n.source, n.grad_enabled = node.source, node.grad_enabled
        if how in ("sink", "targets"):   # the original result, computed on every row
            if made and how == "sink":
                made[-1] = made[-1].replace(outputs=node.outputs)
        else:
            full[node.outputs.name] = out
        nodes += made
    new = trace.derive(nodes, trace.stage)
    new.outputs = trace.outputs
    return new


def _lift(prims, group, node, how, arg, shape_of, mask_for):
    """Record `node`'s lifted form (on every row); returns its lifted result."""
    sym, args, kwargs = node.symbol, node.args, node.kwargs
    if how == "pointwise":
        return sym(*[arg(a) for a in args], **{k: arg(v) for k, v in kwargs.items()})
    if how == "broadcast":
        a, shape, dims = args
        q = _out_position(group, node)
        p = _position(group, a)
        mapped = []
        for i, d in enumerate(dims):
            if p is not None and i == p:
                mapped += list(group.covered(q))
            else:
                mapped.append(group.full_dim(d, q))
        return prims.broadcast_in_dim(arg(a), shape_of(shape, q), tuple(mapped))
    if how in ("reduce", "sink"):
        a, dims = args[0], args[1]
        p = _position(group, a)
        mapped = []
        for d in dims:
            mapped += list(group.covered(p)) if d == p else [group.full_dim(d, p)]
        source = arg(a)
        if how == "sink":
            source = prims.where(mask_for(source.shape, p), source, 0)
        return sym(source, tuple(sorted(mapped)), *args[2:], **kwargs)
    if how == "view":
        a, dims = args
        p = _position(group, a)
        if sym.name == "squeeze":
            return prims.squeeze(arg(a), tuple(group.full_dim(d, p) for d in dims))
        return prims.unsqueeze(arg(a), dims if dims <= p else dims + group.k - 1)
    if how == "slice":
        a, starts, stops, steps = args
        p = _position(group, a)
        lifted = arg(a)
        starts = (*starts[:p], *(0,) * group.k, *starts[p + 1:])
        stops = (*stops[:p], *group.mask.shape, *stops[p + 1:])
        steps = (*steps[:p], *(1,) * group.k, *steps[p + 1:])
        return prims.slice(lifted, starts, stops, steps)
    if how == "gather":
        a, dim, index = args
        p = _position(group, a)
        lifted_index = arg(index)
        safe = prims.where(mask_for(lifted_index.shape, p), lifted_index, 0)
        return prims.gather(arg(a), group.full_dim(dim, p), safe)
    if how == "targets":   # checked where the mask keeps a row (from the inputs themselves:
        target, size, ignore_index = args[:3]   # the guard runs before the loss's gather)
        p = _position(group, target)
        lifted = arg(target)
        return prims.check_targets(lifted, size, ignore_index, mask_for(lifted.shape, p))
    raise _Refused(sym.name)


__all__ = ["sink_selections"]
