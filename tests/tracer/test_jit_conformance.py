"""Every op of the refs' conformance suites, run through ``primtrace.jit`` (torch executor).

The specs and the pass rule are the conformance harness's own (tests/conformance): here the
callable under test is ``jit`` of the *eager* torch function, so each sample exercises
capture -> refs -> prims -> passes -> executor -> generated code, and must match eager
exactly as the refs do. New specs added to those suites are picked up automatically.
"""
import importlib
import os
import re
import sys
from pathlib import Path

import pytest

import primtrace
from tests.conformance.binary_helpers import inplace
from tests.conformance.harness import OpSpec, run_conformance, run_out_conformance

CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance"


def jitted(fn, name: str):
    """`fn` with jit applied where the traced code is plain torch.

    The suites wrap some ops: ``inplace(method)`` calls a Tensor method descriptor directly,
    which a proxy cannot intercept, so the same op is jitted spelled as a method call;
    ``with_condition(f)`` / ``with_mask(f)`` build a mask with ``isinstance(x, Tensor)``
    checks that a proxy does not pass, so jit goes inside the wrapper.
    """
    wrapper = re.fullmatch(r"(\w+)\.<locals>\.run", getattr(fn, "__qualname__", ""))
    if wrapper and wrapper.group(1) == "inplace":
        return inplace(primtrace.jit(lambda self, *a, **k: getattr(self, name)(*a, **k),
                                     executors=TORCH_ONLY))
    if wrapper and wrapper.group(1).startswith("with_"):
        factory = getattr(sys.modules[fn.__module__], wrapper.group(1))
        (inner,) = [c.cell_contents for c in fn.__closure__ if callable(c.cell_contents)]
        return factory(jitted(inner, name))
    return primtrace.jit(fn, executors=TORCH_ONLY)


# CI checks a quarter of each op's samples (the refs' own suites check them all); PRIMTRACE_SLOW=1
# every one.
SHARE = 1 if os.environ.get("PRIMTRACE_SLOW") == "1" else 4

# Every sample through the torch executor; tests/numba/test_conformance_fused.py runs a
# slice of the same suites through the default executors (fusion first).
TORCH_ONLY = [primtrace.TORCH]


def _specs():
    found = []
    for path in sorted(CONFORMANCE.glob("test_*.py")):
        module = importlib.import_module(f"tests.conformance.{path.stem}")
        for attr in sorted(a for a in vars(module) if a.endswith("SPECS")):
            for spec in getattr(module, attr):
                if isinstance(spec, OpSpec):
                    found.append(pytest.param(spec, id=f"{path.stem[5:]}:{spec.name}"))
    return found


SPECS = _specs()


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("spec", SPECS)
def test_jit_conforms(spec):
    run_conformance(spec, jitted(spec.torch_fn, spec.name), share=SHARE)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("spec", [p for p in SPECS if p.values[0].supports_out])
def test_jit_out_conforms(spec):
    run_out_conformance(spec, jitted(spec.torch_fn, spec.name))


def test_the_suites_are_found():
    assert len(SPECS) > 200
    assert {p.id.split(":")[0] for p in SPECS} >= {"unary", "binary", "special", "nn_functional"}
