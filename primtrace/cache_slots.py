"""The entries of a jitted function's cache: what one key's slot holds and how a call picks
from it.

A slot is a :class:`Compiled` (a trace that read no state, or one key match is enough), a
:class:`Guarded` (variants whose traces read state: each variant's guard says whether this
call's state is what it read, and returns that state as inputs), or a :class:`Specialized`
table (traces that read some argument numbers' values, keyed by those values).
"""
from __future__ import annotations

from typing import Callable

from primtrace.ir.trace import Trace


class Compiled:
    """One compiled trace: the generated function, the traces that led to it, and the guard
    over the state it read (None when it read none: then a key match is enough).

    `recent` is what the hit path checks first for a call with only tensor arguments: torch's
    C++ TensorGuards over the example arguments (type, dtype, device, sizes, strides,
    requires_grad: stricter than the key), with the grad mode and default dtype."""
    __slots__ = ("fn", "traces", "specialized", "guard", "recent")

    def __init__(self, fn: Callable, traces: list[Trace], specialized: tuple, guard=None,
                 recent=None):
        self.fn, self.traces, self.specialized, self.guard = fn, traces, specialized, guard
        self.recent = recent


class Guarded:
    """The compiled variants of one key whose traces read state (a module's parameters and
    training flag...): tried newest first; a variant's guard returns its state inputs."""
    __slots__ = ("variants",)
    limit = 8   # variants kept per key (train/eval, a few attribute values)

    def __init__(self, variants: tuple):
        self.variants = variants[:self.limit]


class Specialized:
    """The entries of one key whose trace read some numbers' values: keyed by those values."""
    __slots__ = ("positions", "table")

    def __init__(self, positions: tuple, table: dict | None = None):
        self.positions, self.table = positions, dict(table or {})

    def values(self, leaves) -> tuple:
        return tuple([repr(leaves[i]) for i in self.positions])  # repr: -0.0 != 0.0, nan == nan


def select(entry, leaves):
    """(compiled, state inputs) from a cache slot for this call, or (None, None)."""
    if entry.__class__ is Specialized:
        entry = entry.table.get(entry.values(leaves))
    if entry.__class__ is Compiled:
        return entry, ()
    if entry.__class__ is Guarded:
        for compiled in entry.variants:
            state = compiled.guard(leaves)
            if state is not None:
                return compiled, state
    return None, None


def size(entry) -> int:
    if entry.__class__ is Specialized:
        return sum(size(e) for e in entry.table.values())
    return len(entry.variants) if entry.__class__ is Guarded else 1


def compiled_in(slot) -> list:
    """The compiled entries of a cache slot, newest first."""
    if slot.__class__ is Specialized:
        return [c for e in reversed(list(slot.table.values())) for c in compiled_in(e)]
    if slot.__class__ is Guarded:
        return list(slot.variants)
    return [slot] if slot.__class__ is Compiled else []


def with_variant(slot, compiled: Compiled):
    """The cache slot after adding `compiled`: itself, or one more guarded variant."""
    if compiled.guard is None:
        return compiled
    old = slot.variants if slot.__class__ is Guarded else ()
    return Guarded((compiled, *old))
