"""How a state guard's checks run: most of them are skipped while nothing they read changed.

A trace's guard (tracer/state.py) checks what the traced code read outside its arguments:
module attributes and hooks, configs' attributes, globals, the metadata of parameters and
buffers. On the transformers models that is 400-1150 checks and 30-90 us a call, where
Dynamo's C++ guards take a few. Two groups make the common call cheap:

- **checks decided by dicts' contents** (a config's items, a module's ``__dict__`` entries,
  its hook and submodule dicts, a global): all of them are skipped while none of those dicts
  has been written since they last passed (``_dictwatch.DictWatch``: CPython's dict version
  tags). Any write runs them all again, and they record the new tags if they pass.
- **the fetched state tensors' metadata**: one ``TensorGuards`` call (torch's C++ check of
  dtype, device, sizes, strides, requires_grad, what Dynamo uses), and each tensor's key only
  where that fails (strides that differ where the key only asks for contiguity).

A check's key (``_Code.keys``) says which group it is in: a tuple of the constant dicts it
reads items of (``()``: decided by constants alone), TENSOR, or None (checked every call:
an object's ``__dict__`` identity, list items, class attributes, cells, size guards).
"""
from __future__ import annotations

try:
    from primtrace._dictwatch import SUPPORTED as _SUPPORTED, DictWatch
except ImportError:   # not built: every check runs every call
    DictWatch, _SUPPORTED = None, False
try:
    from torch._C._dynamo.guards import TensorGuards
except ImportError:
    TensorGuards = None

#: the key of a check of a fetched state tensor's metadata
TENSOR = "tensor"


def key_of(container, name: str) -> tuple | None:
    """The key of a check reading an item of `container` (a constant named `name`): a dict
    has a version tag (a dict subclass may reorder without one: checked every call), a
    tuple's items are fixed, a list's are checked every call."""
    if type(container) is dict:
        return (name,)
    if type(container) is tuple:
        return ()
    return None


def terms(code) -> list[str]:
    """The `and`-ed terms of `code`'s guard (a state._Code): the dict-decided checks as one
    term, the state tensors' as another, then the rest in order."""
    keyed, tensors, rest, dicts = [], [], [], {}
    for check, key in zip(code.checks, code.keys):
        if key is TENSOR and TensorGuards is not None:
            tensors.append(check)
        elif key is not None and key is not TENSOR and _SUPPORTED:
            keyed.append(check)
            dicts.update(dict.fromkeys(key))
        else:
            rest.append(check)
    keyed, rest = list(dict.fromkeys(keyed)), list(dict.fromkeys(rest))   # pure: once each
    out = []
    if keyed and dicts:
        watch = code.const(DictWatch(tuple(code.consts[n] for n in dicts)), "watch")
        out.append(f"{watch}.unchanged() or ({' and '.join(f'({c})' for c in keyed)} "
                   f"and {watch}.record())")
    else:
        out += keyed
    if tensors:
        variables = ", ".join(v for v, _ in code.state_tensors)
        check = code.const(TensorGuards(*(t for _, t in code.state_tensors),
                                        dynamic_dims_sizes=None, dynamic_dims_strides=None).check,
                           "tensors_match")
        out.append(f"{check}({variables}) or ({' and '.join(f'({c})' for c in tensors)})")
    return out + rest

