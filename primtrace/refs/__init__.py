"""PyTorch-compatible references, written in prims.

Each ref is plain Python: type promotion, conversion, broadcasting, prim calls. Called on
real tensors it runs eagerly, one prim at a time; called on proxies it records a trace.
"""
from primtrace.refs.arithmetic import *  # noqa: F401,F403
from primtrace.refs.promotion import Kind, elementwise_dtypes, result_type  # noqa: F401
