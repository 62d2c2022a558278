"""Library prims: convolution, pooling and grouped_mm, each run by torch's own CPU kernel.

Like a BLAS call, a library prim is one opaque kernel: no Numba row, never fused; the
elementwise epilogue after it (bias + relu) fuses on its own. What makes it a prim rather
than an opaque call is its meta function, which gives, without running anything, the exact
output shape, dtype, device and strides eager's CPU kernel produces, and eager's errors.

How the meta is computed: formulas, not meta tensors. Output sizes come from eager's
formulas (``conv_output_size``, ``pooling_output_shape``, the adaptive sizes), arguments are
checked as eager checks them (RuntimeError; a dtype the CPU kernel lacks: NotImplementedError,
checked first, before eager's shape checks: a subclass of theirs), and strides follow eager's
memory-format rule. Running the op on ``device="meta"`` tensors was rejected: torch's meta
convolution lays out the output of a channels_last input (or weight) contiguous, where the CPU
kernels keep channels_last. tests/conformance/test_convolution.py compares the meta's strides
with the CPU's on every case, and on random sizes, layouts, dtypes and thread counts.

Eager's memory-format rule, as measured on CPU (torch 2.13) and written below:

- ``suggest_memory_format``: channels_last when the strides *look like* channels_last by
  c10's ``is_channels_last_strides_2d/3d`` (size-1 dims make this ambiguous; the algorithm,
  not ``is_contiguous``, decides). channels_last strides are c10's (a size-0 dim counts 0).
- convolution, of operands laid out contiguous or channels_last with torch's exact strides
  (other layouts, PrimContractError, are left to torch: eager's slow paths copy and split
  groups, and read the strides of size-1 dims): 2-d: channels_last when input or weight
  suggests it, on every backend (mkldnn, slow, dilated, transposed). 1-d runs as 2-d on
  ``unsqueeze(2)`` of the input made contiguous and of the weight. 3-d: channels_last_3d only
  on the mkldnn backend (chosen by eager's ``use_mkldnn`` heuristic, ``_uses_mkldnn``, which
  reads the thread count and the CPU's bf16/fp16 support), else contiguous. An empty input:
  contiguous (eager's Empty backend views input * weight[0] as the output; of the input's
  own shape it keeps the input's layout, which is left to torch, as is an input without
  channels, whose output has none).
- pooling: the output takes the input's suggested format, but for 3-d avg and adaptive
  pools (contiguous); 1-d pooling runs as 2-d on ``unsqueeze(-2)``, max_pool1d only under
  autograd (without it its own kernel writes a contiguous output).
- adaptive_avg_pool to all-ones sizes is eager's ``mean`` over the spatial dims (its dtype
  error, no shape checks), contiguous unless the input suggests channels_last.

Prims are strict: every size argument is a tuple of one int per spatial dim (the refs expand
ints, parse 'same'/'valid' and None); CPU tensors, no complex ones.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from primtrace import dtypes
from primtrace.ir.proxy import TensorSpec
from primtrace.ir.strides import contiguous_strides, matches_dense
from primtrace.ir.symbol import Symbol, SymbolKind
from primtrace.prims.differentiation import P, by_torch_autograd, takes_wanted
from primtrace.prims.meta import PrimContractError, is_tensor

__all__ = ["convolution", "max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool",
           "grouped_mm", "svd", "svdvals"]

_FLOATS = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
_INTS = frozenset({torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64})


# --- layouts -----------------------------------------------------------------------------------
def suggests_channels_last(shape, strides) -> bool:
    """c10's is_channels_last_strides_2d/3d: do these strides look like channels_last (4-d)
    or channels_last_3d (5-d)? What ``suggest_memory_format`` answers."""
    order = {4: (1, 3, 2, 0), 5: (1, 4, 3, 2, 0)}.get(len(shape))
    if order is None or strides[1] == 0:
        return False
    least = 0
    for d in order:
        if shape[d] == 0 or strides[d] < least or (d == 0 and least == strides[1]):
            return False
        least = strides[d] * (shape[d] if shape[d] > 1 else 1)
    return True


def _format_strides(shape, channels_last: bool) -> tuple:
    """Dense strides of `shape`: contiguous, or c10's channels_last strides (N, spatial..., C
    in memory; unlike contiguous strides, a size-0 dim is not counted as 1)."""
    if not channels_last:
        return contiguous_strides(shape)
    strides, acc = [0] * len(shape), 1
    for d in (1, *range(len(shape) - 1, 1, -1), 0):
        strides[d] = acc
        acc *= shape[d]
    return tuple(strides)


def _unsqueezed(shape, strides, dim):
    """(shape, strides) of ``unsqueeze(dim)``, with ATen's stride for the new dim."""
    shape, strides = list(shape), list(strides)
    stride = 1 if dim >= len(shape) else shape[dim] * strides[dim]
    return (tuple(shape[:dim] + [1] + shape[dim:]), tuple(strides[:dim] + [stride] + strides[dim:]))


def plain_layout(t) -> bool:
    """Dense, contiguous or channels_last (for 3-d tensors: channels innermost) with exactly
    the strides torch gives such a tensor: the layouts whose convolution output layout the
    meta knows. (Eager's rule reads strides of size-1 dims, and splits groups on its slow
    paths; permuted and sliced operands are left to torch.)"""
    shape, strides = tuple(t.shape), tuple(t.stride())
    return strides == contiguous_strides(shape) or (
        len(shape) >= 3 and strides == _format_strides(shape, True))


def _drop(seq, dim):
    return tuple(v for i, v in enumerate(seq) if i != dim)


# --- checks --------------------------------------------------------------------------------------
def _check_kernel_dtype(kernel, dtype, allowed):
    if dtype not in allowed:
        raise NotImplementedError(f'"{kernel}" not implemented for \'{dtypes.scalar_type_name(dtype)}\'')


def _check_sizes(name, nd, **lists):
    for pname, value in lists.items():
        if not (isinstance(value, tuple) and len(value) == nd and all(type(v) is int for v in value)):
            raise PrimContractError(f"prims.{name}: {pname} must be a tuple of {nd} ints, got {value!r}")


def _fmt(values) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


# --- convolution -------------------------------------------------------------------------------
@functools.cache
def _mkldnn_half_support() -> tuple[bool, bool]:
    mkldnn = torch.ops.mkldnn
    return bool(mkldnn._is_mkldnn_bf16_supported()), bool(mkldnn._is_mkldnn_fp16_supported())


def _uses_mkldnn(shape, weight_shape, dtype, stride, dilation, transposed, output_padding, groups):
    """Eager's ConvParams::use_mkldnn on CPU (the backend decides 3-d output layouts)."""
    if not (torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled):
        return False
    if transposed and any(op >= s for op, s in zip(output_padding, stride)):
        return False
    bf16, fp16 = _mkldnn_half_support()
    if dtype in (torch.bfloat16, torch.float16):
        return bf16 if dtype is torch.bfloat16 else fp16
    if dtype is not torch.float32:
        return False
    one_by_one = weight_shape[-1] == 1 and weight_shape[-2] == 1
    return ((any(s != 1 for s in stride) or any(d != 1 for d in dilation) or shape[0] >= 16
             or not one_by_one or torch.get_num_threads() > 1)
            and (groups > 1 or (weight_shape[-1] > 3 and weight_shape[-2] > 3) or shape[0] > 1
                 or shape[0] * shape[1] * shape[2] * shape[3] > 20480))


def _conv_checks(shape, wshape, bias, stride, padding, dilation, transposed, output_padding, groups):
    """at::_convolution's check_shape_forward, in its order (all RuntimeError)."""
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    if any(p < 0 for p in padding):
        raise RuntimeError("negative padding is not supported")
    if any(p < 0 for p in output_padding):
        raise RuntimeError("negative output_padding is not supported")
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(d <= 0 for d in dilation):
        raise RuntimeError("non-positive dilation is not supported")
    if len(wshape) != len(shape):
        raise RuntimeError(f"Expected {len(wshape)}-dimensional input for {len(wshape)}-dimensional "
                           f"weight {_fmt(wshape)}, but got {len(shape)}-dimensional input of size "
                           f"{_fmt(shape)} instead")
    if wshape[0] < groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be at least {groups} at "
                           f"dimension 0, but got weight of size {_fmt(wshape)} instead")
    if wshape[0] % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at "
                           f"dimension 0, but got weight of size [{_fmt(wshape)}] instead")
    out_channels = wshape[1] * groups if transposed else wshape[0]
    in_channels = wshape[0] if transposed else wshape[1] * groups
    if shape[1] != in_channels:
        what = "transposed=True" if transposed else f"groups={groups}"
        raise RuntimeError(f"Given {what}, weight of size {_fmt(wshape)}, expected input"
                           f"{_fmt(shape)} to have {in_channels} channels, but got {shape[1]} "
                           f"channels instead")
    if bias is not None and (bias.ndim != 1 or bias.shape[0] != out_channels):
        raise RuntimeError(f"Given weight of size {_fmt(wshape)}, expected bias to be 1-dimensional "
                           f"with {out_channels} elements, but got bias of size "
                           f"{_fmt(bias.shape)} instead")
    if not transposed:
        padded = [n + 2 * p for n, p in zip(shape[2:], padding)]
        kernel = [d * (k - 1) + 1 for k, d in zip(wshape[2:], dilation)]
        if any(n < k for n, k in zip(padded, kernel)):
            raise RuntimeError(
                f"Calculated padded input size per channel: ({' x '.join(map(str, padded))}). "
                f"Kernel size: ({' x '.join(map(str, kernel))}). Kernel size can't be greater than "
                f"actual input size")


def _conv_out_shape(shape, wshape, stride, padding, dilation, transposed, output_padding, groups):
    spatial = []
    for i, n in enumerate(shape[2:]):
        k = dilation[i] * (wshape[2 + i] - 1) + 1
        if transposed:
            spatial.append((n - 1) * stride[i] - 2 * padding[i] + k + output_padding[i])
        else:
            spatial.append((n + 2 * padding[i] - k) // stride[i] + 1)
    return (shape[0], wshape[1] * groups if transposed else wshape[0], *spatial)


def _conv_meta(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    if not (is_tensor(input) and is_tensor(weight) and (bias is None or is_tensor(bias))):
        raise PrimContractError("prims.convolution: expected tensors (bias may be None)")
    nd = weight.ndim - 2
    if nd not in (1, 2, 3) or input.ndim not in (nd + 1, nd + 2):
        raise PrimContractError(f"prims.convolution: a {weight.ndim}-d weight takes a "
                                f"{nd + 1}-d or {nd + 2}-d input, got {input.ndim}-d")
    _check_sizes("convolution", nd, stride=stride, padding=padding, dilation=dilation,
                 output_padding=output_padding)
    if type(groups) is not int or type(transposed) is not bool:
        raise PrimContractError("prims.convolution: groups must be an int, transposed a bool")
    shape, strides = tuple(input.shape), tuple(input.stride())
    batched = input.ndim == nd + 2
    if not batched:  # conv<n>d's batchify: unsqueeze(0), then squeeze(0)
        shape, strides = _unsqueezed(shape, strides, 0)
    if shape[1] == 0:
        raise PrimContractError("prims.convolution: an input without channels is left to torch "
                                "(eager's empty path gives no channels out)")
    empty = input.numel() == 0
    _conv_operands(input, weight, bias, nd, transposed, empty)
    wshape, wstrides = tuple(weight.shape), tuple(weight.stride())
    _conv_checks(shape, wshape, bias, stride, padding, dilation, transposed, output_padding, groups)
    if transposed and not empty:
        for i in range(nd):
            if output_padding[i] >= stride[i] and output_padding[i] >= dilation[i]:
                raise RuntimeError(f"output padding must be smaller than either stride or dilation, "
                                   f"but got output_padding={_fmt(output_padding)}, "
                                   f"stride={_fmt(stride)}, dilation={_fmt(dilation)}")
    out = _conv_out_shape(shape, wshape, stride, padding, dilation, transposed, output_padding, groups)
    if not (plain_layout(input) and plain_layout(weight)) or (
            nd == 1 and groups != 1 and tuple(input.stride()) != contiguous_strides(input.shape)):
        raise PrimContractError("prims.convolution: input and weight must be laid out contiguous "
                                "or channels_last (a grouped 1-d input: contiguous); other "
                                "layouts are left to torch")
    if transposed and not empty and any(n == 0 for n in out[2:]):
        raise PrimContractError("prims.convolution: a transposed convolution to an empty output "
                                "is left to torch (mkldnn returns one, the slow path raises)")
    if any(n <= 0 for n in out[2:]) and not empty:
        raise RuntimeError(f"Given input size per channel: {_fmt(shape[2:])}. Calculated output "
                           f"size per channel: {_fmt(out[2:])}. Output size is too small")
    if empty and out == shape:
        raise PrimContractError("prims.convolution: an empty input and output of one shape take "
                                "eager's elementwise layout; left to torch")
    uses_mkldnn = nd == 3 and _uses_mkldnn(shape, wshape, input.dtype, stride, dilation,
                                           transposed, output_padding, groups)
    out_strides = _conv_strides(out, shape, strides, wshape, wstrides, empty, uses_mkldnn)
    if not batched:
        out, out_strides = out[1:], out_strides[1:]
    return TensorSpec(tuple(out), input.dtype, input.device, tuple(out_strides))


def _conv_operands(input, weight, bias, nd, transposed, empty):
    """Eager's dtype refusals (the kernel's dtypes, one dtype for all operands), and what the
    meta leaves to torch: complex and non-CPU tensors, an empty input of mixed dtypes (eager's
    empty path promotes them)."""
    if any(t is not None and t.device.type != "cpu" for t in (input, weight, bias)):
        raise PrimContractError("prims.convolution: CPU tensors only (the layout rule is the CPU's)")
    if empty:
        if weight.dtype != input.dtype or (bias is not None and bias.dtype != input.dtype):
            raise PrimContractError("prims.convolution: an empty input promotes mixed dtypes; "
                                    "left to torch")
        return
    if input.dtype.is_complex:
        raise PrimContractError("prims.convolution: complex inputs are left to torch")
    kinds = _FLOATS | ({torch.int64} if transposed else _INTS)
    _check_kernel_dtype(f"slow_conv{'_transpose' if transposed else ''}{max(nd, 2)}d_cpu",
                        input.dtype, kinds)
    for pname, t in (("weight", weight), ("bias", bias)):
        if t is not None and t.dtype != input.dtype:
            raise RuntimeError(f"Input type ({dtypes.c_type_name(input.dtype)}) and {pname} "
                               f"type ({dtypes.c_type_name(t.dtype)}) should be the same")


def _conv_strides(out, shape, strides, wshape, wstrides, empty, uses_mkldnn):
    """Eager's output layout (module docstring), from the batched input's and weight's."""
    if empty:  # eager's Empty backend: input * weight[0] viewed as the output's shape
        return contiguous_strides(out)
    if len(out) == 3:  # runs as 2-d on unsqueeze(2) of the input made contiguous, and the weight
        if not matches_dense(shape, strides, contiguous_strides(shape)):
            strides = contiguous_strides(shape)
        channels_last = (suggests_channels_last(*_unsqueezed(shape, strides, 2))
                         or suggests_channels_last(*_unsqueezed(wshape, wstrides, 2)))
        return _drop(_format_strides((*out[:2], 1, out[2]), channels_last), 2)
    if len(out) == 5 and not uses_mkldnn:  # slow_conv3d writes contiguous outputs
        return contiguous_strides(out)
    return _format_strides(out, suggests_channels_last(shape, strides)
                           or suggests_channels_last(wshape, wstrides))


def _conv_impl(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    batched = input.ndim == weight.ndim
    x = input if batched else input.unsqueeze(0)
    y = torch.convolution(x, weight, bias, list(stride), list(padding), list(dilation), transposed,
                          list(output_padding), groups)
    return y if batched else y.squeeze(0)


# --- pooling ------------------------------------------------------------------------------------
#: (op, spatial dims) -> the dtypes its CPU kernel takes (also checked on empty inputs, but for
#: the 2-d adaptive average's empty outputs)
_POOL_DTYPES = {
    ("max_pool", 1): _FLOATS, ("max_pool", 2): _FLOATS | _INTS, ("max_pool", 3): _FLOATS | _INTS,
    ("avg_pool", 1): _FLOATS | {torch.int64}, ("avg_pool", 2): _FLOATS | {torch.int64},
    ("avg_pool", 3): frozenset({torch.float32, torch.float64, torch.int64}),
    ("adaptive_avg_pool", 1): _FLOATS, ("adaptive_avg_pool", 2): _FLOATS,
    ("adaptive_avg_pool", 3): _FLOATS,
    ("adaptive_max_pool", 1): _FLOATS, ("adaptive_max_pool", 2): _FLOATS,
    ("adaptive_max_pool", 3): _FLOATS,
}
#: (op, dims of the kernel that runs) whose output is contiguous whatever the input's layout
#: (the adaptive 3-d kernels are too: their meta says so in _adaptive_meta)
_POOL_CONTIGUOUS = frozenset({("avg_pool", 3)})
#: eager's names of the kernels, for its dtype errors
_KERNEL_NAMES = {("max_pool", 1): "max_pool1d_impl", ("avg_pool", 3): "avg_pool3d_out_frame",
                 ("adaptive_avg_pool", 1): "adaptive_avg_pool2d",
                 ("adaptive_avg_pool", 3): "adaptive_avg_pool3d_cpu",
                 ("adaptive_max_pool", 1): "adaptive_max_pool2d"}


def _pool_input(name, input):
    if not is_tensor(input):
        raise PrimContractError(f"prims.{name}: expected a tensor")
    if input.dtype.is_complex or input.device.type != "cpu":
        raise PrimContractError(f"prims.{name}: complex and non-CPU inputs are left to torch")


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _check_dtype(name, input, nd):
    _check_kernel_dtype(_KERNEL_NAMES.get((name, nd), f"{name}{nd}d"), input.dtype,
                        _POOL_DTYPES[name, nd])


def _pooling_output_size(n, k, pad, stride, dilation, ceil_mode) -> int:
    """ATen's pooling_output_shape, with its checks."""
    if stride == 0:
        raise RuntimeError("stride should not be zero")
    if pad < 0:
        raise RuntimeError(f"pad must be non-negative, but got pad: {pad}")
    if pad > ((k - 1) * dilation + 1) // 2:
        raise RuntimeError(f"pad should be at most half of effective kernel size, but got pad={pad}, "
                           f"kernel_size={k} and dilation={dilation}")
    size = (n + 2 * pad - dilation * (k - 1) - 1 + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (size - 1) * stride >= n + pad:
        size -= 1
    return size


def _pool_shape_check(name, shape, suggests, nd, kernel, stride, dilation, out):
    """ATen's pool2d_shape_check / pool3d_shape_check."""
    if any(k <= 0 for k in kernel):
        raise RuntimeError(f"kernel size should be greater than zero, but got {_fmt(kernel)}")
    if any(s <= 0 for s in stride):
        raise RuntimeError(f"stride should be greater than zero, but got {_fmt(stride)}")
    if any(d <= 0 for d in dilation):
        raise RuntimeError(f"dilation should be greater than zero, but got {_fmt(dilation)}")
    batched = len(shape) == nd + 2
    nonbatch = shape[1:] if batched else shape
    if suggests and not batched or any(n == 0 for n in nonbatch):
        raise RuntimeError(f"Expected {nd + 1}D or {nd + 2}D (batch mode) tensor with optional 0 dim "
                           f"batch size for input, but got:{_fmt(shape)}")
    if any(n < 1 for n in out):
        raise RuntimeError(f"Given input size: ({'x'.join(map(str, nonbatch))}). Calculated output "
                           f"size: ({'x'.join(map(str, (nonbatch[0], *out)))}). Output size is too small")


def _window_meta(name, input, kernel_size, stride, padding, dilation, ceil_mode, *, as_2d, grad_path):
    """Output spec of max_pool / avg_pool (avg_pool: dilation 1). `as_2d`: the 1-d op runs as
    2-d on unsqueeze(-2); `grad_path`: max_pool1d, which does that only under autograd (else its
    own kernel writes a contiguous output)."""
    nd = len(kernel_size)
    if nd not in (1, 2, 3):
        raise PrimContractError(f"prims.{name}: 1, 2 or 3 spatial dims, got {nd}")
    _pool_input(name, input)
    _check_sizes(name, nd, kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation)
    if input.ndim < nd + 1 and name == "avg_pool" and nd == 2:  # eager reads size(-3) first
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-input.ndim}, {input.ndim - 1}], but got -3)")
    if input.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"{name}{nd}d: expected {nd + 1}D or {nd + 2}D (batch mode) tensor for "
                           f"input, but got {_fmt(input.shape)}")
    _check_dtype(name, input, nd)
    shape, strides = tuple(input.shape), tuple(input.stride())
    if nd == 1 and not grad_path and not as_2d:
        if padding[0] > kernel_size[0] // 2:
            raise RuntimeError("max_pool1d() padding should be at most half of kernel size")
        if kernel_size[0] <= 0 or stride[0] <= 0 or dilation[0] <= 0:
            raise RuntimeError("max_pool1d() kernel_size, stride and dilation must be greater than zero")
        out_n = _pooling_output_size(shape[-1], kernel_size[0], padding[0], stride[0], dilation[0],
                                     ceil_mode)
        if out_n <= 0:
            raise RuntimeError(f"max_pool1d() Invalid computed output size: {out_n}")
        if input.ndim == 3 and (shape[1] == 0 or shape[2] == 0) or input.ndim == 2 and shape[-1] == 0:
            raise RuntimeError(f"max_pool1d: Expected 2D or 3D (batch mode) tensor with optional 0 "
                               f"dim batch size for input, but got: {_fmt(shape)}")
        out = (*shape[:-1], out_n)
        return TensorSpec(out, input.dtype, input.device, contiguous_strides(out))
    dim = input.ndim - 1 if nd == 1 else None
    if nd == 1:  # unsqueeze(-2), as 2-d with a window of 1 over the new dim
        shape, strides = _unsqueezed(shape, strides, input.ndim - 1)
        kernel_size, stride = (1, *kernel_size), (1, *stride)
        padding, dilation = (0, *padding), (1, *dilation)
        nd = 2
    out_spatial = tuple(_pooling_output_size(n, k, p, s, d, ceil_mode) for n, k, p, s, d in
                        zip(shape[-nd:], kernel_size, padding, stride, dilation))
    suggests = suggests_channels_last(shape, strides)
    _pool_shape_check(name, shape, suggests, nd, kernel_size, stride, dilation, out_spatial)
    if name == "avg_pool" and nd == 3 and any(n < k for n, k in zip(shape[-3:], kernel_size)):
        raise RuntimeError(f"input image (T: {shape[-3]} H: {shape[-2]} W: {shape[-1]}) smaller "
                           f"than kernel size (kT: {kernel_size[0]} kH: {kernel_size[1]} "
                           f"kW: {kernel_size[2]})")
    out = (*shape[:-nd], *out_spatial)
    out_strides = _format_strides(out, suggests and (name, nd) not in _POOL_CONTIGUOUS)
    if dim is not None:
        out, out_strides = _drop(out, dim), _drop(out_strides, dim)
    return TensorSpec(out, input.dtype, input.device, out_strides)


def _max_pool_meta(input, kernel_size, stride, padding, dilation, ceil_mode):
    grad_path = bool(getattr(input, "requires_grad", False)) and torch.is_grad_enabled()
    return _window_meta("max_pool", input, kernel_size, stride, padding, dilation, ceil_mode,
                        as_2d=False, grad_path=grad_path)


_MAX_POOLS = {1: torch.max_pool1d, 2: torch.max_pool2d, 3: torch.max_pool3d}


def _max_pool_impl(input, kernel_size, stride, padding, dilation, ceil_mode):
    return _MAX_POOLS[len(kernel_size)](input, list(kernel_size), list(stride), list(padding),
                                        list(dilation), ceil_mode)


def _avg_pool_meta(input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                   divisor_override):
    nd = len(kernel_size)
    if divisor_override is not None:
        if nd == 1 or type(divisor_override) is not int:
            raise PrimContractError("prims.avg_pool: divisor_override is an int, for 2-d and 3-d")
        if divisor_override == 0:
            raise RuntimeError("divisor must be not zero")
    if type(count_include_pad) is not bool or type(ceil_mode) is not bool:
        raise PrimContractError("prims.avg_pool: ceil_mode and count_include_pad are bools")
    return _window_meta("avg_pool", input, kernel_size, stride, padding, (1,) * nd, ceil_mode,
                        as_2d=True, grad_path=False)


def _avg_pool_impl(input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                   divisor_override):
    k, s, p = list(kernel_size), list(stride), list(padding)
    if len(k) == 1:
        return torch.avg_pool1d(input, k, s, p, ceil_mode, count_include_pad)
    pool = F.avg_pool2d if len(k) == 2 else F.avg_pool3d
    return pool(input, k, s, p, ceil_mode, count_include_pad, divisor_override)


def _adaptive_meta(name, input, output_size):
    nd = len(output_size) if isinstance(output_size, tuple) else 0
    if nd not in (1, 2, 3):
        raise PrimContractError(f"prims.{name}: output_size must be a tuple of 1, 2 or 3 ints")
    _pool_input(name, input)
    _check_sizes(name, nd, output_size=output_size)
    shape, strides = tuple(input.shape), tuple(input.stride())
    if nd == 1:  # unsqueeze(-2), pooled as 2-d to (1, size)
        if input.ndim not in (2, 3):
            raise RuntimeError(f"{name}1d(): Expected 2D or 3D tensor, but got {_fmt(shape)}")
        shape, strides = _unsqueezed(shape, strides, input.ndim - 1)
        output_size = (1, *output_size)
    kernel_nd = len(output_size)
    if any(o < 0 for o in output_size):
        raise RuntimeError(f"{name}{kernel_nd}d: elements of output_size must be greater than or "
                           f"equal to 0 but received {{{', '.join(map(str, output_size))}}}")
    if name == "adaptive_avg_pool" and all(o == 1 for o in output_size):
        # eager's mean over the spatial dims: mean's dtype error, no shape checks
        if len(shape) < kernel_nd:
            raise IndexError(f"Dimension out of range (expected to be in range of "
                             f"[{-len(shape)}, {len(shape) - 1}], but got {-kernel_nd})")
        if not input.dtype.is_floating_point:
            raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either "
                               f"a floating point or complex dtype. Got: "
                               f"{dtypes.scalar_type_name(input.dtype)}")
        out = (*shape[:-kernel_nd], *output_size)
        channels_last = len(shape) == kernel_nd + 2 and suggests_channels_last(shape, strides)
    else:
        if len(shape) not in (kernel_nd + 1, kernel_nd + 2):
            raise RuntimeError(f"{name}{kernel_nd}d(): Expected {kernel_nd + 1}D or "
                               f"{kernel_nd + 2}D tensor, but got {_fmt(shape)}")
        out = (*shape[:-kernel_nd], *output_size)
        avg_2d = name == "adaptive_avg_pool" and kernel_nd == 2
        channels_last = kernel_nd == 2 and suggests_channels_last(shape, strides)
        if not (avg_2d and _numel(out) == 0):  # eager's 2-d avg kernel skips an empty output
            _check_kernel_dtype(_KERNEL_NAMES.get((name, nd), f"{name}{nd}d"), input.dtype,
                                _POOL_DTYPES[name, nd])
        # the 2-d avg kernel checks the spatial dims, the others every dim but the first
        for i in range(len(shape) - kernel_nd, len(shape)) if avg_2d else range(1, len(shape)):
            if shape[i] == 0:
                raise RuntimeError(f"{name}{kernel_nd}d(): Expected input to have non-zero size for "
                                   f"non-batch dimensions, but input has sizes {_fmt(shape)} with "
                                   f"dimension {i} being empty")
    out_strides = _format_strides(out, channels_last)
    if nd == 1:
        dim = input.ndim - 1
        out, out_strides = _drop(out, dim), _drop(out_strides, dim)
    return TensorSpec(tuple(out), input.dtype, input.device, tuple(out_strides))


# the ATen ops F calls (F's own wrappers check the input's dims in Python, as the refs do)
_ADAPTIVE_AVG = {1: torch.adaptive_avg_pool1d, 2: torch._C._nn.adaptive_avg_pool2d,
                 3: torch._C._nn.adaptive_avg_pool3d}
_ADAPTIVE_MAX = {1: lambda x, o: torch.adaptive_max_pool1d(x, o)[0],
                 2: lambda x, o: torch._C._nn.adaptive_max_pool2d(x, o)[0],
                 3: lambda x, o: torch._C._nn.adaptive_max_pool3d(x, o)[0]}


# --- grouped matrix products ---------------------------------------------------------------------
def grouped_mm_shape(a_shape, b_shape, offs_shape):
    """The result shape of torch._grouped_mm by the ranks of its operands (offs, a 1-d tensor
    of G offsets, split the dim the groups share), or None for a combination it does not take:
    (M, K) x (G, K, N) with offs over M -> (M, N); (G, M, K) x (K, N) with offs over N ->
    (M, N); (M, K) x (K, N) with offs over K -> (G, M, N); (G, M, K) x (G, K, N) without
    offs -> (G, M, N)."""
    ranks = (len(a_shape), len(b_shape))
    if offs_shape is None:
        return (a_shape[0], a_shape[1], b_shape[2]) if ranks == (3, 3) else None
    if len(offs_shape) != 1:
        return None
    if ranks == (2, 3):
        return (a_shape[0], b_shape[2])
    if ranks == (3, 2):
        return (a_shape[1], b_shape[1])
    if ranks == (2, 2):
        return (offs_shape[0], a_shape[0], b_shape[1])
    return None


def _grouped_mm_meta(a, b, offs=None, bias=None, out_dtype=None):
    """Shape and dtype only, no checks of eager's: eager's CPU kernel (torch's own, the
    impl) raises its errors when the trace runs (its meta function refuses float32, which
    the kernel takes: why this is a prim). The result is contiguous, as the kernel makes it
    (measured on every operand layout it takes)."""
    if not (is_tensor(a) and is_tensor(b)) or (offs is not None and not is_tensor(offs)):
        raise PrimContractError("prims.grouped_mm: tensors a and b, offs a tensor or None")
    if bias is not None or (out_dtype is not None and not isinstance(out_dtype, torch.dtype)):
        raise PrimContractError("prims.grouped_mm: no bias; out_dtype a dtype or None")
    shape = grouped_mm_shape(tuple(a.shape), tuple(b.shape),
                             None if offs is None else tuple(offs.shape))
    if shape is None:
        raise PrimContractError("prims.grouped_mm: operands of ranks 2 or 3 with a 1-d offs "
                                "where the ranks need one")
    return TensorSpec(shape, out_dtype or a.dtype, a.device, contiguous_strides(shape))


grouped_mm = Symbol(
    "grouped_mm", kind=SymbolKind.PRIM, meta=_grouped_mm_meta,
    impl=lambda a, b, offs=None, bias=None, out_dtype=None: torch._grouped_mm(
        a, b, offs=offs, bias=bias, out_dtype=out_dtype),
    tags=frozenset({"library"}), module="prims",
    doc="torch._grouped_mm (F.grouped_mm): matrix products of groups of rows, columns or "
        "inner dims split at offs, or of batches; torch's kernel.")


# --- singular value decomposition (LAPACK) -------------------------------------------------------
def _svd_input(a):
    """(batch, m, n) of a matrix batch, after eager's checks (in its order)."""
    if not is_tensor(a):
        raise PrimContractError("prims.svd: expected a tensor")
    if a.device.type != "cpu":
        raise PrimContractError("prims.svd: CPU tensors only (eager's CUDA strides differ)")
    if a.ndim < 2:
        raise RuntimeError("linalg.svd: The input tensor A must have at least 2 dimensions.")
    if not (a.dtype.is_floating_point or a.dtype.is_complex):
        raise RuntimeError(f"linalg.svd: Expected a floating point or complex tensor as input. "
                           f"Got {dtypes.scalar_type_name(a.dtype)}")
    if a.dtype not in (torch.float32, torch.float64, torch.complex64, torch.complex128):
        raise NotImplementedError(f"\"linalg_svd_cpu\" not implemented for "
                                  f"'{dtypes.scalar_type_name(a.dtype)}'")
    return tuple(a.shape[:-2]), a.shape[-2], a.shape[-1]


def _column_major(shape) -> tuple:
    """LAPACK's layout of a batch of matrices: each column-major, the batch row-major (a size-0
    dim counts 1), as eager allocates U and Vh."""
    strides = [1, max(shape[-2], 1)]
    step = strides[1] * max(shape[-1], 1)
    for size in reversed(shape[:-2]):
        strides.insert(0, step)
        step *= max(size, 1)
    return tuple(strides)


def _svd_meta(a, full_matrices):
    batch, m, n = _svd_input(a)
    k = min(m, n)
    u_shape = (*batch, m, m if full_matrices else k)
    vh_shape = (*batch, n if full_matrices else k, n)
    s_shape = (*batch, k)
    real = dtypes.to_real(a.dtype)
    return (TensorSpec(u_shape, a.dtype, a.device, _column_major(u_shape)),
            TensorSpec(s_shape, real, a.device, contiguous_strides(s_shape)),
            TensorSpec(vh_shape, a.dtype, a.device, _column_major(vh_shape)))


def _svdvals_meta(a):
    batch, m, n = _svd_input(a)
    shape = (*batch, min(m, n))
    return TensorSpec(shape, dtypes.to_real(a.dtype), a.device, contiguous_strides(shape))


def _prim(name, meta, impl, doc):
    return Symbol(name, kind=SymbolKind.PRIM, meta=meta, impl=impl, tags=frozenset({"library"}),
                  module="prims", doc=doc)


convolution = _prim(
    "convolution", _conv_meta, _conv_impl,
    "torch.convolution (conv or transposed conv, 1-3 spatial dims; a batched input, or an "
    "unbatched one as conv<n>d takes it), by torch's CPU kernel; eager's strides and errors.")
max_pool = _prim(
    "max_pool", _max_pool_meta, _max_pool_impl,
    "The max over windows (kernel_size, stride, padding, dilation, ceil_mode; 1-3 spatial dims): "
    "torch.max_pool<n>d's values.")
avg_pool = _prim(
    "avg_pool", _avg_pool_meta, _avg_pool_impl,
    "The mean over windows (kernel_size, stride, padding, ceil_mode, count_include_pad, "
    "divisor_override; 1-3 spatial dims): torch's avg_pool<n>d.")
adaptive_avg_pool = _prim(
    "adaptive_avg_pool", lambda input, output_size: _adaptive_meta("adaptive_avg_pool", input, output_size),
    lambda input, output_size: _ADAPTIVE_AVG[len(output_size)](input, list(output_size)),
    "The mean over adaptive windows giving output_size (1-3 spatial dims): "
    "torch's adaptive_avg_pool<n>d.")
adaptive_max_pool = _prim(
    "adaptive_max_pool", lambda input, output_size: _adaptive_meta("adaptive_max_pool", input, output_size),
    lambda input, output_size: _ADAPTIVE_MAX[len(output_size)](input, list(output_size)),
    "The max over adaptive windows giving output_size (1-3 spatial dims; values only): "
    "torch's adaptive_max_pool<n>d.")

svd = _prim(
    "svd", _svd_meta, lambda a, full_matrices: tuple(torch.linalg.svd(a, full_matrices=full_matrices)),
    "(U, S, Vh) of a batch of matrices: torch.linalg.svd (LAPACK), U and Vh column-major as "
    "eager's, S real and descending.")
svdvals = _prim(
    "svdvals", _svdvals_meta, torch.linalg.svdvals,
    "The singular values of a batch of matrices, descending: torch.linalg.svdvals (LAPACK).")

PRIMS = {s.name: s for s in (convolution, max_pool, avg_pool, adaptive_avg_pool, adaptive_max_pool,
                              grouped_mm, svd, svdvals)}


# --- derivatives: torch's backward kernels (prims.library_grads) ---------------------------------
@takes_wanted
def _convolution_vjp(g, y, input, weight, bias, stride, padding, dilation, transposed,
                     output_padding, groups, *, wanted):
    bias_shape = tuple(bias.shape) if bias is not None else ()
    mask = (wanted[0], wanted[1], bias is not None and wanted[2])
    grads = P.convolution_backward(g, input, weight, bias_shape, stride, padding, dilation,
                                   transposed, output_padding, groups, mask)
    return (*grads, None, None, None, None, None, None)


DERIVATIVES = {"convolution": _convolution_vjp,
               **{name: by_torch_autograd(name) for name in ("max_pool", "avg_pool", "adaptive_avg_pool",
                                                     "adaptive_max_pool", "grouped_mm", "svd",
                                                     "svdvals")}}
