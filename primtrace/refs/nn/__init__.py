"""torch.nn refs: ``primtrace.refs.nn.functional``: the elementwise activations, softmax and
the norms (``softmax_norms``) and the regression losses (``losses``)."""
from primtrace.refs.nn import functional  # noqa: F401
