"""Meta functions stricter than the CPU kernels. F.grouped_mm on float32 (its meta takes
bf16 only) is a ref over prims.grouped_mm, whose meta is a shape formula; any other opaque call
whose meta function refuses what its kernel takes gets its metadata from a run on zero-filled
stand-ins, value-dependent outputs refused, every call's outputs checked against it."""
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
    for offs in ([3, 5, 8], [0, 8, 8], [1, 2, 8]):   # rows past the last: unset in eager
        offs = torch.tensor(offs, dtype=torch.int32)
        got, expected = jitted(a, w, offs), _experts(a, w, offs)
        assert (got.shape, got.dtype, got.stride()) == (expected.shape, expected.dtype,
                                                         expected.stride())
        torch.testing.assert_close(got, expected)
    assert primtrace.explain(_experts, a, w, offs).opaque == []


I32 = torch.int32
GROUPED = [   # (a, b, offs, out_dtype): each rank combination, operand layouts
    (lambda: torch.randn(8, 16), lambda: torch.randn(3, 16, 8), [3, 8, 8], None),
    (lambda: torch.randn(16, 8).t(), lambda: torch.randn(3, 8, 16).transpose(1, 2), [0, 5, 8],
     None),
    (lambda: torch.randn(3, 8, 16), lambda: torch.randn(16, 8), [4, 8, 8], None),
    (lambda: torch.randn(8, 16), lambda: torch.randn(16, 8), [4, 16], None),
    (lambda: torch.randn(3, 8, 16), lambda: torch.randn(3, 16, 8), None, None),
    (lambda: torch.randn(8, 16).bfloat16(), lambda: torch.randn(3, 16, 8).bfloat16(), [3, 8, 8],
     torch.bfloat16),
]


@pytest.mark.parametrize("case", range(len(GROUPED)))
def test_grouped_mm_forms_match_eager(case):
    make_a, make_b, offs, out_dtype = GROUPED[case]
    torch.manual_seed(case)
    a, b = make_a(), make_b()
    offs = None if offs is None else torch.tensor(offs, dtype=I32)

    def f(a, b, offs):
        return F.grouped_mm(a, b, offs=offs, out_dtype=out_dtype)
    expected, got = f(a, b, offs), primtrace.jit(f)(a, b, offs)
    assert (got.shape, got.dtype, got.stride()) == (expected.shape, expected.dtype,
                                                     expected.stride())
    torch.testing.assert_close(got, expected)


def test_grouped_mm_of_large_weights_needs_no_stand_ins():
    """The prim's meta is a formula: weights over the stand-in limit trace too."""
    from primtrace.tracer import opaque
    a, w = torch.randn(8, 64), torch.randn(2, 64, 64)
    offs = torch.tensor([3, 8], dtype=I32)
    limit, opaque.STAND_IN_BYTES = opaque.STAND_IN_BYTES, 1024
    try:
        torch.testing.assert_close(primtrace.jit(_experts)(a, w, offs), _experts(a, w, offs))
    finally:
        opaque.STAND_IN_BYTES = limit


@pytest.mark.parametrize("make", [
    lambda: (torch.randn(8, 4), torch.randn(2, 4, 3), torch.tensor([3, 8], dtype=I32)),  # strides
    lambda: (torch.randn(8, 4).double(), torch.randn(2, 4, 4).double(),
             torch.tensor([3, 8], dtype=I32)),                                        # dtype
    lambda: (torch.randn(8, 4), torch.randn(2, 8, 4), torch.tensor([3, 8], dtype=I32)),  # K
    lambda: (torch.randn(8, 4), torch.randn(2, 4, 4), torch.tensor([3, 8])),          # int64 offs
])
def test_grouped_mm_invalid_arguments_raise_eagers_error(make):
    a, w, offs = make()
    with pytest.raises(RuntimeError) as eager:
        _experts(a, w, offs)
    with pytest.raises(type(eager.value)):
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
    # (torch.repeat_interleave has a ref: its size is traced as a data-dependent size,
    # tests/tracer/test_data_dependent.py; aten's op has none)
    with pytest.raises(DataDependentError, match="depends on tensor values"):
        primtrace.jit(lambda x: torch.ops.aten.repeat_interleave.Tensor(x))(torch.tensor([1, 2]))
    # stand-ins of zeros and of ones agree here; the call's check catches the real values
    with pytest.raises(RuntimeError, match="depend on input values"):
        primtrace.jit(lambda x: torch.ops.primtrace_test.value_sized(x) + 1)(torch.full((4,), 3.0))
