"""The intermediate representation: proxies, nodes, traces and the symbols that record them.

Prims, refs and the tracer all build on this package; it imports nothing of ours but
``primtrace.dtypes``.
"""
from primtrace.ir.proxy import NumberProxy, Proxy, TensorProxy, TensorSpec
from primtrace.ir.strides import contiguous_strides, dense_strides
from primtrace.ir.trace import Node, Trace, current_trace, is_tracing, tracing
from primtrace.ir.symbol import Symbol, has_proxy
from primtrace.ir import number_ops  # noqa: F401,E402  (installs NumberProxy's operators)

__all__ = [
    "Proxy", "TensorProxy", "NumberProxy", "TensorSpec", "contiguous_strides", "dense_strides",
    "Node", "Trace", "current_trace", "is_tracing", "tracing", "Symbol", "has_proxy",
]
