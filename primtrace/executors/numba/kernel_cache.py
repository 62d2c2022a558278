"""Compiled kernels, cached in memory by source and on disk across processes.

A region's kernel source is its signature: it depends on the prims, dtypes, which operands
are broadcast or unit-stride and the number of coalesced dims, never on sizes, stride
values, names or constants (those are arguments). So ``f(x, 2.0)`` and ``f(x, 3.0)``, or the
same function on another size, share one compiled kernel.

On disk, the source is written once to ``<dir>/pt_<backend>_<hash>.py`` and imported as a
real module, so Numba's own ``cache=True`` stores the machine code next to it
(``__pycache__``) and a second process loads it instead of compiling. The hash covers the
source, the modules the kernels inline or call (``helpers_fingerprint``), and the Numba and
Python versions; an existing file is never rewritten (Numba's cache index is keyed by the
file's timestamp). The directory is ``$PRIMTRACE_CACHE_DIR`` or
``$XDG_CACHE_HOME/primtrace`` (``~/.cache/primtrace``); if it cannot be written, a
per-process temporary directory is used and nothing persists.

The disk cache is bounded: ``$PRIMTRACE_CACHE_MAX_MB`` (default 128) caps the directory's
size on disk (kernels, their Numba machine code, and old ``helpers/<fingerprint>`` dirs
that mathlib's Numba caches left behind when the helpers changed). Checked when a kernel
is written, never on a hit: the first write of a process scans the directory (a few ms
for thousands of files, next to the 0.1-1 s compile that follows), later writes add an
estimate and rescan only once it passes the bound. Over the bound, whole kernels (the
``.py`` and its ``__pycache__`` files) are deleted, least recently used first, down to
80% of it (the kernel just written and the current helpers are kept). "Used" is the
newest mtime of a kernel's files or the ``.py``'s atime, which loading a kernel from disk
sets (``os.utime`` with the mtime unchanged: Numba's index is keyed by the mtime). A
kernel evicted while a process holds it keeps running there (its code is in memory).
"""
from __future__ import annotations

import functools
import glob
import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
import threading
import time
import warnings

ENV_VAR = "PRIMTRACE_CACHE_DIR"
MAX_ENV_VAR = "PRIMTRACE_CACHE_MAX_MB"
DEFAULT_MAX_MB = 128
LOW_WATER = 0.8          # eviction frees down to this fraction of the bound
_TMP_GRACE_S = 600       # a writer's temporary file younger than this may still be in use

_lock = threading.RLock()
_modules: dict[str, object] = {}          # hash -> imported module
_files: dict[str, tuple[str, str]] = {}   # hash -> (path, source) of the module's file
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


#: what generated kernels inline or call by name besides their own source, relative to this
#: package: the op table (which function each prim calls, libm spellings, libdevice names),
#: the CPU helpers and vmath, the CUDA kernels' libdevice module. Hashed into every kernel's
#: key and the name of the helpers' directory: a change to any of them recompiles.
KERNEL_LIBRARIES = ("ops.py", "backends/f16range.py", "backends/halfbits.py",
                    "backends/mathlib.py", "backends/runtime.py", "backends/libdevice.py",
                    "backends/accumulate.py",
                    "vmath/*.py")


def kernel_library_files() -> list[str]:
    """The files of KERNEL_LIBRARIES, sorted."""
    here = os.path.dirname(os.path.abspath(__file__))
    return sorted(p for pattern in KERNEL_LIBRARIES for p in glob.glob(os.path.join(here, pattern)))


@functools.lru_cache(maxsize=None)
def helpers_fingerprint() -> str:
    """A hash of the sources of KERNEL_LIBRARIES: it changes when any of them changes."""
    here = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256()
    for path in kernel_library_files():
        with open(path, "rb") as f:
            h.update(os.path.relpath(path, here).encode() + f.read())
    return h.hexdigest()[:16]


def _fingerprint() -> str:
    import numba

    from primtrace.executors.numba.backends import runtime
    return (f"{numba.__version__}|{sys.version_info[:2]}|{helpers_fingerprint()}"
            f"|hw-f16={runtime.HARDWARE_F16}")


_FINGERPRINT: str | None = None


def source_hash(source: str, backend: str) -> str:
    global _FINGERPRINT
    if _FINGERPRINT is None:
        _FINGERPRINT = _fingerprint()
    h = hashlib.sha256(f"{backend}\n{_FINGERPRINT}\n{source}".encode())
    return h.hexdigest()[:24]


def _write_once(path: str, source: str) -> bool:
    """Create `path` with `source` unless it exists (atomic; concurrent writers are fine).
    Whether this call wrote it."""
    if os.path.exists(path):
        return False
    wrote = False
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(source)
        try:
            os.link(tmp, path)        # fails if another process created it meanwhile
            wrote = True
        except FileExistsError:
            pass
        except OSError:               # no hard links here: rename (may replace a twin)
            if not os.path.exists(path):
                os.replace(tmp, path)
                tmp, wrote = None, True
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return wrote


def _mark_used(path: str) -> None:
    """Set `path`'s atime to now, keeping its mtime (the LRU clock; Numba keys on mtime)."""
    try:
        os.utime(path, ns=(time.time_ns(), os.stat(path).st_mtime_ns))
    except OSError:
        pass


def load_module(source: str, backend: str):
    """The module holding `source`, imported from the disk cache (written if missing)."""
    key = source_hash(source, backend)
    with _lock:
        module = _modules.get(key)
        if module is not None:
            return key, module
        name = f"pt_{backend}_{key}"
        directory = _writable_dir()
        path = os.path.join(directory, name + ".py")
        for attempt in (0, 1):
            if _write_once(path, source):
                _after_write(directory, keep=name)
            else:
                _mark_used(path)
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module   # Numba's cache re-imports a kernel's module by name
            try:
                spec.loader.exec_module(module)
                break
            except FileNotFoundError:    # another process evicted it meanwhile: write again
                if attempt:
                    raise
        _modules[key] = module
        _files[key] = (path, source)
        stats["modules"] += 1
        return key, module


def compiled(key: str, module, function: str, make):
    """`make(py_function)` (e.g. a Numba decorator) applied once per (module, function)."""
    k = (key, function)
    with _lock:
        fn = _dispatchers.get(k)
        if fn is None:
            path, source = _files.get(key, (None, None))
            if path is not None and not os.path.exists(path):
                _write_once(path, source)   # evicted since it was loaded: Numba's cache needs it
            fn = make(getattr(module, function))
            _dispatchers[k] = fn
            stats["compiles"] += 1
        else:
            stats["hits"] += 1
        return fn


# --- the bound on the disk cache -----------------------------------------------------------------
def max_bytes() -> int:
    """The disk cache's bound in bytes: ``$PRIMTRACE_CACHE_MAX_MB`` (MiB), default 128."""
    raw = os.environ.get(MAX_ENV_VAR, "").strip()
    if raw:
        try:
            mb = float(raw)
            if mb >= 0:
                return int(mb * 2**20)
        except ValueError:
            pass
        warnings.warn(f"{MAX_ENV_VAR}={raw!r} is not a size in MiB; using {DEFAULT_MAX_MB}",
                      RuntimeWarning, stacklevel=2)
    return DEFAULT_MAX_MB * 2**20


_budget = {"dir": None, "estimate": 0, "per_kernel": 64 * 1024}


def _after_write(directory: str, keep: str) -> None:
    """Kernel `keep` was just written to `directory`: keep the cache under its bound
    (amortized: a scan on the process's first write, then only when the estimate passes)."""
    limit = max_bytes()
    if _budget["dir"] == directory:
        _budget["estimate"] += _budget["per_kernel"]
        if _budget["estimate"] <= limit:
            return
    total, kernels = enforce_bound(directory, limit, keep=(keep,))
    _budget.update(dir=directory, estimate=total,
                   per_kernel=max(total // max(kernels, 1), 16 * 1024))


def _disk_size(st) -> int:
    blocks = getattr(st, "st_blocks", None)
    return blocks * 512 if blocks is not None else st.st_size


def _groups(directory: str, keep=()) -> dict[tuple, list]:
    """``{group: [paths, size, last use, protected]}``: one group per kernel (its ``.py`` and
    its ``__pycache__`` files, by module name), per stray temporary file, and, next to the
    ``kernels`` dir of the cache, per ``helpers/<fingerprint>`` dir. Protected: the kernels
    in `keep`, temporary files a writer may still use, the current helpers."""
    groups: dict[tuple, list] = {}
    now = time.time()

    def add(key, path, st, used, protected=False):
        g = groups.setdefault(key, [[], 0, 0.0, protected])
        g[0].append(path)
        g[1] += _disk_size(st)
        g[2] = max(g[2], used)
        g[3] = g[3] or protected

    for folder in (directory, os.path.join(directory, "__pycache__")):
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for e in entries:
            try:
                if not e.is_file(follow_symlinks=False):
                    continue
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            stem = e.name.split(".", 1)[0]
            used = max(st.st_mtime, st.st_atime) if e.name.endswith(".py") else st.st_mtime
            young_tmp = e.name.endswith(".tmp") and now - st.st_mtime < _TMP_GRACE_S
            add(("kernel", stem), e.path, st, used, stem in keep or young_tmp)
    if os.path.dirname(directory) == cache_dir() and os.path.basename(directory) == "kernels":
        helpers = os.path.join(cache_dir(), "helpers")
        current = helpers_fingerprint()
        try:
            dirs = [e for e in os.scandir(helpers) if e.is_dir(follow_symlinks=False)]
        except OSError:
            dirs = []
        for d in dirs:
            key = ("helpers", d.name)
            groups[key] = [[d.path], 0, 0.0, d.name == current]
            for root, _, files in os.walk(d.path):
                for f in files:
                    try:
                        st = os.stat(os.path.join(root, f), follow_symlinks=False)
                    except OSError:
                        continue
                    groups[key][1] += _disk_size(st)
                    groups[key][2] = max(groups[key][2], st.st_mtime)
    return groups


def _remove(paths: list[str]) -> None:
    for path in paths:
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        except FileNotFoundError:   # another process evicted it first
            pass
        except OSError:
            pass


def enforce_bound(directory: str | None = None, limit: int | None = None,
                  keep=()) -> tuple[int, int]:
    """Evict least recently used kernels from `directory` (the kernels dir) while the cache is
    over `limit` bytes, down to ``LOW_WATER * limit``; (bytes, kernels) left afterwards.
    Kernels this process loaded may go too: their code is in memory, and `compiled` writes
    a file back if Numba needs it again."""
    with _lock:
        directory = directory or _writable_dir()
        limit = max_bytes() if limit is None else limit
        groups = _groups(directory, keep)
        total = sum(g[1] for g in groups.values())
        if total > limit:
            target = LOW_WATER * limit
            for key, (paths, size, _, protected) in sorted(groups.items(), key=lambda kv: kv[1][2]):
                if total <= target:
                    break
                if protected:
                    continue
                _remove([p for p in paths if p.endswith(".py")] + [p for p in paths if not p.endswith(".py")])
                total -= size
                del groups[key]
        kernels = sum(1 for k in groups if k[0] == "kernel")
        return total, kernels


def disk_usage() -> tuple[int, int]:
    """(bytes on disk, files) of the cache directory."""
    size = files = 0
    for root, _, names in os.walk(cache_dir()):
        for name in names:
            try:
                size += _disk_size(os.stat(os.path.join(root, name), follow_symlinks=False))
                files += 1
            except OSError:
                pass
    return size, files


def clear() -> int:
    """Delete the disk cache (kernels and helpers); bytes freed. Loaded kernels keep working."""
    global _fallback_dir
    with _lock:
        freed = disk_usage()[0]
        for sub in ("kernels", "helpers"):
            shutil.rmtree(os.path.join(cache_dir(), sub), ignore_errors=True)
        if _fallback_dir is not None:
            shutil.rmtree(_fallback_dir, ignore_errors=True)
            _fallback_dir = None
        _budget.update(dir=None, estimate=0)
        return freed - disk_usage()[0]
