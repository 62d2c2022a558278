"""torch.nn refs: only the elementwise functional activations (``primtrace.refs.nn.functional``)."""
from primtrace.refs.nn import functional  # noqa: F401
