"""The tracer: records plain PyTorch functions into traces of refs and prims, and the
passes that rewrite those traces.

It knows refs only by name (see :mod:`primtrace.tracer.mapping`) and never imports
executors.
"""
from primtrace.tracer.capture import CaptureMode, TracingTrace, acquire, dispatch
from primtrace.tracer.errors import DataDependentError, OpaqueOpWarning, TracingError
from primtrace.tracer.inputs import cache_key, proxify

__all__ = ["acquire", "dispatch", "CaptureMode", "TracingTrace", "TracingError",
           "DataDependentError", "OpaqueOpWarning", "cache_key", "proxify"]
