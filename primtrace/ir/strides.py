"""Strides of dense layouts: the one place that computes them (meta functions, proxies,
creation refs and memory formats all do)."""
from __future__ import annotations


def dense_strides(shape, order=None) -> tuple[int, ...]:
    """Strides of a dense tensor of `shape` whose dimensions lie in memory in `order`
    (outermost first; default: row-major). Size-0 and size-1 dims count as 1."""
    ndim = len(shape)
    strides, acc = [0] * ndim, 1
    for d in reversed(range(ndim) if order is None else order):
        strides[d] = acc
        acc *= max(shape[d], 1)
    return tuple(strides)


def contiguous_strides(shape) -> tuple[int, ...]:
    return dense_strides(shape)


def matches_dense(shape, strides, expected) -> bool:
    """Whether `strides` are `expected` wherever it matters (dims of size > 1)."""
    return all(size <= 1 or s == e for size, s, e in zip(shape, strides, expected))
