"""torch.complex and torch.polar: a complex tensor from two real ones.

Neither promotes: both parts must be float16, float32 or float64 tensors of the same dtype
(no Python numbers), and out= must have the matching complex dtype. The parts are joined by
``prims.complex``, exactly (real + imag * 1j would turn inf * 0 into NaN).
"""
from __future__ import annotations

import torch

from primtrace import dtypes, prims
from primtrace.refs.core import broadcast, broadcast_shapes, exports, is_tensor, ref
from primtrace.refs.out import copy_to_out

PART_DTYPES = (torch.float16, torch.float32, torch.float64)


def _parts_check(name, names):
    """Eager's complex_check_dtype, after the argument parser's TypeError."""
    def check(a, b, out):
        for position, (pname, x) in enumerate(zip(names, (a, b))):
            if not is_tensor(x):
                raise TypeError(f"{name}(): argument '{pname}' (position {position + 1}) must be "
                                f"Tensor, not {type(x).__name__}")
        if a.dtype not in PART_DTYPES or b.dtype not in PART_DTYPES:
            raise RuntimeError(f"Expected both inputs to be Half, Float or Double tensors but got "
                               f"{dtypes.scalar_type_name(a.dtype)} and {dtypes.scalar_type_name(b.dtype)}")
        if a.dtype != b.dtype:
            raise RuntimeError(f"Expected object of scalar type {dtypes.scalar_type_name(a.dtype)} but "
                               f"got scalar type {dtypes.scalar_type_name(b.dtype)} for second argument")
        expected = dtypes.to_complex(a.dtype)
        if out is not None and out.dtype != expected:
            raise RuntimeError(f"Expected object of scalar type {dtypes.scalar_type_name(expected)} but "
                               f"got scalar type {dtypes.scalar_type_name(out.dtype)} for argument 'out'")
    return check


def _join(real, imag, out, inputs):
    shape = broadcast_shapes(tuple(real.shape), tuple(imag.shape))
    result = prims.complex(broadcast(real, shape), broadcast(imag, shape))
    return result if out is None else copy_to_out(out, result, inputs)


_complex_check = _parts_check("complex", ("real", "imag"))
_polar_check = _parts_check("polar", ("abs", "angle"))


@ref
def complex(real, imag, *, out=None):
    """real + imag * 1j, broadcast; float16 parts make complex32."""
    _complex_check(real, imag, out)
    return _join(real, imag, out, (real, imag))


@ref
def polar(abs, angle, *, out=None):
    """abs * cos(angle) + abs * sin(angle) * 1j, each product as eager's kernel computes it
    (abs = inf at angle 0 gives inf + nan j); float16 has no CPU kernel."""
    _polar_check(abs, angle, out)
    shape = broadcast_shapes(tuple(abs.shape), tuple(angle.shape))
    if abs.dtype is torch.float16:
        raise NotImplementedError("\"polar_cpu\" not implemented for 'Half'")
    r, theta = broadcast(abs, shape), broadcast(angle, shape)
    return _join(prims.mul(r, prims.cos(theta)), prims.mul(r, prims.sin(theta)), out, (abs, angle))


__all__ = exports(globals())
