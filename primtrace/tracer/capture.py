"""Capturing plain PyTorch code into an acquisition trace.

Calls reach :func:`dispatch` from three doors: ``__torch_function__`` on proxies (``torch.*``
functions), the proxy's operators and methods (``primtrace.ir.proxy.set_dispatcher``), and a
``TorchFunctionMode`` that sees factories (``torch.ones``) which have no proxy to dispatch
on. A call with a ref runs the ref on the proxies, which records one ref-level node with its
prims nested under it; a call without one becomes an opaque torch node whose output
metadata comes from running it on meta tensors.

In-place methods and ``out=`` are functionalized: the ref computes out of place and writes
with ``prims.copy_to``; the copy's output is the variable's new version, and every later
read of the old proxy is redirected to it (``TracingTrace.resolve_args``), so dataflow
orders the reads after the write and the caller's tensor is mutated at run time.

Views share memory: a view prim's result (and a write's new version) is noted as part of
its base's memory (``trace.tags["alias_roots"]``). A write through one view makes every
other proxy of that memory stale; its next read at the top level goes through
``prims.aliased(x, write)``, the same tensor ordered after the write. ``dependency_graph``
orders earlier reads of any of them before the write.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys

import torch
from torch.overrides import TorchFunctionMode

from primtrace.ir import proxy as _proxy
from primtrace.ir.proxy import Proxy, TensorProxy, Unknown
from primtrace.ir.symbol import Symbol, SymbolKind, has_proxy
from primtrace.ir.trace import Node, Trace, current_trace, tracing
from primtrace.ir.tree import tree_flatten, tree_map
from primtrace.tracer import autocast, dynamic, layout, mapping
from primtrace.tracer.autograd_calls import GRAPH_METHODS, custom_functions, record_graph_call
from primtrace.tracer.compiling import compiling
from primtrace.tracer.errors import DataDependentError, TracingError
from primtrace.tracer.factories import symbolic_factories
from primtrace.tracer.location import describe_location, user_location
from primtrace.tracer.module_calls import module_calls
from primtrace.tracer.meta_calls import symbolic_sizes
from primtrace.tracer.opaque import opaque_symbol, record_opaque
from primtrace.tracer.outputs import split as split_outputs
from primtrace.tracer.inputs import Namer, proxify
from primtrace.tracer.pystate import Replay, ReplayError, Snapshot, find_proxy
from primtrace.tracer.state import SideEffectError, StateRecorder, set_stop_frame


# --- the trace the tracer builds ------------------------------------------------------------
class TracingTrace(Trace):
    """A trace under construction: knows the user's line and the versions of mutated values."""

    def __init__(self, name: str = "fn"):
        super().__init__(name)
        self.versions: dict[str, Proxy] = {}   # proxy name -> its value after a mutation
        self.tags["grad_enabled"] = torch.is_grad_enabled()  # the mode of the whole call
        self.made: dict[int, torch.Tensor] = {}  # tensors created while tracing (constants)
        # memory sharing: proxy name -> the name of the proxy whose memory it is part of
        # (views and written versions); dependency_graph reads it
        self.alias_root: dict[str, str] = self.tags.setdefault("alias_roots", {})
        self._writes: dict[str, tuple[int, Proxy]] = {}  # root -> (count, last written value)
        self._synced: dict[str, int] = {}   # proxy name -> the write count it has seen

    def lift_state(self, args, kwargs):
        """Real tensors the code reached outside its arguments become state inputs."""
        def lift(x):
            if type(x) is TensorProxy or not isinstance(x, torch.Tensor) or id(x) in self.made:
                return x
            return self.state.lift(x)
        if self.state is None or not any(isinstance(leaf, torch.Tensor) and type(leaf) is not
                                         TensorProxy for leaf in tree_flatten((args, kwargs))):
            return args, kwargs
        return tree_map(lift, args), tree_map(lift, kwargs)

    @property
    def source_line(self):
        loc = user_location()
        if loc is None:
            return None
        return loc[2] or f"{os.path.basename(loc[0])}:{loc[1]}"

    def latest(self, p):
        while isinstance(p, Proxy) and p.name in self.versions:
            p = self.versions[p.name]
        if self._writes and self.depth == 0 and isinstance(p, TensorProxy):
            written = self._writes.get(self.alias_root.get(p.name, p.name))
            if written is not None and self._synced.get(p.name, 0) < written[0]:
                p = self._after_write(p, written[1])
        return p

    def _after_write(self, p: TensorProxy, write: TensorProxy) -> TensorProxy:
        """`p` read after a write into memory it shares (x after x.view(-1).add_(1)): a
        ``prims.aliased`` node makes the new version, so dataflow orders the read after it."""
        from primtrace import prims
        requires_grad = p.requires_grad or (torch.is_grad_enabled() and write.requires_grad)
        out = self.tensor(p.spec, requires_grad=requires_grad)
        self.record(Node(prims.aliased, (p, write), {}, out))
        self.versions[p.name] = out
        return out

    def root(self, p: Proxy) -> str:
        return self.alias_root.get(p.name, p.name)

    def note_alias(self, base: Proxy, outputs) -> None:
        """`outputs` share `base`'s memory (a view); they have seen its writes so far."""
        root = self.root(base)
        count = self._writes.get(root, (0, None))[0]
        for q in tree_flatten(outputs):
            if isinstance(q, TensorProxy) and q.name != root:
                self.alias_root[q.name] = root
                self._synced[q.name] = count

    def note_write(self, dst: Proxy, out: Proxy) -> None:
        """`out` is `dst` after an in-place write: later reads of `dst`'s aliases follow it."""
        self.versions[dst.name] = out
        self.note_alias(dst, out)
        root = self.root(dst)
        count = self._writes.get(root, (0, None))[0] + 1
        self._writes[root] = (count, out)
        self._synced[out.name] = count

    def wrote(self, p: Proxy) -> bool:
        """Did the code write into `p`'s memory?"""
        return self.root(p) in self._writes

    def resolve(self, obj):
        """`obj` with every proxy replaced by its latest version."""
        if not self.versions:
            return obj
        return tree_map(self.latest, obj)

    def resolve_args(self, args, kwargs):
        if not self.versions:
            return args, kwargs
        return tree_map(self.latest, args), tree_map(self.latest, kwargs)

    def record(self, node: Node) -> Node:
        node.grad_enabled = torch.is_grad_enabled()  # `with torch.no_grad():` inside fn
        super().record(node)
        sym = node.symbol
        if sym.kind is SymbolKind.PRIM and node.args and isinstance(node.args[0], TensorProxy):
            if "inplace" in sym.tags and isinstance(node.outputs, TensorProxy):
                self.note_write(node.args[0], node.outputs)
            elif "view" in sym.tags:
                self.note_alias(node.args[0], node.outputs)
        return node


# --- the dispatcher ----------------------------------------------------------------------------
#: metadata of a state tensor the proxy answers (its sizes may be symbolic: a KV cache's length)
_METADATA = {"shape.__get__": lambda t: t.shape, "ndim.__get__": lambda t: t.ndim,
             "dtype.__get__": lambda t: t.dtype, "device.__get__": lambda t: t.device,
             "numel": TensorProxy.numel, "size": TensorProxy.size, "dim": TensorProxy.dim,
             "stride": TensorProxy.stride}


def dispatch(func, args, kwargs):
    """Turn one torch-level call on proxies into refs (or an opaque node) in the current trace."""
    trace = current_trace()
    if trace is None:
        raise TracingError(f"{mapping.display_name(func)} was called on a primtrace proxy "
                           f"outside of tracing")
    target = mapping.resolve(func)
    if func in _AUTOGRAD_CALLS:
        raise TracingError(f"{mapping.display_name(func)} while tracing: primtrace traces "
                           f"forward computations; jit the model (or the loss) and call "
                           f"backward outside\n  {describe_location(user_location())}")
    if target.name in mapping.DATA_DEPENDENT:
        value = _read_argument(trace, func, target, args, kwargs)
        if value is NotImplemented:
            raise DataDependentError(_data_dependent_message(func, target))
        return value
    state = trace.state
    if state is not None:   # tensors read from state become inputs; the frames are noted
        args, kwargs = trace.lift_state(args, kwargs)
        state.note_frames(sys._getframe(1))
        if target.name == "grad.__get__":
            return state.grad_of(args[0])   # an input's .grad is state too, read per call
        if target.name in _METADATA and args and isinstance(args[0], TensorProxy):
            return _METADATA[target.name](*args, **kwargs)   # its sizes may be symbolic
    if target.name == "__iter__":
        return iter(dispatch(torch.Tensor.unbind, args[:1], {}))
    if func in GRAPH_METHODS:
        return record_graph_call(trace, opaque_symbol(func), *trace.resolve_args(args, kwargs))
    written = kwargs.get("out") if isinstance(kwargs.get("out"), TensorProxy) else (
        args[0] if args and isinstance(args[0], TensorProxy) else None)
    args, kwargs = trace.resolve_args(args, kwargs)
    if trace.depth == 0 and torch._C._is_any_autocast_enabled():   # the user's call: its casts
        args, kwargs = autocast.cast_args(func, target, args, kwargs, _autocast_cast)
    result, refused = NotImplemented, None
    if target.ref is not None:
        sizes = _size_tables(trace)
        try:
            result = _call_ref(trace, func, target, args, kwargs)
            for other in mapping.overloads(target) if result is NotImplemented else ():
                result = _call_ref(trace, func, other, args, kwargs)
                if result is not NotImplemented:
                    break
        except DataDependentError as e:
            # the ref cannot take a size known only at run time here (softmax over x[mask]'s
            # rows, which it special-cases when empty): torch's own call, if its meta tells
            if (kwargs.get("out") is not None or target.inplace or target.name == "__setitem__"
                    or not symbolic_sizes((args, kwargs))):
                raise
            _restore_size_tables(trace, sizes)
            refused = e
    if result is NotImplemented:
        if trace.depth == 0 and torch._C._is_any_autocast_enabled():
            autocast.refuse_opaque(target, args, kwargs)
        try:
            result = record_opaque(trace, func, target, args, kwargs,
                                   refused=refused is not None)
        except DataDependentError:
            if refused is not None:
                raise refused from None
            raise
    if written is not None and result is not written and (
            isinstance(result, TensorProxy) and trace.latest(written) is result):
        return written  # x.add_(y) returns x itself, as eager; reads of x see the new version
    return result


def _autocast_cast(x, dtype):
    return dispatch(torch.Tensor.to, (x, dtype), {})


#: backward passes run autograd's engine, which a trace of forward ops cannot record
_AUTOGRAD_CALLS = (torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad)


#: reads of a tensor's values that an argument or state tensor answers (see _read_argument)
_VALUE_READS = frozenset({"__bool__", "__int__", "__index__", "__contains__", "tolist", "is_nonzero"})


def _size_tables(trace) -> tuple:
    """Copies of what the trace knows of its data-dependent sizes (prims.data_dependent),
    restored when a ref that made some fails and its call is recorded otherwise."""
    return tuple(dict(trace.tags.get(key, {})) for key in ("size_exprs", "counts"))


def _restore_size_tables(trace, saved: tuple) -> None:
    for key, table in zip(("size_exprs", "counts"), saved):
        trace.tags[key] = table


def _read_argument(trace, func, target, args, kwargs):
    """User code reads the values of a small integer or bool argument (or state) tensor not
    written before (``if flag:``, ``int(n)``, ``x[:int(n)]``): the call's values are read
    and the trace is specialized on them, as for a ref's reads (``_value_read``). Anything
    else (a computed tensor, a float, a large one): NotImplemented."""
    if target.name not in _VALUE_READS or not args or type(args[0]) is not TensorProxy or \
            trace.state is None or has_proxy(args[1:], kwargs):
        return NotImplemented
    real = trace.state.read_values(trace.resolve(args[0]))
    return NotImplemented if real is None else func(real, *args[1:], **kwargs)


def _data_dependent_message(func, target) -> str:
    what = {"__bool__": "bool(tensor)", "__int__": "int(tensor)", "__float__": "float(tensor)",
            "__index__": "using a tensor as an index", "item": "tensor.item()",
            "__contains__": "`in` on a tensor"}.get(target.name, mapping.display_name(func))
    return (f"data-dependent control flow: {what} reads a tensor's value, which is unknown "
            f"while tracing\n  {describe_location(user_location())}\n"
            f"primtrace traces tensors symbolically; use torch.where for elementwise choices "
            f"or move the check outside the jitted function")


def _unknown_read(unknown: Unknown):
    """User code read a number the trace computes only when it runs (``t.item()``); or a
    ref or prim needs the value of a size known only at run time (x[mask]'s row count)."""
    from primtrace.ir.symbol import recording
    ops = recording()
    if ops:
        names = " -> ".join(dict.fromkeys(s.qualname for s in (ops[0], ops[-1])))
        raise DataDependentError(
            f"data-dependent size: {names} needs the value of {unknown.what}; it is known "
            f"only when the trace runs\n  {describe_location(user_location())}\n"
            f"primtrace traces such sizes symbolically, but this op cannot take one here (it "
            f"compares or computes with its value); compute it outside the jitted function, or "
            f"keep the data-dependent part out of it (torch.where(mask, x, 0) keeps sizes fixed)")
    raise DataDependentError(
        f"data-dependent control flow: this reads the value of {unknown.what}, which is "
        f"known only when the trace runs\n  {describe_location(user_location())}\n"
        f"primtrace traces tensors symbolically: returning such a value works; branch on it "
        f"outside the jitted function, or use torch.where for elementwise choices")


_proxy.set_unknown_read(_unknown_read)


def _value_read(proxy, what: str):
    """A ref reads a traced tensor's values as numbers (narrow's start, tensor_split's
    indices): an argument or state tensor's are read now and guarded (the trace is
    specialized on them); a computed tensor's are data: DataDependentError."""
    trace = current_trace()
    state = getattr(trace, "state", None)
    values = None if state is None else state.input_values(trace.resolve(proxy))
    if values is None:
        raise DataDependentError(
            f"data-dependent sizes: {what} reads the values of a tensor the trace computes, "
            f"which are unknown while tracing\n  {describe_location(user_location())}\n"
            f"pass them as an input tensor or as Python ints")
    return values


_proxy.set_value_read(_value_read)


def _accepts(ref: Symbol, name: str) -> bool:
    import inspect
    try:
        params = inspect.signature(ref).parameters
    except (TypeError, ValueError):
        return True
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _call_ref(trace, func, target, args, kwargs):
    call_args, call_kwargs = args, kwargs
    ref, kwargs = target.ref, dict(kwargs)
    if target.swap and len(args) >= 2:
        args = (args[1], args[0], *args[2:])
    if "inplace" in kwargs and not _accepts(ref, "inplace"):
        if kwargs.pop("inplace"):
            ref = mapping.find_inplace_ref(target.namespace, target.name)
            if ref is None:
                return NotImplemented
    out = None
    if isinstance(kwargs.get("out"), TensorProxy) and not _accepts(ref, "out"):
        out = kwargs.pop("out")
    bound = mapping.bind(ref, args, kwargs)
    if bound is None:
        return NotImplemented
    scope = trace._scopes[-1]
    recorded = len(scope)
    with _recording_constants(trace, not has_proxy(*bound)):
        result = ref(*bound[0], **bound[1])
    if out is None and len(scope) > recorded and scope[-1].outputs is result:
        scope[-1].call = (func, call_args, call_kwargs)  # what torch runs if autograd must
    if out is not None:
        from primtrace.refs.out import copy_to_out
        result = copy_to_out(out, result, args)
    if trace.depth == 0 and has_proxy(*bound):
        result = _per_call(trace, result)
    return result


def _per_call(trace, result):
    """`result` of a ref on traced values, where a tensor in it is a constant the ref made
    while tracing (``x.all()`` of an empty x: True) replaced by a copy made on every call:
    eager's result is a new tensor per call, which the code may write into (``.zero_()``)."""
    def fresh(x):
        if not _proxy.is_real_tensor(x):
            return x
        from primtrace import prims
        with _recording_constants(trace, True):
            return prims.clone(x)
    if _proxy.is_real_tensor(result) or (isinstance(result, (tuple, list)) and any(
            _proxy.is_real_tensor(x) for x in tree_flatten(result))):
        return tree_map(fresh, result)
    return result


@contextlib.contextmanager
def _recording_constants(trace, on: bool):
    """Record a factory's prims even though no proxy is among their arguments."""
    if not on:
        yield
        return
    previous = trace.record_constants
    trace.record_constants = True
    try:
        yield
    finally:
        trace.record_constants = previous


def _record_function(trace, apply, args, kwargs):
    """A custom autograd.Function's apply on traced values: one opaque node."""
    target = mapping.Target(apply.__self__.__qualname__, "apply", None)
    return record_opaque(trace, apply, target, *trace.resolve_args(args, kwargs))


# --- the factory door ----------------------------------------------------------------------------
class CaptureMode(TorchFunctionMode):
    """Routes torch calls that involve proxies, and factories, to the tracer."""

    def __init__(self, trace):
        super().__init__()
        self.trace = trace

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        trace = self.trace
        if not trace.bypass:
            if trace.depth == 0:   # the user's code: tensors it reads from state are inputs
                args, kwargs = trace.lift_state(args, kwargs)
            if has_proxy(args, kwargs) or (trace.depth == 0 and mapping.is_factory(func)):
                # inside a ref, a factory builds a constant of the decomposition (a prim's
                # eager impl); at the top level it is the user's and must run on every call
                return dispatch(func, args, kwargs)
        result = func(*args, **kwargs)
        if isinstance(result, torch.Tensor) and not trace.bypass:
            # made while tracing (a ref's constant): a trace that returns it must copy it
            trace.made[id(result)] = result
        return result


_proxy.set_dispatcher(dispatch)


def acquire(fn, args: tuple, kwargs: dict, name: str | None = None,
            channels_last: frozenset[int] = frozenset()) -> TracingTrace:
    """Run `fn` on proxies of `args`/`kwargs` and return the acquisition trace.

    Python numbers are traced as runtime values. If torch refuses one (an int argument of an
    opaque torch function cannot be a proxy; torch's Python, such as broadcast_shapes, wants
    an int), `fn` is traced again with every number as a constant: those numbers are then
    specialized, and their values join the cache key. A second failure is the function's own
    (numbers as constants are eager's): its error is raised.

    `channels_last`: indices of inputs the code gets channels_last copies of (tracer/layout.py).
    """
    try:
        return _acquire(fn, args, kwargs, name, False, channels_last)
    except TracingError:
        raise
    except (TypeError, RuntimeError, ValueError) as e:
        # torch's argument parser does not always name the proxy: torch.ones(n, n) says
        # "ones() takes 1 positional argument but 2 were given"
        if "NumberProxy" not in str(e) and not any(
                type(leaf) in (int, float, complex) for leaf in tree_flatten((args, kwargs))):
            raise
    return _acquire(fn, args, kwargs, name, True, channels_last)


def _rebuild_first(rebuild, pair):
    """(rebuild(out), written values): a trace's outputs when it also writes Python state."""
    return rebuild(pair[0]), pair[1]


def _acquire(fn, args, kwargs, name, numbers_as_constants: bool,
             channels_last: frozenset[int]) -> TracingTrace:
    trace = TracingTrace(_trace_name(fn) if name is None else name)
    namer, tensors = Namer(), {}
    pargs, pkwargs, inputs = proxify(trace, _signature_of(fn), args, kwargs,
                                     numbers_as_constants, namer, tensors)
    trace.inputs, trace.input_structure = inputs, (pargs, pkwargs)
    trace.state = StateRecorder(fn, trace, tensors)
    trace.state.namer = namer
    snapshot, replay = Snapshot(fn, pargs, pkwargs), None
    try:
        with tracing(trace), CaptureMode(trace), trace.state.recording(), compiling(), \
                custom_functions(functools.partial(_record_function, trace)), \
                symbolic_factories(dispatch), module_calls():
            chosen = [inputs[i] for i in channels_last]
            out = (layout.call_channels_last(trace, fn, pargs, pkwargs, chosen) if chosen
                   else fn(*pargs, **pkwargs))
        # a dataclass, a namedtuple, an object made while tracing... as plain containers
        out, rebuild = split_outputs(out, snapshot.objects.keys() | snapshot.arg_paths.keys())
        writes = snapshot.diff() + trace.state.attribute_writes()
        _check_torch_objects_unwritten(snapshot)
        snapshot.restore()   # the guard checks the state a call starts from
        if writes:   # replayed after each call; the values written are extra outputs
            replay = Replay(snapshot, writes)
            out = (out, tuple(replay.outputs))
            if rebuild is not None:   # the function's containers around its own outputs only
                rebuild = functools.partial(_rebuild_first, rebuild)
        if rebuild is not None:
            trace.tags["output_rebuild"] = rebuild
        trace.outputs = trace.resolve(out)
        guard = trace.state.finish(namer, snapshot.arg_objects,
                                   force=replay is not None and replay.needs_call,
                                   written_classes=[w[1] for w in writes if w[0] == "class"])
    except SideEffectError as e:
        raise TracingError(f"{e}\n  primtrace does not replay Python side effects: compute "
                           f"such values outside the jitted function") from None
    except ReplayError as e:
        raise TracingError(f"{e}\n  primtrace replays writes of tensors, numbers and plain "
                           f"containers only: compute such values outside the jitted "
                           f"function") from None
    finally:
        snapshot.restore()
        trace.state.undo_writes()   # no proxy may outlive the trace in a module
    _check_no_proxy_escaped(trace, fn, args, kwargs, snapshot)
    if trace.state.copied:   # state taken as a row-major copy must only be read
        dynamic.check_copied_state(trace, trace.state.copied)
    if replay is not None:
        trace.tags["replay"] = replay
        grown = dynamic.grown_state(writes, trace.state)
        if grown:
            trace.tags["grown_state"] = grown
    if guard is not None:
        trace.inputs = [*inputs, *guard.proxies]
        trace.tags["guard"] = guard
    trace.tags["trace_time_tensors"] = trace.made
    trace.stage = "acquisition"
    return trace


set_stop_frame(_acquire.__code__)


def _check_torch_objects_unwritten(snapshot) -> None:
    """An optimizer's state the traced code changed (its first step makes it) is not
    replayed: an error, raised before the snapshot puts the state back as it was (it was
    left holding proxies, and the next eager step failed)."""
    written = snapshot.torch_object_writes()
    if not written:
        return
    found = find_proxy([(path, obj) for obj, _, _, path in snapshot.torch_objects.values()])
    what = (f"a traced value ({found[1].name}) was left in {found[0]}" if found is not None
            else f"{written[0]} was changed")
    raise TracingError(
        f"{what} while tracing: primtrace does not replay writes into an optimizer's state "
        f"(its first step makes that state); run a first step without primtrace.jit, or "
        f"compute such values outside the jitted function")


def _check_no_proxy_escaped(trace, fn, args, kwargs, snapshot) -> None:
    """A proxy left in the state the function touched (a write the snapshot could not see:
    an object too deep, a global of a function it did not reach by name...) is an error."""
    state = trace.state
    roots = [(f"argument {i}", a) for i, a in enumerate(args)]
    roots += [(k, v) for k, v in kwargs.items()]
    roots += [(label, obj) for obj, _, _, label in snapshot.objects.values()
              if id(obj) not in snapshot.arg_paths]   # the tracer's copies hold input proxies
    roots += [(name, value) for _, name, value in state._global_reads()]
    roots += [(name, value) for _, name, value in state._closure_reads()]
    roots += [(name, value) for _, _, name, value in state.reads.values()]
    if isinstance(fn, torch.nn.Module):
        roots.append(("self", fn))
    elif getattr(fn, "__self__", None) is not None:   # a bound method: its object
        roots.append(("self", fn.__self__))
    found = find_proxy(roots)
    if found is None:
        return
    where, proxy = found
    made = next((n.source for n in trace.flat_nodes() if any(
        p is proxy for p in n.output_proxies)), None)
    raise TracingError(
        f"a traced value ({proxy.name}{f', computed at `{made}`' if made else ''}) was left "
        f"in {where} while tracing: primtrace replays writes to the plain objects, lists and "
        f"dicts it finds from the function's arguments, globals and closures, and cannot "
        f"replay this one; compute such values outside the jitted function")


def _signature_of(fn):
    """What names the inputs: a module's forward, else the function itself."""
    return fn.forward if isinstance(fn, torch.nn.Module) else fn


def _trace_name(fn) -> str:
    import re
    name = getattr(fn, "__name__", None) or type(fn).__name__
    import keyword
    name = re.sub(r"\W", "_", name).strip("_") or "fn"
    if keyword.iskeyword(name):
        name += "_fn"
    return name if not name[0].isdigit() else "fn_" + name
