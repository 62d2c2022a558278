"""The linear-algebra prim: matmul, one prim for dot, mv, mm, bmm and broadcast batched
matmul (a transposed operand, x @ w.T, is a ``prims.permute`` view).

Strict, as every prim: the operands share dtype and device (no promotion); the refs check
eager's per-op shapes and messages first (mm wants matrices, dot vectors). matmul runs as
torch.matmul (BLAS) in every executor, so its values are eager's own; its result is
contiguous, as eager's is for every operand layout.
"""
from __future__ import annotations

import math

import torch

from primtrace import dtypes
from primtrace.ir.proxy import TensorSpec
from primtrace.ir.strides import contiguous_strides
from primtrace.ir.symbol import Symbol, SymbolKind
from primtrace.prims.differentiation import P, conjugated
from primtrace.prims.meta import PrimContractError, is_tensor
from primtrace.prims.views import reshaped, sum_to


def _prim(name, meta, impl, tags, doc):
    return Symbol(name, kind=SymbolKind.PRIM, meta=meta, impl=impl, tags=frozenset(tags),
                  module="prims", doc=doc)


def matmul_shape(a_shape, b_shape) -> tuple:
    """torch.matmul's result shape; RuntimeError with eager's message on a mismatch."""
    if not a_shape or not b_shape:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are "
                           f"{len(a_shape)}D and {len(b_shape)}D")
    k_a = a_shape[-1]
    k_b = b_shape[0] if len(b_shape) == 1 else b_shape[-2]
    if len(a_shape) == 1 and len(b_shape) == 1:
        if k_a != k_b:
            raise RuntimeError(f"inconsistent tensor size, expected tensor [{k_a}] and src "
                               f"[{k_b}] to have the same number of elements, but got {k_a} "
                               f"and {k_b} elements respectively")
        return ()
    if k_a != k_b:
        rows = a_shape[-2] if len(a_shape) > 1 else 1
        cols = b_shape[-1] if len(b_shape) > 1 else 1
        lhs = f"{_numel(a_shape[:-1]) if len(a_shape) > 2 else rows}x{k_a}"
        rhs = f"{k_b}x{cols}"
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({lhs} and {rhs})")
    batch_a, batch_b = a_shape[:-2], b_shape[:-2]
    ndim = max(len(batch_a), len(batch_b))
    batch = []
    for i in range(-ndim, 0):
        x = batch_a[i] if -i <= len(batch_a) else 1
        y = batch_b[i] if -i <= len(batch_b) else 1
        if x is y or (type(y) is int and y == 1) or (type(x) is int and x == 1):
            batch.append(y if type(x) is int and x == 1 else x)   # no symbolic size read
            continue
        if x != y and 1 not in (x, y):
            raise RuntimeError(f"The size of tensor a ({x}) must match the size of tensor b "
                               f"({y}) at non-singleton dimension {ndim + i}")
        batch.append(y if x == 1 else x)
    rows = (a_shape[-2],) if len(a_shape) > 1 else ()
    cols = (b_shape[-1],) if len(b_shape) > 1 else ()
    return (*batch, *rows, *cols)


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _matmul_meta(a, b):
    if not (is_tensor(a) and is_tensor(b)):
        raise PrimContractError("prims.matmul: expected two tensors")
    if a.dtype != b.dtype:
        raise PrimContractError(f"prims.matmul: operands must share a dtype, got {a.dtype} "
                                f"and {b.dtype}")
    if a.device != b.device:
        raise PrimContractError(f"prims.matmul: operands must share a device, got {a.device} "
                                f"and {b.device}")
    runs = a.numel() and b.numel()  # eager's kernel does not run (nor refuse) on nothing
    if runs and (a.dtype is torch.bool or (a.device.type != "cpu" and not (
            a.dtype.is_floating_point or a.dtype.is_complex))):
        raise NotImplementedError(f"\"matmul\" not implemented for "
                                  f"'{dtypes.scalar_type_name(a.dtype)}'")
    shape = matmul_shape(tuple(a.shape), tuple(b.shape))
    return TensorSpec(shape, a.dtype, a.device, contiguous_strides(shape))


matmul = _prim("matmul", _matmul_meta, torch.matmul, ("linalg",),
               "torch.matmul of two tensors of one dtype: dot (1-d, 1-d), mv, mm, bmm and "
               "broadcast batched products; a contiguous result.")


PRIMS = {s.name: s for s in (matmul,)}
__all__ = list(PRIMS)


# --- derivatives -------------------------------------------------------------------------------
def _matrix_transpose(t):
    return P.permute(t, (*range(t.ndim - 2), t.ndim - 1, t.ndim - 2))


def _summed_product(x, y, shape):
    """x @ y summed down to `shape` over the batch dims an operand was broadcast along; in
    float16/bfloat16 the products and their sum in float32, rounded once (a sum of products
    rounded to the dtype each: 2 float16 ulps, 16 bfloat16 ulps off)."""
    product_shape = matmul_shape(tuple(x.shape), tuple(y.shape))
    if product_shape == tuple(shape) or x.dtype not in (torch.float16, torch.bfloat16):
        return sum_to(P.matmul(x, y), shape)
    wide = P.matmul(P.convert_element_type(x, torch.float32),
                    P.convert_element_type(y, torch.float32))
    return P.convert_element_type(sum_to(wide, shape), x.dtype)


def _rows(t):
    """`t` (batch..., m, k) as a (batch * m, k) view, or None where its strides do not allow."""
    shape, strides = tuple(t.shape), tuple(t.stride())
    for i in range(len(shape) - 2):
        if shape[i + 1] != 1 and strides[i] != strides[i + 1] * shape[i + 1]:
            return None
    return P.reshape_view(t, (_numel(shape[:-1]), shape[-1]))


def _matrix_grad(a_rows, g_rows, b):
    """a^H @ g, the grad of a matrix `b`; where `b` is column-major (a transposed weight:
    linear's x @ w^T) it is computed as (g^H @ a)^H, so it has b's layout and the weight's
    grad, its transpose, is row-major like the weight: autograd copies no transposed result."""
    if (b.ndim == 2 and b.shape[0] > 1 and b.shape[1] > 1
            and tuple(b.stride()) == (1, b.shape[0])):
        product = P.matmul(conjugated(_matrix_transpose(g_rows)), a_rows)
        return conjugated(_matrix_transpose(product))
    return P.matmul(conjugated(_matrix_transpose(a_rows)), g_rows)


def _matmul_vjp(g, y, a, b):
    """As matrices (a vector operand is a 1-row or 1-column matrix): g @ b^H and a^H @ g,
    summed down over the batch dims an operand was broadcast along. A matrix `b` under a
    batched `a` (a linear layer's weight) gets one matrix product over the rows of every
    batch, not a batched product summed after."""
    if b.ndim == 2 and a.ndim > 2:
        rows = math.prod(a.shape[:-1])
        a_rows = reshaped(a, (rows, a.shape[-1]))
        g_rows = reshaped(g, (rows, g.shape[-1]))
        grad_a = P.matmul(g, conjugated(_matrix_transpose(b)))
        return grad_a, _matrix_grad(a_rows, g_rows, b)
    a2 = a if a.ndim > 1 else P.unsqueeze(a, 0)
    b2 = b if b.ndim > 1 else P.unsqueeze(b, 1)
    g2 = g if a.ndim > 1 else P.unsqueeze(g, max(g.ndim - (b.ndim > 1), 0))
    g2 = g2 if b.ndim > 1 else P.unsqueeze(g2, g2.ndim)
    grad_a = _summed_product(g2, conjugated(_matrix_transpose(b2)), tuple(a2.shape))
    rows_a, rows_g = (a2, g2) if a2.ndim == 2 else (_rows(a2), _rows(g2))
    if b2.ndim == 2 and a2.ndim >= 2 and rows_a is not None and rows_g is not None:
        # a matrix against a batch (linear's weight): one product over every row of the
        # batch, summed in the kernel's accumulator
        grad_b = _matrix_grad(rows_a, rows_g, b2)
    else:
        grad_b = _summed_product(conjugated(_matrix_transpose(a2)), g2, tuple(b2.shape))
    if a.ndim == 1:
        grad_a = P.squeeze(grad_a, (0,))
    if b.ndim == 1:
        grad_b = P.squeeze(grad_b, (1,))
    return grad_a, grad_b


DERIVATIVES = {"matmul": _matmul_vjp}
