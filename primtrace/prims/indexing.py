"""Indexing prims: reads by index (index_select, gather, take) and out-of-place writes by
index (scatter, index_add, index_copy, index_fill).

Strict: `dim` is a non-negative int in range, indices are int64 tensors (int32 too where
eager takes it: index_select, gather, scatter, index_add), written values share the input's
dtype; the refs parse and check eager's arguments first. Bounds of the index values are data: the torch implementation checks them
when the prim runs (eager's IndexError/RuntimeError). Results are contiguous, as eager's
out-of-place ops return them, except index_fill's, which keeps the input's memory order
(eager clones with preserve_format). None of these fuse: they run as torch calls.
"""
from __future__ import annotations

import torch

from primtrace.ir.proxy import TensorSpec
from primtrace.ir.strides import contiguous_strides, dense_strides
from primtrace.ir.symbol import Symbol, SymbolKind
from primtrace.prims.meta import PrimContractError, elementwise_strides, is_number, is_tensor

INDEX_DTYPES = (torch.int32, torch.int64)


def _prim(name, meta, impl, doc):
    return Symbol(name, kind=SymbolKind.PRIM, meta=meta, impl=impl,
                  tags=frozenset({"indexing"}), module="prims", doc=doc)


def _check(name, a, dim, index, index_dtypes=(torch.int64,)):
    if not (is_tensor(a) and is_tensor(index)):
        raise PrimContractError(f"prims.{name}: expected tensors")
    if index.dtype not in index_dtypes:
        raise PrimContractError(f"prims.{name}: the index must be {index_dtypes}, got {index.dtype}")
    if dim is not None and (type(dim) is not int or not 0 <= dim < max(a.ndim, 1)):
        raise PrimContractError(f"prims.{name}: dim must be an int in [0, {max(a.ndim, 1)}), "
                                f"got {dim!r}")
    if index.device != a.device:
        raise PrimContractError(f"prims.{name}: index on {index.device}, input on {a.device}")


def _new(shape, like):
    shape = tuple(shape)
    return TensorSpec(shape, like.dtype, like.device, contiguous_strides(shape))


# --- reads ---------------------------------------------------------------------------------
def _index_select_meta(a, dim, index):
    _check("index_select", a, dim, index, INDEX_DTYPES)
    if a.ndim == 0:  # eager: a 0-d result, whatever the (one-element) index's shape
        return _new((), a)
    return _new((*a.shape[:dim], *index.shape, *a.shape[dim + 1:]), a)


def _index_select_impl(a, dim, index):
    if a.ndim == 0:
        return torch.index_select(a, 0, index.reshape(-1))
    shape = (*a.shape[:dim], *index.shape, *a.shape[dim + 1:])
    return torch.index_select(a, dim, index.reshape(-1)).view(shape)


index_select = _prim(
    "index_select", _index_select_meta, _index_select_impl,
    "The slices of `a` at `index` along `dim`; the index's dims (any number) take dim's place "
    "(a 1-d index is torch.index_select, a 2-d one an embedding lookup); a 0-d `a` gives a "
    "0-d result.")


def _gather_meta(a, dim, index):
    _check("gather", a, dim, index, INDEX_DTYPES)
    if index.ndim != a.ndim:
        raise PrimContractError("prims.gather: index and input must have the same ndim")
    return _new(tuple(index.shape), a)


gather = _prim("gather", _gather_meta, torch.gather,
               "out[i][j] = a[index[i][j]][j] for dim 0 (torch.gather): index's shape.")


def _take_meta(a, index):
    _check("take", a, None, index)
    return _new(tuple(index.shape), a)


take = _prim("take", _take_meta, torch.take,
             "a's elements at `index` in row-major order (torch.take): index's shape.")


# --- writes ----------------------------------------------------------------------------------
SCATTER_REDUCTIONS = (None, "sum", "prod", "mean", "amax", "amin")


def _scatter_meta(a, dim, index, src, *, reduce=None, include_self=True):
    _check("scatter", a, dim, index, INDEX_DTYPES)
    if not is_tensor(src) or src.dtype != a.dtype:
        raise PrimContractError("prims.scatter: src must be a tensor of a's dtype")
    if reduce not in SCATTER_REDUCTIONS:
        raise PrimContractError(f"prims.scatter: reduce must be one of {SCATTER_REDUCTIONS}")
    return _new(tuple(a.shape), a)


def _scatter_impl(a, dim, index, src, *, reduce=None, include_self=True):
    if reduce is None:
        return torch.scatter(a, dim, index, src)
    if reduce == "sum" and include_self:
        return torch.scatter_add(a, dim, index, src)
    return torch.scatter_reduce(a, dim, index, src, reduce, include_self=include_self)


scatter = _prim(
    "scatter", _scatter_meta, _scatter_impl,
    "A copy of `a` with src[i][j] written at [index[i][j]][j] (dim 0); `reduce` (sum, prod, "
    "mean, amax, amin) combines instead of overwriting (torch.scatter_reduce).")


def _index_write_meta(name):
    def meta(a, dim, index, source, *args):
        _check(name, a, dim, index, INDEX_DTYPES if name == "index_add" else (torch.int64,))
        if index.ndim > 1:
            raise PrimContractError(f"prims.{name}: the index must be a vector")
        if not is_tensor(source) or source.dtype != a.dtype:
            raise PrimContractError(f"prims.{name}: source must be a tensor of a's dtype")
        return _new(tuple(a.shape), a)
    return meta


index_add = _prim("index_add", _index_write_meta("index_add"),
                  lambda a, dim, index, source, alpha: torch.index_add(a, dim, index, source,
                                                                       alpha=alpha),
                  "A copy of `a` with alpha * source's slices added at `index` along `dim` "
                  "(repeated indices accumulate).")
index_copy = _prim("index_copy", _index_write_meta("index_copy"), torch.index_copy,
                   "A copy of `a` with source's slices written at `index` along `dim`.")


def _index_fill_meta(a, dim, index, value):
    _check("index_fill", a, dim, index)
    if not is_number(value) or is_tensor(value):
        raise PrimContractError("prims.index_fill: value must be a number")
    shape = tuple(a.shape)
    return TensorSpec(shape, a.dtype, a.device, elementwise_strides(shape, [tuple(a.stride())])
                      if a.ndim else dense_strides(shape))


index_fill = _prim("index_fill", _index_fill_meta, torch.index_fill,
                   "A copy of `a` (its memory order kept) with the slices at `index` along "
                   "`dim` set to a number.")

# --- a guard on index values ------------------------------------------------------------------
def _check_targets_impl(target, size, ignore_index):
    bad = (target < 0) | (target >= size)
    if ignore_index is not None:
        bad &= target != ignore_index
    if bool(bad.any()):
        raise IndexError(f"Target {int(target[bad].flatten()[0])} is out of bounds.")


check_targets = Symbol(
    "check_targets", kind=SymbolKind.PRIM, meta=lambda target, size, ignore_index: None,
    impl=_check_targets_impl, tags=frozenset({"guard"}), module="prims",
    doc="Raise eager's IndexError for a class index outside [0, size) (other than "
        "ignore_index): a loss's check of its targets, which are data.")

def _check_indices_impl(index, size, dim):
    bad = (index < -size) | (index >= size)
    if bool(bad.any()):
        raise IndexError(f"index {int(index[bad].flatten()[0])} is out of bounds for dimension "
                         f"{dim} with size {size}")


check_indices = Symbol(
    "check_indices", kind=SymbolKind.PRIM, meta=lambda index, size, dim: None,
    impl=_check_indices_impl, tags=frozenset({"guard"}), module="prims",
    doc="Raise eager's IndexError for a tensor index outside [-size, size): indexing's check "
        "of its indices, which are data.")

PRIMS = {s.name: s for s in (index_select, gather, take, scatter, index_add, index_copy,
                             index_fill, check_targets, check_indices)}
__all__ = list(PRIMS)
