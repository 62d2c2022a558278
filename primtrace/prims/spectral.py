"""Spectral prims: the FFT over the last dim, run by torch (pocketfft/MKL on CPU, cuFFT), and
istft's overlap-add check.

Like the other library prims, an FFT is one opaque kernel (no Numba row, never fused) whose
meta function gives the output's shape, dtype and strides without running it. Over the last
dim, torch.fft writes a new contiguous tensor whatever the input's layout (measured: torch
2.13 CPU, contiguous, transposed, sliced and permuted inputs), which is the meta's layout;
the prims take only the last dim so that this holds.

- ``fft_r2c(a, norm, onesided)``: a real signal's DFT, complex; onesided keeps the
  n // 2 + 1 non-redundant frequencies (torch.fft.rfft), else all n (torch.fft.fft).
- ``fft_c2c(a, norm, forward)``: a complex DFT, forward (torch.fft.fft) or inverse (ifft).
- ``fft_c2r(a, n, norm)``: the inverse of a onesided spectrum (last dim n // 2 + 1): a real
  signal of n points (torch.fft.irfft).

``norm`` is torch.fft's: "backward" (forward unscaled, inverse by 1/n), "ortho" (1/sqrt(n)
both ways) or "forward". A dtype the FFT backend lacks (float16 on CPU) passes the meta and
raises torch's RuntimeError when the prim runs.

``check_overlap_add(envelope, what)``: a guard (no output, kept by passes) that raises
eager's istft RuntimeError when the window envelope has a value below 1e-11 in magnitude
(the NOLA condition fails: the signal cannot be recovered). The envelope is computed from
the window, which is data, so under jit the check runs on every call, as eager's does.
"""
from __future__ import annotations

import torch

from primtrace import dtypes
from primtrace.ir.proxy import TensorSpec
from primtrace.ir.strides import contiguous_strides
from primtrace.ir.symbol import Symbol, SymbolKind
from primtrace.prims.differentiation import GUARD, by_torch_autograd
from primtrace.prims.meta import PrimContractError, is_tensor

__all__ = ["fft_r2c", "fft_c2c", "fft_c2r", "check_overlap_add"]

NORMS = ("backward", "ortho", "forward")
#: the complex dtype of a real signal's spectrum
_COMPLEX = {torch.float16: torch.complex32, torch.float32: torch.complex64,
            torch.float64: torch.complex128}


def _prim(name, meta, impl, doc, tags=("library",)):
    return Symbol(name, kind=SymbolKind.PRIM, meta=meta, impl=impl, tags=frozenset(tags),
                  module="prims", doc=doc)


def _signal(name, a, complex_, norm):
    if not is_tensor(a) or a.ndim == 0 or bool(a.dtype.is_complex) != complex_ or not (
            a.dtype.is_complex or a.dtype in _COMPLEX):
        kind = "complex" if complex_ else "real floating"
        raise PrimContractError(f"prims.{name}: expected a {kind} tensor of at least one dim")
    if norm not in NORMS:
        raise PrimContractError(f"prims.{name}: norm must be one of {NORMS}, got {norm!r}")


def _out(a, shape, dtype):
    return TensorSpec(tuple(shape), dtype, a.device, contiguous_strides(shape))


def _r2c_meta(a, norm, onesided):
    _signal("fft_r2c", a, False, norm)
    n = a.shape[-1]
    if n == 0:
        raise PrimContractError("prims.fft_r2c: the signal has no points")
    return _out(a, (*a.shape[:-1], n // 2 + 1 if onesided else n), _COMPLEX[a.dtype])


def _r2c_impl(a, norm, onesided):
    return (torch.fft.rfft if onesided else torch.fft.fft)(a, dim=-1, norm=norm)


def _c2c_meta(a, norm, forward):
    _signal("fft_c2c", a, True, norm)
    if a.shape[-1] == 0:
        raise PrimContractError("prims.fft_c2c: the signal has no points")
    return _out(a, a.shape, a.dtype)


def _c2c_impl(a, norm, forward):
    return (torch.fft.fft if forward else torch.fft.ifft)(a, dim=-1, norm=norm)


def _c2r_meta(a, n, norm):
    _signal("fft_c2r", a, True, norm)
    if type(n) is not int or n < 1 or a.shape[-1] != n // 2 + 1:
        raise PrimContractError(f"prims.fft_c2r: the last dim ({a.shape[-1]}) must be n // 2 + 1 "
                                f"for n = {n!r} >= 1")
    return _out(a, (*a.shape[:-1], n), dtypes.to_real(a.dtype))


def _c2r_impl(a, n, norm):
    return torch.fft.irfft(a, n=n, dim=-1, norm=norm)


fft_r2c = _prim("fft_r2c", _r2c_meta, _r2c_impl,
                "The DFT of a real signal over the last dim (torch.fft.rfft when onesided, "
                "else torch.fft.fft): complex, contiguous.")
fft_c2c = _prim("fft_c2c", _c2c_meta, _c2c_impl,
                "The DFT (forward) or inverse DFT of a complex signal over the last dim "
                "(torch.fft.fft/ifft): contiguous.")
fft_c2r = _prim("fft_c2r", _c2r_meta, _c2r_impl,
                "The real signal of n points whose onesided spectrum (n // 2 + 1 values) is "
                "the last dim (torch.fft.irfft): contiguous.")


# --- istft's NOLA check ---------------------------------------------------------------------
def _check_overlap_add_meta(envelope, what):
    if not is_tensor(envelope) or envelope.numel() == 0:
        raise PrimContractError("prims.check_overlap_add: expected a non-empty tensor")


def _check_overlap_add(envelope, what):
    lowest = envelope.abs().min()
    if bool(lowest < 1e-11):
        raise RuntimeError(f"{what}window overlap add min: {float(lowest)}")


check_overlap_add = _prim(
    "check_overlap_add", _check_overlap_add_meta, _check_overlap_add,
    "Raise eager's istft RuntimeError when the window envelope has a value below 1e-11 "
    "in magnitude (NOLA fails); `what` starts the message.", tags=("guard",))

PRIMS = {s.name: s for s in (fft_r2c, fft_c2c, fft_c2r, check_overlap_add)}
DERIVATIVES = {**{name: by_torch_autograd(name) for name in ("fft_r2c", "fft_c2c", "fft_c2r")},
               "check_overlap_add": GUARD}
