"""Where in the user's code are we: the frames that are not primtrace's, torch's or the
standard library's (for error messages, source comments, and the frames whose globals a
trace reads)."""
from __future__ import annotations

import functools
import linecache
import os
import sys

import torch


def _dir(module) -> str:
    return os.path.dirname(os.path.abspath(module.__file__)) + os.sep


# primtrace's own package, torch, and the standard library are never "the user's line"
_INTERNAL = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep, _dir(torch),
             "<primtrace")
_STDLIB = _dir(os)


@functools.lru_cache(maxsize=8192)
def _normalized(filename: str) -> str:
    """`filename` as an absolute, normalized path: a module imported through a sys.path entry
    like "/repo/." or "src/../src" has such a __file__ and co_filename, which the prefixes
    above (normalized) would not match."""
    return filename if filename.startswith("<") else os.path.abspath(filename)


def is_internal(filename: str) -> bool:
    filename = _normalized(filename)
    return filename.startswith(_INTERNAL) or (
        filename.startswith(_STDLIB) and "site-packages" not in filename)


def is_library(filename: str) -> bool:
    """Code whose globals a trace does not guard: primtrace, torch, the standard library,
    installed packages, and generated or frozen code (rebinding their globals is not
    supported)."""
    if filename.startswith("<"):   # exec'd code, frozen modules (but not an interpreter's)
        return not filename.startswith(("<stdin>", "<ipython"))
    filename = _normalized(filename)
    return (filename.startswith(_INTERNAL) or filename.startswith(_STDLIB)
            or "site-packages" in filename or "dist-packages" in filename)


def user_location():
    """(filename, lineno, text) of the innermost frame outside primtrace, torch and stdlib."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not is_internal(filename):
            lineno = frame.f_lineno
            return filename, lineno, linecache.getline(filename, lineno).strip()
        frame = frame.f_back
    return None


def describe_location(loc) -> str:
    if loc is None:
        return "at an unknown line"
    filename, lineno, text = loc
    return f"at {filename}:{lineno}: {text}" if text else f"at {filename}:{lineno}"
