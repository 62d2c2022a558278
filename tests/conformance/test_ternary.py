"""Conformance of lerp, addcmul, addcdiv, clamp (clip, clamp_min, clamp_max), where and
masked_fill, and of their in-place variants.

where's condition and masked_fill's mask are always bool (the harness's `arg_dtypes`).
"""
import math

import pytest
import torch

from primtrace import refs
from tests.conformance.binary_helpers import inplace_spec, random, run_out_for, sample, tensor
from tests.conformance.creation_helpers import LAYOUT_INPUTS, check_layouts
from tests.conformance.harness import ALL_DTYPES, FLOAT_DTYPES, OpSpec, run_conformance

INF, NAN = math.inf, math.nan
F = FLOAT_DTYPES


def _lerp_samples(spec):
    for dtype in F + (torch.complex64,):
        start, end = random((2, 6), dtype, seed=1), random((2, 6), dtype, seed=2)
        for weight in (0.0, 0.49999, 0.5, 1.0, -3.0, 7.5, True, 2):
            yield sample(start, end, weight, desc=f"{dtype} weight={weight}")
        for wdtype in (torch.float64, torch.int64, torch.complex64, torch.bfloat16, torch.bool):
            yield sample(start, end, tensor(0.25, wdtype), desc=f"{dtype} 0-dim {wdtype} weight")
        yield sample(start, end, random((2, 6), dtype, seed=3), desc=f"{dtype} tensor weight")
    f32 = random((2, 3), torch.float32)
    yield sample(f32, f32, 1e300, desc="weight overflows float")
    yield sample(f32, f32, 1.5 - 2j, desc="complex weight")
    yield sample(f32.half(), f32.half(), 1e10, desc="weight fits opmath float")
    yield sample(f32, tensor(1.0, torch.float64), 0.5, desc="end dtype differs (0-dim)")
    yield sample(f32, f32, tensor([0.5, 0.25, 1.0], torch.float64), desc="dimensioned weight dtype differs")
    yield sample(tensor([1, 2], torch.int64), tensor([3, 4], torch.int64), tensor(0.5, torch.float32),
                 desc="integers with a 0-dim float weight")
    yield sample(tensor([INF, -INF, NAN, 1.0], torch.float32), tensor([1.0, INF, 0.0, NAN], torch.float32),
                 0.75, desc="specials")


def _addc_samples(spec):
    f32, i64 = random((2, 3), torch.float32), tensor([[3, -4, 5]], torch.int64)
    for value in (2, 2.5, -2.5, True, 1j, 300, -2, 1e10, 1e39, math.inf, math.nan):
        for dtype in (torch.int8, torch.uint8, torch.float16, torch.float32, torch.complex64):
            x = random((2, 3), dtype, seed=4)
            yield sample(x, x, tensor([[1, 2, 3]], torch.int64).to(dtype), value=value, desc=f"{dtype} value={value!r}")
    yield sample(i64, i64, f32, desc="integer tensors, float divisor")
    yield sample(f32, i64, i64, desc="integer tensor1 and tensor2")
    yield sample(tensor([True], torch.bool), f32, i64, desc="bool input")
    yield sample(f32, 2, f32, desc="number tensor1")


def _clamp_samples(spec):
    x = tensor([-3.0, -0.5, 0.0, -0.0, 0.5, 3.0, NAN, INF, -INF], torch.float32)
    for lo, hi in ((-1.0, 1.0), (1.0, -1.0), (NAN, 1.0), (-1.0, NAN), (None, 0.25), (0.25, None),
                   (-INF, INF), (True, 2)):
        yield sample(x, lo, hi, desc=f"f32 [{lo}, {hi}]")
        yield sample(x.half(), lo, hi, desc=f"f16 [{lo}, {hi}]")
    i8, u8 = tensor([-100, 0, 100], torch.int8), tensor([0, 100, 255], torch.uint8)
    for lo, hi in ((-1000, None), (-2, 300), (-2, 3), (2.5, None), (None, 1.5 - 2j), (1e10, None),
                   (NAN, None), (True, None), (-300, None), (-2.5, None)):
        yield sample(i8, lo, hi, desc=f"i8 [{lo}, {hi}]")
        yield sample(u8, lo, hi, desc=f"u8 [{lo}, {hi}]")
    # a number with a 0-dim tensor bound: eager reads the tensor as a number (its overflow
    # error then depends on its value, which a ref cannot read: values here fit)
    for bounds in ((tensor(1.5, torch.float64), 2), (2, tensor(5, torch.int64)), (tensor(1.5, torch.float64), None),
                   (0.5, tensor([1.0, 2.0, 3.0], torch.float32)), (tensor(True, torch.bool), 2),
                   (tensor(True, torch.bool), True), (None, None), (1j, None), (tensor(1j, torch.complex64), None)):
        for t in (i8, x, tensor([True, False, True], torch.bool)):
            yield sample(t, *bounds, desc=f"{t.dtype} bounds {bounds}")
    yield sample(x, min=tensor([[0.0], [1.0]], torch.float64), desc="tensor min broadcasts self")
    yield sample(tensor([1, 2], torch.int32), max=tensor(1.5, torch.float64), desc="0-dim f64 max")
    yield sample(tensor([1.0, 2.0], torch.complex64), 0, desc="complex input")


def _where_samples(spec):
    b, h = tensor([True, False], torch.bool), tensor([1.5, -2.0], torch.float16)
    i8, u8, f32 = tensor([3, -3], torch.int8), tensor([3, 200], torch.uint8), tensor([1.5, -2.0], torch.float32)
    for x, v in ((i8, 300), (i8, 1000), (u8, -2), (u8, -256), (h, 1e10), (h, 1e300), (f32, 1e39),
                 (f32, 1e300), (i8, 2.5), (i8, 1.5 - 2j), (b, 2), (i8, NAN), (f32, INF)):
        yield sample(b, x, v, desc=f"{x.dtype} other={v!r}")
        yield sample(b, v, x, desc=f"{x.dtype} input={v!r}")
    yield sample(b, 1, 2.5, desc="two numbers")
    yield sample(b, True, 2, desc="bool and int numbers")
    yield sample(tensor(True, torch.bool), 1j, 2, desc="0-dim condition, numbers")
    yield sample(tensor([[True], [False], [True]], torch.bool), f32, h, desc="condition broadcasts")
    yield sample(tensor([1, 0], torch.int64), f32, h, desc="integer condition")
    yield sample(tensor([True, False, True], torch.bool), f32, h, desc="condition shape mismatch")
    yield sample(b, tensor(2.0, torch.float64), h, desc="0-dim f64")
    yield sample(b, tensor([NAN, -0.0], torch.float32), tensor([INF, 0.0], torch.float64), desc="specials")


def _masked_fill_samples(spec):
    b = tensor([True, False], torch.bool)
    for dtype in ALL_DTYPES:
        x = random((2,), dtype, seed=5)
        for value in (2, 2.5, -2, True, 1.5 - 2j, 300, -300, 1e10, INF, NAN, -2.5, 2 + 0j):
            yield sample(x, b, value, desc=f"{dtype} value={value!r}")
        for vdtype in (torch.float64, torch.int64, torch.bool, torch.complex64):
            yield sample(x, b, tensor(3, torch.int64).to(vdtype), desc=f"{dtype} 0-dim {vdtype} value")
    f32 = random((2,), torch.float32)
    yield sample(f32, tensor([[True], [False]], torch.bool), 2, desc="mask broadcasts self")
    yield sample(f32, tensor(True, torch.bool), 2, desc="0-dim mask")
    yield sample(tensor(1.0, torch.float32), b, 2, desc="0-dim self")
    yield sample(f32, tensor([1, 0], torch.int64), 2, desc="integer mask")
    yield sample(f32, b, tensor([2.0], torch.float32), desc="1-dim value")
    yield sample(f32, tensor([True, False, True], torch.bool), 2, desc="mask shape mismatch")


def _triangle_samples(spec):
    """Batched, permuted and channels_last inputs, diagonals off either edge, bad diagonals."""
    x4 = random((2, 3, 4, 5), torch.float32)
    for x in (x4, x4.contiguous(memory_format=torch.channels_last), random((4, 2, 3), torch.int8).permute(1, 2, 0),
              random((3, 3), torch.complex64), random((2, 5), torch.bool), random((5, 0), torch.float16)):
        for diagonal in (-5, -1, 0, 1, 4, 2**62):
            yield sample(x, diagonal, desc=f"{list(x.shape)} {x.dtype} diagonal={diagonal}")
    yield sample(x4, 1.5, desc="float diagonal")
    yield sample(random((4,), torch.float32), 0, desc="1-d input")


SPECS = [
    OpSpec("lerp", refs.lerp, torch.lerp, arity=3, scalar_args=(2,), extra_samples=_lerp_samples),
    OpSpec("addcmul", refs.addcmul, torch.addcmul, arity=3,
           kwargs_variants=({}, {"value": 2}, {"value": -1.5}), extra_samples=_addc_samples),
    OpSpec("addcdiv", refs.addcdiv, torch.addcdiv, arity=3, nonzero=(2,),
           kwargs_variants=({}, {"value": 2}, {"value": -1.5}), extra_samples=_addc_samples),
    OpSpec("clamp", refs.clamp, torch.clamp, arity=3, scalar_args=(1, 2), extra_samples=_clamp_samples),
    OpSpec("clip", refs.clip, torch.clip, arity=3, scalar_args=(1, 2), dtypes=(torch.int16, torch.float64)),
    OpSpec("clamp_min", refs.clamp_min, torch.clamp_min, arity=2, scalar_args=(1,)),
    OpSpec("clamp_max", refs.clamp_max, torch.clamp_max, arity=2, scalar_args=(1,)),
    OpSpec("where", refs.where, torch.where, arity=3, arg_dtypes={0: torch.bool}, scalar_args=(1, 2),
           extra_samples=_where_samples),
    OpSpec("masked_fill", refs.masked_fill, torch.masked_fill, arity=3, arg_dtypes={1: torch.bool},
           scalar_args=(2,), supports_out=False, extra_samples=_masked_fill_samples,
           # not mixed_dtypes: a 0-dim value tensor of another dtype is read with .item() and
           # eager's overflow error then depends on its value, which a ref cannot read
           mixed_dtypes=False),
    OpSpec("tril", refs.tril, torch.tril, kwargs_variants=({}, {"diagonal": -1}),
           extra_samples=_triangle_samples),
    OpSpec("triu", refs.triu, torch.triu, kwargs_variants=({}, {"diagonal": 2})),
]
_BY_NAME = {s.name: s for s in SPECS}

INPLACE_SPECS = [
    inplace_spec(_BY_NAME["lerp"], refs.lerp_, "lerp_"),
    inplace_spec(_BY_NAME["addcmul"], refs.addcmul_, "addcmul_"),
    inplace_spec(_BY_NAME["addcdiv"], refs.addcdiv_, "addcdiv_"),
    inplace_spec(_BY_NAME["clamp"], refs.clamp_, "clamp_"),
    inplace_spec(_BY_NAME["clip"], refs.clip_, "clip_"),
    inplace_spec(_BY_NAME["clamp_min"], refs.clamp_min_, "clamp_min_"),
    inplace_spec(_BY_NAME["clamp_max"], refs.clamp_max_, "clamp_max_"),
    inplace_spec(_BY_NAME["masked_fill"], refs.masked_fill_, "masked_fill_",
                 extra_samples=_masked_fill_samples),
    *(inplace_spec(_BY_NAME[name], getattr(refs, name + "_"), name + "_",
                   dtypes=(torch.bool, torch.int8, torch.float16, torch.complex64))
      for name in ("tril", "triu")),
]


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_conformance(spec):
    run_conformance(spec)


@pytest.mark.parametrize("spec", [s for s in SPECS if s.supports_out], ids=str)
def test_out(spec):
    run_out_for(spec)


@pytest.mark.parametrize("spec", INPLACE_SPECS, ids=str)
def test_inplace(spec):
    run_conformance(spec)


def test_clamp_one_bound_is_clamp_min_or_max():
    """clamp(x, min) promotes like clamp_min(x, min): None takes no part in promotion."""
    x = torch.tensor([1, 5, 9], dtype=torch.int16)
    for lo, hi in ((2.5, None), (None, torch.tensor(4.5, dtype=torch.float64)), (3, 7)):
        got, expected = refs.clamp(x, lo, hi), torch.clamp(x, lo, hi)
        assert got.dtype == expected.dtype and torch.equal(got, expected)


@pytest.mark.parametrize("name", ["tril", "triu"])
@pytest.mark.parametrize("input_layout", [k for k in LAYOUT_INPUTS if k != "0-dim"])
def test_triangle_results_are_contiguous_as_eager(name, input_layout):
    import primtrace
    eager_fn = getattr(torch, name)
    x = LAYOUT_INPUTS[input_layout]()
    fused = input_layout in ("transposed", "permuted 3-d")  # a Numba kernel compile each
    jfn = primtrace.jit(eager_fn, executors=None if fused else [primtrace.TORCH])
    assert check_layouts(eager_fn, getattr(refs, name), jfn, x) is None
