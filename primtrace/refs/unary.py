"""Unary elementwise refs (math, rounding, classification), mostly rows of a table."""
__all__ = []
