"""Indexing prims: reads by index (index_select, gather, take, index), out-of-place writes by
index (scatter, index_add, index_copy, index_fill) and the in-place index_put_ (setitem's).

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
from primtrace.prims.differentiation import (GUARD, NotDifferentiable, P, conjugated, filled_like,
                                             zeros_like)
from primtrace.prims.meta import PrimContractError, elementwise_strides, is_number, is_tensor
from primtrace.prims.views import copied, reshaped, sum_to

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


# --- advanced indexing: x[i, :, j] ---------------------------------------------------------------
def _advanced(name, a, indices):
    """The contract of index/index_put: `indices` is a tuple of at most a.ndim entries, each
    None (the dim is kept) or an int64/int32 tensor on a's device, at least one a tensor, all
    the tensors of one shape (the ref broadcasts them)."""
    if not is_tensor(a) or type(indices) is not tuple or not 0 < len(indices) <= a.ndim:
        raise PrimContractError(f"prims.{name}: a tensor and a tuple of at most a.ndim indices")
    tensors = [t for t in indices if t is not None]
    if not tensors or any(not is_tensor(t) or t.dtype not in INDEX_DTYPES or t.device != a.device
                          or tuple(t.shape) != tuple(tensors[0].shape) for t in tensors):
        raise PrimContractError(f"prims.{name}: indices are None or int64/int32 tensors of one "
                                f"shape on a's device, at least one")
    return (*indices, *(None,) * (a.ndim - len(indices)))


def advanced_index_shape(shape, indices) -> tuple:
    """The shape of a[indices] (ATen's rule): the index shape replaces the indexed dims where
    they are adjacent, else goes first, followed by the other dims in order."""
    defined = [d for d, t in enumerate(indices) if t is not None]
    rest = [shape[d] for d, t in enumerate(indices) if t is None]
    b = tuple(indices[defined[0]].shape)
    at = defined[0] if defined == list(range(defined[0], defined[-1] + 1)) else 0
    return (*rest[:at], *b, *rest[at:])


def _index_meta(a, indices):
    """ATen's index: the result's strides are TensorIterator's over the input restrided (the
    indexed dims moved to the front when not adjacent, then replaced by stride-0 dims of the
    index shape) and the index tensors reshaped to broadcast against it (their size-1 dims'
    strides are reshape's: they break ties). Checked against eager on random layouts."""
    indices = _advanced("index", a, indices)
    defined = [d for d, t in enumerate(indices) if t is not None]
    order = list(range(a.ndim))
    if defined != list(range(defined[0], defined[-1] + 1)):
        order = defined + [d for d in order if d not in defined]
    before = order.index(defined[0])
    after = a.ndim - before - len(defined)
    shape = advanced_index_shape(tuple(a.shape), indices)
    b = tuple(indices[defined[0]].shape)
    strides = [a.stride()[d] for d in order]
    operands = [(*strides[:before], *(0,) * len(b), *strides[before + len(defined):])]
    for d in defined:
        t = indices[d]
        view = torch.empty_strided(b, tuple(t.stride()), device="meta").reshape(
            (1,) * before + b + (1,) * after)
        operands.append(tuple(0 if n == 1 and o != 1 else st
                              for n, st, o in zip(view.shape, view.stride(), shape)))
    return TensorSpec(shape, a.dtype, a.device, elementwise_strides(shape, operands))


def _index_impl(a, indices):
    return torch.ops.aten.index.Tensor(a, list(indices))


index = _prim(
    "index", _index_meta, _index_impl,
    "a[indices] for a tuple of None (the dim kept) and integer tensors of one shape (torch's "
    "advanced indexing, aten.index): negative indices count from the end; a new tensor, laid "
    "out as eager's.")


def _index_put_meta(a, indices, values, accumulate=False):
    indices = _advanced("index_put_", a, indices)
    if not is_tensor(values) or values.dtype != a.dtype or values.device != a.device:
        raise PrimContractError("prims.index_put_: values must be a tensor of a's dtype")
    shape = advanced_index_shape(tuple(a.shape), indices)
    if values.ndim > len(shape) or any(n not in (1, m) for n, m in
                                       zip(reversed(values.shape), reversed(shape))):
        raise PrimContractError("prims.index_put_: values must broadcast to a[indices]'s shape")
    if type(accumulate) is not bool:
        raise PrimContractError("prims.index_put_: accumulate must be a bool")
    return TensorSpec(tuple(a.shape), a.dtype, a.device, tuple(a.stride()))


def _index_put_impl(a, indices, values, accumulate=False):
    return torch.ops.aten.index_put_(a, list(indices), values, accumulate)


index_put_ = Symbol(
    "index_put_", kind=SymbolKind.PRIM, meta=_index_put_meta, impl=_index_put_impl,
    tags=frozenset({"indexing", "inplace"}), module="prims",
    doc="Write `values` (broadcast) into `a` at a[indices] (added where accumulate), in place, "
        "as aten.index_put_: eager's checks of the written memory (overlap with values) and of "
        "the index values run with it; returns a. The indices as prims.index takes them.")


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
def _check_targets_impl(target, size, ignore_index, mask=None):
    bad = (target < 0) | (target >= size)
    if ignore_index is not None:
        bad &= target != ignore_index
    if mask is not None:
        bad &= mask
    if bool(bad.any()):
        raise IndexError(f"Target {int(target[bad].flatten()[0])} is out of bounds.")


check_targets = Symbol(
    "check_targets", kind=SymbolKind.PRIM, meta=lambda target, size, ignore_index, mask=None: None,
    impl=_check_targets_impl, tags=frozenset({"guard"}), module="prims",
    doc="Raise eager's IndexError for a class index outside [0, size) (other than "
        "ignore_index): a loss's check of its targets, which are data; `mask` (a bool tensor "
        "of target's shape): only where it is True (the rows a selection keeps).")

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

PRIMS = {s.name: s for s in (index_select, gather, take, index, scatter, index_add, index_copy,
                             index_fill, index_put_, check_targets, check_indices)}
__all__ = list(PRIMS)


# --- derivatives -------------------------------------------------------------------------------
def _index_select_vjp(g, y, a, dim, index):
    """The selected slices added back at their indices (repeats accumulate)."""
    if a.ndim == 0:
        return P.sum(g, tuple(range(g.ndim))), None, None
    n = index.numel()
    source = reshaped(g, (*a.shape[:dim], n, *a.shape[dim + 1:]))
    return P.index_add(zeros_like(a), dim, reshaped(index, (n,)), source, 1), None, None


def _take_vjp(g, y, a, index):
    """Added into a's elements in row-major order (negative indices count from the end)."""
    n = a.numel()
    flat_index = reshaped(index, (index.numel(),))
    flat_index = P.where(P.lt(flat_index, 0), P.add(flat_index, n), flat_index)
    flat = P.full((n,), 0, dtype=a.dtype, device=a.device)
    flat = P.scatter(flat, 0, flat_index, reshaped(g, (g.numel(),)), reduce="sum")
    return reshaped(flat, tuple(a.shape)), None


def _index_vjp(g, y, a, indices):
    """Added into zeros at a[indices] (index_put_ with accumulate, on a new tensor)."""
    zeros = P.full(tuple(a.shape), 0, dtype=a.dtype, device=a.device)
    return P.index_put_(zeros, indices, g, True), None


def _index_put_vjp(g, y, a, indices, values, accumulate=False):
    """The result is `a` with `values` (broadcast) written, or added, at a[indices]: `values`
    gets g there; `a` gets g, zeroed there unless added to."""
    grad_values = sum_to(P.index(g, indices), tuple(values.shape))
    if accumulate:
        return g, None, grad_values, None
    zero = P.full((), 0, dtype=g.dtype, device=g.device)
    return P.index_put_(copied(g), indices, zero, False), None, grad_values, None


def _scatter_vjp(g, y, a, dim, index, src, *, reduce=None, include_self=True):
    """As torch differentiates scatter and scatter_reduce: an overwrite hides a's values at
    the written positions; a sum passes g to both; a mean shares g by the counts; amax and
    amin share g evenly among the values equal to the result. prod is not written."""
    if reduce == "prod":
        mark = NotDifferentiable("scatter with reduce='prod': not written")
        return mark, None, None, mark
    ones = filled_like(src, 1, g.dtype)
    written = P.ne(P.scatter(filled_like(a, 0, g.dtype), dim, index, ones, reduce="sum"), 0)
    kept = include_self and reduce is not None   # a's values at the written positions count
    if reduce in (None, "sum"):
        shared = g
    elif reduce == "mean":
        count = P.scatter(filled_like(a, 1 if include_self else 0, g.dtype), dim, index, ones,
                          reduce="sum")
        shared = P.div(g, P.where(P.eq(count, 0), 1, count))
    else:   # amax, amin; torch counts a's tie without include_self too, then drops its share
        a_is = P.eq(a, y)
        src_is = P.eq(_written_part(src, index), P.gather(y, dim, index))
        count = P.scatter(P.convert_element_type(a_is, g.dtype), dim, index,
                          P.convert_element_type(src_is, g.dtype), reduce="sum")
        shared = P.div(g, count)
        grad_a = P.where(a_is, shared, 0)
        return (grad_a if include_self else P.where(written, 0, grad_a), None, None,
                _as_src(P.where(src_is, P.gather(shared, dim, index), 0), src))
    grad_a = shared if kept else P.where(written, 0, shared)
    return grad_a, None, None, _as_src(P.gather(shared, dim, index), src)


def _written_part(src, index):
    """The part of `src` scatter reads: index's shape from its start."""
    if tuple(src.shape) == tuple(index.shape):
        return src
    return P.slice(src, (0,) * src.ndim, tuple(index.shape), (1,) * src.ndim)


def _as_src(t, src):
    """A cotangent of the part scatter reads, zero-padded to src's shape."""
    if tuple(t.shape) == tuple(src.shape):
        return t
    return P.pad(t, 0, tuple((0, n - m, 0) for n, m in zip(src.shape, t.shape)))


def _gather_vjp(g, y, a, dim, index):
    """Scatter-add into zeros; but one index per row along `dim` (nll_loss's pick of each
    row's target) is ``where(position == index, g, 0)``: no repeats to add, and an
    elementwise expression fuses with its neighbours (a scatter is a pass of its own)."""
    others = tuple(d for d in range(a.ndim) if d != dim)
    if index.shape[dim] != 1 or any(index.shape[d] != a.shape[d] for d in others):
        return P.scatter(zeros_like(a), dim, index, g, reduce="sum"), None, None
    shape = tuple(a.shape)
    position = P.broadcast_in_dim(
        P.iota(shape[dim], start=0, step=1, dtype=index.dtype, device=a.device), shape, (dim,))
    picked = P.eq(position, P.broadcast_in_dim(P.squeeze(index, (dim,)), shape, others))
    return P.where(picked, P.broadcast_in_dim(P.squeeze(g, (dim,)), shape, others), 0), None, None


def _index_add_vjp(g, y, a, dim, index, source, alpha):
    return g, None, None, P.mul(P.index_select(g, dim, index), conjugated(alpha, g)), None


def _index_copy_vjp(g, y, a, dim, index, source):
    return P.index_fill(g, dim, index, 0), None, None, P.index_select(g, dim, index)


DERIVATIVES = {
    "index_select": _index_select_vjp,
    "gather": _gather_vjp,
    "take": _take_vjp,
    "index": _index_vjp,
    "scatter": _scatter_vjp,
    "index_add": _index_add_vjp,
    "index_copy": _index_copy_vjp,
    "index_fill": lambda g, y, a, dim, index, value: (P.index_fill(g, dim, index, 0), None,
                                                      None, None),
    "index_put_": _index_put_vjp,
    "check_targets": GUARD,
    "check_indices": GUARD,
}
