"""Helpers shared by the creation and conversion conformance tests.

The ``with_*`` wrappers are jit-friendly (tests/tracer/test_jit_conformance.py jits the
function they wrap and re-applies the wrapper): each takes one callable and returns a
``run`` that closes over it only.

Memory layouts are compared by ``check_layouts``, on the very same input objects: the
harness hands eager clones, and a clone of a sliced or expanded tensor is contiguous.
"""
from __future__ import annotations

import torch

from tests.conformance.harness import SampleInput


def layout(t: torch.Tensor) -> torch.Tensor:
    """The strides of t's dimensions longer than 1 (the others do not address memory)."""
    if t.numel() == 0:
        return torch.zeros(0, dtype=torch.int64)
    return torch.tensor([s if n > 1 else 0 for n, s in zip(t.shape, t.stride())],
                        dtype=torch.int64)


LAYOUT_INPUTS = {
    "contiguous": lambda: torch.randn(3, 4),
    "transposed": lambda: torch.randn(4, 3).t(),
    "sliced": lambda: torch.randn(3, 8)[:, ::2],
    "sliced transposed": lambda: torch.randn(8, 3)[::2].t(),
    "expanded": lambda: torch.randn(1, 4).expand(3, 4),
    "size-1 dim": lambda: torch.randn(1, 3).t(),
    "0-dim": lambda: torch.tensor(1.5),
    "empty": lambda: torch.randn(0, 3).t(),
    "channels_last": lambda: torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last),
    "permuted 3-d": lambda: torch.randn(4, 2, 3).permute(1, 2, 0),
}


def check_layouts(eager_fn, ref_fn, jit_fn, x) -> str | None:
    """The three give the same layout (strides of the dimensions longer than 1) on x and
    return x itself in the same cases; None if so."""
    expected = eager_fn(x)
    for name, fn in (("ref", ref_fn), ("jit", jit_fn)):
        got = fn(x)
        if (got is x) != (expected is x):
            return f"{name}: returns its input: {got is x}, eager: {expected is x}"
        if not torch.equal(layout(got), layout(expected)):
            return f"{name}: strides {got.stride()}, eager {expected.stride()}"
    return None


def with_values_erased(fn):
    """fn's result with its values replaced by zeros (same dtype, shape, strides): for empty,
    whose values are undefined."""
    def run(*args, **kwargs):
        return torch.zeros_like(fn(*args, **kwargs))
    return run


def with_float64_default(fn):
    """fn run with torch.set_default_dtype(torch.float64)."""
    def run(*args, **kwargs):
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            return fn(*args, **kwargs)
        finally:
            torch.set_default_dtype(previous)
    return run


def calls(*cases):
    """extra_samples made of (args, kwargs) pairs."""
    def generate(spec):
        for args, kwargs in cases:
            yield SampleInput(tuple(args), dict(kwargs), f"{spec.name}{tuple(args)!r} {kwargs!r}")
    return generate


def method(name):
    """x.<name>(*args, **kwargs) as a function (what the tracer sees as a Tensor method)."""
    def call(x, *args, **kwargs):
        return getattr(x, name)(*args, **kwargs)
    call.__name__ = call.__qualname__ = name
    return call
