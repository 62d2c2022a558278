"""Every prim's VJP rule against the prim's torch implementation, by the dot-product identity
in float64: <J u, v> == <u, J^T v> for random u and v, with J u from torch.func.jvp of the
prim's impl (central finite differences where torch has no forward derivative) and J^T v
from the rule, run on real tensors (prims run eagerly). No hand-written gradient is needed.

Complex samples use torch's convention: the real inner product Re(sum(conj(x) * y)), under
which the cotangent a rule returns is the adjoint of J.
"""
from __future__ import annotations

import math
import warnings

import pytest
import torch

from primtrace import prims
from primtrace.prims.differentiation import NotDifferentiable, vjp

F64, C128 = torch.float64, torch.complex128
_generator = torch.Generator().manual_seed(0)


def rand(*shape, low=-2.0, high=2.0, dtype=F64):
    """Uniform values in [low, high) (complex: both parts)."""
    real = torch.rand(shape, generator=_generator, dtype=F64) * (high - low) + low
    if dtype.is_complex:
        imag = torch.rand(shape, generator=_generator, dtype=F64) * (high - low) + low
        return torch.complex(real, imag)
    return real.to(dtype)


def _differentiable(x) -> bool:
    return isinstance(x, torch.Tensor) and (x.dtype.is_floating_point or x.dtype.is_complex)


def _leaves(args, fixed):
    """(position, index in a list argument or None, tensor) of each differentiable input."""
    for i, a in enumerate(args):
        if i in fixed:
            continue
        if isinstance(a, (list, tuple)) and a and all(isinstance(t, torch.Tensor) for t in a):
            yield from ((i, j, t) for j, t in enumerate(a) if _differentiable(t))
        elif _differentiable(a):
            yield i, None, a


def _substitute(args, leaves, values):
    args = list(args)
    for (i, j, _), v in zip(leaves, values):
        args[i] = v if j is None else [*args[i][:j], v, *args[i][j + 1:]]
    return args


def _inner(x, y) -> float:
    return float(torch.sum(torch.conj(x) * y).real) if x.dtype.is_complex or y.dtype.is_complex \
        else float(torch.sum(x * y))


def _flat(y):
    return list(y) if isinstance(y, tuple) else [y]


def _jvp(prim, args, kwargs, leaves, tangents):
    primals = [t for _, _, t in leaves]

    def f(*values):
        args_ = _substitute(args, leaves, values)
        if "inplace" in prim.tags:   # write into a copy: the inputs stay as they are
            args_[0] = args_[0].clone()
        return prim.impl(*args_, **kwargs)
    try:
        return _flat(torch.func.jvp(f, tuple(primals), tuple(tangents))[1])
    except (RuntimeError, NotImplementedError):
        eps = 1e-6
        plus = f(*[p + eps * t for p, t in zip(primals, tangents)])
        minus = f(*[p - eps * t for p, t in zip(primals, tangents)])
        return [(a - b) / (2 * eps) for a, b in zip(_flat(plus), _flat(minus))]


def check_vjp(name, *args, rtol=1e-6, fixed=(), **kwargs):
    """The identity for prims.<name>(*args, **kwargs), over its differentiable arguments but
    those at the positions `fixed`."""
    prim = prims.ALL_PRIMS[name]
    leaves = list(_leaves(args, fixed))
    assert leaves, f"{name}: a sample without a differentiable input"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # complex -> real conversions
        y = prim(args[0].clone(), *args[1:], **kwargs) if "inplace" in prim.tags else \
            prim(*args, **kwargs)
        tangents = [rand(*t.shape, dtype=t.dtype) for _, _, t in leaves]
        ju = _jvp(prim, list(args), kwargs, leaves, tangents)
        outs = _flat(y)
        cotangents = [rand(*o.shape, dtype=o.dtype) if _differentiable(o) else None for o in outs]
        g = tuple(cotangents) if isinstance(y, tuple) else cotangents[0]
        grads = vjp(prim, g, y, args, kwargs)
    lhs = sum(_inner(v, j) for v, j in zip(cotangents, ju) if v is not None)
    rhs = 0.0
    for (i, j, t), u in zip(leaves, tangents):
        grad = grads[i] if j is None else grads[i][j]
        assert not isinstance(grad, NotDifferentiable), f"{name}: argument {i} {grad}"
        if grad is None:
            continue
        assert tuple(grad.shape) == tuple(t.shape) and grad.dtype == t.dtype, (
            f"{name}: cotangent {grad.dtype}{list(grad.shape)} for {t.dtype}{list(t.shape)}")
        rhs += _inner(u, grad)
    assert math.isclose(lhs, rhs, rel_tol=rtol, abs_tol=1e-9), (
        f"{name}: <Ju, v> {lhs} != <u, J^T v> {rhs}")


# --- elementwise ---------------------------------------------------------------------------------
#: the input range where the function is smooth (default: [-2, 2))
DOMAIN = {
    "log": (0.2, 3), "log2": (0.2, 3), "log10": (0.2, 3), "sqrt": (0.2, 3), "rsqrt": (0.2, 3),
    "reciprocal": (0.5, 2), "lgamma": (0.2, 3), "digamma": (0.2, 3), "log1p": (-0.5, 2),
    "asin": (-0.9, 0.9), "acos": (-0.9, 0.9), "atanh": (-0.9, 0.9), "erfinv": (-0.9, 0.9),
    "acosh": (1.2, 3), "ndtri": (0.1, 0.9), "abs": (0.1, 2), "tan": (-1, 1),
}
BINARY_DOMAIN = {   # (a's, b's)
    "div": ((-2, 2), (0.5, 2)), "pow": ((0.2, 2), (-2, 2)), "remainder": ((0.1, 3), (0.7, 1.3)),
    "fmod": ((0.1, 3), (0.7, 1.3)), "zeta": ((1.5, 3), (0.5, 2)), "igamma": ((0.5, 2), (0.5, 2)),
    "igammac": ((0.5, 2), (0.5, 2)), "xlog1py": ((-2, 2), (-0.5, 2)), "copysign": ((0.2, 2), (-2, 2)),
    "nextafter": ((-2, 2), (-2, 2)), "libm_pow": ((0.2, 2), (-2, 2)),
}
#: binary prims whose first argument has no derivative (torch's neither)
SECOND_ONLY = {"zeta", "igamma", "igammac"}
HOLOMORPHIC = ["neg", "reciprocal", "sqrt", "rsqrt", "exp", "expm1", "log", "log1p", "sin", "cos",
               "tan", "sinh", "cosh", "tanh", "sigmoid", "asin", "atan", "asinh", "clone", "exp2",
               "log2", "log10", "acos", "atanh", "acosh"]
NON_HOLOMORPHIC = ["abs", "sgn", "real", "imag", "conj"]


def _rules_of(names):
    return [n for n in names if not isinstance(prims.VJP_RULES[n], NotDifferentiable)]


@pytest.mark.parametrize("name", _rules_of(prims.UNARY))
def test_unary(name):
    if name in ("sgn", "real", "imag", "conj"):   # complex only
        return check_vjp(name, rand(3, 4, dtype=C128))
    low, high = DOMAIN.get(name, (-2, 2))
    check_vjp(name, rand(3, 4, low=low, high=high))
    check_vjp(name, rand(low=low, high=high))   # 0-dim


@pytest.mark.parametrize("name", HOLOMORPHIC + NON_HOLOMORPHIC)
def test_unary_complex(name):
    low, high = {"log": (0.3, 2), "acosh": (1.2, 2)}.get(name, (-0.8, 0.8))
    check_vjp(name, rand(3, 4, low=low, high=high, dtype=C128))


#: prims whose rule is not their torch implementation's derivative, by design: tested apart
NOT_THEIR_IMPL = {"differentiate_as"}


@pytest.mark.parametrize("name", [n for n in _rules_of(prims.BINARY) if n not in NOT_THEIR_IMPL]
                         + ["libm_pow"])
def test_binary(name):
    (a_low, a_high), (b_low, b_high) = BINARY_DOMAIN.get(name, ((-2, 2), (-2, 2)))

    def a(*shape):
        return rand(*shape, low=a_low, high=a_high)

    def b(*shape):
        return rand(*shape, low=b_low, high=b_high)
    cases = [(a(3, 4), b(3, 4)), (a(3, 4), b()), (a(), b(3, 4)), (a(), b()),
             (a(3, 4), float(b())), (float(a()), b(3, 4))]
    for x, y in cases:
        try:
            prims.ALL_PRIMS[name](x, y)
        except (TypeError, AttributeError, prims.PrimContractError):   # a number its impl refuses
            continue
        if name in SECOND_ONLY and not isinstance(y, torch.Tensor):
            continue
        check_vjp(name, x, y, fixed=(0,) if name in SECOND_ONLY else ())


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "pow"])
def test_binary_complex(name):
    low, high = (0.3, 1.5) if name in ("div", "pow") else (-2, 2)
    check_vjp(name, rand(3, 4, low=low, high=high, dtype=C128),
              rand(3, 4, low=low, high=high, dtype=C128))
    check_vjp(name, rand(3, 4, low=low, high=high, dtype=C128), 1.5 - 0.5j)


@pytest.mark.parametrize("reduce", ["amax", "amin", "mean", "sum"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reductions_share_ties_as_torch(reduce, include_self):
    a = torch.tensor([[1.0, 5.0, 2.0], [3.0, 3.0, 0.0]], dtype=F64)
    src = torch.tensor([[5.0, 5.0, 1.0], [3.0, 7.0, 7.0]], dtype=F64)
    index = _index(1, 1, 0, 0, 2, 2).view(2, 3)
    kwargs = {"reduce": reduce, "include_self": include_self}
    y = prims.scatter(a, 1, index, src, **kwargs)
    g = rand(2, 3)
    grad_a, _, _, grad_src = vjp(prims.scatter, g, y, (a, 1, index, src), kwargs)
    leaves = a.clone().requires_grad_(), src.clone().requires_grad_()
    expected = torch.autograd.grad(torch.scatter_reduce(leaves[0], 1, index, leaves[1], reduce,
                                                        include_self=include_self), leaves, g)
    torch.testing.assert_close((grad_a, grad_src), expected)


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_maximum_and_minimum_split_ties_as_torch(name):
    """A tie splits g in halves; a NaN on either side gives both operands the whole g."""
    a = torch.tensor([1.0, 2.0, 3.0, math.nan, 1.0, math.nan, -0.0], dtype=F64)
    b = torch.tensor([1.0, 1.0, 4.0, 1.0, math.nan, math.nan, 0.0], dtype=F64)
    g = rand(7)
    prim = getattr(prims, name)
    grads = vjp(prim, g, prim(a, b), (a, b), {})
    leaves = a.clone().requires_grad_(), b.clone().requires_grad_()
    expected = torch.autograd.grad(getattr(torch, name)(*leaves), leaves, g)
    assert all(torch.equal(got, want) for got, want in zip(grads, expected))


def test_differentiate_as_is_its_value_with_the_carriers_gradient():
    """The value passes (a new tensor, laid out as an elementwise result of both operands);
    the whole cotangent goes to the carrier, none to the value; a number carrier stops it."""
    value, carrier = rand(3, 4), rand(4, 3).T
    y = prims.differentiate_as(value, carrier)
    assert torch.equal(y, value) and y.data_ptr() != value.data_ptr()
    assert y.stride() == (value + carrier).stride()   # an elementwise result's layout
    g = rand(3, 4)
    grad_value, grad_carrier = vjp(prims.differentiate_as, g, y, (value, carrier), {})
    assert grad_value is None and torch.equal(grad_carrier, g)
    assert vjp(prims.differentiate_as, g, y, (value, 0.0), {}) == (None, None)


# --- the other prims: (name, args, kwargs) ------------------------------------------------------
def _index(*values):
    return torch.tensor(values, dtype=torch.int64)


def _structural():
    x = rand(3, 4)
    yield "convert_element_type", (x, F64), {}
    yield "convert_element_type", (x, C128), {}
    yield "convert_element_type", (rand(3, 4, dtype=C128), F64), {}
    yield "broadcast_in_dim", (rand(3, 1), (2, 3, 4), (1, 2)), {}
    yield "broadcast_in_dim", (rand(4), (3, 4), (1,)), {}
    yield "broadcast_in_dim", (rand(), (3, 4), ()), {}
    yield "where", (x > 0, rand(3, 4), rand(3, 4)), {}
    yield "where", (x > 0, rand(3, 4), 0.5), {}
    yield "where", (x > 0, rand(), rand(3, 4)), {}
    yield "polygamma", (rand(3, 4, low=0.5, high=3), 1), {}
    yield "complex", (rand(3, 4), rand(3, 4)), {}


def _reductions():
    x = rand(3, 4, 5)
    for dims in ((1,), (0, 2), (0, 1, 2), ()):
        yield "sum", (x, dims), {}
        yield "prod", (x, dims), {}
        yield "amax", (x, dims), {}
        yield "amin", (x, dims), {}
        for correction in (0, 1) if dims else (0,):   # one value's var with correction 1: nan
            yield "var", (x, dims), {"correction": correction}
    zeros = rand(3, 4)
    zeros[0, 1] = zeros[1, 1] = zeros[2, 0] = zeros[2, 2] = 0   # rows with one and two zeros
    yield "prod", (zeros, (1,)), {}
    yield "prod", (zeros, (0,)), {}
    yield "prod", (zeros, (0, 1)), {}
    ties = torch.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], dtype=F64)
    yield "amax", (ties, (1,)), {}
    yield "amin", (ties, (0, 1)), {}
    yield "var", (rand(3, 4, dtype=C128), (1,)), {"correction": 1}
    yield "prod", (rand(3, 4, dtype=C128), (1,)), {}
    yield "cumsum", (x, 1), {}
    yield "cumsum", (rand(), 0), {}
    yield "cumprod", (rand(3, 4, low=0.5, high=2), 1), {}
    yield "cumprod", (rand(3, 4, low=0.5, high=2, dtype=C128), 0), {}
    yield "cumprod", (zeros, 1), {}
    yield "cumprod", (zeros, 0), {}
    yield "cumprod", (rand(), 0), {}


def _views():
    x = rand(3, 4, 2)
    yield "reshape_view", (x, (6, 4)), {}
    yield "permute", (x, (2, 0, 1)), {}
    yield "slice", (x, (1, 0, 0), (3, 4, 2), (1, 2, 1)), {}
    yield "slice", (x, (0, 1, 0), (2, 4, 1), (2, 3, 1)), {}
    yield "slice", (x, (0, 2, 0), (3, 2, 2), (1, 1, 1)), {}   # empty
    yield "squeeze", (rand(3, 1, 4, 1), (1, 3)), {}
    yield "unsqueeze", (x, 1), {}
    yield "expand", (rand(3, 1), (2, 3, 4)), {}
    yield "diagonal", (x, 1, 0, 1), {}
    yield "diagonal", (x, -1, 1, 0), {}
    yield "unfold", (rand(6, 3), 0, 3, 2), {}
    yield "unfold", (rand(3, 7), 1, 3, 1), {}   # overlapping windows accumulate
    yield "cat", ([rand(2, 3), rand(4, 3), rand(1, 3)], 0), {}
    yield "cat", ([rand(2, 3), rand(2, 1)], 1), {}
    yield "flip", (x, (0, 2)), {}
    yield "pad", (x, 0.0, ((1, 2, 0), (0, 1, 2), (2, 0, 1))), {}
    yield "view_as_real", (rand(3, 4, dtype=C128),), {}
    yield "view_as_complex", (rand(3, 4, 2),), {}


def _linalg_and_indexing():
    for a, b in (((3, 4), (4, 5)), ((4,), (4,)), ((2, 3, 4), (4,)), ((4,), (2, 4, 5)),
                 ((2, 1, 3, 4), (5, 4, 2)), ((3, 4), (2, 4, 5)), ((2, 3, 4), (4, 5))):
        yield "matmul", (rand(*a), rand(*b)), {}
    yield "matmul", (rand(3, 4, dtype=C128), rand(4, 2, dtype=C128)), {}
    yield "matmul", (rand(2, 3, 4, dtype=C128), rand(4, 2, dtype=C128)), {}
    yield "matmul", (rand(4, 2, 3).transpose(0, 1), rand(3, 5)), {}   # rows not viewable
    x = rand(4, 5)
    yield "index_select", (x, 1, _index(0, 3, 3, 1)), {}
    yield "index_select", (x, 0, _index(0, 2, 2, 1, 3, 0).view(2, 3)), {}   # an embedding
    yield "gather", (x, 1, _index(0, 4, 4, 1, 2, 2, 0, 0).view(4, 2)), {}
    yield "take", (x, _index(0, -1, 7, 7, 19).view(5, 1)), {}
    yield "index", (x, (None, _index(0, 4, 4, -1))), {}
    yield "index", (x, (_index(1, 1, 3), _index(0, 2, 4))), {}
    index = _index(0, 3, 1).view(1, 3).expand(2, 3).contiguous()
    yield "scatter", (x, 1, index, rand(2, 3)), {}
    repeated = _index(0, 0, 3, 1, 1, 1).view(2, 3)   # several values reduce into one
    for reduce in ("sum", "mean", "amax", "amin"):
        for include_self in (True, False):
            for positions in (index, repeated):
                yield "scatter", (x, 1, positions, rand(2, 3)), {"reduce": reduce,
                                                                  "include_self": include_self}
    yield "scatter", (x, 1, index, rand(3, 4)), {}   # src larger than index: the rest unread
    yield "scatter", (x, 1, index, rand(3, 4)), {"reduce": "mean"}
    yield "index_add", (x, 0, _index(1, 3, 1), rand(3, 5), 2.0), {}
    yield "index_copy", (x, 1, _index(4, 0), rand(4, 2)), {}
    yield "index_fill", (x, 1, _index(4, 0), 1.5), {}
    yield "index_put_", (x, (None, _index(4, 0)), rand(2), False), {}
    yield "index_put_", (x, (_index(1, 1, 3),), rand(3, 5), True), {}   # repeats accumulate
    yield "copy_to", (x, rand(4, 5)), {}
    yield "copy_to", (x, rand()), {}
    rows, cells = torch.tensor([True, False, True, True]), rand(4, 5) > 0.5
    yield "mask_select", (x, rows, 0, None), {}       # x[mask]: its count is data
    yield "mask_select", (x, cells, 0, None), {}
    yield "mask_select", (x, torch.tensor([True, False, False, True, True]), 1, None), {}
    yield "mask_put", (x, rows, 0, rand(3, 5)), {}    # x[mask] = v: a row per selected row
    yield "mask_put", (x, rows, 0, rand(5)), {}       # one row, broadcast
    yield "mask_put", (x, cells, 0, rand(int(cells.sum()))), {}


def _library():
    yield "convolution", (rand(2, 4, 7, 6), rand(6, 2, 3, 3), rand(6), (2, 1), (1, 0), (1, 2),
                          False, (0, 0), 2), {}
    yield "convolution", (rand(2, 3, 5), rand(3, 2, 3), None, (2,), (1,), (1,), True, (1,), 1), {}
    yield "convolution", (rand(3, 8), rand(4, 3, 3), rand(4), (1,), (0,), (1,), False, (0,), 1), {}
    yield "max_pool", (rand(2, 3, 6, 6), (2, 2), (2, 1), (1, 0), (1, 1), False), {}
    yield "avg_pool", (rand(2, 3, 6, 6), (3, 2), (2, 2), (1, 0), True, False, None), {}
    yield "adaptive_avg_pool", (rand(2, 3, 7, 5), (3, 2)), {}
    yield "adaptive_max_pool", (rand(2, 3, 7, 5), (3, 2)), {}
    yield "svdvals", (rand(3, 4),), {}
    yield "svd", (rand(4, 3), False), {}


def _complex_views_and_spectral():
    z = rand(3, 4, dtype=C128)
    for name in ("conj_view", "real_view", "imag_view"):
        yield name, (z,), {}
    yield "fft_r2c", (rand(3, 8), "backward", True), {}
    yield "fft_r2c", (rand(3, 8), "ortho", False), {}
    yield "fft_c2c", (z, "forward", True), {}
    yield "fft_c2c", (z, "backward", False), {}
    yield "fft_c2r", (rand(3, 5, dtype=C128), 8, "backward"), {}


SAMPLES = [*_structural(), *_reductions(), *_views(), *_linalg_and_indexing(), *_library(),
           *_complex_views_and_spectral()]


@pytest.mark.parametrize("name,args,kwargs", SAMPLES,
                         ids=[f"{name}-{i}" for i, (name, _, _) in enumerate(SAMPLES)])
def test_rule(name, args, kwargs):
    check_vjp(name, *args, **kwargs)


def test_every_rule_is_tested():
    """A prim with a rule and no sample here is a rule nobody checked."""
    tested = ({name for name, _, _ in SAMPLES} | set(prims.UNARY) | set(prims.BINARY)
              | {"libm_pow", "grouped_mm", "sdpa_flash"})   # tests/autodiff/test_attention_prims.py
    untested = {name for name, rule in prims.VJP_RULES.items()
                if not isinstance(rule, NotDifferentiable)} - tested
    assert not untested, untested


def test_grouped_mm_by_its_groups():
    """torch's CPU kernel takes no float64: its cotangents against the groups' matmuls."""
    a, b = torch.randn(6, 8), torch.randn(2, 8, 4)
    offs = torch.tensor([2, 6], dtype=torch.int32)
    y = prims.grouped_mm(a, b, offs)
    g = torch.randn_like(y)
    grad_a, grad_b, _ = vjp(prims.grouped_mm, g, y, (a, b, offs), {})
    torch.testing.assert_close(grad_a, torch.cat([g[:2] @ b[0].T, g[2:] @ b[1].T]))
    torch.testing.assert_close(grad_b, torch.stack([a[:2].T @ g[:2], a[2:].T @ g[2:]]))


def test_a_prim_without_rule_or_mark_fails_the_check():
    from primtrace.prims.differentiation import check_derivatives
    rules = dict(prims.VJP_RULES)
    del rules["sin"]
    with pytest.raises(AssertionError, match="sin"):
        check_derivatives(prims.ALL_PRIMS, rules)



@pytest.mark.parametrize("op", ["mul", "div", "index_add"])
def test_a_traced_complex_number_is_conjugated(op):
    """A complex Python number given to jit is a runtime input (a NumberProxy, not a
    `complex`): the chain rule's conj(b) for it is computed on a 0-dim tensor, not skipped.
    (Eager's index_add multiplies by alpha, not conj(alpha): gradcheck fails it in torch
    2.13, so its gradient is that of the same sum with the product written out.)"""
    import primtrace
    fns = {"mul": lambda x, b: torch.mul(b, x), "div": lambda x, b: torch.div(x, b),
           "index_add": lambda x, b: x.index_add(0, _index(1, 0), x[:2] * 2, alpha=b)}
    fn = fns[op]
    expected_fn = (lambda x, b: x.index_add(0, _index(1, 0), x[:2] * 2 * b)) \
        if op == "index_add" else fn
    x = rand(2, 3, dtype=C128 if op == "index_add" else F64).requires_grad_()
    g = rand(2, 3, dtype=C128)
    got = torch.autograd.grad(primtrace.jit(fn, executors=[primtrace.TORCH])(x, 1.5 - 2j), x, g)
    torch.testing.assert_close(got, torch.autograd.grad(expected_fn(x, 1.5 - 2j), x, g))


def test_acosh_below_minus_one_follows_torch():
    """acosh is NaN below -1; torch's derivative (a^2 - 1)^(-1/2) is finite there, and so is
    the rule's (rsqrt(a - 1) * rsqrt(a + 1) was NaN)."""
    check_vjp("acosh", rand(3, 4, low=-3, high=-1.2))


@pytest.mark.parametrize("name,shape,arg,kwargs", [
    ("prod", (3, 4), (0, 1), {}), ("cumprod", (3, 4), 1, {}), ("var", (3, 4), (1,), {"correction": 1})])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_rules_compute_in_float32(name, shape, arg, kwargs, dtype):
    """prod, cumprod and var's rules compute in float32 for half dtypes and round once (in
    the half dtype their products of the others and means rounded at every step)."""
    x = rand(*shape, low=0.5, high=2).to(dtype)
    prim = prims.ALL_PRIMS[name]
    y = prim(x, arg, **kwargs)
    g = rand(*y.shape).to(dtype)
    got = vjp(prim, g, y, (x, arg), kwargs)[0]
    want = vjp(prim, g.float(), y.float(), (x.float(), arg), kwargs)[0].to(dtype)
    assert torch.equal(got, want)



def test_square_rule_is_two_x_without_pow():
    """x ** 2's derivative is 2 * x, as eager's a.pow(1) (a copy), not a general pow by 1 (a
    per-element pow call in a fused kernel: RMSNorm's backward took 20x longer)."""
    import primtrace
    a = torch.tensor([-0.0, 1.5, float("nan"), float("inf"), -3.0, 1e-30], requires_grad=True)
    g = torch.linspace(-1, 1, 6)
    a.pow(2).backward(g)
    y = prims.pow(a.detach(), 2)
    got, _ = vjp(prims.pow, g, y, (a.detach(), 2), {})
    assert torch.equal(got.nan_to_num(7.0), a.grad.nan_to_num(7.0))
    jfn = primtrace.jit(lambda x: x.pow(2))
    x = torch.randn(3, requires_grad=True)
    jfn(x).sum().backward()
    backward = primtrace.last_trace(jfn).tags["backward"][0]
    assert not any(n.symbol.name == "pow" for n in backward.nodes), backward


_NAN = float("nan")
EDGES = [   # prim, its arguments, the torch function whose autograd gives the cotangents
    ("nextafter", (torch.tensor([-1.0, 2.0, -math.inf, 1.0], dtype=F64),
                   torch.tensor([-1.0, 3.0, -math.inf, _NAN], dtype=F64)), torch.nextafter),
    ("maximum", (torch.tensor([_NAN, 1.0, 2.0, 3.0], dtype=F64),
                 torch.tensor([1.0, _NAN, 2.0, 1.0], dtype=F64)), torch.maximum),
    ("minimum", (torch.tensor([_NAN, 1.0, 2.0, 3.0], dtype=F64),
                 torch.tensor([1.0, _NAN, 2.0, 1.0], dtype=F64)), torch.minimum),
    # a / b rounds up to an integer: -(a // b) is 249, floor(a / b) 250
    ("remainder", (torch.tensor([-0.25, 0.25, 7.0, 1e30], dtype=F64),
                   torch.tensor([-1e-3, 1e-3, 0.1, 3e-8], dtype=F64)), torch.remainder),
    ("amax", (torch.tensor([[_NAN, 1.0, 2.0], [1.0, 3.0, 3.0]], dtype=F64), (1,)),
     lambda a, dims: torch.amax(a, dims)),
    # g / a: 1 / a overflows float32 at the smallest denormal
    ("log", (torch.tensor([2.0 ** -128, 1e-45, 1.0], dtype=torch.float32),), torch.log),
    # 1/2 where |a| <= eps, NaN included, as torch's
    ("i1", (torch.tensor([_NAN, 1e-20, 0.0, 1.5], dtype=F64),), torch.special.i1),
    ("i1e", (torch.tensor([_NAN, -1e-20, 0.0, 1.5], dtype=F64),), torch.special.i1e),
]


@pytest.mark.parametrize("name,args,fn", EDGES, ids=[e[0] for e in EDGES])
def test_rules_match_torch_at_edges(name, args, fn):
    """Where the derivative is a convention (NaN operands, ties, a quotient rounded to an
    integer), the rule's cotangents are torch autograd's, NaN where its are."""
    prim = prims.ALL_PRIMS[name]
    y = prim(*args)
    g = rand(*y.shape).to(y.dtype)
    got = vjp(prim, g, y, args, {})
    leaves = [a.clone().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]
    tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
    want = torch.autograd.grad(fn(*leaves), tensors, g, allow_unused=True)
    for ours, theirs in zip(got, want):
        if ours is None or theirs is None:   # none is zeros (backward_trace makes them)
            assert not bool((theirs if ours is None else ours).any())
        else:
            torch.testing.assert_close(ours, theirs, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shapes", [((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)), ((4,), (2, 4, 5))])
def test_half_matmul_sums_its_batch_once(shapes, dtype):
    """A matrix against a batch: its cotangent is one product over the batch's rows (or the
    products summed in float32), rounded once, not per-batch products rounded then summed."""
    a, b = rand(*shapes[0]).to(dtype), rand(*shapes[1]).to(dtype)
    y = prims.matmul(a, b)
    g = rand(*y.shape).to(dtype)
    got = vjp(prims.matmul, g, y, (a, b), {})
    want = vjp(prims.matmul, g.float(), y.float(), (a.float(), b.float()), {})
    for ours, wide in zip(got, want):
        torch.testing.assert_close(ours, wide.to(dtype), rtol=0, atol=0)
