import logging

import pytest
import torch
import torch._dynamo


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles from scratch (Dynamo's caches and recompile limits are per code object)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture(autouse=True)
def quiet_structured_trace():
    """Keep torch's structured-trace DEBUG records (thousands per compile) out of failure reports."""
    trace_log = logging.getLogger("torch.__trace")
    disabled, trace_log.disabled = trace_log.disabled, True
    yield
    trace_log.disabled = disabled



def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a program check whose mechanism a quicker case already covers")
