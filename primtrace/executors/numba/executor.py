"""NumbaFusionExecutor: maximal elementwise regions, each compiled into one Numba kernel.

Partitioning extends the base class's producer-consumer merging (same dependency graph,
same cycle check) with what one elementwise kernel needs:

- every value that leaves a region has the region's iteration shape and device (values of
  a smaller shape may live inside, reaching the outputs through ``broadcast_in_dim``);
- a ``broadcast_in_dim`` or ``slice`` output never leaves a region (it is a view: the
  torch executor makes it, for free, and the consumer reads it with stride 0, or at an
  offset); a ``cat`` inside a region splits the kernel's loop where its operands meet
  (CPU elementwise kernels only: not beside a reduction);
- ``copy_to`` into a tensor the region receives is a store into it (in place, no copy);
  into a value computed in the region it just forwards the value;
- a region needs real work (not only views and ``full``); one whose values nothing
  observes (an in-place op on a temporary nobody reads) compiles to nothing;
- a node whose result requires grad (grad mode on) is left to torch, which records the
  backward graph; kernels would return tensors without a ``grad_fn``. The rest still fuses
  (masks, integer math, everything under ``torch.no_grad()``).

Merges are retried until nothing changes (a merge can become valid once a third node has
joined), then groups of the same shape that read a common input are merged too, so the
input is read once. What fuses is the op table's (``ops.py``): a node without a row there
or that its backend cannot lower on its dtype (complex dtypes, special functions without a
Numba lowering, opaque nodes) is never claimed: the torch executor runs it and the fused
regions form around it. Each region is then planned once (``plan.py``); one the planner
rejects as a whole stays unfused, and ``compile`` renders the plan the partition made.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from primtrace.executors.base import FusionExecutor, Region, creates_cycle, dependency_graph
from primtrace.executors.numba import ops
from primtrace.executors.numba import plan as kernel_plan
from primtrace.executors.numba import reduction_plan
from primtrace.executors.numba.plan import NotFusible, Plan, is_number, node_args
from primtrace.executors.numba.registers import NUMBER_DTYPE, supported
from primtrace.executors.numba.symbolic_sizes import fusible_sizes, hint_numel, is_symbolic
from primtrace.ir.proxy import NumberProxy, SizeProxy, TensorProxy, symbolic_tensor
from primtrace.ir.symbol import SymbolKind
from primtrace.ir.trace import Node, Trace
from primtrace.ir.tree import proxies_in
from primtrace.tracer.passes import may_raise

#: Regions joined only by an ordering edge (two in-place updates of different tensors, as
#: in an optimizer step over several parameters) share no data: one kernel saves launches,
#: which pays below this many elements; above it the extra memory streams of one loop cost
#: more (AdamW over 8 x 2M-element parameters: 1.07-1.22x torch.compile as one kernel,
#: 0.99x as one kernel per parameter).
ORDER_MERGE_MAX_ELEMENTS = 1 << 16
#: "cuda": run CPU tensors through the CUDA backend (only under NUMBA_ENABLE_CUDASIM, for
#: tests); CUDA tensors always take it (numba.cuda is imported only then)
BACKEND_ENV = "PRIMTRACE_NUMBA_BACKEND"


@dataclass
class PlannedRegion(Region):
    """A region with the kernel plan its partition made: compile renders that plan."""
    plan: Plan | None = None


def _device_type(node: Node) -> str | None:
    devices = {p.device.type for p in node.output_proxies if isinstance(p, TensorProxy)}
    return devices.pop() if len(devices) == 1 else None


def needs_autograd(node: Node, trace_grad_mode: bool) -> bool:
    """Whether torch must run `node` to record the backward graph: grad mode is on where it
    was recorded and a result requires grad (kernels return tensors without a grad_fn)."""
    enabled = trace_grad_mode if node.grad_enabled is None else node.grad_enabled
    return enabled and any(getattr(p, "requires_grad", False) for p in node.output_proxies)


class NumbaFusionExecutor(FusionExecutor):
    """Fuses elementwise prims into Numba kernels (CPU: njit; CUDA tensors: numba.cuda)."""

    def __init__(self, name: str = "numba_fusion", backend: str | None = None,
                 cost_model: bool = True):
        """`cost_model=False` fuses every region it can, even one torch call that torch
        would run faster (for testing and measuring the kernels themselves)."""
        self.name = name
        self.backend = backend or os.environ.get(BACKEND_ENV) or None
        self.cost_model = cost_model

    # --- what may fuse ----------------------------------------------------------------------
    def can_fuse(self, node: Node) -> bool:
        """Whether `node` is a prim with a row in the op table (ops.py) that the backend for
        its device lowers on its dtype, with arguments a kernel can take."""
        sym = node.symbol
        proxies = proxies_in((node.args, node.kwargs, node.outputs))
        if any(symbolic_tensor(p) or isinstance(p, SizeProxy) for p in proxies) and not \
                self._symbolic_ok(node, proxies):
            return False
        if self.cost_model and _device_type(node) == "cuda":
            from primtrace.executors.numba import cost
            if not cost.fuse_on_gpu(node):
                return False
        if reduction_plan.is_column(node):
            return self._backend_for(_device_type(node) or "cpu") == "cpu" and \
                self._reduction_ok(node)
        if reduction_plan.is_reduction(node) or reduction_plan.is_trivial(node):
            return self._reduction_ok(node)
        row = ops.OPS.get(sym.name)
        if sym.kind is not SymbolKind.PRIM or row is None:
            return False
        device = _device_type(node)
        if device is None or not self._device_ok(device):
            return False
        for p in proxies_in((node.args, node.kwargs, node.outputs)):
            if isinstance(p, TensorProxy) and not supported(p.dtype):
                return False
            if isinstance(p, NumberProxy) and p.python_type not in NUMBER_DTYPE:
                return False
        try:
            args = node_args(node)
        except NotFusible:
            return False
        for a in args:
            if type(a) is int and not -2**63 <= a < 2**63:
                return False
            if isinstance(a, complex):
                return False
        if row.structural:
            if row.cpu_only and self._backend_for(device) != "cpu":
                return False
            return row.fusible is None or row.fusible(args)
        tensors = [a for a in args if isinstance(a, TensorProxy)]
        if not tensors or len(args) != row.arity or not all(
                isinstance(a, TensorProxy) or is_number(a) for a in args):
            return False
        if self._costed(device):
            from primtrace.executors.numba import cost
            if cost.slow_on_cpu(sym.name, tensors[0].dtype):
                return False
        return ops.lowerable(self._backend(device), sym.name, tensors[0].dtype, len(args))

    def _symbolic_ok(self, node: Node, proxies) -> bool:
        """Sizes known only at run time: an elementwise prim of a CPU kernel whose launcher
        reads them (symbolic_sizes.py), not a row kernel's reduction, nor a count that
        data decides (x[mask]'s rows)."""
        if not fusible_sizes(proxies) or self._backend_for(_device_type(node) or "cpu") != "cpu":
            return False
        if node.symbol.name not in reduction_plan.REDUCTIONS:
            return True
        a, dims, _ = reduction_plan.reduction_args(node)   # rows symbolic, reduced dims not
        return (isinstance(a, TensorProxy) and isinstance(dims, tuple)
                and not any(is_symbolic(a.shape[d]) for d in dims if 0 <= d < a.ndim)
                and not reduction_plan.is_column(node))

    def _reduction_ok(self, node: Node) -> bool:
        """A reduction over trailing dims fuses into a row kernel (reduction_plan.py)."""
        device = _device_type(node)
        if device is None or not self._device_ok(device):
            return False
        if any(isinstance(p, TensorProxy) and not supported(p.dtype)
               for p in proxies_in((node.args, node.kwargs, node.outputs))):
            return False
        return (reduction_plan.is_trivial(node) or reduction_plan.is_column(node)
                or reduction_plan.reduction_fusible(node))

    def _device_ok(self, device: str) -> bool:
        if self.backend == "cuda":   # forced (simulator tests, PTX checks): any device
            return device in ("cpu", "cuda")
        if device == "cpu":
            return True
        if device == "cuda":
            from primtrace.executors.numba.backends import cuda
            return cuda.available()
        return False

    def _backend(self, device: str):
        """The Backend (ops.py) whose spellings kernels for `device` use."""
        if self._backend_for(device) == "cuda":
            from primtrace.executors.numba.backends import cuda
            return cuda.BACKEND
        return ops.CPU

    def _costed(self, device: str) -> bool:
        """Whether the cost model decides per call here: it is on and kernels for `device` run
        on the CPU (on a GPU it decides per prim, in can_fuse: cost.fuse_on_gpu)."""
        return self.cost_model and self._backend_for(device) == "cpu"

    def _backend_for(self, device: str) -> str:
        if device == "cuda" or self.backend == "cuda":
            return "cuda"
        return "cpu"

    # --- partitioning --------------------------------------------------------------------
    def partition(self, trace: Trace) -> list[Region]:
        """Regions as below; where the planner refuses a region as a whole (what the
        partitioner's cheap checks did not see), its reductions (a row region) or its slices
        and cats (an elementwise one) are left to torch and the trace partitioned again, so
        their elementwise neighbours still fuse."""
        excluded: set = set()
        while True:
            regions, refused = self._partition(trace, excluded)
            if not refused:
                return regions
            excluded |= refused

    def _partition(self, trace: Trace, excluded: set) -> tuple[list[Region], set]:
        nodes = trace.nodes
        g = dependency_graph(trace)
        claimed = trace.tags.get("claimed", ())
        producer = {p.name: n for n in nodes for p in n.output_proxies}
        produced = set(producer)
        consumers: dict[str, set[int]] = {}
        for i, n in enumerate(nodes):
            for p in n.inputs:
                consumers.setdefault(p.name, set()).add(i)
        returned = {p.name for p in proxies_in(trace.outputs)}
        written = {node_args(n)[0].name for n in nodes if n.symbol.name == "copy_to"}
        fusible = set()
        grad_mode = trace.tags.get("grad_enabled", torch.is_grad_enabled())
        for i, n in enumerate(nodes):
            if id(n) in claimed or i in excluded or not self.can_fuse(n):
                continue
            if may_raise(n) and not any(p.name in returned or consumers.get(p.name)
                                        for p in n.output_proxies):
                continue  # kept only for its error (x // 0 unused): a kernel would not compute it
            if needs_autograd(n, grad_mode):
                note = ("values that require grad run in torch, which records the backward "
                        "graph (primtrace has no fused autograd yet)")
                if note not in trace.tags.setdefault("notes", []):
                    trace.tags["notes"].append(note)
                continue
            if n.symbol.name == "copy_to":
                dst = producer.get(node_args(n)[0].name)
                if dst is not None and dst.symbol.name == "broadcast_in_dim":
                    continue  # writing through a broadcast view: leave it to torch's checks
            if n.symbol.name == "slice" and n.output_proxies[0].name in written:
                continue  # a view written in place: torch makes it, the kernel writes into it
            fusible.add(i)
        group = {i: i for i in fusible}
        members = {i: {i} for i in fusible}

        def valid(m: set) -> bool:
            shapes, devices, work, names = set(), set(), False, set()
            for i in m:
                n = nodes[i]
                work = work or _work(n)
                for p in n.output_proxies:
                    leaves = (p.name in returned or bool(consumers.get(p.name, set()) - m)
                              or n.symbol.name == "copy_to")   # a write is always observable
                    if not leaves:
                        continue
                    if n.symbol.name in kernel_plan.VIEWS or not isinstance(p, TensorProxy):
                        return False
                    if _widening(n) and p.name not in returned and _full_size(p, m):
                        return False   # recomputed where it is read, not stored twice as wide
                    shapes.add(tuple(p.shape))
                    names.add(p.name)
                    devices.add(p.device)
            if not work or len(devices) > 1:
                return False
            group = [nodes[i] for i in sorted(m)]
            if reduction_plan.has_reduction(group):
                return not any(n.symbol.name in kernel_plan.CPU_ONLY for n in group) \
                    and reduction_plan.row_group_valid(group, shapes, names)
            return len(shapes) <= 1 and not recomputed_per_element(group, producer)

        def _full_size(p, m: set) -> bool:
            """Whether `p` is as large as the largest value the nodes `m` make (a row, not
            a row's reduced line)."""
            return hint_numel(p.shape) >= max(
                (hint_numel(q.shape) for i in m for q in nodes[i].output_proxies
                 if isinstance(q, TensorProxy)), default=0)

        def merge(a, b) -> bool:
            if a == b:
                return False
            union = members[a] | members[b]
            if not valid(union) or creates_cycle(g, group, members, a, b):
                return False
            if len(members[a]) < len(members[b]):
                a, b = b, a
            for i in members[b]:
                group[i] = a
            members[a] = union
            del members[b]
            return True

        def small(i) -> bool:
            return all(hint_numel(p.shape) <= ORDER_MERGE_MAX_ELEMENTS
                       for p in nodes[i].output_proxies if isinstance(p, TensorProxy))

        changed = True
        while changed:  # producer-consumer merges, to a fixed point
            changed = False
            for v in sorted(fusible):
                for u in sorted(g.predecessors(v)):
                    if u not in group or ("proxy" not in g.edges[u, v] and not small(v)):
                        continue   # an ordering edge only: independent work, see below
                    if merge(group[u], group[v]):
                        changed = True
        # horizontal: groups reading the same tensor, an input or a value torch computes
        # (dropout's bernoulli mask: its bool copy saved for backward and the kernel that
        # applies it), read it once
        index = {id(n): i for i, n in enumerate(nodes)}
        readers: dict[str, list[int]] = {}
        for i in sorted(fusible):
            for p in nodes[i].inputs:
                if isinstance(p, TensorProxy) and (
                        p.name not in produced or index[id(producer[p.name])] not in fusible):
                    readers.setdefault(p.name, []).append(i)
        for name, idx in readers.items():
            for j in idx[1:]:
                merge(group[idx[0]], group[j])
        regions, refused = [], set()
        for m in members.values():
            if len(m) < self.min_region_size or not valid(m):
                continue
            region = Region.from_nodes(trace, [nodes[i] for i in sorted(m)])
            if dead(region):   # nothing to plan: it compiles to nothing (see compile)
                regions.append(PlannedRegion(region.nodes, region.inputs, region.outputs))
                continue
            rows = reduction_plan.has_reduction(region.nodes)
            planner = reduction_plan if rows else kernel_plan
            try:   # the region as a whole: what no single node shows (plan.py's NotFusible)
                plan = planner.analyze(region, self._backend(self._device_of(region.nodes)))
            except NotFusible:
                if rows:
                    refused |= {i for i in m if reduction_plan.is_reduction(nodes[i])}
                else:   # a slice or cat the planner cannot split for: the rest still fuses
                    refused |= {i for i in m if nodes[i].symbol.name in kernel_plan.CPU_ONLY}
                continue
            regions.append(PlannedRegion(region.nodes, region.inputs, region.outputs, plan))
        regions.sort(key=lambda r: nodes.index(r.nodes[0]))
        return regions, refused

    def fuse_call(self, nodes: list[Node]) -> bool:
        """Under the cost model on the CPU, a call with a prim left to torch (unlowered, or
        slow in our kernels: cost.SLOW_PRIMS) or one eager computes much faster
        (cost.call_left_to_torch) runs whole as the torch call, not as its prims; unless
        what is left to torch is small beside what fuses (cost.small_beside: cross_entropy's
        gather of one value per row after its log_softmax)."""
        if not self.cost_model:   # on a GPU too: prims that do not fuse run as the call
            return True
        if any(symbolic_tensor(p) and not fusible_sizes([p])
               for n in nodes for p in (*n.inputs, *n.output_proxies)):
            return False   # nothing of a data-dependent size fuses: the call runs whole
        from primtrace.executors.numba import cost
        computing = [n for n in nodes if n.symbol.kind is SymbolKind.PRIM and any(
            isinstance(p, TensorProxy) for p in n.output_proxies)]   # not guards (check_fits)
        left = [n for n in computing if not self.can_fuse(n)]
        fused = [n for n in computing if self.can_fuse(n)]
        return ((not left or cost.small_beside(left, fused) or cost.unfused_in_eager(nodes))
                and not cost.call_left_to_torch(nodes, fused))

    def fuse_single_call(self, region: Region) -> bool:
        """One torch call fuses only where the kernel beats torch's own (cost.py); on a GPU
        never (it saves no memory pass: gelu(layer_norm(x + r)) at 2^26 f32 on an H100 with
        its add and gelu fused alone, 1.11x eager)."""
        device = self._device_of(region.nodes)
        if self.cost_model and device == "cuda":
            return False
        if not self._costed(device):
            return True
        from primtrace.executors.numba import cost
        return cost.fuse_single_call(region)

    # --- compiling -------------------------------------------------------------------------
    def _device_of(self, nodes: list[Node]) -> str:
        devices = {p.device.type for n in nodes for p in n.output_proxies
                   if isinstance(p, TensorProxy)}
        return devices.pop() if len(devices) == 1 else "cpu"

    def compile(self, region: Region):
        """The region's callable, from the plan partition made (or a new one)."""
        plan = region.plan if isinstance(region, PlannedRegion) else None
        if dead(region):
            return _nothing
        if self._backend_for(self._device_of(region.nodes)) == "cuda":
            if reduction_plan.has_reduction(region.nodes):
                from primtrace.executors.numba.backends import cuda_rows
                return cuda_rows.compile_region(region, self.name, plan)
            from primtrace.executors.numba.backends import cuda
            return cuda.compile_region(region, self.name, plan)
        if reduction_plan.has_reduction(region.nodes):
            from primtrace.executors.numba import row_kernel
            return row_kernel.compile_region(region, self.name, plan)
        from primtrace.executors.numba.backends import cpu
        return cpu.compile_region(region, self.name, plan)


def dead(region: Region) -> bool:
    """Whether nothing observes what `region` computes: it returns nothing and writes only
    into values it makes itself (``(a + 1).mul_(2)``, an in-place op on a temporary)."""
    if region.outputs:
        return False
    made = {p.name for n in region.nodes for p in n.output_proxies}
    return all(node_args(n)[0].name in made for n in region.nodes if n.symbol.name == "copy_to")


def _nothing(*args):
    return ()


_nothing.source = "# nothing reads what these prims compute: no kernel runs\n"


#: a value this many times smaller than what it is broadcast to is computed on its own,
#: when that is at least RECOMPUTE_MIN_ELEMENTS (below, the recomputing costs less than a
#: kernel launch: RegNetY-400MF's 10 x 10 and 5 x 5 stages ran 1.1x slower split)
RECOMPUTE_RATIO = 16
RECOMPUTE_MIN_ELEMENTS = 1 << 16


def _widening(node: Node) -> bool:
    """A float32 -> float64 conversion (a norm's exact mean sums float64 values): cheap to
    recompute in the kernel that reads it, and twice the bytes to store and load. (Half ->
    float32 conversions are the opmath of half kernels, kept as they are.)"""
    if node.symbol.name != "convert_element_type" or not node.inputs:
        return False
    src, out = node.inputs[0], node.outputs
    return (isinstance(src, TensorProxy) and isinstance(out, TensorProxy)
            and src.dtype is torch.float32 and out.dtype is torch.float64)


def recomputed_per_element(group: list[Node], producer: dict) -> bool:
    """Would a kernel of `group` recompute, for every element, work done on a much smaller
    value that it broadcasts along the innermost dim in memory? batch_norm's per-channel
    ``weight / sqrt(var + eps)`` over a channels_last tensor (channels innermost): a sqrt
    and a division per element where eager makes C values (EfficientNet-B0's 96 x 80 x 80:
    307 us fused against eager's 225), ``x * sigmoid(s)`` of squeeze-excitation 4.7x eager.
    Such a value is computed by its own kernel and read broadcast. Along an outer dim the
    kernel computes it once per row, so a row-major tensor keeps it fused."""
    members = {id(n) for n in group}
    for n in group:
        if n.symbol.name != "broadcast_in_dim":
            continue
        src, out = node_args(n)[0], n.outputs
        maker = producer.get(getattr(src, "name", None))
        if (maker is None or id(maker) not in members or not _work(maker)
                or hint_numel(src.shape) * RECOMPUTE_RATIO > hint_numel(out.shape)
                or hint_numel(out.shape) < RECOMPUTE_MIN_ELEMENTS):
            continue
        inner = _innermost_dim(group, out)
        dims = node_args(n)[2]
        if inner is not None and any(src.shape[k] != 1 and d == inner for k, d in enumerate(dims)):
            return True
    return False


def _innermost_dim(group: list[Node], like: TensorProxy) -> int | None:
    """The dim of least stride (of those longer than 1) of a dense value of `like`'s shape in
    `group`: the layout a kernel iterates in."""
    shape = tuple(like.shape)
    for n in group:
        for p in (*n.inputs, *n.output_proxies):
            if (isinstance(p, TensorProxy) and tuple(p.shape) == shape
                    and all(st != 0 for st, k in zip(p.stride(), shape) if k != 1)):
                dims = [d for d, k in enumerate(shape) if k != 1]
                return min(dims, key=lambda d: p.stride()[d]) if dims else None
    return None


def _work(node: Node) -> bool:
    """Whether `node` is real work (not only a view or a fill)."""
    if reduction_plan.is_trivial(node):
        return False
    return reduction_plan.is_reduction(node) or ops.OPS[node.symbol.name].work


def kernel_sources(trace: Trace) -> dict[str, str]:
    """``{fused node name: source}`` of the fused regions in an execution trace."""
    return {n.symbol.name: n.symbol.source for n in trace.nodes
            if n.symbol.kind is SymbolKind.FUSED and n.symbol.source is not None}
