"""Reduction prims: sum, prod, amax, amin and var over an explicit tuple of dims.

Strict, as every prim: `dims` is a tuple of distinct non-negative dimensions in increasing
order (the ref wraps negative dims and parses None, ints and lists); the reduced dims are
removed (keepdim is the ref's broadcast_in_dim); the result has the input's dtype (var: the
real dtype of a complex input) and contiguous strides, and there is no promotion (the ref
converts first: sum of int32 is an int64 sum). An empty `dims` reduces nothing: the result
is a copy. amax and amin refuse an empty reduction, as eager does.
"""
from __future__ import annotations

import math

import torch

from primtrace import dtypes
from primtrace.dtypes import Category
from primtrace.ir.proxy import TensorSpec
from primtrace.ir.strides import contiguous_strides
from primtrace.ir.symbol import Symbol, SymbolKind
from primtrace.prims.differentiation import P, conjugated, in_float32, to_complex, zeros_like
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
        numel = a.numel() if nonempty else 1   # x[mask]'s: an int known at run time, whose
        if not isinstance(numel, int) or numel:   # dtype is checked (eager's amax checks no
            _check_category(name, a, allowed)     # dtype on nothing)
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


# --- derivatives -------------------------------------------------------------------------------
def restore_dims(t, a, dims):
    """`t`, a reduction of `a` over `dims`, broadcast back to a's shape."""
    kept = tuple(d for d in range(a.ndim) if d not in dims)
    return P.broadcast_in_dim(t, tuple(a.shape), kept)


def _count(a, dims) -> int:
    n = 1
    for d in dims:
        n *= a.shape[d]
    return n


def _extreme_vjp(g, y, a, dims):
    """torch's amax/amin derivative, (g / count) * hits: g shared evenly among the elements
    equal to the result; where the result is NaN none is, and 0 * (g / 0) makes the whole
    slice's gradient NaN, as eager's."""
    hits = P.convert_element_type(P.eq(a, restore_dims(y, a, dims)), g.dtype)
    count = P.sum(hits, dims)
    return P.mul(restore_dims(P.div(g, count), a, dims), hits), None


def _var_vjp(g, y, a, dims, *, correction):
    """2 (a - mean) / (N - correction) * g; N is the number of reduced elements. A 0-dim
    input with N - correction <= 0: NaN, as torch's (its one element is the mean)."""
    n = _count(a, dims)
    if a.ndim == 0 and n - correction <= 0:
        return P.mul(to_complex(g, a), math.nan), None
    mean = restore_dims(P.div(P.sum(a, dims), n), a, dims)
    scale = P.mul(to_complex(g, a), 2 / (n - correction) if n != correction else math.inf)
    return P.mul(restore_dims(scale, a, dims), P.sub(a, mean)), None


def _products_of_others(a, dim):
    """Per element, the product of the others along `dim`, exact with zeros: the running
    product before it times the running product after it (torch's prod_safe_zeros)."""
    n = a.shape[dim]
    ones_shape = tuple(1 if d == dim else s for d, s in enumerate(a.shape))
    ones = P.full(ones_shape, 1, dtype=a.dtype, device=a.device)

    def part(start, stop):
        starts = tuple(start if d == dim else 0 for d in range(a.ndim))
        stops = tuple(stop if d == dim else s for d, s in enumerate(a.shape))
        return P.slice(a, starts, stops, (1,) * a.ndim)
    before = P.cumprod(P.cat([ones, part(0, n - 1)], dim), dim)
    after = P.flip(P.cumprod(P.flip(P.cat([part(1, n), ones], dim), (dim,)), dim), (dim,))
    return P.mul(before, after)


def _prod_vjp(g, y, a, dims):
    """One dim at a time (the last first), each by the products of the others."""
    if not dims:
        return g, None
    if a.ndim == 0:
        return g, None
    inner = P.prod(a, dims[:-1]) if len(dims) > 1 else a
    dim = dims[-1] - (len(dims) - 1)   # dims[-1]'s position once dims[:-1] are reduced
    if inner.shape[dim] == 0:
        grad_inner = zeros_like(inner)
    else:
        grad_inner = P.mul(restore_dims(g, inner, (dim,)),
                           conjugated(_products_of_others(inner, dim)))
    if len(dims) == 1:
        return grad_inner, None
    return _prod_vjp(grad_inner, inner, a, dims[:-1])[0], None


DERIVATIVES = {
    "sum": lambda g, y, a, dims: (restore_dims(g, a, dims), None),
    "prod": in_float32(_prod_vjp),
    "amax": _extreme_vjp,
    "amin": _extreme_vjp,
    "var": in_float32(_var_vjp),
}
