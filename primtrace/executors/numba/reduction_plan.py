"""From a region with reductions to the parts of one row kernel (``row_kernel.py``).

A *row region* reduces over the same trailing dims ``K`` of one iteration shape
``S = R + K`` (all its reductions read values of shape ``S``); every other value has shape
``S``, a row shape (``R``, or ``R`` with ones for the reduced dims: keepdim), or reaches
those through ``broadcast_in_dim``. A reduced value comes back into ``S`` only through a
broadcast over the reduced dims (softmax's ``x - max``): the *row pattern*.

The kernel runs over rows (parallel), and per row over ``K`` in *passes*: a reduction
whose input needs the results of ``n`` earlier reductions (softmax: ``sum(exp(x - max))``
needs ``max``) accumulates in pass ``n``; var takes two (mean, then squared deviations);
a last pass computes the full-shape outputs and stores them. Each pass recomputes from
loads the elementwise values it needs (cheap: the row is in cache; no buffer), so the
planner memoizes per-element values per pass. Values that do not vary along ``K`` (the
reduced results and what is computed from them, per-row loads) are *row lines*, placed
before the first pass that can compute them (their *stage*). Everything else is the
elementwise planner's (``plan.py``): loads with conversion, lowered prims, index maps for
broadcasting, half dtypes in float32 registers, hoisted invariants.

Accumulation (``backends/accumulate.py``): float sums in float64 (float64 values: blocks
summed with compensation), integer sums and products in int64 (wrapping as eager), max/min
NaN-propagating in the value's register, var two-pass in float64.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import torch

from primtrace.executors.numba.plan import Line, Load, NotFusible, Plan, Store, _Analyzer, \
    _iter_strides, dtype_text, node_args
from primtrace.executors.numba.registers import DTYPES
from primtrace.executors.numba.symbolic_sizes import hint_numel, is_one, is_symbolic
from primtrace.ir.proxy import TensorProxy
from primtrace.ir.symbol import SymbolKind

REDUCTIONS = frozenset({"sum", "prod", "amax", "amin", "var"})
#: chunks of rows a kernel with column sums splits its rows into, each accumulating its own
#: float64 partial sums (then added in chunk order): a fixed count, so the result does not
#: depend on the number of threads
COLUMN_CHUNKS = 32
_VARS = re.compile(r"\b(?:v|x|acc)\d+\b")


def is_reduction(node) -> bool:
    """A prim reducing elements (a sum over size-1 dims only reduces nothing: `is_trivial`)."""
    return (node.symbol.kind is SymbolKind.PRIM and node.symbol.name in REDUCTIONS
            and not is_trivial(node))


def is_trivial(node) -> bool:
    """A float sum over size-1 dims alone (a broadcast's gradient: the sum over the kept dim
    of a keepdim mean), with its input's dtype: elementwise, ``x + 0`` (eager's sum starts at
    +0, so -0.0 becomes +0.0). It fuses as a view would, so a row region need not split at
    it (RMSNorm's backward was three kernels)."""
    if node.symbol.kind is not SymbolKind.PRIM or node.symbol.name != "sum":
        return False
    a, dims, _ = reduction_args(node)
    out = node.output_proxies[0] if node.output_proxies else None
    return (isinstance(a, TensorProxy) and isinstance(dims, tuple) and bool(dims)
            and isinstance(out, TensorProxy) and out.dtype is a.dtype
            and a.dtype.is_floating_point and not a.dtype.is_complex
            and all(0 <= d < a.ndim and is_one(a.shape[d]) for d in dims))


def reduction_args(node):
    """(input, dims, correction or None) of a reduction node."""
    args = list(node.args)
    a, dims = args[0], args[1] if len(args) > 1 else node.kwargs.get("dims")
    correction = node.kwargs.get("correction", args[2] if len(args) > 2 else None)
    return a, dims, correction


def is_column(node) -> bool:
    """A float sum over leading dims that keeps some trailing ones (a norm's weight gradient,
    a bias's: ``sum(g * xhat, (0,))``): a row kernel accumulates it across its rows, each
    chunk of rows into its own float64 partial sums (``RowPlan.columns``), on the CPU."""
    if not is_reduction(node) or node.symbol.name != "sum":
        return False
    a, dims, _ = reduction_args(node)
    d = DTYPES.get(getattr(a, "dtype", None))
    return (isinstance(a, TensorProxy) and isinstance(dims, tuple) and 0 < len(dims) < a.ndim
            and dims == tuple(range(len(dims))) and d is not None and d.kind in "fh")


def structure(reductions) -> tuple[tuple, int] | None:
    """(iteration shape S, number of row dims) of a row region with these reductions, or None:
    the row reductions (over trailing dims) share one input shape and dims; the column ones
    (`is_column`) read S and reduce exactly its row dims (alone, they decide both)."""
    rows = [n for n in reductions if not is_column(n)]
    cols = [n for n in reductions if is_column(n)]
    if rows:
        inputs = {tuple(reduction_args(n)[0].shape) for n in rows}
        dims = {reduction_args(n)[1] for n in rows}
        if len(inputs) != 1 or len(dims) != 1:
            return None
        shape = inputs.pop()
        nr = len(shape) - len(dims.pop())
    elif cols:
        shape, nr = tuple(reduction_args(cols[0])[0].shape), len(reduction_args(cols[0])[1])
    else:
        return None
    for n in cols:
        a, dims, _ = reduction_args(n)
        if tuple(a.shape) != shape or dims != tuple(range(nr)):
            return None
    return shape, nr


def reduction_fusible(node) -> bool:
    """Whether a reduction node can be one of a row kernel's: over a nonempty set of
    trailing dims of a real (not bool) tensor; var on floats with a number correction."""
    a, dims, correction = reduction_args(node)
    if not isinstance(a, TensorProxy) or not isinstance(dims, tuple) or not dims:
        return False
    if dims != tuple(range(a.ndim - len(dims), a.ndim)):
        return False
    d = DTYPES.get(a.dtype)
    if d is None or d.kind == "b":
        return False
    if node.symbol.name == "var":
        return d.kind in "fh" and type(correction) in (int, float)
    return True


def row_shapes(shape, ndims: int) -> tuple[tuple, tuple]:
    """(R, R with ones for the reduced dims) of iteration shape `shape` reducing its last
    `ndims` dims."""
    rows = tuple(shape[:len(shape) - ndims])
    return rows, rows + (1,) * ndims


@dataclass
class Accumulator:
    """One running reduction of a pass: ``name`` holds it after the pass (the renderer
    defines it); ``value`` is the per-element register it takes in."""
    name: str
    kind: str          # "sum", "prod", "max", "min"
    value: str
    reg: str           # the register type of the values (float sums: of the block sums)


@dataclass
class Scratch:
    """A per-thread row buffer: an expensive per-element value (one calling a math
    function) computed in pass ``stored_in`` is kept there for later passes, which load it
    instead of computing it again (softmax's exp: once, as eager)."""
    name: str
    reg: str
    value: str
    stored_in: int


@dataclass
class RowPlan(Plan):
    nrows_dims: int = 0
    passes: list = field(default_factory=list)       # per pass: element Lines
    accumulators: list = field(default_factory=list)  # per pass: Accumulators
    row_lines: list = field(default_factory=list)    # (stage, Line), stage = pass it precedes
    scratch: list = field(default_factory=list)      # Scratch buffers
    contiguous: set = field(default_factory=set)     # loads of a contiguous copy
    columns: list = field(default_factory=list)      # Stores of column sums (float64 values)
    addends: dict = field(default_factory=dict)      # column name -> its addend's register
    nchunks: int = 1          # chunks of rows, each with its own partial column sums
    row_sizes: tuple = ()     # after layout: coalesced row dims, outermost first
    k_sizes: tuple = ()       # ... and reduced dims
    nrows: int = 0
    nk: int = 0

    def is_row_store(self, store) -> bool:
        return not any(store.strides[self.nrows_dims:])


class _Dense:
    """A tensor proxy seen with contiguous strides (the copy the launcher makes of an
    input strided along the reduced dims, as eager's softmax and norms do)."""

    def __init__(self, p):
        self.shape = tuple(p.shape)

    def stride(self):
        from primtrace.ir.strides import contiguous_strides
        return contiguous_strides(self.shape)


def _levels(region) -> dict:
    """Value name -> number of passes before it exists (a reduction result: its last
    accumulating pass + 1)."""
    level: dict = {}
    for n in region.nodes:
        base = max((level.get(p.name, 0) for p in n.inputs), default=0)
        if is_reduction(n) and not is_column(n):   # a column sum: after every row, stored
            base += 2 if n.symbol.name == "var" else 1
        for p in n.output_proxies:
            level[p.name] = base
    return level


class _RowAnalyzer(_Analyzer):
    """The elementwise planner, with values placed by pass and reductions accumulated."""

    def __init__(self, region, backend):
        reductions = [n for n in region.nodes if is_reduction(n)]
        found = structure(reductions)
        if found is None or not all(is_column(n) or reduction_fusible(n) for n in reductions):
            raise NotFusible("reductions over different shapes or dims")
        if backend.name == "cuda" and any(map(is_column, reductions)):
            raise NotFusible("column sums (CPU row kernels only)")
        shape, ndims = found[0], len(found[0]) - found[1]
        self.region, self.backend = region, backend
        self.producer = {p.name: n for n in region.nodes for p in n.output_proxies}
        self.input_pos = {p.name: i for i, p in enumerate(region.inputs)}
        if any(n.symbol.name == "copy_to" for n in region.nodes):
            raise NotFusible("in-place writes in a row region")
        allowed = {shape, *row_shapes(shape, ndims), shape[len(shape) - ndims:]}
        for p in region.outputs:
            if not isinstance(p, TensorProxy) or tuple(p.shape) not in allowed:
                raise NotFusible(f"output {p.name} of shape {getattr(p, 'shape', None)}")
        devices = {p.device for p in region.outputs}
        if len(devices) != 1:
            raise NotFusible(f"outputs on several devices {devices}")
        self.plan = RowPlan(shape=shape, device=devices.pop(), nrows_dims=len(shape) - ndims)
        self.memo, self.converted, self.consts = {}, {}, {}
        self.temps = 0
        self.half_values, self.half_held = set(), set()
        from primtrace.executors.numba.plan import _rounded_to_half
        self.rounded_to_half = _rounded_to_half(region)
        self.level = _levels(region)
        self.npasses = max(self.level.values(), default=0) + 1   # the last: full outputs
        self.plan.passes = [[] for _ in range(self.npasses)]
        self.plan.accumulators = [[] for _ in range(self.npasses)]
        self.placed: dict = {}      # var -> ("row", stage) | ("pass", k); invariants absent
        self.pass_ = 0
        self.loads: dict = {}      # (input position, strides) -> Load
        self.accs: dict = {}       # (pass, kind, value, reg) -> accumulator name
        self.expensive: set = set()   # per-element vars that call a math function
        self.first: dict = {}      # (name, imap) -> (pass, memo entry) of a per-element value
        self._last: Line | None = None

    def slice(self, args, out_dtype, imap):
        raise NotFusible("a slice or cat in a row kernel (elementwise kernels only)")

    cat = slice

    # placement
    def _place(self, line: Line, expr: str) -> None:
        """A line goes to the current pass if it reads a per-element value of it, else to
        the row lines at the stage its operands are ready (a row value computed at an
        element index costs once per row, not per element)."""
        stage, per_element = 0, False
        for name in _VARS.findall(expr):
            kind, k = self.placed.get(name, ("inv", 0))
            if kind == "pass":
                per_element = True
            elif kind == "row":
                stage = max(stage, k)
        if per_element:
            self.placed[line.var] = ("pass", self.pass_)
            self.plan.passes[self.pass_].append(line)
            if "m." in expr or any(v in self.expensive for v in _VARS.findall(expr)):
                self.expensive.add(line.var)
        else:
            self.placed[line.var] = ("row", stage)
            self.plan.row_lines.append((stage, line))

    def emit(self, expr, invariant, comment="", var=None):
        var = var or self.fresh()
        line = Line(var, expr, invariant, comment)
        self._last = line
        if invariant:
            self.plan.lines.append(line)
        else:
            self._place(line, expr)
        return var

    def emit_rounded(self, dtype, raw, invariant, comment):
        var = self.emit(self.backend.round_half(dtype, raw), invariant, comment)
        self._last.rounds = (dtype, raw)
        return var

    def value(self, p, imap):
        """Per-element values are memoized per pass (each pass recomputes what it needs)."""
        nr = self.plan.nrows_dims
        per_element = any(d is not None and d >= nr for d in imap)
        key = (p.name, imap, self.pass_ if per_element else None)
        if key not in self.memo:
            earlier = self.first.get((p.name, imap)) if per_element else None
            if self.backend.name == "cuda":   # no scratch rows there: recomputed
                earlier = None
            if earlier is not None and earlier[0] < self.pass_ and earlier[1][0] in \
                    self.expensive and DTYPES[earlier[1][1]].reg in ("float32", "float64"):
                self.memo[key] = self._from_scratch(earlier)
            else:
                self.memo[key] = self._compute(p, imap)
                if per_element:
                    self.first.setdefault((p.name, imap), (self.pass_, self.memo[key]))
        return self.memo[key]

    def _from_scratch(self, earlier):
        stored_in, (var, dtype, inv) = earlier
        scratch = next((s for s in self.plan.scratch if s.value == var), None)
        if scratch is None:
            scratch = Scratch(f"sc{len(self.plan.scratch)}", DTYPES[dtype].reg, var, stored_in)
            self.plan.scratch.append(scratch)
        out = self.fresh()
        line = Line(out, f"{scratch.name}[SCRATCH]", False, "kept from pass "
                    f"{stored_in}")
        self.placed[out] = ("pass", self.pass_)
        self.plan.passes[self.pass_].append(line)
        if dtype is torch.float16 or var in self.half_values:
            self.half_values.add(out)
        if var in self.half_held:
            self.half_held.add(out)
        return out, dtype, inv

    def _input(self, p, imap):
        if not isinstance(p, TensorProxy) or DTYPES.get(p.dtype) is None:
            raise NotFusible(f"input {p.name}")
        if p.ndim == 0 and p.device.type == "cpu":
            return super()._input(p, imap)
        if p.device != self.plan.device:
            raise NotFusible(f"{p.name} on {p.device}, region on {self.plan.device}")
        pos = self.input_pos[p.name]
        strides = _iter_strides(p, imap, self.plan.shape)
        copy = strides[-1] not in (0, 1) and self.plan.nrows_dims < len(strides)
        if copy:   # strided along the inner loop: the launcher passes a contiguous copy
            strides = _iter_strides(_Dense(p), imap, self.plan.shape)
        load = self.loads.get((pos, strides, copy))
        if load is None:
            load = Load(f"in{len(self.plan.loads)}", pos, p, strides)
            self.loads[pos, strides, copy] = load
            self.plan.loads.append(load)
            if copy:
                self.plan.contiguous.add(load.name)
            self.plan.summary.append(f"{load.name} = {p.name}: {dtype_text(p)}"
                                     + ("" if imap == self.identity(p.shape)
                                        else f" (broadcast, strides {list(strides)})"))
        var = f"x{self.temps}"
        self.temps += 1
        if p.dtype is torch.float16:
            self.half_values.add(var)
        if DTYPES[p.dtype].kind == "h":
            self.half_held.add(var)
        line = Line(var, "", not any(strides), f"load {str(p.dtype)[6:]}", load=load)
        if line.invariant:
            self.plan.lines.append(line)
        elif any(strides[self.plan.nrows_dims:]):
            self.placed[var] = ("pass", self.pass_)
            self.plan.passes[self.pass_].append(line)
        else:
            self.placed[var] = ("row", 0)
            self.plan.row_lines.append((0, line))
        return var, p.dtype, line.invariant

    # reductions
    def _node(self, node, p, imap):
        if not is_reduction(node):
            return super()._node(node, p, imap)
        if is_column(node):
            raise NotFusible("a column sum used in its own region")
        rows, _ = row_shapes(self.plan.shape, len(self.plan.shape) - self.plan.nrows_dims)
        if tuple(p.shape) != rows or imap != self.identity(rows):
            raise NotFusible("a reduced value used along the reduced dims")
        return self.reduction(node, p)

    def _accumulate(self, pass_, kind, value, reg) -> str:
        key = (pass_, kind, value, reg)
        if key not in self.accs:
            name = f"acc{len(self.accs)}"
            self.accs[key] = name
            self.plan.accumulators[pass_].append(Accumulator(name, kind, value, reg))
            self.placed[name] = ("row", pass_ + 1)
        return self.accs[key]

    def reduction(self, node, p):
        a, dims, correction = reduction_args(node)
        name, dtype = node.symbol.name, a.dtype
        d = DTYPES[dtype]
        level = self.level[p.name]
        first = level - (2 if name == "var" else 1)
        saved = self.pass_
        self.pass_ = first
        try:
            x, _, _ = self.value(a, self.identity(self.plan.shape))
            if name == "var":
                return self._var(a, x, correction, p, first)
            if name == "sum" and d.kind in "fh":   # blocked in the register, total in float64
                return self._result(self._accumulate(first, "sum", x, d.reg), dtype, name)
            if name in ("sum", "prod"):
                reg = "float64" if d.kind in "fh" else "int64"
                value = self._materialize(x if d.reg == reg else f"{reg}({x})", x)
                return self._result(self._accumulate(first, name, value, reg), dtype, name)
            acc = self._accumulate(first, "max" if name == "amax" else "min", x, d.reg)
            if d.kind == "h":
                self.half_held.add(acc)
                if dtype is torch.float16:
                    self.half_values.add(acc)
            return acc, dtype, False
        finally:
            self.pass_ = saved

    def _column(self, k, out):
        """Output `k`, a column sum: its float64 addend computed in the last pass."""
        a = reduction_args(self.producer[out.name])[0]
        x, _, _ = self.value(a, self.identity(self.plan.shape))
        self.plan.addends[f"out{k}"] = x
        if DTYPES[a.dtype].reg != "float64":
            x = self.emit(f"float64({x})", False, "a column sum's addend")
        nr = self.plan.nrows_dims
        strides = (0,) * nr + tuple(out.stride())
        self.plan.columns.append(Store(f"out{k}", k, out.dtype, strides, x))
        self.plan.summary.append(f"out{k} = {out.name}: {dtype_text(out)} (column sum)")

    def _materialize(self, expr, x) -> str:
        """`expr` (a conversion of register `x`) as a line of the pass, or `x` itself."""
        if expr == x:
            return x
        return self.emit(expr, False, "accumulated as " + expr.split("(")[0])

    def _result(self, acc, dtype, comment):
        d = DTYPES[dtype]
        if d.kind == "h":
            return self.emit_rounded(dtype, f"float32({acc})", False, comment), dtype, False
        return self.emit(f"{d.reg}({acc})", False, comment), dtype, False

    def _var(self, a, x, correction, p, first):
        count = float(math.prod(a.shape[self.plan.nrows_dims:]))
        em = self.emitter([True])
        n = self.number(count, torch.float64, em)
        c = self.number(float(correction), torch.float64, em)
        total = self._accumulate(first, "sum", x, DTYPES[a.dtype].reg)
        mean = self.emit(f"{total} / {n}", False, "mean")
        self.pass_ = first + 1
        y, _, _ = self.value(a, self.identity(self.plan.shape))
        y64 = y if DTYPES[a.dtype].reg == "float64" else f"float64({y})"
        dev = self.emit(f"{y64} - {mean}", False, "deviation")
        sq = self.emit(f"{dev} * {dev}", False, "squared deviation")
        m2 = self._accumulate(first + 1, "sum", sq, "float64")
        var = self.emit(f"{m2} / max({n} - {c}, float64(0))", False, "var: over max(N - c, 0)")
        return self._result(var, p.dtype, "var")

    # outputs
    def run(self):
        plan = self.plan
        final = self.npasses - 1
        ndims = len(plan.shape) - plan.nrows_dims
        rows, _ = row_shapes(plan.shape, len(plan.shape) - plan.nrows_dims)
        for node in sorted((n for n in self.region.nodes if is_reduction(n) and not is_column(n)),
                           key=lambda n: self.level[n.output_proxies[0].name]):
            self.value(node.output_proxies[0], self.identity(rows))   # passes in order
        for k, out in enumerate(self.region.outputs):
            if self.producer[out.name].symbol.name == "broadcast_in_dim":
                raise NotFusible("a broadcast view leaves the region")
            plan.returns.append(("new", k))
            self.pass_ = final
            if is_column(self.producer[out.name]):
                self._column(k, out)
                continue
            if tuple(out.shape) not in (plan.shape, *row_shapes(plan.shape, ndims)):
                raise NotFusible(f"output {out.name} of the reduced dims' shape")
            imap = self.identity(out.shape)
            var, _, _ = self.value(out, imap)
            strides = _iter_strides(out, imap, plan.shape)
            plan.stores.append(Store(f"out{k}", k, out.dtype, strides, var))
            plan.summary.append(f"out{k} = {out.name}: {dtype_text(out)}")
        if any(not inv or self.backend.name == "cuda" for _, inv in plan.zero_division):
            raise NotFusible("an integer division by a per-element value in a row region")
        _fold_store_roundings(plan)
        plan.numel = hint_numel(plan.shape)
        plan.symbolic = any(is_symbolic(n) for n in plan.shape)
        if plan.columns and plan.symbolic:
            raise NotFusible("column sums over a symbolic number of rows")
        if plan.columns:
            plan.nchunks = max(1, min(math.prod(plan.shape[:plan.nrows_dims]), COLUMN_CHUNKS))
        return plan


def _fold_store_roundings(plan: RowPlan) -> None:
    """plan.fold_store_roundings for the last pass: a value rounded to a half dtype only to
    be stored in it is stored unrounded (the store rounds; RNE is idempotent)."""
    final = plan.passes[-1]
    others = [line.expr for line in plan.lines] + [line.expr for _, line in plan.row_lines]
    others += [a.value for accs in plan.accumulators for a in accs]
    others += [sc.value for sc in plan.scratch] + [c.value for c in plan.columns]
    for line in list(final):
        if line.rounds is None:
            continue
        dtype, raw = line.rounds
        stores = [st for st in plan.stores if st.value == line.var]
        if not stores or any(st.dtype is not dtype for st in stores):
            continue
        used = re.compile(rf"\b{line.var}\b")
        if any(used.search(e) for e in others) or any(
                used.search(o.expr) for o in final if o is not line):
            continue
        for st in stores:
            st.value = raw
        final.remove(line)


def layout(plan: RowPlan) -> None:
    """Coalesce the row dims among themselves and the reduced dims among themselves (size-1
    dims dropped, dims merged where every operand is contiguous across them); the order
    stays: rows outside, the reduced dims inside, the innermost last."""
    operands = list(plan.stores) + list(plan.loads) + list(plan.columns)
    nr = plan.nrows_dims
    groups = []
    for dims in (range(nr), range(nr, len(plan.shape))):
        dims = [d for d in dims if not is_one(plan.shape[d])]
        sizes = [plan.shape[d] for d in dims]
        strides = [[op.strides[d] for d in dims] for op in operands]
        i = len(sizes) - 1
        while i > 0:   # (symbolic sizes stay apart: see plan.layout)
            if not is_symbolic(sizes[i]) and not is_symbolic(sizes[i - 1]) and all(
                    s[i - 1] == s[i] * sizes[i] for s in strides):
                sizes[i - 1] *= sizes[i]
                for s in strides:
                    s[i - 1] = s[i]
                    del s[i]
                del sizes[i]
            i -= 1
        if not sizes:
            sizes, strides = [1], [[0] for _ in operands]
        groups.append((sizes, strides))
    (rsizes, rstrides), (ksizes, kstrides) = groups
    plan.row_sizes, plan.k_sizes = tuple(rsizes), tuple(ksizes)
    plan.sizes = plan.row_sizes + plan.k_sizes
    plan.nrows, plan.nk = hint_numel(rsizes), math.prod(ksizes)   # nrows: speed only
    for op, rs, ks in zip(operands, rstrides, kstrides):
        op.strides = tuple(rs) + tuple(ks)
    plan.nrows_dims = len(rsizes)


def analyze(region, backend) -> RowPlan:
    """The row kernel plan of `region`; raises NotFusible for what it cannot compile."""
    plan = _RowAnalyzer(region, backend).run()
    layout(plan)
    return plan


def has_reduction(nodes) -> bool:
    return any(map(is_reduction, nodes))


def row_group_valid(nodes, leaving_shapes: set, leaving: set = frozenset()) -> bool:
    """Whether `nodes` (topological order, with reductions) can be one row region whose
    values leaving it have `leaving_shapes`: one iteration shape and reduced dims for all
    reductions (column sums over the other dims, read by no node of the group), outputs of
    that shape, a row shape or (column sums) the reduced dims' shape, no in-place writes,
    and a reduced value reaching the iteration shape only through a broadcast over the
    reduced dims (what the partitioner checks cheaply; the planner then decides)."""
    reductions = [n for n in nodes if is_reduction(n)]
    found = structure(reductions)
    if found is None:
        return False
    shape, nr = found
    rows, kept = row_shapes(shape, len(shape) - nr)
    allowed = {shape, rows, kept, shape[nr:]}
    if not leaving_shapes <= allowed:
        return False
    columns = {p.name for n in reductions if is_column(n) for p in n.output_proxies}
    if shape[nr:] not in (shape, rows, kept) and any(
            tuple(p.shape) == shape[nr:] and p.name in leaving and p.name not in columns
            for n in nodes for p in n.output_proxies if isinstance(p, TensorProxy)):
        return False   # a value of the reduced dims' shape leaves only as a column sum
    derived: set = set()
    for n in nodes:
        name = n.symbol.name
        if name == "copy_to" or any(p.name in columns for p in n.inputs):
            return False
        outs = [p for p in n.output_proxies if isinstance(p, TensorProxy)]
        if is_reduction(n):
            if not is_column(n):
                derived.update(p.name for p in outs)
            continue
        if not any(p.name in derived for p in n.inputs):
            continue
        if any(tuple(p.shape) not in allowed for p in outs):
            return False
        if name == "broadcast_in_dim":
            a, _, bdims = node_args(n)
            if tuple(a.shape) not in (rows, kept) or any(
                    d != i for i, d in enumerate(bdims) if not is_one(a.shape[i])):
                return False
        derived.update(p.name for p in outs)
    return True


__all__ = ["REDUCTIONS", "RowPlan", "Accumulator", "analyze", "has_reduction", "is_reduction",
           "reduction_fusible", "reduction_args", "row_shapes", "node_args", "operands",
           "split_strides", "runtime_strides", "element_offset", "element_ref", "row_offset_lines"]


# --- the operand layout both renderers (row_kernel, backends/cuda_rows) index with ---------------
def operands(plan: RowPlan) -> list:
    """Loads, then stores that do not share a load's pointer: one pointer argument each."""
    return list(plan.loads) + [s for s in plan.stores if s.shares is None]


def split_strides(op, plan):
    """(row strides, reduced-dim strides) of an operand after layout."""
    return op.strides[:plan.nrows_dims], op.strides[plan.nrows_dims:]


def runtime_strides(op, plan) -> list[tuple[str, int]]:
    """(parameter, value) of the strides a kernel takes: nonzero ones, but a unit stride
    of the innermost reduced dim (written as a literal, so the loop is unit-stride)."""
    rs, ks = split_strides(op, plan)
    out = [(f"{op.name}_s{d}", s) for d, s in enumerate(rs) if s]
    out += [(f"{op.name}_t{d}", s) for d, s in enumerate(ks)
            if s and not (d == len(ks) - 1 and s == 1)]
    return out


def element_offset(op, plan, row_level: bool) -> str:
    """The index of op's element for the current row (and k0, k1... unless `row_level`),
    in the names both renderers use."""
    rs, ks = split_strides(op, plan)
    terms = [f"{op.name}_row"] if any(rs) else []
    if not row_level:
        for d, s in enumerate(ks):
            if s == 0:
                continue
            terms.append(f"k{d}" if d == len(ks) - 1 and s == 1 else f"k{d} * {op.name}_t{d}")
    return " + ".join(terms) or "0"


def element_ref(op, plan, row_level: bool) -> str:
    """``pointer[offset]`` of op's element (a store sharing a load's memory: the load's)."""
    op = getattr(op, "shares", None) or op
    return f"{op.name}[{element_offset(op, plan, row_level)}]"


def row_offset_lines(plan: RowPlan) -> list[str]:
    """`<operand>_row = i0 * <operand>_s0 + ...`: where each operand's current row starts,
    for operands that move with the row (the index names i0, i1... both renderers use)."""
    lines = []
    for op in operands(plan):
        rs, _ = split_strides(op, plan)
        terms = [f"i{d} * {op.name}_s{d}" for d, s in enumerate(rs) if s]
        if terms:
            lines.append(f"{op.name}_row = {' + '.join(terms)}")
    return lines
