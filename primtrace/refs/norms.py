"""Norm-like refs of the torch namespace: logsumexp, norm (torch.norm, Tensor.norm),
renorm and _weight_norm (nn.utils.weight_norm's), over the linalg norms (``refs.linalg``)
and the reduction prims.

logsumexp is eager's stable formula: m = amax(x) (0 where infinite), log(sum(exp(x - m)))
+ m, computed in the opmath dtype and rounded once; integer and bool inputs give the
default float dtype; an empty reduction is log(0) = -inf. Complex inputs are declined.
"""
from __future__ import annotations

import math

import torch

from primtrace import dtypes, prims
from primtrace.refs import linalg as L
from primtrace.refs import products as M
from primtrace.refs.core import exports, is_tensor, maybe_convert, ref, with_gradient
from primtrace.refs.reductions import exact_mean, keep_dims, reduction_dims, wrap_dim
from primtrace.refs.scalars import concrete


def _out_declines(input, *args, **kwargs) -> bool:
    return kwargs.get("out") is not None


@ref(declines=_out_declines)
def logsumexp(input, dim, keepdim=False, *, out=None):
    """log(sum(exp(input))) over dim, stably; the default float dtype for integer inputs."""
    M.require_tensors("logsumexp", input=input)
    M.no_out("logsumexp", out)
    result = input.dtype if input.dtype.is_floating_point or input.dtype.is_complex \
        else dtypes.default_float()
    x = maybe_convert(input, dtypes.opmath(result))
    dims = reduction_dims("logsumexp", x, dim)
    if x.numel() == 0:
        y = prims.log(prims.sum(prims.exp(x), dims))
    elif not dims and not x.dtype.is_complex:  # complex: the imaginary part wraps to (-pi, pi]
        # log(exp(x - m)) + m with m = x: x's values (inf and NaN included), in a new
        # tensor: a reduction's result never aliases its input
        y = prims.clone(x)
    else:
        kept = tuple(i for i in range(x.ndim) if i not in dims)
        # complex: shifted by the largest real part, as eager's
        m = prims.amax(prims.real(x) if x.dtype.is_complex else x, dims)
        m = with_gradient(prims.where(prims.eq(prims.abs(m), math.inf), 0.0, m))  # cancels
        m = maybe_convert(m, x.dtype)
        shifted = prims.sub(x, prims.broadcast_in_dim(m, tuple(x.shape), kept))
        y = prims.add(prims.log(prims.sum(prims.exp(shifted), dims)), m)
    return keep_dims(maybe_convert(y, result), input, dims, keepdim)


def _norm_declines(input, p="fro", dim=None, keepdim=False, out=None, dtype=None):
    return out is not None or (p == "fro" and isinstance(dim, (tuple, list)) and len(dim) > 2)


@ref(declines=_norm_declines)
def norm(input, p="fro", dim=None, keepdim=False, out=None, dtype=None):
    """torch.norm: the vector p-norm over dim (all dims for None); 'fro' is the 2-norm;
    another name ('nuc') is linalg.matrix_norm over dim (all dims for None), as eager."""
    M.require_tensors("norm", input=input)
    M.no_out("norm", out)
    if isinstance(dim, int):
        dim = (dim,)
    if isinstance(p, str):
        if p != "fro" or (dim is not None and len(dim) > 2):
            dims = tuple(range(input.ndim)) if dim is None else tuple(dim)
            if p == "fro":
                raise NotImplementedError(f"primtrace: norm(p={p!r}) has no ref; torch runs it")
            return L.matrix_norm_of("linalg.matrix_norm", input, p, dims, keepdim, dtype)
        p = 2
    if p is None:
        p = 2
    return L.vector_norm_of("linalg.vector_norm", input, p, dim, keepdim, dtype)


@ref(inplace=True)
def renorm(input, p, dim, maxnorm):
    """Each slice along dim whose p-norm exceeds maxnorm scaled to maxnorm (by maxnorm /
    (norm + 1e-7)), the others unchanged."""
    M.require_tensors("renorm", input=input)
    p_value, maxnorm_value = float(concrete(p)), float(concrete(maxnorm))
    if p_value <= 0:
        raise RuntimeError("renorm: non-positive-norm not supported")
    if maxnorm_value < 0:
        raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm_value:g}")
    if input.ndim < 2:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {input.ndim} "
                           "dimensions")
    d = wrap_dim(int(concrete(dim)), input.ndim)
    L._float_input("linalg.vector_norm", input)
    dims = tuple(i for i in range(input.ndim) if i != d)
    computation = dtypes.opmath(dtypes.to_real(input.dtype))
    norms = L.p_norm(input, dims, p_value, computation)
    factor = prims.where(prims.gt(norms, maxnorm_value),
                         prims.div(maxnorm_value, prims.add(norms, 1e-7)),
                         prims.full(tuple(norms.shape), 1.0, dtype=computation, device=input.device))
    factor = maybe_convert(factor, input.dtype)
    return prims.mul(input, prims.broadcast_in_dim(factor, tuple(input.shape), (d,)))


@ref
def batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps,
               cudnn_enabled=True):
    """torch.batch_norm, F.batch_norm's kernel with its own argument order (weight and bias
    before the running statistics)."""
    from primtrace.refs.nn.composites import batch_norm as functional_batch_norm
    return functional_batch_norm(input, running_mean, running_var, weight, bias, training,
                                 momentum, eps)


@ref
def native_layer_norm(input, normalized_shape, weight, bias, eps):
    """(layer_norm(...), mean, rstd): the statistics over the normalized dims, kept as
    size-1 dims, in the input's dtype."""
    from primtrace.refs.nn.softmax_norms import _normalized_dims, layer_norm
    y = layer_norm(input, normalized_shape, weight, bias, eps)
    dims = _normalized_dims("layer_norm", input, normalized_shape, weight, bias)
    x = maybe_convert(input, dtypes.opmath(input.dtype))
    mean = exact_mean(x, dims)
    rstd = prims.rsqrt(prims.add(prims.var(x, dims, correction=0), float(concrete(eps))))
    return (y, *(maybe_convert(keep_dims(s, x, dims, True), input.dtype) for s in (mean, rstd)))


@ref
def native_group_norm(input, weight, bias, N, C, HxW, group, eps):
    """(group_norm(...), mean, rstd): the statistics of shape (N, group) in the input's dtype."""
    from primtrace.refs.nn.composites import group_norm_parts
    M.require_tensors("native_group_norm", input=input)
    if input.ndim < 2 or input.shape[0] != N or input.shape[1] != C or \
            input.numel() != N * C * HxW:
        raise RuntimeError(f"Expected input to have {N * C * HxW} elements (N={N}, C={C}, "
                           f"HxW={HxW}), got {list(input.shape)}")
    y, mean, rstd = group_norm_parts(input, int(concrete(group)), weight, bias, eps)
    return y, maybe_convert(mean, input.dtype), maybe_convert(rstd, input.dtype)


# --- torch._weight_norm ---------------------------------------------------------------------------
def _weight_norm_declines(v, g, dim=0) -> bool:
    return not (is_tensor(v) and is_tensor(g)) or v.dtype.is_complex or g.dtype.is_complex or (
        v.device != g.device)


@ref(name="_weight_norm", declines=_weight_norm_declines)
def _weight_norm_ref(v, g, dim=0):
    """torch._weight_norm: v * (g / the 2-norm of v over every dim but `dim`; dim=-1: over all
    of v). As eager: for dim 0 or the last, without float16 operands, its fused kernel, which
    computes in the opmath dtype (float32 for bfloat16) and rounds once (g of v's dtype; other
    dtypes are left to torch); otherwise ``v * (g / norm_except_dim(v, 2, dim))`` in the
    operands' dtypes. v and g are read contiguous, as eager reads them."""
    from primtrace import refs
    from primtrace.refs.shape_args import as_int
    d = as_int("_weight_norm", "dim", dim, 3)
    v, g = refs.contiguous(v), refs.contiguous(g)
    if d == -1:
        return refs.mul(v, refs.div(g, L.vector_norm(v)))
    d = wrap_dim(d, v.ndim)
    dims = tuple(i for i in range(v.ndim) if i != d)
    fused = (d in (0, v.ndim - 1) and torch.float16 not in (v.dtype, g.dtype))
    if not fused:
        return refs.mul(v, refs.div(g, L.vector_norm(v, 2, dims, True)))
    if g.dtype != v.dtype:
        raise NotImplementedError("primtrace: _weight_norm's fused kernel of mixed dtypes has no "
                                  "ref; torch runs it")
    acc = dtypes.opmath(v.dtype)
    vf, gf = maybe_convert(v, acc), maybe_convert(g, acc)
    norm = prims.sqrt(keep_dims(prims.sum(prims.mul(vf, vf), dims), vf, dims, True))
    return maybe_convert(refs.mul(vf, refs.div(gf, norm)), v.dtype)


__all__ = exports(globals())
globals()["_weight_norm"] = _weight_norm_ref   # torch._weight_norm is found by its own name
__all__.append("_weight_norm")
