"""Why a jitted function compiled again: recompile reasons, and the warning at the limit.

Nothing here runs on a cache hit. On a miss (a call no cached entry accepts), when the
function has compiled before, :func:`miss_changes` compares the call with the nearest entry
of the same function:

* a key no entry has: the cached key that differs least from the call's (default dtype,
  grad mode, the argument structure, per tensor dtype, shape, device, stride class,
  requires_grad, per Python number its type, constants by value), field by field;
* a key that has entries: the numbers the trace specialized on (their values), then the
  state guards of its variants (:mod:`primtrace.tracer.state`): which check of the variant
  with fewest failing checks failed (a module's ``training`` flag, an attribute, a replaced
  submodule, a global or closure variable rebound, a state tensor's metadata...).

Each difference is a :class:`Change` worded like Dynamo's guard failures ("tensor 'x' size
mismatch at index 0: expected 3, actual 4"); a :class:`Recompile` holds those of one
recompile. :class:`RecompileLog` keeps a function's recompiles (``cache_info(jfn).recompiles``),
logs each on the ``primtrace.recompiles`` logger (INFO) and warns once when their number
reaches the function's ``recompile_limit``.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import sys
import warnings

import torch

log = logging.getLogger("primtrace.recompiles")

#: recompiles of one function kept for ``cache_info`` (the oldest go first; the count goes on)
KEPT = 256
_NUMBER_TYPES = (int, float, complex)
_MISSING = object()


class RecompileWarning(UserWarning):
    """A jitted function reached its ``recompile_limit``."""


@dataclasses.dataclass(frozen=True)
class Change:
    """One difference between a call and the cached entry nearest to it.

    `kind`: what differs ("shape", "dtype", "strides", "device", "requires_grad",
    "tensor type", "number type", "structure", "constant", "specialized value",
    "default dtype", "autocast", "grad mode"; for state guards where it comes from: "training",
    "attribute", "submodule", "parameter", "buffer", "hooks", "global", "closure", "class",
    "argument", "grad", "state"; "evicted"). `what`: the argument path or state
    ("x", "xs[1]", "self.training", "global SCALE"). `old`, `new`: short texts of the
    cached entry's value and the call's. `text`: the whole sentence."""
    kind: str
    what: str
    old: str
    new: str
    text: str

    def __str__(self):
        return self.text


@dataclasses.dataclass(frozen=True, repr=False)
class Recompile:
    """One recompile of a jitted function: `number` (1 for the first recompile) and its
    `changes` (every difference found, first the one `kind`/`what`/`old`/`new` describe).
    `reason` (also ``str()``) is the readable summary."""
    number: int
    changes: tuple

    @property
    def reason(self) -> str:
        shown = "; ".join(c.text for c in self.changes[:3])
        more = len(self.changes) - 3
        return shown + (f" (and {more} more)" if more > 0 else "")

    kind = property(lambda self: self.changes[0].kind)
    what = property(lambda self: self.changes[0].what)
    old = property(lambda self: self.changes[0].old)
    new = property(lambda self: self.changes[0].new)

    def __str__(self):
        return self.reason

    def __repr__(self):
        return f"Recompile(#{self.number}: {self.reason})"


# --- short texts ------------------------------------------------------------------------------
def short(value, limit: int = 60) -> str:
    """A short readable text of a value: numbers and flags by repr, objects by type."""
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    if isinstance(value, torch.Tensor):
        return f"a {short(value.dtype)}{list(value.shape)} tensor"
    if isinstance(value, torch.nn.Module):
        return f"a {type(value).__name__} module"
    if callable(value) and hasattr(value, "__qualname__") and not isinstance(value, type):
        return f"function {value.__qualname__}"
    if type(value).__repr__ is object.__repr__:
        return f"a {type(value).__name__} object"
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _dtype(d) -> str:
    return str(d).removeprefix("torch.")


def _shape(s) -> str:
    return str(list(s))


def _strides(s) -> str:
    return "contiguous" if s is True else f"strides {tuple(s)}"


# --- tensors ---------------------------------------------------------------------------------
def tensor_changes(name: str, old: tuple, new: tuple) -> list[Change]:
    """What differs between two tensor keys: (dtype, shape, device, strides or True when
    contiguous, requires_grad[, tensor type])."""
    out, label = [], f"tensor '{name}'"

    def add(kind, what_differs, a, b, note=""):
        out.append(Change(kind, name, a, b, f"{label} {what_differs}: expected {a}, actual {b}{note}"))

    if old[0] != new[0]:
        add("dtype", "dtype mismatch", _dtype(old[0]), _dtype(new[0]))
    if old[1] != new[1]:
        if len(old[1]) != len(new[1]):
            add("shape", "shape mismatch", _shape(old[1]), _shape(new[1]))
        else:
            i = next(i for i, (a, b) in enumerate(zip(old[1], new[1])) if a != b)
            out.append(Change("shape", name, _shape(old[1]), _shape(new[1]),
                              f"{label} size mismatch at index {i}: expected {old[1][i]}, "
                              f"actual {new[1][i]}"))
    if old[2] != new[2]:
        add("device", "device mismatch", str(old[2]), str(new[2]))
    if old[3] != new[3] and (old[1] == new[1] or (old[3] is True) != (new[3] is True)):
        add("strides", "stride mismatch", _strides(old[3]), _strides(new[3]))
    if old[4] != new[4]:
        add("requires_grad", "requires_grad mismatch", str(old[4]), str(new[4]))
    old_type = old[5] if len(old) > 5 else torch.Tensor
    new_type = new[5] if len(new) > 5 else torch.Tensor
    if old_type is not new_type:
        add("tensor type", "type mismatch", old_type.__name__, new_type.__name__)
    return out


# --- cache keys (primtrace.tracer.inputs.cache_key) ----------------------------------------------
def _is_tensor(k) -> bool:
    return type(k) is tuple and len(k) in (5, 6) and isinstance(k[0], torch.dtype)


def _is_container(k) -> bool:
    return type(k) is tuple and len(k) == 2 and k[0] in (tuple, list, dict) and type(k[1]) is tuple


def _is_number_type(k) -> bool:
    return k is int or k is float or k is complex


def _split(rest: tuple):
    """(positional keys, keyword items) of a key's arguments: keywords, when there are any,
    are a last tuple of (name, key) pairs (no positional key starts with a pair)."""
    if rest and type(rest[-1]) is tuple and rest[-1] and type(rest[-1][0]) is tuple:
        return rest[:-1], rest[-1]
    return rest, ()


def _key_text(k) -> str:
    if _is_tensor(k):
        return f"a {_dtype(k[0])}{_shape(k[1])} tensor"
    if _is_number_type(k):
        return f"a Python {k.__name__}"
    if _is_container(k):
        if k[0] is dict:
            return f"a dict with keys ({', '.join(repr(n) for n, _ in k[1])})"
        return f"a {k[0].__name__} of {len(k[1])}"
    if type(k) is tuple and len(k) == 2 and isinstance(k[0], type):
        t, x = k
        if type(x) is int and t is not int:   # an unhashable object, by identity
            return f"a {t.__name__} object"
        return short(x)
    return short(k)


def _diff(path: str, a, b, out: list) -> None:
    if a == b:
        return
    if _is_tensor(a) and _is_tensor(b):
        out += tensor_changes(path, a, b)
    elif _is_number_type(a) and _is_number_type(b):
        out.append(Change("number type", path, a.__name__, b.__name__,
                          f"number '{path}' type mismatch: expected {a.__name__}, actual "
                          f"{b.__name__}"))
    elif _is_container(a) and _is_container(b) and a[0] is b[0] and (
            [n for n, _ in a[1]] == [n for n, _ in b[1]] if a[0] is dict
            else len(a[1]) == len(b[1])):
        if a[0] is dict:
            for (name, x), (_, y) in zip(a[1], b[1]):
                _diff(f"{path}[{name!r}]", x, y, out)
        else:
            for i, (x, y) in enumerate(zip(a[1], b[1])):
                _diff(f"{path}[{i}]", x, y, out)
    elif (type(a) is tuple and type(b) is tuple and len(a) == len(b) == 2 and
          not _is_container(a) and not _is_container(b) and a[0] is b[0]):
        old, new = _key_text(a), _key_text(b)
        out.append(Change("constant", path, old, new,
                          f"argument '{path}' value mismatch: expected {old}, actual {new} (a constant "
                          f"of the trace, in the key by value)"))
    else:
        old, new = _key_text(a), _key_text(b)
        out.append(Change("structure", path, old, new,
                          f"argument '{path}' structure mismatch: expected {old}, actual {new}"))


def _autocast(state) -> str:
    """The autocast state of a key (tracer/autocast.py's state()) in words."""
    if state is None:
        return "off"
    from primtrace.tracer.autocast import DEVICES
    on = [f"{d} {_dtype(dtype)}" for d, (enabled, dtype) in zip(DEVICES, state[0]) if enabled]
    return ", ".join(on) + ("" if state[1] else " (cache off)")


def key_changes(old: tuple, new: tuple, names) -> list[Change]:
    """What differs between two cache keys; `names(n)`: the names of n positional arguments."""
    out = []
    old_dtype, old_autocast = old[0] if type(old[0]) is tuple else (old[0], None)
    new_dtype, new_autocast = new[0] if type(new[0]) is tuple else (new[0], None)
    if old_autocast != new_autocast:   # under autocast key[0] is (default dtype, its state)
        a, b = _autocast(old_autocast), _autocast(new_autocast)
        out.append(Change("autocast", "torch.autocast", a, b,
                          f"autocast mismatch: expected {a}, actual {b}"))
    if old_dtype != new_dtype:
        a, b = _dtype(old_dtype), _dtype(new_dtype)
        out.append(Change("default dtype", "default dtype", a, b,
                          f"default dtype mismatch: expected {a}, actual {b} "
                          f"(torch.set_default_dtype)"))
    if old[1] != new[1]:
        a, b = ("enabled" if m else "disabled" for m in (old[1], new[1]))
        out.append(Change("grad mode", "grad mode", a, b,
                          f"grad mode mismatch: expected {a}, actual {b} "
                          f"(torch.no_grad / torch.enable_grad)"))
    old_args, old_kw = _split(old[2:])
    new_args, new_kw = _split(new[2:])
    if len(old_args) != len(new_args):
        a, b = str(len(old_args)), str(len(new_args))
        out.append(Change("structure", "arguments", a, b,
                          f"positional argument count mismatch: expected {a}, actual {b}"))
    else:
        for name, x, y in zip(names(len(new_args)), old_args, new_args):
            _diff(name, x, y, out)
    old_names, new_names = [n for n, _ in old_kw], [n for n, _ in new_kw]
    if old_names != new_names:
        a, b = f"({', '.join(old_names)})", f"({', '.join(new_names)})"
        out.append(Change("structure", "keyword arguments", a, b,
                          f"keyword arguments mismatch: expected {a}, actual {b}"))
    else:
        for (name, x), (_, y) in zip(old_kw, new_kw):
            _diff(name, x, y, out)
    return out


def leaf_paths(key: tuple, names) -> list[str]:
    """The argument path of each runtime leaf (tensor or number) of a key, in leaf order."""
    out = []

    def walk(path, k):
        if _is_tensor(k) or _is_number_type(k) or (type(k) is tuple and len(k) == 2 and k[0] is int):
            out.append(path)
        elif _is_container(k) and k[0] is dict:
            for name, item in k[1]:
                walk(f"{path}[{name!r}]", item)
        elif _is_container(k):
            for i, item in enumerate(k[1]):
                walk(f"{path}[{i}]", item)

    args, kw = _split(key[2:])
    for name, k in zip(names(len(args)), args):
        walk(name, k)
    for name, k in kw:
        walk(name, k)
    return out


# --- state guards (primtrace.tracer.state.Guard) -------------------------------------------------
def _explainer(guard):
    """A function of the leaves that runs the guard's fetches and every check on its own:
    (index of the fetch that failed, None) or (None, failed check indices), and its locals."""
    found = guard.__dict__.get("_explain")
    if found is not None:
        return found
    lines = ["def explain(leaves):"]
    for i, fetch in enumerate(guard.fetches):
        lines += ["    try:", f"        {fetch}", "    except Exception:",
                  f"        return {i}, None, locals()"]
    lines.append("    failed = []")
    for i, check in enumerate(guard.checks):
        lines += ["    try:", f"        if not ({check}):", f"            failed.append({i})",
                  "    except Exception:", f"        failed.append({i})"]
    lines.append("    return None, failed, locals()")
    namespace = dict(guard.namespace)
    exec(compile("\n".join(lines) + "\n", "<primtrace guard explanation>", "exec"), namespace)  # noqa: S102
    guard._explain = namespace["explain"]
    return guard._explain


def guard_changes(guard, leaves) -> list[Change]:
    """Which of the guard's checks fail for this call, as changes (empty if none does)."""
    fetch, failed, local = _explainer(guard)(list(leaves))
    if fetch is not None:
        origin, what = guard.fetch_where[fetch] if fetch < len(guard.fetch_where) else ("state", "state")
        return [Change(origin, what, "a tensor", "missing", f"{what} is gone (expected a tensor)")]
    out = []
    for i in failed:
        (origin, what), kind, expected, actual_expr = guard.where[i]
        try:
            actual = eval(actual_expr, guard.namespace, local)  # noqa: S307
        except Exception:
            actual = _MISSING
        out += _check_changes(origin, what, kind, expected, actual)
    return out


def _check_changes(origin, what, kind, expected, actual) -> list[Change]:
    if actual is _MISSING:
        old = short(expected) if kind in ("value", "identity") else "present"
        return [Change(origin, what, old, "missing", f"{what} is gone (expected {old})")]
    if kind == "tensor":
        return tensor_changes(what, expected, actual)
    if kind == "size guard":
        return [Change("size guard", "sizes", "True", "False", f"size guard failed: {actual} "
                       f"no longer holds (a trace with symbolic dims of state assumed it)")]
    if kind == "alias":
        return [Change(origin, what, expected, "another tensor",
                       f"{what} is no longer the same tensor as {expected}")]
    if kind == "keys":
        return [_keys_change(origin, what, expected, actual)]
    if kind == "items":
        return _items_changes(origin, what, expected, actual)
    old, new = short(expected), short(actual)
    if kind == "identity" and old == new:   # the same text: say it by type
        old, new = _typed(expected), "another " + _typed(actual).removeprefix("a ")
    note = ""
    if origin == "training":
        note = " (module.eval() was called)" if expected is True else " (module.train() was called)"
    return [Change(origin, what, old, new, f"{what} changed: expected {old}, actual {new}{note}")]


def _typed(value) -> str:
    text = short(value)
    return text if text.startswith(("a ", "function ")) else f"a {type(value).__name__} object"


def _keys_change(origin, what, expected, actual) -> Change:
    if type(expected) is int:   # a list's length
        return Change(origin, what, str(expected), str(actual),
                      f"{what} length changed: expected {expected}, actual {actual}")
    added = [k for k in actual if k not in expected]
    removed = [k for k in expected if k not in actual]
    parts = [f"added {', '.join(map(repr, added))}"] if added else []
    parts += [f"removed {', '.join(map(repr, removed))}"] if removed else []
    return Change(origin, what, f"{len(expected)} keys", f"{len(actual)} keys",
                  f"{what} keys changed: {'; '.join(parts) or 'reordered'}")


def _items_changes(origin, what, expected: dict, actual: dict) -> list[Change]:
    """A module's parameters, buffers, submodules or hooks: which entry changed."""
    if origin == "hooks":
        return [Change(origin, what, f"{len(expected)} hooks", f"{len(actual)} hooks",
                       f"{what} changed: expected {len(expected)} hook(s), actual {len(actual)}")]
    owner = what.rsplit(".", 1)[0] if what.rsplit(".", 1)[-1].startswith("_") else what
    out = []
    for name in [*expected, *(k for k in actual if k not in expected)]:
        old, new = expected.get(name, _MISSING), actual.get(name, _MISSING)
        if old is new:
            continue
        a = "missing" if old is _MISSING else short(old)
        b = "missing" if new is _MISSING else short(new)
        if a == b:
            a, b = _typed(old), "another " + _typed(new).removeprefix("a ")
        out.append(Change(origin, f"{owner}.{name}", a, b,
                          f"{owner}.{name} changed: expected {a}, actual {b}"))
    if not out:   # same objects, another order
        out.append(Change(origin, what, "", "", f"{what} changed order"))
    return out


# --- the nearest entry ---------------------------------------------------------------------------
def miss_changes(cache: dict, key: tuple, leaves, names, evicted=()) -> list[Change]:
    """Why a call with this key and these leaves found no entry in `cache` (a jit cache:
    key -> a compiled entry, a table of specialized values, or guarded variants; read by
    their attributes, so that this module does not import primtrace.jit). `names(n)`: the
    names of n positional arguments; `evicted`: hashes of keys evicted lately."""
    slot = cache.get(key)
    if slot is None:
        if hash(key) in evicted:
            return [Change("evicted", "cache", "cached", "evicted",
                           "this kind of input was compiled before and evicted from the "
                           "cache (raise the cache_size option)")]
        best = None
        for old in reversed(list(cache)):   # newest first: ties go to the newest entry
            changes = key_changes(old, key, names)
            if best is None or len(changes) < len(best):
                best = changes
        if best is None:
            return [Change("evicted", "cache", "cached", "evicted",
                           "the cache holds no entry (evicted: raise the cache_size option)")]
        return best or [Change("structure", "arguments", "", "", "the cache key changed")]
    table = getattr(slot, "table", None)
    if table is not None:   # numbers whose values the trace read
        values = slot.values(leaves)
        if values not in table:
            return _specialized_changes(slot.positions, table, values, leaf_paths(key, names))
        slot = table[values]
    variants = getattr(slot, "variants", None) or (slot,)
    best = None
    for compiled in variants:
        guard = compiled.traces[0].tags.get("guard")
        if guard is None:
            continue
        changes = guard_changes(guard, leaves)
        if changes and (best is None or len(changes) < len(best)):
            best = changes
    return best or [Change("state", "state", "", "", "the state the function reads changed")]


def _specialized_changes(positions, table, values, paths) -> list[Change]:
    best = min(table, key=lambda old: sum(a != b for a, b in zip(old, values)), default=None)
    out = []
    for i, old, new in zip(positions, best or (), values):
        if old != new:
            path = paths[i] if i < len(paths) else f"input {i}"
            out.append(Change("specialized value", path, old, new,
                              f"number '{path}' value mismatch: expected {old}, actual {new} "
                              f"(its value was read while tracing: the trace is specialized "
                              f"on it)"))
    return out


# --- a function's log ----------------------------------------------------------------------------
class RecompileLog:
    """A jitted function's recompiles (the last :data:`KEPT`), and the warning at `limit`."""

    def __init__(self, fn, limit):
        self.fn, self.limit = fn, limit
        self.records: list[Recompile] = []
        self.count = 0

    def add(self, changes: list) -> Recompile:
        self.count += 1
        record = Recompile(self.count, tuple(changes))
        self.records.append(record)
        del self.records[:-KEPT]
        log.info("primtrace.jit: recompiling %s (recompile %d): %s", self.name(), self.count,
                 record.reason)
        if self.limit is not None and self.count == self.limit:
            short_name = getattr(self.fn, "__name__", None) or type(self.fn).__name__.lower()
            warnings.warn(
                f"primtrace.jit hit recompile_limit ({self.limit})\n"
                f"   function: {self.name()}\n"
                f"   last reason: {record.reason}\n"
                f"Every recompile traces and compiles the function again.\n"
                f"To see every reason: primtrace.cache_info(jitted_fn).recompiles\n"
                f"To raise the limit: primtrace.jit({short_name}, "
                f"recompile_limit={2 * self.limit}) (None: never warn)",
                RecompileWarning, stacklevel=_caller_level())
        return record

    def clear(self) -> None:
        self.records.clear()
        self.count = 0

    def name(self) -> str:
        fn = self.fn
        code_of = fn.forward if isinstance(fn, torch.nn.Module) else fn
        code = getattr(getattr(code_of, "__func__", code_of), "__code__", None)
        name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
        where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
        return f"'{name}'{where}"


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _caller_level() -> int:
    """The stacklevel of the first frame outside primtrace: the user's call."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


# --- counters: state numbers that change on every call -----------------------------------
#: misses in a row of one key, each because a state number took a value not seen before (a
#: call counter, ``self.calls += 1``), after which calls with that key run eagerly
COUNTER_MISSES = 4
#: where a state number a guard checks comes from (Change.kind)
_STATE_KINDS = {"attribute", "global", "closure", "class", "state"}


class CounterWarning(UserWarning):
    """A jitted function runs eagerly: a number it reads changes on every call."""


def _is_number(text: str) -> bool:
    try:
        float(text)
    except (TypeError, ValueError):
        return False
    return True


class Counters:
    """State numbers that change on every call. The trace holds a state number as a
    constant, so each new value compiles again: a counter would compile on every call (far
    slower than eager). After COUNTER_MISSES misses of one key whose only changes are such
    numbers, each new, the key runs the function eagerly, as Dynamo does at its recompile
    limit, and a CounterWarning names the number once."""

    def __init__(self):
        self._seen: dict = {}    # key -> {what: values seen}
        self.eager: dict = {}    # key -> the state number that changes on every call

    def changed(self, key, why: list) -> str | None:
        """Note a miss's changes; the number's name when calls with `key` now run eagerly."""
        if not why or not all(c.kind in _STATE_KINDS and _is_number(c.old) and _is_number(c.new)
                              for c in why):
            self._seen.pop(key, None)
            return None
        seen = self._seen.setdefault(key, {})
        for c in why:
            values = seen.setdefault(c.what, set())
            values.update((c.old, c.new))
            if len(values) > COUNTER_MISSES:
                self.eager[key] = c.what
                return c.what
        return None
