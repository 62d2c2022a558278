"""Refs whose output size is data: nonzero, argwhere, torch.where(condition), masked_select,
unique, unique_consecutive, repeat_interleave with a tensor of counts, bincount; and the
boolean masks of ``x[mask]`` (refs.slicing) and ``x[mask] = v`` (refs.indexing).

Each is eager's argument checks, then a prim of ``prims/data_dependent.py`` whose result's
size is a new int proxy, known when the prim runs: one trace serves every count. What is
not data (dtypes, which dims are selected) is checked while tracing, with eager's errors;
what is (a negative count, a mask's count against the values written) raises eager's
error when the trace runs, from torch's kernel.
"""
from __future__ import annotations

import torch

from primtrace import dtypes, prims
from primtrace.prims.data_dependent import known_count, note_count
from primtrace.refs.core import broadcast_shapes, exports, is_tensor, ref
from primtrace.refs.reductions import wrap_dim
from primtrace.refs.shape_args import require_tensor
from primtrace.refs.scalars import concrete, type_name


def _declines_out(*args, out=None, **kwargs) -> bool:
    return out is not None


# --- nonzero, argwhere, where(condition) -----------------------------------------------------
@ref(declines=_declines_out)
def nonzero(input, *, out=None, as_tuple=False):
    """The int64 indices of input's nonzero elements, a row each (n, input.ndim); as_tuple:
    one index vector per dim (a 0-dim input: one). n is known when the trace runs."""
    require_tensor("nonzero", input)
    return _nonzero(input, bool(as_tuple))


def _nonzero(input, as_tuple):
    """prims.nonzero, its count shared with other selections by the same tensor."""
    known = known_count(input)
    result, n = prims.nonzero(input, as_tuple, known)
    note_count(input, n)
    return result


@ref
def argwhere(input):
    """torch.argwhere: nonzero's (n, input.ndim) indices."""
    require_tensor("argwhere", input)
    return _nonzero(input, False)


@ref
def where_condition(condition):
    """torch.where(condition), the one-argument form: nonzero(condition, as_tuple=True)."""
    require_tensor("where", condition, "condition")
    return _nonzero(condition, True)


# --- masked_select, and the masks of indexing ----------------------------------------------------
@ref(declines=_declines_out)
def masked_select(input, mask, *, out=None):
    """input's elements where mask (both broadcast) is True, in row-major order: a vector."""
    require_tensor("masked_select", input)
    require_tensor("masked_select", mask, "mask", 2)
    if mask.dtype is not torch.bool:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    shape = broadcast_shapes(tuple(input.shape), tuple(mask.shape)) or (1,)   # 0-dim: (1,)
    return _select(_expanded(input, shape), _expanded(mask, shape), 0)


def _select(a, mask, dim):
    """prims.mask_select, its count shared with other selections by the same mask."""
    known = known_count(mask)
    result, n = prims.mask_select(a, mask, dim, known)
    note_count(mask, n)
    return result


def _expanded(t, shape):
    """`t` broadcast to `shape` (a 0-dim tensor too)."""
    if tuple(t.shape) == tuple(shape):
        return t
    return prims.broadcast_in_dim(t, tuple(shape), tuple(range(len(shape) - t.ndim, len(shape))))


def check_mask(view, mask, dim):
    """Eager's IndexError for a mask whose sizes are not those of the dims it covers."""
    covered = tuple(view.shape[dim:dim + mask.ndim])
    for j, (n, m) in enumerate(zip(mask.shape, covered + (None,) * mask.ndim)):
        if m is None or n is not m and n != m:
            raise IndexError(f"The shape of the mask {list(mask.shape)} at index {j} does not "
                             f"match the shape of the indexed tensor {list(view.shape)} at index "
                             f"{dim + j}")


def select_by_mask(view, mask, dim):
    """view[..., mask, ...], the mask (bool, one or more dims) over view's dims from `dim`:
    those dims replaced by one, of the selected count, as eager's index."""
    check_mask(view, mask, dim)
    return _select(view, mask, dim)


def write_by_mask(view, mask, dim, value):
    """view[..., mask, ...] = value (a tensor of view's dtype; a number filled already), in
    place: where `value` has no size of its own along the selection (it broadcasts), the
    masked elements take it (masked_fill's where); else they take its rows in order
    (prims.mask_put: eager's index_put_, whose kernel checks the count against them)."""
    from primtrace.refs.out import write_where
    check_mask(view, mask, dim)
    after = tuple(view.shape[dim + mask.ndim:])
    selection = (*view.shape[:dim], None, *after)
    at = value.ndim - len(after) - 1   # value's dim along the selected count, if it has one
    counted = at >= 0 and not (isinstance(value.shape[at], int) and value.shape[at] == 1)
    if counted or value.ndim > len(selection):
        if value.ndim > len(selection):
            raise RuntimeError(f"shape mismatch: value tensor of shape {list(value.shape)} cannot "
                               f"be broadcast to indexing result of shape "
                               f"{list(view.shape[:dim]) + ['n'] + list(after)}")
        return prims.copy_to(view, prims.mask_put(view, mask, dim, value))
    if at >= 0:   # a size-1 dim along the count: dropped, the value broadcasts
        value = prims.squeeze(value, (at,))
    full = tuple(view.shape)
    kept = tuple(range(len(full) - value.ndim, len(full))) if value.ndim else ()
    for d, n in zip(kept, value.shape):
        if not (isinstance(n, int) and n == 1) and n is not full[d] and n != full[d]:
            raise RuntimeError(f"shape mismatch: value tensor of shape {list(value.shape)} "
                               f"cannot be broadcast to indexing result of shape "
                               f"{list(view.shape[:dim]) + ['n'] + list(after)}")
    value = prims.broadcast_in_dim(value, full, kept) if value.ndim else value
    where = prims.broadcast_in_dim(mask, full, tuple(range(dim, dim + mask.ndim)))
    return write_where(view, where, value, "index_put_", (view, mask))


# --- unique --------------------------------------------------------------------------------------
def _unique(name, input, sorted, return_inverse, return_counts, dim, consecutive):
    require_tensor(name, input)
    if dim is not None:
        dim = wrap_dim(int(concrete(dim)), input.ndim)
    values, inverse, counts, _ = prims.unique(input, bool(sorted), bool(return_inverse),
                                              bool(return_counts), dim, consecutive)
    if not return_inverse and not return_counts:
        return values
    result = (values,)
    if return_inverse:
        result += (inverse,)
    if return_counts:
        result += (counts,)
    return result


@ref
def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """torch.unique: the unique values (dim None: of the flattened input) or unique slices
    along dim, sorted; with the inverse indices and the counts when asked. The number of
    unique values is known when the trace runs."""
    return _unique("unique", input, sorted, return_inverse, return_counts, dim, False)


@ref
def unique_consecutive(input, return_inverse=False, return_counts=False, dim=None):
    """torch.unique_consecutive: each run of equal values (or slices along dim) once."""
    return _unique("unique_consecutive", input, True, return_inverse, return_counts, dim, True)


# --- repeat_interleave, bincount ----------------------------------------------------------------
def _repeat_declines(input, repeats=None, dim=None, *, output_size=None) -> bool:
    """Counts given as an int: torch's call (its size is no data)."""
    return repeats is not None and not is_tensor(repeats)


@ref(declines=_repeat_declines)
def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    """Each slice of input along dim (the flattened input for None) repeated by the counts of
    a tensor, in order: index_select by repeat_interleave(repeats). One tensor alone is the
    counts: their indices repeated. The length is known when the trace runs (or is
    output_size)."""
    require_tensor("repeat_interleave", input)
    if output_size is not None:
        output_size = int(concrete(output_size))
    if repeats is None:   # torch.repeat_interleave(counts)
        return _repeat_index(input, output_size)
    if dim is None:
        from primtrace.refs.views import reshape
        input = reshape(input, (-1,))
        d = 0
    else:
        d = wrap_dim(int(concrete(dim)), input.ndim)
    if repeats.ndim > 1:
        raise RuntimeError("repeats must be 0-dim or 1-dim tensor")
    size = input.shape[d] if input.ndim else 1
    if repeats.ndim == 0 or repeats.shape[0] == 1:   # one count for every slice
        repeats = prims.broadcast_in_dim(prims.reshape_view(repeats, ()) if repeats.ndim else
                                         repeats, (size,), ())
    elif repeats.shape[0] != size:
        raise RuntimeError(f"repeats must have the same size as input along dim, but got "
                           f"repeats.size(0) = {repeats.shape[0]} and input.size({d}) = {size}")
    index = _repeat_index(repeats, output_size)
    if input.ndim == 0:
        input = prims.broadcast_in_dim(input, (1,), ())
    return prims.index_select(input, d, index)


def _repeat_index(repeats, output_size):
    if repeats.ndim > 1:
        raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
    if repeats.dtype not in (torch.int32, torch.int64):
        raise RuntimeError("repeats has to be Long or Int tensor")
    if repeats.ndim == 0:
        repeats = prims.broadcast_in_dim(repeats, (1,), ())
    return prims.repeat_index(repeats, output_size)[0]


@ref
def bincount(input, weights=None, minlength=0):
    """The count of each value 0..max(input) in input (at least minlength of them), or the
    sum of the weights of each: int64 counts, float32 sums of float32 weights, else float64.
    The length is known when the trace runs."""
    require_tensor("bincount", input)
    if weights is not None and not is_tensor(weights):
        raise TypeError(f"bincount(): argument 'weights' must be Tensor, not {type_name(weights)}")
    minlength = int(concrete(minlength))
    if input.dtype is torch.bool or input.dtype.is_floating_point or input.dtype.is_complex:
        raise NotImplementedError(f"\"bincount_cpu\" not implemented for "
                                  f"'{dtypes.scalar_type_name(input.dtype)}'")
    if input.ndim != 1:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if weights is not None and (weights.ndim != 1 or weights.shape[0] != input.shape[0]):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    return prims.bincount(input, weights, minlength)[0]


__all__ = exports(globals())
