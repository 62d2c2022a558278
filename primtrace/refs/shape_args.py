"""Argument parsing shared by the view and join refs: tensors, ints, sizes and dims as
eager's argument parser takes them (with its TypeErrors), and eager's infer_size."""
from __future__ import annotations

import builtins
import operator

import torch

from primtrace.ir.size_guards import hinted
from primtrace.refs.core import is_tensor
from primtrace.refs.reductions import wrap_dim

__all__ = []  # helpers, not refs

SEQUENCE = (tuple, list, torch.Size)


# --- arguments ---------------------------------------------------------------------------------
def require_tensor(name, x, argument="input", position=1):
    if not is_tensor(x):
        raise TypeError(f"{name}(): argument '{argument}' (position {position}) must be Tensor, "
                        f"not {type(x).__name__}")


def as_int(name, argument, value, position=1) -> int:
    """`value` as an int, as eager's parser takes an int argument (a runtime int is read:
    the trace is specialized on it)."""
    kind = getattr(value, "python_type", type(value))
    if is_tensor(value) or not issubclass(kind, int) or kind is bool:
        raise TypeError(f"{name}(): argument '{argument}' (position {position}) must be int, "
                        f"not {type(value).__name__}")
    return operator.index(value)


def int_list(name, argument, values, position=1, required=False) -> tuple:
    """A size or dims argument: varargs of ints or one sequence of ints (`required`: eager's
    TypeError when there is none)."""
    if required and not values:
        raise TypeError(f'{name}() missing 1 required positional arguments: "{argument}"')
    if len(values) == 1 and isinstance(values[0], SEQUENCE):
        values = tuple(values[0])
    out = []
    for i, v in enumerate(values):
        kind = getattr(v, "python_type", type(v))
        if is_tensor(v) or not issubclass(kind, int) or kind is bool:
            raise TypeError(f"{name}(): argument '{argument}' (position {position}) must be "
                            f"tuple of ints, but found element of type {type(v).__name__} at "
                            f"pos {i}")
        out.append(v if hinted(v) else operator.index(v))   # a symbolic input dim stays one
    return tuple(out)


def wrap(d, ndim) -> int:
    return wrap_dim(d, ndim)


def legacy_type(t) -> str:
    """Eager's x.type() name of a tensor's dtype and device: torch.FloatTensor."""
    from primtrace import dtypes
    device = "cuda." if t.device.type == "cuda" else ""
    return f"torch.{device}{dtypes.scalar_type_name(t.dtype)}Tensor"


def named(*args, **kwargs) -> bool:
    """A call with named dims (strings): left to torch."""
    return builtins.any(isinstance(a, str) for a in (*args, *kwargs.values()))


def infer_size(shape, numel) -> tuple:
    """`shape` with its one -1 inferred (eager's infer_size and its errors)."""
    infer, known = None, 1
    for i, s in enumerate(shape):
        if s == -1:
            if infer is not None:
                raise RuntimeError("only one dimension can be inferred")
            infer = i
        elif s < 0:
            raise RuntimeError(f"invalid shape dimension {s} at index {i} of shape {list(shape)}")
        else:
            known *= s
    if infer is None:
        if known != numel:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
        return tuple(shape)
    if known == 0:
        if numel == 0:
            raise RuntimeError(f"cannot reshape tensor of 0 elements into shape {list(shape)} "
                               f"because the unspecified dimension size -1 can be any value and "
                               f"is ambiguous")
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
    if numel % known:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
    return tuple(numel // known if i == infer else s for i, s in enumerate(shape))


