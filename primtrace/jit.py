"""primtrace.jit: trace a PyTorch function once per kind of input, compile it, cache it.

The pipeline of a cache miss::

    acquire (torch-level ops, refs with prims nested)  ->  prims (flattened)
      ->  optimized (passes)  ->  execution (executors claim nodes, regions fuse)
      ->  one generated Python function

A cache hit computes the key (a few attribute reads per tensor, see
:func:`primtrace.tracer.inputs.cache_key`) and calls the generated function: nothing is
traced or interpreted per node.

State the function reads besides its arguments (a module's parameters, buffers and
attributes, globals, closures) is not in the key: a trace that read some carries a guard
(:mod:`primtrace.tracer.state`) that fetches the state tensors for the call and checks
what the trace assumed; a key may hold a few such variants (train and eval, say), tried
newest first, and a call none of them accepts compiles another.

Python numbers are runtime inputs: only their type is in the key, unless user code (or a
ref) read the value while tracing, which marks the number *specialized*; then the entry
for that key is a table keyed by the values of the specialized numbers.

A miss that differs from a cached entry only in some dims' sizes traces those dims symbolic
(:mod:`primtrace.tracer.dynamic`; option ``dynamic``): later sizes run that trace while its
size guards hold, and each new size's key is then cached like any other.

A miss after the first compile is a recompile: before compiling, the call is compared with
the nearest cached entry, and the differences are kept as its reason
(:mod:`primtrace.recompiles`, ``cache_info(jfn).recompiles``); nothing of it runs on a hit.
"""
from __future__ import annotations

import functools
import itertools
import threading
import warnings
import types
from typing import Callable, NamedTuple

import torch

from primtrace.autodiff.function import Fallback, Plan, split, wanted_inputs
from primtrace.cache_slots import (Compiled, Guarded, Specialized, compiled_in, select,
                                   size as slot_size, with_variant)
from primtrace.executors import TORCH, Executor, default_executors
from primtrace.executors.base import FusionExecutor
from primtrace.executors.buffer_reuse import reuse_buffers
from primtrace.executors.execution_trace import lower
from primtrace.executors.trace_to_python import compile_trace
from primtrace.ir.proxy import NumberProxy
from primtrace.ir.symbol import SymbolKind
from primtrace.ir.trace import Trace, current_trace
from primtrace.ir.size_guards import GuardSet
from primtrace.recompiles import (Change, Counters, CounterWarning, Recompile, RecompileLog,
                                  miss_changes)
from primtrace.tracer import dynamic, layout
from primtrace.tracer import autocast
from primtrace.tracer.capture import TracingError, acquire
from primtrace.tracer.prims_stage import to_prims
from primtrace.tracer.inputs import _positional_names, cache_key
from primtrace.tracer.passes import optimize

_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
_get_default_dtype, _is_grad_enabled = torch.get_default_dtype, torch.is_grad_enabled
_any_autocast = torch._C._is_any_autocast_enabled
try:   # what Dynamo checks tensors with; without it the hit path computes the key
    from torch._C._dynamo.guards import TensorGuards as _TensorGuards
except ImportError:
    _TensorGuards = None
try:   # built from primtrace/_hitpath.c at install; optional
    from primtrace._hitpath import HitPath as _CHitPath
except ImportError:
    _CHitPath = None

class _Counter(Exception):
    """A miss whose key now runs eagerly (recompiles.Counters)."""


class AutocastWarning(UserWarning):
    """A jitted function called under torch.autocast runs eagerly: its casts are not modelled."""


#: jit options and their defaults.
OPTIONS = {
    "cache_size": 256,                  # compiled entries kept (the oldest go first)
    "optimize": True,                   # run the default passes (DCE, CSE, conversions)
    "remove_lossy_round_trips": False,  # drop f32 -> f16 -> f32 roundings: changes numerics
    "recompile_limit": 8,               # warn once when this many recompiles (None: never)
    "saved": "min_cut",                 # training: save a min-cut, recompute cheap values in
                                        # the backward; "save_all": more memory, less work
    "sink_selections": True,            # x[mask] that a sum reduces: computed on every row,
                                        # summed where the mask is True (tracer/selections.py)
    "dynamic": None,                    # symbolic input dims (tracer/dynamic.py): None on the
                                        # second distinct size, True from the first, False never
    "channels_last": True,              # a convolution network's image argument traced on a
                                        # channels_last copy (tracer/layout.py); False: never
}
STAGES = ("acquisition", "prims", "optimized", "execution")


class CacheInfo(NamedTuple):
    """A jitted function's cache: `hits`, `misses` (compiles), `maxsize`, `currsize`, and
    `recompiles`: every compile after the first (since ``cache_clear``), oldest first, each
    a :class:`~primtrace.recompiles.Recompile` saying why (``str(r)``, ``r.reason``)."""
    hits: int
    misses: int
    maxsize: int
    currsize: int
    recompiles: tuple[Recompile, ...] = ()


def _tensor_guards(args: tuple, kwargs: dict):
    """(TensorGuards of args, grad mode, default dtype), when every argument is a tensor or
    a parameter (the backend passes a graph's parameters as arguments; TensorGuards checks
    each argument's exact type)."""
    if _TensorGuards is None or kwargs or not args or any(
            type(x) is not _Tensor and type(x) is not _Parameter for x in args):
        return None
    guards = _TensorGuards(*args, dynamic_dims_sizes=None, dynamic_dims_strides=None)
    return guards.check, _is_grad_enabled(), _get_default_dtype()


def _check_options(options: dict) -> dict:
    unknown = set(options) - set(OPTIONS)
    if unknown:
        raise TypeError(f"unknown primtrace option(s) {sorted(unknown)}; known: {sorted(OPTIONS)}")
    limit = options.get("recompile_limit", 1)
    if limit is not None and (type(limit) is not int or limit < 1):
        raise ValueError(f"recompile_limit must be a positive int or None, got {limit!r}")
    if options.get("saved", "min_cut") not in ("min_cut", "save_all"):
        raise ValueError(f"saved must be 'min_cut' or 'save_all', got {options['saved']!r}")
    if options.get("dynamic") not in (None, True, False):
        raise ValueError(f"dynamic must be None, True or False, got {options['dynamic']!r}")
    return {**OPTIONS, **options}


def _executor_list(executors) -> list[Executor]:
    chosen = default_executors() if executors is None else list(executors)
    return [e for e in chosen if e is not TORCH] + [TORCH]


def build(fn, args: tuple, kwargs: dict, executors: list[Executor], options: dict,
          stop: str | None = None) -> list[Trace]:
    """The traces of `fn` on these inputs, in pipeline order, up to stage `stop`.

    A call that needs gradients (grad mode on, an input requires grad) gets a forward trace
    that also returns what its backward reads; the backward's traces (prims, optimized,
    execution) are the last trace's ``tags["backward"]`` (:mod:`primtrace.autodiff.function`)."""
    acquisition = acquire(fn, args, kwargs)
    if options["channels_last"]:
        acquisition = layout.channels_last_trace(
            acquisition, lambda chosen: acquire(fn, args, kwargs, channels_last=chosen))
    dynamic.check_growth(acquisition)   # state that grows each call: trace it symbolic now
    traces = [acquisition]
    if stop == "acquisition":
        return traces
    prims, backward = _differentiated(acquisition, options["saved"])
    traces.append(prims)
    if stop == "prims":
        return traces
    lowered = stop in (None, "execution")
    traces += _finish(prims, executors, options, lowered)
    if backward is not None:
        backward_traces = [backward.trace, *_finish(backward.trace, executors, options, lowered)]
        if lowered and _has_fusion(executors) and not _fuses(traces[-1]) \
                and not _fuses(backward_traces[-1]):
            return [acquisition, *_calls_for_autograd(acquisition, executors, options)]
        traces[-1].tags["backward"] = backward_traces
    return traces


def _has_fusion(executors) -> bool:
    return any(isinstance(e, FusionExecutor) for e in executors)


def _fuses(execution: Trace) -> bool:
    return any(n.symbol.kind is SymbolKind.FUSED for n in execution.nodes)


def _calls_for_autograd(acquisition: Trace, executors, options) -> list[Trace]:
    """[prims, optimized, execution] where the calls the code made run with torch's autograd:
    used where neither the forward nor the backward fuses a region (on a GPU, where the cost
    model leaves small or reducing prims to torch), since their prims, one torch call each,
    run more kernels than those calls and torch's backward (W13's step on an H200: 3.4x)."""
    prims = to_prims(acquisition)
    prims.tags["notes"] = [*prims.tags.get("notes", ()),
                           "nothing fuses in the forward or backward: autograd runs torch's calls"]
    prims.tags["unfused_training"] = True
    return [prims, *_finish(prims, executors, options)]


def _differentiated(acquisition: Trace, policy: str):
    """(prims trace, Backward or None): the forward of a call that needs gradients, or the
    plain prims trace (a fallback's keeps torch's calls for autograd, with a note why)."""
    wrt = wanted_inputs(acquisition)
    if not wrt:
        return to_prims(acquisition), None
    prims = to_prims(acquisition, keep_autograd_calls=False)
    try:
        forward, backward = split(prims, wrt, policy)
    except Fallback as e:
        prims = to_prims(acquisition)
        prims.tags["notes"] = [*prims.tags.get("notes", ()),
                               f"no fused backward, autograd runs op by op: {e}"]
        prims.tags["fallback"] = str(e)
        return prims, None
    if not backward.cotangents:   # no result needs grad: a plain trace run without grad
        forward.outputs = prims.outputs
        if "output_rebuild" in prims.tags:
            forward.tags["output_rebuild"] = prims.tags["output_rebuild"]
        del forward.tags["training"], forward.tags["differentiated"]
        forward.tags["without_grad"] = True
        return forward, None
    return forward, backward


def _finish(trace: Trace, executors, options, lowered: bool = True) -> list[Trace]:
    """[optimized, execution] of a prims trace ([optimized] when not `lowered`)."""
    optimized = (optimize(trace, remove_lossy_round_trips=options["remove_lossy_round_trips"],
                          sink_selections=options["sink_selections"])
                 if options["optimize"] else trace.derive(trace.nodes, "optimized"))
    return [optimized, reuse_buffers(lower(optimized, executors))] if lowered else [optimized]


def compile_fn(fn, args, kwargs, executors, options) -> Compiled:
    traces = build(fn, args, kwargs, executors, options)
    run = assemble(traces)
    specialized = tuple(i for i, p in enumerate(traces[0].inputs)
                        if isinstance(p, NumberProxy) and p.specialized)
    guard = traces[0].tags.get("guard")
    return Compiled(run, traces, specialized, None if guard is None else guard.check,
                    None if specialized else _tensor_guards(args, kwargs))


def assemble(traces: list[Trace], probe=None) -> Callable:
    """What a cached call runs for `traces` (build's): the execution trace compiled, joined
    to its backward's through autograd, and to the writes it replays. `probe` times each
    node (:mod:`primtrace.profiler`); without it the generated sources are kept in the
    traces' tags."""
    execution = traces[-1]
    run, source = compile_trace(execution, probe=probe and probe.stage("forward"))
    backward = execution.tags.get("backward")
    if probe is None:
        execution.tags["python"] = source
    if backward is not None:
        backward_run, backward_source = compile_trace(
            backward[-1], probe=probe and probe.stage("backward"))
        if probe is None:
            backward[-1].tags["python"] = backward_source
        run = Plan(run, backward_run, traces[1], traces[0].outputs,
                   traces[0].tags.get("output_rebuild"))
    elif execution.tags.get("without_grad"):
        run = torch.no_grad()(run)
    replay = traces[0].tags.get("replay")
    if replay is not None:   # Python state the function writes (primtrace.tracer.pystate)
        run = replay.wrap(run)
    return run


def _run(compiled, args, kwargs, leaves, state):
    if getattr(compiled.fn, "needs_call", False):   # it writes into argument containers
        return compiled.fn.call_with((args, kwargs), (*leaves, *state))
    return compiled.fn(*leaves, *state)


class HitPath(NamedTuple):
    """What a call of a JitFunction runs first, and how to steer it.

    `call` checks the entry the last call used (torch's C++ TensorGuards over the example
    arguments, with the grad mode and default dtype) and runs it; anything else goes to the
    slow path set with `set_slow`. `remember(entry)` points it at an entry, a tuple (check,
    grad_mode, dtype, fn, guard), or at nothing (None); `served()` counts the calls it ran.
    This path is all that a cached call of a small op costs on top of the op: ~0.25 us in C
    (primtrace/_hitpath.c), ~0.4 us in the Python twin used where the C one is not built."""
    call: Callable
    remember: Callable
    set_slow: Callable
    served: Callable


def _c_hit_path() -> HitPath:
    path = _CHitPath(_is_grad_enabled, _get_default_dtype, _any_autocast)
    return HitPath(path, path.remember, lambda slow: setattr(path, "slow", slow),
                   lambda: path.hits)


def _python_hit_path() -> HitPath:
    """The hit path in Python: the entry lives in one closure cell holding a tuple, so
    swapping it is atomic and reading it is the cheapest lookup Python has."""
    recent = _NOTHING
    slow = None
    hits = itertools.count()

    def call(*args, **kwargs):
        check, grad_mode, dtype, fn, guard = recent
        try:
            hit = check(*args)
        except TypeError:   # another number of arguments
            hit = False
        if (hit and not kwargs and _is_grad_enabled() is grad_mode
                and _get_default_dtype() is dtype and not _any_autocast()):
            if guard is None:
                next(hits)
                return fn(*args)
            state = guard(args)
            if state is not None:
                next(hits)
                return fn(*args, *state)
        return slow(args, kwargs)

    def remember(entry):
        nonlocal recent
        recent = _NOTHING if entry is None else entry

    def set_slow(path):
        nonlocal slow
        slow = path

    return HitPath(call, remember, set_slow, lambda: _counted(hits))


def _hit_path() -> HitPath:
    return _python_hit_path() if _CHitPath is None else _c_hit_path()


def _never(*args):
    return False


_NOTHING = (_never, None, None, None, None)   # what the hit path checks before any call


def _counted(counter: itertools.count) -> int:
    return int(repr(counter)[len("count("):-1])  # the count's next value


class JitFunction(functools.partial):
    """The callable ``jit`` returns: cached compiled versions of `fn`, one per input kind.

    It is a ``functools.partial`` of its hit path (:func:`_hit_path`) because calling a
    partial is C: a Python ``__call__`` would add a bound method and a frame to every call.
    The hit path takes no lock: a dict lookup is atomic, and so is ``next`` on the
    ``itertools.count`` that counts hits. Compiles are serialized per function and
    re-check the cache, so concurrent first calls compile once. The cache is bounded and
    evicts its oldest entry.
    """

    def __new__(cls, fn: Callable, executors=None, **options):
        if not callable(fn):
            raise TypeError(f"primtrace.jit expects a function or an nn.Module, got "
                            f"{type(fn).__name__}")
        path = _hit_path()
        self = super().__new__(cls, path.call)
        self._fn = fn
        self._executors = _executor_list(executors)
        self._options = _check_options(options)
        self._maxsize = int(self._options["cache_size"])
        self._cache: dict = {}
        self._lock = threading.RLock()   # compiles and cache updates, one at a time
        self._hits = itertools.count()   # next() is atomic: no lock on the hit path
        self._hits_cleared = 0           # hits before the last cache_clear
        self._misses = 0
        self._recompiles = RecompileLog(fn, self._options["recompile_limit"])
        self._evicted: dict = {}   # hashes of keys evicted lately (a recompile reason)
        self._dynamic = dynamic.Dynamic(self._options["dynamic"])   # traces of symbolic dims
        self._last: list[Trace] | None = None
        self._recent: Compiled | None = None   # what the hit path checks first
        self._warned_autocast = False
        self._autocast_eager: dict = {}   # keys under autocast whose casts are not modelled
        self._counters = Counters()   # keys whose state numbers change on every call: eager
        self._path = path
        path.set_slow(self._lookup)
        if isinstance(fn, torch.nn.Module):   # attributes stay the module's (see __getattr__)
            self.__wrapped__, self.__doc__ = fn, type(fn).__doc__
        else:
            functools.update_wrapper(self, fn)
        return self

    def __getattr__(self, name):
        """``jit(module).eval()``, ``.parameters()``... reach the module itself."""
        fn = self.__dict__.get("_fn")
        if isinstance(fn, torch.nn.Module):
            return getattr(fn, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # partial's own attributes would hide a module's of the same name (``jit(model).args``)
    func = property(lambda self: self.__getattr__("func"))
    args = property(lambda self: self.__getattr__("args"))
    keywords = property(lambda self: self.__getattr__("keywords"))

    def _use(self, compiled: Compiled) -> None:
        """Make `compiled` the entry the hit path checks first (when it can be checked)."""
        if compiled.recent is not None and compiled is not self._recent:
            self._recent = compiled
            self._path.remember((*compiled.recent, compiled.fn, compiled.guard))

    def _lookup(self, args: tuple, kwargs: dict):
        """A call the hit path did not serve: the keyed cache, then a compile."""
        if _any_autocast():
            return self._under_autocast(args, kwargs)
        if not kwargs:  # the common case inlined: plain tensors only (same key as cache_key)
            key = [_get_default_dtype(), _is_grad_enabled()]
            for x in args:
                if type(x) is not _Tensor:
                    break
                key.append((x.dtype, x.shape, x.device,
                            True if x.is_contiguous() else x.stride(), x.requires_grad))
            else:
                key = tuple(key)
                entry = self._cache.get(key)
                if entry.__class__ is Compiled:
                    next(self._hits)
                    self._use(entry)
                    return entry.fn(*args)
                return self._call(entry, key, list(args), args, kwargs)
        key, leaves = cache_key(args, kwargs)
        entry = self._cache.get(key)
        if entry.__class__ is Compiled:
            next(self._hits)
            return entry.fn(*leaves)
        return self._call(entry, key, leaves, args, kwargs)

    def _under_autocast(self, args, kwargs):
        """A call under ``torch.autocast``: the trace records the casts autocast makes
        (tracer/autocast.py) and runs with autocast off. Autocast's state is part of the key
        (the default-dtype slot), and such entries never reach the hit path, which serves
        calls outside autocast only. A call whose casts are not modelled runs eagerly, said
        once per function with the reason."""
        key, leaves = cache_key(args, kwargs)
        key = ((key[0], autocast.state()), *key[1:])
        return self._call(self._cache.get(key), key, leaves, args, kwargs, under_autocast=True)

    def _autocast_fallback(self, key, error, args, kwargs):
        """Calls with this key run eagerly: autocast's casts in them are not modelled."""
        self._autocast_eager[key] = str(error)
        if not self._warned_autocast:
            self._warned_autocast = True
            warnings.warn(f"{self!r} runs under torch.autocast eagerly: {error}",
                          AutocastWarning, stacklevel=4)
        return self._fn(*args, **kwargs)

    def _call(self, entry, key, leaves, args, kwargs, under_autocast: bool = False):
        """The slow part of a call: guarded or specialized entries, then a compile. A call
        `under_autocast` runs its trace with autocast off and never reaches the hit path."""
        compiled, state = select(entry, leaves)
        if compiled is None:
            if current_trace() is not None:  # called while tracing an outer function: inline
                return self._fn(*args, **kwargs)
            if key in self._autocast_eager or key in self._counters.eager:
                return self._fn(*args, **kwargs)   # casts not modelled; a counter
            try:
                compiled, state = self._miss(key, leaves, args, kwargs)
            except autocast.AutocastFallback as e:
                return self._autocast_fallback(key, e, args, kwargs)
            except _Counter as e:
                warnings.warn(f"{self!r} runs eagerly: {e} changes on every call, and each "
                              f"value would compile again (keep it in a tensor, or count "
                              f"outside the jitted function)", CounterWarning, stacklevel=3)
                return self._fn(*args, **kwargs)
        else:
            next(self._hits)
        if under_autocast:
            with autocast.disabled():
                return _run(compiled, args, kwargs, leaves, state)
        self._use(compiled)
        return _run(compiled, args, kwargs, leaves, state)

    def _miss(self, key, leaves, args, kwargs):
        with self._lock:
            compiled, state = select(self._cache.get(key), leaves)  # another thread's compile
            if compiled is not None:
                next(self._hits)
                return compiled, state
            compiled = self._dynamic.lookup(key, leaves)   # a trace with symbolic dims
            state = None if compiled is None else (
                () if compiled.guard is None else compiled.guard(leaves))
            if state is not None:   # its guards hold for these sizes: cached under this key
                next(self._hits)
                self._insert(key, leaves, compiled)
                return compiled, state
            why = self._why(key, leaves) if self._misses else None  # the first is no recompile
            counter = self._counters.changed(key, why) if why is not None else None
            if counter is not None:
                raise _Counter(counter)
            if why is not None and self._dynamic.failed is not None:
                why = [self._dynamic.failed, *why]
            compiled = self._compile(key, leaves, args, kwargs)
            self._misses += 1
            self._insert(key, leaves, compiled)
            self._last = compiled.traces
            if why is not None:   # after the insert: its warning may be an error
                self._recompiles.add(why)
            state = () if compiled.guard is None else compiled.guard(leaves)
            if state is None:   # the traced code changed what it read (a side effect)
                raise TracingError(
                    f"{self!r}: the state the function read changed while it was traced "
                    f"(does it assign a global or an attribute it also reads?)")
            return compiled, state

    def _compile(self, key, leaves, args, kwargs) -> Compiled:
        """Compile for this call: with symbolic dims where they are due (tracer/dynamic.py:
        the arguments', those of state tensors whose sizes changed under the same key, and
        those of state the trace itself replaces by a grown tensor), static where none are or
        that trace fails (the failed attempt counts as a miss)."""
        dims = self._dynamic.choose(list(self._cache), key, leaves)
        candidates = [*compiled_in(self._cache.get(key)),
                      *(e.compiled for e in self._dynamic.entries
                        if e.failing(key, leaves) is not False)]
        state = self._dynamic.choose_state(candidates, leaves)
        if not dims and not state and self._dynamic.mode is not False:
            try:
                with dynamic.watching_growth(self._dynamic.static_state):
                    return compile_fn(self._fn, args, kwargs, self._executors, self._options)
            except dynamic.GrowingState as grown:
                state = grown.state
        if dims or state:
            guards = GuardSet()
            try:
                with dynamic.compiling(dims, guards, state):
                    compiled = compile_fn(self._fn, args, kwargs, self._executors, self._options)
                undefined = dynamic.undefined_proxy(compiled.traces)
                if undefined is not None:
                    raise RuntimeError(f"a symbolic stride is read as a value: {undefined}")
            except Exception as e:   # a symbol this code cannot take: static from now on
                self._misses += 1
                compiled = compile_fn(self._fn, args, kwargs, self._executors, self._options)
                self._dynamic.give_up(dims, e, state)   # (not when the call is eager's error)
                return compiled
            else:
                if dims:
                    self._dynamic.add(key, leaves, dims, guards, compiled)
                self._dynamic.pin_state(compiled, guards)
                return compiled
        return compile_fn(self._fn, args, kwargs, self._executors, self._options)

    def _why(self, key, leaves) -> list:
        """Why this call compiles again: its differences from the nearest cached entry."""
        fn = self._fn.forward if isinstance(self._fn, torch.nn.Module) else self._fn
        try:
            return miss_changes(self._cache, key, leaves, lambda n: _positional_names(fn, n),
                                self._evicted)
        except Exception as e:   # a reason must never break a call
            return [Change("unknown", "", "", "", f"could not tell why ({type(e).__name__}: {e})")]

    def _insert(self, key, leaves, compiled: Compiled) -> None:
        cache = dict(self._cache)  # readers see either the old or the new dict, never a mix
        slot = cache.get(key)
        if compiled.specialized:
            positions = set(compiled.specialized)
            if slot.__class__ is Specialized and positions <= set(slot.positions):
                slot = Specialized(slot.positions, slot.table)
            else:  # new numbers became specialized: older entries were keyed on fewer values
                slot = Specialized(tuple(sorted(positions | set(getattr(slot, "positions", ())))))
            values = slot.values(leaves)
            slot.table[values] = with_variant(slot.table.pop(values, None), compiled)
            while slot_size(slot) > self._maxsize:
                del slot.table[next(iter(slot.table))]
        else:
            slot = with_variant(slot if slot.__class__ is not Specialized else None, compiled)
        cache.pop(key, None)
        cache[key] = slot
        size = sum(slot_size(e) for e in cache.values())
        while size > self._maxsize:  # evict the oldest keys until the compiled count fits
            old = next(iter(cache))
            size -= slot_size(cache.pop(old))
            self._evicted[hash(old)] = None   # a hash: keeps no constant argument alive
            if len(self._evicted) > 64:
                del self._evicted[next(iter(self._evicted))]
        self._evicted.pop(hash(key), None)
        self._cache = cache

    def __get__(self, obj, objtype=None):
        return self if obj is None else functools.partial(self, obj)

    def _hit_count(self) -> int:
        return _counted(self._hits) + self._path.served()

    def cache_info(self) -> CacheInfo:
        with self._lock:
            hits = self._hit_count() - self._hits_cleared
            size = sum(slot_size(e) for e in self._cache.values())
            return CacheInfo(hits, self._misses, self._maxsize, size,
                             tuple(self._recompiles.records))

    def cache_clear(self) -> None:
        with self._lock:
            self._cache = {}
            self._recent = None
            self._path.remember(None)
            self._hits_cleared = self._hit_count()
            self._misses = 0
            self._recompiles.clear()
            self._evicted.clear()
            self._dynamic.clear()
            self._counters = Counters()

    def __reduce__(self):
        raise TypeError(f"cannot pickle {self!r}: pickle the function and jit it again")

    def __repr__(self):
        return f"<primtrace.jit of {getattr(self._fn, '__qualname__', self._fn)!r}>"


class JitModule(JitFunction, torch.nn.Module):
    """What ``jit`` returns for an ``nn.Module``: its JitFunction, and an ``nn.Module`` that is
    a view of the module (as torch.compile's OptimizedModule, without the ``_orig_mod.``
    prefix): parameters, buffers, submodules, ``state_dict`` keys, ``train``/``eval``,
    ``zero_grad``, hooks and attributes are the module's own, so that code taking a module
    (DistributedDataParallel, optimizers, checkpoints) takes it; calling it (or ``forward``)
    runs the compiled call.

    ``nn.Module.__init__`` never runs: the module's state is not copied but reached (reads
    of what the view lacks go to the module, :meth:`JitFunction.__getattr__`), and every
    method nn.Module defines runs as the module's own (so a subclass's override, such as
    BatchNorm's ``_load_from_state_dict``, applies); a method returning the module returns
    the view. Writes go to the module, except to the JitFunction's own attributes."""

    def __new__(cls, fn: torch.nn.Module, executors=None, **options):
        self = super().__new__(cls, fn, executors, **options)
        object.__setattr__(self, "_built", True)   # from now on, new attributes are the module's
        return self

    def __init__(self, *args, **kwargs):   # __new__ did the work
        pass

    def __setattr__(self, name, value):
        if name in self.__dict__ or "_built" not in self.__dict__:
            object.__setattr__(self, name, value)
        else:
            setattr(self._fn, name, value)

    def __delattr__(self, name):
        if name in self.__dict__:
            object.__delattr__(self, name)
        else:
            delattr(self._fn, name)

    def forward(self, *args, **kwargs):
        return self(*args, **kwargs)

    _call_impl = _wrapped_call_impl = _slow_forward = forward


def _module_method(name: str):
    def method(self, *args, **kwargs):
        module = self._fn
        out = getattr(module, name)(*args, **kwargs)
        return self if out is module else out
    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"The module's own ``{name}`` (a module it returns: this view)."
    return method


def _module_attribute(name: str):
    return property(lambda self: getattr(self._fn, name),
                    lambda self, value: setattr(self._fn, name, value),
                    doc=f"The module's ``{name}``.")


for _name, _value in vars(torch.nn.Module).items():
    if _name.startswith("__") or _name in vars(JitModule):
        continue
    setattr(JitModule, _name, _module_method(_name) if isinstance(_value, types.FunctionType)
            else _module_attribute(_name))
del _name, _value


def jit(fn: Callable | None = None, *, executors=None, **options):
    """Compile `fn` (plain PyTorch code) through primtrace; usable as ``@jit`` or ``@jit(...)``.

    `executors` are tried in priority order; the torch executor is always appended last.
    Options: see :data:`OPTIONS`.
    """
    if fn is None:
        return lambda f: jit(f, executors=executors, **options)
    cls = JitModule if isinstance(fn, torch.nn.Module) else JitFunction
    return cls(fn, executors, **options)


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
    """Hits, misses, maximum and current size of `jfn`'s cache, and its recompiles with the
    reason for each."""
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
    """What `explain` found: the acquisition trace, the ops that run outside the refs, and,
    for a call that needs gradients, why its backward is not primtrace's (None: it is)."""
    trace: Trace
    opaque: list  # (torch name, user source line) per opaque node, in trace order
    fallback: str | None = None
    autocast: str | None = None   # why a call under torch.autocast runs eagerly (None: it traces)

    def __str__(self):
        if self.autocast is not None:
            return f"{self.trace.name}: under torch.autocast the call runs eagerly: {self.autocast}"
        if not self.opaque:
            lines = [f"{self.trace.name}: every op maps to primtrace refs"]
        else:
            lines = [f"{self.trace.name}: {len(self.opaque)} op(s) have no ref and run as "
                     f"opaque torch calls (torch executor, no fusion):"]
            lines += [f"  {name}" + (f"    # {source}" if source else "")
                      for name, source in self.opaque]
        if self.fallback is not None:
            lines.append(f"no fused backward, autograd runs op by op: {self.fallback}")
        return "\n".join(lines)


def explain(fn: Callable, *args, **kwargs) -> Explanation:
    """Trace `fn` on these inputs (without running it) and list the ops primtrace has no ref for."""
    target = fn._fn if isinstance(fn, JitFunction) else fn
    try:
        acquisition = acquire(target, args, kwargs)
    except autocast.AutocastFallback as e:   # the trace without autocast, and why
        with autocast.disabled():
            acquisition = acquire(target, args, kwargs)
        opaque = [(n.symbol.qualname, n.source) for n in acquisition.flat_nodes()
                  if n.symbol.kind is SymbolKind.OPAQUE]
        return Explanation(acquisition, opaque, None, str(e))
    opaque = [(n.symbol.qualname, n.source) for n in acquisition.flat_nodes()
              if n.symbol.kind is SymbolKind.OPAQUE]
    prims, _ = _differentiated(acquisition, OPTIONS["saved"])
    return Explanation(acquisition, opaque, prims.tags.get("fallback"))
