"""Conformance of the conversion refs: Tensor.to, type_as, the dtype methods (x.float(), ...),
clone and contiguous; eager's "return self when nothing changes"; what jit records.

Memory layouts are compared on their own (``test_layouts``): preserve_format keeps a dense
input's strides, contiguous_format makes row-major copies. Extra samples add 4-d
channels_last and permuted 3-d inputs to the harness's 2-d layouts.
"""
import warnings

import pytest
import torch

import primtrace
from primtrace import refs
from primtrace.refs.conversion import DTYPE_METHODS
from primtrace.tracer import mapping
from tests.conformance.creation_helpers import LAYOUT_INPUTS, check_layouts, method
from tests.conformance.harness import ALL_DTYPES, OpSpec, SampleInput, _assemble, make_tensor, \
    run_conformance


def other_layouts(spec):
    """A channels_last 4-d tensor, a permuted 3-d one and a contiguous 4-d one, per dtype."""
    for i, dtype in enumerate(spec.dtypes):
        base = make_tensor((2, 3, 4, 5), dtype, seed=i)
        inputs = {"channels_last": base.contiguous(memory_format=torch.channels_last),
                  "permuted 3-d": make_tensor((4, 2, 3), dtype, seed=i).permute(1, 2, 0),
                  "4-d": base}
        for kwargs in spec.kwargs_variants:
            for desc, x in inputs.items():
                yield SampleInput(_assemble(spec, [x]), dict(kwargs), f"{dtype} {desc} {kwargs}")


def _spec(name, ref, torch_fn, **kwargs):
    kwargs.setdefault("extra_samples", other_layouts)
    return OpSpec(name, ref, torch_fn, supports_out=False, **kwargs)


TO_VARIANTS = (
    *({"dtype": dtype} for dtype in ALL_DTYPES),
    {}, {"dtype": torch.float32, "copy": True}, {"copy": True},
    {"memory_format": torch.contiguous_format}, {"memory_format": torch.preserve_format},
    {"dtype": torch.float64, "memory_format": torch.contiguous_format},
    {"copy": True, "memory_format": torch.contiguous_format}, {"memory_format": torch.channels_last},
    {"device": "cpu"}, {"device": torch.device("cpu"), "dtype": torch.float16},
    {"dtype": float}, {"dtype": int}, {"non_blocking": True, "dtype": torch.int8},
    {"dtype": "float32"},
)

SPECS = [
    _spec("to", refs.to, method("to"), kwargs_variants=TO_VARIANTS, extra_samples=None),
    _spec("to[4-d]", refs.to, method("to"),
          kwargs_variants=({}, {"dtype": torch.float16}, {"memory_format": torch.contiguous_format},
                           {"memory_format": torch.channels_last}),
          dtypes=(torch.bool, torch.int32, torch.float32, torch.complex64)),
    _spec("to(dtype)", refs.to, method("to"), fixed_args={1: torch.float16}),
    _spec("to(dtype, non_blocking, copy)", refs.to, method("to"),
          fixed_args={1: torch.int64, 2: False, 3: True}),
    _spec("to(device, dtype)", refs.to, method("to"), fixed_args={1: "cpu", 2: torch.int32}),
    _spec("to(other)", refs.to, method("to"), arity=2, extra_samples=None),
    _spec("type_as", refs.type_as, method("type_as"), arity=2, scalar_args=(1,),
          extra_samples=None),
    *(_spec(name, getattr(refs, name), method(name),
            kwargs_variants=({}, {"memory_format": torch.contiguous_format}) if name in ("float", "int")
            else ({},), extra_samples=None)
      for name in DTYPE_METHODS),
    _spec("clone", refs.clone, torch.clone,
          kwargs_variants=({}, {"memory_format": torch.contiguous_format},
                           {"memory_format": torch.preserve_format},
                           {"memory_format": torch.channels_last})),
    _spec("contiguous", refs.contiguous, method("contiguous"),
          kwargs_variants=({}, {"memory_format": torch.contiguous_format},
                           {"memory_format": torch.channels_last})),
]


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_conformance(spec):
    run_conformance(spec)


# --- eager returns self when nothing changes -------------------------------------------------------
X = torch.randn(3, 4)
XT = X.t()
X4 = torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
CONTIGUOUS, CHANNELS_LAST = torch.contiguous_format, torch.channels_last

#: (eager spelling, the same call on refs, input, whether eager returns the input itself)
SAME = [
    (lambda x: x.to(x.dtype), lambda x: refs.to(x, x.dtype), X, True),
    (lambda x: x.float(), lambda x: refs.float(x), X, True),
    (lambda x: x.to("cpu"), lambda x: refs.to(x, "cpu"), X, True),
    (lambda x: x.to(x), lambda x: refs.to(x, x), X, True),
    (lambda x: x.to(), lambda x: refs.to(x), X, True),
    (lambda x: x.type_as(x), lambda x: refs.type_as(x, x), X, True),
    (lambda x: x.contiguous(), lambda x: refs.contiguous(x), X, True),
    (lambda x: x.to(memory_format=CONTIGUOUS), lambda x: refs.to(x, memory_format=CONTIGUOUS),
     XT, True),  # a transposed matrix "suggests" contiguous_format
    (lambda x: x.float(memory_format=CONTIGUOUS),
     lambda x: refs.float(x, memory_format=CONTIGUOUS), XT, True),
    (lambda x: x.contiguous(memory_format=CHANNELS_LAST),
     lambda x: refs.contiguous(x, memory_format=CHANNELS_LAST), X4, True),
    (lambda x: x.to(torch.float32, copy=True), lambda x: refs.to(x, torch.float32, copy=True),
     X, False),
    (lambda x: x.clone(), lambda x: refs.clone(x), X, False),
    (lambda x: x.double(), lambda x: refs.double(x), X, False),
    (lambda x: x.contiguous(), lambda x: refs.contiguous(x), XT, False),
    (lambda x: x.to(memory_format=CONTIGUOUS), lambda x: refs.to(x, memory_format=CONTIGUOUS),
     X4, False),
]


@pytest.mark.parametrize("fn, ref_fn, x, same", SAME)
def test_returns_self_exactly_when_eager_does(fn, ref_fn, x, same):
    assert (fn(x) is x) == same  # the spec
    assert (ref_fn(x) is x) == same
    jitted = primtrace.jit(fn)(x)
    assert (jitted is x) == same
    torch.testing.assert_close(jitted, fn(x))
    assert jitted.stride() == fn(x).stride()


LAYOUT_CALLS = {
    "to(f64)": (lambda x: x.to(torch.float64), lambda x: refs.to(x, torch.float64)),
    "to(copy)": (lambda x: x.to(x.dtype, copy=True), lambda x: refs.to(x, x.dtype, copy=True)),
    "to(same)": (lambda x: x.to(x.dtype), lambda x: refs.to(x, x.dtype)),
    "to(contiguous)": (lambda x: x.to(memory_format=CONTIGUOUS),
                       lambda x: refs.to(x, memory_format=CONTIGUOUS)),
    "half(contiguous)": (lambda x: x.half(memory_format=CONTIGUOUS),
                         lambda x: refs.half(x, memory_format=CONTIGUOUS)),
    "int": (lambda x: x.int(), lambda x: refs.int(x)),
    "chalf": (lambda x: x.chalf(), lambda x: refs.chalf(x)),
    "clone": (torch.clone, refs.clone),
    "clone(contiguous)": (lambda x: x.clone(memory_format=CONTIGUOUS),
                          lambda x: refs.clone(x, memory_format=CONTIGUOUS)),
    "contiguous": (lambda x: x.contiguous(), lambda x: refs.contiguous(x)),
    "type_as": (lambda x: x.type_as(x), lambda x: refs.type_as(x, x)),
}


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name", LAYOUT_CALLS)
@pytest.mark.parametrize("input_layout", LAYOUT_INPUTS)
def test_layouts(name, input_layout):
    eager_fn, ref_fn = LAYOUT_CALLS[name]
    x = LAYOUT_INPUTS[input_layout]()
    assert check_layouts(eager_fn, ref_fn, primtrace.jit(eager_fn), x) is None


# --- what jit records --------------------------------------------------------------------------------
@pytest.mark.parametrize("fn, expected", [
    (lambda x: x.float(), []),
    (lambda x: x.to(torch.float16), ["prims.convert_element_type"]),
    (lambda x: x.half(), ["prims.convert_element_type"]),
    (lambda x: x.to("cpu", torch.int32), ["prims.convert_element_type"]),
    (lambda x: x.type_as(torch.ones(1, dtype=torch.float64)), ["prims.full", "prims.convert_element_type"]),
    (lambda x: x.clone(), ["prims.clone"]),
    (lambda x: x.bool() + x.cdouble(), None),
])
def test_conversions_record_prims_not_opaque_nodes(fn, expected):
    x = torch.randn(3, 4)
    jfn = primtrace.jit(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error", primtrace.OpaqueOpWarning)
        torch.testing.assert_close(jfn(x), fn(x))
    kinds = [n.symbol.kind for n in primtrace.last_traces(jfn)[1].nodes]
    assert "opaque" not in kinds
    if expected is not None:
        assert [n.symbol.qualname for n in primtrace.last_traces(jfn)[1].nodes] == expected


def test_device_changes_are_left_to_torch():
    x = torch.randn(2, 3)
    assert refs.to.declines(x, "meta") and refs.to.declines(x, device="meta", dtype=torch.float16)
    assert refs.to.declines(x, 0)  # an accelerator's index
    assert not refs.to.declines(x, "cpu") and not refs.to.declines(x, torch.float16)
    assert mapping.bind(refs.to, (x, torch.device("meta")), {}) is None
    assert mapping.bind(refs.to, (x, torch.float16), {}) is not None
    with pytest.raises(NotImplementedError):
        refs.to(x, "meta")
    jfn = primtrace.jit(lambda x: x.to("meta"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", primtrace.OpaqueOpWarning)
        result = jfn(x)
    assert result.device.type == "meta" and result.shape == x.shape
    assert primtrace.last_traces(jfn)[0].nodes[0].symbol.kind == "opaque"


def test_channels_last_copies_are_prims():
    x = torch.randn(2, 3, 4, 5)
    for fn in (lambda x: x.to(memory_format=torch.channels_last) * 2,
               lambda x: x.contiguous(memory_format=torch.channels_last).half(),
               lambda x: x.clone(memory_format=torch.channels_last)):
        jfn = primtrace.jit(fn)
        with warnings.catch_warnings():
            warnings.simplefilter("error", primtrace.OpaqueOpWarning)
            result = jfn(x)
        assert result.stride() == fn(x).stride() == (60, 1, 15, 3)
        torch.testing.assert_close(result, fn(x))
        assert "prims.full_strided" in [n.symbol.qualname for n in primtrace.last_traces(jfn)[1].nodes]


def test_builtins_still_work_next_to_the_dtype_methods():
    import primtrace.refs.conversion as conversion
    assert conversion.float is refs.float and conversion.int.name == "int"
    assert refs.bool(torch.tensor([0.0, 2.0])).tolist() == [False, True]
    assert refs.long(torch.tensor([2.7, -2.7])).tolist() == [2, -2]


# --- a copy into a format has that format's exact strides, size-1 dims' too --------------------
POOLED = torch.randn(2, 3, 4, 4).contiguous(memory_format=CHANNELS_LAST).mean((2, 3), True)


@pytest.mark.parametrize("fn", [
    lambda x: x.clone(memory_format=CONTIGUOUS),
    lambda x: x.to(torch.float64, memory_format=CONTIGUOUS),
    lambda x: x.clone(memory_format=CHANNELS_LAST),
    lambda x: x.clone(),
    lambda x: x.double(),
    lambda x: x.contiguous(),
], ids=["clone(contiguous)", "to(f64, contiguous)", "clone(channels_last)", "clone", "double",
        "contiguous"])
@pytest.mark.parametrize("x", [POOLED, torch.randn(2, 3, 1, 1)], ids=["pooled cl", "row-major"])
def test_exact_strides_of_size_one_dims(fn, x):
    want = fn(x)
    assert fn(x).stride() == want.stride()
    for executors in (None, [primtrace.TORCH]):
        got = primtrace.jit(fn, executors=executors)(x)
        assert got.stride() == want.stride() and (got is x) == (want is x)
        torch.testing.assert_close(got, want)
