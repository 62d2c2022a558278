"""torch.linalg refs (``refs.linalg``, found for torch.linalg.<name> by name): vector_norm,
matrix_norm, norm, vecdot, cross, and matmul (torch.matmul's ref).

The norms reduce |x| in the opmath dtype (float32 for float16/bfloat16, as eager's kernel
accumulates) and round once to the real dtype of the input (or of ``dtype=``, converted to
first, which may not narrow): inf/-inf are amax/amin, 0 counts nonzeros, 1 sums, 2 is the
square root of the sum of squares, any other p is (sum |x|^p)^(1/p). matrix_norm computes
'fro', 1, -1, inf and -inf in reductions; the spectral norms (2, -2, 'nuc') reduce the
singular values (``prims.svdvals``, LAPACK through torch, as ``svd`` and ``svdvals`` are).
"""
from __future__ import annotations

import math

import torch

from primtrace import dtypes, prims
from primtrace.refs import products as M
from primtrace.refs.core import exports, is_tensor, maybe_convert, ref, with_gradient
from primtrace.refs.reductions import keep_dims, reduction_dims, wrap_dim
from primtrace.refs.scalars import concrete, type_name
from primtrace.refs.views import diagonal as diagonal_view

MODULE = "refs.linalg"
matmul = M.matmul
SPECTRAL = (2, -2, "nuc")


def _float_input(name, x):
    if not (x.dtype.is_floating_point or x.dtype.is_complex):
        raise RuntimeError(f"{name}: Expected a floating point or complex tensor as input. Got "
                           f"{dtypes.scalar_type_name(x.dtype)}")


def _with_dtype(name, x, dtype):
    """x converted to dtype= (eager refuses a narrowing conversion)."""
    if dtype is None:
        return x
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name}(): argument 'dtype' must be torch.dtype, not {type_name(dtype)}")
    if dtypes.promote_types(x.dtype, dtype) != dtype:
        raise RuntimeError(f"{name}: the dtype of the input ({dtypes.scalar_type_name(x.dtype)}) "
                           f"should be convertible without narrowing to the specified dtype "
                           f"({dtypes.scalar_type_name(dtype)})")
    return maybe_convert(x, dtype)


def _ord(name, ord):
    kind = getattr(ord, "python_type", type(ord))
    if not issubclass(kind, (int, float)):
        raise TypeError(f"{name}(): argument 'ord' (position 2) must be Number, not "
                        f"{type_name(ord)}")
    return float(concrete(ord))


def p_norm(x, dims, p, result):
    """The p-norm of x over dims (a tuple; empty: every element on its own), rounded to
    `result`."""
    a = prims.abs(x) if (x.dtype.is_complex or not dtypes.is_integer(x.dtype)) else x
    a = maybe_convert(a, dtypes.opmath(dtypes.to_real(x.dtype)))
    if p in (math.inf, -math.inf):
        y = _extreme_norm(prims.amax(a, dims) if p > 0 else prims.amin(a, dims), a, dims)
    elif p == 0:
        # the count of nonzeros, as 1 or a * 0 per element: eager's result requires grad
        # (its gradient is zeros), so this one reads `a` on a differentiable path
        y = prims.sum(prims.where(prims.ne(a, 0), 1, prims.mul(a, 0)), dims)
    elif p == 1:
        y = prims.sum(a, dims)
    elif p == 2:
        y = _root(prims.sum(prims.mul(a, a), dims), prims.sqrt)
    else:
        y = _root(prims.sum(prims.pow(a, p), dims), lambda s: prims.pow(s, 1.0 / p))
    return maybe_convert(y, result)


def _root(s, root):
    """root(s), the p-norm of a sum s of powers, differentiated as eager's norm: no gradient
    where the norm is 0 (the root's derivative there is infinite, which makes NaN); the
    carrier takes the root of 1 there, where its zero cotangent arrives."""
    def pieces():
        nonzero = prims.ne(s, 0)
        return [(nonzero, root(prims.where(nonzero, s, 1)))]
    return with_gradient(root(s), pieces)


def _extreme_norm(y, a, dims):
    """The inf (-inf) norm y = amax (amin) of a = |x|, differentiated as eager's
    linalg_vector_norm_backward: g shared evenly among the elements of `a` equal to y and
    its NaNs, times sgn(x) (0 at NaN: a slice holding a NaN gets no gradient, where amax's
    rule would give it NaN)."""
    if not a.dtype.is_floating_point:
        return y
    kept = tuple(d for d in range(a.ndim) if d not in dims)
    hits = prims.bitwise_or(prims.eq(a, prims.broadcast_in_dim(y, tuple(a.shape), kept)),
                            prims.isnan(a))
    count = prims.sum(prims.convert_element_type(hits, a.dtype), dims)
    return prims.differentiate_as(y, prims.div(prims.sum(prims.where(hits, a, 0), dims), count))


def vector_norm_of(name, x, ord, dim, keepdim, dtype):
    _float_input(name, x)
    p = _ord(name, ord)
    x = _with_dtype(name, x, dtype)
    dims = reduction_dims(name, x, dim)
    if (p < 0 or p == math.inf) and x.numel() == 0:
        if dim is None or any(x.shape[d] == 0 for d in dims):
            what = "inf" if p == math.inf else "-inf" if p == -math.inf else f"{ord}"
            raise RuntimeError(f"{name} cannot compute the {what} norm on an empty tensor "
                               f"because the operation does not have an identity")
    y = p_norm(x, dims, p, dtypes.to_real(x.dtype))
    return keep_dims(y, x, dims, keepdim)


@ref(module=MODULE, declines=M.declines_out)
def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):
    """The ord-norm of x over dim (all dims for None), real, in x's (or dtype='s) precision."""
    M.require_tensors("linalg_vector_norm", x=x)
    M.no_out("linalg.vector_norm", out)
    return vector_norm_of("linalg.vector_norm", x, ord, dim, keepdim, dtype)


def _spectral_declines(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None, out=None):
    return out is not None


def _matrix_dims(name, A, dim):
    if A.ndim < 2:
        raise RuntimeError(f"{name}: The input tensor A must have at least 2 dimensions.")
    if not isinstance(dim, (tuple, list)) or len(dim) != 2:
        raise RuntimeError(f"{name}: dim must be a 2-tuple. Got "
                           f"{' '.join(str(d) for d in (dim if isinstance(dim, (tuple, list)) else [dim]))}")
    d0, d1 = (wrap_dim(int(concrete(d)), A.ndim) for d in dim)
    if d0 == d1:
        raise RuntimeError(f"{name}: dims must be different. Got ({dim[0]}, {dim[1]})")
    return d0, d1


def matrix_norm_of(name, A, ord, dim, keepdim, dtype):
    d0, d1 = _matrix_dims(name, A, dim)
    _float_input(name, A)
    if ord in SPECTRAL:
        return _spectral_norm(name, A, ord, d0, d1, keepdim, dtype)
    if isinstance(ord, str):
        if ord != "fro":
            raise RuntimeError(f"{name}: Order {ord} not supported.")
        return vector_norm_of(name, A, 2, (d0, d1), keepdim, dtype)
    p = _ord(name, ord)
    if p not in (1, -1, math.inf, -math.inf):
        raise RuntimeError(f"{name}: Order {ord} not supported.")
    x = _with_dtype(name, A, dtype)
    # 1: the largest column sum (sum over rows d0, then max over d1); inf: the transpose
    inner, outer = (d0, d1) if abs(p) == 1 else (d1, d0)
    k = outer - (outer > inner)
    if x.shape[outer] == 0 and p < 0:  # eager's amin of no sums
        raise IndexError(f"amin(): Expected reduction dim {outer if keepdim else k} to have "
                         "non-zero size.")
    sums = p_norm(x, (inner,), 1.0, dtypes.opmath(dtypes.to_real(x.dtype)))
    # eager's max of no sums is 0: the sum of none (the sums are >= 0, so max = sum when empty)
    y = (prims.sum if x.shape[outer] == 0 else prims.amax if p > 0 else prims.amin)(sums, (k,))
    y = keep_dims(y, x, tuple(sorted((d0, d1))), keepdim)
    return maybe_convert(y, dtypes.to_real(x.dtype))


def _spectral_norm(name, A, ord, d0, d1, keepdim, dtype):
    """Eager's: the singular values of the matrices (dims d0, d1 moved last), summed ('nuc'),
    their max (2) or min (-2); float16/bfloat16 refused."""
    if A.dtype in (torch.float16, torch.bfloat16, torch.complex32):
        raise RuntimeError(f"{name}: Low precision dtypes not supported. Got "
                           f"{dtypes.scalar_type_name(A.dtype)}")
    x = _with_dtype(name, A, dtype)
    order = (*(i for i in range(x.ndim) if i not in (d0, d1)), d0, d1)
    s = prims.svdvals(prims.permute(x, order))
    last = (s.ndim - 1,)
    # eager's 2-norm of an empty matrix is 0 (the sum of no singular values: they are >= 0);
    # its -2 norm raises amin's IndexError
    empty_max = ord == 2 and s.shape[-1] == 0
    y = prims.sum(s, last) if ord == "nuc" or empty_max else \
        (prims.amax if ord > 0 else prims.amin)(s, last)
    if keepdim:  # eager's reduction with keepdim, unsqueeze(-1), the dims moved back
        y = prims.unsqueeze(prims.unsqueeze(y, y.ndim), y.ndim + 1)
        y = prims.permute(y, tuple(order.index(i) for i in range(x.ndim)))
    return y


@ref(module=MODULE, declines=_spectral_declines)
def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None, out=None):
    """'fro', 1, -1, inf, -inf, 2, -2 or 'nuc' norm of the matrices over dim."""
    M.require_tensors("linalg_matrix_norm", A=A)
    M.no_out("linalg.matrix_norm", out)
    return matrix_norm_of("linalg.matrix_norm", A, ord, dim, keepdim, dtype)


def _norm_declines(A, ord=None, dim=None, keepdim=False, *, dtype=None, out=None):
    return out is not None


@ref(module=MODULE, declines=_norm_declines)
def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None, out=None):
    """linalg.norm: a vector norm for a 1-d dim (or ord None and dim None: all elements), a
    matrix norm for a 2-d dim (or ord given and a 2-d input)."""
    M.require_tensors("linalg_norm", A=A)
    M.no_out("linalg.norm", out)
    if isinstance(dim, int):
        dim = (dim,)
    if dim is None and ord is not None:
        if A.ndim not in (1, 2):
            raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input "
                               f"must be 1D or 2D. Got {A.ndim}D.")
        dim = tuple(range(A.ndim))
    if dim is not None and len(dim) == 2:
        return matrix_norm_of("linalg.matrix_norm", A, "fro" if ord is None else ord, dim,
                              keepdim, dtype)
    if isinstance(ord, str):  # a matrix norm's name with a vector's dim
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got "
                           f"{' '.join(str(d) for d in (dim or ()))}")
    return vector_norm_of("linalg.vector_norm", A, 2 if ord is None else ord, dim, keepdim,
                          dtype)


@ref(module=MODULE, declines=M.declines_out)
def vecdot(x, y, *, dim=-1, out=None):
    """sum(conj(x) * y) over dim, broadcast; float and complex tensors of one dtype."""
    M.require_tensors("linalg_vecdot", x=x, y=y)
    M.no_out("linalg.vecdot", out)
    _float_input("linalg.vecdot", x)
    if x.dtype != y.dtype:
        raise RuntimeError(f"linalg.vecdot: Expected x and y to have the same dtype, but found x "
                           f"of type {dtypes.scalar_type_name(x.dtype)} and y of type "
                           f"{dtypes.scalar_type_name(y.dtype)} instead")
    from primtrace.refs.arithmetic import mul
    from primtrace.refs.reductions import sum as sum_ref
    from primtrace.refs.unary import conj
    return sum_ref(mul(conj(x), y), dim)


@ref(module=MODULE, declines=M.declines_out)
def cross(input, other, *, dim=-1, out=None):
    """The cross product along dim (size 3), broadcast; tensors of one dtype and rank."""
    M.require_tensors("linalg_cross", input=input, other=other)
    M.no_out("linalg.cross", out)
    return M.cross_product("linalg.cross", input, other, dim)


def _svd_declines(A, *args, driver=None, out=None, **kwargs):
    return out is not None or driver is not None


@ref(module=MODULE, declines=_svd_declines)
def svd(A, full_matrices=True, *, driver=None, out=None):
    """(U, S, Vh) with A = U diag(S) Vh: ``prims.svd`` (LAPACK through torch); driver= (CUDA
    only) and out= are declined."""
    M.require_tensors("linalg_svd", A=A)
    M.no_out("linalg.svd", out)
    if driver is not None:
        raise NotImplementedError("primtrace: linalg.svd(driver=) has no ref; torch runs it")
    return torch.return_types.linalg_svd(prims.svd(A, bool(concrete(full_matrices))))


@ref(module=MODULE, declines=_svd_declines)
def svdvals(A, *, driver=None, out=None):
    """The singular values of the matrices, descending: ``prims.svdvals``."""
    M.require_tensors("linalg_svdvals", A=A)
    M.no_out("linalg.svdvals", out)
    if driver is not None:
        raise NotImplementedError("primtrace: linalg.svdvals(driver=) has no ref; torch runs it")
    return prims.svdvals(A)


@ref(module=MODULE)
def diagonal(A, *, offset=0, dim1=-2, dim2=-1):
    """torch.linalg.diagonal: torch.diagonal with the last two dims as defaults (a view)."""
    return diagonal_view(A, offset, dim1, dim2)


__all__ = exports(globals(), MODULE) + ["matmul"]
