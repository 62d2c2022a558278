"""Arithmetic on Python-number proxies, recorded in the trace instead of specialized.

In ``lr * (1 - beta1)`` inside a traced function the numbers are runtime inputs: the
arithmetic becomes ``number_*`` nodes that run as plain Python at call time, so calls with
other values reuse the trace (an AdamW step whose learning rate changes every step does
not recompile). Comparisons, ``bool()``, ``int()``, ``float()`` and ``math.*`` read the
value: they specialize the trace on it (its value joins the cache key).
"""
from __future__ import annotations

import operator

from primtrace.ir import size_guards
from primtrace.ir.proxy import Hint, NumberProxy, NumberSpec, Proxy, SizeProxy, Unknown
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
        if unknown is not None and size_guards.guardable(*args):
            unknown = _hinted(name, op, args)
        return NumberSpec(kind, op(*values) if unknown is None else unknown,
                          tuple(a for a in args if isinstance(a, NumberProxy)),
                          _bounds(name, args) if unknown is not None and kind is int else None)
    return meta


def _hinted(name, op, args) -> Hint:
    """The value of `name` on symbolic input dims (and known numbers): computed on the hints
    now, from the base dims' values when a guard is checked."""
    fns = [a.value.fn if size_guards.hinted(a) else
           (lambda env, v=(a.value if isinstance(a, NumberProxy) else a): v) for a in args]
    numbers = tuple(n for a in args if size_guards.hinted(a) for n in a.value.numbers) + \
        tuple(a for a in args if isinstance(a, NumberProxy) and not size_guards.hinted(a))
    hint = op(*[a.value.hint if size_guards.hinted(a) else
                a.value if isinstance(a, NumberProxy) else a for a in args])
    what = f"{name}({', '.join(size_guards._name(a) for a in args)})"
    bases = tuple(dict.fromkeys(b for a in args if size_guards.hinted(a) for b in a.value.bases))
    return Hint(what, hint, lambda env: op(*[f(env) for f in fns]), numbers, bases)


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


def expr_of(x):
    """The polynomial (SizeProxy.expr) of an int or a SizeProxy, else None."""
    if type(x) is int or type(x) is bool:
        return (((), int(x)),) if x else ()
    return x.expr if isinstance(x, SizeProxy) else None


def _normal(terms: dict) -> tuple:
    return tuple(sorted((m, c) for m, c in terms.items() if c))


def _plus(pa, pb, sign=1) -> tuple:
    terms = dict(pa)
    for m, c in pb:
        terms[m] = terms.get(m, 0) + sign * c
    return _normal(terms)


def _product(pa, pb) -> tuple:
    terms: dict = {}
    for ma, ca in pa:
        for mb, cb in pb:
            powers = dict(ma)
            for base, p in mb:
                powers[base] = powers.get(base, 0) + p
            m = tuple(sorted(powers.items()))
            terms[m] = terms.get(m, 0) + ca * cb
    return _normal(terms)


def _constant(p):
    """The int a polynomial is when it has no base, else None."""
    if not p:
        return 0
    return p[0][1] if len(p) == 1 and not p[0][0] else None


def _combined(name, args):
    """The polynomial of `name` on polynomials where it is one for every value of the bases
    (n * 4, 4n // 2, n - (n - 1), 4n % 2), else None."""
    exprs = [expr_of(a) for a in args]
    if any(e is None for e in exprs):
        return None
    if name == "neg":
        return _plus((), exprs[0], -1)
    pa, pb = exprs
    if name in ("add", "sub"):
        return _plus(pa, pb, 1 if name == "add" else -1)
    if name == "mul":
        return _product(pa, pb)
    k = _constant(pb)
    if name in ("floordiv", "mod") and k and all(c % k == 0 for _, c in pa):
        return tuple((m, c // k) for m, c in pa) if name == "floordiv" else ()
    if name in ("floordiv", "mod") and k is None and len(pb) == 1 and \
            (bounds_of(args[1]) or (None,))[0] is not None and bounds_of(args[1])[0] >= 1:
        quotient = _divided(pa, pb[0])   # (8 * n) // n: 8, for a divisor that is never 0
        if quotient is not None:
            return quotient if name == "floordiv" else ()
    return None


def _divided(pa, term):
    """The polynomial pa / term where one monomial `term` divides each of pa's exactly."""
    (mb, cb), out = term, []
    for m, c in pa:
        powers = dict(m)
        for base, p in mb:
            if powers.get(base, 0) < p:
                return None
            powers[base] -= p
        if c % cb:
            return None
        out.append((tuple(sorted((b, p) for b, p in powers.items() if p)), c // cb))
    return _normal(dict(out))


def _difference(a, b):
    """a - b when it is the same int for every value of the sizes (n and n - 1: 1), else None."""
    ea, eb = expr_of(a), expr_of(b)
    if ea is None or eb is None:
        return None
    return _constant(_plus(ea, eb, -1))


def _base_lower(base: str):
    """The least value of a size the trace made (a symbolic dim: 1, or 2 inside; a
    data-dependent count: 0), None when unknown."""
    trace = current_trace()
    size = None if trace is None else trace.tags.get("size_exprs", {}).get(
        ((((base, 1),), 1),))
    lower = getattr(size, "lower", None)
    return lower if isinstance(lower, int) and lower >= 0 else None


def _sign(a, b):
    """1 or -1 where a - b, a polynomial of sizes, is positive or negative for every value
    of them: its terms all of one sign, and its value at the sizes' least values already
    of that sign (each term is monotone in sizes >= 0); None otherwise."""
    ea, eb = expr_of(a), expr_of(b)
    if ea is None or eb is None:
        return None
    difference = _plus(ea, eb, -1)
    terms = [c for m, c in difference if m]
    if not terms or not (all(c > 0 for c in terms) or all(c < 0 for c in terms)):
        return None
    least = 0
    for monomial, coef in difference:
        for base, power in monomial:
            lower = _base_lower(base)
            if lower is None:
                return None
            coef *= lower ** power
        least += coef
    if terms[0] > 0:
        return 1 if least > 0 else None
    return -1 if least < 0 else None


def decide(name, a, b):
    """a <op> b ("eq", "lt", ...) for ints maybe known only at run time: True or False where
    their bounds and monomials tell, else None (nothing is read)."""
    return _decide(name, a, b)


def _known_le(a, b) -> bool:
    """Whether a <= b is known from how a was computed (a = min(b, k))."""
    return isinstance(a, SizeProxy) and isinstance(b, NumberProxy) and b.name in a.below


def _decide(name, a, b):
    """a <op> b from the bounds of ints known only at run time; None when they do not tell."""
    if a is b:
        return name in ("eq", "le", "ge")
    difference = _difference(a, b)
    if difference is not None:
        return getattr(operator, name)(difference, 0)
    sign = _sign(a, b)
    if sign is not None:   # a - b > 0 or < 0 for every value of the sizes
        return getattr(operator, name)(sign, 0)
    if (name == "le" and _known_le(a, b)) or (name == "ge" and _known_le(b, a)):
        return True
    if (name == "gt" and _known_le(a, b)) or (name == "lt" and _known_le(b, a)):
        return False
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
    expr = _combined(name, args) if any(isinstance(a, SizeProxy) for a in args) else None
    if expr is not None:   # arithmetic on sizes: one proxy per polynomial (n * 4 twice: one)
        constant = _constant(expr)
        if constant is not None:
            return constant
        table = trace.tags.setdefault("size_exprs", {})
        known = table.get(expr)
        if known is not None:
            return known
    result = SYMBOLS[name](*args)
    if expr is not None and isinstance(result, SizeProxy):
        result.expr = expr
        trace.tags["size_exprs"][expr] = result
    return result


def _extreme_meta(name):
    pick = max if name == "max" else min

    def meta(a, b):
        (alo, ahi), (blo, bhi) = bounds_of(a), bounds_of(b)

        def either(p, q):   # one known bound is enough
            return p if q is None else q if p is None else pick(p, q)

        def both(p, q):     # both must be known
            return None if p is None or q is None else pick(p, q)
        lower, upper = (either(alo, blo), both(ahi, bhi)) if name == "max" else (
            both(alo, blo), either(ahi, bhi))
        what = f"{name}({getattr(a, 'name', a)}, {getattr(b, 'name', b)})"
        sources = tuple(x for x in (a, b) if isinstance(x, NumberProxy))
        value = _hinted(name, pick, (a, b)) if size_guards.guardable(a, b) else Unknown(what)
        return NumberSpec(int, value, sources, (lower, upper))
    return meta


_EXTREMES = {name: Symbol(f"number_{name}", kind=SymbolKind.PRIM, meta=_extreme_meta(name),
                          impl=fn, module="prims", tags=frozenset({"number"}),
                          doc=f"Python's {name} of two ints, at run time.")
             for name, fn in (("max", max), ("min", min))}
SYMBOLS.update(_EXTREMES)


def size_max(a, b):
    """max(a, b) of ints, one of them maybe known only at run time (a size): the one the
    bounds tell, else recorded (number_max)."""
    return _extreme("max", a, b)


def size_min(a, b):
    """min(a, b), as size_max."""
    return _extreme("min", a, b)


def _extreme(name, a, b):
    if not (isinstance(a, NumberProxy) and isinstance(a.value, Unknown)) and not (
            isinstance(b, NumberProxy) and isinstance(b.value, Unknown)):
        return max(a, b) if name == "max" else min(a, b)
    first = _decide("ge" if name == "max" else "le", a, b)
    if first is not None:
        return a if first else b
    if bounds_of(a) is None or bounds_of(b) is None or current_trace() is None:
        values = [x._read() if isinstance(x, NumberProxy) else x for x in (a, b)]
        return max(values) if name == "max" else min(values)
    result = _EXTREMES[name](a, b)
    if name == "min":
        result.below = tuple(x.name for x in (a, b) if isinstance(x, NumberProxy))
    return result


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
            if size_guards.guardable(self, other):
                return size_guards.compare(name, self, other)
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
