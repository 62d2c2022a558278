"""Choosing Numba's threading layer for parallel kernels, without surprising the process.

Why: Numba's OpenMP layer with GNU OpenMP's default wait policy keeps its worker threads
spinning after each parallel region. On a small shared VM that spinning competes with
every other thread (torch's own pool included), and a parallel launch measured here cost
milliseconds; with ``OMP_WAIT_POLICY=PASSIVE`` the workers sleep and a launch costs ~5 us.
The workqueue layer measured ~30 us per launch, and TBB is not installed.

How, without touching the user's process: torch ships its own copy of libgomp, already
loaded and configured when primtrace is imported; Numba's OpenMP layer links the system
libgomp, a *separate* runtime that reads ``OMP_WAIT_POLICY`` once, when it is loaded (the
first parallel launch). So we set the variable only around that load and restore the
environment right after: torch's OpenMP and child processes see the user's environment
unchanged. Nothing is changed when the user chose: ``NUMBA_THREADING_LAYER`` (or
``numba.config.THREADING_LAYER``) set, or ``OMP_WAIT_POLICY`` already in the environment.
If another library already loaded the system libgomp, its settings stand.
"""
from __future__ import annotations

import os
import threading as _threading

_lock = _threading.Lock()
_configured = False
chosen: str | None = None   # the layer in use after configure() (for reports and tests)


def configure() -> str:
    """Launch Numba's thread pool once with the policy above; returns the layer in use."""
    global _configured, chosen
    if _configured:
        return chosen
    with _lock:
        if _configured:
            return chosen
        import numba
        from numba.np.ufunc import parallel

        user_layer = os.environ.get("NUMBA_THREADING_LAYER") or numba.config.THREADING_LAYER != "default"
        if not user_layer and not parallel._is_initialized:
            numba.config.THREADING_LAYER = "omp"
        set_policy = "OMP_WAIT_POLICY" not in os.environ and not parallel._is_initialized
        if set_policy:
            os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        try:
            try:
                parallel._launch_threads()
            except Exception:       # no usable OpenMP: let Numba pick any layer it has
                numba.config.THREADING_LAYER = "default"
                parallel._launch_threads()
        finally:
            if set_policy:
                del os.environ["OMP_WAIT_POLICY"]
        chosen = numba.threading_layer()
        _configured = True
        return chosen


def num_threads() -> int:
    import numba
    return numba.get_num_threads()
