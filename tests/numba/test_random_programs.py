"""Randomized differential test: random elementwise programs, fused vs eager.

A seeded generator writes plain torch functions (mixed f16/bf16/f32/f64/int/bool inputs,
Python scalars, broadcasting, transposed/sliced/expanded and empty inputs, casts with
``.to``), runs each through ``primtrace.jit`` with the Numba fusion executor and eagerly,
and applies the conformance rule (dtype and shape identical, integers exact, floats close
to eager or at least as close to a float64 run). A failure prints the program's source.
"""
import random
import warnings

import pytest
import torch

from tests.conformance.harness import SampleInput, check_sample
from tests.numba.helpers import fused

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32,
          torch.int64, torch.int8, torch.uint8, torch.bool]
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
SHAPES = [(3, 4), (2, 3, 4), (5,), (0, 3), (4, 1, 6)]

# op name -> (template, arity, accepts bool, accepts integers)
OPS = {
    "add": ("torch.add({0}, {1})", 2, True, True),
    "sub": ("torch.sub({0}, {1})", 2, False, True),
    "mul": ("{0} * {1}", 2, True, True),
    "div": ("{0} / {1}", 2, True, True),
    "maximum": ("torch.maximum({0}, {1})", 2, True, True),
    "minimum": ("torch.minimum({0}, {1})", 2, True, True),
    "where": ("torch.where({0} > {1}, {0}, {1})", 2, True, True),
    "lt": ("({0} < {1})", 2, True, True),
    "eq": ("({0} == {1})", 2, True, True),
    "abs": ("torch.abs({0})", 1, False, True),
    "neg": ("-{0}", 1, False, True),
    "sin": ("torch.sin({0})", 1, True, True),
    "exp": ("torch.exp({0}.clamp(-20, 20))", 1, False, True),
    "sqrt": ("torch.sqrt(torch.abs({0}))", 1, False, True),
    "tanh": ("torch.tanh({0})", 1, True, True),
    "sigmoid": ("torch.sigmoid({0})", 1, True, True),
    "floor": ("torch.floor({0})", 1, False, True),
    "clamp": ("{0}.clamp(min=-2, max=3)", 1, False, True),
    "scale": ("{0} * {s}", 1, True, True),
    "shift": ("{0} + {s}", 1, True, True),
}


class Program:
    def __init__(self, seed: int):
        rng = random.Random(seed)
        self.rng, self.seed = rng, seed
        shape = rng.choice(SHAPES)
        self.inputs, self.params, self.lines = [], [], []
        values = []                    # (name, dtype, is_float)
        for k in range(rng.randint(2, 4)):
            dtype = rng.choice(DTYPES)
            t = self._tensor(shape, dtype)
            name = f"x{k}"
            self.inputs.append(t)
            self.params.append(name)
            values.append((name, dtype))
        scalar = rng.choice([2.5, -1.25, 3, 0.5])
        self.inputs.append(scalar)
        self.params.append("s")
        for i in range(rng.randint(3, 8)):
            op = rng.choice(list(OPS))
            template, arity, bool_ok, int_ok = OPS[op]
            args = [rng.choice(values) for _ in range(arity)]
            if not bool_ok and any(d is torch.bool for _, d in args):
                continue
            expr = template.format(*[a for a, _ in args], s="s")
            name = f"v{i}"
            self.lines.append(f"{name} = {expr}")
            values.append((name, self._result_dtype(expr, args)))
            if rng.random() < 0.25:                     # a cast in the middle
                target = rng.choice(FLOATS + [torch.int32])
                src = values[-1][1]
                if target is torch.int32 and src is not None and src.is_floating_point:
                    expr = f"torch.where({name} == {name}, {name}, 0).clamp(-1000, 1000).to(torch.int32)"
                else:
                    expr = f"{name}.to({target})"
                self.lines.append(f"{name}c = {expr}")
                values.append((f"{name}c", target))
        outs = [values[-1][0]] + ([rng.choice(values[len(self.params) - 1:])[0]] if rng.random() < 0.5 else [])
        self.source = ("def program(" + ", ".join(self.params) + "):\n"
                       + "".join(f"    {line}\n" for line in self.lines)
                       + f"    return {', '.join(outs)}\n")
        namespace = {"torch": torch}
        exec(compile(self.source, f"<random program {seed}>", "exec"), namespace)
        self.fn = namespace["program"]

    def _result_dtype(self, expr, args):
        return None   # unknown after promotion; only used to avoid float -> int casts of NaN

    def _tensor(self, shape, dtype):
        rng = self.rng
        kind = rng.choice(["contiguous", "contiguous", "transposed", "sliced", "expanded",
                           "broadcast", "0-dim"])
        g = torch.Generator().manual_seed(rng.randrange(1 << 30))
        if kind == "0-dim":
            shape = ()
        elif kind == "broadcast" and len(shape) > 1:
            shape = (1,) + tuple(shape[1:])
        base = _values(shape, dtype, g)
        if kind == "transposed" and len(shape) >= 2:
            return _values(tuple(reversed(shape)), dtype, g).permute(*reversed(range(len(shape))))
        if kind == "sliced" and len(shape) >= 1:
            return _values((*shape[:-1], shape[-1] * 2), dtype, g)[..., ::2]
        if kind == "expanded" and len(shape) >= 1 and shape[0] > 0:
            return _values((1, *shape[1:]), dtype, g).expand(*shape)
        return base


def _values(shape, dtype, g):
    if dtype is torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g, dtype=torch.float64) * 8 - 4).to(dtype)
    low = 0 if dtype is torch.uint8 else -20
    return torch.randint(low, 20, shape, generator=g).to(dtype)


SEEDS = list(range(40))


@pytest.mark.parametrize("seed", SEEDS)
def test_random_program_matches_eager(seed):
    program = Program(seed)
    jfn = fused(program.fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        problem = check_sample(jfn, program.fn, SampleInput(tuple(program.inputs), {}, f"seed {seed}"))
    assert problem is None, f"{problem}\n{program.source}"
