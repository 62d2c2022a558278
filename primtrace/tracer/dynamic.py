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

What is symbolic: the outermost dim of a contiguous plain tensor argument (primtrace keeps
strides concrete, and an inner dim's size is a factor of the outer strides). Size 0 stays
specialized (a symbol's lower bound is 1); a trace that reads a dim's value (``int(n)``)
pins it: the dim is traced static from then on. A dynamic trace that fails (a stride that
would depend on a size, an op whose metadata cannot follow a symbol) is traced again
static: never a wrong trace, at worst a recompile per size.

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
from primtrace.ir.proxy import Hint, SizeProxy, TensorSpec
from primtrace.ir.strides import dense_strides
from primtrace.ir.symbol import Symbol
from primtrace.ir.trace import Node
from primtrace.recompiles import Change, _is_container, _is_number_type, _is_tensor, _split

#: {leaf index: dims} of the compile running in this context (proxify reads it)
_dims: contextvars.ContextVar[dict | None] = contextvars.ContextVar("primtrace_dynamic_dims",
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
def input_spec(trace, name: str, x, leaf: int, namer):
    """The spec of input tensor `x` (leaf `leaf`), with the dims this compile holds
    symbolic as sizes; None when it has none."""
    dims = (_dims.get() or {}).get(leaf)
    if not dims:
        return None
    shape, table = list(x.shape), trace.tags.setdefault("size_exprs", {})
    inputs = trace.tags.setdefault("input_dims", {})
    for d in sorted(dims):
        base = namer(f"{name}_dim{d}")
        size = SizeProxy(base, f"{name}.size({d})", 1, None)
        size.value = Hint(f"{name}.size({d})", int(x.shape[d]),
                          lambda env, b=base: env[b], (), (base,))
        table[size.expr] = size
        inputs[base] = (leaf, d, size)
        shape[d] = size
    return TensorSpec(tuple(shape), x.dtype, x.device, dense_strides(tuple(shape)))


def record_dims(trace, proxy) -> None:
    """The nodes that read an input's symbolic dims when the trace runs."""
    for d, n in enumerate(proxy.shape):
        if size_guards.hinted(n) and n.name in trace.tags.get("input_dims", {}):
            trace.record(Node(dim_size, (proxy, d), {}, n, source=None))


@contextlib.contextmanager
def compiling(dims: dict, guards):
    """Trace the leaves' `dims` ({leaf: dims}) symbolic and collect the guards of reads."""
    token = _dims.set(dims)
    try:
        with size_guards.collecting(guards):
            yield guards
    finally:
        _dims.reset(token)


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


def _eligible(k, d: int) -> bool:
    """A dim that can be symbolic: the outermost of a contiguous plain tensor (its size a
    factor of no stride), size not 0."""
    return d == 0 and k[3] is True and len(k) == 5 and len(k[1]) > 0 and k[1][0] != 0


def size_differences(old, new) -> dict | None:
    """{leaf: dims} where two keys differ in sizes alone (None as a size in `old`: a dim
    already symbolic, counted when `new`'s is eligible); None when they differ otherwise."""
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
                if not _eligible(b, d) or m == 0:
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
        if any(v < 1 for v in env.values()):
            return False
        if self.values and tuple(repr(leaves[i]) for i in self.compiled.specialized) != self.values:
            return False
        return self.guards.failing(env)


class Dynamic:
    """A jitted function's traces with symbolic dims, and which dims to trace so."""

    def __init__(self, mode):
        if mode not in (None, True, False):
            raise ValueError(f"dynamic must be None, True or False, got {mode!r}")
        self.mode = mode
        self.entries: list[Entry] = []
        self.static: set = set()   # (leaf, dim) traced static from now on
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
        if self.mode is True:
            for i, k in new.items():
                if _eligible(k, 0):
                    dims[i] = {0}
        else:
            best = None
            for old in [*(e.pattern for e in self.entries), *cached_keys]:
                found = size_differences(old, key)
                if found and (best is None or _count(found) < _count(best)):
                    best = found
            dims = best or {}
            for i, k in new.items():   # marked dims (primtrace / torch._dynamo.mark_dynamic)
                for d in _marked(leaves[i]):
                    if _eligible(k, d):
                        dims.setdefault(i, set()).add(d)
        return {i: ds - {d for d in ds if (i, d) in self.static}
                for i, ds in dims.items() if ds - {d for d in ds if (i, d) in self.static}}

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

    def give_up(self, dims, error) -> None:
        """A dynamic trace of these dims failed: trace them static from now on."""
        self.errors.append(f"{type(error).__name__}: {error}")
        del self.errors[:-8]
        for i, ds in dims.items():
            self.static.update((i, d) for d in ds)

    def clear(self) -> None:
        self.entries.clear()
        self.static.clear()


def _count(dims: dict) -> int:
    return sum(len(d) for d in dims.values())
