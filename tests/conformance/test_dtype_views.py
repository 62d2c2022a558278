"""Conformance of view_as_real and view_as_complex: eager's values, shapes, strides and
errors, results that share the input's memory, and the same through jit."""
import warnings

import pytest
import torch

import primtrace
from primtrace import refs

COMPLEX_INPUTS = {
    "contiguous": lambda d: torch.randn(3, 4, dtype=d),
    "transposed": lambda d: torch.randn(4, 3, dtype=d).t(),
    "sliced": lambda d: torch.randn(3, 8, dtype=d)[:, 1::2],
    "expanded": lambda d: torch.randn(1, 4, dtype=d).expand(3, 4),
    "0-dim": lambda d: torch.randn((), dtype=d),
    "empty": lambda d: torch.randn(0, 3, dtype=d),
}
REAL_INPUTS = {
    "pairs": lambda d: torch.randn(3, 2, dtype=d),
    "1-d": lambda d: torch.randn(2, dtype=d),
    "every other row": lambda d: torch.randn(4, 2, dtype=d)[::2],
    "offset 2": lambda d: torch.randn(4, 2, dtype=d)[1:],
    "permuted": lambda d: torch.randn(3, 2, 2, dtype=d).transpose(0, 1),
    "expanded": lambda d: torch.randn(1, 2, dtype=d).expand(3, 2),
    "empty": lambda d: torch.randn(0, 2, dtype=d),
    # eager's refusals
    "last dim 3": lambda d: torch.randn(2, 3, dtype=d),
    "last stride 2": lambda d: torch.randn(2, 2, dtype=d).t(),
    "odd offset": lambda d: torch.randn(3, 4, dtype=d)[:, 1:3],
    "odd stride": lambda d: torch.randn(3, 5, 2, dtype=d).as_strided((3, 2), (3, 1)),
    "0-dim": lambda d: torch.randn((), dtype=d),
}


def _same_view(ours, eager, x):
    assert ours.dtype == eager.dtype and ours.shape == eager.shape
    assert ours.stride() == eager.stride()
    assert ours.storage_offset() == eager.storage_offset()
    assert ours.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()  # a view
    ours_bits = torch.view_as_real(ours) if ours.is_complex() else ours
    eager_bits = torch.view_as_real(eager) if eager.is_complex() else eager
    assert torch.equal(ours_bits, eager_bits)


def _outcomes(fn, ref, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ComplexHalf is experimental
        try:
            expected = fn(x)
        except Exception as e:
            with pytest.raises(type(e)):
                ref(x)
            return None
        return ref(x), expected


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
@pytest.mark.parametrize("dtype", [torch.complex32, torch.complex64, torch.complex128])
@pytest.mark.parametrize("layout", COMPLEX_INPUTS)
def test_view_as_real(layout, dtype):
    x = COMPLEX_INPUTS[layout](torch.complex64).to(dtype) if dtype is torch.complex32 else \
        COMPLEX_INPUTS[layout](dtype)
    ours, eager = _outcomes(torch.view_as_real, refs.view_as_real, x)
    _same_view(ours, eager, x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("layout", REAL_INPUTS)
def test_view_as_complex(layout, dtype):
    x = REAL_INPUTS[layout](dtype)
    outcome = _outcomes(torch.view_as_complex, refs.view_as_complex, x)
    if outcome is not None:
        _same_view(*outcome, x)


@pytest.mark.parametrize("x", [torch.ones(3), torch.ones(2, 2, dtype=torch.int32),
                               torch.ones(2, 2, dtype=torch.bfloat16), 1.0],
                         ids=["real", "int32", "bfloat16", "number"])
def test_wrong_dtypes(x):
    for fn, ref in ((torch.view_as_real, refs.view_as_real),
                    (torch.view_as_complex, refs.view_as_complex)):
        _outcomes(fn, ref, x)


def test_through_jit():
    def fn(x, y):
        r = torch.view_as_real(x) * 2
        return r, torch.view_as_complex(y) + 1
    x, y = torch.randn(3, 4, dtype=torch.complex64), torch.randn(5, 2, dtype=torch.float64)
    jfn = primtrace.jit(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error", primtrace.OpaqueOpWarning)
        got = jfn(x, y)
    for g, e in zip(got, fn(x, y)):
        assert g.dtype == e.dtype and torch.equal(g, e)
    names = [n.symbol.qualname for n in primtrace.last_traces(jfn)[1].nodes]
    assert "prims.view_as_real" in names and "prims.view_as_complex" in names


def test_a_view_as_real_sees_writes_to_its_input():
    x = torch.zeros(3, dtype=torch.complex64)
    r = refs.view_as_real(x)
    x.add_(1 + 2j)
    assert r.tolist() == [[1.0, 2.0]] * 3
