"""The prims stage of a trace: every node flattened to its prims and opaque calls, or, where
torch's autograd must run (the fallback, attention in training), the torch call the code
made."""
from __future__ import annotations

import torch

from primtrace.ir.proxy import NumberProxy, Proxy, TensorProxy, has_symbolic
from primtrace.ir.trace import Node, Trace
from primtrace.ir.tree import tree_flatten
from primtrace.tracer.opaque import torch_call_node


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
        call = _fused_attention(trace, node) or torch_call_node(node)
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


def _fused_attention(trace: Trace, node: Node) -> Node | None:
    """A kept attention call as ``prims.sdpa_flash`` (its output and log-sum-exp, which the
    backward reads instead of running the attention again), where eager's sdpa would run
    torch's fused CPU kernel: no mask, dropout or grouped heads; None elsewhere."""
    from primtrace import prims
    from primtrace.prims.attention import picks_flash, sdpa_arguments, stand_ins
    if node.call is None or node.call[0] is not torch.nn.functional.scaled_dot_product_attention:
        return None
    _, args, kwargs = node.call
    given = sdpa_arguments(args, kwargs)
    if given is None or given.get("attn_mask") is not None or \
            given.get("dropout_p", 0.0) or given.get("enable_gqa", False):
        return None
    q, k, v = given["query"], given["key"], given["value"]
    is_causal, scale = given.get("is_causal", False), given.get("scale")
    if not all(isinstance(t, TensorProxy) and t.ndim == 4 and t.device.type == "cpu"
               and t.dtype is q.dtype and t.dtype.is_floating_point for t in (q, k, v)) or \
            type(is_causal) is not bool or not (scale is None or type(scale) is float) or \
            not isinstance(node.outputs, TensorProxy) or \
            any(has_symbolic(t.shape) for t in (q, k, v)):
        return None
    if not picks_flash(*stand_ins((q, k, v)), is_causal, scale):
        return None
    strides = tuple(node.outputs.stride())
    _, lse = prims.attention._flash_meta(q, k, v, is_causal, scale, strides)
    return Node(prims.sdpa_flash, (q, k, v, is_causal, scale, strides), {},
                (node.outputs, trace.tensor(lse)), source=node.source,
                grad_enabled=node.grad_enabled)


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
