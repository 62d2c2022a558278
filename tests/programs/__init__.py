"""Real programs (models and library-style functions written as users write them) through
primtrace.jit and torch.compile(backend="primtrace"), compared with eager PyTorch."""
