"""What every elementwise ref shares, as one decorator.

``@elementwise(kind, promote=("a", "b"))`` wraps a function written in prims: it checks
which arguments may be Python numbers, computes the (computation, result) dtypes,
converts the promoted tensors to the computation dtype, broadcasts them, calls the body,
converts its result to the result dtype and handles ``out=``. The body says only what is
particular to the op. The wrapped function is a ref-level ``Symbol``: traced, it records one
node with its prims nested under it.
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

__all__ = ["elementwise", "ref", "broadcast_shapes", "broadcast", "to_tensor",
           "is_tensor", "is_number", "maybe_convert", "inplace_variant"]


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


def ref(fn=None, *, name=None, module="refs"):
    """Make a plain function a ref-level Symbol (so that a trace nests its prims)."""
    if fn is None:
        return functools.partial(ref, name=name, module=module)
    sym = Symbol(name or fn.__name__, kind=SymbolKind.REF, fn=fn, module=module)
    functools.update_wrapper(sym, fn, updated=())
    sym.__wrapped__ = fn
    return sym


def elementwise(kind: Kind, promote=("a", "b"), *, scalars=None, name=None, module="refs",
                convert_result=True):
    """Decorator for elementwise refs; see the module docstring.

    `scalars` lists the promoted parameters that may be Python numbers: by default all but
    the first, "all" for ops eager also accepts on numbers alone (add(2, 3) -> tensor(5)),
    or an explicit tuple of names.
    """
    def decorate(body):
        signature = inspect.signature(body)
        op_name = name or body.__name__.rstrip("_")
        number_ok = (set(promote) if scalars == "all" else set(promote[1:]) if scalars is None
                     else set(scalars))

        def run(*args, out=None, **kwargs):
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            values = bound.arguments
            operands = []
            for position, pname in enumerate(promote):
                v = values[pname]
                if not is_tensor(v) and not (is_number(v) and pname in number_ok):
                    raise TypeError(f"{op_name}(): argument '{pname}' (position {position + 1}) "
                                    f"must be Tensor, not {type(v).__name__}")
                operands.append(v)
            computation, result = elementwise_dtypes(*operands, type_promotion_kind=kind)
            shape = broadcast_shapes(*(tuple(v.shape) for v in operands if is_tensor(v)))
            if not any(is_tensor(v) for v in operands):
                values[promote[0]] = to_tensor(values[promote[0]], computation)
            for pname in promote:
                v = values[pname]
                if is_tensor(v):
                    values[pname] = broadcast(maybe_convert(v, computation), shape)
            out_value = body(*bound.args, **bound.kwargs)
            if convert_result:
                out_value = maybe_convert(out_value, result)
            if out is not None:
                return copy_to_out(out, out_value, operands)
            return out_value

        run.__name__, run.__doc__ = body.__name__, body.__doc__
        run.__signature__ = signature.replace(parameters=[
            *signature.parameters.values(),
            inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, default=None)])
        return Symbol(body.__name__, kind=SymbolKind.REF, fn=run, module=module, doc=body.__doc__,
                      promote=tuple(promote), type_promotion_kind=kind, body=body)
    return decorate


def inplace_variant(op: Symbol, name: str | None = None) -> Symbol:
    """`op_` from `op`: compute out of place, then write into the first argument."""
    def run(self, *args, **kwargs):
        return copy_to_self(self, op(self, *args, **kwargs), (self, *args))
    run.__name__ = name or op.name + "_"
    run.__doc__ = f"In-place {op.name}: the result is cast back to self's dtype and shape."
    return Symbol(run.__name__, kind=SymbolKind.REF, fn=run, module=op.module)
