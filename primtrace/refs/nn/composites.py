"""torch.nn.functional's composite layers: linear, embedding, glu, the dropouts,
scaled_dot_product_attention, batch_norm, group_norm, cosine_similarity, pairwise_distance
and pdist (exported by ``refs.nn.functional``; torch.<name> finds the ones whose torch
signature is F's).

Each follows eager's decomposition: linear is addmm for a 2-d input with a bias (float16/
bfloat16 computed in float32, rounded once), else matmul then the bias added; embedding is
one ``prims.index_select`` of rows (padding_idx only matters to gradients); the dropouts
draw their noise as eager does (``prims.bernoulli`` on torch's generator, in the input's
memory order, so on the CPU a seed gives eager's mask; eager's CUDA dropout is a fused
kernel with its own draws) and return input itself when not training;
scaled_dot_product_attention is q @ k^T * scale, masked, softmax, @ v in the opmath dtype
(enable_gqa repeats key and value heads; dropout_p > 0 off the CPU is declined); the norms
compute their statistics in the opmath dtype with eager's scale-and-shift form, and batch_norm in training updates the
running statistics in place (unbiased variance), as eager does.
"""
from __future__ import annotations

import math

import torch

from primtrace import dtypes, prims
from primtrace import refs   # refs.add...: module attributes, so this module exports no other refs
from primtrace.ir.strides import matches_dense
from primtrace.refs import products as P
from primtrace.refs.conversion import allocated_as_eager, suggest_memory_format
from primtrace.refs.core import (broadcast, broadcast_shapes, exports, is_tensor, maybe_convert,
                                  ref, with_gradient)
from primtrace.refs.creation import as_nodes
from primtrace.refs.linalg import p_norm, vector_norm_of
from primtrace.refs.out import check_can_cast, copy_to_self
from primtrace.refs.promotion import DEFAULT, elementwise_dtypes
from primtrace.refs.reductions import exact_mean, wrap_dim
from primtrace.refs.scalars import concrete, type_name

MODULE = "refs.nn.functional"


def _tensors(name, **named):
    for position, (pname, t) in enumerate(named.items()):
        if not is_tensor(t):
            raise TypeError(f"{name}(): argument '{pname}' (position {position + 1}) must be "
                            f"Tensor, not {type_name(t)}")


def _contiguous(t) -> bool:
    if t.numel() == 0:
        return True  # eager: an empty tensor is contiguous whatever its strides
    expected = 1
    for size, stride in reversed(list(zip(t.shape, t.stride()))):
        if stride != expected and size != 1:   # sizes last: a symbolic dim's is not read
            return False
        expected *= size
    return True


# --- linear, embedding, glu ------------------------------------------------------------------
@ref(module=MODULE)
def linear(input, weight, bias=None):
    """input @ weight.T + bias (eager: addmm for 2-d and most contiguous inputs with a bias,
    else matmul, then the bias added)."""
    _tensors("linear", input=input, weight=weight)
    if input.ndim == 0 or weight.ndim == 0:
        raise RuntimeError(f"both arguments to linear need to be at least 1D, but they are "
                           f"{input.ndim}D and {weight.ndim}D")
    w = P.transpose(weight)
    # eager's fused addmm path: 2-d inputs, and contiguous ones (3-d, or with a 1-d bias)
    fused = bias is not None and (input.ndim == 2 or _contiguous(input) and (
        input.ndim == 3 or bias.ndim == 1))
    if fused and weight.ndim == 2:
        if input.dtype != weight.dtype:
            raise RuntimeError(f"mat1 and mat2 must have the same dtype, but got "
                               f"{dtypes.scalar_type_name(input.dtype)} and "
                               f"{dtypes.scalar_type_name(weight.dtype)}")
        if bias.dtype != weight.dtype:
            raise RuntimeError(f"self and mat2 must have the same dtype, but got "
                               f"{dtypes.scalar_type_name(bias.dtype)} and "
                               f"{dtypes.scalar_type_name(weight.dtype)}")
        if input.shape[-1] != weight.shape[1]:
            rows = math.prod(input.shape[:-1])
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({rows}x"
                               f"{input.shape[-1]} and {weight.shape[1]}x{weight.shape[0]})")
        P._not_bool("addmm_impl_cpu_", input)
        shape = (*input.shape[:-1], weight.shape[0])
        P._check_input_shape(bias, shape)
        return P.scaled_sum(bias, prims.matmul, (input, w), 1, 1, shape, input.dtype)
    y = P.matmul(input, w)
    if bias is None:
        return y
    total = refs.add(y, bias)  # eager: matmul(...).add_(bias): the product's dtype and shape stay
    check_can_cast(total.dtype, y.dtype)
    if tuple(total.shape) != tuple(y.shape):
        raise RuntimeError(f"output with shape {list(y.shape)} doesn't match the broadcast "
                           f"shape {list(total.shape)}")
    return maybe_convert(total, y.dtype)


def _embedding_declines(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
                        scale_grad_by_freq=False, sparse=False):
    """max_norm writes weight; scale_grad_by_freq and sparse change its gradient (scaled by
    each index's count, a sparse tensor): torch runs those."""
    return max_norm is not None or bool(scale_grad_by_freq) or bool(sparse)


@ref(module=MODULE, declines=_embedding_declines)
def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """weight's rows at the indices of input: shape input.shape + (embedding_dim,).
    max_norm (which renormalizes weight in place) is declined."""
    _tensors("embedding", input=input, weight=weight)
    if padding_idx is not None:
        if padding_idx > 0:
            assert padding_idx < weight.shape[0], "Padding_idx must be within num_embeddings"
        elif padding_idx < 0:
            assert padding_idx >= -weight.shape[0], "Padding_idx must be within num_embeddings"
            padding_idx = weight.shape[0] + padding_idx
    if max_norm is not None:
        raise NotImplementedError("primtrace: embedding(max_norm=) renormalizes weight in place; "
                                  "torch runs it")
    return embedding_rows(weight, input, padding_idx)


def embedding_rows(weight, indices, padding_idx=None):
    """The rows; those read at `padding_idx` carry no gradient (eager's embedding backward
    leaves the padding row's gradient 0)."""
    if weight.ndim != 2:
        raise RuntimeError("'weight' must be 2-D")
    if indices.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(f"Expected tensor for argument #1 'indices' to have one of the "
                           f"following scalar types: Long, Int; but got "
                           f"{_legacy_type(indices.dtype)} instead (while checking arguments "
                           f"for embedding)")
    rows = prims.index_select(weight, 0, indices)
    if padding_idx is None:
        return rows

    def pieces():
        kept = refs.ne(indices, padding_idx)
        return [(refs.expand(refs.unsqueeze(kept, -1), tuple(rows.shape)), rows)]
    return with_gradient(rows, pieces)


def _legacy_type(dtype) -> str:
    return f"torch.{dtypes.scalar_type_name(dtype)}Tensor"


@ref(module=MODULE)
def glu(input, dim=-1):
    """a * sigmoid(b), a and b the halves of input along dim; opmath, rounded once."""
    _tensors("glu", input=input)
    if input.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    d = wrap_dim(int(concrete(dim)), input.ndim)
    n = input.shape[d]
    if n % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {d} is size {n}")
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f"\"glu_cpu\" not implemented for "
                                  f"'{dtypes.scalar_type_name(input.dtype)}'")
    x = maybe_convert(input, dtypes.opmath(input.dtype))
    half = n // 2
    a = prims.index_select(x, d, prims.iota(half, start=0, step=1, dtype=torch.int64,
                                            device=x.device))
    b = prims.index_select(x, d, prims.iota(half, start=half, step=1, dtype=torch.int64,
                                            device=x.device))
    gate = prims.div(1.0, prims.add(prims.exp(prims.neg(b)), 1.0))
    # differentiated as sigmoid (y * (1 - y)), as eager's glu_backward: through the quotient
    # the gradient at b = -inf would be 0 * inf = NaN, not 0
    gate = prims.differentiate_as(gate, prims.sigmoid(b))
    return maybe_convert(prims.mul(a, gate), input.dtype)


# --- dropout ---------------------------------------------------------------------------------
ALPHA = 1.7580993408473766  # SELU's alpha * scale: alpha_dropout keeps SELU's statistics


def _dropout_declines(input, p=0.5, training=True, inplace=False) -> bool:
    return is_tensor(input) and not input.dtype.is_floating_point and bool(training)


def _dropout(name, input, p, training, inplace, *, alpha, feature):
    _tensors(name, input=input)
    p = float(concrete(p))
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0 or input.numel() == 0:
        return input
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f"primtrace: {name} of {input.dtype} has no ref; torch runs it")
    if feature and input.ndim < 2:
        raise RuntimeError("Feature dropout requires at least 2 dimensions in the input")
    if p == 1:
        y = prims.mul(input, 0)
    else:
        y = _noisy(input, p, alpha, feature)
    if inplace:
        return copy_to_self(input, y, (input,))
    return y


def _noisy(input, p, alpha, feature):
    """input * noise (+ b for alpha dropout), the noise drawn as eager draws it."""
    shape = tuple(input.shape)
    if feature:  # one draw per (sample, channel): eager's contiguous (N, C, 1, ...) noise
        noise_shape = (shape[0], shape[1], *(1,) * (len(shape) - 2))
        strides = None
    else:
        noise_shape = shape
        strides = prims.elementwise_strides(shape, [tuple(input.stride())])
    with as_nodes():  # a node that draws on every call, never a trace-time constant
        noise = prims.bernoulli(noise_shape, 1 - p, dtype=input.dtype, device=input.device,
                                strides=strides)
    b = None
    if alpha:
        a = 1.0 / math.sqrt((ALPHA * ALPHA * p + 1) * (1 - p))
        b = prims.add(prims.mul(prims.sub(noise, 1), ALPHA * a), ALPHA * a * p)
        noise = prims.mul(noise, a)
    else:
        noise = prims.div(noise, 1 - p)
    if feature:
        noise = broadcast(noise, shape)
        b = broadcast(b, shape) if b is not None else None
    y = prims.mul(input, noise)
    return prims.add(y, b) if b is not None else y


@ref(module=MODULE, declines=_dropout_declines)
def dropout(input, p=0.5, training=True, inplace=False):
    """Training: input * bernoulli(1 - p) / (1 - p); otherwise input itself."""
    return _dropout("dropout", input, p, training, inplace, alpha=False, feature=False)


@ref(module=MODULE, declines=_dropout_declines)
def alpha_dropout(input, p=0.5, training=False, inplace=False):
    """Training: SELU-preserving dropout (dropped values go to SELU's negative saturation,
    then an affine correction); otherwise input itself."""
    return _dropout("alpha_dropout", input, p, training, inplace, alpha=True, feature=False)


@ref(module=MODULE, declines=_dropout_declines)
def feature_alpha_dropout(input, p=0.5, training=False, inplace=False):
    """alpha_dropout with one draw per (sample, channel)."""
    return _dropout("feature_alpha_dropout", input, p, training, inplace, alpha=True,
                    feature=True)


# --- scaled_dot_product_attention ----------------------------------------------------------------
def _dropout_as_eager(query) -> bool:
    """Whether eager's sdpa with dropout is its math path here (CPU, float32/float64): the
    weights dropped by F.dropout's draws, which the dropout ref makes too."""
    return is_tensor(query) and query.device.type == "cpu" and query.dtype in (
        torch.float32, torch.float64)


def _gqa_declines(query, key, value) -> bool:
    """enable_gqa with inputs of under 3 dims (eager's IndexError) or with key and value
    head counts that differ (eager's kernels disagree there): torch runs it."""
    return not (is_tensor(query) and is_tensor(key) and is_tensor(value)) or min(
        query.ndim, key.ndim, value.ndim) < 3 or key.shape[-3] != value.shape[-3]


def _sdpa_declines(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                   scale=None, enable_gqa=False) -> bool:
    return (bool(enable_gqa) and _gqa_declines(query, key, value)) or (
        bool(dropout_p) and not _dropout_as_eager(query))


def _repeat_heads(t, n):
    """t.repeat_interleave(n, -3): each head n times in a row (GQA's shared key/value heads)."""
    if n == 1:
        return t
    shape = tuple(t.shape)
    wide = refs.expand(refs.unsqueeze(t, -3), *shape[:-2], n, *shape[-2:])
    return refs.reshape(wide, *shape[:-3], shape[-3] * n, *shape[-2:])


@ref(module=MODULE, declines=_sdpa_declines)
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """softmax(q @ k^T * scale + mask) @ v, in the opmath dtype, rounded once; scale defaults
    to 1/sqrt(E); a bool mask keeps where True; is_causal keeps j <= i; a row masked
    everywhere gives zeros (eager's safe softmax); dropout_p drops weights as F.dropout
    does, with its draws (eager's math path on the CPU)."""
    _tensors("scaled_dot_product_attention", query=query, key=key, value=value)
    if (enable_gqa and _gqa_declines(query, key, value)) or (
            dropout_p and not _dropout_as_eager(query)):
        raise NotImplementedError("primtrace: scaled_dot_product_attention with enable_gqa on "
                                  "inputs of under 3 dims or unlike key and value heads, or "
                                  "dropout_p > 0 off the CPU or in half precision, has no ref; "
                                  "torch runs it")
    if enable_gqa:   # key and value heads each serve a group of query heads
        heads = key.shape[-3]
        if heads == 0 or query.shape[-3] % heads:
            raise RuntimeError("Number of heads in key and value must divide the number of "
                               "heads in ")   # sic: eager's message ends there
        key_in, value_in = key, value
        key = _repeat_heads(key, query.shape[-3] // heads)
        value = _repeat_heads(value, query.shape[-3] // heads)
    if not query.dtype == key.dtype == value.dtype:
        raise RuntimeError(f"Expected query, key, and value to have the same dtype, but got "
                           f"query.dtype: {dtypes.c_type_name(query.dtype)} key.dtype: "
                           f"{dtypes.c_type_name(key.dtype)} and value.dtype: "
                           f"{dtypes.c_type_name(value.dtype)} instead.")
    if attn_mask is not None and attn_mask.dtype not in (torch.bool, torch.float32, query.dtype):
        raise RuntimeError(f"Expected attn_mask dtype to be bool or float or to match query "
                           f"dtype, but got attn_mask.dtype: "
                           f"{dtypes.c_type_name(attn_mask.dtype)} and  query.dtype: "
                           f"{dtypes.c_type_name(query.dtype)} instead.")
    if not query.dtype.is_floating_point:
        raise RuntimeError("scaled_dot_product_attention: expected floating point inputs")
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set "
                           "when is_causal=True")
    if query.ndim < 2 or key.ndim < 2 or value.ndim < 2:
        raise RuntimeError("scaled_dot_product_attention: expected inputs of at least 2 dims")
    computation = dtypes.opmath(query.dtype)
    q, k, v = (maybe_convert(t, computation) for t in (query, key, value))
    e = query.shape[-1]
    scores = prims.matmul(q, P.transpose(k))
    if e:  # eager scales q and k, not the scores: with E = 0 they are 0 whatever the scale
        factor = float(concrete(scale)) if scale is not None else 1.0 / math.sqrt(e)
        scores = prims.mul(scores, factor)
    shape = tuple(scores.shape)
    if is_causal:
        rows, cols = shape[-2], shape[-1]
        i = prims.broadcast_in_dim(prims.iota(rows, start=0, step=1, dtype=torch.int64,
                                              device=q.device), (rows, cols), (0,))
        j = prims.broadcast_in_dim(prims.iota(cols, start=0, step=1, dtype=torch.int64,
                                              device=q.device), (rows, cols), (1,))
        scores = prims.where(broadcast(prims.le(j, i), shape), scores, -math.inf)
    elif attn_mask is not None:
        shape = broadcast_shapes(shape, tuple(attn_mask.shape))
        scores = broadcast(scores, shape)
        if attn_mask.dtype is torch.bool:
            scores = prims.where(broadcast(attn_mask, shape), scores, -math.inf)
        else:
            scores = prims.add(scores, broadcast(maybe_convert(attn_mask, computation), shape))
    dims = (len(shape) - 1,)
    kept = tuple(range(len(shape) - 1))
    m = with_gradient(prims.amax(scores, dims)) if shape[-1] else None   # the shift cancels
    if m is None:
        weights = scores
    else:
        m_b = prims.broadcast_in_dim(m, shape, kept)
        exp = prims.exp(prims.sub(scores, m_b))
        weights = prims.div(exp, prims.broadcast_in_dim(prims.sum(exp, dims), shape, kept))
        # eager's safe softmax: a row masked everywhere (all -inf) attends to nothing
        weights = prims.where(prims.eq(m_b, -math.inf), 0.0, weights)
    if dropout_p:
        weights = _dropout("scaled_dot_product_attention", weights, dropout_p, True, False,
                           alpha=False, feature=False)
    out = maybe_convert(prims.matmul(weights, v), query.dtype)
    if enable_gqa:   # the kernel eager picks sees the unrepeated heads
        key, value = key_in, value_in
    return _laid_out_as_eager(out, query, key, value, dropout_p, bool(enable_gqa))


def _laid_out_as_eager(out, query, key, value, dropout_p, gqa=False):
    """`out` with the strides of eager's CPU result. Its fused (flash) kernel, taken for 4-d
    inputs of one head size with unit inner strides, one batch and head count and nonempty
    sequences, without dropout (with enable_gqa, key heads dividing the query's), allocates
    the result like the query: for heads split from a packed qkv projection that is a
    (B, T, H, E) layout, which the usual
    ``y.transpose(1, 2).contiguous()`` then reads without a copy. Other paths return the
    matmul's contiguous result. (Checked against eager on 1200 random layouts and shapes.)"""
    q, k, v = query, key, value
    flash = (q.device.type == "cpu" and q.ndim == k.ndim == v.ndim == 4 and not dropout_p
             and q.shape[-1] == k.shape[-1] == v.shape[-1] and out.numel() > 0
             and all(t.stride()[-1] == 1 for t in (q, k, v))
             and q.shape[0] == k.shape[0] == v.shape[0] and k.shape[1] == v.shape[1]
             and (q.shape[1] == k.shape[1]
                  or (gqa and k.shape[1] > 0 and q.shape[1] % k.shape[1] == 0)))
    shape = tuple(out.shape)
    strides = prims.elementwise_strides(shape, [tuple(q.stride())])
    if not flash or matches_dense(shape, tuple(out.stride()), strides):
        return out
    with as_nodes():
        new = prims.full_strided(shape, strides, 0, dtype=out.dtype, device=out.device)
    return prims.copy_to(new, out)


# --- batch_norm, group_norm ------------------------------------------------------------------
def _channel(t, x, computation):
    """A per-channel (dim 1) tensor broadcast to x's shape, in the computation dtype."""
    return prims.broadcast_in_dim(maybe_convert(t, computation), tuple(x.shape), (1,))


def _check_training_size(input):
    size = input.shape[0]
    for s in input.shape[2:]:
        size *= s
    if size == 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                         f"{torch.Size(input.shape)}")


@ref(module=MODULE)
def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """(x - mean) / sqrt(var + eps) * weight + bias per channel (dim 1): the batch's biased
    statistics when training (and running_mean/var updated in place with `momentum`, var
    unbiased), else the running ones."""
    _tensors("batch_norm", input=input)
    if training:
        _check_training_size(input)
    if input.ndim < 2:
        raise ValueError(f"expected 2D or more input (got {input.ndim}D input)")
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f"\"batch_norm\" not implemented for "
                                  f"'{dtypes.scalar_type_name(input.dtype)}'")
    channels = input.shape[1]
    for pname, t in (("weight", weight), ("bias", bias), ("running_mean", running_mean),
                     ("running_var", running_var)):
        if t is not None and tuple(t.shape) != (channels,):
            raise RuntimeError(f"{pname} should contain {channels} elements not "
                               f"{t.numel()}")
    computation = dtypes.opmath(input.dtype)
    x = maybe_convert(input, computation)
    eps, momentum = float(concrete(eps)), concrete(momentum)
    dims = (0, *range(2, x.ndim))
    count = x.numel() // channels if channels else 0
    if training:
        mean = exact_mean(x, dims)
        var = prims.var(x, dims, correction=0)
        # an empty batch (count 0) leaves the running statistics as they are, as eager
        if (running_mean is not None or running_var is not None) and count:
            with torch.no_grad():   # eager's kernel updates them outside autograd
                _update_running(running_mean, running_var, mean, var, count, float(momentum))
    else:
        if running_mean is None or running_var is None:
            raise RuntimeError("running_mean and running_var must be defined in evaluation mode")
        mean = maybe_convert(running_mean, computation)
        var = maybe_convert(running_var, computation)
    invstd = prims.div(1.0, prims.sqrt(prims.add(var, eps)))
    w = maybe_convert(weight, computation) if weight is not None else None
    b = maybe_convert(bias, computation) if bias is not None else None
    alpha = invstd if w is None else prims.mul(invstd, w)
    beta = prims.neg(prims.mul(mean, alpha)) if b is None else prims.sub(b, prims.mul(mean, alpha))
    y = prims.add(prims.mul(x, _channel(alpha, x, computation)), _channel(beta, x, computation))
    return _suggested_layout(maybe_convert(y, input.dtype), input)


def _suggested_layout(y, input):
    """Eager's CPU batch_norm and group_norm allocate their result in the input's
    suggest_memory_format() (channels_last stays so, any other layout becomes contiguous)."""
    return allocated_as_eager(y, suggest_memory_format(input))


def _update_running(running_mean, running_var, mean, var, count, momentum):
    """running = (1 - momentum) * running + momentum * batch statistic (var unbiased)."""
    if running_mean is not None:
        rm = maybe_convert(running_mean, mean.dtype)
        new = prims.add(prims.mul(mean, momentum), prims.mul(rm, 1 - momentum))
        prims.copy_to(running_mean, maybe_convert(new, running_mean.dtype))
    if running_var is not None:
        rv = maybe_convert(running_var, var.dtype)
        unbiased = prims.mul(var, count / (count - 1)) if count > 1 else prims.mul(var, math.inf)
        new = prims.add(prims.mul(unbiased, momentum), prims.mul(rv, 1 - momentum))
        prims.copy_to(running_var, maybe_convert(new, running_var.dtype))


@ref(module=MODULE)
def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Each sample's channels split into num_groups groups, each normalized by its own mean
    and biased variance, then weight * y + bias per channel."""
    _tensors("group_norm", input=input)
    if input.ndim < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received "
                           f"{input.ndim}")
    groups = int(concrete(num_groups))
    if groups > 0 and (input.shape[0] * input.shape[1] // groups) * math.prod(input.shape[2:]) == 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                         f"{[input.shape[0] * input.shape[1] // groups, groups, *input.shape[2:]]}")
    return group_norm_parts(input, groups, weight, bias, eps)[0]


def group_norm_parts(input, groups, weight, bias, eps):
    """(y, mean, rstd) of group_norm, the statistics of shape (N, groups) in the opmath
    dtype (torch.native_group_norm's three results, before rounding)."""
    n, c = input.shape[0], input.shape[1]
    if groups <= 0 or c % groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by num_groups, "
                           f"but got input of shape {list(input.shape)} and num_groups={groups}")
    for pname, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.ndim != 1 or t.shape[0] != c):
            raise RuntimeError(f"Expected {pname} to be a vector of size equal to the number of "
                               f"channels in input, but got {pname} of shape {list(t.shape)} "
                               f"and input of shape {list(input.shape)}")
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f"\"group_norm\" not implemented for "
                                  f"'{dtypes.scalar_type_name(input.dtype)}'")
    computation = dtypes.opmath(input.dtype)
    x = maybe_convert(input, computation)
    if x.numel() == 0:
        # eager's result is a new tensor (never the input) that requires grad where the
        # input, weight or bias does: made from them, as the nonempty one
        stats = prims.full((n, groups), math.nan, dtype=computation, device=x.device)
        y = x
        if weight is not None:
            y = prims.mul(y, _channel(weight, x, computation))
        if bias is not None:
            y = prims.add(y, _channel(bias, x, computation))
        y = maybe_convert(y, input.dtype)
        return (prims.clone(y) if y is input else y), stats, stats
    per = c // groups
    device = x.device
    # the channels of each group side by side: x[:, index] has dims (N, G, C/G, ...)
    starts = prims.broadcast_in_dim(prims.iota(groups, start=0, step=per, dtype=torch.int64,
                                               device=device), (groups, per), (0,))
    offsets = prims.broadcast_in_dim(prims.iota(per, start=0, step=1, dtype=torch.int64,
                                                device=device), (groups, per), (1,))
    grouped = prims.index_select(x, 1, prims.add(starts, offsets))
    dims = tuple(range(2, grouped.ndim))
    mean = exact_mean(grouped, dims)
    invstd = prims.rsqrt(prims.add(prims.var(grouped, dims, correction=0), float(concrete(eps))))
    group_of = prims.div(prims.iota(c, start=0, step=1, dtype=torch.int64, device=device), per)
    shape = tuple(x.shape)

    def per_channel(stat):  # (N, G) -> (N, C) -> x's shape
        return prims.broadcast_in_dim(prims.index_select(stat, 1, group_of), shape, (0, 1))
    alpha = per_channel(invstd)
    if weight is not None:
        alpha = prims.mul(alpha, _channel(weight, x, computation))
    beta = prims.neg(prims.mul(per_channel(mean), alpha))
    if bias is not None:
        beta = prims.add(beta, _channel(bias, x, computation))
    y = maybe_convert(prims.add(prims.mul(x, alpha), beta), input.dtype)
    return _suggested_layout(y, input), mean, invstd


# --- distances -------------------------------------------------------------------------------
@ref(module=MODULE)
def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """The p-norm of x1 - x2 + eps over the last dim (eager's at::norm)."""
    _tensors("pairwise_distance", x1=x1, x2=x2)
    ndim = max(x1.ndim, x2.ndim)
    diff = refs.add(refs.sub(x1, x2), eps)
    if ndim == 0:
        return refs.abs(diff)
    return vector_norm_of("linalg.vector_norm", diff, p, ndim - 1, keepdim, None)


def _upper_pairs(n, device):
    """The flat indices i * n + j of the pairs i < j of an n x n matrix, in row-major order,
    built from prims (no reshape): a running count of the pairs places each one."""
    pairs = n * (n - 1) // 2
    k = prims.iota(n * n, start=0, step=1, dtype=torch.int64, device=device)
    upper = prims.gt(prims.remainder(k, n), prims.div(k, n))
    slot = prims.sub(prims.cumsum(prims.convert_element_type(upper, torch.int64), 0), 1)
    slot = prims.where(upper, slot, pairs)  # the other positions land past the end
    placed = prims.scatter(prims.full((pairs + 1,), 0, dtype=torch.int64, device=device), 0,
                           slot, k)
    return prims.index_select(placed, 0, prims.iota(pairs, start=0, step=1, dtype=torch.int64,
                                                    device=device))


@ref(module=MODULE)
def pdist(input, p=2):
    """The p-norm distances between the rows of a matrix, for each pair i < j in row-major
    order (n * (n - 1) / 2 values)."""
    _tensors("pdist", input=input)
    if input.ndim != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.ndim}D")
    if not input.dtype.is_floating_point:
        raise RuntimeError("pdist only supports floating-point dtypes")
    p = float(concrete(p))
    if p < 0:
        raise RuntimeError("pdist only supports non-negative p values")
    if input.dtype in (torch.float16, torch.bfloat16):
        raise NotImplementedError(f"\"pdist\" not implemented for "
                                  f"'{dtypes.scalar_type_name(input.dtype)}'")
    n = input.shape[0]
    # the pairs' rows only: the zero diagonal's distances would give p < 1 NaN gradients,
    # and one row still gives an empty result that autograd follows, as eager's
    pairs = _upper_pairs(n, input.device)
    diff = prims.sub(prims.index_select(input, 0, prims.div(pairs, n)),
                     prims.index_select(input, 0, prims.remainder(pairs, n)))
    return p_norm(diff, (1,), p, input.dtype)


@ref(module=MODULE)
def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """sum((x1 / max(|x1|, eps)) * (x2 / max(|x2|, eps))) over dim, broadcast (integer
    inputs computed in the promoted float dtype)."""
    _tensors("cosine_similarity", x1=x1, x2=x2)
    _, common = elementwise_dtypes(x1, x2, type_promotion_kind=DEFAULT)
    if not common.is_floating_point:
        raise RuntimeError(f"expected common dtype to be floating point, yet common dtype is "
                           f"{dtypes.scalar_type_name(common)}")
    a = maybe_convert(x1, common) if not x1.dtype.is_floating_point else x1
    b = maybe_convert(x2, common) if not x2.dtype.is_floating_point else x2
    shape = broadcast_shapes(tuple(a.shape), tuple(b.shape))
    a, b = broadcast(a, shape), broadcast(b, shape)
    if len(shape) == 0:
        raise IndexError("Dimension specified as 1 but tensor has no dimensions")
    d = wrap_dim(int(concrete(dim)), len(shape))
    na, nb = (_at_least(vector_norm_of("linalg.vector_norm", t, 2, d, True, None), eps)
              for t in (a, b))
    return refs.sum(refs.mul(refs.true_divide(a, na), refs.true_divide(b, nb)), d)


@ref(module=MODULE)
def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """input / max(its p-norm over dim, eps), as eager's Python computes it: the norm kept
    as a size-1 dim, clamped, expanded and divided (into `out` when given)."""
    denom = refs.expand_as(refs.clamp_min(refs.norm(input, p, dim, keepdim=True), eps), input)
    return refs.div(input, denom) if out is None else refs.div(input, denom, out=out)


def _at_least(norm, eps):
    """max(norm, eps), differentiated as the norm itself: eager clamps the norms in place
    under no_grad, so its gradient flows as if they were not clamped."""
    return prims.differentiate_as(refs.clamp_min(norm, eps), norm)


__all__ = exports(globals(), MODULE)
