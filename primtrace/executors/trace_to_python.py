"""Compile an execution trace into one plain Python function.

Each node becomes one call of its executor's implementation, bound as a global of the
generated module, so a cached call runs straight-line Python: no per-node dispatch, no
dictionary of values. Intermediates are deleted after their last use, as eager frees its
temporaries. The source is kept (``fn.__primtrace_source__``) and registered with linecache,
so tracebacks show the generated lines.
"""
from __future__ import annotations

import itertools
import linecache
import math
import re

import torch

from primtrace.ir.proxy import Proxy
from primtrace.ir.symbol import SymbolKind
from primtrace.ir.trace import Node, Trace
from primtrace.ir.tree import proxies_in

_ids = itertools.count()


class _Emitter:
    def __init__(self):
        self.globals: dict = {}
        self._by_id: dict[int, str] = {}

    def bind(self, value, hint: str) -> str:
        """A global name for `value` (one per object), readable where a hint allows."""
        name = self._by_id.get(id(value))
        if name is None:
            base = "__pt_" + re.sub(r"\W", "_", hint)
            name, i = base, 1
            while name in self.globals:
                name, i = f"{base}_{i}", i + 1
            self.globals[name] = value
            self._by_id[id(value)] = name
        return name

    def expr(self, v) -> str:
        """A Python expression for an argument or result: proxies by name, constants inline."""
        if isinstance(v, Proxy):
            return v.name
        t = type(v)
        if v is None or t is bool or t is int or t is str:
            return repr(v)
        if t is float and math.isfinite(v):
            return repr(v)
        if t is tuple:
            items = [self.expr(x) for x in v]
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        if t is list:
            return "[" + ", ".join(self.expr(x) for x in v) + "]"
        if t is dict:
            return "{" + ", ".join(f"{self.expr(k)}: {self.expr(x)}" for k, x in v.items()) + "}"
        if t is slice and proxies_in(v):   # x[:n] with n a symbolic size
            return f"slice({self.expr(v.start)}, {self.expr(v.stop)}, {self.expr(v.step)})"
        if isinstance(v, tuple) and proxies_in(tuple(v)):  # a namedtuple or torch.return_types
            items = self.expr(tuple(v))
            if hasattr(t, "_fields"):   # a namedtuple takes its fields as arguments
                items = f"*{items}"
            return f"{self.bind(t, t.__name__)}({items})"
        if isinstance(v, torch.dtype):
            return self.bind(v, str(v).replace("torch.", ""))
        return self.bind(v, "k")

    def targets(self, outputs) -> tuple[str, list[str]]:
        """(assignment target, extra lines) that bind the output proxies of a call's result."""
        if isinstance(outputs, Proxy):
            return outputs.name, []
        if not proxies_in(outputs):
            return "", []
        if isinstance(outputs, (tuple, list)) and not any(
                isinstance(x, dict) for x in _containers(outputs)):
            return self._pattern(outputs), []
        tmp = f"__pt_tmp{next(_ids)}"
        return tmp, [f"{p.name} = {tmp}{path}" for p, path in _paths(outputs, "")]

    def _pattern(self, outputs) -> str:
        if isinstance(outputs, Proxy):
            return outputs.name
        if isinstance(outputs, (tuple, list)):
            items = [self._pattern(x) for x in outputs]
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")" if items else "()"
        return "_"


def _containers(obj):
    if isinstance(obj, (tuple, list, dict)):
        yield obj
        for x in (obj.values() if isinstance(obj, dict) else obj):
            yield from _containers(x)


def _paths(obj, path):
    if isinstance(obj, Proxy):
        yield obj, path
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, f"{path}[{k!r}]")
    elif isinstance(obj, (tuple, list)):
        for i, v in enumerate(obj):
            yield from _paths(v, f"{path}[{i}]")


def _fresh_constants(expr: str, em: _Emitter, made_while_tracing: set) -> str:
    """A returned tensor that tracing made (a ref's constant) is copied on every call, since
    eager makes a new one each time; a tensor the user's code closes over is returned as is."""
    for name, value in em.globals.items():
        if isinstance(value, torch.Tensor) and id(value) in made_while_tracing:
            expr = re.sub(rf"\b{name}\b", f"{name}.clone()", expr)
    return expr


def implementation(node: Node):
    """The callable that runs `node`: a fused node's compiled region, else its executor's impl."""
    if node.symbol.kind is SymbolKind.FUSED:
        return node.symbol.impl
    return node.executor.implementation(node)


def compile_trace(trace: Trace, probe=None):
    """A Python function taking the trace's inputs positionally and returning its outputs.

    `probe` (:class:`primtrace.profiler.StageProbe`) times every node: ``probe.start()``
    before its lines, ``probe.stop(i)`` after them."""
    em = _Emitter()
    params = [p.name for p in trace.inputs]
    input_names = set(params)
    last_use: dict[str, int] = {}
    for i, node in enumerate(trace.nodes):
        for p in node.inputs:
            last_use[p.name] = i
    returned = {p.name for p in proxies_in(trace.outputs)}
    entry_grad = trace.tags.get("grad_enabled")
    blocks: list[tuple[bool | None, list[str]]] = []   # (grad mode to switch to, lines)
    for i, node in enumerate(trace.nodes):
        fn = em.bind(implementation(node), node.symbol.name)
        args = [em.expr(a) for a in node.args] + [f"{k}={em.expr(v)}" for k, v in node.kwargs.items()]
        call = f"{fn}({', '.join(args)})"
        used = [p for p in node.output_proxies if p.name in last_use and last_use[p.name] > i
                or p.name in returned]
        target, extra = em.targets(node.outputs) if used else ("", [])
        node_lines = [f"{target} = {call}" if target else call] + extra
        read_later = [p for p in used if p.name in last_use and last_use[p.name] > i]
        if node.symbol.kind is SymbolKind.OPAQUE and read_later:
            node_lines += _layout_checks(node, read_later, em)
        dead = sorted({p.name for p in node.inputs if last_use[p.name] == i
                       and p.name not in returned and p.name not in input_names})
        if dead:
            node_lines.append(f"del {', '.join(dead)}")
        if probe is not None:
            timer = em.bind(probe, "probe")
            node_lines = [f"{timer}.start()", *node_lines, f"{timer}.stop({i})"]
        mode = node.grad_enabled if node.grad_enabled is not None and entry_grad is not None \
            and node.grad_enabled != entry_grad else None
        if blocks and blocks[-1][0] == mode:
            blocks[-1][1].extend(node_lines)
        else:
            blocks.append((mode, node_lines))
    lines = [f"def {_fn_name(trace)}({', '.join(params)}):"]
    for mode, block in blocks:
        if mode is None:
            lines += [f"    {line}" for line in block]
            continue
        switch = em.bind(torch._C._set_grad_enabled, "set_grad_enabled")
        lines += [f"    {switch}({mode})  # as the traced code did (torch.no_grad() inside)",
                  "    try:", *[f"        {line}" for line in block],
                  "    finally:", f"        {switch}({entry_grad})"]
    made = trace.tags.get("trace_time_tensors", {})
    returned_expr = _fresh_constants(em.expr(trace.outputs), em, made)
    rebuild = trace.tags.get("output_rebuild")
    if rebuild is not None:   # the function's own containers (tracer/outputs.py)
        returned_expr = f"{em.bind(rebuild, 'rebuild_outputs')}({returned_expr})"
    lines.append(f"    return {returned_expr}")
    source = "\n".join(lines) + "\n"
    filename = f"<primtrace:{trace.name}:{next(_ids)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = dict(em.globals)
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - our own generated code
    fn = namespace[_fn_name(trace)]
    fn.__primtrace_source__ = source
    plain = len(blocks) == 1 and blocks[0][0] is None and len(blocks[0][1]) == 1 and not probe
    return (_forwarded(trace) if plain else None) or fn, source


def _forwarded(trace: Trace):
    """The one callable a trace only forwards its inputs to (``return add(a, b)``), or None.

    Calling it directly saves the generated function's frame on the cheapest traces."""
    if len(trace.nodes) != 1 or "output_rebuild" in trace.tags:
        return None
    node = trace.nodes[0]
    if (node.kwargs or node.outputs is not trace.outputs or not isinstance(node.outputs, Proxy)
            or len(node.args) != len(trace.inputs)
            or any(a is not p for a, p in zip(node.args, trace.inputs))):
        return None
    return implementation(node)


def _layout_checks(node: Node, outputs: list, em: _Emitter) -> list[str]:
    """Lines that give an opaque call's tensor `outputs` read by later nodes the strides the
    trace assumed (a value only returned keeps the layout torch gave it, as in eager).

    Those strides came from running the op on meta tensors, and meta kernels do not always
    lay out outputs as the CPU or CUDA kernels do (scaled_dot_product_attention on transposed
    views); fused kernels and later metadata were computed from them. A tensor whose real
    strides differ is copied into the assumed layout (rare; the check costs a tuple compare).
    """
    if "inplace" in node.symbol.tags:
        return []   # the written tensor itself, whose layout is known
    lines = []
    for p in outputs:
        if isinstance(p, torch.Tensor) and sum(not isinstance(n, int) or n > 1
                                               for n in p.shape) >= 2 and all(
                isinstance(s, int) for s in p.stride()):   # (symbolic strides: no kernel
            # of ours reads such a tensor; torch's calls take any layout)
            strides = tuple(p.stride())
            fix = em.bind(with_strides, "with_strides")
            lines.append(f"if {p.name}.stride() != {strides!r}: "
                         f"{p.name} = {fix}({p.name}, {strides!r})")
    return lines


def with_strides(t: torch.Tensor, strides: tuple) -> torch.Tensor:
    """A copy of `t` laid out with `strides` (autograd records the copy); `t` itself when only
    the strides of size-1 dims differ (they address nothing; inputs of one cache key may
    differ there, and a copy would cut a view off its base)."""
    if all(n <= 1 or a == b for n, a, b in zip(t.shape, t.stride(), strides)):
        return t
    out = torch.empty_strided(t.shape, strides, dtype=t.dtype, device=t.device)
    return out.copy_(t)


def _fn_name(trace: Trace) -> str:
    return f"__pt_run_{trace.name}" if trace.name.isidentifier() else "__pt_run"
