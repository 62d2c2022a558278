"""The prims stage of a trace: every node flattened to its prims and opaque calls, or, where
torch's autograd must run (the fallback, attention in training), the torch call the code
made."""
from __future__ import annotations

import torch

from primtrace.ir.proxy import NumberProxy, Proxy, TensorProxy
from primtrace.ir.trace import Node, Trace
from primtrace.ir.tree import tree_flatten
from primtrace.tracer.capture import torch_call_node


def to_prims(trace: Trace, keep_autograd_calls: bool = True) -> Trace:
    """The prims stage: every node flattened to prims and opaque calls. With
    `keep_autograd_calls` (the fallback when primtrace cannot differentiate the program),
    ref nodes whose results need autograd (grad mode on, a result requires grad) run the
    torch call the user made instead, with torch's own autograd."""
    grad_mode = trace.tags.get("grad_enabled", torch.is_grad_enabled())
    nodes, kept = [], 0
    read: dict[str, int] = {}   # proxy name -> how many top-level nodes (and outputs) read it
    for node in trace.nodes:
        for name in {p.name for leaf in node.flat() for p in leaf.inputs}:
            read[name] = read.get(name, 0) + 1
    for p in tree_flatten(trace.outputs):
        if isinstance(p, Proxy):
            read[p.name] = read.get(p.name, 2) + 2
    for node in trace.nodes:
        enabled = (keep_autograd_calls or _kept_in_training(node)) and (
            grad_mode if node.grad_enabled is None else node.grad_enabled)
        if node.call is None or not enabled or not any(
                getattr(p, "requires_grad", False) for p in node.output_proxies) or \
                _defines_read_sizes(node, read):
            flat = node.flat()
            if node.call is not None:
                for prim in flat:
                    prim.origin = node   # an executor may run the call instead (see lower)
            nodes += flat
            continue
        call = torch_call_node(node)
        nodes += [call, *_versions_after(node, call)]
        kept += 1
    prims = trace.derive(nodes, "prims")
    if kept:
        prims.tags["notes"] = [*trace.tags.get("notes", ()), (
            f"{kept} op(s) whose results require grad run as the torch calls the code made, "
            f"for eager's autograd")]
    return prims


def _defines_read_sizes(node: Node, read: dict) -> bool:
    """Whether `node`'s prims make a number that is not a result of its torch call and that
    other nodes read (x[mask]'s row count, which a later selection by the mask reads): the
    call would not define it, so its prims run (torch's kernels, with autograd)."""
    results = {p.name for p in node.output_proxies}
    inside: dict[str, int] = {}
    for leaf in node.flat():
        for name in {p.name for p in leaf.inputs}:
            inside[name] = 1
    return any(isinstance(p, NumberProxy) and p.name not in results
               and read.get(p.name, 0) > inside.get(p.name, 0)
               for leaf in node.flat() for p in leaf.output_proxies)


def _kept_in_training(node: Node) -> bool:
    """Calls torch differentiates better than their prims do: attention, whose fused CPU
    and GPU kernels have fused backwards (the backward runs torch's autograd over the call
    again: prims.library_vjp). Not with dropout: that second run would draw again."""
    if node.call is None or node.call[0] is not torch.nn.functional.scaled_dot_product_attention:
        return False
    _, args, kwargs = node.call
    return not kwargs.get("dropout_p", args[4] if len(args) > 4 else 0.0)


def _versions_after(node: Node, call: Node) -> list[Node]:
    """What defines, after `call` runs in place of ref `node`'s prims, the new versions of
    tensors the prims wrote that are not the call's results (batch_norm's running stats,
    which later code reads as those versions): each is its tensor, read after the call."""
    from primtrace import prims
    after = call.output_proxies[:1]
    if not after:
        return []
    leaves = node.flat()
    made = {p.name for n in leaves for p in n.output_proxies}
    results = {p.name for p in call.output_proxies}
    defined, nodes = set(), []
    for n in leaves:
        if n.symbol.name != "copy_to" or not isinstance(n.outputs, TensorProxy):
            continue
        dst, version = n.args[0], n.outputs
        if version.name in results or (dst.name in made and dst.name not in defined):
            continue   # a result, or written through a view made inside (not left outside)
        nodes.append(Node(prims.aliased, (dst, after[0]), {}, version, source=node.source,
                          grad_enabled=node.grad_enabled))
        defined.add(version.name)
    return nodes
