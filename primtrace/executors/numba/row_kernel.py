"""CPU row kernels: a row region's plan (``reduction_plan.py``) as an ``njit`` kernel.

One loop over rows (``prange`` in the parallel variant: rows are independent), and per
row the plan's passes over the reduced dims, each a plain loop whose accumulators are
scalars updated through ``backends/accumulate.py`` (reorderable float adds, LLVM's
NaN-propagating maximum): LLVM vectorizes these loops, vmath calls included, as it does
the elementwise kernels'. A pass with a compensated float64 sum runs its innermost loop in
blocks of ``BLOCK`` elements, each block's partial sum added with Neumaier's compensation.
Row lines (reduced results and what follows from them) run between the passes; row-shaped
outputs are stored after the last one. The launcher is the elementwise one's, simpler: no
in-place writes reach a row region.
"""
from __future__ import annotations

import dataclasses
import re

import torch

from primtrace.executors.numba import kernel_cache, launch
from primtrace.executors.numba.backends import cpu
from primtrace.executors.numba.ops import CPU
from primtrace.executors.numba.plan import Store
from primtrace.executors.numba.reduction_plan import (RowPlan, analyze, element_offset,
                                                     element_ref, operands, row_offset_lines,
                                                     runtime_strides)
from primtrace.executors.numba.registers import DTYPES
from primtrace.executors.numba.symbolic_sizes import hint_numel, shape_text, size_text

#: elements per block of a float sum: a float32 partial sum over 256 values (16 lanes of
#: 16: short enough to be more exact than eager's float32 cascade), a float64 one over 1024
#: (its blocks then added with compensation)
BLOCK = {"float32": 256, "float64": 1024}

_HEADER = cpu._HEADER + ("from primtrace.executors.numba.backends import accumulate as acc\n"
                         "from numba import get_thread_id\n")

_FLOATS = ("float32", "float64")


def _blocked(a) -> bool:
    return a.kind == "sum" and a.reg in _FLOATS


def _keyed(a) -> bool:
    return a.kind in ("max", "min") and a.reg in _FLOATS


def _bits(a) -> str:
    return "32" if a.reg == "float32" else "64"


def _init(a) -> list[str]:
    """The lines starting an accumulator before its pass."""
    if _blocked(a):
        return [f"{a.name}_s = float64(0)"] + ([f"{a.name}_c = float64(0)"] if a.reg == "float64" else [])
    if a.kind == "sum":
        return [f"{a.name} = {a.reg}(0)"]
    if a.kind == "prod":
        return [f"{a.name} = {a.reg}(1)"]
    import numpy as np
    if _keyed(a):   # the identity key: below every key (max), above every key (min)
        info = np.iinfo(f"int{_bits(a)}")
        return [f"{a.name}_k = int{_bits(a)}({info.min if a.kind == 'max' else info.max})"]
    info = np.iinfo(a.reg)
    return [f"{a.name} = {a.reg}({info.min if a.kind == 'max' else info.max})"]


def _update(a) -> str:
    v = a.value
    if _blocked(a):
        return f"{a.name}_p = acc.add({a.name}_p, {v})"
    if a.kind == "sum":
        return f"{a.name} += {v}"
    if a.kind == "prod":
        return f"{a.name} = acc.mul({a.name}, {v})" if a.reg in _FLOATS else f"{a.name} *= {v}"
    step = "imax" if a.kind == "max" else "imin"
    if _keyed(a):
        return f"{a.name}_k = acc.{step}({a.name}_k, acc.{a.kind}_key{_bits(a)}({v}))"
    return f"{a.name} = acc.{step}({a.name}, {v})"


def _flush(a) -> str:
    """A block's partial sum into the float64 total."""
    if a.reg == "float64":
        return f"{a.name}_s, {a.name}_c = acc.neumaier({a.name}_s, {a.name}_c, {a.name}_p)"
    return f"{a.name}_s += float64({a.name}_p)"


def _final(a) -> list[str]:
    """The lines giving the accumulator's value (float sums: float64) after its pass."""
    if _blocked(a):
        return [f"{a.name} = acc.compensated({a.name}_s, {a.name}_c)" if a.reg == "float64"
                else f"{a.name} = {a.name}_s"]
    if _keyed(a):
        return [f"{a.name} = acc.from_key{_bits(a)}({a.name}_k)"]
    return []


def _params(plan: RowPlan) -> list[str]:
    params = [f"n{d}" for d in range(len(plan.row_sizes))]
    params += [f"m{d}" for d in range(len(plan.k_sizes))]
    params += [f"{s.name}_addr" for s in plan.scratch]
    for op in operands(plan) + plan.columns:
        params.append(f"{op.name}_addr")
        params += [name for name, _ in runtime_strides(op, plan)]
    if plan.columns:   # the partial sums (columns x chunks x row elements), and chunks
        params += ["colbuf_addr", "nch"]
    return params + [s.name for s in plan.scalars]


def _column_index(plan, j: int, chunk: str) -> str:
    """The element of column sum `j`'s partial sums for chunk `chunk` at k0, k1..."""
    return f"{j} * nch * nk + {chunk} * nk + {_flat_k(plan)}"


def _column_lines(plan: RowPlan) -> list[str]:
    """After every row: each column sum's chunks added in chunk order (float64), then
    stored (rounded once from float64)."""
    out = []
    q = len(plan.k_sizes)
    for j, col in enumerate(plan.columns):
        out += [f"for c in range(1, nch):",
                f"    for q in range(nk):",
                f"        colbuf[{j} * nch * nk + q] += colbuf[{j} * nch * nk + c * nk + q]"]
        indent = ""
        for d in range(q):
            out.append(f"{indent}for k{d} in range(m{d}):")
            indent += "    "
        value = f"colbuf[{_column_index(plan, j, '0')}]"
        if DTYPES[col.dtype].reg != "float64":
            value = f"float32({value})"
        ref = f"{col.name}[{element_offset(col, plan, False)}]"
        out.append(f"{indent}{ref} = {CPU.store(col.dtype, value)}")
    return out


_NAMES = re.compile(r"\b[vx]\d+\b")   # the registers an element line reads


def _flat_k(plan) -> str:
    """The element's position in its row (scratch buffers are dense rows)."""
    flat = "k0"
    for d in range(1, len(plan.k_sizes)):
        flat = f"({flat}) * m{d} + k{d}"
    return flat


def _line(line, plan, row_level: bool) -> str:
    if line.expr.endswith("[SCRATCH]"):
        return f"{line.var} = {line.expr.replace('SCRATCH', 'scratch_row + ' + _flat_k(plan))}  # {line.comment}"
    if line.load is not None:
        ref = f"{line.load.name}[{element_offset(line.load, plan, row_level)}]"
        ks = line.load.strides[plan.nrows_dims:]
        expr = CPU.load(line.load.dtype, ref, strided=not row_level and ks[-1] not in (0, 1))
    else:
        expr = line.expr
    comment = f"  # {line.comment}" if line.comment else ""
    return f"{line.var} = {expr}{comment}"


def _store(s, plan, row_level: bool) -> str:
    return f"{element_ref(s, plan, row_level)} = {CPU.store(s.dtype, s.value)}"


def _pass(plan: RowPlan, p: int, final: bool) -> list[str]:
    """One pass over the reduced dims: its loops, accumulators and (last pass) stores."""
    accs, lines = plan.accumulators[p], plan.passes[p]
    stores = [s for s in plan.stores if not plan.is_row_store(s)] if final else []
    columns = plan.columns if final else []
    if not accs and not stores and not columns:
        return []
    out = [f"# pass {p}"]
    for a in accs:
        out += _init(a)
    blocked = [a for a in accs if _blocked(a)]
    q = len(plan.k_sizes)
    indent = ""
    for d in range(q - 1):
        out.append(f"{indent}for k{d} in range(m{d}):")
        indent += "    "
    inner = q - 1
    if blocked:
        block = min(BLOCK[a.reg] for a in blocked)
        out.append(f"{indent}for kb in range(0, m{inner}, {block}):")
        indent += "    "
        out += [f"{indent}{a.name}_p = {a.reg}(0)" for a in blocked]
        out.append(f"{indent}for k{inner} in range(kb, min(kb + {block}, m{inner})):")
    else:
        out.append(f"{indent}for k{inner} in range(m{inner}):")
    body = [_line(line, plan, False) for line in lines]
    body += [_update(a) for a in accs]
    body += [f"{sc.name}[scratch_row + {_flat_k(plan)}] = {sc.value}"
             for sc in plan.scratch if sc.stored_in == p]
    body += [_store(s, plan, False) for s in stores]
    # apart from a loop that does other work, and writes no input (that a recomputed
    # addend would read again)
    apart = bool(body) and _separate_columns(plan) and final
    if not apart:
        body += [f"colbuf[{_column_index(plan, j, 'chunk')}] += {col.value}"
                 for j, col in enumerate(columns)]
    out += [indent + "    " + b for b in body]
    out += [indent + _flush(a) for a in blocked]
    for a in accs:
        out += _final(a)
    if apart:
        out += _column_loop(plan, lines, stores, columns)
    return out


def _column_loop(plan: RowPlan, lines, stores, columns) -> list[str]:
    """The last pass's column sums, added in a loop of their own after it (same addends,
    same order): each re-read from the output the pass stored it in, when it stored it
    exactly (float32, float64), else recomputed from the lines it needs (loads read the
    inputs again). In the pass's loop the float64 read-modify-writes keep LLVM from
    vectorizing it: gelu's backward with its bias gradient ran at half speed."""
    reads, needed = _column_addends(plan, lines, stores, columns)
    out, indent = ["# column sums of this row"], ""
    for d in range(len(plan.k_sizes)):
        out.append(f"{indent}for k{d} in range(m{d}):")
        indent += "    "
    out += [indent + _line(line, plan, False) for line in lines if line.var in needed]
    out += [f"{indent}colbuf[{_column_index(plan, j, 'chunk')}] += {reads.get(j, col.value)}"
            for j, col in enumerate(columns)]
    return out


def _column_addends(plan: RowPlan, lines, stores, columns) -> tuple[dict, set]:
    """(column -> the stored element it re-reads, the lines recomputing the others)."""
    defined = {line.var: line for line in lines}
    needed, reads = set(), {}
    for j, col in enumerate(columns):
        addend = plan.addends.get(col.name)
        store = next((s for s in stores if s.value == addend and s.dtype.is_floating_point
                      and DTYPES[s.dtype].reg == DTYPES[s.dtype].storage), None)
        if store is not None:
            value = element_ref(store, plan, False)
            reads[j] = value if DTYPES[store.dtype].reg == "float64" else f"float64({value})"
            continue
        todo = [col.value]
        while todo:
            var = todo.pop()
            if var in defined and var not in needed:
                needed.add(var)
                line = defined[var]
                if line.load is None:
                    todo += _NAMES.findall(line.expr)
    return reads, needed


def _separate_columns(plan: RowPlan) -> bool:
    """Whether the last pass adds its column sums in a loop of their own (``_column_loop``)."""
    return bool(plan.columns) and not any(s.output is None for s in plan.stores)


def reusable_inputs(plan: RowPlan) -> dict[int, list[int]]:
    """New element output -> the inputs whose memory it could take when they die at the
    node: read only in this row's passes, at the element the last pass writes, in place
    (not through a contiguous copy), and not again by a column loop after the stores
    (``launch.same_index_inputs``)."""
    if plan.nrows == 0 or any(s.output is None for s in plan.stores):
        return {}
    final = plan.passes[-1] if plan.passes else []
    stores = [s for s in plan.stores if not plan.is_row_store(s)]
    # not a load of a contiguous copy (stores through its pointer would land in the copy)
    excluded = {load.index for load in plan.loads if load.name in plan.contiguous}
    if _separate_columns(plan):
        _, needed = _column_addends(plan, final, stores, plan.columns)
        excluded |= {line.load.index for line in final if line.var in needed and line.load}
    return {s.output: [j for j in launch.same_index_inputs(plan, s) if j not in excluded]
            for s in stores}


_WHERE = re.compile(r"^(\w+) if (\w+) else (\w+)$")


def _skipped_row(plan: RowPlan) -> list[str]:
    """Lines that end a row early where its one output is ``where(c, a, b)`` with `c` and
    the chosen side known before the first pass (a masked loss's rows the mask drops: the
    row's passes over the logits are not run): ``if not c: out[row] = b; continue``. Only
    for a kernel whose every store is that one row store (nothing else to write)."""
    if plan.columns or plan.scratch or len(plan.stores) != 1:
        return []
    store = plan.stores[0]
    if not plan.is_row_store(store) or store.output is None:
        return []
    early = {line.var for line in plan.lines}
    early |= {line.var for stage, line in plan.row_lines if stage == 0}
    defined = {line.var: line for _, line in plan.row_lines}
    names = set(_NAMES.findall(store.value))
    if len(names) != 1:
        return []
    var = names.pop()
    line = defined.get(var)
    found = None if line is None or line.load is not None else _WHERE.match(line.expr.strip())
    if found is None or found.group(2) not in early:
        return []
    a, c, b = found.groups()
    if b in early:
        test, value = f"not {c}", b
    elif a in early:
        test, value = c, a
    else:
        return []
    early_store = dataclasses.replace(store, value=re.sub(rf"\b{var}\b", value, store.value))
    return [f"if {test}:   # the row's output is known: its passes are skipped",
            f"    {_store(early_store, plan, True)}", "    continue"]


def render_kernel(plan: RowPlan, name: str, loop: str) -> str:
    lines = [f"def {name}({', '.join(_params(plan))}):"]
    body = []
    for op in operands(plan) + plan.columns:
        storage = "bool" if op.dtype is torch.bool else DTYPES[op.dtype].storage
        body.append(f"{op.name} = rt.ptr_{storage}({op.name}_addr)")
    for sc in plan.scratch:
        body.append(f"{sc.name} = rt.ptr_{sc.reg}({sc.name}_addr)")
    if plan.columns:
        body.append("colbuf = rt.ptr_float64(colbuf_addr)")
        body.append(f"nk = {' * '.join(f'm{d}' for d in range(len(plan.k_sizes)))}")
    body.append("zero_div = 0")
    body += [_line(line, plan, True) for line in plan.lines]
    tests = [f"({d} == 0)" for d, _ in plan.zero_division]
    if tests:
        body.append(f"zero_div += {' | '.join(tests)}")
    nr = len(plan.row_sizes)
    nrows = ' * '.join(f'n{d}' for d in range(nr))
    if plan.columns:   # chunks of rows, each summing its columns into its own partial sums
        body.append(f"for chunk in {loop}(nch):")
        body += [f"    for q in range(nk):"]
        body += [f"        colbuf[{j} * nch * nk + chunk * nk + q] = float64(0)"
                 for j in range(len(plan.columns))]
        body.append(f"    for row in range(chunk * ({nrows}) // nch, (chunk + 1) * ({nrows}) // nch):")
    else:
        body.append(f"for row in {loop}({nrows}):")
    row = []
    if nr > 1:   # fresh names: parfors refuse an assignment to (an alias of) the loop index
        rest = "row"
        for d in range(nr - 1, 0, -1):
            row += [f"i{d} = {rest} % n{d}", f"rest{d} = {rest} // n{d}"]
            rest = f"rest{d}"
        row.append(f"i0 = {rest}")
    else:
        row.append("i0 = row")
    if plan.scratch:
        thread = "get_thread_id()" if loop == "prange" else "0"
        row.append(f"scratch_row = {thread} * ({' * '.join(f'm{d}' for d in range(len(plan.k_sizes)))})")
    row += row_offset_lines(plan)
    npasses = len(plan.passes)
    for p in range(npasses):
        row += [_line(line, plan, True) for stage, line in plan.row_lines if stage == p]
        row += _skipped_row(plan) if p == 0 else []
        row += _pass(plan, p, p == npasses - 1)
    row += [_store(s, plan, True) for s in plan.stores if plan.is_row_store(s)]
    body += [("        " if plan.columns else "    ") + r for r in row]
    body += _column_lines(plan)
    kept = [(s.shares or s).name for s in plan.stores] + [s.name for s in plan.scratch + plan.columns]
    body += [f"rt.keep({name})" for name in dict.fromkeys(kept)]
    body.append("return zero_div")
    return "\n".join(lines + ["    " + b for b in body])


def render_module(plan: RowPlan) -> str:
    header = _HEADER % (cpu.NJIT_OPTIONS,)
    serial = render_kernel(plan, "kernel_serial", "range")
    parallel = render_kernel(plan, "kernel_parallel", "prange")
    return f"{header}\n\n{serial}\n\n\n{parallel}\n"


def work(plan: RowPlan) -> float:
    """A rough cost of the whole kernel in simple-op units (as cpu.work_per_element)."""
    per_element = sum(1.0 + sum(8.0 if "m." in line.expr else 1.0 for line in lines)
                      for lines in plan.passes)
    return plan.nrows * plan.nk * (per_element + 0.5 * len(plan.loads))


def choose_variant(plan: RowPlan) -> str:
    parallel = plan.nrows >= 2 and cpu.runs_parallel(plan.nrows * plan.nk, work(plan))
    return "kernel_parallel" if parallel else "kernel_serial"


def _variants(plan: RowPlan, key, module, variant: str, kernel):
    """cpu._variants for a row kernel over a symbolic number of rows: variant_for(rows, k)."""
    per_row = work(plan) / max(plan.nrows, 1)
    choose, kernels = cpu._variants(plan, key, module, variant, kernel)

    def variant_for(nrows: int, nk: int) -> str:
        parallel = nrows >= 2 and cpu.runs_parallel(nrows * nk, nrows * per_row)
        return "kernel_parallel" if parallel else "kernel_serial"
    return variant_for, kernels


def launcher_source(plan: RowPlan, region, fn_name: str, variant: str,
                    into: dict | None = None) -> tuple[str, dict]:
    """Python source of the launcher and the globals it needs; `into` maps new outputs to
    the dead inputs whose memory they take (:func:`reusable_inputs`)."""
    args = [f"i{j}" for j in range(len(region.inputs))]
    env = {"torch": torch, "empty_strided": torch.empty_strided, "huge_pages": cpu.huge_pages,
           "cpu_device": torch.device("cpu")}   # an object: a device string is parsed per call
    lines = [f"def {fn_name}({', '.join(args)}):"]
    lines += launch.lazy_bit_lines(region, env)
    for s in plan.stores + plan.columns:
        p = region.outputs[s.output]
        if plan.nrows == 0 and s in plan.columns:   # a sum over no rows
            lines.append(f"    o{s.output} = torch.zeros({tuple(p.shape)!r}, "
                         f"dtype=torch.{str(p.dtype)[6:]}, device=cpu_device)")
            continue
        alloc = (f"empty_strided({shape_text(p.shape, region)}, {tuple(p.stride())!r}, "
                 f"dtype=torch.{str(p.dtype)[6:]}, device=cpu_device)")
        if cpu.advised(hint_numel(p.shape) * p.dtype.itemsize):
            alloc = f"huge_pages({alloc})"
        lines.append(launch.output_line(s.output, alloc, into or {}))
    sizes = [size_text(n, region) for n in plan.row_sizes + plan.k_sizes]
    if plan.symbolic:   # serial or parallel for this call's rows (cpu._variants)
        lines.append(f"    variant = variant_for({' * '.join(sizes[:len(plan.row_sizes)])}, "
                     f"{plan.nk})")
        lines.append("    kernel = kernels(variant)")
    if plan.scratch:
        import numba
        env["scratch"] = torch.empty
        rows = numba.config.NUMBA_NUM_THREADS if variant == "kernel_parallel" else 1
        if plan.symbolic:
            env["threads"] = numba.config.NUMBA_NUM_THREADS
            rows = '(threads if variant == "kernel_parallel" else 1)'
        for sc in plan.scratch:   # per call: callers in several Python threads share no buffer
            lines.append(f"    {sc.name} = scratch({rows} * {plan.nk}, dtype=torch.{sc.reg})")
    if plan.nrows > 0:
        call = list(sizes)
        call += [f"{sc.name}.data_ptr()" for sc in plan.scratch]
        for op in operands(plan) + plan.columns:
            if op.name in plan.contiguous:   # kept alive until the kernel returns
                lines.append(f"    {op.name} = i{op.index}.contiguous()")
                call.append(f"{op.name}.data_ptr()")
            else:
                call.append(f"o{op.output}.data_ptr()" if isinstance(op, Store)
                            else f"i{op.index}.data_ptr()")
            call += [str(v) for _, v in runtime_strides(op, plan)]
        if plan.columns:
            lines.append(f"    colbuf = torch.empty({len(plan.columns) * plan.nchunks * plan.nk}, "
                         "dtype=torch.float64)")
            call += ["colbuf.data_ptr()", str(plan.nchunks)]
        call += launch.scalar_args(plan.scalars, region, env)
        lines.append(f"    if kernel({', '.join(call)}):")
        lines.append('        raise RuntimeError("ZeroDivisionError")')
    lines.append(f"    return {launch.returns_text(plan)}")
    return "\n".join(lines), env


def compile_region(region, fn_name: str = "numba_fusion", plan: RowPlan | None = None,
                   into: dict | None = None):
    """The callable running row region `region` on CPU tensors (`into`: new outputs
    written into dead inputs, see :func:`reusable_inputs`)."""
    plan = plan or analyze(region, CPU)
    if into:
        plan = launch.sharing(plan, into)
    module_source = render_module(plan)
    variant = choose_variant(plan)
    launcher, env = launcher_source(plan, region, fn_name, variant, into)
    if plan.nrows > 0:
        key, module = kernel_cache.load_module(module_source, "cpu")
        env["kernel"] = kernel_cache.compiled(key, module, variant,
                                              cpu._njit(variant == "kernel_parallel"))
        if plan.symbolic:
            env["variant_for"], env["kernels"] = _variants(plan, key, module, variant,
                                                           env["kernel"])
    exec(compile(launcher, f"<primtrace {fn_name}>", "exec"), env)
    fn = env[fn_name]
    head = [f"# {len(region.nodes)} prims fused; row kernel over {list(plan.shape)}: "
            f"rows {list(plan.row_sizes)}, reduced {list(plan.k_sizes)}, "
            f"{len(plan.passes)} passes; runs {variant}"]
    head += [f"#   {line}" for line in plan.signature_text().splitlines()]
    fn.source = "\n".join(head) + "\n" + launcher + "\n\n" + module_source
    fn.plan, fn.variant, fn.kernel = plan, variant, env.get("kernel")
    fn.launcher, fn.reusable = launcher, {} if into else reusable_inputs(plan)
    fn.writing_into = lambda into: compile_region(region, fn_name, plan, into)
    return fn
