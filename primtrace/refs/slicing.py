"""Slicing view refs: narrow, select, unbind, split, chunk, tensor_split, hsplit/vsplit/
dsplit and basic indexing (``x[1:, None, ..., 2]``); and the ``*_copy`` forms of the views
(``permute_copy``: the view copied into a new row-major tensor).

Every result is a view with eager's strides (``prims.slice``, ``prims.squeeze``,
``prims.unsqueeze``); tensor indices (bool masks, integer tensors) are left to torch.
"""
from __future__ import annotations

import builtins
import operator

import torch

from primtrace import dtypes, prims
from primtrace.ir.strides import contiguous_strides
from primtrace.ir.number_ops import size_max, size_min
from primtrace.ir.proxy import is_symbolic, tensor_values
from primtrace.refs import views as _views
from primtrace.refs.core import exports, is_tensor, ref
from primtrace.refs.creation import filled
from primtrace.refs.scalars import concrete
from primtrace.refs.shape_args import SEQUENCE, as_int, int_list, named, require_tensor, wrap


# --- narrow, select, unbind, split ---------------------------------------------------------------
def slice_dim(input, dim, start, stop, step=1):
    """input[..., start:stop:step, ...] along `dim` (clamped already)."""
    starts, stops, steps = [0] * input.ndim, list(input.shape), [1] * input.ndim
    starts[dim], stops[dim], steps[dim] = start, stop, step
    return prims.slice(input, tuple(starts), tuple(stops), tuple(steps))


def select_dim(input, dim, index):
    """input[..., index, ...] along `dim` (non-negative, in range): a view without that dim."""
    return prims.squeeze(slice_dim(input, dim, index, index + 1), (dim,))


@ref
def narrow(input, dim, start, length):
    """input[..., start:start + length, ...] along `dim` (start may be negative): a view."""
    require_tensor("narrow", input)
    if input.ndim == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    d = wrap(as_int("narrow", "dim", dim, 2), input.ndim)
    if is_tensor(start):  # eager reads it (item()); under jit, an input's value is guarded
        if start.ndim or start.dtype.is_floating_point or start.dtype.is_complex or \
                start.dtype is torch.bool:
            raise RuntimeError("start must be an 0-dim integral Tensor.")
        start = tensor_values(start, "narrow's tensor start")
    else:
        start = as_int("narrow", "start", start, 3)
    length = as_int("narrow", "length", length, 4)
    if length < 0:
        raise RuntimeError("narrow(): length must be non-negative.")
    n = input.shape[d]
    if not -n <= start <= n:
        raise IndexError(f"start out of range (expected to be in range of [{-n}, {n}], but got "
                         f"{start})")
    if start < 0:
        start += n
    if start > n - length:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({n}).")
    return slice_dim(input, d, start, start + length)


def _select_declines(input, dim, index) -> bool:
    return is_tensor(index) or isinstance(dim, str)


@ref(declines=_select_declines)
def select(input, dim, index):
    """input[..., index, ...] along `dim`: a view without that dim."""
    require_tensor("select", input)
    if input.ndim == 0:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    d = wrap(as_int("select", "dim", dim, 2), input.ndim)
    index = as_int("select", "index", index, 3)
    n = input.shape[d]
    if not -n <= index < n:
        raise IndexError(f"select(): index {index} out of range for tensor of size "
                         f"{list(input.shape)} at dimension {d}")
    return select_dim(input, d, index % n)


@ref(declines=named)
def unbind(input, dim=0):
    """The slices of `dim`, as a tuple of views without it."""
    require_tensor("unbind", input)
    if input.ndim == 0:
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    d = wrap(as_int("unbind", "dim", dim, 2), input.ndim)
    return tuple(select_dim(input, d, i) for i in range(input.shape[d]))


def pieces(input, d, sizes) -> tuple:
    """Consecutive views of `sizes` elements along `d`."""
    out, start = [], 0
    for size in sizes:
        out.append(slice_dim(input, d, start, start + size))
        start += size
    return tuple(out)


def split_sizes(n, size) -> list:
    if size < 0:
        raise RuntimeError(f"split expects split_size be non-negative, but got split_size={size}")
    if size == 0:
        if n != 0:
            raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got "
                               f"dimension size of {n}")
        return [0]
    return [min(size, n - i) for i in range(0, n, size)] or [0]


@ref
def split_with_sizes(input, split_sizes, dim=0):
    require_tensor("split_with_sizes", input, "self")
    if input.ndim == 0:
        raise RuntimeError("split expects at least a 1-dimensional tensor")
    d = wrap(as_int("split_with_sizes", "dim", dim, 3), input.ndim)
    sizes = int_list("split_with_sizes", "split_sizes", (split_sizes,), 2)
    n = input.shape[d]
    for s in sizes:
        if s < 0:
            raise RuntimeError(f"split_with_sizes expects split_sizes have only non-negative "
                               f"entries, but got split_sizes={list(sizes)}")
    if builtins.sum(sizes) != n:
        raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {n} (input "
                           f"tensor's size at dimension {d}), but got split_sizes={list(sizes)}")
    return pieces(input, d, sizes)


@ref
def split(input, split_size_or_sections, dim=0):
    """Views of `split_size` elements along `dim` (the last may be smaller), or of the sizes
    a list gives."""
    require_tensor("split", input, "self")
    if isinstance(split_size_or_sections, SEQUENCE):
        return split_with_sizes(input, split_size_or_sections, dim)
    if input.ndim == 0:
        raise RuntimeError("split expects at least a 1-dimensional tensor")
    d = wrap(as_int("split", "dim", dim, 3), input.ndim)
    size = as_int("split", "split_size", split_size_or_sections, 2)
    return pieces(input, d, split_sizes(input.shape[d], size))


@ref
def chunk(input, chunks, dim=0):
    """At most `chunks` views of ceil(size / chunks) elements along `dim`."""
    require_tensor("chunk", input)
    if input.ndim == 0:
        raise RuntimeError("chunk expects at least a 1-dimensional tensor")
    chunks = as_int("chunk", "chunks", chunks, 2)
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    d = wrap(as_int("chunk", "dim", dim, 3), input.ndim)
    n = input.shape[d]
    size = (n + chunks - 1) // chunks
    if size == 0 and n == 0:
        return pieces(input, d, [0] * chunks)
    return pieces(input, d, split_sizes(n, size))


def tensor_split_views(name, input, sections, dim) -> tuple:
    if input.ndim == 0:
        raise RuntimeError(f"{name} expected at least a 1-dimensional tensor, but got a tensor "
                           f"with 0 dims")
    d = wrap(as_int(name, "dim", dim, 3), input.ndim)
    n = input.shape[d]
    if is_tensor(sections):  # eager reads its values; under jit, an input's are guarded
        if sections.dtype is not torch.int64:
            raise RuntimeError(f"tensor_split expected tensor_indices_or_sections to have dtype "
                               f"of long, but got {dtypes.scalar_type_name(sections.dtype)}")
        if sections.ndim > 1:
            raise RuntimeError(f"tensor_split expected tensor_indices_or_sections to be a "
                               f"zero-dimensional or one-dimensional tensor, but got a tensor "
                               f"with {sections.ndim} dims")
        sections = tensor_values(sections, "tensor_split's tensor of indices or sections")
    if isinstance(sections, SEQUENCE):
        bounds = [0, *(min(max(i if i >= 0 else i + n, 0), n)
                       for i in int_list(name, "indices", (sections,), 2)), n]
        return tuple(slice_dim(input, d, b, max(b, e)) for b, e in zip(bounds, bounds[1:]))
    k = as_int(name, "sections", sections, 2)
    if k <= 0:
        raise RuntimeError(f"number of sections must be larger than 0, got {k}")
    sizes = [n // k + (1 if i < n % k else 0) for i in range(k)]
    return pieces(input, d, sizes)


@ref
def tensor_split(input, indices_or_sections, dim=0):
    """Views: `sections` nearly equal parts, or the parts between `indices` (clamped)."""
    require_tensor("tensor_split", input)
    return tensor_split_views("tensor_split", input, indices_or_sections, dim)


def _directional_split(name, min_dims, dim_of):
    def run(input, indices_or_sections):
        require_tensor(name, input)
        if input.ndim < min_dims:
            raise RuntimeError(f"torch.{name} requires a tensor with at least {min_dims} "
                               f"dimension, but got a tensor with {input.ndim} dimensions!")
        d = dim_of(input.ndim)
        if is_tensor(indices_or_sections):  # unlike tensor_split's, eager's parser refuses it
            raise TypeError(f"{name}() received an invalid combination of arguments - got "
                            f"(Tensor, Tensor), but expected one of: (Tensor input, int sections), "
                            f"(Tensor input, tuple of ints indices)")
        if not isinstance(indices_or_sections, SEQUENCE):
            k = as_int(name, "sections", indices_or_sections, 2)
            if k != 0 and input.shape[d] % k:
                raise RuntimeError(f"torch.{name} attempted to split along dimension {d}, but "
                                   f"the size of the dimension {input.shape[d]} is not divisible "
                                   f"by the split_size {k}!")
        return tensor_split_views("tensor_split", input, indices_or_sections, d)
    run.__name__ = name
    run.__doc__ = f"torch.{name}: tensor_split along dim {dim_of(2)} (of a 2-d input)."
    return ref(run)


hsplit = _directional_split("hsplit", 1, lambda ndim: 1 if ndim > 1 else 0)
vsplit = _directional_split("vsplit", 2, lambda ndim: 0)
dsplit = _directional_split("dsplit", 3, lambda ndim: 2)


# --- indexing: basic (views) and advanced (integer tensors) ------------------------------------
def _basic(index) -> bool:
    items = index if type(index) is tuple else (index,)
    for i in items:
        if i is None or i is Ellipsis or type(i) is builtins.slice:
            continue
        kind = getattr(i, "python_type", type(i))
        if is_tensor(i) or kind is bool or not issubclass(kind, int):
            return False
    return True


def _rows_index(input, index) -> bool:
    """x[i] with one integer tensor of one or more dims on a row-major x with rows: rows
    gathered by index_select (other integer indices: prims.index, the kernel eager runs).
    Not an empty x: eager's index checks no index value where the result is empty."""
    return (is_tensor(index) and index.ndim > 0 and index.dtype in (torch.int32, torch.int64)
            and index.device == input.device and input.ndim > 0
            and isinstance(input.numel(), int) and input.numel() > 0
            and tuple(input.stride()) == contiguous_strides(tuple(input.shape)))


def _int_list(v) -> bool:
    """A (nested) list of ints, which eager's index reads as an integer tensor."""
    return type(v) is list and all(type(i) is int or _int_list(i) for i in v)


def index_items(index, device=None):
    """The items of an index as eager's indexing reads them (treatSequenceAsTuple): a tuple's
    items; a list of ints is one int64 tensor, as is a (nested) list of ints in a tuple, made
    on `device` (None: only checked); a list holding anything else (sequences, tensors,
    slices, None, ...: eager's deprecated reading as a tuple, or a mask) gives None, left to
    torch."""
    if type(index) is list:
        if not all(type(i) is int for i in index):
            return None
        index = (index,)
    elif type(index) is not tuple:
        return (index,)
    if not all(_int_list(i) or type(i) is not list for i in index):
        return None
    if device is None:
        return index
    with torch._C.DisableTorchFunction():   # a constant of the trace, not a user factory
        return tuple(torch.tensor(i, dtype=torch.int64, device=device) if type(i) is list else i
                     for i in index)


def _advanced_item(input, i) -> bool:
    """An integer tensor of one or more dims on input's device (bool and byte masks, 0-d
    tensors, which eager reads as ints, and indices on other devices are left to torch)."""
    return (is_tensor(i) and i.ndim > 0 and i.dtype in (torch.int32, torch.int64)
            and i.device == input.device)


def mask_item(input, i) -> bool:
    """A bool mask on input's device (eager selects the elements where it is True: a size
    known when the trace runs; a 0-dim mask masks a new dim of size 1)."""
    return is_tensor(i) and i.dtype is torch.bool and i.device == input.device


def indexable(input, index) -> bool:
    """Whether the refs compute input[index]: ints, slices, None, ..., integer tensors, or
    one bool mask (with basic items only)."""
    items = index_items(index)
    if items is None or not is_tensor(input):
        return False
    tensors = [i for i in items if is_tensor(i)]
    if builtins.any(mask_item(input, i) for i in tensors) and len(tensors) > 1:
        return False   # a mask with other tensor indices: torch's (which raises, traced)
    for i in items:
        if type(i) is builtins.slice:
            if builtins.any(is_tensor(v) for v in (i.start, i.stop, i.step)):
                return False
        elif is_tensor(i):
            if not (_advanced_item(input, i) or mask_item(input, i)):
                return False
        elif type(i) is list:   # a list of ints, made a tensor
            continue
        elif not _basic(i):
            return False
    return True


def _getitem_declines(input, index) -> bool:
    return not (_rows_index(input, index) or indexable(input, index))


def _slice_bounds(s, n):
    """(start, stop, step) of slice `s` clamped to a dim of size n (maybe a size known only at
    run time: x[mask][:k] keeps min(k, n) rows)."""
    step = 1 if s.step is None else operator.index(s.step)
    if step <= 0:
        raise ValueError("step must be greater than zero")
    start = 0 if s.start is None else _bound(s.start)
    stop = n if s.stop is None else _bound(s.stop)
    start = size_min(size_max(start + n if start < 0 else start, 0), n)
    stop = size_min(size_max(stop + n if stop < 0 else stop, start), n)
    return start, stop, step


def _known_equal(a, b) -> bool:
    """a == b, for ints maybe known only at run time: False where that is not known."""
    if a is b:
        return True
    if is_symbolic(a) or is_symbolic(b):
        from primtrace.ir.number_ops import decide
        return decide("eq", a, b) is True
    return a == b


def _bound(v):
    """A slice bound as an int (an int known only at run time stays one)."""
    return v if is_symbolic(v) else operator.index(v)


def apply_slicing(input, items):
    """Eager's applySlicing: ints select, slices slice, None unsqueezes, left to right (views
    of input); integer tensors stay for advanced indexing, as do bool masks (each covering
    as many dims as it has). Returns (view, indices, changed): `indices` lists None or the
    tensor for each dim of the view up to the last tensor (a mask's at its first dim)."""
    used = builtins.sum(i.ndim if is_tensor(i) and i.dtype is torch.bool else 1
                        for i in items if i is not None and i is not Ellipsis)
    if builtins.sum(1 for i in items if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if used > input.ndim:
        if input.ndim == 0 and len(items) == 1 and not isinstance(items[0], builtins.slice) \
                and not is_tensor(items[0]):
            i = operator.index(items[0])
            raise IndexError("invalid index of a 0-dim tensor. Use `tensor.item()` in Python or "
                             "`tensor.item<T>()` in C++ to convert a 0-dim tensor to a number"
                             if i == 0 else
                             f"index {i} is out of bounds for dimension 0 with size 0")
        raise IndexError(f"too many indices for tensor of dimension {input.ndim}")
    result, dim, changed, indices = input, 0, False, []
    for i in items:
        if i is Ellipsis:
            dim += input.ndim - used
        elif i is None:
            result, dim, changed = prims.unsqueeze(result, dim), dim + 1, True
        elif type(i) is builtins.slice:
            n = result.shape[dim]
            start, stop, step = _slice_bounds(i, n)
            if not (_known_equal(start, 0) and _known_equal(stop, n) and step == 1):
                result, changed = slice_dim(result, dim, start, stop, step), True
            dim += 1
        elif is_tensor(i) and i.dtype is torch.bool and i.ndim == 0:
            # a 0-dim mask adds a dim of size 1 that it masks (x[True] keeps x, x[False] none)
            result, changed = prims.unsqueeze(result, dim), True
            indices += [None] * (dim - len(indices)) + [prims.broadcast_in_dim(i, (1,), ())]
            dim += 1
        elif is_tensor(i):
            indices += [None] * (dim - len(indices)) + [i]
            dim += i.ndim if i.dtype is torch.bool and i.ndim else 1
        else:
            i, n = operator.index(i), result.shape[dim]
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {n}")
            result, changed = select_dim(result, dim, i % n), True
    return result, indices, changed


@ref(name="__getitem__", declines=_getitem_declines)
def _getitem(input, index):
    """Tensor.__getitem__ with ints, slices (positive steps), None, Ellipsis and integer
    tensors (lists of ints), as eager: the basic items applied left to right as views (select,
    slice, unsqueeze), always a view; then integer tensors index the view (a new tensor, in
    eager's layout: refs.indexing.advanced_index); or one bool mask, which selects the
    elements where it is True (their count is known when the trace runs: refs.selection). A
    mask with other tensor indices is left to torch."""
    require_tensor("__getitem__", input, "self")
    if _rows_index(input, index):   # negative indices count from the end, as eager's
        n = input.shape[0]
        prims.check_indices(index, n, 0)
        wrapped = prims.where(prims.lt(index, 0), prims.add(index, n), index)
        return prims.index_select(input, 0, wrapped)
    result, indices, changed = apply_slicing(input, index_items(index, input.device))
    if indices and indices[-1].dtype is torch.bool:   # one mask: a size known at run time
        from primtrace.refs.selection import select_by_mask
        return select_by_mask(result, indices[-1], len(indices) - 1)
    if indices:
        from primtrace.refs.indexing import advanced_index
        return advanced_index(result, indices)
    if not changed:   # x[...], x[:]: still a new view, as eager's
        result = prims.slice(result, (0,) * result.ndim, tuple(result.shape), (1,) * result.ndim)
    return result


# --- *_copy: the view as a new row-major tensor --------------------------------------------------
def row_major_copy(x):
    """A new tensor with x's values and exactly row-major strides (eager's
    clone(memory_format=torch.contiguous_format), size-1 dims included)."""
    if tuple(x.stride()) == contiguous_strides(tuple(x.shape)):
        return prims.clone(x)
    return prims.copy_to(filled(tuple(x.shape), 0, x.dtype, x.device), x)


def _copy_of(view_ref):
    name = view_ref.name + "_copy"

    def run(*args, **kwargs):
        result = view_ref(*args, **kwargs)
        if isinstance(result, tuple):
            return tuple(row_major_copy(r) for r in result)
        return row_major_copy(result)
    run.__name__ = run.__qualname__ = name
    run.__doc__ = f"torch.{name}: {view_ref.name}'s result copied into a new row-major tensor."
    run.__signature__ = _signature(view_ref)
    return ref(run, name=name, declines=view_ref.declines)


def _signature(sym):
    import inspect
    return inspect.signature(sym.fn)


_VIEWS_WITH_COPIES = (_views.permute, _views.transpose, _views.t, _views.squeeze,
                      _views.unsqueeze, _views.expand, _views.diagonal, select,
                      unbind, split, split_with_sizes, _views.unfold, _views.as_strided)
globals().update({v.name + "_copy": _copy_of(v) for v in _VIEWS_WITH_COPIES})
@ref(name="narrow_copy", declines=narrow.declines)
def narrow_copy(input, dim, start, length):
    """torch.narrow_copy: narrow's result as a new row-major tensor. Eager's narrow_copy
    checks a dim past the last with a RuntimeError (narrow: an IndexError)."""
    if (is_tensor(input) and input.ndim > 0
            and getattr(dim, "python_type", type(dim)) is int and concrete(dim) >= input.ndim):
        raise RuntimeError("Expected dim < static_cast<int64_t>(self_sizes.size()) to be true, "
                           "but got false.  (Could this error message be improved?  If so, "
                           "please report an enhancement request to PyTorch.)")
    return row_major_copy(narrow(input, dim, start, length))


@ref
def slice_copy(input, dim=0, start=None, end=None, step=1):
    """torch.slice_copy: input[..., start:end:step, ...] along `dim`, as a new row-major tensor."""
    require_tensor("slice_copy", input)
    if input.ndim == 0:
        raise IndexError("slice() cannot be applied to a 0-dim tensor.")
    d = wrap(as_int("slice_copy", "dim", dim, 2), input.ndim)
    step = as_int("slice_copy", "step", step, 5)
    if step <= 0:
        raise RuntimeError("slice step must be positive")
    n = input.shape[d]
    b, e, step = _slice_bounds(builtins.slice(start, end, step), n)
    return row_major_copy(slice_dim(input, d, b, e, step))


@ref
def alias_copy(input):
    """torch.alias_copy: the tensor itself, copied into a new row-major tensor."""
    require_tensor("alias_copy", input)
    return row_major_copy(input)


view_copy = ref(lambda input, size: row_major_copy(_views.reshape(input, size)), name="view_copy",
                declines=_views.view_declines)   # eager's view_copy reshapes: no view error

__all__ = exports(globals())
globals()["__getitem__"] = _getitem   # Tensor.__getitem__ is found by its own name
__all__.append("__getitem__")
