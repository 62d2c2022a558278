"""Writing results into existing tensors: ``out=`` and in-place variants, as eager does.

Eager checks, in this order: the result dtype must cast safely to the output's dtype; the
output may not overlap itself nor partially overlap an input; a wrongly shaped ``out=`` is
resized (with a warning if it held elements), while an in-place op's shape is fixed.
"""
from __future__ import annotations

import warnings


from primtrace import dtypes, prims
from primtrace.ir.proxy import is_real_tensor

OVERLAP_MESSAGE = ("unsupported operation: some elements of the input tensor and the written-to "
                   "tensor refer to a single memory location. Please clone() the tensor before "
                   "performing the operation.")
INTERNAL_OVERLAP_MESSAGE = ("unsupported operation: more than one element of the written-to "
                            "tensor refers to a single memory location. Please clone() the tensor "
                            "before performing the operation.")


def maybe_convert(t, dtype):
    """convert_element_type only when the dtype changes."""
    if isinstance(t, (tuple, list)):
        return type(t)(maybe_convert(x, dtype) for x in t)
    if t is None or t.dtype == dtype:
        return t
    return prims.convert_element_type(t, dtype)


def check_can_cast(result_dtype, out_dtype):
    if not dtypes.can_cast(result_dtype, out_dtype):
        raise RuntimeError(f"result type {dtypes.scalar_type_name(result_dtype)} can't be cast to the "
                           f"desired output type {dtypes.scalar_type_name(out_dtype)}")


def _non_overlapping_and_dense(t) -> bool:
    """(A size known only at run time, x[mask]'s rows, counts as a size > 1.)"""
    from primtrace.ir.strides import with_stand_ins
    return with_stand_ins(_dense_layout, tuple(t.shape), tuple(t.stride()))


def _dense_layout(shape, strides) -> bool:
    dims = sorted((s, n) for n, s in zip(shape, strides) if n != 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


def _byte_range(t):
    extent = sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1
    start = t.data_ptr()
    return start, start + extent * t.element_size()


def check_overlap(out, inputs):
    """Raise eager's errors for an output that overlaps itself or partially an input.

    An expanded output (a stride 0) is refused on proxies too: their strides are the
    tensors' own (part of the cache key). Overlap with an input needs addresses, which
    proxies do not have."""
    numel = out.numel()
    if isinstance(numel, int) and numel == 0:
        return
    if not _non_overlapping_and_dense(out):
        if any(s == 0 and (not isinstance(n, int) or n > 1)
               for n, s in zip(out.shape, out.stride())):
            raise RuntimeError(INTERNAL_OVERLAP_MESSAGE)
        return
    if not is_real_tensor(out):
        return
    out_range = _byte_range(out)
    for t in inputs:
        if not is_real_tensor(t) or t is out or t.numel() == 0:
            continue
        if t.untyped_storage().data_ptr() != out.untyped_storage().data_ptr():
            continue
        if not _non_overlapping_and_dense(t):
            continue
        t_range = _byte_range(t)
        if t_range == out_range and tuple(t.stride()) == tuple(out.stride()):
            continue  # full overlap: in-place (the same range in another order is partial)
        if t_range[0] < out_range[1] and out_range[0] < t_range[1]:
            raise RuntimeError(OVERLAP_MESSAGE)


def copy_to_out(out, result, inputs=()):
    """The out= epilogue of a ref: cast check, overlap check, resize, convert, copy."""
    if not hasattr(out, "dtype"):
        raise TypeError(f"argument 'out' must be Tensor, not {type(out).__name__}")
    check_can_cast(result.dtype, out.dtype)
    check_overlap(out, inputs)
    if tuple(out.shape) != tuple(result.shape):
        if out.numel() != 0:
            warnings.warn(
                f"An output with one or more elements was resized since it had shape "
                f"{list(out.shape)}, which does not match the required output shape "
                f"{list(result.shape)}. This behavior is deprecated, and in a future PyTorch "
                f"release outputs will not be resized unless they have zero elements. You can "
                f"explicitly reuse an out tensor t by resizing it, inplace, to zero elements "
                f"with t.resize_(0).", UserWarning, stacklevel=4)
        out = prims.resize(out, tuple(result.shape))
    return prims.copy_to(out, maybe_convert(result, out.dtype))


def copy_to_self(self, result, inputs=()):
    """The epilogue of an in-place variant (add_): same checks, but the shape is fixed."""
    check_can_cast(result.dtype, self.dtype)
    if tuple(self.shape) != tuple(result.shape):
        raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast "
                           f"shape {list(result.shape)}")
    check_overlap(self, inputs)
    return prims.copy_to(self, maybe_convert(result, self.dtype))


def write_where(self, mask, fill, name, inputs=()):
    """The epilogue of an in-place fill (masked_fill_, index_fill_): `fill` written into self
    where `mask` (self's shape) is True, and only there. An expanded self (a stride-0 dim of
    size > 1) is written as eager does, with its deprecation warning: each memory location
    stands for several elements and takes `fill` where any of them is masked."""
    shape = tuple(self.shape)
    expanded = tuple(d for d, (n, s) in enumerate(zip(shape, self.stride())) if s == 0 and n > 1)
    if not expanded:
        check_overlap(self, inputs)
        return prims.copy_to(self, prims.where(mask, fill, self))
    warnings.warn(f"Use of {name} on expanded tensors is deprecated. Please clone() the tensor "
                  "before performing this operation. This also applies to advanced indexing "
                  "e.g. tensor[mask] = scalar", UserWarning, stacklevel=4)
    stops = [1 if d in expanded else n for d, n in enumerate(shape)]
    target = prims.slice(self, [0] * len(shape), stops, [1] * len(shape))
    check_overlap(target, [t for t in inputs if t is not self])
    kept = tuple(d for d in range(len(shape)) if d not in expanded)
    any_masked = mask if mask.ndim == 0 else prims.broadcast_in_dim(   # 0-dim: one for all
        prims.amax(mask, expanded), tuple(target.shape), kept)
    prims.copy_to(target, prims.where(any_masked, fill, target))
    return self
