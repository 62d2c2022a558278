"""Conformance of torch.complex and torch.polar (complex tensors from two real ones)."""
import math

import pytest
import torch

from primtrace import refs
from tests.conformance.binary_helpers import pairs, sample, tensor
from tests.conformance.harness import OpSpec, run_conformance, run_out_conformance

INF, NAN = math.inf, math.nan
PARTS = (torch.float16, torch.float32, torch.float64)


def _samples(spec):
    """Infinities and NaN in either part (joined exactly: no inf * 0), numbers (refused),
    parts of two dtypes, a 0-dim part of another dtype (no promotion either)."""
    yield from pairs([INF, -INF, NAN, 0.0, -0.0, 1.0, INF, 3.0], [0.0, INF, 1.0, NAN, -0.0, -INF, NAN, 4.0],
                     PARTS, "specials")
    x = tensor([1.0, 2.0], torch.float32)
    yield sample(x, 2.0, desc="number second")
    yield sample(2.0, x, desc="number first")
    yield sample(x, tensor(1.0, torch.float64), desc="0-dim float64 second")
    yield sample(tensor(1.0, torch.float64), tensor([1.0, 2.0], torch.float64), desc="0-dim first")


SPECS = [
    OpSpec("complex", refs.complex, torch.complex, arity=2, extra_samples=_samples),
    OpSpec("polar", refs.polar, torch.polar, arity=2, extra_samples=_samples),
]


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_conformance(spec):
    run_conformance(spec)


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_out(spec):
    run_out_conformance(spec)
