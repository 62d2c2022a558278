"""State a traced function reads besides its arguments: lifted into inputs, and guarded.

A function or ``forward`` reads parameters, buffers, tensors in globals and closures, and
Python values (``self.training``, ``self.scale``, a global flag) that change between calls.
primtrace follows torch.compile's answer (inputs + guards), without bytecode analysis:

* **Recording.** While a trace is acquired, attribute reads on ``nn.Module`` instances are
  recorded (nn.Module's ``__getattribute__``/``__getattr__`` are wrapped for the duration;
  only the tracing context records), and so are the global names loaded (``dis``'s
  ``LOAD_GLOBAL``) by the user's frames on the stack of each torch call and by the user's
  functions those reach by name,
  and the closure cells of the traced function.
* **Lifting.** A real tensor that reaches a torch call while tracing becomes an input of the
  trace (``StateRecorder.lift``), never a constant: gradients flow to parameters, and the
  tensor is fetched again on every call.
* **Guards.** After tracing, every read becomes a check in one generated Python function:
  a tensor must still have the traced metadata (it is then passed to the compiled trace),
  a module or other object must be the same object, a number, string or bool must have
  the same value, hook dictionaries the same hooks. The guard returns the state tensors for
  this call, or None: then the call compiles again (the old entry stays for when the state
  comes back, as after ``eval()`` then ``train()``).

Not seen (documented in the README): tensors and objects inside lists, objects more than two
attribute levels below a read (``a.b.c.d``), globals of installed packages, torch and the
standard library, attributes of objects that are not modules, dicts or plain instances,
and Python side effects of the traced code (assigning a module attribute while tracing
raises :class:`~primtrace.tracer.TracingError`).
"""
from __future__ import annotations

import contextlib
import contextvars
import enum
import sys
import threading
import types

import torch

from primtrace.ir import size_guards
from primtrace.ir.proxy import TensorProxy, TensorSpec
from primtrace.tracer import dynamic, guard_groups
from primtrace.tracer.dynamic import tensor_key
from primtrace.tracer.user_code import (MACHINERY as _MACHINERY, function_of as _function_of,
                                        global_names, library_code as _library_code,
                                        plain_dict)

_Module = torch.nn.Module
_object_getattribute = object.__getattribute__
_active: contextvars.ContextVar["StateRecorder | None"] = contextvars.ContextVar(
    "primtrace_state", default=None)

_STRUCTURE = ("_parameters", "_buffers", "_modules")   # iterated: its items are guarded
_NUMBERS = (int, float, complex, str, bytes, torch.device)
_SCALARS = (bool, *_NUMBERS, torch.dtype)
_MAX_ITEMS = 256   # a bigger dict or object is guarded by identity only
_MAX_VALUES = 64   # a tensor read as numbers (sizes, indices) with more elements is data
#: what a guarded read of a module is, in recompile reasons
_ORIGINS = {"_parameters": "parameter", "_buffers": "buffer", "_modules": "submodule"}


class SideEffectError(RuntimeError):
    """Traced code assigned a module attribute (replaced by TracingError in capture)."""


# --- recording module attribute reads and writes ---------------------------------------
def _recording_getattribute(self, name):
    value = _object_getattribute(self, name)
    recorder = _active.get()
    if recorder is not None and name in _object_getattribute(self, "__dict__"):
        recorder.module_read(self, "__dict__", name, value)
    return value


_original_getattr = _Module.__getattr__
_original_setattr = _Module.__setattr__


def _recording_getattr(self, name):
    d = _object_getattribute(self, "__dict__")
    for store in _STRUCTURE:
        table = d.get(store)
        if table is not None and name in table:
            value = table[name]
            recorder = _active.get()
            if recorder is not None:
                recorder.module_read(self, store, name, value)
            return value
    return _original_getattr(self, name)


def _recording_setattr(self, name, value):
    recorder = _active.get()
    if recorder is not None:
        if recorder.same_state_tensor(self, name, value):
            return   # ``self._u = F.normalize(..., out=self._u)``: eager assigns the same tensor
        recorder.module_write(self, name, value)
    _original_setattr(self, name, value)


_original_init = _Module.__init__


def _recording_init(self, *args, **kwargs):
    """A module the traced code makes (``loss_fct = CrossEntropyLoss()`` in a forward) is
    made again on every call: its attributes are not state, reading or writing them."""
    recorder = _active.get()
    if recorder is not None:
        recorder.created[id(self)] = self
    _original_init(self, *args, **kwargs)


_patch_lock = threading.Lock()
_patch_users = 0


@contextlib.contextmanager
def _module_patches():
    """nn.Module's attribute hooks, installed while any thread traces (they only record in
    the tracing context, so other threads see a slower but unchanged nn.Module)."""
    global _patch_users
    with _patch_lock:
        if _patch_users == 0:
            _Module.__getattribute__ = _recording_getattribute
            _Module.__getattr__ = _recording_getattr
            _Module.__setattr__ = _recording_setattr
            _Module.__init__ = _recording_init
        _patch_users += 1
    try:
        yield
    finally:
        with _patch_lock:
            _patch_users -= 1
            if _patch_users == 0:
                del _Module.__getattribute__
                _Module.__getattr__ = _original_getattr
                _Module.__setattr__ = _original_setattr
                _Module.__init__ = _original_init


_acquire_code = None   # the tracer's frame that runs the traced function: walks stop there


def set_stop_frame(code) -> None:
    global _acquire_code
    _acquire_code = code


# --- sources: expressions that fetch a value again -------------------------------------
class _Code:
    """The guard function under construction: bound constants, fetches and checks."""

    def __init__(self):
        self.consts: dict = {}
        self._names: dict[int, str] = {}
        self.fetches: list[str] = []
        self.checks: list[str] = []
        # per check, what a recompile reason says of it (primtrace.recompiles):
        # ((origin, readable name), kind, expected value, expression of the actual value)
        self.where: list[tuple] = []
        self.fetch_where: list[tuple] = []   # per fetch, (origin, readable name)
        self.tensors: dict[int, str] = {}   # check index -> the tensor a metadata check reads
        # per check, what decides it (guard_groups.py): the names of the constant dicts whose
        # items it reads (() for none), TENSOR for a fetched state tensor's metadata, or None
        self.keys: list = []
        self.state_tensors: list = []   # (fetched variable, tensor) of the TENSOR checks
        self.symbolic: dict[str, tuple] = {}   # fetched state -> (symbolic dims, its name)
        self.budget = 4096   # item checks left: a huge structure is checked in part
        self._classes: set = set()
        self._owners: set = set()   # modules' __dict__s whose identity is checked
        self.written_classes: set = set()   # classes whose attributes the code assigns

    def const(self, obj, hint: str = "k") -> str:
        name = self._names.get(id(obj))
        if name is None:
            name = f"{hint}{len(self.consts)}"
            self.consts[name] = obj
            self._names[id(obj)] = name
        return name

    def check(self, test: str, what: tuple, kind: str, expected, actual: str,
              key: tuple | None = None) -> None:
        self.checks.append(test)
        self.where.append((what, kind, expected, actual))
        self.keys.append(key)

    def dict_of(self, owner, store: str) -> tuple[str, tuple | None]:
        """(constant name, key) of the dict `owner`'s `store` reads go through: its
        ``__dict__`` (checked to be that dict every call) or one held there
        (``_parameters``...); the key is what decides a check of an item read from it."""
        d = _object_getattribute(owner, "__dict__")
        name = self.const(d, "md")
        if name not in self._owners:
            self._owners.add(name)
            self.check(f"{self.const(owner, 'm')}.__dict__ is {name}", ("state", name),
                       "identity", d, f"{self.const(owner, 'm')}.__dict__")
        if store == "__dict__":
            return name, (name,)
        inner = d[store]
        inner_name = self.const(inner, "sd")
        self.check(f"{name}[{store!r}] is {inner_name}", ("state", store), "identity", inner,
                   f"{name}[{store!r}]", (name,))
        return inner_name, guard_groups.key_of(inner, inner_name)

    def check_value(self, expr: str, value, depth: int = 4, what: tuple = ("state", ""),
                    key: tuple | None = None) -> None:
        """`expr` still evaluates to `value`: by identity, or by type and value for numbers.

        A plain object (a config dataclass, a namespace, a cache object), a dict or a list
        is also checked item by item, `depth` levels down: its length (attribute names, keys)
        and what it holds (numbers by value, objects by identity; tensors are checked where
        the trace reads them). Code reads ``CONFIG.clip``, ``hasattr(box, "t")``,
        ``len(acc)`` and ``self.config.use_cache`` through them. `what`: (origin, readable
        name) of the value, for recompile reasons."""
        what = (what[0], what[1] or expr)
        if value is None or type(value) is bool or isinstance(value, enum.Enum):
            self.check(f"{expr} is {self.const(value)}", what, "value", value, expr, key)
        elif type(value) in _NUMBERS:
            if type(value) is float and value != value:
                self.check(f"{expr} != {expr}", what, "value", value, expr, key)
            else:
                self.check(f"{expr} == {self.const(value)} and "
                           f"{expr}.__class__ is {self.const(type(value))}", what, "value",
                           value, expr, key)
        elif isinstance(value, (torch.Tensor, types.ModuleType)):
            return
        else:
            items = _plain_items(value) if depth and self.budget > 0 else None
            base = self.const(value)   # its items are read through the constant
            self.check(f"{expr} is {base}", what, "identity", value, expr, key)
            attributes = items is not None and items is not value
            if attributes:   # an object's attributes:
                # its __dict__ is checked once, then read as a constant (a class may override
                # __getattribute__ in Python, as transformers' configs do: ~900 calls a call
                # for wav2vec2's config, 0.9 ms of jit's 3.1 ms)
                base = self.const(items, "d")
                self.check(f"{self.const(value)}.__dict__ is {base}", what, "identity", value,
                           expr)
            if items is None:
                return
            self.budget -= len(items)
            inner = guard_groups.key_of(items, base)   # a tuple's items are fixed: ()
            if type(value) in (list, dict) or plain_dict(value) is not None:
                keys = list(items) if isinstance(items, dict) else len(items)
                self.check(f"len({base}) == {len(items)}", what, "keys", keys,
                           f"list({base})" if isinstance(items, dict) else f"len({base})", inner)
            if len(items) > _MAX_ITEMS:
                return
            for k, item in (items.items() if isinstance(items, dict) else enumerate(items)):
                key_expr = repr(k) if type(k) in (str, int) else self.const(k, "key")
                name = f"{what[1]}.{k}" if attributes else f"{what[1]}[{k!r}]"
                self.check_value(f"{base}[{key_expr}]", item, depth - 1, (what[0], name), inner)
            if attributes and self.written_classes and any(
                    c in self.written_classes for c in type(value).__mro__):
                self._check_class(type(value), depth)

    def _check_class(self, klass, depth: int) -> None:
        """The data attributes of a plain object's user classes (``type(self).count``),
        where the traced code assigns some (reads of others are not guarded)."""
        for c in klass.__mro__[:-1]:
            if c.__module__ == "builtins" or c.__module__.startswith("torch") or \
                    c in self._classes:
                continue
            self._classes.add(c)
            d = vars(c)
            name = self.const(c, "cls")
            what = ("class", f"class {c.__qualname__}")
            self.check(f"len({name}.__dict__) == {len(d)}", what, "keys", list(d),
                       f"list({name}.__dict__)")
            for key, item in d.items():
                if not key.startswith("__") and (item is None or type(item) in _SCALARS or
                                                 type(item) in (list, dict, tuple)):
                    self.check_value(f"{name}.__dict__[{key!r}]", item, depth - 1,
                                     ("class", f"{c.__qualname__}.{key}"))

    def check_items(self, expr: str, table: dict, what: tuple = ("state", ""),
                    key: tuple | None = None) -> None:
        """The dict at `expr` (the constant `table`, read at `expr` under `key`) holds the
        same objects (modules, parameters, hooks) in order."""
        what = (what[0], what[1] or expr)
        name = self.const(table, "t")
        self.check(f"{expr} is {name}", what, "identity", table, expr, key)
        if not table:   # emptiness: an OrderedDict's reordering cannot change it
            self.check(f"not {name}", what, "items", {}, f"dict({name})", (name,))
        else:
            self.check(f"same_items({name}, {self.const(tuple(table.values()))})", what,
                       "items", dict(table), f"dict({name})", guard_groups.key_of(table, name))

    def check_tensor(self, expr: str, t: torch.Tensor, what: tuple = ("state", ""),
                     dims: tuple = (), any_layout: bool = False) -> None:
        """`expr`'s metadata is `t`'s; the sizes of its symbolic `dims` (automatic dynamic
        dims of state) any the trace serves, and any layout where it takes a copy."""
        self.tensors[len(self.checks)] = expr
        if dims:
            key = dynamic.tensor_pattern(t, dims, any_layout)
            test = f"tensor_pattern({expr}, {dims!r}, {any_layout})"
            self.check(f"{test} == {self.const(key)}", (what[0], what[1] or expr), "tensor",
                       key, test)
            return
        fetched = expr.startswith("s") and expr[1:].isdigit()
        if fetched:
            self.state_tensors.append((expr, t))
        self.check(f"tensor_key({expr}) == {self.const(tensor_key(t))}",
                   (what[0], what[1] or expr), "tensor", tensor_key(t), f"tensor_key({expr})",
                   guard_groups.TENSOR if fetched else None)

    def check_sizes(self, guards, env: dict) -> None:
        """The size guards of a trace with symbolic dims hold for the sizes of this call
        (`env`: base name -> expression of its value)."""
        text = "{" + ", ".join(f"{b!r}: {e}" for b, e in env.items()) + "}"
        actual = f"failing_size_guard({self.const(guards, 'sizes')}, {text})"
        self.check(f"{actual} is None", ("size guard", "sizes"), "size guard", None, actual)

    def source(self) -> str:
        """The guard function's source (binding the constants its groups need)."""
        lines = ["def guard(leaves):", "    try:"]
        lines += [f"        {line}" for line in self.fetches]
        terms = guard_groups.terms(self)
        test = " and\n                ".join(f"({c})" for c in terms) or "True"
        lines += [f"        if ({test}):", "            return state"]
        lines += ["    except Exception:", "        pass", "    return None"]
        return "\n".join(lines) + "\n"


def _plain_items(value):
    """What a guard checks inside `value`: a dict's or list's or tuple's items, a plain
    object's attributes (not a module's, function's, class's, tensor's or torch object's);
    None for anything else."""
    if type(value) in (list, tuple) or isinstance(value, dict):   # an OrderedDict's items too
        return value
    return plain_dict(value)


def same_items(table, expected: tuple) -> bool:
    return len(table) == len(expected) and all(
        a is b for a, b in zip(table.values(), expected))


# --- the recorder ---------------------------------------------------------------------------
class StateRecorder:
    """What one acquisition read besides its arguments; see the module docstring."""

    def __init__(self, fn, trace, arg_tensors: dict):
        self.fn, self.trace = fn, trace
        self.arg_tensors = arg_tensors       # id(tensor) -> (leaf index, proxy, tensor)
        self.reads: dict = {}                # (id(owner), store, name) -> (owner, store, name, value)
        self.frames: dict = {}               # code object -> its globals, for user frames that ran
        self.lifted: dict = {}               # id(tensor) -> (tensor, proxy), in lift order
        self.grad_reads: list = []           # (base tensor, its .grad) read while tracing
        self.writes: list = []               # (module, name, existed, old value) assigned
        self.attributes: dict = {}           # (id(module), name) -> (module, name, existed, old)
        self._globals: list | None = None    # _global_reads, once computed
        self.value_reads: list = []          # (tensor, its values) a ref read as numbers
        self.created: dict = {}              # id -> module the traced code made (no state)
        self.symbolic: dict = {}             # id(tensor) -> {dim: base} of symbolic state dims
        self.labels: dict = {}               # id(tensor) -> its readable name (finish)
        self.copied: dict = {}               # trace-time name -> state proxy passed as a copy
        self.namer = None                    # the trace's Namer (capture sets it)

    # recording ---------------------------------------------------------------------------
    def module_read(self, owner, store, name, value) -> None:
        if store == "__dict__" and name in _MACHINERY and name != "training" and \
                name not in _STRUCTURE and not name.endswith("hooks") or id(owner) in self.created:
            return
        if (id(owner), name) in self.attributes:
            return   # the traced code's own value, replayed: no state the call starts from
        self.reads.setdefault((id(owner), store, name), (owner, store, name, value))

    def module_write(self, owner, name, value=None) -> None:
        if id(owner) in self.created:
            return
        d = _object_getattribute(owner, "__dict__")
        for store in (*_STRUCTURE, None):
            table = d if store is None else d.get(store, {})
            if name in table:
                entry = (owner, name, True, table[name])
                break
        else:
            store, entry = None, (owner, name, False, None)
        self.writes.append(entry)
        if store is None and name not in _MACHINERY and \
                not isinstance(value, (_Module, torch.nn.Parameter)):
            # a plain attribute (``module.weight = w / sigma`` in spectral_norm's pre-hook):
            # replayed after each call with that call's value, as writes to plain objects
            self.attributes.setdefault((id(owner), name), entry)

    def attribute_writes(self) -> list:
        """The plain module attributes the traced code assigned, as pystate's writes
        (kind, target, old, new, label), for its Replay."""
        out = []
        for owner, name, existed, old in self.attributes.values():
            d = _object_getattribute(owner, "__dict__")
            out.append(("slots", owner, {name: old} if existed else {},
                        {name: d[name]} if name in d else {}, f"{type(owner).__name__}.{name}"))
        return out

    def same_state_tensor(self, owner, name, value) -> bool:
        """Whether `value` is the traced version of the state tensor `owner.name` already holds
        (written in place, or the result of an ``out=`` call into it): assigning it back is
        eager's assignment of the same object, which changes nothing."""
        if not isinstance(value, TensorProxy):
            return False
        d = _object_getattribute(owner, "__dict__")
        for store in (*_STRUCTURE, None):
            table = d if store is None else d.get(store, {})
            if name in table:
                entry = self.lifted.get(id(table[name]))
                return entry is not None and entry[0] is table[name] and \
                    self.trace.latest(entry[1]) is self.trace.latest(value)
        return False

    def undo_writes(self) -> None:
        """Put back what the traced code assigned (a proxy must not outlive its trace)."""
        self.attributes.clear()
        for owner, name, existed, old in reversed(self.writes):
            if existed:
                _original_setattr(owner, name, old)
            else:
                _Module.__delattr__(owner, name)
        self.writes.clear()

    def note_frames(self, frame) -> None:
        """Note the user's frames on the stack of a torch call (their code and globals)."""
        frames, stop = self.frames, _acquire_code
        while frame is not None and frame.f_code is not stop:
            code = frame.f_code
            if code not in frames and not _library_code(code, frame.f_globals):
                frames[code] = frame.f_globals
            frame = frame.f_back

    @contextlib.contextmanager
    def recording(self):
        token = _active.set(self)
        try:
            with _module_patches():
                yield self
        finally:
            _active.reset(token)

    def lift(self, t: torch.Tensor) -> TensorProxy:
        """The proxy of a tensor the traced code reached outside its arguments."""
        found = self.arg_tensors.get(id(t))
        if found is not None:
            return found[1]
        entry = self.lifted.get(id(t))
        if entry is None:   # a name no user input can have (renamed in finish)
            spec = dynamic.state_spec(self.trace, t, self.namer)
            proxy = self.trace.tensor(spec or TensorSpec.of(t),
                                      name=f"__pt_state{len(self.lifted)}",
                                      requires_grad=t.requires_grad)
            proxy.__dict__["_leaf"] = t.is_leaf
            entry = self.lifted[id(t)] = (t, proxy)
            if spec is not None:   # symbolic dims: read from the tensor at run time
                self.symbolic[id(t)] = dynamic.record_state_dims(self.trace, proxy)
                if not t.is_contiguous():   # passed as a row-major copy (state_spec)
                    self.copied[proxy.name] = proxy
        return entry[1]

    def real(self, proxy):
        """The tensor behind an argument or state proxy (None for computed values)."""
        for t, p in self.lifted.values():
            if p is proxy:
                return t
        for _, p, t in self.arg_tensors.values():
            if p is proxy:
                return t
        return None

    def input_values(self, proxy):
        """The values (``tolist()``) of the argument or state tensor behind `proxy`, which a
        ref reads as sizes or indices (narrow's start): the trace holds for those values
        only, so the guard checks them on every call (another value traces again). None for
        a computed tensor, a float or complex one (NaN never equals itself), or a big one."""
        t = self.read_values(proxy)
        return None if t is None else t.tolist()

    def read_values(self, proxy):
        """The argument or state tensor behind `proxy`, whose values the code reads (see
        input_values: they are guarded from now on), or None."""
        t = self.real(proxy)
        if t is None or t.dtype.is_floating_point or t.dtype.is_complex or \
                t.numel() > _MAX_VALUES:
            return None
        self.value_reads.append((t, t.tolist()))
        return t

    def grad_of(self, proxy):
        """``x.grad`` of an argument or state tensor: None, or the gradient, lifted."""
        base = self.real(proxy)
        if base is None:
            return None     # a computed value: eager's .grad of a non-leaf is None
        grad = base.grad
        self.grad_reads.append((base, grad))
        return None if grad is None else self.lift(grad)

    # after tracing -------------------------------------------------------------------------
    def finish(self, namer, arg_objects=(), force: bool = False,
               written_classes=()) -> "Guard | None":
        """Name the lifted proxies after where they come from, and build the guard (also
        over the plain objects passed as arguments, `arg_objects`: (object, name) pairs,
        whose identity the cache key holds; `force`: build one even if it checks nothing)."""
        unreplayed = [w for w in self.writes if (id(w[0]), w[1]) not in self.attributes]
        if unreplayed:
            owner, name = unreplayed[0][:2]
            raise SideEffectError(
                f"{type(owner).__name__}.{name} was assigned while tracing: primtrace runs the "
                f"trace on later calls without replaying Python assignments")
        code = _Code()
        code.written_classes = set(written_classes)
        sources: dict[int, str] = {}           # id(tensor) -> expression
        names: dict[int, str] = {}             # id(tensor) -> readable input name
        texts: dict[int, tuple] = {}           # id(tensor) -> (origin, name) for reasons
        read_tensors: dict[int, torch.Tensor] = {}
        paths, dotted = self._module_paths(), self._module_paths(dotted=True)
        for tid, (index, _, _) in self.arg_tensors.items():
            sources[tid] = f"leaves[{index}]"
            texts[tid] = ("argument", self.arg_tensors[tid][1].name)

        def read(expr, value, label, what, key=None):
            if isinstance(value, types.ModuleType):
                return
            if isinstance(value, torch.Tensor):
                if id(value) in sources:   # the same tensor seen twice (an argument, a tie)
                    code.check(f"{expr} is {sources[id(value)]}", what, "alias",
                               texts.get(id(value), ("", ""))[1], expr)
                    return
                sources[id(value)] = expr
                names.setdefault(id(value), label)
                texts.setdefault(id(value), what)
                read_tensors[id(value)] = value
                return
            code.check_value(expr, value, what=what, key=key)

        for owner, store, name, value in self.reads.values():
            text = f"{dotted.get(id(owner), type(owner).__name__)}.{name}"
            d, key = code.dict_of(owner, store)
            if store == "__dict__" and name in _STRUCTURE:
                code.check_items(f"{d}[{name!r}]", value, (_ORIGINS[name], text), key)
            elif store == "__dict__" and name.endswith("hooks"):
                code.check_items(f"{d}[{name!r}]", value, ("hooks", text), key)
            else:
                origin = "training" if name == "training" else _ORIGINS.get(store, "attribute")
                read(f"{d}[{name!r}]", value,
                     _join(paths.get(id(owner), type(owner).__name__.lower()), name),
                     (origin, text), key)
        if self.reads:
            self._global_hooks(code)
        for g, name, value in self._global_reads():
            g_name = code.const(g, "g")
            read(f"{g_name}[{name!r}]", value, name, ("global", f"global {name}"),
                 guard_groups.key_of(g, g_name))
        for cell, name, value in self._closure_reads():
            read(f"{code.const(cell, 'c')}.cell_contents", value, name,
                 ("closure", f"closure variable {name}"))
        for obj, name in arg_objects:   # its identity is in the cache key
            read(code.const(obj, "a"), obj, name, ("argument", f"argument {name}"), ())
        for base, grad in self.grad_reads:
            base_expr = sources.get(id(base))
            if base_expr is None:
                base_expr = code.const(base, "h")
            read(f"{base_expr}.grad", grad, _join(names.get(id(base), "x"), "grad"),
                 ("grad", f"{texts.get(id(base), ('', 'x'))[1]}.grad"))
        self._search_containers(sources, names, code, (paths, dotted), arg_objects, texts)

        state, env = [], {}
        for t, proxy in self.lifted.values():
            expr = sources.get(id(t))
            if expr is None:   # reached some other way: held, and its metadata checked
                expr = code.const(t, "held")
            var = f"s{len(state)}"
            what = texts.get(id(t), ("state", names.get(id(t), proxy.name)))
            self.labels[id(t)] = what[1]
            code.fetches.append(f"{var} = {expr}")
            code.fetch_where.append(what)
            dims = self.symbolic.get(id(t), {})
            copied = any(p is proxy for p in self.copied.values())
            code.check_tensor(var, t, what, tuple(sorted(dims)), copied)
            if dims:
                code.symbolic[var] = (tuple(sorted(dims)), what[1])
                env.update({base: f"{var}.shape[{d}]" for d, base in dims.items()})
            proxy.__dict__["_name"] = namer(names.get(id(t), proxy.name))
            state.append(f"{var}.contiguous()" if copied else var)
        for tid, t in read_tensors.items():   # read but not used: the metadata still counts
            if tid not in self.lifted:
                code.check_tensor(sources[tid], t, texts[tid])
        for t, value in self.value_reads:   # tensors read as numbers: their values too
            expr = sources.get(id(t)) or code.const(t, "held")
            origin, name = texts.get(id(t), ("state", expr))
            code.check(f"{expr}.tolist() == {code.const(value, 'v')}",
                       (origin, f"the values of {name}"), "values", value, f"{expr}.tolist()")
        if env:   # symbolic state dims: the trace's size guards, over every base
            env.update({base: f"leaves[{leaf}].shape[{d}]" for base, (leaf, d, _) in
                        self.trace.tags.get("input_dims", {}).items()})
            code.check_sizes(size_guards.active(), env)
        code.fetches.append(f"state = [{', '.join(state)}]")
        if not code.checks and not state and not force:
            return None
        return Guard(code, [proxy for _, proxy in self.lifted.values()])

    def _module_paths(self, dotted: bool = False) -> dict:
        """id(module) -> a readable path: from the traced module, or from the global or
        closure variable that holds a module (``model_fc1``; `dotted`: ``model.fc1``, and
        ``self.fc1`` below the traced module)."""
        own = "self" if dotted else ""
        roots = [(own, self.fn), (own, getattr(self.fn, "__self__", None))]
        roots += [(name, v) for _, name, v in self._global_reads()]
        roots += [(name, v) for _, name, v in self._closure_reads()]
        paths = {}
        for prefix, root in roots:
            if isinstance(root, _Module):
                for path, m in root.named_modules(remove_duplicate=False):
                    paths.setdefault(id(m), ".".join(filter(None, (prefix, path))) if dotted
                                     else _join(prefix, path).replace(".", "_"))
        return paths

    def _global_hooks(self, code: _Code) -> None:
        """Hooks registered on every module (nn.modules.module.register_module_forward_hook)."""
        module = sys.modules["torch.nn.modules.module"]
        g = code.const(vars(module), "g")
        for name, value in vars(module).items():
            if name.startswith("_global_") and name.endswith("hooks") and isinstance(value, dict):
                code.check_items(f"{g}[{name!r}]", value, ("hooks", f"torch.nn.modules.module.{name}"),
                                 (g,))

    def _global_reads(self) -> list:
        """(globals, name, value) for the global names loaded by the user's code that called
        torch while tracing, and by the user's functions that code reaches by name (a helper
        that only computes a Python number never shows up on a torch call's stack)."""
        if self._globals is not None:
            return self._globals
        todo = list(self.frames.items())
        todo += [(fn.__code__, fn.__globals__) for fn in _cell_functions(self.fn)
                 if fn.__code__ not in self.frames]   # helpers held in cells
        seen_code, seen, found = {code for code, _ in todo}, set(), []
        while todo:
            code_object, g = todo.pop()
            for c in code_object.co_consts:   # lambdas and comprehensions defined here
                if isinstance(c, types.CodeType) and c not in seen_code:
                    seen_code.add(c)
                    todo.append((c, g))
            for name in global_names(code_object):
                if name not in g or (id(g), name) in seen:
                    continue
                seen.add((id(g), name))
                value = g[name]
                found.append((g, name, value))
                fn = getattr(value, "__func__", value)
                if isinstance(fn, types.FunctionType) and fn.__code__ not in seen_code \
                        and not _library_code(fn.__code__, fn.__globals__):
                    seen_code.add(fn.__code__)
                    todo.append((fn.__code__, fn.__globals__))
        self._globals = found
        return found

    def _closure_reads(self):
        """(cell, name, value) of the traced function's closure, and of the closures of the
        user's functions it reaches through its cells and globals (run or not, as for
        globals: a helper that only computes a number never shows up on a torch call)."""
        todo = [_function_of(self.fn)]
        todo += [v for _, _, v in self._global_reads() if isinstance(v, types.FunctionType)]
        seen = set()
        while todo:
            fn = todo.pop()
            if not isinstance(fn, types.FunctionType) or id(fn) in seen:
                continue
            seen.add(id(fn))
            if not fn.__closure__ or _library_code(fn.__code__, fn.__globals__):
                continue
            for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
                try:
                    value = cell.cell_contents
                except ValueError:   # an empty cell
                    continue
                yield cell, name, value
                todo.append(_function_of(value))

    def _search_containers(self, sources, names, code, paths, arg_objects, texts) -> None:
        """Sources for lifted tensors not read directly: items of lists, tuples and dicts read
        from globals, cells and modules (two levels), then the parameters, buffers and tensor
        attributes of every module read (``for p in self.parameters()``)."""
        missing = {tid for tid in self.lifted if tid not in sources}
        if not missing:
            return
        containers = [(expr, value) for expr, value in _direct_values(self, code, arg_objects)
                      if _plain_items(value) is not None]
        for _ in range(4):
            deeper = []
            for expr, value in containers:
                items = _plain_items(value)
                if items is not value:   # an object's attributes
                    expr = f"{expr}.__dict__"
                for key, item in (items.items() if isinstance(items, dict) else enumerate(items)):
                    key_expr = repr(key) if type(key) in (str, int) else code.const(key, "key")
                    item_expr = f"{expr}[{key_expr}]"
                    if isinstance(item, torch.Tensor) and id(item) in missing:
                        sources[id(item)] = item_expr
                        names.setdefault(id(item), f"{_label(expr)}_{key}")
                        texts.setdefault(id(item), ("state", f"{_label(expr)}[{key!r}]"))
                        missing.discard(id(item))
                    elif _plain_items(item) is not None:
                        deeper.append((item_expr, item))
            containers = deeper
        owners = {id(o): o for o, *_ in self.reads.values()}
        if isinstance(self.fn, _Module):
            owners.setdefault(id(self.fn), self.fn)
        paths, dotted = paths
        for owner in list(owners.values()):
            for m in owner.modules():
                d = _object_getattribute(m, "__dict__")
                for store in ("_parameters", "_buffers"):
                    for name, t in d[store].items():
                        if t is not None and id(t) in missing:
                            sources[id(t)] = f"{code.const(m, 'm')}.{store}[{name!r}]"
                            names.setdefault(id(t), _join(paths.get(id(m), type(m).__name__.lower()), name))
                            texts.setdefault(id(t), (_ORIGINS[store],
                                                     f"{dotted.get(id(m), type(m).__name__)}.{name}"))
                            missing.discard(id(t))


class Guard:
    """The compiled check of one trace's state: ``guard(leaves)`` returns the state tensors
    to pass after the arguments, or None when the trace no longer applies."""

    def __init__(self, code: _Code, state: list):
        self.source = code.source()
        self.proxies = state
        namespace = {"tensor_key": tensor_key, "same_items": same_items,
                     "tensor_pattern": dynamic.tensor_pattern,
                     "failing_size_guard": dynamic.failing_size_guard, **code.consts}
        exec(compile(self.source, "<primtrace guard>", "exec"), namespace)  # noqa: S102
        self.check = namespace["guard"]
        # what primtrace.recompiles reads to say which check failed (on a miss only)
        self.namespace, self.fetches, self.checks = namespace, code.fetches, code.checks
        self.where, self.fetch_where = code.where, code.fetch_where
        self.tensors, self.symbolic = code.tensors, code.symbolic

    def __repr__(self):
        return f"<primtrace guard over {len(self.proxies)} state tensor(s)>"


def _cell_functions(root) -> list:
    """The user's functions reachable from `root` through closure cells (helpers)."""
    todo, seen, found = [_function_of(root)], set(), []
    while todo:
        fn = todo.pop()
        if not isinstance(fn, types.FunctionType) or id(fn) in seen or not fn.__closure__:
            continue
        seen.add(id(fn))
        if _library_code(fn.__code__, fn.__globals__):
            continue
        for cell in fn.__closure__:
            try:
                value = _function_of(cell.cell_contents)
            except ValueError:   # an empty cell
                continue
            if isinstance(value, types.FunctionType) and id(value) not in seen and \
                    not _library_code(value.__code__, value.__globals__):
                found.append(value)
                todo.append(value)
    return found


def _direct_values(recorder, code, arg_objects=()):
    for obj, _ in arg_objects:
        yield code.const(obj, "a"), obj
    for owner, store, name, value in recorder.reads.values():
        if store == "__dict__" and name not in _MACHINERY:
            yield f"{code.const(owner, 'm')}.__dict__[{name!r}]", value
    for g, name, value in recorder._global_reads():
        yield f"{code.const(g, 'g')}[{name!r}]", value
    for cell, name, value in recorder._closure_reads():
        yield f"{code.const(cell, 'c')}.cell_contents", value


def _join(path: str, name: str) -> str:
    return f"{path}_{name}" if path else name


def _label(expr: str) -> str:
    return expr.removesuffix(".__dict__").rsplit("[", 1)[-1].strip("]'\"") or "item"
