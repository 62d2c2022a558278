"""Prims that reinterpret memory as another dtype, and the C library's pow.

``view_as_real(a)``: a complex tensor viewed as its (real, imag) pairs, a trailing dim of 2;
``view_as_complex(a)``: the inverse; ``conj_view(a)``: a complex tensor's conjugate as eager's
``torch.conj`` gives it, a view of the same memory with the conjugate bit set (values read
through it are conjugated; writes into it store the conjugate); ``real_view(a)`` and
``imag_view(a)``: eager's ``torch.real``/``torch.imag`` views (of a conjugate view: the
real part plainly, the imaginary part with the negative bit, as eager's). Their meta functions give eager's exact strides (every
stride doubles or halves; the pair dim has stride 1), the impls are torch's own views, so
the result shares the input's memory; like the other view prims they have no Numba row.

``libm_pow(a, b)``: std::pow per element. Eager's logspace calls std::pow in a scalar loop,
where torch.pow's vectorized kernel (Sleef) differs from it in the last bit for about 2% of
float64 arguments; the impl writes through a strided output, which makes TensorIterator run
its scalar loop (std::pow) instead.
"""
from __future__ import annotations

import torch

from primtrace import dtypes
from primtrace.ir.proxy import TensorSpec
from primtrace.ir.symbol import Symbol, SymbolKind
from primtrace.prims.differentiation import P
from primtrace.prims.elementwise import DERIVATIVES as _ELEMENTWISE
from primtrace.prims.meta import PrimContractError, elementwise_meta, is_tensor
from primtrace.prims.views import contiguous

#: the real dtype of each complex dtype's halves, and back
_REAL = {torch.complex32: torch.float16, torch.complex64: torch.float32,
         torch.complex128: torch.float64}
_COMPLEX = {real: c for c, real in _REAL.items()}


def _prim(name, meta, impl, doc, tags=("view",)):
    return Symbol(name, kind=SymbolKind.PRIM, meta=meta, impl=impl, tags=frozenset(tags),
                  module="prims", doc=doc)


def _view_as_real_meta(a):
    if not is_tensor(a) or a.dtype not in _REAL:
        raise PrimContractError("prims.view_as_real: expected a complex tensor")
    return TensorSpec((*a.shape, 2), _REAL[a.dtype], a.device,
                      (*(2 * s for s in a.stride()), 1))


def _view_as_complex_meta(a):
    if not is_tensor(a) or a.dtype not in _COMPLEX:
        raise PrimContractError("prims.view_as_complex: expected a float16/32/64 tensor")
    if a.ndim == 0 or a.shape[-1] != 2 or a.stride()[-1] != 1 or any(
            s % 2 for s in a.stride()[:-1]):
        raise PrimContractError("prims.view_as_complex: the last dim must be (2,) with stride 1 "
                                "and every other stride even")
    return TensorSpec(tuple(a.shape[:-1]), _COMPLEX[a.dtype], a.device,
                      tuple(s // 2 for s in a.stride()[:-1]))


view_as_real = _prim("view_as_real", _view_as_real_meta, torch.view_as_real,
                     "A complex tensor's memory as (real, imag) pairs: shape + (2,), strides "
                     "doubled, the pair dim of stride 1.")
view_as_complex = _prim("view_as_complex", _view_as_complex_meta, torch.view_as_complex,
                        "(real, imag) pairs as one complex tensor: the last dim (2, stride 1) "
                        "dropped, strides halved.")


def _conj_view_meta(a):
    if not is_tensor(a) or not a.dtype.is_complex:
        raise PrimContractError("prims.conj_view: expected a complex tensor")
    return TensorSpec.of(a)


# Only torch reads it: no fused kernel takes complex tensors (they read memory raw, which
# would drop the bit); torch.view_as_real of it raises, as eager's does.
conj_view = _prim("conj_view", _conj_view_meta, torch.conj,
                  "The conjugate of a complex tensor as a lazy view (eager's torch.conj: same "
                  "memory, sizes and strides, the conjugate bit set).")


def _part_meta(name):
    def meta(a):
        if not is_tensor(a) or a.dtype not in _REAL:
            raise PrimContractError(f"prims.{name}: expected a complex tensor")
        return TensorSpec(tuple(a.shape), _REAL[a.dtype], a.device,
                          tuple(2 * s for s in a.stride()))
    return meta


real_view = _prim("real_view", _part_meta("real_view"), torch.real,
                  "The real parts of a complex tensor, a view (strides doubled).")
imag_view = _prim("imag_view", _part_meta("imag_view"), torch.imag,
                  "The imaginary parts of a complex tensor, a view (strides doubled; of a "
                  "conjugate view, eager's view with the negative bit).")


def _libm_pow_meta(a, b):
    if not (is_tensor(a) and is_tensor(b)):
        raise PrimContractError("prims.libm_pow: expected two tensors")
    return elementwise_meta("libm_pow", (a, b), frozenset({dtypes.Category.FLOATING,
                                                          dtypes.Category.COMPLEX}))


def _libm_pow_impl(a, b):
    shape = torch.broadcast_shapes(a.shape, b.shape)
    if len(shape) == 0:
        return torch.pow(a, b)  # one element: the scalar loop already
    wide = torch.empty((*shape[:-1], 2 * shape[-1]), dtype=a.dtype, device=a.device)
    return torch.pow(a, b, out=wide[..., ::2]).contiguous()


libm_pow = _prim("libm_pow", _libm_pow_meta, _libm_pow_impl,
                 "a ** b by std::pow per element (eager's scalar loops), not torch.pow's "
                 "vectorized kernel.", tags=())

PRIMS = {s.name: s for s in (view_as_real, view_as_complex, conj_view, real_view, imag_view,
                              libm_pow)}


# --- derivatives -------------------------------------------------------------------------------
def _view_as_real_vjp(g, y, a):
    """The pairs viewed back as complex numbers (a row-major copy where g's strides do not
    allow that view)."""
    if g.stride()[-1] != 1 or any(s % 2 for s in g.stride()[:-1]):
        g = contiguous(g)
    return (P.view_as_complex(g),)


DERIVATIVES = {
    "view_as_real": _view_as_real_vjp,
    "view_as_complex": lambda g, y, a: (P.view_as_real(g),),
    "libm_pow": _ELEMENTWISE["pow"],
    # the views' cotangents are the copying prims' (no view of a cotangent is needed)
    "conj_view": _ELEMENTWISE["conj"],
    "real_view": _ELEMENTWISE["real"],
    "imag_view": _ELEMENTWISE["imag"],
}
