"""Automatic dynamic dims: one trace for every size of some input dims.

A jit cache miss that differs from a cached entry only in some dims' sizes (same rank,
dtypes, devices, stride class, requires_grad) traces once more with those dims symbolic:
each becomes a :class:`~primtrace.ir.proxy.SizeProxy` whose trace-time value is a
:class:`~primtrace.ir.proxy.Hint` (the call's size) and whose run-time value is read from
the argument (``prims.dim_size``). Meta functions relate such sizes symbolically (equal
sizes, broadcasting, polynomials); a read of the value adds a guard
(:mod:`primtrace.ir.size_guards`). Later calls of any size for those dims run that trace
when its guards hold; the concrete key of each such call is then cached like any other
(the guards are functions of the sizes alone), so the hit path stays the keyed one.

What is symbolic: automatically, the outermost dim of a contiguous plain tensor argument;
a marked dim (:func:`mark_dynamic`, the backend's marks from Dynamo) of one, inner ones too;
and dims of state tensors (read besides the arguments: a KV cache object's) whose sizes alone
changed under the same key, or that the call replaces by a tensor grown along them
(:func:`grown_state`: the compile starts again with them symbolic). An inner dim's outer
strides are size polynomials with no node of their own (:func:`_row_major`), which no fused
kernel reads. Size 0 stays specialized (a symbol's lower bound is 1; an inner dim's is 2: a
size-1 dim's stride is free); a trace that reads a dim's value (``int(n)``) pins it: the dim
is traced static from then on. A dynamic trace that fails (an op whose metadata cannot follow
a symbol, a symbolic stride read as a value) is traced again static: never a wrong trace, at
worst a recompile per size.

``jit(fn, dynamic=None)`` (default): static first, symbolic on the second distinct size of
a dim; ``dynamic=True``: symbolic from the first call; ``dynamic=False``: never.
:func:`mark_dynamic` (or ``torch._dynamo.mark_dynamic``) asks for a dim on the first call.
"""
from __future__ import annotations

import contextlib
import contextvars

import torch

from primtrace.ir import size_guards
from primtrace.ir.kinds import SymbolKind
from primtrace.ir.proxy import Hint, SizeProxy, TensorProxy, TensorSpec, evaluate
from primtrace.ir.symbol import Symbol
from primtrace.ir.trace import Node
from primtrace.ir.tree import proxies_in
from primtrace.recompiles import Change, _is_container, _is_number_type, _is_tensor, _split

#: {leaf index: dims} of the compile running in this context (proxify reads it)
_dims: contextvars.ContextVar[dict | None] = contextvars.ContextVar("primtrace_dynamic_dims",
                                                                   default=None)
#: {id(state tensor): (dims, readable name)} of the compile running in this context
_state: contextvars.ContextVar[dict | None] = contextvars.ContextVar("primtrace_state_dims",
                                                                    default=None)


def _dim_size_meta(a, dim):
    return a.shape[dim]   # the input's symbol itself


dim_size = Symbol("dim_size", kind=SymbolKind.PRIM, meta=_dim_size_meta,
                  impl=lambda a, dim: a.shape[dim], module="prims",
                  doc="The size of an input tensor's dim that the trace holds symbolic "
                      "(automatic dynamic dims), read from the argument when the trace runs.")


def mark_dynamic(t: torch.Tensor, dims) -> torch.Tensor:
    """Ask ``primtrace.jit`` to trace dim(s) `dims` of `t` symbolic from its first call (as
    ``torch._dynamo.mark_dynamic``, whose marks jit reads too). Returns `t`."""
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    marked = set(getattr(t, "_primtrace_dynamic", ()))
    marked.update(d % t.ndim for d in dims)
    t._primtrace_dynamic = marked
    return t


def _marked(t) -> set:
    return set(getattr(t, "_primtrace_dynamic", ())) | set(
        getattr(t, "_dynamo_dynamic_indices", ()))


# --- trace time ---------------------------------------------------------------------------
def _symbolic_spec(trace, name: str, x, dims, namer, where: dict, place) -> TensorSpec:
    """The spec of tensor `x` with `dims` as sizes (named after `name`); each base goes into
    `where` as place(d, size)."""
    shape, table = list(x.shape), trace.tags.setdefault("size_exprs", {})
    for d in sorted(dims):
        base = namer(f"{name}_dim{d}")
        size = SizeProxy(base, f"{name}.size({d})", lowest(d), None)
        size.value = Hint(f"{name}.size({d})", int(x.shape[d]),
                          lambda env, b=base: env[b], (), (base,))
        table[size.expr] = size
        where[base] = place(d, size)
        shape[d] = size
    return TensorSpec(tuple(shape), x.dtype, x.device, _row_major(shape, x, name, namer))


def _row_major(shape, x, name: str, namer) -> tuple:
    """Row-major strides of `shape` (symbolic dims among its sizes): the strides outside an
    inner symbolic dim are size polynomials, made here without recording arithmetic nodes (the
    trace may not be active yet, or be inside a ref's scope). They are metadata: a node that
    takes one as an argument (``x.as_strided(s, x.stride())``) finds it undefined, and the
    dynamic compile then fails over to a static one (``undefined_proxies``)."""
    from primtrace.ir.number_ops import _constant, _product, expr_of
    strides, acc = [0] * len(shape), (((), 1),)
    for d in reversed(range(len(shape))):
        constant = _constant(acc)
        if constant is not None:
            strides[d] = constant
        else:
            stride = SizeProxy(namer(f"{name}_stride{d}"), f"{name}.stride({d})", 1, None,
                               expr=acc)
            bases = tuple(dict.fromkeys(b for m, _ in acc for b, _ in m))
            stride.value = Hint(f"{name}.stride({d})", int(x.stride(d)),
                                lambda env, p=stride: evaluate(p, env.__getitem__), (),
                                bases)
            strides[d] = stride
        n = shape[d]
        acc = _product(acc, (((), 1),) if type(n) is int and n == 0 else expr_of(n))
    return tuple(strides)


def input_spec(trace, name: str, x, leaf: int, namer):
    """The spec of input tensor `x` (leaf `leaf`), with the dims this compile holds
    symbolic as sizes; None when it has none."""
    dims = (_dims.get() or {}).get(leaf)
    if not dims:
        return None
    return _symbolic_spec(trace, name, x, dims, namer, trace.tags.setdefault("input_dims", {}),
                          lambda d, size: (leaf, d, size))


def state_spec(trace, t, namer):
    """The spec of state tensor `t` (one the function reads besides its arguments: a KV
    cache's keys), with the dims this compile holds symbolic as sizes; None when none.
    The spec is row-major: a tensor laid out otherwise (a cache that starts as views of the
    prompt's projection) is passed as a contiguous copy, which the trace must only read
    (``check_copied_state``)."""
    found = (_state.get() or {}).get(id(t))
    if not found:
        return None
    dims, label = found
    return _symbolic_spec(trace, label, t, dims, namer, trace.tags.setdefault("state_dims", {}),
                          lambda d, size: (label, d))


def record_dims(trace, proxy) -> None:
    """The nodes that read an input's symbolic dims when the trace runs."""
    for d, n in enumerate(proxy.shape):
        if size_guards.hinted(n) and n.name in trace.tags.get("input_dims", {}):
            trace.record(Node(dim_size, (proxy, d), {}, n, source=None))


def record_state_dims(trace, proxy) -> dict:
    """{dim: base name} of a state proxy's symbolic dims, read when the trace runs by nodes
    put first in the trace (a state tensor is lifted mid-trace, maybe inside a ref's
    scope)."""
    found = {}
    for d, n in enumerate(proxy.shape):
        if size_guards.hinted(n) and n.name in trace.tags.get("state_dims", {}):
            trace.nodes.insert(0, Node(dim_size, (proxy, d), {}, n, source=None))
            found[d] = n.name
    return found


@contextlib.contextmanager
def compiling(dims: dict, guards, state: dict | None = None):
    """Trace the leaves' `dims` ({leaf: dims}) and the state tensors' (`state`: {id(tensor):
    (dims, readable name)}) symbolic, and collect the guards of reads."""
    token, state_token = _dims.set(dims), _state.set(state)
    try:
        with size_guards.collecting(guards):
            yield guards
    finally:
        _dims.reset(token)
        _state.reset(state_token)


class GrowingState(Exception):
    """A trace replaced state tensors with ones of other sizes (a KV cache's keys grown by a
    token): the next call would miss, so the compile starts again with those dims symbolic.
    `state`: {id(tensor): (dims, name)}."""

    def __init__(self, state: dict):
        super().__init__(f"state that grows: {sorted(n for _, n in state.values())}")
        self.state = state


#: the state dims traced static by this jit (its Dynamic.static_state) while a compile that may
#: start again with growing state symbolic runs; None: no such compile
_growth: contextvars.ContextVar[set | None] = contextvars.ContextVar("primtrace_growth",
                                                                     default=None)


@contextlib.contextmanager
def watching_growth(static_state: set):
    token = _growth.set(static_state)
    try:
        yield
    finally:
        _growth.reset(token)


def grown_state(writes, recorder) -> dict:
    """{id(tensor): (dims, name)}: the state tensors the traced code replaced (Python writes:
    pystate's (kind, target, old, new, label)) by a tensor that differs in the sizes of some
    dims alone, where those dims could be symbolic and are not yet."""
    found = {}
    for _, _, old, new, _ in writes:
        if isinstance(old, dict) and isinstance(new, dict):
            pairs = [(old[k], new[k]) for k in old.keys() & new.keys()]
        elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
            pairs = list(zip(old, new))
        else:
            continue
        for t, p in pairs:
            if not isinstance(p, TensorProxy) or id(t) not in recorder.lifted or \
                    id(t) in recorder.symbolic or id(t) not in recorder.labels:
                continue
            if any(not isinstance(n, int) for n in p.shape) or not p.is_contiguous():
                continue
            dims = state_changes(tensor_key(t), (p.dtype, tuple(p.shape), p.device, True,
                                                 p.requires_grad))
            if dims:
                found[id(t)] = (tuple(sorted(dims)), recorder.labels[id(t)])
    return found


def check_growth(acquisition) -> None:
    """Raise GrowingState where the compile watches growth and this trace grows state dims
    not traced static."""
    static = _growth.get()
    grown = acquisition.tags.get("grown_state")
    if static is None or not grown:
        return
    state = {}
    for tid, (dims, name) in grown.items():
        dims = tuple(d for d in dims if (name, d) not in static)
        if dims:
            state[tid] = (dims, name)
    if state:
        raise GrowingState(state)


def undefined_proxy(traces) -> str | None:
    """A value some node of these execution traces (and their backward's) reads that neither
    an input nor an earlier node defines, as "name (in node)"; None when every one is
    defined. A symbolic stride is metadata with no node of its own (``_row_major``): a trace
    that passes one to a call cannot run, and the jit traces static instead."""
    execution = traces[-1]
    for trace in (execution, *(execution.tags.get("backward") or ())[-1:]):
        defined = {p.name for p in proxies_in(trace.inputs)}
        for node in trace.nodes:
            for p in node.inputs:
                if p.name not in defined:
                    return f"{p.name} (read by {node.symbol.name})"
            defined.update(p.name for p in node.output_proxies)
        for p in proxies_in(trace.outputs):
            if p.name not in defined:
                return f"{p.name} (an output)"
    return None


def check_copied_state(trace, copied: dict) -> None:
    """Raise where the trace writes into a state tensor it takes as a contiguous copy
    (`copied`: {its proxy's name while tracing: the proxy}), or into a view of it, or returns
    one of them (the copy would stand for the user's tensor there): a dynamic trace then
    fails, and the call is traced static."""
    roots = trace.alias_root
    for node in trace.flat_nodes():
        if "inplace" in node.symbol.tags:
            for dst in (node.args[0] if node.args else None, node.kwargs.get("out")):
                if isinstance(dst, TensorProxy) and (
                        roots.get(dst.name, dst.name) in copied or
                        any(dst is p for p in copied.values())):
                    raise RuntimeError(f"{node.symbol.name} writes into state the trace "
                                       f"takes as a copy")
    for q in proxies_in(trace.outputs):
        if roots.get(q.name, q.name) in copied or any(q is p for p in copied.values()):
            raise RuntimeError("the trace returns state it takes as a copy (or a view of it)")


# --- state guards ---------------------------------------------------------------------------
def tensor_key(t) -> tuple:
    """What a state tensor must keep for a trace to stay valid (as for argument tensors)."""
    return (t.dtype, t.shape, t.device, True if t.is_contiguous() else t.stride(),
            t.requires_grad)


def tensor_pattern(t, dims: tuple, any_layout: bool = False) -> tuple:
    """A state tensor's key (``state.tensor_key``) with the sizes of its symbolic `dims` as
    None where they are at least `lowest` (what a trace with those dims serves); its layout
    None where the trace takes a contiguous copy of any layout (`any_layout`)."""
    shape = tuple(None if d in dims and n >= lowest(d) else n for d, n in enumerate(t.shape))
    layout = None if any_layout else True if t.is_contiguous() else t.stride()
    return (t.dtype, shape, t.device, layout, t.requires_grad)


def failing_size_guard(guards, env: dict) -> str | None:
    """The text of the first size guard that does not hold for these base sizes."""
    failed = guards.failing(env)
    return None if failed is None else failed.text


def state_changes(old, new) -> set | None:
    """The dims of a state tensor that can be traced symbolic, where its key `new` differs
    from the key `old` a trace was guarded on in sizes alone; None where it differs otherwise
    or no dim is eligible."""
    if old[0] != new[0] or old[2] != new[2] or old[4:] != new[4:] or len(old[1]) != len(new[1]):
        return None   # (the layouts may differ: the trace takes a row-major tensor, a copy
        # of one laid out otherwise, see state_spec)
    dims = {d for d, (m, n) in enumerate(zip(old[1], new[1])) if m != n}
    if not dims or not all(_eligible((*new[:3], True, *new[4:]), d) for d in dims):
        return None
    return dims


# --- keys ---------------------------------------------------------------------------------
def _walk(key, visit):
    """`key` (primtrace.tracer.inputs.cache_key) with each tensor key replaced by
    visit(leaf index, tensor key); other leaves counted."""
    count = [0]

    def walk(k):
        if _is_tensor(k):
            i = count[0]
            count[0] += 1
            return visit(i, k)
        if _is_number_type(k) or (type(k) is tuple and len(k) == 2 and k[0] is int):
            count[0] += 1
            return k
        if _is_container(k):
            if k[0] is dict:
                return (dict, tuple([(n, walk(v)) for n, v in k[1]]))
            return (k[0], tuple([walk(v) for v in k[1]]))
        return k
    args, kw = _split(key[2:])
    out = [key[0], key[1], *[walk(a) for a in args]]
    if kw:
        out.append(tuple([(n, walk(v)) for n, v in kw]))
    return tuple(out)


def generalize(key, dims: dict):
    """`key` with the sizes of `dims` ({leaf: dims}) as None."""
    def visit(i, k):
        d = dims.get(i)
        if not d:
            return k
        return (k[0], tuple(None if j in d else n for j, n in enumerate(k[1])), *k[2:])
    return _walk(key, visit)


def _tensor_keys(key) -> dict:
    found = {}
    _walk(key, lambda i, k: found.setdefault(i, k))
    return found


def lowest(d: int) -> int:
    """The least size symbolic dim `d` serves: 1 for the outermost (its size is a factor of
    no stride), 2 for an inner one (a size-1 dim's stride is free: views and layouts read it
    as a special case, as torch.compile specializes 0 and 1)."""
    return 1 if d == 0 else 2


def _eligible(k, d: int) -> bool:
    """A dim that can be symbolic: one of a contiguous plain tensor (inner dims' sizes are
    factors of the outer strides, which become size polynomials) at least `lowest(d)`."""
    return k[3] is True and len(k) == 5 and len(k[1]) > d and k[1][d] >= lowest(d)


def size_differences(old, new, marked: dict | None = None) -> dict | None:
    """{leaf: dims} where two keys differ in sizes alone (None as a size in `old`: a dim
    already symbolic, counted when `new`'s is eligible); None when they differ otherwise, or
    in an inner dim not `marked` ({leaf: dims}): an automatic symbolic dim is a tensor's
    outermost (a reduction over an inner symbolic dim would run in torch, not fused, and a
    new inner size costs a retrace, not a kernel compile)."""
    marked = marked or {}
    old_t, new_t = _tensor_keys(old), _tensor_keys(new)
    if old_t.keys() != new_t.keys():
        return None
    dims = {}
    for i, a in old_t.items():
        b = new_t[i]
        if a[0] != b[0] or a[2:] != b[2:] or len(a[1]) != len(b[1]):
            return None
        for d, (m, n) in enumerate(zip(a[1], b[1])):
            if m != n:
                if not _eligible(b, d) or m == 0 or (d and d not in marked.get(i, ())):
                    return None
                dims.setdefault(i, set()).add(d)
    generalized = generalize(new, dims)
    return dims if generalize(old, dims) == generalized else None


# --- the jit's side -----------------------------------------------------------------------
class Entry:
    """A trace with symbolic dims: the key pattern it serves, where its sizes come from, the
    guards its sizes must pass, and the compiled function."""
    __slots__ = ("pattern", "dims", "bases", "guards", "compiled", "values")

    def __init__(self, pattern, dims, bases, guards, compiled, values):
        self.pattern, self.dims, self.bases = pattern, dims, bases
        self.guards, self.compiled, self.values = guards, compiled, values

    def env(self, leaves) -> dict:
        return {name: leaves[i].shape[d] for name, (i, d) in self.bases.items()}

    def failing(self, key, leaves):
        """None when this entry serves the call; else why not (a Guard, or False when the
        key does not fit its pattern)."""
        if generalize(key, self.dims) != self.pattern:
            return False
        env = self.env(leaves)
        if any(env[name] < lowest(d) for name, (_, d) in self.bases.items()):
            return False
        if self.values and tuple(repr(leaves[i]) for i in self.compiled.specialized) != self.values:
            return False
        for guard in self.guards:   # (guards over state dims: the state guard checks them)
            if set(guard.bases) <= env.keys() and not guard.holds(env):
                return guard
        return None


class Dynamic:
    """A jitted function's traces with symbolic dims, and which dims to trace so."""

    def __init__(self, mode):
        if mode not in (None, True, False):
            raise ValueError(f"dynamic must be None, True or False, got {mode!r}")
        self.mode = mode
        self.entries: list[Entry] = []
        self.static: set = set()   # (leaf, dim) traced static from now on
        self.static_state: set = set()   # (state tensor's name, dim) traced static from now on
        self.marks: dict = {}   # {leaf: dims} symbolic from the first call (the backend's)
        self.failed: Change | None = None   # the last guard a call failed, for its reason
        self.errors: list[str] = []   # why dynamic traces failed (the last few)

    def lookup(self, key, leaves):
        """The compiled entry with symbolic dims that serves this call, or None."""
        self.failed = None
        for entry in self.entries:
            why = entry.failing(key, leaves)
            if why is None:
                return entry.compiled
            if why is not False and self.failed is None:
                self.failed = Change("size guard", "sizes", "True", "False",
                                     f"size guard failed: {why.text} no longer holds (a "
                                     f"trace with symbolic dims assumed it)")
        return None

    def choose(self, cached_keys, key, leaves) -> dict:
        """{leaf: dims} to trace symbolic for this call."""
        if self.mode is False:
            return {}
        new = _tensor_keys(key)
        dims: dict = {}
        marked = {i: _marked(leaves[i]) | self.marks.get(i, set()) for i in new}
        if self.mode is True:
            for i, k in new.items():
                if _eligible(k, 0):
                    dims[i] = {0}
        else:
            best = None
            for old in [*(e.pattern for e in self.entries), *cached_keys]:
                found = size_differences(old, key, marked)
                if found and (best is None or _count(found) < _count(best)):
                    best = found
            dims = best or {}
            for i, k in new.items():   # marked dims (mark_dynamic, or the backend's marks)
                for d in marked[i]:
                    if _eligible(k, d):
                        dims.setdefault(i, set()).add(d)
        return {i: ds - {d for d in ds if (i, d) in self.static}
                for i, ds in dims.items() if ds - {d for d in ds if (i, d) in self.static}}

    def choose_state(self, variants, leaves) -> dict:
        """{id(tensor): (dims, name)} of the state tensors to trace symbolic for this call:
        where a trace of this key failed its state guard only in those tensors' sizes (or
        in the size guards of its own symbolic state dims), at their second distinct size."""
        if self.mode is False:
            return {}
        from primtrace.recompiles import _explainer
        for compiled in variants:
            guard = compiled.traces[0].tags.get("guard")
            if guard is None:
                continue
            fetch, failed, local = _explainer(guard)(list(leaves))
            found = {} if fetch is None and failed else None
            for i in failed or ():
                (_, name), kind, expected, _ = guard.where[i]
                if kind == "size guard":
                    for var, (dims, label) in guard.symbolic.items():
                        found.setdefault(id(local[var]), (set(dims), label))
                    continue
                expr = guard.tensors.get(i)
                t = None if expr is None else eval(expr, guard.namespace, local)  # noqa: S307
                dims = None if t is None else state_changes(expected, tensor_key(t))
                if dims is None:
                    found = None
                    break
                found.setdefault(id(t), (set(), name))[0].update(dims)
            if found:
                out = {}
                for tid, (dims, name) in found.items():
                    dims = {d for d in dims if (name, d) not in self.static_state}
                    if dims:
                        out[tid] = (tuple(sorted(dims)), name)
                return out
        return {}

    def add(self, key, leaves, dims, guards, compiled) -> None:
        """Keep a compiled trace with symbolic dims; dims a read pinned are static from now."""
        bases = {name: (i, d) for name, (i, d, _) in
                 compiled.traces[0].tags.get("input_dims", {}).items()}
        for name in guards.pinned:
            if name in bases:
                self.static.add(bases[name])
        values = tuple(repr(leaves[i]) for i in compiled.specialized)
        self.entries.insert(0, Entry(generalize(key, dims), dims, bases, guards, compiled,
                                     values))
        del self.entries[8:]

    def give_up(self, dims, error, state=None) -> None:
        """A dynamic trace of these dims failed: trace them static from now on."""
        self.errors.append(f"{type(error).__name__}: {error}")
        del self.errors[:-8]
        for i, ds in dims.items():
            self.static.update((i, d) for d in ds)
        for ds, name in (state or {}).values():
            self.static_state.update((name, d) for d in ds)

    def pin_state(self, compiled, guards) -> None:
        """State dims a read of this compile fixed to one value are static from now on."""
        dims = compiled.traces[0].tags.get("state_dims", {})
        self.static_state.update(dims[base] for base in guards.pinned if base in dims)

    def clear(self) -> None:
        self.entries.clear()
        self.static.clear()
        self.static_state.clear()


def _count(dims: dict) -> int:
    return sum(len(d) for d in dims.values())

