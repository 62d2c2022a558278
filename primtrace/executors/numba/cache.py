"""Compiled kernels, cached in memory by source and on disk across processes.

A region's kernel source is its signature: it depends on the prims, dtypes, which operands
are broadcast or unit-stride and the number of coalesced dims, never on sizes, stride
values, names or constants (those are arguments). So ``f(x, 2.0)`` and ``f(x, 3.0)``, or the
same function on another size, share one compiled kernel.

On disk, the source is written once to ``<dir>/pt_<backend>_<hash>.py`` and imported as a
real module, so Numba's own ``cache=True`` stores the machine code next to it
(``__pycache__``) and a second process loads it instead of compiling. The hash covers the
source, the helper modules the kernels inline (``mathlib.fingerprint``), and the Numba and
Python versions; an existing file is never rewritten (Numba's cache index is keyed by the
file's timestamp). The directory is ``$PRIMTRACE_CACHE_DIR`` or
``$XDG_CACHE_HOME/primtrace`` (``~/.cache/primtrace``); if it cannot be written, a
per-process temporary directory is used and nothing persists.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import threading

ENV_VAR = "PRIMTRACE_CACHE_DIR"

_lock = threading.RLock()
_modules: dict[str, object] = {}          # hash -> imported module
_dispatchers: dict[tuple, object] = {}    # (hash, function name, options) -> compiled function
_fallback_dir: str | None = None
stats = {"modules": 0, "compiles": 0, "hits": 0}


def cache_dir() -> str:
    """The directory kernels are written to (created on demand)."""
    env = os.environ.get(ENV_VAR)
    if env:
        return os.path.abspath(os.path.expanduser(env))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "primtrace")


def _writable_dir() -> str:
    global _fallback_dir
    path = os.path.join(cache_dir(), "kernels")
    try:
        os.makedirs(path, exist_ok=True)
        if os.access(path, os.W_OK):
            return path
    except OSError:
        pass
    if _fallback_dir is None:
        _fallback_dir = tempfile.mkdtemp(prefix="primtrace-kernels-")
    return _fallback_dir


def _fingerprint() -> str:
    import numba
    from primtrace.executors.numba import mathlib
    return (f"{numba.__version__}|{sys.version_info[:2]}|{mathlib.fingerprint()}"
            f"|hw-f16={mathlib.HARDWARE_F16}")


_FINGERPRINT: str | None = None


def source_hash(source: str, backend: str) -> str:
    global _FINGERPRINT
    if _FINGERPRINT is None:
        _FINGERPRINT = _fingerprint()
    h = hashlib.sha256(f"{backend}\n{_FINGERPRINT}\n{source}".encode())
    return h.hexdigest()[:24]


def _write_once(path: str, source: str) -> None:
    """Create `path` with `source` unless it exists (atomic; concurrent writers are fine)."""
    if os.path.exists(path):
        return
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(source)
        try:
            os.link(tmp, path)        # fails if another process created it meanwhile
        except FileExistsError:
            pass
        except OSError:               # no hard links here: rename (may replace a twin)
            if not os.path.exists(path):
                os.replace(tmp, path)
                tmp = None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def load_module(source: str, backend: str):
    """The module holding `source`, imported from the disk cache (written if missing)."""
    key = source_hash(source, backend)
    with _lock:
        module = _modules.get(key)
        if module is not None:
            return key, module
        name = f"pt_{backend}_{key}"
        path = os.path.join(_writable_dir(), name + ".py")
        _write_once(path, source)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module   # Numba's cache re-imports a kernel's module by name
        spec.loader.exec_module(module)
        _modules[key] = module
        stats["modules"] += 1
        return key, module


def compiled(key: str, module, function: str, make):
    """`make(py_function)` (e.g. a Numba decorator) applied once per (module, function)."""
    k = (key, function)
    with _lock:
        fn = _dispatchers.get(k)
        if fn is None:
            fn = make(getattr(module, function))
            _dispatchers[k] = fn
            stats["compiles"] += 1
        else:
            stats["hits"] += 1
        return fn


def clear_memory() -> None:
    """Forget in-memory kernels (the disk cache stays): for tests of the disk cache."""
    with _lock:
        _modules.clear()
        _dispatchers.clear()
