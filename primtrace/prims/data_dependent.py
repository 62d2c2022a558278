"""Prims whose output size is data: nonzero, the elements a boolean mask selects, unique,
repeat_interleave's index, bincount; and mask_put, the write at a mask's positions.

The size of such a result is known only when the prim runs. Its meta function makes it a
new int proxy (:class:`~primtrace.ir.proxy.SizeProxy`, torch.compile's "unbacked" symbol)
that the shape holds and the prim outputs beside the tensor::

    t3, n2 = prims.mask_select(x, m, 0)  # t3: "cpu f32[n2, 5]", n2: "int"

so the trace is valid for every count (nothing is specialized on it, and one compile serves
every mask), and what later reads the count (a mean's divisor, a view's size) reads n2, the
value the prim returned when it ran. A size is bounded (0 <= n2 <= m.numel()): comparisons
the bounds decide are answered; a mask of no element gives the int 0, no symbol.

Strides stay concrete ints (``primtrace.ir.strides``): the data-dependent size is the
outermost dim of each result, which is row-major. Eager's layout is the same, but for
nonzero of a mask of 2 or more dims, which eager lays out column-major (strides (1, n)):
the prim returns it row-major ((ndim, 1)), the same values.

None of these fuse (their results' sizes vary per call; fused kernels take fixed shapes):
the torch executor runs them, with torch's kernels and eager's runtime errors (a negative
count to repeat_interleave or bincount, a value tensor of the wrong size for mask_put).
"""
from __future__ import annotations

import torch

from primtrace.ir.proxy import SizeProxy, TensorSpec
from primtrace.ir.strides import contiguous_strides
from primtrace.ir.symbol import Symbol, SymbolKind
from primtrace.ir.trace import current_trace
from primtrace.prims.differentiation import INDEX_RESULT, TORCH_RAISES, NotDifferentiable, P
from primtrace.prims.meta import PrimContractError, is_tensor

INDEX_DTYPES = (torch.int32, torch.int64)


def new_size(what: str, lower: int = 0, upper: int | None = None):
    """A size known only when the trace runs, within [lower, upper]: a new SizeProxy while
    tracing; the int itself when the bounds fix it (an empty mask selects 0 elements); in a
    meta function run as an eager contract check, `lower` (its result is not used)."""
    if upper is not None and upper == lower:
        return lower
    trace = current_trace()
    if trace is None:
        return lower
    name = trace.fresh_name("n")
    size = SizeProxy(name, f"{name} ({what})", lower, upper)
    trace.tags.setdefault("size_exprs", {})[size.expr] = size   # (n * 4) // 4 is n again
    return size


def _count_key(trace, t):
    """What the number of nonzero elements of traced tensor `t` is known under: its memory
    (the alias root of a view, the memory's number of writes so far) and its element count,
    so a view of a mask (m.view(3, 4)) shares m's count; else its name."""
    roots = getattr(trace, "alias_root", None)
    numel = t.numel()
    if roots is None or not isinstance(numel, int) or any(
            s == 0 and n > 1 for n, s in zip(t.shape, t.stride())):
        return t.name
    root = roots.get(t.name, t.name)
    return (root, trace._writes.get(root, (0, None))[0], numel)


def known_count(t):
    """The number of nonzero (True) elements of traced tensor `t` when an earlier selection
    by it (or by a view of the same elements) made that a size already (``target[m]`` after
    ``logits[m]``: both have its rows), else None. Sizes of the same count are then the same
    proxy, which elementwise ops and losses need (their operands' shapes must agree). The
    prims check the count they find against it when they run."""
    trace = current_trace()
    if trace is None or getattr(t, "name", None) is None:
        return None
    return trace.tags.get("counts", {}).get(_count_key(trace, t))


def note_count(t, n) -> None:
    """Remember `n` as the number of nonzero elements of traced tensor `t` (known_count)."""
    trace = current_trace()
    if trace is not None and isinstance(n, SizeProxy) and getattr(t, "name", None) is not None:
        trace.tags.setdefault("counts", {})[_count_key(trace, t)] = n


def _spec(shape, dtype, device) -> TensorSpec:
    shape = tuple(shape)
    return TensorSpec(shape, dtype, device, contiguous_strides(shape))


def _prim(name, meta, impl, doc, tags=("indexing",)):
    """A prim of this module: "indexing" (it may raise on values: kept where unused, never
    fused) unless said otherwise."""
    return Symbol(name, kind=SymbolKind.PRIM, meta=meta, impl=impl, module="prims",
                  tags=frozenset({"data_dependent", *tags}), doc=doc)


# --- nonzero -------------------------------------------------------------------------------
def _nonzero_meta(a, as_tuple=False, size=None):
    if not is_tensor(a) or type(as_tuple) is not bool:
        raise PrimContractError("prims.nonzero: a tensor and a bool as_tuple")
    count = size
    if size is None:
        numel = a.numel()
        count = new_size(f"the number of nonzero elements of {getattr(a, 'name', 'a')}", 0,
                         numel if isinstance(numel, int) else None)
    if as_tuple:
        result = tuple(_spec((count,), torch.int64, a.device) for _ in range(max(a.ndim, 1)))
    else:
        result = _spec((count, a.ndim), torch.int64, a.device)
    return (result, None if size is not None else count)


def _nonzero_impl(a, as_tuple=False, size=None):
    if as_tuple:   # eager's columns (views of one column-major tensor, each of stride 1)
        result = torch.nonzero(a, as_tuple=True)
        n = result[0].shape[0]
    else:
        result = torch.nonzero(a)
        n = result.shape[0]
        result = result.contiguous()
    if size is None:
        return result, n
    if n != size:
        raise RuntimeError(f"primtrace: prims.nonzero found {n} elements where the trace "
                           f"assumed {size}")
    return result, None


nonzero = _prim(
    "nonzero", _nonzero_meta, _nonzero_impl,
    "(the int64 indices of a's nonzero elements, one row each, row-major; their count): "
    "torch.nonzero. as_tuple: (one column of indices per dim of a, count). `size`: the count "
    "when the trace knows it already (then the second result is None).")


# --- the elements or rows a boolean mask selects, and writes there -------------------------------
def _selection_shape(name, a, mask, dim):
    if not (is_tensor(a) and is_tensor(mask)) or mask.dtype is not torch.bool:
        raise PrimContractError(f"prims.{name}: a tensor and a bool mask")
    k = mask.ndim
    if type(dim) is not int or k == 0 or not 0 <= dim <= a.ndim - k:
        raise PrimContractError(f"prims.{name}: the mask covers dims [dim, dim + mask.ndim) of a")
    if tuple(mask.shape) != tuple(a.shape[dim:dim + k]) or mask.device != a.device:
        raise PrimContractError(f"prims.{name}: the mask must have a's sizes there, on a's "
                                f"device")
    return tuple(a.shape[:dim]), tuple(a.shape[dim + k:])


def _mask_select_meta(a, mask, dim, size=None):
    before, after = _selection_shape("mask_select", a, mask, dim)
    if size is not None:   # known: the node reads it, and outputs no count
        return (_spec((*before, size, *after), a.dtype, a.device), None)
    numel = mask.numel()
    size = new_size(f"the number of True values of {getattr(mask, 'name', 'the mask')}", 0,
                    numel if isinstance(numel, int) else None)
    return (_spec((*before, size, *after), a.dtype, a.device), size)


def _index(mask, dim):
    return (slice(None),) * dim + (mask,)


def _mask_select_impl(a, mask, dim, size=None):
    t = a[_index(mask, dim)].contiguous()
    n = t.shape[dim]
    if size is None:
        return t, n
    if n != size:
        raise RuntimeError(f"primtrace: prims.mask_select selected {n} elements where the "
                           f"trace assumed {size}")
    return t, None


mask_select = _prim(
    "mask_select", _mask_select_meta, _mask_select_impl,
    "(a[..., mask, ...] with the mask over dims [dim, dim + mask.ndim): those dims replaced by "
    "one of the selected count, row-major; the count). `size`: the count when the trace knows "
    "it already (an earlier selection by the same mask; a VJP's selection of a cotangent by "
    "the forward's mask): then the second result is None.")


def _mask_put_meta(a, mask, dim, values):
    before, after = _selection_shape("mask_put", a, mask, dim)
    if not is_tensor(values) or values.dtype != a.dtype or values.device != a.device:
        raise PrimContractError("prims.mask_put: values must be a tensor of a's dtype and device")
    selected = (*before, None, *after)   # None: the count, which the kernel checks
    if values.ndim > len(selected) or any(
            n is not None and isinstance(v, int) and isinstance(n, int) and v not in (1, n)
            for v, n in zip(reversed(values.shape), reversed(selected))):
        raise PrimContractError("prims.mask_put: values must broadcast to the selection")
    return _spec(tuple(a.shape), a.dtype, a.device)


def _mask_put_impl(a, mask, dim, values):
    out = a.clone(memory_format=torch.contiguous_format)
    out[_index(mask, dim)] = values
    return out


mask_put = _prim(
    "mask_put", _mask_put_meta, _mask_put_impl,
    "A row-major copy of a with `values` (broadcast to the selection; eager's error when they "
    "do not) written at a[..., mask, ...] (mask over dims [dim, dim + mask.ndim)): x[mask] = v "
    "where v has a row per selected element.")


# --- unique --------------------------------------------------------------------------------------
def _unique_meta(a, sorted=True, return_inverse=False, return_counts=False, dim=None,
                 consecutive=False):
    if not is_tensor(a) or not all(type(f) is bool for f in (sorted, return_inverse,
                                                             return_counts, consecutive)):
        raise PrimContractError("prims.unique: a tensor and bool flags")
    if dim is not None and (type(dim) is not int or not 0 <= dim < max(a.ndim, 1)):
        raise PrimContractError("prims.unique: dim is None or a dim of a")
    total = a.numel() if dim is None else (a.shape[dim] if a.ndim else 1)
    upper = total if isinstance(total, int) else None
    n = new_size(f"the number of unique {'rows' if dim is not None else 'values'} of "
                 f"{getattr(a, 'name', 'a')}", min(1, upper) if upper is not None and dim is
                 None else 0, upper)
    if dim is None or a.ndim == 0:
        values = _spec((n,), a.dtype, a.device)
        inverse = _spec(tuple(a.shape), torch.int64, a.device)
    else:
        # eager's layout: the unique slices outermost (strides stay concrete)
        moved = contiguous_strides((n, *a.shape[:dim], *a.shape[dim + 1:]))
        values = TensorSpec((*a.shape[:dim], n, *a.shape[dim + 1:]), a.dtype, a.device,
                            (*moved[1:dim + 1], moved[0], *moved[dim + 1:]))
        inverse = _spec((a.shape[dim],), torch.int64, a.device)
    counts = _spec((n,), torch.int64, a.device)
    return (values, inverse if return_inverse else None, counts if return_counts else None, n)


def _unique_impl(a, sorted=True, return_inverse=False, return_counts=False, dim=None,
                 consecutive=False):
    if consecutive:
        r = torch.unique_consecutive(a, return_inverse=True, return_counts=return_counts,
                                     dim=dim)
    else:
        r = torch.unique(a, sorted=sorted, return_inverse=True, return_counts=return_counts,
                         dim=dim)
    values, inverse = r[0], r[1]
    counts = r[2] if return_counts else None
    return (values, inverse if return_inverse else None, counts,
            values.shape[0 if dim is None or a.ndim == 0 else dim])


unique = _prim(
    "unique", _unique_meta, _unique_impl,
    "(the unique values of a, flattened (dim None) or its unique slices along dim; the "
    "inverse indices or None; the counts or None; the number of unique values): torch.unique, "
    "torch.unique_consecutive when `consecutive`.")


# --- repeat_interleave's index, bincount ---------------------------------------------------------
def _repeat_index_meta(repeats, output_size=None):
    if not is_tensor(repeats) or repeats.ndim != 1 or repeats.dtype not in INDEX_DTYPES:
        raise PrimContractError("prims.repeat_index: a vector of int32 or int64 counts")
    if output_size is not None and type(output_size) is not int:
        raise PrimContractError("prims.repeat_index: output_size is None or an int")
    n = output_size if output_size is not None else new_size(
        f"the sum of the counts {getattr(repeats, 'name', 'repeats')}", 0,
        0 if repeats.shape[0] == 0 else None)
    return (_spec((n,), repeats.dtype, repeats.device), n)


def _repeat_index_impl(repeats, output_size=None):
    t = torch.repeat_interleave(repeats, output_size=output_size)
    return t, t.shape[0]


repeat_index = _prim(
    "repeat_index", _repeat_index_meta, _repeat_index_impl,
    "(i repeated repeats[i] times, for each i in order, in repeats' dtype; its length): "
    "torch.repeat_interleave(repeats). `output_size`: the length, when the caller gives it.")


def bincount_dtype(weights) -> torch.dtype:
    """Eager's result dtype: int64 counts; weights sum in float32 when they are float32,
    else float64."""
    if weights is None:
        return torch.int64
    return torch.float32 if weights.dtype is torch.float32 else torch.float64


def _bincount_meta(a, weights=None, minlength=0):
    if not is_tensor(a) or a.ndim != 1 or a.dtype.is_floating_point or a.dtype.is_complex \
            or a.dtype is torch.bool or type(minlength) is not int or minlength < 0:
        raise PrimContractError("prims.bincount: a vector of integers, and an int minlength >= 0")
    if weights is not None and (not is_tensor(weights) or tuple(weights.shape) != tuple(a.shape)):
        raise PrimContractError("prims.bincount: weights of a's shape")
    n = new_size(f"bincount's length over {getattr(a, 'name', 'a')} (its largest value + 1)",
                 minlength, minlength if a.shape[0] == 0 else None)
    return (_spec((n,), bincount_dtype(weights), a.device), n)


def _bincount_impl(a, weights=None, minlength=0):
    t = torch.bincount(a, weights, minlength)
    return t, t.shape[0]


bincount = _prim(
    "bincount", _bincount_meta, _bincount_impl,
    "(the count of each value 0..max(a) in a, at least minlength of them, or the sum of the "
    "weights of each; its length): torch.bincount (negative values: eager's error, at run "
    "time).")

def _mask_count_meta(mask):
    if not is_tensor(mask) or mask.dtype is not torch.bool:
        raise PrimContractError("prims.mask_count: a bool mask")
    numel = mask.numel()
    return new_size(f"the number of True values of {getattr(mask, 'name', 'the mask')}", 0,
                    numel if isinstance(numel, int) else None)


mask_count = _prim(
    "mask_count", _mask_count_meta, lambda mask: int(torch.count_nonzero(mask)),
    "The number of True values of a bool mask, as an int (the count of the rows x[mask] "
    "selects, where the selection itself is not made: tracer/selections.py).", tags=())

PRIMS = {s.name: s for s in (nonzero, mask_select, mask_put, unique, repeat_index, bincount,
                             mask_count)}
__all__ = list(PRIMS)


# --- derivatives -----------------------------------------------------------------------------
def _mask_broadcast(mask, a, dim):
    """The mask as a bool tensor of a's shape (True on the selected elements)."""
    return P.broadcast_in_dim(mask, tuple(a.shape), tuple(range(dim, dim + mask.ndim)))


def _mask_select_vjp(g, y, a, mask, dim, size=None):
    """The cotangent written back at the selected positions of zeros (index_put into zeros:
    each position is selected once)."""
    zeros = P.full(tuple(a.shape), 0, dtype=g[0].dtype, device=a.device)
    return P.mask_put(zeros, mask, dim, g[0]), None, None, None


def _mask_put_vjp(g, y, a, mask, dim, values):
    """`a` gets g but at the written positions; `values` gets g there (summed where it was
    broadcast)."""
    from primtrace.prims.views import sum_to
    grad_a = P.where(_mask_broadcast(mask, a, dim), 0, g)
    selection = dim + (values.ndim - (a.ndim - mask.ndim + 1))   # the count's dim in values
    size = values.shape[selection] if 0 <= selection < values.ndim else None
    if size is not None and not isinstance(size, SizeProxy) and size == 1:
        size = None
    picked = P.mask_select(g, mask, dim, size)[0]
    return grad_a, None, None, sum_to(picked, tuple(values.shape))


DERIVATIVES = {
    "nonzero": INDEX_RESULT,
    "mask_count": NotDifferentiable("its result is a Python int", stops=True),
    "mask_select": _mask_select_vjp,
    "mask_put": _mask_put_vjp,
    "unique": TORCH_RAISES,
    "repeat_index": INDEX_RESULT,
    "bincount": NotDifferentiable("torch does not differentiate bincount's weights (its result "
                                  "is counts)"),
}
