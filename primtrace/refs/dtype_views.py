"""view_as_real and view_as_complex: a tensor's memory seen with another dtype.

The refs check what eager's view functions check, in its order and with its messages, then
call the prim (``prims.dtype_views``), whose result shares the input's memory.
"""
from __future__ import annotations

import torch

from primtrace import dtypes, prims
from primtrace.refs.core import exports, is_tensor, ref
from primtrace.refs.scalars import type_name

_COMPLEX_OF = (torch.float16, torch.float32, torch.float64)


def _offset(x) -> int:
    """A real tensor's storage offset; a proxy's is 0 (traced tensors are offset-free)."""
    real = isinstance(x, torch.Tensor) and type(x).__name__ != "TensorProxy"
    return x.storage_offset() if real else 0


@ref
def view_as_real(input):
    """A complex tensor as (real, imag) pairs: shape + (2,), strides doubled, the pair dim
    of stride 1 (a view)."""
    if not is_tensor(input):
        raise TypeError(f"view_as_real(): argument 'input' (position 1) must be Tensor, not "
                        f"{type_name(input)}")
    if not input.dtype.is_complex:
        raise RuntimeError("view_as_real is only supported for complex tensors")
    return prims.view_as_real(input)


@ref
def view_as_complex(input):
    """The inverse of view_as_real: a last dim of size 2 and stride 1, every other stride
    and the storage offset even (a view)."""
    if not is_tensor(input):
        raise TypeError(f"view_as_complex(): argument 'input' (position 1) must be Tensor, not "
                        f"{type_name(input)}")
    if input.dtype not in _COMPLEX_OF:
        raise RuntimeError("view_as_complex is only supported for half, float and double "
                           f"tensors, but got a tensor of scalar type: "
                           f"{dtypes.scalar_type_name(input.dtype)}")
    if input.ndim == 0:
        raise RuntimeError("Input tensor must have one or more dimensions")
    if input.shape[-1] != 2:
        raise RuntimeError("Tensor must have a last dimension of size 2")
    if input.stride()[-1] != 1:
        raise RuntimeError("Tensor must have a last dimension with stride 1")
    if any(s % 2 for s in input.stride()[:-1]):
        raise RuntimeError("Tensor must have a stride divisible by 2 for all but last dimension")
    if _offset(input) % 2:
        raise RuntimeError("Tensor must have a storage_offset divisible by 2")
    return prims.view_as_complex(input)


__all__ = exports(globals())
