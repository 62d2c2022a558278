"""The matrix-product refs of the torch namespace: matmul, mm, bmm, mv, dot, vdot, inner,
outer/ger, addmm, addmv, addbmm, baddbmm, addr, trace and cross.

Every product is one ``prims.matmul`` (torch's BLAS call) on operands that already agree;
what the refs spell out is each op's own argument checks with eager's messages (mm wants
matrices, dot vectors, bmm equal batch sizes: only matmul broadcasts). The add* forms are
``beta * input + alpha * product``: in float16/bfloat16 the product, the scaling and the sum
are computed in float32 and rounded once, as eager's CPU gemm does (its opmath), and beta 0
ignores input (NaN in input does not propagate). ``out=`` is declined (eager refuses another
dtype where the generic out= would cast): the tracer leaves such calls to torch.
"""
from __future__ import annotations

import math
import warnings

import torch

from primtrace import dtypes, prims
from primtrace.prims.linalg import matmul_shape
from primtrace.refs.core import broadcast, broadcast_shapes, exports, is_tensor, maybe_convert, ref
from primtrace.refs.reductions import wrap_dim
from primtrace.refs.creation import filled
from primtrace.refs.scalars import concrete, python_zero, scalar_to, type_name


def declines_out(*args, out=None, **kwargs) -> bool:
    return out is not None


def no_out(name, out):
    if out is not None:
        raise NotImplementedError(f"primtrace: {name}(out=) has no ref; torch runs it")


def require_tensors(name, **named):
    for position, (pname, value) in enumerate(named.items()):
        if not is_tensor(value):
            raise TypeError(f"{name}(): argument '{pname}' (position {position + 1}) must be "
                            f"Tensor, not {type_name(value)}")


def _short(dtype) -> str:
    return dtypes.scalar_type_name(dtype)


def _require_ndim(message, t, ndim):
    if t.ndim != ndim:
        raise RuntimeError(message)


def _not_bool(kernel, t, other=None):
    """eager's refusal of bool operands, made only when its kernel runs (no operand empty)."""
    if t.dtype is torch.bool and t.numel() and (other is None or other.numel()):
        raise NotImplementedError(f"\"{kernel}\" not implemented for 'Bool'")


def kernel_scalar(value, dtype):
    """A number as eager's kernel of `dtype` sees it (Scalar.to<T>()): bool and complex
    dtypes take it as is, others round or truncate (refs.scalars.scalar_to)."""
    if dtype is torch.bool:
        return bool(concrete(value))
    if dtype.is_complex:
        return complex(concrete(value))
    return scalar_to(value, dtype)


def transpose(t):
    """t with its last two dims swapped (a view); 0-d and 1-d tensors are returned as is."""
    if t.ndim < 2:
        return t
    return prims.permute(t, (*range(t.ndim - 2), t.ndim - 1, t.ndim - 2))


# --- products ------------------------------------------------------------------------------------
@ref(declines=declines_out)
def matmul(input, other, *, out=None):
    """The matrix product with torch.matmul's rules: dot, mv, mm and broadcast batched mm."""
    require_tensors("matmul", input=input, other=other)
    no_out("matmul", out)
    if input.ndim == 0 or other.ndim == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are "
                           f"{input.ndim}D and {other.ndim}D")
    if input.ndim == 1 and other.ndim == 1:
        return _dot("dot", input, other)
    if input.dtype != other.dtype and other.ndim >= 3 and input.ndim >= 2:
        return _bmm_without_kernel(input, other, matmul_shape(tuple(input.shape),
                                                              tuple(other.shape)))
    if input.dtype != other.dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: "
                           f"{dtypes.c_type_name(input.dtype)} != {dtypes.c_type_name(other.dtype)}")
    _not_bool("addmm_impl_cpu_", input, other)
    return prims.matmul(input, other)


def _dot(name, input, other):
    if input.ndim != 1 or other.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {input.ndim}D and {other.ndim}D tensors")
    if input.dtype != other.dtype:
        raise RuntimeError(f"{name} : expected both vectors to have same dtype, but found "
                           f"{_short(input.dtype)} and {_short(other.dtype)}")
    _not_bool(name, input, other)
    return prims.matmul(input, other)


@ref(declines=declines_out)
def dot(input, tensor, *, out=None):
    """The inner product of two vectors of one dtype."""
    require_tensors("dot", input=input, tensor=tensor)
    no_out("dot", out)
    return _dot("dot", input, tensor)


@ref(declines=declines_out)
def vdot(input, other, *, out=None):
    """The inner product with the first vector conjugated."""
    require_tensors("vdot", input=input, other=other)
    no_out("vdot", out)
    if input.ndim == 1 and other.ndim == 1 and input.dtype == other.dtype and input.dtype.is_complex:
        input = prims.conj(input)
    return _dot("vdot", input, other)


@ref(aliases=("dsmm",), declines=declines_out)  # torch.dsmm is torch.mm, and sorts first
def mm(input, mat2, *, out=None):
    """The product of two matrices of one dtype."""
    require_tensors("mm", input=input, mat2=mat2)
    no_out("mm", out)
    _require_ndim("self must be a matrix", input, 2)
    _require_ndim("mat2 must be a matrix", mat2, 2)
    return _mm("expected m1 and m2 to have the same dtype", input, mat2)


def _mm(message, a, b):
    if a.dtype != b.dtype:
        raise RuntimeError(f"{message}, but got: {dtypes.c_type_name(a.dtype)} != "
                           f"{dtypes.c_type_name(b.dtype)}")
    _not_bool("addmm_impl_cpu_", a, b)
    return prims.matmul(a, b)


def _check_bmm_shapes(a, b, names=("batch1", "batch2")):
    _require_ndim(f"{names[0]} must be a 3D tensor", a, 3)
    _require_ndim(f"{names[1]} must be a 3D tensor", b, 3)
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                           f"[{a.shape[0]}, {a.shape[2]}] but got: [{b.shape[0]}, {b.shape[1]}].")


def _check_bmm(a, b):
    _check_bmm_shapes(a, b)
    if a.dtype != b.dtype:
        _bmm_without_kernel(a, b, (a.shape[0], a.shape[1], b.shape[2]))
    _not_bool("bmm", a, b)


def _bmm_without_kernel(a, b, shape):
    """Eager's bmm (and matmul's batched path) of two dtypes: it runs no kernel, and checks
    no dtypes, for an empty result or an empty contraction, and returns zeros of b's dtype
    (the result is allocated like batch2); otherwise its kernel refuses the pair."""
    if a.shape[-1] and math.prod(shape):
        raise RuntimeError(f"expected scalar type {_short(a.dtype)} but found {_short(b.dtype)}")
    return filled(tuple(shape), python_zero(b.dtype), b.dtype, b.device)


@ref(declines=declines_out)
def bmm(input, mat2, *, out=None):
    """Batched matrix products of two 3-d tensors with equal batch sizes (no broadcasting)."""
    require_tensors("bmm", input=input, mat2=mat2)
    no_out("bmm", out)
    _check_bmm(input, mat2)
    if input.dtype != mat2.dtype:
        return _bmm_without_kernel(input, mat2, (input.shape[0], input.shape[1], mat2.shape[2]))
    return prims.matmul(input, mat2)


def _check_mv(input, mat, vec):
    if mat.ndim != 2 or vec.ndim != 1 or (input is not None and input.ndim > 1):
        raise RuntimeError(f"vector + matrix @ vector expected, got "
                           f"{1 if input is None else input.ndim}, {mat.ndim}, {vec.ndim}")
    if mat.shape[1] != vec.shape[0]:
        raise RuntimeError(f"size mismatch, got input ({mat.shape[0]}), mat "
                           f"({mat.shape[0]}x{mat.shape[1]}), vec ({vec.shape[0]})")
    first = mat.dtype if input is None else input.dtype
    if not first == mat.dtype == vec.dtype:
        raise RuntimeError(f"addmv input tensors must have the same dtype, but got "
                           f"{_short(first)}, {_short(mat.dtype)}, and {_short(vec.dtype)}")
    _not_bool("addmv_impl_cpu", mat, vec)


@ref(declines=declines_out)
def mv(input, vec, *, out=None):
    """A matrix times a vector, of one dtype."""
    require_tensors("mv", input=input, vec=vec)
    no_out("mv", out)
    _check_mv(None, input, vec)
    return prims.matmul(input, vec)


@ref(declines=declines_out)
def inner(input, other, *, out=None):
    """Sums of products over the last dims: shape input.shape[:-1] + other.shape[:-1]; a 0-d
    operand multiplies (with promotion, as eager's input * other)."""
    require_tensors("inner", input=input, other=other)
    no_out("inner", out)
    if input.ndim == 0 or other.ndim == 0:
        from primtrace.refs.arithmetic import mul
        return mul(input, other)
    if input.shape[-1] != other.shape[-1]:
        raise RuntimeError(f"inner() the last dimension must match on both input tensors but "
                           f"got shapes {list(input.shape)} and {list(other.shape)}")
    if input.dtype != other.dtype:
        raise RuntimeError("both inputs should have same dtype")
    _not_bool("dot", input, other)
    if other.ndim <= 2:
        return prims.matmul(input, transpose(other))
    # no reshape prim yet: the products broadcast over both leading shapes, then summed
    lead_a, lead_b = tuple(input.shape[:-1]), tuple(other.shape[:-1])
    shape = (*lead_a, *lead_b, input.shape[-1])
    n_a = len(lead_a)
    x = prims.broadcast_in_dim(input, shape, (*range(n_a), len(shape) - 1))
    y = prims.broadcast_in_dim(other, shape, tuple(range(n_a, len(shape))))
    computation = dtypes.opmath(input.dtype)
    x, y = maybe_convert(x, computation), maybe_convert(y, computation)
    return maybe_convert(prims.sum(prims.mul(x, y), (len(shape) - 1,)), input.dtype)


@ref(aliases=("ger",), declines=declines_out)
def outer(input, vec2, *, out=None):
    """input[i] * vec2[j] (eager's elementwise product, with its type promotion)."""
    require_tensors("outer", input=input, vec2=vec2)
    no_out("outer", out)
    for pname, t in (("self", input), ("vec2", vec2)):
        if t.ndim != 1:
            raise RuntimeError(f"outer: Expected 1-D argument {pname}, but got {t.ndim}-D")
    from primtrace.refs.arithmetic import mul
    shape = (input.shape[0], vec2.shape[0])
    return mul(prims.broadcast_in_dim(input, shape, (0,)),
               prims.broadcast_in_dim(vec2, shape, (1,)))


# --- beta * input + alpha * product --------------------------------------------------------------
def scaled_sum(input, product_of, operands, beta, alpha, shape, dtype):
    """beta * input + alpha * product_of(*operands) in `dtype`'s opmath, rounded once; beta 0
    ignores input. The product is computed in the opmath dtype too (float16/bfloat16 in
    float32), as eager's CPU gemm accumulates."""
    computation = dtypes.opmath(dtype)
    y = product_of(*maybe_convert(tuple(operands), computation))
    alpha_v, beta_v = kernel_scalar(alpha, dtype), kernel_scalar(beta, dtype)
    if concrete(alpha_v) != 1:
        y = prims.mul(y, alpha_v)
    if concrete(beta_v) != 0:
        x = broadcast(maybe_convert(input, computation), shape)
        if concrete(beta_v) != 1:
            x = prims.mul(x, beta_v)
        y = prims.add(x, y)
    return maybe_convert(y, dtype)


def _check_input_shape(input, shape):
    try:
        ok = broadcast_shapes(tuple(input.shape), shape) == tuple(shape)
    except RuntimeError:
        ok = False
    if not ok:
        raise RuntimeError(f"The expanded size of the tensor ({shape[-1]}) must match the "
                           f"existing size ({input.shape[-1] if input.ndim else 1}) at "
                           f"non-singleton dimension {len(shape) - 1}.  Target sizes: "
                           f"{list(shape)}.  Tensor sizes: {list(input.shape)}")


@ref(declines=declines_out)
def addmm(input, mat1, mat2, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * (mat1 @ mat2); input broadcasts to the product's shape."""
    require_tensors("addmm", input=input, mat1=mat1, mat2=mat2)
    no_out("addmm", out)
    _require_ndim(f"mat1 must be a matrix, got {mat1.ndim}-D tensor", mat1, 2)
    _require_ndim(f"mat2 must be a matrix, got {mat2.ndim}-D tensor", mat2, 2)
    if mat1.shape[1] != mat2.shape[0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({mat1.shape[0]}x"
                           f"{mat1.shape[1]} and {mat2.shape[0]}x{mat2.shape[1]})")
    if mat1.dtype != mat2.dtype:
        raise RuntimeError(f"mat1 and mat2 must have the same dtype, but got "
                           f"{_short(mat1.dtype)} and {_short(mat2.dtype)}")
    if input.dtype != mat2.dtype:
        raise RuntimeError(f"self and mat2 must have the same dtype, but got "
                           f"{_short(input.dtype)} and {_short(mat2.dtype)}")
    _not_bool("addmm_impl_cpu_", mat1, mat2)
    shape = (mat1.shape[0], mat2.shape[1])
    _check_input_shape(input, shape)
    return scaled_sum(input, prims.matmul, (mat1, mat2), beta, alpha, shape, mat1.dtype)


@ref(declines=declines_out)
def addmv(input, mat, vec, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * (mat @ vec)."""
    require_tensors("addmv", input=input, mat=mat, vec=vec)
    no_out("addmv", out)
    _check_mv(input, mat, vec)
    shape = (mat.shape[0],)
    _check_input_shape(input, shape)
    return scaled_sum(input, prims.matmul, (mat, vec), beta, alpha, shape, mat.dtype)


def _check_batched_input(input, a, b):
    if input.dtype != a.dtype:
        raise RuntimeError(f"expected scalar type {_short(a.dtype)} but found {_short(input.dtype)}")


@ref(declines=declines_out)
def baddbmm(input, batch1, batch2, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * bmm(batch1, batch2)."""
    require_tensors("baddbmm", input=input, batch1=batch1, batch2=batch2)
    no_out("baddbmm", out)
    _check_bmm(batch1, batch2)
    _check_batched_input(input, batch1, batch2)
    shape = (batch1.shape[0], batch1.shape[1], batch2.shape[2])
    _check_input_shape(input, shape)
    # batch1 and batch2 of two dtypes: only where eager runs no kernel (_bmm_without_kernel),
    # and its result, allocated like batch2, is beta * input in batch2's dtype
    return scaled_sum(input, prims.matmul, maybe_convert((batch1, batch2), batch2.dtype), beta,
                      alpha, shape, batch2.dtype)


def _batch_sum(a, b):
    return prims.sum(prims.matmul(a, b), (0,))


@ref(declines=declines_out)
def addbmm(input, batch1, batch2, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * (sum over the batch of batch1[i] @ batch2[i])."""
    require_tensors("addbmm", input=input, batch1=batch1, batch2=batch2)
    no_out("addbmm", out)
    _check_bmm_shapes(batch1, batch2)
    if batch1.shape[0]:  # eager's addmm of the batches folded: its dtype checks
        for name, a in (("self", input), ("mat1", batch1)):
            if a.dtype != batch2.dtype:
                raise RuntimeError(f"{name} and mat2 must have the same dtype, but got "
                                   f"{_short(a.dtype)} and {_short(batch2.dtype)}")
        _not_bool("bmm", batch1, batch2)
    shape = (batch1.shape[1], batch2.shape[2])
    _check_input_shape(input, shape)
    # no batch: beta * input in input's dtype, whatever the batches' dtypes (no kernel runs)
    return scaled_sum(input, _batch_sum, maybe_convert((batch1, batch2), input.dtype), beta,
                      alpha, shape, input.dtype)


@ref(declines=declines_out)
def addr(input, vec1, vec2, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * outer(vec1, vec2), elementwise with type promotion (logical
    and/or for bool)."""
    require_tensors("addr", input=input, vec1=vec1, vec2=vec2)
    no_out("addr", out)
    for pname, t in (("vec1", vec1), ("vec2", vec2)):
        if t.ndim != 1:
            raise RuntimeError(f"addr: Expected 1-D argument {pname}, but got {t.ndim}-D")
    from primtrace.refs.promotion import DEFAULT, elementwise_dtypes
    _, dtype = elementwise_dtypes(input, vec1, vec2, type_promotion_kind=DEFAULT)
    for pname, v in (("beta", beta), ("alpha", alpha)):
        if dtype is not torch.bool and type(concrete(v)) is bool:
            raise RuntimeError(f"Boolean {pname} only supported for Boolean results.")
        if not (dtype.is_floating_point or dtype.is_complex) and isinstance(concrete(v), float):
            raise RuntimeError(f"For integral input tensors, argument {pname} must not be a "
                               f"floating point number.")
    shape = (vec1.shape[0], vec2.shape[0])
    _check_input_shape(input, shape)
    computation = dtypes.opmath(dtype)
    x = broadcast(maybe_convert(input, computation), shape)
    u = prims.broadcast_in_dim(maybe_convert(vec1, computation), shape, (0,))
    v = prims.broadcast_in_dim(maybe_convert(vec2, computation), shape, (1,))
    if dtype is torch.bool:
        product = prims.bitwise_and(u, v) if concrete(alpha) else prims.full(
            shape, False, dtype=torch.bool, device=vec1.device)
        return prims.bitwise_or(x, product) if concrete(beta) else product
    y = prims.mul(u, v)
    if concrete(alpha) != 1:
        y = prims.mul(y, kernel_scalar(alpha, computation))
    if concrete(beta) != 0:
        y = prims.add(x if concrete(beta) == 1 else prims.mul(x, kernel_scalar(beta, computation)), y)
    return maybe_convert(y, dtype)


# --- trace, cross ----------------------------------------------------------------------------
@ref
def trace(input):
    """The sum of the main diagonal of a matrix (int64 for integers)."""
    require_tensors("trace", input=input)
    if input.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {input.ndim}")
    _not_bool("trace", input)
    from primtrace.refs.reductions import sum as sum_ref
    rows, cols = input.shape
    n = min(rows, cols)
    index = prims.iota(n, start=0, step=cols + 1, dtype=torch.int64, device=input.device)
    return sum_ref(prims.take(input, index))


def _rolled(t, dim, shift):
    """t with its size-3 dim rotated: component i of the result is component (i + shift) % 3."""
    index = prims.iota(3, start=shift, step=1, dtype=torch.int64, device=t.device)
    index = prims.where(prims.ge(index, 3), prims.sub(index, 3), index)
    return prims.index_select(t, dim, index)


def cross_product(name, input, other, dim):
    """a x b along `dim` (size 3) of two tensors of one dtype, broadcast: component i is
    a[i+1] * b[i+2] - a[i+2] * b[i+1], in the dtype (eager's CPU kernel)."""
    if input.ndim != other.ndim:
        raise RuntimeError(f"{name}: inputs must have the same number of dimensions.")
    shape = broadcast_shapes(tuple(input.shape), tuple(other.shape))
    d = wrap_dim(int(concrete(dim)), len(shape))
    if input.shape[d] != 3 or other.shape[d] != 3:
        raise RuntimeError(f"{name}: inputs dimension {dim} must have length 3. Got "
                           f"{input.shape[d]} and {other.shape[d]}")
    if input.dtype != other.dtype:
        raise RuntimeError(f"expected scalar type {_short(input.dtype)} but found "
                           f"{_short(other.dtype)}")
    _not_bool("cross", input)
    a, b = broadcast(input, shape), broadcast(other, shape)
    return prims.sub(prims.mul(_rolled(a, d, 1), _rolled(b, d, 2)),
                     prims.mul(_rolled(a, d, 2), _rolled(b, d, 1)))


@ref(declines=declines_out)
def cross(input, other, dim=None, *, out=None):
    """The cross product along `dim`; None: the first dim of size 3 (deprecated, warns)."""
    require_tensors("cross", input=input, other=other)
    no_out("cross", out)
    if dim is None:
        warnings.warn("Using torch.cross without specifying the dim arg is deprecated.\nPlease "
                      "either pass the dim explicitly or simply use torch.linalg.cross.\nThe "
                      "default value of dim will change to agree with that of linalg.cross in "
                      "a future release.", UserWarning, stacklevel=3)
        shape = broadcast_shapes(tuple(input.shape), tuple(other.shape)) \
            if input.ndim == other.ndim else tuple(input.shape)
        dim = next((i for i, s in enumerate(shape) if s == 3), None)
        if dim is None:
            raise RuntimeError("no dimension of size 3 in input")
    return cross_product("linalg.cross", input, other, dim)



# --- torch._grouped_mm (F.grouped_mm) -------------------------------------------------------------
def _grouped_mm_declines(mat_a, mat_b, offs=None, bias=None, out_dtype=None) -> bool:
    from primtrace.prims.library import grouped_mm_shape
    return not (is_tensor(mat_a) and is_tensor(mat_b)) or bias is not None or (
        offs is not None and not is_tensor(offs)) or grouped_mm_shape(
        tuple(mat_a.shape), tuple(mat_b.shape), None if offs is None else tuple(offs.shape)) is None


@ref(name="_grouped_mm", declines=_grouped_mm_declines)
def _grouped_mm_ref(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    """torch._grouped_mm, which F.grouped_mm calls (Mixtral's experts): prims.grouped_mm,
    torch's kernel, whose errors (dtypes, strides, offsets) it raises when the trace runs."""
    if _grouped_mm_declines(mat_a, mat_b, offs, bias, out_dtype):
        raise NotImplementedError("primtrace: this _grouped_mm call has no ref; torch runs it")
    return prims.grouped_mm(mat_a, mat_b, offs, None, out_dtype)


__all__ = exports(globals())
globals()["_grouped_mm"] = _grouped_mm_ref   # torch._grouped_mm is found by its own name
__all__.append("_grouped_mm")
