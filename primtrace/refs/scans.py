"""Scans and positions: cumsum, cumprod (eager's dtype rules: bool and integers scan in
int64 unless ``dtype=``), argmax, argmin (``dim=None``: the flattened input), max and min
(their three forms: amax/amin, maximum/minimum, values and indices along a dim) and bucketize
(the bucket of each value among sorted boundaries). max and min shadow the builtins here.

cumsum, cumprod, argmax and argmin are one prim each (torch's scan and index reductions);
bucketize counts boundaries with a comparison and a sum, with eager's NaN ordering (a NaN
value lies past every boundary, as eager's binary search puts it).
"""
from __future__ import annotations

import operator

import torch

from primtrace import dtypes, prims
from primtrace.refs.core import exports, is_tensor, maybe_convert, ref, to_tensor
from primtrace.refs.products import declines_out, no_out, require_tensors
from primtrace.refs.reductions import keep_dims, wrap_dim
from primtrace.refs.scalars import type_name


def _dim(name, dim, ndim) -> int:
    kind = getattr(dim, "python_type", type(dim))
    if issubclass(kind, (bool, float, complex)) or not hasattr(dim, "__index__"):
        raise TypeError(f"{name}(): argument 'dim' (position 2) must be int, not {type_name(dim)}")
    return wrap_dim(operator.index(dim), ndim)


# --- cumsum, cumprod -------------------------------------------------------------------------
def _scan(name, prim, input, dim, dtype):
    require_tensors(name, input=input)
    d = _dim(name, dim, input.ndim)
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name}(): argument 'dtype' must be torch.dtype, not {type_name(dtype)}")
    if dtype is None:
        integral = input.dtype is torch.bool or dtypes.is_integer(input.dtype)
        dtype = torch.int64 if integral else input.dtype
    x = maybe_convert(input, dtype)
    if x.dtype is torch.bool:  # cumsum(dtype=torch.bool): eager scans in bool (logical or/and)
        return prims.ne(prim(maybe_convert(x, torch.int64), d), 0)
    return prim(x, d)


@ref(declines=declines_out)
def cumsum(input, dim, *, dtype=None, out=None):
    """The running sum along dim, in `dtype` (int64 for bool and integer inputs by default)."""
    no_out("cumsum", out)
    return _scan("cumsum", prims.cumsum, input, dim, dtype)


@ref(declines=declines_out)
def cumprod(input, dim, *, dtype=None, out=None):
    """The running product along dim, in `dtype` (int64 for bool and integers by default)."""
    no_out("cumprod", out)
    return _scan("cumprod", prims.cumprod, input, dim, dtype)


def _scan_into(name, scan, input, dim, dtype):
    """x.cumsum_(dim): the scan computed in self's dtype (wrapping as eager's), written back."""
    from primtrace.refs.out import copy_to_self
    require_tensors(name, input=input)
    if input.dtype is torch.bool:
        raise NotImplementedError(f"\"{name[:-1]}_out_cpu\" not implemented for 'Bool'")
    return copy_to_self(input, scan(input, dim, dtype=dtype or input.dtype))


@ref
def cumsum_(input, dim, *, dtype=None):
    """In-place cumsum: scanned in self's dtype."""
    return _scan_into("cumsum_", cumsum, input, dim, dtype)


@ref
def cumprod_(input, dim, *, dtype=None):
    """In-place cumprod: scanned in self's dtype."""
    return _scan_into("cumprod_", cumprod, input, dim, dtype)


# --- argmax, argmin --------------------------------------------------------------------------
def _arg(name, prim, input, dim, keepdim):
    require_tensors(name, input=input)
    if input.dtype is torch.bool:
        raise RuntimeError(f"{name}(): does not support bool input")
    if input.dtype.is_complex:
        raise RuntimeError(f"{name}(): does not support complex input")
    if dim is None:
        y = prim(input, None)
        if keepdim:
            return prims.broadcast_in_dim(y, (1,) * input.ndim, ())
        return y
    d = _dim(name, dim, input.ndim)
    y = prim(input, d)
    return keep_dims(y, input, (d,) if input.ndim else (), keepdim)


@ref(declines=declines_out)
def argmax(input, dim=None, keepdim=False, *, out=None):
    """The int64 index of the largest value along dim (of the flattened input for None);
    the first on ties; NaN counts as the largest."""
    no_out("argmax", out)
    return _arg("argmax", prims.argmax, input, dim, keepdim)


@ref(declines=declines_out)
def argmin(input, dim=None, keepdim=False, *, out=None):
    """The int64 index of the smallest value along dim (of the flattened input for None)."""
    no_out("argmin", out)
    return _arg("argmin", prims.argmin, input, dim, keepdim)


# --- max, min: the reduction, the values and indices along a dim, the elementwise form -----------
def _min_max_declines(input, dim=None, keepdim=False, *, other=None, out=None):
    return out is not None or isinstance(dim, str)   # out=, named dims: torch runs them


def _min_max(name, input, dim, keepdim):
    """torch.max/min's three forms: (input) the extreme of every element, 0-d; (input, other)
    the elementwise maximum/minimum; (input, dim, keepdim) the values and their indices along
    dim (the first on ties and of NaNs, as argmax), a torch.return_types.max/min."""
    from primtrace.refs import binary, reductions
    require_tensors(name, input=input)
    if is_tensor(dim):
        return (binary.maximum if name == "max" else binary.minimum)(input, dim)
    if dim is None:
        if keepdim is not False:
            raise TypeError(f"{name}() received an invalid combination of arguments")
        if input.dtype.is_complex:
            raise NotImplementedError(f'"{name}_all" not implemented for '
                                      f"'{dtypes.scalar_type_name(input.dtype)}'")
        value = reductions.extreme(name, prims.amax if name == "max" else prims.amin, input,
                                   None, False)
        return _evenly_distributed(value, input) if input.dtype.is_floating_point else value
    d = _dim(name, dim, input.ndim)
    if input.dtype.is_complex:
        raise RuntimeError(f"{name}(): does not support complex input")
    if input.ndim and input.shape[d] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")
    values = reductions.extreme(name, prims.amax if name == "max" else prims.amin, input,
                                 (d,), bool(keepdim))
    ranked = maybe_convert(input, torch.uint8) if input.dtype is torch.bool else input
    indices = _arg(f"arg{name}", prims.argmax if name == "max" else prims.argmin, ranked, d,
                   bool(keepdim))
    if input.dtype.is_floating_point:   # differentiated as eager: g goes to the indexed element
        values = prims.differentiate_as(values, _picked(input, d, indices, bool(keepdim)))
    return getattr(torch.return_types, name)((values, indices))


def _evenly_distributed(value, input):
    """torch.max(input)'s `value`, differentiated as eager (evenly_distribute_backward): g
    shared evenly among the elements equal to it, or among the NaNs where it is NaN (amax's
    rule would give every element NaN there)."""
    dims = tuple(range(input.ndim))
    hits = prims.where(prims.isnan(value), prims.isnan(input),
                       prims.eq(input, prims.broadcast_in_dim(value, tuple(input.shape), ())))
    count = prims.convert_element_type(   # counted in int64, as eager's mask.sum()
        prims.sum(prims.convert_element_type(hits, torch.int64), dims), input.dtype)
    return prims.differentiate_as(value, prims.div(prims.sum(prims.where(hits, input, 0), dims),
                                                   count))


def _picked(input, d, indices, keepdim):
    """A carrier whose gradient goes to the elements `indices` name along dim d, shaped like
    the values: the sum over d of input where the position is the index (no gather, which
    DCE keeps, as it may raise: forward-only traces drop this whole carrier)."""
    if input.ndim == 0:
        return input
    shape, kept = tuple(input.shape), tuple(i for i in range(input.ndim) if i != d)
    positions = prims.broadcast_in_dim(
        prims.iota(shape[d], start=0, step=1, dtype=torch.int64, device=input.device), shape, (d,))
    index = prims.broadcast_in_dim(indices, shape, tuple(range(input.ndim)) if keepdim else kept)
    return keep_dims(prims.sum(prims.where(prims.eq(positions, index), input, 0), (d,)), input,
                     (d,), keepdim)


@ref(declines=_min_max_declines)
def max(input, dim=None, keepdim=False, *, other=None, out=None):
    """torch.max: of every element, elementwise with a tensor `other`, or (values, indices)
    along dim."""
    return _min_max("max", input, dim if other is None else other, keepdim)


@ref(declines=_min_max_declines)
def min(input, dim=None, keepdim=False, *, other=None, out=None):
    """torch.min: of every element, elementwise with a tensor `other`, or (values, indices)
    along dim."""
    return _min_max("min", input, dim if other is None else other, keepdim)


# --- bucketize -------------------------------------------------------------------------------
@ref(declines=declines_out)
def bucketize(input, boundaries, *, out_int32=False, right=False, out=None):
    """For each value, the number of boundaries below it (right=False: boundaries < value;
    right=True: <=); boundaries must be sorted and 1-d. int64, or int32 with out_int32."""
    no_out("bucketize", out)
    if not is_tensor(boundaries):
        raise TypeError(f"bucketize(): argument 'boundaries' (position 2) must be Tensor, not "
                        f"{type_name(boundaries)}")
    if boundaries.ndim != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.ndim})")
    if not is_tensor(input):
        from primtrace.refs.creation import fill_dtype
        input = to_tensor(input, fill_dtype(input), boundaries.device)
    for t in (input, boundaries):
        if t.dtype is torch.bool or t.dtype.is_complex:
            raise RuntimeError(f"torch.searchsorted(): unsupported input dtype "
                               f"{dtypes.scalar_type_name(t.dtype)}")
    from primtrace.refs.promotion import DEFAULT, elementwise_dtypes
    computation, _ = elementwise_dtypes(input, boundaries, type_promotion_kind=DEFAULT)
    n = boundaries.shape[0]
    shape = (*input.shape, n)
    x = prims.broadcast_in_dim(maybe_convert(input, computation), shape, tuple(range(input.ndim)))
    b = prims.broadcast_in_dim(maybe_convert(boundaries, computation), shape, (input.ndim,))
    # eager's binary search: the first boundary b with b >= x (right: b > x); NaN x: none
    not_below = prims.gt(b, x) if right else prims.ge(b, x)
    count = prims.sum(prims.convert_element_type(not_below, torch.int64), (input.ndim,))
    y = prims.sub(prims.full(tuple(input.shape), n, dtype=torch.int64, device=input.device), count)
    return maybe_convert(y, torch.int32 if out_int32 else torch.int64)


__all__ = exports(globals())
