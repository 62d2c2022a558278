"""Scan and index-reduction prims: cumsum, cumprod (inclusive scans along one dim, in the
input's dtype) and argmax, argmin (the int64 position of the extreme along one dim, or in
the flattened input for dim None).

Strict: `dim` is a non-negative int in range (or None for argmax/argmin); no promotion (the
ref converts first: cumsum of int32 is an int64 scan). Results are contiguous. They run as
torch calls (eager's accumulation: float for float16/bfloat16 scans, NaN as the maximum).
"""
from __future__ import annotations

import torch

from primtrace import dtypes
from primtrace.ir.proxy import TensorSpec
from primtrace.ir.strides import contiguous_strides
from primtrace.ir.symbol import Symbol, SymbolKind
from primtrace.prims.differentiation import INDEX_RESULT, P, conjugated, in_float32
from primtrace.prims.meta import PrimContractError, is_tensor


def _prim(name, meta, impl, doc):
    return Symbol(name, kind=SymbolKind.PRIM, meta=meta, impl=impl,
                  tags=frozenset({"reduction"}), module="prims", doc=doc)


def _check(name, a, dim, none_ok=False):
    if not is_tensor(a):
        raise PrimContractError(f"prims.{name}: expected a tensor")
    if dim is None and none_ok:
        return
    if type(dim) is not int or not 0 <= dim < max(a.ndim, 1):
        raise PrimContractError(f"prims.{name}: dim must be an int in [0, {max(a.ndim, 1)}), "
                                f"got {dim!r}")


def _scan_meta(name):
    def meta(a, dim):
        _check(name, a, dim)
        if a.dtype is torch.bool:
            raise PrimContractError(f"prims.{name}: convert bool inputs first")
        shape = tuple(a.shape)
        return TensorSpec(shape, a.dtype, a.device, contiguous_strides(shape))
    return meta


# dtype= keeps a's dtype: torch scans integers in int64 by default
cumsum = _prim("cumsum", _scan_meta("cumsum"), lambda a, dim: torch.cumsum(a, dim, dtype=a.dtype),
               "The running sum along `dim`, in a's dtype.")
cumprod = _prim("cumprod", _scan_meta("cumprod"),
                lambda a, dim: torch.cumprod(a, dim, dtype=a.dtype),
                "The running product along `dim`, in a's dtype.")


def _arg_meta(name):
    def meta(a, dim):
        _check(name, a, dim, none_ok=True)
        if a.dtype is torch.bool or a.dtype.is_complex:
            raise PrimContractError(f"prims.{name}: a real, non-bool input expected, got "
                                    f"{dtypes.scalar_type_name(a.dtype)}")
        if dim is None or a.ndim == 0:
            shape = ()
        else:
            if a.shape[dim] == 0:
                raise IndexError(f"{name}(): Expected reduction dim {dim} to have non-zero size.")
            shape = tuple(s for i, s in enumerate(a.shape) if i != dim)
        if dim is None and a.numel() == 0:
            raise IndexError(f"{name}(): Expected reduction dim to be specified for "
                             "input.numel() == 0.")
        return TensorSpec(shape, torch.int64, a.device, contiguous_strides(shape))
    return meta


argmax = _prim("argmax", _arg_meta("argmax"),
               lambda a, dim: torch.argmax(a, dim).contiguous(),
               "The int64 index of the largest value along `dim` (the flattened input for "
               "None); the first on ties, NaN counts as the largest.")
argmin = _prim("argmin", _arg_meta("argmin"),
               lambda a, dim: torch.argmin(a, dim).contiguous(),
               "The int64 index of the smallest value along `dim` (the flattened input for "
               "None); the first on ties, NaN counts as the smallest.")

PRIMS = {s.name: s for s in (cumsum, cumprod, argmax, argmin)}
__all__ = list(PRIMS)


# --- derivatives -------------------------------------------------------------------------------
def _reverse_cumsum(t, dim):
    if t.ndim == 0:
        return t
    return P.flip(P.cumsum(P.flip(t, (dim,)), dim), (dim,))


def _cumprod_vjp(g, y, a, dim):
    """Exact with zeros. Before the first zero along `dim`, sum over the later positions of
    g * y, divided by a; at the first zero, the same sum over the running product with that
    zero read as 1; after it, nothing (every product holds the zero)."""
    if a.ndim == 0:
        return g, None
    zeros_so_far = P.cumsum(P.convert_element_type(P.eq(a, 0), torch.int64), dim)
    first_zero = P.bitwise_and(P.eq(a, 0), P.eq(zeros_so_far, 1))
    before = P.div(_reverse_cumsum(P.mul(g, conjugated(y)), dim), conjugated(a))
    skipping_it = P.cumprod(P.where(first_zero, 1, a), dim)
    at = _reverse_cumsum(P.mul(g, conjugated(skipping_it)), dim)
    return P.where(P.eq(zeros_so_far, 0), before, P.where(first_zero, at, 0)), None


DERIVATIVES = {
    "cumsum": lambda g, y, a, dim: (_reverse_cumsum(g, dim), None),
    "cumprod": in_float32(_cumprod_vjp),
    "argmax": INDEX_RESULT,
    "argmin": INDEX_RESULT,
}
