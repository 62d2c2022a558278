"""Refs with three operands or a selection: lerp, addcmul, addcdiv, clamp (and its one-bound
forms), where, masked_fill, and tril/triu (a selection by position).

Python numbers in these ops are not wrapped tensors as in add: eager converts them to the
op's dtype with c10's checked conversion, so an out-of-range number is an error
(``check_fits``), and some of the ops fix their result dtype rather than promote.
"""
from __future__ import annotations

import torch

from primtrace import dtypes, prims
from primtrace.prims.guards import item_may_overflow
from primtrace.ir.strides import contiguous_strides
from primtrace.refs.conversion import allocated_as_eager
from primtrace.refs.checks import check_fits, check_out_dtype, not_implemented, without_complex32
from primtrace.refs.core import (broadcast, broadcast_shapes, elementwise, exact_add, exact_sub,
                                 exports, is_number, is_tensor, maybe_convert, ref, to_tensor,
                                 with_gradient)
from primtrace.refs.creation import as_nodes, filled
from primtrace.refs.out import copy_to_out, write_where
from primtrace.refs.promotion import DEFAULT, NO_OPMATH, result_type
from primtrace.refs.scalars import python_zero


def _require_tensors(op_name, **named):
    for pname, value in named.items():
        if not is_tensor(value):
            raise TypeError(f"{op_name}(): argument '{pname}' must be Tensor, not {type(value).__name__}")


# --- lerp --------------------------------------------------------------------------------------
def _lerp_check(input, end, weight, out):
    if end.dtype != input.dtype:
        raise RuntimeError(f"expected dtype {dtypes.type_meta_name(input.dtype)} for `end` but got dtype "
                           f"{dtypes.type_meta_name(end.dtype)}")
    if is_tensor(weight) and weight.ndim > 0:  # no promotion at all: out= too must match
        if weight.dtype != input.dtype:
            raise RuntimeError(f"expected dtype {dtypes.type_meta_name(input.dtype)} for `weight` but "
                               f"got dtype {dtypes.type_meta_name(weight.dtype)}")
        check_out_dtype(out, input.dtype)
    if is_number(weight):
        if dtypes.is_integer(input.dtype):
            raise not_implemented("lerp_kernel_scalar", input.dtype)
        check_fits(weight, dtypes.opmath(input.dtype))


@elementwise(DEFAULT, ("input", "end", "weight"), scalars=("weight",), inplace=True,
             checks=[_lerp_check, without_complex32("lerp_kernel_tensor")])
def lerp(input, end, weight):
    """input + weight * (end - input), evaluated from the nearer end for accuracy:
    end - (end - input) * (1 - weight) once |weight| >= 0.5. A number weight keeps the
    dtype of input; only a 0-dim weight tensor takes part in promotion."""
    if dtypes.is_integer(input.dtype):
        raise not_implemented("lerp_kernel_tensor", input.dtype)
    w = weight if is_tensor(weight) else to_tensor(weight, input.dtype, input.device)
    diff = exact_sub(end, input)
    # from the start, input + w * diff; from the end, end - diff * (1 - w), written
    # end + (w - 1) * diff (the same values: negation is exact): one product, so its
    # gradient is never 0 * inf from the other branch (end or input infinite)
    near_start = prims.lt(prims.abs(w), 0.5)
    base = prims.where(near_start, input, end)
    t = prims.where(near_start, w, exact_sub(w, to_tensor(1, w.dtype, w.device)))
    return exact_add(base, prims.mul(t, diff))


# --- addcmul, addcdiv ----------------------------------------------------------------------------
def _addc_check(op_name):
    def check(tensor1, tensor2, value, computation, result):
        if not is_number(value):
            raise TypeError(f"{op_name}(): argument 'value' must be Number, not {type(value).__name__}")
        if op_name == "addcdiv" and dtypes.is_integer(tensor1.dtype) and dtypes.is_integer(tensor2.dtype):
            raise RuntimeError(
                "Integer division with addcdiv is no longer supported, and in a future  release "
                "addcdiv will perform a true division of tensor1 and tensor2. The historic "
                "addcdiv behavior can be implemented as (input + value * torch.trunc(tensor1 / "
                "tensor2)).to(input.dtype) for integer inputs and as (input + value * tensor1 / "
                "tensor2) for float inputs. The future addcdiv behavior is just the latter "
                "implementation: (input + value * tensor1 / tensor2), for all dtypes.")
        if result is torch.bool:
            raise not_implemented(f"{op_name}_cpu_out", result)
        check_fits(value, computation)
    return check


def _value(value, like):
    """`value` in the computation dtype (an integer computation truncates a float value)."""
    return to_tensor(value, like.dtype, like.device)


@elementwise(DEFAULT, ("input", "tensor1", "tensor2"), scalars=(), checks=[_addc_check("addcmul")],
             inplace=True)
def addcmul(input, tensor1, tensor2, *, value=1):
    """input + value * tensor1 * tensor2"""
    return exact_add(input, prims.mul(prims.mul(_value(value, input), tensor1), tensor2))


@elementwise(DEFAULT, ("input", "tensor1", "tensor2"), scalars=(), inplace=True,
             checks=[_addc_check("addcdiv"), without_complex32("addcdiv_cpu_out")])
def addcdiv(input, tensor1, tensor2, *, value=1):
    """input + value * tensor1 / tensor2 (integer tensor1 and tensor2 are refused)."""
    return exact_add(input, prims.div(prims.mul(_value(value, input), tensor1), tensor2))


# --- clamp ---------------------------------------------------------------------------------------
def _number_like(t):
    """A 0-dim tensor read as a number (eager's Scalar overloads) promotes as a number would."""
    cat = dtypes.category(t.dtype)
    return maybe_convert(t, {dtypes.Category.BOOL: torch.bool, dtypes.Category.INTEGER: torch.int64,
                             dtypes.Category.FLOATING: dtypes.default_float(),
                             dtypes.Category.COMPLEX: dtypes.default_complex()}[cat])


def _clamp_check(input, min=None, max=None, out=None, *, name="clamp"):
    """Eager's two overloads. With tensor bounds it promotes normally. With a number among
    the bounds (its Scalar overload, where a 0-dim tensor bound is read as a number) the
    numbers must convert to the result dtype without overflow, there is no bool kernel and
    out= must have the result dtype; clamp (not clamp_min/clamp_max) also keeps a float
    input's dtype, so a complex number there is an overflow, not a complex result."""
    _require_tensors(name, input=input)
    bounds = [b for b in (min, max) if b is not None]
    if not bounds:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    numbers = [b for b in bounds if is_number(b)]
    if numbers and any(is_tensor(b) and b.ndim > 0 for b in bounds):  # no overload matches
        raise TypeError(f"{name}() received an invalid combination of arguments - got a number "
                        "and a dimensioned tensor as bounds")
    if input.dtype.is_complex:
        raise NotImplementedError("clamp is not supported for complex types")
    if not numbers:
        return
    if name == "clamp" and input.dtype.is_floating_point:
        dtype = input.dtype
    else:
        dtype = result_type(input, *(b if is_number(b) else _number_like(b) for b in bounds))
    if dtype.is_complex:
        raise NotImplementedError("clamp is not supported for complex types")
    for b in numbers:
        check_fits(b, dtype)
    if dtype is torch.bool:
        raise not_implemented(f"{name}_scalar_cpu", dtype)
    check_out_dtype(out, dtype)


def _bound(b, like):
    """A number bound as a 0-dim tensor (maximum/minimum take tensors only)."""
    return b if is_tensor(b) else to_tensor(b, like.dtype, like.device)


def _clamp_min_check(input, min, out):
    _clamp_check(input, min, None, out, name="clamp_min")


def _clamp_max_check(input, max, out):
    _clamp_check(input, None, max, out, name="clamp_max")


def _clamped(value, input, min, max):
    """`value`, input clamped to [min, max] (None: no bound), differentiated as eager's clamp
    (clamp_backward_min_max): input gets the gradient where min <= input <= max (the bounds
    included, NaN not), a tensor bound where it is the result (min where input < min < max,
    max where input > max or max < min); a number bound gets none."""
    def pieces():
        x = input
        inside = [m for m in (None if min is None else prims.ge(x, min),
                              None if max is None else prims.le(x, max)) if m is not None]
        found = [(inside[0] if len(inside) == 1 else prims.bitwise_and(*inside), x)]
        if is_tensor(min):
            below = prims.lt(x, min)
            found.append((below if max is None else prims.bitwise_and(below, prims.lt(min, max)),
                          min))
        if is_tensor(max):
            above = prims.gt(x, max)
            found.append((above if min is None else prims.bitwise_or(above, prims.lt(max, min)),
                          max))
        return found
    return with_gradient(value, pieces)


@elementwise(DEFAULT, ("input", "min"), checks=[_clamp_min_check], inplace=True)
def clamp_min(input, min):
    """max(input, min), nan-propagating."""
    return _clamped(prims.maximum(input, _bound(min, input)), input, min, None)


@elementwise(DEFAULT, ("input", "max"), checks=[_clamp_max_check], inplace=True)
def clamp_max(input, max):
    """min(input, max), nan-propagating."""
    return _clamped(prims.minimum(input, _bound(max, input)), input, None, max)


@elementwise(DEFAULT, ("input", "min", "max"), name="clamp")
def _clamp(input, min, max):
    """clamp with both bounds (clamp's checks made)."""
    if input.dtype is torch.bool:
        raise not_implemented("clamp_cpu", input.dtype)
    value = prims.minimum(prims.maximum(input, _bound(min, input)), _bound(max, input))
    return _clamped(value, input, min, max)


@ref(inplace=True, aliases=("clip",), promote=_clamp.promote,
     type_promotion_kind=_clamp.type_promotion_kind)
def clamp(input, min=None, max=None, *, out=None):
    """min(max(input, min), max): nan anywhere gives nan, and min > max gives max (there
    is a bool kernel for one bound, not for two)."""
    _clamp_check(input, min, max, out)
    if any(is_number(b) for b in (min, max)):
        min, max = (_number_like(b) if is_tensor(b) else b for b in (min, max))
    if max is None:  # one bound: clamp_min or clamp_max (None cannot be promoted)
        return clamp_min(input, min, out=out)
    if min is None:
        return clamp_max(input, max, out=out)
    return _clamp.fn(input, min, max, out=out)  # its steps inline: one node, as clamp is one op


# --- where, masked_fill ----------------------------------------------------------------------------
def _where_check(condition, input, other, out):
    _require_tensors("where", condition=condition)
    if out is not None:  # out= exists only for tensors, and takes no cast
        _require_tensors("where", input=input, other=other)
        check_out_dtype(out, result_type(input, other))
    if condition.dtype is not torch.bool:
        raise RuntimeError("where expected condition to be a boolean tensor, but got a tensor with "
                           f"dtype {dtypes.scalar_type_name(condition.dtype)}")


@elementwise(NO_OPMATH, ("input", "other"), scalars="all", checks=[_where_check])
def where(condition, input, other):
    """condition ? input : other. Numbers are converted to the result dtype as torch.full
    does: checked for overflow, except into float16/bfloat16 (which round to inf)."""
    dtype = (input if is_tensor(input) else other).dtype
    for x in (input, other):
        if is_number(x) and dtype not in (torch.float16, torch.bfloat16):
            check_fits(x, dtype)
    shape = broadcast_shapes(*(tuple(x.shape) for x in (condition, input, other) if is_tensor(x)))
    return prims.where(broadcast(condition, shape), broadcast(input, shape), broadcast(other, shape))


def _masked_fill_check(input, mask, value):
    _require_tensors("masked_fill", input=input, mask=mask)
    if mask.dtype is not torch.bool:
        raise RuntimeError("masked_fill_ only supports boolean masks, but got mask with dtype "
                           f"{dtypes.type_meta_name(mask.dtype)}")
    if is_tensor(value) and value.ndim > 0:
        raise RuntimeError("masked_fill_ only supports a 0-dimensional value tensor, but got tensor "
                           f"with {value.ndim} dimension(s).")
    if is_number(value):
        check_fits(value, input.dtype)
    elif not is_tensor(value):
        raise TypeError(f"masked_fill(): argument 'value' must be Number, not {type(value).__name__}")
    elif item_may_overflow(value.dtype, input.dtype):  # eager converts value.item(), checked
        prims.check_item_fits(value, input.dtype)


@ref
def masked_fill(input, mask, value):
    """`value` where mask is True, else input; the result keeps input's dtype (no promotion)
    and has the broadcast shape of input and mask, contiguous (eager fills a contiguous
    clone)."""
    _masked_fill_check(input, mask, value)
    shape = broadcast_shapes(tuple(input.shape), tuple(mask.shape))
    fill = maybe_convert(value, input.dtype) if is_tensor(value) else to_tensor(
        value, input.dtype, input.device)
    filled_in = prims.where(broadcast(mask, shape), fill, broadcast(input, shape))
    return allocated_as_eager(filled_in, torch.contiguous_format)


@ref
def masked_fill_(input, mask, value):
    """masked_fill written into input: only the masked elements are written (so an expanded
    input is written as eager writes it, see ``write_where``)."""
    _masked_fill_check(input, mask, value)
    shape = broadcast_shapes(tuple(input.shape), tuple(mask.shape))
    if shape != tuple(input.shape):
        raise RuntimeError(f"output with shape {list(input.shape)} doesn't match the broadcast "
                           f"shape {list(shape)}")
    fill = maybe_convert(value, input.dtype) if is_tensor(value) else to_tensor(
        value, input.dtype, input.device)
    return write_where(input, broadcast(mask, shape), fill, "masked_fill_", (input, mask))


# --- tril, triu: where by position -------------------------------------------------------------
def _triangle(name, lower):
    def zeroed(input, diagonal, out=None):
        """The checks, then the bool tensor of input's shape that is True where it is zeroed."""
        _require_tensors(name, input=input)
        if input.ndim < 2:
            raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions")
        if getattr(diagonal, "python_type", type(diagonal)) is not int:
            raise TypeError(f"{name}(): argument 'diagonal' (position 2) must be int, not "
                            f"{type(diagonal).__name__}")
        if out is not None and out.dtype != input.dtype:
            raise RuntimeError(f"Expected out tensor to have dtype {dtypes.type_meta_name(input.dtype)}, "
                               f"but got {dtypes.type_meta_name(out.dtype)} instead")
        shape, (rows, cols), device = tuple(input.shape), input.shape[-2:], input.device
        with as_nodes():  # made on every call, not trace-time constants
            row = prims.broadcast_in_dim(prims.iota(rows, start=0, step=1, dtype=torch.int64,
                                                    device=device), (rows, cols), (0,))
            col = prims.broadcast_in_dim(prims.iota(cols, start=0, step=1, dtype=torch.int64,
                                                    device=device), (rows, cols), (1,))
        offset = prims.sub(col, row)
        zero = prims.gt(offset, diagonal) if lower else prims.lt(offset, diagonal)
        return prims.broadcast_in_dim(zero, shape, (len(shape) - 2, len(shape) - 1))

    def body(input, diagonal=0, *, out=None):
        mask = zeroed(input, diagonal, out)
        shape, device, zero = tuple(input.shape), input.device, python_zero(input.dtype)
        result = prims.where(mask, zero, input)
        if out is not None:
            return copy_to_out(out, result, (input,))
        if tuple(result.stride()) != contiguous_strides(shape):  # eager's result is contiguous
            result = prims.copy_to(filled(shape, zero, input.dtype, device), result)
        return result
    body.__name__ = body.__qualname__ = name
    body.__doc__ = (f"input with the elements {'above' if lower else 'below'} the diagonal-th "
                    f"diagonal of its last two dimensions set to 0 (a contiguous result).")

    def body_(input, diagonal=0):
        return write_where(input, zeroed(input, diagonal), python_zero(input.dtype), name + "_",
                           (input,))
    body_.__name__ = body_.__qualname__ = name + "_"
    body_.__doc__ = (f"{name} written into input: only the zeroed elements are written (an "
                     "expanded input as eager writes it).")
    return ref(body), ref(body_)


(tril, tril_), (triu, triu_) = _triangle("tril", lower=True), _triangle("triu", lower=False)

__all__ = exports(globals())
