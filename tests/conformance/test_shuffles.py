"""pixel_shuffle, pixel_unshuffle and channel_shuffle against eager: values, shapes, strides
(channels_last in, channels_last out), errors; and through jit."""
import pytest
import torch
import torch.nn.functional as F

import primtrace
from primtrace import refs

R = refs.nn.functional
SHUFFLE_NAMES = ("pixel_shuffle", "pixel_unshuffle", "channel_shuffle")
INPUTS = [
    lambda: torch.randn(2, 8, 4, 6),
    lambda: torch.randn(2, 8, 4, 6).to(memory_format=torch.channels_last),
    lambda: torch.randn(8, 4, 6),
    lambda: torch.randn(2, 3, 8, 4, 6),
    lambda: torch.randn(2, 8, 6, 4).transpose(-1, -2),
    lambda: torch.randn(0, 8, 2, 2),
    lambda: torch.randn(0, 8, 2, 2).to(memory_format=torch.channels_last),
    lambda: torch.randn(2, 4, 1, 1).to(memory_format=torch.channels_last),
    lambda: torch.randint(-5, 5, (2, 8, 4, 6), dtype=torch.int32),
    lambda: torch.randn(2, 8, 4, 6, dtype=torch.bfloat16),
    lambda: torch.randn(8, 4),
    lambda: torch.randn(8),
]
CALLS = [("pixel_shuffle", 2), ("pixel_shuffle", 1), ("pixel_shuffle", 3), ("pixel_shuffle", 0),
         ("pixel_unshuffle", 2), ("pixel_unshuffle", 4), ("pixel_unshuffle", -1),
         ("channel_shuffle", 2), ("channel_shuffle", 4), ("channel_shuffle", 3),
         ("channel_shuffle", 0)]


def outcome(fn, *args):
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001  (the kind is what is compared)
        return type(e)


@pytest.mark.parametrize("name, factor", CALLS)
@pytest.mark.parametrize("make", INPUTS)
def test_matches_eager(make, name, factor):
    x = make()
    expected = outcome(getattr(F, name), x, factor)
    got = outcome(getattr(R, name), x, factor)
    if isinstance(expected, type):
        assert got is expected
        return
    assert got.shape == expected.shape and got.stride() == expected.stride()
    assert got.dtype == expected.dtype and torch.equal(got, expected)
    assert got.untyped_storage().data_ptr() != x.untyped_storage().data_ptr() or x.numel() == 0


@pytest.mark.parametrize("name, factor", [c for c in CALLS if c[1] == 2])
def test_jit(name, factor):
    fn = lambda x: getattr(F, name)(x, factor) * 2  # noqa: E731
    for x in (INPUTS[0](), INPUTS[1]()):
        got, expected = primtrace.jit(fn)(x), fn(x)
        assert got.stride() == expected.stride() and torch.equal(got, expected)
    assert primtrace.explain(fn, INPUTS[0]()).opaque == []


@pytest.mark.parametrize("args", [((2, 1), (3,)), (2, (3, 1)), ((), (2,)), ((2,), (3,)), ((-1,),),
                                  (), ((0,), (1,)), ((2, 3), [1, 3]), (torch.Size([2, 1]), (1, 4)),
                                  ((2, 1), None, (1, 5)), ((3,), (1, 2))])
def test_broadcast_shapes(args):
    """Not a shuffle, but another ref that moves no values: the shape arithmetic of torch's."""
    expected = outcome(torch.broadcast_shapes, *args)
    got = outcome(refs.broadcast_shapes, *args)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("make", INPUTS)
def test_alias_copy(make):
    x = make()
    got, expected = refs.alias_copy(x), torch.alias_copy(x)
    assert got.stride() == expected.stride() and torch.equal(got, expected)
    assert x.numel() == 0 or got.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
