"""What counts as the user's code and the user's plain state, for the guards
(:mod:`primtrace.tracer.state`) and the replay of Python writes (:mod:`primtrace.tracer.pystate`).

Library code (torch, installed packages, the standard library) goes unguarded; the user's
functions have their globals and closure cells read again on every call. Plain objects (a
config, a namespace, a cache object) are the state a program keeps outside modules.
"""
from __future__ import annotations

import dis
import sys
import types

import torch

from primtrace.ir.proxy import Proxy
from primtrace.tracer.location import is_library

#: nn.Module's own bookkeeping attributes (not user state)
MACHINERY = frozenset(vars(torch.nn.Module())) | {"__dict__", "__class__"}
_LOADS = ("LOAD_GLOBAL", "LOAD_NAME")

_library: dict = {}
_global_names: dict = {}


def library_code(code, g: dict) -> bool:
    """Whether the globals of `code` (run with globals `g`) go unguarded: library code.

    Code compiled from a string (``exec``, ``<string>``) is judged by its globals, not its
    file name: a function exec'd in a dict of its own is the user's (its globals are read
    again on every call), one exec'd in a library module's dict (generated code) is not."""
    found = _library.get(code)
    if found is None:   # an import is not a read: module-level code does not count
        if code.co_name == "<module>":
            found = True
        elif code.co_filename.startswith("<") and not code.co_filename.startswith(
                ("<stdin>", "<ipython")):
            found = _library_globals(g)
        else:
            found = is_library(code.co_filename)
        _library[code] = found
    return found


def _library_globals(g: dict) -> bool:
    """`g` is the dict of a library module (not a dict of its own, nor a user's module)."""
    module = sys.modules.get(g.get("__name__")) if isinstance(g.get("__name__"), str) else None
    if module is None or getattr(module, "__dict__", None) is not g:
        return False
    filename = getattr(module, "__file__", None)
    return filename is None or is_library(filename)


def global_names(code, ops: tuple = _LOADS, nested: bool = False) -> frozenset:
    """The global names a code object uses by the instructions `ops` (loads by default),
    with the code objects nested in it when `nested`; cached."""
    key = (code, ops, nested)
    names = _global_names.get(key)
    if names is None:
        found, todo = set(), [code]
        while todo:
            c = todo.pop()
            found.update(i.argval for i in dis.get_instructions(c) if i.opname in ops)
            if nested:
                todo += [k for k in c.co_consts if isinstance(k, types.CodeType)]
        names = _global_names[key] = frozenset(found)
    return names


def function_of(obj):
    """The Python function behind a callable (a bound method's, a module's forward)."""
    if isinstance(obj, torch.nn.Module):
        obj = type(obj).forward
    return getattr(obj, "__func__", obj)


def plain_dict(obj) -> dict | None:
    """The ``__dict__`` of a plain instance (a config, a namespace, a cache object); None for
    modules, functions, classes, tensors, torch's objects and anything without one."""
    d = getattr(obj, "__dict__", None)
    if type(d) is not dict or isinstance(obj, (type, types.FunctionType, types.MethodType,
                                                types.ModuleType, torch.nn.Module,
                                                torch.Tensor, Proxy)):
        return None
    return None if type(obj).__module__.startswith("torch") else d


def slot_names(klass) -> tuple:
    """The names of `klass`'s attributes kept outside ``__dict__`` (its ``__slots__`` and its
    bases'; abc.ABC's empty ``__slots__`` add none)."""
    names = []
    for c in klass.__mro__:
        slots = vars(c).get("__slots__", ())
        names += [slots] if isinstance(slots, str) else [
            n for n in slots if n not in ("__dict__", "__weakref__")]
    return tuple(names)
