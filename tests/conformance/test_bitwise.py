"""Conformance of the bitwise refs, including the Python operators' semantics (&, |, ^, ~,
<<, >> and their reflected forms map to these refs)."""
import operator

import pytest
import torch

from primtrace import refs
from tests.conformance.binary_helpers import inplace_spec, run_out_for, sample, tensor
from tests.conformance.harness import OpSpec, run_conformance

INTS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _shift_samples(spec):
    """Shifts by negative amounts or by at least the bit width: 0 (left), the sign fill
    (right); shifting into the sign bit; number operands on either side."""
    for dtype in INTS:
        info = torch.iinfo(dtype)
        x = tensor([1, -1 if info.min < 0 else 255, info.min, info.max, 5, 3], torch.int64).to(dtype)
        bits = info.bits
        amounts = tensor([bits - 1, bits, bits + 1, -1, 0, 100], torch.int64).to(dtype)
        yield sample(x, amounts, desc=f"{dtype} shift amounts")
        for amount in (bits - 1, bits, -1, 3, True):
            yield sample(x, amount, desc=f"{dtype} by {amount!r}")
        yield sample(3, x.abs() % bits if dtype is not torch.uint8 else x % bits, desc=f"3 by {dtype}")
    yield sample(tensor([1, 2], torch.int8), tensor([7, 100], torch.int64), desc="int8 by int64 (promotes)")
    yield sample(tensor([1, 2], torch.int8), 1.5, desc="by a float")


def _bit_samples(spec):
    for dtype in INTS + (torch.bool,):
        x = torch.arange(-6, 6).to(dtype) if dtype is not torch.bool else torch.tensor([True, False] * 6)
        yield sample(x, x.flip(0), desc=f"{dtype} pattern")
        yield sample(x, True, desc=f"{dtype} & True")
        yield sample(-1, x, desc=f"-1 with {dtype}")


def _operator(op):
    def run(a, b):
        return op(a, b)
    run.__name__ = op.__name__
    return run


def _spec(name, ref, fn, **kw):
    kw.setdefault("arity", 2)
    return OpSpec(name, ref, fn, **kw)


SPECS = [
    _spec("bitwise_and", refs.bitwise_and, torch.bitwise_and, scalar_args=(0, 1), extra_samples=_bit_samples),
    _spec("bitwise_or", refs.bitwise_or, torch.bitwise_or, scalar_args=(0, 1), extra_samples=_bit_samples),
    _spec("bitwise_xor", refs.bitwise_xor, torch.bitwise_xor, scalar_args=(0, 1), extra_samples=_bit_samples),
    _spec("bitwise_left_shift", refs.bitwise_left_shift, torch.bitwise_left_shift, scalar_args=(0, 1),
          extra_samples=_shift_samples),
    _spec("bitwise_right_shift", refs.bitwise_right_shift, torch.bitwise_right_shift, scalar_args=(0, 1),
          extra_samples=_shift_samples),
    _spec("bitwise_not", refs.bitwise_not, torch.bitwise_not, arity=1),
]
# The Python operators are the same ops: t << 2, 2 << t (__rlshift__), t & True ...
OPERATOR_SPECS = [
    _spec(f"operator.{op.__name__}", ref, _operator(op), scalar_args=(0, 1), supports_out=False,
          dtypes=(torch.bool, torch.uint8, torch.int32, torch.float32), extra_samples=extra)
    for op, ref, extra in ((operator.and_, refs.bitwise_and, _bit_samples), (operator.or_, refs.bitwise_or, None),
                           (operator.xor, refs.bitwise_xor, None),
                           (operator.lshift, refs.bitwise_left_shift, _shift_samples),
                           (operator.rshift, refs.bitwise_right_shift, _shift_samples))
] + [_spec("operator.invert", refs.bitwise_not, operator.invert, arity=1, supports_out=False,
           dtypes=(torch.bool, torch.int8))]  # ~float is Tensor.__invert__'s own TypeError
_BY_NAME = {s.name: s for s in SPECS}
INPLACE_SPECS = [inplace_spec(_BY_NAME[n], getattr(refs, n + "_"), n + "_") for n in _BY_NAME]


@pytest.mark.parametrize("spec", SPECS + OPERATOR_SPECS, ids=str)
def test_conformance(spec):
    run_conformance(spec)


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_out(spec):
    run_out_for(spec)


@pytest.mark.parametrize("spec", INPLACE_SPECS, ids=str)
def test_inplace(spec):
    run_conformance(spec)
