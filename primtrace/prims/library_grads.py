"""The backward library prims: what the VJP rules of the library prims (convolution, pooling,
grouped_mm, svd) call, since no prim form of their derivatives is sensible.

- ``convolution_backward``: torch's own ``aten.convolution_backward`` (input, weight and
  bias cotangents, as the mask asks), no forward recomputed;
- ``library_vjp(op, g, args, wrt, kwargs)``: the cotangents of the arguments `wrt`
  (positions or keywords) of the library prim named `op` (or of an opaque torch call), by
  torch's autograd over the op's torch implementation: it runs that forward again inside
  torch (one more pool, one more SVD) and then torch's backward kernels
  (max_pool2d_with_indices_backward, svd_backward...). A dedicated prim per op (saving
  pooling indices) can replace it where that matters.

Both give contiguous results (the impls copy torch's into that layout where they differ).
"""
from __future__ import annotations

import torch

from primtrace.ir.proxy import TensorSpec
from primtrace.ir.strides import contiguous_strides
from primtrace.ir.symbol import Symbol, SymbolKind
from primtrace.ir.tree import tree_flatten
from primtrace.prims.differentiation import NotDifferentiable, P
from primtrace.prims.meta import PrimContractError, is_tensor


def _like(t) -> TensorSpec:
    shape = tuple(t.shape)
    return TensorSpec(shape, t.dtype, t.device, contiguous_strides(shape))


def _conv_backward_meta(g, input, weight, bias_shape, stride, padding, dilation, transposed,
                        output_padding, groups, output_mask):
    if not (is_tensor(g) and is_tensor(input) and is_tensor(weight)) or len(output_mask) != 3:
        raise PrimContractError("prims.convolution_backward: tensors g, input, weight and a "
                                "mask of three bools")
    bias = None
    if output_mask[2]:
        bias = TensorSpec(tuple(bias_shape), g.dtype, g.device, contiguous_strides(bias_shape))
    return (_like(input) if output_mask[0] else None, _like(weight) if output_mask[1] else None,
            bias)


def _conv_backward_impl(g, input, weight, bias_shape, stride, padding, dilation, transposed,
                        output_padding, groups, output_mask):
    batched = input.ndim == weight.ndim
    if not batched:   # conv<n>d's unbatched input, as the forward prim takes it
        g, input = g.unsqueeze(0), input.unsqueeze(0)
    grads = torch.ops.aten.convolution_backward(
        g, input, weight, list(bias_shape) if output_mask[2] else None, list(stride),
        list(padding), list(dilation), transposed, list(output_padding), groups,
        list(output_mask))
    grad_input, grad_weight, grad_bias = (t.contiguous() if t is not None else None
                                          for t in grads)
    if grad_input is not None and not batched:
        grad_input = grad_input.squeeze(0)
    return grad_input, grad_weight, grad_bias


convolution_backward = Symbol(
    "convolution_backward", kind=SymbolKind.PRIM, meta=_conv_backward_meta,
    impl=_conv_backward_impl, tags=frozenset({"library"}), module="prims",
    doc="The cotangents of prims.convolution's input, weight and bias (as output_mask asks; "
        "None for the others) for the cotangent g of its result: aten.convolution_backward.")


def _argument(args, kwargs, key):
    """The argument `key` names: a position in args, a keyword, or (position, index) of an
    item of a list argument (torch.gru's weights)."""
    if type(key) is tuple:
        return args[key[0]][key[1]]
    return args[key] if type(key) is int else (kwargs or {})[key]


def _is_key(k) -> bool:
    return type(k) in (int, str) or (type(k) is tuple and len(k) == 2 and
                                     all(type(i) is int for i in k))


def _library_vjp_meta(op, g, args, wrt, kwargs=None):
    if not (type(op) is str or callable(op)) or not isinstance(args, tuple) or not all(
            _is_key(k) and is_tensor(_argument(args, kwargs, k)) for k in wrt):
        raise PrimContractError("prims.library_vjp: a prim name or a callable, its argument "
                                "tuple and the positions (or keywords, or (position, index) "
                                "in a list) of tensor arguments")
    return tuple(_like(_argument(args, kwargs, k)) for k in wrt)


def _library_vjp_impl(op, g, args, wrt, kwargs=None):
    if type(op) is str:   # the forward prim, by name
        op = P.ALL_PRIMS[op]
    run = getattr(op, "impl", op)   # an opaque call's symbol, or the torch function itself
    with torch.enable_grad():
        args, kwargs = list(args), dict(kwargs or {})
        lists = {k[0]: type(args[k[0]]) for k in wrt if type(k) is tuple}
        for i in lists:
            args[i] = list(args[i])
        for k in wrt:
            where, k = (args[k[0]], k[1]) if type(k) is tuple else (
                args if type(k) is int else kwargs, k)
            where[k] = where[k].detach().requires_grad_(True)
        for i, kind in lists.items():
            args[i] = kind(args[i])
        out = run(*args, **kwargs)
        pairs = [(o, c) for o, c in zip(tree_flatten(out), tree_flatten(g)) if c is not None]
        leaves = [_argument(args, kwargs, k) for k in wrt]
        grads = torch.autograd.grad([o for o, _ in pairs], leaves, [c for _, c in pairs],
                                    allow_unused=True)
    return tuple(torch.zeros_like(leaf, memory_format=torch.contiguous_format)
                 if grad is None else grad.contiguous() for leaf, grad in zip(leaves, grads))


library_vjp = Symbol(
    "library_vjp", kind=SymbolKind.PRIM, meta=_library_vjp_meta, impl=_library_vjp_impl,
    tags=frozenset({"library"}), module="prims",
    doc="The cotangents of the arguments `wrt` (positions, or keywords) of `op` (a library "
        "prim's name, or an opaque torch call's symbol or function) for the cotangent g of its result (a tuple for several "
        "results, None for none): torch's autograd over op's torch implementation, run again.")

PRIMS = {s.name: s for s in (convolution_backward, library_vjp)}
DERIVATIVES = dict.fromkeys(PRIMS, NotDifferentiable(
    "a backward prim: differentiating it again (double backward) is not written"))
__all__ = list(PRIMS)
