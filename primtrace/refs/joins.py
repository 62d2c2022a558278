"""Refs that make new tensors out of views: cat, stack and their variants, atleast_*d,
meshgrid, flip, roll, rot90, repeat, diag, diag_embed, block_diag, constant_pad_nd,
sum_to_size and the scatters (slice_scatter, select_scatter, diagonal_scatter,
as_strided_scatter).

Copies are ``prims.cat``, ``prims.flip`` or a new tensor written through one of its views
(``prims.copy_to`` into ``prims.slice``/``diagonal``/...); the written tensor is then read
through ``prims.aliased``, which orders the read after the write. Results have eager's
layout (cat: channels_last when every input is; pads: the input's suggested format).
"""
from __future__ import annotations

import builtins

import torch

from primtrace import dtypes, prims
from primtrace.prims.views import expand_strides
from primtrace.refs.conversion import clone as _clone
from primtrace.refs.conversion import copy_as, suggest_memory_format
from primtrace.refs.core import exports, is_tensor, maybe_convert, ref
from primtrace.refs.creation import filled, new_in_format
from primtrace.refs.out import _non_overlapping_and_dense as non_overlapping_and_dense
from primtrace.refs.promotion import result_type
from primtrace.refs.reductions import sum as _sum
from primtrace.refs.shape_args import as_int, int_list, require_tensor, wrap
from primtrace.refs.slicing import select_dim, slice_dim
from primtrace.refs.views import reshaped, swap
from primtrace.refs.writes import cast_like_copy

_SEQUENCE = (tuple, list)


def _tensor_list(name, tensors, argument="tensors") -> tuple:
    if not isinstance(tensors, _SEQUENCE):
        raise TypeError(f"{name}(): argument '{argument}' (position 1) must be tuple of Tensors, "
                        f"not {type(tensors).__name__}")
    for i, t in enumerate(tensors):
        if not is_tensor(t):
            raise TypeError(f"expected Tensor as element {i} in argument 0, but got "
                            f"{type(t).__name__}")
    return tuple(tensors)


def _mixed_devices(tensors) -> bool:
    return is_tensor(tensors[0]) and builtins.any(
        is_tensor(t) and t.device != tensors[0].device for t in tensors) if tensors else False


def _join_declines(tensors, *args, out=None, **kwargs) -> bool:
    return out is not None or (isinstance(tensors, _SEQUENCE) and _mixed_devices(tensors))


def written(new, view, value):
    """`new` after `value` is written into `view` (one of its views), cast as copy_ casts."""
    return prims.aliased(new, prims.copy_to(view, cast_like_copy(value, view.dtype)))


# --- cat, stack --------------------------------------------------------------------------------
def joined(name, tensors, dim):
    """Eager's cat: promoted dtype, 1-d empty tensors skipped, eager's checks and layout."""
    if not tensors:
        raise ValueError(f"torch.{name}(): expected a non-empty list of Tensors")
    for i, t in enumerate(tensors):
        if t.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    dtype = result_type(*tensors)
    kept = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or [tensors[0]]
    d = wrap(dim, kept[0].ndim)
    first = kept[0]
    for i, t in enumerate(tensors):
        if t.ndim == 1 and t.shape[0] == 0 and t is not first:
            continue
        if t.ndim != first.ndim:
            raise RuntimeError(f"Tensors must have same number of dimensions: got {first.ndim} "
                               f"and {t.ndim}")
        for k in range(first.ndim):
            if k != d and t.shape[k] != first.shape[k]:
                raise RuntimeError(f"Sizes of tensors must match except in dimension {d}. "
                                   f"Expected size {first.shape[k]} but got size {t.shape[k]} "
                                   f"for tensor number {i} in the list.")
    # a skipped tensor that requires grad still makes the result require grad (eager's
    # autograd records every input): it joins as an empty tensor of the others' shape
    parts = [t if any(t is k for k in kept) else reshaped(t, _empty_part(first.shape, d))
             for t in tensors if any(t is k for k in kept) or getattr(t, "requires_grad", False)]
    return prims.cat([maybe_convert(t, dtype) for t in parts], d)


def _empty_part(shape, d):
    return tuple(0 if i == d else n for i, n in enumerate(shape))


def _into(out, result, tensors):
    """result written into out= as eager's cat and stack do: they refuse an out that shares
    any memory with an input, even all of it (no in-place join)."""
    if out is None:
        return result
    if hasattr(out, "dtype") and not dtypes.can_cast(result.dtype, out.dtype):
        raise TypeError(f"torch.cat(): input types can't be cast to the desired output type "
                        f"{dtypes.scalar_type_name(out.dtype)}")
    from primtrace.ir.proxy import is_real_tensor
    from primtrace.refs.out import OVERLAP_MESSAGE, _byte_range, copy_to_out
    if is_real_tensor(out):
        for t in tensors:
            if t is out:
                raise RuntimeError(OVERLAP_MESSAGE)
            if (is_real_tensor(t) and t.numel() and out.numel()
                    and t.untyped_storage().data_ptr() == out.untyped_storage().data_ptr()):
                (a, b), (c, d) = _byte_range(t), _byte_range(out)
                if a < d and c < b:
                    raise RuntimeError(OVERLAP_MESSAGE)
    return copy_to_out(out, result)


@ref(declines=_join_declines, aliases=("concat",))
def cat(tensors, dim=0, *, out=None):
    """The tensors joined along `dim`, in their promoted dtype."""
    tensors = _tensor_list("cat", tensors)
    return _into(out, joined("cat", tensors, as_int("cat", "dim", dim, 2)), tensors)


@ref(declines=_join_declines)
def concatenate(tensors, axis=0, *, out=None):
    tensors = _tensor_list("concatenate", tensors)
    return _into(out, joined("cat", tensors, as_int("concatenate", "axis", axis, 2)), tensors)


@ref(declines=_join_declines)
def stack(tensors, dim=0, *, out=None):
    """The tensors (all of one shape) along a new dim `dim`."""
    tensors = _tensor_list("stack", tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    for i, t in enumerate(tensors[1:], 1):
        if tuple(t.shape) != tuple(tensors[0].shape):
            raise RuntimeError(f"stack expects each tensor to be equal size, but got "
                               f"{list(tensors[0].shape)} at entry 0 and {list(t.shape)} at "
                               f"entry {i}")
    d = wrap(as_int("stack", "dim", dim, 2), tensors[0].ndim + 1)
    return _into(out, joined("stack", [prims.unsqueeze(t, d) for t in tensors], d), tensors)


def _atleast(n):
    def grow(t):
        if t.ndim >= n:
            return t
        if t.ndim == 0:
            return reshaped(t, (1,) * n)
        if n == 2 or t.ndim == 2:
            t = prims.unsqueeze(t, 0) if t.ndim == 1 else t
            return t if n == 2 else prims.unsqueeze(t, 2)
        return prims.unsqueeze(prims.unsqueeze(t, 0), 2)   # 1-d to 3-d: (1, n, 1)

    def run(*tensors):
        single = len(tensors) == 1 and not isinstance(tensors[0], _SEQUENCE)
        if len(tensors) == 1 and isinstance(tensors[0], _SEQUENCE):
            tensors = tuple(tensors[0])
        for t in tensors:
            require_tensor(f"atleast_{n}d", t)
        out = tuple(grow(t) for t in tensors)
        return out[0] if single else out
    run.__name__ = run.__qualname__ = f"atleast_{n}d"
    run.__doc__ = f"Each tensor with at least {n} dims (itself when it has them; else a view)."
    return ref(run), grow


(atleast_1d, _at1), (atleast_2d, _at2), (atleast_3d, _at3) = _atleast(1), _atleast(2), _atleast(3)


def _stacker(name, grow, dim_of, what):
    def run(tensors, *, out=None):
        tensors = _tensor_list(name, tensors)
        if not tensors:
            raise RuntimeError(f"{name} expects a non-empty TensorList")
        grown = [grow(t) for t in tensors]
        return _into(out, joined("cat", grown, dim_of(grown)), tensors)
    run.__name__ = run.__qualname__ = name
    run.__doc__ = f"torch.{name}: cat of the tensors {what}."
    return ref(run, declines=_join_declines)


def _column(t):
    return reshaped(t, (t.numel(), 1)) if t.ndim <= 1 else t


hstack = _stacker("hstack", _at1, lambda ts: 0 if ts[0].ndim == 1 else 1,
                  "made at least 1-d, along dim 1 (dim 0 for 1-d ones)")
vstack = _stacker("vstack", _at2, lambda ts: 0, "made at least 2-d, along dim 0")
row_stack = vstack
dstack = _stacker("dstack", _at3, lambda ts: 2, "made at least 3-d, along dim 2")
column_stack = _stacker("column_stack", _column, lambda ts: 1,
                        "as columns (0-d and 1-d ones reshaped to (n, 1)), along dim 1")


@ref
def meshgrid(*tensors, indexing=None):
    """Grids of the 0-d/1-d inputs: each a view, input i expanded along every other dim."""
    if len(tensors) == 1 and isinstance(tensors[0], _SEQUENCE):
        tensors = tuple(tensors[0])
    if not tensors:
        raise RuntimeError("meshgrid expects a non-empty TensorList")
    for t in tensors:
        require_tensor("meshgrid", t)
        if t.ndim > 1:
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but "
                               f"got: {t.ndim}D")
        if t.dtype != tensors[0].dtype:
            raise RuntimeError("meshgrid expects all tensors to have the same dtype")
        if t.device != tensors[0].device:
            raise RuntimeError("meshgrid expects all tensors to have the same device")
    indexing = "ij" if indexing is None else indexing
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f"torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but "
                           f"received: {indexing}")
    swap_first = indexing == "xy" and len(tensors) >= 2
    if swap_first:
        tensors = (tensors[1], tensors[0], *tensors[2:])
    shape = tuple(t.numel() for t in tensors)
    grids = []
    for i, t in enumerate(tensors):
        view = tuple(-1 if k == i else 1 for k in range(len(tensors)))
        view = tuple(t.numel() if s == -1 else 1 for s in view)
        grids.append(prims.expand(prims.reshape_view(t, view), shape))
    if swap_first:  # eager's "xy": the "ij" grids of (t1, t0, ...), the first two swapped back
        grids[0], grids[1] = grids[1], grids[0]
    return tuple(grids)


# --- flip, roll, rot90, repeat -------------------------------------------------------------------
def _dims(name, ndim, dims) -> tuple:
    wrapped = [wrap(d, ndim) for d in dims]
    for d in wrapped:
        if wrapped.count(d) > 1:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
    return tuple(sorted(wrapped))


@ref
def flip(input, *dims, **kwargs):
    """A copy with the order of `dims` reversed (input's memory order); dims positional
    (torch.flip(x, (0,)), x.flip(0, 1)) or by keyword (torch.flip(x, dims=(0,)))."""
    require_tensor("flip", input)
    if kwargs:
        if dims or set(kwargs) != {"dims"}:
            raise TypeError(f"flip() got an unexpected keyword argument "
                            f"'{next(k for k in kwargs if k != 'dims' or dims)}'")
        dims = (kwargs["dims"],)
    dims = _dims("flip", input.ndim, int_list("flip", "dims", dims, 2))
    return prims.flip(input, dims if input.ndim else ())


@ref
def fliplr(input):
    require_tensor("fliplr", input)
    if input.ndim < 2:
        raise RuntimeError("Input must be >= 2-d.")
    return prims.flip(input, (1,))


@ref
def flipud(input):
    require_tensor("flipud", input)
    if input.ndim < 1:
        raise RuntimeError("Input must be >= 1-d.")
    return prims.flip(input, (0,))


def _rolled(input, shift, d):
    n = input.shape[d]
    if input.numel() == 0:
        return _clone(input)
    s = shift % n
    parts = [input] if s == 0 else [slice_dim(input, d, n - s, n), slice_dim(input, d, 0, n - s)]
    out = prims.cat(parts, d)
    wanted = suggest_memory_format(input)
    return out if wanted is torch.contiguous_format else copy_as(out, out.dtype, wanted)


@ref
def roll(input, shifts, dims=None):
    """input's elements shifted by `shifts` along `dims` (the flattened input without dims),
    wrapping around: a new tensor."""
    require_tensor("roll", input)
    shifts = int_list("roll", "shifts", (shifts,), 2)
    dims = () if dims is None else int_list("roll", "dims", (dims,), 3)
    if not dims:
        if len(shifts) != 1:
            raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, "
                               f"dims:{len(dims)}")
        flat = reshaped(input, (input.numel(),))
        return prims.reshape_view(_rolled(flat, shifts[0], 0), tuple(input.shape))
    if len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, "
                           f"dims:{len(dims)}")
    if input.ndim == 0:
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    out = input
    for shift, d in zip(shifts, dims):
        out = _rolled(out, shift, wrap(d, input.ndim))
    return out


@ref
def rot90(input, k=1, dims=(0, 1)):
    """input rotated by 90 degrees `k` times in the plane of `dims` (eager's flip and
    transpose: k = 1 or 3 give a transposed view of a copy)."""
    require_tensor("rot90", input)
    k = as_int("rot90", "k", k, 2)
    dims = int_list("rot90", "dims", (dims,), 3)
    ndim = input.ndim
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    if ndim < 2:
        raise RuntimeError(f"expected total dims >= 2, but got total dims = {ndim}")
    if dims[0] == dims[1] or abs(dims[0] - dims[1]) == ndim:
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {dims[0]} "
                           f"and dim1 = {dims[1]}")
    for i, d in enumerate(dims):
        if not -ndim <= d < ndim:
            raise RuntimeError(f"Rotation dim{i} out of range, dim{i} = {d}")
    d0, d1 = dims[0] % ndim, dims[1] % ndim
    k = (4 + k % 4) % 4
    if k == 1:
        return prims.permute(prims.flip(input, (d1,)), swap(ndim, d0, d1))
    if k == 2:
        return prims.flip(input, tuple(sorted((d0, d1))))
    if k == 3:
        return prims.permute(prims.flip(input, (d0,)), swap(ndim, d0, d1))
    return copy_as(input, input.dtype, torch.contiguous_format)


@ref
def repeat(input, *sizes):
    """Tensor.repeat: input tiled `sizes` times per dim (new leading dims first): a new
    row-major tensor."""
    require_tensor("repeat", input, "self")
    repeats = int_list("repeat", "repeats", sizes, required=True)
    if len(repeats) < input.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number "
                           "of dimensions of tensor")
    padded = (1,) * (len(repeats) - input.ndim) + tuple(input.shape)
    target = tuple(p * r for p, r in zip(padded, repeats))
    if builtins.any(r < 0 for r in repeats):
        raise RuntimeError(f"Trying to create tensor with negative dimension "
                           f"{min(target)}: {list(target)}")
    x = prims.reshape_view(input, padded)
    for i in range(len(padded)):
        x = prims.unsqueeze(x, 2 * i)
    x = prims.expand(x, tuple(v for p, r in zip(padded, repeats) for v in (r, p)))
    return prims.reshape_view(copy_as(x, x.dtype, torch.contiguous_format), target)


# --- diagonals, blocks, pads ---------------------------------------------------------------------
@ref
def diag(input, diagonal=0):
    """A 1-d input as the `diagonal` of a new square matrix; a 2-d input's diagonal copied."""
    require_tensor("diag", input)
    k = as_int("diag", "diagonal", diagonal, 2)
    if input.ndim == 1:
        n = input.shape[0] + abs(k)
        new = filled((n, n), 0, input.dtype, input.device)
        return written(new, prims.diagonal(new, k, 0, 1), input)
    if input.ndim == 2:
        return copy_as(prims.diagonal(input, k, 0, 1), input.dtype, torch.contiguous_format)
    raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {input.ndim}D")


@ref
def diag_embed(input, offset=0, dim1=-2, dim2=-1):
    """The last dim of input as diagonals (at `offset`) of new matrices in dims dim1, dim2."""
    require_tensor("diag_embed", input)
    offset = as_int("diag_embed", "offset", offset, 2)
    ndim = input.ndim + 1
    d1 = wrap(as_int("diag_embed", "dim1", dim1, 3), ndim)
    d2 = wrap(as_int("diag_embed", "dim2", dim2, 4), ndim)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    n = abs(offset) + (input.shape[-1] if input.ndim else 1)
    shape = list(input.shape[:-1])
    shape.insert(min(d1, d2), n)
    shape.insert(max(d1, d2), n)
    new = filled(tuple(shape), 0, input.dtype, input.device)
    return written(new, prims.diagonal(new, offset, d1, d2), input)


def _block_declines(*tensors) -> bool:
    return not tensors or _mixed_devices(tensors)


@ref(declines=_block_declines)
def block_diag(*tensors):
    """The tensors (0-d, 1-d as rows, 2-d) as blocks on the diagonal of a new matrix."""
    for i, t in enumerate(tensors):
        require_tensor("block_diag", t)
        if t.ndim > 2:
            raise RuntimeError(f"torch.block_diag: Input tensors must have 2 or fewer "
                               f"dimensions. Input {i} has {t.ndim} dimensions")
    dtype = result_type(*(t for t in tensors))
    blocks = [reshaped(t, (1, t.numel())) if t.ndim < 2 else t for t in tensors]
    rows, cols = builtins.sum(b.shape[0] for b in blocks), builtins.sum(b.shape[1] for b in blocks)
    new = filled((rows, cols), 0, dtype, tensors[0].device)
    r = c = 0
    for b in blocks:
        h, w = b.shape
        if h and w:
            view = prims.slice(new, (r, c), (r + h, c + w), (1, 1))
            new = written(new, view, b)
        r, c = r + h, c + w
    return new


def _narrowed(input, d, start, length):
    if length < 0:
        raise RuntimeError("narrow(): length must be non-negative.")
    return slice_dim(input, d, start, start + length)


@ref
def constant_pad_nd(input, pad, value=0):
    """input padded with `value` (pad: (left, right) pairs from the last dim backwards;
    negative pads crop). Eager's layout: the input's suggested memory format."""
    require_tensor("constant_pad_nd", input)
    pad = int_list("constant_pad_nd", "pad", (pad,), 2)
    if len(pad) % 2:
        raise RuntimeError(f"Length of pad must be even but instead it equals {len(pad)}")
    ndim, npad = input.ndim, len(pad) // 2
    if ndim < npad:
        raise RuntimeError(f"Length of pad should be no more than twice the number of dimensions "
                           f"of the input. Pad length is {len(pad)}while the input has "
                           f"{ndim}dimensions.")
    cropped, positive = input, False
    for i in range(ndim - npad, ndim):
        lo, hi = pad[2 * (ndim - i - 1)], pad[2 * (ndim - i - 1) + 1]
        if lo < 0:
            cropped = _narrowed(cropped, i, -lo, cropped.shape[i] + lo)
        positive = positive or lo > 0
        if hi < 0:
            cropped = _narrowed(cropped, i, 0, cropped.shape[i] + hi)
        positive = positive or hi > 0
    if not positive:
        return _clone(cropped)
    shape = list(input.shape)
    for i in range(ndim - npad, ndim):
        lo, hi = pad[2 * (ndim - i - 1)], pad[2 * (ndim - i - 1) + 1]
        shape[i] = input.shape[i] + lo + hi
        if shape[i] < 0:
            raise RuntimeError(f"The input size {input.shape[i]}, plus negative padding {lo} and "
                               f"{hi} resulted in a negative output size, which is invalid. "
                               f"Check dimension {i} of your input.")
    new = new_in_format(tuple(shape), suggest_memory_format(input), value, input.dtype,
                        input.device)
    starts = [max(pad[2 * (ndim - i - 1)], 0) if i >= ndim - npad else 0 for i in range(ndim)]
    stops = [s + n for s, n in zip(starts, cropped.shape)]
    if cropped.numel() == 0:
        return new
    return written(new, prims.slice(new, tuple(starts), tuple(stops), (1,) * ndim), cropped)


_GATHER_MODES = ("reflect", "replicate", "circular")


def pad_declines(input, pad, mode="constant", value=None) -> bool:
    """Besides "constant": reflect, replicate and circular padding of 1-3 trailing dims by
    non-negative amounts in the combinations eager supports, with a contiguous result (not
    a reflected or replicated channels_last input, whose layout eager keeps); the rest, and
    every call eager refuses but circular wrapping more than once, is torch's."""
    if mode == "constant":
        return False
    if mode not in _GATHER_MODES or not is_tensor(input) or value is not None:
        return True
    try:
        pad = tuple(int(p) for p in pad)
    except TypeError:
        return True
    k = len(pad) // 2
    if len(pad) % 2 or k not in (1, 2, 3) or input.ndim not in (k + 1, k + 2) or builtins.any(
            p < 0 for p in pad):
        return True
    padded = tuple(input.shape[-k:])
    if mode == "circular":
        return input.ndim - k not in (1, 2)
    return (input.dtype is torch.bool or builtins.any(n == 0 for n in input.shape[-k - 1:])
            or (mode == "reflect" and builtins.any(
                p >= n for i, n in enumerate(reversed(padded)) for p in pad[2 * i:2 * i + 2]))
            or (input.ndim in (4, 5) and suggest_memory_format(input) != torch.contiguous_format))


def _source_positions(mode, n, left, right) -> list:
    """For each position of a dim of size n padded by (left, right), the input position it
    copies: reflected about the edges (not repeating them), the edge repeated, or wrapped."""
    positions = []
    for j in range(-left, n + right):
        if mode == "reflect":
            j = -j if j < 0 else 2 * (n - 1) - j if j >= n else j
        elif mode == "replicate":
            j = builtins.min(builtins.max(j, 0), n - 1)
        else:
            j %= n
        positions.append(j)
    return positions


@ref(declines=pad_declines)
def pad(input, pad, mode="constant", value=None):
    """torch.nn.functional.pad: "constant" is constant_pad_nd; "reflect", "replicate" and
    "circular" gather each padded dim at the input positions its elements copy (a new
    contiguous tensor, as eager's kernels make). Found for F.pad through the refs fallback of
    mapping.REF_MODULES."""
    require_tensor("pad", input)
    if mode != "constant":
        if pad_declines(input, pad, mode, value):
            raise NotImplementedError(f"primtrace: this pad in mode {mode!r} has no ref; torch "
                                      f"makes it")
        x, pad = input, tuple(int(p) for p in pad)
        for i in range(len(pad) // 2):
            d, n = input.ndim - 1 - i, input.shape[input.ndim - 1 - i]
            if mode == "circular" and (pad[2 * i] > n or pad[2 * i + 1] > n):
                raise RuntimeError("Padding value causes wrapping around more than once.")
            positions = _source_positions(mode, n, pad[2 * i], pad[2 * i + 1])
            with torch._C.DisableTorchFunction():   # a constant of the trace
                index = torch.tensor(positions, dtype=torch.int64, device=input.device)
            x = prims.index_select(x, d, index) if n else prims.full(
                (*x.shape[:d], len(positions), *x.shape[d + 1:]), 0, dtype=x.dtype,
                device=x.device)
        return x
    if len(pad) > 2 * input.ndim:
        raise RuntimeError(f"Padding length should be less than or equal to two times the input "
                           f"dimension but got padding length {len(pad)} and input of dimension "
                           f"{input.ndim}")
    return constant_pad_nd(input, pad, 0 if value is None else value)


# --- sum_to_size, scatters -----------------------------------------------------------------------
@ref
def sum_to_size(input, *size):
    """input summed down to `size` (which must expand to input's shape); input itself when
    nothing is summed."""
    require_tensor("sum_to_size", input, "self")
    size = int_list("sum_to_size", "size", size, required=True)
    shape = tuple(input.shape)
    if len(size) > len(shape) or expand_strides(size, (0,) * len(size), shape) is None:
        raise RuntimeError(f"size {{{list(size)}}} is not expandable to size {{{list(shape)}}}.")
    if not size:
        return _sum(input)
    lead = len(shape) - len(size)
    dims = [i for i in range(lead)] + [lead + i for i, s in enumerate(size)
                                        if s == 1 and shape[lead + i] != 1]
    if not dims:
        return input
    total = _sum(input, tuple(dims), keepdim=True)
    return reshaped(total, size) if lead else total


def _scatter_declines(input, *args, **kwargs) -> bool:
    """Eager copies an input that is not dense storage and all (sliced, expanded) in its
    own way (clone_preserve_strides): torch makes those."""
    return is_tensor(input) and not non_overlapping_and_dense(input)


def _scattered(name, input, src, view_of):
    require_tensor(name, input)
    require_tensor(name, src, "src", 2)
    new = _clone(input)
    view = view_of(new)
    if tuple(view.shape) != tuple(src.shape):
        raise RuntimeError(f"expected src to have a size equal to the slice of self. src size = "
                           f"{list(src.shape)}, slice size = {list(view.shape)}")
    return written(new, view, src)


@ref(declines=_scatter_declines)
def slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    """A copy of input with src written into input[..., start:end:step, ...] along dim."""
    require_tensor("slice_scatter", input)
    if input.ndim == 0:
        raise IndexError("slice() cannot be applied to a 0-dim tensor.")
    d = wrap(as_int("slice_scatter", "dim", dim, 3), input.ndim)
    step = as_int("slice_scatter", "step", step, 6)
    if step <= 0:
        raise RuntimeError("slice step must be positive")
    n = input.shape[d] if input.ndim else 1
    b = 0 if start is None else as_int("slice_scatter", "start", start, 4)
    e = n if end is None else as_int("slice_scatter", "end", end, 5)
    b = min(max(b + n if b < 0 else b, 0), n)
    e = min(max(e + n if e < 0 else e, b), n)
    return _scattered("slice_scatter", input, src, lambda new: slice_dim(new, d, b, e, step))


@ref(declines=_scatter_declines)
def select_scatter(input, src, dim, index):
    """A copy of input with src written into input.select(dim, index)."""
    require_tensor("select_scatter", input)
    if input.ndim == 0:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    d = wrap(as_int("select_scatter", "dim", dim, 3), input.ndim)
    i, n = as_int("select_scatter", "index", index, 4), input.shape[d]
    if not -n <= i < n:
        raise IndexError(f"select(): index {i} out of range for tensor of size "
                         f"{list(input.shape)} at dimension {d}")
    return _scattered("select_scatter", input, src, lambda new: select_dim(new, d, i % n))


@ref(declines=_scatter_declines)
def diagonal_scatter(input, src, offset=0, dim1=0, dim2=1):
    """A copy of input with src written into input.diagonal(offset, dim1, dim2)."""
    require_tensor("diagonal_scatter", input)
    offset = as_int("diagonal_scatter", "offset", offset, 3)
    d1 = wrap(as_int("diagonal_scatter", "dim1", dim1, 4), input.ndim)
    d2 = wrap(as_int("diagonal_scatter", "dim2", dim2, 5), input.ndim)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    return _scattered("diagonal_scatter", input, src,
                      lambda new: prims.diagonal(new, offset, d1, d2))


@ref(declines=_scatter_declines)
def as_strided_scatter(input, src, size, stride, storage_offset=None):
    """A copy of input with src written into copy.as_strided(size, stride, storage_offset)."""
    require_tensor("as_strided_scatter", input)
    size = int_list("as_strided_scatter", "size", (size,), 3)
    stride = int_list("as_strided_scatter", "stride", (stride,), 4)
    if storage_offset is not None:
        storage_offset = as_int("as_strided_scatter", "storage_offset", storage_offset, 5)
    return _scattered("as_strided_scatter", input, src,
                      lambda new: prims.as_strided(new, size, stride, storage_offset))


__all__ = exports(globals())
