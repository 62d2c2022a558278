"""Conformance of refs.nn.functional (the elementwise activations) against eager.

Every ref runs the harness samples (every dtype, layouts, 0-dim, empty, specials, integer
extremes) for each keyword variant; the variants include the values where eager's number
conversion raises (overflow in float, float16 or int8; complex; NaN) so that errors are
checked dtype by dtype. Extra samples put values at the kinks and thresholds. In-place
variants are checked separately: they must write into the input exactly as eager does.
"""
from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F

from primtrace.ir import Trace, TensorSpec, tracing
from primtrace.refs.nn import functional as RF
from tests.conformance.harness import (FLOAT_DTYPES, OpSpec, SampleInput,
                                       compare_outputs, make_tensor, run_conformance,
                                       run_out_conformance, values_match)

NAN, INF = math.nan, math.inf

#: Values around every kink and threshold of the family, and far out in both directions.
POINTS = (-1e4, -100.0, -30.0, -20.5, -20.0, -19.5, -10.0, -6.0, -3.0001, -3.0, -2.9999, -1.0,
          -0.5, -1e-3, -1e-8, -0.0, 0.0, 1e-8, 1e-3, 0.5, 1.0, 2.9999, 3.0, 3.0001, 5.9999,
          6.0, 6.0001, 10.0, 19.5, 20.0, 20.5, 30.0, 88.0, 100.0, 1e4)


def points(extra=()):
    """extra_samples: POINTS (and `extra`) as a 1-d tensor and a 0-dim tensor, each float dtype."""
    def generate(spec):
        values = sorted(set(POINTS) | set(extra))
        for dtype in FLOAT_DTYPES:
            name = str(dtype).replace("torch.", "")
            t = torch.tensor(values, dtype=torch.float64).to(dtype)
            for kwargs in spec.kwargs_variants:
                yield SampleInput((t,), dict(kwargs), f"{name} points {kwargs}")
                yield SampleInput((t[-3].clone(),), dict(kwargs), f"{name} point 0-dim {kwargs}")
    return generate


def spec(name, kwargs=({},), extra=(), out=False, **options):
    return OpSpec(name, getattr(RF, name), getattr(F, name), kwargs_variants=tuple(kwargs),
                  scalar_args=(0,), supports_out=out, extra_samples=points(extra), **options)


def _prelu_samples(spec):
    """Weights per channel (dim 1; dim 0 of a 1-d input) or one for all, across layouts; then
    eager's refusals: dtypes that differ, a weight of the wrong size or rank, a number."""
    for dtype in (*FLOAT_DTYPES, torch.int32, torch.complex64):
        name = str(dtype).replace("torch.", "")
        w3 = make_tensor((3,), dtype, seed=2, domain=(-2.0, 2.0))
        x4 = make_tensor((2, 3, 4, 5), dtype, seed=1)
        inputs = {"4-d": x4, "channels_last": x4.contiguous(memory_format=torch.channels_last),
                  "transposed": make_tensor((5, 3), dtype, seed=3).t().contiguous().t(),
                  "sliced": make_tensor((4, 6), dtype, seed=4)[:, ::2], "empty": make_tensor((0, 3), dtype)}
        for desc, x in inputs.items():
            yield SampleInput((x, w3), {}, f"{name} {desc}, 3 weights")
            yield SampleInput((x, w3[:1]), {}, f"{name} {desc}, 1 weight")
            yield SampleInput((x, w3[0]), {}, f"{name} {desc}, 0-dim weight")
        points_tensor = torch.tensor(POINTS + (NAN, INF, -INF), dtype=torch.float64).to(dtype)
        yield SampleInput((points_tensor, w3[:1]), {}, f"{name} points, 1-d")
        yield SampleInput((points_tensor[3], w3[1]), {}, f"{name} 0-dim input and weight")
        yield SampleInput((points_tensor[3], w3), {}, f"{name} 0-dim input, 3 weights")
        yield SampleInput((points_tensor, w3), {}, f"{name} 1-d input, 3 weights")
    x = make_tensor((2, 3, 4), torch.float32)
    for weight in (make_tensor((3,), torch.float64), make_tensor((3,), torch.float16), make_tensor((2,), torch.float32),
                   make_tensor((1, 3), torch.float32), make_tensor((1, 1), torch.float32), 0.5):
        yield SampleInput((x, weight), {}, f"weight {getattr(weight, 'dtype', weight)} {list(getattr(weight, 'shape', ()))}")


#: Number parameters eager refuses for some dtypes only: float32 overflow, float16
#: overflow (where the parameter is in the input's dtype), a complex number.
TOO_BIG = 1e300

SPECS = [
    spec("relu"),
    spec("relu6"),
    spec("hardtanh", [{}, {"min_val": -2.5, "max_val": 3.5}, {"min_val": 0.5, "max_val": 0.5},
                      {"min_val": 2.0, "max_val": 1.0}, {"min_val": -1.5, "max_val": 127.5},
                      {"min_val": -0.5, "max_val": 2}, {"min_val": 0, "max_val": 300},
                      {"min_val": -1e5, "max_val": 1e5}, {"min_val": -INF, "max_val": INF},
                      {"min_val": NAN, "max_val": 1.0}, {"min_val": 1j, "max_val": 2}],
         extra=(-2.5, 3.5)),
    spec("leaky_relu", [{}, {"negative_slope": 0.2}, {"negative_slope": -1.5},
                        {"negative_slope": 3}, {"negative_slope": 1e5},
                        {"negative_slope": TOO_BIG}, {"negative_slope": 1 + 1j},
                        {"negative_slope": 0.5 + 0j}, {"negative_slope": "a"}]),
    spec("rrelu", [{}, {"lower": 0.1, "upper": 0.5}, {"lower": 0.5, "upper": 0.1},
                   {"lower": 0.2, "upper": 0.2, "training": False}, {"lower": TOO_BIG, "upper": 2e300}]),
    spec("threshold", [{"threshold": 0.5, "value": -1.0}, {"threshold": -0.5, "value": 9},
                       {"threshold": 1, "value": 2.7}, {"threshold": 0.5, "value": 300},
                       {"threshold": -1, "value": 1}, {"threshold": -1.5, "value": 1},
                       {"threshold": 1e5, "value": 1.0}, {"threshold": 1.0, "value": 1e5},
                       {"threshold": 1.0, "value": NAN}, {"threshold": NAN, "value": 1.0},
                       {"threshold": 2**70, "value": 1}, {"threshold": 20.0, "value": 20.5}]),
    spec("elu", [{}, {"alpha": 0.5}, {"alpha": -2}, {"alpha": True}, {"alpha": TOO_BIG}]),
    spec("selu"),
    spec("celu", [{}, {"alpha": 0.5}, {"alpha": 3}, {"alpha": 0}, {"alpha": 1e-40},
                  {"alpha": 1 + 1j}]),
    spec("gelu", [{}, {"approximate": "tanh"}, {"approximate": "foo"}], out=True),
    spec("silu"),
    spec("mish"),
    spec("softplus", [{}, {"beta": 2, "threshold": 1}, {"beta": 0.5}, {"beta": -1},
                      {"threshold": -1}, {"beta": 0}, {"beta": TOO_BIG}], out=True),
    spec("logsigmoid", out=True),
    spec("hardsigmoid"),
    spec("hardswish"),
    spec("softshrink", [{}, {"lambd": 0}, {"lambd": 1.5}, {"lambd": 0.10002}, {"lambd": -0.5},
                        {"lambd": 1e5}, {"lambd": NAN}, {"lambd": True}], out=True,
         extra=(0.10003662109375, -0.10003662109375, 1.5, -1.5)),
    spec("hardshrink", [{}, {"lambd": 1.5}, {"lambd": 0.10002}, {"lambd": -0.5}, {"lambd": 1e5},
                        {"lambd": TOO_BIG}], out=True,
         extra=(0.10003662109375, -0.10003662109375, 1.5, -1.5)),
    spec("tanhshrink"),
    spec("softsign"),
    spec("tanh"),
    spec("sigmoid"),
    OpSpec("prelu", RF.prelu, F.prelu, arity=2, supports_out=False, extra_samples=_prelu_samples),
]


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_conformance(spec):
    run_conformance(spec)


@pytest.mark.parametrize("spec", [s for s in SPECS if s.supports_out], ids=str)
def test_out_conformance(spec):
    run_out_conformance(spec)


def test_every_ref_has_a_spec_or_an_inplace_case():
    from tests.conformance.test_convolution import CONV_NAMES, POOL_NAMES
    from tests.conformance.test_multi_head_attention import NAMES as MHA_NAMES
    from tests.conformance.test_nn_composites import NN_NAMES  # composites, classification
    from tests.conformance.test_shuffles import SHUFFLE_NAMES
    from tests.conformance.test_softmax_norms_losses import NAMES  # softmax, norms, losses
    covered = ({s.name for s in SPECS} | {name for name, *_ in INPLACE} | set(NAMES)
               | set(CONV_NAMES) | set(POOL_NAMES) | set(SHUFFLE_NAMES) | set(NN_NAMES)
               | set(MHA_NAMES))
    assert set(RF.__all__) <= covered, set(RF.__all__) - covered


# --- in-place: the input is written as eager writes it --------------------------------------
INPLACE = [
    ("relu_", {}), ("relu", {"inplace": True}),
    ("relu6", {"inplace": True}),
    ("hardtanh", {"inplace": True}), ("hardtanh", {"min_val": -0.5, "max_val": 2, "inplace": True}),
    ("hardtanh_", {}), ("hardtanh_", {"min_val": 2.0, "max_val": 1.0}),
    ("hardtanh_", {"min_val": -1.5, "max_val": 1.5}),
    ("leaky_relu_", {}), ("leaky_relu_", {"negative_slope": 0.3}),
    ("leaky_relu", {"negative_slope": 0.3, "inplace": True}),
    ("elu_", {}), ("elu_", {"alpha": 0.5}), ("elu", {"alpha": 2.0, "inplace": True}),
    ("selu_", {}), ("selu", {"inplace": True}),
    ("celu_", {}), ("celu_", {"alpha": 0.5}), ("celu_", {"alpha": 0}),
    ("celu", {"alpha": 2.0, "inplace": True}),
    ("threshold_", {"threshold": 0.5, "value": -2.0}),
    ("threshold", {"threshold": -0.5, "value": 9, "inplace": True}),
    ("rrelu_", {}), ("rrelu_", {"lower": 0.1, "upper": 0.2}), ("rrelu", {"inplace": True}),
    ("silu", {"inplace": True}), ("mish", {"inplace": True}),
    ("hardsigmoid", {"inplace": True}), ("hardswish", {"inplace": True}),
]
INPLACE_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8,
                  torch.uint8, torch.int64, torch.bool, torch.complex64)


def _inplace_samples(dtype):
    for shape, layout in (((3, 4), "contiguous"), ((3, 4), "transposed"), ((3, 4), "sliced"),
                          ((3, 4), "expanded"), ((), "contiguous"), ((0, 3), "contiguous")):
        yield f"{layout}{list(shape)}", lambda shape=shape, layout=layout: make_tensor(
            shape, dtype, seed=3, layout=layout)


@pytest.mark.parametrize("name,kwargs", INPLACE, ids=[f"{n}{k}" for n, k in INPLACE])
def test_inplace_writes_input_as_eager(name, kwargs):
    ours_fn, eager_fn = getattr(RF, name), getattr(F, name)
    failures = []
    for dtype in INPLACE_DTYPES:
        for desc, make in _inplace_samples(dtype):
            original, ours, eager = make(), make(), make()
            try:
                expected, eager_error = eager_fn(eager, **kwargs), None
            except Exception as e:  # eager's verdict is the spec
                eager_error = e
            try:
                got, our_error = ours_fn(ours, **kwargs), None
            except Exception as e:
                our_error = e
            where = f"{dtype} {desc}"
            if name.startswith("threshold") and desc.startswith("expanded"):
                # Known divergence: eager's threshold_ skips the self-overlap check and writes
                # through an expanded input; primtrace refuses, as every other in-place op does.
                if eager_error is None and not isinstance(our_error, RuntimeError):
                    failures.append(f"{where}: expected ours to refuse, got {our_error!r}")
                continue
            if eager_error is not None:
                if not isinstance(our_error, type(eager_error)):
                    failures.append(f"{where}: eager raised {eager_error!r}, ours {our_error!r}")
                elif not torch.equal(ours, original):
                    failures.append(f"{where}: ours raised but wrote into the input")
                continue
            if our_error is not None:
                failures.append(f"{where}: ours raised {our_error!r}")
                continue
            assert expected is eager  # the spec itself: eager returns its input
            if got is not ours:
                failures.append(f"{where}: did not return the input")
            elif ours.stride() != eager.stride():
                failures.append(f"{where}: strides {ours.stride()} != {eager.stride()}")
            else:
                reference = _outofplace_reference(name, original, kwargs)
                problem = compare_outputs(ours, eager, lambda: reference)
                if problem:
                    failures.append(f"{where}: {problem}")
    assert not failures, "\n".join(failures[:6])


def _outofplace_reference(name, x, kwargs):
    """Eager's out-of-place result on a float64 copy: the accuracy reference."""
    kwargs = {k: v for k, v in kwargs.items() if k != "inplace"}
    fn = getattr(F, name.rstrip("_"))
    if not x.is_floating_point():
        return None
    try:
        return fn(x.to(torch.float64), **kwargs)
    except Exception:
        return None


def test_inplace_runs_eager_checks():
    """hardtanh refuses min_val > max_val in Python; hardtanh_ (the C++ op) does not."""
    x = torch.tensor([-2.0, 0.5, 3.0, NAN])
    with pytest.raises(ValueError):
        RF.hardtanh(x.clone(), 2.0, 1.0, inplace=True)
    y = x.clone()
    RF.hardtanh_(y, 2.0, 1.0)
    assert torch.equal(y.nan_to_num(7.0), torch.tensor([1.0, 1.0, 1.0, 7.0]))


# --- details worth a test of their own ---------------------------------------------------------
def test_hardtanh_equal_limits_is_a_constant_but_keeps_nan():
    x = torch.tensor([-INF, -1.0, 0.25, 0.5, 2.0, INF, NAN])
    got = RF.hardtanh(x, 0.5, 0.5)
    assert torch.equal(got.nan_to_num(7.0), torch.tensor([0.5] * 6 + [7.0]))
    assert torch.equal(got.nan_to_num(7.0), F.hardtanh(x, 0.5, 0.5).nan_to_num(7.0))


def test_parameters_round_like_eager_kernels():
    """hardshrink rounds lambd to float16 (so 0.10003662 is inside); softshrink keeps it float."""
    x = torch.tensor([0.10003662109375], dtype=torch.float16)
    assert RF.hardshrink(x, 0.10002).item() == F.hardshrink(x, 0.10002).item() == 0.0
    assert RF.softshrink(x, 0.10002).item() == F.softshrink(x, 0.10002).item() > 0
    ints = torch.arange(-3, 4, dtype=torch.int8)
    assert torch.equal(RF.threshold(ints, -0.5, 9), F.threshold(ints, -0.5, 9))  # -0.5 -> 0
    assert torch.equal(RF.hardtanh(ints, -1.5, 2.7), F.hardtanh(ints, -1.5, 2.7))


def test_softsign_integers_wrap_as_eager():
    x = torch.tensor([-128, 127, 0, -1], dtype=torch.int8)
    assert torch.equal(RF.softsign(x), F.softsign(x))
    assert RF.softsign(x)[0].item() > 1  # -128 / (|-128| + 1) = -128 / -127 in int8


def test_rrelu_training_has_no_ref():
    with pytest.raises(NotImplementedError):
        RF.rrelu(torch.ones(3), training=True)


def test_signatures_match_torch():
    import inspect
    for name in RF.__all__:
        fn = getattr(F, name)
        try:
            expected = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            continue  # a builtin: its parameters are checked by the conformance samples
        if expected == ["args", "kwargs"]:
            continue  # F's boolean dispatch on return_indices (max_pool2d): the same
        assert list(inspect.signature(getattr(RF, name)).parameters) == expected, name


# --- tracing: the refs run on proxies and record only prims ------------------------------------
TRACE_CASES = [(name, kwargs) for name, kwargs in
               [(s.name, s.kwargs_variants[0]) for s in SPECS] + [("relu_", {}), ("elu_", {})]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int8])
@pytest.mark.parametrize("name,kwargs", TRACE_CASES, ids=[n for n, _ in TRACE_CASES])
def test_traces_to_prims_with_eager_metadata(name, kwargs, dtype):
    x = make_tensor((2, 3), dtype, seed=1)
    try:
        expected = getattr(F, name)(x.clone(), **kwargs)
    except Exception as e:
        expected = e
    trace = Trace(name)
    proxy = trace.tensor(TensorSpec.of(x))
    try:
        with tracing(trace):
            out = getattr(RF, name)(proxy, **kwargs)
    except Exception as e:
        assert isinstance(expected, Exception) and isinstance(e, type(expected)), (e, expected)
        return
    assert not isinstance(expected, Exception), expected
    assert (tuple(out.shape), out.dtype) == (tuple(expected.shape), expected.dtype)
    prims_used = {node.symbol.module for node in trace.flat_nodes()}
    assert prims_used == {"prims"}, prims_used


def test_pass_rule_where_eager_is_nan():
    """The harness rule this family needed (eager float32 gelu(inf) is NaN, float64 says inf):
    where eager is NaN and the float64 reference is not, ours must match the reference."""
    reference = torch.tensor([INF, 1.0], dtype=torch.float64)
    eager = torch.tensor([NAN, 1.0])
    assert values_match(torch.tensor([INF, 1.0]), eager, reference) is None
    assert values_match(torch.tensor([5.0, 1.0]), eager, reference) is not None
    assert values_match(torch.tensor([-INF, 1.0]), eager, reference) is not None


def test_prelu_of_a_0_dim_input_with_a_1_d_weight():
    """eager reshapes the weight to 0-dim: the ref squeezes it (a view), traced or not."""
    import primtrace
    for x in (torch.tensor(-2.0), torch.tensor(3.0)):
        w = torch.tensor([0.25])
        expected = F.prelu(x, w)
        for got in (RF.prelu(x, w), primtrace.jit(lambda x, w: F.prelu(x, w))(x, w)):
            assert got.shape == expected.shape and torch.equal(got, expected)
