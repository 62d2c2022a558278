"""Bitwise refs: and, or, xor, not, shifts."""
__all__ = []
