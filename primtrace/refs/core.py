"""How a ref is made, in one place.

``@ref`` makes a function written in prims a ref-level ``Symbol``: traced, it records one
node with its prims nested under it. ``@elementwise(kind, promote=...)`` makes an
elementwise op of a body that says only what is particular to it; what every elementwise op
shares it does in eager's order:

1. ``prechecks``: what eager checks in Python before its argument parser (F.hardtanh's
   min_val > max_val, F.tanhshrink's ``input.tanh()``); F's in-place functions skip them;
2. argument parsing: each promoted operand must be a tensor, or a Python number where
   ``scalars`` allows it; each parameter of ``numbers`` must be a Python number;
3. type promotion: the (computation, result) dtypes of the operands, by ``kind``;
4. ``checks``, in order: eager's refusals before its kernel runs (a dtype its kernel lacks,
   an out= dtype it will not cast to, an argument combination it does not take);
5. each parameter of ``numbers`` becomes the number eager's kernel sees;
6. the operands are converted to the computation dtype and broadcast, the body runs, and its
   result is converted to the result dtype;
7. the result is written into ``out=`` (eager's safe cast, resize and overlap checks) or,
   with F's ``inplace=True``, into input.

A check names what it reads and is called with just that: any of the op's parameters
(``out`` included), ``name`` (the op's, as eager's errors give it), ``operands`` (the promoted
values, in order), ``computation`` and ``result`` (the dtypes; not for prechecks).
``refs/checks.py`` holds the shared ones.

Both decorators take ``inplace`` (also make the ref that writes into its first argument:
``add_`` of ``add``) and ``aliases`` (torch's other names: ``subtract`` of ``sub``); the
Symbol declares them, and ``__all__ = exports(globals())`` at the end of a ref module binds
and exports them with the refs it makes.
"""
from __future__ import annotations

import functools
import inspect
import numbers

import torch

from primtrace import prims
from primtrace.ir.symbol import Symbol, SymbolKind
from primtrace.refs.out import copy_to_out, copy_to_self, maybe_convert
from primtrace.refs.promotion import Kind, elementwise_dtypes
from primtrace.refs.scalars import scalar_to, type_name

__all__ = ["elementwise", "ref", "exports", "inplace_variant", "broadcast_shapes", "broadcast",
           "to_tensor", "is_tensor", "is_number", "maybe_convert", "exact_add", "exact_sub",
           "COMPUTATION", "INPUT", "RAW"]

#: Where a number parameter is converted to (eager's ``Scalar.to<T>()`` target).
COMPUTATION = "computation"  # the opmath dtype the body computes in
INPUT = "input"              # the input's own dtype (then used exactly in the computation)
RAW = "raw"                  # parsed only; the body converts it itself

_CHECK_FACTS = ("name", "operands", "computation", "result")  # what checks read beside arguments


def is_tensor(x) -> bool:
    return hasattr(x, "dtype") and hasattr(x, "shape") and not isinstance(x, torch.dtype)


def is_number(x) -> bool:
    return (isinstance(x, numbers.Number) and not isinstance(x, torch.Tensor)) or hasattr(x, "python_type")


def broadcast_shapes(*shapes) -> tuple:
    """The broadcast of shapes, with eager's error message on a mismatch."""
    ndim = max((len(s) for s in shapes), default=0)
    result = [1] * ndim
    for i in range(-1, -ndim - 1, -1):
        for j, s in enumerate(shapes):
            if -i > len(s) or s[i] == 1:
                continue
            if result[i] == 1:
                result[i] = s[i]
            elif s[i] != result[i]:
                first = next(k for k, t in enumerate(shapes) if -i <= len(t) and t[i] == result[i])
                raise RuntimeError(
                    f"The size of tensor {_letter(first)} ({result[i]}) must match the size of "
                    f"tensor {_letter(j)} ({s[i]}) at non-singleton dimension {ndim + i}")
    return tuple(result)


def _letter(i: int) -> str:
    return "abcdefghijklmnopqrstuvwxyz"[i] if i < 26 else str(i)


def broadcast(t, shape):
    """Broadcast a dimensioned tensor to `shape`; 0-dim tensors and numbers stay scalars."""
    if not is_tensor(t) or t.ndim == 0 or tuple(t.shape) == tuple(shape):
        return t
    offset = len(shape) - t.ndim
    return prims.broadcast_in_dim(t, tuple(shape), tuple(range(offset, len(shape))))


def to_tensor(value, dtype, device="cpu"):
    """A 0-dim tensor holding a Python number (eager's wrapped number)."""
    return prims.full((), value, dtype=dtype, device=device)


def exact_add(x, y):
    """x + y as C++ computes it inside a kernel. For complex operands torch.add computes
    x + 1 * y, where 1 * inf makes a nan imaginary part, so add part by part instead."""
    if not x.dtype.is_complex:
        return prims.add(x, y)
    return prims.complex(prims.add(prims.real(x), prims.real(y)),
                         prims.add(prims.imag(x), prims.imag(y)))


def exact_sub(x, y):
    """x - y as C++ computes it inside a kernel (see exact_add)."""
    if not x.dtype.is_complex:
        return prims.sub(x, y)
    return prims.complex(prims.sub(prims.real(x), prims.real(y)),
                         prims.sub(prims.imag(x), prims.imag(y)))


def with_gradient(value, pieces=()):
    """`value`, whose gradient is eager's where the derivatives of the prims that compute it
    would differ (relu at 0, clamp at a bound, a NaN). `pieces` (a function returning them,
    called only for a floating or complex value) are pairs ``(mask, carrier)``: the gradient
    goes to `carrier` where `mask` holds (the masks are disjoint) and nowhere else, so no
    pieces stop it. A carrier is what the ref differentiates there (usually an operand); its
    own derivative must stay finite where its mask is False, where its cotangent is 0 (0 * inf
    is NaN). The value is computed as before: ``prims.differentiate_as`` keeps it, and the
    optimize pass drops the carriers from forward-only traces (docs/autodiff.md)."""
    if not (value.dtype.is_floating_point or value.dtype.is_complex):
        return value   # no gradient to state
    carrier = 0
    for mask, x in reversed(pieces() if callable(pieces) else pieces):
        carrier = prims.where(mask, x, carrier)
    return prims.differentiate_as(value, carrier)


# --- making refs -------------------------------------------------------------------------------
def ref(fn=None, *, name=None, module="refs", inplace=None, aliases=(), **fields):
    """Make a function written in prims a ref-level Symbol. `inplace`, `aliases`: as for
    elementwise; `fields`: other Symbol facts (``declines``; ``promote`` and
    ``type_promotion_kind`` for a ref that promotes its own way)."""
    if fn is None:
        return functools.partial(ref, name=name, module=module, inplace=inplace, aliases=aliases,
                                 **fields)
    return _symbol(name or fn.__name__, fn, module, inplace, aliases, **fields)


def _symbol(name, fn, module, inplace, aliases, *, write_into_input=None, **fields):
    """The Symbol of a ref and, where `inplace` asks for it, of its in-place form: op then a
    write back into self, or (`write_into_input`) F's C++ op_ function."""
    variant = None
    if inplace:
        variant_name = name + "_" if inplace is True else inplace
        if write_into_input is None:
            variant = _write_back(lambda: op, name, variant_name, module)
        else:
            variant = Symbol(variant_name, kind=SymbolKind.REF, fn=write_into_input, module=module,
                             doc=f"In-place {name}: written into input, which is returned.",
                             promote=fields["promote"],
                             type_promotion_kind=fields["type_promotion_kind"])
    op = Symbol(name, kind=SymbolKind.REF, fn=fn, module=module, inplace_ref=variant,
                aliases=tuple(aliases), **fields)
    return op


def inplace_variant(op: Symbol, name: str | None = None) -> Symbol:
    """`op_` from `op`: compute out of place, then write into the first argument. The tracer
    makes these for the refs that declare none (x.sin_())."""
    return _write_back(lambda: op, op.name, name or op.name + "_", op.module)


def _write_back(get_op, op_name, name, module) -> Symbol:
    def run(self, *args, **kwargs):
        return copy_to_self(self, get_op()(self, *args, **kwargs), (self, *args))
    run.__name__ = name
    run.__doc__ = f"In-place {op_name}: the result is cast back to self's dtype and shape."
    return Symbol(name, kind=SymbolKind.REF, fn=run, module=module)


def elementwise(kind: Kind, promote=("a", "b"), *, scalars=None, numbers=None, prechecks=(),
                checks=(), writes="out", inplace=None, aliases=(), name=None, module="refs"):
    """Decorator for elementwise refs; see the module docstring.

    kind, promote: the type promotion kind and the operands it reads, in order.
    scalars:  the operands that may be Python numbers: by default all but the first, "all" for
              ops eager also runs on numbers alone (add(2, 3) -> tensor(5)), or a tuple.
    numbers:  {parameter: COMPUTATION | INPUT | RAW | (value, input dtype) -> number}: the
              number parameters that are not operands (an activation's alpha), and what
              eager's kernel converts each to.
    writes:   "out" (torch's out=), "input" (F's inplace=False parameter) or None.
    inplace:  True (or the name) for the in-place ref; aliases: torch's other names.
    name:     the op's name in eager's errors, where it is not the body's (log_sigmoid).
    module:   where it prints from (refs, refs.special, refs.nn.functional).
    """
    numbers = dict(numbers or {})

    def decorate(body):
        op_name = name or body.__name__.rstrip("_")
        number_ok = (set(promote) if scalars == "all" else set(promote[1:]) if scalars is None
                     else set(scalars))
        body_signature = inspect.signature(body)
        params = list(body_signature.parameters.values())
        if writes == "input":
            params.append(inspect.Parameter("inplace", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                            default=False))
        elif writes == "out":
            params.append(inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, default=None))
        signature = body_signature.replace(parameters=params)
        positions = {p.name: i + 1 for i, p in enumerate(params)}
        known = {*signature.parameters, *_CHECK_FACTS}
        call_prechecks = [_caller(check, known - {"operands", "computation", "result"})
                          for check in prechecks]
        call_checks = [_caller(check, known) for check in checks]

        def apply(arguments, out=None, into=None, prechecks_made=True):
            """Steps 1 to 7 of the module docstring; `into`: F's in-place target."""
            facts = dict(arguments, out=out, name=op_name)
            if prechecks_made:
                for check in call_prechecks:
                    check(facts)
            operands = []
            for position, pname in enumerate(promote):
                v = arguments[pname]
                if not is_tensor(v) and not (is_number(v) and pname in number_ok):
                    raise TypeError(f"{op_name}(): argument '{pname}' (position {position + 1}) "
                                    f"must be Tensor, not {type_name(v)}")
                operands.append(v)
            for pname in numbers:
                _parse_number(op_name, pname, positions[pname], arguments[pname])
            computation, result = elementwise_dtypes(*operands, type_promotion_kind=kind)
            facts.update(operands=tuple(operands), computation=computation, result=result)
            for check in call_checks:
                check(facts)
            values = dict(arguments)
            for pname, target in numbers.items():
                values[pname] = _kernel_number(values[pname], target, computation, operands[0])
            shape = broadcast_shapes(*(tuple(v.shape) for v in operands if is_tensor(v)))
            if not any(is_tensor(v) for v in operands):
                values[promote[0]] = to_tensor(values[promote[0]], computation)
            for pname in promote:
                if is_tensor(values[pname]):
                    values[pname] = broadcast(maybe_convert(values[pname], computation), shape)
            y = maybe_convert(body(**values), result)
            if into is not None:
                return copy_to_self(into, y, tuple(operands))
            if out is not None:
                return copy_to_out(out, y, tuple(operands))
            return y

        def run(*args, **kwargs):
            if writes != "out" and "out" in kwargs:
                raise TypeError(f"{op_name}() got an unexpected keyword argument 'out'")
            arguments = _bind(signature, args, kwargs)
            into = arguments[promote[0]] if arguments.pop("inplace", False) else None
            return apply(arguments, out=arguments.pop("out", None), into=into)

        def write_into_input(*args, **kwargs):
            """F's op_ function: a C++ op, so F's Python prechecks are not made."""
            arguments = _bind(body_signature, args, kwargs)
            return apply(arguments, into=arguments[promote[0]], prechecks_made=False)

        run.__name__, run.__doc__, run.__signature__ = body.__name__, body.__doc__, signature
        write_into_input.__signature__ = body_signature
        return _symbol(body.__name__, run, module, inplace, aliases, doc=body.__doc__,
                       promote=tuple(promote), type_promotion_kind=kind, body=body,
                       write_into_input=write_into_input if writes == "input" else None)
    return decorate


def iterator_layout(y, *operands):
    """`y` with the strides TensorIterator gives the output of `operands` (tensors of y's
    shape, broadcast): for a composite body whose inner ops (a where on a mask made from a
    broadcast operand alone) lay it out otherwise; then it is copied into them."""
    shape = tuple(y.shape)
    strides = prims.elementwise_strides(shape, [tuple(v.stride()) for v in operands
                                                if is_tensor(v) and v.ndim])
    if tuple(y.stride()) == strides:
        return y
    from primtrace.refs.creation import as_nodes
    with as_nodes():
        new = prims.full_strided(shape, strides, 0 if y.dtype is not torch.bool else False,
                                 dtype=y.dtype, device=y.device)
    return prims.copy_to(new, y)


def _bind(signature, args, kwargs) -> dict:
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def _caller(check, known):
    """`check` as a function of the facts: it is given those its parameters name."""
    params = inspect.signature(check).parameters.values()
    missing = [p.name for p in params if p.name not in known and p.default is p.empty]
    if missing:
        raise TypeError(f"check {check.__name__} reads {missing}, which the op does not have")
    wanted = [p.name for p in params if p.name in known]
    return lambda facts: check(**{n: facts[n] for n in wanted})


def _parse_number(op_name, pname, position, value):
    """Eager's argument parser for a Scalar parameter: a Python number, an int within 64 bits."""
    if not is_number(value) or is_tensor(value):
        raise TypeError(f"{op_name}(): argument '{pname}' (position {position}) must be Number, "
                        f"not {type_name(value)}")
    if type(value) is int and not -2**63 <= value < 2**64:
        raise OverflowError("int too big to convert")


def _kernel_number(value, target, computation, input):
    """A number parameter as eager's kernel sees it (see ``numbers``)."""
    if target == COMPUTATION:
        return scalar_to(value, computation)
    if target == INPUT:
        return scalar_to(value, input.dtype)
    if callable(target):
        return target(value, input.dtype)
    return value


# --- exports -----------------------------------------------------------------------------------
def exports(namespace: dict, module: str = "refs") -> list[str]:
    """A ref module's ``__all__``: the public names bound to refs in it. A ref made here (under
    its own name, printed from `module`) brings its in-place ref and aliases, bound here too:
    sub -> sub_, subtract, subtract_. A ref of another module under another name is a
    module-level assignment (special: expit = unary.sigmoid), exported as it is."""
    names = []

    def bind(bound_name, sym):
        if namespace.setdefault(bound_name, sym) is not sym:
            raise ValueError(f"{bound_name} is bound to something else in {namespace['__name__']}")
        if bound_name not in names:
            names.append(bound_name)

    for bound_name, value in list(namespace.items()):
        if (bound_name.startswith("_") or not isinstance(value, Symbol)
                or value.kind is not SymbolKind.REF):
            continue
        bind(bound_name, value)
        if value.name != bound_name or value.module != module:
            continue
        for alias in value.aliases:
            bind(alias, value)
        if value.inplace_ref is not None:
            bind(value.inplace_ref.name, value.inplace_ref)
            for alias in value.aliases:
                bind(alias + "_", value.inplace_ref)
    return names
