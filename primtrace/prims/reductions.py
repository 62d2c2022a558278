"""Reduction prims: sum, prod, amax, amin and var over an explicit tuple of dims.

Strict, as every prim: `dims` is a tuple of distinct non-negative dimensions in increasing
order (the ref wraps negative dims and parses None, ints and lists); the reduced dims are
removed (keepdim is the ref's broadcast_in_dim); the result has the input's dtype (var: the
real dtype of a complex input) and contiguous strides, and there is no promotion (the ref
converts first: sum of int32 is an int64 sum). An empty `dims` reduces nothing: the result
is a copy. amax and amin refuse an empty reduction, as eager does.
"""
from __future__ import annotations

import torch

from primtrace import dtypes
from primtrace.dtypes import Category
from primtrace.ir.proxy import TensorSpec
from primtrace.ir.strides import contiguous_strides
from primtrace.ir.symbol import Symbol, SymbolKind
from primtrace.prims.meta import PrimContractError, is_number, is_tensor

B, I, F, C = Category.BOOL, Category.INTEGER, Category.FLOATING, Category.COMPLEX
ANY = frozenset({B, I, F, C})
REAL = frozenset({B, I, F})
FLOAT_COMPLEX = frozenset({F, C})


def _reduced_shape(name, a, dims) -> tuple:
    if not is_tensor(a):
        raise PrimContractError(f"prims.{name}: expected a tensor")
    if not isinstance(dims, tuple) or any(type(d) is not int for d in dims):
        raise PrimContractError(f"prims.{name}: dims must be a tuple of ints, got {dims!r}")
    if list(dims) != sorted(set(dims)) or any(not 0 <= d < a.ndim for d in dims):
        raise PrimContractError(
            f"prims.{name}: dims must be distinct, increasing and in [0, {a.ndim}), got {dims}")
    return tuple(s for i, s in enumerate(a.shape) if i not in dims)


def _check_category(name, a, allowed):
    if dtypes.category(a.dtype) not in allowed:
        raise NotImplementedError(
            f'"{name}" not implemented for \'{dtypes.scalar_type_name(a.dtype)}\'')


def _meta(name, allowed, *, nonempty=False, result="same"):
    def meta(a, dims):
        shape = _reduced_shape(name, a, dims)
        if nonempty:
            for d in dims:
                if a.shape[d] == 0:
                    raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")
        if a.numel() or not nonempty:  # eager's amax runs no kernel, checks no dtype, on nothing
            _check_category(name, a, allowed)
        dtype = dtypes.to_real(a.dtype) if result == "real" else a.dtype
        return TensorSpec(shape, dtype, a.device, contiguous_strides(shape))
    return meta


def _prim(name, meta, impl, doc):
    return Symbol(name, kind=SymbolKind.PRIM, meta=meta, impl=impl,
                  tags=frozenset({"reduction"}), module="prims", doc=doc)


def _sum_impl(a, dims):
    if not dims:
        return a.clone(memory_format=torch.contiguous_format)
    return torch.sum(a, dims, dtype=a.dtype).contiguous()


def _prod_impl(a, dims):
    if not dims:
        return a.clone(memory_format=torch.contiguous_format)
    if len(dims) == a.ndim:
        return torch.prod(a, dtype=a.dtype)
    for d in reversed(dims):  # torch.prod takes one dim at a time
        a = torch.prod(a, d, dtype=a.dtype)
    return a.contiguous()


def _extreme_impl(fn):
    def impl(a, dims):
        if not dims:
            return a.clone(memory_format=torch.contiguous_format)
        return fn(a, dims).contiguous()
    return impl


sum = _prim("sum", _meta("sum", ANY), _sum_impl,
            "The sum over `dims` (a tuple; none: a copy), in the input's dtype.")
prod = _prim("prod", _meta("prod", ANY), _prod_impl,
             "The product over `dims` (a tuple; none: a copy), in the input's dtype.")
amax = _prim("amax", _meta("amax", REAL, nonempty=True), _extreme_impl(torch.amax),
             "The largest value over `dims` (NaN propagates); the reduced dims must not be empty.")
amin = _prim("amin", _meta("amin", REAL, nonempty=True), _extreme_impl(torch.amin),
             "The smallest value over `dims` (NaN propagates); the reduced dims must not be empty.")


# --- var -------------------------------------------------------------------------------------
def _var_meta(a, dims, *, correction):
    if not is_number(correction) or isinstance(correction, (bool, complex)):
        raise PrimContractError(f"prims.var: correction must be a number, got {correction!r}")
    return _meta("var", FLOAT_COMPLEX, result="real")(a, dims)


def _var_impl(a, dims, *, correction):
    if not dims:  # the variance of one value: 0 / (1 - correction)
        return torch.var(a.unsqueeze(-1), -1, correction=correction).contiguous()
    return torch.var(a, dims, correction=correction).contiguous()


var = _prim("var", _var_meta, _var_impl,
            "The variance over `dims` with `correction` (sum of |x - mean|^2 divided by "
            "N - correction), real for complex inputs.")

PRIMS = {s.name: s for s in (sum, prod, amax, amin, var)}
__all__ = list(PRIMS)
