"""Fused transcendental functions against eager where one extra ULP is visible (issue 9).

fmod amplifies a last-bit difference of its operands: with a 0.83-ULP exp the fused
``fmod(exp(a), sin(exp(a)))`` on int64 ``a`` came out 7.9e-5 away from eager and farther
from the float64 result (exp(4.0) and sin(exp(5.0)) rounded the other way). exp and sin
are now near correctly rounded there (0.60 and 0.503 ULP, eager's MKL 0.56 and 0.60).
"""
from __future__ import annotations

import torch

import primtrace


def _fmod_exp(a):
    return torch.fmod(torch.exp(a), torch.exp(a).sin())


def test_fmod_of_exp_matches_eager():
    a = torch.tensor([[-4, -1], [1, 6], [5, -5], [4, 0]])
    eager, fused = _fmod_exp(a), primtrace.jit(_fmod_exp)(a)
    exact = _fmod_exp(a.double())
    assert fused.dtype == eager.dtype == torch.float32
    assert ((fused.double() - exact).abs() <= (eager.double() - exact).abs()).all()
    torch.testing.assert_close(fused, eager, rtol=0, atol=0)


def test_exp_sin_near_halfway_cases_round_as_eager():
    """The operands above one by one, through the fused kernels: exp(4.0) is 0.058 ULP from
    a rounding boundary, sin(exp(5.0)) 0.034."""
    x = torch.tensor([4.0, 5.0, -4.0, 1.0])
    torch.testing.assert_close(primtrace.jit(torch.exp)(x), torch.exp(x), rtol=0, atol=0)
    e = torch.exp(x)
    torch.testing.assert_close(primtrace.jit(torch.sin)(e), torch.sin(e), rtol=0, atol=0)
