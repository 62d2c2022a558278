"""Conformance of primtrace.refs.special against torch.special."""
import pytest
import torch

from primtrace.refs import special
from primtrace.refs.special import POLYNOMIALS, UNARY
from tests.conformance.harness import OpSpec, run_conformance, run_out_conformance
from tests.conformance.test_unary import check_traces_like_eager


def spec(name, **kw):
    return OpSpec(f"special.{name}", getattr(special, name), getattr(torch.special, name), **kw)


DOMAINS = {"ndtri": (-0.2, 1.2), "log_ndtr": (-40.0, 8.0), "erfcx": (-8.0, 30.0),
           "i0e": (-30.0, 30.0), "i1": (-20.0, 20.0), "i1e": (-30.0, 30.0),
           "modified_bessel_i0": (-20.0, 20.0), "modified_bessel_i1": (-20.0, 20.0),
           "modified_bessel_k0": (-1.0, 20.0), "modified_bessel_k1": (-1.0, 20.0),
           "scaled_modified_bessel_k0": (-1.0, 20.0), "scaled_modified_bessel_k1": (-1.0, 20.0),
           "bessel_y0": (-1.0, 20.0), "bessel_y1": (-1.0, 20.0), "airy_ai": (-10.0, 10.0)}
EITHER = dict(arity=2, scalar_args=(0, 1))

SPECS = [
    # aliases of torch-level refs
    *(spec(name) for name in ("expit", "exp2", "expm1", "log1p", "erf", "erfc", "i0", "sinc")),
    spec("erfinv", domain=(-1.2, 1.2)), spec("digamma", domain=(-3.0, 8.0)),
    spec("psi", domain=(-3.0, 8.0)), spec("gammaln", domain=(-3.0, 8.0)),
    spec("logit", domain=(-0.2, 1.2), kwargs_variants=({}, {"eps": 1e-6}, {"eps": 0.3})),
    spec("polygamma", fixed_args={0: 2}, domain=(-3.0, 6.0)),
    spec("multigammaln", fixed_args={1: 3}, domain=(0.0, 8.0)),
    spec("round", domain=(-50.0, 50.0), kwargs_variants=({}, {"decimals": 1}, {"decimals": -1})),
    # one prim after promotion
    *(spec(name, domain=DOMAINS.get(name, (-5.0, 5.0))) for name, _ in UNARY),
    # composites
    spec("ndtr", domain=(-8.0, 8.0)), spec("entr", domain=(-1.0, 5.0)),
    spec("xlogy", domain=(-1.0, 5.0), **EITHER),
    spec("xlog1py", domain=(-2.0, 5.0), **EITHER),
    spec("zeta", domain=(0.0, 6.0), **EITHER),
    spec("gammainc", arity=2, domain=(0.0, 6.0)), spec("gammaincc", arity=2, domain=(0.0, 6.0)),
    *(spec(name, domain=(-1.5, 6.0), **EITHER) for name in POLYNOMIALS),
]


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_conformance(spec):
    run_conformance(spec)


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_out_conformance(spec):
    run_out_conformance(spec)


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_traces_like_eager(spec):
    check_traces_like_eager(spec)


@pytest.mark.parametrize("name", ["xlogy", "zeta", "xlog1py", "chebyshev_polynomial_t"])
def test_two_numbers_are_refused(name):
    with pytest.raises(TypeError):
        getattr(torch.special, name)(2.0, 3.0)
    with pytest.raises(TypeError):
        getattr(special, name)(2.0, 3.0)


def test_the_half_types_are_refused_where_eager_has_no_kernel():
    x = torch.ones(3, dtype=torch.float16)
    for name in ("bessel_j0", "erfcx", "zeta", "laguerre_polynomial_l"):
        args = (x, x) if name in ("zeta", "laguerre_polynomial_l") else (x,)
        with pytest.raises(NotImplementedError):
            getattr(torch.special, name)(*args)
        with pytest.raises(NotImplementedError):
            getattr(special, name)(*args)
    # float16 with a float32 tensor promotes to float32: then it is computed
    y = torch.ones(3, dtype=torch.float32)
    assert special.zeta(x, y).dtype == torch.special.zeta(x, y).dtype == torch.float32
