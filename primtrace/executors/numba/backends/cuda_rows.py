"""CUDA row kernels: a row region's plan (``reduction_plan.py``) as a ``numba.cuda`` kernel.

One block per row (blocks stride over rows): each pass's threads stride over the reduced
extent accumulating their own partial results, which a shared-memory tree combines into the
row's value that every thread then holds; row lines run in every thread, row outputs are
stored by thread 0, the last pass stores the full outputs. Float sums accumulate in
float64 per thread (a few values each, then a tree: closer to float64 than eager's
float32 tree), max/min propagate NaN, integers as the CPU's. No scratch rows: a later pass
recomputes what it needs (the GPU's math is cheap next to its memory). The loads, stores,
conversions and math are the elementwise CUDA backend's (``backends/cuda.py``); so is the
launcher's way of passing tensors (flat views). Imported only with CUDA (or the simulator).
"""
from __future__ import annotations

import torch
from primtrace.executors.numba import kernel_cache, launch
from primtrace.executors.numba.backends import cuda
from primtrace.executors.numba.plan import NotFusible, Store
from primtrace.executors.numba.reduction_plan import (RowPlan, element_offset, operands,
                                                     row_offset_lines, runtime_strides)
from primtrace.executors.numba.reduction_plan import analyze as _analyze

#: threads per block (a power of two: the tree halves it); fewer under the simulator
THREADS = 256
SIM_THREADS = 8
MAX_BLOCKS = 65535

_HEADER = '''\
"""primtrace fused row kernel (generated; CUDA). Tensors arrive as flat 1-D views."""
import math

from numpy import bool_, float16, float32, float64, int8, int16, int32, int64, uint8, uint16
from numba import cuda

from primtrace.executors.numba.backends import libdevice as cl
'''


def analyze(region) -> RowPlan:
    plan = _analyze(region, cuda.BACKEND)
    if plan.zero_division:
        raise NotFusible("integer division in a CUDA row region")
    return plan


def _threads() -> int:
    return SIM_THREADS if cuda.simulator() else THREADS


def _acc_reg(a) -> str:
    """A thread's accumulator type: float sums and products in float64, the rest as the CPU's."""
    if a.kind in ("sum", "prod"):
        return "float64" if a.reg in ("float32", "float64") else a.reg
    return a.reg


def _combine(a, x: str, y: str) -> str:
    if a.kind == "sum":
        return f"{x} + {y}"
    if a.kind == "prod":
        return f"{x} * {y}"
    op = ">" if a.kind == "max" else "<"
    if a.reg in ("float32", "float64"):
        return f"{x} if ({x} != {x} or {x} {op} {y}) else {y}"   # NaN wins
    return f"{x} if {x} {op} {y} else {y}"


def _identity(a) -> str:
    reg = _acc_reg(a)
    if a.kind == "sum":
        return f"{reg}(0)"
    if a.kind == "prod":
        return f"{reg}(1)"
    if reg in ("float32", "float64"):
        return f"{reg}({'-' if a.kind == 'max' else ''}math.inf)"
    import numpy as np
    info = np.iinfo(reg)
    return f"{reg}({info.min if a.kind == 'max' else info.max})"


def _params(plan: RowPlan) -> list[str]:
    params = [f"n{d}" for d in range(len(plan.row_sizes))]
    params += [f"m{d}" for d in range(len(plan.k_sizes))]
    for op in operands(plan):
        params.append(op.name)
        params += [name for name, _ in runtime_strides(op, plan)]
    return params + [s.name for s in plan.scalars]


def _line(line, plan, row_level: bool) -> str:
    if line.load is not None:
        expr = cuda.BACKEND.load(line.load.dtype,
                                 f"{line.load.name}[{element_offset(line.load, plan, row_level)}]")
    else:
        expr = line.expr
    comment = f"  # {line.comment}" if line.comment else ""
    return f"{line.var} = {expr}{comment}"


def _store(s, plan, row_level: bool) -> str:
    return f"{s.name}[{element_offset(s, plan, row_level)}] = {cuda.BACKEND.store(s.dtype, s.value)}"


def _tree(a, threads: int) -> list[str]:
    """The block's partial results of accumulator `a` combined; every thread gets the row's."""
    sh = f"{a.name}_sh"
    return [f"{sh}[tid] = {a.name}_t", "cuda.syncthreads()", f"half = {threads // 2}",
            "while half > 0:", "    if tid < half:",
            f"        {a.name}_u = {sh}[tid]", f"        {a.name}_w = {sh}[tid + half]",
            f"        {sh}[tid] = {_combine(a, f'{a.name}_u', f'{a.name}_w')}",
            "    cuda.syncthreads()", "    half //= 2",
            f"{a.name} = {sh}[0]", "cuda.syncthreads()"]


def _pass(plan: RowPlan, p: int, final: bool, threads: int) -> list[str]:
    accs, lines = plan.accumulators[p], plan.passes[p]
    stores = [s for s in plan.stores if not plan.is_row_store(s)] if final else []
    if not accs and not stores:
        return []
    out = [f"# pass {p}"] + [f"{a.name}_t = {_identity(a)}" for a in accs]
    q = len(plan.k_sizes)
    out += ["kk = int64(tid)", f"while kk < {' * '.join(f'm{d}' for d in range(q))}:"]
    body = []
    rest = "kk"
    for d in range(q - 1, 0, -1):
        body += [f"k{d} = {rest} % m{d}", f"krest{d} = {rest} // m{d}"]
        rest = f"krest{d}"
    body.append(f"k0 = {rest}")
    body += [_line(line, plan, False) for line in lines]
    for a in accs:
        v = a.value if _acc_reg(a) == a.reg else f"{_acc_reg(a)}({a.value})"
        body.append(f"{a.name}_t = {_combine(a, f'{a.name}_t', v)}")
    body += [_store(s, plan, False) for s in stores]
    body.append(f"kk += {threads}")
    out += ["    " + b for b in body]
    for a in accs:
        out += _tree(a, threads)
    return out


def render_kernel(plan: RowPlan) -> str:
    threads = _threads()
    body = ["tid = cuda.threadIdx.x"]
    for a in (a for accs in plan.accumulators for a in accs):
        body.append(f"{a.name}_sh = cuda.shared.array({threads}, {_acc_reg(a)})")
    body += [_line(line, plan, True) for line in plan.lines]
    nr = len(plan.row_sizes)
    body += ["row = int64(cuda.blockIdx.x)",
             f"while row < {' * '.join(f'n{d}' for d in range(nr))}:"]
    inner = []
    rest = "row"
    for d in range(nr - 1, 0, -1):
        inner += [f"i{d} = {rest} % n{d}", f"rest{d} = {rest} // n{d}"]
        rest = f"rest{d}"
    inner.append(f"i0 = {rest}")
    inner += row_offset_lines(plan)
    npasses = len(plan.passes)
    for p in range(npasses):
        inner += [_line(line, plan, True) for stage, line in plan.row_lines if stage == p]
        inner += _pass(plan, p, p == npasses - 1, threads)
    row_stores = [_store(s, plan, True) for s in plan.stores if plan.is_row_store(s)]
    if row_stores:
        inner += ["if tid == 0:"] + ["    " + s for s in row_stores]
    inner.append("row += cuda.gridDim.x")
    body += ["    " + line for line in inner]
    lines = [f"def kernel({', '.join(_params(plan))}):"] + ["    " + b for b in body]
    return _HEADER + "\n\n" + "\n".join(lines) + "\n"


def launcher_source(plan: RowPlan, region, fn_name: str) -> tuple[str, dict]:
    env = {"torch": torch, "empty_strided": torch.empty_strided, "flat": cuda._flat,
           "stream": cuda._stream}
    lines = [f"def {fn_name}({', '.join(f'i{j}' for j in range(len(region.inputs)))}):"]
    lines += launch.lazy_bit_lines(region, env)
    for s in plan.stores:
        p = region.outputs[s.output]
        lines.append(f"    o{s.output} = empty_strided({tuple(p.shape)!r}, {tuple(p.stride())!r}, "
                     f"dtype=torch.{str(p.dtype)[6:]}, device={str(p.device)!r})")
    if plan.nrows > 0:
        call = [str(n) for n in plan.row_sizes + plan.k_sizes]
        for op in operands(plan):
            if isinstance(op, Store):
                tensor, proxy = f"o{op.output}", region.outputs[op.output]
            elif op.name in plan.contiguous:
                lines.append(f"    {op.name} = i{op.index}.contiguous()")
                tensor, proxy = op.name, None
            else:
                tensor, proxy = f"i{op.index}", op.proxy
            extent = op.proxy.numel() if proxy is None else \
                launch.extent_bytes(proxy) // proxy.dtype.itemsize
            call.append(f"flat({tensor}, {extent})")
            call += [str(v) for _, v in runtime_strides(op, plan)]
        call += launch.scalar_args(plan.scalars, region, env)
        blocks = min(plan.nrows, 2 if cuda.simulator() else MAX_BLOCKS)
        config = f"{blocks}, {_threads()}" + ("" if cuda.simulator() else ", stream()")
        lines.append(f"    kernel[{config}]({', '.join(call)})")
    lines.append(f"    return {launch.returns_text(plan)}")
    return "\n".join(lines), env


def describe(plan: RowPlan, region) -> str:
    head = [f"# {len(region.nodes)} prims fused; CUDA row kernel over {list(plan.shape)}: "
            f"rows {list(plan.row_sizes)}, reduced {list(plan.k_sizes)}, "
            f"{len(plan.passes)} passes, one block per row"]
    head += [f"#   {line}" for line in plan.signature_text().splitlines()]
    return "\n".join(head)


def compile_region(region, fn_name: str = "numba_fusion", plan: RowPlan | None = None):
    plan = plan or analyze(region)
    source = render_kernel(plan)
    launcher, env = launcher_source(plan, region, fn_name)
    if plan.nrows > 0:
        key, module = kernel_cache.load_module(source, "cuda-sim" if cuda.simulator() else "cuda")
        env["kernel"] = kernel_cache.compiled(key, module, "kernel", lambda f: cuda._cuda().jit(
            cache=not cuda.simulator())(f))
    exec(compile(launcher, f"<primtrace {fn_name}>", "exec"), env)
    fn = env[fn_name]
    fn.source = describe(plan, region) + "\n" + launcher + "\n\n" + source
    fn.plan, fn.kernel_source = plan, source
    return fn


def ptx(region, cc=(9, 0), plan: RowPlan | None = None) -> str:
    """The PTX of `region`'s row kernel (no GPU needed)."""
    from numba import types
    plan = plan or analyze(region)
    key, module = kernel_cache.load_module(render_kernel(plan), "cuda")
    arrays = {op.name: op for op in operands(plan)}
    scalars = {s.name: s for s in plan.scalars}
    argtypes = []
    for name in _params(plan):
        if name in arrays:
            argtypes.append(types.Array(cuda._numba_storage(arrays[name].dtype), 1, "C"))
        elif name in scalars:
            argtypes.append({bool: types.boolean, int: types.int64,
                             float: types.float64}[scalars[name].python_type])
        else:
            argtypes.append(types.int64)
    code, _ = cuda._cuda().compile_ptx(module.kernel, tuple(argtypes), cc=cc)
    return code


__all__ = ["analyze", "compile_region", "ptx", "render_kernel", "describe"]
