"""Indexing refs: index_select, gather, take, take_along_dim, scatter, scatter_add,
scatter_reduce, index_add, index_copy and index_fill (each with its in-place form).

Each is one indexing prim after eager's argument checks (index dtype, ranks, sizes, the
written values' dtype), with eager's exception kinds. Index values are data: a trace checks
their bounds when the prim runs, as eager does. Writes are out of place (the prims copy);
``x.index_add_(...)`` writes the result back into x (the in-place mechanism of refs.core).
"""
from __future__ import annotations

import torch

from primtrace import dtypes, prims
from primtrace.refs.core import broadcast, broadcast_shapes, exports, is_number, is_tensor, ref
from primtrace.refs.creation import check_fits
from primtrace.refs.products import declines_out, kernel_scalar, no_out, require_tensors
from primtrace.refs.reductions import wrap_dim
from primtrace.refs.scalars import concrete, type_name

INDEX_DTYPES = (torch.int32, torch.int64)


def _dim(name, dim, ndim) -> int:
    kind = getattr(dim, "python_type", type(dim))
    if issubclass(kind, (bool, float, complex)) or not hasattr(dim, "__index__"):
        raise TypeError(f"{name}(): argument 'dim' (position 2) must be int, not {type_name(dim)}")
    return wrap_dim(int(concrete(dim)), ndim)


def _shape(t) -> tuple:
    return tuple(t.shape)


# --- reads ---------------------------------------------------------------------------------
@ref(declines=declines_out)
def index_select(input, dim, index, *, out=None):
    """The slices of input at the positions `index` (a vector or a 0-d tensor) along dim."""
    require_tensors("index_select", input=input)
    no_out("index_select", out)
    d = _dim("index_select", dim, input.ndim)
    if not is_tensor(index):
        raise TypeError(f"index_select(): argument 'index' (position 3) must be Tensor, not "
                        f"{type_name(index)}")
    if index.ndim > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    if index.dtype not in INDEX_DTYPES:
        raise RuntimeError("index_select(): Expected dtype int32 or int64 for index")
    if input.ndim == 0 and index.numel() != 1:
        raise RuntimeError(f"index_select(): Index to scalar can have only 1 value, got "
                           f"{index.numel()} value(s)")
    if index.ndim == 0 and input.ndim:  # a 0-d index selects a size-1 slice, as [i]
        index = prims.broadcast_in_dim(index, (1,), ())
    return prims.index_select(input, d, index)


def _gather_sizes(input, d, index):
    for i in range(input.ndim):
        if i != d and index.shape[i] > input.shape[i]:
            raise RuntimeError(f"Size does not match at dimension {i} expected index "
                               f"{list(index.shape)} to be no larger than self "
                               f"{list(input.shape)} apart from dimension {d}")


@ref(declines=declines_out)
def gather(input, dim, index, *, sparse_grad=False, out=None):
    """out[..., i, ...] = input[..., index[..., i, ...], ...] along dim; index's shape."""
    require_tensors("gather", input=input)
    no_out("gather", out)
    d = _dim("gather", dim, input.ndim)
    if not is_tensor(index):
        raise TypeError(f"gather(): argument 'index' (position 3) must be Tensor, not "
                        f"{type_name(index)}")
    if index.dtype not in INDEX_DTYPES:
        raise RuntimeError("gather(): Expected dtype int32/int64 for index")
    if max(index.ndim, 1) != max(input.ndim, 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
    if index.ndim != input.ndim or input.ndim == 0:  # a 0-d side: 1-d gather is take
        return prims.take(input, prims.convert_element_type(index, torch.int64)
                          if index.dtype != torch.int64 else index)
    if index.numel():
        _gather_sizes(input, d, index)
    return prims.gather(input, d, index)


@ref(declines=declines_out)
def take(input, index, *, out=None):
    """input's elements at `index` counted in row-major order; index's shape."""
    require_tensors("take", input=input, index=index)
    no_out("take", out)
    if index.dtype is not torch.int64:
        raise RuntimeError(f"take(): Expected a long tensor for index, but got "
                           f"{dtypes.scalar_type_name(index.dtype)}")
    return prims.take(input, index)


def _take_along_declines(input, indices, dim=None, *, out=None):
    return out is not None or (dim is None and is_tensor(indices) and indices.ndim > 1)


@ref(declines=_take_along_declines)
def take_along_dim(input, indices, dim=None, *, out=None):
    """gather after broadcasting input and indices everywhere but dim; dim None: take on
    the flattened input (a 1-d result)."""
    require_tensors("take_along_dim", input=input, indices=indices)
    no_out("take_along_dim", out)
    if indices.dtype is not torch.int64:
        raise RuntimeError(f"torch.take_along_dim(): dtype of indices should be Long but got "
                           f"{dtypes.scalar_type_name(indices.dtype)}")
    if dim is None:
        if indices.ndim > 1:
            raise NotImplementedError("primtrace: take_along_dim(dim=None) of a multi-dim index "
                                      "needs a reshape prim; torch runs it")
        y = prims.take(input, indices)
        return y if indices.ndim == 1 else prims.broadcast_in_dim(y, (1,), ())
    d = _dim("take_along_dim", dim, input.ndim)
    if input.ndim != indices.ndim:
        raise RuntimeError(f"torch.take_along_dim(): input and indices should have the same "
                           f"number of dimensions, but got {input.ndim} dimensions for input, "
                           f"and {indices.ndim} dimensions for indices")
    if input.ndim == 0:
        return prims.take(input, indices)
    sizes = list(input.shape)
    sizes[d] = indices.shape[d]
    shape = broadcast_shapes(tuple(sizes), _shape(indices))
    index = broadcast(indices, shape)
    if input.shape[d] > 0:  # eager takes indices modulo the size (-1 is the last, 5 of 5 the first)
        from primtrace.refs.arithmetic import remainder
        index = remainder(index, input.shape[d])
    sizes = list(shape)
    sizes[d] = input.shape[d]
    return prims.gather(broadcast(input, tuple(sizes)), d, index)


# --- scatter ---------------------------------------------------------------------------------
LEGACY_REDUCTIONS = {"add": "sum", "multiply": "prod"}
REDUCTIONS = {"sum": "sum", "prod": "prod", "mean": "mean", "amax": "amax", "amin": "amin",
              "max": "amax", "min": "amin"}  # eager takes max and min too


def _scatter_checks(name, input, d, index, src):
    if index.dtype not in INDEX_DTYPES:
        raise RuntimeError(f"{name}(): Expected dtype int32/int64 for index")
    if is_tensor(src) and src.dtype != input.dtype:
        raise RuntimeError(f"{name}(): Expected self.dtype to be equal to src.dtype")
    if max(index.ndim, 1) != max(input.ndim, 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as self tensor")
    if is_tensor(src) and max(src.ndim, 1) != max(input.ndim, 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as src tensor")
    if index.numel() == 0 or index.ndim == 0 or input.ndim == 0:
        return
    too_big = any(index.shape[i] > input.shape[i] for i in range(input.ndim) if i != d)
    if is_tensor(src) and src.ndim == index.ndim:
        too_big = too_big or any(index.shape[i] > src.shape[i] for i in range(index.ndim))
        if too_big:
            raise RuntimeError(f"Expected index {list(index.shape)} to be no larger than self "
                               f"{list(input.shape)} apart from dimension {d} and to be no "
                               f"larger size than src {list(src.shape)}")
    if too_big:
        raise RuntimeError(f"Expected index {list(index.shape)} to be no larger than self "
                           f"{list(input.shape)} apart from dimension {d}")


def _scatter(name, input, dim, index, src, reduce, include_self=True):
    require_tensors(name, input=input)
    d = _dim(name, dim, input.ndim)
    if not is_tensor(index):
        raise TypeError(f"{name}(): argument 'index' (position 3) must be Tensor, not "
                        f"{type_name(index)}")
    _scatter_checks(name, input, d, index, src)
    if index.ndim != input.ndim or (is_tensor(src) and src.ndim != input.ndim):
        raise NotImplementedError(f"primtrace: {name} of 0-d and 1-d operands has no ref")
    if not is_tensor(src):
        if not is_number(src):
            raise TypeError(f"{name}(): argument 'value' must be Number, not {type_name(src)}")
        check_fits(src, input.dtype)
        src = prims.broadcast_in_dim(prims.full((), kernel_scalar(src, input.dtype), dtype=input.dtype,
                                                device=input.device), _shape(index), ())
    return prims.scatter(input, d, index, src, reduce=reduce, include_self=include_self)


def _scatter_declines(input, dim, index, src=None, value=None, *, reduce=None, out=None):
    src = value if src is None else src
    return out is not None or not is_tensor(index) or not is_tensor(input) or (
        index.ndim != input.ndim or (is_tensor(src) and src.ndim != input.ndim))


@ref(inplace=True, declines=_scatter_declines)
def scatter(input, dim, index, src=None, value=None, *, reduce=None, out=None):
    """A copy of input with src's values (or a number, `value`) written at index along dim;
    reduce "add"/"multiply" combines with what is there."""
    no_out("scatter", out)
    if src is None:
        src = value
    if src is None:
        raise TypeError("scatter() missing required argument 'src' or 'value'")
    if reduce is not None:
        if reduce not in LEGACY_REDUCTIONS:
            raise RuntimeError("reduce argument must be either add or multiply.")
        reduce = LEGACY_REDUCTIONS[reduce]
    return _scatter("scatter", input, dim, index, src, reduce)


@ref(inplace=True, declines=_scatter_declines)
def scatter_add(input, dim, index, src, *, out=None):
    """A copy of input with src's values added at index along dim (repeats accumulate)."""
    no_out("scatter_add", out)
    if not is_tensor(src):
        raise TypeError(f"scatter_add(): argument 'src' (position 4) must be Tensor, not "
                        f"{type_name(src)}")
    return _scatter("scatter_add", input, dim, index, src, "sum")


def _scatter_reduce_declines(input, dim, index, src, reduce, *, include_self=True, out=None):
    return _scatter_declines(input, dim, index, src, out=out)


@ref(inplace=True, declines=_scatter_reduce_declines)
def scatter_reduce(input, dim, index, src, reduce, *, include_self=True, out=None):
    """A copy of input with src's values combined at index along dim by `reduce` (sum,
    prod, mean, amax, amin), input's own values included unless include_self=False."""
    no_out("scatter_reduce", out)
    if not is_tensor(src):
        raise TypeError(f"scatter_reduce(): argument 'src' (position 4) must be Tensor, not "
                        f"{type_name(src)}")
    if reduce not in REDUCTIONS:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got "
                           f"{reduce}")
    return _scatter("scatter_reduce", input, dim, index, src, REDUCTIONS[reduce],
                    bool(include_self))


# --- index_add, index_copy, index_fill -------------------------------------------------------
def _index_write_checks(name, input, d, index, source):
    """The checks index_add and index_copy share, with each one's messages."""
    if name == "index_add":
        if index.ndim > 1:
            raise IndexError(f"index_add_(): Index is supposed to be a vector, but got dim: "
                             f"{index.ndim} with type: {dtypes.scalar_type_name(index.dtype)} "
                             f"and size: {list(index.shape)}")
        if index.dtype not in INDEX_DTYPES:
            raise RuntimeError(f"index_add_(): Expected dtype int32/int64 for index but got: "
                               f"{dtypes.scalar_type_name(index.dtype)}")
        if input.dtype != source.dtype:
            raise RuntimeError(f"index_add_(): self ({dtypes.scalar_type_name(input.dtype)}) and "
                               f"source ({dtypes.scalar_type_name(source.dtype)}) must have the "
                               f"same scalar type")
        n = source.shape[d] if source.ndim else 1
        if index.numel() != n:
            raise RuntimeError(f"index_add_(): Number of indices ({index.numel()}) should be "
                               f"equal to source.size(dim): ({n}), for dim: {d}")
    else:
        if index.ndim > 1:
            raise IndexError(f"index_copy_(): Index should have dimension 1 or 0 (got "
                             f"{index.ndim})")
        if index.dtype is not torch.int64:
            raise RuntimeError(f"index_copy_(): Expected a long tensor for index, but got "
                               f"{dtypes.scalar_type_name(index.dtype)}")
        if input.dtype != source.dtype:
            raise RuntimeError(f"index_copy_(): self and source expected to have the same "
                               f"dtype, but got (self) {dtypes.scalar_type_name(input.dtype)} "
                               f"and (source) {dtypes.scalar_type_name(source.dtype)}")
        n = source.shape[d] if source.ndim else 1
        if index.numel() != n:
            raise IndexError(f"index_copy_(): Number of indices ({index.numel()}) should be "
                             f"equal to source.size(dim) ({n})")
    if source.ndim != input.ndim or any(
            source.shape[i] != input.shape[i] for i in range(input.ndim) if i != d):
        raise RuntimeError(f"source tensor shape must match self tensor shape, excluding the "
                           f"specified dimension. Got self.shape = {list(input.shape)} "
                           f"source.shape = {list(source.shape)}")


def _index_write(name, input, dim, index, source):
    require_tensors(name, input=input)
    d = _dim(name, dim, input.ndim)
    for pname, t in (("index", index), ("source", source)):
        if not is_tensor(t):
            raise TypeError(f"{name}(): argument '{pname}' must be Tensor, not {type_name(t)}")
    if input.ndim == 0 or source.ndim == 0:
        raise NotImplementedError(f"primtrace: {name} of 0-d tensors has no ref; torch runs it")
    _index_write_checks(name, input, d, index, source)
    return d


def _zero_dim_declines(input, dim, index, source, *args, out=None, **kwargs):
    return out is not None or (is_tensor(input) and is_tensor(source)
                               and (input.ndim == 0 or source.ndim == 0))


@ref(inplace=True, declines=_zero_dim_declines)
def index_add(input, dim, index, source, *, alpha=1, out=None):
    """A copy of input with alpha * source's slices added at index along dim."""
    no_out("index_add", out)
    d = _index_write("index_add", input, dim, index, source)
    return prims.index_add(input, d, index, source, alpha)


@ref(inplace=True, declines=_zero_dim_declines)
def index_copy(input, dim, index, source, *, out=None):
    """A copy of input with source's slices written at index along dim."""
    no_out("index_copy", out)
    d = _index_write("index_copy", input, dim, index, source)
    return prims.index_copy(input, d, index, source)


def _index_fill_declines(input, dim, index, value, *args, **kwargs):
    return is_tensor(value)


@ref(inplace=True, declines=_index_fill_declines)
def index_fill(input, dim, index, value):
    """A copy of input (in its memory order) with the slices at index along dim set to a
    number (a 0-d tensor value is declined: its number is data)."""
    require_tensors("index_fill", input=input)
    d = _dim("index_fill", dim, input.ndim)
    if not is_tensor(index):
        raise TypeError(f"index_fill(): argument 'index' (position 3) must be Tensor, not "
                        f"{type_name(index)}")
    if index.dtype is not torch.int64:
        raise IndexError("index_fill_(): Expected dtype int64 for index.")
    if is_tensor(value):
        if value.ndim:
            raise RuntimeError(f"index_fill_ only supports a 0-dimensional value tensor, but "
                               f"got tensor with {value.ndim} dimension(s).")
        raise NotImplementedError("primtrace: index_fill with a tensor value has no ref; torch "
                                  "runs it")
    if index.ndim > 1:
        raise RuntimeError("Index has to be a vector/scalar")
    if not is_number(value):
        raise TypeError(f"index_fill(): argument 'value' must be Number, not {type_name(value)}")
    return prims.index_fill(input, d, index, kernel_scalar(value, input.dtype))


# --- torch.embedding: F.embedding's kernel, weight first ---------------------------------------
@ref
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """weight's rows at `indices` (torch.embedding's argument order; F.embedding's is
    refs.nn.functional.embedding): shape indices.shape + (embedding_dim,)."""
    from primtrace.refs.nn.composites import embedding_rows
    require_tensors("embedding", weight=weight, indices=indices)
    return embedding_rows(weight, indices)


__all__ = exports(globals())
