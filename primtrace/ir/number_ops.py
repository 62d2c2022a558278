"""Arithmetic on Python-number proxies, recorded in the trace instead of specialized.

In ``lr * (1 - beta1)`` inside a traced function the numbers are runtime inputs: the
arithmetic becomes ``number_*`` nodes that run as plain Python at call time, so calls with
other values reuse the trace (an AdamW step whose learning rate changes every step does
not recompile). Comparisons, ``bool()``, ``int()``, ``float()`` and ``math.*`` read the
value: they specialize the trace on it (its value joins the cache key).
"""
from __future__ import annotations

import operator

from primtrace.ir.proxy import NumberProxy, NumberSpec, Proxy, Unknown
from primtrace.ir.symbol import Symbol, SymbolKind
from primtrace.ir.trace import current_trace

_BINARY = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
           "truediv": operator.truediv, "floordiv": operator.floordiv, "mod": operator.mod,
           "pow": operator.pow}
_UNARY = {"neg": operator.neg, "pos": operator.pos, "abs": operator.abs}
_COMPARE = ("lt", "le", "gt", "ge", "eq", "ne")
_RANK = {bool: 0, int: 1, float: 2, complex: 3}


def _type_of(x) -> type:
    t = x.python_type if isinstance(x, NumberProxy) else type(x)
    return next(k for k in (bool, int, float, complex) if issubclass(t, k))


def _result_type(name: str, args) -> type | None:
    """Python's result type of `name` on `args`, or None when it depends on the values."""
    types = [_type_of(a) for a in args]
    widest = max(types, key=_RANK.__getitem__)
    if name == "abs" and widest is complex:
        return float
    if name == "truediv":
        return complex if widest is complex else float
    if name == "pow" and _RANK[widest] <= 1:
        return None  # int ** int is an int or a float depending on the exponent's sign
    return int if widest is bool else widest


def _meta(name):
    op = {**_BINARY, **_UNARY}[name]

    def meta(*args):
        values = [a.value if isinstance(a, NumberProxy) else a for a in args]
        unknown = next((v for v in values if isinstance(v, Unknown)), None)
        return NumberSpec(_result_type(name, args), op(*values) if unknown is None else unknown,
                          tuple(a for a in args if isinstance(a, NumberProxy)))
    return meta


SYMBOLS = {name: Symbol(f"number_{name}", kind=SymbolKind.PRIM, meta=_meta(name), impl=op, module="prims",
                        tags=frozenset({"number"}), doc=f"Python `{name}` on numbers, at run time.")
           for name, op in {**_BINARY, **_UNARY}.items()}


def _apply(name, *args):
    """Record `name` on number proxies, or compute it (specializing) when that is required."""
    trace = current_trace()
    if trace is None or _result_type(name, args) is None:
        values = [a._read() if isinstance(a, NumberProxy) else a for a in args]
        return {**_BINARY, **_UNARY}[name](*values)
    return SYMBOLS[name](*args)


def _binary(name):
    def method(self, other):
        if not _is_number(other):  # a tensor (proxy or real) handles it with its reflected op
            return NotImplemented
        return _apply(name, self, other)

    def rmethod(self, other):
        if not _is_number(other):
            return NotImplemented
        return _apply(name, other, self)
    return method, rmethod


def _is_number(x) -> bool:
    return isinstance(x, (bool, int, float, complex, NumberProxy))


def _compare(name):
    op = getattr(operator, name)

    def method(self, other):
        if isinstance(other, Proxy) and not isinstance(other, NumberProxy):
            return NotImplemented
        other = other._read() if isinstance(other, NumberProxy) else other
        return op(self._read(), other)
    return method


def install() -> None:
    """Give NumberProxy its operators (kept here so proxy.py needs no Symbol)."""
    for name in _BINARY:
        method, rmethod = _binary(name)
        setattr(NumberProxy, f"__{name}__", method)
        setattr(NumberProxy, f"__r{name}__", rmethod)
    for name in _UNARY:
        setattr(NumberProxy, f"__{name}__", lambda self, _n=name: _apply(_n, self))
    for name in _COMPARE:
        setattr(NumberProxy, f"__{name}__", _compare(name))


install()
