"""torch.special: the elementwise special functions torch supports on CPU."""
__all__ = []
