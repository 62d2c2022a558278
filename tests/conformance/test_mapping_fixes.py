"""The tracer's torch -> ref mapping on the spellings that used to miss their refs:
F.threshold (a function named _threshold), torch.hardshrink and other torch.X whose ref lives
in refs.nn.functional, Tensor.polygamma (self second in torch.polygamma), and ``~`` on a
float tensor (TypeError, where torch.bitwise_not raises NotImplementedError)."""
import warnings

import pytest
import torch
import torch.nn.functional as F

import primtrace
from primtrace import refs
from primtrace.refs.nn import functional as refs_F
from primtrace.tracer import mapping


def run_jit(fn, *args):
    """jit(fn)(*args), failing on any opaque node; returns (result, acquisition trace)."""
    jfn = primtrace.jit(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error", primtrace.OpaqueOpWarning)
        result = jfn(*args)
    trace = primtrace.last_traces(jfn)[0]
    assert all(n.symbol.kind != "opaque" for n in trace.flat_nodes())
    return result, trace


def test_functional_threshold_is_named_by_its_function():
    assert mapping.torch_name(F.threshold) == ("nn.functional", "_threshold")
    assert mapping.resolve(F.threshold).ref is refs_F.threshold
    x = torch.randn(6)
    result, trace = run_jit(lambda x: F.threshold(x, 0.1, 20.0), x)
    torch.testing.assert_close(result, F.threshold(x, 0.1, 20.0))
    assert trace.nodes[0].symbol is refs_F.threshold


def test_functional_threshold_in_place():
    x = torch.randn(6)
    expected = F.threshold(x.clone(), 0.1, 20.0, inplace=True)
    y = x.clone()
    result, _ = run_jit(lambda y: F.threshold(y, 0.1, 20.0, inplace=True), y)
    torch.testing.assert_close(y, expected)
    assert result is y


@pytest.mark.parametrize("fn", [
    lambda x: torch.hardshrink(x), lambda x: F.hardshrink(x, 0.3), lambda x: x.hardshrink(0.3),
    lambda x: torch.threshold(x, 0.1, 2.0), lambda x: torch.selu(x),
    lambda x: torch.celu(x, 0.5), lambda x: torch.rrelu(x), lambda x: x.relu(),
])
def test_torch_names_fall_back_to_functional_refs(fn):
    x = torch.randn(3, 4)
    result, _ = run_jit(fn, x)
    torch.testing.assert_close(result, fn(x))


def test_torch_names_in_place_fall_back_to_functional_refs():
    x = torch.randn(5)
    expected = torch.celu_(x.clone(), 0.5)
    y = x.clone()
    result, _ = run_jit(lambda y: torch.celu_(y, 0.5), y)
    torch.testing.assert_close(y, expected)
    assert result is y


def test_refs_of_the_name_itself_come_first():
    assert mapping.find_ref("torch", "sigmoid") is refs.sigmoid
    assert mapping.find_ref("torch", "hardshrink") is refs_F.hardshrink
    assert mapping.find_ref("torch", "erfcx") is refs.special.erfcx


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.bool])
@pytest.mark.parametrize("n", [0, 1, 3])
def test_tensor_polygamma_puts_self_first(n, dtype):
    x = (torch.rand(7) * 4 + 0.1).to(dtype)
    result, _ = run_jit(lambda x: x.polygamma(n), x)
    torch.testing.assert_close(result, torch.polygamma(n, x), equal_nan=True)
    result, _ = run_jit(lambda x: torch.polygamma(n, x), x)
    torch.testing.assert_close(result, x.polygamma(n), equal_nan=True)


def test_tensor_polygamma_errors_and_in_place():
    x = torch.rand(5) + 0.5
    with pytest.raises(RuntimeError):
        x.polygamma(-1)
    with pytest.raises(RuntimeError):
        primtrace.jit(lambda x: x.polygamma(-1))(x)
    y = x.clone()
    result, _ = run_jit(lambda y: y.polygamma_(2), y)
    torch.testing.assert_close(y, x.polygamma(2))
    assert result is y


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.complex64])
def test_invert_of_a_float_tensor_is_a_type_error(dtype):
    x = torch.ones(3, dtype=dtype)
    with pytest.raises(TypeError, match="operator.invert"):
        ~x  # noqa: B018 (eager: the spec)
    with pytest.raises(TypeError, match="operator.invert"):
        primtrace.jit(lambda x: ~x)(x)
    with pytest.raises(TypeError):
        refs.invert(x)
    with pytest.raises(NotImplementedError):
        torch.bitwise_not(x)
    with pytest.raises(NotImplementedError):
        primtrace.jit(lambda x: torch.bitwise_not(x))(x)
    with pytest.raises(NotImplementedError):
        refs.bitwise_not(x)


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int8, torch.int64])
def test_invert_of_integers_and_bools(dtype):
    x = torch.tensor([0, 1, 5, -3]).to(dtype)
    result, trace = run_jit(lambda x: ~x, x)
    assert torch.equal(result, ~x)
    assert trace.nodes[0].symbol is refs.invert
    assert torch.equal(refs.invert(x), ~x)


@pytest.mark.parametrize("n", [2**64, 2**70, -2**63 - 1])
def test_ints_beyond_64_bits_are_constants_and_raise_as_eager(n):
    """No torch op takes them (OverflowError): they are not runtime inputs of a trace."""
    x = torch.randn(4)
    fn = lambda x, t: F.threshold(x, t, 1.0)  # noqa: E731
    jfn = primtrace.jit(fn)
    torch.testing.assert_close(jfn(x, 1), fn(x, 1))
    with pytest.raises(OverflowError):
        fn(x, n)
    with pytest.raises(OverflowError):
        jfn(x, n)  # not the trace of t=1 run with n
    torch.testing.assert_close(jfn(x, 2**63), fn(x, 2**63))  # still a 64-bit (unsigned) int
