"""PyTorch-compatible references, written in prims.

Each ref is plain Python: type promotion, conversion, broadcasting, prim calls. Called on
real tensors it runs eagerly, one prim at a time; called on proxies it records a trace.
``primtrace.refs.<name>`` mirrors ``torch.<name>``; ``refs.special`` mirrors
``torch.special`` and ``refs.nn.functional`` mirrors ``torch.nn.functional``.
"""
from primtrace.refs.arithmetic import *  # noqa: F401,F403
from primtrace.refs.binary import *  # noqa: F401,F403
from primtrace.refs.bitwise import *  # noqa: F401,F403
from primtrace.refs.comparison import *  # noqa: F401,F403
from primtrace.refs.complex_numbers import *  # noqa: F401,F403
from primtrace.refs.conversion import *  # noqa: F401,F403
from primtrace.refs.creation import *  # noqa: F401,F403
from primtrace.refs.dtype_views import *  # noqa: F401,F403
from primtrace.refs.indexing import *  # noqa: F401,F403
from primtrace.refs.joins import *  # noqa: F401,F403
from primtrace.refs.norms import *  # noqa: F401,F403
from primtrace.refs.products import *  # noqa: F401,F403
from primtrace.refs.queries import *  # noqa: F401,F403
from primtrace.refs.random import *  # noqa: F401,F403
from primtrace.refs.ranges import *  # noqa: F401,F403
from primtrace.refs.reductions import *  # noqa: F401,F403
from primtrace.refs.scans import *  # noqa: F401,F403
from primtrace.refs.selection import *  # noqa: F401,F403
from primtrace.refs.slicing import *  # noqa: F401,F403
from primtrace.refs.ternary import *  # noqa: F401,F403
from primtrace.refs.unary import *  # noqa: F401,F403
from primtrace.refs.views import *  # noqa: F401,F403
from primtrace.refs.spectral import *  # noqa: F401,F403
from primtrace.refs.writes import *  # noqa: F401,F403
from primtrace.refs.promotion import Kind, elementwise_dtypes, result_type  # noqa: F401
from primtrace.refs import linalg, nn, special  # noqa: F401,E402
from primtrace.refs.nn.softmax_norms import log_softmax, softmax  # noqa: F401,E402  (torch.softmax)
