"""nn.Module code that reads values or reaches autograd's graph in ways a trace cannot record
as written, traced by an equivalent that it can (installed while any thread traces).

* ``_BatchNorm.forward`` with ``momentum=None`` (a cumulative average) reads
  ``1.0 / float(self.num_batches_tracked)``, a value that changes on every call: as a Python
  float it would be a data-dependent read. The equivalent computes that factor from the
  buffer as a tensor in the trace, so one trace holds for every call.
* Full backward hooks (``register_full_backward_hook``, ``..._pre_hook``, on the module or
  global): ``BackwardHook.setup_input_hook`` / ``setup_output_hook`` attach to the graph of
  the call's tensors (see :mod:`primtrace.tracer.backward_hooks`).
"""
from __future__ import annotations

import contextlib
import threading

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm
from torch.utils.hooks import BackwardHook

from primtrace.ir.trace import current_trace
from primtrace.tracer import backward_hooks

_lock = threading.Lock()
_users = 0
_patches: list[tuple[object, str, object]] = []   # (owner, name, traced version)


def _cumulative_batch_norm(self, input):
    """_BatchNorm.forward in training with momentum None, running statistics tracked: as
    eager, with the factor 1 / num_batches_tracked a tensor of the trace."""
    self._check_input_dim(input)
    self.num_batches_tracked.add_(1)
    # the batch's statistics normalize; the running ones are updated below (momentum 0:
    # F.batch_norm checks the batch size as eager's call does)
    out = F.batch_norm(input, None, None, self.weight, self.bias, True, 0.0, self.eps)
    if input.numel() == 0:
        return out   # an empty batch leaves the running statistics as they are, as eager
    with torch.no_grad():
        x = input
        if not x.dtype.is_floating_point or x.dtype in (torch.float16, torch.bfloat16):
            x = x.float()   # eager's opmath
        dims = [0, *range(2, x.ndim)]
        mean, var = x.mean(dims), x.var(dims, correction=1)
        factor = 1.0 / self.num_batches_tracked.double()
        for running, batch in ((self.running_mean, mean), (self.running_var, var)):
            new = batch.double() * factor + running.double() * (1 - factor)
            running.copy_(new)
    return out


_original_batch_norm_forward = _BatchNorm.forward


def _batch_norm_forward(self, input):
    if (current_trace() is not None and self.momentum is None and self.training
            and self.track_running_stats and self.num_batches_tracked is not None
            and self.running_mean is not None and self.running_var is not None):
        return _cumulative_batch_norm(self, input)
    return _original_batch_norm_forward(self, input)


_patches.append((_BatchNorm, "forward", _batch_norm_forward))
_patches += [(BackwardHook, "setup_input_hook", backward_hooks.setup_input_hook),
             (BackwardHook, "setup_output_hook", backward_hooks.setup_output_hook)]


@contextlib.contextmanager
def module_calls():
    """While any thread traces, the module code above is traced by its equivalents (each
    runs the original outside of tracing, so other threads' eager calls are unchanged)."""
    global _users
    with _lock:
        if _users == 0:
            _originals[:] = [owner.__dict__[name] for owner, name, _ in _patches]
            for owner, name, traced in _patches:
                setattr(owner, name, traced)
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                for (owner, name, _), original in zip(_patches, _originals):
                    setattr(owner, name, original)


_originals: list = []
