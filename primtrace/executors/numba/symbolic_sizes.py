"""Elementwise kernels over sizes known only at run time (automatic dynamic dims).

A trace with a symbolic input dim (:mod:`primtrace.tracer.dynamic`) holds
:class:`~primtrace.ir.proxy.SizeProxy` sizes whose trace-time value is a hint. The CPU
kernels already take every size and stride as an argument; only their launchers and plans
fixed them. Here a region's sizes become Python expressions of its inputs' shapes, read when
the launcher runs, so one kernel serves every size. A tensor whose strides are symbolic (an
inner symbolic dim's outer strides) is not fused: its ops run as torch's calls.

Decisions that only affect speed (cost model, serial or parallel loop, block sizes) read
the hints without a guard; a decision that affects values never reads a symbolic size: a
symbolic dim is never treated as size 1 (a dim of size 1 at run time is iterated once) and
never coalesced with the dim inside it. Row kernels (reductions) stay fixed-size.
"""
from __future__ import annotations

import math

from primtrace.ir.proxy import NumberProxy, SizeProxy, TensorProxy, polynomial
from primtrace.ir.size_guards import compare, hint_of, hinted


def is_symbolic(n) -> bool:
    return isinstance(n, NumberProxy)


def is_one(n) -> bool:
    """Whether a size is 1 for every call the trace serves (a symbolic size may be 1 at run
    time, but a dim iterated once is still correct)."""
    return not is_symbolic(n) and n == 1


def same_size(a, b) -> bool:
    """Whether two sizes are equal for every call the trace serves: the same polynomial,
    equal ints, or equal at the hints, which adds a guard (the kernel relies on it)."""
    if is_symbolic(a) and is_symbolic(b) and polynomial(a) == polynomial(b):
        return True
    if is_symbolic(a) or is_symbolic(b):
        return hint(a) == hint(b) and compare("eq", a, b)
    return a == b


def hint(n) -> int:
    """A size's value at the call being traced (no guard: for speed decisions only)."""
    return hint_of(n) if is_symbolic(n) else n


def hint_numel(shape) -> int:
    return math.prod(hint(n) for n in shape)


def fusible_sizes(proxies) -> bool:
    """Whether every symbolic size among these proxies' shapes has a hint (an input dim
    traced symbolic, or arithmetic on such dims; not a data-dependent count) and every
    stride is concrete."""
    for p in proxies:
        if isinstance(p, TensorProxy):
            if any(is_symbolic(n) and not hinted(n) for n in p.shape):
                return False
            if any(is_symbolic(s) for s in p.stride()):
                return False
        elif isinstance(p, SizeProxy) and not hinted(p):
            return False
    return True


def _plain_base(n) -> str | None:
    """The base name when size `n` is one symbolic input dim itself (not arithmetic)."""
    terms = polynomial(n)
    if len(terms) == 1:
        monomial, coef = terms[0]
        if coef == 1 and len(monomial) == 1 and monomial[0][1] == 1:
            return monomial[0][0]
    return None


def _base_sources(region) -> dict:
    """base size name -> launcher text of its value: ``i<j>.shape[d]`` of an input that has
    it as a dim, or ``i<j>`` for an input that is the size itself."""
    found = {}
    for j, p in enumerate(region.inputs):
        if isinstance(p, TensorProxy):
            for d, n in enumerate(p.shape):
                base = _plain_base(n) if is_symbolic(n) else None
                if base is not None:
                    found.setdefault(base, f"i{j}.shape[{d}]")
        elif isinstance(p, SizeProxy) and hinted(p) and _plain_base(p) is not None:
            found.setdefault(_plain_base(p), f"i{j}")
    return found


def size_text(n, region) -> str:
    """Launcher text of size `n` (an int, or a polynomial of symbolic input dims); raises
    NotFusible when a base size is not readable from the region's inputs."""
    if not is_symbolic(n):
        return str(n)
    from primtrace.executors.numba.plan import NotFusible
    sources = _base_sources(region)
    terms = []
    for monomial, coef in polynomial(n):
        factors = [str(coef)] if coef != 1 or not monomial else []
        for base, power in monomial:
            if base not in sources:
                raise NotFusible(f"size {base} is not a dim of the region's inputs")
            factors += [sources[base]] * power
        terms.append(" * ".join(factors))
    return "(" + " + ".join(terms) + ")"


def shape_text(shape, region) -> str:
    items = [size_text(n, region) for n in shape]
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
