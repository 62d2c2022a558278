"""Conformance of the creation refs: full, zeros, ones, empty, *_like, new_*, scalar_tensor,
arange; their out=; and what a jitted function records for them.

Factories have no tensor input, so their samples are explicit calls: every dtype, sizes
given as varargs, tuples, lists and torch.Size (empty and 0-dim included), fill values of
each Python type (overflowing ones too), dtype inference under the float32 and float64
default dtypes, and eager's errors. The *_like and new_* refs take the harness's tensor
samples (every dtype and layout); their memory layouts are compared on their own
(``test_like_layouts``).

linspace, logspace, eye and the other range factories: tests/conformance/test_ranges.py.
"""
import math
import warnings

import pytest
import torch

import primtrace
from primtrace import refs
from tests.conformance.creation_helpers import (LAYOUT_INPUTS, calls, check_layouts, layout,
                                                method, with_float64_default, with_values_erased)
from tests.conformance.harness import ALL_DTYPES, OpSpec, compare_outputs, run_conformance

DTYPE_CHOICES = (None, *ALL_DTYPES)
FILLS = (True, False, 3, -2, 0, 2.5, -0.0, math.nan, math.inf, -math.inf, 1e10, 300, -1, -256,
         255.5, 7e4, 2**40, 2**63, 1.5 - 2j, 2 + 0j)
SIZES = ((), (0,), (3,), (2, 3), (2, 0, 4), [2, 3], torch.Size([4, 1]))


def _factory_spec(name, ref, torch_fn, cases):
    return OpSpec(name, ref, torch_fn, arity=0, dtypes=(), supports_out=False,
                  extra_samples=calls(*cases))


# --- full, zeros, ones, empty, scalar_tensor -----------------------------------------------------
FULL_CASES = [
    *(((size, 2.5), {}) for size in SIZES),
    *((((2, 3), value), {"dtype": dtype}) for value in FILLS for dtype in DTYPE_CHOICES),
    (((2,), torch.tensor(3.5)), {}), (((2,), torch.tensor(3)), {"dtype": torch.float16}),
    (((2,), torch.tensor(True)), {}), (((2,), torch.tensor([1.0, 2.0])), {}),
    (((2,), 1.0), {"dtype": float}), (((2,), 1), {"dtype": complex}), (((2,), 1), {"dtype": "x"}),
    (((2,), 1.0), {"device": "cpu", "layout": torch.strided, "pin_memory": False,
                   "requires_grad": False}),
    ((), {"size": (2, 3), "fill_value": 1}),
    ((2, 1.0), {}), (((2, -1), 1.0), {}), (((2.0,), 1.0), {}), (((True,), 1.0), {}),
    (((2,), "a"), {}), (((2,), None), {}),
]

SIZE_ARGS = ((3,), (2, 3), ((2, 3),), ([2, 3],), (torch.Size([2, 3]),), ((),), ([],), (0,),
             (2, 0), (1, 1, 1))
FILLED_CASES = [
    *((size, {}) for size in SIZE_ARGS),
    *(((2, 3), {"dtype": dtype}) for dtype in ALL_DTYPES),
    ((), {"size": (2, 3)}), ((2, 3), {"dtype": int}), ((2,), {"device": "cpu"}),
    ((), {}), ((2,), {"size": (2,)}), ((-1,), {}), ((2, -3), {}), ((2.0,), {}), ((True,), {}),
    (((2, 3.0),), {}), ((2,), {"dtype": "float32"}),
]

SCALAR_CASES = [*(((value,), {"dtype": dtype}) for value in FILLS for dtype in DTYPE_CHOICES),
                ((torch.tensor(2.0),), {})]

TENSOR_CASES = [
    (([],), {}), (([],), {"dtype": torch.int64}), (([[], []],), {"dtype": torch.float16}),
    ((2.5,), {}), ((0.1,), {"dtype": torch.float16}), ((3,), {}), ((True,), {}), ((1j,), {}),
    (([1, 2],), {}), (([1, 2.5],), {}), (([[1, 2], [3, 4]],), {"dtype": torch.float64}),
    (([True, 2],), {}), (((1, 2j),), {}), (([300],), {"dtype": torch.uint8}),
    (([1, 2],), {"device": "cpu"}), (([[1, 2], [3]],), {}), (([1, "a"],), {}),
]

FACTORY_SPECS = [
    _factory_spec("tensor", refs.tensor, torch.tensor, TENSOR_CASES),
    _factory_spec("full", refs.full, torch.full, FULL_CASES),
    _factory_spec("zeros", refs.zeros, torch.zeros, FILLED_CASES),
    _factory_spec("ones", refs.ones, torch.ones, FILLED_CASES),
    _factory_spec("empty", with_values_erased(refs.empty), with_values_erased(torch.empty),
                  FILLED_CASES),
    _factory_spec("scalar_tensor", refs.scalar_tensor, torch.scalar_tensor, SCALAR_CASES),
]

# dtype inference with the float64 default: float and complex fills, and none
DEFAULT_F64_SPECS = [
    _factory_spec("full[f64 default]", with_float64_default(refs.full),
                  with_float64_default(torch.full),
                  [(((2,), v), {}) for v in (True, 3, 2.5, 1.5 - 2j, 2**63)]),
    _factory_spec("ones[f64 default]", with_float64_default(refs.ones),
                  with_float64_default(torch.ones), [((2, 3), {}), ((2,), {"dtype": None})]),
    _factory_spec("scalar_tensor[f64 default]", with_float64_default(refs.scalar_tensor),
                  with_float64_default(torch.scalar_tensor), [((v,), {}) for v in (True, 3, 0.1, 1j)]),
]


# --- arange ----------------------------------------------------------------------------------------
ARANGE_BOUNDS = (
    (5,), (0,), (5.0,), (True,), (1, 2.5), (0, 1, 0.1), (10, 0, -3), (-5, 5, 3.5), (0, 10, 3),
    (0.5, 5.9, 1.5), (2.7, 0.2, -0.5), (-2.5, 5.9, 1.5), (1.0, 1.0), (0.1, 0.3, 0.1),
    (5 + 0j,), (0, 5, 1 + 0j), (-10, 10, 3), (0, 200, 70), (0, 10, 2.5), (1, 4, 0.1),
    (-3.5, 3.5, 0.25), (0, 1e5, 1e4), (0.0, -3.0, -1.0), (0, 2**62, 2**60),
    (-2**63, 2**63 - 1, 2**62), (0, 1e39, 1e38),
)
ARANGE_ERRORS = ((0, 10, 0), (10, 0), (0, -1), (5, 1, 1), (0, math.inf), (0, math.nan),
                 (1j,), (0, 5, 0.5), (0, 5, 1e-300), (0, 2**63 - 1, 2**61))
ARANGE_CASES = [
    *((bounds, {"dtype": dtype}) for bounds in ARANGE_BOUNDS for dtype in DTYPE_CHOICES),
    *((bounds, {}) for bounds in ARANGE_ERRORS),
    *(((0, 5, 0.5), {"dtype": dtype}) for dtype in (torch.int32, torch.int64, torch.uint8)),
    ((), {"end": 5}), ((), {"start": 1, "end": 5}), ((1,), {"end": 5, "step": 2}),
    ((3,), {"dtype": float}), ((3,), {"layout": torch.strided}), ((), {}), (("a",), {}),
]
ARANGE_SPECS = [
    _factory_spec("arange", refs.arange, torch.arange, ARANGE_CASES),
    _factory_spec("arange[f64 default]", with_float64_default(refs.arange),
                  with_float64_default(torch.arange),
                  [(b, {}) for b in ((5,), (5.0,), (0, 1, 0.1), (True, 3.5), (5 + 0j,))]),
]


# --- *_like and new_*: the harness's tensor samples ------------------------------------------------
LIKE_VARIANTS = ({}, {"dtype": torch.float64}, {"dtype": torch.int8}, {"dtype": torch.bool},
                 {"memory_format": torch.contiguous_format}, {"dtype": torch.complex64},
                 {"memory_format": torch.channels_last})


def _like_spec(name, ref, torch_fn, **kwargs):
    return OpSpec(name, ref, torch_fn, supports_out=False, kwargs_variants=LIKE_VARIANTS, **kwargs)


LIKE_SPECS = [
    _like_spec("zeros_like", refs.zeros_like, torch.zeros_like),
    _like_spec("ones_like", refs.ones_like, torch.ones_like),
    _like_spec("empty_like", with_values_erased(refs.empty_like),
               with_values_erased(torch.empty_like)),
    *(OpSpec(f"full_like[{value!r}]", refs.full_like, torch.full_like, fixed_args={1: value},
             supports_out=False,
             kwargs_variants=({}, {"dtype": torch.float64}, {"dtype": torch.int8},
                              {"memory_format": torch.contiguous_format}))
      for value in (True, 3, -2.5, 1.5 - 2j, math.nan, 300, -0.0)),
    OpSpec("full_like[f64 default]", with_float64_default(refs.full_like),
           with_float64_default(torch.full_like), fixed_args={1: 2.5}, supports_out=False,
           dtypes=(torch.int32, torch.float32, torch.bool)),
]

NEW_SPECS = [
    OpSpec("new_full", refs.new_full, method("new_full"), fixed_args={1: (2, 3), 2: 2.5},
           supports_out=False, kwargs_variants=({}, {"dtype": torch.int16}, {"device": "cpu"})),
    OpSpec("new_full[int fill]", refs.new_full, method("new_full"), fixed_args={1: [4], 2: -3},
           supports_out=False),
    *(OpSpec(name, ref, method(name), fixed_args={1: 2, 2: 3}, supports_out=False,
             kwargs_variants=({}, {"dtype": torch.complex128}))
      for name, ref in (("new_zeros", refs.new_zeros), ("new_ones", refs.new_ones))),
    OpSpec("new_zeros[sequence]", refs.new_zeros, method("new_zeros"), fixed_args={1: (0, 2)},
           supports_out=False),
    OpSpec("new_empty", with_values_erased(refs.new_empty), with_values_erased(method("new_empty")),
           fixed_args={1: (2, 3)}, supports_out=False),
]

SPECS = FACTORY_SPECS + DEFAULT_F64_SPECS + ARANGE_SPECS + LIKE_SPECS + NEW_SPECS


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_conformance(spec):
    run_conformance(spec)


LAYOUT_CALLS = {
    "zeros_like": (torch.zeros_like, refs.zeros_like),
    "zeros_like(int8)": (lambda x: torch.zeros_like(x, dtype=torch.int8),
                         lambda x: refs.zeros_like(x, dtype=torch.int8)),
    "ones_like(contiguous)": (lambda x: torch.ones_like(x, memory_format=torch.contiguous_format),
                              lambda x: refs.ones_like(x, memory_format=torch.contiguous_format)),
    "empty_like": (torch.empty_like, refs.empty_like),
    "full_like": (lambda x: torch.full_like(x, 2), lambda x: refs.full_like(x, 2)),
    "new_zeros": (lambda x: x.new_zeros(3, 2), lambda x: refs.new_zeros(x, 3, 2)),
}


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name", LAYOUT_CALLS)
@pytest.mark.parametrize("input_layout", LAYOUT_INPUTS)
def test_like_layouts(name, input_layout):
    """preserve_format: a dense input's strides, else its memory order made dense."""
    eager_fn, ref_fn = LAYOUT_CALLS[name]
    x = LAYOUT_INPUTS[input_layout]()
    assert check_layouts(eager_fn, ref_fn, primtrace.jit(eager_fn), x) is None


# --- out= ------------------------------------------------------------------------------------------
def _out(shape, dtype=torch.float32, transposed=False):
    if transposed:
        return torch.full(tuple(reversed(shape)), 7, dtype=dtype).t()
    return torch.full(shape, 7, dtype=dtype)


OUT_CASES = [
    ("zeros", (2, 3), {}, _out((6,))), ("zeros", (2, 3), {}, _out((2, 3), torch.int8)),
    ("zeros", (2, 3), {"dtype": torch.int8}, _out((2, 3), torch.int8)),
    ("zeros", (2, 3), {"dtype": torch.float32}, _out((2, 3), torch.int8)),
    ("zeros", (2, 3), {}, _out((2, 3), transposed=True)), ("zeros", (3,), {}, _out((6,))[::2]),
    ("ones", (3,), {}, _out((3,), torch.bool)), ("ones", (2, 2), {}, _out((0,), torch.complex64)),
    ("empty", (2,), {}, _out((2,), torch.float64)),
    ("full", ((2,), 2.5), {}, _out((2,), torch.int32)), ("full", ((2,), 300), {}, _out((2,), torch.uint8)),
    ("full", ((2,), 2.5), {}, _out((5,), torch.float64)), ("full", ((2,), 1j), {}, _out((2,))),
    ("full", ((2,), 1j), {}, _out((2,), torch.complex64)),
    ("full", ((2,), 3), {"dtype": torch.int64}, _out((2,))),
    ("arange", (5,), {}, _out((5,), torch.float16)), ("arange", (0.5, 5), {}, _out((0,), torch.int32)),
    ("arange", (5,), {}, _out((7,), torch.int32)), ("arange", (5,), {}, _out((2, 3))),
    ("arange", (6,), {}, _out((2, 3))), ("arange", (6,), {}, _out((3, 2), transposed=True)),
    ("arange", (1,), {}, _out(())), ("arange", (5,), {}, _out((5,), torch.bool)),
    ("arange", (5,), {"dtype": torch.int64}, _out((5,), torch.int32)),
    ("arange", (0, 5, 0.5), {}, _out((0,), torch.int64)), ("arange", (3,), {}, _out((6,))[::2]),
]


def check_out(fn, name, args, kwargs, out):
    """fn(*args, out=out) against eager: same error type, or out itself returned holding the
    same dtype, shape, strides and values; None if it conforms."""
    eager_out, our_out = out.clone(), out.clone()
    if out.stride() != eager_out.stride():  # a transposed or sliced out keeps its layout
        eager_out = torch.empty_strided(out.shape, out.stride(), dtype=out.dtype).copy_(out)
        our_out = torch.empty_strided(out.shape, out.stride(), dtype=out.dtype).copy_(out)
    errors, results = [], []
    for call, target in ((getattr(torch, name), eager_out), (fn, our_out)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                results.append(call(*args, **kwargs, out=target))
                errors.append(None)
            except Exception as e:  # eager's verdict is the spec
                results.append(None)
                errors.append(e)
    if errors[0] is not None or errors[1] is not None:
        if errors[0] is None or not isinstance(errors[1], type(errors[0])):
            return f"eager {errors[0]!r}, ours {errors[1]!r}"
        return None
    if results[1] is not our_out:
        return "did not return out"
    if torch.equal(layout(our_out), layout(eager_out)) is False:
        return f"strides: ours {our_out.stride()}, eager {eager_out.stride()}"
    return compare_outputs(our_out, eager_out, lambda: eager_out)


@pytest.mark.parametrize("case", OUT_CASES, ids=lambda c: f"{c[0]}{c[1]}{c[2]}->{c[3].dtype}{list(c[3].shape)}")
def test_out(case):
    name, args, kwargs, out = case
    assert check_out(getattr(refs, name), name, args, kwargs, out) is None


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("case", OUT_CASES, ids=lambda c: f"{c[0]}{c[1]}{c[2]}->{c[3].dtype}{list(c[3].shape)}")
def test_out_through_jit(case):
    name, args, kwargs, out = case
    torch_fn = getattr(torch, name)
    jfn = primtrace.jit(lambda *a, out, **k: torch_fn(*a, out=out, **k))
    assert check_out(jfn, name, args, kwargs, out) is None


def test_arange_warns_when_it_resizes_a_nonempty_out():
    with pytest.warns(UserWarning, match="does not match the computed number of elements 5"):
        refs.arange(5, out=torch.empty(7))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        refs.arange(5, out=torch.empty(0))
        refs.zeros(5, out=torch.empty(7))  # full_out resizes silently


# --- what a jitted function records --------------------------------------------------------------
def _prims_of(jfn):
    return [n.symbol.qualname for n in primtrace.last_traces(jfn)[1].nodes]


@pytest.mark.parametrize("fn, expected", [
    (lambda x: torch.zeros_like(x), ["prims.full"]),
    (lambda x: torch.ones(3, 4) + x, ["prims.full", "prims.add"]),
    (lambda x: torch.full((4,), 2.0) * x[0], None),
    (lambda x: torch.arange(10), ["prims.iota"]),
    (lambda x: x.new_zeros(2), ["prims.full"]),
    (lambda x: torch.full_like(x.t(), 3), None),
    (lambda x: torch.tensor([], dtype=x.dtype, device=x.device), ["prims.full"]),
])
def test_factories_record_prims_not_opaque_nodes(fn, expected):
    x = torch.randn(3, 4)
    jfn = primtrace.jit(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # x[0], x.t() are opaque here: not ours
        torch.testing.assert_close(jfn(x), fn(x))
    names = _prims_of(jfn)
    assert any(n in names for n in ("prims.full", "prims.iota", "prims.full_like")), names
    assert not any(n.startswith("torch.") and ("full" in n or "zeros" in n or "ones" in n
                                               or "arange" in n) for n in names), names
    if expected is not None:
        assert names == expected


def test_tensor_of_python_numbers_is_a_copied_constant():
    """torch.tensor(data) (transformers' caches: torch.tensor([], dtype=..., device=...)) has
    a ref: a new copy of the constant each call, no opaque node."""
    fn = lambda x: torch.tensor([[1.5, 2], [3, 4]]) + x  # noqa: E731
    jfn = primtrace.jit(fn)
    x = torch.randn(2, 2)
    torch.testing.assert_close(jfn(x), fn(x))
    assert _prims_of(jfn) == ["prims.clone", "prims.add"]
    assert not primtrace.explain(fn, x).opaque
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the opaque call's warning and eager's copy warning
        assert primtrace.explain(lambda x: torch.tensor(x), x).opaque   # data that is a tensor


def test_a_runtime_fill_value_stays_an_input():
    jfn = primtrace.jit(lambda x, v: torch.full_like(x, v) + torch.full((3,), v))
    x = torch.zeros(3)
    torch.testing.assert_close(jfn(x, 2.5), torch.full((3,), 5.0))
    torch.testing.assert_close(jfn(x, -1.0), torch.full((3,), -2.0))
    assert primtrace.cache_info(jfn).misses == 1  # one trace for both values
    with pytest.raises(RuntimeError, match="without overflow"):
        primtrace.jit(lambda x, v: torch.full_like(x, v))(torch.zeros(2, dtype=torch.uint8), 300)


def test_factory_results_are_new_tensors_on_every_call():
    def f(x):
        y = torch.zeros_like(x)
        y += x
        return y, torch.ones(2), x.new_full((2,), 5), torch.tensor([1.0, 2.0]).add_(x[:2])
    jfn = primtrace.jit(f)
    x = torch.ones(3)
    first = jfn(x)
    second = jfn(x)
    for a, b, e in zip(first, second, f(x)):
        torch.testing.assert_close(b, e)  # no accumulation into a trace-time constant
        assert a is not b


def test_autograd_leaves_stay_with_torch():
    x = torch.randn(3)
    fn = lambda x: torch.zeros(3, requires_grad=True) + x  # noqa: E731
    jfn = primtrace.jit(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", primtrace.OpaqueOpWarning)
        result = jfn(x)
    assert primtrace.last_traces(jfn)[0].nodes[0].symbol.kind == "opaque"
    assert result.requires_grad and fn(x).requires_grad
    with pytest.raises(NotImplementedError):
        refs.zeros(3, requires_grad=True)


def test_channels_last_results_are_prims():
    x = torch.randn(2, 3, 4, 5)
    for fn in (lambda x: torch.zeros_like(x, memory_format=torch.channels_last),
               lambda x: torch.full_like(x.contiguous(memory_format=torch.channels_last), 2)):
        jfn = primtrace.jit(fn)
        with warnings.catch_warnings():
            warnings.simplefilter("error", primtrace.OpaqueOpWarning)
            result = jfn(x)
        assert result.stride() == fn(x).stride() == (60, 1, 15, 3)
        torch.testing.assert_close(result, fn(x))


def test_varargs_sizes_from_runtime_ints():
    jfn = primtrace.jit(lambda x, n: x + torch.ones(n, n))
    torch.testing.assert_close(jfn(torch.zeros(2, 2), 2), torch.ones(2, 2))
    torch.testing.assert_close(jfn(torch.zeros(3, 3), 3), torch.ones(3, 3))
