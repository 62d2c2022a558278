"""Bitwise refs: and, or, xor, not, shifts (integers and bool; shifts integers only).

Shifts follow eager's C++: a shift by a negative amount or by at least the bit width gives 0
(left) or the sign fill (right), which the prims implement.
"""
from __future__ import annotations

from primtrace import dtypes, prims
from primtrace.refs.binary import make_binary
from primtrace.refs.checks import input_dtype_out
from primtrace.refs.core import elementwise, exports, ref
from primtrace.refs.promotion import DEFAULT


def bitwise(name, prim):
    """torch.<name>(input, other): a number may be on either side (2 << t is
    bitwise_left_shift(2, t)), not on both."""
    return make_binary(name, prim, DEFAULT, ("input", "other"), inplace=True)


bitwise_and = bitwise("bitwise_and", prims.bitwise_and)
bitwise_or = bitwise("bitwise_or", prims.bitwise_or)
bitwise_xor = bitwise("bitwise_xor", prims.bitwise_xor)
bitwise_left_shift = bitwise("bitwise_left_shift", prims.shift_left)
bitwise_right_shift = bitwise("bitwise_right_shift", prims.shift_right)


@elementwise(DEFAULT, ("input",), checks=[input_dtype_out], inplace=True)
def bitwise_not(input):
    """~input (logical not for bool)."""
    return prims.bitwise_not(input)


@ref
def invert(input):
    """``~input`` (Tensor.__invert__): bitwise_not, but eager's operator checks the dtype first
    and raises TypeError, where torch.bitwise_not(float_tensor) raises NotImplementedError."""
    if not dtypes.is_integer(input.dtype):
        raise TypeError("~ (operator.invert) is only implemented on integer and Boolean-type tensors")
    return bitwise_not(input)


__all__ = exports(globals())
