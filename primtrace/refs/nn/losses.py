"""torch.nn.functional's regression losses: mse_loss, l1_loss, smooth_l1_loss and
huber_loss, written in prims and the reduction refs (exported by ``refs.nn.functional``).

Each follows F's Python then eager's kernel: a target of another size than the input warns
(F's broadcasting UserWarning) and both are broadcast; ``reduction`` must be 'none', 'mean'
or 'sum' (F's ValueError otherwise); the elementwise loss is computed in the opmath dtype
of the promoted operands and rounded to the result dtype (the promoted dtype; huber_loss:
the input's), then ``refs.mean``/``refs.sum`` reduce it (a mean of nothing is NaN).
The legacy ``size_average``/``reduce`` arguments, ``weight=`` and complex operands are
declined: the tracer leaves those calls to torch.
"""
from __future__ import annotations

import warnings

import torch

from primtrace import dtypes, prims
from primtrace.refs import reductions as R
from primtrace.refs.core import broadcast, broadcast_shapes, exports, is_tensor, maybe_convert, ref
from primtrace.refs.promotion import DEFAULT, elementwise_dtypes
from primtrace.refs.scalars import concrete, type_name

MODULE = "refs.nn.functional"
REDUCTIONS = ("none", "mean", "sum")


def _complex(*operands) -> bool:
    return any(is_tensor(t) and t.dtype.is_complex for t in operands)


def _declines(input, target, size_average=None, reduce=None, *args, weight=None, **kwargs):
    return (size_average is not None or reduce is not None or weight is not None
            or _complex(input, target))


def _l1_declines(input, target, size_average=None, reduce=None, *args, weight=None, **kwargs):
    return size_average is not None or reduce is not None or weight is not None


def _huber_declines(input, target, reduction="mean", delta=1.0, weight=None):
    return weight is not None or _complex(input, target)


def _operands(name, input, target, size_average=None, reduce=None, weight=None,
              complex_ok=False):
    """input and target broadcast to one shape, after F's checks and warning."""
    if size_average is not None or reduce is not None or weight is not None:
        raise NotImplementedError(f"primtrace: {name} with size_average, reduce or weight has "
                                  "no ref; torch runs it")
    for t in (target, input):
        if not is_tensor(t):
            raise AttributeError(f"'{type_name(t)}' object has no attribute 'size'")
    if not complex_ok and _complex(input, target):
        raise NotImplementedError(f"primtrace: {name} of complex tensors has no ref; torch "
                                  "runs it")
    if tuple(target.shape) != tuple(input.shape):
        warnings.warn(f"Using a target size ({torch.Size(target.shape)}) that is different to "
                      f"the input size ({torch.Size(input.shape)}). This will likely lead to "
                      "incorrect results due to broadcasting. Please ensure they have the same "
                      "size.", stacklevel=4)
    shape = broadcast_shapes(tuple(input.shape), tuple(target.shape))
    return broadcast(input, shape), broadcast(target, shape)


def _check_reduction(reduction):
    if reduction not in REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")


def _reduce(loss, reduction):
    if reduction == "mean":
        return R.mean(loss)
    if reduction == "sum":
        return R.sum(loss)
    return loss


def _float_operands(kernel, input, target, result=None):
    """(x, y) in the computation dtype, the result dtype; eager's refusal of other dtypes."""
    computation, promoted = elementwise_dtypes(input, target, type_promotion_kind=DEFAULT)
    if not promoted.is_floating_point:
        raise NotImplementedError(f'"{kernel}" not implemented for '
                                  f"'{dtypes.scalar_type_name(promoted)}'")
    return (maybe_convert(input, computation), maybe_convert(target, computation),
            result or promoted)


def _abs_diff(x, y):
    return prims.abs(prims.sub(x, y))


@ref(module=MODULE, declines=_declines)
def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """(input - target)^2, reduced: mean (default), sum or none."""
    input, target = _operands("mse_loss", input, target, size_average, reduce, weight)
    _check_reduction(reduction)
    x, y, result = _float_operands("mse_cpu", input, target)
    d = prims.sub(x, y)
    return _reduce(maybe_convert(prims.mul(d, d), result), reduction)


def _l1(input, target, reduction):
    from primtrace import refs
    return _reduce(refs.abs(refs.sub(input, target)), reduction)


@ref(module=MODULE, declines=_l1_declines)
def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """|input - target|, reduced (integer inputs too, where eager's sum takes them)."""
    # complex too: |input - target| is real, as eager's
    input, target = _operands("l1_loss", input, target, size_average, reduce, weight,
                              complex_ok=True)
    _check_reduction(reduction)
    return _l1(input, target, reduction)


def _quadratic_part(z, limit):
    """Where smooth_l1 and huber are quadratic in z = |input - target|: not z >= limit, so
    NaN too, as eager's backward kernels (NaN takes their x * g branch; the values are NaN
    either way). Where the loss is linear the square is taken of 0: its zero cotangent
    would make a NaN gradient at an infinite z (0 * inf)."""
    return prims.bitwise_not(prims.ge(z, limit))


@ref(module=MODULE, declines=_declines)
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """z = |input - target|: 0.5 * z^2 / beta where z < beta, else z - 0.5 * beta; l1_loss
    for beta == 0."""
    input, target = _operands("smooth_l1_loss", input, target, size_average, reduce)
    _check_reduction(reduction)
    beta = float(concrete(beta))
    if beta == 0.0:
        return _l1(input, target, reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    x, y, result = _float_operands("smooth_l1_cpu", input, target)
    z = _abs_diff(x, y)
    small = _quadratic_part(z, beta)
    zq = prims.where(small, z, 0)
    quadratic = prims.div(prims.mul(prims.mul(zq, 0.5), zq), beta)
    loss = prims.where(small, quadratic, prims.sub(z, 0.5 * beta))
    return _reduce(maybe_convert(loss, result), reduction)


@ref(module=MODULE, declines=_huber_declines)
def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """z = |input - target|: 0.5 * z^2 where z < delta, else delta * (z - 0.5 * delta); in
    the input's dtype (eager's kernel writes into a tensor like input)."""
    input, target = _operands("huber_loss", input, target, weight=weight)
    _check_reduction(reduction)
    delta = float(concrete(delta))
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    x, y, promoted = _float_operands("huber_cpu", input, target)
    if promoted != input.dtype and not input.dtype.is_floating_point:
        raise RuntimeError(f"result type {dtypes.scalar_type_name(promoted)} can't be cast to "
                           f"the desired output type {dtypes.scalar_type_name(input.dtype)}")
    z = _abs_diff(x, y)
    small = _quadratic_part(z, delta)
    zq = prims.where(small, z, 0)
    quadratic = prims.mul(prims.mul(zq, 0.5), zq)
    linear = prims.mul(prims.sub(z, 0.5 * delta), delta)
    loss = prims.where(small, quadratic, linear)
    return _reduce(maybe_convert(loss, input.dtype), reduction)


__all__ = exports(globals(), MODULE)
