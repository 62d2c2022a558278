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
