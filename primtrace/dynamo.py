"""A torch.compile backend: the FX graphs Dynamo captures run through ``primtrace.jit``.

    torch.compile(model, backend=primtrace.dynamo.dynamo_backend)
    torch.compile(model, backend="primtrace")   # by name: the package's entry point, or
                                                # registered by `import primtrace`
    torch.compile(model, backend="primtrace", options={"executors": [...], "cache_size": 8})
    primtrace.dynamo.last_traces()   # the 4 traces of the graph that ran last (as last_traces(jfn))
    primtrace.dynamo.last_trace()    # its execution trace
    primtrace.dynamo.graphs()        # every live compiled graph (CompiledGraph), oldest first

How: each FX graph is handed, whole, to ``primtrace.jit``. Its ops then run on proxies
like any user code: ops with a ref (``torch.add``, ``operator.mul``, ``F.gelu``, Tensor
methods through ``call_method``) decompose into prims; ops without one (``linear``,
``layer_norm``, ``matmul``, eval-mode ``dropout``) become opaque nodes the torch executor
runs. This is chosen over cutting the FX graph into supported subgraphs because

* which torch functions have refs is already decided in one place
  (:mod:`primtrace.tracer.mapping`); a partitioner would need a second copy of that table;
* fusion works on prims, across FX node boundaries (GELU's five prims plus the residual
  add form one region); FX-level subgraphs would cut regions where FX nodes end and hide
  the ops between them from the fusion executor's cycle check;
* one graph gives one trace, printable and drawable, with the FX code line of each node.

The FX graph is only prepared: tensors read with ``get_attr`` (parameters, buffers,
constants of ``symbolic_trace``-style graphs) become trailing inputs of the trace, read
from the module at every call, so weights are runtime values and updates to them are
seen, like parameters that Dynamo passes as graph inputs; and aten ops
(``torch.ops.aten.add.Tensor``) are rewritten to torch's binding of the same schema
(``torch.add``) when primtrace has a ref for it, so aten-level graphs reach the refs too.

A graph called in grad mode with an input that requires grad (training) is differentiated
by primtrace, as ``primtrace.jit`` does: a fused forward and backward joined to autograd
(:mod:`primtrace.autodiff.function`).

Under ``torch.autocast``, or with autocast regions in the graph (``_enter_autocast`` nodes),
the trace records autocast's casts, as ``primtrace.jit`` does.

What runs in eager torch instead (``CompiledGraph.fallback_reason`` says why): graphs that
enable grad inside (tracing would bake the mode in), and graphs the
tracer rejects (a :class:`~primtrace.tracer.TracingError`: warned once).

``import primtrace`` does not import this module, and this module does not import
``torch._dynamo`` (seconds to import) until :func:`register` is called; by-name lookup goes
through the ``torch_dynamo_backends`` entry point, which torch reads lazily, or, in a checkout
that is not installed, through the registration ``import primtrace`` makes once
``torch._dynamo`` is imported (primtrace/backend_name.py).
"""
from __future__ import annotations

import copy
import functools
import inspect
import itertools
import operator
import re
import types
import warnings
import weakref

import torch

_Tensor = torch.Tensor

#: the name the backend is registered under
NAME = "primtrace"


# --- preparing the FX graph -----------------------------------------------------------------
def _pretty(name: str) -> str:
    """A readable input name from Dynamo's (``L_self_modules_l1_parameters_weight_`` -> ``l1_weight``)."""
    short = re.sub(r"^[LG]_", "", str(name)).strip("_")
    short = re.sub(r"_(modules|parameters|buffers)_", "_", short)
    short = re.sub(r"^self_", "", short)
    return short or "x"


def _fetch(root, target: str):
    value = root
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _torch_twin(op):
    """torch's Python binding of an aten op's schema (aten.add.Tensor -> torch.add), if it has a ref.

    Bindings generated from the same schema take the same arguments (all overloads), so the
    rewrite keeps the meaning; only C bindings qualify (``F.elu`` is a Python wrapper whose
    third argument is not aten's), and only ops primtrace has a ref for (the others gain
    nothing and stay as they are: opaque torch calls).
    """
    from primtrace.tracer.mapping import resolve
    schema = getattr(op, "_schema", None)
    qualified = schema.name if schema is not None else getattr(op, "_qualified_op_name", "")
    namespace, _, name = qualified.partition("::")
    if namespace != "aten" or not name:
        return None
    for home in (torch, torch.nn.functional):
        fn = getattr(home, name, None)
        if isinstance(fn, types.BuiltinFunctionType) and resolve(fn).ref is not None:
            return fn
    return None


def _sum(sizes):
    return functools.reduce(operator.add, sizes)


def _max(a, b):
    from primtrace.ir.number_ops import size_max
    return size_max(a, b)


def _min(a, b):
    from primtrace.ir.number_ops import size_min
    return size_min(a, b)


#: Dynamo's arithmetic on its symbolic sizes, as plain Python on the trace's sizes (torch's
#: own would read their values: a guard per call's size)
_SIZE_ARITHMETIC = {torch.sym_sum: _sum, torch.sym_max: _max, torch.sym_min: _min}


def _is_aten_op(target) -> bool:
    return type(target).__name__ in ("OpOverload", "OpOverloadPacket")


def _mode_switch(graph) -> str | None:
    """Why `graph` must run eagerly, if it turns grad on inside (a trace would bake the mode
    in). Autocast switches (``_enter_autocast`` nodes) run while the graph is traced, and the
    tracer records the casts of the autocast state each call meets (tracer/autocast.py)."""
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        name = getattr(node.target, "__name__", "")
        if name == "_set_grad_enabled" and node.args and node.args[0] is True:
            return "the graph enables grad mode inside (torch.enable_grad in the model)"
    return None


def prepare(gm: torch.fx.GraphModule):
    """(graph module, attribute targets): `gm`'s graph with tensor ``get_attr`` nodes turned into
    trailing placeholders (their values, read from `gm`, are appended to each call's
    arguments, in the order of the targets) and aten ops with a ref rewritten to torch's.
    `gm` itself is not changed: it stays the eager fallback."""
    graph = copy.deepcopy(gm.graph)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    anchor = placeholders[-1] if placeholders else None
    attrs: list[str] = []
    lifted: dict[str, torch.fx.Node] = {}
    for node in list(graph.nodes):
        if node.op == "get_attr" and isinstance(_fetch(gm, node.target), _Tensor):
            ph = lifted.get(node.target)
            if ph is None:
                where = (graph.inserting_after(anchor) if anchor is not None
                         else graph.inserting_before(next(iter(graph.nodes))))
                with where:
                    ph = graph.placeholder(f"attr_{_pretty(node.target.replace('.', '_'))}")
                lifted[node.target] = anchor = ph
                attrs.append(node.target)
            node.replace_all_uses_with(ph)
            graph.erase_node(node)
        elif node.op == "call_function" and _is_aten_op(node.target):
            twin = _torch_twin(node.target)
            if twin is not None:
                node.target = twin
        elif node.op == "call_function" and node.target in _SIZE_ARITHMETIC:
            node.target = _SIZE_ARITHMETIC[node.target]
    _sizes_from_tensors(graph, anchor)
    graph.lint()
    return torch.fx.GraphModule(gm, graph), attrs


def _symbolic_dims(graph) -> dict:
    """{input index: dims} that Dynamo made symbolic (SymInt sizes of its example inputs):
    the jit traces them symbolic from the first call."""
    marks = {}
    for i, node in enumerate(n for n in graph.nodes if n.op == "placeholder"):
        value = node.meta.get("example_value")
        if isinstance(value, _Tensor):
            dims = {d for d, n in enumerate(value.shape) if isinstance(n, torch.SymInt)}
            if dims:
                marks[i] = dims
    return marks


def _sizes_from_tensors(graph, anchor) -> None:
    """Uses of a size input (Dynamo's SymInt placeholder, a dim it made dynamic) that is a
    dim of a tensor input read that dim instead: the trace then holds it symbolic (tracer/
    dynamic.py) with the tensor's, where an int input would be a constant of the trace
    (torch refuses proxies as many int arguments) and a new size a new trace."""
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    dims = {}
    for node in placeholders:
        value = node.meta.get("example_value")
        if isinstance(value, _Tensor):
            for d, n in enumerate(value.shape):
                if isinstance(n, torch.SymInt):
                    dims.setdefault(str(n.node.expr), (node, d))
    for node in placeholders:
        value = node.meta.get("example_value")
        found = dims.get(str(value.node.expr)) if isinstance(value, torch.SymInt) else None
        if found is not None and node.users:
            with graph.inserting_after(anchor):
                anchor = graph.call_method("size", found)
            node.replace_all_uses_with(anchor)


def _as_function(gm: torch.fx.GraphModule, name: str):
    """`gm`'s forward as a plain function named `name` whose parameters carry readable names
    (the jit names the trace's inputs after them)."""
    forward = gm.forward

    def fn(*args):
        return forward(*args)
    params = [inspect.Parameter(_pretty(n.target), inspect.Parameter.POSITIONAL_ONLY)
              if n.target.isidentifier() and not n.target.startswith("*") else
              inspect.Parameter(f"arg{i}", inspect.Parameter.POSITIONAL_ONLY)
              for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")]
    names, unique = set(), []
    for i, p in enumerate(params):  # _pretty may map two names to one
        unique.append(p if p.name not in names else p.replace(name=f"{p.name}_{i}"))
        names.add(unique[-1].name)
    fn.__signature__ = inspect.Signature(unique)
    fn.__name__ = fn.__qualname__ = name
    return fn


# --- what the backend returns -------------------------------------------------------------------
class CompiledGraph:
    """One Dynamo graph compiled by primtrace; Dynamo calls it with the graph's inputs.

    ``jit`` is the :class:`~primtrace.jit.JitFunction` (one compiled trace per kind of
    input), ``graph_module`` the FX graph as Dynamo gave it (also the eager fallback),
    ``fallback_reason`` why the last call ran in eager torch (None when it did not).
    """

    def __init__(self, backend: "DynamoBackend", gm, name: str, executors, options: dict):
        from primtrace.jit import jit
        self.graph_module, self.name = gm, name
        self._backend = backend
        self._eager = gm.forward
        prepared, attrs = prepare(gm)
        self._attrs = [operator.attrgetter(a) for a in attrs]
        self._always_eager = _mode_switch(prepared.graph)
        self.fallback_reason = self._always_eager
        self.jit = jit(_as_function(prepared, name), executors=executors, **options)
        self.jit._dynamic.marks = _symbolic_dims(gm.graph)

    def __call__(self, *args):
        self._backend._last = self
        if self._always_eager is not None:
            return self._eager(*args)
        if self._attrs:
            gm = self.graph_module
            args = (*args, *[get(gm) for get in self._attrs])
        from primtrace.tracer import TracingError
        try:
            out = self.jit(*args)
        except TracingError as e:
            self._always_eager = self.fallback_reason = f"primtrace cannot trace it: {e}"
            warnings.warn(f"primtrace backend: {self.name} runs in eager torch: {e}",
                          RuntimeWarning, stacklevel=2)
            return self._eager(*args[:len(args) - len(self._attrs)])
        self.fallback_reason = None
        return out

    def last_traces(self) -> list:
        """Acquisition, prims, optimized and execution traces of this graph's last compile."""
        from primtrace.jit import last_traces
        try:
            return last_traces(self.jit)
        except RuntimeError:
            why = f": {self.fallback_reason}" if self.fallback_reason else ""
            raise RuntimeError(f"{self.name} has not run through primtrace yet{why}") from None

    def __repr__(self):
        return f"<primtrace CompiledGraph {self.name}>"


class DynamoBackend:
    """The backend callable: ``backend(gm, example_inputs, options=None)`` -> CompiledGraph.

    `example_inputs` are not traced: Dynamo may pass fake tensors or SymInts there; the
    trace is made on the first real call (per kind of input, as with ``primtrace.jit``).
    `options` (``torch.compile(..., options={...})``): ``executors`` and the jit options.
    """
    __name__ = NAME

    def __init__(self):
        self._graphs: list[weakref.ref] = []
        self._last: CompiledGraph | None = None
        self._ids = itertools.count()

    def __call__(self, gm, example_inputs, *, options: dict | None = None, mode: str | None = None):
        if mode not in (None, "default"):
            raise ValueError(f"the primtrace backend has no compile modes (got mode={mode!r}); "
                             f"pass its settings as options={{...}}")
        options = dict(options or {})
        executors = options.pop("executors", None)
        compiled = CompiledGraph(self, gm, f"dynamo_graph_{next(self._ids)}", executors, options)
        self._graphs = [r for r in self._graphs if r() is not None] + [weakref.ref(compiled)]
        return compiled

    def graphs(self) -> list[CompiledGraph]:
        """The compiled graphs still in use (Dynamo's caches hold them), oldest first."""
        return [g for g in (r() for r in self._graphs) if g is not None]

    def last_graph(self) -> CompiledGraph:
        if self._last is None:
            raise RuntimeError("no graph compiled by the primtrace backend has run yet")
        return self._last

    def last_traces(self) -> list:
        """The traces (acquisition, prims, optimized, execution) of the graph that ran last."""
        return self.last_graph().last_traces()

    def reset(self) -> None:
        """Forget the compiled graphs (``torch._dynamo.reset()`` calls this)."""
        self._graphs, self._last = [], None

    def __repr__(self):
        return "<primtrace torch.compile backend>"


#: ``torch.compile(model, backend=dynamo_backend)``
dynamo_backend = DynamoBackend()


# --- the traces, as primtrace.last_traces(jfn) gives them for jit -------------------------------
def last_traces() -> list:
    """Acquisition, prims, optimized and execution traces of the graph that ran last through
    ``torch.compile(..., backend="primtrace")`` (its last compile; a model with graph breaks
    has one graph per piece: see :func:`graphs`). RuntimeError if none has run, or if that
    graph has only run in eager torch (the message says why)."""
    return dynamo_backend.last_traces()


def last_trace():
    """The execution trace of the graph that ran last (what its cached calls run)."""
    return last_traces()[-1]


def graphs() -> list[CompiledGraph]:
    """Every compiled graph still in use, oldest first: ``.name``, ``.last_traces()``,
    ``.fallback_reason``, ``.graph_module`` (Dynamo's FX graph) and ``.jit``."""
    return dynamo_backend.graphs()


def register(name: str = NAME) -> None:
    """Make ``torch.compile(model, backend=name)`` work in this process (idempotent).

    Not needed when the package's ``torch_dynamo_backends`` entry point is installed: torch
    then finds the backend by name without importing primtrace first.
    """
    import torch._dynamo
    if name in torch._dynamo.list_backends(exclude_tags=()):
        found = torch._dynamo.lookup_backend(name)  # loads the entry point if that is how
        if found is not dynamo_backend:
            raise ValueError(f"torch.compile backend name {name!r} is taken by {found!r}")
        return
    torch._dynamo.register_backend(dynamo_backend, name=name)


__all__ = ["dynamo_backend", "register", "last_traces", "last_trace", "graphs", "prepare",
           "CompiledGraph", "DynamoBackend", "NAME"]
