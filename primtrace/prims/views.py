"""View and shape prims: the few operations every torch view/shape op is written in.

Views (tag ``"view"``): the result shares the input's memory. Each meta function computes
the exact strides eager's op gives (so fused kernels may read a view, and write into one,
through those strides), and each impl is torch's own view op, so at run time the result is
a real view (``_base``, storage and autograd as in eager):

- ``reshape_view(a, shape)``: torch's ``view`` (strides by its computeStride rule; a
  shape that cannot be viewed is a contract error: the ref copies first);
- ``permute(a, perm)``; ``slice(a, starts, stops, steps)`` (clamped, steps >= 1);
- ``squeeze(a, dims)`` (size-1 dims), ``unsqueeze(a, dim)``; ``expand(a, shape)``;
- ``diagonal(a, offset, dim1, dim2)``, ``unfold(a, dim, size, step)``;
- ``as_strided(a, shape, strides, storage_offset)`` (None: a's own offset).

Copies: ``cat(tensors, dim)``, ``flip(a, dims)``, ``pad(a, value, config)`` (a new tensor
of `value` with `a` written at every (interior + 1)-th position after `low` per dim:
slice's transpose, as lax.pad). And ``aliased(a, write)``: `a` itself,
read after `write` (the result of an in-place prim on memory `a` shares); a no-op at run
time that orders later reads of `a` after the write in the dataflow.

None of these has a row in the Numba op table: the torch executor runs them (views cost
only metadata) and fused kernels read and write their results through their strides.
"""
from __future__ import annotations

import builtins
import math

import torch

from primtrace.ir.proxy import TensorSpec, is_symbolic, needs_value
from primtrace.ir.strides import contiguous_strides, dense_strides, with_stand_ins
from primtrace.ir.symbol import Symbol, SymbolKind
from primtrace.prims.differentiation import (WRITES_THROUGH_VIEWS, NotDifferentiable, P,
                                             zeros_like)
from primtrace.prims.meta import PrimContractError, elementwise_strides, is_tensor

#: the dim order of channels_last (4-d) and channels_last_3d (5-d) layouts, outermost first
_CHANNELS_LAST = {4: (0, 2, 3, 1), 5: (0, 2, 3, 4, 1)}


def _prim(name, meta, impl, doc, tags=("view",)):
    return Symbol(name, kind=SymbolKind.PRIM, meta=meta, impl=impl, tags=frozenset(tags),
                  module="prims", doc=doc)


def _spec(a, shape, strides) -> TensorSpec:
    return TensorSpec(tuple(shape), a.dtype, a.device, tuple(strides))


def _tensor(name, a):
    if not is_tensor(a):
        raise PrimContractError(f"prims.{name}: expected a tensor, got {type(a).__name__}")


def _ints(name, what, values, n=None, sizes=False) -> tuple:
    """`values` checked as a tuple of ints (`sizes`: ints known only at run time too)."""
    values = tuple(values)
    if any(type(v) is not int and not (sizes and is_symbolic(v)) for v in values) or (
            n is not None and len(values) != n):
        raise PrimContractError(f"prims.{name}: {what} must be {n if n is not None else 'a'} "
                                f"tuple of ints, got {values!r}")
    return values


# --- reshape_view ----------------------------------------------------------------------------
def compute_stride(oldshape, oldstride, newshape):
    """Strides of `oldshape`/`oldstride` viewed as `newshape`, or None when that view does
    not exist (ATen's computeStride, which view and reshape share). Sizes known only at run
    time are computed on stand-in values (x[mask] of (n, 4) viewed as (2n, 2))."""
    return with_stand_ins(_compute_stride, tuple(oldshape), tuple(oldstride), tuple(newshape))


def _compute_stride(oldshape, oldstride, newshape):
    oldshape, oldstride, newshape = tuple(oldshape), tuple(oldstride), tuple(newshape)
    if not oldshape:
        return (1,) * len(newshape)
    numel = math.prod(oldshape)
    if numel == 0:
        if oldshape == newshape:
            return oldstride
        return contiguous_strides(newshape)
    newstride = [0] * len(newshape)
    view_d = len(newshape) - 1
    chunk_base_stride = oldstride[-1]
    tensor_numel = view_numel = 1
    for tensor_d in range(len(oldshape) - 1, -1, -1):
        tensor_numel *= oldshape[tensor_d]
        if tensor_d == 0 or (oldshape[tensor_d - 1] != 1
                             and oldstride[tensor_d - 1] != tensor_numel * chunk_base_stride):
            while view_d >= 0 and (view_numel < tensor_numel or newshape[view_d] == 1):
                newstride[view_d] = view_numel * chunk_base_stride
                view_numel *= newshape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base_stride = oldstride[tensor_d - 1]
                tensor_numel = view_numel = 1
    if view_d != -1:
        return None
    return tuple(newstride)


def _reshape_view_meta(a, shape):
    _tensor("reshape_view", a)
    shape = _ints("reshape_view", "shape", shape, sizes=True)
    if any(s < 0 for s in shape) or math.prod(shape) != a.numel():
        raise PrimContractError(f"prims.reshape_view: shape {list(shape)} does not hold "
                                f"{a.numel()} elements")
    strides = compute_stride(a.shape, a.stride(), shape)
    if strides is None:
        raise PrimContractError(f"prims.reshape_view: {list(a.shape)} with strides "
                                f"{list(a.stride())} cannot be viewed as {list(shape)}")
    return _spec(a, shape, strides)


reshape_view = _prim("reshape_view", _reshape_view_meta, lambda a, shape: a.view(tuple(shape)),
                     "`a` viewed with `shape` (same number of elements; strides by torch's "
                     "computeStride rule). A layout that cannot be viewed so is a contract error.")


# --- permute -----------------------------------------------------------------------------------
def _permute_meta(a, perm):
    _tensor("permute", a)
    perm = _ints("permute", "perm", perm, a.ndim)
    if sorted(perm) != list(range(a.ndim)):
        raise PrimContractError(f"prims.permute: {perm} is not a permutation of {a.ndim} dims")
    return _spec(a, [a.shape[d] for d in perm], [a.stride()[d] for d in perm])


permute = _prim("permute", _permute_meta, lambda a, perm: a.permute(tuple(perm)),
                "Output dim i is input dim perm[i] (a view).")


# --- slice -------------------------------------------------------------------------------------
def _slice_meta(a, starts, stops, steps):
    _tensor("slice", a)
    starts, stops = (_ints("slice", what, v, a.ndim, sizes=True) for what, v in
                     (("starts", starts), ("stops", stops)))
    steps = _ints("slice", "steps", steps, a.ndim)
    shape, strides = [], []
    for n, s, b, e, k in zip(a.shape, a.stride(), starts, stops, steps):
        if not (0 <= b <= e <= n and k >= 1):
            raise PrimContractError(f"prims.slice: [{b}:{e}:{k}] is not a clamped slice of a "
                                    f"dim of size {n}")
        shape.append(e - b if k == 1 else (e - b + k - 1) // k)   # a size known at run time:
        strides.append(s * k)                                   # every row of x[mask] is n
    return _spec(a, shape, strides)


def _slice_impl(a, starts, stops, steps):
    cut = [d for d, (b, e, k, n) in enumerate(zip(starts, stops, steps, a.shape))
           if (b, e, k) != (0, n, 1)]
    if len(cut) == 1 and steps[cut[0]] == 1:   # narrow: 1.8 us a call, indexing 3.1 us
        d = cut[0]
        return a.narrow(d, starts[d], stops[d] - starts[d])
    return a[tuple(builtins.slice(b, e, k) for b, e, k in zip(starts, stops, steps))]


slice = _prim("slice", _slice_meta, _slice_impl,  # torch's name (shadows the builtin)
              "a[starts[0]:stops[0]:steps[0], ...]: per dim 0 <= start <= stop <= size and "
              "step >= 1 (a view).")


# --- squeeze, unsqueeze, expand ----------------------------------------------------------------
def _squeeze_meta(a, dims):
    _tensor("squeeze", a)
    dims = _ints("squeeze", "dims", dims)
    if list(dims) != sorted(set(dims)) or any(not 0 <= d < a.ndim or a.shape[d] != 1 for d in dims):
        raise PrimContractError(f"prims.squeeze: dims {dims} must be increasing size-1 dims "
                                f"of {list(a.shape)}")
    keep = [d for d in range(a.ndim) if d not in dims]
    return _spec(a, [a.shape[d] for d in keep], [a.stride()[d] for d in keep])


squeeze = _prim("squeeze", _squeeze_meta, lambda a, dims: a.squeeze(tuple(dims)),
                "`a` without the size-1 dims `dims` (increasing; a view).")


def unsqueeze_stride(shape, strides, dim) -> int:
    """The stride eager's unsqueeze gives a new size-1 dim at `dim`."""
    return 1 if dim >= len(shape) else shape[dim] * strides[dim]


def _unsqueeze_meta(a, dim):
    _tensor("unsqueeze", a)
    if type(dim) is not int or not 0 <= dim <= a.ndim:
        raise PrimContractError(f"prims.unsqueeze: dim must be an int in [0, {a.ndim}], "
                                f"got {dim!r}")
    shape, strides = list(a.shape), list(a.stride())
    stride = unsqueeze_stride(shape, strides, dim)
    return _spec(a, shape[:dim] + [1] + shape[dim:], strides[:dim] + [stride] + strides[dim:])


unsqueeze = _prim("unsqueeze", _unsqueeze_meta, lambda a, dim: a.unsqueeze(dim),
                  "`a` with a new size-1 dim at `dim` (a view).")


def expand_strides(shape, strides, target):
    """Eager's expand geometry (inferExpandGeometry): new leading dims and size-1 dims that
    grow get stride 0; a new size-1 dim gets the stride of the dim after it times its size."""
    ndim, offset = len(target), len(target) - len(shape)
    out = [0] * ndim
    for i in range(ndim - 1, -1, -1):
        d = i - offset
        size = shape[d] if d >= 0 else 1
        stride = strides[d] if d >= 0 else (target[i + 1] * out[i + 1] if i < ndim - 1 else 1)
        if size != target[i]:
            if size != 1:
                return None
            stride = 0
        out[i] = stride
    return tuple(out)


def _expand_meta(a, shape):
    _tensor("expand", a)
    shape = _ints("expand", "shape", shape, sizes=True)
    strides = (with_stand_ins(expand_strides, tuple(a.shape), tuple(a.stride()), shape)
               if len(shape) >= a.ndim else None)
    if strides is None or any(s < 0 for s in shape):
        raise PrimContractError(f"prims.expand: {list(a.shape)} cannot expand to {list(shape)}")
    return _spec(a, shape, strides)


expand = _prim("expand", _expand_meta, lambda a, shape: a.expand(tuple(shape)),
               "`a` broadcast to `shape` (eager's expand: grown dims get stride 0; a view).")


# --- diagonal, unfold, as_strided --------------------------------------------------------------
def _diagonal_meta(a, offset, dim1, dim2):
    _tensor("diagonal", a)
    if any(type(v) is not int for v in (offset, dim1, dim2)) or not (
            0 <= dim1 < a.ndim and 0 <= dim2 < a.ndim and dim1 != dim2):
        raise PrimContractError(f"prims.diagonal: bad offset/dims {offset}, {dim1}, {dim2}")
    n1, n2 = a.shape[dim1], a.shape[dim2]
    size = max(min(n1, n2 - offset), 0) if offset >= 0 else max(min(n1 + offset, n2), 0)
    keep = [d for d in range(a.ndim) if d not in (dim1, dim2)]
    return _spec(a, [a.shape[d] for d in keep] + [size],
                 [a.stride()[d] for d in keep] + [a.stride()[dim1] + a.stride()[dim2]])


diagonal = _prim("diagonal", _diagonal_meta,
                 lambda a, offset, dim1, dim2: torch.diagonal(a, offset, dim1, dim2),
                 "The diagonal of dims dim1 and dim2 (distinct, non-negative) at `offset`, as "
                 "the last dim (a view).")


def _unfold_meta(a, dim, size, step):
    _tensor("unfold", a)
    if any(type(v) is not int for v in (dim, size, step)) or not (
            0 <= dim < max(a.ndim, 1) and step > 0
            and 0 <= size <= (a.shape[dim] if a.ndim else 1)):
        raise PrimContractError(f"prims.unfold: bad dim/size/step {dim}, {size}, {step}")
    if a.ndim == 0:
        return _spec(a, (size,), (1,))
    shape, strides = list(a.shape), list(a.stride())
    shape[dim] = (shape[dim] - size) // step + 1
    strides[dim] *= step
    return _spec(a, shape + [size], strides + [a.stride()[dim]])


unfold = _prim("unfold", _unfold_meta, lambda a, dim, size, step: a.unfold(dim, size, step),
               "Windows of `size` elements every `step` along `dim`, as a new last dim (a view).")


def _as_strided_meta(a, shape, strides, storage_offset):
    _tensor("as_strided", a)
    shape, strides = _ints("as_strided", "shape", shape), _ints("as_strided", "strides", strides)
    if len(shape) != len(strides) or any(s < 0 for s in (*shape, *strides)) or not (
            storage_offset is None or (type(storage_offset) is int and storage_offset >= 0)):
        raise PrimContractError(f"prims.as_strided: bad geometry {shape}, {strides}, "
                                f"{storage_offset}")
    return _spec(a, shape, strides)


as_strided = _prim("as_strided", _as_strided_meta,
                   lambda a, shape, strides, storage_offset: torch.as_strided(
                       a, tuple(shape), tuple(strides), storage_offset),
                   "A view of a's storage with the given sizes, strides and storage offset "
                   "(None: a's own); torch checks the storage bounds at run time.")


# --- aliased -------------------------------------------------------------------------------------
def _aliased_meta(a, write):
    if not is_tensor(a) or not is_tensor(write):
        raise PrimContractError("prims.aliased: expected two tensors")
    return TensorSpec.of(a)


aliased = _prim("aliased", _aliased_meta, lambda a, write: a,
                "`a` itself, as it is after `write` (an in-place prim's result on memory `a` "
                "shares): nothing runs; later reads of `a` are ordered after the write.",
                tags=("view", "alias"))


# --- copies --------------------------------------------------------------------------------------
def cat_strides(shape, tensors) -> tuple:
    """Eager's cat layout: channels_last(_3d) when every input suggests it, else row-major."""
    order = _CHANNELS_LAST.get(len(shape))
    if order is not None and all(_suggests(t, order) for t in tensors):
        return dense_strides(shape, order)
    return contiguous_strides(shape)


def _suggests(t, order) -> bool:
    shape, strides = tuple(t.shape), tuple(t.stride())

    def dense_in(o):
        expected = dense_strides(shape, o)
        return all(n <= 1 or s == e for n, s, e in zip(shape, strides, expected))
    return dense_in(order) and not dense_in(None)


def _cat_meta(tensors, dim):
    tensors = tuple(tensors)
    if not tensors or any(not is_tensor(t) for t in tensors):
        raise PrimContractError("prims.cat: expected a non-empty sequence of tensors")
    first = tensors[0]
    if type(dim) is not int or not 0 <= dim < first.ndim:
        raise PrimContractError(f"prims.cat: bad dim {dim!r} for {first.ndim}-d tensors")
    for t in tensors[1:]:
        if (t.dtype != first.dtype or t.device != first.device or t.ndim != first.ndim
                or any(i != dim and n != m for i, (n, m) in enumerate(zip(t.shape, first.shape)))):
            raise PrimContractError("prims.cat: tensors must share dtype, device and every size "
                                    "but dim's")
    shape = list(first.shape)
    shape[dim] = sum(t.shape[dim] for t in tensors)
    return _spec(first, shape, cat_strides(shape, tensors))


cat = _prim("cat", _cat_meta, lambda tensors, dim: torch.cat(tuple(tensors), dim),
            "The tensors joined along `dim` (same dtype, device and other sizes): a new tensor, "
            "channels_last when every input is.", tags=("copy",))


def _flip_meta(a, dims):
    _tensor("flip", a)
    dims = _ints("flip", "dims", dims)
    if list(dims) != sorted(set(dims)) or any(not 0 <= d < a.ndim for d in dims):
        raise PrimContractError(f"prims.flip: dims {dims} must be increasing dims of a "
                                f"{a.ndim}-d tensor")
    return _spec(a, a.shape, elementwise_strides(tuple(a.shape), [tuple(a.stride())]))


flip = _prim("flip", _flip_meta, lambda a, dims: torch.flip(a, tuple(dims)),
             "A copy with the order of `dims` (increasing) reversed, in a's memory order.",
             tags=("copy",))


def _pad_shape(shape, config) -> tuple:
    return tuple(low + high + n + (max(n - 1, 0) * interior if interior else 0)
                 for n, (low, high, interior) in zip(shape, config))


def _pad_meta(a, value, config):
    _tensor("pad", a)
    config = tuple(tuple(c) for c in config)
    symbolic = next((v for c in config for v in c if is_symbolic(v)), None)
    if symbolic is not None:
        needs_value(symbolic, "to pad a tensor (a slice's gradient)")
    if len(config) != a.ndim or any(len(c) != 3 or any(type(v) is not int or v < 0 for v in c)
                                    for c in config):
        raise PrimContractError(f"prims.pad: config must hold one (low, high, interior) of "
                                f"non-negative ints per dim, got {config!r}")
    shape = _pad_shape(a.shape, config)
    return _spec(a, shape, contiguous_strides(shape))


def _pad_impl(a, value, config):
    out = torch.full(_pad_shape(tuple(a.shape), config), value, dtype=a.dtype, device=a.device)
    out[tuple(builtins.slice(low, low + max(n - 1, 0) * (interior + 1) + 1, interior + 1)
              for n, (low, high, interior) in zip(a.shape, config))] = a
    return out


pad = _prim("pad", _pad_meta, _pad_impl,
            "A new contiguous tensor filled with `value` and `a` written at low + i * (interior + "
            "1) per dim, `high` positions after its last element; config is one (low, high, "
            "interior) of non-negative ints per dim (lax.pad without negative padding).",
            tags=("copy",))


# --- derivatives -------------------------------------------------------------------------------
def copied(t, strides=None):
    """A new tensor holding t's values, row-major or with the given dense strides (a new
    tensor written whole, which a rule may then write into)."""
    strides = contiguous_strides(t.shape) if strides is None else tuple(strides)
    new = P.full_strided(tuple(t.shape), strides, 0, dtype=t.dtype, device=t.device)
    return P.copy_to(new, t)


def contiguous(t):
    """`t` laid out row-major: itself, or a copy."""
    return t if tuple(t.stride()) == contiguous_strides(t.shape) else copied(t)


def reshaped(t, shape):
    """`t` with `shape`: a view, of a row-major copy where t's strides allow none."""
    if compute_stride(t.shape, t.stride(), shape) is None:
        t = contiguous(t)
    return P.reshape_view(t, tuple(shape))


def sum_to(t, shape):
    """`t` summed down to `shape`, which broadcasts to t's shape (leading dims and size-1 dims
    that grew): the cotangent of a broadcast."""
    lead = t.ndim - len(shape)
    summed = tuple(d for d in range(t.ndim) if d < lead or shape[d - lead] != t.shape[d])
    if not summed:
        return t
    total = P.sum(t, summed)
    kept = tuple(d - lead for d in range(t.ndim) if d not in summed)
    if len(kept) == len(shape):
        return total
    return P.broadcast_in_dim(total, tuple(shape), kept)


def _inverse(perm) -> tuple:
    inverse = [0] * len(perm)
    for i, d in enumerate(perm):
        inverse[d] = i
    return tuple(inverse)


def _slice_vjp(g, y, a, starts, stops, steps):
    """slice's transpose: g padded with zeros back to a's positions."""
    numel = g.numel()   # x[mask]'s: known at run time (pad writes nothing where it is 0)
    if isinstance(numel, int) and numel == 0:
        return zeros_like(a), None, None, None
    config = tuple((b, n - b - (m - 1) * k - 1, k - 1)
                   for n, m, b, k in zip(a.shape, g.shape, starts, steps))
    return P.pad(g, 0, config), None, None, None


def _pad_vjp(g, y, a, value, config):
    """pad's transpose: the positions `a` was written at."""
    starts = tuple(low for low, _, _ in config)
    stops = tuple(low + max(n - 1, 0) * (i + 1) + (1 if n else 0)
                  for n, (low, _, i) in zip(a.shape, config))
    return P.slice(g, starts, stops, tuple(i + 1 for _, _, i in config)), None, None


def _cat_vjp(g, y, tensors, dim):
    grads, start = [], 0
    for t in tensors:
        stop = start + t.shape[dim]
        grads.append(P.slice(g, tuple(start if d == dim else 0 for d in range(g.ndim)),
                             tuple(stop if d == dim else n for d, n in enumerate(g.shape)),
                             (1,) * g.ndim))
        start = stop
    return grads, None


def _diagonal_vjp(g, y, a, offset, dim1, dim2):
    """g written on the diagonal of zeros (a new tensor written through its diagonal view)."""
    zeros = P.full(tuple(a.shape), 0, dtype=a.dtype, device=a.device)
    written = P.copy_to(P.diagonal(zeros, offset, dim1, dim2), g)
    return P.aliased(zeros, written), None, None, None


def _unfold_vjp(g, y, a, dim, size, step):
    """Each window's elements added back at their positions: window i, element j at
    i * step + j along `dim` (overlapping windows accumulate)."""
    if a.ndim == 0:
        return P.sum(g, (0,)), None, None, None
    windows = g.shape[dim]
    last = g.ndim - 1
    perm = (*range(dim + 1), last, *range(dim + 1, last))
    flat_shape = (*a.shape[:dim], windows * size, *a.shape[dim + 1:])
    source = reshaped(P.permute(g, perm), flat_shape)
    starts = P.broadcast_in_dim(
        P.iota(windows, start=0, step=step, dtype=torch.int64, device=a.device),
        (windows, size), (0,))
    offsets = P.broadcast_in_dim(
        P.iota(size, start=0, step=1, dtype=torch.int64, device=a.device), (windows, size), (1,))
    index = P.reshape_view(P.add(starts, offsets), (windows * size,))
    return P.index_add(zeros_like(a), dim, index, source, 1), None, None, None


def _expand_vjp(g, y, a, shape):
    return sum_to(g, tuple(a.shape)), None


def _squeeze_vjp(g, y, a, dims):
    kept = tuple(d for d in range(a.ndim) if d not in dims)
    return P.broadcast_in_dim(g, tuple(a.shape), kept), None


DERIVATIVES = {
    "reshape_view": lambda g, y, a, shape: (reshaped(g, tuple(a.shape)), None),
    "permute": lambda g, y, a, perm: (P.permute(g, _inverse(perm)), None),
    "slice": _slice_vjp,
    "squeeze": _squeeze_vjp,
    "unsqueeze": lambda g, y, a, dim: (P.squeeze(g, (dim,)), None),
    "expand": _expand_vjp,
    "diagonal": _diagonal_vjp,
    "unfold": _unfold_vjp,
    "as_strided": NotDifferentiable(
        "it addresses storage, which a trace does not know (torch's as_strided_backward "
        "works on the base's storage geometry): not written"),
    "aliased": WRITES_THROUGH_VIEWS,
    "cat": _cat_vjp,
    "flip": lambda g, y, a, dims: (P.flip(g, dims), None),
    "pad": _pad_vjp,
}

VIEWS = (reshape_view, permute, slice, squeeze, unsqueeze, expand, diagonal, unfold, as_strided,
         aliased)
PRIMS = {s.name: s for s in (*VIEWS, cat, flip, pad)}
__all__ = list(PRIMS) + ["compute_stride", "expand_strides", "unsqueeze_stride", "cat_strides"]
