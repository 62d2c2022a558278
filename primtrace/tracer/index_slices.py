"""Gathers at constant, evenly spaced positions run as a slice and a copy.

Why: ``x[..., [-2], :]`` (Falcon's key and value heads out of its fused projection) is
advanced indexing: eager and the trace call ATen's ``index``, 13 us on a (1, 64, 6, 32)
tensor, where a copy of the slice ``x[..., -2:-1, :]`` is one short loop, and a copy that
fuses with its reader. The same holds for any constant list of positions with a fixed step
(``x[:, [0, 2, 4]]``).

What: a ``prims.index`` with one index, a constant 1-d integer tensor whose values (negative
ones counted from the end) are in bounds and evenly spaced, becomes ``prims.slice`` and a
copy into a new tensor with the index's own strides (its meta gives eager's). Out-of-bounds
positions keep the gather, which raises as eager does.
"""
from __future__ import annotations

import torch

from primtrace import dtypes
from primtrace.ir.proxy import TensorProxy
from primtrace.ir.strides import contiguous_strides
from primtrace.ir.symbol import SymbolKind
from primtrace.ir.trace import Trace, tracing


def gathers_as_slices(trace: Trace) -> Trace:
    """`trace` with each such gather a slice and a copy, or `trace` itself if it has none."""
    from primtrace import prims
    constants = {n.outputs.name: n.args[0] for n in trace.nodes
                 if n.symbol.kind is SymbolKind.PRIM and n.symbol.name == "constant"}
    if not any(_slice_of(n, constants) for n in trace.nodes):
        return trace
    recorder = Trace(trace.name)
    recorder._counter = trace._counter    # fresh names never clash with the trace's
    recorder.record_constants = True      # the new buffer is a node: new on every call
    roots = dict(trace.tags.get("alias_roots", {}))
    nodes = []
    for node in trace.nodes:
        found = _slice_of(node, constants)
        if found is None:
            nodes.append(node)
            continue
        a, starts, ends, steps = found
        out = node.outputs
        recorder.nodes.clear()
        with tracing(recorder):
            view = prims.slice(a, starts, ends, steps)
            zero = dtypes.python_type(out.dtype)(0)
            strides = tuple(out.stride())
            buffer = (prims.full(tuple(out.shape), zero, dtype=out.dtype, device=out.device)
                      if strides == contiguous_strides(tuple(out.shape)) else
                      prims.full_strided(tuple(out.shape), strides, zero, dtype=out.dtype,
                                         device=out.device))
            prims.copy_to(buffer, view)
        made = list(recorder.nodes)
        made[-1] = made[-1].replace(outputs=out)
        for n in made:
            n.source, n.grad_enabled = node.source, node.grad_enabled
        roots[out.name] = buffer.name
        roots[view.name] = roots.get(a.name, a.name)
        nodes += made
    new = trace.derive(nodes, trace.stage)
    new.outputs = trace.outputs
    new.tags["alias_roots"] = roots
    return new


def _slice_of(node, constants: dict):
    """(input, starts, ends, steps) of the slice a gather node reads, or None. `constants`:
    the values of the trace's ``prims.constant`` nodes, by name."""
    if node.symbol.kind is not SymbolKind.PRIM or node.symbol.name != "index":
        return None
    a, indices = node.args[0], node.args[1]
    defined = [(d, t) for d, t in enumerate(indices) if t is not None]
    if (not isinstance(a, TensorProxy) or len(defined) != 1
            or not all(type(n) is int for n in a.shape)):
        return None
    d, index = defined[0]
    if isinstance(index, TensorProxy):
        index = constants.get(index.name, index)
    if (isinstance(index, TensorProxy) or not isinstance(index, torch.Tensor)
            or index.ndim != 1 or index.numel() == 0
            or index.dtype not in (torch.int64, torch.int32)):
        return None
    n = a.shape[d]
    values = [v + n if v < 0 else v for v in index.tolist()]
    step = values[1] - values[0] if len(values) > 1 else 1
    if (not all(0 <= v < n for v in values) or step < 1
            or any(b - a_ != step for a_, b in zip(values, values[1:]))):
        return None
    starts = [0] * a.ndim
    ends = list(a.shape)
    steps = [1] * a.ndim
    starts[d], ends[d], steps[d] = values[0], values[-1] + 1, step
    return a, tuple(starts), tuple(ends), tuple(steps)
