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
from primtrace.prims.views import compute_stride
from primtrace.refs.core import broadcast, broadcast_shapes, exports, is_number, is_tensor, ref
from primtrace.prims.indexing import advanced_index_shape
from primtrace.refs.creation import as_nodes, check_fits, filled
from primtrace.refs.out import copy_to_self, maybe_convert, write_where
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


@ref(declines=declines_out)
def take_along_dim(input, indices, dim=None, *, out=None):
    """gather after broadcasting input and indices everywhere but dim; dim None: take on
    the flattened input (a 1-d result)."""
    require_tensors("take_along_dim", input=input, indices=indices)
    no_out("take_along_dim", out)
    if indices.dtype is not torch.int64:
        raise RuntimeError(f"torch.take_along_dim(): dtype of indices should be Long but got "
                           f"{dtypes.scalar_type_name(indices.dtype)}")
    if dim is None:  # eager: input.view(-1).gather(0, indices.view(-1))
        for t in (input, indices):
            if compute_stride(tuple(t.shape), tuple(t.stride()), (t.numel(),)) is None:
                raise RuntimeError("view size is not compatible with input tensor's size and "
                                   "stride (at least one dimension spans across two contiguous "
                                   "subspaces). Use .reshape(...) instead.")
        return prims.take(input, prims.reshape_view(indices, (indices.numel(),)))
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
        if source.ndim == 0 and index.numel() != 1:  # eager's message reads source.size(dim)
            raise IndexError(f"Dimension specified as {d} but tensor has no dimensions")
        if source.ndim and index.numel() != source.shape[d]:
            raise RuntimeError(f"index_add_(): Number of indices ({index.numel()}) should be "
                               f"equal to source.size(dim): ({source.shape[d]}), for dim: {d}")
        both = input.ndim and source.ndim  # else the whole shapes are compared
        if [n for i, n in enumerate(input.shape) if i != d or not both] != [
                n for i, n in enumerate(source.shape) if i != d or not both]:
            raise RuntimeError(f"source tensor shape must match self tensor shape, excluding the "
                               f"specified dimension. Got self.shape = {list(input.shape)} "
                               f"source.shape = {list(source.shape)}")
        return
    # index_copy, in eager's order (a 0-dim self or source is one slice of one element)
    if index.ndim > 1:
        raise IndexError(f"index_copy_(): Index should have dimension 1 or 0 (got {index.ndim})")
    if source.ndim == 0 and index.numel() != 1:
        raise IndexError(f"index_copy_(): When source is scalar, index should have one element "
                         f"(got {index.numel()})")
    if source.ndim != input.ndim and source.ndim and input.ndim:
        raise IndexError(f"index_copy_(): When source and destination are not scalars, their "
                         f"dimensionality must match. Source dimensionality ({source.ndim}), "
                         f"destination dimensionality ({input.ndim})")
    if index.dtype is not torch.int64:
        raise RuntimeError(f"index_copy_(): Expected a long tensor for index, but got "
                           f"{dtypes.scalar_type_name(index.dtype)}")
    if input.dtype != source.dtype:
        raise RuntimeError(f"index_copy_(): self and source expected to have the same dtype, but "
                           f"got (self) {dtypes.scalar_type_name(input.dtype)} and (source) "
                           f"{dtypes.scalar_type_name(source.dtype)}")
    sliced = [[n for i, n in enumerate(t.shape) if i != d] for t in (input, source)]
    if sliced[0] != sliced[1]:
        raise RuntimeError("index_copy_(): Source/destination tensor must have same slice "
                           f"shapes. Destination slice shape: {sliced[0]} and source slice "
                           f"shape: {sliced[1]}.")
    if source.ndim and index.numel() != source.shape[d]:
        raise IndexError(f"index_copy_(): Number of indices ({index.numel()}) should be equal "
                         f"to source.size(dim) ({source.shape[d]})")


def _index_write(name, input, dim, index, source):
    require_tensors(name, input=input)
    d = _dim(name, dim, input.ndim)
    for pname, t in (("index", index), ("source", source)):
        if not is_tensor(t):
            raise TypeError(f"{name}(): argument '{pname}' must be Tensor, not {type_name(t)}")
    _index_write_checks(name, input, d, index, source)
    return d


def _as_vector(t):
    """A 0-dim tensor as a 1-element vector (a view); others as they are."""
    return prims.reshape_view(t, (1,)) if t.ndim == 0 else t


def _on_vectors(prim, input, d, index, source, *args):
    """`prim` where self or source is 0-dim: run on 1-element vectors, input's shape back."""
    if input.ndim and source.ndim:
        return prim(input, d, index, source, *args)
    y = prim(_as_vector(input), 0, _as_vector(index), _as_vector(source), *args)
    return prims.reshape_view(y, ()) if input.ndim == 0 else y


@ref(inplace=True, declines=declines_out)
def index_add(input, dim, index, source, *, alpha=1, out=None):
    """A copy of input with alpha * source's slices added at index along dim."""
    no_out("index_add", out)
    d = _index_write("index_add", input, dim, index, source)
    return _on_vectors(prims.index_add, input, d, index, source, alpha)


@ref(inplace=True, declines=declines_out)
def index_copy(input, dim, index, source, *, out=None):
    """A copy of input with source's slices written at index along dim."""
    no_out("index_copy", out)
    d = _index_write("index_copy", input, dim, index, source)
    return _on_vectors(prims.index_copy, input, d, index, source)


def _index_fill_arguments(input, dim, index, value) -> int:
    """The wrapped dim, after eager's checks."""
    require_tensors("index_fill", input=input)
    d = _dim("index_fill", dim, input.ndim)
    if not is_tensor(index):
        raise TypeError(f"index_fill(): argument 'index' (position 3) must be Tensor, not "
                        f"{type_name(index)}")
    if index.dtype is not torch.int64:
        raise IndexError("index_fill_(): Expected dtype int64 for index.")
    if is_tensor(value) and value.ndim:
        raise RuntimeError(f"index_fill_ only supports a 0-dimensional value tensor, but got "
                           f"tensor with {value.ndim} dimension(s).")
    if index.ndim > 1:
        raise RuntimeError("Index has to be a vector/scalar")
    if not is_tensor(value) and not is_number(value):
        raise TypeError(f"index_fill(): argument 'value' must be Number, not {type_name(value)}")
    return d


def _index_mask(input, d, index):
    """A bool tensor of input's shape, True on the slices at index along d (index checked and
    wrapped by prims.index_fill itself, on a vector of the dim's size)."""
    if input.numel() == 0 and input.ndim:
        # eager's kernel views the input at the index's positions: an error where that view
        # needs memory (x of (0, 2) at [0]), none where it does not ((0, 0) or (2, 0))
        with as_nodes():
            none = prims.full(tuple(input.shape), False, dtype=torch.bool, device=input.device)
        return prims.index_fill(none, d, index, True)
    size = input.shape[d] if input.ndim else 1
    with as_nodes():
        none = prims.full((size,), False, dtype=torch.bool, device=input.device)
    mask = prims.index_fill(none, 0, index, True)
    if input.ndim == 0:
        return prims.squeeze(mask, (0,))
    return prims.broadcast_in_dim(mask, tuple(input.shape), (d,))


def _fill_value(value, input):
    """A number as the kernel's scalar; a 0-dim tensor (eager takes its item()) converted."""
    return (kernel_scalar(value, input.dtype) if is_number(value)
            else maybe_convert(value, input.dtype))


@ref
def index_fill(input, dim, index, value):
    """A copy of input (in its memory order) with the slices at index along dim set to value,
    a number or a 0-dim tensor."""
    d = _index_fill_arguments(input, dim, index, value)
    if is_number(value):
        return prims.index_fill(input, d, index, kernel_scalar(value, input.dtype))
    return prims.where(_index_mask(input, d, index), _fill_value(value, input), input)


@ref
def index_fill_(input, dim, index, value):
    """index_fill written into input: only the filled slices are written (so an expanded
    input is written as eager writes it, see ``write_where``)."""
    d = _index_fill_arguments(input, dim, index, value)
    expanded = any(s == 0 and n > 1 for n, s in zip(input.shape, input.stride()))
    if is_number(value) and not expanded:
        return copy_to_self(input, index_fill(input, d, index, value), (input, index))
    return write_where(input, _index_mask(input, d, index), _fill_value(value, input),
                       "index_fill_", (input, index))


# --- advanced indexing: x[i, :, j] and x[i, :, j] = v ---------------------------------------------
def _index_tuple(input, indices):
    """`indices` (None or an integer tensor per dim of input) checked and broadcast to one
    shape, as eager's index and index_put take them."""
    tensors = [t for t in indices if t is not None]
    for t in tensors:
        if t.dtype not in INDEX_DTYPES:
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    try:
        shape = broadcast_shapes(*(_shape(t) for t in tensors))
    except RuntimeError:
        raise IndexError("shape mismatch: indexing tensors could not be broadcast together with "
                         "shapes " + ", ".join(str(list(t.shape)) for t in tensors)) from None
    return tuple(None if t is None else broadcast(t, shape) for t in indices)


def advanced_index(input, indices):
    """input[indices] for a list of None and integer tensors per dim (the tensor items of an
    index, after refs.slicing.apply_slicing): eager's result layout; the kernel checks the
    index values' bounds (eager's IndexError) and counts negative ones from the end."""
    return prims.index(input, _index_tuple(input, indices))


def _setitem_declines(self, index, value) -> bool:
    from primtrace.refs.slicing import indexable
    return not indexable(self, index) or (is_tensor(value) and is_tensor(self) and (
        value.device != self.device))


@ref(name="__setitem__", declines=_setitem_declines)
def _setitem(self, index, value):
    """Tensor.__setitem__ as eager: the basic items give a view of self (refs.slicing), into
    which `value` is copied (cast to self's dtype, leading size-1 dims dropped, broadcast);
    with integer tensors among the items, index_put_ writes value (of self's dtype) at them
    in the view, in place (eager's kernel: its overlap checks and bounds errors). A number converts to self's dtype as fill_ converts it (overflow is an error)."""
    from primtrace.refs.slicing import apply_slicing, index_items
    from primtrace.refs.writes import copy_
    require_tensors("__setitem__", self=self)
    view, indices, _ = apply_slicing(self, index_items(index, self.device))
    masked = bool(indices) and indices[-1].dtype is torch.bool
    if masked and is_tensor(value) and value.ndim == 0 and value.dtype != self.dtype:
        value = maybe_convert(value, self.dtype)   # eager's masked_fill_ takes its value
    if is_number(value) or (is_tensor(value) and not indices):
        value = filled((), value, self.dtype, self.device) if is_number(value) else value
    elif not is_tensor(value):
        raise TypeError(f"can't assign a {type_name(value)} to a {_tensor_type(self)}")
    leading = 0
    while leading < value.ndim and type(value.shape[leading]) is int and value.shape[leading] == 1:
        leading += 1
    if leading:   # eager's slicePrefix1sSize
        value = prims.squeeze(value, tuple(range(leading)))
    if masked:   # x[mask] = v: the masked elements take v (the rows of v, in order)
        from primtrace.refs.selection import write_by_mask
        if value.dtype != self.dtype:
            raise RuntimeError(f"Index put requires the source and destination dtypes match, "
                               f"got {dtypes.scalar_type_name(self.dtype)} for the destination "
                               f"and {dtypes.scalar_type_name(value.dtype)} for the source.")
        write_by_mask(view, indices[-1], len(indices) - 1, value)
        return None
    if not indices:
        if _shape(value) != _shape(view):   # eager's expand_inplace, with expand's errors
            from primtrace.refs.views import expand
            value = expand(value, _shape(view))
        copy_(view, value)
        return None
    if value.dtype != self.dtype:
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got "
                           f"{dtypes.scalar_type_name(self.dtype)} for the destination and "
                           f"{dtypes.scalar_type_name(value.dtype)} for the source.")
    indices = _index_tuple(view, indices)
    shape = advanced_index_shape(
        _shape(view), (*indices, *(None,) * (view.ndim - len(indices))))
    try:
        target = broadcast_shapes(_shape(value), shape)
    except RuntimeError:
        target = None
    if target != shape:
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(value.shape)} cannot be "
                           f"broadcast to indexing result of shape {list(shape)}")
    prims.index_put_(view, indices, value, False)
    return None


def _tensor_type(t) -> str:
    name = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half",
            torch.bfloat16: "BFloat16", torch.int64: "Long", torch.int32: "Int",
            torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
            torch.bool: "Bool"}.get(t.dtype, dtypes.scalar_type_name(t.dtype))
    return f"torch.{name}Tensor"


# --- torch.embedding: F.embedding's kernel, weight first ---------------------------------------
def _embedding_declines(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return bool(scale_grad_by_freq) or bool(sparse)   # their gradients: torch runs them


@ref(declines=_embedding_declines)
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """weight's rows at `indices` (torch.embedding's argument order; F.embedding's is
    refs.nn.functional.embedding): shape indices.shape + (embedding_dim,); the rows read at
    `padding_idx` (F.embedding's, made non-negative; -1: none) carry no gradient."""
    from primtrace.refs.nn.composites import embedding_rows
    require_tensors("embedding", weight=weight, indices=indices)
    return embedding_rows(weight, indices, None if padding_idx < 0 else padding_idx)


__all__ = exports(globals())
globals()["__setitem__"] = _setitem   # Tensor.__setitem__ is found by its own name
__all__.append("__setitem__")
