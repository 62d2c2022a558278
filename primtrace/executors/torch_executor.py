"""The torch executor: runs every prim and opaque node with torch; always the last executor.

A prim's torch implementation is the one its Symbol carries (the same code that runs the
prim eagerly), minus the meta-function contract check, which the trace already passed.
Registered implementations (``TORCH.register``) take precedence, as in any operator
executor.
"""
from __future__ import annotations

from typing import Callable

import torch

from primtrace.executors.base import OperatorExecutor
from primtrace.ir.symbol import SymbolKind
from primtrace.ir.trace import Node


class TorchExecutor(OperatorExecutor):
    """Claims every node whose symbol has a torch implementation (prims, opaque calls)."""

    def __init__(self, name: str = "torch"):
        super().__init__(name)

    def claims(self, node: Node) -> bool:
        return super().claims(node) or (
            node.symbol.kind in (SymbolKind.PRIM, SymbolKind.OPAQUE) and node.symbol.impl is not None)

    def implementation(self, node: Node) -> Callable:
        if super().claims(node):
            return super().implementation(node)
        if node.symbol.kind not in ("prim", "opaque") or node.symbol.impl is None:
            raise KeyError(f"torch executor cannot run {node.symbol.qualname}")
        return node.symbol.impl


#: The torch executor every jit appends last.
TORCH = TorchExecutor()

# A direct method call is cheaper than the prim's lambda on the hot path of tiny tensors.
TORCH.register("convert_element_type", torch.Tensor.to)
