"""Function inputs: proxies at trace time, the cache key and runtime leaves at call time.

Both walks visit the same leaves in the same order (positional arguments, then keyword
values, depth first through exact tuples, lists and dicts), so the i-th runtime leaf is the
value of the trace's i-th input. Tensors and Python int/float/complex are runtime inputs;
everything else (None, bool, str, dtypes, other objects) is a constant of the trace and is
part of the key by value.
"""
from __future__ import annotations

import inspect
import keyword
import re

import torch

from primtrace.ir.proxy import TensorSpec
from primtrace.tracer import dynamic

_Tensor = torch.Tensor
_get_default_dtype = torch.get_default_dtype
_is_grad_enabled = torch.is_grad_enabled
_NUMBER_TYPES = (int, float, complex)


def _fits_64_bits(n: int) -> bool:
    """torch takes ints in [-2**63, 2**64); a wider one (OverflowError in eager) is a constant
    of the trace, its value part of the key."""
    return -2**63 <= n < 2**64


# --- call time ---------------------------------------------------------------------------
def _leaf_key(x, leaves: list):
    if isinstance(x, _Tensor):
        leaves.append(x)
        strides = True if x.is_contiguous() else x.stride()
        if type(x) is _Tensor:
            return (x.dtype, x.shape, x.device, strides, x.requires_grad)
        return (x.dtype, x.shape, x.device, strides, x.requires_grad, type(x))
    t = type(x)
    if t is float or t is int or t is complex:
        leaves.append(x)
        return t if t is not int or -2**63 <= x < 2**64 else (int, x)  # see _fits_64_bits
    if t is tuple or t is list:
        return (t, tuple([_leaf_key(v, leaves) for v in x]))
    if t is dict:
        return (dict, tuple([(k, _leaf_key(v, leaves)) for k, v in x.items()]))
    try:
        hash(x)
    except TypeError:
        return (t, id(x))
    return (t, x)


def cache_key(args: tuple, kwargs: dict):
    """(key, leaves): everything that changes the trace, and the runtime input values.

    The key holds per tensor dtype, shape, device, strides (True when contiguous),
    requires_grad; per Python number its type; the structure (containers, None-ness,
    constants, keyword names); the default dtype and grad mode.
    """
    leaves = []
    key = [_get_default_dtype(), _is_grad_enabled()]
    for x in args:
        if type(x) is _Tensor:  # the common case, inlined
            leaves.append(x)
            key.append((x.dtype, x.shape, x.device, True if x.is_contiguous() else x.stride(),
                        x.requires_grad))
        else:
            key.append(_leaf_key(x, leaves))
    if kwargs:
        key.append(tuple([(k, _leaf_key(v, leaves)) for k, v in kwargs.items()]))
    return tuple(key), leaves


# --- trace time --------------------------------------------------------------------------
def _positional_names(fn, nargs: int) -> list[str]:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for p in params:
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and len(names) < nargs:
            names.append(p.name)
        elif p.kind is p.VAR_POSITIONAL:
            names += [f"{p.name}{i}" for i in range(nargs - len(names))]
    names += [f"arg{i}" for i in range(len(names), nargs)]
    return names


class Namer:
    """Valid, unique Python names that cannot collide with the trace's t0, t1, ... names."""

    def __init__(self):
        self.used = set()

    def __call__(self, name) -> str:
        name = re.sub(r"\W", "_", str(name)) or "x"
        if name[0].isdigit():
            name = "_" + name
        if keyword.iskeyword(name) or re.fullmatch(r"[tn]\d+", name) or name.startswith("__pt_"):
            name += "_"
        base, i = name, 1
        while name in self.used:
            name, i = f"{base}_{i}", i + 1
        self.used.add(name)
        return name


def proxify(trace, fn, args: tuple, kwargs: dict, numbers_as_constants: bool = False,
            namer=None, tensors: dict | None = None):
    """(args, kwargs) with proxies in place of runtime inputs, and the flat input proxies.

    With `numbers_as_constants`, numbers reach `fn` as themselves; their proxies are still
    inputs (so runtime leaves line up) but marked specialized: their values join the key.
    `namer` names the inputs (pass one to keep later names unique); `tensors` collects
    ``id(tensor) -> (leaf index, proxy, tensor)`` for the argument tensors.
    """
    namer, inputs = namer or Namer(), []
    tensors = {} if tensors is None else tensors

    def wrap(x, name):
        if isinstance(x, _Tensor):
            name = namer(name)
            spec = dynamic.input_spec(trace, name, x, len(inputs), namer) or TensorSpec.of(x)
            p = trace.tensor(spec, name=name, requires_grad=x.requires_grad)
            p.__dict__["_leaf"] = x.is_leaf
            tensors.setdefault(id(x), (len(inputs), p, x))
            inputs.append(p)
            dynamic.record_dims(trace, p)   # its symbolic dims (automatic dynamic dims)
            return p
        t = type(x)
        if t in _NUMBER_TYPES:
            p = trace.number(t, x, name=namer(name))
            inputs.append(p)
            if numbers_as_constants or (t is int and not _fits_64_bits(x)):
                p.specialized = True
                return x
            return p
        if t is tuple or t is list:
            return t(wrap(v, f"{name}_{i}") for i, v in enumerate(x))
        if t is dict:
            return {k: wrap(v, f"{name}_{k}") for k, v in x.items()}
        return x

    names = _positional_names(fn, len(args))
    pargs = tuple(wrap(x, n) for x, n in zip(args, names))
    pkwargs = {k: wrap(v, k) for k, v in kwargs.items()}
    return pargs, pkwargs, inputs
