"""torch.nn refs: ``primtrace.refs.nn.functional``: the elementwise activations, softmax and
the norms (``softmax_norms``), the regression losses (``losses``), convolution and
pooling (``convolution``)."""
from primtrace.refs.nn import functional  # noqa: F401
