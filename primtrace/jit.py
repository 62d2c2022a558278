"""primtrace.jit: trace a PyTorch function once per kind of input, compile it, cache it.

The pipeline of a cache miss::

    acquire (torch-level ops, refs with prims nested)  ->  prims (flattened)
      ->  optimized (passes)  ->  execution (executors claim nodes, regions fuse)
      ->  one generated Python function

A cache hit computes the key (a few attribute reads per tensor, see
:func:`primtrace.tracer.inputs.cache_key`) and calls the generated function: nothing is
traced or interpreted per node.

Python numbers are runtime inputs: only their type is in the key, unless user code (or a
ref) read the value while tracing, which marks the number *specialized*; then the entry
for that key is a table keyed by the values of the specialized numbers.
"""
from __future__ import annotations

import functools
import itertools
import threading
from typing import Callable, NamedTuple

import torch

from primtrace.executors import TORCH, Executor, default_executors
from primtrace.executors.codegen import compile_trace
from primtrace.executors.lowering import lower
from primtrace.ir.proxy import NumberProxy
from primtrace.ir.trace import Trace, current_trace
from primtrace.tracer.capture import acquire, to_prims
from primtrace.tracer.inputs import cache_key
from primtrace.tracer.passes import optimize

_Tensor = torch.Tensor
_get_default_dtype, _is_grad_enabled = torch.get_default_dtype, torch.is_grad_enabled

#: jit options and their defaults.
OPTIONS = {
    "cache_size": 256,                  # compiled entries kept (the oldest go first)
    "optimize": True,                   # run the default passes (DCE, CSE, conversions)
    "remove_lossy_round_trips": False,  # drop f32 -> f16 -> f32 roundings: changes numerics
}
STAGES = ("acquisition", "prims", "optimized", "execution")


class CacheInfo(NamedTuple):
    hits: int
    misses: int
    maxsize: int
    currsize: int


class Compiled:
    """One compiled trace: the generated function and the traces that led to it."""
    __slots__ = ("fn", "traces", "specialized")

    def __init__(self, fn: Callable, traces: list[Trace], specialized: tuple):
        self.fn, self.traces, self.specialized = fn, traces, specialized


class _Specialized:
    """The entries of one key whose trace read some numbers' values: keyed by those values."""
    __slots__ = ("positions", "table")

    def __init__(self, positions: tuple, table: dict | None = None):
        self.positions, self.table = positions, dict(table or {})

    def values(self, leaves) -> tuple:
        return tuple([repr(leaves[i]) for i in self.positions])  # repr: -0.0 != 0.0, nan == nan


def _check_options(options: dict) -> dict:
    unknown = set(options) - set(OPTIONS)
    if unknown:
        raise TypeError(f"unknown primtrace option(s) {sorted(unknown)}; known: {sorted(OPTIONS)}")
    return {**OPTIONS, **options}


def _executor_list(executors) -> list[Executor]:
    chosen = default_executors() if executors is None else list(executors)
    return [e for e in chosen if e is not TORCH] + [TORCH]


def build(fn, args: tuple, kwargs: dict, executors: list[Executor], options: dict,
          stop: str | None = None) -> list[Trace]:
    """The traces of `fn` on these inputs, in pipeline order, up to stage `stop`."""
    acquisition = acquire(fn, args, kwargs)
    traces = [acquisition]
    if stop != "acquisition":
        traces.append(to_prims(acquisition))
    if stop not in ("acquisition", "prims"):
        prims = traces[-1]
        optimized = (optimize(prims, remove_lossy_round_trips=options["remove_lossy_round_trips"])
                     if options["optimize"] else prims.derive(prims.nodes, "optimized"))
        traces.append(optimized)
    if stop is None or stop == "execution":
        traces.append(lower(traces[-1], executors))
    return traces


def compile_fn(fn, args, kwargs, executors, options) -> Compiled:
    traces = build(fn, args, kwargs, executors, options)
    run, source = compile_trace(traces[-1])
    traces[-1].tags["python"] = source
    specialized = tuple(i for i, p in enumerate(traces[0].inputs)
                        if isinstance(p, NumberProxy) and p.specialized)
    return Compiled(run, traces, specialized)


class JitFunction:
    """The callable ``jit`` returns: cached compiled versions of `fn`, one per input kind.

    The hit path takes no lock: a dict lookup is atomic, and so is ``next`` on the
    ``itertools.count`` that counts hits. Compiles are serialized per function and
    re-check the cache, so concurrent first calls compile once. The cache is bounded and
    evicts its oldest entry.
    """

    def __init__(self, fn: Callable, executors=None, **options):
        self._fn = fn
        self._executors = _executor_list(executors)
        self._options = _check_options(options)
        self._maxsize = int(self._options["cache_size"])
        self._cache: dict = {}
        self._lock = threading.RLock()   # compiles and cache updates, one at a time
        self._hits = itertools.count()   # next() is atomic: no lock on the hit path
        self._misses = 0
        self._last: list[Trace] | None = None
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        if not kwargs:  # the common case inlined: plain tensors only (same key as cache_key)
            key = [_get_default_dtype(), _is_grad_enabled()]
            for x in args:
                if type(x) is not _Tensor:
                    break
                key.append((x.dtype, x.shape, x.device,
                            True if x.is_contiguous() else x.stride(), x.requires_grad))
            else:
                entry = self._cache.get(tuple(key))
                if entry.__class__ is Compiled:
                    next(self._hits)
                    return entry.fn(*args)
        key, leaves = cache_key(args, kwargs)
        entry = self._cache.get(key)
        if entry.__class__ is Compiled:
            next(self._hits)
            return entry.fn(*leaves)
        if entry is not None:
            entry = entry.table.get(entry.values(leaves))
            if entry is not None:
                next(self._hits)
                return entry.fn(*leaves)
        if current_trace() is not None:  # called while tracing an outer function: inline it
            return self._fn(*args, **kwargs)
        return self._miss(key, leaves, args, kwargs)(*leaves)

    def _lookup(self, key, leaves):
        entry = self._cache.get(key)
        if entry.__class__ is _Specialized:
            entry = entry.table.get(entry.values(leaves))
        return entry

    def _miss(self, key, leaves, args, kwargs) -> Callable:
        with self._lock:
            entry = self._lookup(key, leaves)  # another thread may have compiled it meanwhile
            if entry is not None:
                next(self._hits)
                return entry.fn
            compiled = compile_fn(self._fn, args, kwargs, self._executors, self._options)
            self._misses += 1
            self._insert(key, leaves, compiled)
            self._last = compiled.traces
            return compiled.fn

    def _insert(self, key, leaves, compiled: Compiled) -> None:
        cache = dict(self._cache)  # readers see either the old or the new dict, never a mix
        if not compiled.specialized:
            cache[key] = compiled
        else:
            entry = cache.get(key)
            positions = set(compiled.specialized)
            if entry.__class__ is _Specialized and positions <= set(entry.positions):
                entry = _Specialized(entry.positions, entry.table)
            else:  # new numbers became specialized: older entries were keyed on fewer values
                entry = _Specialized(tuple(sorted(positions | set(getattr(entry, "positions", ())))))
            entry.table[entry.values(leaves)] = compiled
            while len(entry.table) > self._maxsize:
                del entry.table[next(iter(entry.table))]
            cache.pop(key, None)
            cache[key] = entry
        size = sum(len(e.table) if e.__class__ is _Specialized else 1 for e in cache.values())
        while size > self._maxsize:  # evict the oldest keys until the compiled count fits
            oldest = cache.pop(next(iter(cache)))
            size -= len(oldest.table) if oldest.__class__ is _Specialized else 1
        self._cache = cache

    def __get__(self, obj, objtype=None):
        return self if obj is None else functools.partial(self, obj)

    def cache_info(self) -> CacheInfo:
        with self._lock:
            hits = int(repr(self._hits)[len("count("):-1])  # the count's next value
            size = sum(len(e.table) if e.__class__ is _Specialized else 1
                       for e in self._cache.values())
            return CacheInfo(hits, self._misses, self._maxsize, size)

    def cache_clear(self) -> None:
        with self._lock:
            self._cache = {}
            self._hits = itertools.count()
            self._misses = 0

    def __repr__(self):
        return f"<primtrace.jit of {getattr(self._fn, '__qualname__', self._fn)!r}>"


def jit(fn: Callable | None = None, *, executors=None, **options):
    """Compile `fn` (plain PyTorch code) through primtrace; usable as ``@jit`` or ``@jit(...)``.

    `executors` are tried in priority order; the torch executor is always appended last.
    Options: see :data:`OPTIONS`.
    """
    if fn is None:
        return lambda f: JitFunction(f, executors, **options)
    return JitFunction(fn, executors, **options)


def _jitted(jfn) -> JitFunction:
    if not isinstance(jfn, JitFunction):
        raise TypeError(f"expected a function returned by primtrace.jit, got {type(jfn).__name__}")
    return jfn


def last_traces(jfn) -> list[Trace]:
    """The traces of `jfn`'s last compile: acquisition, prims, optimized, execution."""
    traces = _jitted(jfn)._last
    if traces is None:
        raise RuntimeError("this function has not been compiled yet: call it first")
    return list(traces)


def last_trace(jfn) -> Trace:
    """The execution trace of `jfn`'s last compile (what a cached call runs)."""
    return last_traces(jfn)[-1]


def cache_info(jfn) -> CacheInfo:
    """Hits, misses, maximum and current size of `jfn`'s cache."""
    return _jitted(jfn).cache_info()


def trace(fn: Callable, *, stage: str = "acquisition", executors=None, **options):
    """``trace(fn)(*args)`` returns the trace of `fn` at `stage` without running it.

    The acquisition trace (the default) shows torch-level ops with their prims nested;
    "prims", "optimized" and "execution" are the later stages.
    """
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
    opts = _check_options(options)
    target = fn._fn if isinstance(fn, JitFunction) else fn

    @functools.wraps(target)
    def tracer(*args, **kwargs) -> Trace:
        return build(target, args, kwargs, _executor_list(executors), opts, stop=stage)[-1]
    return tracer


class Explanation(NamedTuple):
    """What `explain` found: the acquisition trace and the ops that run outside the refs."""
    trace: Trace
    opaque: list  # (torch name, user source line) per opaque node, in trace order

    def __str__(self):
        if not self.opaque:
            return f"{self.trace.name}: every op maps to primtrace refs"
        lines = [f"{self.trace.name}: {len(self.opaque)} op(s) have no ref and run as opaque "
                 f"torch calls (torch executor, no fusion):"]
        lines += [f"  {name}" + (f"    # {source}" if source else "") for name, source in self.opaque]
        return "\n".join(lines)


def explain(fn: Callable, *args, **kwargs) -> Explanation:
    """Trace `fn` on these inputs (without running it) and list the ops primtrace has no ref for."""
    target = fn._fn if isinstance(fn, JitFunction) else fn
    acquisition = acquire(target, args, kwargs)
    opaque = [(n.symbol.qualname, n.source) for n in acquisition.flat_nodes()
              if n.symbol.kind == "opaque"]
    return Explanation(acquisition, opaque)


def kernel_source(jfn) -> str:
    """The generated source of every fused region of `jfn`'s last execution trace."""
    sources = [f"# {n.symbol.name}\n{n.symbol.source}" for n in last_trace(jfn).nodes
               if n.symbol.kind == "fused" and getattr(n.symbol, "source", None)]
    return "\n\n".join(sources)
