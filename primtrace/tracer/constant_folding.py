"""Constant folding: values that depend on no input are computed once, when compiling.

Why: library code rebuilds tensors that depend only on sizes on every call. Swin's shifted
window attention fills a mask with nine slice assignments, then reshapes, subtracts and
masks it, in every block (367 prims a call); T5 computes its relative-position buckets
(logs, divisions, clamps) each call; decoders build causal masks from ``arange``. Eager and
a trace run that work every call; torch.compile folds it.

What folds: prims (not opaque calls, not random ones) whose tensor inputs are all folded
values, in a trace of static sizes. They are evaluated by their own implementations, in
trace order, on real tensors; every folded value that an unfolded node reads becomes one
``prims.constant`` node holding the tensor (a copy taken when it was made, where a later
folded write changes its memory). Nothing folds when:

- an unfolded node writes into memory a folded value owns (the constant would change),
  through a view or an opaque call's result that may be one;
- a folded value, or a view of one, is returned (eager returns a new tensor each call);
- a folded value an unfolded node reads is larger than MAX_BYTES, or its evaluated strides
  differ from its proxy's (kernels are compiled for the proxy's);
- the evaluation raises (eager's error stays a run-time error).

The constants are never reused as a buffer (buffer_reuse takes only memory a matmul, a
convolution or a fused kernel made) and never written (the first rule).
"""
from __future__ import annotations

import torch

from primtrace import prims
from primtrace.ir.proxy import Proxy, TensorProxy
from primtrace.ir.symbol import SymbolKind
from primtrace.ir.trace import Node, Trace
from primtrace.ir.tree import proxies_in, tree_map
from primtrace.tracer.passes import mutated_proxy

#: the largest value kept as a constant (Swin's masks: 240 KiB)
MAX_BYTES = 4 << 20


def fold_constants(trace: Trace) -> Trace:
    """`trace` with its input-independent values computed now (see the module docstring),
    or `trace` itself where nothing folds."""
    roots = trace.tags.get("alias_roots", {})

    def root(p) -> str:
        return roots.get(p.name, p.name)

    kept_live: set[str] = set()   # roots whose memory is written with inputs, or returned
    while True:
        folded = _foldable(trace, kept_live, root)
        if not folded:
            return trace
        unsafe = _unsafe_roots(trace, folded, root)
        if unsafe <= kept_live:
            break
        kept_live |= unsafe
    names = {p.name for i in folded for p in trace.nodes[i].output_proxies}
    read = {p.name: p for i, node in enumerate(trace.nodes) if i not in folded
            for p in node.inputs if p.name in names}
    values = _evaluate(trace, folded, read, root)
    if values is None:
        return trace
    constants = [Node(prims.constant, (values[name],), {}, read[name]) for name in read]
    kept = [n for i, n in enumerate(trace.nodes) if i not in folded]
    new = trace.derive(constants + kept, trace.stage)
    new.outputs = trace.outputs
    return new


def _foldable(trace: Trace, kept_live: set[str], root) -> set[int]:
    """Positions of the nodes that depend on no input: prims, not random, of static sizes,
    whose outputs are tensors, none in memory `kept_live` names."""
    dependent = {p.name for p in trace.inputs}
    folded = set()
    for i, node in enumerate(trace.nodes):
        outs = node.output_proxies
        if (node.symbol.kind is SymbolKind.PRIM and "random" not in node.symbol.tags
                and node.symbol.name != "constant"
                and not any(p.name in dependent for p in node.inputs)
                and not any(isinstance(p, Proxy) and not isinstance(p, TensorProxy)
                            for p in node.inputs)
                and outs and all(isinstance(p, TensorProxy) and root(p) not in kept_live
                                 and all(type(n) is int for n in p.shape) for p in outs)):
            folded.add(i)
        else:
            dependent.update(p.name for p in outs)
    return folded


def _unsafe_roots(trace: Trace, folded: set[int], root) -> set[str]:
    """Roots of folded values that must stay live: returned, or written by an unfolded
    node (directly, through a view, or through an opaque call's result that may be one)."""
    shared: dict[str, set[str]] = {p.name: {root(p)} for i in folded
                                   for p in trace.nodes[i].output_proxies}
    folded_roots = {r for rs in shared.values() for r in rs}
    unsafe = set()
    for i, node in enumerate(trace.nodes):
        if i in folded:
            continue
        written = mutated_proxy(node)
        if written is not None:
            unsafe |= shared.get(written.name, set()) | ({root(written)} & folded_roots)
        reached = set().union(*(shared.get(p.name, set()) for p in node.inputs))
        if reached and ("view" in node.symbol.tags or node.symbol.kind is not SymbolKind.PRIM):
            for p in node.output_proxies:
                shared[p.name] = shared.get(p.name, set()) | reached
    for p in proxies_in(trace.outputs):
        unsafe |= shared.get(p.name, set()) | ({root(p)} & folded_roots)
    return unsafe


def _evaluate(trace: Trace, folded: set[int], read: dict, root) -> dict | None:
    """name -> tensor of each value in `read`, or None where a rule forbids folding."""
    written_later = {}   # root -> position of its last folded write
    for i in sorted(folded):
        w = mutated_proxy(trace.nodes[i])
        if w is not None:
            written_later[root(w)] = i
    env: dict[str, object] = {}
    values = {}

    def real(x):
        return env[x.name] if isinstance(x, Proxy) else x

    try:
        with torch.no_grad():
            for i in sorted(folded):
                node = trace.nodes[i]
                out = node.symbol.impl(*tree_map(real, node.args), **tree_map(real, node.kwargs))
                for p, v in zip(node.output_proxies, _flat(out), strict=True):
                    env[p.name] = v
                    if p.name in read:
                        if written_later.get(root(p), -1) > i:   # a snapshot of it now
                            v = v.clone()
                        values[p.name] = v
    except Exception:   # eager raises it when the call runs
        return None
    for name, p in read.items():
        v = values[name]
        if (not isinstance(v, torch.Tensor) or tuple(v.shape) != tuple(p.shape)
                or v.dtype != p.dtype or tuple(v.stride()) != tuple(p.stride())
                or v.untyped_storage().nbytes() > MAX_BYTES):
            return None
    return values


def _flat(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]
