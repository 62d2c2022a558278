"""Attention as library prims that keep what the backward needs: torch's fused CPU attention.

In training, ``F.scaled_dot_product_attention`` runs as torch's own kernel (its fused
backward beats its prims'). Through an opaque call, the backward had to run the forward
again inside torch's autograd (``prims.library_vjp``): one more attention per step. Eager
saves the forward's output and the row log-sum-exp instead, and so do these prims:

- ``sdpa_flash(q, k, v, is_causal, scale, strides) -> (out, logsumexp)``:
  ``aten._scaled_dot_product_flash_attention_for_cpu``, the kernel eager's sdpa runs on CPU
  for these arguments (no mask, no dropout, no grouped heads), its output laid out with
  `strides` (what the trace assumed for the call's result: a copy where they differ, as
  for an opaque call; the backward kernel reads any layout);
- ``sdpa_flash_backward(g, q, k, v, out, logsumexp, is_causal, scale) -> (gq, gk, gv)``:
  its backward kernel, as eager's autograd calls it.

The forward checks when it runs that torch still picks that kernel (``torch._fused_sdp_choice``:
a ``torch.nn.attention.sdpa_kernel`` context can change it); where it does not, it runs
eager's sdpa, laid out as the metadata says, and returns a stride-0 log-sum-exp (never the
kernel's), so the backward follows the forward's kernel as eager's autograd does, whatever
context it runs in: the kernel's backward, or eager's sdpa differentiated again.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from primtrace.ir.proxy import TensorSpec
from primtrace.ir.strides import dense_strides
from primtrace.ir.symbol import Symbol, SymbolKind
from primtrace.prims.differentiation import NotDifferentiable, P
from primtrace.prims.meta import PrimContractError, is_tensor

__all__ = ["sdpa_flash", "sdpa_flash_backward"]

_FLASH = int(SDPBackend.FLASH_ATTENTION)
_ORDER = (0, 2, 1, 3)   # the kernel's results are (batch, length, heads, dim) in memory
_FLOATS = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def picks_flash(q, k, v, is_causal: bool, scale) -> bool:
    """Whether eager's sdpa runs the fused CPU kernel for these tensors (or tensors laid out
    like them): no mask, no dropout, no grouped heads."""
    return torch._fused_sdp_choice(q, k, v, None, 0.0, is_causal, scale=scale,
                                   enable_gqa=False) == _FLASH


_MATH = int(SDPBackend.MATH)
_SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
              "enable_gqa")


def sdpa_arguments(args: tuple, kwargs: dict) -> dict | None:
    """A scaled_dot_product_attention call's arguments by name; None for an unknown one."""
    given = {**dict(zip(_SDPA_ARGS, args)), **kwargs}
    return None if set(given) - set(_SDPA_ARGS) else given


def stand_ins(tensors) -> list:
    """Empty tensors laid out as `tensors` (proxies or tensors; None stays None), for asking
    torch which kernel it would pick."""
    return [None if t is None else torch.empty_strided(
        tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device=t.device) for t in tensors]


def runs_math(args: tuple, kwargs: dict) -> bool:
    """Whether eager's sdpa runs its math path (matmul, softmax and the mask as separate
    calls) for a call with these arguments (proxies or tensors): key and value heads
    broadcast over the query's (Falcon's multi-query attention with a mask, 2.3x slower
    than the same ops with the mask and softmax fused: 120 against 52 us at 4 x 64 x 32).
    False where unsure (symbolic sizes, traced numbers, odd arguments)."""
    given = sdpa_arguments(args, kwargs)
    if given is None:
        return False
    tensors = [given.get(n) for n in ("query", "key", "value", "attn_mask")]
    numbers = [given.get(n, d) for n, d in (("dropout_p", 0.0), ("is_causal", False),
                                            ("scale", None), ("enable_gqa", False))]
    if any(t is None for t in tensors[:3]) or not all(
            hasattr(t, "stride") and all(type(n) is int for n in t.shape)
            for t in tensors if t is not None) or not all(
            v is None or type(v) in (bool, int, float) for v in numbers):
        return False
    dropout_p, is_causal, scale, enable_gqa = numbers
    try:
        return torch._fused_sdp_choice(*stand_ins(tensors), float(dropout_p), bool(is_causal),
                                       scale=scale, enable_gqa=bool(enable_gqa)) == _MATH
    except (RuntimeError, TypeError, ValueError):
        return False


def _spec(shape, dtype, device, order) -> TensorSpec:
    shape = tuple(shape)
    return TensorSpec(shape, dtype, device, dense_strides(shape, order))


def _check(name, *tensors):
    if not all(is_tensor(t) and t.ndim == 4 and t.dtype is tensors[0].dtype
               and t.dtype in _FLOATS and t.device.type == "cpu" for t in tensors):
        raise PrimContractError(f"prims.{name}: 4-d CPU floating tensors of one dtype")


def _lse_dtype(dtype):
    return torch.float64 if dtype is torch.float64 else torch.float32


def _flash_meta(q, k, v, is_causal, scale, strides):
    _check("sdpa_flash", q, k, v)
    b, h, n, _ = q.shape
    out = TensorSpec((b, h, n, v.shape[3]), q.dtype, q.device, tuple(strides))
    lse = TensorSpec((b, h, n), _lse_dtype(q.dtype), q.device, dense_strides((b, h, n), (0, 2, 1)))
    return out, lse


def _laid_out(t, strides):
    """`t` with `strides` (a copy where a dim of more than one element differs)."""
    if all(n <= 1 or a == b for n, a, b in zip(t.shape, t.stride(), strides)):
        return t
    return torch.empty_strided(t.shape, strides, dtype=t.dtype, device=t.device).copy_(t)


def _flash_impl(q, k, v, is_causal, scale, strides):
    if picks_flash(q, k, v, is_causal, scale):
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, is_causal, scale=scale)
        return _laid_out(out, strides), lse
    out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)
    b, h, n, _ = q.shape   # the mark of another kernel (the fused kernel's has strides)
    lse = torch.full((1, 1, 1), float("nan"), dtype=_lse_dtype(q.dtype)).expand(b, h, n)
    return _laid_out(out, strides), lse


def _ran_fused_kernel(lse) -> bool:
    return any(lse.stride())


def _backward_meta(g, q, k, v, out, lse, is_causal, scale):
    _check("sdpa_flash_backward", g, q, k, v, out)
    return tuple(_spec(t.shape, t.dtype, t.device, _ORDER) for t in (q, k, v))


def _backward_impl(g, q, k, v, out, lse, is_causal, scale):
    if _ran_fused_kernel(lse):
        grads = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            g, q, k, v, out, lse, 0.0, is_causal, scale=scale)
    else:   # the forward ran eager's other kernel (math, on the CPU): its autograd, over
        # that forward again, whatever kernel a context would pick now
        with torch.enable_grad(), sdpa_kernel(SDPBackend.MATH):
            leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
            again = F.scaled_dot_product_attention(*leaves, is_causal=is_causal, scale=scale)
            grads = torch.autograd.grad(again, leaves, g)
    return tuple(_laid_out(t, dense_strides(tuple(t.shape), _ORDER)) for t in grads)


sdpa_flash = Symbol(
    "sdpa_flash", kind=SymbolKind.PRIM, meta=_flash_meta, impl=_flash_impl,
    tags=frozenset({"library"}), module="prims",
    doc="scaled_dot_product_attention(q, k, v, is_causal=, scale=) without mask or dropout "
        "by torch's fused CPU kernel, its output laid out with `strides`, with the row "
        "log-sum-exp its backward reads.")
sdpa_flash_backward = Symbol(
    "sdpa_flash_backward", kind=SymbolKind.PRIM, meta=_backward_meta, impl=_backward_impl,
    tags=frozenset({"library"}), module="prims",
    doc="The cotangents of sdpa_flash's q, k and v for the cotangent g of its output: torch's "
        "fused CPU attention backward, from the saved output and log-sum-exp.")


def _flash_vjp(g, y, q, k, v, is_causal, scale, strides):
    """The output's cotangent through torch's backward kernel. The log-sum-exp is made for
    that kernel alone (prims_stage puts this prim where a call's output was): nothing
    differentiates it, so its cotangent is always None."""
    g_out = g[0]
    if g[1] is not None:
        raise NotImplementedError("prims.sdpa_flash: a cotangent for the log-sum-exp")
    if g_out is None:
        return None, None, None, None, None, None
    gq, gk, gv = P.sdpa_flash_backward(g_out, q, k, v, y[0], y[1], is_causal, scale)
    return gq, gk, gv, None, None, None


PRIMS = {s.name: s for s in (sdpa_flash, sdpa_flash_backward)}
DERIVATIVES = {
    "sdpa_flash": _flash_vjp,
    "sdpa_flash_backward": NotDifferentiable(
        "a backward prim: differentiating it again (double backward) is not written"),
}
