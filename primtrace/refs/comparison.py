"""Comparison and logical refs: eq, ne, lt, ..., logical_and/or/xor/not."""
__all__ = []
