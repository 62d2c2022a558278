"""Conformance of the matrix products (refs.products), the linalg namespace and norms
(refs.linalg, refs.norms), the scans (refs.scans) and the indexing refs (refs.indexing)
against eager: every dtype eager takes (and its refusals, with its exception kinds),
contiguous, transposed and expanded operands, 0-d and empty tensors, negative dims, shape
and dtype errors. tests/tracer/test_jit_conformance.py runs these SPECS through
``primtrace.jit``; below: the torch names that map to the refs, traces that hold no opaque
call, and jit with the default executors.
"""
import math
import re
import warnings

import pytest
import torch

import primtrace
from primtrace import refs
from primtrace.refs import linalg as RL
from primtrace.tracer import mapping
from tests.conformance.binary_helpers import inplace_spec
from tests.conformance.harness import (ALL_DTYPES, OpSpec, SampleInput, check_sample, make_tensor,
                                       run_conformance, with_specials)

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
FLOAT_COMPLEX = FLOATS + (torch.complex64, torch.complex128)
# a few dtypes for the layout and shape variants (every dtype gets the plain samples)
VARIANT_DTYPES = (torch.int64, torch.bfloat16, torch.float32, torch.complex64)


def t(shape, dtype=torch.float32, seed=0, layout="contiguous", domain=(-3.0, 3.0)):
    return make_tensor(shape, dtype, seed=seed, layout=layout, domain=domain)


def _name(dtype):
    return str(dtype).replace("torch.", "")


def spec(name, ref, torch_fn, samples):
    """A spec whose samples are all `samples(spec)` (no generic elementwise samples)."""
    return OpSpec(name, ref, torch_fn, supports_out=False, kwargs_variants=(),
                  extra_samples=samples)


# --- products ---------------------------------------------------------------------------------
MATMUL_SHAPES = (((3, 4), (4, 5)), ((4,), (4,)), ((2, 3, 4), (4,)), ((4,), (2, 4, 5)),
                 ((3, 1, 3, 4), (2, 4, 5)), ((3, 4), (4,)), ((0, 4), (4, 5)), ((3, 0), (0, 5)),
                 ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)))
MATMUL_ERRORS = (((3, 4), (3, 4)), ((), (4,)), ((2, 3, 4), (3, 4, 5)), ((3,), (4,)),
                 ((2, 3, 4), (2, 3, 4)))


def _pairs(shapes, errors, dtypes=ALL_DTYPES):
    def samples(spec):
        for i, dtype in enumerate(dtypes):
            for a, b in shapes:
                yield SampleInput((t(a, dtype, i), t(b, dtype, i + 1)), {}, f"{_name(dtype)} {a}@{b}")
            if dtype in VARIANT_DTYPES:
                for a, b in shapes[:3]:
                    for layout in ("transposed", "expanded"):
                        yield SampleInput((t(a, dtype, 2, layout), t(b, dtype, 3, layout)), {},
                                          f"{_name(dtype)} {layout} {a}@{b}")
        for a, b in errors:
            yield SampleInput((t(a), t(b)), {}, f"error {a}@{b}")
        a, b = shapes[0]
        yield SampleInput((t(a), t(b, torch.float64)), {}, "float32 with float64")
        yield SampleInput((t(a), 2.0), {}, "a number")
    return samples


def _scaled(shapes_of, dtypes=ALL_DTYPES):
    """addmm-style samples: (input, m1, m2) with beta/alpha variants, broadcast inputs."""
    def samples(spec):
        for i, dtype in enumerate(dtypes):
            inp, a, b = shapes_of
            args = (t(inp, dtype, i), t(a, dtype, i + 1), t(b, dtype, i + 2))
            yield SampleInput(args, {}, f"{_name(dtype)}")
            yield SampleInput(args, {"beta": 2, "alpha": 3}, f"{_name(dtype)} beta 2 alpha 3")
            yield SampleInput(args, {"beta": 0}, f"{_name(dtype)} beta 0")
            if dtype in VARIANT_DTYPES:
                yield SampleInput((t(inp[-1:], dtype, i),) + args[1:], {}, f"{_name(dtype)} broadcast input")
                yield SampleInput((t(inp, dtype, 1, "transposed"), t(a, dtype, 2, "transposed"),
                                   t(b, dtype, 3, "expanded")), {"alpha": 0.5}, f"{_name(dtype)} layouts")
        nan = torch.full(shapes_of[0], math.nan)
        yield SampleInput((nan, t(shapes_of[1]), t(shapes_of[2])), {"beta": 0}, "beta 0 ignores NaN")
        yield SampleInput((t(shapes_of[0], torch.float64), t(shapes_of[1]), t(shapes_of[2])), {},
                          "float64 input")
        yield SampleInput((t((7,)), t(shapes_of[1]), t(shapes_of[2])), {}, "bad input shape")
    return samples


def _vectors(name_errors=True):
    def samples(spec):
        for i, dtype in enumerate(ALL_DTYPES):
            yield SampleInput((t((5,), dtype, i), t((5,), dtype, i + 1)), {}, _name(dtype))
            yield SampleInput((t((0,), dtype), t((0,), dtype)), {}, f"{_name(dtype)} empty")
        yield SampleInput((t((6,), seed=1, layout="sliced"), t((6,), seed=2, layout="expanded")), {}, "layouts")
        yield SampleInput((t((5,)), t((4,))), {}, "sizes")
        yield SampleInput((t((2, 5)), t((2, 5))), {}, "2-d")
        yield SampleInput((t((5,)), t((5,), torch.float64)), {}, "dtypes")
        yield SampleInput((t((5,), torch.int32), t((5,))), {}, "int with float")
    return samples


def _outer_samples(spec):
    yield from _vectors()(spec)
    yield SampleInput((t((3,)), t((4,))), {}, "3 and 4")
    yield SampleInput((t(()), t((4,))), {}, "0-d")


def _inner_samples(spec):
    for i, dtype in enumerate(ALL_DTYPES):
        yield SampleInput((t((3, 4), dtype, i), t((5, 4), dtype, i + 1)), {}, _name(dtype))
    for a, b in (((4,), (4,)), ((2, 3, 4), (5, 6, 4)), ((3, 4), (4,)), ((2, 3, 4), (5, 4)), ((), (3, 4)),
                 ((3, 4), (3,)), ((0, 4), (2, 4))):
        yield SampleInput((t(a), t(b, seed=1)), {}, f"{a} {b}")
    yield SampleInput((t((3, 4), layout="transposed"), t((2, 5, 4), layout="expanded")), {}, "layouts")
    yield SampleInput((t((3, 4), torch.float16), t((2, 5, 4), torch.float16)), {}, "float16 3-d")
    yield SampleInput((t((3, 4), torch.int32), t((5, 4))), {}, "int with float")


def _trace_samples(spec):
    for i, dtype in enumerate(ALL_DTYPES):
        yield SampleInput((t((4, 5), dtype, i),), {}, _name(dtype))
    for shape, layout in (((5, 3), "transposed"), ((3, 3), "expanded"), ((0, 3), "contiguous"),
                          ((4,), "contiguous"), ((), "contiguous"), ((4, 6), "sliced")):
        yield SampleInput((t(shape, layout=layout),), {}, f"{shape} {layout}")


def _cross_samples(linalg):
    def samples(spec):
        kw = (lambda d: {"dim": d})
        for i, dtype in enumerate(ALL_DTYPES):
            yield SampleInput((t((4, 3), dtype, i), t((4, 3), dtype, i + 1)), kw(-1), _name(dtype))
        yield SampleInput((t((3, 4)), t((3, 4), seed=1)), kw(0), "dim 0")
        yield SampleInput((t((3, 4), layout="transposed"), t((3, 4), seed=1, layout="expanded")), kw(0), "layouts")
        yield SampleInput((t((1, 3)), t((5, 3), seed=1)), kw(1), "broadcast")
        yield SampleInput((t((3,)), t((2, 3), seed=1)), kw(-1), "ranks differ")
        yield SampleInput((t((4, 4)), t((4, 4), seed=1)), kw(-1), "no size 3")
        yield SampleInput((t((4, 3)), t((4, 3), torch.float64)), kw(-1), "dtypes")
        yield SampleInput((t((0, 3)), t((0, 3))), kw(1), "empty")
        if not linalg:
            yield SampleInput((t((3, 4)), t((3, 4), seed=1)), {}, "dim None")
    return samples


# --- norms ------------------------------------------------------------------------------------
def _vector_norm_samples(spec):
    for i, dtype in enumerate(FLOAT_COMPLEX):
        x = with_specials(t((3, 5), dtype, i)) if i % 2 else t((3, 5), dtype, i)
        for ord in (2, 1, 0, 3, 0.5, math.inf, -math.inf, -1):
            yield SampleInput((x, ord), {}, f"{_name(dtype)} ord={ord}")
        yield SampleInput((x, 2, (0, -1), True), {}, f"{_name(dtype)} dims keepdim")
        yield SampleInput((x, 2, -1), {}, f"{_name(dtype)} dim -1")
    x = t((3, 5))
    yield SampleInput((x.t(),), {"dim": 0}, "transposed")
    yield SampleInput((t((4,), layout="expanded"),), {}, "expanded")
    yield SampleInput((t(()),), {}, "0-d")
    yield SampleInput((torch.empty(0, 3),), {}, "empty")
    yield SampleInput((torch.empty(0, 3), math.inf), {}, "empty inf")
    yield SampleInput((torch.empty(0, 3), 2, 1), {}, "empty dim 1")
    yield SampleInput((x,), {"dtype": torch.float64}, "dtype=float64")
    yield SampleInput((t((3, 5), torch.float16),), {"dtype": torch.float32}, "float16 dtype=float32")
    yield SampleInput((x,), {"dtype": torch.float16}, "narrowing dtype")
    yield SampleInput((t((3, 5), torch.int64),), {}, "int64")
    yield SampleInput((t((3, 5), torch.bool),), {}, "bool")
    yield SampleInput((x, 2, 2), {}, "dim out of range")


def _matrix_norm_samples(spec):
    for i, dtype in enumerate(FLOAT_COMPLEX):
        x = t((2, 3, 4), dtype, i)
        for ord in ("fro", 1, -1, math.inf, -math.inf):
            yield SampleInput((x, ord), {}, f"{_name(dtype)} ord={ord}")
    x = t((2, 3, 4))
    yield SampleInput((x, 1, (0, 2), True), {}, "dims keepdim")
    yield SampleInput((x, math.inf, (-1, 0)), {}, "reversed dims")
    yield SampleInput((x.transpose(0, 2),), {}, "transposed")
    yield SampleInput((x, 3), {}, "bad ord")
    yield SampleInput((t((4,)),), {}, "1-d")
    yield SampleInput((t((3, 4), torch.int64),), {}, "int64")
    yield SampleInput((x, "fro", (0, 0)), {}, "same dims")


def _linalg_norm_samples(spec):
    x2, x3 = t((3, 4)), t((2, 3, 4), seed=1)
    for args, kw in (((x2,), {}), ((x3,), {}), ((x2, 1), {}), ((t((4,)), 3), {}), ((x2, math.inf), {}),
                     ((x2,), {"dim": 1}), ((x2, 1), {"dim": 0}), ((x3, "fro"), {"dim": (0, 2)}),
                     ((x3,), {"dim": (1, 2), "keepdim": True}), ((x3, 2), {}), ((x2, "fro"), {"dim": 1}),
                     ((x2,), {"dtype": torch.float64}), ((t((3, 4), torch.complex64),), {})):
        yield SampleInput(args, kw, f"{[tuple(a.shape) if hasattr(a, 'shape') else a for a in args]} {kw}")


def _norm_samples(spec):
    x = t((3, 4))
    for args, kw in (((x,), {}), ((x, 1), {}), ((x, "fro", 1), {}), ((x, 3, (0, 1), True), {}),
                     ((x, math.inf), {"dim": 0}), ((x,), {"dtype": torch.float64}),
                     ((t((3, 4), torch.float16), 1), {}), ((t((3, 4), torch.int64),), {}),
                     ((t((3, 4), torch.complex64),), {}), ((t(()),), {}), ((x.t(), 2, -1), {})):
        yield SampleInput(args, kw, f"{len(args)} args {kw}")


def _logsumexp_samples(spec):
    for i, dtype in enumerate(ALL_DTYPES[:-2]):
        x = t((3, 5), dtype, i, domain=(-30.0, 30.0))
        yield SampleInput((x, 1), {}, _name(dtype))
        yield SampleInput((x, (0, 1)), {"keepdim": True}, f"{_name(dtype)} all dims keepdim")
    for dtype in FLOATS:
        inf = torch.full((2, 3), -math.inf, dtype=dtype)
        inf[1, 0] = math.inf
        yield SampleInput((inf, 1), {}, f"{_name(dtype)} infinities")
        yield SampleInput((with_specials(t((2, 5), dtype)), -1), {}, f"{_name(dtype)} specials")
    yield SampleInput((t((4, 3), layout="transposed"), 0), {}, "transposed")
    yield SampleInput((t((4, 3), layout="expanded"), -2), {}, "expanded")
    yield SampleInput((t(()), 0), {}, "0-d")
    yield SampleInput((torch.empty(0, 3), 0), {}, "empty")
    yield SampleInput((torch.empty(0, 3), 1), {}, "empty rows")
    yield SampleInput((t((3, 4)), 2), {}, "bad dim")


def _renorm_samples(spec):
    for i, dtype in enumerate(FLOAT_COMPLEX[:4]):
        x = t((3, 4), dtype, i)
        yield SampleInput((x, 2, 0, 3.0), {}, _name(dtype))
        yield SampleInput((x, 1, -1, 2.0), {}, f"{_name(dtype)} p=1 dim -1")
    yield SampleInput((t((3, 4), layout="transposed"), 3, 1, 1.0), {}, "transposed")
    yield SampleInput((t((3, 4)), -1, 0, 1.0), {}, "negative p")
    yield SampleInput((t((3, 4)), 2, 0, -1.0), {}, "negative maxnorm")
    yield SampleInput((t((3, 4), torch.int64), 2, 0, 1.0), {}, "int64")


# --- scans --------------------------------------------------------------------------------------
def _scan_samples(spec):
    for i, dtype in enumerate(ALL_DTYPES):
        x = t((3, 4), dtype, i, domain=(-2.0, 2.0))
        yield SampleInput((x, 1), {}, _name(dtype))
        yield SampleInput((x, -2), {}, f"{_name(dtype)} dim -2")
    for dtype in FLOATS:
        yield SampleInput((with_specials(t((2, 5), dtype)), 1), {}, f"{_name(dtype)} specials")
    yield SampleInput((t((3, 4), layout="transposed"), 0), {}, "transposed")
    yield SampleInput((t((3, 4), layout="expanded"), 0), {}, "expanded")
    yield SampleInput((t(()), 0), {}, "0-d")
    yield SampleInput((torch.empty(0, 3), 1), {}, "empty")
    yield SampleInput((t((3, 4), torch.int32), 1), {"dtype": torch.float64}, "dtype=")
    yield SampleInput((t((3, 4)), 2), {}, "bad dim")


def _arg_samples(spec):
    for i, dtype in enumerate(ALL_DTYPES):
        x = t((3, 4), dtype, i)
        yield SampleInput((x,), {}, _name(dtype))
        yield SampleInput((x, 1), {}, f"{_name(dtype)} dim 1")
        yield SampleInput((x, -2, True), {}, f"{_name(dtype)} dim -2 keepdim")
    for dtype in FLOATS:
        yield SampleInput((with_specials(t((2, 5), dtype)), 1), {}, f"{_name(dtype)} specials")
    ties = torch.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]])
    yield SampleInput((ties, 1), {}, "ties")
    yield SampleInput((t((3, 4), layout="transposed"), 0), {}, "transposed")
    yield SampleInput((t(()),), {"keepdim": True}, "0-d")
    yield SampleInput((t(()), 0), {}, "0-d dim 0")
    yield SampleInput((t((3, 4)),), {"keepdim": True}, "keepdim all")
    yield SampleInput((torch.empty(0, 3), 1), {}, "empty rows")
    yield SampleInput((torch.empty(0, 3), 0), {}, "empty dim")
    yield SampleInput((torch.empty(0, 3),), {}, "empty all")


def _min_max_samples(spec):
    """max/min: argmax's samples (the reduction and values with indices along a dim), and
    the elementwise form with a tensor other."""
    yield from _arg_samples(spec)
    for i, dtype in enumerate(ALL_DTYPES):
        yield SampleInput((t((3, 4), dtype, i), t((4,), dtype, i + 7)), {}, f"{_name(dtype)} other")
    yield SampleInput((t((3, 4)),), {"other": t((3, 1), torch.float64)}, "other= promotes")
    yield SampleInput((t((3, 4)), t((3,))), {}, "other mismatch")


def _bucketize_samples(spec):
    b = torch.tensor([-1.0, 0.0, 0.5, 2.0])
    for i, dtype in enumerate((torch.int64, torch.float16, torch.float32, torch.float64)):
        x = t((3, 5), dtype, i)
        for kw in ({}, {"right": True}, {"out_int32": True}):
            yield SampleInput((x, b), kw, f"{_name(dtype)} {kw}")
    x = torch.tensor([math.nan, -1.0, 0.0, 0.5, 2.0, -5.0, math.inf, -math.inf])
    yield SampleInput((x, b), {}, "specials")
    yield SampleInput((x, b), {"right": True}, "specials right")
    yield SampleInput((x, b.double()), {}, "float64 boundaries")
    yield SampleInput((t((3, 4), layout="transposed"), b), {}, "transposed")
    yield SampleInput((t(()), b), {}, "0-d")
    yield SampleInput((torch.empty(0, 2), b), {}, "empty")
    yield SampleInput((x, b[None]), {}, "2-d boundaries")


# --- indexing -----------------------------------------------------------------------------------
def _index(values, dtype=torch.int64):
    return torch.tensor(values, dtype=dtype)


def _index_select_samples(spec):
    i = _index([2, 0, 2])
    for k, dtype in enumerate(ALL_DTYPES):
        yield SampleInput((t((3, 4), dtype, k), 0, i), {}, _name(dtype))
        yield SampleInput((t((3, 4), dtype, k), -1, i.int()), {}, f"{_name(dtype)} dim -1 int32")
    for layout in ("transposed", "expanded", "sliced"):
        yield SampleInput((t((3, 4), layout=layout), 1, i), {}, layout)
    yield SampleInput((t((3, 4)), 0, _index(1)), {}, "0-d index")
    yield SampleInput((t(()), 0, _index([0])), {}, "0-d input")
    yield SampleInput((t(()), 0, _index([0, 0])), {}, "0-d input two values")
    yield SampleInput((t((3, 4)), 0, _index([], torch.int64)), {}, "empty index")
    yield SampleInput((torch.empty(0, 4), 1, i), {}, "empty input")
    yield SampleInput((t((3, 4)), 0, i.float()), {}, "float index")
    yield SampleInput((t((3, 4)), 0, i[None]), {}, "2-d index")
    yield SampleInput((t((3, 4)), 2, i), {}, "bad dim")
    yield SampleInput((t((3, 4)), 0, _index([3])), {}, "out of range")
    yield SampleInput((t((3, 4)), 0, _index([-1])), {}, "negative")


def _gather_samples(spec):
    idx = _index([[0, 1, 2], [2, 2, 0]])
    for k, dtype in enumerate(ALL_DTYPES):
        yield SampleInput((t((3, 4), dtype, k), 0, idx), {}, _name(dtype))
        yield SampleInput((t((3, 4), dtype, k), -1, idx.int()), {}, f"{_name(dtype)} dim -1 int32")
    for layout in ("transposed", "expanded"):
        yield SampleInput((t((3, 4), layout=layout), 1, idx), {}, layout)
    yield SampleInput((t((3, 4)), 1, idx.t().contiguous().t()), {}, "transposed index")
    yield SampleInput((t((3,)), 0, _index(1)), {}, "0-d index")
    yield SampleInput((t(()), 0, _index([0, 0])), {}, "0-d input")
    yield SampleInput((t((3, 4)), 0, torch.empty(0, 2, dtype=torch.int64)), {}, "empty index")
    yield SampleInput((t((3, 4)), 0, idx.float()), {}, "float index")
    yield SampleInput((t((3, 4)), 0, _index([1, 2])), {}, "ranks differ")
    yield SampleInput((t((3, 4)), 1, _index([[0]] * 4)), {}, "index too large")
    yield SampleInput((t((3, 4)), 1, _index([[0, 7]])), {}, "out of range")


def _take_samples(spec):
    for k, dtype in enumerate(ALL_DTYPES):
        yield SampleInput((t((3, 4), dtype, k), _index([[0, 11], [5, -12]])), {}, _name(dtype))
    yield SampleInput((t((3, 4), layout="transposed"), _index([1, 2, 3])), {}, "transposed")
    yield SampleInput((t((3, 4), layout="expanded"), _index([1, 2, 7])), {}, "expanded")
    yield SampleInput((t(()), _index(0)), {}, "0-d")
    yield SampleInput((t((3, 4)), _index([], torch.int64)), {}, "empty")
    yield SampleInput((t((3, 4)), _index([12])), {}, "out of range")
    yield SampleInput((t((3, 4)), _index([1]).int()), {}, "int32")


def _take_along_samples(spec):
    for k, dtype in enumerate(ALL_DTYPES):
        yield SampleInput((t((3, 4), dtype, k), _index([[0], [1], [3]]), 1), {}, _name(dtype))
    x = t((3, 4))
    yield SampleInput((x, _index([[0, 2]]), 1), {}, "broadcast index")
    yield SampleInput((x, _index([[2], [0]]).t(), 0), {}, "broadcast input")
    yield SampleInput((x, _index([[0, 2]]), -1), {}, "dim -1")
    yield SampleInput((x, _index([5, 0])), {}, "dim None")
    yield SampleInput((x, _index(5)), {}, "dim None 0-d")
    yield SampleInput((x.t(), _index([[0, 1]]), 0), {}, "transposed")
    yield SampleInput((x, _index([0, 1]), 1), {}, "ranks differ")
    yield SampleInput((x, _index([[0]]).int(), 1), {}, "int32")


def _scatter_samples(spec, kind):
    idx = _index([[0, 1, 2], [1, 2, 0]])
    dup = _index([[0, 0, 2], [0, 0, 0]])
    for k, dtype in enumerate(ALL_DTYPES):
        x, src = t((3, 4), dtype, k), t((2, 3), dtype, k + 1)
        args = (x, 0, idx, src) if kind != "reduce" else (x, 0, idx, src, "sum")
        yield SampleInput(args, {}, _name(dtype))
        if kind == "scatter":
            yield SampleInput((x, 1, idx, 2), {}, f"{_name(dtype)} value")
    x, src = t((3, 4)), t((2, 3), seed=1)
    base = (x, -2, dup, src)
    if kind == "reduce":
        for reduce in ("sum", "prod", "mean", "amax", "amin"):
            yield SampleInput(base + (reduce,), {}, reduce)
            yield SampleInput(base + (reduce,), {"include_self": False}, f"{reduce} exclude self")
        yield SampleInput(base + ("max",), {}, "bad reduce")
        return
    yield SampleInput(base, {}, "dim -2 repeated (add)" if kind == "add" else "dim -2")
    yield SampleInput((x.t(), 1, idx, src.t().contiguous().t()), {}, "transposed")
    yield SampleInput((x, 0, idx.int(), src), {}, "int32 index")
    yield SampleInput((x, 0, idx.float(), src), {}, "float index")
    yield SampleInput((x, 0, idx, src.double()), {}, "src dtype")
    yield SampleInput((x, 0, idx, src[:, :2]), {}, "src too small")
    yield SampleInput((x, 0, _index([[5]]), src), {}, "out of range")
    yield SampleInput((x, 0, torch.empty(0, 3, dtype=torch.int64), src), {}, "empty index")
    if kind == "scatter":
        yield SampleInput(base, {"reduce": "add"}, "reduce add")
        yield SampleInput(base, {"reduce": "multiply"}, "reduce multiply")
        yield SampleInput((x, 0, dup, 1.5), {"reduce": "add"}, "value reduce add")
        yield SampleInput(base, {"reduce": "mean"}, "bad reduce")
        yield SampleInput((t((3, 4), torch.int8), 0, idx, 1000), {}, "value overflows")


def _index_write_samples(spec, kind):
    i = _index([2, 0])
    for k, dtype in enumerate(ALL_DTYPES):
        x, source = t((3, 4), dtype, k), t((2, 4), dtype, k + 1)
        if kind == "fill":
            yield SampleInput((x, 0, i, 2), {}, _name(dtype))
            yield SampleInput((x, -1, i, -1.5), {}, f"{_name(dtype)} dim -1 float")
        else:
            yield SampleInput((x, 0, i, source), {}, _name(dtype))
    x, source = t((3, 4)), t((2, 4), seed=1)
    if kind == "fill":
        yield SampleInput((x.t(), 1, i, 2.5), {}, "transposed")
        yield SampleInput((x, 0, i.int(), 2), {}, "int32 index")
        yield SampleInput((x, 0, i[None], 2), {}, "2-d index")
        yield SampleInput((t((3, 4), torch.int8), 0, i, 1000), {}, "value overflows")
        yield SampleInput((x, 0, _index([5]), 2), {}, "out of range")
        yield SampleInput((x, 0, i, torch.tensor([2.0])), {}, "1-d value")
        return
    yield SampleInput((x.t(), 1, i, source.t()), {}, "transposed")
    yield SampleInput((x, 0, _index([1, 1]), source), {}, "repeated index")
    yield SampleInput((x, -2, i, source), {}, "dim -2")
    yield SampleInput((x, 0, i.int(), source), {}, "int32 index")
    yield SampleInput((x, 0, i.float(), source), {}, "float index")
    yield SampleInput((x, 0, i[None], source), {}, "2-d index")
    yield SampleInput((x, 0, i, source.double()), {}, "source dtype")
    yield SampleInput((x, 0, i, t((3, 4))), {}, "index and source sizes")
    yield SampleInput((x, 0, i, t((2, 5))), {}, "slice shapes")
    yield SampleInput((x, 0, _index([5, 0]), source), {}, "out of range")
    if kind == "add":
        yield SampleInput((x, 0, i, source), {"alpha": 2.5}, "alpha")
        yield SampleInput((t((3, 4), torch.int64), 0, i, t((2, 4), torch.int64)), {"alpha": 3}, "int alpha")
        yield SampleInput((t((3, 4), torch.int64), 0, i, t((2, 4), torch.int64)), {"alpha": 1.5},
                          "int float alpha")


def _embedding_samples(spec):
    w = t((6, 4))
    for k, dtype in enumerate(FLOAT_COMPLEX + (torch.int64,)):
        yield SampleInput((_index([[0, 5], [2, 2]]), t((6, 3), dtype, k)), {}, _name(dtype))
    yield SampleInput((_index([1, 2]).int(), w), {}, "int32 indices")
    yield SampleInput((_index(3), w), {}, "0-d indices")
    yield SampleInput((_index([1, 2]), w.t()), {}, "transposed weight")
    yield SampleInput((_index([1, 2]), w), {"padding_idx": 2}, "padding_idx")
    yield SampleInput((_index([1, 2]), w), {"padding_idx": -1}, "negative padding_idx")
    yield SampleInput((_index([1, 2]), w), {"padding_idx": 9}, "bad padding_idx")
    yield SampleInput((_index([1, 6]), w), {}, "out of range")
    yield SampleInput((_index([1, 2]).float(), w), {}, "float indices")
    yield SampleInput((_index([1]), w[0]), {}, "1-d weight")
    yield SampleInput((torch.empty(0, 2, dtype=torch.int64), w), {}, "empty")


def _method(name):
    def call(self, *args, **kwargs):
        return getattr(self, name)(*args, **kwargs)
    call.__name__ = name
    return call


import torch.nn.functional as F  # noqa: E402
from primtrace.refs.nn import functional as RF  # noqa: E402

SPECS = [
    spec("matmul", refs.matmul, torch.matmul, _pairs(MATMUL_SHAPES, MATMUL_ERRORS)),
    spec("mm", refs.mm, torch.mm, _pairs((((3, 4), (4, 5)), ((0, 4), (4, 2)), ((3, 0), (0, 2))),
                                         (((3, 4), (3, 4)), ((4,), (4, 2)), ((3, 4), (4,))))),
    spec("bmm", refs.bmm, torch.bmm, _pairs((((2, 3, 4), (2, 4, 5)), ((0, 3, 4), (0, 4, 2))),
                                            (((2, 3, 4), (1, 4, 5)), ((3, 4), (4, 5)), ((2, 3, 4), (2, 5, 5))))),
    spec("mv", refs.mv, torch.mv, _pairs((((3, 4), (4,)), ((0, 4), (4,))),
                                         (((3, 4), (5,)), ((4,), (4,)), ((3, 4), (3, 4))))),
    spec("dot", refs.dot, torch.dot, _vectors()),
    spec("vdot", refs.vdot, torch.vdot, _vectors()),
    spec("outer", refs.outer, torch.outer, _outer_samples),
    spec("ger", refs.ger, torch.ger, _outer_samples),
    spec("inner", refs.inner, torch.inner, _inner_samples),
    spec("addmm", refs.addmm, torch.addmm, _scaled(((3, 5), (3, 4), (4, 5)))),
    spec("addmv", refs.addmv, torch.addmv, _scaled(((3,), (3, 4), (4,)))),
    spec("baddbmm", refs.baddbmm, torch.baddbmm, _scaled(((2, 3, 5), (2, 3, 4), (2, 4, 5)), FLOAT_COMPLEX)),
    spec("addbmm", refs.addbmm, torch.addbmm, _scaled(((3, 5), (2, 3, 4), (2, 4, 5)), FLOAT_COMPLEX)),
    spec("addr", refs.addr, torch.addr, _scaled(((3, 5), (3,), (5,)))),
    spec("trace", refs.trace, torch.trace, _trace_samples),
    spec("cross", refs.cross, torch.cross, _cross_samples(False)),
    spec("linalg.cross", RL.cross, torch.linalg.cross, _cross_samples(True)),
    spec("linalg.vecdot", RL.vecdot, torch.linalg.vecdot, _pairs((((3, 4), (3, 4)), ((3, 4), (4,)),
                                                                ((0, 4), (0, 4))), (((3, 4), (3, 5)),), ALL_DTYPES)),
    spec("linalg.vector_norm", RL.vector_norm, torch.linalg.vector_norm, _vector_norm_samples),
    spec("linalg.matrix_norm", RL.matrix_norm, torch.linalg.matrix_norm, _matrix_norm_samples),
    spec("linalg.norm", RL.norm, torch.linalg.norm, _linalg_norm_samples),
    spec("norm", refs.norm, torch.norm, _norm_samples),
    spec("logsumexp", refs.logsumexp, torch.logsumexp, _logsumexp_samples),
    spec("renorm", refs.renorm, torch.renorm, _renorm_samples),
    spec("cumsum", refs.cumsum, torch.cumsum, _scan_samples),
    spec("cumprod", refs.cumprod, torch.cumprod, _scan_samples),
    spec("argmax", refs.argmax, torch.argmax, _arg_samples),
    spec("argmin", refs.argmin, torch.argmin, _arg_samples),
    spec("max", refs.max, torch.max, _min_max_samples),
    spec("min", refs.min, torch.min, _min_max_samples),
    spec("bucketize", refs.bucketize, torch.bucketize, _bucketize_samples),
    spec("index_select", refs.index_select, torch.index_select, _index_select_samples),
    spec("gather", refs.gather, torch.gather, _gather_samples),
    spec("take", refs.take, torch.take, _take_samples),
    spec("take_along_dim", refs.take_along_dim, torch.take_along_dim, _take_along_samples),
    spec("scatter", refs.scatter, torch.scatter, lambda s: _scatter_samples(s, "scatter")),
    spec("scatter_add", refs.scatter_add, torch.scatter_add, lambda s: _scatter_samples(s, "add")),
    spec("scatter_reduce", refs.scatter_reduce, torch.scatter_reduce,
         lambda s: _scatter_samples(s, "reduce")),
    spec("index_add", refs.index_add, torch.index_add, lambda s: _index_write_samples(s, "add")),
    spec("index_copy", refs.index_copy, torch.index_copy, lambda s: _index_write_samples(s, "copy")),
    spec("index_fill", refs.index_fill, torch.index_fill, lambda s: _index_write_samples(s, "fill")),
    spec("embedding", RF.embedding, F.embedding, _embedding_samples),
]
INPLACE_SPECS = [
    inplace_spec(next(s for s in SPECS if s.name == name), getattr(refs, name + "_"), name + "_",
                 extra_samples=next(s for s in SPECS if s.name == name).extra_samples)
    for name in ("index_add", "index_copy", "index_fill", "scatter", "scatter_add", "cumsum")
]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("spec", SPECS + INPLACE_SPECS, ids=str)
def test_conformance(spec):
    run_conformance(spec)


FUSED = ["addmm", "addr", "cross", "linalg.vector_norm", "linalg.matrix_norm", "logsumexp",
         "renorm", "bucketize"]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name", FUSED)
def test_fused_slice(name):
    from tests.conformance.test_nn_composites import fused_slice
    fused_slice(next(s for s in SPECS if s.name == name), 6)


# --- mapping, tracing, jit ------------------------------------------------------------------------
TORCH_NAMES = [
    (torch.matmul, refs.matmul), (torch.Tensor.__matmul__, refs.matmul), (torch.mm, refs.mm),
    (torch.Tensor.mm, refs.mm), (torch.bmm, refs.bmm), (torch.mv, refs.mv), (torch.dot, refs.dot),
    (torch.vdot, refs.vdot), (torch.inner, refs.inner), (torch.outer, refs.outer),
    (torch.ger, refs.ger), (torch.addmm, refs.addmm), (torch.addmv, refs.addmv),
    (torch.addbmm, refs.addbmm), (torch.baddbmm, refs.baddbmm), (torch.addr, refs.addr),
    (torch.trace, refs.trace), (torch.cross, refs.cross), (torch.linalg.cross, RL.cross),
    (torch.linalg.vecdot, RL.vecdot), (torch.linalg.matmul, refs.matmul),
    (torch.linalg.vector_norm, RL.vector_norm), (torch.linalg.matrix_norm, RL.matrix_norm),
    (torch.linalg.norm, RL.norm), (torch.norm, refs.norm), (torch.Tensor.norm, refs.norm),
    (torch.logsumexp, refs.logsumexp), (torch.renorm, refs.renorm), (torch.cumsum, refs.cumsum),
    (torch.Tensor.cumprod, refs.cumprod), (torch.argmax, refs.argmax), (torch.argmin, refs.argmin),
    (torch.max, refs.max), (torch.Tensor.min, refs.min),
    (torch.bucketize, refs.bucketize), (torch.index_select, refs.index_select),
    (torch.gather, refs.gather), (torch.take, refs.take), (torch.take_along_dim, refs.take_along_dim),
    (torch.scatter, refs.scatter), (torch.scatter_add, refs.scatter_add),
    (torch.scatter_reduce, refs.scatter_reduce), (torch.index_add, refs.index_add),
    (torch.index_copy, refs.index_copy), (torch.index_fill, refs.index_fill),
    (torch.Tensor.index_add_, refs.index_add_), (torch.Tensor.scatter_, refs.scatter_),
    (F.embedding, RF.embedding), (torch.embedding, refs.embedding),
]


@pytest.mark.parametrize("func,expected", TORCH_NAMES, ids=lambda x: getattr(x, "__name__", ""))
def test_torch_names_map_to_the_refs(func, expected):
    assert mapping.resolve(func).ref is expected


def _program(a, b, v, w, idx, table, rows):
    h = torch.matmul(a, b) + torch.mm(a, b).relu() + torch.addmm(v, a, b, beta=0.5)
    h = h + torch.outer(w, v) + torch.inner(a, a).sum() * torch.dot(v, v)
    s = torch.cumsum(h, 1) + h.logsumexp(-1, keepdim=True) + torch.linalg.vector_norm(h, dim=0)
    g = torch.gather(s, 1, idx) + torch.index_select(s, 1, rows)
    e = F.embedding(idx, table).sum(-1)
    out = torch.scatter_add(torch.zeros_like(s), 1, idx, g).index_add(0, rows, s)
    return out + e.sum() + torch.argmax(s, 1, keepdim=True) + torch.trace(h)


def _args(dtype):
    return (t((3, 4), dtype, 1), t((4, 5), dtype, 2), t((5,), dtype, 3), t((3,), dtype, 5),
            torch.tensor([[0, 2, 1], [1, 1, 2], [2, 0, 0]]), t((3, 6), dtype, 4),
            torch.tensor([2, 0, 1]))


def test_program_traces_to_prims():
    trace = primtrace.trace(_program, stage="prims")(*_args(torch.float32))
    opaque = [n.symbol.name for n in trace.flat_nodes() if n.symbol.kind == "opaque"]
    assert opaque == [], opaque


@pytest.mark.parametrize("executors", [None, [primtrace.TORCH]], ids=["default", "torch"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_jit_program(dtype, executors):
    jfn = primtrace.jit(_program, executors=executors)
    for _ in range(2):
        problem = check_sample(jfn, _program, SampleInput(_args(dtype), {}, str(dtype)))
        assert problem is None, problem


def test_gradients_through_jit_are_eagers():
    def make():
        a, b, v, w, idx, table, rows = _args(torch.float64)
        return [a.requires_grad_(), b.requires_grad_(), v, w, idx, table.requires_grad_(), rows]
    ours, eager = make(), make()
    primtrace.jit(_program)(*ours).sum().backward()
    _program(*eager).sum().backward()
    for x, y in zip(ours, eager):
        if y.grad is not None:
            assert torch.allclose(x.grad, y.grad)


def test_out_is_left_to_torch_and_spectral_norms_use_svdvals():
    a, b = t((3, 4)), t((4, 5))
    assert refs.mm.declines(a, b, out=torch.empty(3, 5))
    assert not RL.matrix_norm.declines(a, 2) and not RL.matrix_norm.declines(a, "nuc")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = primtrace.jit(lambda x: torch.linalg.matrix_norm(x, "nuc") + torch.norm(x, "nuc"))(a)
    assert torch.allclose(got, 2 * torch.linalg.matrix_norm(a, "nuc"))


def test_index_errors_are_raised_when_the_trace_runs():
    jfn = primtrace.jit(lambda x, i: torch.index_select(x, 0, i))
    x = t((3, 4))
    assert torch.equal(jfn(x, _index([2, 0])), x[[2, 0]])
    with pytest.raises(IndexError):
        jfn(x, _index([3, 0]))


@pytest.mark.parametrize("kwargs", [{}, {"offset": 1}, {"offset": -2}, {"dim1": 0, "dim2": 2},
                                    {"dim1": 1, "dim2": 1}])
def test_linalg_diagonal(kwargs):
    x = torch.randn(3, 4, 5)
    try:
        expected = torch.linalg.diagonal(x, **kwargs)
    except RuntimeError:
        with pytest.raises(RuntimeError):
            refs.linalg.diagonal(x, **kwargs)
        return
    got = refs.linalg.diagonal(x, **kwargs)
    assert torch.equal(got, expected) and got.stride() == expected.stride()
    assert got.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


@pytest.mark.parametrize("index", [[0, -1, 2], [[1, 2], [3, -6]], [5], [], [6], [-7]])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_getitem_with_an_integer_tensor_gathers_rows(index, index_dtype, dtype):
    """x[i] with one integer tensor (a row-major x): index_select of the wrapped indices, and
    eager's IndexError, checked when the trace runs, for one out of bounds; eagerly and in jit."""
    x = torch.arange(36).reshape(6, 3, 2).to(dtype)
    i = torch.tensor(index, dtype=index_dtype)
    fn = lambda x, i: x[i]  # noqa: E731
    try:
        expected = fn(x, i)
    except IndexError as e:
        for run in (lambda: refs.__getitem__(x, i), lambda: primtrace.jit(fn)(x, i)):
            with pytest.raises(IndexError, match=str(e)):
                run()
        return
    for got in (refs.__getitem__(x, i), primtrace.jit(fn)(x, i)):
        assert torch.equal(got, expected) and got.stride() == expected.stride()
    assert primtrace.explain(fn, x, i).opaque == []


def _view(x):
    return torch.randn(4, 3, 2).transpose(0, 2) if x is None else x


@pytest.mark.parametrize("x, index", [
    (torch.arange(16).view(2, 8) > 5, ([[[[0]]], [[[1]]]], [[[list(range(8))]]])),  # transformers
    (None, ([0, 1], [1, -2])),
    (None, ([0, 1], [1, 2], [[3], [0]])),
    (None, ([[0, -2]], [[1], [2]])),
    (None, ([0, 2], [1, 2])),            # out of bounds: eager's IndexError at run time
    (None, ([0, 1], [1, 9])),
    (None, ([-3, 1], [-1, 2])),
    (None, ([], [1])),
    (torch.zeros(0, 3), ([], [1])),
    (None, ([0, 1], [1, 2, 0])),         # indices that do not broadcast
], ids=lambda v: "" if not isinstance(v, tuple) else str(v))
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_getitem_with_integer_tensors_for_leading_dims_gathers(x, index, index_dtype):
    """x[i, j, ...] with an integer tensor per leading dim: elements at the broadcast indices
    (shape broadcast + the other dims, row-major), eager's IndexErrors; eagerly and in jit."""
    x = _view(x)
    idx = tuple(torch.tensor(i, dtype=index_dtype if len(i) else torch.int64) for i in index)
    fn = lambda x, *i: x[i]  # noqa: E731
    try:
        expected = fn(x, *idx)
    except IndexError as e:
        for run in (lambda: refs.__getitem__(x, idx), lambda: primtrace.jit(fn)(x, *idx)):
            with pytest.raises(IndexError, match=re.escape(str(e))):
                run()
        return
    for got in (refs.__getitem__(x, idx), primtrace.jit(fn)(x, *idx)):
        assert got.dtype == expected.dtype and got.stride() == expected.stride()
        assert torch.equal(got, expected)
    assert primtrace.explain(fn, x, *idx).opaque == []
