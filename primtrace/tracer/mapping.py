"""Torch function -> ref, by name, resolved when the function is called.

Nothing here lists refs. A torch callable is named ``(namespace, name)`` (``torch.add`` ->
``("torch", "add")``, ``Tensor.__radd__`` -> ``("Tensor", "__radd__")``), and the ref of
that name is looked up in ``primtrace.refs`` (``refs.special``, ``refs.nn.functional`` for
those namespaces) at trace time, so refs that other modules add later are picked up without
touching the tracer. Operators, reflected operators and in-place methods are name rewrites
on top of that; torch's aliases are refs of those names (``refs.subtract``).
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass

import torch

from primtrace.ir.symbol import Symbol
from primtrace.ir.trace import current_trace

#: torch namespaces whose callables the tracer can name, with the module that prints them.
NAMESPACES = (
    ("Tensor", torch.Tensor, "torch.Tensor"),
    ("torch", torch, "torch"),
    ("special", torch.special, "torch.special"),
    ("nn.functional", torch.nn.functional, "torch.nn.functional"),
    ("linalg", torch.linalg, "torch.linalg"),
    ("fft", torch.fft, "torch.fft"),
)
_PRINT_MODULE = {ns: module for ns, _, module in NAMESPACES}

#: where the refs of a namespace are looked up, in order.
#: torch.X and Tensor.X fall back to the nn.functional and special refs of that name
#: (torch.hardshrink and torch.threshold are F.hardshrink's and F.threshold's kernels).
REF_MODULES = {
    "torch": ("primtrace.refs", "primtrace.refs.nn.functional", "primtrace.refs.special"),
    "Tensor": ("primtrace.refs", "primtrace.refs.nn.functional", "primtrace.refs.special"),
    "special": ("primtrace.refs.special", "primtrace.refs"),
    "nn.functional": ("primtrace.refs.nn.functional", "primtrace.refs"),
    "linalg": ("primtrace.refs.linalg",),
}

#: operator dunder -> torch name (reflected __rX__ and in-place __iX__ derive from these).
OPERATORS = {
    "add": "add", "sub": "sub", "mul": "mul", "truediv": "true_divide", "div": "true_divide",
    "floordiv": "floor_divide", "mod": "remainder", "pow": "pow", "matmul": "matmul",
    "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor",
    "lshift": "bitwise_left_shift", "rshift": "bitwise_right_shift",
    "eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge",
    "neg": "neg", "pos": "positive", "abs": "abs",
    "invert": "invert",  # refs.invert: bitwise_not after the TypeError eager's ~ raises first
}

#: torch names that are not ref names, tried after the name itself. torch's aliases are not
#: here: the refs declare them (``aliases=``, or a module-level name such as special.expit), so
#: they are found by name. What remains is torch's naming, which no ref should copy:
ALIASES = {
    # F.threshold is the object F._threshold, and the name table names a callable by its first
    # name in dir() order; a private name is not a ref's
    "_threshold": ("threshold",),
}

#: torch functions with another form that a ref of another name computes, tried when the
#: ref of the function's own name cannot take the call: torch.where(condition), the
#: one-argument where, is nonzero(condition, as_tuple=True)
OVERLOADS = {"where": ("where_condition",)}

#: Tensor methods whose torch function takes self second: x.polygamma(n) is torch.polygamma(n, x).
SELF_SECOND = frozenset({"polygamma"})

#: calls that read tensor values into Python: they cannot be traced. (item, equal and allclose
#: have refs: their result is a number the trace computes, refs/queries.py.)
DATA_DEPENDENT = frozenset({
    "__bool__", "__int__", "__float__", "__index__", "__complex__", "__contains__",
    "tolist", "numpy", "data_ptr", "is_nonzero", "__array__",
})

#: torch functions whose results share their first argument's memory: an opaque call of one
#: is a view the tracer tracks (writes through it reach the base; see capture.TracingTrace).
VIEW_NAMES = frozenset({
    "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "ravel", "permute",
    "transpose", "swapaxes", "swapdims", "t", "T.__get__", "mT.__get__", "H.__get__",
    "mH.__get__", "adjoint", "movedim", "moveaxis", "squeeze", "unsqueeze", "expand",
    "expand_as", "broadcast_to", "narrow", "select", "unbind", "split", "split_with_sizes",
    "chunk", "tensor_split", "hsplit", "vsplit", "dsplit", "diagonal", "unfold", "as_strided",
    "__getitem__", "detach", "alias", "view_as_real", "view_as_complex", "real", "imag",
    "real.__get__", "imag.__get__", "conj", "resolve_conj", "resolve_neg", "positive",
    "contiguous", "data.__get__", "align_as", "atleast_1d", "atleast_2d", "atleast_3d",
    "broadcast_tensors", "meshgrid", "unsafe_split", "unsafe_chunk",
})

#: in-place methods that change a tensor's metadata, not its values (x.unsqueeze_(0)): not
#: the op computed then written into x, so they never get a ref's in-place variant
METADATA_INPLACE = frozenset({
    "squeeze_", "unsqueeze_", "t_", "transpose_", "swapaxes_", "swapdims_", "as_strided_",
    "resize_", "resize_as_", "set_", "requires_grad_", "share_memory_", "detach_",
})

#: torch functions that make new tensors without tensor inputs: recorded so they run per call.
FACTORIES = frozenset({
    "ones", "zeros", "full", "empty", "empty_strided", "arange", "range", "linspace",
    "logspace", "eye", "rand", "randn", "randint", "randperm", "tensor", "scalar_tensor",
    "as_tensor", "normal", "tril_indices", "triu_indices", "complex", "polar",
    "ones_like", "zeros_like", "full_like", "empty_like", "rand_like", "randn_like",
    "randint_like", "new_ones", "new_zeros", "new_full", "new_empty", "new_tensor",
})

# torch positional parameter names, for binding torch-style keywords to a ref's parameters
_TORCH_POSITIONAL = {"input": 0, "self": 0, "other": 1}

_names: dict | None = None


def _name_table() -> dict:
    """Identity table: torch callable -> (namespace, name), built once."""
    global _names
    if _names is None:
        table = {}
        for ns, obj, _ in NAMESPACES:
            for name in dir(obj):
                try:
                    value = getattr(obj, name)
                except AttributeError:
                    continue
                value = getattr(value, "__wrapped_factory__", value)   # tracer/factories.py
                if callable(value):
                    try:
                        table.setdefault(value, (ns, name))
                    except TypeError:  # unhashable
                        pass
        _names = table
    return _names


def torch_name(func) -> tuple[str, str]:
    """(namespace, name) of a torch callable; ('?', qualname) when it is not one of ours."""
    if type(func).__name__ == "method-wrapper" and func.__name__ == "__get__":
        return "Tensor", f"{func.__self__.__name__}.__get__"  # a Tensor property such as .T
    try:
        found = _name_table().get(func)
    except TypeError:
        found = None
    if found is not None:
        return found
    return "?", getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))


def display_name(func) -> str:
    ns, name = torch_name(func)
    module = _PRINT_MODULE.get(ns, getattr(func, "__module__", None) or "?")
    return f"{module}.{name}"


def print_module(func) -> str:
    ns, _ = torch_name(func)
    return _PRINT_MODULE.get(ns, getattr(func, "__module__", None) or "?")


@dataclass
class Target:
    """What a torch call becomes: a ref (maybe with swapped operands) or nothing (opaque)."""
    namespace: str
    name: str            # the torch-level name, in-place underscore included
    ref: Symbol | None
    swap: bool = False   # reflected operator: ref(other, self)
    inplace: bool = False  # mutates its first argument


def _lookup(module_name: str, name: str):
    trace = current_trace()
    if trace is not None:   # a module's first import runs its torch calls: eager's, not nodes
        trace.bypass += 1
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError:
        return None
    finally:
        if trace is not None:
            trace.bypass -= 1
    value = getattr(module, name, None)
    return value if isinstance(value, Symbol) else None


def find_ref(namespace: str, name: str) -> Symbol | None:
    """The ref for a torch name, looked up now (so later additions to refs count)."""
    modules = REF_MODULES.get(namespace)
    if modules is None:
        return None
    for candidate in (name, *ALIASES.get(name, ())):
        for module_name in modules:
            ref = _lookup(module_name, candidate)
            if ref is not None:
                return ref
    return None


_inplace_variants: dict = {}


def find_inplace_ref(namespace: str, base: str) -> Symbol | None:
    """``refs.add_`` if it exists, else ``inplace_variant(refs.add)`` (made once per ref)."""
    ref = find_ref(namespace, base + "_")
    if ref is not None:
        return ref
    base_ref = find_ref(namespace, base)
    if base_ref is None:
        return None
    variant = _inplace_variants.get(base_ref)
    if variant is None:
        from primtrace.refs.core import inplace_variant
        variant = _inplace_variants.setdefault(base_ref, inplace_variant(base_ref, base + "_"))
    return variant


def resolve(func) -> Target:
    """Map a torch callable to its ref target; `ref` is None for an opaque call."""
    namespace, name = torch_name(func)
    if name.startswith("__") and name.endswith("__") and name[2:-2] not in ("getitem", "setitem"):
        inner = name[2:-2]
        if inner in OPERATORS:
            return Target(namespace, name, find_ref("torch", OPERATORS[inner]))
        if inner.startswith("r") and inner[1:] in OPERATORS:
            return Target(namespace, name, find_ref("torch", OPERATORS[inner[1:]]), swap=True)
        if inner.startswith("i") and inner[1:] in OPERATORS:
            return Target(namespace, name, find_inplace_ref("torch", OPERATORS[inner[1:]]),
                          inplace=True)
        return Target(namespace, name, None)
    if name in METADATA_INPLACE:
        return Target(namespace, name, None, inplace=True)
    if (name.endswith("_") and not name.startswith("_") and "." not in name
            and namespace in ("Tensor", "torch", "nn.functional")):
        return Target(namespace, name, find_inplace_ref(namespace, name[:-1]), inplace=True)
    if namespace == "Tensor" and name in SELF_SECOND:
        return Target(namespace, name, find_ref(namespace, name), swap=True)
    return Target(namespace, name, find_ref(namespace, name))


def overloads(target: Target) -> list[Target]:
    """The targets of the other forms of `target`'s function (OVERLOADS)."""
    found = []
    for name in OVERLOADS.get(target.name, ()):
        ref = find_ref(target.namespace, name)
        if ref is not None:
            found.append(Target(target.namespace, target.name, ref, target.swap, target.inplace))
    return found


def is_factory(func) -> bool:
    namespace, name = torch_name(func)
    return namespace in ("torch", "Tensor") and name in FACTORIES


_signatures: dict = {}


def bind(ref: Symbol, args: tuple, kwargs: dict):
    """(args, kwargs) the ref accepts for a torch-style call, or None if it cannot take it.

    torch's keyword names (``input=``, ``other=``) become positions; keywords that are None
    and unknown to the ref are torch defaults and are dropped.
    """
    sig = _signatures.get(ref)
    if sig is None:
        try:
            sig = inspect.signature(ref)
        except (TypeError, ValueError):
            return args, kwargs
        _signatures[ref] = sig
    params = sig.parameters
    has_var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    args, kwargs = list(args), dict(kwargs)
    for key in [k for k in kwargs if k not in params and not has_var_kw]:
        if kwargs[key] is None:
            del kwargs[key]
        elif key in _TORCH_POSITIONAL and _TORCH_POSITIONAL[key] == len(args):
            args.append(kwargs.pop(key))
    if "other" in kwargs and "other" not in params and len(args) == 1:
        args.append(kwargs.pop("other"))
    try:
        sig.bind(*args, **kwargs)
    except TypeError:
        return None
    if ref.declines is not None and ref.declines(*args, **kwargs):  # left to torch (x.to("cuda"))
        return None
    return tuple(args), kwargs
