"""Autograd through prims: the backward of a trace of prims is a trace of prims, built from
each prim's VJP rule (kept beside the prim: ``primtrace.prims.VJP_RULES``).

    bw = backward_trace(prims_trace)            # (*saved, *cotangents) -> gradients
    fw = forward_with_saved(prims_trace, bw.saved)

Not wired into ``primtrace.jit`` yet: choosing what to save (a min-cut) and the
torch.autograd.Function glue come next.
"""
from primtrace.autodiff.backward import Backward, backward_trace, forward_with_saved

__all__ = ["Backward", "backward_trace", "forward_with_saved"]
