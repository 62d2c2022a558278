"""torch.special.softmax and log_softmax: F's refs under torch.special's signature (dim
required; softmax takes dtype third, log_softmax only by keyword) against eager, and what
the tracer finds for them.

Not here: log_softmax(dtype=torch.float16) over the last dim, where eager's kernel rounds
max + log(sum) to float16 before subtracting it and F.log_softmax's ref (which these call)
differs from it by a few float16 ulps (refs/nn/softmax_norms.py).
"""
import pytest
import torch

import primtrace
from primtrace import refs
from primtrace.tracer.mapping import find_ref
from tests.conformance.harness import OpSpec, run_conformance

VARIANTS = ({}, {"dtype": torch.float64}, {"dtype": torch.int64})
SPECS = [
    OpSpec(f"special.{name}(dim={dim})", getattr(refs.special, name),
           getattr(torch.special, name), fixed_args={1: dim}, supports_out=False,
           kwargs_variants=VARIANTS + (({"dtype": torch.float16},) if name == "softmax" else ()))
    for name in ("softmax", "log_softmax") for dim in (0, -1)
]


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_conformance(spec):
    run_conformance(spec)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_signature_as_torch_special(name):
    ours, eager = getattr(refs.special, name), getattr(torch.special, name)
    x = torch.randn(3, 4)
    torch.testing.assert_close(ours(x, 1, dtype=torch.float64), eager(x, 1, dtype=torch.float64))
    torch.testing.assert_close(ours(input=x, dim=0), eager(input=x, dim=0))
    for args, kwargs in (((x,), {}), ((x, None), {}), ((x, 1.0), {}), ((1.0, 0), {}),
                         ((x, 0), {"_stacklevel": 3}), ((x, 1, torch.float64), {})):
        if name == "softmax" and len(args) == 3:
            torch.testing.assert_close(ours(*args), eager(*args))  # dtype third
            continue
        with pytest.raises(Exception) as expected:
            eager(*args, **kwargs)
        with pytest.raises(type(expected.value)):
            ours(*args, **kwargs)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_traced(name):
    assert find_ref("special", name) is getattr(refs.special, name)
    assert find_ref("torch", name) is getattr(refs.nn.functional, name)  # torch.softmax: F's
    fn = lambda x: getattr(torch.special, name)(x, -1, dtype=torch.float64) * 2  # noqa: E731
    jfn = primtrace.jit(fn)
    x = torch.randn(4, 5)
    torch.testing.assert_close(jfn(x), fn(x), rtol=0, atol=0)
    assert primtrace.last_traces(jfn)[0].nodes[0].symbol.qualname == f"refs.special.{name}"
