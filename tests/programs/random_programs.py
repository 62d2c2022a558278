"""Random torch programs beyond elementwise: a seeded generator and the check against eager.

``Program(seed)`` writes a plain torch function (or a small ``nn.Module`` with parameters and
buffers) from views and shape ops, reductions with every ``dim`` form, softmax and norms,
matrix products, indexing and in-place writes on views of inputs and of intermediates,
over inputs of mixed dtypes and layouts (non-contiguous, expanded, offset, empty, 0-dim).
Each line is run eagerly while the program is written, so shapes and dtypes are known and
most lines are valid; a line that eager rejects is dropped, or rarely kept as the last one
(then jit must raise the same error type).

``check(program)`` (tests/programs/random_check.py) runs eager and ``primtrace.jit`` (two calls each, fresh inputs per call)
and compares outputs (the conformance rule: dtype, shape, integers exact, floats close to
eager or at least as close to a float64 run, within the tolerance of the narrowest float
dtype the value was computed through; through a half dtype, within twice eager's distance
of the float64 run; an integer computed from floats may be the float64 run's value where
eager's differs), output strides where eager's are defined
(views, elementwise results), which outputs share storage with which inputs, the final
state of every input and of the module's parameters and buffers.

Ops that belong to known open failure classes carry a tag (``KNOWN``); ``Program(seed,
ci=True)`` never writes them, the slow test does.
"""
from __future__ import annotations

import copy
import random
import re
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from tests.programs.random_check import _narrowest, _storage

FLOAT = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
DTYPES = (torch.float32,) * 4 + (torch.float64, torch.float16, torch.bfloat16, torch.int64,
                                 torch.int32, torch.int8, torch.uint8, torch.bool)
SHAPES = ((3, 4), (2, 3, 4), (4,), (2, 1, 3), (0, 3), (), (1, 4), (5, 2), (2, 3, 2, 2), (3, 0, 2))
LAYOUTS = ("contiguous",) * 4 + ("transposed", "sliced", "expanded", "offset")
SCALARS = ("2", "-1.5", "0.5", "3", "True", "-2")

# Known open failure classes: an op that hits one is written, under its tag, only when
# ``ci=False`` (the slow test: ``Program.allow``). Tag -> class. Every class listed at first
# (logsumexp of a 0-dim tensor, var_mean with -inf, masked_fill strides, masked_fill_ into
# an expanded tensor, empty bmm, softmax dtype=, flip(dims=), index_fill with a tensor value,
# namedtuple results, meshgrid of 0-dim tensors) is fixed and written by the CI test too.
KNOWN: dict[str, str] = {}
# Open, and written by neither test: tensor_split with tensor indices (or sections). Its
# result shapes are the index values, so jit refuses to trace it (DataDependentError, a
# data-dependent size: its own issue), which is no wrong result but fails every such program.
# tensor_split with int indices or sections is written.
# Open, and written by the slow test (seed 102033): an in-place op on a view of a value the
# program made, with that value as the operand under other strides (v.unsqueeze(0).add_(v)):
# eager calls the same memory with other strides a partial overlap and raises, jit adds
# (README, Limitations: in-place ops whose destination partially overlaps an operand).


class Spec:
    """How to make one input: values from a seeded generator, then a memory layout."""

    def __init__(self, name, shape, dtype, layout="contiguous", seed=0, high=None, grad=False):
        self.name, self.shape, self.dtype, self.layout, self.seed = name, tuple(shape), dtype, layout, seed
        self.high = high          # an index tensor: values in [-high, high) (int64)
        self.grad = grad          # a leaf that requires grad (a float tensor)

    def __repr__(self):
        return f"{self.name}: {str(self.dtype).replace('torch.', '')}{list(self.shape)} {self.layout}"

    def make(self, upcast=False):
        g = torch.Generator().manual_seed(self.seed)
        shape, layout = self.shape, self.layout
        if layout == "transposed" and len(shape) >= 2:
            t = _values(shape[::-1], self.dtype, g, self.high).permute(*reversed(range(len(shape))))
        elif layout == "sliced" and len(shape) >= 1:
            t = _values((*shape[:-1], shape[-1] * 2), self.dtype, g, self.high)[..., ::2]
        elif layout == "expanded" and len(shape) >= 1:
            t = _values((1, *shape[1:]), self.dtype, g, self.high).expand(*shape)
        elif layout == "offset":
            n = 1
            for s in shape:
                n *= s
            t = _values((n + 1,), self.dtype, g, self.high)[1:].view(shape)
        else:
            t = _values(shape, self.dtype, g, self.high)
        if upcast and t.is_floating_point():
            t = t.double()
        return t.detach().requires_grad_() if self.grad else t


def _values(shape, dtype, g, high=None):
    if high is not None:
        return torch.randint(-high, max(high, 1), shape, generator=g) if high else torch.zeros(shape, dtype=torch.int64)
    if dtype is torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g, dtype=torch.float64) * 8 - 4).to(dtype)
    return torch.randint(0 if dtype is torch.uint8 else -20, 20, shape, generator=g).to(dtype)


class Program:
    """One random program: ``source`` (printed on failure), ``make_inputs()``, ``make_callable()``."""

    def __init__(self, seed: int, ci: bool = False, lines: int | None = None):
        self.seed, self.ci = seed, ci
        self.rng = rng = random.Random(seed)
        self.specs: list[Spec] = []
        self.tags: set[str] = set()
        self.is_module = rng.random() < 0.12
        self.values: list[str] = []       # names usable as operands
        self.structs: list[str] = []      # names of namedtuple results (torch.max(x, 0))
        self.strided: dict[str, bool] = {}  # name -> eager's strides are defined (views, elementwise)
        self.low: dict[str, torch.dtype] = {"self": torch.float32}  # name -> narrowest float dtype
        # its value was computed through (a float64 sum of float32 values carries their rounding)
        self.body: list[str] = []
        self.raises = False
        self.ns = {"torch": torch, "F": F, "nn": nn}
        if self.is_module:
            self._module_header()
        shape = rng.choice(SHAPES)
        for _ in range(rng.randint(1, 3)):
            self._new_input(self._related(shape))
        if self.is_module:
            self._module_start()
        for _ in range(lines or rng.randint(3, 7)):
            for _attempt in range(8):
                if self._step():
                    break
            if self.raises:
                break
        self._finish()

    # --- inputs and values ---------------------------------------------------------------
    def allow(self, tag):
        """Whether an op of a known failure class may be written (not in the CI test)."""
        if self.ci:
            return False
        self.tags.add(tag)
        return True

    def _related(self, shape):
        rng = self.rng
        r = rng.random()
        if r < 0.5 or not shape:
            return shape
        if r < 0.65:
            return shape[1:]
        if r < 0.8:
            return tuple(1 if rng.random() < 0.4 else s for s in shape)
        return rng.choice(SHAPES)

    def _new_input(self, shape, dtype=None, high=None, layout=None):
        rng = self.rng
        name = f"x{len(self.specs)}"
        dtype = dtype or (torch.int64 if high is not None else rng.choice(DTYPES))
        layout = layout or (rng.choice(LAYOUTS) if shape else "contiguous")
        if layout == "expanded" and (not shape or shape[0] == 0):
            layout = "contiguous"
        spec = Spec(name, shape, dtype, layout, rng.randrange(1 << 30), high)
        self.specs.append(spec)
        self.ns[name] = spec.make()
        if high is None:
            self.values.append(name)
        self.strided[name] = True
        if dtype.is_floating_point:
            self.low[name] = dtype
        return name

    def t(self, name):
        return eval(name, self.ns)

    def pick(self, pred=lambda t: True):
        """An operand satisfying ``pred``, most often one of the newest (chains, not dead code)."""
        names = [v for v in self.values if pred(self.t(v))]
        if not names:
            return None
        return self.rng.choice(names[-2:] if self.rng.random() < 0.6 else names)

    def dim(self, n):
        return self.rng.choice([0, -1]) if n == 0 else self.rng.randrange(-n, n)

    def scalar(self):
        return self.rng.choice(SCALARS)

    # --- writing lines ---------------------------------------------------------------------
    def _run(self, line):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(line, self.ns)

    def _emit(self, expr, strided=False, statement=False):
        """Run the new line eagerly; keep it if eager accepts it (rarely: keep a rejected line
        as the program's last one, so jit must raise the same error)."""
        name = f"v{len(self.body)}"
        line = expr if statement else f"{name} = {expr}"
        try:
            self._run(line)
        except Exception:
            if self.rng.random() < 0.06:
                self.body.append(line)
                self.raises = True
                return True
            return False
        self.body.append(line)
        if not statement:
            value = self.ns[name]
            if isinstance(value, torch.Tensor):
                self.values.append(name)
                self.strided[name] = strided
            elif isinstance(value, tuple) and hasattr(value, "_fields"):
                self.structs.append(name)
        self._note_precision(line, None if statement else name)
        return True

    def _note_precision(self, line, name):
        """``low`` of the value a line makes (its own dtype and its operands'), or, for an
        in-place write, of every value sharing the written tensor's memory."""
        operands = re.findall(r"\b(?:self|[xv]\d+)\b", line)
        low = _narrowest(self.low.get(o) for o in operands)
        if name is not None:
            value = self.ns[name]
            if isinstance(value, tuple) and hasattr(value, "_fields"):
                value = value[0]     # the values (torch.max's indices are integers)
            if isinstance(value, torch.Tensor):
                own = value.dtype if value.is_floating_point() else None
                self.low[name] = _narrowest((own, low))   # an integer: its float operands'
            return
        written = _storage(self.t(operands[0])) if operands and operands[0] != "self" else None
        if written is None:
            return
        for v in self.values:
            if _storage(self.t(v)) == written:
                self.low[v] = _narrowest((self.low.get(v), low))

    def _step(self):
        rng = self.rng
        kind = rng.choices(list(GENERATORS), weights=[w for w, _ in GENERATORS.values()])[0]
        return GENERATORS[kind][1](self)

    def _finish(self):
        rng = self.rng
        made = [v for v in self.values if v.startswith("v")] or self.values[:1]
        outs = [made[-1]]
        text = "\n".join(self.body)
        unread = [v for v in made[:-1] if len(re.findall(rf"\b{v}\b", text)) == 1]
        outs += unread[len(unread) - rng.randint(0, 2):]
        for _ in range(rng.choice([0, 0, 0, 1])):
            outs.append(rng.choice(self.values))
        unread = [v for v in self.structs if len(re.findall(rf"\b{v}\b", text)) == 1]
        if unread and rng.random() < 0.5:   # a namedtuple among the outputs
            outs.append(rng.choice(unread))
        self.outputs, self.form = outs, rng.random()
        if self.ci:
            self._drop_unread()
        self._build()

    def _drop_unread(self):
        """Drop lines whose value (or, for an in-place write, whose written intermediate) is
        never read again: known class "in-place op on an unread temporary (IndentationError
        in a kernel)", which a copy nobody reads (``x.flatten()`` of a transposed x) hits too."""
        changed = True
        while changed:
            changed = False
            for i in range(len(self.body) - 1, -1, -1):
                line = self.body[i]
                m = re.match(r"(v\d+) = ", line) or re.match(r"(v\d+)\b", line)
                if m is None or (self.raises and i == len(self.body) - 1):
                    continue
                later = "\n".join(self.body[i + 1:] + self.outputs)
                if not re.search(rf"\b{m.group(1)}\b", later):
                    del self.body[i]
                    changed = True

    def _build(self):
        outs, form = self.outputs, self.form
        used = "\n".join(self.body + outs)
        self.all_specs = getattr(self, "all_specs", None) or list(self.specs)
        self.specs = [s for s in self.all_specs if re.search(rf"\b{s.name}\b", used)]
        params = ", ".join(s.name for s in self.specs)
        ret = outs[0] if len(outs) == 1 and form < 0.7 else (
            "[" + ", ".join(outs) + "]" if form > 0.9 else "(" + ", ".join(outs) + ",)")
        # per output leaf (a namedtuple: its values, then its integer indices)
        self.out_strided = [x for o in outs for x in [self.strided.get(o, False)] * (
            2 if o in self.structs else 1)]
        self.out_low = [x for o in outs for x in ([self.low.get(o), None] if o in self.structs
                                                   else [self.low.get(o)])]
        body = "".join(f"{self.indent}{line}\n" for line in self.body) + f"{self.indent}return {ret}\n"
        if self.is_module:
            self.source = self.header + f"    def forward(self, {params}):\n" + body
        else:
            self.source = f"def program({params}):\n" + body
        namespace = {"torch": torch, "F": F, "nn": nn}
        exec(compile(self.source, f"<random program {self.seed}>", "exec"), namespace)
        self._defined = namespace["M" if self.is_module else "program"]

    indent = "    "

    def without(self, line_index):
        """A copy without one body line (to shrink a failing program)."""
        other = copy.copy(self)
        other.body = self.body[:line_index] + self.body[line_index + 1:]
        other.specs = list(self.all_specs)
        try:
            other._build()
        except Exception:
            return None
        return other

    @classmethod
    def from_source(cls, source, specs, strided=()):
        """A fixed program (a regression case): ``source`` defines ``program``; ``strided``:
        which outputs' strides eager defines."""
        self = cls.__new__(cls)
        self.seed, self.ci, self.is_module, self.source, self.specs = None, True, False, source, list(specs)
        self.out_strided = list(strided)
        low = _narrowest(s.dtype if s.dtype.is_floating_point else None for s in specs)
        self.out_low, self.low = None, {s.name: low for s in specs}   # any value: the inputs'
        self.low_default = low
        namespace = {"torch": torch, "F": F, "nn": nn}
        exec(compile(source, "<regression program>", "exec"), namespace)
        self._defined = namespace["program"]
        return self

    def output_low(self, i, count):
        """``low`` of output `i` of `count` (None when the outputs are not the ones written)."""
        if self.out_low is None:
            return self.low_default
        return self.out_low[i] if len(self.out_low) == count else None

    def make_inputs(self, upcast=False):
        return [s.make(upcast) for s in self.specs]

    def make_callable(self, upcast=False):
        if not self.is_module:
            return self._defined
        torch.manual_seed(self.seed)
        module = self._defined()
        module.train(self.training)
        return module.double() if upcast else module

    # --- modules -------------------------------------------------------------------------
    def _module_header(self):
        rng = self.rng
        self.indent = "        "
        i, o = rng.choice([3, 4]), rng.choice([2, 4])
        self.features = (i, o)
        norm = rng.choice([f"nn.LayerNorm({o})", f"nn.BatchNorm1d({o})", f"nn.RMSNorm({o})",
                           f"nn.GroupNorm(2, {o})", "nn.Identity()"])
        self.training = rng.random() < 0.5
        self.header = ("class M(nn.Module):\n"
                       "    def __init__(self):\n"
                       "        super().__init__()\n"
                       f"        self.weight = nn.Parameter(torch.randn({o}, {i}) * 0.5)\n"
                       f"        self.lin = nn.Linear({i}, {o}, bias={rng.random() < 0.7})\n"
                       f"        self.norm = {norm}\n"
                       f"        self.register_buffer('scale', torch.rand({o}) + 0.5)\n"
                       "        self.register_buffer('steps', torch.zeros((), dtype=torch.int64))\n"
                       f"    # training={self.training}\n")
        namespace = {"torch": torch, "F": F, "nn": nn}
        exec(self.header, namespace)
        torch.manual_seed(self.seed)
        self.ns["self"] = namespace["M"]().train(self.training)

    def _module_start(self):
        rng = self.rng
        i, _ = self.features
        batch = rng.choice([2, 3, 0])
        x = self._new_input((batch, i), dtype=torch.float32, layout=rng.choice(["contiguous", "transposed"]))
        self.values.append("self.scale")
        self.strided["self.scale"] = True
        h = f"v{len(self.body)}"
        self._emit(rng.choice([f"F.linear({x}, self.weight)", f"self.lin({x})",
                               f"{x} @ self.weight.t()"]), strided=False)
        if rng.random() < 0.7:
            self._emit(f"self.norm({h})")
        if rng.random() < 0.5:
            self._emit(rng.choice(["self.steps.add_(1)", "self.scale.mul_(0.5)",
                                   f"self.scale.add_({h}.mean(0).detach())"]), statement=True)


# --- op generators: each writes one line (True) or finds nothing to write (False) --------------
def _views(p: Program):
    rng = p.rng
    v = p.pick()
    t = p.t(v)
    n, s = t.dim(), tuple(t.shape)
    choices = []
    if n >= 1:
        d0, d1 = p.dim(n), p.dim(n)
        choices += [f"{v}.transpose({d0}, {d1})", f"{v}.squeeze({p.dim(n)})", f"{v}.flatten()",
                    f"{v}.unsqueeze({rng.randrange(-n - 1, n + 1)})",
                    f"{v}.permute({', '.join(map(str, _perm(rng, n)))})",
                    f"{v}.flatten({min(d0 % n, d1 % n)}, {max(d0 % n, d1 % n)})",
                    f"{v}.movedim({d0}, {d1})", f"{v}.unbind({d0})[{rng.choice([0, -1])}]"]
        d = p.dim(n)
        size = s[d]
        start = rng.randint(-size, size) if size else 0
        length = rng.randint(0, max(size - (start % size if size else 0), 0))
        choices += [f"{v}.narrow({d}, {start}, {length})", f"{v}.select({d}, {rng.randint(-size, size - 1) if size else 0})",
                    f"{v}[{_slices(rng, s)}]", f"{v}[{_slices(rng, s)}]",
                    f"{v}.split({rng.randint(1, 3)}, {d})[{rng.choice([0, -1])}]",
                    f"torch.chunk({v}, {rng.randint(1, 3)}, {d})[{rng.choice([0, -1])}]",
                    f"torch.tensor_split({v}, {rng.randint(1, 3)}, {d})[{rng.choice([0, -1])}]",
                    f"{v}.tensor_split({sorted(rng.randint(0, size) for _ in range(2))}, {d})[{rng.randrange(3)}]",
                    f"{v}.expand({', '.join(map(str, _expand_shape(rng, s)))})"]
        if size and size % 2 == 0:
            choices.append(f"{v}.unflatten({d}, (2, -1))")
        if n >= 2:
            choices += [f"{v}.mT", f"{v}.view({_merge(rng, s)})", f"{v}.reshape({_merge(rng, s)})"]
        if n <= 2:
            choices.append(f"{v}.t()")
        if n >= 2:
            choices.append(f"{v}.squeeze(({p.dim(n)}, {p.dim(n)}))")
    choices += [f"{v}.view(-1)", f"{v}.reshape(-1)", f"{v}.squeeze()", f"{v}[None]", f"{v}[...]",
                f"{v}.contiguous()", f"{v}.clone()", f"{v}.view({', '.join(map(str, s)) or '()'})"]
    return p._emit(rng.choice(choices), strided=p.strided[v])


def _perm(rng, n):
    perm = list(range(n))
    rng.shuffle(perm)
    return [d - n if rng.random() < 0.3 else d for d in perm]


def _slices(rng, shape):
    parts = []
    for size in shape[:rng.randint(1, len(shape))]:
        parts.append(rng.choice([":", "1:", "::2", "1::2", "-2:", ":-1", f"{rng.randint(-size, size - 1) if size else 0}",
                                 "None, :", "0:3:2"]))
    if rng.random() < 0.2:
        parts.insert(0, "...")
    return ", ".join(parts)


def _expand_shape(rng, shape):
    out = [rng.choice([-1, s]) if s != 1 else rng.choice([1, 3, -1]) for s in shape]
    return ([2] if rng.random() < 0.5 else []) + out or [2]


def _merge(rng, shape):
    n = len(shape)
    if rng.random() < 0.5 and n >= 2:
        i = rng.randrange(n - 1)
        return ", ".join(map(str, (*shape[:i], -1, *shape[i + 2:])))
    return ", ".join(map(str, (*shape, 1)))


def _joins(p: Program):
    rng = p.rng
    a = p.pick(lambda t: t.dim() >= 1)
    if a is None:
        return False
    ta = p.t(a)
    d = p.dim(ta.dim())
    same = [v for v in p.values if p.t(v).dim() == ta.dim()
            and all(x == y or i == d % ta.dim() for i, (x, y) in enumerate(zip(p.t(v).shape, ta.shape)))]
    b = rng.choice(same)
    small = [v for v in p.values if p.t(v).dim() <= 1]
    if small and rng.random() < 0.15:
        pair = ", ".join(rng.choice(small) for _ in range(2))
        return p._emit(f"torch.meshgrid({pair}, indexing={rng.choice(['ij', 'xy'])!r})[{rng.randrange(2)}]")
    if rng.random() < 0.5:
        return p._emit(f"torch.cat([{a}, {b}], dim={d})" if rng.random() < 0.8 else f"torch.cat(({a}, {b}))")
    same = [v for v in same if p.t(v).shape == ta.shape]
    return p._emit(f"torch.stack([{a}, {rng.choice(same)}], {rng.randrange(-ta.dim() - 1, ta.dim() + 1)})")


def _dimarg(p, n, dtype_ok=False):
    rng = p.rng
    forms = ["", "dim=None", f"{p.dim(n)}", "-1", f"{p.dim(n)}, keepdim=True", f"dim={p.dim(n)}, keepdim=False"]
    if n >= 2:
        forms += [f"({p.dim(n)}, {p.dim(n)})", f"dim=(0, -1), keepdim=True"]
    if n >= 1:
        forms += ["dim=()"]
    form = rng.choice(forms)
    if dtype_ok and rng.random() < 0.25:
        form = ", ".join(x for x in (form, f"dtype={rng.choice(['torch.float64', 'torch.float32', 'torch.int64'])}") if x)
    return form


def _reductions(p: Program):
    rng = p.rng
    v = p.pick()
    t = p.t(v)
    n = t.dim()
    d = p.dim(n)
    choices = [f"{v}.sum({_dimarg(p, n, True)})", f"torch.mean({v}, {_dimarg(p, n, True)})".replace(", )", ")"),
               f"{v}.amax({_dimarg(p, n)})", f"{v}.amin({_dimarg(p, n)})", f"{v}.prod({d}, dtype=torch.float64)",
               f"{v}.prod()", f"{v}.std({_dimarg(p, n)})", f"torch.var({v}, {d}, correction=0)",
               f"{v}.max({d}).values", f"{v}.min({d}, keepdim=True)[1]", f"{v}.argmax({d})",
               f"{v}.argmin()", f"{v}.any({d})", f"{v}.all()", f"torch.cumsum({v}, {d})",
               f"{v}.cumsum({d}, dtype=torch.float64)", f"torch.max({v})", f"{v}.nansum({_dimarg(p, n)})",
               f"torch.linalg.vector_norm({v}, dim={d})", f"{v}.norm()"]
    choices += [f"torch.logsumexp({v}, {d})", f"torch.var_mean({v}, {d})[{rng.randrange(2)}]",
                f"torch.max({v}, {d})"]
    expr = rng.choice(choices).replace("(, ", "(").replace(", )", ")")
    return p._emit(expr)


def _softmax_norms(p: Program):
    rng = p.rng
    v = p.pick(lambda t: t.is_floating_point())
    if v is None:
        return False
    t = p.t(v)
    n, s = t.dim(), tuple(t.shape)
    d = p.dim(n)
    choices = [f"torch.softmax({v}, {d})", f"F.log_softmax({v}, dim={d})", f"{v}.softmax(-1)",
               f"{v}.softmax({d}, dtype=torch.float64)"]
    dt = str(t.dtype)
    if n >= 1:
        k = rng.randint(1, n)
        w = p._new_input(s[-k:], dtype=t.dtype, layout="contiguous")
        choices += [f"F.layer_norm({v}, {s[-k:]}, {w}, None, 1e-5)", f"F.layer_norm({v}, {s[-1:]})",
                    f"F.rms_norm({v}, {s[-k:]}, weight={w} if {rng.random() < 0.5} else None)"]
    if n >= 2:
        c = s[1]
        groups = rng.choice([g for g in (1, 2, 3) if c % g == 0] or [1])
        wc = p._new_input((c,), dtype=t.dtype, layout="contiguous")
        choices.append(f"F.group_norm({v}, {groups}, {wc}, None)")
        rm = p._new_input((c,), dtype=t.dtype, layout="contiguous")
        rv = p._new_input((c,), dtype=t.dtype, layout="contiguous")
        training = rng.random() < 0.5
        choices.append(f"F.batch_norm({v}, {rm}, {rv}.abs() + 0.5 if {not training} else {rv}, {wc}, None, "
                       f"training={training}, momentum=0.3)")
    del dt
    return p._emit(rng.choice(choices))


def _matmul(p: Program):
    rng = p.rng
    a = p.pick(lambda t: 1 <= t.dim() <= 3 and t.dtype in FLOAT)
    if a is None:
        return False
    ta = p.t(a)
    s = tuple(ta.shape)
    m = rng.choice([2, 3])
    dtype = ta.dtype if rng.random() < 0.9 else rng.choice(FLOAT)
    if ta.dim() == 3 and rng.random() < 0.4:
        b = p._new_input((s[0], s[2], m), dtype=dtype)
        return p._emit(f"torch.bmm({a}, {b})")
    if rng.random() < 0.3:
        w = p._new_input((m, s[-1]), dtype=dtype)
        bias = p._new_input((m,), dtype=dtype, layout="contiguous") if rng.random() < 0.6 else "None"
        return p._emit(f"F.linear({a}, {w}, {bias})")
    b = p._new_input((s[-1], m) if rng.random() < 0.8 else (s[-1],), dtype=dtype)
    return p._emit(rng.choice([f"{a} @ {b}", f"torch.matmul({a}, {b})"]))


def _indexing(p: Program):
    rng = p.rng
    v = p.pick(lambda t: t.dim() >= 1)
    if v is None:
        return False
    t = p.t(v)
    n, s = t.dim(), tuple(t.shape)
    d = p.dim(n)
    size = s[d]
    idx_len = rng.randint(0, 4)
    choices = []
    idx = p._new_input((idx_len,), high=size, layout="contiguous")
    choices += [f"{v}.index_select({d}, {idx} % {max(size, 1)})", f"{v}[{idx}]" if d % n == 0 else f"{v}[:, {idx}]",
                f"{v}[torch.tensor({[rng.randrange(size) for _ in range(idx_len)] if size else []}, dtype=torch.long)]"]
    gshape = tuple(rng.randint(0, x) if i != d % n else rng.randint(0, 3) for i, x in enumerate(s))
    gidx = p._new_input(gshape, high=size, layout="contiguous")
    choices += [f"torch.gather({v}, {d}, {gidx}.clamp(0, {max(size - 1, 0)}))",
                f"torch.take_along_dim({v}, {gidx}.clamp(0, {max(size - 1, 0)}), dim={d})"]
    if n >= 2:
        i2 = p._new_input((idx_len,), high=s[1], layout="contiguous")
        choices += [f"{v}[{idx} % {max(s[0], 1)}, {i2}]", f"{v}[{idx} % {max(s[0], 1)}, 1:]"]
    choices += [f"{v}.flip(dims=({d},))",
                f"{v}.index_fill({d}, {idx} % {max(size, 1)}, torch.tensor(2).to({v}.dtype))"]
    return p._emit(rng.choice(choices))


def _elementwise(p: Program):
    rng = p.rng
    a = p.pick()
    ta = p.t(a)
    partners = [v for v in p.values if _broadcasts(p.t(v).shape, ta.shape)]
    b = rng.choice(partners + [p.scalar()])
    strided = p.strided[a] and p.strided.get(b, True)
    choices = [f"{a} + {b}", f"torch.mul({a}, {b})", f"{a} - {b}", f"{a} / {b}", f"torch.maximum({a}, {b})",
               f"torch.where({a} > 0, {a}, {b})", f"({a} < {b})", f"torch.sigmoid({a})", f"{a}.abs()",
               f"torch.relu({a})", f"{a}.to({rng.choice(['torch.float16', 'torch.float64', 'torch.int32', 'torch.bool', 'torch.bfloat16'])})",
               f"{a}.float()", f"torch.exp({a}.clamp(max=4))", f"{a}.clamp(-1, 2)"]
    choices.append(f"{a}.masked_fill({a} > 1, {p.scalar()})")
    return p._emit(rng.choice(choices), strided=strided)


def _broadcasts(a, b):
    try:
        return torch.broadcast_shapes(a, b) == b
    except RuntimeError:
        return False


def _inplace(p: Program):
    rng = p.rng
    v = p.pick(lambda t: not t.requires_grad or not t.is_leaf)
    if v is None:
        return False
    t = p.t(v)
    target = v
    if t.dim() >= 1 and rng.random() < 0.5:
        target = f"{v}[{_slices(rng, tuple(t.shape))}]" if rng.random() < 0.6 else \
            f"{v}.{rng.choice(['t()', 'mT', 'transpose(0, -1)', 'unsqueeze(0)', 'view(-1)', 'select(0, 0)', 'narrow(0, 0, 1)'])}"
    try:
        tt = p.t(target)
    except Exception:
        return False
    partners = [w for w in p.values if _broadcasts(p.t(w).shape, tt.shape)]
    b = rng.choice(partners + [p.scalar()])
    choices = [f"{target}.add_({b})", f"{target}.mul_({b})", f"{target}.copy_({b})",
               f"{target}.clamp_(min=-1)", f"{target}.zero_()", f"{target}.fill_({p.scalar()})"]
    choices.append(f"{target}.masked_fill_({b} > 0, {p.scalar()})")
    if tt.dim() >= 1:
        d = p.dim(tt.dim())
        size = tt.shape[d]
        k = rng.randint(0, 3)
        idx = p._new_input((k,), high=size, layout="contiguous")
        src_shape = tuple(k if i == d % tt.dim() else x for i, x in enumerate(tt.shape))
        src = p._new_input(src_shape, dtype=tt.dtype)
        choices.append(f"{target}.index_add_({d}, {idx} % {max(size, 1)}, {src})")
        key = _slices(rng, tuple(tt.shape))
        choices += [f"{target}[{key}] = {b}", f"{target}[{key}] = {p.scalar()}"]
    line = rng.choice(choices)
    if " = " in line or rng.random() < 0.5:
        return p._emit(line, statement=True)
    return p._emit(line, strided=p.strided[v])


def _factories(p: Program):
    """A new buffer shaped like an operand (zeros, ones, full), or an earlier line's value
    computed again: equal nodes that CSE may merge only while neither is written into."""
    rng = p.rng
    earlier = [line.split(" = ", 1) for line in p.body
               if re.match(r"v\d+ = ", line) and "_(" not in line and "[" not in line.split(" = ", 1)[0]]
    if earlier and rng.random() < 0.4:
        name, expr = rng.choice(earlier)
        return p._emit(expr, strided=p.strided.get(name, False))
    v = p.pick()
    if v is None:
        return False
    t = p.t(v)
    shape, dtype = tuple(t.shape), str(t.dtype)
    return p._emit(rng.choice([f"torch.zeros({shape}, dtype={dtype})",
                               f"torch.ones({shape}, dtype={dtype})",
                               f"torch.full({shape}, {p.scalar()}, dtype={dtype})",
                               f"torch.zeros_like({v})", f"{v}.new_ones({shape})"]), strided=True)


GENERATORS = {        # kind: (weight, generator)
    "views": (5, _views),
    "joins": (1, _joins),
    "reductions": (3, _reductions),
    "softmax_norms": (1.5, _softmax_norms),
    "matmul": (1, _matmul),
    "indexing": (2, _indexing),
    "elementwise": (3, _elementwise),
    "inplace": (3, _inplace),
    "factories": (1.5, _factories),
}
