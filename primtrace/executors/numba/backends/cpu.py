"""CPU backend: a region becomes an ``njit`` kernel over raw pointers plus a Python launcher.

The kernel module holds two functions from one template, ``kernel_serial`` (``range``)
and ``kernel_parallel`` (``prange``): a parallel launch costs a few microseconds, so small
regions run serially; the launcher picks one at compile time (shapes are fixed per trace).
With one coalesced dim the loop is flat; with more, the parallel loop runs over (row,
block of the innermost dim) tasks so that a few long rows still split across threads, and
the inner loop stays unit-stride for dense operands (LLVM vectorizes it, the ``vmath``
functions included).

The launcher allocates new outputs with ``torch.empty_strided`` in the layout the meta
functions chose (channels_last in, channels_last out), passes ``data_ptr()`` of every
tensor, Python numbers and ``item()`` of 0-dim CPU tensors as scalars, and raises eager's
``RuntimeError("ZeroDivisionError")`` when the kernel counted an integer division by zero.
A launcher that writes an input in place first checks that input against the others it
reads or writes (``launch.alias_check_lines``: eager's overlap error, or the
region run unfused, a torch call at a time, when one kernel would read values another
element already wrote).
"""
from __future__ import annotations

import ctypes
import math
import os
import sys

import numpy as np
import torch

from primtrace.executors.numba import kernel_body, kernel_cache, launch
from primtrace.executors.numba.ops import CPU
from primtrace.executors.numba.plan import Plan, Store, analyze, dtype_name
from primtrace.executors.numba.registers import DTYPES
from primtrace.executors.numba.symbolic_sizes import shape_text, size_text
from primtrace.executors.numba.vmath.trig import NEAR_LIMIT

#: estimated work (elements x per-element cost in simple-op units, see work_per_element)
#: above which the parallel variant runs. Measured on the 2-core VM with
#: ``benchmarks/fusion.py --threshold``: W1 (cost ~4.5) breaks even near 32K elements
#: (serial 15.5 us, parallel 11.1 us), W2 (cost ~31) near 4K; a passive-wait launch costs
#: ~5-8 us when the cores are free (and milliseconds when a neighbour holds one).
PARALLEL_WORK = int(os.environ.get("PRIMTRACE_PARALLEL_WORK", 1 << 17))
#: fewer elements than this run on one thread whatever their work, as torch's own loops do
#: (at::internal::GRAIN_SIZE): a parallel launch waits at its barrier for a scheduler slice
#: whenever another process holds a core, ~12 ms for a 10 us kernel on this 2-core VM with
#: one busy neighbour, where eager's serial loop is not held up
MIN_PARALLEL_ELEMENTS = 1 << 15
#: elements per task of the blocked (multi-dim) parallel loop
BLOCK = 1 << 14
#: the tile (rows x elements of the innermost dim) a task covers when an operand is strided
#: along the innermost dim (``a.t() + b``): a row at a time, each element of such an operand
#: sits on its own page, and 4096 rows of bfloat16 ran 1.5x eager for TLB misses; a tile's
#: rows reuse the same pages and cache lines (an operand's tile: 128 lines of 64 rows)
TILE_ROWS, TILE_COLS = 64, 128
#: new outputs at least this big are faulted in by each task of the kernel just before it
#: writes them, with one system call per task (``rt.populate``) instead of a page fault per
#: 4 KiB: glibc maps allocations of 32 MiB and more fresh from the kernel every time, so
#: each call faults all of it in. W3 (sin of int64, 64 MiB out) went from 0.45x to 0.40x
#: eager (torch.compile 0.455x), W1 from 0.51x to 0.49x. Not from 32 MiB: there (half
#: dtypes at 2^24) 5 of 30 single-op cells of the sweep ran 1.4-2.7x eager for whole rounds
#: with it, none without, much as huge pages did; none of 30 cells at 64 MiB did (cause not
#: found: the balloon's free-page reporting is the suspect)
POPULATE_BYTES = 64 << 20
#: elements a kernel with small-argument calls (the op table's ``near``: float32 sin, cos)
#: checks at a time: the block runs with them and is redone with the exact calls when one
#: argument was out of their range (|x| >= 2**20, inf); a block after such a block runs the
#: exact calls at once, as arguments that large tend to come together
GUARD_BLOCK = 1 << 10

NJIT_OPTIONS = dict(cache=True, error_model="numpy", nogil=True)
_HEADER = '''\
"""primtrace fused kernel (generated; CPU). Tensors arrive as addresses, scalars as numbers.
Compiled with numba.njit(**%r), parallel=True for kernel_parallel."""
import math

import numpy as np
from numpy import bool_, float32, float64, int8, int16, int32, int64, uint8, uint16
from numba import prange

from primtrace.executors.numba.backends import mathlib as m
from primtrace.executors.numba.backends import runtime as rt
'''


#: new outputs of at least this many bytes ask the kernel for transparent huge pages, when
#: PRIMTRACE_HUGE_PAGES=1 (off by default, as torch's own THP_MEM_ALLOC_ENABLE)
HUGE_OUTPUT_BYTES = 8 << 20
_HUGE = 1 << 21


def _madvise():
    """libc's madvise when huge pages are asked for (PRIMTRACE_HUGE_PAGES=1, Linux), else None.

    Why opt-in: huge pages make a fresh 32 MiB output 4x cheaper to fault in (1.6 ms against
    6.4 ms here, steady state), but where they come from is a gamble. On a VM whose balloon
    reports free 2 MiB blocks to the host (this one), a huge page the host no longer backs
    costs ~2 ms to fault instead of ~0.1 ms, and which blocks a process gets depends on what
    it allocated before: the sweep met 2x-eager phases at 2^24 that 4 KiB pages never show.
    With THP's "madvise" defrag a fragmented machine stalls in compaction instead."""
    if os.environ.get("PRIMTRACE_HUGE_PAGES", "0") != "1" or not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return fn


_MADVISE = _madvise()
_MADV_HUGEPAGE = 14
#: whether new big outputs get huge pages (the cost model fuses more when they do)
HUGE_PAGES = _MADVISE is not None


def advised(nbytes: int) -> bool:
    """Whether a new output of `nbytes` gets huge pages (so faults in cheaply)."""
    return HUGE_PAGES and nbytes >= HUGE_OUTPUT_BYTES


def huge_pages(t: torch.Tensor) -> torch.Tensor:
    """Advise 2 MiB pages for a new, still untouched output (the 2 MiB-aligned part of it).

    Why: a fresh 64 MiB output costs 16384 page faults when the kernel first writes it,
    which on this VM took longer than computing W1; with THP in "madvise" mode the same
    memory takes 32 faults. Only this tensor's pages are affected."""
    if _MADVISE is not None:
        start = (t.data_ptr() + _HUGE - 1) & ~(_HUGE - 1)
        end = (t.data_ptr() + t.untyped_storage().nbytes()) & ~(_HUGE - 1)
        if end > start:
            _MADVISE(start, end - start, _MADV_HUGEPAGE)
    return t


def _index_names(k: int) -> list[str]:
    return [f"i{d}" for d in range(k)]


def _params(plan: Plan) -> list[str]:
    k = len(plan.sizes)
    params = [f"n{d}" for d in range(k)]
    if k > 1:
        params += ["nblocks", "block", "rows"]
    for op in kernel_body.memory_operands(plan):
        params.append(f"{op.name}_addr")
        params += [name for name, _ in kernel_body.runtime_strides(op)]
    params += [s.name for s in plan.scalars]
    return params


def render_kernel(plan: Plan, name: str, loop: str) -> str:
    """One kernel function; `loop` is ``range`` or ``prange``."""
    k = len(plan.sizes)
    idx = _index_names(k)
    lines = [f"def {name}({', '.join(_params(plan))}):"]
    body = []
    for op in kernel_body.memory_operands(plan):
        storage = "bool" if op.dtype is torch.bool else DTYPES[op.dtype].storage
        body.append(f"{op.name} = rt.ptr_{storage}({op.name}_addr)")
    body.append("zero_div = 0")
    body += kernel_body.body(plan, CPU, lambda op: "0", invariant=True)
    body += kernel_body.zero_division_lines(plan, invariant=True)
    guard = guarded(plan)
    if k == 1:
        def offset(op):
            return " + ".join(kernel_body.stride_terms(op, idx)) or "0"
        populated = populated_outputs(plan)
        if guard or populated:    # tasks of BLOCK elements
            body.append(f"for task in {loop}((n0 + {BLOCK - 1}) // {BLOCK}):")
            body.append(f"    first = task * {BLOCK}")
            body.append(f"    last = min(first + {BLOCK}, n0)")
            body += [f"    rt.populate({addr} + first * {size}, {addr} + last * {size})"
                     for addr, size in populated]
            if guard:
                body.append("    skip = int32(0)")
                body.append(f"    for lo in range(first, last, {GUARD_BLOCK}):")
                body.append(f"        hi = min(lo + {GUARD_BLOCK}, last)")
                body += ["        " + line for line in _guarded_loop(plan, offset, "i0")]
            else:
                body.append("    for i0 in range(first, last):")
                body += ["        " + line for line in _element_lines(plan, offset, near=False)]
            return _finish(plan, lines, body)
        body.append(f"for i0 in {loop}(n0):")
        inner = "    "
    else:
        def offset(op):
            base = f"{op.name}_row" if any(op.strides[:-1]) else ""
            inner_terms = [t for t in kernel_body.stride_terms(op, idx) if t.startswith(f"i{k - 1}")]
            return " + ".join([t for t in (base, *inner_terms) if t]) or "0"
        nrows = " * ".join(f"n{d}" for d in range(k - 1))
        body.append(f"for task in {loop}((({nrows}) + rows - 1) // rows * nblocks):")
        body.append("    tile = task // nblocks")
        body.append("    first = tile * rows")
        body.append("    lo = (task - tile * nblocks) * block")
        body.append(f"    hi = min(lo + block, n{k - 1})")
        staged = [] if guard else staged_operands(plan)
        body += [f"    {op.name}_buf = np.empty(block, dtype=np.{DTYPES[op.dtype].storage})"
                 for op in staged]
        if guard:
            body.append("    skip = int32(0)")
        body.append("    r = first")   # the first row's index; later rows count on
        for d in range(k - 2, 0, -1):
            body.append(f"    i{d} = r % n{d}")
            body.append(f"    r = r // n{d}")
        body.append("    i0 = r")
        body.append(f"    for row in range(first, min(first + rows, {nrows})):")
        for op in list(plan.loads) + [s for s in plan.stores if s.shares is None]:
            terms = kernel_body.stride_terms(op, idx)[:]
            outer = [t for t in terms if not t.startswith(f"i{k - 1}")]
            if outer and any(op.strides[:-1]):
                body.append(f"        {op.name}_row = {' + '.join(outer)}")
        if guard:
            body += ["        " + line for line in _guarded_loop(plan, offset, f"i{k - 1}")]
            return _finish(plan, lines, body + _next_row(k))
        i = f"i{k - 1}"
        names = tuple(op.name for op in staged)
        for op in staged:   # the strided loads of this row, gathered first
            if not isinstance(op, Store):
                body.append(f"        for {i} in range(lo, hi):")
                body.append(f"            {kernel_body.staged_ref(op, i)} = {op.name}[{offset(op)}]")
        body.append(f"        for {i} in range(lo, hi):")
        body += ["            " + line
                 for line in _element_lines(plan, offset, near=False, staged=names, index=i)]
        for op in staged:   # then the strided stores scattered
            if isinstance(op, Store):
                body.append(f"        for {i} in range(lo, hi):")
                body.append(f"            {op.name}[{offset(op)}] = {kernel_body.staged_ref(op, i)}")
        return _finish(plan, lines, body + _next_row(k))
    body += [inner + line for line in _element_lines(plan, offset, near=False)]
    return _finish(plan, lines, body)


def _next_row(k: int) -> list[str]:
    """The row loop's last lines: the next row's index (i0 .. i{k-2}), counted on with a
    carry, not divided out of the row number per row (three integer divisions a row made
    RoPE's two 16-wide cat parts at Mistral's size 3x slower than the kernel without them)."""
    indent = "        "
    lines = [f"{indent}i{k - 2} += 1"]
    for d in range(k - 2, 0, -1):
        lines.append(f"{indent}if i{d} == n{d}:")
        indent += "    "
        lines += [f"{indent}i{d} = 0", f"{indent}i{d - 1} += 1"]
    return lines


def _finish(plan: Plan, lines: list[str], body: list[str]) -> str:
    for name in dict.fromkeys(kernel_body.pointer_name(s) for s in plan.stores):
        body.append(f"rt.keep({name})")   # the stores are the kernel's effect: keep them
    body.append("return zero_div")
    return "\n".join(lines + ["    " + line for line in body])


def _element_lines(plan: Plan, offset, near: bool, staged: tuple = (),
                   index: str = "") -> list[str]:
    """One element's loads, values, division check and stores (`staged`: operands read or
    written through their row buffers, at loop variable `index`)."""
    lines = kernel_body.body(plan, CPU, offset, invariant=False, near=near, staged=staged,
                             index=index)
    lines += kernel_body.zero_division_lines(plan, invariant=False)
    return lines + kernel_body.store_lines(plan, CPU, offset, staged, index)


#: storage types a staged operand's row buffer may hold
_STAGED_STORAGE = ("float32", "float64", "uint16")


def staged_operands(plan: Plan) -> list:
    """The operands strided along the inner dim that a tiled kernel with math per element
    moves through row buffers: each row's strided loads are gathered first and its strided
    stores scattered after, so the loop computing the values reads and writes unit-stride
    memory and LLVM vectorizes it, math included. Without this, SiLU of a channels_last
    (1, 32, 80, 80) float32 tensor into a row-major one ran scalar: 610 us, eager 193."""
    if not tiled(plan) or not any(not line.invariant and _math_call(line.expr)
                                  for line in plan.lines):
        return []
    return [op for op in kernel_body.memory_operands(plan)
            if op.strides[-1] not in (0, 1) and op.dtype is not torch.bool
            and DTYPES[op.dtype].storage in _STAGED_STORAGE]


def populated_outputs(plan: Plan) -> list[tuple[str, int]]:
    """(address parameter, element size) of the new outputs each task of a one-dim kernel
    faults in ahead of its stores (``rt.populate``): those of POPULATE_BYTES or more, on
    Linux."""
    if not sys.platform.startswith("linux") or len(plan.sizes) != 1:
        return []
    return [(f"{s.name}_addr", s.dtype.itemsize) for s in plan.stores
            if s.into_input is None and s.shares is None and s.strides == (1,)
            and plan.numel * s.dtype.itemsize >= POPULATE_BYTES]


def guarded(plan: Plan) -> bool:
    """Whether the kernel runs blocks with the small-argument calls: it has some, and it
    writes no input (a redone block must read what its first pass read)."""
    return bool(kernel_body.near_arguments(plan)) and all(
        s.into_input is None and s.shares is None for s in plan.stores)


#: float32 NEAR_LIMIT's bits (rt.magnitude_bits of an argument at or above it)
_FAR_BITS = int(np.float32(NEAR_LIMIT).view(np.int32))


def _guarded_loop(plan: Plan, offset, index: str) -> list[str]:
    """The loop over `index` in range(lo, hi): with the small-argument calls, keeping the
    largest argument's magnitude bits (``far``), and again with the exact calls if one was
    out of their range, or at once if one was in the block before (``skip``)."""
    args = [f"rt.magnitude_bits({a})" for a in kernel_body.near_arguments(plan)]
    largest = args[0] if len(args) == 1 else f"max({', '.join(args)})"
    lines = ["far = skip", f"if far < {_FAR_BITS}:", f"    for {index} in range(lo, hi):"]
    lines += ["        " + line for line in _element_lines(plan, offset, near=True)]
    lines += [f"        far = max(far, {largest})", f"if far >= {_FAR_BITS}:",
              "    skip = int32(0)", f"    for {index} in range(lo, hi):"]
    lines += ["        " + line for line in _element_lines(plan, offset, near=False)]
    return lines + [f"        skip = max(skip, {largest})"]


def render_module(plan: Plan) -> str:
    """The kernel module: serial and parallel variants of one kernel."""
    header = _HEADER % (NJIT_OPTIONS,)
    serial = render_kernel(plan, "kernel_serial", "range")
    parallel = render_kernel(plan, "kernel_parallel", "prange")
    return f"{header}\n\n{serial}\n\n\n{parallel}\n"


#: mathlib calls that cost about one simple op (conversions and roundings of half dtypes)
_CHEAP_CALLS = ("_to_", "round_f16", "round_bf16")


def _math_call(expr: str) -> bool:
    return "m." in expr and not any(cheap in expr for cheap in _CHEAP_CALLS)


def work_per_element(plan: Plan) -> float:
    """A rough cost in simple-op units: transcendental calls weigh more."""
    cost = 1.0 + 0.5 * (len(plan.loads) + len(plan.stores))
    for line in plan.lines:
        if line.invariant:
            continue
        cost += 8.0 if _math_call(line.expr) else 1.0
    return cost


def runs_parallel(numel: int, work: float) -> bool:
    """Whether a kernel over `numel` elements costing `work` (simple-op units) is worth a
    parallel launch: enough work, enough elements, and more than one thread."""
    from primtrace.executors.numba.backends import threads as nthreading
    if numel < MIN_PARALLEL_ELEMENTS or work < PARALLEL_WORK:
        return False
    return not (nthreading.configure() and nthreading.num_threads() <= 1)


def choose_variant(plan: Plan) -> str:
    parallel = runs_parallel(plan.numel, plan.numel * work_per_element(plan))
    return "kernel_parallel" if parallel else "kernel_serial"


def _njit(parallel: bool):
    from numba import njit

    def make(fn):
        return njit(parallel=parallel, **NJIT_OPTIONS)(fn)
    return make


def tiled(plan: Plan) -> bool:
    """Whether an operand is read or written with a stride along the innermost dim."""
    return len(plan.sizes) > 1 and any(
        op.strides[-1] not in (0, 1) for op in kernel_body.memory_operands(plan))


def blocks(plan: Plan, variant: str) -> tuple[int, int, int]:
    """(nblocks, block, rows): a task covers `rows` rows and one of `nblocks` blocks of the
    innermost dim; tiles where an operand is strided there, else whole rows split so that
    tasks outnumber threads."""
    return blocks_for(plan.sizes, tiled(plan), variant)


def blocks_for(sizes: tuple, is_tiled: bool, variant: str) -> tuple[int, int, int]:
    """:func:`blocks` of these sizes (a launcher over symbolic sizes calls it per call: the
    blocks must cover the inner dim's size at run time)."""
    inner = sizes[-1]
    rows = math.prod(sizes[:-1])
    if is_tiled:
        return -(-inner // TILE_COLS), TILE_COLS, TILE_ROWS
    if variant == "kernel_serial":   # one task: the rows count on without a division
        return 1, max(inner, 1), max(rows, 1)
    from primtrace.executors.numba.backends import threads as nthreading
    wanted = 8 * nthreading.num_threads()
    nblocks = max(1, min(-(-inner // BLOCK), -(-wanted // max(rows, 1))))
    # whole rows: about `wanted` tasks of several rows each (a task divides once)
    return nblocks, -(-inner // nblocks), max(1, rows // wanted) if nblocks == 1 else 1


def launcher_source(plan: Plan, region, variant, fn_name: str,
                    into: dict | None = None) -> tuple[str, dict]:
    """Python source of the launcher and the globals it needs; `into` maps new outputs to
    the dead inputs whose memory they take (:func:`reusable_inputs`). A plan in parts
    (a split loop) calls one kernel per part, ``kernel<k>``, with `variant` a list."""
    nin = len(region.inputs)
    args = [f"i{j}" for j in range(nin)]
    env = {"torch": torch, "empty_strided": torch.empty_strided, "huge_pages": huge_pages,
           "cpu_device": torch.device("cpu")}   # an object: a device string is parsed per call
    lines = [f"def {fn_name}({', '.join(args)}):"]
    lines += launch.lazy_bit_lines(region, env)
    lines += launch.alias_check_lines(plan, region, env)
    addresses = {a.written for a in plan.aliases} | {a.other for a in plan.aliases}
    for s in plan.stores:
        if s.into_input is None:
            p = region.outputs[s.output]
            dt = f"torch.{dtype_name(p.dtype)}"
            alloc = (f"empty_strided({shape_text(p.shape, region)}, {tuple(p.stride())!r}, dtype={dt}, "
                     f"device=cpu_device)")
            if advised(plan.numel * p.dtype.itemsize):
                alloc = f"huge_pages({alloc})"
            lines.append(launch.output_line(s.output, alloc, into or {}))
    if plan.parts:
        for k, (part, part_variant) in enumerate(zip(plan.parts, variant)):
            lines += _call_lines(part, region, part_variant, f"kernel{k}", env, addresses)
    else:
        lines += _call_lines(plan, region, variant, "kernel", env, addresses)
    lines.append(f"    return {launch.returns_text(plan)}")
    return "\n".join(lines), env


def _call_lines(plan: Plan, region, variant: str, kernel: str, env: dict,
                addresses: set) -> list[str]:
    """The launcher's lines calling `kernel` on `plan`'s operands (none for no elements)."""
    if plan.numel == 0:
        return []
    lines = []
    call = [size_text(n, region) for n in plan.sizes]
    if plan.symbolic:   # the variant and blocks for this call's sizes
        lines.append(f"    variant = variant_for({' * '.join(call)})")
        lines.append(f"    {kernel} = kernels(variant)")
    if len(plan.sizes) > 1 and plan.symbolic:
        env["blocks_for"] = blocks_for
        lines.append(f"    nb, bl, rw = blocks_for(({', '.join(call)},), {tiled(plan)}, "
                     "variant)")
        call += ["nb", "bl", "rw"]
    elif len(plan.sizes) > 1:
        call += [str(x) for x in blocks(plan, variant)]
    for op in kernel_body.memory_operands(plan):
        j = op.into_input if isinstance(op, Store) else op.index
        if j in addresses:
            address = f"a{j}"   # read by the overlap check already
        else:
            address = f"{f'o{op.output}' if j is None else f'i{j}'}.data_ptr()"
        call.append(address + (f" + {op.offset * op.dtype.itemsize}" if op.offset else ""))
        call += [str(v) for _, v in kernel_body.runtime_strides(op)]
    call += launch.scalar_args(plan.scalars, region, env, kernel)
    lines.append(f"    if {kernel}({', '.join(call)}):")
    lines.append('        raise RuntimeError("ZeroDivisionError")')
    return lines


def compile_region(region, fn_name: str = "numba_fusion", plan: Plan | None = None,
                   into: dict | None = None):
    """The callable running `region` on CPU tensors (`plan`: its plan for the CPU backend,
    made here if not given; `into`: new outputs written into dead inputs, see
    :func:`reusable_inputs`); carries ``.source`` and ``.kernel``."""
    plan = plan or analyze(region, CPU)
    if into:
        plan = launch.sharing(plan, into)
    env_kernels, sources, variants = {}, [], []
    for k, part in enumerate(plan.parts or [plan]):
        module_source = render_module(part)
        variant = choose_variant(part) if part.numel > 0 else "kernel_serial"
        name = f"kernel{k}" if plan.parts else "kernel"
        if part.numel > 0:
            key, module = kernel_cache.load_module(module_source, "cpu")
            env_kernels[name] = kernel_cache.compiled(
                key, module, variant, _njit(variant == "kernel_parallel"))
            if part.symbolic:
                env_kernels["variant_for"], env_kernels["kernels"] = _variants(
                    part, key, module, variant, env_kernels[name])
        sources.append(module_source)
        variants.append(variant)
    launcher, env = launcher_source(plan, region, variants if plan.parts else variants[0],
                                    fn_name, into)
    env.update(env_kernels)
    code = compile(launcher, f"<primtrace {fn_name}>", "exec")
    exec(code, env)
    fn = env[fn_name]
    fn.source = describe(plan, region, launcher, "\n\n".join(sources), ", ".join(variants))
    fn.plan = plan
    fn.variant = ", ".join(variants)
    fn.kernel = env.get("kernel", env.get("kernel0"))
    fn.launcher = launcher
    fn.reusable = {} if into else reusable_inputs(plan)
    fn.writing_into = lambda into: compile_region(region, fn_name, plan, into)
    return fn


def reusable_inputs(plan: Plan) -> dict[int, list[int]]:
    """New output -> the inputs whose memory it could take when they die at the node: none
    for a kernel that writes an input in place or redoes blocks (it reads again what it
    read), or that runs no kernel (its outputs are empty)."""
    if plan.numel == 0 or plan.parts or plan.aliases or guarded(plan) or any(
            s.into_input is not None for s in plan.stores):
        return {}
    return {s.output: launch.same_index_inputs(plan, s) for s in plan.stores}


def _variants(plan: Plan, key, module, variant: str, kernel):
    """(variant_for(numel), kernels(variant)) for a launcher over symbolic sizes: the loop
    (serial or parallel) chosen per call, the other one compiled when a call first needs
    it."""
    work = work_per_element(plan)
    compiled = {variant: kernel}

    def variant_for(numel: int) -> str:
        return "kernel_parallel" if runs_parallel(numel, numel * work) else "kernel_serial"

    def kernels(name: str):
        if name not in compiled:
            compiled[name] = kernel_cache.compiled(key, module, name,
                                                   _njit(name == "kernel_parallel"))
        return compiled[name]
    return variant_for, kernels


def describe(plan, region, launcher, module_source, variant) -> str:
    """What ``.source`` shows: the operand map, the launcher, and the kernel module."""
    coalesced = ", ".join(str(list(part.sizes)) for part in plan.parts or [plan])
    head = [f"# {len(region.nodes)} prims fused; iteration shape {list(plan.shape)}, "
            f"coalesced to {coalesced}" + (f" in {len(plan.parts)} parts" if plan.parts else "")
            + f"; runs {variant}"]
    head += [f"#   {line}" for line in plan.signature_text().splitlines()]
    return "\n".join(head) + "\n" + launcher + "\n\n" + module_source
