"""The kinds of symbols: a module of its own so that the printer and the drawing, which
the trace imports lazily, need not import symbol.py (which imports the trace)."""
import enum


class SymbolKind(enum.StrEnum):
    """What a symbol is, which decides how passes, executors and printers treat its nodes."""
    PRIM = "prim"      # strict primitive: a meta function and a torch implementation
    REF = "ref"        # a torch-level op written in prims: recorded with its prims nested
    OPAQUE = "opaque"  # a torch call run as is (no ref, or kept for autograd): a leaf
    FUSED = "fused"    # a region of prims an executor compiled into one callable
