"""What every launcher does besides calling its kernel, shared by both backends.

A launcher is the Python function a fused node calls: it allocates new outputs, passes
addresses (CPU) or flat views (CUDA) and scalars to the kernel, and returns the region's
outputs (:func:`returns_text`). One that writes an input in place first checks that input
against the others it reads or writes (:func:`alias_check_lines`): eager's overlap error,
or the region run unfused (:func:`unfused`) when one kernel would read values
another element's store already changed. A new output may instead take the memory of an
input that dies at the node (:func:`same_index_inputs`, ``executors/buffer_reuse.py``).
"""
from __future__ import annotations

import dataclasses
import math

import torch

from primtrace.executors.numba.plan import Plan
from primtrace.ir.proxy import Proxy, TensorProxy


def extent_bytes(p) -> int:
    """Bytes from a tensor's first element to the end of its last (its strides are >= 0)."""
    if math.prod(p.shape) == 0:
        return 0
    return (1 + sum((n - 1) * s for n, s in zip(p.shape, p.stride()))) * p.dtype.itemsize


def alias_check_lines(plan: Plan, region, env: dict) -> list[str]:
    """Launcher lines checking `plan.aliases`; `a<j>` then holds ``i<j>.data_ptr()``.

    Why at run time: proxies have no memory, so whether ``x[1:]`` and ``x[:-1]`` overlap is
    known only when the launcher sees the tensors. Shapes and strides are fixed per trace,
    so the fast path is two address comparisons per pair against constant extents; only
    operands whose byte ranges intersect (views of one storage) reach :func:`aliased`."""
    if not plan.aliases:
        return []
    env["aliased"], env["unfused"] = aliased, unfused(region)
    used = sorted({p for a in plan.aliases for p in (a.written, a.other)})
    lines = [f"    a{j} = i{j}.data_ptr()" for j in used]
    lines.append("    unsafe = False")
    for a in plan.aliases:
        w, o = a.written, a.other
        ew, eo = extent_bytes(region.inputs[w]), extent_bytes(region.inputs[o])
        lines.append(f"    if a{o} < a{w} + {ew} and a{w} < a{o} + {eo}:")
        lines.append(f"        unsafe = aliased(i{w}, i{o}, {a.eager}, {a.strict}) or unsafe")
    args = ", ".join(f"i{j}" for j in range(len(region.inputs)))
    lines += ["    if unsafe:", f"        return unfused({args})"]
    return lines


def lazy_bit_lines(region, env: dict) -> list[str]:
    """Launcher lines that run the region's prims by torch (:func:`unfused`) when an operand
    carries torch's lazy negation or conjugation bit (``x.conj().imag``, or such an input):
    its memory holds the values before that negation, and a kernel reads raw memory. Not in
    the cache key (eager tensors rarely carry a bit), so checked per call: ~60 ns an operand."""
    tests = [f"i{j}.is_neg()" + (f" or i{j}.is_conj()" if p.dtype.is_complex else "")
             for j, p in enumerate(region.inputs)
             if isinstance(p, TensorProxy) and p.dtype is not torch.bool]
    if not tests:
        return []
    env["unfused"] = unfused(region)
    args = ", ".join(f"i{j}" for j in range(len(region.inputs)))
    return [f"    if {' or '.join(tests)}:", f"        return unfused({args})"]


def aliased(written, other, eager: bool, strict: bool) -> bool:
    """The slow path for two operands whose byte ranges intersect: raise eager's error if
    `other` is an operand of the in-place op and partially overlaps `written` (the check of
    ``refs.out.check_overlap``, on the real tensors); otherwise, whether one kernel could
    read memory another element's store already changed (anything but the identical view,
    which reads and writes each element at the same address, unless `strict`)."""
    identical = (written.data_ptr() == other.data_ptr() and written.shape == other.shape
                 and written.stride() == other.stride()
                 and written.element_size() == other.element_size())
    if identical and not strict:
        return False      # full overlap: eager allows it, the kernel reads before it writes
    if eager:
        from primtrace.refs.out import check_overlap   # executors do not import refs at load
        check_overlap(written, (other,))
    return True


def unfused(region):
    """The region run one torch call at a time, in trace order: what the launcher does when
    its operands alias in a way one kernel cannot honour. ``y[1:] += y[:-1] * 2`` reads the
    old ``y[:-1]`` through eager's temporary; ``x.mul_(x[0])`` (x not dense, so eager's
    overlap check cannot tell) reads x[0] as torch's in-place kernel rewrites it. So each
    group of prims that is one whole torch call runs as that call (:func:`_steps`), the
    rest prim by prim."""
    steps = _steps(region)

    def run(*values):
        env = {p.name: v for p, v in zip(region.inputs, values)}

        def value(x):
            if isinstance(x, Proxy):
                return env[x.name]
            if type(x) in (tuple, list):
                return type(x)(value(y) for y in x)
            return x
        for node, outs in steps:
            out = node.symbol(*value(node.args), **{k: value(v) for k, v in node.kwargs.items()})
            if outs is None:     # a torch call: its results as its proxies are nested
                outs, out = flatten_like(node.outputs, out)
            elif len(outs) == 1:
                out = (out,)
            for p, v in zip(outs, out):
                env[p.name] = v
        return tuple(env[p.name] for p in region.outputs)
    return run


def _steps(region) -> list:
    """(node, its output proxies) to run in order for `region`; a torch call's outputs are
    None (nested as the call returns them). A run of consecutive prims of one ref node
    becomes its torch call when the call's tensor arguments are at hand, it makes every
    value of the run that later nodes read, and the run holds every write of the call
    (a write left outside the region would be done twice)."""
    from primtrace.tracer.opaque import torch_call_node   # executors load before the tracer
    from primtrace.tracer.passes import is_pure
    nodes = region.nodes
    needed = {p.name for p in region.outputs}
    reads_after = []
    for node in reversed(nodes):
        reads_after.append(set(needed))
        needed |= {p.name for p in node.inputs}
    reads_after.reverse()
    known = {p.name for p in region.inputs}
    steps, i = [], 0
    while i < len(nodes):
        origin = nodes[i].origin
        j = i + 1
        while j < len(nodes) and origin is not None and nodes[j].origin is origin:
            j += 1
        run = nodes[i:j]
        if origin is not None and origin.call is not None:
            call = torch_call_node(origin).replace(grad_enabled=run[0].grad_enabled)
            made = {p.name for n in run for p in n.output_proxies}
            results = {p.name for p in call.output_proxies}
            writes = sum(not is_pure(n) for n in run)
            if (all(p.name in known for p in call.inputs) and made & reads_after[j - 1] <= results
                    and writes == sum(not is_pure(n) for n in origin.flat())):
                steps.append((call, None))
                known |= results
                i = j
                continue
        for n in run:
            steps.append((n, n.output_proxies))
            known |= {p.name for p in n.output_proxies}
        i = j
    return steps


def flatten_like(proxies, values):
    """(proxies, values) flattened side by side: a call's nested results against its proxies."""
    if isinstance(proxies, Proxy):
        return [proxies], [values]
    if isinstance(proxies, (tuple, list)):   # namedtuples too (torch.max's)
        ps, vs = [], []
        for p, v in zip(proxies, values):
            a, b = flatten_like(p, v)
            ps += a
            vs += b
        return ps, vs
    return [], []


def returns_text(plan: Plan) -> str:
    """The launcher's return tuple: new outputs ``o<k>``, in-place results the input ``i<j>``."""
    items = [f"o{k}" if kind == "new" else f"i{k}" for kind, k in plan.returns]
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def scalar_args(scalars, region, env: dict, kernel: str = "kernel") -> list[str]:
    """The launcher's arguments for a kernel's scalars (every backend's, elementwise and row
    kernels): a region input as is (``item()`` of a 0-dim tensor), a constant through `env`
    (named for its `kernel`: the parts of a split loop number their constants each)."""
    args = []
    for s in scalars:
        if s.input is not None:
            p = region.inputs[s.input]
            args.append(f"i{s.input}.item()" if isinstance(p, TensorProxy) else f"i{s.input}")
        else:
            name = f"const_{s.name}" if kernel == "kernel" else f"const_{kernel}_{s.name}"
            env[name] = s.value
            args.append(name)
    return args


def same_index_inputs(plan: Plan, store) -> list[int]:
    """The inputs the kernel reads only where it writes `store`: every load of them has the
    store's strides (so the same element), and none is read as a number. A dead one can
    hold the store's output, each element read before it is overwritten; the kernels read
    addresses, so the compiler assumes nothing about two pointers being apart."""
    same: dict[int, bool] = {}
    for load in plan.loads:
        same[load.index] = same.get(load.index, True) and load.strides == store.strides \
            and load.offset == store.offset
    numbers = {s.input for s in plan.scalars}
    return [j for j, ok in same.items() if ok and j not in numbers]


def output_line(k: int, alloc: str, into: dict) -> str:
    """The launcher's line making new output `k`: `alloc`, or the dead input `into` gives it."""
    return f"    o{k} = i{into[k]}" if k in into else f"    o{k} = {alloc}"


def sharing(plan, into: dict):
    """`plan` with each new output `k` in `into` stored through the pointer and offsets of
    its input ``into[k]`` (``Store.shares``), as an in-place write is: the kernel then
    loads and stores one address per element, and the compiler vectorizes the loop. With
    two pointers to one buffer it cannot prove them apart, and its run-time overlap check
    sends the loop to its scalar version (a float32 tanh at 16K elements: 2.2x slower)."""
    load_of = {}
    for load in plan.loads:
        load_of.setdefault(load.index, load)
    stores = [dataclasses.replace(s, shares=load_of[into[s.output]]) if s.output in into else s
              for s in plan.stores]
    summary = [next((f"{line} (in {s.shares.name}'s memory)" for s in stores
                     if s.shares is not None and line.startswith(f"{s.name} = ")), line)
               for line in plan.summary]
    return dataclasses.replace(plan, stores=stores, summary=summary)
