"""torch.special: the elementwise special functions torch supports on CPU.

``refs.special.<name>`` mirrors ``torch.special.<name>``. Aliases of torch-level functions
are the very same refs; the others are rows of tables (a promotion kind, then one prim)
or a few lines of prims. Several of eager's CPU kernels have no float16/bfloat16
version: those refs raise eager's NotImplementedError for them rather than computing.
"""
from __future__ import annotations

import math

from primtrace import prims
from primtrace.refs import binary, unary
from primtrace.refs.checks import (no_low_precision, not_both_numbers, not_implemented,
                                   same_dtype_out)
from primtrace.refs.core import elementwise, exports, ref, with_gradient
from primtrace.refs.nn import functional
from primtrace.refs.promotion import DEFAULT, INT_TO_FLOAT
from primtrace.refs.unary import round_decimals, unary_ref

MODULE = "refs.special"

# --- torch-level refs under torch.special's names ----------------------------------------------
expit, exp2, expm1, log1p = unary.sigmoid, unary.exp2, unary.expm1, unary.log1p
logit, erf, erfc, erfinv, i0 = unary.logit, unary.erf, unary.erfc, unary.erfinv, unary.i0
digamma = psi = unary.digamma
gammaln, sinc, polygamma, multigammaln = unary.lgamma, unary.sinc, unary.polygamma, unary.mvlgamma
gammainc, gammaincc = binary.igamma, binary.igammac
xlogy = binary.xlogy


@elementwise(DEFAULT, ("input",), module=MODULE, checks=[same_dtype_out])
def round(input, *, decimals=0):
    """torch.round without its integer shortcut: eager refuses bool/integers here."""
    if not input.dtype.is_floating_point:
        raise not_implemented("round_vml_cpu", input.dtype)
    return round_decimals(input, decimals)


# --- one prim after INT_TO_FLOAT promotion ----------------------------------------------------
# name, whether eager's CPU kernel has float16/bfloat16 versions
UNARY = [
    ("erfcx", False), ("ndtri", False), ("log_ndtr", False),
    ("i0e", True), ("i1", True), ("i1e", True),
    ("bessel_j0", False), ("bessel_j1", False), ("bessel_y0", False), ("bessel_y1", False),
    ("modified_bessel_i0", False), ("modified_bessel_i1", False),
    ("modified_bessel_k0", False), ("modified_bessel_k1", False),
    ("scaled_modified_bessel_k0", False), ("scaled_modified_bessel_k1", False),
    ("spherical_bessel_j0", False), ("airy_ai", False),
]
globals().update((name, unary_ref(name, getattr(prims, name), module=MODULE,
                                  checks=[] if low_precision else [no_low_precision]))
                 for name, low_precision in UNARY)


def _body(prim, second):
    """A body calling `prim` whose second parameter has torch's name ("other" or "n")."""
    if second == "n":
        def body(input, n):
            return prim(input, n)
    else:
        def body(input, other):
            return prim(input, other)
    return body


def binary_ref(name, prim, kind, second="other", *, low_precision=True):
    """torch.special.<name>(input, <second>, *, out=None): `kind` promotion, then `prim`;
    either argument may be a Python number (never both)."""
    body = _body(prim, second)
    body.__name__ = body.__qualname__ = name
    body.__doc__ = f"{prim.qualname} after {kind.name} promotion."
    checks = [not_both_numbers] if low_precision else [not_both_numbers, no_low_precision]
    return elementwise(kind, ("input", second), module=MODULE, scalars=("input", second),
                       checks=checks)(body)


xlog1py = binary_ref("xlog1py", prims.xlog1py, INT_TO_FLOAT)
zeta = binary_ref("zeta", prims.zeta, INT_TO_FLOAT, low_precision=False)

# the orthogonal polynomials P_n(x): n is truncated to an integer by the kernel
POLYNOMIALS = ("chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
               "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t",
               "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
               "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he",
               "laguerre_polynomial_l", "legendre_polynomial_p")
globals().update((name, binary_ref(name, getattr(prims, name), INT_TO_FLOAT, "n",
                                   low_precision=False)) for name in POLYNOMIALS)


# --- composites -------------------------------------------------------------------------------
@elementwise(INT_TO_FLOAT, ("input",), module=MODULE)
def ndtr(input):
    """The standard normal CDF as eager writes it: (1 + erf(x / sqrt(2))) / 2 (no erfc, so
    the far lower tail is 0, as in eager)."""
    erf = prims.erf(prims.mul(input, 0.7071067811865476))  # M_SQRT1_2
    return prims.mul(prims.add(erf, 1), 0.5)


@elementwise(INT_TO_FLOAT, ("input",), module=MODULE)
def entr(input):
    """-x log(x) for x > 0 (NaN stays NaN), 0 at 0, -inf below 0. Differentiated as eager's
    -(1 + log(x)) * g: +inf at 0 and -inf at inf, where the product rule gives 0 * inf."""
    x = input
    zero, inf = prims.eq(x, 0), prims.eq(x, math.inf)
    value = prims.where(prims.lt(x, 0), -math.inf,
                        prims.where(zero, 0, prims.mul(prims.neg(x), prims.log(x))))

    def pieces():
        edge = prims.bitwise_or(zero, inf)
        safe = prims.where(edge, 1, x)   # the product's derivative finite where it is unused
        slope = prims.where(zero, math.inf, prims.where(inf, -math.inf, prims.mul(safe, 0)))
        return [(edge, prims.mul(x, slope)),
                (prims.bitwise_not(edge), prims.mul(prims.neg(safe), prims.log(safe)))]
    return with_gradient(value, pieces)


# --- torch.special's softmax names: dim required; softmax's dtype may come third (F's third
# parameter is _stacklevel), log_softmax's only by keyword ----------------------------------
def _softmax_ref(name, positional_dtype):
    f_ref = getattr(functional, name)

    def call(input, dim, dtype):
        if dim is None:
            raise TypeError(f"special_{name}(): argument 'dim' (position 2) must be int, not "
                            f"NoneType")
        return f_ref(input, dim, dtype=dtype)
    if positional_dtype:
        def body(input, dim, dtype=None):
            return call(input, dim, dtype)
    else:
        def body(input, dim, *, dtype=None):
            return call(input, dim, dtype)
    body.__name__ = body.__qualname__ = name
    body.__doc__ = f"torch.special.{name}: F.{name} along a given dim."
    return ref(body, module=MODULE)


softmax, log_softmax = _softmax_ref("softmax", True), _softmax_ref("log_softmax", False)

__all__ = exports(globals(), MODULE)
