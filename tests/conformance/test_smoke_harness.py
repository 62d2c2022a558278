"""The harness itself must be able to fail: wrong implementations are caught."""
import pytest
import torch

from primtrace import refs
from tests.conformance.harness import OpSpec, run_conformance, run_out_conformance, values_match

ADD = OpSpec("add", refs.add, torch.add, arity=2, scalar_args=(1,),
             kwargs_variants=({}, {"alpha": 2}, {"alpha": 0.3}))


def test_add_conforms():
    assert run_conformance(ADD) > 100
    assert run_out_conformance(ADD) > 10


def _mutating_add(a, b, **kw):
    result = torch.add(a, b, **kw)
    if isinstance(a, torch.Tensor) and a.shape == result.shape and a.dtype == result.dtype:
        a.copy_(result)
    return result


@pytest.mark.parametrize("wrong", [
    lambda a, b, **kw: torch.sub(a, b),                              # wrong values
    lambda a, b, **kw: torch.add(a, b, **kw).to(torch.complex128),   # wrong dtype
    lambda a, b, **kw: torch.add(a, b, **kw).reshape(-1),            # wrong shape
    _mutating_add,                                                   # mutates an input
    lambda a, b, **kw: torch.add(a, b),                              # ignores alpha
])
def test_harness_catches_mistakes(wrong):
    with pytest.raises(AssertionError):
        run_conformance(ADD, wrong)


def test_float_rule_accepts_more_accurate_results():
    exact = torch.tensor([1 / 3], dtype=torch.float64)
    eager = torch.tensor([0.3330], dtype=torch.float16)       # 1 ulp-ish off
    better = exact.to(torch.float16)
    worse = torch.tensor([0.3300], dtype=torch.float16)
    assert values_match(better, eager, exact) is None
    assert values_match(worse, eager, exact) is not None
