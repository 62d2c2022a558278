"""Helpers shared by the binary/ternary conformance tests: in-place specs and extra samples.

An in-place op is checked through the ordinary harness by wrapping it: the wrapper runs the
op on a clone of self (the harness hands eager clones of the inputs, so both sides see the
same layout; an expanded self, whose in-place write eager refuses, is tested in
test_errors), requires the op to return that very tensor, and returns it; the harness then
compares the mutated clones of eager and of the ref.
"""
from __future__ import annotations

import dataclasses

import torch

from tests.conformance.harness import OpSpec, SampleInput, make_tensor


def clone_layout(t: torch.Tensor) -> torch.Tensor:
    """A copy with the same sizes and strides (stride-0 dims included)."""
    if not isinstance(t, torch.Tensor):
        return t
    new = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)
    index = tuple(slice(0, 1) if s == 0 and n > 1 else slice(None)
                  for n, s in zip(t.shape, t.stride()))
    new[index].copy_(t[index])
    return new


def inplace(fn):
    """Run `fn` in place on a layout-preserving copy of self; return the mutated copy."""
    def run(self, *args, **kwargs):
        target = self.clone() if hasattr(self, "dtype") else self  # a tensor or a traced proxy
        result = fn(target, *args, **kwargs)
        if result is not target:
            raise AssertionError(f"{getattr(fn, '__name__', fn)} did not return self")
        return target
    run.__name__ = getattr(fn, "__name__", "inplace")
    return run


def inplace_spec(spec: OpSpec, ref_inplace, method_name: str, **changes) -> OpSpec:
    """The spec of `self.<method_name>(...)` derived from the out-of-place spec."""
    def method(self, *args, **kwargs):  # a method call, so that a traced TensorProxy takes it too
        return getattr(self, method_name)(*args, **kwargs)
    method.__name__ = method_name
    fields = dict(name=method_name, ref=inplace(ref_inplace), torch_fn=inplace(method),
                  scalar_args=tuple(p for p in spec.scalar_args if p > 0), supports_out=False,
                  extra_samples=None)
    fields.update(changes)
    return dataclasses.replace(spec, **fields)


def run_out_for(spec: OpSpec):
    """run_out_conformance over the spec's keyword variants (the harness tries {} only)."""
    from tests.conformance.harness import run_out_conformance
    count = 0
    for kwargs in spec.kwargs_variants:
        if kwargs:
            variant = dataclasses.replace(spec, torch_fn=_bind(spec.torch_fn, kwargs),
                                          ref=_bind(spec.ref, kwargs))
        else:
            variant = spec
        count += run_out_conformance(variant)
    return count


def _bind(fn, kwargs):
    def bound(*args, **kw):
        return fn(*args, **kwargs, **kw)
    return bound


def tensor(values, dtype):
    return torch.tensor(values, dtype=dtype)


def sample(*args, desc, **kwargs) -> SampleInput:
    return SampleInput(tuple(args), kwargs, desc)


def pairs(values_a, values_b, dtypes, desc, **kwargs):
    """Samples pairing two value lists elementwise, for each dtype."""
    for dtype in dtypes:
        yield sample(tensor(values_a, dtype), tensor(values_b, dtype),
                     desc=f"{desc} {str(dtype).replace('torch.', '')}", **kwargs)


def random(shape, dtype, seed=0, domain=(-5.0, 5.0)):
    return make_tensor(shape, dtype, seed=seed, domain=domain)
