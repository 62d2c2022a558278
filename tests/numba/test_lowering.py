"""Lowering with the Numba fusion executor: what the cost model puts back as torch calls
must keep the execution trace valid (no value read before it exists, no region cycle).
These tests run the executor with its cost model (the conftest's jit fuses everything)."""
import random
import warnings

import pytest
import torch

import primtrace
from primtrace.executors import TORCH
from primtrace.executors.execution_trace import LoweringError, lower
from primtrace.executors.numba import NumbaFusionExecutor
from primtrace.jit import OPTIONS, build
from tests.numba.helpers import check_against_eager


def _jit(fn):
    return primtrace.jit(fn, executors=[NumbaFusionExecutor()])


def test_a_call_put_back_does_not_read_a_value_a_region_keeps_in_registers():
    # v0 / v5 reads v0's float32 conversion, which sigmoid's prims made (CSE) inside the
    # first region; run as torch.div(v0, v5) it would read v0, which no region outputs
    def f(a, b, c, d):
        v0 = torch.clamp(c, b, d)
        v3 = abs(torch.sigmoid(v0))
        v5 = torch.remainder(v3, v3)
        v8 = v0 / v5
        return v8, a * v3

    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randint(-5, 5, (3,), dtype=torch.int32, generator=g) for _ in range(3))
    d = torch.randint(-5, 5, (6,), dtype=torch.int32, generator=g)[::2]
    check_against_eager(_jit(f), f, a, b, c, d)
    check_against_eager(_jit(lambda *x: f(*x)[0]), lambda *x: f(*x)[0], a, b, c, d)

    def g(c, d):   # the minimal form: the division alone is put back as torch.div
        v0 = torch.minimum(c, d)
        return v0 / torch.sigmoid(v0).cumsum(0)

    check_against_eager(_jit(g), g, c, d)


def test_a_call_put_back_is_not_ordered_against_writes_and_opaque_calls():
    # logsumexp run as the torch call is as pure as its prims: ordering it against the
    # opaque all() and the in-place mul_ closed a cycle through the region holding them
    def f(i, a):
        lse = i.cumsum(-1, dtype=torch.float32).logsumexp(1)
        i.mul_(a.all(1))
        return lse

    for n in (0, 3):
        i = torch.arange(n * 8).reshape(n, 8) % 3
        a = torch.randn(1, 8)
        check_against_eager(_jit(f), f, i, a)


class _Planned(NumbaFusionExecutor):
    """Partitions and plans as the real executor, compiles nothing (lowering only)."""

    def compile(self, region):
        return lambda *args: None


_STEPS = [
    "{v} = {x}.sin() + {y}",
    "{v} = {x} * 2",
    "{v} = torch.remainder({x}, {y} + 3)",
    "{v} = {x}.cumsum(-1)",
    "{v} = {x}.logsumexp(-1, keepdim=True) + {y}",
    "{v} = torch.softmax({x}, -1)",
    "{v} = {x}.sum(-1, keepdim=True) * {y}",
    "{v} = {x} * {y}.all(-1, keepdim=True)",
    "{v} = {x}.exp().mean(-1, keepdim=True) - {x}",
    "{a}.mul_({x}.abs() + 1); {v} = {a}",
    "{a}.add_({y}.tanh()); {v} = {x}",
    "({x} + 1).mul_(2); {v} = {y}.cos()",
]


def _program(seed: int) -> str:
    rng = random.Random(seed)
    values, lines = ["x0", "x1"], []
    for k in range(rng.randint(3, 7)):
        lines.append(rng.choice(_STEPS).format(v=f"v{k}", x=rng.choice(values),
                                               y=rng.choice(values), a=rng.choice(["x0", "x1"])))
        values.append(f"v{k}")
    outs = rng.sample(values[2:], k=2)
    return "def f(x0, x1):\n    " + "\n    ".join(lines) + f"\n    return {', '.join(outs)}\n"


@pytest.mark.parametrize("seed", range(40))
def test_lowering_never_forms_a_region_cycle(seed):
    """Random programs mixing fused elementwise and row work, calls the cost model puts
    back (cumsum, remainder, logsumexp), opaque calls and in-place writes: lowering finds a
    schedule for every partition (no kernel is compiled: this checks the planner)."""
    source = _program(seed)
    namespace = {"torch": torch}
    exec(source, namespace)
    args = (torch.randn(4, 4), torch.randn(4, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optimized = build(namespace["f"], args, {}, [], dict(OPTIONS), stop="optimized")[-1]
    try:
        lower(optimized, [_Planned(), TORCH])
    except LoweringError as e:
        pytest.fail(f"{e}\n{source}")
