"""View refs: reshape, view, permute, transpose, squeeze, expand, narrow, select, split,
diagonal, unfold, as_strided, basic indexing (``x[1:, None, 2]``) and their ``*_copy`` forms.

Each returns a view exactly when eager does, with eager's strides: the meta functions of
the view prims (``prims/views.py``) compute them, and at run time the prims are torch's
own view ops, so writes through a result reach its base, in eager and in a trace (the
tracer orders reads of the base after such writes: ``tracer/capture.py``). ``reshape``
views when ATen's computeStride allows it and copies to a row-major tensor otherwise;
``view`` then raises eager's error. Bad arguments raise eager's exception type and message.
"""
from __future__ import annotations

import builtins
import math
import operator

import torch

from primtrace import prims
from primtrace.prims.views import compute_stride, expand_strides
from primtrace.refs.conversion import copy_as
from primtrace.refs.core import broadcast_shapes as _broadcast_shapes
from primtrace.ir.strides import contiguous_strides
from primtrace.refs.core import exports, is_tensor, ref
from primtrace.refs.creation import filled
from primtrace.refs.reductions import wrap_dim

_SEQUENCE = (tuple, list, torch.Size)


# --- arguments ---------------------------------------------------------------------------------
def require_tensor(name, x, argument="input", position=1):
    if not is_tensor(x):
        raise TypeError(f"{name}(): argument '{argument}' (position {position}) must be Tensor, "
                        f"not {type(x).__name__}")


def as_int(name, argument, value, position=1) -> int:
    """`value` as an int, as eager's parser takes an int argument (a runtime int is read:
    the trace is specialized on it)."""
    kind = getattr(value, "python_type", type(value))
    if is_tensor(value) or not issubclass(kind, int) or kind is bool and argument != "index":
        raise TypeError(f"{name}(): argument '{argument}' (position {position}) must be int, "
                        f"not {type(value).__name__}")
    return operator.index(value)


def int_list(name, argument, values, position=1, required=False) -> tuple:
    """A size or dims argument: varargs of ints or one sequence of ints (`required`: eager's
    TypeError when there is none)."""
    if required and not values:
        raise TypeError(f'{name}() missing 1 required positional arguments: "{argument}"')
    if len(values) == 1 and isinstance(values[0], _SEQUENCE):
        values = tuple(values[0])
    out = []
    for i, v in enumerate(values):
        kind = getattr(v, "python_type", type(v))
        if is_tensor(v) and v.ndim == 0 or not issubclass(kind, int) or kind is bool:
            raise TypeError(f"{name}(): argument '{argument}' (position {position}) must be "
                            f"tuple of ints, but found element of type {type(v).__name__} at "
                            f"pos {i}")
        out.append(operator.index(v))
    return tuple(out)


def wrap(d, ndim) -> int:
    return wrap_dim(d, ndim)


def infer_size(shape, numel) -> tuple:
    """`shape` with its one -1 inferred (eager's infer_size and its errors)."""
    infer, known = None, 1
    for i, s in enumerate(shape):
        if s == -1:
            if infer is not None:
                raise RuntimeError("only one dimension can be inferred")
            infer = i
        elif s < 0:
            raise RuntimeError(f"invalid shape dimension {s}")
        else:
            known *= s
    if infer is None:
        if known != numel:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
        return tuple(shape)
    if known == 0:
        if numel == 0:
            raise RuntimeError(f"cannot reshape tensor of 0 elements into shape {list(shape)} "
                               f"because the unspecified dimension size -1 can be any value and "
                               f"is ambiguous")
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
    if numel % known:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
    return tuple(numel // known if i == infer else s for i, s in enumerate(shape))


# --- reshape, view -----------------------------------------------------------------------------
VIEW_ERROR = ("view size is not compatible with input tensor's size and stride (at least one "
              "dimension spans across two contiguous subspaces). Use .reshape(...) instead.")


def reshaped(input, shape):
    """input as `shape` (already inferred): a view where computeStride allows, else a
    row-major copy viewed so (eager's reshape)."""
    if compute_stride(input.shape, input.stride(), shape) is None:
        input = copy_as(input, input.dtype, torch.contiguous_format)
    return prims.reshape_view(input, shape)


def viewed(input, shape):
    """input viewed as `shape` (already inferred), or eager's view error."""
    if compute_stride(input.shape, input.stride(), shape) is None:
        raise RuntimeError(VIEW_ERROR)
    return prims.reshape_view(input, shape)


@ref
def reshape(input, *sizes, shape=None):
    """input with `shape` (one dim may be -1): a view when the strides allow one, else a copy."""
    require_tensor("reshape", input)
    shape = infer_size(int_list("reshape", "shape", sizes if shape is None else (shape,)),
                       input.numel())
    return reshaped(input, shape)


def _view_declines(input, *sizes, **kwargs) -> bool:
    return "dtype" in kwargs or builtins.any(isinstance(s, (torch.dtype, type)) for s in sizes)


@ref(declines=_view_declines)
def view(input, *sizes, size=None):
    """input viewed with `size` (one dim may be -1); eager's error when the strides do not
    allow it. A dtype view (x.view(torch.int32)) is left to torch."""
    require_tensor("view", input, "self")
    shape = infer_size(int_list("view", "size", sizes if size is None else (size,)), input.numel())
    return viewed(input, shape)


@ref
def view_as(input, other):
    require_tensor("view_as", input, "self")
    require_tensor("view_as", other, "other")
    return viewed(input, infer_size(tuple(other.shape), input.numel()))


@ref
def reshape_as(input, other):
    require_tensor("reshape_as", input, "self")
    require_tensor("reshape_as", other, "other")
    return reshaped(input, infer_size(tuple(other.shape), input.numel()))


def _named(*args, **kwargs) -> bool:
    return builtins.any(isinstance(a, str) for a in (*args, *kwargs.values()))


@ref(declines=_named)
def flatten(input, start_dim=0, end_dim=-1):
    """Dims start_dim..end_dim as one (a view when possible); input itself when there is
    nothing to merge, as eager returns it."""
    require_tensor("flatten", input)
    start = wrap(as_int("flatten", "start_dim", start_dim, 2), input.ndim)
    end = wrap(as_int("flatten", "end_dim", end_dim, 3), input.ndim)
    if input.ndim == 0:
        return reshaped(input, (1,))
    if start > end:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    if start == end:
        return input
    shape = tuple(input.shape)
    return reshaped(input, shape[:start] + (math.prod(shape[start:end + 1]),) + shape[end + 1:])


@ref(declines=_named)
def unflatten(input, dim, sizes):
    """Dim `dim` split into `sizes` (one may be -1): a view."""
    require_tensor("unflatten", input)
    d = wrap(as_int("unflatten", "dim", dim, 2), input.ndim)
    if input.ndim == 0:
        raise RuntimeError("unflatten got an unexpected error:\nDimension specified as 0 but "
                           "tensor has no dimensions")
    sizes = int_list("unflatten", "sizes", (sizes,), 3)
    if not sizes:
        raise RuntimeError("unflatten: sizes must be non-empty")
    n = input.shape[d]
    if -1 in sizes and sizes.count(-1) == 1:
        known = math.prod(s for s in sizes if s != -1)
        inferred = infer_size(sizes, n) if known and n % known == 0 else None
    else:
        inferred = sizes if math.prod(sizes) == n else None
    if inferred is None:
        raise RuntimeError(f"unflatten: Provided sizes {list(sizes)} don't multiply up to the "
                           f"size of dim {dim} ({n}) in the input tensor")
    shape = tuple(input.shape)
    return viewed(input, shape[:d] + tuple(inferred) + shape[d + 1:])


@ref
def ravel(input):
    """input as one dim: a view of a contiguous input, else a row-major copy."""
    require_tensor("ravel", input)
    if not input.is_contiguous():
        input = copy_as(input, input.dtype, torch.contiguous_format)
    return prims.reshape_view(input, (input.numel(),))


# --- permute, transpose, movedim -----------------------------------------------------------------
@ref(declines=_named)
def permute(input, *dims):
    require_tensor("permute", input)
    dims = int_list("permute", "dims", dims)
    if len(dims) != input.ndim:
        raise RuntimeError(f"permute(sparse_coo): number of dimensions in the tensor input does "
                           f"not match the length of the desired ordering of dimensions i.e. "
                           f"input.dim() = {input.ndim} is not equal to len(dims) = {len(dims)}")
    perm = tuple(wrap(d, input.ndim) for d in dims)
    if len(set(perm)) != len(perm):
        raise RuntimeError("permute(): duplicate dims are not allowed.")
    return prims.permute(input, perm)


def swap(ndim, d0, d1) -> tuple:
    perm = list(range(ndim))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return tuple(perm)


@ref(declines=_named, aliases=("swapaxes", "swapdims"))
def transpose(input, dim0, dim1):
    require_tensor("transpose", input)
    d0 = wrap(as_int("transpose", "dim0", dim0, 2), input.ndim)
    d1 = wrap(as_int("transpose", "dim1", dim1, 3), input.ndim)
    return prims.permute(input, swap(input.ndim, d0, d1) if input.ndim else ())


@ref
def t(input):
    """The transpose of a matrix; a 0-d or 1-d input as a view of itself."""
    require_tensor("t", input)
    if input.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {input.ndim}D")
    return prims.permute(input, tuple(range(input.ndim))[::-1])


@ref(declines=lambda input: is_tensor(input) and input.dtype.is_complex)
def adjoint(input):
    """The transpose of the last two dims (real dtypes; complex conjugation is torch's)."""
    require_tensor("adjoint", input)
    if input.dtype.is_complex:
        raise NotImplementedError("primtrace: adjoint of a complex tensor has no ref")
    if input.ndim == 0:
        return prims.permute(input, ())
    if input.ndim < 2:
        raise RuntimeError(f"tensor.adjoint() is only supported on matrices or batches of "
                           f"matrices. Got {input.ndim}-D tensor.")
    return prims.permute(input, swap(input.ndim, input.ndim - 2, input.ndim - 1))


def _movedim_dims(name, dims, position) -> tuple:
    if isinstance(dims, _SEQUENCE):
        return tuple(as_int(name, "source", d, position) for d in dims)
    return (as_int(name, "source", dims, position),)


@ref(aliases=("moveaxis",))
def movedim(input, source, destination):
    """Dims `source` moved to positions `destination`, the others in order (a view)."""
    require_tensor("movedim", input)
    ndim = input.ndim
    src = _movedim_dims("movedim", source, 2)
    dst = _movedim_dims("movedim", destination, 3)
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({list(src)} "
                           f"dims) should contain the same number of dims as destination "
                           f"({list(dst)} dims)")
    src, dst = tuple(wrap(d, ndim) for d in src), tuple(wrap(d, ndim) for d in dst)
    for what, ds in (("source", src), ("destination", dst)):
        if len(set(ds)) != len(ds):
            raise RuntimeError(f"movedim: repeated dim in `{what}` ({list(ds)})")
    perm = [-1] * max(ndim, 1 if ndim == 0 and src else 0)
    if ndim == 0:
        return prims.permute(input, ())
    for s, d in zip(src, dst):
        perm[d] = s
    rest = iter(d for d in range(ndim) if d not in src)
    perm = [p if p != -1 else next(rest) for p in perm]
    return prims.permute(input, tuple(perm))


# --- squeeze, unsqueeze, expand ------------------------------------------------------------------
@ref(declines=_named)
def squeeze(input, dim=None):
    """input without its size-1 dims (those among `dim`, an int or a tuple): always a view."""
    require_tensor("squeeze", input)
    if dim is None:
        dims = tuple(d for d, n in enumerate(input.shape) if n == 1)
    else:
        given = dim if isinstance(dim, _SEQUENCE) else (dim,)
        wrapped = [wrap(as_int("squeeze", "dim", d, 2), input.ndim) for d in given]
        if len(set(wrapped)) != len(wrapped):
            raise RuntimeError(f"dim {wrapped[0]} appears multiple times in the list of dims")
        dims = tuple(sorted(d for d in set(wrapped) if input.ndim and input.shape[d] == 1))
    return prims.squeeze(input, dims)


@ref
def unsqueeze(input, dim):
    require_tensor("unsqueeze", input)
    return prims.unsqueeze(input, wrap(as_int("unsqueeze", "dim", dim, 2), input.ndim + 1))


def expanded_shape(input, sizes) -> tuple:
    """The target of eager's expand: -1 keeps a dim; eager's errors for the rest."""
    ndim = len(sizes)
    if ndim < input.ndim:
        raise RuntimeError(f"expand({input.dtype}{{{list(input.shape)}}}, size={list(sizes)}): "
                           f"the number of sizes provided ({ndim}) must be greater or equal to "
                           f"the number of dimensions in the tensor ({input.ndim})")
    offset = ndim - input.ndim
    target = []
    for i in range(ndim - 1, -1, -1):   # eager checks the last dim first
        s, d = sizes[i], i - offset
        if s == -1:
            if d < 0:
                raise RuntimeError(f"The expanded size of the tensor (-1) isn't allowed in a "
                                   f"leading, non-existing dimension {i}")
            s = input.shape[d]
        elif s < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {s}: {list(sizes)}")
        if d >= 0 and input.shape[d] != 1 and input.shape[d] != s:
            raise RuntimeError(f"The expanded size of the tensor ({s}) must match the existing "
                               f"size ({input.shape[d]}) at non-singleton dimension {i}.  Target "
                               f"sizes: {list(sizes)}.  Tensor sizes: {list(input.shape)}")
        target.append(s)
    return tuple(reversed(target))


@ref
def expand(input, *sizes, size=None, implicit=False):
    """input broadcast to `size` (-1 keeps a dim): a view, grown dims have stride 0."""
    require_tensor("expand", input, "self")
    sizes = int_list("expand", "size", sizes if size is None else (size,), required=True)
    return prims.expand(input, expanded_shape(input, sizes))


@ref
def expand_as(input, other):
    require_tensor("expand_as", input, "self")
    require_tensor("expand_as", other, "other")
    return prims.expand(input, expanded_shape(input, tuple(other.shape)))


@ref
def broadcast_to(input, size):
    require_tensor("broadcast_to", input)
    return prims.expand(input, expanded_shape(input, int_list("broadcast_to", "size", (size,), 2)))


@ref
def broadcast_tensors(*tensors):
    """Every tensor expanded to the broadcast shape (views)."""
    if len(tensors) == 1 and isinstance(tensors[0], (tuple, list)):
        tensors = tuple(tensors[0])
    for i, x in enumerate(tensors):
        if not is_tensor(x):
            raise TypeError(f"expected Tensor as element {i} in argument 0, but got "
                            f"{type(x).__name__}")
    shape = _broadcast_shapes(*(tuple(x.shape) for x in tensors))
    return tuple(prims.expand(x, shape) for x in tensors)


# --- narrow, select, unbind, split -----------------------------------------------------------------
def slice_dim(input, dim, start, stop, step=1):
    """input[..., start:stop:step, ...] along `dim` (clamped already)."""
    starts, stops, steps = [0] * input.ndim, list(input.shape), [1] * input.ndim
    starts[dim], stops[dim], steps[dim] = start, stop, step
    return prims.slice(input, tuple(starts), tuple(stops), tuple(steps))


def select_dim(input, dim, index):
    """input[..., index, ...] along `dim` (non-negative, in range): a view without that dim."""
    return prims.squeeze(slice_dim(input, dim, index, index + 1), (dim,))


def _narrow_declines(input, dim, start, length) -> bool:
    return is_tensor(start)


@ref(declines=_narrow_declines)
def narrow(input, dim, start, length):
    """input[..., start:start + length, ...] along `dim` (start may be negative): a view."""
    require_tensor("narrow", input)
    if input.ndim == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    d = wrap(as_int("narrow", "dim", dim, 2), input.ndim)
    start, length = as_int("narrow", "start", start, 3), as_int("narrow", "length", length, 4)
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


@ref(declines=_named)
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
    if isinstance(split_size_or_sections, _SEQUENCE):
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


def _tensor_split_declines(input, indices_or_sections, dim=0) -> bool:
    return is_tensor(indices_or_sections)


def tensor_split_views(name, input, sections, dim) -> tuple:
    if input.ndim == 0:
        raise RuntimeError(f"{name} expected at least a 1-dimensional tensor, but got a tensor "
                           f"with 0 dims")
    d = wrap(as_int(name, "dim", dim, 3), input.ndim)
    n = input.shape[d]
    if isinstance(sections, _SEQUENCE):
        bounds = [0, *(min(max(i if i >= 0 else i + n, 0), n)
                       for i in int_list(name, "indices", (sections,), 2)), n]
        return tuple(slice_dim(input, d, b, max(b, e)) for b, e in zip(bounds, bounds[1:]))
    k = as_int(name, "sections", sections, 2)
    if k <= 0:
        raise RuntimeError(f"number of sections must be larger than 0, got {k}")
    sizes = [n // k + (1 if i < n % k else 0) for i in range(k)]
    return pieces(input, d, sizes)


@ref(declines=_tensor_split_declines)
def tensor_split(input, indices_or_sections, dim=0):
    """Views: `sections` nearly equal parts, or the parts between `indices` (clamped)."""
    require_tensor("tensor_split", input)
    return tensor_split_views("tensor_split", input, indices_or_sections, dim)


def _directional_split(name, min_dims, dim_of):
    def run(input, indices_or_sections):
        require_tensor(name, input)
        if input.ndim < min_dims:
            raise RuntimeError(f"torch.{name} requires a tensor with at least {min_dims} "
                               f"dimension{'s' if min_dims > 1 else ''}, but got a tensor with "
                               f"{input.ndim} dimensions!")
        d = dim_of(input.ndim)
        if not isinstance(indices_or_sections, _SEQUENCE) and not is_tensor(indices_or_sections):
            k = as_int(name, "sections", indices_or_sections, 2)
            if k != 0 and input.shape[d] % k:
                raise RuntimeError(f"torch.{name} attempted to split along dimension {d}, but "
                                   f"the size of the dimension {input.shape[d]} is not divisible "
                                   f"by the split_size {k}!")
        return tensor_split_views("tensor_split", input, indices_or_sections, d)
    run.__name__ = name
    run.__doc__ = f"torch.{name}: tensor_split along dim {dim_of(2)} (of a 2-d input)."
    return ref(run, declines=_tensor_split_declines)


hsplit = _directional_split("hsplit", 1, lambda ndim: 1 if ndim > 1 else 0)
vsplit = _directional_split("vsplit", 2, lambda ndim: 0)
dsplit = _directional_split("dsplit", 3, lambda ndim: 2)


# --- diagonal, unfold, as_strided ------------------------------------------------------------------
@ref(declines=_named)
def diagonal(input, offset=0, dim1=0, dim2=1):
    """The diagonal of dims dim1 and dim2 at `offset`, as the last dim: a view."""
    require_tensor("diagonal", input)
    offset = as_int("diagonal", "offset", offset, 2)
    d1 = wrap(as_int("diagonal", "dim1", dim1, 3), input.ndim)
    d2 = wrap(as_int("diagonal", "dim2", dim2, 4), input.ndim)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    return prims.diagonal(input, offset, d1, d2)


@ref
def unfold(input, dimension, size, step):
    """Tensor.unfold: windows of `size` every `step` along `dimension`, as a new last dim."""
    require_tensor("unfold", input, "self")
    d = wrap(as_int("unfold", "dimension", dimension, 1), input.ndim)
    size, step = as_int("unfold", "size", size, 2), as_int("unfold", "step", step, 3)
    n = input.shape[d] if input.ndim else 1
    if size > n:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {n} but size is {size}")
    if size < 0:
        raise RuntimeError(f"size is {size} but must be >= 0")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    return prims.unfold(input, d, size, step)


@ref
def as_strided(input, size, stride, storage_offset=None):
    """A view of input's storage with the given geometry (eager checks the storage bounds
    when it runs)."""
    require_tensor("as_strided", input)
    size = int_list("as_strided", "size", (size,), 2)
    stride = int_list("as_strided", "stride", (stride,), 3)
    if len(size) != len(stride):
        raise RuntimeError(f"mismatch in length of strides and shape")
    if builtins.any(s < 0 for s in stride):
        raise RuntimeError(f"as_strided: Negative strides are not supported at the moment, got "
                           f"strides: {list(stride)}")
    if builtins.any(s < 0 for s in size):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(size)}: {list(size)}")
    if storage_offset is not None:
        storage_offset = as_int("as_strided", "storage_offset", storage_offset, 4)
        if storage_offset < 0:
            raise RuntimeError(f"Tensor: invalid storage offset {storage_offset}")
    return prims.as_strided(input, size, stride, storage_offset)


# --- basic indexing --------------------------------------------------------------------------------
def _basic(index) -> bool:
    items = index if type(index) is tuple else (index,)
    for i in items:
        if i is None or i is Ellipsis or type(i) is builtins.slice:
            continue
        kind = getattr(i, "python_type", type(i))
        if is_tensor(i) or kind is bool or not issubclass(kind, int):
            return False
    return True


def _getitem_declines(input, index) -> bool:
    items = index if type(index) is tuple else (index,)
    return not _basic(index) or builtins.any(
        type(i) is builtins.slice and builtins.any(is_tensor(v) for v in (i.start, i.stop, i.step))
        for i in items)


def _slice_bounds(s, n):
    step = 1 if s.step is None else operator.index(s.step)
    if step <= 0:
        raise ValueError("step must be greater than zero")
    start = 0 if s.start is None else operator.index(s.start)
    stop = n if s.stop is None else operator.index(s.stop)
    start = min(max(start + n if start < 0 else start, 0), n)
    stop = min(max(stop + n if stop < 0 else stop, start), n)
    return start, stop, step


@ref(name="__getitem__", declines=_getitem_declines)
def _getitem(input, index):
    """Tensor.__getitem__ with ints, slices (positive steps), None and Ellipsis: applied left
    to right as eager does (select, slice, unsqueeze), always a view. Bool and integer
    tensor indices are left to torch."""
    require_tensor("__getitem__", input, "self")
    items = index if type(index) is tuple else (index,)
    used = builtins.sum(1 for i in items if i is not None and i is not Ellipsis)
    if builtins.sum(1 for i in items if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if used > input.ndim:
        raise IndexError(f"too many indices for tensor of dimension {input.ndim}")
    result, dim, changed = input, 0, False
    for i in items:
        if i is Ellipsis:
            dim += input.ndim - used
        elif i is None:
            result, dim, changed = prims.unsqueeze(result, dim), dim + 1, True
        elif type(i) is builtins.slice:
            n = result.shape[dim]
            start, stop, step = _slice_bounds(i, n)
            if (start, stop, step) != (0, n, 1):
                result, changed = slice_dim(result, dim, start, stop, step), True
            dim += 1
        else:
            i, n = operator.index(i), result.shape[dim]
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {n}")
            result, changed = select_dim(result, dim, i % n), True
    if not changed:   # x[...], x[:]: still a new view, as eager's
        result = prims.slice(result, (0,) * result.ndim, tuple(result.shape), (1,) * result.ndim)
    return result


# --- *_copy: the view as a new row-major tensor ----------------------------------------------------
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


_VIEWS_WITH_COPIES = (permute, transpose, t, squeeze, unsqueeze, expand, diagonal, select,
                      unbind, split, split_with_sizes, unfold, as_strided)
globals().update({v.name + "_copy": _copy_of(v) for v in _VIEWS_WITH_COPIES})
narrow_copy = _copy_of(narrow)
view_copy = ref(lambda input, size: row_major_copy(reshape(input, size)), name="view_copy",
                declines=_view_declines)   # eager's view_copy reshapes: no view error

__all__ = exports(globals())
globals()["__getitem__"] = _getitem   # Tensor.__getitem__ is found by its own name
__all__.append("__getitem__")
