"""Arithmetic on Python-number proxies, recorded in the trace instead of specialized.

In ``lr * (1 - beta1)`` inside a traced function the numbers are runtime inputs: the
arithmetic becomes ``number_*`` nodes that run as plain Python at call time, so calls with
other values reuse the trace (an AdamW step whose learning rate changes every step does
not recompile). Comparisons, ``bool()``, ``int()``, ``float()`` and ``math.*`` read the
value: they specialize the trace on it (its value joins the cache key).
"""
from __future__ import annotations

import operator

from primtrace.ir.proxy import NumberProxy, NumberSpec, Proxy, SizeProxy, Unknown
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
        kind = _result_type(name, args)
        return NumberSpec(kind, op(*values) if unknown is None else unknown,
                          tuple(a for a in args if isinstance(a, NumberProxy)),
                          _bounds(name, args) if unknown is not None and kind is int else None)
    return meta


# --- ints known only at run time (data-dependent sizes): bounds and comparisons --------------
def bounds_of(x):
    """(lower, upper) of an int, None for an unbounded side; None for a number whose value the
    trace knows (a comparison reads it, as before) or that is not an int."""
    if isinstance(x, SizeProxy):
        return x.lower, x.upper
    if isinstance(x, NumberProxy):
        return (None, None) if isinstance(x.value, Unknown) and x.python_type is int else None
    if type(x) is int or type(x) is bool:
        return int(x), int(x)
    return None


def _bounds(name, args):
    """The bounds of an int arithmetic result on ints known only at run time (sizes: n + 1,
    n * 3, n // 2), or None (no SizeProxy: any comparison then reads the value)."""
    b = [bounds_of(a) for a in args]
    if any(x is None for x in b):
        return None

    def add(p, q):
        return None if p is None or q is None else p + q
    if name == "add":
        return add(b[0][0], b[1][0]), add(b[0][1], b[1][1])
    if name == "sub":
        return (add(b[0][0], None if b[1][1] is None else -b[1][1]),
                add(b[0][1], None if b[1][0] is None else -b[1][0]))
    if name == "neg":
        return (None if b[0][1] is None else -b[0][1]), (None if b[0][0] is None else -b[0][0])
    if name in ("mul", "floordiv") and all(lo is not None and lo >= 0 for lo, _ in b):
        if name == "mul":
            hi = None if b[0][1] is None or b[1][1] is None else b[0][1] * b[1][1]
            return b[0][0] * b[1][0], hi
        if b[1][0] == b[1][1] and b[1][0] > 0:   # by a positive constant
            k = b[1][0]
            return b[0][0] // k, None if b[0][1] is None else b[0][1] // k
    return None


def _decide(name, a, b):
    """a <op> b from the bounds of ints known only at run time; None when they do not tell."""
    if a is b:
        return name in ("eq", "le", "ge")
    ba, bb = bounds_of(a), bounds_of(b)
    if ba is None or bb is None:
        return None
    (alo, ahi), (blo, bhi) = ba, bb

    def less(hi, lo):   # every value of one side is below every value of the other
        return hi is not None and lo is not None and hi < lo
    if name in ("lt", "ge"):
        known = True if less(ahi, blo) else False if (alo is not None and bhi is not None
                                                      and alo >= bhi) else None
        return known if name == "lt" or known is None else not known
    if name in ("gt", "le"):
        known = True if less(bhi, alo) else False if (blo is not None and ahi is not None
                                                      and blo >= ahi) else None
        return known if name == "gt" or known is None else not known
    if less(ahi, blo) or less(bhi, alo):   # eq, ne: the ranges do not meet
        return name == "ne"
    if alo is not None and alo == ahi == blo == bhi:
        return name == "eq"
    return None


#: ``x op identity`` is x itself for ints: no node, and the size keeps its identity (a slice
#: of every row of x[mask] has x[mask]'s size n, not a new n - 0)
_IDENTITY = {"add": 0, "sub": 0, "mul": 1, "floordiv": 1}


SYMBOLS = {name: Symbol(f"number_{name}", kind=SymbolKind.PRIM, meta=_meta(name), impl=op, module="prims",
                        tags=frozenset({"number"}), doc=f"Python `{name}` on numbers, at run time.")
           for name, op in {**_BINARY, **_UNARY}.items()}


def _apply(name, *args):
    """Record `name` on number proxies, or compute it (specializing) when that is required."""
    trace = current_trace()
    if name in _IDENTITY and _result_type(name, args) is int:
        a, b = args
        if type(b) in (int, bool) and b == _IDENTITY[name] and isinstance(a, NumberProxy):
            return a
        if name in ("add", "mul") and type(a) in (int, bool) and a == _IDENTITY[name] and \
                isinstance(b, NumberProxy):
            return b
        if name == "mul" and any(type(x) in (int, bool) and x == 0 for x in (a, b)) and \
                all(bounds_of(x) is not None for x in (a, b)):
            return 0
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
        if isinstance(self.value, Unknown) or isinstance(getattr(other, "value", None), Unknown):
            known = _decide(name, self, other)
            if known is not None:
                return known
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
