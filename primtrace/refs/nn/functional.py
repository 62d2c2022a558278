"""torch.nn.functional's elementwise activations, written in prims."""
__all__ = []
