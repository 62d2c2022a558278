"""torch.nn.functional's classification and ranking losses: nll_loss, cross_entropy (class
indices or probabilities, label_smoothing), poisson_nll_loss, hinge_embedding_loss,
margin_ranking_loss and triplet_margin_loss (exported by ``refs.nn.functional``).

nll_loss picks each target's log-probability with ``prims.gather`` along the class dim
(input (C,), (N, C) or (N, C, d1, ...)); targets equal to ignore_index weigh 0 and add 0
(even where their row is inf or NaN), other targets outside [0, C) raise eager's IndexError
when the trace runs (``prims.check_targets``, a guard: targets are data). 'mean' divides by
the summed weights of the targets kept (NaN when none is). The loss is computed in the
opmath dtype and rounded once.

cross_entropy with class indices computes log_softmax only at the targets, as
``(x_t - amax) - log(sum(exp(x - amax)))`` with x_t gathered from the input: a row kernel
then writes one value per row, not the (N, C) log-probabilities (W9). Those per-target
values and their reduction are float64 (one per row, cheap) and rounded once, so the loss
is as close to float64 as eager's or closer. label_smoothing adds eager's smoothing term
(the full log_softmax, summed over classes in the row kernel); class probabilities are
eager's composite over log_softmax. The legacy size_average/reduce arguments are declined
(torch runs such calls).
"""
from __future__ import annotations

import torch

from primtrace import dtypes, prims
from primtrace import refs   # refs.mul...: module attributes, so this module exports no other refs
from primtrace.refs.nn import composites, softmax_norms
from primtrace.refs import reductions as R
from primtrace.refs.core import exports, is_tensor, maybe_convert, ref
from primtrace.refs.scalars import concrete, type_name

MODULE = "refs.nn.functional"
REDUCTIONS = ("none", "mean", "sum")


def _legacy_declines(*args, size_average=None, reduce=None, **kwargs) -> bool:
    return size_average is not None or reduce is not None


def _no_legacy(name, size_average, reduce):
    if size_average is not None or reduce is not None:
        raise NotImplementedError(f"primtrace: {name} with size_average or reduce has no ref; "
                                  "torch runs it")


def _reduction(reduction):
    if reduction not in REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


def _tensors(name, **named):
    for pname, t in named.items():
        if not is_tensor(t):
            raise TypeError(f"{name}(): argument '{pname}' must be Tensor, not {type_name(t)}")


def _reduce(loss, reduction):
    return R.mean(loss) if reduction == "mean" else R.sum(loss) if reduction == "sum" else loss


# --- nll_loss --------------------------------------------------------------------------------
def _nll_checks(input, target, weight):
    if input.ndim < 1:
        raise ValueError(f"Expected 1 or more dimensions (got {input.ndim})")
    if input.ndim != 1 and input.shape[0] != (target.shape[0] if target.ndim else 1):
        raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target "
                         f"batch_size ({target.shape[0] if target.ndim else 1}).")
    if target.dtype not in (torch.int64, torch.uint8):
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got "
                           f"{dtypes.scalar_type_name(target.dtype)}")
    expected = (*input.shape[:1], *input.shape[2:]) if input.ndim > 1 else ()
    if tuple(target.shape) != expected:
        raise RuntimeError(f"expected target of shape {list(expected)}, got "
                           f"{list(target.shape)}" if input.ndim > 2 else
                           "0D or 1D target tensor expected, multi-target not supported")
    classes = input.shape[1] if input.ndim > 1 else input.shape[0]
    if weight is not None:
        if weight.ndim != 1 or weight.shape[0] != classes:
            raise RuntimeError(f"weight tensor should be defined either for all {classes} "
                               f"classes or no classes but got weight tensor of shape: "
                               f"{list(weight.shape)}")
        if weight.dtype != input.dtype:
            raise RuntimeError(f"expected scalar type {dtypes.scalar_type_name(input.dtype)} but "
                               f"found {dtypes.scalar_type_name(weight.dtype)}")
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f"\"nll_loss_out_frame\" not implemented for "
                                  f"'{dtypes.scalar_type_name(input.dtype)}'")
    return classes


def _picked(input, target, classes, ignore_index):
    """(input at each target, a bool mask of the targets kept), shaped like target: one
    gather from `input` itself (no converted or computed full-shape tensor is needed)."""
    target = maybe_convert(target, torch.int64)
    prims.check_targets(target, classes, ignore_index)
    kept = prims.ne(target, ignore_index)
    if classes == 0:  # every target is ignored (checked): nothing to gather from
        return prims.full(tuple(target.shape), 0, dtype=input.dtype, device=input.device), kept
    safe = prims.where(kept, target, 0)
    if input.ndim == 1:
        return prims.take(input, safe), kept
    index_shape = (input.shape[0], 1, *input.shape[2:])
    index = prims.broadcast_in_dim(safe, index_shape, (0, *range(2, input.ndim)))
    return prims.squeeze(prims.gather(input, 1, index), (1,)), kept


def _weights(kept, target, weight, dtype):
    """Each target's weight in `dtype`: weight[target], 0 where it is ignored."""
    w = maybe_convert(kept, dtype)
    if weight is None:
        return w
    safe = prims.where(kept, maybe_convert(target, torch.int64), 0)
    return prims.mul(w, prims.take(maybe_convert(weight, dtype), safe))


def nll(picked, kept, target, weight, reduction, result):
    """nll_loss of the picked log-probabilities (in their computation dtype), rounded to
    `result`. An ignored target weighs 0 and adds 0, even where its row is inf or NaN."""
    w = _weights(kept, target, weight, picked.dtype)
    loss = prims.where(kept, prims.neg(prims.mul(picked, w)), 0.0)
    if reduction == "none":
        return maybe_convert(loss, result)
    dims = tuple(range(loss.ndim))
    total = prims.sum(loss, dims)
    if reduction == "mean":
        total = prims.div(total, prims.sum(w, dims))
    return maybe_convert(total, result)


@ref(module=MODULE, declines=_legacy_declines)
def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """-weight[t] * input[t] for each target t (log-probabilities in), reduced."""
    _no_legacy("nll_loss", size_average, reduce)
    _tensors("nll_loss", input=input, target=target)
    _reduction(reduction)
    classes = _nll_checks(input, target, weight)
    picked, kept = _picked(input, target, classes, int(concrete(ignore_index)))
    picked = maybe_convert(picked, dtypes.opmath(input.dtype))
    return nll(picked, kept, target, weight, reduction, input.dtype)


# --- cross_entropy ---------------------------------------------------------------------------
@ref(module=MODULE, declines=_legacy_declines)
def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    """nll_loss(log_softmax(input)) for class indices; -sum(target * log_softmax(input)) for
    class probabilities; label_smoothing mixes in the uniform distribution."""
    _no_legacy("cross_entropy", size_average, reduce)
    _tensors("cross_entropy", input=input, target=target)
    _reduction(reduction)
    smoothing = float(concrete(label_smoothing))
    if not 0.0 <= smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {smoothing}")
    class_dim = 1 if input.ndim >= 2 else 0
    if input.ndim == 0:
        raise ValueError("Expected 1 or more dimensions (got 0)")
    if target.dtype.is_floating_point and tuple(target.shape) == tuple(input.shape):
        logp = softmax_norms.log_softmax(input, class_dim)
        return _with_probabilities(logp, target, weight, reduction, smoothing, class_dim)
    x = softmax_norms.log_softmax_input(input, class_dim)
    classes = _nll_checks(input, target, weight)
    ignore_index = int(concrete(ignore_index))
    picked, kept = _picked(input, target, classes, ignore_index)
    picked = maybe_convert(picked, torch.float64)  # one value per target: float64 is cheap
    if classes:
        amax, shifted, _, total = softmax_norms.row_statistics(x, (class_dim,))
        log_total = prims.log(maybe_convert(total, torch.float64))
        picked = prims.sub(prims.sub(picked, maybe_convert(amax, torch.float64)), log_total)
    loss = nll(picked, kept, target, weight, reduction, torch.float64)
    if smoothing > 0:
        logp = x if not classes else prims.sub(
            shifted, softmax_norms.keep(prims.log(total), x, (class_dim,)))
        smooth = _smooth_term(logp, kept, target, weight, reduction, class_dim)
        smooth = prims.mul(maybe_convert(smooth, torch.float64), smoothing / classes)
        loss = prims.add(prims.mul(loss, 1 - smoothing), smooth)
    return maybe_convert(loss, input.dtype)


def _class_weights(weight, x, class_dim):
    """weight viewed along the class dim of x."""
    return prims.broadcast_in_dim(maybe_convert(weight, x.dtype), tuple(x.shape), (class_dim,))


def _smooth_term(x, kept, target, weight, reduction, class_dim):
    """eager's -sum(logp * weight) over classes, 0 at ignored targets, reduced as its
    cross_entropy reduces it ('mean': by the summed weights, or count, of kept targets)."""
    terms = prims.mul(x, _class_weights(weight, x, class_dim)) if weight is not None else x
    smooth = prims.where(kept, prims.neg(prims.sum(terms, (class_dim,))), 0.0)
    if reduction == "none":
        return smooth
    dims = tuple(range(smooth.ndim))
    total = prims.sum(smooth, dims)
    if reduction == "sum":
        return total
    return prims.div(total, prims.sum(_weights(kept, target, weight, x.dtype), dims))


def _with_probabilities(logp, target, weight, reduction, smoothing, class_dim):
    classes = logp.shape[class_dim]
    if smoothing > 0:
        target = refs.add(refs.mul(target, 1 - smoothing), smoothing / classes)
    terms = refs.mul(logp, target)
    if weight is not None:
        terms = refs.mul(terms, prims.broadcast_in_dim(weight, tuple(logp.shape), (class_dim,)))
    if reduction == "none":
        return refs.neg(R.sum(terms, class_dim))
    total = refs.neg(R.sum(terms))
    if reduction == "sum":
        return total
    return refs.true_divide(total, logp.numel() // classes if classes else 0)


# --- the other losses ------------------------------------------------------------------------
def _poisson_declines(input, target, log_input=True, full=False, size_average=None, eps=1e-8,
                      reduce=None, reduction="mean"):
    return size_average is not None or reduce is not None


@ref(module=MODULE, declines=_poisson_declines)
def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8,
                     reduce=None, reduction="mean"):
    """exp(input) - target * input (log_input), else input - target * log(input + eps); full
    adds Stirling's term where target > 1."""
    _no_legacy("poisson_nll_loss", size_average, reduce)
    _tensors("poisson_nll_loss", input=input, target=target)
    _reduction(reduction)
    if log_input:
        loss = refs.sub(refs.exp(input), refs.mul(target, input))
    else:
        loss = refs.sub(input, refs.mul(target, refs.log(refs.add(input, eps))))
    if full:
        stirling = refs.add(refs.sub(refs.mul(target, refs.log(target)), target),
                            refs.mul(refs.log(refs.mul(target, 2 * 3.141592653589793)), 0.5))
        loss = refs.add(loss, refs.masked_fill(stirling, refs.le(target, 1), 0))
    return _reduce(loss, reduction)


@ref(module=MODULE, declines=_legacy_declines)
def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None,
                         reduction="mean"):
    """input where target != -1 plus max(0, margin - input) where target != 1."""
    _no_legacy("hinge_embedding_loss", size_average, reduce)
    _tensors("hinge_embedding_loss", input=input, target=target)
    _reduction(reduction)
    zeros = refs.zeros_like(input)
    margin_clamp = refs.clamp_min(refs.sub(margin, input), 0)
    output = refs.add(refs.where(refs.ne(target, 1), margin_clamp, zeros),
                      refs.where(refs.ne(target, -1), input, zeros))
    return _reduce(output, reduction)


@ref(module=MODULE, declines=_legacy_declines)
def margin_ranking_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None,
                        reduction="mean"):
    """max(0, -target * (input1 - input2) + margin); the three must have one rank."""
    _no_legacy("margin_ranking_loss", size_average, reduce)
    _tensors("margin_ranking_loss", input1=input1, input2=input2, target=target)
    _reduction(reduction)
    if not input1.ndim == input2.ndim == target.ndim:
        raise RuntimeError(f"margin_ranking_loss : All input tensors should have same dimension "
                           f"but got sizes: input1: {torch.Size(input1.shape)}, input2: "
                           f"{torch.Size(input2.shape)}, target: {torch.Size(target.shape)} ")
    loss = refs.clamp_min(refs.add(refs.mul(refs.neg(target), refs.sub(input1, input2)), margin), 0)
    return _reduce(loss, reduction)


def _triplet_declines(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False,
                      size_average=None, reduce=None, reduction="mean"):
    return size_average is not None or reduce is not None


@ref(module=MODULE, declines=_triplet_declines)
def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False,
                        size_average=None, reduce=None, reduction="mean"):
    """max(0, margin + d(anchor, positive) - d(anchor, negative)) with the pairwise p-distance
    (swap: the smaller of d(a, n) and d(p, n))."""
    _no_legacy("triplet_margin_loss", size_average, reduce)
    _tensors("triplet_margin_loss", anchor=anchor, positive=positive, negative=negative)
    _reduction(reduction)
    if concrete(margin) <= 0:
        raise ValueError(f"margin must be greater than 0, got {concrete(margin)}")
    a, pos, neg = anchor.ndim, positive.ndim, negative.ndim
    if not a == pos == neg:
        raise RuntimeError(f"The anchor, positive, and negative tensors are expected to have the "
                           f"same number of dimensions, but got: anchor {a}D, positive {pos}D, "
                           f"and negative {neg}D inputs")
    d_pos = composites.pairwise_distance(anchor, positive, p, eps)
    d_neg = composites.pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = refs.minimum(d_neg, composites.pairwise_distance(positive, negative, p, eps))
    return _reduce(refs.clamp_min(refs.sub(refs.add(d_pos, margin), d_neg), 0), reduction)


__all__ = exports(globals(), MODULE)
