"""Printing traces as readable Python.

Each node prints as one assignment with the output's metadata as a comment; a ref-level
node is followed by its decomposition, nested as comments; the user's source line that
produced a node precedes it.
"""
from __future__ import annotations

import torch

from primtrace import dtypes
from primtrace.ir.proxy import NumberProxy, Proxy, TensorProxy
from primtrace.ir.kinds import SymbolKind


def format_value(v) -> str:
    if isinstance(v, Proxy):
        return v.name
    if isinstance(v, torch.dtype):
        return str(v)
    if isinstance(v, torch.device):
        return f'torch.device("{v}")'
    if isinstance(v, tuple):
        inner = ", ".join(format_value(x) for x in v)
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    if isinstance(v, list):
        return "[" + ", ".join(format_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k!r}: {format_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        return f'float("{v}")'
    if isinstance(getattr(v, "kind", None), SymbolKind):   # a symbol passed as an argument
        return v.qualname
    if isinstance(v, torch.Tensor):
        if v.ndim == 0 and v.device.type != "meta":
            return f"<constant {dtypes.short_name(v.dtype)}[] {v.item()!r}>"
        return f"<constant {dtypes.short_name(v.dtype)}{list(v.shape)}>"
    return repr(v)


def describe(p: Proxy) -> str:
    if isinstance(p, TensorProxy):
        return f'"{p.device.type} {dtypes.short_name(p.dtype)}{list(p.shape)}"'
    if isinstance(p, NumberProxy):
        return f'"{p.python_type.__name__}"'
    return '"?"'


def format_call(node) -> str:
    args = [format_value(a) for a in node.args]
    args += [f"{k}={format_value(v)}" for k, v in node.kwargs.items()]
    call = f"{node.symbol.qualname}({', '.join(args)})"
    outs = node.outputs
    if outs is None:
        return call
    target = format_value(outs) if not isinstance(outs, (tuple, list)) else ", ".join(
        "_" if o is None else format_value(o) for o in outs) or "_"
    out_proxies = [p for p in node.output_proxies if isinstance(p, (TensorProxy, NumberProxy))]
    comment = "  # " + ", ".join(f"{p.name}: {describe(p)}" for p in out_proxies) if out_proxies else ""
    executor = getattr(node, "executor", None)
    if executor is not None and executor.name != "torch" and node.symbol.kind is not SymbolKind.FUSED:
        comment += f"{'' if comment else '  #'} (by {executor.name})"  # who runs it, when not torch
    return f"{target} = {call}{comment}"


def _node_lines(node, indent: str, nested: bool, last_source: list) -> list[str]:
    lines = []
    if node.source and node.source != last_source[0] and not nested:
        lines.append(f"{indent}# {node.source}")
        last_source[0] = node.source
    prefix = f"{indent}# " if nested else indent
    lines.append(prefix + format_call(node))
    if node.symbol.kind in (SymbolKind.REF, SymbolKind.FUSED):   # what it decomposes into
        for sub in node.subnodes:
            lines += _node_lines(sub, indent + "  ", True, last_source)
    return lines


def format_trace(trace) -> str:
    params = []
    for p in trace.inputs:
        params.append(f"{p.name}: {describe(p)}")
    header = []
    if trace.stage:
        header.append(f"# {trace.stage} trace")
    header += [f"# note: {note}" for note in trace.tags.get("notes", ())]
    header.append(f"def {trace.name}({', '.join(params)}):")
    body = []
    last_source = [None]
    for node in trace.nodes:
        body += _node_lines(node, "  ", False, last_source)
    body.append(f"  return {format_value(trace.outputs)}")
    return "\n".join(header + body)
