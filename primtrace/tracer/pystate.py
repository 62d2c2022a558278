"""Python state the traced code writes: plain objects, lists, dicts, closure cells, globals.

A trace runs on later calls without the Python code that made it, so an assignment the
code makes (``box.t = y``, ``acc.append(x * 2)``, ``CACHE[key] = y``, ``nonlocal n; n += 1``)
would happen once, at trace time, and leave a proxy behind. Instead:

* **Snapshot.** Before tracing, the plain Python objects the function can reach are
  copied shallowly: its arguments (lists and dicts arrive as the tracer's copies), the
  globals and closure cells of its code and of the user's functions and classes those
  reach by name, and the user attributes of a traced module.
* **Diff and restore.** After tracing, every snapshotted object is compared with its copy
  (items by identity); what changed is recorded as a write (the final contents: appends
  as an extend, dict and attribute changes as sets and deletes) and the object is put
  back as it was.
* **Replay.** The written tensors and numbers become extra outputs of the trace; every
  call (the first included) runs the trace, then applies the writes with that call's
  values: argument containers are found again from the call's arguments, everything
  else is the same object (the guard checks identity). Containers created while tracing
  are built anew per call.
* **Guards.** What the code could have read of these objects (identity, attribute names,
  dict keys, list lengths, numbers...) is checked by the state guard
  (:mod:`primtrace.tracer.state`), so a call that sees another structure retraces.

Whatever cannot be replayed raises :class:`TracingError`, and after tracing no proxy may
be reachable from the state the function touched (a write this snapshot could not see, in
an object too deep or of an unsupported kind, is reported, never kept).
"""
from __future__ import annotations

import types

import torch

from primtrace.ir.proxy import NumberProxy, Proxy, TensorProxy
from primtrace.tracer.location import is_library
from primtrace.tracer.user_code import (MACHINERY, function_of, global_names, library_code,
                                        plain_dict, slot_names)

_DEPTH = 6            # levels of plain objects snapshotted below a root
_MAX_OBJECTS = 20000  # objects snapshotted per trace (the rest is only checked for proxies)
_MISSING = object()   # an absent global, attribute or key
_GLOBAL_OPS = ("LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL")   # read or written


class ReplayError(RuntimeError):
    """A write of the traced code cannot be replayed (capture turns it into TracingError)."""


def _module_attributes(m: torch.nn.Module) -> dict:
    """A module's user attributes (not its parameters, buffers, submodules or hooks)."""
    return {k: v for k, v in vars(m).items() if k not in MACHINERY}


# --- the functions whose globals and cells a trace may write ---------------------------
def _user_functions(fn, roots: list) -> list:
    """The user's functions reachable from `fn` (and the classes of `roots`) by name,
    through cells, and as methods of user classes."""
    todo = [function_of(fn), getattr(fn, "__func__", None)]
    if isinstance(fn, torch.nn.Module):
        todo += [type(m) for m in fn.modules()]
        todo += _forward_hooks(fn)   # they run while tracing: their writes are replayed too
    todo += [type(r) for r in roots]
    seen, found = set(), []
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, type):
            if obj.__module__ in ("builtins",) or obj.__module__.startswith("torch"):
                continue
            for klass in obj.__mro__:
                if klass.__module__ != "builtins" and not klass.__module__.startswith("torch"):
                    todo += [getattr(v, "__func__", v) for v in vars(klass).values()]
            continue
        if not isinstance(obj, types.FunctionType) or \
                library_code(obj.__code__, obj.__globals__):
            continue
        found.append(obj)
        g = obj.__globals__
        for name in global_names(obj.__code__, _GLOBAL_OPS, nested=True):
            value = g.get(name)
            if isinstance(value, (types.FunctionType, types.MethodType, type)):
                todo.append(getattr(value, "__func__", value))
        for cell in obj.__closure__ or ():
            try:
                todo.append(function_of(cell.cell_contents))
            except ValueError:
                pass
    return found


def _forward_hooks(module: torch.nn.Module) -> list:
    """The forward (pre-)hooks of `module`, its submodules and every module (global)."""
    from torch.nn.modules import module as m
    tables = [m._global_forward_pre_hooks, m._global_forward_hooks]
    for sub in module.modules():
        tables += [sub._forward_pre_hooks, sub._forward_hooks]
    return [getattr(h, "__func__", h) for table in tables for h in table.values()]


# --- snapshot ------------------------------------------------------------------------------
class Snapshot:
    """Shallow copies of the plain Python state a traced function can reach (see above)."""

    def __init__(self, fn, pargs: tuple, pkwargs: dict):
        self.objects: dict = {}      # id -> (object, kind, copy of its contents, path)
        self.cells: dict = {}        # id(cell) -> (cell, contents or _MISSING, name)
        self.globals: dict = {}      # (id(globals), name) -> (globals, name, value or _MISSING)
        self.arg_paths: dict = {}    # id(the tracer's copy of an argument container) -> path
        self.arg_objects: list = []  # (plain object, name) passed as (part of) an argument
        self.full = False            # the object cap was reached
        self.torch_objects: dict = {}  # id -> (container, kind, copy, path): an optimizer's
        #   state and param_groups, never replayed: restored, and a write to them is an error
        for i, a in enumerate(pargs):
            self._argument(a, ("a", i), f"argument {i}")
        for k, v in pkwargs.items():
            self._argument(v, ("k", k), k)
        if isinstance(fn, torch.nn.Module):
            for name, m in fn.named_modules():
                for k, v in _module_attributes(m).items():
                    self._walk(v, f"{name or 'self'}.{k}", _DEPTH)
        bound = getattr(fn, "__self__", None)
        if bound is not None and not isinstance(bound, types.ModuleType):
            self._walk(bound, "self", _DEPTH)
        for f in _user_functions(fn, [o for o, *_ in list(self.objects.values())]):
            for name in global_names(f.__code__, _GLOBAL_OPS, nested=True):
                key = (id(f.__globals__), name)
                if key not in self.globals:
                    value = f.__globals__.get(name, _MISSING)
                    self.globals[key] = (f.__globals__, name, value)
                    self._walk(value, name, _DEPTH)
            for i, value in enumerate((*(f.__defaults__ or ()),
                                       *(f.__kwdefaults__ or {}).values())):
                self._walk(value, f"{f.__name__}'s default {i}", _DEPTH)   # hook(m, i, o, log=log)
            for name, cell in zip(f.__code__.co_freevars, f.__closure__ or ()):
                if id(cell) not in self.cells:
                    try:
                        value = cell.cell_contents
                    except ValueError:
                        value = _MISSING
                    self.cells[id(cell)] = (cell, value, name)
                    self._walk(value, name, _DEPTH)

    def _argument(self, value, path: tuple, label: str) -> None:
        """The tracer's copies of argument containers are written back by path."""
        t = type(value)
        if t is list or t is dict or t is tuple:
            self.arg_paths[id(value)] = path
            if t is not tuple:
                self._record(value, label)
            items = value.items() if t is dict else enumerate(value)
            for k, v in items:
                self._argument(v, (*path, k), f"{label}[{k!r}]")
        elif plain_dict(value) is not None or slot_names(type(value)):
            if plain_dict(value) is not None:
                self.arg_objects.append((value, label))
            self._walk(value, label, _DEPTH)

    def _record(self, obj, label, kind=None) -> bool:
        if id(obj) in self.objects:
            return False
        if len(self.objects) >= _MAX_OBJECTS:
            self.full = True
            return False
        if kind is None:
            kind = "list" if type(obj) is list else "dict" if type(obj) is dict else "obj"
        self.objects[id(obj)] = (obj, kind, _contents(obj, kind), label)
        return True

    def _record_class(self, obj, label: str, depth: int) -> None:
        """The slots of an object and the attributes of its class (a user class): written
        back with setattr (``self.__class__.count += 1``, a ``__slots__`` cache)."""
        klass = type(obj)
        if klass.__module__ == "builtins" or klass.__module__.startswith("torch"):
            return
        if slot_names(klass) and self._record(obj, label, "slots"):
            for name, v in _contents(obj, "slots").items():
                self._walk(v, f"{label}.{name}", depth - 1)
        for c in klass.__mro__[:-1]:
            if self._record(c, c.__qualname__, "class"):
                for name, v in _contents(c, "class").items():
                    if not isinstance(v, (types.FunctionType, type, property, staticmethod,
                                          classmethod)):
                        self._walk(v, f"{c.__qualname__}.{name}", depth - 1)

    def _walk(self, value, label: str, depth: int) -> None:
        if depth < 0 or value is _MISSING or isinstance(value, (torch.Tensor, Proxy)):
            return
        t = type(value)
        if t.__module__.startswith("primtrace."):
            return   # primtrace's own objects (a jitted function called inside): not user state
        if t is tuple:
            for i, v in enumerate(value):
                self._walk(v, f"{label}[{i}]", depth - 1)
            return
        if t is list or t is dict:
            if not self._record(value, label):
                return
            items = value.items() if t is dict else enumerate(value)
            for k, v in list(items):
                self._walk(v, f"{label}[{k!r}]", depth - 1)
            return
        if isinstance(value, types.ModuleType):   # a user's module: its globals
            filename = getattr(value, "__file__", None)
            if filename is not None and not is_library(filename) and \
                    self._record(vars(value), label):
                for k, v in list(vars(value).items()):
                    if not k.startswith("__"):
                        self._walk(v, f"{label}.{k}", depth - 1)
            return
        if isinstance(value, torch.optim.Optimizer):
            self._record_optimizer(value, label)
            return
        if isinstance(value, torch.nn.Module):
            for k, v in _module_attributes(value).items():
                self._walk(v, f"{label}.{k}", depth - 1)
            for k, m in vars(value)["_modules"].items():
                self._walk(m, f"{label}.{k}", depth - 1)
            return
        d = plain_dict(value)
        if d is not None and self._record(value, label):
            for k, v in list(d.items()):
                self._walk(v, f"{label}.{k}", depth - 1)
        if (d is not None or slot_names(type(value))) and not isinstance(value, Proxy):
            self._record_class(value, label, depth)

    def _record_optimizer(self, opt, label: str) -> None:
        """An optimizer's containers (torch's object, not replayed): ``state``, each
        parameter's state dict, ``param_groups`` and each group."""
        found = [(opt.state, "dict", f"{label}.state"),
                 (opt.param_groups, "list", f"{label}.param_groups")]
        found += [(d, "dict", f"{label}.state[{type(p).__name__} {tuple(p.shape)}]")
                  for p, d in opt.state.items() if type(d) is dict]
        found += [(g, "dict", f"{label}.param_groups[{i}]") for i, g in enumerate(opt.param_groups)
                  if type(g) is dict]
        for obj, kind, path in found:
            if id(obj) not in self.torch_objects:
                self.torch_objects[id(obj)] = (obj, kind, _contents(obj, kind), path)

    # after tracing ----------------------------------------------------------------------
    def torch_object_writes(self) -> list[str]:
        """The paths of the optimizer containers the traced code changed."""
        return [path for obj, kind, old, path in self.torch_objects.values()
                if not _same_items(old, _contents(obj, kind))]

    def diff(self) -> list:
        """The writes the traced code made, as (kind, target, old, new, label)."""
        writes = []
        for obj, kind, old, label in self.objects.values():
            new = _contents(obj, kind)
            if not _same(old, new):
                writes.append((kind, obj, old, new, label))
        for cell, old, name in self.cells.values():
            try:
                new = cell.cell_contents
            except ValueError:
                new = _MISSING
            if new is not old:
                writes.append(("cell", cell, old, new, name))
        for g, name, old in self.globals.values():
            new = g.get(name, _MISSING)
            if new is not old:
                writes.append(("global", g, old, new, name))
        return writes

    def restore(self) -> None:
        """Put every snapshotted object back as it was before tracing."""
        for obj, kind, old, _ in self.torch_objects.values():
            if not _same_items(old, _contents(obj, kind)):
                _put_back(obj, kind, old)
        for obj, kind, old, _ in self.objects.values():
            if not _same(old, _contents(obj, kind)):
                _put_back(obj, kind, old)
        for cell, old, name in self.cells.values():
            try:
                if cell.cell_contents is old:
                    continue
            except ValueError:
                if old is _MISSING:
                    continue
            if old is _MISSING:
                try:
                    del cell.cell_contents
                except ValueError:
                    pass
            else:
                cell.cell_contents = old
        for g, name, old in self.globals.values():
            if g.get(name, _MISSING) is old:
                continue
            if old is _MISSING:
                g.pop(name, None)
            else:
                g[name] = old


def _contents(obj, kind):
    if kind == "list":
        return list(obj)
    if kind == "slots":
        found = {}
        for name in slot_names(type(obj)):
            value = getattr(obj, name, _MISSING)
            if value is not _MISSING:
                found[name] = value
        return found
    if kind == "class":
        return dict(vars(obj))
    return dict(obj if kind == "dict" else obj.__dict__)


def _set_attributes(obj, values: dict, deleted=None) -> None:
    """Set the attributes of a slotted object or a class to `values` (setattr, delattr)."""
    current = _contents(obj, "slots" if not isinstance(obj, type) else "class")
    for name in (current if deleted is None else deleted):
        if name not in values or deleted is not None:
            try:
                delattr(obj, name)
            except AttributeError:
                pass
    for name, value in values.items():
        if current.get(name, _MISSING) is not value:
            setattr(obj, name, value)


def _same(old, new) -> bool:
    if len(old) != len(new):
        return False
    if type(old) is list:
        return all(a is b for a, b in zip(old, new))
    return list(old) == list(new) and all(old[k] is new[k] for k in old)


def _put_back(obj, kind: str, old) -> None:
    """Give snapshotted `obj` its contents `old` again (as ``_contents`` copied them)."""
    if kind == "list":
        obj[:] = old
    elif kind in ("slots", "class"):
        _set_attributes(obj, old)
    else:
        d = obj if kind == "dict" else obj.__dict__
        d.clear()
        d.update(old)


def _same_items(old, new) -> bool:
    """`_same` with keys compared by identity too (an optimizer's state is keyed by tensors)."""
    if len(old) != len(new):
        return False
    if type(old) is list:
        return all(a is b for a, b in zip(old, new))
    return all(a is b and old[a] is new[b] for a, b in zip(old, new))


# --- replay --------------------------------------------------------------------------------
class Replay:
    """The writes of one trace, applied after each call with that call's values.

    `outputs` are the proxies (tensors, numbers) the writes store: the trace returns them
    after the function's own result. ``needs_call`` is true when a write goes into an
    argument container (then jit passes the call's arguments, see ``apply``)."""

    def __init__(self, snapshot: Snapshot, writes: list):
        self.snapshot = snapshot
        self.outputs: list = []
        self._index: dict = {}      # id(proxy) -> index in outputs
        self._memo: dict = {}       # id(new object) -> its template (shared by all uses)
        self.needs_call = False
        self.ops = [self._op(*w) for w in writes]
        self.snapshot = None        # keep no copies alive once the ops are built

    def _target(self, obj):
        path = self.snapshot.arg_paths.get(id(obj))
        if path is not None:
            self.needs_call = True
            return ("arg", path)
        return ("const", obj)

    def _op(self, kind, target, old, new, label):
        if kind == "list":
            if len(new) >= len(old) and all(a is b for a, b in zip(old, new)):
                return ("extend", self._target(target), [self._encode(v, label)
                                                         for v in new[len(old):]])
            return ("assign", self._target(target), [self._encode(v, label) for v in new])
        if kind in ("slots", "class"):
            return ("setattrs", self._target(target), [k for k in old if k not in new],
                    {k: self._encode(v, f"{label}.{k}") for k, v in new.items()
                     if k not in old or old[k] is not v})
        if kind in ("dict", "obj"):
            key = next((k for k in new if k not in old and holds_proxy(k)), None)
            if key is not None:   # CACHE[tuple(x.shape)] with a symbolic size in the key
                raise ReplayError(f"{label}[{key!r}]: the key holds a traced value, which a "
                                  f"replay cannot rebuild")
            deleted = [k for k in old if k not in new]
            order = [k for k in old if k in new] + [k for k in new if k not in old]
            sets = {k: self._encode(v, f"{label}[{k!r}]" if kind == "dict" else f"{label}.{k}")
                    for k, v in new.items() if k not in old or old[k] is not v}
            op = "update" if order == list(new) else "replace"
            if op == "replace":   # the key order changed (a pop and a set): rewrite it all
                sets = {k: self._encode(v, label) for k, v in new.items()}
            return (op, kind, self._target(target), deleted, sets)
        if kind == "cell":
            return ("cell", target, None if new is _MISSING else self._encode(new, label),
                    new is _MISSING)
        return ("global", target, label, None if new is _MISSING else
                self._encode(new, label), new is _MISSING)

    def _encode(self, v, label, depth: int = 0):
        """A template of a written value: an output slot, an argument, the same object, or
        a container made while tracing (rebuilt on each call)."""
        if isinstance(v, (TensorProxy, NumberProxy)):
            index = self._index.get(id(v))
            if index is None:
                index = self._index[id(v)] = len(self.outputs)
                self.outputs.append(v)
            return ("out", index)
        if isinstance(v, Proxy):
            raise ReplayError(f"{label} was assigned a {type(v).__name__}, which a trace "
                              f"cannot return")
        if id(v) in self.snapshot.arg_paths:
            self.needs_call = True
            return ("arg", self.snapshot.arg_paths[id(v)])
        if id(v) in self.snapshot.objects or isinstance(v, torch.Tensor):
            return ("const", v)
        if id(v) in self._memo:
            return self._memo[id(v)]
        if depth > _DEPTH:
            raise ReplayError(f"{label}: the value written is nested too deeply to replay")
        t = type(v)
        if t is list or t is tuple or t is set or t is frozenset:
            items = [self._encode(x, f"{label}[{i}]", depth + 1) for i, x in enumerate(v)]
            if t in (tuple, frozenset) and all(i[0] == "const" for i in items):
                return ("const", v)
            template = self._memo[id(v)] = ("new", t, items)
            return template
        if t is dict:
            items = [(k, self._encode(x, f"{label}[{k!r}]", depth + 1)) for k, x in v.items()]
            template = self._memo[id(v)] = ("new", dict, items)
            return template
        if not holds_proxy(v):
            return ("const", v)
        d = plain_dict(v)
        if d is None or slot_names(t):
            raise ReplayError(f"{label} was assigned a {t.__qualname__} made while tracing "
                              f"that holds traced values, which primtrace cannot rebuild on "
                              f"later calls")
        items = [(k, self._encode(x, f"{label}.{k}", depth + 1)) for k, x in d.items()]
        template = self._memo[id(v)] = ("newobj", t, items)
        return template

    # per call ----------------------------------------------------------------------------
    def apply(self, values, call=None) -> None:
        memo = {}

        def build(t):
            tag = t[0]
            if tag == "out":
                return values[t[1]]
            if tag == "const":
                return t[1]
            if tag == "arg":
                return _follow(call, t[1])
            made = memo.get(id(t))
            if made is not None:
                return made
            if tag == "new":
                kind, items = t[1], t[2]
                if kind is dict:
                    made = memo[id(t)] = {}
                    made.update((k, build(x)) for k, x in items)
                elif kind is list:
                    made = memo[id(t)] = []
                    made.extend(build(x) for x in items)
                else:
                    made = memo[id(t)] = kind(build(x) for x in items)
                return made
            made = memo[id(t)] = t[1].__new__(t[1])   # "newobj": a plain instance
            made.__dict__.update((k, build(x)) for k, x in t[2])
            return made

        def target(t):
            return t[1] if t[0] == "const" else _follow(call, t[1])

        for op in self.ops:
            tag = op[0]
            if tag == "extend":
                target(op[1]).extend([build(x) for x in op[2]])
            elif tag == "assign":
                target(op[1])[:] = [build(x) for x in op[2]]
            elif tag == "setattrs":
                obj = target(op[1])
                for k in op[2]:
                    delattr(obj, k)
                for k, x in op[3].items():
                    setattr(obj, k, build(x))
            elif tag in ("update", "replace"):
                obj = target(op[2])
                d = obj if op[1] == "dict" else obj.__dict__
                if tag == "replace":
                    d.clear()
                for k in op[3]:
                    d.pop(k, None)
                for k, x in op[4].items():
                    d[k] = build(x)
            elif tag == "cell":
                if op[3]:
                    del op[1].cell_contents
                else:
                    op[1].cell_contents = build(op[2])
            else:   # "global"
                _, g, name, value, deleted = op
                if deleted:
                    g.pop(name, None)
                else:
                    g[name] = build(value)

    def wrap(self, run):
        """The compiled function of a trace with writes: runs it, applies the writes."""
        return Replaying(run, self)


class Replaying:
    """``run`` then the writes: what the jit cache holds for a trace that writes state.
    Called like the compiled function (``fn(*inputs)``); ``call_with`` also gets the
    call's arguments, for writes into argument containers."""
    __slots__ = ("run", "replay", "needs_call")

    def __init__(self, run, replay: Replay):
        self.run, self.replay, self.needs_call = run, replay, replay.needs_call

    def __call__(self, *inputs):
        out, values = self.run(*inputs)
        self.replay.apply(values)
        return out

    def call_with(self, call: tuple, inputs):
        out, values = self.run(*inputs)
        self.replay.apply(values, call)
        return out


def _follow(call, path):
    args, kwargs = call
    obj = args[path[1]] if path[0] == "a" else kwargs[path[1]]
    for k in path[2:]:
        obj = obj[k]
    return obj


def holds_proxy(v, depth: int = 0) -> bool:
    """Whether a proxy sits in `v`: its items, a plain object's attributes and slots."""
    if isinstance(v, Proxy):
        return True
    if depth > _DEPTH:
        return False
    t = type(v)
    if t in (list, tuple, set, frozenset):
        return any(holds_proxy(x, depth + 1) for x in v)
    if t is dict:
        return any(holds_proxy(x, depth + 1) for x in v.values())
    d = plain_dict(v)
    if d is not None and any(holds_proxy(x, depth + 1) for x in d.values()):
        return True
    return any(holds_proxy(getattr(v, n, None), depth + 1) for n in slot_names(t))


# --- no proxy may escape -----------------------------------------------------------------------
def find_proxy(roots, limit: int = 4 * _MAX_OBJECTS):
    """(path, proxy) of a proxy reachable from `roots` ((label, value) pairs) through
    containers, plain objects and module attributes, or None."""
    seen = set()
    todo = [(label, value, 0) for label, value in roots]
    while todo and len(seen) < limit:
        label, v, depth = todo.pop()
        if isinstance(v, Proxy):
            return label, v
        if id(v) in seen or depth > 2 * _DEPTH or isinstance(v, torch.Tensor):
            continue
        t = type(v)
        if t in (list, tuple, set, frozenset):
            seen.add(id(v))
            todo += [(f"{label}[{i}]", x, depth + 1) for i, x in enumerate(v)]
        elif isinstance(v, dict):   # a defaultdict too (an optimizer's state)
            seen.add(id(v))
            todo += [(f"{label}[{k!r}]", x, depth + 1) for k, x in v.items()]
        elif type(v).__module__.startswith("primtrace."):
            continue   # primtrace's own objects (a jitted function's cached traces) hold proxies
        elif isinstance(v, torch.nn.Module):
            seen.add(id(v))
            todo += [(f"{label}.{k}", x, depth + 1) for k, x in _module_attributes(v).items()]
            todo += [(f"{label}.{k}", x, depth + 1) for k, x in vars(v)["_modules"].items()]
        elif isinstance(v, types.ModuleType):
            filename = getattr(v, "__file__", None)
            if depth == 0 and filename is not None and not is_library(filename):
                seen.add(id(v))   # a user's module named by a global: its own globals
                todo += [(f"{label}.{k}", x, depth + 1) for k, x in vars(v).items()
                         if not k.startswith("__")]
        elif not isinstance(v, (types.FunctionType, types.MethodType)):
            seen.add(id(v))
            d = plain_dict(v)
            if d is None and type(v).__module__.startswith("torch.optim"):
                d = vars(v)   # an optimizer (torch's object): its state and param_groups
            if d is not None:
                todo += [(f"{label}.{k}", x, depth + 1) for k, x in d.items()]
            klass = v if isinstance(v, type) else type(v)
            if klass.__module__ in ("builtins",) or klass.__module__.startswith("torch"):
                continue
            for c in klass.__mro__[:-1]:   # slots, and class attributes of user classes
                for name in getattr(c, "__slots__", ()):
                    x = getattr(v, name, None) if isinstance(name, str) else None
                    todo.append((f"{label}.{name}", x, depth + 1))
                if id(c) not in seen:
                    seen.add(id(c))
                    todo += [(f"{c.__qualname__}.{k}", x, depth + 1) for k, x in vars(c).items()
                             if not k.startswith("__")]
    return None
