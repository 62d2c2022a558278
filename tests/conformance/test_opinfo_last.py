"""Regressions of the last opinfo (python_ref_db) classes: spectral norms of empty matrices,
conj as a lazily conjugated view, and the refs of stft/istft; each through the ref on real
tensors and through ``primtrace.jit``, against eager."""
from __future__ import annotations

import warnings

import pytest
import torch

import primtrace
from primtrace import refs


def _outcome(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - compared by kind
            return type(e)


def _check(got, expected):
    if isinstance(expected, type):
        assert got is expected or (isinstance(got, type) and issubclass(got, expected)), got
        return
    assert not isinstance(got, type), got
    assert got.dtype == expected.dtype and got.shape == expected.shape, (got, expected)
    torch.testing.assert_close(got, expected, equal_nan=True)


# --- linalg.norm / matrix_norm: spectral norms of empty matrices ------------------------------
@pytest.mark.parametrize("shape", [(0, 0), (5, 0), (0, 5), (2, 0, 3)])
@pytest.mark.parametrize("ord", [2, -2, "nuc"])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex128])
def test_spectral_norm_of_empty_matrices(shape, ord, keepdim, dtype):
    x = torch.empty(shape, dtype=dtype)
    fn = (lambda a: torch.linalg.matrix_norm(a, ord, keepdim=keepdim)) if len(shape) > 2 else \
        (lambda a: torch.linalg.norm(a, ord, keepdim=keepdim))
    ref = refs.linalg.matrix_norm if len(shape) > 2 else refs.linalg.norm
    expected = _outcome(fn, x)
    _check(_outcome(ref, x, ord, keepdim=keepdim), expected)
    _check(_outcome(primtrace.jit(fn), x), expected)


# --- conj: eager's lazily conjugated view ----------------------------------------------------
def test_conj_ref_is_a_lazy_view():
    z = torch.randn(5, dtype=torch.complex64)
    c = refs.conj(z)
    assert c.is_conj() and c._base is z and c.untyped_storage().data_ptr() == \
        z.untyped_storage().data_ptr()
    torch.testing.assert_close(c.resolve_conj(), torch.conj_physical(z))
    x = torch.randn(5)
    assert refs.conj(x) is x
    # real and imag of it are eager's views (the imaginary part with the negative bit)
    torch.testing.assert_close(refs.imag(c), torch.imag(torch.conj(z)))
    torch.testing.assert_close(refs.real(c), torch.real(z))
    assert refs.imag(c)._base is z


def _write_through(x):
    y = torch.conj(x)
    y.mul_(2)
    y.add_(1j)
    return x


def _write_base_read_view(x):
    y = torch.conj(x)
    x.add_(1j)
    return y * 1, y


def _out_of_conj(x, o):
    torch.mul(torch.conj(x), 2, out=o)
    return o


_CONJ_PROGRAMS = {
    "returned": (lambda x: torch.conj(x), 1),
    "arith": (lambda x: torch.conj(x) * x + 1, 1),
    "with_input": (lambda x: (torch.conj(x), x + 1), 1),
    "twice": (lambda x: torch.conj(torch.conj(x)), 1),
    "reshaped": (lambda x: torch.conj(x).reshape(2, 3).t(), 1),
    "of_temp": (lambda x: torch.conj(x * 2) + x, 1),
    "real_part": (lambda x: torch.real(torch.conj(x)) * 2, 1),
    "imag_part": (lambda x: torch.imag(torch.conj(x)) + 0, 1),
    "sum": (lambda x: torch.conj(x).sum(), 1),
    "resolved": (lambda x: torch.conj(x).resolve_conj(), 1),
    "view_as_real": (lambda x: torch.view_as_real(torch.conj(x)), 1),
    "write_through": (_write_through, 1),
    "write_base_read_view": (_write_base_read_view, 1),
    "out": (_out_of_conj, 2),
}


@pytest.mark.parametrize("name", sorted(_CONJ_PROGRAMS))
def test_conj_view_under_jit(name):
    fn, n = _CONJ_PROGRAMS[name]
    make = lambda: [torch.arange(6.0).to(torch.complex64) * (1 + 2j)  # noqa: E731
                    for _ in range(n)]
    eager_args, jit_args = make(), make()
    expected, got = _outcome(fn, *eager_args), _outcome(primtrace.jit(fn), *jit_args)
    if isinstance(expected, type):
        return _check(got, expected)
    pairs = zip(got, expected) if isinstance(expected, tuple) else [(got, expected)]
    for g, e in pairs:
        _check(g, e)
        assert g.is_conj() == e.is_conj()
    for g, e in zip(jit_args, eager_args):  # inputs end as eager leaves them
        _check(g, e)


# --- masked_fill: eager converts a tensor value's item(), checked ------------------------------
_VALUES = [torch.tensor(1j), torch.tensor(2 + 0j), torch.tensor(1e30), torch.tensor(float("nan")),
           torch.tensor(300.0), torch.tensor(-1), torch.tensor(2 ** 40), torch.tensor(True),
           torch.tensor(7, dtype=torch.int8)]


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.int8, torch.float16,
                                   torch.float32, torch.bool, torch.complex64])
def test_masked_fill_tensor_value_is_checked_as_eager(dtype):
    x, mask = torch.tensor([1, 1]).to(dtype), torch.tensor([True, False])
    fn = lambda a, m, v: torch.masked_fill(a, m, v)  # noqa: E731
    jitted = primtrace.jit(fn)
    for value in _VALUES:  # one trace per value dtype: the guard reads each call's value
        expected = _outcome(fn, x, mask, value)
        _check(_outcome(refs.masked_fill, x, mask, value), expected)
        _check(_outcome(jitted, x, mask, value), expected)
        _check(_outcome(jitted, x, mask, torch.tensor(0, dtype=value.dtype)),
               fn(x, mask, torch.tensor(0, dtype=value.dtype)))
