"""Strides of dense layouts: the one place that computes them (meta functions, proxies,
creation refs and memory formats all do).

A shape may hold a size known only at run time (``x[mask]``'s rows: a
:class:`~primtrace.ir.proxy.SizeProxy`); strides stay concrete ints, except where every such
size is a symbolic input dim (a hint): then a layout that depends on it is computed on the
proxies themselves, its strides size polynomials. A layout is computed
on two runs of stand-in values for such sizes (distinct primes: dims that may hold several
elements); where the strides agree they hold for every size, as for the rows of a
row-major (n, 5) tensor, (5, 1). Where they differ (a row-major (5, n): its first stride
is n) the layout depends on the size, and the tracer's DataDependentError is raised.
"""
from __future__ import annotations


def _symbolic(value) -> bool:
    if isinstance(value, (tuple, list)):
        return any(_symbolic(v) for v in value)
    from primtrace.ir.proxy import NumberProxy
    return isinstance(value, NumberProxy)


def _all_hinted(value) -> bool:
    from primtrace.ir.proxy import NumberProxy
    from primtrace.ir.size_guards import hinted
    from primtrace.ir.tree import tree_flatten
    return all(hinted(x) for x in tree_flatten(value) if isinstance(x, NumberProxy))


def _names(value) -> str:
    from primtrace.ir.proxy import NumberProxy
    from primtrace.ir.tree import tree_flatten
    return ", ".join(dict.fromkeys(x.name for x in tree_flatten(value)
                                   if isinstance(x, NumberProxy)))


def _substituted(value, run, bases):
    from primtrace.ir.proxy import stand_in
    if isinstance(value, (tuple, list)):
        return type(value)(_substituted(v, run, bases) for v in value)
    return stand_in(value, run, bases)


def with_stand_ins(layout, shape, *args):
    """``layout(shape, *args)``, strides; where a size known only at run time appears in
    the arguments (shapes, or tuples of them), computed on two runs of stand-in values
    (``proxy.stand_in``), which must give the same strides."""
    if not _symbolic((shape, args)):
        return layout(shape, *args)
    results = set()
    for run in (0, 1):
        bases = {}
        results.add(layout(*_substituted((shape, *args), run, bases)))
    if len(results) == 1:
        return results.pop()
    from primtrace.ir import proxy
    if _all_hinted((shape, args)):   # symbolic input dims: strides as size polynomials
        return layout(shape, *args)
    what = (f"{_names((shape, args))} to lay out a tensor of shape {list(shape)} (its "
            f"strides would depend on it; primtrace keeps strides concrete: such a size must "
            f"be the outermost dim of the layout)")
    if proxy._unknown_read is not None:   # the tracer's DataDependentError, at the user's line
        proxy._unknown_read(proxy.Unknown(what))
    raise RuntimeError(what)


def _dense_strides(shape, order=None) -> tuple[int, ...]:
    ndim = len(shape)
    strides, acc = [0] * ndim, 1
    for d in reversed(range(ndim) if order is None else order):
        strides[d] = acc
        acc *= max(shape[d], 1)
    return tuple(strides)


def dense_strides(shape, order=None) -> tuple[int, ...]:
    """Strides of a dense tensor of `shape` whose dimensions lie in memory in `order`
    (outermost first; default: row-major). Size-0 and size-1 dims count as 1."""
    return with_stand_ins(_dense_strides, tuple(shape), order)


def contiguous_strides(shape) -> tuple[int, ...]:
    return dense_strides(shape)


def matches_dense(shape, strides, expected) -> bool:
    """Whether `strides` are `expected` wherever it matters (dims of size > 1; a data-dependent
    size may be > 1; a symbolic input dim's `<= 1` is guarded)."""
    return all(s == e or _at_most_one(size) for size, s, e in zip(shape, strides, expected))


def _at_most_one(size) -> bool:
    if isinstance(size, int):
        return size <= 1
    from primtrace.ir.size_guards import hinted
    return hinted(size) and size <= 1
