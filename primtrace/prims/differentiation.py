"""How prims differentiate: the VJP protocol, and the check that every prim says how.

Each prim module keeps, beside its prims, a ``DERIVATIVES`` dict (the elementwise tables a
column): prim name -> a VJP rule or a :class:`NotDifferentiable` mark. A rule is written in
prims, so the backward of a trace is itself a trace of prims that the same executors run
and fuse, and it reads shapes from its arguments (never sizes fixed when it was written),
so it stays valid when traces become shape-generic.

A rule is called as ``rule(g, y, *args, **kwargs)``: `g` is the cotangent of the prim's
result `y` (a tuple for a prim with several results), `args`/`kwargs` are the prim's own.
It returns one entry per positional argument: a cotangent, None (no cotangent flows there:
a number, an index, an argument whose values the result does not read), a list for a list
argument (cat), or a NotDifferentiable mark for an argument torch does not differentiate
either (zeta's first). :func:`vjp` applies the rule and the conventions every rule shares.

Complex numbers follow torch's convention: the cotangent of z is conj(df/dz) * g for a
holomorphic f (conjugate Wirtinger calculus), so ``times_conj`` builds every chain rule.

Rules of a low layer (elementwise) use prims of every layer (where, sum), so they reach
other prims through :data:`P`, resolved when a rule runs: no prim module imports one above
it, and there is no import cycle.
"""
from __future__ import annotations

import importlib

import torch

from primtrace.prims.meta import elementwise_strides


class NotDifferentiable:
    """The mark of a prim (or one argument) without a derivative. `reason` says why. A mark
    that `stops` is eager's non-differentiable output: no gradient flows through it and none
    is asked (a bool result, a new tensor, torch's declared non-differentiable functions);
    any other raises NotDifferentiableError when a gradient must flow through it (eager
    raises there too, or primtrace has not written the rule)."""
    __slots__ = ("reason", "stops")

    def __init__(self, reason: str, stops: bool = False):
        self.reason, self.stops = reason, stops

    def __repr__(self):
        return f"NotDifferentiable({self.reason!r}{', stops' if self.stops else ''})"


# the marks shared by many prims
BOOL_RESULT = NotDifferentiable("its result is bool", stops=True)
INTEGER_ONLY = NotDifferentiable("integer and bool operands only", stops=True)
CREATION = NotDifferentiable("a new tensor whose values read no input", stops=True)
RANDOM = NotDifferentiable("random draws (their parameters are Python numbers)", stops=True)
GUARD = NotDifferentiable("a check with no result", stops=True)
INDEX_RESULT = NotDifferentiable("its result is an int64 index", stops=True)
NO_TORCH_DERIVATIVE = NotDifferentiable(
    "torch declares its result not differentiable (it requires no grad)", stops=True)
TORCH_RAISES = NotDifferentiable("torch raises: its derivative is not implemented")
WRITES_THROUGH_VIEWS = NotDifferentiable(
    "no local rule: its cotangent goes to the write through the chain of views from `a` to "
    "the written tensor, which primtrace.autodiff.writes finds in the trace")


class _Prims:
    """``P.name`` is ``primtrace.prims.name``, looked up when a rule runs."""

    def __getattr__(self, name):
        return getattr(importlib.import_module("primtrace.prims"), name)


P = _Prims()


# --- helpers rules share ---------------------------------------------------------------------
def is_tensor(x) -> bool:
    return isinstance(x, torch.Tensor)


def is_complex(x) -> bool:
    if is_tensor(x):
        return x.dtype.is_complex
    return getattr(x, "python_type", type(x)) is complex   # a number, or a traced one


def conjugated(x, like=None):
    """conj(x) for complex tensors and numbers; x itself for real ones. A traced complex
    number (a runtime input: a NumberProxy, whose conjugate no prim computes) becomes a
    0-dim tensor of `like`'s dtype and device, conjugated."""
    if not is_complex(x):
        return x
    if is_tensor(x):
        return P.conj(x)
    if isinstance(x, complex):
        return x.conjugate()
    if like is None:
        raise TypeError("conjugated: a traced complex number needs `like`")
    return P.conj(as_tensor_like(x, like))


def times_conj(g, d):
    """The chain rule under torch's convention: g * conj(d)."""
    return P.mul(g, conjugated(d, g))


def filled_like(a, value, dtype=None):
    """A new tensor of a's shape and memory order filled with `value`, made from a's metadata
    alone: the backward does not read `a`, so it need not save it."""
    strides = elementwise_strides(tuple(a.shape), [tuple(a.stride())])
    return P.full_strided(tuple(a.shape), strides, value, dtype=dtype or a.dtype, device=a.device)


def zeros_like(a):
    """Zeros of a's shape, dtype and memory order (`a` is not read, nor saved)."""
    return filled_like(a, 0)


def to_complex(g, like):
    """A real cotangent `g` as the complex dtype of `like` (imaginary part 0)."""
    return P.convert_element_type(g, like.dtype) if g.dtype != like.dtype else g


def as_tensor_like(value, like):
    """A number as a 0-dim tensor of like's dtype and device, a tensor as itself."""
    if is_tensor(value):
        return value
    return P.full((), value, dtype=like.dtype, device=like.device)


_HALF = (torch.float16, torch.bfloat16)


def in_float32(rule):
    """`rule` computed in float32 where its operands are float16 or bfloat16, each cotangent
    rounded once to its argument's dtype: a rule whose reductions and scans (products of the
    others, a mean) would otherwise round at every step in the half dtype, where eager's
    kernels accumulate in float32 (prod's gradient 2 ulps off with 12 elements)."""
    def up(x):
        return P.convert_element_type(x, torch.float32) if is_tensor(x) and x.dtype in _HALF \
            else x

    def wrapped(g, y, *args, **kwargs):
        if not any(is_tensor(x) and x.dtype in _HALF for x in (g, *args)):
            return rule(g, y, *args, **kwargs)
        grads = rule(up(g), up(y), *map(up, args), **kwargs)
        return tuple(P.convert_element_type(gr, a.dtype)
                     if is_tensor(gr) and is_tensor(a) and gr.dtype != a.dtype else gr
                     for gr, a in zip(grads, args))
    wrapped.__name__ = wrapped.__qualname__ = getattr(rule, "__name__", "rule")
    wrapped.__doc__ = rule.__doc__
    return wrapped


# --- table entries -----------------------------------------------------------------------------
class Zero:
    """An elementwise prim whose derivative is 0 wherever it exists (floor, sign): every
    operand's cotangent is zeros, as in eager."""

    def __repr__(self):
        return "ZERO"


ZERO = Zero()


class VJP:
    """An elementwise table entry that is a whole rule ``(g, y, *args) -> cotangents``
    (where the chain rule g * conj(f') does not apply: complex-to-real prims, ties)."""
    __slots__ = ("rule",)

    def __init__(self, rule):
        self.rule = rule


def elementwise_rule(entry, arity: int):
    """The VJP rule of an elementwise table entry: a derivative ``(*args, y) -> f'`` for a
    unary prim, a tuple of partials (each a callable, None for none, or a NotDifferentiable
    mark) for a binary one, ZERO, a VJP, or a NotDifferentiable mark (kept as is)."""
    if isinstance(entry, NotDifferentiable):
        return entry
    if isinstance(entry, VJP):
        return entry.rule
    if isinstance(entry, Zero):
        def zero(g, y, *args):
            return tuple(zeros_like(a) if is_tensor(a) else None for a in args)
        zero.zero = True   # backward_trace passes its zeros on through the same torch call
        return zero
    partials = (entry,) if arity == 1 else tuple(entry)

    def rule(g, y, *args):
        return tuple(d if isinstance(d, NotDifferentiable) or d is None or not is_tensor(a)
                     else times_conj(g, d(*args, y)) for d, a in zip(partials, args))
    return rule


# --- applying a rule ---------------------------------------------------------------------------
def vjp(symbol, g, y, args, kwargs, wanted=None):
    """The cotangents of `symbol`'s positional arguments for the cotangent `g` of its result
    `y`: its rule's, with the conventions every rule shares applied here once. Numbers and
    integer tensors get None; a 0-dim operand, which elementwise prims take as a scalar
    against dimensioned ones, gets its cotangent summed over every dim. `wanted` (a bool per
    argument; default all) reaches the rules that take it (:func:`takes_wanted`)."""
    rule = P.VJP_RULES[symbol.name]
    if isinstance(rule, NotDifferentiable):
        raise NotDifferentiableError(f"prims.{symbol.name} is not differentiable: {rule.reason}")
    if getattr(rule, "takes_wanted", False):
        kwargs = {**kwargs, "wanted": (True,) * len(args) if wanted is None else tuple(wanted)}
    grads = rule(g, y, *args, **kwargs)
    if len(grads) != len(args):
        raise AssertionError(f"the VJP rule of prims.{symbol.name} returned {len(grads)} "
                             f"cotangents for {len(args)} arguments")
    return tuple(_settle(grad, arg) for grad, arg in zip(grads, args))


def takes_wanted(rule):
    """Mark a rule that takes ``wanted=``, a bool per positional argument: whether its
    cotangent is used. Rules whose one library kernel computes every cotangent (convolution's)
    skip the unwanted ones; others leave theirs to dead-code elimination."""
    rule.takes_wanted = True
    return rule


def _settle(grad, arg):
    if isinstance(arg, (list, tuple)) and isinstance(grad, (list, tuple)):
        return type(grad)(_settle(gr, a) for gr, a in zip(grad, arg))
    if grad is None or isinstance(grad, NotDifferentiable):
        return grad
    if not is_tensor(arg) or not (arg.dtype.is_floating_point or arg.dtype.is_complex):
        return None
    if arg.ndim == 0 and grad.ndim > 0:
        grad = P.sum(grad, tuple(range(grad.ndim)))
    return grad


class NotDifferentiableError(RuntimeError):
    """A cotangent was asked of a prim (or argument) marked NotDifferentiable."""


def check_derivatives(prims: dict, rules: dict) -> None:
    """Every prim has a VJP rule or a NotDifferentiable mark, and no rule names no prim:
    run when primtrace.prims is imported, so a new prim cannot forget its derivative."""
    missing = sorted(set(prims) - set(rules))
    unknown = sorted(set(rules) - set(prims))
    if missing or unknown:
        raise AssertionError(
            f"prims without a VJP rule or a NotDifferentiable mark: {missing}; rules of no "
            f"prim: {unknown} (see primtrace/prims/differentiation.py)")
    for name, rule in rules.items():
        if not (callable(rule) or isinstance(rule, NotDifferentiable)):
            raise AssertionError(f"prims.{name}: the derivative entry {rule!r} is neither a rule "
                                 f"nor a NotDifferentiable mark")


def by_torch_autograd(name: str):
    """The rule of a library prim whose cotangents torch's autograd computes (library_vjp,
    which runs the prim's torch call again): for its wanted float or complex tensor
    arguments; the rest get None."""
    @takes_wanted
    def rule(g, y, *args, wanted):
        wrt = tuple(i for i, a in enumerate(args) if wanted[i] and is_tensor(a)
                    and (a.dtype.is_floating_point or a.dtype.is_complex))
        grads = dict(zip(wrt, P.library_vjp(name, g, args, wrt)))
        return tuple(grads.get(i) for i in range(len(args)))
    return rule
