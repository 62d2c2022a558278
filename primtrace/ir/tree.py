"""Walking the nests of tuples, lists and dicts that arguments and results come in.

One rule everywhere: tuples (named ones too), lists and dicts are containers, and slices
(``x[:n]`` with n a symbolic size holds a proxy), everything else is a leaf.
"""
from __future__ import annotations

from primtrace.ir.proxy import Proxy


def tree_flatten(obj) -> list:
    """The leaves of a nest of tuples, lists and dicts, in order."""
    if isinstance(obj, (tuple, list)):
        return [leaf for item in obj for leaf in tree_flatten(item)]
    if isinstance(obj, dict):
        return [leaf for key in obj for leaf in tree_flatten(obj[key])]
    if type(obj) is slice:
        return tree_flatten((obj.start, obj.stop, obj.step))
    return [obj]


def tree_map(fn, obj):
    """The same nest with `fn` applied to each leaf (container types kept)."""
    t = type(obj)
    if t is tuple or t is list:
        return t(tree_map(fn, x) for x in obj)
    if t is dict:
        return {k: tree_map(fn, v) for k, v in obj.items()}
    if t is slice:
        return slice(*(tree_map(fn, x) for x in (obj.start, obj.stop, obj.step)))
    if isinstance(obj, tuple):   # a namedtuple, torch.return_types
        items = [tree_map(fn, x) for x in obj]
        return t(*items) if hasattr(obj, "_fields") else t(items)
    if isinstance(obj, list):
        return t(tree_map(fn, x) for x in obj)
    return fn(obj)


def proxies_in(obj) -> list[Proxy]:
    return [leaf for leaf in tree_flatten(obj) if isinstance(leaf, Proxy)]
