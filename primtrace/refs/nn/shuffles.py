"""torch.nn.functional's pixel_shuffle, pixel_unshuffle and channel_shuffle, written in the
view refs (exported by ``refs.nn.functional``; ``torch.pixel_shuffle`` finds them by name).

Each is a reshape to more dims, a permute and a reshape back: values move, nothing is
computed. The result is a new tensor in the input's layout, as eager's CPU kernels write
it: channels_last in (a 4-d input that is channels_last and not row-major), channels_last
out; otherwise row-major. eager's RuntimeErrors for bad ranks, factors and channel counts.
"""
from __future__ import annotations

import operator

from primtrace import prims
from primtrace.ir.strides import contiguous_strides, dense_strides
from primtrace.refs import views as V
from primtrace.refs.core import exports, ref
from primtrace.refs.shape_args import require_tensor
from primtrace.refs.slicing import row_major_copy

MODULE = "refs.nn.functional"
_CHANNELS_LAST = (0, 2, 3, 1)   # NCHW dims from outermost to innermost in memory


def _channels_last(x) -> bool:
    shape, strides = tuple(x.shape), tuple(x.stride())
    return (x.ndim == 4 and strides != contiguous_strides(shape)
            and strides == dense_strides(shape, _CHANNELS_LAST))


def _result(input, moved, shape):
    """`moved` (a permuted view) as a new tensor of `shape` in input's layout: one copy to
    row-major, then a view; channels_last inputs take a second copy into NHWC order (not
    when empty: eager's empty pixel_shuffle is row-major)."""
    out = V.reshape(row_major_copy(moved), shape)
    if _channels_last(input) and input.numel():
        return V.permute(row_major_copy(V.permute(out, _CHANNELS_LAST)), (0, 3, 1, 2))
    return out


@ref(module=MODULE)
def pixel_shuffle(input, upscale_factor):
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r)."""
    require_tensor("pixel_shuffle", input)
    r = operator.index(upscale_factor)
    if input.ndim < 3:
        raise RuntimeError(f"pixel_shuffle expects input to have at least 3 dimensions, but got "
                           f"input with {input.ndim} dimension(s)")
    if r <= 0:
        raise RuntimeError(f"pixel_shuffle expects a positive upscale_factor, but got {r}")
    *batch, c, h, w = input.shape
    if c % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be divisible "
                           f"by the square of upscale_factor, but input.size(-3)={c} is not "
                           f"divisible by {r * r}")
    k = len(batch)
    split = V.reshape(input, (*batch, c // (r * r), r, r, h, w))
    moved = V.permute(split, (*range(k), k, k + 3, k + 1, k + 4, k + 2))
    return _result(input, moved, (*batch, c // (r * r), h * r, w * r))


@ref(module=MODULE)
def pixel_unshuffle(input, downscale_factor):
    """(*, C, H*r, W*r) -> (*, C*r*r, H, W)."""
    require_tensor("pixel_unshuffle", input)
    r = operator.index(downscale_factor)
    if input.ndim < 3:
        raise RuntimeError(f"pixel_unshuffle expects input to have at least 3 dimensions, but got "
                           f"input with {input.ndim} dimension(s)")
    if r <= 0:
        raise RuntimeError(f"pixel_unshuffle expects a positive downscale_factor, but got {r}")
    *batch, c, h, w = input.shape
    for axis, size, d in (("height", h, -2), ("width", w, -1)):
        if size % r:
            raise RuntimeError(f"pixel_unshuffle expects {axis} to be divisible by "
                               f"downscale_factor, but input.size({d})={size} is not divisible "
                               f"by {r}")
    if input.numel() == 0:   # eager returns a copy of the input, shape unchanged
        return prims.clone(input)
    k = len(batch)
    split = V.reshape(input, (*batch, c, h // r, r, w // r, r))
    moved = V.permute(split, (*range(k), k, k + 2, k + 4, k + 1, k + 3))
    return _result(input, moved, (*batch, c * r * r, h // r, w // r))


@ref(module=MODULE)
def channel_shuffle(input, groups):
    """(N, g*k, *) -> the channels read as a (k, g) matrix instead of (g, k)."""
    require_tensor("channel_shuffle", input)
    g = operator.index(groups)
    if input.ndim <= 2:
        raise RuntimeError(f"channel_shuffle expects input with > 2 dims, but got input with "
                           f"sizes {list(input.shape)}")
    if g <= 0:
        raise RuntimeError(f"Number of groups to divide channels in must be positive. Value of "
                           f"groups:{g}")
    n, c, *rest = input.shape
    if c % g:
        raise RuntimeError(f"Number of channels must be divisible by groups. Got {c} channels and "
                           f"{g} groups.")
    if input.numel() == 0:   # eager returns a copy of the input
        return prims.clone(input)
    split = V.reshape(input, (n, g, c // g, *rest))
    return _result(input, V.transpose(split, 1, 2), tuple(input.shape))


__all__ = exports(globals(), MODULE)
