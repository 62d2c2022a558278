"""From a region of prims to the parts of one elementwise kernel, shared by both backends.

``analyze(region, backend)`` walks the region from its outputs back to its inputs and
records, in dependency order, one line of straight-line code per value: loads (with the
conversion from the stored dtype), the lowered prims, and the stores. Every value is
computed at the current element of the *iteration shape* (the outputs' shape); a value of a
smaller shape that reaches it through ``broadcast_in_dim`` is computed at the broadcast
index, so broadcasting costs stride-0 loads and never a copy. Values that depend on no
tensor element (Python numbers, 0-dim CPU tensors, constants lifted to arguments, and
loads whose strides are all 0) are hoisted out of the loop.

``layout(plan)`` orders the dimensions as the outputs lie in memory and coalesces
dimensions that are contiguous for every operand, so the inner loop is long and, for
dense operands, unit-stride. The backends (``backends/cpu.py``, ``backends/cuda.py``) wrap the
same lines (``kernel_body.py``) in their own loops.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

from primtrace.executors.numba import ops
from primtrace.executors.numba.ops import Backend
from primtrace.executors.numba.registers import (DTYPES, NUMBER_DTYPE, Emitter, category, convert,
                                                 half_source, supported)
from primtrace.executors.numba.symbolic_sizes import hint_numel, is_one, is_symbolic, same_size
from primtrace.ir.proxy import NumberProxy, Proxy, TensorProxy, is_real_tensor


class NotFusible(Exception):
    """The region contains something this executor cannot compile."""


@dataclass
class Load:
    """A tensor the kernel reads: region input `index`, seen through index map `imap`."""
    name: str
    index: int
    proxy: TensorProxy
    strides: tuple            # element strides over the iteration dims, then after layout
    var: str = ""             # register holding the value
    offset: int = 0           # elements from the tensor's first one to the part's first read

    @property
    def dtype(self):
        return self.proxy.dtype


@dataclass
class Store:
    """A tensor the kernel writes: a new output, or a region input written in place."""
    name: str
    output: int | None        # position in region.outputs (None: an in-place write)
    dtype: torch.dtype
    strides: tuple
    value: str = ""           # register (or float32 expression, see fold_store_roundings) stored
    into_input: int | None = None   # copy_to into this region input
    shares: Load | None = None      # same memory and index as this load (in-place)
    offset: int = 0                 # elements from the output's first one to the part's first


@dataclass
class Scalar:
    """A kernel argument holding one number: a region input or a lifted constant."""
    name: str
    python_type: type
    input: int | None = None  # region input position (NumberProxy or 0-dim CPU tensor)
    value: object = None      # the constant, when not an input


@dataclass
class Alias:
    """Two region inputs the launcher checks for shared memory: `written` is stored in place,
    `other` is read or written too. `eager`: `other` is an operand of the in-place op, so a
    partial overlap is eager's error; `strict`: even the identical view is unsafe (both are
    written, or `other` is read after the write)."""
    written: int
    other: int
    eager: bool
    strict: bool


@dataclass
class Line:
    var: str
    expr: str
    invariant: bool
    comment: str = ""
    load: Load | None = None  # a load line: expr is filled with the element reference
    rounds: tuple | None = None   # (half dtype, float32 expr): expr rounds that to the dtype
    near: tuple | None = None     # (expr, argument): a cheaper expr, exact for |argument| < NEAR_LIMIT


@dataclass
class Plan:
    shape: tuple              # iteration shape
    device: torch.device
    loads: list = field(default_factory=list)
    stores: list = field(default_factory=list)
    scalars: list = field(default_factory=list)
    lines: list = field(default_factory=list)
    zero_division: list = field(default_factory=list)  # divisor registers to check
    sizes: tuple = ()         # after layout: coalesced sizes, outermost first
    numel: int = 0            # at the trace's hints where sizes are symbolic (speed only)
    symbolic: bool = False    # sizes known only at run time (symbolic_sizes.py)
    summary: list = field(default_factory=list)  # "in0 = a: f16[1024]" lines for the header
    returns: list = field(default_factory=list)  # per region output: ("new", k) | ("input", j)
    aliases: list = field(default_factory=list)  # Alias pairs the launcher checks at run time
    parts: list = field(default_factory=list)    # a cat's split loop: one Plan per box, in order
    box: tuple = ()           # a part's ((first, end) per iteration dim) of the whole loop

    def signature_text(self) -> str:
        if self.parts:
            return "\n".join(f"part {k} (box {part.box}):\n" + "\n".join(
                "  " + line for line in part.summary) for k, part in enumerate(self.parts))
        return "\n".join(self.summary)


# --- argument access --------------------------------------------------------------------------
def node_args(node) -> list:
    """The node's arguments by position (keywords placed where the prim names them)."""
    row = ops.OPS.get(node.symbol.name)
    names = row.params if row is not None else None
    args = list(node.args)
    if names is None:
        if node.kwargs:
            raise NotFusible(f"{node.symbol.name} with keyword arguments")
        return args
    for name in names[len(args):]:
        if name not in node.kwargs:
            raise NotFusible(f"{node.symbol.name} without {name}")
        args.append(node.kwargs[name])
    return args


def is_number(x) -> bool:
    """A Python number, a number input, or a 0-dim CPU tensor constant of the trace."""
    return type(x) in (bool, int, float) or isinstance(x, NumberProxy) or _is_constant_tensor(x)


def _is_constant_tensor(x) -> bool:
    return (is_real_tensor(x) and x.ndim == 0 and x.device.type == "cpu"
            and supported(x.dtype))


def _number_type(x) -> type:
    t = x.python_type if isinstance(x, NumberProxy) else type(x)
    if t not in NUMBER_DTYPE:
        raise NotFusible(f"a {t.__name__} scalar")
    return t


# --- analysis ---------------------------------------------------------------------------------
def _rounded_to_half(region) -> set[str]:
    """Names of the values inside `region` used only by conversions to float16/bfloat16 (a
    half ref computing in float32 and rounding its result)."""
    users: dict[str, list] = {}
    for n in region.nodes:
        for q in n.inputs:
            users.setdefault(q.name, []).append(n)
    returned = {p.name for p in region.outputs}

    def to_half(n) -> bool:
        target = DTYPES.get(node_args(n)[1]) if n.symbol.name == "convert_element_type" else None
        return target is not None and target.kind == "h"
    return {name for name, nodes in users.items()
            if name not in returned and all(map(to_half, nodes))}


#: prims whose result is a view of their first argument: a kernel reads through them, and
#: never returns one (as a new tensor it would no longer alias its input)
VIEWS = ("broadcast_in_dim", "slice")
#: prims only CPU elementwise kernels plan (loads at offsets, loops split in parts)
CPU_ONLY = frozenset(row.prim for row in ops.ROWS if row.cpu_only)


class _Split(Exception):
    """A part's loop reads a cat across the boundary of two operands: split its box along
    iteration dim `dim` at `index` (counted from the box's start) and plan both halves."""

    def __init__(self, box: tuple, dim: int, index: int):
        super().__init__(f"split dim {dim} at {index}")
        self.box, self.dim, self.index = box, dim, index

    def halves(self) -> list:
        lo, hi = self.box[self.dim]
        cut = lo + self.index
        return [tuple((lo, cut) if d == self.dim else b for d, b in enumerate(self.box)),
                tuple((cut, hi) if d == self.dim else b for d, b in enumerate(self.box))]


#: parts a cat may split one kernel's loop into (each part costs a kernel call)
MAX_PARTS = 8


def _entry(d, offset: int = 0, step: int = 1):
    """An index map entry: iteration dim `d` at ``offset + step * i`` (`d` None: the constant
    index `offset`). The common cases stay as they were: ``d`` alone, or None for 0."""
    if d is None:
        return None if offset == 0 else (None, offset, 0)
    return d if offset == 0 and step == 1 else (d, offset, step)


def _terms(entry) -> tuple:
    """(dim or None, offset, step) of an index map entry."""
    if entry is None:
        return None, 0, 0
    if type(entry) is int:
        return entry, 0, 1
    return entry


class _Analyzer:
    def __init__(self, region, backend: Backend, box: tuple | None = None):
        self.region, self.backend = region, backend
        self.producer = {p.name: n for n in region.nodes for p in n.output_proxies}
        self.input_pos = {p.name: i for i, p in enumerate(region.inputs)}
        written = [n.output_proxies[0] for n in region.nodes if n.symbol.name == "copy_to"]
        targets = [p for p in list(region.outputs) + written if isinstance(p, TensorProxy)]
        shapes = {tuple(p.shape) for p in targets}
        if len(shapes) != 1:
            raise NotFusible(f"outputs of different shapes {sorted(shapes)}")
        devices = {p.device for p in targets}
        if len(devices) != 1:
            raise NotFusible(f"outputs on several devices {devices}")
        shape = shapes.pop()
        self.box = box or tuple((0, n) for n in shape)
        if box is None:
            self.plan = Plan(shape=shape, device=devices.pop())
            self.out_map = self.identity(shape)
        else:   # a part of a split loop (hi - lo only on the split, static, dims)
            sizes = tuple(hi if lo == 0 else hi - lo for lo, hi in box)
            self.plan = Plan(shape=sizes, device=devices.pop(), box=box)
            self.out_map = tuple(_entry(None if is_one(n) else d, lo)
                                 for d, ((lo, _), n) in enumerate(zip(box, sizes)))
        self.memo: dict = {}      # (proxy name, imap) -> (var, dtype, invariant)
        self.converted: dict = {}  # (scalar name, dtype) -> var
        self.consts: dict = {}
        self.temps = 0
        self.half_values: set = set()   # float32 registers holding float16 values
        self.half_held: set = set()     # ... holding float16 or bfloat16 values
        self.rounded_to_half = _rounded_to_half(region)

    # names
    def fresh(self) -> str:
        self.temps += 1
        return f"v{self.temps - 1}"

    def emit(self, expr: str, invariant: bool, comment: str = "", var: str | None = None) -> str:
        var = var or self.fresh()
        self._last = Line(var, expr, invariant, comment)
        self.plan.lines.append(self._last)
        return var

    def emit_rounded(self, dtype, raw: str, invariant: bool, comment: str) -> str:
        """A line rounding float32 `raw` to half dtype `dtype` (kept in float32)."""
        var = self.emit(self.backend.round_half(dtype, raw), invariant, comment)
        self.plan.lines[-1].rounds = (dtype, raw)
        return var

    def identity(self, shape) -> tuple:
        return tuple(None if is_one(n) else d for d, n in enumerate(shape))

    # leaves
    def scalar_input(self, proxy, pos) -> Scalar:
        for s in self.plan.scalars:
            if s.input == pos:
                return s
        t = _number_type(proxy) if isinstance(proxy, NumberProxy) else \
            {"b": bool, "i": int, "u": int, "f": float, "h": float}[DTYPES[proxy.dtype].kind]
        s = Scalar(f"s{sum(x.input is not None for x in self.plan.scalars)}", t, input=pos)
        self.plan.scalars.append(s)
        self.plan.summary.append(f"{s.name} = {proxy.name}: {t.__name__}"
                                 + ("" if isinstance(proxy, NumberProxy) else " (0-dim tensor)"))
        return s

    def constant(self, value) -> Scalar:
        key = (type(value), repr(value))
        if key not in self.consts:
            s = Scalar(f"c{len(self.consts)}", _number_type(value), value=value)
            self.consts[key] = s
            self.plan.scalars.append(s)
        return self.consts[key]

    def number(self, x, dtype, em) -> str:
        """A Python number (input or literal) converted to `dtype`, hoisted."""
        if _is_constant_tensor(x):
            x = x.item()       # exact: the operand dtype is the constant's own dtype
        if isinstance(x, NumberProxy):
            if x.name not in self.input_pos:
                raise NotFusible(f"number {x.name} computed inside the region")
            s = self.scalar_input(x, self.input_pos[x.name])
        else:
            if type(x) is int and not -2**63 <= x < 2**63:
                raise NotFusible("an integer constant beyond int64")
            s = self.constant(x)
        key = (s.name, dtype)
        if key not in self.converted:
            src = NUMBER_DTYPE[s.python_type]
            self.converted[key] = self.emit(convert(em, s.name, src, dtype), True,
                                            f"{s.name} as {dtype}".replace("torch.", ""))
        return self.converted[key]

    def emitter(self, invariant_box) -> Emitter:
        def temp(expr):
            return self.emit(expr, invariant_box[0])

        def flag(divisor):
            self.plan.zero_division.append((divisor, invariant_box[0]))
        return Emitter(self.backend, temp, flag)

    # values
    def value(self, p: Proxy, imap: tuple):
        """(register, dtype, invariant) of tensor proxy `p` at index map `imap`."""
        key = (p.name, imap)
        if key not in self.memo:
            self.memo[key] = self._compute(p, imap)
        return self.memo[key]

    def _compute(self, p, imap):
        if p.name in self.input_pos:
            return self._input(p, imap)
        node = self.producer.get(p.name)
        if node is None:
            raise NotFusible(f"{p.name} is neither produced in the region nor an input")
        return self._node(node, p, imap)

    def _input(self, p, imap):
        pos = self.input_pos[p.name]
        if not isinstance(p, TensorProxy):
            raise NotFusible(f"input {p.name} used as a tensor")
        if DTYPES.get(p.dtype) is None:
            raise NotFusible(f"dtype {p.dtype}")
        if p.ndim == 0 and p.device.type == "cpu":   # a scalar argument (CUDA: a load too)
            s = self.scalar_input(p, pos)
            src = NUMBER_DTYPE[s.python_type]
            em = self.emitter([True])
            var = self.emit(convert(em, s.name, src, p.dtype), True,
                            f"{s.name} as {dtype_name(p.dtype)}")
            return var, p.dtype, True
        if p.device != self.plan.device:
            raise NotFusible(f"{p.name} on {p.device}, region on {self.plan.device}")
        strides = _iter_strides(p, imap, self.plan.shape)
        load = Load(f"in{len(self.plan.loads)}", pos, p, strides, offset=_iter_offset(p, imap))
        invariant = not any(strides)
        load.var = f"x{len(self.plan.loads)}"
        if p.dtype is torch.float16:
            self.half_values.add(load.var)
        if DTYPES[p.dtype].kind == "h":
            self.half_held.add(load.var)
        self.plan.loads.append(load)
        shape_text = dtype_text(p)
        self.plan.summary.append(f"{load.name} = {p.name}: {shape_text}"
                                 + ("" if imap == self.identity(p.shape) else f" (read with strides {list(strides)})")
                                 + (f" from element {load.offset}" if load.offset else ""))
        # comments never name trace values: the source is the kernel's cache key
        self.plan.lines.append(Line(load.var, "", invariant, f"load {dtype_name(p.dtype)}",
                                    load=load))
        return load.var, p.dtype, invariant

    def _operand(self, x, dtype, imap_of_out, em):
        """Register of an elementwise operand: a tensor at the output's index map, or a number."""
        if is_number(x):
            return self.number(x, dtype, em), True
        if not isinstance(x, TensorProxy):
            raise NotFusible(f"operand {x!r}")
        imap = () if x.ndim == 0 else imap_of_out
        var, _, inv = self.value(x, imap)
        return var, inv

    def _node(self, node, p, imap):
        name = node.symbol.name
        if name == "sum":
            return self.trivial_sum(node, p, imap)
        row = ops.OPS.get(name)
        if row is None:
            raise NotFusible(f"{name} has no row in the op table")
        if DTYPES.get(p.dtype) is None:
            raise NotFusible(f"dtype {p.dtype}")
        args = node_args(node)
        if row.structural:
            return getattr(self, name)(args, p.dtype, imap)
        return self.elementwise(row, args, p, imap)

    # structural prims: one method per structural row of the op table
    def broadcast_in_dim(self, args, out_dtype, imap):
        a, shape, dims = args
        if any(is_symbolic(a.shape[i]) and not same_size(a.shape[i], shape[d])
               for i, d in enumerate(dims)):
            raise NotFusible("a symbolic size broadcast (its size 1 at this call's hint)")
        inner = tuple(None if is_one(a.shape[i]) else imap[d] for i, d in enumerate(dims))
        return self.value(a, inner)

    def slice(self, args, out_dtype, imap):
        """A view at an offset: read its input where the slice's index lands."""
        a, starts, stops, steps = args
        if self.backend is not ops.CPU:
            raise NotFusible("a slice outside a CPU elementwise kernel")
        inner = []
        for k, entry in enumerate(imap):
            d, offset, step = _terms(entry)
            inner.append(_entry(d, starts[k] + steps[k] * offset, steps[k] * step))
        return self.value(a, tuple(inner))

    def cat(self, args, out_dtype, imap):
        """The operand this part's loop reads along `dim`, at its own index; a part reading
        across two operands is split where the second begins (:class:`_Split`)."""
        tensors, dim = args
        if self.backend is not ops.CPU:
            raise NotFusible("a cat outside a CPU elementwise kernel")
        d, offset, step = _terms(imap[dim])
        first = offset
        last = offset if d is None else offset + step * (self.plan.shape[d] - 1)
        start = 0
        for t in tensors:
            end = start + t.shape[dim]
            if start <= first < end:
                if last < end:
                    inner = list(imap)
                    inner[dim] = _entry(d, offset - start, step)
                    return self.value(t, tuple(inner))
                raise _Split(self.box, d, -(-(end - offset) // step))
            start = end
        raise NotFusible(f"cat read at {first} beyond its size {start}")

    def trivial_sum(self, node, p, imap):
        """A float sum over size-1 dims (reduction_plan.is_trivial): ``x + 0``, read at the
        index map with those dims put back (as broadcast)."""
        from primtrace.executors.numba.reduction_plan import is_trivial, reduction_args
        if not is_trivial(node):
            raise NotFusible("a reduction outside a row kernel")
        a, dims, _ = reduction_args(node)
        rest = iter(imap)
        inner = tuple(None if i in dims else next(rest) for i in range(a.ndim))
        var, dtype, inv = self.value(a, inner)
        zero = self.number(0.0, dtype, self.emitter([True]))
        out = self.emit(f"{var} + {zero}", inv, "sum over size-1 dims")
        for held in (self.half_values, self.half_held):
            if var in held:
                held.add(out)
        return out, dtype, inv

    def copy_to(self, args, out_dtype, imap):
        dst, src = args
        if is_number(src):
            return self.number(src, out_dtype, self.emitter([True])), out_dtype, True
        return self.value(src, () if src.ndim == 0 else imap)

    def full(self, args, out_dtype, imap):
        return self.number(args[1], out_dtype, self.emitter([True])), out_dtype, True

    def full_strided(self, args, out_dtype, imap):
        """The destination of a copy into a memory format: the store takes its strides."""
        return self.number(args[2], out_dtype, self.emitter([True])), out_dtype, True

    def convert_element_type(self, args, out_dtype, imap):
        a, dtype = args
        var, src_dtype, inv = self.value(a, () if a.ndim == 0 else imap)
        if DTYPES.get(src_dtype) is None:
            raise NotFusible(f"dtype {src_dtype}")
        comment = f"convert_element_type to {dtype_name(dtype)}"
        raw = half_source(var, src_dtype, dtype)
        expr = convert(self.emitter([inv]), var, src_dtype, dtype)
        if expr == var:
            return var, dtype, inv
        out = self.emit_rounded(dtype, raw, inv, comment) if raw is not None else \
            self.emit(expr, inv, comment)
        if dtype is torch.float16:
            self.half_values.add(out)
        if DTYPES[dtype].kind == "h":
            self.half_held.add(out)
        return out, dtype, inv

    def where(self, args, out_dtype, imap):
        pred, a, b = args
        em = self.emitter([True])
        pv, pinv = self._operand(pred, torch.bool, imap, em)
        av, ainv = self._operand(a, out_dtype, imap, em)
        bv, binv = self._operand(b, out_dtype, imap, em)
        inv = pinv and ainv and binv
        return self.emit(f"{av} if {pv} else {bv}", inv, "where"), out_dtype, inv

    # elementwise prims: the row's lowering, or one of its variants
    def elementwise(self, row, args, p, imap):
        name, out_dtype = row.prim, p.dtype
        tensors = [x for x in args if isinstance(x, TensorProxy)]
        if not tensors or len(args) != row.arity:
            raise NotFusible(f"{name} with arguments {args}")
        dtype = tensors[0].dtype
        if DTYPES.get(dtype) is None or ops.find(name, dtype, len(args)) is None:
            raise NotFusible(f"{name} on {dtype}")
        # the operands first (their lines precede this node's temporaries)
        regs, inv = [], True
        for x in args:
            if is_number(x):
                regs.append(self.number(x, dtype, self.emitter([True])))
            else:
                r, i = self._operand(x, dtype, imap, None)
                regs.append(r)
                inv = inv and i
        variant, near = name, None
        if row.f16_range and dtype in (torch.float16, torch.float32) and regs[0] in self.half_values \
                and ops.lowerable(self.backend, row.f16_range.name, dtype, 1):
            variant = row.f16_range.name   # |x| <= 65504: a cheaper argument reduction is exact
        if row.near and DTYPES[dtype].reg == "float32" and \
                ops.lowerable(self.backend, row.near.name, dtype, 1):
            if regs[0] in self.half_values:
                variant = row.near.name    # |x| <= 65504 < NEAR_LIMIT: always exact
            elif not inv:                  # elsewhere exact where the kernel's check says so
                near = (ops.lower(self.emitter([inv]), row.near.name, dtype, dtype, regs,
                                  round_half=False), regs[0])
        rounded = DTYPES[out_dtype].kind == "h" or p.name in self.rounded_to_half
        if row.f16_half and regs[0] in self.half_values and rounded and \
                ops.lowerable(self.backend, row.f16_half.name, dtype, 1):
            variant = row.f16_half.name    # float16 values, half result: float32 is enough
        if row.half_result and regs[0] in self.half_held and rounded and \
                ops.lowerable(self.backend, row.half_result.name, dtype, 1):
            variant = row.half_result.name   # the half rounding next hides its extra error
        if row.scalar_exponent and category(dtype) == "f" and (
                type(args[1]) in (int, float) or isinstance(args[1], NumberProxy)):
            variant = f"{name}_scalar"   # torch.pow(tensor, number) special-cases some exponents
            # (a 0-dim tensor exponent takes the tensor-tensor kernel: plain pow)
        expr = ops.lower(self.emitter([inv]), variant, dtype, out_dtype, regs, round_half=False)
        if expr is None:
            raise NotFusible(f"{variant} on {dtype} has no lowering for {self.backend.name}")
        if near is not None and near[0] is not None:
            expr = self.emit(expr, inv, name)    # its own line, which a rounding cannot fold away
            self._last.near = near   # the line just emitted (a row plan places it elsewhere)
            if DTYPES[out_dtype].kind != "h":
                return expr, out_dtype, inv
        if DTYPES[out_dtype].kind == "h":
            return self.emit_rounded(out_dtype, expr, inv, name), out_dtype, inv
        return self.emit(expr, inv, name), out_dtype, inv

    # outputs
    def resolve(self, proxy):
        """The region input a tensor's memory is (following copy_to outputs to their
        destination), or None for a value computed in the region."""
        while proxy.name not in self.input_pos:
            node = self.producer.get(proxy.name)
            if node is None or node.symbol.name != "copy_to":
                return None
            proxy = node_args(node)[0]
        return self.input_pos[proxy.name]

    def run(self):
        region, plan = self.region, self.plan
        for k, out in enumerate(region.outputs):
            if not isinstance(out, TensorProxy):
                raise NotFusible(f"output {out.name} is not a tensor")
            if self.producer[out.name].symbol.name in VIEWS:
                raise NotFusible(f"a {self.producer[out.name].symbol.name} view leaves the region")
            target = self.resolve(out)
            plan.returns.append(("input", target) if target is not None else ("new", k))
            if target is None:
                var, _, _ = self.value(out, self.out_map)
                plan.stores.append(Store(f"out{k}", k, out.dtype, tuple(out.stride()), var,
                                         offset=_iter_offset(out, self.out_map)))
                plan.summary.append(f"out{k} = {out.name}: {dtype_text(out)}")
        # in place: every copy_to into an input writes it; the last one per input is stored
        last = {}
        for node in region.nodes:
            if node.symbol.name == "copy_to":
                target = self.resolve(node_args(node)[0])
                if target is not None:
                    last[target] = node
                elif node_args(node)[0].name not in self.producer:
                    raise NotFusible("copy_to into an unknown tensor")
        if last and any(n.symbol.name in CPU_ONLY for n in region.nodes):
            # the overlap check sees whole inputs, where eager checks the slice it reads
            raise NotFusible("an in-place write beside a slice or cat")
        for pos, node in sorted(last.items()):
            dst = region.inputs[pos]
            if tuple(dst.shape) != plan.shape:
                raise NotFusible(f"in-place write into {dst.name} of another shape")
            out = node.output_proxies[0]
            var, _, _ = self.value(out, self.identity(out.shape))
            store = Store(f"io{pos}", None, dst.dtype, tuple(dst.stride()), var, into_input=pos)
            strides = _iter_strides(dst, self.identity(dst.shape), plan.shape)
            for load in plan.loads:   # read and written: one pointer, one offset
                if load.index == pos and load.strides == strides and load.offset == 0:
                    store.shares = load
            plan.stores.append(store)
            plan.summary.append(f"{store.name} = {dst.name}: {dtype_text(dst)}, written in place"
                                + (f" (as {store.shares.name})" if store.shares else ""))
        fold_store_roundings(plan)
        plan.numel = hint_numel(plan.shape)
        plan.symbolic = any(is_symbolic(n) for n in plan.shape)
        if plan.numel > 0:
            plan.aliases = self.aliases()
            if plan.aliases and plan.symbolic:
                raise NotFusible("an in-place write checked for overlap, over symbolic sizes")
        return plan

    # aliasing: what the launcher must check when inputs share memory
    def _through_views(self, p):
        """(p, node): `p` followed back through conversions and broadcasts to a region input
        (node None) or to the node computing it."""
        while p.name not in self.input_pos:
            node = self.producer.get(p.name)
            if node is None or node.symbol.name not in ("convert_element_type", *VIEWS):
                return p, node
            p = node_args(node)[0]
        return p, None

    def _eager_operands(self, write) -> set:
        """Inputs eager checks against the written tensor of `write` (a copy_to): the source
        of a copy_, or the other operands of an in-place op (a prim reading the destination)."""
        dst, src = node_args(write)
        if not isinstance(src, TensorProxy):
            return set()
        p, node = self._through_views(src)
        memory = {self.resolve(p)}           # an input, or one written in place (y.add_(1))
        if node is not None and node.symbol.name != "copy_to":
            memory = {self.resolve(self._through_views(a)[0]) for a in node_args(node)
                      if isinstance(a, TensorProxy)}
            if self.resolve(dst) not in memory:
                return set()   # copy_(expr) or out=: a computed value, eager reads a temporary
        return memory - {None}

    def aliases(self) -> list:
        """The pairs of inputs that one kernel gets wrong if their memory overlaps: each
        input written in place against every other input the kernel reads or writes."""
        nodes, pos_of = self.region.nodes, self.input_pos
        writes: dict = {}         # input position -> copy_to nodes into it, in order
        last_read: dict = {}      # input position -> index of the last node reading it
        for i, node in enumerate(nodes):
            args = node_args(node)
            if node.symbol.name == "copy_to":
                target = self.resolve(args[0])
                if target is not None:
                    writes.setdefault(target, []).append(node)
                args = args[1:]
            for a in args:
                if isinstance(a, TensorProxy):
                    a = self._through_broadcasts(a)
                    if a.name in pos_of:
                        last_read[pos_of[a.name]] = i
        first_write = {j: nodes.index(w[0]) for j, w in writes.items()}
        tensors = {load.index for load in self.plan.loads} | {
            s.input for s in self.plan.scalars
            if s.input is not None and isinstance(self.region.inputs[s.input], TensorProxy)}
        eager = {j: set().union(*map(self._eager_operands, w)) for j, w in writes.items()}
        pairs = []
        for j in sorted(writes):
            for k in sorted(tensors | set(writes)):
                if k == j or (k in writes and k < j):
                    continue
                if k in writes and j in eager[k]:
                    pairs.append(Alias(k, j, True, True))   # both written: one check, eager's way
                    continue
                strict = k in writes or last_read.get(k, -1) > first_write[j]
                is_load = any(load.index == k for load in self.plan.loads)
                if strict or k in eager[j] or is_load:   # (a 0-dim CPU tensor is read before)
                    pairs.append(Alias(j, k, k in eager[j], strict))
        return pairs

    def _through_broadcasts(self, p):
        """A broadcast or slice is a view: reading it is reading its input."""
        while p.name not in self.input_pos:
            node = self.producer.get(p.name)
            if node is None or node.symbol.name not in VIEWS:
                return p
            p = node_args(node)[0]
        return p


_UNPLANNED = [row.prim for row in ops.ROWS if row.structural and not callable(getattr(_Analyzer, row.prim, None))]
if _UNPLANNED:
    raise ops.OpTableError(f"op table: structural rows without a planner method: {_UNPLANNED}")


def fold_store_roundings(plan: Plan) -> None:
    """A value rounded to a half dtype only to be stored in that dtype is stored unrounded:
    the store's conversion rounds it, and rounding a value already on the half grid again
    changes nothing (RNE is idempotent), so one rounding per element is saved. Lines used
    by anything but such stores keep their rounding; hoisted lines stay hoisted."""
    for line in list(plan.lines):
        if line.rounds is None or line.invariant:
            continue
        dtype, raw = line.rounds
        stores = [s for s in plan.stores if s.value == line.var]
        if not stores or any(s.dtype is not dtype for s in stores):
            continue
        used = re.compile(rf"\b{line.var}\b")
        if any(used.search(other.expr) for other in plan.lines if other is not line) or \
                any(used.search(divisor) for divisor, _ in plan.zero_division):
            continue
        for s in stores:
            s.value = raw
        plan.lines.remove(line)


def _iter_strides(p, imap, shape) -> tuple:
    """`p`'s element strides over the iteration dims of `shape`, seen through index map
    `imap` (a broadcast dim, None, has stride 0)."""
    strides = [0] * len(shape)
    for k, entry in enumerate(imap):
        d, _, step = _terms(entry)
        if d is not None:
            strides[d] += step * p.stride()[k]
    return tuple(strides)


def _iter_offset(p, imap) -> int:
    """Elements from `p`'s first one to the one index map `imap` reads at iteration 0."""
    return sum(_terms(entry)[1] * s for entry, s in zip(imap, p.stride()))


def dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def dtype_text(p) -> str:
    return f"{dtype_name(p.dtype)}{list(p.shape)}"


def analyze(region, backend: Backend) -> Plan:
    """The kernel plan of `region`; raises NotFusible for what the backend cannot compile.

    A region reading a ``cat`` plans one part per box of the loop that reads one operand
    of each cat (split where an operand ends, :class:`_Split`); its plan then holds the
    parts, each a plan of its own whose loads and stores start at an offset."""
    boxes, parts = [None], []
    while boxes:
        box = boxes.pop()
        try:
            part = _Analyzer(region, backend, box).run()
        except _Split as split:
            if len(parts) + len(boxes) + 2 > MAX_PARTS:
                raise NotFusible(f"a cat splitting the loop into more than {MAX_PARTS} parts")
            if any(is_symbolic(n) for lo_hi in split.box for n in lo_hi):
                raise NotFusible("a cat splitting a loop over symbolic sizes")
            boxes += reversed(split.halves())
            continue
        layout(part)
        parts.append(part)
    if len(parts) == 1:
        return parts[0]
    shape = tuple(max(part.box[d][1] for part in parts) for d in range(len(parts[0].box)))
    whole = Plan(shape=shape, device=parts[0].device, parts=parts,
                 stores=parts[0].stores, returns=parts[0].returns)
    whole.numel = sum(part.numel for part in parts)
    whole.sizes = whole.shape
    return whole


# --- layout -----------------------------------------------------------------------------------
def layout(plan: Plan) -> None:
    """Order dims outermost-first by the outputs' strides, drop size-1 dims, coalesce dims
    that are contiguous for every operand; rewrites `sizes` and every operand's strides."""
    shape = plan.shape
    operands = list(plan.stores) + list(plan.loads)
    dims = [d for d, n in enumerate(shape) if not is_one(n)]
    # stable sort, outermost first: larger strides of the first store, then the others
    dims.sort(key=lambda d: tuple(-op.strides[d] for op in operands))
    sizes = [shape[d] for d in dims]
    strides = [[op.strides[d] for d in dims] for op in operands]
    # coalesce from the inside out
    i = len(sizes) - 1
    while i > 0:
        outer, inner = i - 1, i
        if not is_symbolic(sizes[inner]) and not is_symbolic(sizes[outer]) and all(
                s[outer] == s[inner] * sizes[inner] for s in strides):   # (arithmetic on a
            # symbolic size outside a trace would read its value: a guard pinning it)
            sizes[outer] *= sizes[inner]
            for s in strides:
                s[outer] = s[inner]
                del s[inner]
            del sizes[inner]
        i -= 1
    if not sizes:
        sizes, strides = [1], [[0] for _ in operands]
    plan.sizes = tuple(sizes)
    for op, s in zip(operands, strides):
        op.strides = tuple(s)
