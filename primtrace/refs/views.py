"""View refs: reshape, view, flatten, permute, transpose, movedim, x.T/mT, squeeze,
unsqueeze, expand, diagonal, unfold and as_strided (slicing ones: ``refs/slicing.py``).

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

import torch

from primtrace import prims
from primtrace.prims.views import compute_stride
from primtrace.refs.conversion import copy_as
from primtrace.refs.core import broadcast_shapes as _broadcast_shapes
from primtrace.refs.core import exports, is_tensor, ref
from primtrace.refs.shape_args import (SEQUENCE, as_int, infer_size, int_list, legacy_type,
                                       named, require_tensor, wrap)


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


def view_declines(input, *sizes, **kwargs) -> bool:
    return "dtype" in kwargs or builtins.any(isinstance(s, (torch.dtype, type)) for s in sizes)


@ref(declines=view_declines)
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


@ref(declines=named)
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


@ref(declines=named)
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
                           f"size of dim {d} ({n}) in the input tensor")
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
@ref(declines=named)
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


@ref(declines=named, aliases=("swapaxes", "swapdims"))
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


def _complex(input) -> bool:
    return is_tensor(input) and input.dtype.is_complex


@ref(name="T", declines=_complex)
def _T(input):
    """Tensor.T: the dims reversed (eager warns for tensors that are not 2-d)."""
    if input.ndim != 2:
        import warnings
        warnings.warn("The use of `x.T` on tensors of dimension other than 2 to reverse their "
                      "shape is deprecated and it will throw an error in a future release. "
                      "Consider `x.mT` to transpose batches of matrices or `x.permute(*torch."
                      "arange(x.ndim - 1, -1, -1))` to reverse the dimensions of a tensor.",
                      UserWarning, stacklevel=3)
    return prims.permute(input, tuple(range(input.ndim))[::-1])


@ref(name="H", declines=_complex)
def _H(input):
    """Tensor.H of a real matrix: its transpose."""
    if input.ndim not in (0, 2):
        hint = " For batches of matrices, consider using tensor.mH" if input.ndim > 2 else ""
        raise RuntimeError(f"tensor.H is only supported on matrices (2-D tensors). Got "
                           f"{input.ndim}-D tensor.{hint}")
    return prims.permute(input, tuple(range(input.ndim))[::-1])


def _matrix_transpose(name):
    def run(input):
        if input.ndim == 0:   # eager allows it (deprecated)
            return prims.permute(input, ())
        if input.ndim < 2:
            raise RuntimeError(f"tensor.{name} is only supported on matrices or batches of "
                               f"matrices. Got {input.ndim}-D tensor.")
        return prims.permute(input, swap(input.ndim, input.ndim - 2, input.ndim - 1))
    run.__doc__ = f"Tensor.{name} (a real tensor): the last two dims swapped."
    return ref(run, name=name, declines=_complex)


#: properties: the tracer names x.T "T.__get__" (mapping.torch_name)
_PROPERTIES = {"T.__get__": _T, "H.__get__": _H, "mT.__get__": _matrix_transpose("mT"),
               "mH.__get__": _matrix_transpose("mH")}
T, H, mT, mH = (_PROPERTIES[f"{name}.__get__"] for name in ("T", "H", "mT", "mH"))  # refs.T(x)


def _movedim_dims(name, dims, position) -> tuple:
    if isinstance(dims, SEQUENCE):
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
@ref(declines=named)
def squeeze(input, dim=None):
    """input without its size-1 dims (those among `dim`, an int or a tuple): always a view."""
    require_tensor("squeeze", input)
    if dim is None:
        dims = tuple(d for d, n in enumerate(input.shape) if n == 1)
    else:
        given = dim if isinstance(dim, SEQUENCE) else (dim,)
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
        raise RuntimeError(f"expand({legacy_type(input)}{{{list(input.shape)}}}, "
                           f"size={list(sizes)}): "
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
            raise RuntimeError(f"Trying to create tensor with negative dimension {s}: "
                               f"{list(sizes)}")
        if d >= 0 and input.shape[d] is not s and input.shape[d] != s and input.shape[d] != 1:
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
def broadcast_shapes(*shapes):
    """torch.broadcast_shapes: the shape these shapes broadcast to (an int is a 1-d shape), as
    a torch.Size; torch's Python errors (ValueError for a negative length to broadcast)."""
    shapes = tuple((s,) if isinstance(s, int) else s for s in shapes if s is not None)
    for s in shapes:
        if not isinstance(s, (tuple, list, torch.Size)):
            raise RuntimeError(f"Input shapes should be of type ints, a tuple of ints, or a list "
                               f"of ints, got {s}")
    common = [1] * builtins.max((len(s) for s in shapes), default=0)
    for index, s in enumerate(shapes):
        for d in range(-1, -1 - len(s), -1):
            if s[d] == common[d]:
                continue
            if common[d] == 1:
                if s[d] < 0:
                    raise ValueError("Attempting to broadcast a dimension with negative length!")
                common[d] = s[d]
            elif s[d] != 1:
                raise RuntimeError(
                    f"Attempting to broadcast a dimension of length {s[d]} at {d}! Mismatching "
                    f"argument at index {index} had {s}; but expected shape should be "
                    f"broadcastable to {common}")
    return torch.Size(common)


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


# --- diagonal, unfold, as_strided ----------------------------------------------------------------
@ref(declines=named)
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
        raise RuntimeError("mismatch in length of strides and shape")
    if builtins.any(s < 0 for s in stride):
        raise RuntimeError(f"as_strided: Negative strides are not supported at the moment, got "
                           f"strides: {list(stride)}")
    if builtins.any(s < 0 for s in size):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(size)}: "
                           f"{list(size)}")
    if storage_offset is not None:
        storage_offset = as_int("as_strided", "storage_offset", storage_offset, 4)
        if storage_offset < 0:
            raise RuntimeError(f"Tensor: invalid storage offset {storage_offset}")
    return prims.as_strided(input, size, stride, storage_offset)


__all__ = exports(globals())
globals().update(_PROPERTIES)   # the tracer names x.T "T.__get__" (mapping.torch_name)
__all__ += list(_PROPERTIES)
