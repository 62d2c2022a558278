"""torch.autocast while tracing: the casts autocast makes become ``convert_element_type`` prims.

Autocast casts the floating (not float64) tensor arguments of some ops at dispatch, by op:
the lower-precision list (matmul, linear, conv...) casts them to autocast's dtype, the fp32
list to float32, the promote list to the widest of them. The lists below are torch's
(aten/src/ATen/autocast_mode.cpp) at the level the tracer sees calls (torch functions,
Tensor methods, nn.functional). The tracer casts a user-level call's arguments the same way
(with the autocast state at that point of the code, so autocast regions inside the function
are honored), the trace runs with autocast off, and the backward differentiates the casts.
A call autocast would treat in a way not modelled here (a composite op that casts inside, a
call without a ref) raises :class:`AutocastFallback`: that call runs eagerly.
"""
from __future__ import annotations

import contextlib

import torch

from primtrace.ir.proxy import TensorProxy
from primtrace.tracer.errors import TracingError

DEVICES = ("cpu", "cuda")

_CONV = {"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
         "conv_tbc", "convolution", "_convolution"}

LOWER = {
    "cpu": _CONV | {"bmm", "mm", "linalg.vecdot", "baddbmm", "addmm", "addbmm", "linear",
                    "matmul", "prelu", "scaled_dot_product_attention"},
    "cuda": _CONV | {"prelu", "addmm", "addmv", "addr", "matmul", "mm", "mv", "linalg.vecdot",
                     "linear", "addbmm", "baddbmm", "bmm", "lstm_cell", "gru_cell",
                     "rnn_tanh_cell", "rnn_relu_cell", "scaled_dot_product_attention"},
}

_LOSSES = {"mse_loss", "cosine_embedding_loss", "nll_loss", "hinge_embedding_loss",
           "poisson_nll_loss", "smooth_l1_loss", "cross_entropy", "l1_loss", "huber_loss",
           "margin_ranking_loss", "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
           "ctc_loss", "kl_div", "multilabel_margin_loss", "binary_cross_entropy_with_logits"}

FP32 = {
    "cpu": _LOSSES | {"avg_pool3d", "binary_cross_entropy", "grid_sample", "polar", "prod",
                      "quantile", "nanquantile", "stft", "cdist", "trace", "view_as_complex",
                      "cholesky", "cholesky_inverse", "cholesky_solve", "inverse", "lu_solve",
                      "orgqr", "ormqr", "pinverse", "max_pool3d", "max_unpool2d", "max_unpool3d",
                      "adaptive_avg_pool3d", "geqrf", "qr", "svd", "triangular_solve",
                      "fractional_max_pool2d", "fractional_max_pool3d", "adaptive_max_pool3d"},
    "cuda": _LOSSES | {"acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2",
                       "log1p", "reciprocal", "rsqrt", "sinh", "tan", "pow", "softplus",
                       "layer_norm", "group_norm", "frobenius_norm", "nuclear_norm",
                       "cosine_similarity", "dist", "pdist", "cdist", "renorm", "logsumexp",
                       "grid_sample", "interpolate", "upsample", "prod", "softmax",
                       "log_softmax", "cumprod", "cumsum", "sum", "norm", "vector_norm",
                       "linalg.vector_norm", "linalg.matrix_norm", "binary_cross_entropy"},
}
#: CPU's float32 linalg and fft ops (checked against torch 2.13 on bfloat16 inputs)
FP32["cpu"] |= {f"linalg.{n}" for n in ("eig", "eigh", "eigvals", "eigvalsh", "inv", "inv_ex",
                                         "qr", "svd", "svdvals", "cholesky", "cholesky_ex",
                                         "lstsq")}
FP32["cpu"] |= {f"fft.{n}" for n in ("fft", "fft2", "fftn", "ifft", "ifft2", "ifftn", "rfft",
                                      "rfft2", "rfftn", "irfft", "irfft2", "irfftn", "hfft",
                                      "hfft2", "hfftn", "ihfft", "ihfft2", "ihfftn")}
#: ops whose autocast treatment was not checked: their calls run eagerly
UNSURE = {"linalg.householder_product", "linalg.tensorinv", "linalg.tensorsolve"}

PROMOTE = {
    "cpu": {"stack", "cat", "concat", "concatenate", "index_copy"},
    "cuda": {"addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sample",
             "index_put", "scatter_add", "tensordot", "stack", "cat", "concat", "concatenate",
             "index_copy"},
}

#: composite ops whose inner ops autocast casts (einsum -> bmm...): the cast happens inside
#: torch's decomposition, where the tracer (which sees the composite's ref) cannot follow
INSIDE = {"einsum", "tensordot", "bilinear", "chain_matmul", "linalg.multi_dot", "inner",
          "multi_head_attention_forward", "rnn_tanh", "rnn_relu", "lstm", "gru"}

#: names the tracer sees for ops of the lists: operators, and torch.mm, which equals the
#: builtins torch.dsmm and torch.spmm (primtrace's name table keeps the first, dsmm)
_OPERATORS = {"__matmul__": "matmul", "__rmatmul__": "matmul", "__imatmul__": "matmul",
              "dsmm": "mm", "spmm": "mm"}


def _name(target) -> str:
    """The op's name in the lists: linalg's and fft's with their namespace."""
    name = _OPERATORS.get(target.name, target.name)
    if target.namespace in ("linalg", "fft", "special"):
        return f"{target.namespace}.{name}"
    return name


class AutocastFallback(TracingError):
    """A call under torch.autocast whose casts primtrace does not model."""


def state():
    """What autocast does now (part of the cache key): None when it is off everywhere."""
    if not torch._C._is_any_autocast_enabled():
        return None
    return (tuple((torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in DEVICES),
            torch.is_autocast_cache_enabled())


@contextlib.contextmanager
def disabled():
    """Autocast off, as a trace with the casts in it runs (torch's own calls in it included)."""
    with contextlib.ExitStack() as stack:
        for d in DEVICES:
            if torch.is_autocast_enabled(d):
                stack.enter_context(torch.autocast(d, enabled=False))
        yield


def _tensors(obj, out):
    if isinstance(obj, TensorProxy):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            _tensors(x, out)
    elif isinstance(obj, dict):
        for x in obj.values():
            _tensors(x, out)
    return out


def _device_type(args, kwargs) -> str | None:
    for t in _tensors((args, kwargs), []):
        return torch.device(t.device).type
    return None


def refuse_opaque(target, args, kwargs) -> None:
    """A call without a ref under autocast. One of autocast's lists had its arguments cast
    (cast_args): torch's call on them, run with autocast off, is eager's. Any other may be a
    composite whose inner ops autocast casts, which is not known here."""
    device = _device_type(args, kwargs)
    if device not in DEVICES or not torch.is_autocast_enabled(device):
        return
    name = _name(target)
    if name in LOWER[device] or name in FP32[device] or name in PROMOTE[device]:
        return
    raise AutocastFallback(f"{target.namespace}.{target.name} has no primtrace ref: under "
                           f"torch.autocast its casts are not modelled")


def _eligible(t) -> bool:
    return isinstance(t, TensorProxy) and t.dtype.is_floating_point and t.dtype is not torch.float64


def cast_args(func, target, args, kwargs, cast):
    """(args, kwargs) cast as autocast casts `target`'s arguments at this point of the code;
    `cast(proxy, dtype)` records one cast. Raises AutocastFallback where not modelled."""
    device = _device_type(args, kwargs)
    if (device not in DEVICES or not torch.is_autocast_enabled(device) or target.inplace
            or kwargs.get("out") is not None):   # autocast leaves in-place and out= ops alone
        return args, kwargs
    name = _name(target)
    if name in INSIDE:
        raise AutocastFallback(f"{name} under torch.autocast: autocast casts inside its "
                               f"decomposition, which primtrace does not model")
    if name in UNSURE:
        raise AutocastFallback(f"{name} under torch.autocast: its casts are not modelled")
    if name in LOWER[device]:
        dtype = torch.get_autocast_dtype(device)
    elif name in FP32[device]:
        dtype = torch.float32
    elif name in PROMOTE[device]:
        dtype = torch.get_autocast_dtype(device)
        for t in _tensors((args, kwargs), []):   # the widest floating dtype among them
            if t.dtype is torch.float64 or (t.dtype is torch.float32 and dtype is not torch.float64):
                dtype = t.dtype
    else:
        return args, kwargs
    memo = {}

    def convert(x):
        if _eligible(x) and x.dtype is not dtype and torch.device(x.device).type == device:
            if id(x) not in memo:
                memo[id(x)] = cast(x, dtype)
            return memo[id(x)]
        if isinstance(x, (list, tuple)) and any(isinstance(y, TensorProxy) for y in x):
            return type(x)(convert(y) for y in x)
        return x

    return tuple(convert(a) for a in args), {k: convert(v) for k, v in kwargs.items()}
