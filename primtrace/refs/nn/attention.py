"""torch.nn.functional.multi_head_attention_forward: what nn.MultiheadAttention computes,
as eager's own Python body over refs (exported by ``refs.nn.functional``).

Every step of eager's body already has a ref that gives eager's values, errors and random
draws (linear, the views, pad, baddbmm, softmax, dropout, scaled_dot_product_attention, mean),
so the ref is eager's steps in eager's order and nothing else: a trace of a model with
``nn.MultiheadAttention`` holds no opaque call. nn.MultiheadAttention's fast path
(``torch._native_multi_head_attention``, taken in eval mode under no_grad) is never taken
while tracing: proxies have ``__torch_function__``, which the module's checks refuse, so
forward calls this function; its values are the fast path's up to rounding.
"""
from __future__ import annotations

import math
import warnings

import torch

from primtrace import refs
from primtrace.refs.core import exports, is_tensor, ref
from primtrace.refs.nn import composites
from primtrace.refs.nn.softmax_norms import softmax
from primtrace.refs.scalars import concrete

MODULE = "refs.nn.functional"


def _size(shape) -> torch.Size:
    return torch.Size(tuple(shape))


def _sdpa_dropout_declines(query, training, dropout_p, need_weights) -> bool:
    """The sdpa step with dropout where the sdpa ref leaves it to torch (half precision, or
    off the CPU): then so does this ref."""
    return (bool(concrete(training)) and bool(concrete(dropout_p)) and not concrete(need_weights)
            and not composites._dropout_as_eager(query))


def _declines(query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias,
              bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias,
              training=True, key_padding_mask=None, need_weights=True, **kwargs) -> bool:
    return _sdpa_dropout_declines(query, training, dropout_p, need_weights)


# --- eager's checks and masks ----------------------------------------------------------------
def _shape_check(query, key, value, key_padding_mask, attn_mask, num_heads) -> bool:
    """F._mha_shape_check: whether the input is batched (3-d) or not (2-d)."""
    if query.ndim not in (2, 3):
        raise AssertionError(f"query should be unbatched 2D or batched 3D tensor but received "
                             f"{query.ndim}-D query tensor")
    batched = query.ndim == 3
    what = "batched (3-D)" if batched else "unbatched (2-D)"
    if key.ndim != query.ndim or value.ndim != query.ndim:
        raise AssertionError(
            f"For {what} `query`, expected `key` and `value` to be {query.ndim}-D but found "
            f"{key.ndim}-D and {value.ndim}-D tensors respectively")
    kpm_ndim = query.ndim - 1
    if key_padding_mask is not None and key_padding_mask.ndim != kpm_ndim:
        raise AssertionError(
            f"For {what} `query`, expected `key_padding_mask` to be `None` or {kpm_ndim}-D "
            f"but found {key_padding_mask.ndim}-D tensor instead")
    if attn_mask is not None and attn_mask.ndim not in (2, 3):
        raise AssertionError(
            f"For {what} `query`, expected `attn_mask` to be `None`, 2-D or 3-D but found "
            f"{attn_mask.ndim}-D tensor instead")
    expected = (num_heads, query.shape[0], key.shape[0])
    if not batched and attn_mask is not None and attn_mask.ndim == 3 and tuple(
            attn_mask.shape) != expected:
        raise AssertionError(f"Expected `attn_mask` shape to be {expected} but got "
                             f"{_size(attn_mask.shape)}")
    return batched


def _canonical_mask(mask, name, other, other_name, dtype):
    """F._canonical_mask: a bool mask becomes 0 / -inf in `dtype`; a float one is kept. A
    mask whose dtype differs from `other`'s warns (eager deprecates mixing them)."""
    if mask is None:
        return None
    if mask.dtype is not torch.bool and not mask.dtype.is_floating_point:
        raise AssertionError(f"only bool and floating types of {name} are supported")
    if other is not None and mask.dtype != other.dtype:
        warnings.warn(f"Support for mismatched {name} and {other_name} is deprecated. Use same "
                      f"type for both instead.", stacklevel=3)
    if mask.dtype.is_floating_point:
        return mask
    return refs.masked_fill(refs.zeros_like(mask, dtype=dtype), mask, -math.inf)


def _check_mask_shape(attn_mask, bsz, num_heads, tgt_len, src_len):
    """A 2-d attn_mask of (L, S) gets a leading dim; a 3-d one must be (N * heads, L, S)."""
    expected = (tgt_len, src_len) if attn_mask.ndim == 2 else (bsz * num_heads, tgt_len, src_len)
    if attn_mask.ndim not in (2, 3):
        raise RuntimeError(f"attn_mask's dimension {attn_mask.ndim} is not supported")
    if tuple(attn_mask.shape) != expected:
        raise RuntimeError(f"The shape of the {attn_mask.ndim}D attn_mask is "
                           f"{_size(attn_mask.shape)}, but should be {expected}.")
    return refs.unsqueeze(attn_mask, 0) if attn_mask.ndim == 2 else attn_mask


def _static(t, name, bsz, num_heads, head_dim):
    if t.shape[0] != bsz * num_heads:
        raise AssertionError(f"expecting {name}.size(0) of {bsz * num_heads}, but got "
                             f"{t.shape[0]}")
    if t.shape[2] != head_dim:
        raise AssertionError(f"expecting {name}.size(2) of {head_dim}, but got {t.shape[2]}")
    return t


# --- in-projection ---------------------------------------------------------------------------
def _in_projection_packed(q, k, v, w, b):
    """F._in_projection_packed: one linear for self-attention (its (3, E) split made
    contiguous, as eager), q and a kv pair for encoder-decoder attention, else three."""
    e = q.shape[-1]
    if k is v:
        if q is k:
            proj = composites.linear(q, w, b)
            proj = refs.contiguous(refs.squeeze(refs.transpose(refs.unsqueeze(
                refs.unflatten(proj, -1, (3, e)), 0), 0, -2), -2))
            return tuple(refs.select(proj, 0, i) for i in range(3))
        w_q, w_kv = refs.split(w, [e, e * 2])
        b_q, b_kv = (None, None) if b is None else refs.split(b, [e, e * 2])
        kv = composites.linear(k, w_kv, b_kv)
        kv = refs.contiguous(refs.squeeze(refs.transpose(refs.unsqueeze(
            refs.unflatten(kv, -1, (2, e)), 0), 0, -2), -2))
        return composites.linear(q, w_q, b_q), refs.select(kv, 0, 0), refs.select(kv, 0, 1)
    w_q, w_k, w_v = refs.chunk(w, 3)
    b_q, b_k, b_v = (None,) * 3 if b is None else refs.chunk(b, 3)
    return (composites.linear(q, w_q, b_q), composites.linear(k, w_k, b_k),
            composites.linear(v, w_v, b_v))


def _in_projection(q, k, v, w_q, w_k, w_v, b_q, b_k, b_v):
    """F._in_projection: three linears, their weights of (E, E), (E, kdim), (E, vdim)."""
    eq, ek, ev = q.shape[-1], k.shape[-1], v.shape[-1]
    for what, w, shape in (("query", w_q, (eq, eq)), ("key", w_k, (eq, ek)),
                           ("value", w_v, (eq, ev))):
        if tuple(w.shape) != shape:
            raise AssertionError(f"expecting {what} weights shape of {shape}, but got "
                                 f"{_size(w.shape)}")
    for what, b in (("query", b_q), ("key", b_k), ("value", b_v)):
        if b is not None and tuple(b.shape) != (eq,):
            raise AssertionError(f"expecting {what} bias shape of {(eq,)}, but got "
                                 f"{_size(b.shape)}")
    return (composites.linear(q, w_q, b_q), composites.linear(k, w_k, b_k),
            composites.linear(v, w_v, b_v))


def _project(query, key, value, in_proj_weight, in_proj_bias, separate, q_w, k_w, v_w):
    if not separate:
        if in_proj_weight is None:
            raise AssertionError("use_separate_proj_weight is False but in_proj_weight is None")
        return _in_projection_packed(query, key, value, in_proj_weight, in_proj_bias)
    for name, w in (("q", q_w), ("k", k_w), ("v", v_w)):
        if w is None:
            raise AssertionError(f"use_separate_proj_weight is True but {name}_proj_weight is "
                                 f"None")
    b = (None,) * 3 if in_proj_bias is None else refs.chunk(in_proj_bias, 3)
    return _in_projection(query, key, value, q_w, k_w, v_w, *b)


# --- the ref ---------------------------------------------------------------------------------
@ref(module=MODULE, declines=_declines)
def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads,
                                 in_proj_weight, in_proj_bias, bias_k, bias_v, add_zero_attn,
                                 dropout_p, out_proj_weight, out_proj_bias, training=True,
                                 key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None,
                                 k_proj_weight=None, v_proj_weight=None, static_k=None,
                                 static_v=None, average_attn_weights=True, is_causal=False):
    """(attn_output, attn_weights) as eager: in-projection, masks merged into one additive
    mask, then with need_weights softmax(q * E^-1/2 @ k^T + mask), averaged over heads
    unless average_attn_weights=False, else scaled_dot_product_attention and weights None;
    out-projection. Training with dropout_p, need_weights drops the weights with the dropout
    ref (F.dropout's draws), need_weights=False with the sdpa ref (eager's math path on the
    CPU, F.dropout's draws too): for a seed, eager's numbers on the CPU either way. sdpa's
    dropout in half precision or off the CPU has no ref: such a call is declined."""
    for t in (query, key, value):
        if not is_tensor(t):   # eager's first use of them is t.dim()
            raise AttributeError(f"'{type(t).__name__}' object has no attribute 'dim'")
    num_heads = int(concrete(num_heads))
    need_weights, is_causal = bool(concrete(need_weights)), bool(concrete(is_causal))
    dropout_p = float(concrete(dropout_p)) if concrete(training) else 0.0
    if _sdpa_dropout_declines(query, training, dropout_p, need_weights):
        raise NotImplementedError("primtrace: multi_head_attention_forward's sdpa with dropout "
                                  "in half precision or off the CPU has no ref; torch runs it")
    batched = _shape_check(query, key, value, key_padding_mask, attn_mask, num_heads)
    if not batched:  # eager pretends a batch of one, squeezed at the end
        query, key, value = (refs.unsqueeze(t, 1) for t in (query, key, value))
        if key_padding_mask is not None:
            key_padding_mask = refs.unsqueeze(key_padding_mask, 0)
    tgt_len, bsz, embed_dim = query.shape
    src_len = key.shape[0]
    key_padding_mask = _canonical_mask(key_padding_mask, "key_padding_mask", attn_mask,
                                       "attn_mask", query.dtype)
    if is_causal and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the "
                           "Transformer module method `generate_square_subsequent_mask` to "
                           "create this mask.")
    if is_causal and key_padding_mask is None and not need_weights:
        attn_mask = None   # sdpa's is_causal stands for the mask
    else:
        attn_mask = _canonical_mask(attn_mask, "attn_mask", None, "", query.dtype)
        if key_padding_mask is not None:
            is_causal = False   # the merged mask is no longer causal
    if embed_dim != embed_dim_to_check:
        raise AssertionError(f"was expecting embedding dimension of {embed_dim_to_check}, but "
                             f"got {embed_dim}")
    head_dim = embed_dim // num_heads
    if head_dim * num_heads != embed_dim:
        raise AssertionError(f"embed_dim {embed_dim} not divisible by num_heads {num_heads}")
    if use_separate_proj_weight:
        if tuple(key.shape[:2]) != tuple(value.shape[:2]):
            raise AssertionError(f"key's sequence and batch dims {_size(key.shape[:2])} do not "
                                 f"match value's {_size(value.shape[:2])}")
    elif tuple(key.shape) != tuple(value.shape):
        raise AssertionError(f"key shape {_size(key.shape)} does not match value shape "
                             f"{_size(value.shape)}")
    q, k, v = _project(query, key, value, in_proj_weight, in_proj_bias, use_separate_proj_weight,
                       q_proj_weight, k_proj_weight, v_proj_weight)
    if attn_mask is not None:
        attn_mask = _check_mask_shape(attn_mask, bsz, num_heads, tgt_len, src_len)
    if bias_k is not None and bias_v is not None:
        if static_k is not None:
            raise AssertionError("bias cannot be added to static key.")
        if static_v is not None:
            raise AssertionError("bias cannot be added to static value.")
        k = refs.cat([k, refs.repeat(bias_k, 1, bsz, 1)])
        v = refs.cat([v, refs.repeat(bias_v, 1, bsz, 1)])
        attn_mask, key_padding_mask = _pad_key(attn_mask, key_padding_mask)
    elif bias_k is not None:
        raise AssertionError("bias_k is set but bias_v is None")
    elif bias_v is not None:
        raise AssertionError("bias_v is set but bias_k is None")
    # heads into the batch dim, batch first: (N * heads, L or S, head_dim)
    q = refs.transpose(refs.view(q, tgt_len, bsz * num_heads, head_dim), 0, 1)
    k = (refs.transpose(refs.view(k, k.shape[0], bsz * num_heads, head_dim), 0, 1)
         if static_k is None else _static(static_k, "static_k", bsz, num_heads, head_dim))
    v = (refs.transpose(refs.view(v, v.shape[0], bsz * num_heads, head_dim), 0, 1)
         if static_v is None else _static(static_v, "static_v", bsz, num_heads, head_dim))
    if add_zero_attn:  # eager's cat of zeros along the key dim
        k, v = refs.pad(k, (0, 0, 0, 1)), refs.pad(v, (0, 0, 0, 1))
        attn_mask, key_padding_mask = _pad_key(attn_mask, key_padding_mask)
    src_len = k.shape[1]
    if key_padding_mask is not None:
        attn_mask = _merge(attn_mask, key_padding_mask, bsz, num_heads, src_len)
    shape = dict(bsz=bsz, heads=num_heads, tgt_len=tgt_len, src_len=src_len, embed_dim=embed_dim)
    if need_weights:
        out, weights = _attention_weights(q, k, v, attn_mask, dropout_p, **shape)
        weights = refs.view(weights, bsz, num_heads, tgt_len, src_len)
        if average_attn_weights:
            weights = refs.mean(weights, dim=1)
    else:
        out, weights = _attention_sdpa(q, k, v, attn_mask, is_causal, dropout_p, **shape), None
    out = composites.linear(out, out_proj_weight, out_proj_bias)
    out = refs.view(out, tgt_len, bsz, out.shape[1])
    if not batched:
        out = refs.squeeze(out, 1)
        weights = refs.squeeze(weights, 0) if weights is not None else None
    return out, weights


def _pad_key(attn_mask, key_padding_mask):
    """The masks after one more key (bias_k, add_zero_attn): a 0 (kept) column each."""
    return tuple(refs.pad(m, (0, 1)) if m is not None else None
                 for m in (attn_mask, key_padding_mask))


def _merge(attn_mask, key_padding_mask, bsz, num_heads, src_len):
    """key_padding_mask (N, S) per head as (N * heads, 1, S), added to attn_mask."""
    if key_padding_mask.shape[0] != bsz:
        raise AssertionError(f"Expected key_padded_mask.shape[0] to be {bsz}, but got "
                             f"{key_padding_mask.shape[0]}")
    if key_padding_mask.shape[1] != src_len:
        raise AssertionError(f"Expected key_padded_mask.shape[1] to be {src_len}, but got "
                             f"{key_padding_mask.shape[1]}")
    kpm = refs.reshape(refs.expand(refs.view(key_padding_mask, bsz, 1, 1, src_len),
                                   -1, num_heads, -1, -1), bsz * num_heads, 1, src_len)
    return kpm if attn_mask is None else refs.add(attn_mask, kpm)


def _attention_weights(q, k, v, attn_mask, dropout_p, *, bsz, heads, tgt_len, src_len,
                       embed_dim):
    """need_weights: eager's explicit path (is_causal has its mask here), (output rows
    (L * N, E), weights (N * heads, L, S))."""
    q_scaled = refs.mul(q, math.sqrt(1.0 / float(q.shape[2])))
    kt = refs.transpose(k, -2, -1)
    scores = (refs.baddbmm(attn_mask, q_scaled, kt) if attn_mask is not None
              else refs.bmm(q_scaled, kt))
    weights = softmax(scores, dim=-1)
    if dropout_p > 0.0:
        weights = composites.dropout(weights, p=dropout_p)
    out = refs.bmm(weights, v)
    return refs.reshape(refs.transpose(out, 0, 1), tgt_len * bsz, embed_dim), weights


def _attention_sdpa(q, k, v, attn_mask, is_causal, dropout_p, *, bsz, heads, tgt_len, src_len,
                    embed_dim):
    """need_weights=False: scaled_dot_product_attention over (N, heads, L, head_dim)."""
    if attn_mask is not None:
        attn_mask = (refs.unsqueeze(attn_mask, 0)
                     if attn_mask.shape[0] == 1 and attn_mask.ndim == 3
                     else refs.view(attn_mask, bsz, heads, -1, src_len))
    q = refs.view(q, bsz, heads, tgt_len, q.shape[-1])
    k = refs.view(k, bsz, heads, src_len, k.shape[-1])
    v = refs.view(v, bsz, heads, src_len, v.shape[-1])
    out = composites.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)
    return refs.reshape(refs.permute(out, 2, 0, 1, 3), bsz * tgt_len, embed_dim)


__all__ = exports(globals(), MODULE)
