"""The generated kernels of a jitted function, for reading: Numba source, CUDA source, PTX.

    primtrace.kernel_source(jfn)                  # the kernels its last execution trace runs
    primtrace.kernel_source(jfn, device="cuda")   # the numba.cuda kernels of the same regions
    primtrace.kernel_ptx(jfn)                     # {region name: PTX for sm_90}, no GPU needed
    primtrace.clear_kernel_cache()                # empty the on-disk kernel cache

The CUDA views re-partition the last *optimized* trace with the Numba executor's CUDA
backend, as if the inputs had been CUDA tensors (the kernel code depends on dtypes, layouts
and prims, never on the device the trace was recorded on). The CUDA backend fuses slightly
less than the CPU one (integer pow, gcd and lcm stay in torch), so its regions, named
``numba_fusion_<i>`` in trace order like the execution trace's, can differ from the CPU
regions of the same trace. Nothing here imports Numba or numba.cuda until it is called.
"""
from __future__ import annotations

from primtrace.ir.symbol import SymbolKind

__all__ = ["kernel_source", "kernel_ptx", "clear_kernel_cache"]

_DEVICES = ("cpu", "cuda")
_NAME = "numba_fusion"   # NumbaFusionExecutor's default name: the execution trace's prefix


def _last(jfn, stage: int):
    from primtrace.jit import last_traces
    return last_traces(jfn)[stage]


def _cuda_regions(jfn) -> list:
    """(name, region) per fused region of `jfn`'s last optimized trace under the CUDA backend
    (each region carries the CUDA plan the partition made, ``region.plan``)."""
    from primtrace.executors.numba import NumbaFusionExecutor
    optimized = _last(jfn, 2)
    regions = NumbaFusionExecutor(_NAME, backend="cuda").partition(optimized)
    return [(f"{_NAME}_{i}", region) for i, region in enumerate(regions)]


def kernel_source(jfn, device: str = "cpu") -> str:
    """The generated source of every fused region of `jfn`'s last compile, ``# name`` first.

    ``device="cpu"``: what the last execution trace runs (the Numba kernels and their
    launcher, as compiled for the tensors it was called with). ``device="cuda"``: the
    ``numba.cuda`` kernel of each region (a grid-stride loop), as if the inputs were CUDA
    tensors; generated without a GPU.
    """
    if device not in _DEVICES:
        raise ValueError(f"device must be one of {_DEVICES}, got {device!r}")
    if device == "cpu":
        execution = _last(jfn, 3)
        sources = [(n.symbol.name, n.symbol.source) for n in execution.nodes
                   if n.symbol.kind is SymbolKind.FUSED and n.symbol.source]
    else:
        sources = [(name, _cuda_module(region).describe(region.plan, region) + "\n"
                    + _cuda_module(region).render_kernel(region.plan))
                   for name, region in _cuda_regions(jfn)]
    return "\n\n".join(f"# {name}\n{source}" for name, source in sources)


def kernel_ptx(jfn, cc: tuple[int, int] = (9, 0)) -> dict[str, str]:
    """``{region name: PTX}`` of every fused region of `jfn`'s last compile, compiled by
    ``numba.cuda`` for compute capability `cc` as if the inputs were CUDA tensors.

    Needs numba-cuda (and its NVVM) but no GPU. A dict because each region is its own
    module with one ``.entry``: read one, or ``"\\n".join(ptx.values())`` for all. Empty
    when nothing fuses (e.g. inputs that require grad, in grad mode).
    """
    try:
        import numba.cuda  # noqa: F401
    except ImportError as e:
        raise ImportError("primtrace.kernel_ptx needs numba-cuda (pip install numba-cuda)") from e
    return {name: _cuda_module(region).ptx(region, cc, region.plan)
            for name, region in _cuda_regions(jfn)}


def _cuda_module(region):
    """The CUDA backend module for `region`: row kernels for regions with reductions."""
    from primtrace.executors.numba.reduction_plan import RowPlan
    if isinstance(region.plan, RowPlan):
        from primtrace.executors.numba.backends import cuda_rows
        return cuda_rows
    from primtrace.executors.numba.backends import cuda
    return cuda


def clear_kernel_cache() -> int:
    """Delete the on-disk kernel cache (``$PRIMTRACE_CACHE_DIR``, default
    ``~/.cache/primtrace``); returns the bytes freed. Kernels already loaded keep working;
    later compiles write the cache again."""
    from primtrace.executors.numba import kernel_cache as cache
    return cache.clear()
