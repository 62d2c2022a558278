"""Pulling a cotangent back through ``prims.aliased(a, write)``: `a`'s memory after `write`
(a copy_to or index_put_ into a chain of views of `a`: how refs build pad, repeat, a copy in
a memory format, a setitem into a clone).

Functionally the result is `a` with the region the views select replaced by the written
values. So the write gets the cotangent's values in that region (the same chain of views,
replayed on the cotangent), and `a`, if it needs one, gets the cotangent with that region
zeroed. Both are computed on fresh copies of the cotangent laid out as `a` (the views were
computed for a's strides, and the zeroing writes in place), which nothing else reads.
"""
from __future__ import annotations

from primtrace import prims
from primtrace.ir.proxy import Proxy
from primtrace.ir.trace import Node
from primtrace.prims.differentiation import NotDifferentiableError
from primtrace.prims.views import copied

#: the in-place prims whose result is the tensor they write (their first argument), whole
WRITERS = frozenset({"copy_to", "index_put_"})


def view_chain(base: Proxy, target: Proxy, producer: dict) -> list[Node]:
    """The view nodes leading from `base` to `target`, first first."""
    chain = []
    while target.name != base.name:
        node = producer.get(target.name)
        if node is None or "view" not in node.symbol.tags or not node.args:
            raise NotDifferentiableError(
                f"prims.aliased: {target.name} is not a chain of views of {base.name}")
        chain.append(node)
        target = node.args[0]
    return chain[::-1]


def _replay(chain: list[Node], t):
    for node in chain:
        t = node.symbol(t, *node.args[1:], **node.kwargs)
    return t


def aliased_vjp(node: Node, g, producer: dict, wants_base: bool):
    """(cotangent of `a`, or None unless `wants_base`; cotangent of the write's result)."""
    a, write = node.args
    writer = producer.get(write.name)
    if writer is None or writer.symbol.name not in WRITERS:
        raise NotDifferentiableError(f"prims.aliased: {write.name} is not written by one of "
                                     f"{sorted(WRITERS)} (the in-place prims differentiated)")
    chain = view_chain(a, writer.args[0], producer)
    source = g if tuple(g.stride()) == tuple(a.stride()) else copied(g, a.stride())
    grad_write = _replay(chain, source)
    grad_base = None
    if wants_base:
        cleared = copied(g, a.stride())
        region = _replay(chain, cleared)
        zero = prims.full((), 0, dtype=region.dtype, device=region.device)
        grad_base = prims.aliased(cleared, prims.copy_to(region, zero))
    return grad_base, grad_write
