"""torch.nn.functional's softmax, log_softmax, softmin, layer_norm and rms_norm, written in
the reduction refs and prims (exported by ``refs.nn.functional``; ``torch.softmax``,
``torch.log_softmax`` and ``Tensor.softmax`` find them there by name).

- softmax family: ``dtype=`` converts the input first; the result has that dtype (else the
  input's). Eager's numerically stable formula: m = amax(x, dim, keepdim=True),
  softmax = exp(x - m) / sum(exp(x - m)), log_softmax = (x - m) - log(sum(exp(x - m))).
  float16/bfloat16 compute in float32 and round once (eager's CPU kernels accumulate in
  float). Only floating dtypes (eager's CPU kernels have no integer or complex versions).
  ``dim=None`` (eager's deprecated implicit dim) is not taken: the ref raises
  NotImplementedError, and declines such a call, which the tracer leaves to torch.
- layer_norm: biased variance over the last len(normalized_shape) dims,
  (x - mean) * rsqrt(var + eps) * weight + bias; float16/bfloat16 in float32, rounded once.
- rms_norm: x * rsqrt(mean(x^2) + eps) * weight; eps None is the epsilon of the computation
  dtype (float32 for float16/bfloat16), as eager. Complex inputs are declined (torch runs
  them).
"""
from __future__ import annotations

import operator

import torch

from primtrace import dtypes, prims
from primtrace.refs import reductions as R
from primtrace.refs.conversion import allocated_as_eager, suggest_memory_format
from primtrace.refs.core import broadcast, exports, is_tensor, maybe_convert, ref, with_gradient
from primtrace.refs.scalars import type_name

MODULE = "refs.nn.functional"


def _opmath(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def keep(y, x, dims):
    """`y`, reduced over `dims` of `x`, broadcast back to x's shape."""
    kept = tuple(i for i in range(x.ndim) if i not in dims)
    return prims.broadcast_in_dim(y, tuple(x.shape), kept)


# --- softmax, log_softmax, softmin -----------------------------------------------------------
def _softmax_input(name, input, dim, dtype, stacklevel=3):
    """(x in its computation dtype, dims, result dtype), with eager's refusals. torch.softmax
    and Tensor.softmax take dtype third, where F has _stacklevel."""
    if isinstance(stacklevel, torch.dtype) and dtype is None:
        dtype = stacklevel
    if not is_tensor(input):
        raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, "
                        f"not {type_name(input)}")
    if dim is None:
        raise NotImplementedError(f"primtrace: {name}(dim=None), eager's deprecated implicit "
                                  "dim, has no ref; torch runs it")
    kind = getattr(dim, "python_type", type(dim))  # a runtime number while tracing
    if issubclass(kind, (bool, float, complex)) or not hasattr(dim, "__index__"):
        raise TypeError(f"{name}(): argument 'dim' must be int, not {type_name(dim)}")
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name}(): argument 'dtype' must be torch.dtype, not {type_name(dtype)}")
    d = R.wrap_dim(operator.index(dim), input.ndim)
    x = maybe_convert(input, dtype) if dtype is not None else input
    if not x.dtype.is_floating_point and x.numel() > 0:  # eager runs no kernel on nothing
        kernel = "softmax" if name == "softmin" else name
        kernel += "_lastdim_kernel_impl" if d == max(x.ndim, 1) - 1 else "_kernel_impl"
        raise NotImplementedError(f'"{kernel}" not implemented for '
                           f"'{dtypes.scalar_type_name(x.dtype)}'")
    dims = (d,) if x.ndim else ()
    computation = _opmath(x.dtype) if x.dtype.is_floating_point else x.dtype
    return maybe_convert(x, computation), dims, x.dtype


def log_softmax_input(input, dim):
    """`input` in log_softmax's computation dtype, after eager's refusals: for cross_entropy,
    which computes log_softmax only at its targets (``row_statistics``)."""
    return _softmax_input("log_softmax", input, dim, None)[0]


def _dim_none_declines(input, dim=None, _stacklevel=3, dtype=None) -> bool:
    return dim is None


def _empty(x, dtype):
    """A new empty tensor of x's shape: eager runs no kernel (and checks no dtype) on nothing.
    Made from x, not a constant, so that it requires grad where x does (as eager's)."""
    return _fresh(maybe_convert(x, dtype), x)


def _fresh(y, *inputs):
    """`y`, or a copy of it where it is one of `inputs`: eager's result of an op on an empty
    tensor is a new tensor, never the input (a view of whose storage the input may be)."""
    return prims.clone(y) if any(y is t for t in inputs) else y


def row_statistics(x, dims):
    """(amax(x, dims), x - amax, exp(x - amax), sum(exp(x - amax))) over nonempty `dims`, the
    two reductions not broadcast back: for a caller that needs log_softmax only at a few
    points (cross_entropy's targets), so that no full-shape result is computed. The shift
    carries no gradient: every use of it cancels (d/dm of x - m - log(sum(exp(x - m))) is
    0), so the backward needs no pass over amax's ties."""
    amax = with_gradient(prims.amax(x, dims))
    shifted = prims.sub(x, keep(amax, x, dims))
    exp = prims.exp(shifted)
    return amax, shifted, exp, prims.sum(exp, dims)


def _shifted(x, dims):
    """x - amax(x, dims), and sum(exp(x - amax)) broadcast back."""
    if not dims:
        shifted = prims.sub(x, x)
        exp = prims.exp(shifted)
        return shifted, exp, exp
    _, shifted, exp, total = row_statistics(x, dims)
    return shifted, exp, keep(total, x, dims)


def _softmax(name, input, dim, dtype, stacklevel=3):
    x, dims, result = _softmax_input(name, input, dim, dtype, stacklevel)
    if x.numel() == 0:
        return _empty(x, result)
    _, exp, total = _shifted(x, dims)
    return _contiguous(maybe_convert(prims.div(exp, total), result))


@ref(module=MODULE, declines=_dim_none_declines)
def softmax(input, dim=None, _stacklevel=3, dtype=None):
    """exp(x - max) / sum(exp(x - max)) along `dim`, in `dtype` (converted first)."""
    return _softmax("softmax", input, dim, dtype, _stacklevel)


@ref(module=MODULE, declines=_dim_none_declines)
def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    """(x - max) - log(sum(exp(x - max))) along `dim`, in `dtype` (converted first)."""
    x, dims, result = _softmax_input("log_softmax", input, dim, dtype, _stacklevel)
    if x.numel() == 0:
        return _empty(x, result)
    shifted, _, total = _shifted(x, dims)
    return _contiguous(maybe_convert(prims.sub(shifted, prims.log(total)), result))


@ref(module=MODULE, declines=_dim_none_declines)
def softmin(input, dim=None, _stacklevel=3, dtype=None):
    """softmax(-input): the negation in the input's dtype, then softmax (F's order)."""
    if is_tensor(input) and input.dtype is torch.bool:
        raise RuntimeError("Negation, the `-` operator, on a bool tensor is not supported. If "
                           "you are trying to invert a mask, use the `~` or `logical_not()` "
                           "operator instead.")
    if is_tensor(input) and not input.dtype.is_floating_point and dim is not None and dtype is None:
        return _softmax("softmin", input, dim, dtype)  # refused before negating
    negated = prims.neg(input) if is_tensor(input) else input
    return _softmax("softmin", negated, dim, dtype, _stacklevel)


# --- layer_norm, rms_norm --------------------------------------------------------------------
def _normalized_dims(name, input, normalized_shape, weight, bias=None):
    """The dims normalized over, with eager's shape checks."""
    if not is_tensor(input):
        raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, "
                        f"not {type_name(input)}")
    if not isinstance(normalized_shape, (tuple, list, torch.Size)):
        raise TypeError(f"{name}(): argument 'normalized_shape' (position 2) must be tuple of "
                        f"ints, not {type_name(normalized_shape)}")
    shape = [operator.index(s) for s in normalized_shape]
    if not shape:
        raise RuntimeError("Expected normalized_shape to be at least 1-dimensional, i.e., "
                           "containing at least one element, but got normalized_shape = []")
    for pname, t in (("weight", weight), ("bias", bias)):
        if t is not None and list(t.shape) != shape:
            raise RuntimeError(f"Expected {pname} to be of same shape as normalized_shape, but "
                               f"got {pname} of shape {list(t.shape)} and normalized_shape = "
                               f"{shape}")
    if name == "rms_norm" and input.ndim < len(shape):
        raise ValueError(f"Input tensor must have at least {len(shape)} dimensions, but got "
                         f"{input.ndim}")
    if input.ndim < len(shape) or list(input.shape[input.ndim - len(shape):]) != shape:
        raise RuntimeError(f"Given normalized_shape={shape}, expected input with shape "
                           f"[*, {', '.join(map(str, shape))}], but got input of size"
                           f"{list(input.shape)}")
    return tuple(range(input.ndim - len(shape), input.ndim))


def _affine(y, x, weight, bias, computation):
    if weight is not None and bias is not None and computation is torch.float32:
        # eager's kernel computes y * weight + bias as one fused multiply-add; in float64
        # the float32 product is exact and the sum rounds (to float32) as the fma does
        # (but for double-rounding ties): two float32 roundings lose accuracy to eager
        # (differentiated as the float32 expression: the backward stays in float32)
        wide = [prims.convert_element_type(t, torch.float64) for t in (y, weight, bias)]
        w, b = (broadcast(t, tuple(x.shape)) for t in wide[1:])
        value = prims.convert_element_type(prims.add(prims.mul(wide[0], w), b), torch.float32)
        w, b = (broadcast(maybe_convert(t, computation), tuple(x.shape)) for t in (weight, bias))
        return prims.differentiate_as(value, prims.add(prims.mul(y, w), b))
    if weight is not None:
        y = prims.mul(y, broadcast(maybe_convert(weight, computation), tuple(x.shape)))
    if bias is not None:
        y = prims.add(y, broadcast(maybe_convert(bias, computation), tuple(x.shape)))
    return y


@ref(module=MODULE)
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """(x - mean) / sqrt(var + eps) * weight + bias over the last len(normalized_shape)
    dims, with the biased variance; float16/bfloat16 computed in float32, rounded once."""
    dims = _normalized_dims("layer_norm", input, normalized_shape, weight, bias)
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f"\"LayerNormKernelImpl\" not implemented for "
                           f"'{dtypes.scalar_type_name(input.dtype)}'")
    computation = _opmath(input.dtype)
    for t in (weight, bias):
        if t is not None and t.dtype != input.dtype and not (
                computation != input.dtype and t.dtype is torch.float32):
            raise RuntimeError("mixed dtype (CPU): expect parameter to have scalar type of Float")
    x = maybe_convert(input, computation)
    if x.numel() == 0:
        return _fresh(maybe_convert(_affine(x, x, weight, bias, computation), input.dtype), input, x)
    mean = keep(R.exact_mean(x, dims), x, dims)
    var = keep(prims.var(x, dims, correction=0), x, dims)
    rstd = prims.rsqrt(prims.add(var, float(eps)))
    y = prims.mul(prims.sub(x, mean), rstd)
    return _contiguous(maybe_convert(_affine(y, x, weight, bias, computation), input.dtype))


def _contiguous(y):
    """Eager's CPU softmax and layer_norm kernels write a contiguous result."""
    return allocated_as_eager(y, torch.contiguous_format)


def _count(x, dims):
    n = 1
    for d in dims:
        n *= x.shape[d]
    return n


def _complex_declines(input, normalized_shape, weight=None, eps=None) -> bool:
    return is_tensor(input) and input.dtype.is_complex


@ref(module=MODULE, declines=_complex_declines)
def rms_norm(input, normalized_shape, weight=None, eps=None):
    """x * rsqrt(mean(x^2) + eps) * weight over the last len(normalized_shape) dims;
    float16/bfloat16 computed in float32; eps None: the computation dtype's epsilon."""
    dims = _normalized_dims("rms_norm", input, normalized_shape, weight)
    if input.dtype.is_complex:
        raise NotImplementedError("primtrace: rms_norm of a complex input has no ref; torch "
                                  "runs it")
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f"\"rms_norm\" not implemented for "
                           f"'{dtypes.scalar_type_name(input.dtype)}'")
    computation = _opmath(input.dtype)
    if eps is None:
        eps = torch.finfo(computation).eps
    x = maybe_convert(input, computation)
    if x.numel() == 0:
        y = x
    else:
        square_mean = prims.div(prims.sum(prims.mul(x, x), dims), float(_count(x, dims)))
        y = prims.mul(x, keep(prims.rsqrt(prims.add(square_mean, float(eps))), x, dims))
    if weight is not None:
        from primtrace.refs import mul
        y = mul(y, weight)
    # eager's CPU kernel writes the input's suggested memory format (channels_last kept)
    return allocated_as_eager(_fresh(maybe_convert(y, input.dtype), input, x),
                              suggest_memory_format(input))


__all__ = exports(globals(), MODULE)
