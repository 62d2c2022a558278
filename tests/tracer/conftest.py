"""The tracer's tests check tracing, passes, caching and the executor API, whose expected
traces and bit-exact results are those of the torch executor: they run with
`default_executors()` = [torch]. The golden traces document the real defaults (fusion
first) and the fusion executor has its own tests in tests/numba."""
import sys

import pytest

import primtrace


@pytest.fixture(autouse=True)
def torch_executor_by_default(request, monkeypatch):
    if request.module.__name__.endswith("test_golden_traces"):
        yield
        return
    monkeypatch.setattr(sys.modules["primtrace.jit"], "default_executors", lambda: [primtrace.TORCH])
    yield


@pytest.fixture(params=["c", "python"])
def both_hit_paths(request, monkeypatch):
    """Run a test with jit's hit path in C (primtrace/_hitpath.c) and with its Python twin."""
    jit_module = sys.modules["primtrace.jit"]
    if request.param == "c" and jit_module._CHitPath is None:
        pytest.skip("primtrace._hitpath is not built")
    if request.param == "python":
        monkeypatch.setattr(jit_module, "_CHitPath", None)
    yield request.param
