"""Bitwise refs: and, or, xor, not, shifts (integers and bool; shifts integers only).

Shifts follow eager's C++: a shift by a negative amount or by at least the bit width gives 0
(left) or the sign fill (right), which the prims implement.
"""
from __future__ import annotations

from primtrace import dtypes, prims
from primtrace.refs.binary import make_binary
from primtrace.refs.binary_checks import check_out_dtype, checked
from primtrace.refs.core import elementwise, inplace_variant, is_tensor, ref
from primtrace.refs.promotion import DEFAULT

__all__ = ["bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift",
           "bitwise_right_shift", "bitwise_not", "bitwise_and_", "bitwise_or_", "bitwise_xor_",
           "bitwise_left_shift_", "bitwise_right_shift_", "bitwise_not_", "invert"]

# name, prim; a number may be on either side (2 << t is bitwise_left_shift(2, t))
_TABLE = [
    ("bitwise_and", prims.bitwise_and), ("bitwise_or", prims.bitwise_or),
    ("bitwise_xor", prims.bitwise_xor), ("bitwise_left_shift", prims.shift_left),
    ("bitwise_right_shift", prims.shift_right),
]
for _name, _prim in _TABLE:
    globals()[_name] = make_binary(_name, _prim, DEFAULT, ("input", "other"))
    globals()[_name + "_"] = inplace_variant(globals()[_name])


def _same_dtype_out(input, out=None):
    """A unary kernel's out= must have the input's dtype exactly."""
    if is_tensor(input):
        check_out_dtype(out, input.dtype)


@checked(_same_dtype_out)
@elementwise(DEFAULT, ("input",))
def bitwise_not(input):
    """~input (logical not for bool)."""
    return prims.bitwise_not(input)


bitwise_not_ = inplace_variant(bitwise_not)


@ref
def invert(input):
    """``~input`` (Tensor.__invert__): bitwise_not, but eager's operator checks the dtype first
    and raises TypeError, where torch.bitwise_not(float_tensor) raises NotImplementedError."""
    if not dtypes.is_integer(input.dtype):
        raise TypeError("~ (operator.invert) is only implemented on integer and Boolean-type tensors")
    return bitwise_not(input)
