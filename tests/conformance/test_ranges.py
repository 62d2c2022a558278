"""Conformance of the range refs: linspace, logspace, eye, tril_indices, triu_indices,
empty_strided, new_empty_strided; their out=; and what a jitted function computes with them.

linspace and logspace must be eager's values bit for bit (``test_*_bits``): seeded sweeps of
(start, end, steps) over every dtype they take, compared by their bits (NaN payloads aside).
The explicit calls (``SPECS``) cover dtype inference, 0-dim tensor bounds, steps 0 and 1,
complex bounds, integer overflow and eager's errors, under the harness's rule.
"""
import math
import random
import warnings

import pytest
import torch

import primtrace
from primtrace import refs
from primtrace.refs.ranges import contracts_to_fma
from tests.conformance.creation_helpers import (calls, method, with_float64_default,
                                                with_values_erased)
from tests.conformance.harness import ALL_DTYPES, OpSpec, run_conformance
from tests.conformance.test_creation import check_out

DTYPE_CHOICES = (None, *ALL_DTYPES)
RANGE_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64,
                torch.int32, torch.int16, torch.int8, torch.uint8, torch.complex64,
                torch.complex128)


def _factory_spec(name, ref, torch_fn, cases):
    return OpSpec(name, ref, torch_fn, arity=0, dtypes=(), supports_out=False,
                  extra_samples=calls(*cases))


def bits_equal(a, b) -> bool:
    """Same dtype, shape and bits (every NaN counts as the same)."""
    if not (isinstance(a, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape):
        return False
    if a.is_complex():
        return bits_equal(torch.view_as_real(a), torch.view_as_real(b))
    if a.is_floating_point():
        same_nan = torch.equal(a.isnan(), b.isnan())
        a, b = a.nan_to_num(0), b.nan_to_num(0)
        view = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return same_nan and torch.equal(a.view(view), b.view(view))
    return torch.equal(a, b)


def _sweep(fn, seed, per_dtype):
    """(start, end, steps, kwargs) drawn per dtype: floats of several scales, integers (and
    floats truncated to them), complex bounds, steps around the SIMD widths."""
    rng = random.Random(seed)
    for dtype in RANGE_DTYPES:
        for _ in range(per_dtype):
            if dtype.is_floating_point or dtype.is_complex:
                choices = lambda: [rng.uniform(-100, 100), rng.randint(-50, 50),  # noqa: E731
                                   rng.uniform(-1, 1), rng.uniform(-1e4, 1e4), 0.0]
            else:
                low, high = {torch.uint8: (0, 255), torch.int8: (-128, 127)}.get(dtype,
                                                                                 (-1000, 1000))
                choices = lambda: [rng.randint(low, high), rng.uniform(low, high)]  # noqa: E731
            pick = lambda: rng.choice(choices())  # noqa: E731
            start, end = pick(), pick()
            if dtype.is_complex and rng.random() < 0.7:
                start = complex(start, pick())
            steps = rng.choice([2, 3, 4, 5, 7, 16, 17, 31, 33, 64, 100, 257, 1000])
            kwargs = {"dtype": dtype}
            if fn == "logspace":  # exponents that stay in range
                if dtype.is_floating_point or dtype.is_complex:
                    start, end = start / 30, end / 30
                else:
                    start, end = int(start) % 8, int(end) % 8
                kwargs["base"] = rng.choice([10.0, 2.0, 2.5, 0.5, -2.0, 3])
            yield start, end, steps, kwargs


def _wide_sweep(fn, seed, per_dtype):
    """Bounds from 1e-300 to 1e300 (subnormals, 2**53 + 1, signed zeros), integer bounds at
    their dtype's limits, results that overflow integer dtypes, steps past the SIMD widths."""
    rng = random.Random(seed)

    def pick():
        scale = rng.choice([1e-300, 1e-30, 1e-5, 1, 1e3, 1e8, 1e15, 1e30, 1e300, 2.0 ** 60])
        if rng.random() < 0.1:
            return rng.choice([0.0, -0.0, 5e-324, -1.0, 2.0 ** 53 + 1])
        if rng.random() < 0.3:
            return float(rng.randint(-10 ** 6, 10 ** 6))
        return rng.uniform(-scale, scale)
    for dtype in RANGE_DTYPES:
        for _ in range(per_dtype):
            start, end = pick(), pick()
            kwargs = {"dtype": dtype}
            if fn == "logspace":
                start, end = start % 50 - 25, end % 50 - 25
                kwargs["base"] = rng.choice([10.0, 2.0, 1.5, 0.3, -3.0, 1e10])
            if not (dtype.is_floating_point or dtype.is_complex):
                info = torch.iinfo(dtype)
                start, end = (max(min(int(x), info.max), info.min) for x in (start, end))
            yield start, end, rng.choice([2, 3, 9, 100, 4097]), kwargs


@pytest.mark.parametrize("sweep", [_sweep, _wide_sweep], ids=["moderate", "wide"])
@pytest.mark.parametrize("fn", ["linspace", "logspace"])
def test_values_are_eagers_bits(fn, sweep):
    failures = []
    for start, end, steps, kwargs in sweep(fn, seed=0, per_dtype=25):
        expected = _outcome(getattr(torch, fn), start, end, steps, **kwargs)
        got = _outcome(getattr(refs, fn), start, end, steps, **kwargs)
        if isinstance(expected, Exception) or isinstance(got, Exception):
            if type(got) is not type(expected):
                failures.append((start, end, steps, kwargs, expected, got))
        elif not bits_equal(got, expected):
            failures.append((start, end, steps, kwargs))
    assert not failures, f"{len(failures)} calls differ, e.g. {failures[:3]}"


def _outcome(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception as e:  # eager's verdict is the spec
        return e


def test_linspace_rounds_once_where_eager_fuses():
    """The example that keeps eager's integer results from both textbook formulas: -7 +
    (20/15) * 6 is 0.9999999999999996 when fused (truncated to 0), 1.0 when not."""
    expected = torch.linspace(-7, 13, 16, dtype=torch.int64)
    assert bits_equal(refs.linspace(-7, 13, 16, dtype=torch.int64), expected)
    assert expected[6] == (0 if contracts_to_fma() else 1)


# --- explicit calls under the harness's rule ------------------------------------------------------
BOUNDS = ((0, 1), (-7, 13), (2.5, -1.25), (1, 1), (0, 1e10), (-2, 10), (300, 10), (-300, 10),
          (-2.5, 10), (0, math.inf), (0, math.nan), (math.inf, math.inf), (True, 3), (1e30, -1e30),
          (0, 1j), (1 + 1j, -2 - 3j), (-2**63, 2**63 - 1), (2**62, -2**62))
STEPS = (0, 1, 2, 5, 16)
LINSPACE_CASES = [
    *((bounds + (steps,), {"dtype": dtype}) for bounds in BOUNDS for steps in (1, 5)
      for dtype in DTYPE_CHOICES),
    *(((0, 10, steps), {}) for steps in STEPS),
    *(((torch.tensor(1.5), torch.tensor(3)), {}) for _ in (0,)),
    ((torch.tensor(1.5), 3, 4), {}), ((1, torch.tensor(3), 4), {}),
    ((torch.tensor(1.7), torch.tensor(3), 4), {"dtype": torch.int64}),
    ((torch.tensor(1), torch.tensor(3), 4), {}), ((torch.tensor(1 + 1j), torch.tensor(3), 4), {}),
    ((torch.tensor([1.5]), torch.tensor(3), 4), {}), ((torch.tensor(1.5), torch.ones(2), 4), {}),
    ((torch.tensor(2.5), 1, 1), {"dtype": torch.int64}),
    ((0, 1, -1), {}), ((0, 1, 2.0), {}), ((0, 1, True), {}), (("a", 3, 4), {}), ((None, 3, 4), {}),
    ((0, 3), {}), ((0, 3), {"steps": 4}), ((), {"start": 0, "end": 3, "steps": 4}),
    ((0, 3, 4), {"dtype": float}), ((0, 3, 4), {"dtype": complex}),
    ((0, 1, 0), {"dtype": torch.bool}), ((0, 1, 1), {"dtype": torch.bool}),
    ((0, 3, 4), {"device": "cpu", "layout": torch.strided, "pin_memory": False}),
]
LOGSPACE_CASES = [
    *(((start, end, steps), {"dtype": dtype, "base": base})
      for (start, end) in ((0, 3), (-2, 2.5), (1, 1), (0, 1j), (-300, 10), (0, math.inf))
      for steps in (1, 5) for base in (10.0, 2, -2.0, 0.5)
      for dtype in (None, torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                    torch.uint8, torch.int8, torch.complex64, torch.bool)),
    *(((0, 3, steps), {}) for steps in STEPS),
    ((0, 3, 4), {"base": 1j}), ((0, 3, 4), {"base": torch.tensor(2.0)}), ((0, 3, 4), {"base": "x"}),
    *(((0, 3, steps), {"base": base, "dtype": dtype}) for steps in (1, 4)
      for base in (torch.tensor(2), torch.tensor([2.0]), torch.tensor(True), torch.tensor(2 + 1j),
                   torch.tensor(0.1, dtype=torch.float64))
      for dtype in (None, torch.int64, torch.complex64)),
    ((torch.tensor(0), torch.tensor(3), 4), {}), ((torch.tensor(0.5), 3, 1), {}),
    ((0, 3, -1), {}), ((0, 3, 2.0), {}), ((0, 3), {}), ((3, 40, 1), {"dtype": torch.int8}),
]
EYE_CASES = [
    *(((n,), {"dtype": dtype}) for n in (0, 1, 3) for dtype in DTYPE_CHOICES),
    ((3, 2), {}), ((2, 5), {"dtype": torch.int8}), ((0, 3), {}), ((3, 0), {}), ((3,), {"m": 2}),
    ((), {"n": 3}), ((-1,), {}), ((3, -1), {}), ((3.0,), {}), ((True,), {}), ((3, None), {}),
    ((3, 2.0), {}), ((3,), {"dtype": float}), ((), {}),
]
INDICES_CASES = [
    *(((row, col, offset), {}) for row in (0, 1, 3, 5) for col in (0, 1, 4)
      for offset in (-6, -2, -1, 0, 1, 3, 7)),
    ((300, 200, 5), {}), ((1000, 999, -17), {}), ((500, 700, 300), {}), ((2000, 3, 1), {}),
    *(((3, 3), {"dtype": dtype}) for dtype in ALL_DTYPES),
    ((-1, 4), {}), ((4, -1), {}), ((3,), {}), ((3, 3.0), {}), ((3, 3, 1.0), {}), ((True, 3), {}),
    ((3, 4), {"offset": -1}), ((3, 4), {"device": "cpu"}),
]
STRIDED_CASES = [
    (((2, 3), (1, 2)), {}), (((2, 3), (3, 1)), {"dtype": torch.int8}), (((2, 3), (0, 0)), {}),
    (([2, 3], [1, 2]), {"dtype": torch.complex64}), (((), ()), {}), (((0, 3), (3, 1)), {}),
    (((4,), (2,)), {"dtype": torch.bool}), (((2, 3), (1,)), {}), (((2, 3), (-1, 2)), {}),
    (((2, -3), (1, 2)), {}), ((2, 1), {}), (((2, 3), 1), {}), (((2.0, 3), (1, 2)), {}),
    (((2, 3), (1.0, 2)), {}),
]

SPECS = [
    _factory_spec("linspace", refs.linspace, torch.linspace, LINSPACE_CASES),
    _factory_spec("logspace", refs.logspace, torch.logspace, LOGSPACE_CASES),
    _factory_spec("linspace[f64 default]", with_float64_default(refs.linspace),
                  with_float64_default(torch.linspace), [((0, 1, 7), {}), ((0, 1j, 7), {})]),
    _factory_spec("logspace[f64 default]", with_float64_default(refs.logspace),
                  with_float64_default(torch.logspace), [((0, 1, 7), {}), ((0, 1j, 7), {})]),
    _factory_spec("eye", refs.eye, torch.eye, EYE_CASES),
    _factory_spec("tril_indices", refs.tril_indices, torch.tril_indices, INDICES_CASES),
    _factory_spec("triu_indices", refs.triu_indices, torch.triu_indices, INDICES_CASES),
    _factory_spec("empty_strided", with_values_erased(refs.empty_strided),
                  with_values_erased(torch.empty_strided), STRIDED_CASES),
    OpSpec("new_empty_strided", with_values_erased(refs.new_empty_strided),
           with_values_erased(method("new_empty_strided")), fixed_args={1: (2, 3), 2: (1, 2)},
           supports_out=False, kwargs_variants=({}, {"dtype": torch.int16}, {"device": "cpu"})),
]


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_conformance(spec):
    run_conformance(spec)


@pytest.mark.parametrize("case", STRIDED_CASES[:7], ids=str)
def test_empty_strided_strides(case):
    args, kwargs = case
    expected = torch.empty_strided(*args, **kwargs).stride()
    assert refs.empty_strided(*args, **kwargs).stride() == expected
    x = torch.ones(3, dtype=torch.float16)
    assert refs.new_empty_strided(x, *args).stride() == x.new_empty_strided(*args).stride()


# --- out= ----------------------------------------------------------------------------------------
OUT_CASES = [
    ("linspace", (0, 3, 4), {}, torch.full((4,), 7, dtype=torch.int32)),
    ("linspace", (0, 3, 4), {}, torch.full((2,), 7.0)),
    ("linspace", (0, 3, 4), {}, torch.full((2, 2), 7.0, dtype=torch.float64)),
    ("linspace", (0, 3, 4), {"dtype": torch.float32}, torch.full((4,), 7, dtype=torch.int32)),
    ("linspace", (-1, 1, 6), {}, torch.full((3, 2), 7.0).t()),
    ("linspace", (0, 3, 0), {}, torch.full((4,), 7.0)),
    ("linspace", (0, 1j, 5), {}, torch.full((5,), 7, dtype=torch.complex128)),
    ("logspace", (0, 3, 4), {}, torch.full((4,), 7, dtype=torch.int64)),
    ("logspace", (0, 3, 4), {"base": 2}, torch.full((9,), 7.0, dtype=torch.float16)),
    ("logspace", (1, 3, 1), {}, torch.full((1,), 7.0)),
    ("eye", (3,), {}, torch.full((2,), 7, dtype=torch.int32)),
    ("eye", (2, 3), {}, torch.full((2, 3), 7, dtype=torch.bool)),
    ("eye", (2, 3), {"dtype": torch.float32}, torch.full((2, 3), 7.0, dtype=torch.float64)),
]


@pytest.mark.parametrize("case", OUT_CASES,
                         ids=lambda c: f"{c[0]}{c[1]}{c[2]}->{c[3].dtype}{list(c[3].shape)}")
def test_out(case):
    name, args, kwargs, out = case
    assert check_out(getattr(refs, name), name, args, kwargs, out) is None


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("case", OUT_CASES,
                         ids=lambda c: f"{c[0]}{c[1]}{c[2]}->{c[3].dtype}{list(c[3].shape)}")
def test_out_through_jit(case):
    name, args, kwargs, out = case
    torch_fn = getattr(torch, name)
    jfn = primtrace.jit(lambda *a, out, **k: torch_fn(*a, out=out, **k))
    assert check_out(jfn, name, args, kwargs, out) is None


# --- through jit ---------------------------------------------------------------------------------
#: x.amax(), not x.sum(): a fused sum may round differently from eager's (closer to float64),
#: which is allowed, and these checks are of the ranges' bits
JIT_CALLS = {
    "linspace + x": lambda x: x + torch.linspace(0, 1, 5),
    "linspace f64": lambda x: torch.linspace(-3.3, 17.1, 1000, dtype=torch.float64) * x.amax(),
    "linspace int64": lambda x: torch.linspace(-7, 13, 16, dtype=torch.int64),
    "linspace f16": lambda x: torch.linspace(-7, 13, 77, dtype=torch.float16),
    "linspace bf16": lambda x: torch.linspace(-7, 13, 77, dtype=torch.bfloat16),
    "linspace complex": lambda x: torch.linspace(-7, 13 + 2j, 33),
    "linspace uint8": lambda x: torch.linspace(-2, 94, 31, dtype=torch.uint8),
    "linspace steps 1": lambda x: torch.linspace(2.5, 9, 1),
    "logspace": lambda x: torch.logspace(-3, 3, 57) + x.mean(),
    "logspace base 2 f64": lambda x: torch.logspace(-3, 3, 57, base=2, dtype=torch.float64),
    "logspace int16": lambda x: torch.logspace(0, 7, 8, base=-2, dtype=torch.int16),
    "logspace steps 1": lambda x: torch.logspace(2, 7, 1),
    "eye": lambda x: torch.eye(5) * x,
    "eye bool": lambda x: torch.eye(5, 3, dtype=torch.bool),
    "tril_indices": lambda x: torch.tril_indices(7, 5, -1),
    "triu_indices int32": lambda x: torch.triu_indices(7, 5, 2, dtype=torch.int32),
    "empty_strided": lambda x: torch.empty_strided((5, 5), (1, 5)).fill_(2) + x,
    "new_empty_strided": lambda x: x.new_empty_strided((2, 3), (1, 2)).zero_(),
}


@pytest.mark.parametrize("executors", [None, []], ids=["default", "torch"])
@pytest.mark.parametrize("name", JIT_CALLS)
def test_jit(name, executors):
    fn = JIT_CALLS[name]
    x = torch.randn(5)
    jfn = primtrace.jit(fn, executors=executors)
    with warnings.catch_warnings():
        warnings.simplefilter("error", primtrace.OpaqueOpWarning)  # every call has a ref
        got = jfn(x)
    expected = fn(x)
    assert bits_equal(got, expected), (got, expected)
    assert got.stride() == expected.stride()
    acquisition = primtrace.last_traces(jfn)[0]
    assert all(n.symbol.kind != "opaque" for n in acquisition.nodes)


def test_tensor_bounds_are_left_to_torch_while_tracing():
    """Eager reads a tensor start/end (.item()): a trace leaves that call to torch."""
    fn = lambda x: torch.linspace(x[0] if False else x.sum(), 3, 4)  # noqa: E731
    jfn = primtrace.jit(fn)
    x = torch.tensor([1.5])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", primtrace.OpaqueOpWarning)
        assert bits_equal(jfn(x), fn(x))
    assert [n.symbol.kind for n in primtrace.last_traces(jfn)[0].nodes][-1] == "opaque"


@pytest.mark.parametrize("steps", [1, 6])
def test_a_tensor_base_is_not_read_while_tracing(steps):
    fn = lambda x, b: x + torch.logspace(-1, 2.5, steps, base=b)  # noqa: E731
    jfn = primtrace.jit(fn)
    x = torch.zeros(steps)
    for b in (torch.tensor(2.0), torch.tensor(0.1), torch.tensor(3)):
        assert bits_equal(jfn(x, b), fn(x, b))
    assert primtrace.cache_info(jfn).misses == 2  # one per base dtype


def test_a_runtime_start_stays_an_input():
    jfn = primtrace.jit(lambda x, s: x + torch.linspace(s, 10.0, 5))
    x = torch.zeros(5)
    for s in (0.0, -3.7, 2.5):
        assert bits_equal(jfn(x, s), x + torch.linspace(s, 10.0, 5))
    assert primtrace.cache_info(jfn).misses == 1
