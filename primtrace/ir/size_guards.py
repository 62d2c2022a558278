"""Guards on symbolic input dims: what a trace assumed about sizes it did not fix.

A jitted function traced with some input dims symbolic (``jit(fn, dynamic=True)``; see
:mod:`primtrace.tracer.dynamic`) runs for every size of those dims, except where the trace
depended on a size's value: Python control flow (``if x.shape[0] > 8:``), ``int(n)``, a
shape a library op needed as ints, two symbolic dims broadcast against each other (equal,
or one of them 1). Each such read gets the value of the call being traced (the proxy's
:class:`~primtrace.ir.proxy.Hint`) and adds a :class:`Guard` here: the outcome the trace
assumed, as a function of the base dims. A later call runs the trace only when every guard
holds for its sizes; otherwise it compiles again, never running a trace whose assumption
fails.

Guards are collected while a jit compile runs (the whole pipeline: tracing, lowering, the
backward), in the :class:`GuardSet` made active by :func:`collecting`; a read with no active
set is an error (a hinted size never leaks into code that cannot guard it)."""
from __future__ import annotations

import contextlib
import contextvars
import operator

from primtrace.ir.proxy import Hint, NumberProxy, Unknown

_OPS = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
        "eq": operator.eq, "ne": operator.ne}
_SIGNS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


class Guard:
    """One assumption: ``fn(env) == expected``, worded as `text`."""
    __slots__ = ("fn", "expected", "text", "bases")

    def __init__(self, fn, expected, text: str, bases: tuple):
        self.fn, self.expected, self.text, self.bases = fn, expected, text, bases

    def holds(self, env: dict) -> bool:
        try:
            return self.fn(env) == self.expected
        except Exception:   # a size the assumption cannot be evaluated on (division by 0)
            return False

    def __repr__(self):
        return f"Guard({self.text})"


class GuardSet:
    """The guards of one compile, deduplicated by their text."""

    def __init__(self):
        self.guards: dict[str, Guard] = {}
        self.pinned: set[str] = set()   # base dims a read fixed to one value (int(n))

    def add(self, guard: Guard) -> None:
        self.guards.setdefault(guard.text, guard)

    def failing(self, env: dict) -> Guard | None:
        """The first guard that does not hold for these base sizes, else None."""
        for guard in self.guards.values():
            if not guard.holds(env):
                return guard
        return None

    def __len__(self):
        return len(self.guards)

    def __iter__(self):
        return iter(self.guards.values())


_active: contextvars.ContextVar[GuardSet | None] = contextvars.ContextVar(
    "primtrace_size_guards", default=None)


@contextlib.contextmanager
def collecting(guards: GuardSet):
    """Record the guards of hinted size reads into `guards` while the block runs."""
    token = _active.set(guards)
    try:
        yield guards
    finally:
        _active.reset(token)


def active() -> GuardSet | None:
    """The guard set of the jit compile running in this context (None outside one)."""
    return _active.get()


def hinted(x) -> bool:
    """Whether `x` is an int whose trace-time value is a hint (a symbolic input dim, or
    arithmetic on such dims)."""
    return isinstance(x, NumberProxy) and isinstance(x.value, Hint)


def guardable(*xs) -> bool:
    """Whether a relation of `xs` can be guarded: each a plain number, a number proxy with a
    known value, or a hinted size; at least one hinted."""
    return any(hinted(x) for x in xs) and all(
        hinted(x) or not isinstance(x, NumberProxy) or not _unknown(x) for x in xs)


def _unknown(x) -> bool:
    return isinstance(x.value, Unknown)


def hint_of(x):
    """The trace-time value of `x` (no guard: for callers that add their own)."""
    if hinted(x):
        return x.value.hint
    if isinstance(x, NumberProxy):
        return x._read()   # a runtime number: its value joins the key
    return x


def runtime_fn(x):
    """env -> the value of `x` for a call with these base sizes."""
    if hinted(x):
        for number in x.value.numbers:   # a guard over a runtime number fixes its value
            number._read()
        return x.value.fn
    value = hint_of(x)
    return lambda env: value


def _bases(*xs) -> tuple:
    """The base dims (input dims' names) the hinted values among `xs` are computed from."""
    return tuple(dict.fromkeys(b for x in xs if hinted(x) for b in x.value.bases))


def _name(x) -> str:
    if isinstance(x, NumberProxy):
        return x.value.what if hinted(x) else x.name
    return repr(x)


def _sink() -> GuardSet:
    guards = _active.get()
    if guards is None:
        raise RuntimeError("the value of a symbolic size was read outside of a jit compile "
                           "(no guard can be recorded)")
    return guards


def read_hint(x) -> int:
    """``int(x)`` of a hinted size: its value, guarded equal from now on."""
    value = x.value.hint
    guards = _sink()
    fn = runtime_fn(x)
    guards.add(Guard(fn, value, f"{_name(x)} == {value}", _bases(x)))
    guards.pinned.update(_bases(x))   # the trace holds for (about) one value of these dims
    return value


def compare(name: str, a, b) -> bool:
    """``a <op> b`` where one side is a hinted size: its outcome at the hints, guarded."""
    op = _OPS[name]
    result = op(hint_of(a), hint_of(b))
    fa, fb = runtime_fn(a), runtime_fn(b)
    _sink().add(Guard(lambda env: op(fa(env), fb(env)), result,
                      f"({_name(a)} {_SIGNS[name]} {_name(b)}) is {result}", _bases(a, b)))
    return result
