"""primtrace: PyTorch's elementwise semantics as readable refs over strict prims, traced
into inspectable traces and run through pluggable executors.

    jfn = primtrace.jit(fn)            # compile on first call per input kind, then cached
    primtrace.last_traces(jfn)         # acquisition, prims, optimized, execution traces
    primtrace.trace(fn)(*args)         # the trace, without running fn
    primtrace.explain(fn, *args)       # ops that have no ref (run as opaque torch calls)
    primtrace.cache_info(jfn)          # hits, misses, and why each recompile happened
    primtrace.profile(jfn, *args)      # the time of every node of the cached call
"""
from primtrace import dtypes  # noqa: F401  (refs and prims load on first use)
from primtrace.executors import (TORCH, Executor, FusionExecutor, OperatorExecutor, Region,
                                 TorchExecutor, default_executors)
from primtrace.ir import Node, Trace
from primtrace.jit import (AutocastWarning, CacheInfo, Explanation, JitFunction, cache_info, explain, jit,
                           last_trace, last_traces, trace)
from primtrace.profiler import Profile, profile
from primtrace.kernels import clear_kernel_cache, kernel_ptx, kernel_source
from primtrace.recompiles import Change, CounterWarning, Recompile, RecompileWarning
from primtrace.tracer import DataDependentError, OpaqueOpWarning, TracingError
from primtrace.tracer.dynamic import mark_dynamic
from primtrace import backend_name as _backend_name

_backend_name.install()   # torch.compile(..., backend="primtrace") without the entry point



def __getattr__(name):
    """``primtrace.refs``, ``primtrace.prims`` and ``primtrace.dynamo`` load on first use
    (importing primtrace stays light, and a ref being edited cannot break ``import primtrace``)."""
    if name == "dynamo_backend":
        from primtrace.dynamo import dynamo_backend
        return dynamo_backend
    if name in ("refs", "prims", "dynamo"):
        import importlib
        return importlib.import_module(f"primtrace.{name}")
    raise AttributeError(f"module 'primtrace' has no attribute {name!r}")


__all__ = [
    "jit", "trace", "last_traces", "last_trace", "explain", "cache_info", "profile", "Profile",
    "kernel_source",
    "kernel_ptx", "clear_kernel_cache",
    "AutocastWarning", "Executor", "OperatorExecutor", "FusionExecutor", "Region", "TorchExecutor", "TORCH",
    "default_executors", "JitFunction", "CacheInfo", "Explanation", "Trace", "Node",
    "TracingError", "DataDependentError", "OpaqueOpWarning", "dynamo_backend",
    "Recompile", "Change", "RecompileWarning", "CounterWarning", "mark_dynamic",
]
