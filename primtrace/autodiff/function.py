"""primtrace.jit for calls that need gradients: a forward and a backward trace of prims, both
fused, joined to torch's autograd by one ``torch.autograd.Function``.

When grad mode is on and an input (an argument, a parameter, any state tensor the function
reads) requires grad, the whole program is decomposed to prims, as without grad, and
differentiated by the prims' rules (:func:`~primtrace.autodiff.backward_trace`). The
forward trace returns the program's results and the values the backward reads; both traces
go through the same passes and executors as any trace, so the backward's elementwise chains
fuse like the forward's. The Function's forward runs the compiled forward and keeps the
saved values with ``ctx.save_for_backward`` (saved-tensor hooks see them, and autograd frees
them after the backward); its backward runs the compiled backward.

Outputs require grad exactly when eager's would: those on a differentiable path from an
input that requires grad; the others are marked non-differentiable. A program this cannot
express correctly falls back to the per-op torch path (each op the torch call the code made,
with torch's own autograd), and says why in the trace's header and in ``explain``:
:class:`Fallback` names the reason. A double backward (``create_graph=True``: gradient
penalties) replays the program prim by prim with torch's autograd, from the same inputs
(held weakly; an input freed or changed since raises) and the same random state, and
differentiates that.
"""
from __future__ import annotations

import sys
import weakref
from typing import Callable

import torch

from primtrace.autodiff.backward import backward_trace, differentiable, forward_with_saved
from primtrace.autodiff.partition import partition
from primtrace.ir.proxy import Proxy, TensorProxy
from primtrace.ir.trace import Trace
from primtrace.ir.tree import tree_flatten, tree_map
from primtrace.prims.differentiation import NotDifferentiableError
from primtrace.tracer.autograd_calls import needs_torch_autograd
from primtrace.tracer.capture import DataDependentError

_Tensor = torch.Tensor


class Fallback(Exception):
    """Why a call that needs gradients runs op by op with torch's autograd instead."""


def wanted_inputs(acquisition: Trace) -> list[TensorProxy]:
    """The inputs whose gradients a call needs: none unless grad mode is on."""
    if not acquisition.tags.get("grad_enabled", torch.is_grad_enabled()):
        return []
    return [p for p in acquisition.inputs
            if isinstance(p, TensorProxy) and p.requires_grad and differentiable(p)]


def split(prims: Trace, wrt: list[TensorProxy], policy: str = "min_cut"):
    """(forward trace, Backward) of a prims trace, or raise Fallback.

    The forward returns ``(distinct results, saved values)``; the results are the proxies of
    `prims.outputs`, each once, in order (the caller puts them back in their structure).
    What is saved and what the backward recomputes is :func:`partition`'s `policy`: values
    the caller holds anyway (state such as parameters, and the results) cost nothing to
    save; arguments cost their bytes, as activations do."""
    _check_writes(prims, wrt)
    for node in prims.nodes:
        reason = needs_torch_autograd(node)
        if reason is not None:
            raise Fallback(reason)
    try:
        bw = backward_trace(prims, wrt)
    except NotDifferentiableError as e:
        raise Fallback(str(e)) from None
    except DataDependentError as e:   # a rule cannot take a size known only at run time
        raise Fallback(f"a derivative needs a data-dependent size: {str(e).splitlines()[0]}") \
            from None
    arguments = {p.name for p in tree_flatten(prims.input_structure) if isinstance(p, Proxy)}
    held = [p for p in prims.inputs if p.name not in arguments] + distinct_results(prims.outputs)
    bw = partition(prims, bw, policy=policy, held=held)
    forward = forward_with_saved(prims, bw.saved)
    forward.outputs = (tuple(distinct_results(prims.outputs)), forward.outputs[1])
    for trace in (forward, bw.trace):   # both run inside the Function, where grad is off
        trace.nodes = [n.replace(grad_enabled=None) for n in trace.nodes]
        trace.tags["grad_enabled"] = False
    forward.tags["training"] = bw
    forward.tags["differentiated"] = prims   # what a double backward replays with autograd
    return forward, bw


def distinct_results(outputs) -> list[Proxy]:
    seen, out = set(), []
    for leaf in tree_flatten(outputs):
        if isinstance(leaf, Proxy) and leaf.name not in seen:
            seen.add(leaf.name)
            out.append(leaf)
    return out


def _input_writes(prims: Trace) -> list:
    """(node, input name) of each in-place write into (a view of) an input."""
    root: dict[str, str] = {p.name: p.name for p in prims.inputs}
    found = []
    for node in prims.flat_nodes():
        src = node.args[0] if node.args and isinstance(node.args[0], Proxy) else None
        r = root.get(src.name) if src is not None else None
        if r is not None and ("view" in node.symbol.tags or "inplace" in node.symbol.tags):
            for p in node.output_proxies:
                root[p.name] = r
            if "inplace" in node.symbol.tags:
                found.append((node, r))
    return found


def _check_writes(prims: Trace, wrt) -> None:
    """In-place writes a Function cannot express: into an input that requires grad, or,
    by an in-place op of the user's, of a value that needs grad into any input (eager makes
    that input require grad). A ref's side write (batch_norm's running statistics) is not
    differentiated in eager either."""
    inputs = {p.name: p for p in prims.inputs}
    for node, r in _input_writes(prims):
        if inputs[r].requires_grad:
            raise Fallback(f"an in-place write into {r}, an input that requires grad "
                           f"({node.source or node.symbol.name})")
        origin = node.origin
        side_write = origin is not None and not any(
            getattr(q, "name", None) == r for q in tree_flatten(getattr(origin, "args", ())[:1]))
        if not side_write and any(getattr(p, "requires_grad", False) for p in node.output_proxies):
            raise Fallback(f"an in-place write of a value that requires grad into {r} "
                           f"({node.source or node.symbol.name})")


class Plan:
    """What one compiled training call needs at run time."""

    def __init__(self, forward: Callable, backward: Callable, forward_trace: Trace, template,
                 rebuild=None):
        """`forward_trace` is the prims trace :func:`split` made; `template` the program's
        outputs as traced (proxies where the results go), `rebuild` its own containers."""
        self.forward, self.backward, self.rebuild = forward, backward, rebuild
        bw = forward_trace.tags["training"]
        results = forward_trace.outputs[0]
        index = {p.name: i for i, p in enumerate(results)}
        self.template = tree_map(lambda x: _Slot(index[x.name]) if isinstance(x, Proxy) else x,
                                 template)
        active_outputs = {out.name for out, _ in bw.cotangents}
        self.non_differentiable = [i for i, p in enumerate(results)
                                   if isinstance(p, TensorProxy) and p.name not in active_outputs]
        #: per cotangent input of the backward: (result index, strides it was traced with)
        self.cotangents = [(index[out.name], tuple(g.stride())) for out, g in bw.cotangents]
        self.saved_kinds = [isinstance(p, TensorProxy) for p in bw.saved]
        positions = {p.name: i for i, p in enumerate(forward_trace.inputs)}
        self.wrt = [positions[p.name] for p in bw.wrt]
        #: (result index, input position) of results that are inputs (``return x``,
        #: ``x.contiguous()``, a parameter): the caller gets the input itself, as from eager,
        #: not the view of it that autograd makes of a Function's output that is an input
        self.passed_through = [(i, positions[p.name]) for i, p in enumerate(results)
                               if isinstance(p, TensorProxy) and p.name in positions]
        self.differentiated = forward_trace.tags["differentiated"]
        self.random = any("random" in n.symbol.tags for n in self.differentiated.flat_nodes())
        self.writes_inputs = bool(_input_writes(self.differentiated))
        self._replay = None

    def replay(self, inputs: list):
        """The program's results from `inputs` again, prim by prim with torch's autograd
        (a double backward differentiates the backward through these)."""
        if self._replay is None:
            from primtrace.executors import TORCH
            from primtrace.executors.execution_trace import lower
            from primtrace.executors.trace_to_python import compile_trace
            trace = self.differentiated.derive(self.differentiated.flat_nodes(), "replay")
            trace.outputs = tuple(distinct_results(self.differentiated.outputs))
            trace.tags["grad_enabled"] = True
            self._replay = compile_trace(lower(trace, [TORCH]))[0]
        return self._replay(*inputs)

    def __call__(self, *inputs):
        results = _TracedFunction.apply(self, inputs, *[inputs[i] for i in self.wrt])
        if self.passed_through:
            results = list(results)
            for i, j in self.passed_through:
                results[i] = inputs[j]
        out = tree_map(lambda x: results[x.index] if x.__class__ is _Slot else x, self.template)
        return out if self.rebuild is None else self.rebuild(out)


class _Slot:
    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


class _TracedFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, plan: Plan, inputs: tuple, *wanted):
        # for a double backward: the inputs (weakly: no memory is kept for it), their versions
        # and the random state the draws start from
        ctx.inputs = [weakref.ref(x) if isinstance(x, _Tensor) else x for x in inputs]
        ctx.versions = [x._version if isinstance(x, _Tensor) else None for x in inputs]
        ctx.rng = _rng_state(inputs) if plan.random else None
        results, saved = plan.forward(*inputs)
        tensors = [s for s, is_tensor in zip(saved, plan.saved_kinds) if is_tensor]
        ctx.save_for_backward(*tensors)
        ctx.numbers = [s for s, is_tensor in zip(saved, plan.saved_kinds) if not is_tensor]
        ctx.plan = plan
        if plan.non_differentiable:
            ctx.mark_non_differentiable(*[results[i] for i in plan.non_differentiable])
        return tuple(results)

    @staticmethod
    def backward(ctx, *grads):
        plan = ctx.plan
        if torch.is_grad_enabled():   # create_graph=True: the gradients need a graph too
            return (None, None, *_replayed_gradients(ctx, grads))
        tensors, numbers = iter(ctx.saved_tensors), iter(ctx.numbers)
        saved = [next(tensors) if is_tensor else next(numbers) for is_tensor in plan.saved_kinds]
        cotangents = [_laid_out(grads[i], strides) for i, strides in plan.cotangents]
        return (None, None, *_outside_dynamo(plan.backward, (*saved, *cotangents)))


_dynamo_disabled = None


def _outside_dynamo(fn, args):
    """fn(*args), never compiled by Dynamo: a backward that a torch.compile'd function starts
    (``loss.backward()`` inside it) runs with Dynamo's frame hook on, which would trace the
    generated code and its kernels' launchers (and crashed doing so)."""
    global _dynamo_disabled
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is None:   # never imported: nothing hooks frames
        return fn(*args)
    if _dynamo_disabled is None:
        _dynamo_disabled = dynamo.disable(lambda f, a: f(*a), recursive=True)
    return _dynamo_disabled(fn, args)


def _laid_out(g: _Tensor, strides: tuple) -> _Tensor:
    """The cotangent with the strides the backward was traced with (autograd hands over
    what the next node made: an expanded ones for a sum, a transposed matmul result)."""
    if all(n <= 1 or a == b for n, a, b in zip(g.shape, g.stride(), strides)):
        return g
    out = torch.empty_strided(g.shape, strides, dtype=g.dtype, device=g.device)
    return out.copy_(g)


def _rng_state(inputs) -> list:
    """The generators' states before the forward's draws (CPU, and each CUDA device used)."""
    states = [(None, torch.get_rng_state())]
    for dev in {x.device for x in inputs if isinstance(x, _Tensor) and x.device.type == "cuda"}:
        states.append((dev, torch.cuda.get_rng_state(dev)))
    return states


def _replayed_gradients(ctx, grads) -> list:
    """A double backward: the program replayed prim by prim with torch's autograd from the
    same inputs and draws, and differentiated with create_graph (the fused backward's
    results carry no graph)."""
    plan = ctx.plan
    if plan.writes_inputs:
        raise RuntimeError(
            "primtrace: a double backward (create_graph=True) replays the jitted function, "
            "which writes into its inputs or state (running statistics...): the replay would "
            "write them again; call the function without primtrace.jit for this")
    inputs = []
    for ref, version in zip(ctx.inputs, ctx.versions):
        x = ref() if isinstance(ref, weakref.ref) else ref
        if isinstance(ref, weakref.ref) and (x is None or x._version != version):
            raise RuntimeError(
                "primtrace: a double backward (create_graph=True) replays the jitted function "
                "from its inputs, but one was freed or modified in place since the forward; "
                "keep the inputs alive and unchanged, or call the function without primtrace.jit")
        inputs.append(x)
    ctx.saved_tensors   # noqa: B018 - autograd's own check of the saved values' versions
    with torch.random.fork_rng(devices=[d for d, _ in (ctx.rng or [])[1:]],
                               enabled=ctx.rng is not None):
        for dev, state in ctx.rng or ():
            torch.set_rng_state(state) if dev is None else torch.cuda.set_rng_state(state, dev)
        results = plan.replay(inputs)
    outs, cots = [], []
    for i, _ in plan.cotangents:
        outs.append(results[i])
        cots.append(grads[i])
    wanted = [inputs[i] for i in plan.wrt]
    return torch.autograd.grad(outs, wanted, cots, create_graph=True, allow_unused=True)
