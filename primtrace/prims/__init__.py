"""Strict primitive operations.

A prim does one thing to operands that already agree: same shape (0-dim tensors and
Python numbers act as scalars), same dtype, no promotion. Each prim is a
:class:`~primtrace.ir.Symbol` with a meta function, used on proxies while tracing and as
the contract check on real tensors, and a torch implementation.
"""
from primtrace.prims import attention as _attention
from primtrace.prims import data_dependent as _data_dependent
from primtrace.prims import dtype_views as _dtype_views
from primtrace.prims import elementwise as _elementwise
from primtrace.prims import indexing as _indexing
from primtrace.prims import library as _library
from primtrace.prims import library_grads as _library_grads
from primtrace.prims import linalg as _linalg
from primtrace.prims import random as _random
from primtrace.prims import scans as _scans
from primtrace.prims import spectral as _spectral
from primtrace.prims import reductions as _reductions
from primtrace.prims import structural as _structural
from primtrace.prims import views as _views
from primtrace.prims.elementwise import *  # noqa: F401,F403  (the table-generated prims)
from primtrace.prims.guards import check_fits, check_item_fits  # noqa: F401
from primtrace.prims.meta import PrimContractError, elementwise_strides  # noqa: F401
from primtrace.prims.structural import (broadcast_in_dim, convert_element_type, copy_to,  # noqa: F401
                                        full, iota, item, polygamma, resize, where)
from primtrace.prims.structural import complex_ as complex  # noqa: F401,A001
from primtrace.prims.structural import constant, full_like, full_strided  # noqa: F401
from primtrace.prims.dtype_views import (conj_view, imag_view, libm_pow, real_view,  # noqa: F401
                                         view_as_complex, view_as_real)
from primtrace.prims.reductions import amax, amin, prod, var  # noqa: F401
from primtrace.prims.reductions import sum  # noqa: F401
from primtrace.prims.indexing import *  # noqa: F401,F403
from primtrace.prims.data_dependent import *  # noqa: F401,F403  (data-dependent sizes)
from primtrace.prims.linalg import *  # noqa: F401,F403
from primtrace.prims.random import *  # noqa: F401,F403
from primtrace.prims.scans import *  # noqa: F401,F403
from primtrace.prims.views import (aliased, as_strided, cat, diagonal, expand, flip,  # noqa: F401
                                   pad, permute, reshape_view, slice, squeeze, unfold, unsqueeze)
from primtrace.prims.library import *  # noqa: F401,F403  (convolution, pooling)
from primtrace.prims.spectral import *  # noqa: F401,F403  (FFTs)
from primtrace.prims.library_grads import *  # noqa: F401,F403
from primtrace.prims.attention import *  # noqa: F401,F403  (attention's fused CPU kernels)
from primtrace.prims import guards as _guards
from primtrace.prims.differentiation import check_derivatives as _check_derivatives

#: name -> Symbol, every prim.
ALL_PRIMS = {**_elementwise.PRIMS, **_structural.PRIMS, **_reductions.PRIMS, **_dtype_views.PRIMS,
             **_views.PRIMS, **_library.PRIMS,
             "check_fits": check_fits, "check_item_fits": check_item_fits}
ALL_PRIMS.update({**_linalg.PRIMS, **_indexing.PRIMS, **_scans.PRIMS, **_random.PRIMS,
                  **_spectral.PRIMS, **_library_grads.PRIMS, **_data_dependent.PRIMS,
                  **_attention.PRIMS})
#: name -> how the prim differentiates: a VJP rule or a NotDifferentiable mark
#: (primtrace.prims.differentiation), kept beside each prim in its module
VJP_RULES = {}
for _module in (_elementwise, _structural, _reductions, _dtype_views, _views, _library, _guards,
                _linalg, _indexing, _scans, _random, _spectral, _library_grads, _data_dependent,
                _attention):
    VJP_RULES.update(_module.DERIVATIVES)
_check_derivatives(ALL_PRIMS, VJP_RULES)
UNARY = [row[0] for row in _elementwise.UNARY]
BINARY = [row[0] for row in _elementwise.BINARY]
