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
