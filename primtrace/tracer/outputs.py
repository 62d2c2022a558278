"""The containers a traced function returns, rebuilt with each call's values.

A trace's outputs are a nest of plain tuples, lists and dicts (what the passes walk and
the generated code writes). A function may return other containers: a namedtuple, a
dataclass, an ``OrderedDict`` or another dict subclass, a transformers ``ModelOutput``.
Returning the object built while tracing would hand every call the same object, with
proxies inside; so :func:`split` turns the result into a plain nest of its leaves and a
function that builds the original kinds of containers again around a call's values.
Leaves that are not tensors (ints, strings, None) are returned as traced.

Containers are what ``torch.utils._pytree`` knows (namedtuples, ``torch.return_types``,
OrderedDict, defaultdict, deque, ModelOutput, which registers itself, and any type
registered with it), dataclass instances, and subclasses of tuple, list and dict. A plain
object made while tracing that holds traced values in its attributes (a transformers
``DynamicCache`` a model builds and returns) is rebuilt too: a new instance of its class,
attribute by attribute, without running its ``__init__`` again. Objects that existed before
the call (`existing`: an argument, a global cache) are returned as they are: the replay of
Python writes updates them in place, as eager does.
"""
from __future__ import annotations

import copy
import dataclasses
import warnings
from typing import Callable

import torch
import torch.utils._pytree as pytree

from primtrace.ir.proxy import Proxy, SymbolicShape
from primtrace.tracer.pystate import find_proxy, holds_proxy
from primtrace.tracer.user_code import plain_dict, slot_names

_PLAIN = (tuple, list, dict)
_MAX_DEPTH = 16   # objects inside objects: deeper nests are not rebuilt


def split(obj, existing=frozenset(), _within: tuple = ()) -> tuple[object, Callable | None]:
    """(plain, rebuild): `obj` with every container that is not a plain tuple, list or dict
    replaced by the tuple of its children, and the function that builds `obj`'s kinds of
    containers around values in that plain nest; rebuild is None when `obj` is plain.
    `existing`: ids of objects that existed before tracing (returned as they are);
    `_within`: the ids of the containers around `obj` (a cycle is a leaf)."""
    t = type(obj)
    if t is tuple or t is list:
        plain, rebuilds = _split_all(obj, existing, _within)
        if not any(rebuilds):
            return obj, None
        return t(plain), lambda values: t(_apply(rebuilds, values))
    if t is dict:
        keys = list(obj)
        plain, rebuilds = _split_all((obj[k] for k in keys), existing, _within)
        if not any(rebuilds):
            return obj, None
        return dict(zip(keys, plain)), lambda values: dict(
            zip(keys, _apply(rebuilds, [values[k] for k in keys])))
    container = _container(obj, existing, _within)
    if container is None:
        if id(obj) not in existing:
            _warn_if_holding_proxies(obj)
        return obj, None   # a leaf
    children, make = container
    plain, rebuilds = _split_all(children, existing, (*_within, id(obj)))
    if not any(rebuilds):
        return tuple(plain), make
    return tuple(plain), lambda values: make(list(_apply(rebuilds, values)))


def _split_all(items, existing, within):
    parts = [split(x, existing, within) for x in items]
    return [p for p, _ in parts], [r for _, r in parts]


def _apply(rebuilds, values):
    return (v if r is None else r(v) for r, v in zip(rebuilds, values))


def _container(obj, existing=frozenset(), within: tuple = ()):
    """(children, make) of a container that is not plain, or None for a leaf; `make` builds
    the same kind of container from a list of new children."""
    t = type(obj)
    if id(obj) in existing or id(obj) in within or len(within) > _MAX_DEPTH:
        return None
    if isinstance(obj, (torch.Size, SymbolicShape)):
        # before pytree, whose torch.Size node (registered by torch.fx) unflattens to a
        # tuple; a shape holding sizes known at run time is a torch.Size of ints by then
        return list(obj), torch.Size
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):   # ModelOutput too
        names = _attribute_names(obj)
        own = [k for k in obj if k not in names or obj[k] is not getattr(obj, k)] \
            if isinstance(obj, dict) else []
        return ([getattr(obj, n) for n in names] + [obj[k] for k in own],
                lambda values: _dataclass_with(obj, names, own, values))
    node = pytree.SUPPORTED_NODES.get(t)
    if node is not None and t not in _PLAIN:   # OrderedDict, registered types
        children, context = node.flatten_fn(obj)
        return list(children), lambda values: node.unflatten_fn(values, context)
    if isinstance(obj, tuple):
        if hasattr(t, "_fields"):   # a namedtuple
            return list(obj), lambda values: t(*values)
        return list(obj), t   # torch.return_types and other tuple subclasses take one sequence
    if isinstance(obj, (dict, list)):   # a subclass: its items, then its attributes
        keys = list(obj) if isinstance(obj, dict) else range(len(obj))
        names = list(getattr(obj, "__dict__", {}))
        return ([obj[k] for k in keys] + [getattr(obj, n) for n in names],
                lambda values: _with_items(obj, keys, names, values))
    d = plain_dict(obj)
    if d is not None and not slot_names(t) and holds_proxy(obj):
        names = list(d)
        return [d[n] for n in names], lambda values: _instance(t, names, values)
    return None


def _attribute_names(obj) -> list:
    """A dataclass instance's fields that are set, then the other attributes it holds (one
    its ``__post_init__`` computed: a tensor there was returned as the traced proxy)."""
    names = [f.name for f in dataclasses.fields(obj) if hasattr(obj, f.name)]
    return names + [n for n in getattr(obj, "__dict__", {}) if n not in names]


def _dict_base(t: type) -> type:
    """The built-in dict class below dict subclass `t` (OrderedDict keeps its own order)."""
    return next(c for c in t.__mro__ if c.__module__ in ("builtins", "collections")
                and issubclass(c, dict))


def _dataclass_with(obj, names, own, values):
    """A copy of dataclass `obj` whose attributes `names`, then (a dict) items `own`, hold
    `values`; an item that was its field's own object is that field's new value (a
    transformers ``ModelOutput`` holds each value as both). Neither ``__init__`` nor
    ``__post_init__`` runs again (they ran while tracing; frozen classes too): per call
    they cost a ModelOutput 10-18 us, of a model's 0.7-2 ms call, this 3-4 us."""
    t = type(obj)
    base = _dict_base(t) if isinstance(obj, dict) else None
    # a dict's attributes are all in `names`; copy.copy would run an OrderedDict's __init__
    new = copy.copy(obj) if base is None else base.__new__(t)
    attributes = dict(zip(names, values))
    for name, value in attributes.items():
        object.__setattr__(new, name, value)
    if base is not None:
        items = dict(zip(own, values[len(names):]))
        for key in obj:   # in the traced order
            base.__setitem__(new, key, items[key] if key in items else attributes[key])
    return new


def _instance(t, names, values):
    """A new `t` holding `values` in its attributes (its ``__init__`` ran while tracing)."""
    new = t.__new__(t)
    new.__dict__.update(zip(names, values))
    return new


def _with_items(obj, keys, names, values):
    """A copy of a dict or list subclass `obj` whose items `keys`, then attributes `names`,
    hold `values` (an attribute holding a tensor was returned as the traced proxy)."""
    new = copy.copy(obj)
    for key, value in zip(keys, values):
        new[key] = value
    for name, value in zip(names, values[len(keys):]):
        object.__setattr__(new, name, value)
    return new


def _warn_if_holding_proxies(obj) -> None:
    """A returned object that is no container but holds traced values in its attributes (a
    transformers DynamicCache built while tracing) is returned as it is, the same object on
    every call, with proxies inside: say so rather than return it silently."""
    if isinstance(obj, (Proxy, torch.Tensor)):
        return
    found = find_proxy([(type(obj).__name__, obj)])
    if found is not None:
        warnings.warn(f"primtrace: the function returns a {type(obj).__name__} object that "
                      f"holds traced values ({found[0]}); it is not a container "
                      f"primtrace rebuilds, so every call returns the object built while "
                      f"tracing, with proxies inside (return tensors, or containers of them)",
                      stacklevel=2)
