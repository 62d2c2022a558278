"""The conformance samples, run through jit with the Numba fusion executor first.

Every lowering category is covered (integer and float arithmetic, division with its zero
and sign cases, comparisons, min/max with NaN, bitwise and shifts, transcendental math,
rounding, classification, where/clamp, dtype conversions of every pair via mixed-dtype
samples, in-place variants). Each op runs a deterministic slice of its samples so the whole
file compiles a bounded number of kernels (the full sweep: tools in the report).
"""
import itertools

import pytest
import torch

from primtrace.executors.numba import NumbaFusionExecutor
from tests.conformance import test_binary, test_ternary, test_unary
from tests.conformance.harness import check_sample, samples
import primtrace

_EXECUTOR = NumbaFusionExecutor()

UNARY = ["sin", "exp", "log1p", "tanh", "sigmoid", "erf", "rsqrt", "abs", "neg", "sign",
         "signbit", "floor", "round", "isnan", "isinf", "square", "reciprocal", "atan"]
BINARY = ["add", "sub", "mul", "div", "remainder", "fmod", "pow", "atan2", "maximum", "fmin",
          "copysign", "floor_divide", "hypot"]
TERNARY = ["where", "clamp", "lerp", "addcmul"]
INPLACE = ["add_", "div_", "mul_"]


def _specs():
    by_name = {}
    for module in (test_unary, test_binary, test_ternary):
        for spec in module.SPECS:
            by_name.setdefault(spec.name, spec)
    chosen = [by_name[n] for n in UNARY + BINARY + TERNARY if n in by_name]
    inplace = {s.name: s for s in test_binary.INPLACE_SPECS}
    chosen += [inplace[n] for n in INPLACE if n in inplace]
    return chosen


def _slice(spec, count=14):
    """Every k-th sample: a spread over dtypes, layouts, scalars, specials and mixes."""
    all_samples = list(samples(spec))
    step = max(1, len(all_samples) // count)
    return all_samples[::step]


@pytest.mark.parametrize("spec", _specs(), ids=str)
def test_fused_conformance(spec):
    jfn = primtrace.jit(spec.torch_fn, executors=[_EXECUTOR])   # plain torch code, traced
    failures = []
    for sample in _slice(spec):
        problem = check_sample(jfn, spec.torch_fn, sample, spec.rtol_scale)
        if problem:
            failures.append(f"[{sample.desc}] {problem}")
    assert not failures, "\n".join(failures[:5])
