"""Autograd through prims: the backward of a trace of prims is a trace of prims, built from
each prim's VJP rule (kept beside the prim: ``primtrace.prims.VJP_RULES``).

    bw = backward_trace(prims_trace)            # (*saved, *cotangents) -> gradients
    bw = partition(prims_trace, bw)             # save a min-cut, recompute the rest
    fw = forward_with_saved(prims_trace, bw.saved)

Not wired into ``primtrace.jit`` yet: the torch.autograd.Function glue comes next.
"""
from primtrace.autodiff.backward import Backward, backward_trace, forward_with_saved
from primtrace.autodiff.partition import partition

__all__ = ["Backward", "backward_trace", "forward_with_saved", "partition"]
