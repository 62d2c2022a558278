"""Opaque torch calls: a call primtrace has no ref for is recorded as one node that runs
torch's own function, with output metadata from torch's meta function (or, where the meta
function refuses arguments the kernel takes, from a run of the kernel on stand-in inputs).
"""

from __future__ import annotations

import warnings

import torch

from primtrace.ir.proxy import NumberProxy, TensorProxy, TensorSpec
from primtrace.ir.symbol import Symbol, SymbolKind
from primtrace.ir.trace import Node
from primtrace.ir.tree import tree_flatten, tree_map
from primtrace.tracer import mapping
from primtrace.tracer.errors import DataDependentError, OpaqueOpWarning, TracingError
from primtrace.tracer.location import describe_location, user_location
from primtrace.tracer.meta_calls import (SymbolicMeta, as_device, plain,
                                         symbolic_metadata, symbolic_sizes, to_meta)


# --- opaque torch calls -----------------------------------------------------------------------
_opaque_symbols: dict = {}
_warned: set = set()


def reset_warnings() -> None:
    """Forget which opaque ops were warned about (each warns once per process)."""
    _warned.clear()


def _warn_once(name: str, refused: bool = False) -> None:
    if (name, refused) not in _warned:
        _warned.add((name, refused))
        message = (f"primtrace: {name} has no ref; it is recorded as an opaque torch call and "
                   f"run by the torch executor")
        if refused:
            message = (f"primtrace: {name}'s ref cannot take an input of a size known only at "
                       f"run time here; it is recorded as an opaque torch call (torch's kernel "
                       f"and autograd) and run by the torch executor")
        loc = user_location()
        if loc is None:
            warnings.warn(message, OpaqueOpWarning, stacklevel=2)
        else:  # point at the user's line, not at the tracer
            warnings.warn_explicit(message, OpaqueOpWarning, loc[0], loc[1])


def opaque_symbol(func, mutates: str | None = None) -> Symbol:
    """The Symbol of an opaque torch call (one per function, so CSE and executors see one op).

    `mutates` is "self" or "out" for calls that write into an argument: their impl returns
    the written tensor, which is the new version of that argument in the trace.
    """
    key = (func, mutates)
    sym = _opaque_symbols.get(key)
    if sym is None:
        _, name = mapping.torch_name(func)
        if mutates == "out":
            def impl(*args, **kwargs):
                func(*args, **kwargs)
                return kwargs["out"]
        elif mutates == "self":
            def impl(self, *args, **kwargs):
                func(self, *args, **kwargs)
                return self
        else:
            impl = func
        sym = Symbol(name, kind=SymbolKind.OPAQUE, impl=impl, module=mapping.print_module(func),
                     tags=frozenset({"inplace"}) if mutates else frozenset(),
                     doc=f"torch's {name}, run as is (primtrace has no ref for it).",
                     torch_function=func)
        _opaque_symbols[key] = sym
    return sym


def _output_device(func, args, kwargs):
    """The device of an opaque call's outputs (meta tensors only know they are on meta)."""
    name = mapping.torch_name(func)[1]
    if name in ("cpu", "cuda"):
        return torch.device(name)
    for leaf in tree_flatten(([kwargs.get("device")], args, kwargs)):
        device = as_device(leaf)
        if device is not None:
            return device
    for leaf in tree_flatten((args, kwargs)):
        if isinstance(leaf, (TensorProxy, torch.Tensor)):
            return leaf.device
    getter = getattr(torch, "get_default_device", None)
    return getter() if getter is not None else torch.device("cpu")


#: the most bytes of stand-in inputs `_real_metadata` allocates (beyond, the meta error stands)
STAND_IN_BYTES = 64 << 20


def _stand_in(x, fill, memo):
    """A real tensor of proxy `x`'s shape, strides, dtype and device, every element `fill`."""
    shape, strides = tuple(x.shape), tuple(x.stride())
    extent = 0 if 0 in shape else 1 + sum((n - 1) * st for n, st in zip(shape, strides))
    t = torch.full((extent,), fill, dtype=x.dtype, device=x.device).as_strided(shape, strides)
    if x.requires_grad:
        with torch.enable_grad():
            t = t.requires_grad_().clone()
    memo[x.name] = t
    return t


def _stand_ins(obj, fill, memo, writes: bool):
    """`obj` with stand-ins for its proxies; a real tensor is copied where the call writes
    (its run must not change the user's tensors)."""
    def convert(x):
        if isinstance(x, TensorProxy):
            return _stand_in(x, fill, memo)
        if isinstance(x, NumberProxy):
            return x._read() if x.python_type in (int, bool) else x.value
        if writes and isinstance(x, torch.Tensor):
            return x.clone()
        return x
    return tree_map(convert, obj)


def _spec_of(result):
    return [(tuple(t.shape), t.dtype, tuple(t.stride()), t.requires_grad)
            for t in tree_flatten(plain(result)) if isinstance(t, torch.Tensor)]


def _real_metadata(func, target, args, kwargs, memo, display, where, meta_error):
    """The call's outputs when torch's meta function refuses arguments its kernel takes (as
    F.grouped_mm's took bf16 only where the CPU kernel takes float32 too, before it had a ref):
    the real kernel run on stand-ins, real tensors of the inputs' shapes, strides, dtypes and
    devices holding zeros.

    Why real tensors of the same sizes, not smaller ones or a formula: output sizes can depend
    on every input size, and layouts on strides, in ways only the kernel knows; no per-op table
    to keep. Values can matter too (an op whose meta refuses because its output size is data,
    repeat_interleave): the call is run again on ones, and different metadata is a
    DataDependentError. What neither run shows is caught per call: the node's symbol checks its
    outputs' shapes and dtypes against the trace's (``_checked_symbol``), so a wrong guess is an
    error, never a silently wrong result. Where the kernel refuses the stand-ins too, its error
    is raised (eager's kind). Inputs over STAND_IN_BYTES keep the meta error."""
    size = sum(x.numel() * x.dtype.itemsize for x in tree_flatten((args, kwargs))
               if isinstance(x, TensorProxy))
    if size > STAND_IN_BYTES:
        meta_error.add_note(f"primtrace: raised by torch's meta function of {display}, {where} "
                            f"(inputs over {STAND_IN_BYTES >> 20} MiB are not run on stand-ins)")
        raise meta_error
    writes = target.inplace or target.name == "__setitem__" or kwargs.get("out") is not None
    try:
        result = func(*_stand_ins(args, 0, memo, writes), **_stand_ins(kwargs, 0, memo, writes))
    except Exception as e:
        # the kernel refuses these arguments too: its error is eager's (its kind may differ
        # from the meta function's: NotImplementedError for a dtype the kernel lacks)
        e.add_note(f"primtrace: raised while computing the metadata of {display} on "
                   f"zero-filled inputs, {where}")
        raise e from None
    try:
        again = func(*_stand_ins(args, 1, {}, writes), **_stand_ins(kwargs, 1, {}, writes))
    except Exception:   # ones are not valid values here (indices): the per-call check remains
        again = result
    if _spec_of(again) != _spec_of(result):
        raise DataDependentError(f"{display}: its output shape depends on tensor values, which "
                                 f"are unknown while tracing\n  {where}") from meta_error
    return result


def _checked_symbol(symbol: Symbol, outputs) -> Symbol:
    """`symbol` with an impl that checks its tensor outputs have the shapes and dtypes the
    trace assumed (metadata from `_real_metadata`'s stand-ins, which values may change)."""
    expected = [(tuple(p.shape), p.dtype) for p in tree_flatten(outputs)
                if isinstance(p, TensorProxy)]
    impl, name = symbol.impl, symbol.qualname

    def checked(*args, **kwargs):
        result = impl(*args, **kwargs)
        got = [(tuple(t.shape), t.dtype) for t in tree_flatten(plain(result))
               if isinstance(t, torch.Tensor)]
        if got != expected:
            raise RuntimeError(f"primtrace: {name} returned {got} where the trace assumed "
                               f"{expected}: torch's meta function refused its arguments, and "
                               f"the metadata was taken from a run on zero-filled inputs; this "
                               f"op's outputs depend on input values and it cannot be traced")
        return result
    return Symbol(symbol.name, kind=symbol.kind, impl=checked, module=symbol.module,
                  tags=symbol.tags, doc=symbol.doc, torch_function=symbol.torch_function)


def record_opaque(trace, func, target, args, kwargs, refused: bool = False):
    """Record a torch call primtrace has no ref for (or whose ref `refused` an input of a
    size known only at run time); its metadata comes from meta tensors."""
    display = mapping.display_name(func)
    mutated, mutates = None, None
    if isinstance(kwargs.get("out"), TensorProxy):
        mutated, mutates = kwargs["out"], "out"
    elif (target.inplace or target.name == "__setitem__") and args and isinstance(args[0], TensorProxy):
        mutated, mutates = args[0], "self"
    memo = {}
    symbolic = symbolic_sizes((args, kwargs))
    trace.bypass += 1
    try:
        if symbolic:   # a size known only at run time (x[mask]'s rows) among the inputs
            result, memo = symbolic_metadata(func, args, kwargs, symbolic, display)
        else:
            meta_args, meta_kwargs = to_meta(args, memo), to_meta(kwargs, memo)
            with torch.device("meta"):
                if target.name in ("cpu", "cuda"):  # a copy to a device: same metadata
                    result = meta_args[0].clone()
                else:
                    result = func(*meta_args, **meta_kwargs)
    except Exception as e:
        where = describe_location(user_location())
        message = str(e).lower()
        if "data-dependent" in message or "data dependent" in message:
            raise DataDependentError(
                f"{display}: its output shape depends on tensor values, which are unknown "
                f"while tracing\n  {where}") from e
        if isinstance(e, NotImplementedError) and "meta" in message:
            raise TracingError(f"cannot trace {display}: torch has no meta implementation to "
                               f"compute its output metadata ({e})\n  {where}") from e
        memo = {}
        result = _real_metadata(func, target, args, kwargs, memo, display, where, e)
        checked = True
    else:
        checked = False
    finally:
        trace.bypass -= 1
    if mutated is None and not any(isinstance(x, (torch.Tensor, SymbolicMeta))
                                   for x in tree_flatten(plain(result))):
        return result  # a metadata query (x.is_floating_point(), torch.numel(x)): a constant
    device = _output_device(func, args, kwargs)

    def to_proxy(m):
        if isinstance(m, (torch.Tensor, SymbolicMeta)):
            return trace.tensor(TensorSpec(tuple(m.shape), m.dtype, device, tuple(m.stride())),
                                requires_grad=m.requires_grad)
        return m
    if mutated is not None:
        outputs = to_proxy(memo[mutated.name]) if not symbolic else trace.tensor(
            mutated.spec, requires_grad=mutated.requires_grad)
    else:
        outputs = tree_map(to_proxy, result)
        if isinstance(result, tuple) and type(result) is not tuple and not hasattr(result, "_fields"):
            outputs = type(result)(tuple(to_proxy(m) for m in result))  # torch.return_types
    symbol = opaque_symbol(func, mutates)
    if checked:   # metadata from a run on stand-in values: each call checks it (see below)
        symbol = _checked_symbol(symbol, outputs)
    node = Node(symbol, tuple(args), dict(kwargs), outputs, source=trace.source_line)
    trace.record(node)
    if hasattr(trace, "note_write"):   # a tracing trace (capture.TracingTrace)
        if mutated is not None:
            trace.note_write(mutated, outputs)
        elif target.name in mapping.VIEW_NAMES and args and isinstance(args[0], TensorProxy):
            trace.note_alias(args[0], outputs)   # a view torch makes (x.view(torch.int32))
    _warn_once(display, refused)
    return outputs


def torch_call_node(node: Node) -> Node:
    """A leaf node that runs the torch call a ref node stands for (``node.call``), with the
    ref node's outputs: torch's own kernel, and its autograd."""
    func, args, kwargs = node.call
    target = mapping.resolve(func)
    mutates = "self" if target.inplace and args and isinstance(args[0], TensorProxy) else None
    return Node(opaque_symbol(func, mutates), tuple(args), dict(kwargs), node.outputs,
                source=node.source, grad_enabled=node.grad_enabled)
