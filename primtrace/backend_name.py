"""``torch.compile(model, backend="primtrace")`` after ``import primtrace``, installed or not.

An installed package is found by name through its ``torch_dynamo_backends`` entry point.
A checkout on ``sys.path`` has none, so importing primtrace registers the backend with
``torch._dynamo.register_backend``, without importing ``torch._dynamo`` (about 2 s): when
it is imported already, now; otherwise right after its import, by a one-shot import hook
(what ``torch.compile`` imports first). Only ``primtrace.dynamo`` is imported then, which
imports nothing heavy.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import warnings

_MODULE = "torch._dynamo"


def install() -> None:
    """Register now if Dynamo is loaded, else once it is."""
    module = sys.modules.get(_MODULE)
    if module is not None:
        if hasattr(module, "register_backend") and not _has_entry_point():
            _register()   # (an entry point loading primtrace registers it itself)
        return
    if not any(isinstance(f, _AfterDynamoImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterDynamoImport())


def _has_entry_point() -> bool:
    from importlib.metadata import entry_points
    from primtrace.dynamo import NAME
    return NAME in entry_points(group="torch_dynamo_backends").names


def _register() -> None:
    try:
        import torch._dynamo
        from primtrace.dynamo import NAME, dynamo_backend
        torch._dynamo.register_backend(dynamo_backend, name=NAME)
    except AssertionError:
        pass   # the name is registered already (Dynamo says "duplicate name")
    except Exception as e:   # never break torch._dynamo's import
        warnings.warn(f"primtrace: could not register the torch.compile backend: {e!r}",
                      stacklevel=2)


class _AfterDynamoImport(importlib.abc.MetaPathFinder):
    """Finds torch._dynamo with the other finders and registers once it has executed."""

    def find_spec(self, name, path=None, target=None):
        if name != _MODULE:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)   # one shot; also keeps find_spec below from recursing
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _RegisteringLoader(spec.loader)
        return spec


class _RegisteringLoader(importlib.abc.Loader):
    """The module's own loader, then the registration."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _register()

    def __getattr__(self, name):   # get_source, get_filename...: the original's
        return getattr(self._loader, name)
