"""Opaque calls whose meta function refuses what the kernel takes (F.grouped_mm on float32:
its meta takes bf16 only): the tracer takes their metadata from a run on zero-filled
stand-ins, refuses value-dependent outputs, and checks every call's outputs against it."""
import pytest
import torch
import torch.nn.functional as F

import primtrace
from primtrace.tracer import DataDependentError


@torch.library.custom_op("primtrace_test::strict_meta", mutates_args=())
def _strict_meta(x: torch.Tensor) -> torch.Tensor:
    return x[: x.shape[0] // 2].t() * 2   # shape from sizes, a transposed layout


@_strict_meta.register_fake
def _(x):
    raise RuntimeError("this meta function refuses every input")


@torch.library.custom_op("primtrace_test::value_sized", mutates_args=())
def _value_sized(x: torch.Tensor) -> torch.Tensor:
    return x[: int((x > 1).sum())].clone()   # zeros and ones give the same (empty) size


@_value_sized.register_fake
def _(x):
    raise RuntimeError("this meta function refuses every input")


def _experts(a, w, offs):
    return F.grouped_mm(a, w, offs=offs).relu() * 2


def test_grouped_mm_float32_under_jit_matches_eager():
    a, w = torch.randn(8, 4), torch.randn(3, 4, 8)
    jitted = primtrace.jit(_experts)
    for offs in ([3, 5, 8], [0, 8, 8], [1, 2, 6]):
        offs = torch.tensor(offs, dtype=torch.int32)
        got, expected = jitted(a, w, offs), _experts(a, w, offs)
        assert (got.shape, got.dtype, got.stride()) == (expected.shape, expected.dtype,
                                                         expected.stride())
        torch.testing.assert_close(got, expected)


def test_grouped_mm_invalid_arguments_raise_eagers_error():
    a, w = torch.randn(8, 4), torch.randn(2, 4, 3)   # strides not a multiple of 16 bytes
    offs = torch.tensor([3, 8], dtype=torch.int32)
    with pytest.raises(RuntimeError):
        _experts(a, w, offs)
    with pytest.raises(RuntimeError):
        primtrace.jit(_experts)(a, w, offs)


def test_meta_refusal_falls_back_to_stand_ins_with_the_kernels_layout():
    def f(x):
        return torch.ops.primtrace_test.strict_meta(x) + 1
    x = torch.randn(6, 3)
    got, expected = primtrace.jit(f)(x), f(x)
    assert (got.shape, got.stride()) == (expected.shape, expected.stride())
    torch.testing.assert_close(got, expected)
    x = torch.randn(10, 3)   # a new shape: traced again
    torch.testing.assert_close(primtrace.jit(f)(x), f(x))


def test_value_dependent_outputs_are_refused():
    with pytest.raises(DataDependentError, match="depends on tensor values"):
        primtrace.jit(lambda x: torch.repeat_interleave(x))(torch.tensor([1, 2]))
    # stand-ins of zeros and of ones agree here; the call's check catches the real values
    with pytest.raises(RuntimeError, match="depend on input values"):
        primtrace.jit(lambda x: torch.ops.primtrace_test.value_sized(x) + 1)(torch.full((4,), 3.0))
