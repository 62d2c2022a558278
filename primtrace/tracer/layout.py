"""Channels-last activations for networks of 2-d convolutions.

mkldnn's convolutions run faster on channels_last (NHWC) activations than on row-major
(NCHW) ones, and torch's layout rules keep a channels_last input channels_last through the
network (a convolution's output follows its input's layout, elementwise ops and norms keep
theirs). Eager with the image made channels_last: MobileNetV3 16%, RegNetY 17% and
DenseNet-121 18% faster; torch.compile lays such networks out channels_last too.

So when a call's image argument feeds a network of convolutions, the jit traces the program
a second time on a channels_last copy of it, and copies channels_last results back to
eager's row-major strides. That trace computes what eager computes on that copy. It
replaces the first only where the program cannot tell the difference: no code outside
primtrace read a layout (``stride()``, ``is_contiguous()``), the argument is not written or
returned, and every result has the first trace's shape, dtype and strides. A ``view`` that
the new layout refuses fails the second trace, and the first is kept.
"""
from __future__ import annotations

import contextlib

import torch

from primtrace.ir import proxy as _proxy
from primtrace.ir.proxy import TensorProxy
from primtrace.ir.strides import dense_strides, matches_dense
from primtrace.ir.tree import tree_flatten, tree_map

#: A network needs this many 2-d convolutions (ViT and Swin have one, a patch embedding,
#: and read 1-2% slower channels_last in eager).
MIN_CONVOLUTIONS = 3


def candidates(acquisition) -> frozenset[int]:
    """Indices of `acquisition`'s inputs worth tracing channels_last: 4-d floating row-major
    arguments with more than one channel and pixel that reach the input of a 2-d
    convolution, in a call that needs no gradients, has static sizes and runs at least
    MIN_CONVOLUTIONS such convolutions; none of them written or returned."""
    if acquisition.tags.get("grad_enabled") and any(
            isinstance(p, TensorProxy) and p.requires_grad for p in acquisition.inputs):
        return frozenset()
    if any(isinstance(p, TensorProxy) and not all(type(n) is int for n in p.shape)
           for p in acquisition.inputs):
        return frozenset()
    leaves = [leaf for node in acquisition.nodes for leaf in node.flat()]
    convolutions = [n for n in leaves if n.symbol.name == "convolution"
                    and isinstance(n.args[0], TensorProxy) and n.args[0].ndim == 4]
    if len(convolutions) < MIN_CONVOLUTIONS:
        return frozenset()
    returned = {acquisition.root(p) for p in tree_flatten(acquisition.outputs)
                if isinstance(p, TensorProxy)}
    guard = acquisition.tags.get("guard")
    arguments = acquisition.inputs[:len(acquisition.inputs) - len(guard.proxies)] \
        if guard is not None else acquisition.inputs
    chosen = set()
    for i, p in enumerate(arguments):
        if (_row_major_image(p)
                and p.name not in returned and not acquisition.wrote(p)
                and _reaches(p, leaves, convolutions)):
            chosen.add(i)
    return frozenset(chosen)


def _row_major_image(p) -> bool:
    return (isinstance(p, TensorProxy) and p.ndim == 4 and p.dtype.is_floating_point
            and p.shape[1] > 1 and p.shape[2] * p.shape[3] > 1
            and matches_dense(p.shape, p.stride(), dense_strides(p.shape)))


def _reaches(p, leaves, convolutions) -> bool:
    """Does a value computed from `p` reach a convolution's input? (Through the inputs of
    convolutions only: a weight, an argument of Dynamo's graphs, is not an image.)"""
    derived = {p.name}
    for node in leaves:
        reads = node.args[:1] if node.symbol.name == "convolution" else node.inputs
        if any(q.name in derived for q in reads if hasattr(q, "name")):
            derived.update(q.name for q in node.output_proxies)
    return any(c.args[0].name in derived for c in convolutions)


def call_channels_last(trace, fn, args, kwargs, chosen: list):
    """`fn`'s result on `args` and `kwargs` with the `chosen` proxies made channels_last, its
    4-d results row-major again; the layout reads of the call noted in `trace`."""
    ids = {id(p) for p in chosen}
    with watching_layout_reads(trace):
        out = fn(*converted(args, ids), **converted(kwargs, ids))
    return row_major_results(out)


def converted(obj, chosen: set[int]):
    """`obj` (arguments) with the proxies whose ids are in `chosen` made channels_last."""
    return tree_map(lambda x: x.contiguous(memory_format=torch.channels_last)
                    if id(x) in chosen else x, obj)


def row_major_results(out):
    """`out` with each 4-d channels_last result copied to row-major strides (eager's for the
    row-major argument; :func:`same_results` checks that they are)."""
    def restride(x):   # exact strides: a (2, 8, 1, 1) pooled result's too
        if isinstance(x, TensorProxy) and x.ndim == 4 and \
                tuple(x._strides) != tuple(dense_strides(x.shape)):
            return x.clone(memory_format=torch.contiguous_format)
        return x
    return tree_map(restride, out)


@contextlib.contextmanager
def watching_layout_reads(trace):
    """Records in ``trace.tags["layout_readers"]`` the modules outside primtrace that read a
    proxy's strides or contiguity."""
    _proxy.layout_readers = readers = set()
    try:
        yield
    finally:
        _proxy.layout_readers = None
        trace.tags["layout_readers"] = readers


def same_results(first, second) -> bool:
    """Do the two acquisitions return the same kinds of values, tensors with equal shapes,
    dtypes and strides, sharing memory in the same groups?"""
    a, b = tree_flatten(first.outputs), tree_flatten(second.outputs)
    if len(a) != len(b) or _sharing(first, a) != _sharing(second, b):
        return False
    for x, y in zip(a, b):
        if type(x) is not type(y):
            return False
        if isinstance(x, TensorProxy) and (x.shape != y.shape or x.dtype != y.dtype
                                           or tuple(x._strides) != tuple(y._strides)):
            return False
    return True


def _sharing(trace, outputs) -> list:
    """For each output, the position of the first output sharing its memory."""
    first = {}
    return [first.setdefault(trace.root(p), i) if isinstance(p, TensorProxy) else -1
            for i, p in enumerate(outputs)]


def channels_last_trace(first, retrace):
    """`first` (an acquisition), or the acquisition `retrace(chosen)` makes with its
    :func:`candidates` channels_last, where the program cannot tell them apart."""
    chosen = candidates(first)
    if not chosen:
        return first
    try:
        second = retrace(chosen)
    except Exception:   # a view the new layout refuses, a layout the program checks...
        return first
    if second.tags.get("layout_readers") or "replay" in second.tags \
            or "replay" in first.tags or not same_results(first, second):
        return first
    names = ", ".join(first.inputs[i].name for i in sorted(chosen))
    second.tags["notes"] = [*second.tags.get("notes", ()),
                            f"traced with {names} channels_last (tracer/layout.py)"]
    return second
