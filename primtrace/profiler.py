"""Where a compiled call spends its time: every node of its execution traces timed.

``primtrace.profile(jfn, *args)`` runs the cached call of `jfn` on these arguments (compiling
it first if needed) through a twin of its generated function that reads a clock around every
node: fused regions, library calls (matmul, convolution), ops left to torch and, for a call
that needs gradients, the backward's nodes too (the backward is run with a cotangent of ones,
and the gradients it accumulates are put back as they were). What the nodes do not account
for (the generated function's own Python, the cache lookup and guards, the autograd glue) is
one row, the rest: the median time of the plain cached call minus the nodes' medians.

Times are medians over `rounds` calls; on a GPU every node is synchronized, so the sum is
slower than an unsynchronized call. Bytes are those of each node's tensor inputs and outputs
(what a kernel must move at least), with the rate they imply.
"""
from __future__ import annotations

import statistics
import time
from typing import NamedTuple

import torch

from primtrace.ir.kinds import SymbolKind
from primtrace.ir.proxy import TensorProxy
from primtrace.ir.trace import Node, Trace
from primtrace.ir.tree import tree_flatten
from primtrace.cache_slots import select
from primtrace.jit import JitFunction, assemble, jit
from primtrace.tracer.inputs import cache_key


class StageProbe:
    """The clock the profiled twin of one execution trace calls around each node."""

    def __init__(self, name: str, sync):
        self.name, self.sync = name, sync
        self.times: dict[int, list[int]] = {}
        self.recording = False
        self._t0 = 0

    def start(self) -> None:
        if self.sync is not None:
            self.sync()
        self._t0 = time.perf_counter_ns()

    def stop(self, index: int) -> None:
        if self.sync is not None:
            self.sync()
        if self.recording:
            self.times.setdefault(index, []).append(time.perf_counter_ns() - self._t0)


class _Probes:
    """What :func:`primtrace.jit.assemble` asks for: one probe per stage."""

    def __init__(self, sync):
        self.sync = sync
        self.stages: dict[str, StageProbe] = {}

    def stage(self, name: str) -> StageProbe:
        return self.stages.setdefault(name, StageProbe(name, self.sync))

    def recording(self, on: bool) -> None:
        for probe in self.stages.values():
            probe.recording = on


class Row(NamedTuple):
    """One node of a profiled call (or the rest: ``stage == ""``)."""
    stage: str        # "forward" or "backward"
    index: int        # the node's position in its execution trace
    name: str         # the node's symbol (a fused region: its executor and number)
    kind: str         # fused, library, torch, prim (see _kind) or rest
    what: str         # the torch calls a region fuses, or the op
    ms: float         # median time per call
    share: float      # of the plain cached call's median time
    bytes: int | None  # tensor bytes read and written


class Profile(NamedTuple):
    """The rows of :func:`profile`, slowest first; ``str()`` is the printed table."""
    rows: tuple[Row, ...]
    total_ms: float   # the plain cached call's median (forward and, if run, backward)
    rounds: int

    def __str__(self):
        lines = [f"{'stage':<9}{'node':<16}{'kind':<9}{'ms':>9}{'share':>8}{'MB':>9}"
                 f"{'GB/s':>8}  what"]
        for r in self.rows:
            mb = "" if r.bytes is None else f"{r.bytes / 1e6:.1f}"
            rate = "" if not r.bytes or r.ms <= 0 else f"{r.bytes / r.ms / 1e6:.1f}"
            lines.append(f"{r.stage:<9}{r.name[:15]:<16}{r.kind:<9}{r.ms:>9.3f}"
                         f"{r.share:>7.1%}{mb:>9}{rate:>8}  {r.what}")
        lines.append(f"total {self.total_ms:.3f} ms per call (median of {self.rounds})")
        return "\n".join(lines)


def profile(fn, *args, rounds: int = 20, warmup: int = 2, backward: bool | None = None,
            **kwargs) -> Profile:
    """Time every node of the cached call ``jit(fn)(*args, **kwargs)``.

    `fn` is a function :func:`primtrace.jit` returned (its cache is used and kept) or any
    function or module (jitted here). `backward` runs the backward too (default: when a
    result requires grad). The call runs ``warmup + rounds`` times through the profiled
    twin and as many times as is: Python state it writes is written that often."""
    jfn = fn if isinstance(fn, JitFunction) else jit(fn)
    out = jfn(*args, **kwargs)   # compiles on a miss
    key, leaves = cache_key(args, kwargs)
    compiled, state = select(jfn._cache.get(key), leaves)
    if compiled is None:
        raise RuntimeError("profile: the call is not in the cache after running it (does the "
                           "function compile again on every call?)")
    if backward is None:
        backward = _wanting_grad(out) != []
    inputs = (*leaves, *state)
    grads = [(t, t.grad) for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    sync = torch.cuda.synchronize if any(
        isinstance(t, torch.Tensor) and t.is_cuda for t in inputs) else None
    probes = _Probes(sync)
    twin = assemble(compiled.traces, probes)

    def profiled():
        if getattr(twin, "needs_call", False):
            return twin.call_with((args, kwargs), inputs)
        return twin(*inputs)

    def plain():
        return jfn(*args, **kwargs)

    totals = []
    try:
        for i in range(warmup + rounds):
            probes.recording(i >= warmup)
            _run(profiled, backward, None)
            elapsed = _run(plain, backward, sync)
            if i >= warmup:
                totals.append(elapsed)
    finally:
        for t, g in grads:
            t.grad = g
    total = statistics.median(totals) / 1e6
    return Profile(_rows(compiled.traces, probes, total), total, rounds)


def _wanting_grad(out) -> list[torch.Tensor]:
    return [t for t in tree_flatten(out) if isinstance(t, torch.Tensor) and t.requires_grad]


def _run(call, backward: bool, sync) -> int:
    """One call (and its backward), in nanoseconds."""
    start = time.perf_counter_ns()
    out = call()
    if backward:
        results = _wanting_grad(out)
        torch.autograd.backward(results, [torch.ones_like(t) for t in results])
    if sync is not None:
        sync()
    return time.perf_counter_ns() - start


def _rows(traces: list[Trace], probes: _Probes, total_ms: float) -> tuple[Row, ...]:
    execution = traces[-1]
    stages = {"forward": execution}
    if "backward" in execution.tags:
        stages["backward"] = execution.tags["backward"][-1]
    rows = []
    for stage, trace in stages.items():
        probe = probes.stages.get(stage)
        for i, node in enumerate(trace.nodes):
            times = probe.times.get(i) if probe is not None else None
            if not times:
                continue   # a backward not run
            ms = statistics.median(times) / 1e6
            rows.append(Row(stage, i, node.symbol.name, _kind(node), _what(node), ms,
                            ms / total_ms if total_ms else 0.0, _bytes(node)))
    rest = max(total_ms - sum(r.ms for r in rows), 0.0)   # below 0 only by noise
    rows.sort(key=lambda r: -r.ms)
    rows.append(Row("", -1, "(the rest)", "rest",
                    "generated Python, cache lookup and guards, autograd glue", rest,
                    rest / total_ms if total_ms else 0.0, None))
    return tuple(rows)


def _kind(node: Node) -> str:
    """fused (a region's kernel), library (matmul, convolution: torch's kernels by design),
    torch (a call kept as the code made it: no ref, or kept for its kernel), prim (one prim
    run by its executor alone)."""
    if node.symbol.kind is SymbolKind.FUSED:
        return "fused"
    if node.symbol.kind is SymbolKind.OPAQUE:
        return "torch"
    if {"library", "linalg"} & set(getattr(node.symbol, "tags", ())):
        return "library"
    return "prim"


def _what(node: Node) -> str:
    """A region's torch calls in order (each once), or the node's own op."""
    if node.symbol.kind is not SymbolKind.FUSED:
        return node.symbol.name
    names = []
    for sub in node.subnodes:
        origin = sub.origin.symbol.name if sub.origin is not None else sub.symbol.name
        if origin not in names:
            names.append(origin)
    text = ", ".join(names)
    return text if len(text) <= 60 else text[:57] + "..."


def _bytes(node: Node) -> int | None:
    total = 0
    seen = set()
    for p in [*node.inputs, *node.output_proxies]:
        if not isinstance(p, TensorProxy) or p.name in seen:
            continue
        seen.add(p.name)
        numel = 1
        for n in p.shape:
            if not isinstance(n, int):
                return None   # a size known only at run time
            numel *= n
        total += numel * p.dtype.itemsize
    return total
