"""The kernel body both backends render from a plan: per-element lines, stores, offsets.

The backends (``backends/cpu.py``, ``backends/cuda.py``) wrap these lines in their own
loops and spell loads, stores and half roundings their own way (``Backend``).
"""
from __future__ import annotations

from primtrace.executors.numba.ops import Backend
from primtrace.executors.numba.plan import Plan, Store


def stride_terms(op, index_vars: list[str]) -> list[str]:
    """The terms of an operand's element offset: ``i1`` for a unit inner stride,
    ``i0 * in0_s0`` for a runtime stride, nothing for a stride of 0."""
    k = len(op.strides)
    terms = []
    for d, s in enumerate(op.strides):
        if s == 0:
            continue
        if d == k - 1 and s == 1:
            terms.append(index_vars[d])
        else:
            terms.append(f"{index_vars[d]} * {op.name}_s{d}")
    return terms


def runtime_strides(op) -> list[tuple[str, int]]:
    """(parameter name, value) of the strides the kernel takes as arguments."""
    k = len(op.strides)
    return [(f"{op.name}_s{d}", s) for d, s in enumerate(op.strides)
            if s != 0 and not (d == k - 1 and s == 1)]


def memory_operands(plan: Plan) -> list:
    """Loads, then stores that do not share a load's pointer: one pointer argument each."""
    return list(plan.loads) + [s for s in plan.stores if s.shares is None]


def pointer_name(op) -> str:
    return op.shares.name if isinstance(op, Store) and op.shares is not None else op.name


def staged_ref(op, index: str) -> str:
    """The element of a staged operand's row buffer (cpu.py's transposed tiles)."""
    return f"{op.name}_buf[{index} - lo]"


def body(plan: Plan, backend: Backend, offset_of, invariant: bool, near: bool = False,
         staged: tuple = (), index: str = "") -> list[str]:
    """The lines computing the values (invariant ones, or per-element ones); with `near`,
    the cheaper small-argument calls where a line has one (see :func:`near_arguments`);
    loads named in `staged` read their row buffer at loop variable `index`."""
    out = []
    for line in plan.lines:
        if line.invariant != invariant:
            continue
        if near and line.near is not None:
            expr = line.near[0]
        elif line.load is not None and line.load.name in staged:
            expr = backend.load(line.load.dtype, staged_ref(line.load, index))
        elif line.load is not None:
            ref = f"{line.load.name}[{offset_of(line.load)}]"
            expr = backend.load(line.load.dtype, ref, strided=line.load.strides[-1] not in (0, 1))
        else:
            expr = line.expr
        comment = f"  # {line.comment}" if line.comment else ""
        out.append(f"{line.var} = {expr}{comment}")
    return out


def near_arguments(plan: Plan) -> list[str]:
    """The registers whose magnitude decides whether the ``near`` expressions are exact
    (below ``vmath.trig.NEAR_LIMIT``)."""
    return [line.near[1] for line in plan.lines if line.near is not None and not line.invariant]


def store_lines(plan: Plan, backend: Backend, offset_of, staged: tuple = (),
                index: str = "") -> list[str]:
    lines = []
    for s in plan.stores:
        ref = (staged_ref(s, index) if s.shares is None and s.name in staged
               else f"{pointer_name(s)}[{offset_of(s.shares or s)}]")
        lines.append(f"{ref} = {backend.store(s.dtype, s.value)}")
    return lines


def zero_division_lines(plan: Plan, invariant: bool) -> list[str]:
    """One counting statement (a parallel loop allows a single reduction update)."""
    tests = [f"({d} == 0)" for d, inv in plan.zero_division if inv == invariant]
    return [f"zero_div += {' | '.join(tests)}"] if tests else []
