"""torch.nn.functional's convolutions and pooling over the library prims
(``prims/library.py``: torch's own kernels, with meta functions that give eager's strides).
Exported by ``refs.nn.functional``: ``torch.conv2d``, ``F.max_pool2d``, ``torch.max_pool2d``,
``F.adaptive_avg_pool2d``... find them there by name.

What a ref does is eager's argument handling: ints and 1-element lists broadcast to one value
per spatial dim, ``stride=None`` (or ``[]``) is the kernel size, ``padding='valid'`` is 0 and
``'same'`` is (dilation * (kernel - 1)) // 2 per side (an even effective kernel: the input
padded on the right by the extra element first, as eager pads it), ``None`` in an adaptive output size is the
input's size; then the prim. No type promotion: conv's input, weight and bias must share a
dtype, as eager requires.

Declined (the tracer leaves these calls to torch, and the ref raises NotImplementedError if
called): ``return_indices=True``; complex inputs; tensors off the CPU (the meta functions
follow the CPU kernels' layout rules); convolutions the prim's meta leaves
to torch (operands neither contiguous nor channels_last, an input without channels, an empty
input of mixed dtypes or of the output's shape, a transposed convolution to an empty
output); max_pool3d of a non-contiguous unbatched input. A non-contiguous conv1d input is not
declined: it is copied contiguous first, as eager's _convolution copies it.
"""
from __future__ import annotations

import operator
import warnings

import torch

from primtrace.ir.proxy import TensorProxy, TensorSpec
from primtrace.ir.strides import contiguous_strides
from primtrace.prims import library as L
from primtrace.prims.meta import PrimContractError
from primtrace.refs.core import exports, is_tensor, ref
from primtrace.refs.scalars import type_name

MODULE = "refs.nn.functional"


# --- arguments -----------------------------------------------------------------------------------
def _ints(fname, pname, value) -> tuple:
    """An int or a sequence of ints as a tuple (eager's IntArrayRef parsing)."""
    values = value if isinstance(value, (tuple, list, torch.Size)) else (value,)
    try:
        if any(isinstance(v, (bool, float)) for v in values):
            raise TypeError
        return tuple(operator.index(v) for v in values)
    except TypeError:
        raise TypeError(f"{fname}(): argument '{pname}' must be tuple of ints, not "
                        f"{type_name(value)}") from None


def _per_dim(fname, pname, value, nd, message=None) -> tuple:
    """One value per spatial dim: an int or 1-element list broadcasts."""
    values = _ints(fname, pname, value)
    if len(values) == 1:
        return values * nd
    if len(values) != nd:
        raise RuntimeError(message or f"{fname}: {pname} must either be a single int, or a tuple "
                                      f"of {nd} ints")
    return values


def _tensor(fname, pname, position, value):
    if not is_tensor(value):
        raise TypeError(f"{fname}(): argument '{pname}' (position {position}) must be Tensor, "
                        f"not {type_name(value)}")


def _declined(fname, what):
    raise NotImplementedError(f"primtrace: {fname} {what} has no ref; torch runs it")


def _off_cpu_or_complex(*tensors) -> bool:
    return any(is_tensor(t) and (t.device.type != "cpu" or t.dtype.is_complex) for t in tensors)


# --- convolution -------------------------------------------------------------------------------
def _same_padding(weight, dilation, nd):
    """(padding, symmetric) of padding='same': dilation * (kernel - 1) split, left first."""
    pads = []
    for i in range(nd):
        total = dilation[i] * (weight.shape[2 + i] - 1)
        pads.append((total // 2, total - total // 2))
    return tuple(p for p, _ in pads), all(lo == hi for lo, hi in pads)


def _conv_params(fname, nd, input, weight, stride, padding, dilation, output_padding=0):
    """(stride, padding, dilation, output_padding) as the prim takes them, with eager's checks."""
    _tensor(fname, "input", 1, input)
    _tensor(fname, "weight", 2, weight)
    if input.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to "
                           f"{fname}, but got input of size: {list(input.shape)}")
    k = weight.ndim - 2
    if k <= 0:
        raise RuntimeError("weight should have at least three dimensions")

    def expand(pname, value):
        values = _ints(fname, pname, value)
        values = values * nd if len(values) == 1 and not isinstance(value, (tuple, list)) else values
        if len(values) == 1:
            return values * k
        if len(values) != k:
            raise RuntimeError(f"expected {pname} to be a single integer value or a list of {k} "
                               f"values to match the convolution dimensions, but got "
                               f"{pname}={list(values)}")
        return values

    stride, dilation = expand("stride", stride), expand("dilation", dilation)
    output_padding = expand("output_padding", output_padding)
    if isinstance(padding, str):
        if padding == "valid":
            padding = (0,) * k
        elif padding == "same":
            if any(s != 1 for s in stride):
                raise RuntimeError("padding='same' is not supported for strided convolutions")
            padding, _ = _same_padding(weight, dilation, k)   # left; _conv pads the right
        else:
            raise RuntimeError(f"Invalid padding string: '{padding}'")
    else:
        padding = expand("padding", padding)
    if input.ndim + (input.ndim == nd + 1) != weight.ndim:
        raise RuntimeError(f"Expected {weight.ndim}-dimensional input for {weight.ndim}-dimensional "
                           f"weight {list(weight.shape)}, but got {input.ndim}-dimensional input of "
                           f"size {list(input.shape)} instead")
    return stride, padding, dilation, output_padding


def _left_to_torch(fname, nd, transposed, input, weight, bias, stride, padding, dilation,
                   groups, output_padding=0) -> bool:
    """Whether a convolution is declined: complex or non-CPU tensors,
    or what the prim's meta leaves to torch (PrimContractError: an input without channels, an
    empty one of mixed dtypes or of the output's shape). A call eager refuses is not declined:
    the ref raises eager's error."""
    if _off_cpu_or_complex(input, weight, bias):
        return True
    if not (is_tensor(input) and is_tensor(weight) and (bias is None or is_tensor(bias))) or (
            transposed and isinstance(padding, str)):
        return False
    try:
        params = _conv_params(fname, nd, input, weight, stride, padding, dilation, output_padding)
        if nd == 1 and not transposed and not _is_contiguous(input):   # copied (_read_1d)
            input = TensorProxy("input", TensorSpec(tuple(input.shape), input.dtype, input.device,
                                                    contiguous_strides(tuple(input.shape))))
        L.convolution.meta(input, weight, bias, *params[:3], transposed, params[3],
                           operator.index(groups))
    except NotImplementedError as e:
        return "primtrace" in str(e)
    except PrimContractError:
        return True
    except Exception:  # eager's error: the ref raises it
        return False
    return False


def _declines(fname, nd, transposed):
    if transposed:
        def declines(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
            return _left_to_torch(fname, nd, True, input, weight, bias, stride, padding, dilation,
                                  groups, output_padding)
    else:
        def declines(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
            return _left_to_torch(fname, nd, False, input, weight, bias, stride, padding, dilation,
                                  groups)
    return declines


def _conv(fname, nd, input, weight, bias, stride, padding, dilation, groups):
    if bias is not None:
        _tensor(fname, "bias", 3, bias)
    if _left_to_torch(fname, nd, False, input, weight, bias, stride, padding, dilation, groups):
        _declined(fname, "of complex or non-CPU tensors, no input "
                         "channels or an empty input of mixed dtypes or the output's shape")
    same = isinstance(padding, str) and padding == "same"
    stride, padding, dilation, output_padding = _conv_params(fname, nd, input, weight, stride,
                                                             padding, dilation)
    if same:
        input = _pad_uneven_same(input, weight, dilation)
    if nd == 1:
        input = _read_1d(input)
    return L.convolution(input, weight, bias, stride, padding, dilation, False, output_padding,
                         operator.index(groups))


def _is_contiguous(t) -> bool:
    """torch's is_contiguous: row-major strides on the dims of size > 1 (what .contiguous()
    returns as is)."""
    expected = 1
    for n, stride in reversed(list(zip(t.shape, t.stride()))):
        if n == 0:
            return True
        if n != 1:
            if stride != expected:
                return False
            expected *= n
    return True


def _read_1d(input):
    """A 1-d convolution's input as eager's _convolution reads it: made contiguous first
    ("avoid accidentally going through NHWC for permuted 3d input"), so a transposed (N, L, C)
    view, as Wav2Vec2's positional convolution passes, convolves as its contiguous copy
    (values and layout, checked against eager on random layouts)."""
    if _is_contiguous(input):
        return input
    from primtrace.refs.conversion import contiguous
    return contiguous(input)


def _pad_uneven_same(input, weight, dilation):
    """Eager's uneven padding='same' (an even effective kernel): the input padded with zeros
    by the extra element on the right of each such dim (constant_pad_nd, as eager), then
    convolved with the left padding on both sides."""
    nd = weight.ndim - 2
    pads = _same_padding(weight, dilation, nd)[0]
    extra = [dilation[i] * (weight.shape[2 + i] - 1) - 2 * pads[i] for i in range(nd)]
    if not any(extra):
        return input
    warnings.warn("Using padding='same' with even kernel lengths and odd dilation may require a "
                  "zero-padded copy of the input be created", UserWarning, stacklevel=4)
    from primtrace.refs.joins import constant_pad_nd
    pad_nd = []
    for i in reversed(range(nd)):   # the last dim first, as constant_pad_nd takes them
        pad_nd += [0, extra[i]]
    return constant_pad_nd(input, pad_nd, 0)


def _conv_transpose(fname, nd, input, weight, bias, stride, padding, output_padding, groups,
                    dilation):
    if bias is not None:
        _tensor(fname, "bias", 3, bias)
    if isinstance(padding, str):
        raise TypeError(f"{fname}(): argument 'padding' must be tuple of ints, not str")
    if _left_to_torch(fname, nd, True, input, weight, bias, stride, padding, dilation, groups,
                      output_padding):
        _declined(fname, "of complex or non-CPU tensors, no input channels or an empty input "
                         "of mixed dtypes or the output's shape")
    stride, padding, dilation, output_padding = _conv_params(
        fname, nd, input, weight, stride, padding, dilation, output_padding)
    return L.convolution(input, weight, bias, stride, padding, dilation, True, output_padding,
                         operator.index(groups))


@ref(module=MODULE, declines=_declines("conv1d", 1, False))
def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """Cross-correlation over 1 spatial dim (prims.convolution); padding may be 'same'/'valid'."""
    return _conv("conv1d", 1, input, weight, bias, stride, padding, dilation, groups)


@ref(module=MODULE, declines=_declines("conv2d", 2, False))
def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """Cross-correlation over 2 spatial dims (prims.convolution); padding may be 'same'/'valid'."""
    return _conv("conv2d", 2, input, weight, bias, stride, padding, dilation, groups)


@ref(module=MODULE, declines=_declines("conv3d", 3, False))
def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """Cross-correlation over 3 spatial dims (prims.convolution); padding may be 'same'/'valid'."""
    return _conv("conv3d", 3, input, weight, bias, stride, padding, dilation, groups)


@ref(module=MODULE, declines=_declines("conv_transpose1d", 1, True))
def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """Transposed convolution over 1 spatial dim (prims.convolution, transposed)."""
    return _conv_transpose("conv_transpose1d", 1, input, weight, bias, stride, padding,
                           output_padding, groups, dilation)


@ref(module=MODULE, declines=_declines("conv_transpose2d", 2, True))
def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """Transposed convolution over 2 spatial dims (prims.convolution, transposed)."""
    return _conv_transpose("conv_transpose2d", 2, input, weight, bias, stride, padding,
                           output_padding, groups, dilation)


@ref(module=MODULE, declines=_declines("conv_transpose3d", 3, True))
def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """Transposed convolution over 3 spatial dims (prims.convolution, transposed)."""
    return _conv_transpose("conv_transpose3d", 3, input, weight, bias, stride, padding,
                           output_padding, groups, dilation)


# --- pooling -------------------------------------------------------------------------------------
def _window(fname, nd, input, kernel_size, stride, padding, dilation=1):
    _tensor(fname, "input", 1, input)
    if input.dtype.is_complex or input.device.type != "cpu":
        _declined(fname, "of complex or non-CPU tensors")
    kernel = _per_dim(fname, "kernel_size", kernel_size, nd)
    no_stride = stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0)
    stride = kernel if no_stride else _per_dim(fname, "stride", stride, nd)
    return (kernel, stride, _per_dim(fname, "padding", padding, nd),
            _per_dim(fname, "dilation", dilation, nd))


def _max_pool_declines(nd):
    def declines(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                 return_indices=False) -> bool:
        return bool(return_indices) or _off_cpu_or_complex(input) or (
            nd == 3 and _permuted_unbatched(input))
    return declines


def _permuted_unbatched(input) -> bool:
    """An unbatched 3-d max_pool input that is not contiguous: eager's kernel lays some of
    these out as channels_last_3d by a rule the meta does not follow (kernel_size 1 mostly)."""
    if not is_tensor(input) or input.ndim != 4:
        return False
    return not input.is_contiguous()


def _max_pool(fname, nd, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    if return_indices:
        _declined(fname, "with return_indices=True")
    if nd == 3 and _permuted_unbatched(input):
        _declined(fname, "of a non-contiguous unbatched input")
    kernel, stride, padding, dilation = _window(fname, nd, input, kernel_size, stride, padding,
                                                dilation)
    return L.max_pool(input, kernel, stride, padding, dilation, bool(ceil_mode))


@ref(module=MODULE, declines=_max_pool_declines(1))
def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """The max over windows of 1 spatial dim (prims.max_pool); values only."""
    return _max_pool("max_pool1d", 1, input, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices)


@ref(module=MODULE, declines=_max_pool_declines(2))
def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """The max over windows of 2 spatial dims (prims.max_pool); values only."""
    return _max_pool("max_pool2d", 2, input, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices)


@ref(module=MODULE, declines=_max_pool_declines(3))
def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """The max over windows of 3 spatial dims (prims.max_pool); values only."""
    return _max_pool("max_pool3d", 3, input, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices)


def _input_declines(input, *args, **kwargs) -> bool:
    return _off_cpu_or_complex(input)


def _avg_pool(fname, nd, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
              divisor_override=None):
    kernel, stride, padding, _ = _window(fname, nd, input, kernel_size, stride, padding)
    if divisor_override is not None:
        divisor_override = operator.index(divisor_override)
    return L.avg_pool(input, kernel, stride, padding, bool(ceil_mode), bool(count_include_pad),
                      divisor_override)


@ref(module=MODULE, declines=_input_declines)
def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """The mean over windows of 1 spatial dim (prims.avg_pool)."""
    return _avg_pool("avg_pool1d", 1, input, kernel_size, stride, padding, ceil_mode,
                     count_include_pad)


@ref(module=MODULE, declines=_input_declines)
def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """The mean over windows of 2 spatial dims (prims.avg_pool)."""
    return _avg_pool("avg_pool2d", 2, input, kernel_size, stride, padding, ceil_mode,
                     count_include_pad, divisor_override)


@ref(module=MODULE, declines=_input_declines)
def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """The mean over windows of 3 spatial dims (prims.avg_pool)."""
    return _avg_pool("avg_pool3d", 3, input, kernel_size, stride, padding, ceil_mode,
                     count_include_pad, divisor_override)


def _output_size(fname, nd, input, output_size) -> tuple:
    """F's _list_with_default: None takes the input's size (2-d and 3-d only)."""
    _tensor(fname, "input", 1, input)
    if input.dtype.is_complex or input.device.type != "cpu":
        _declined(fname, "of complex or non-CPU tensors")
    if nd > 1 and isinstance(output_size, (tuple, list)):
        if input.ndim <= len(output_size):
            raise ValueError(f"Input dimension should be at least {len(output_size) + 1}")
        defaults = tuple(input.shape)[-len(output_size):]
        output_size = [d if v is None else v for v, d in zip(output_size, defaults)]
    message = (f"{fname}: output_size must be {nd}" if nd > 1 else
               f"{fname}() argument 'output_size' should contain one int (got "
               f"{len(output_size) if isinstance(output_size, (tuple, list)) else 1})")
    return _per_dim(fname, "output_size", output_size, nd, message)


def _adaptive_max_declines(input, output_size, return_indices=False) -> bool:
    return bool(return_indices) or _off_cpu_or_complex(input)


def _adaptive_max(fname, nd, input, output_size, return_indices):
    if return_indices:
        _declined(fname, "with return_indices=True")
    return L.adaptive_max_pool(input, _output_size(fname, nd, input, output_size))


@ref(module=MODULE, declines=_input_declines)
def adaptive_avg_pool1d(input, output_size):
    """The mean over adaptive windows of 1 spatial dim (prims.adaptive_avg_pool)."""
    return L.adaptive_avg_pool(input, _output_size("adaptive_avg_pool1d", 1, input, output_size))


@ref(module=MODULE, declines=_input_declines)
def adaptive_avg_pool2d(input, output_size):
    """The mean over adaptive windows of 2 spatial dims (prims.adaptive_avg_pool)."""
    return L.adaptive_avg_pool(input, _output_size("adaptive_avg_pool2d", 2, input, output_size))


@ref(module=MODULE, declines=_input_declines)
def adaptive_avg_pool3d(input, output_size):
    """The mean over adaptive windows of 3 spatial dims (prims.adaptive_avg_pool)."""
    return L.adaptive_avg_pool(input, _output_size("adaptive_avg_pool3d", 3, input, output_size))


@ref(module=MODULE, declines=_adaptive_max_declines)
def adaptive_max_pool1d(input, output_size, return_indices=False):
    """The max over adaptive windows of 1 spatial dim (prims.adaptive_max_pool); values only."""
    return _adaptive_max("adaptive_max_pool1d", 1, input, output_size, return_indices)


@ref(module=MODULE, declines=_adaptive_max_declines)
def adaptive_max_pool2d(input, output_size, return_indices=False):
    """The max over adaptive windows of 2 spatial dims (prims.adaptive_max_pool); values only."""
    return _adaptive_max("adaptive_max_pool2d", 2, input, output_size, return_indices)


@ref(module=MODULE, declines=_adaptive_max_declines)
def adaptive_max_pool3d(input, output_size, return_indices=False):
    """The max over adaptive windows of 3 spatial dims (prims.adaptive_max_pool); values only."""
    return _adaptive_max("adaptive_max_pool3d", 3, input, output_size, return_indices)


__all__ = exports(globals(), MODULE)
