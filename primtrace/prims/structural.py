"""Structural prims: dtype conversion, broadcasting, creation, selection and copies."""
from __future__ import annotations

import torch

from primtrace import dtypes
from primtrace.ir.proxy import NumberSpec, TensorProxy, TensorSpec, Unknown
from primtrace.ir.strides import contiguous_strides
from primtrace.ir.symbol import Symbol, SymbolKind
from primtrace.prims.differentiation import CREATION, NotDifferentiable, P
from primtrace.prims.meta import (ANY_CATEGORY, PrimContractError, elementwise_meta,
                                  elementwise_strides, is_number, is_tensor)


def _prim(name, meta, impl, tags=("structural",), doc=None):
    return Symbol(name, kind=SymbolKind.PRIM, meta=meta, impl=impl, tags=frozenset(tags),
                  module="prims", doc=doc)


# --- convert_element_type --------------------------------------------------------------
def _convert_meta(a, dtype):
    if not is_tensor(a):
        raise PrimContractError("prims.convert_element_type: expected a tensor")
    if not isinstance(dtype, torch.dtype):
        raise PrimContractError(f"prims.convert_element_type: expected a dtype, got {dtype!r}")
    return TensorSpec(tuple(a.shape), dtype, a.device, _dense_strides_like(a))


def _dense_strides_like(a) -> tuple:
    """A dense layout with `a`'s memory order (what .to(dtype) produces)."""
    return elementwise_strides(tuple(a.shape), [tuple(a.stride())])


convert_element_type = _prim(
    "convert_element_type", _convert_meta, lambda a, dtype: a.to(dtype),
    tags=("elementwise", "convert"),
    doc="Convert to `dtype` (C-style casts; float -> int truncates).")


# --- broadcast_in_dim ------------------------------------------------------------------
def _broadcast_meta(a, shape, broadcast_dimensions):
    shape, dims = tuple(shape), tuple(broadcast_dimensions)
    if len(dims) != a.ndim or list(dims) != sorted(set(dims)) or any(d >= len(shape) for d in dims):
        raise PrimContractError(
            f"prims.broadcast_in_dim: bad broadcast_dimensions {dims} for {a.ndim}-d input")
    strides = [0] * len(shape)
    for i, d in enumerate(dims):
        m, n = a.shape[i], shape[d]
        if m is n or (type(m) is int and type(n) is int and m == n):
            strides[d] = a.stride()[i]
        elif type(m) is int and m == 1:   # broadcast to a symbolic size: no read of it
            pass
        elif m == n:
            strides[d] = a.stride()[i]
        elif a.shape[i] != 1:
            raise PrimContractError(
                f"prims.broadcast_in_dim: input dim {i} of size {a.shape[i]} "
                f"cannot broadcast to size {shape[d]}")
    return TensorSpec(shape, a.dtype, a.device, tuple(strides))


def _broadcast_impl(a, shape, broadcast_dimensions):
    if tuple(broadcast_dimensions) == tuple(range(a.ndim)) and a.ndim == len(shape):
        return a.expand(shape)   # sizes only: one call (attention's cos and sin, per head)
    index = [None] * len(shape)
    for d in broadcast_dimensions:
        index[d] = slice(None)
    return a[tuple(index)].expand(shape)


broadcast_in_dim = _prim(
    "broadcast_in_dim", _broadcast_meta, _broadcast_impl, tags=("elementwise", "view"),
    doc="View `a` with `shape`: input dim i maps to output dim broadcast_dimensions[i]; "
        "size-1 and new dims get stride 0 (nothing is copied).")


# --- creation --------------------------------------------------------------------------
def _full_meta(shape, fill_value, *, dtype, device):
    if not is_number(fill_value):
        raise PrimContractError("prims.full: fill_value must be a number")
    shape = tuple(shape)
    if any(s < 0 for s in shape):
        raise RuntimeError(f"Trying to create tensor with negative dimension: {list(shape)}")
    return TensorSpec(shape, dtype, torch.device(device), contiguous_strides(shape))


full = _prim("full", _full_meta,
             lambda shape, fill_value, *, dtype, device: torch.full(
                 tuple(shape), fill_value, dtype=dtype, device=device),
             tags=("elementwise", "creation"), doc="A new tensor of `shape` filled with a number.")


def _iota_meta(length, *, start, step, dtype, device):
    return TensorSpec((length,), dtype, torch.device(device), (1,))


iota = _prim("iota", _iota_meta,
             lambda length, *, start, step, dtype, device: torch.arange(
                 start, start + length * step, step, dtype=dtype, device=device)[:length],
             tags=("creation",), doc="start, start + step, ... (`length` values).")


# --- where -----------------------------------------------------------------------------
def _where_meta(pred, a, b):
    if not is_tensor(pred) or pred.dtype is not torch.bool:
        raise PrimContractError("prims.where: the predicate must be a bool tensor")
    return elementwise_meta("where", (pred, a, b), ANY_CATEGORY, typed=(a, b))


where = _prim("where", _where_meta, torch.where, tags=("elementwise",),
              doc="pred ? a : b; `a` and `b` share a dtype, the predicate is bool.")


# --- copies ------------------------------------------------------------------------------
def _copy_to_meta(dst, src):
    if not is_tensor(dst) or not is_tensor(src):
        raise PrimContractError("prims.copy_to: expected tensors")
    if src.dtype != dst.dtype or (src.ndim and tuple(src.shape) != tuple(dst.shape)):
        raise PrimContractError(
            f"prims.copy_to: src {src.dtype}{list(src.shape)} does not match "
            f"dst {dst.dtype}{list(dst.shape)}")
    return TensorSpec(tuple(dst.shape), dst.dtype, dst.device, tuple(dst.stride()))


def _copy_to_impl(dst, src):
    if src.ndim == 0 and any(s == 0 and n > 1 for n, s in zip(dst.shape, dst.stride())):
        # one value into an expanded dst (fill_ writes one): each memory location once,
        # through a view without the repeated elements torch's copy_ refuses
        sizes = [1 if s == 0 else n for n, s in zip(dst.shape, dst.stride())]
        dst.as_strided(sizes, dst.stride()).copy_(src)
        return dst
    return dst.copy_(src)


copy_to = _prim("copy_to", _copy_to_meta, _copy_to_impl, tags=("inplace",),
                doc="Write `src` into `dst` (same dtype, same or 0-dim shape); returns dst. The "
                    "ref checks overlap: a 0-dim src may fill an expanded dst.")


def _resize_meta(a, shape):
    shape = tuple(shape)
    return TensorSpec(shape, a.dtype, a.device, contiguous_strides(shape))


resize = _prim("resize", _resize_meta, lambda a, shape: a.resize_(tuple(shape)),
               tags=("inplace",), doc="Resize an out= tensor to `shape` (its values are undefined).")


def _polygamma_meta(a, n):
    if not isinstance(n, int) or n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    return elementwise_meta("polygamma", (a,), frozenset({dtypes.Category.FLOATING}))


polygamma = _prim("polygamma", _polygamma_meta, lambda a, n: torch.polygamma(n, a),
                  tags=("elementwise",), doc="The n-th derivative of digamma; n is a constant.")


def _complex_meta(real, imag):
    if not (is_tensor(real) and is_tensor(imag)):
        raise PrimContractError("prims.complex: expected two tensors")
    spec = elementwise_meta("complex", (real, imag), frozenset({dtypes.Category.FLOATING}))
    if spec.dtype is torch.bfloat16:
        raise NotImplementedError("prims.complex: there is no bfloat16 complex dtype")
    return TensorSpec(spec.shape, dtypes.to_complex(spec.dtype), spec.device, spec.strides)


complex_ = _prim("complex", _complex_meta, torch.complex, tags=("elementwise",),
                 doc="real + imag * 1j from two float tensors, exactly (no inf * 0 = nan).")


def _full_like_meta(a, fill_value, *, dtype):
    if not is_tensor(a) or not is_number(fill_value):
        raise PrimContractError("prims.full_like: expected a tensor and a number")
    return TensorSpec(tuple(a.shape), dtype, a.device, _dense_strides_like(a))


def _full_like_impl(a, fill_value, *, dtype):
    return torch.empty_strided(tuple(a.shape), _dense_strides_like(a), dtype=dtype,
                               device=a.device).fill_(fill_value)


full_like = _prim("full_like", _full_like_meta, _full_like_impl, tags=("elementwise", "creation"),
                  doc="A new tensor with a's shape and memory order, filled with a number "
                      "(a's values are not read).")


def _full_strided_meta(shape, strides, fill_value, *, dtype, device):
    if not is_number(fill_value) or len(tuple(strides)) != len(tuple(shape)):
        raise PrimContractError("prims.full_strided: expected a number and one stride per dimension")
    return TensorSpec(tuple(shape), dtype, torch.device(device), tuple(strides))


full_strided = _prim(
    "full_strided", _full_strided_meta,
    lambda shape, strides, fill_value, *, dtype, device: torch.empty_strided(
        tuple(shape), tuple(strides), dtype=dtype, device=device).fill_(fill_value),
    tags=("elementwise", "creation"),
    doc="A new tensor of `shape` with the given (dense) strides, filled with a number: the "
        "destination of a copy into a memory format (channels_last).")


def _constant_meta(value):
    if not isinstance(value, torch.Tensor) or isinstance(value, TensorProxy):
        raise PrimContractError("prims.constant: expected a real tensor")
    return TensorSpec(tuple(value.shape), value.dtype, value.device, tuple(value.stride()))


constant = _prim(
    "constant", _constant_meta, lambda value: value, tags=("structural", "constant"),
    doc="A tensor computed when the trace was compiled (constant folding: "
        "tracer/constant_folding.py), the same object on every call: nothing may write it.")


# --- item -------------------------------------------------------------------------------------
_PYTHON_TYPES = {dtypes.Category.BOOL: bool, dtypes.Category.INTEGER: int,
                 dtypes.Category.FLOATING: float, dtypes.Category.COMPLEX: complex}


def _item_meta(a):
    if not is_tensor(a):
        raise PrimContractError("prims.item: expected a tensor")
    if a.numel() != 1:
        raise RuntimeError(f"a Tensor with {a.numel()} elements cannot be converted to Scalar")
    return NumberSpec(_PYTHON_TYPES[dtypes.category(a.dtype)], Unknown("tensor.item()"))


item = _prim("item", _item_meta, torch.Tensor.item, tags=(),
             doc="The value of a one-element tensor as a Python number, read when the trace "
                 "runs (a traced number whose value is unknown until then).")


PRIMS = {s.name: s for s in (convert_element_type, broadcast_in_dim, full, iota, where,
                             copy_to, resize, polygamma, complex_, full_like, full_strided, item,
                             constant)}


# --- derivatives -------------------------------------------------------------------------------
def _convert_vjp(g, y, a, dtype):
    """The cotangent converted back; complex -> real drops the imaginary part as torch does."""
    if g.dtype.is_complex and not a.dtype.is_complex:
        g = P.real(g)
    return P.convert_element_type(g, a.dtype), None


def _broadcast_vjp(g, y, a, shape, broadcast_dimensions):
    """The sum over the dims `a` was broadcast along (new dims, and size-1 dims that grew),
    viewed back with a's size-1 dims."""
    kept = dict(zip(broadcast_dimensions, range(a.ndim)))
    summed = tuple(d for d in range(len(shape))
                   if d not in kept or a.shape[kept[d]] != shape[d])
    if not summed:
        return (g, None, None)
    total = P.sum(g, summed)
    remaining = tuple(kept[d] for d in range(len(shape)) if d not in summed)
    if len(remaining) == a.ndim:
        return total, None, None
    return P.broadcast_in_dim(total, tuple(a.shape), remaining), None, None


def _where_vjp(g, y, pred, a, b):
    return None, P.where(pred, g, 0), P.where(pred, 0, g)


def _complex_vjp(g, y, real, imag):
    return P.real(g), P.imag(g)


DERIVATIVES = {
    "convert_element_type": _convert_vjp,
    "broadcast_in_dim": _broadcast_vjp,
    "where": _where_vjp,
    "polygamma": lambda g, y, a, n: (P.mul(g, P.polygamma(a, n + 1)), None),
    "complex": _complex_vjp,
    "full": CREATION, "iota": CREATION, "full_like": CREATION, "full_strided": CREATION,
    "constant": CREATION,
    # copy_to's result is the written tensor, whose values are src's (dst's are overwritten);
    # a later read of the memory dst views goes through prims.aliased (views.py)
    "copy_to": lambda g, y, dst, src: (None, g),
    "resize": NotDifferentiable("it resizes an out= tensor, whose values are then undefined"),
    "item": NotDifferentiable("its result is a Python number, read when the trace runs",
                              stops=True),
}
