"""Numba executor: fused elementwise kernels compiled with Numba.

``NumbaFusionExecutor`` partitions a prims trace into maximal elementwise regions and
compiles each into one kernel (CPU: ``numba.njit``, serial or parallel; CUDA tensors:
``numba.cuda``, imported only when a CUDA tensor is seen). ``kernel_sources(trace)`` returns
the generated source of every fused region of an execution trace; each fused callable also
carries it as ``.source``.
"""
from primtrace.executors.numba.executor import NumbaFusionExecutor, kernel_sources

__all__ = ["NumbaFusionExecutor", "kernel_sources"]
